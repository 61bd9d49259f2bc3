//! A slow and a partitioned network, end to end: `flint executor` processes reach an
//! in-process driver through a relay on 127.0.0.1 that holds every byte for a while in each
//! direction, and that can be cut (everything held) and healed, as a congested or partitioned
//! link does to a TCP connection. (This machine's kernel has no netem qdisc, so the delay is
//! a user-space relay's.) Every wait is bounded; every process and thread started is stopped
//! when its test ends.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod common;

use common::{spawn_executor, task, Recorder};
use flint::rpc::Conf;
use flint::scheduler::{Driver, TaskSet, TaskSetOutcome};
use flint::wire::TaskState;
use flint_testkit::logs::LogCapture;
use flint_testkit::process::Processes;
use flint_testkit::wait::wait_until;

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes read at one instant, to be written once the link's delay has passed.
struct Chunk {
    due: Instant,
    bytes: Vec<u8>,
}

/// One direction of one relayed connection: chunks in order, and whether the reader is done.
#[derive(Default)]
struct Pipe {
    state: Mutex<(VecDeque<Chunk>, bool)>,
    changed: Condvar,
}

/// The switches shared by a link's threads.
#[derive(Default)]
struct LinkState {
    /// Nothing is delivered while set; what arrives is held, in order, until it clears.
    cut: AtomicBool,
    stopping: AtomicBool,
    streams: Mutex<Vec<TcpStream>>,
}

/// A TCP relay from a local port to `target` that delays every byte by `delay` each way.
struct SlowLink {
    address: SocketAddr,
    state: Arc<LinkState>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl SlowLink {
    fn new(target: SocketAddr, delay: Duration) -> SlowLink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let state = Arc::new(LinkState::default());
        let threads = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (state, threads) = (state.clone(), threads.clone());
            std::thread::spawn(move || {
                while !state.stopping.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            client.set_nonblocking(false).unwrap();
                            let server = TcpStream::connect(target).unwrap();
                            for stream in [&client, &server] {
                                stream.set_nodelay(true).unwrap();
                                let copy = stream.try_clone().unwrap();
                                state.streams.lock().unwrap().push(copy);
                            }
                            let mut threads = threads.lock().unwrap();
                            threads.extend(relay(&client, &server, delay, &state));
                            threads.extend(relay(&server, &client, delay, &state));
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) => panic!("the slow link's listener failed: {e}"),
                    }
                }
            })
        };
        SlowLink {
            address,
            state,
            threads,
            acceptor: Some(acceptor),
        }
    }

    /// Holds everything from now on, in both directions, on every connection.
    fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
    }

    /// Delivers what was held, and what comes, again.
    fn heal(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        for stream in self.state.streams.lock().unwrap().iter() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for thread in self.threads.lock().unwrap().drain(..) {
            let _ = thread.join();
        }
    }
}

/// The two threads relaying `from` to `to`: one reads and stamps, one waits out the delay
/// (and any cut) and writes.
fn relay(
    from: &TcpStream,
    to: &TcpStream,
    delay: Duration,
    state: &Arc<LinkState>,
) -> [JoinHandle<()>; 2] {
    let pipe = Arc::new(Pipe::default());
    let mut from = from.try_clone().unwrap();
    let mut to = to.try_clone().unwrap();
    let reader = {
        let pipe = pipe.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let mut state = pipe.state.lock().unwrap();
                if n == 0 {
                    state.1 = true;
                    pipe.changed.notify_all();
                    return;
                }
                let due = Instant::now() + delay;
                state.0.push_back(Chunk {
                    due,
                    bytes: buf[..n].to_vec(),
                });
                pipe.changed.notify_all();
            }
        })
    };
    let state = state.clone();
    let writer = std::thread::spawn(move || loop {
        let chunk = {
            let mut guard = pipe.state.lock().unwrap();
            loop {
                if state.stopping.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(front) = guard.0.front() {
                    let now = Instant::now();
                    if front.due <= now && !state.cut.load(Ordering::SeqCst) {
                        break guard.0.pop_front().unwrap();
                    }
                    let wait = front.due.saturating_duration_since(now);
                    let wait = wait.clamp(Duration::from_millis(1), Duration::from_millis(20));
                    guard = pipe.changed.wait_timeout(guard, wait).unwrap().0;
                } else if guard.1 {
                    let _ = to.shutdown(Shutdown::Write);
                    return;
                } else {
                    guard = pipe
                        .changed
                        .wait_timeout(guard, Duration::from_millis(20))
                        .unwrap()
                        .0;
                }
            }
        };
        if to.write_all(&chunk.bytes).is_err() {
            return;
        }
    });
    [reader, writer]
}

/// A driver and one executor process per link, each executor reaching the driver through a
/// link of its own with `delay` each way; `conf` for all of them.
struct SlowCluster {
    driver: Driver,
    links: Vec<SlowLink>,
    recorder: Recorder,
    _processes: Processes,
}

fn slow_cluster(conf: &[&str], delay: Duration, executors: usize) -> SlowCluster {
    let driver = Driver::standalone(&Conf::from_pairs(conf.iter().copied()).unwrap()).unwrap();
    let recorder = Recorder::default();
    driver.add_listener(recorder.clone());
    let mut links = Vec::new();
    let mut processes = Processes(Vec::new());
    for index in 0..executors {
        let link = SlowLink::new(driver.address(), delay);
        let id = format!("slow-{index}");
        processes
            .0
            .push(spawn_executor(link.address, &id, conf, Stdio::null()));
        links.push(link);
    }
    driver
        .wait_for_executors(executors, REGISTER_TIMEOUT)
        .unwrap();
    SlowCluster {
        driver,
        links,
        recorder,
        _processes: processes,
    }
}

/// Runs stage `stage` of `tasks` echo tasks and checks that every result came back.
fn echo_job(driver: &Driver, stage: u32, tasks: u32) -> TaskSetOutcome {
    let input = format!("stage {stage}");
    let outcome = driver
        .submit(TaskSet::new(stage, 0, tasks, task("echo", &input)))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), tasks as usize);
    assert!(outcome.results.iter().all(|r| r[..] == *input.as_bytes()));
    outcome
}

const DELAY: Duration = Duration::from_millis(20);
/// The least a round trip over a link can take.
const RTT: Duration = Duration::from_millis(40);

#[test]
fn over_a_slow_link_jobs_complete_and_launch_pipelining_hides_the_round_trip() {
    // Without pipelining a core gets its next task a whole round trip after its last one
    // ended: 40 tasks on 2 cores take at least 20 round trips.
    let heartbeats = "executor.heartbeatInterval=100ms";
    let strict = slow_cluster(&["network.timeout=2s", heartbeats], DELAY, 2);
    let tasks = 40;
    let outcome = echo_job(&strict.driver, 0, tasks);
    assert!(
        outcome.elapsed >= RTT * (tasks / 2),
        "each launch waits a round trip: {:?}",
        outcome.elapsed
    );
    assert!(
        outcome.latency.p50_us >= RTT.as_micros() as f64,
        "a task's latency includes the link's round trip: {:?}",
        outcome.latency
    );
    // Heartbeats every 100 ms kept both executors alive through the delay.
    assert_eq!(strict.recorder.removed(), []);
    strict.driver.stop().unwrap();
    drop(strict);

    // With 64 tasks queued at each executor, 800 tasks finish in fewer round trips than
    // strict launching could ever manage: it would need 400.
    let pipelined = slow_cluster(
        &["network.timeout=2s", heartbeats, "executor.taskPrefetch=64"],
        DELAY,
        2,
    );
    let tasks = 800;
    let outcome = echo_job(&pipelined.driver, 1, tasks);
    assert_eq!(outcome.duplicate_results, 0);
    let strict_bound = RTT * (tasks / 2);
    assert!(
        outcome.elapsed < strict_bound,
        "pipelined: {:?}, while strict launching needs at least {strict_bound:?}",
        outcome.elapsed
    );
    assert_eq!(pipelined.recorder.removed(), []);
    pipelined.driver.stop().unwrap();
}

#[test]
fn a_partitioned_executor_is_expired_its_tasks_run_elsewhere_and_its_late_results_ignored() {
    let logs = LogCapture::everywhere();
    let cluster = slow_cluster(
        &["network.timeout=1s", "executor.heartbeatInterval=100ms"],
        Duration::from_millis(2),
        2,
    );
    let tasks = 60;
    let handle = cluster
        .driver
        .submit(TaskSet::new(0, 0, tasks, task("sleep", "50")))
        .unwrap();
    wait_until("both executors ran tasks", JOB_TIMEOUT, || {
        let ends = cluster.recorder.task_ends.lock().unwrap();
        ["slow-0", "slow-1"]
            .iter()
            .all(|id| ends.iter().any(|(_, e, _)| e == id))
    });

    // slow-0's link goes silent both ways: its tasks keep running and finishing over there,
    // but nothing of it reaches the driver, heartbeats included.
    cluster.links[0].cut();
    let cut_at = Instant::now();
    wait_until("the partitioned executor expired", JOB_TIMEOUT, || {
        !cluster.recorder.removed().is_empty()
    });
    let removed = cluster.recorder.removed();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].0, "slow-0");
    assert!(
        removed[0]
            .1
            .starts_with("Executor heartbeat timed out after "),
        "{removed:?}"
    );
    // Not long before network.timeout after the cut: the last heartbeat that got through
    // came about an interval (100 ms) before it, more on a busy machine, so the bound
    // leaves half the timeout (the reason's own "after N ms" is checked to pass it).
    assert!(
        cut_at.elapsed() >= Duration::from_millis(500),
        "expired {:?} after the cut",
        cut_at.elapsed()
    );

    // The link heals while slow-1 is still working through the rescheduled tasks: slow-0's
    // held status updates arrive late, for attempts the driver already gave up on.
    cluster.links[0].heal();
    let outcome = handle.wait(JOB_TIMEOUT).unwrap();
    assert_eq!(outcome.results.len(), tasks as usize);
    assert_eq!(outcome.duplicate_results, 0, "every result recorded once");
    assert!(
        outcome.failed_attempts >= 1,
        "the expired executor's attempts were lost"
    );
    // The attempt slow-0 had when the link was cut ends over there (at once, or once the
    // held launch arrives): its update reaches the driver late and is ignored. FINISHED
    // mostly; KILLED when the answer to a heartbeat held by the cut tells slow-0 to
    // register again before the task ends (it then kills what it runs).
    wait_until(
        "slow-0's late status update was ignored",
        JOB_TIMEOUT,
        || logs.contains(tracing::Level::ERROR, "Ignoring update with state "),
    );
    // Told by its next heartbeat's answer that the driver does not know it, slow-0
    // registers again and is offered tasks again.
    wait_until(
        "the healed executor registered again",
        REGISTER_TIMEOUT,
        || cluster.driver.executor_ids().len() == 2,
    );
    let again = cluster
        .driver
        .submit(TaskSet::new(1, 0, 20, task("sleep", "20")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(again.results.len(), 20);
    let ends = cluster.recorder.task_ends.lock().unwrap().clone();
    let successes_on_slow_0_after_heal = ends
        .iter()
        .rev()
        .take(20)
        .filter(|(_, e, state)| e == "slow-0" && *state == TaskState::Finished)
        .count();
    assert!(
        successes_on_slow_0_after_heal > 0,
        "the re-registered executor ran tasks of the next job: {ends:?}"
    );
    cluster.driver.stop().unwrap();
}
