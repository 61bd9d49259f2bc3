//! flint's measurement harness, not its API (hidden from the docs): what `flint bench`,
//! the criterion benches and a few end-to-end tests share.
//!
//! Task-launch figures beside their floors, as `flint bench` prints them and the
//! `task_launch` criterion bench measures them:
//!
//! - the floor round trip: a blocking std::net TCP ping-pong on 127.0.0.1 of a
//!   LaunchTask-sized frame one way and a StatusUpdate-sized frame back (TCP_NODELAY),
//!   measured twice, with both threads free to run anywhere and with both pinned to one
//!   CPU; the floor is the faster of the two ([`BlockingFloor`]);
//! - beside it the same ping-pong with both ends busy-polling (non-blocking reads,
//!   yielding the CPU between them): the fastest round trip this machine gives two
//!   threads, with no wake-up in it. flint's threads busy-poll briefly before they sleep
//!   (`rpc.io.busyPoll`, `executor.busyPoll`), so its figures are shown against both;
//! - one-task job latency: a task set of one noop task submitted to a driver with one
//!   executor process, from submission to its result recorded at the driver, and its
//!   ratio to the floor;
//! - throughput: a 100,000-task noop job on 2 executor processes of 1 core, without
//!   pipelining (`executor.taskPrefetch=0`, a task launched only on a free core) and
//!   with it, beside the free-core floor: executor cores divided by the floor round
//!   trip (the most a scheduler can launch when a task goes only to a free core);
//! - beside the free-core floor, the same schedule run over raw TCP ([`raw_strict`]): one
//!   driver thread polling a socket per executor, which sends the next LaunchTask-sized
//!   frame to an executor as soon as its StatusUpdate-sized answer is in, and executor
//!   threads answering, all busy-polling as flint's threads do. It is what the kernel's
//!   loopback allows that schedule here, with no scheduler in it: two executors on two
//!   CPUs shared with the driver cannot run their round trips side by side as the
//!   free-core floor assumes;
//! - beneath both, the CPU the kernel spends on one task's two loopback transfers
//!   ([`loopback_cost`]): one thread writes a LaunchTask-sized frame into one end of a
//!   connection and reads it at the other, then the StatusUpdate-sized frame back, with
//!   no other thread and no wait. With every CPU of the machine doing nothing but that
//!   work, no schedule without pipelining could launch more, whatever its scheduler;
//! - what flint adds to a task, free of placement: the strict schedule with a driver
//!   and one executor process all on one CPU, and the raw TCP schedule on that CPU
//!   ([`one_cpu_strict`]), in microseconds of the CPU per task. With one CPU there is
//!   no idle time and no placement to vary from run to run; their difference is
//!   flint's own work, system calls and switches per task.
//!
//! Executors are real `flint executor` processes started by a local cluster manager.
//!
//! Beside them, the transport's own figures ([`transport`]): an ask round
//! trip against the raw ping-pong of the same bytes, and one-way messages per second.
//! Jobs of stages ([`jobs`]): a two-stage tiny job against a one-task job, a hash shuffle
//! against raw TCP's pipelined throughput between two processes ([`stream`]), a word
//! count.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flint_rpc::Conf;
use flint_scheduler::{Driver, TaskSet};
use flint_wire::{
    Encoder, Message, Route, StatusUpdate, TaskDescription, TaskOutcome, TaskPayload, TaskState,
    DRIVER_ENDPOINT, EXECUTOR_ENDPOINT,
};
use hdrhistogram::Histogram;

use crate::job::{local_cluster, run_job, JobError, JobHooks, JobSpec};
pub mod jobs;
pub mod sim;
pub mod stream;
pub mod transport;

use self::transport::{measure_transport, TransportReport, TransportRounds, PAYLOAD};

/// The frame sizes of a noop task's LaunchTask and of its StatusUpdate, as the driver
/// and the executor send them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSizes {
    /// Bytes of a LaunchTask frame.
    pub launch: usize,
    /// Bytes of a StatusUpdate frame.
    pub status: usize,
}

impl FrameSizes {
    /// Encodes the two frames a noop task costs.
    pub fn of_noop_task() -> FrameSizes {
        let mut encoder = Encoder::new(usize::MAX);
        let mut out = BytesMut::new();
        let task = TaskDescription {
            task_id: 12_345,
            attempt_number: 0,
            executor_id: "1".into(),
            name: "task 12345.0 in stage 0.0 (TID 12345)".into(),
            index: 12_345,
            partition_id: 12_345,
            extras: None,
            cpus: 1,
            serialized_task: TaskPayload::encode("noop", b"").expect("a valid name"),
        };
        let to_executor = Route::OneWay {
            endpoint: EXECUTOR_ENDPOINT.into(),
        };
        let launch = encoder
            .encode(&to_executor, &Message::LaunchTask(task), &mut out)
            .expect("encodes");
        let to_driver = Route::OneWay {
            endpoint: DRIVER_ENDPOINT.into(),
        };
        let status = Message::StatusUpdate(StatusUpdate {
            executor_id: "1".into(),
            task_id: 12_345,
            state: TaskState::Finished,
            outcome: TaskOutcome::Direct {
                value: Bytes::new(),
                metrics: Default::default(),
                accumulators: vec![],
            },
        });
        let status = encoder
            .encode(&to_driver, &status, &mut out)
            .expect("encodes");
        FrameSizes { launch, status }
    }
}

/// How the two ends of a [`RawPingPong`] wait for bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Blocking reads: the thread sleeps until bytes come and is woken.
    Blocking,
    /// Non-blocking reads in a loop, yielding the CPU between them: no thread sleeps.
    BusyPolling,
}

/// A TCP ping-pong on 127.0.0.1: `request` bytes one way, `reply` bytes back.
#[derive(Debug)]
pub struct RawPingPong {
    socket: TcpStream,
    waiting: Waiting,
    request: Vec<u8>,
    reply: Vec<u8>,
    server: Option<JoinHandle<()>>,
}

/// Reads exactly `buf.len()` bytes, waiting as `waiting` says (a busy-polling socket
/// must be non-blocking).
pub fn read_all(socket: &mut TcpStream, buf: &mut [u8], waiting: Waiting) -> std::io::Result<()> {
    if waiting == Waiting::Blocking {
        return socket.read_exact(buf);
    }
    let mut filled = 0;
    while filled < buf.len() {
        match socket.read(&mut buf[filled..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` on a socket that may be non-blocking.
fn write_all(socket: &mut TcpStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match socket.write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl RawPingPong {
    /// Starts the answering thread and connects to it; both ends block in their reads.
    pub fn start(request: usize, reply: usize) -> std::io::Result<RawPingPong> {
        RawPingPong::start_waiting(request, reply, Waiting::Blocking)
    }

    /// Starts the answering thread and connects to it; both ends wait as `waiting` says.
    pub fn start_waiting(
        request: usize,
        reply: usize,
        waiting: Waiting,
    ) -> std::io::Result<RawPingPong> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let server = std::thread::Builder::new()
            .name("raw-ping-pong".into())
            .spawn(move || {
                let Ok((mut socket, _)) = listener.accept() else {
                    return;
                };
                let _ = socket.set_nodelay(true);
                let _ = socket.set_nonblocking(waiting == Waiting::BusyPolling);
                let mut inbound = vec![0u8; request];
                let outbound = vec![0x24u8; reply];
                while read_all(&mut socket, &mut inbound, waiting).is_ok() {
                    if write_all(&mut socket, &outbound).is_err() {
                        break;
                    }
                }
            })?;
        let socket = TcpStream::connect(address)?;
        socket.set_nodelay(true)?;
        socket.set_nonblocking(waiting == Waiting::BusyPolling)?;
        Ok(RawPingPong {
            socket,
            waiting,
            request: vec![0x42; request],
            reply: vec![0; reply],
            server: Some(server),
        })
    }

    /// One round trip.
    pub fn round_trip(&mut self) -> std::io::Result<()> {
        write_all(&mut self.socket, &self.request)?;
        read_all(&mut self.socket, &mut self.reply, self.waiting)
    }
}

impl Drop for RawPingPong {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// A driver with executor processes, ready to run task sets one after another.
pub struct BenchCluster {
    /// Its status page, if `ui.enabled` (as for any driver flint starts): what it costs
    /// is part of what is measured (scripts/bench-ui-poll compares).
    _ui: Option<flint_ui::StatusServer>,
    driver: Driver,
    next_stage: u32,
    payload: Bytes,
}

impl BenchCluster {
    /// A driver configured by `conf` with `executors` processes of `program` (the
    /// `flint` binary) of `cores` cores, registered.
    pub fn start(
        program: &Path,
        conf: &Conf,
        executors: usize,
        cores: u32,
    ) -> Result<BenchCluster, JobError> {
        let driver = Driver::start(conf, Box::new(local_cluster(program, cores, conf)))?;
        driver.request_total_executors(executors as i64)?;
        driver.wait_for_executors(executors, Duration::from_secs(60))?;
        Ok(BenchCluster {
            _ui: crate::ui::serve(conf, &driver, "flint bench")?,
            driver,
            next_stage: 0,
            payload: TaskPayload::encode("noop", b"").expect("a valid name"),
        })
    }

    /// Runs a task set of `tasks` noop tasks; returns the time from its submission to
    /// its last result recorded at the driver.
    pub fn run_noop(&mut self, tasks: u32) -> Result<Duration, JobError> {
        let stage = self.next_stage;
        self.next_stage += 1;
        let task_set = TaskSet::new(stage, stage, tasks, self.payload.clone());
        let outcome = self
            .driver
            .submit(task_set)?
            .wait(Duration::from_secs(600))?;
        Ok(outcome.elapsed)
    }

    /// Stops the driver and its executors.
    pub fn stop(self) -> Result<(), JobError> {
        self.driver.stop()?;
        Ok(())
    }
}

/// What `flint bench` measures.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The `flint` binary that executor processes run.
    pub program: PathBuf,
    /// Round trips measured for the floor, and one-task jobs for latency.
    pub samples: usize,
    /// Tasks of each throughput job.
    pub tasks: u32,
    /// Executors of the throughput jobs (1 core each).
    pub executors: usize,
    /// `executor.taskPrefetch` of the pipelined job.
    pub prefetch: usize,
    /// Further configuration for every driver and executor.
    pub conf: Vec<(String, String)>,
    /// A CPU load to run beside the measurement ([`run_cpu_load`]), in percent of every
    /// CPU: the busy case, reproducible.
    pub busy_load_percent: Option<u8>,
}

/// The figures, each beside its floor.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Bytes of the floor's request and reply.
    pub frames: FrameSizes,
    /// Floor round trip, median, in microseconds: the faster placement's.
    pub floor_rtt_us: f64,
    /// Floor round trip, 99th percentile.
    pub floor_rtt_p99_us: f64,
    /// The blocking round trip with both threads free to move, median.
    pub floor_rtt_free_us: f64,
    /// The blocking round trip with both threads on one CPU, median (if they could be
    /// pinned).
    pub floor_rtt_one_cpu_us: Option<f64>,
    /// The round trip with both ends busy-polling, median, in microseconds.
    pub busy_rtt_us: f64,
    /// The round trip with both ends busy-polling, 99th percentile.
    pub busy_rtt_p99_us: f64,
    /// One-task job latency, median, in microseconds.
    pub job_latency_p50_us: f64,
    /// One-task job latency, 99th percentile.
    pub job_latency_p99_us: f64,
    /// Executor cores of the throughput jobs.
    pub cores: u32,
    /// Tasks of each throughput job.
    pub tasks: u32,
    /// `cores / floor round trip`, in tasks per second.
    pub free_core_floor_tps: f64,
    /// `cores / busy-polling round trip`, in tasks per second.
    pub free_core_busy_tps: f64,
    /// Throughput without pipelining.
    pub strict_tps: f64,
    /// The same schedule over raw TCP, busy-polling ([`raw_strict`]).
    pub raw_strict_tps: f64,
    /// The kernel's CPU time for one task's two loopback transfers, median, in
    /// microseconds ([`loopback_cost`]).
    pub loopback_cpu_us: f64,
    /// CPUs of this machine, shared by the driver and the executors.
    pub cpus: u32,
    /// The strict schedule on one CPU ([`one_cpu_strict`]), if threads could be pinned.
    pub one_cpu: Option<OneCpuStrict>,
    /// Throughput with `executor.taskPrefetch = prefetch`.
    pub pipelined_tps: f64,
    /// The prefetch of the pipelined job.
    pub prefetch: usize,
    /// The transport's figures: ask against its floor, one-way throughput.
    pub transport: TransportReport,
    /// Context switches of the whole machine (`/proc/stat`, so every flint process and
    /// thread) per task of the strict schedule; `None` where `/proc` is not there.
    pub strict_switches_per_task: Option<f64>,
    /// The same over raw TCP's strict schedule.
    pub raw_strict_switches_per_task: Option<f64>,
    /// The CPU load run beside the measurement (`flint bench --busy`), in percent of
    /// every CPU; `None` for a quiet run.
    pub busy_load_percent: Option<u8>,
}

impl BenchReport {
    /// One-task job latency over the floor round trip.
    pub fn latency_ratio(&self) -> f64 {
        self.job_latency_p50_us / self.floor_rtt_us
    }

    /// Strict throughput over the free-core floor.
    pub fn strict_ratio(&self) -> f64 {
        self.strict_tps / self.free_core_floor_tps
    }

    /// One-task job latency over the busy-polling round trip.
    pub fn busy_latency_ratio(&self) -> f64 {
        self.job_latency_p50_us / self.busy_rtt_us
    }

    /// Strict throughput over the busy-polling free-core floor.
    pub fn busy_strict_ratio(&self) -> f64 {
        self.strict_tps / self.free_core_busy_tps
    }

    /// Strict throughput over the same schedule run over raw TCP.
    pub fn raw_strict_ratio(&self) -> f64 {
        self.strict_tps / self.raw_strict_tps
    }

    /// `cpus / loopback_cpu_us`: tasks per second if every CPU did nothing but the
    /// kernel's work of sending each task and its status, the bound of any schedule
    /// without pipelining.
    pub fn loopback_cpu_bound_tps(&self) -> f64 {
        f64::from(self.cpus) / (self.loopback_cpu_us / 1e6)
    }

    /// flint's CPU per task on one CPU over raw TCP's ([`one_cpu_strict`]).
    pub fn one_cpu_ratio(&self) -> Option<f64> {
        self.one_cpu.map(|one| one.flint_us / one.raw_us)
    }

    /// Strict throughput over [`BenchReport::loopback_cpu_bound_tps`].
    pub fn strict_cpu_bound_ratio(&self) -> f64 {
        self.strict_tps / self.loopback_cpu_bound_tps()
    }

    /// One JSON object: every figure, and every ratio of a figure to its baseline.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "floor_rtt_us": self.floor_rtt_us,
            "floor_rtt_p99_us": self.floor_rtt_p99_us,
            "floor_rtt_free_us": self.floor_rtt_free_us,
            "floor_rtt_one_cpu_us": self.floor_rtt_one_cpu_us,
            "busy_poll_rtt_us": self.busy_rtt_us,
            "busy_poll_rtt_p99_us": self.busy_rtt_p99_us,
            "launch_frame_bytes": self.frames.launch,
            "status_frame_bytes": self.frames.status,
            "job_latency_us": {"p50": self.job_latency_p50_us, "p99": self.job_latency_p99_us},
            "latency_ratio": self.latency_ratio(),
            "busy_poll_latency_ratio": self.busy_latency_ratio(),
            "executor_cores_total": self.cores,
            "tasks": self.tasks,
            "free_core_floor_tps": self.free_core_floor_tps,
            "free_core_busy_poll_tps": self.free_core_busy_tps,
            "strict_tps": self.strict_tps,
            "strict_ratio": self.strict_ratio(),
            "busy_poll_strict_ratio": self.busy_strict_ratio(),
            "raw_strict_tps": self.raw_strict_tps,
            "raw_strict_ratio": self.raw_strict_ratio(),
            "loopback_cpu_us": self.loopback_cpu_us,
            "cpus": self.cpus,
            "loopback_cpu_bound_tps": self.loopback_cpu_bound_tps(),
            "strict_cpu_bound_ratio": self.strict_cpu_bound_ratio(),
            "one_cpu_strict_us": self.one_cpu.map(|one| one.flint_us),
            "one_cpu_raw_strict_us": self.one_cpu.map(|one| one.raw_us),
            "one_cpu_strict_ratio": self.one_cpu_ratio(),
            "pipelined_tps": self.pipelined_tps,
            "prefetch": self.prefetch,
            "ask_rtt_us": self.transport.ask_us,
            "ask_floor_rtt_us": self.transport.floor_us,
            "ask_ratio": self.transport.ask_ratio,
            "ask_ratio_range": [self.transport.ask_ratio_range.0, self.transport.ask_ratio_range.1],
            "one_way_msgs_per_sec": self.transport.one_way_per_sec,
            "one_way_min_msgs_per_sec": self.transport.one_way_min_per_sec,
            "strict_context_switches_per_task": self.strict_switches_per_task,
            "raw_strict_context_switches_per_task": self.raw_strict_switches_per_task,
            "busy_load_percent": self.busy_load_percent,
            "version": env!("CARGO_PKG_VERSION"),
        })
        .to_string()
    }

    /// A table for people.
    pub fn to_table(&self) -> String {
        let rows = [
            (
                "floor round trip (raw TCP, p50)".to_owned(),
                format!("{:.1} us", self.floor_rtt_us),
                format!(
                    "{} B out, {} B back; threads free {:.1} us, on one CPU {}",
                    self.frames.launch,
                    self.frames.status,
                    self.floor_rtt_free_us,
                    self.floor_rtt_one_cpu_us
                        .map_or("-".to_owned(), |us| format!("{us:.1} us"))
                ),
            ),
            (
                "raw TCP round trip, busy-polling (p50)".to_owned(),
                format!("{:.1} us", self.busy_rtt_us),
                format!("p99 {:.1} us", self.busy_rtt_p99_us),
            ),
            (
                "one-task job latency p50".to_owned(),
                format!("{:.1} us", self.job_latency_p50_us),
                format!(
                    "{:.2} x floor, {:.2} x busy-polling (p99 {:.1} us)",
                    self.latency_ratio(),
                    self.busy_latency_ratio(),
                    self.job_latency_p99_us
                ),
            ),
            (
                format!("free-core floor ({} cores / round trip)", self.cores),
                format!("{:.0} tasks/s", self.free_core_floor_tps),
                format!("busy-polling: {:.0} tasks/s", self.free_core_busy_tps),
            ),
            (
                format!("{} noop tasks, no pipelining", self.tasks),
                format!("{:.0} tasks/s", self.strict_tps),
                format!(
                    "{:.0}% of the free-core floor, {:.0}% of busy-polling",
                    100.0 * self.strict_ratio(),
                    100.0 * self.busy_strict_ratio()
                ),
            ),
            (
                "the same schedule over raw TCP".to_owned(),
                format!("{:.0} tasks/s", self.raw_strict_tps),
                format!(
                    "busy-polling; flint reaches {:.0}% of it",
                    100.0 * self.raw_strict_ratio()
                ),
            ),
            (
                "context switches per task, no pipelining".to_owned(),
                self.strict_switches_per_task
                    .map_or("-".to_owned(), |n| format!("{n:.2}")),
                self.raw_strict_switches_per_task
                    .map_or("/proc/stat cannot be read here".to_owned(), |raw| {
                        format!("raw TCP's schedule {raw:.2} (whole machine, /proc/stat)")
                    }),
            ),
            (
                "loopback TCP work per task (one thread)".to_owned(),
                format!("{:.1} us", self.loopback_cpu_us),
                format!(
                    "{} CPUs doing only that: {:.0} tasks/s; flint reaches {:.0}%",
                    self.cpus,
                    self.loopback_cpu_bound_tps(),
                    100.0 * self.strict_cpu_bound_ratio()
                ),
            ),
            (
                "no pipelining, all on one CPU: CPU per task".to_owned(),
                self.one_cpu
                    .map_or("-".to_owned(), |one| format!("{:.1} us", one.flint_us)),
                self.one_cpu
                    .map_or("threads cannot be pinned here".to_owned(), |one| {
                        format!(
                            "raw TCP {:.1} us: flint adds {:.1} us, {:.2} x",
                            one.raw_us,
                            one.flint_us - one.raw_us,
                            one.flint_us / one.raw_us
                        )
                    }),
            ),
            (
                format!("{} noop tasks, prefetch {}", self.tasks, self.prefetch),
                format!("{:.0} tasks/s", self.pipelined_tps),
                format!(
                    "{:.1} x no pipelining",
                    self.pipelined_tps / self.strict_tps
                ),
            ),
            (
                format!("ask round trip, {PAYLOAD} B each way"),
                format!("{:.1} us", self.transport.ask_us),
                format!(
                    "{:.2} x raw on one CPU ({:.1} us; rounds {:.2}-{:.2} x)",
                    self.transport.ask_ratio,
                    self.transport.floor_us,
                    self.transport.ask_ratio_range.0,
                    self.transport.ask_ratio_range.1
                ),
            ),
            (
                format!("one-way sends of {PAYLOAD} B"),
                format!("{:.0} msgs/s", self.transport.one_way_per_sec),
                format!(
                    "slowest round {:.0} msgs/s",
                    self.transport.one_way_min_per_sec
                ),
            ),
        ];
        let mut out = String::new();
        if let Some(load) = self.busy_load_percent {
            out.push_str(&format!(
                "measured beside a CPU load of {load}% of every CPU (--busy)\n"
            ));
        }
        for (what, figure, note) in rows {
            out.push_str(&format!("{what:<44} {figure:>16}   {note}\n"));
        }
        out
    }
}

/// A JSON number with `decimals` places, or `null`.
/// The strict schedule with everything on one CPU ([`one_cpu_strict`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OneCpuStrict {
    /// flint: microseconds of the CPU per task, a driver and one executor process.
    pub flint_us: f64,
    /// The same schedule over raw TCP ([`raw_strict`] with one executor thread).
    pub raw_us: f64,
}

/// Runs `tasks` noop tasks without pipelining on a driver and one executor process of
/// one core, all on the first CPU this process may use, then the same schedule over raw
/// TCP on that CPU; `None` where threads cannot be pinned.
///
/// The measuring thread pins itself, and everything it starts inherits the CPU: the
/// driver's threads and, forked from them, the executor process. The caller's own
/// placement is left alone. On one CPU the time per task is that CPU's time (shared
/// only with interrupts and whatever else runs there), so the two figures compare
/// flint's work per task with raw TCP's without the run-to-run variation of where the
/// kernel puts three busy threads on two CPUs.
pub fn one_cpu_strict(
    program: &Path,
    conf: &Conf,
    tasks: u32,
) -> Result<Option<OneCpuStrict>, JobError> {
    let program = program.to_owned();
    let mut conf = conf.clone();
    conf.set("executor.taskPrefetch", "0");
    let frames = FrameSizes::of_noop_task();
    std::thread::spawn(move || -> Result<Option<OneCpuStrict>, JobError> {
        if !pin_to_one_cpu() {
            return Ok(None);
        }
        let mut cluster = BenchCluster::start(&program, &conf, 1, 1)?;
        cluster.run_noop(tasks.min(10_000))?;
        let elapsed = cluster.run_noop(tasks)?;
        cluster.stop()?;
        let raw_tps = raw_strict(frames, 1, u64::from(tasks)).map_err(io_error)?;
        Ok(Some(OneCpuStrict {
            flint_us: elapsed.as_secs_f64() * 1e6 / f64::from(tasks),
            raw_us: 1e6 / raw_tps,
        }))
    })
    .join()
    .map_err(|_| io_error(std::io::Error::other("the one-CPU measurement panicked")))?
}

fn io_error(e: std::io::Error) -> JobError {
    JobError::Driver(flint_scheduler::DriverError::Rpc(flint_rpc::RpcError::Io(
        e,
    )))
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

/// The blocking raw round trip in both placements the kernel may give its two threads.
///
/// Whether the reader's wake-up crosses CPUs decides a blocking round trip on a virtual
/// machine: waking a thread on another, idle CPU costs tens of microseconds there, while
/// on the same CPU it is a plain switch between threads. Which placement the kernel
/// picks changes from run to run (and the cross-CPU one is much the slower on
/// small virtual machines), so the floor is the faster of the two: the least this
/// machine lets a blocking ping-pong take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockingFloor {
    /// Median and 99th percentile, in nanoseconds, with both threads free to move.
    pub free: (u64, u64),
    /// The same with both threads pinned to one CPU; `None` where threads cannot be
    /// pinned.
    pub one_cpu: Option<(u64, u64)>,
}

impl BlockingFloor {
    /// The floor: median and 99th percentile of the faster placement.
    pub fn best(&self) -> (u64, u64) {
        match self.one_cpu {
            Some(one_cpu) if one_cpu.0 < self.free.0 => one_cpu,
            _ => self.free,
        }
    }
}

/// Pins the calling thread to the first CPU it may run on (threads it starts afterwards
/// inherit it); false where threads cannot be pinned.
pub fn pin_to_one_cpu() -> bool {
    core_affinity::get_core_ids()
        .and_then(|ids| ids.into_iter().next())
        .is_some_and(core_affinity::set_for_current)
}

/// The time of `iterations` blocking raw round trips of `request` and `reply` bytes with
/// both threads pinned to one CPU, after 100 unmeasured, timed in a pinned thread of its
/// own (the answering thread inherits its CPU) so that the caller's placement is left
/// alone; `None` where threads cannot be pinned. For criterion's `iter_custom`.
///
/// # Panics
///
/// If the loopback ping-pong fails.
pub fn pinned_round_trips(request: usize, reply: usize, iterations: u64) -> Option<Duration> {
    core_affinity::get_core_ids().filter(|ids| !ids.is_empty())?;
    std::thread::spawn(move || {
        assert!(pin_to_one_cpu(), "pinned to one CPU");
        let mut raw = RawPingPong::start(request, reply).expect("a loopback socket");
        for _ in 0..100 {
            raw.round_trip().expect("the raw server answers");
        }
        let start = std::time::Instant::now();
        for _ in 0..iterations {
            raw.round_trip().expect("the raw server answers");
        }
        start.elapsed()
    })
    .join()
    .map_or_else(|panic| std::panic::resume_unwind(panic), Some)
}

/// The floor round trip over `samples`, in both placements (see [`BlockingFloor`]).
pub fn floor_round_trip(frames: FrameSizes, samples: usize) -> std::io::Result<BlockingFloor> {
    let free = round_trip(frames, samples, Waiting::Blocking)?;
    // Pinned in a thread of its own, which the answering thread it starts inherits the
    // CPU from; the caller's own placement is left alone.
    let one_cpu = std::thread::spawn(move || {
        pin_to_one_cpu().then(|| round_trip(frames, samples, Waiting::Blocking))
    })
    .join()
    .map_err(|_| std::io::Error::other("the pinned round trip panicked"))?
    .transpose()?;
    Ok(BlockingFloor { free, one_cpu })
}

/// The raw round trip with both ends waiting as `waiting` says: median and 99th
/// percentile over `samples`, in nanoseconds.
pub fn round_trip(
    frames: FrameSizes,
    samples: usize,
    waiting: Waiting,
) -> std::io::Result<(u64, u64)> {
    let mut raw = RawPingPong::start_waiting(frames.launch, frames.status, waiting)?;
    let times = time_each(samples, || raw.round_trip())?;
    Ok((times.value_at_quantile(0.5), times.value_at_quantile(0.99)))
}

/// Times `samples` calls of `operation`, in nanoseconds, after up to 1,000 calls that
/// warm it up and are not counted.
fn time_each(
    samples: usize,
    mut operation: impl FnMut() -> std::io::Result<()>,
) -> std::io::Result<Histogram<u64>> {
    for _ in 0..samples.min(1_000) {
        operation()?;
    }
    let mut times = histogram();
    for _ in 0..samples {
        let start = Instant::now();
        operation()?;
        times.saturating_record(start.elapsed().as_nanos() as u64);
    }
    Ok(times)
}

/// The largest frame [`loopback_cost`] moves: well within the smallest send buffer Linux
/// gives a TCP socket by default, so that writing it never waits for a reader.
pub const LOOPBACK_FRAME_LIMIT: usize = 4096;

/// The kernel's work for one task's two transfers on loopback TCP, median over
/// `samples`, in nanoseconds: one thread writes a `frames.launch`-byte frame into one
/// end of a connection and reads it at the other, then a `frames.status`-byte frame back
/// the other way. No thread waits or is woken, so this is CPU time: what sending and
/// receiving cost (loopback runs the receiving side of TCP in the sender's system call).
///
/// The one thread writes each frame whole before it reads it, so frames must fit the
/// socket buffers: above [`LOOPBACK_FRAME_LIMIT`] bytes this is an `InvalidInput` error.
pub fn loopback_cost(frames: FrameSizes, samples: usize) -> std::io::Result<u64> {
    if frames.launch.max(frames.status) > LOOPBACK_FRAME_LIMIT {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "loopback_cost moves frames of at most {LOOPBACK_FRAME_LIMIT} bytes: {frames:?}"
            ),
        ));
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut driver_end = TcpStream::connect(listener.local_addr()?)?;
    let (mut executor_end, _) = listener.accept()?;
    driver_end.set_nodelay(true)?;
    executor_end.set_nodelay(true)?;
    let launch = vec![0x42u8; frames.launch];
    let status = vec![0x24u8; frames.status];
    let mut launch_in = vec![0u8; frames.launch];
    let mut status_in = vec![0u8; frames.status];
    let times = time_each(samples, || {
        write_all(&mut driver_end, &launch)?;
        executor_end.read_exact(&mut launch_in)?;
        write_all(&mut executor_end, &status)?;
        driver_end.read_exact(&mut status_in)
    })?;
    Ok(times.value_at_quantile(0.5))
}

/// The strict schedule over raw TCP: `executors` threads, each answering a
/// `frames.launch`-byte frame with a `frames.status`-byte one, and the calling thread as
/// the driver, which keeps one frame out at each executor and sends it the next as soon
/// as its answer is in, until `tasks` answers came. Every end busy-polls (non-blocking
/// reads, yielding when there is nothing), as flint's event loops and runners do.
/// Returns answers per second.
pub fn raw_strict(frames: FrameSizes, executors: usize, tasks: u64) -> std::io::Result<f64> {
    if executors == 0 && tasks > 0 {
        // Nothing would ever answer.
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the raw strict schedule needs at least one executor thread",
        ));
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let mut answering = Vec::new();
    let mut sockets = Vec::new();
    for index in 0..executors {
        let answerer = std::thread::Builder::new()
            .name(format!("raw-executor-{index}"))
            .spawn(move || -> std::io::Result<()> {
                let mut socket = TcpStream::connect(address)?;
                socket.set_nodelay(true)?;
                socket.set_nonblocking(true)?;
                let mut launch = vec![0u8; frames.launch];
                let status = vec![0x24u8; frames.status];
                while read_all(&mut socket, &mut launch, Waiting::BusyPolling).is_ok() {
                    write_all(&mut socket, &status)?;
                }
                Ok(())
            })?;
        answering.push(answerer);
        let (socket, _) = listener.accept()?;
        socket.set_nodelay(true)?;
        socket.set_nonblocking(true)?;
        sockets.push(socket);
    }
    let launch = vec![0x42u8; frames.launch];
    let mut status = vec![0u8; frames.status];
    let mut received = vec![0usize; executors];
    let started = Instant::now();
    let mut launched = 0u64;
    for socket in &mut sockets {
        if launched < tasks {
            write_all(socket, &launch)?;
            launched += 1;
        }
    }
    let mut answered = 0u64;
    while answered < tasks {
        let mut idle = true;
        for (socket, got) in sockets.iter_mut().zip(&mut received) {
            match socket.read(&mut status[*got..]) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(read) => {
                    idle = false;
                    *got += read;
                    if *got == frames.status {
                        *got = 0;
                        answered += 1;
                        if launched < tasks {
                            write_all(socket, &launch)?;
                            launched += 1;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => idle = false,
                Err(e) => return Err(e),
            }
        }
        if idle {
            std::thread::yield_now();
        }
    }
    let elapsed = started.elapsed();
    for socket in &sockets {
        let _ = socket.shutdown(std::net::Shutdown::Both);
    }
    for answerer in answering {
        match answerer.join() {
            Ok(Ok(())) => {}
            // The driver shut the socket while an answer was being written.
            Ok(Err(_)) => {}
            Err(_) => return Err(std::io::Error::other("a raw executor thread panicked")),
        }
    }
    Ok(tasks as f64 / elapsed.as_secs_f64())
}

/// Measures everything `flint bench` prints.
pub fn run_bench(options: &BenchOptions) -> Result<BenchReport, JobError> {
    let _load = match options.busy_load_percent {
        Some(percent) => Some(CpuLoad::start(&options.program, percent).map_err(io_error)?),
        None => None,
    };
    let pairs = options.conf.iter().map(|(k, v)| format!("{k}={v}"));
    let base = Conf::from_pairs(pairs)?;
    let frames = FrameSizes::of_noop_task();
    let blocking = floor_round_trip(frames, options.samples).map_err(io_error)?;
    let (floor, floor_p99) = blocking.best();
    let (busy, busy_p99) =
        round_trip(frames, options.samples, Waiting::BusyPolling).map_err(io_error)?;

    // One-task jobs, one after another, on one executor.
    let mut cluster = BenchCluster::start(&options.program, &base, 1, 1)?;
    for _ in 0..options.samples.min(200) {
        cluster.run_noop(1)?;
    }
    let mut latency = histogram();
    for _ in 0..options.samples {
        latency.saturating_record(cluster.run_noop(1)?.as_nanos() as u64);
    }
    cluster.stop()?;

    let throughput = |prefetch: usize| -> Result<f64, JobError> {
        let mut conf = base.clone();
        conf.set("executor.taskPrefetch", prefetch.to_string());
        let spec = JobSpec {
            executors: options.executors,
            cores: 1,
            tasks: options.tasks,
            task: "noop".parse().expect("a valid task"),
            startup_timeout: Duration::from_secs(60),
            job_timeout: Duration::from_secs(600),
        };
        let cluster = local_cluster(&options.program, 1, &conf);
        Ok(run_job(&conf, &spec, Box::new(cluster), JobHooks::default())?.tasks_per_sec)
    };
    let switches = context_switches();
    let strict_tps = throughput(0)?;
    let strict_switches = context_switches();
    let raw_strict_tps =
        raw_strict(frames, options.executors, u64::from(options.tasks)).map_err(io_error)?;
    let raw_switches = context_switches();
    let per_task = |from: Option<u64>, to: Option<u64>| {
        Some(to?.saturating_sub(from?) as f64 / f64::from(options.tasks))
    };
    let pipelined_tps = throughput(options.prefetch)?;
    let loopback = loopback_cost(frames, options.samples).map_err(io_error)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let one_cpu = one_cpu_strict(&options.program, &base, options.tasks)?;
    let transport = measure_transport(&base, TransportRounds::default())
        .map_err(|e| JobError::Driver(flint_scheduler::DriverError::Rpc(e)))?;
    let cores = options.executors as u32;
    Ok(BenchReport {
        frames,
        floor_rtt_us: micros(floor),
        floor_rtt_p99_us: micros(floor_p99),
        floor_rtt_free_us: micros(blocking.free.0),
        floor_rtt_one_cpu_us: blocking.one_cpu.map(|(p50, _)| micros(p50)),
        busy_rtt_us: micros(busy),
        busy_rtt_p99_us: micros(busy_p99),
        job_latency_p50_us: micros(latency.value_at_quantile(0.5)),
        job_latency_p99_us: micros(latency.value_at_quantile(0.99)),
        cores,
        tasks: options.tasks,
        free_core_floor_tps: f64::from(cores) / (micros(floor) / 1e6),
        free_core_busy_tps: f64::from(cores) / (micros(busy) / 1e6),
        strict_tps,
        raw_strict_tps,
        loopback_cpu_us: micros(loopback),
        cpus,
        one_cpu,
        pipelined_tps,
        prefetch: options.prefetch,
        transport,
        strict_switches_per_task: per_task(switches, strict_switches),
        raw_strict_switches_per_task: per_task(strict_switches, raw_switches),
        busy_load_percent: options.busy_load_percent,
    })
}

/// The process running [`run_cpu_load`], killed when dropped.
struct CpuLoad(std::process::Child);

impl CpuLoad {
    fn start(program: &Path, percent: u8) -> std::io::Result<CpuLoad> {
        std::process::Command::new(program)
            .args([LOAD_COMMAND, &percent.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .map(CpuLoad)
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The hidden `flint` command that runs [`run_cpu_load`].
pub const LOAD_COMMAND: &str = "__load";

/// Context switches of the whole machine since it booted (`ctxt` of `/proc/stat`).
///
/// The whole machine rather than flint's processes: an executor process that has
/// exited takes its counts with it, and a quiet machine switches a few hundred times a
/// second besides, against the hundreds of thousands a schedule of tasks makes.
pub fn context_switches() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|line| line.strip_prefix("ctxt "))
        .and_then(|n| n.trim().parse().ok())
}

/// A fixed CPU load (`flint bench --busy`): a thread per CPU, each busy `percent` of
/// every 10 ms and asleep the rest, so that a busy host is the same from run to run.
/// Runs in a process of its own (`flint __load PERCENT`), so that it is none of the
/// measured processes' CPU or switches.
pub fn run_cpu_load(percent: u8) -> ! {
    let period = Duration::from_millis(10);
    let busy = period.mul_f64(f64::from(percent.min(100)) / 100.0);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spin = move || loop {
        let start = std::time::Instant::now();
        while start.elapsed() < busy {
            std::hint::spin_loop();
        }
        std::thread::sleep(period.saturating_sub(busy));
    };
    for _ in 1..cpus {
        std::thread::spawn(spin);
    }
    spin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_switches_are_read_from_proc_and_grow() {
        let Some(before) = context_switches() else {
            eprintln!("no /proc/stat here: skipped");
            return;
        };
        // A thread that sleeps and wakes switches at least twice.
        for _ in 0..10 {
            std::thread::spawn(|| std::thread::sleep(Duration::from_millis(1)))
                .join()
                .unwrap();
        }
        let after = context_switches().unwrap();
        assert!(after >= before + 20, "{before} -> {after}");
    }

    #[test]
    fn the_floor_uses_the_real_frame_sizes_and_round_trips() {
        let frames = FrameSizes::of_noop_task();
        assert!(frames.launch > frames.status, "{frames:?}");
        assert_eq!(frames.launch % 16, 0);
        let mut raw = RawPingPong::start(frames.launch, frames.status).unwrap();
        for _ in 0..10 {
            raw.round_trip().unwrap();
        }
        let floor = floor_round_trip(frames, 50).unwrap();
        let (p50, p99) = floor.free;
        assert!(p50 > 0 && p99 >= p50);
        let (p50, p99) = floor.one_cpu.expect("threads can be pinned on Linux");
        assert!(p50 > 0 && p99 >= p50);
        assert_eq!(floor.best().0, floor.free.0.min(p50));
        let mut busy =
            RawPingPong::start_waiting(frames.launch, frames.status, Waiting::BusyPolling).unwrap();
        for _ in 0..10 {
            busy.round_trip().unwrap();
        }
        assert_eq!(
            busy.reply,
            vec![0x24; frames.status],
            "the whole reply came"
        );
        let (p50, p99) = round_trip(frames, 50, Waiting::BusyPolling).unwrap();
        assert!(p50 > 0 && p99 >= p50);
    }

    #[test]
    fn the_loopback_cost_is_measured_over_both_frames() {
        let frames = FrameSizes::of_noop_task();
        let cost = loopback_cost(frames, 200).unwrap();
        assert!(cost > 0, "{cost}");
        // One thread writes before it reads: a frame too large to sit in the socket's
        // buffers is refused rather than left to block for ever.
        let huge = FrameSizes {
            launch: LOOPBACK_FRAME_LIMIT + 1,
            status: 16,
        };
        let refused = loopback_cost(huge, 10).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn the_raw_strict_schedule_answers_every_task() {
        let frames = FrameSizes::of_noop_task();
        for executors in [1, 3] {
            let rate = raw_strict(frames, executors, 2_000).unwrap();
            assert!(rate.is_finite() && rate > 0.0, "{rate}");
        }
        // Fewer tasks than executors: the others get none, and it still ends.
        assert!(raw_strict(frames, 3, 1).unwrap() > 0.0);
    }

    #[test]
    fn the_floor_is_the_faster_placement() {
        let floor = |free, one_cpu| BlockingFloor { free, one_cpu };
        assert_eq!(floor((70, 90), Some((14, 20))).best(), (14, 20));
        assert_eq!(floor((12, 30), Some((14, 20))).best(), (12, 30));
        assert_eq!(floor((70, 90), None).best(), (70, 90));
    }

    #[test]
    fn the_report_prints_as_json_and_as_a_table() {
        let report = BenchReport {
            frames: FrameSizes {
                launch: 256,
                status: 144,
            },
            floor_rtt_us: 20.0,
            floor_rtt_p99_us: 40.0,
            floor_rtt_free_us: 70.0,
            floor_rtt_one_cpu_us: Some(20.0),
            busy_rtt_us: 8.0,
            busy_rtt_p99_us: 10.0,
            job_latency_p50_us: 28.0,
            job_latency_p99_us: 60.0,
            cores: 2,
            tasks: 100_000,
            free_core_floor_tps: 100_000.0,
            free_core_busy_tps: 250_000.0,
            strict_tps: 85_000.0,
            raw_strict_tps: 125_000.0,
            loopback_cpu_us: 16.0,
            cpus: 2,
            one_cpu: Some(OneCpuStrict {
                flint_us: 20.0,
                raw_us: 16.0,
            }),
            pipelined_tps: 1_200_000.0,
            prefetch: 64,
            transport: TransportReport {
                frames: (208, 176),
                ask_us: 18.0,
                floor_us: 15.0,
                ask_ratio: 1.2,
                ask_ratio_range: (1.1, 1.35),
                one_way_per_sec: 3_000_000.0,
                one_way_min_per_sec: 2_500_000.0,
            },
            strict_switches_per_task: Some(4.5),
            raw_strict_switches_per_task: Some(2.25),
            busy_load_percent: Some(50),
        };
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        for (field, expected) in [
            ("strict_context_switches_per_task", 4.5),
            ("raw_strict_context_switches_per_task", 2.25),
            ("busy_load_percent", 50.0),
            ("floor_rtt_us", 20.0),
            ("floor_rtt_free_us", 70.0),
            ("floor_rtt_one_cpu_us", 20.0),
            ("free_core_floor_tps", 100_000.0),
            ("strict_tps", 85_000.0),
            ("pipelined_tps", 1_200_000.0),
            ("prefetch", 64.0),
            ("executor_cores_total", 2.0),
            ("latency_ratio", 1.4),
            ("busy_poll_rtt_us", 8.0),
            ("busy_poll_latency_ratio", 3.5),
            ("free_core_busy_poll_tps", 250_000.0),
            ("busy_poll_strict_ratio", 0.34),
            ("raw_strict_tps", 125_000.0),
            ("raw_strict_ratio", 0.68),
            ("loopback_cpu_us", 16.0),
            ("cpus", 2.0),
            ("loopback_cpu_bound_tps", 125_000.0),
            ("strict_cpu_bound_ratio", 0.68),
            ("one_cpu_strict_us", 20.0),
            ("one_cpu_raw_strict_us", 16.0),
            ("one_cpu_strict_ratio", 1.25),
            ("ask_rtt_us", 18.0),
            ("ask_floor_rtt_us", 15.0),
            ("ask_ratio", 1.2),
            ("one_way_msgs_per_sec", 3_000_000.0),
            ("one_way_min_msgs_per_sec", 2_500_000.0),
        ] {
            let value = json[field].as_f64().unwrap_or(f64::NAN);
            assert!(
                (value - expected).abs() < 1e-9,
                "{field}: {value} in {json}"
            );
        }
        assert_eq!(
            json["job_latency_us"],
            serde_json::json!({"p50": 28.0, "p99": 60.0})
        );
        assert_eq!(json["ask_ratio_range"], serde_json::json!([1.1, 1.35]));
        let table = report.to_table();
        assert!(table.contains("1.40 x floor"), "{table}");
        assert!(
            table.contains("threads free 70.0 us, on one CPU 20.0 us"),
            "{table}"
        );
        assert!(table.contains("85% of the free-core floor"), "{table}");
        assert!(table.contains("3.50 x busy-polling"), "{table}");
        assert!(table.contains("34% of busy-polling"), "{table}");
        assert!(table.contains("flint reaches 68% of it"), "{table}");
        assert!(
            table.contains("2 CPUs doing only that: 125000 tasks/s; flint reaches 68%"),
            "{table}"
        );
        assert!(
            table.contains("1.20 x raw on one CPU (15.0 us; rounds 1.10-1.35 x)"),
            "{table}"
        );
        assert!(table.contains("3000000 msgs/s"), "{table}");
        assert!(
            table.contains("raw TCP 16.0 us: flint adds 4.0 us, 1.25 x"),
            "{table}"
        );
        assert!(
            table.starts_with("measured beside a CPU load of 50% of every CPU"),
            "{table}"
        );
        assert!(
            table.contains("4.50   raw TCP's schedule 2.25 (whole machine"),
            "{table}"
        );
        let unpinned = BenchReport {
            one_cpu: None,
            ..report
        };
        let json: serde_json::Value = serde_json::from_str(&unpinned.to_json()).unwrap();
        assert!(json["one_cpu_strict_ratio"].is_null(), "{json}");
        assert!(unpinned
            .to_table()
            .contains("threads cannot be pinned here"));
    }
}
