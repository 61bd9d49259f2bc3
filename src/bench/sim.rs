//! Simulated executors: many registered executors on one thread of one process, to load a
//! driver as a large cluster would, without a process (and its threads) per executor.
//!
//! Each is a plain TCP connection to the driver speaking the wire protocol: it registers
//! with the cores it is given, answers every `LaunchTask` at once with a `FINISHED`
//! status and an empty result (the tasks of a `LaunchTasks` with one `StatusUpdates`, as a
//! runner does for quick tasks), and heartbeats at its interval (the heartbeats of all of
//! them spread evenly over the interval, as executors started at different times are).
//! It measures, per executor, the time from a status it sent to the next launch it got:
//! the driver's turnaround, the part of a task's launch latency the driver decides.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use flint::bench::sim::{SimConfig, SimExecutors};
//!
//! # let driver = "127.0.0.1:7077".parse().unwrap();
//! let stop = AtomicBool::new(false);
//! let config = SimConfig { driver, executors: 1_000, cores: 1, heartbeat_interval: Duration::from_secs(1) };
//! let report = SimExecutors::connect(&config).unwrap().run(&stop).unwrap();
//! println!("{} launches answered", report.launches);
//! ```

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use flint_wire::{
    ArchivedMessage, ArchivedRoute, BlockManagerId, Encoder, FrameDecoder, Heartbeat, Message,
    RegisterExecutor, Route, StatusUpdate, TaskMetrics, TaskOutcome, TaskState, DRIVER_ENDPOINT,
    HEARTBEAT_ENDPOINT,
};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The driver's RPC address.
    pub driver: SocketAddr,
    /// How many executors.
    pub executors: usize,
    /// Cores each registers with.
    pub cores: u32,
    /// How often each heartbeats (`executor.heartbeatInterval`).
    pub heartbeat_interval: Duration,
}

/// What the simulated executors saw.
#[derive(Debug)]
pub struct SimReport {
    /// Executors the driver registered.
    pub registered: usize,
    /// Launches answered.
    pub launches: u64,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// From a status sent to the launch into the slot it freed (the next launch on the
    /// same executor, statuses and launches paired in order), in nanoseconds.
    pub turnaround_ns: Histogram<u64>,
}

/// The largest frame a simulated executor takes (launches of noop tasks are small).
const MAX_PAYLOAD: usize = 1 << 20;

/// One simulated executor's connection.
struct SimExecutor {
    id: String,
    stream: TcpStream,
    decoder: FrameDecoder,
    out: BytesMut,
    registered: bool,
    closed: bool,
    /// When it sent each status no launch has followed yet, oldest first: the driver
    /// launches into the slot a status frees, in the order the statuses came.
    statuses_sent: VecDeque<Instant>,
    /// Launches since the last reset: the first `cores` of them fill free slots and
    /// follow no status.
    launches: u64,
    cores: u32,
    next_request_id: u64,
}

/// Simulated executors connected to a driver, not yet running.
pub struct SimExecutors {
    poll: Poll,
    executors: Vec<SimExecutor>,
    encoder: Encoder,
    interval: Duration,
    /// When each executor heartbeats next, earliest first: all share one interval, so
    /// a heartbeat sent goes to the back and the queue stays in order.
    heartbeats: VecDeque<(Instant, usize)>,
    /// The updates of the status frame being written (kept for its capacity).
    updates: Vec<StatusUpdate>,
}

impl SimExecutors {
    /// Connects `config.executors` executors to the driver and queues their
    /// registrations (sent once [`SimExecutors::run`] runs).
    pub fn connect(config: &SimConfig) -> io::Result<SimExecutors> {
        let poll = Poll::new()?;
        let mut encoder = Encoder::new(MAX_PAYLOAD);
        let start = Instant::now();
        let mut executors = Vec::with_capacity(config.executors);
        let mut heartbeats = VecDeque::with_capacity(config.executors);
        for index in 0..config.executors {
            let std_stream = std::net::TcpStream::connect(config.driver)?;
            std_stream.set_nodelay(true)?;
            std_stream.set_nonblocking(true)?;
            let mut stream = TcpStream::from_std(std_stream);
            poll.registry().register(
                &mut stream,
                Token(index),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            let id = format!("sim-{index}");
            let mut out = BytesMut::with_capacity(4096);
            let registration = Message::RegisterExecutor(RegisterExecutor {
                executor_id: id.as_str().into(),
                executor_address: "127.0.0.1:1".into(),
                endpoint_name: "Executor".into(),
                hostname: "127.0.0.1".into(),
                cores: config.cores,
                log_urls: vec![],
            });
            let route = Route::Ask {
                request_id: 1,
                endpoint: DRIVER_ENDPOINT.into(),
            };
            encoder
                .encode(&route, &registration, &mut out)
                .map_err(io::Error::other)?;
            // Spread evenly over one interval.
            let offset = config
                .heartbeat_interval
                .mul_f64(index as f64 / config.executors.max(1) as f64);
            heartbeats.push_back((start + config.heartbeat_interval + offset, index));
            executors.push(SimExecutor {
                id,
                stream,
                decoder: FrameDecoder::new(MAX_PAYLOAD),
                out,
                registered: false,
                closed: false,
                statuses_sent: VecDeque::with_capacity(config.cores as usize),
                launches: 0,
                cores: config.cores,
                next_request_id: 2,
            });
        }
        Ok(SimExecutors {
            poll,
            executors,
            encoder,
            interval: config.heartbeat_interval,
            heartbeats,
            updates: Vec::new(),
        })
    }

    /// Runs until `stop` is set or every connection has closed.
    pub fn run(self, stop: &AtomicBool) -> io::Result<SimReport> {
        self.run_with_resets(stop, &AtomicU64::new(0), || {})
    }

    /// As [`SimExecutors::run`]; whenever `resets` changes, forgets the figures so far
    /// (between jobs, when no task is out, so that the next job's first launches are
    /// paired with no status of the last), then calls `on_reset`.
    pub fn run_with_resets(
        mut self,
        stop: &AtomicBool,
        resets: &AtomicU64,
        mut on_reset: impl FnMut(),
    ) -> io::Result<SimReport> {
        let mut seen_resets = resets.load(Ordering::Acquire);
        let mut report = SimReport {
            registered: 0,
            launches: 0,
            heartbeats: 0,
            turnaround_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("valid histogram bounds"),
        };
        let mut events = Events::with_capacity(1024);
        let mut buf = vec![0u8; 64 << 10];
        while !stop.load(Ordering::Relaxed) {
            if self.executors.iter().all(|e| e.closed) {
                break;
            }
            let now_resets = resets.load(Ordering::Acquire);
            if now_resets != seen_resets {
                seen_resets = now_resets;
                report.launches = 0;
                report.turnaround_ns.reset();
                for executor in &mut self.executors {
                    executor.statuses_sent.clear();
                    executor.launches = 0;
                }
                on_reset();
            }
            let now = Instant::now();
            let timeout = self
                .heartbeats
                .front()
                .map_or(Duration::from_millis(100), |(at, _)| {
                    at.saturating_duration_since(now)
                })
                .min(Duration::from_millis(100));
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                let index = event.token().0;
                if event.is_readable() || event.is_read_closed() {
                    self.read(index, &mut buf, &mut report);
                }
                self.write(index);
            }
            let now = Instant::now();
            while let Some(&(at, index)) = self.heartbeats.front() {
                if at > now {
                    break;
                }
                self.heartbeats.pop_front();
                self.heartbeats.push_back((at + self.interval, index));
                let executor = &mut self.executors[index];
                if !executor.registered || executor.closed {
                    continue;
                }
                let heartbeat = Message::Heartbeat(Heartbeat {
                    executor_id: executor.id.as_str().into(),
                    accum_updates: vec![],
                    block_manager_id: BlockManagerId {
                        executor_id: executor.id.as_str().into(),
                        host: "127.0.0.1".into(),
                        port: 1,
                    },
                });
                let route = Route::Ask {
                    request_id: executor.next_request_id,
                    endpoint: HEARTBEAT_ENDPOINT.into(),
                };
                executor.next_request_id += 1;
                if self
                    .encoder
                    .encode(&route, &heartbeat, &mut executor.out)
                    .is_ok()
                {
                    report.heartbeats += 1;
                }
                self.write(index);
            }
        }
        Ok(report)
    }

    /// Reads what the driver sent and answers it.
    fn read(&mut self, index: usize, buf: &mut [u8], report: &mut SimReport) {
        let executor = &mut self.executors[index];
        if executor.closed {
            return;
        }
        loop {
            match executor.stream.read(buf) {
                Ok(0) => {
                    executor.closed = true;
                    return;
                }
                Ok(n) => {
                    if executor.decoder.feed(&buf[..n]).is_err() {
                        executor.closed = true;
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    executor.closed = true;
                    return;
                }
            }
        }
        loop {
            let frame = match executor.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => {
                    executor.closed = true;
                    return;
                }
            };
            let Ok(envelope) = frame.envelope() else {
                executor.closed = true;
                return;
            };
            match (&envelope.route, &envelope.message) {
                (ArchivedRoute::Reply { .. }, ArchivedMessage::RegisteredExecutor) => {
                    executor.registered = true;
                    report.registered += 1;
                }
                (ArchivedRoute::Reply { .. }, ArchivedMessage::RegisterExecutorFailed { .. }) => {
                    executor.closed = true;
                }
                (
                    _,
                    launch @ (ArchivedMessage::LaunchTask(_) | ArchivedMessage::LaunchTasks { .. }),
                ) => {
                    let task_ids = launch
                        .launched_tasks()
                        .iter()
                        .map(|task| task.task_id.to_native());
                    answer(
                        executor,
                        &mut self.encoder,
                        &mut self.updates,
                        task_ids,
                        report,
                    );
                }
                (_, ArchivedMessage::StopExecutor | ArchivedMessage::Shutdown) => {
                    executor.closed = true;
                    return;
                }
                _ => {}
            }
        }
    }

    /// Writes what is queued, as far as the socket takes it.
    fn write(&mut self, index: usize) {
        let executor = &mut self.executors[index];
        while !executor.out.is_empty() && !executor.closed {
            match executor.stream.write(&executor.out) {
                Ok(0) => executor.closed = true,
                Ok(n) => executor.out.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => executor.closed = true,
            }
        }
    }
}

/// Answers launches of the tasks `task_ids` at once, finished, in one frame (a
/// `StatusUpdates` for several, as a runner sends the updates of quick tasks), and
/// records the driver's turnaround of each.
fn answer(
    executor: &mut SimExecutor,
    encoder: &mut Encoder,
    updates: &mut Vec<StatusUpdate>,
    task_ids: impl IntoIterator<Item = u64>,
    report: &mut SimReport,
) {
    let now = Instant::now();
    for task_id in task_ids {
        executor.launches += 1;
        let fills_a_freed_slot = executor.launches > u64::from(executor.cores);
        let freed_by = fills_a_freed_slot
            .then(|| executor.statuses_sent.pop_front())
            .flatten();
        if let Some(sent) = freed_by {
            let _ = report
                .turnaround_ns
                .record((now - sent).as_nanos().max(1) as u64);
        }
        report.launches += 1;
        updates.push(StatusUpdate {
            executor_id: executor.id.as_str().into(),
            task_id,
            state: TaskState::Finished,
            outcome: TaskOutcome::Direct {
                value: Bytes::new(),
                metrics: TaskMetrics::default(),
                accumulators: vec![],
            },
        });
        executor.statuses_sent.push_back(now);
    }
    let Some(message) = Message::take_status_updates(updates) else {
        return;
    };
    let route = Route::OneWay {
        endpoint: DRIVER_ENDPOINT.into(),
    };
    let _ = encoder.encode(&route, &message, &mut executor.out);
    message.put_back_status_updates(updates);
    updates.clear();
}
