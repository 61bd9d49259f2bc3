//! The standing fault suite: attacks on a running driver that flint must survive, each
//! while a job runs on real executor processes. Every test checks that the job ends
//! with every result once, that the driver stayed within its CPU and memory bounds
//! during the attack, that its descriptors come back to where they were, and the exact
//! words the attacker was told.
//!
//! The attackers connect from 127.0.0.2 and up (another host to the driver's per-host
//! rules, see `flint_testkit::attack`), the executors from 127.0.0.1. Tests of this
//! binary take turns ([`one_at_a_time`]): they measure the whole process.
//!
//! Here too are the driver-level tests of the three ways a peer once held a driver: a
//! registered peer that never reads, idle connections filling `rpc.io.maxConnections`
//! from one host, and a trickler that reconnects against large results (their rules are
//! tested on their own in `rpc/tests` and `scheduler`). Attacks kept elsewhere: forged
//! status updates, a registration with a huge ID and oversize heartbeats (`tests/e2e.rs`,
//! the hostile peer), SIGSTOP and kill -9 of executors (`tests/e2e.rs`,
//! `tests/slow_network.rs`), duplicate executor IDs (`scheduler/tests/driver.rs`), slow
//! and trickled bodies and the receive budget (`rpc/tests`), and all of them mixed for
//! minutes in `scripts/soak`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::Level;

use common::{spawn_executor, task, FLINT};
use flint::rpc::Conf;
use flint::scheduler::{Driver, TaskSet, TaskSetHandle};
use flint::wire::{Message, RegisterExecutor, Route, DRIVER_ENDPOINT};
use flint_testkit::attack::{
    bad_crc_frame, connect_from, header_announcing, loopback_host, refusal, GARBAGE,
};
use flint_testkit::frames::frame_bytes;
use flint_testkit::logs::LogCapture;
use flint_testkit::process::{
    open_descriptors, resident_bytes, thread_cpu_time, wait_exit, Processes,
};
use flint_testkit::wait::wait_until;

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
const JOB_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a test waits for the driver to close an attacker's connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Tests measure the whole process (memory, descriptors): one at a time. The log
/// capture they check warnings with records nothing more verbose, from the start of
/// every test whichever comes first, so that it weighs the same in each.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    LogCapture::everywhere_at(Level::WARN);
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A driver in this process and `executors` executor processes of one core, registered.
fn cluster(pairs: &[&str], executors: usize) -> (Driver, Processes) {
    let conf = Conf::from_pairs(pairs.iter().copied()).unwrap();
    let driver = Driver::standalone(&conf).unwrap();
    let processes = Processes(
        (0..executors)
            .map(|i| spawn_executor(driver.address(), &format!("{i}"), pairs, Stdio::null()))
            .collect(),
    );
    driver
        .wait_for_executors(executors, REGISTER_TIMEOUT)
        .unwrap();
    (driver, processes)
}

/// A job of `tasks` echo tasks whose results [`check_job`] checks.
fn start_job(driver: &Driver, stage: u32, tasks: u32) -> TaskSetHandle {
    let input = format!("fault suite {stage}");
    driver
        .submit(TaskSet::new(stage, stage, tasks, task("echo", &input)))
        .unwrap()
}

/// The job ended, every result once and the one its task made.
fn check_job(handle: TaskSetHandle, stage: u32, tasks: u32) {
    let input = format!("fault suite {stage}");
    let outcome = handle.wait(JOB_TIMEOUT).unwrap();
    assert_eq!(outcome.results.len(), tasks as usize);
    assert!(outcome.results.iter().all(|r| r[..] == *input.as_bytes()));
    assert_eq!(outcome.duplicate_results, 0);
}

/// What this process held, and its driver's event loop had used, when an attack
/// started: once the executors registered, before the job.
struct Baseline {
    descriptors: usize,
    resident: u64,
    /// The driver's loop thread, named for its port.
    driver_loop: String,
    cpu: Duration,
    started: Instant,
}

impl Baseline {
    fn now(driver: &Driver) -> Baseline {
        let driver_loop = format!("flint-rpc-{}", driver.address().port());
        Baseline {
            descriptors: open_descriptors("self"),
            resident: resident_bytes("self"),
            cpu: thread_cpu_time("self", &driver_loop),
            driver_loop,
            started: Instant::now(),
        }
    }

    /// The driver's event loop used at most half a CPU over the attack (its job's
    /// launches and results included), the process grew by at most 64 MiB, and its
    /// descriptors came back to where they were. A driver that spins on a peer uses a
    /// whole CPU; one that keeps what a peer made it allocate, or its sockets, fails the
    /// others.
    fn check_bounds(&self, attack: &str) {
        let wall = self.started.elapsed();
        let cpu = thread_cpu_time("self", &self.driver_loop).saturating_sub(self.cpu);
        assert!(
            cpu <= wall / 2 + Duration::from_millis(500),
            "{attack}: {cpu:?} of CPU in {wall:?}"
        );
        let grown = resident_bytes("self").saturating_sub(self.resident);
        eprintln!("{attack}: {cpu:?} of CPU in {wall:?}, resident memory grew {grown} bytes");
        assert!(
            grown <= 64 << 20,
            "{attack}: resident memory grew by {grown} bytes"
        );
        wait_until(
            "the attacker's descriptors to be closed",
            CLOSE_TIMEOUT,
            || open_descriptors("self") <= self.descriptors,
        );
    }
}

/// The WARN lines logged from `from` on (an index into them), for checking what an
/// attack made the driver say, and that it said it within the log budget.
fn warnings_since(from: usize) -> Vec<String> {
    LogCapture::everywhere_at(Level::WARN).lines(Level::WARN)[from..].to_vec()
}

/// How many WARN lines have been logged so far.
fn warnings_so_far() -> usize {
    LogCapture::everywhere_at(Level::WARN)
        .lines(Level::WARN)
        .len()
}

/// The log names `words`, and the attack made the driver log at most two windows of the
/// log budget (a window's lines and the one saying how many were held back).
#[track_caller]
fn check_log(warnings: &[String], words: &[&str]) {
    for words in words {
        assert!(
            warnings.iter().any(|line| line.contains(words)),
            "no warning says {words:?}: {warnings:#?}"
        );
    }
    let budget = 2 * (flint::rpc::log_budget::PEER_LINES_PER_WINDOW as usize + 1);
    assert!(
        warnings.len() <= budget,
        "{} warnings, more than the log budget's {budget}: {warnings:#?}",
        warnings.len()
    );
}

/// The reason the driver gave for closing `stream`, which it must close.
#[track_caller]
fn refused(stream: &mut std::net::TcpStream) -> String {
    refusal(stream, CLOSE_TIMEOUT)
        .expect("the driver closed the connection")
        .unwrap_or_default()
}

#[test]
fn one_host_throwing_broken_frames_leaves_the_job_whole_and_the_driver_in_bounds() {
    let _turn = one_at_a_time();
    let pairs = ["network.timeout=2s", "executor.heartbeatInterval=200ms"];
    let (driver, _executors) = cluster(&pairs, 2);
    let address = driver.address();
    let attacker = loopback_host(2);
    let tasks = 5_000;
    let warned = warnings_so_far();
    let baseline = Baseline::now(&driver);
    let job = start_job(&driver, 1, tasks);

    // Bytes that are no frame.
    let mut garbage = connect_from(attacker, address).unwrap();
    let _ = garbage.write_all(&GARBAGE);
    let reason = refused(&mut garbage);
    assert!(reason.contains("magic"), "{reason}");
    // A header announcing 4 GiB, refused from the header alone.
    let mut huge = connect_from(attacker, address).unwrap();
    let _ = huge.write_all(&header_announcing(u32::MAX - 7));
    let reason = refused(&mut huge);
    assert!(reason.contains("exceeds rpc.message.maxSize"), "{reason}");
    // A frame whose CRC does not match.
    let route = ask_driver();
    let register = registration_of("stranger", 1);
    let mut bad_crc = connect_from(attacker, address).unwrap();
    let _ = bad_crc.write_all(&bad_crc_frame(&route, &register));
    let reason = refused(&mut bad_crc);
    assert!(reason.contains("frame checksum mismatch"), "{reason}");
    // A frame whose CRC is right over a body that is no message.
    let mut body = frame_bytes(&route, &register);
    let payload_start = flint::wire::HEADER_LEN;
    for byte in &mut body[payload_start..payload_start + 16] {
        *byte = 0xEE;
    }
    let payload_len = u32::from_le_bytes(body[12..16].try_into().unwrap()) as usize;
    let crc = {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&body[8..16]);
        hasher.update(&body[payload_start..payload_start + payload_len]);
        hasher.finalize()
    };
    body[4..8].copy_from_slice(&crc.to_le_bytes());
    let mut invalid = connect_from(attacker, address).unwrap();
    let _ = invalid.write_all(&body);
    let reason = refused(&mut invalid);
    assert!(
        reason.contains("invalid RegisterExecutor payload"),
        "{reason}"
    );
    // A body that stops halfway: cut off once network.timeout has passed without more.
    let mut slow = connect_from(attacker, address).unwrap();
    let whole = frame_bytes(&route, &register);
    slow.write_all(&whole[..whole.len() / 2]).unwrap();
    let sent = Instant::now();
    let reason = refused(&mut slow);
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(1_500) && waited < Duration::from_secs(8),
        "cut off after {waited:?}: {reason}"
    );
    assert!(reason.contains("network.timeout"), "{reason}");
    drop((garbage, huge, bad_crc, invalid, slow));
    // Then 3,000 connections opened and closed at once (their closes, and the room
    // they are made to give up at rpc.io.maxConnectionsPerHost, are logged within the
    // budget, after the lines above).
    for _ in 0..3_000 {
        drop(connect_from(attacker, address).unwrap());
    }

    check_job(job, 1, tasks);
    check_log(
        &warnings_since(warned),
        &[
            "closing connection: frame checksum mismatch",
            "closing connection: invalid RegisterExecutor payload",
        ],
    );
    assert_eq!(driver.executor_ids().len(), 2, "the stranger registered");
    baseline.check_bounds("broken frames");
    driver.stop().unwrap();
}

#[test]
fn strangers_who_skip_or_repeat_the_handshake_are_refused_and_the_job_runs() {
    let _turn = one_at_a_time();
    let secret = "authenticate.secret=fault-suite-secret";
    let pairs = [
        "authenticate=true",
        secret,
        "network.timeout=2s",
        "executor.heartbeatInterval=200ms",
    ];
    let (driver, _executors) = cluster(&pairs, 2);
    let address = driver.address();
    let attacker = loopback_host(3);
    let warned = warnings_so_far();
    let baseline = Baseline::now(&driver);
    let job = start_job(&driver, 2, 2_000);
    let ask = ask_driver();
    let register = registration_of("stranger", 1);
    // Straight to the registration, no handshake.
    let mut skipper = connect_from(attacker, address).unwrap();
    let _ = skipper.write_all(&frame_bytes(&ask, &register));
    assert_eq!(
        refused(&mut skipper),
        "authentication failed: expected AuthChallenge, got RegisterExecutor"
    );
    // The first step twice.
    let challenge = Message::AuthChallenge { nonce: [7; 32] };
    let one_way = Route::OneWay {
        endpoint: DRIVER_ENDPOINT.into(),
    };
    let mut repeater = connect_from(attacker, address).unwrap();
    let _ = repeater.write_all(&frame_bytes(&one_way, &challenge));
    let _ = repeater.write_all(&frame_bytes(&one_way, &challenge));
    assert_eq!(
        refused(&mut repeater),
        "authentication failed: expected AuthProof, got AuthChallenge"
    );
    // A proof made up without the secret.
    let mut guesser = connect_from(attacker, address).unwrap();
    let _ = guesser.write_all(&frame_bytes(&one_way, &challenge));
    let proof = Message::AuthProof { proof: [0; 32] };
    let _ = guesser.write_all(&frame_bytes(&one_way, &proof));
    assert_eq!(
        refused(&mut guesser),
        "authentication failed: the peer's proof does not match the shared secret \
         (authenticate.secret)"
    );
    drop((skipper, repeater, guesser));

    check_job(job, 2, 2_000);
    check_log(
        &warnings_since(warned),
        &["closing connection: authentication failed: expected AuthChallenge, got RegisterExecutor"],
    );
    assert_eq!(driver.executor_ids().len(), 2);
    baseline.check_bounds("handshakes");
    driver.stop().unwrap();
}

/// The address a `flint driver` process says executors register at, read from its
/// stderr.
fn driver_address(stderr: &mut impl BufRead) -> SocketAddr {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no address said");
        if let Some(rest) = line.split("flint executor --driver ").nth(1) {
            return rest.trim().trim_end_matches(')').parse().unwrap();
        }
    }
}

#[test]
fn executors_of_a_killed_driver_say_so_and_exit() {
    let _turn = one_at_a_time();
    let mut driver = Command::new(FLINT)
        .args(["driver", "--executors", "2", "--tasks", "1000"])
        .args(["--task", "sleep:100", "--startup-timeout", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(driver.stderr.take().unwrap());
    let address = driver_address(&mut stderr);
    let mut processes = Processes(vec![driver]);
    let mut logs = Vec::new();
    for id in ["1", "2"] {
        let mut executor = Command::new(FLINT)
            .args(["executor", "--driver", &address.to_string()])
            .args(["--cores", "1", "--executor-id", id])
            .env("FLINT_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut log = BufReader::new(executor.stderr.take().unwrap());
        processes.0.push(executor);
        let mut line = String::new();
        while !line.contains("Successfully registered with driver") {
            line.clear();
            assert!(log.read_line(&mut line).unwrap() > 0, "executor {id} ended");
        }
        logs.push(log);
    }
    // Both run the job's sleeping tasks when their driver is killed.
    let pid = processes.0[0].id();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    for (executor, log) in processes.0[1..].iter_mut().zip(&mut logs) {
        let status = wait_exit(executor, Duration::from_secs(20));
        assert!(!status.success(), "{status:?}");
        let mut text = String::new();
        std::io::Read::read_to_string(log, &mut text).unwrap();
        assert!(
            text.contains(&format!("Driver {address} disassociated! Shutting down.")),
            "{text}"
        );
    }
}

/// The route of an ask to the driver's endpoint.
fn ask_driver() -> Route {
    Route::Ask {
        request_id: 1,
        endpoint: DRIVER_ENDPOINT.into(),
    }
}

/// A registration of `cores` cores as `id`, from a peer that is no executor process.
fn registration_of(id: &str, cores: u32) -> Message {
    Message::RegisterExecutor(RegisterExecutor {
        executor_id: id.into(),
        executor_address: "127.0.0.1:1".into(),
        endpoint_name: "Executor".into(),
        hostname: "127.0.0.1".into(),
        cores,
        log_urls: vec![],
    })
}

/// What a reply frame says: its kind, and a refusal's text.
fn answer_of(frame: &flint::wire::Frame) -> String {
    match &frame.envelope().unwrap().message {
        flint::wire::ArchivedMessage::RegisterExecutorFailed { message } => {
            format!("RegisterExecutorFailed: {}", message.as_str())
        }
        other => other.kind().to_string(),
    }
}

#[test]
fn a_registered_peer_that_never_reads_is_back_pressure_then_lost_and_the_job_ends() {
    use flint::wire::{BlockManagerId, Heartbeat, HEARTBEAT_ENDPOINT};
    use flint_testkit::peers::RawPeer;
    let _turn = one_at_a_time();
    let pairs = [
        "network.timeout=2s",
        "executor.heartbeatInterval=200ms",
        "rpc.outbox.maxBytes=32k",
        "rpc.io.sendBufferSize=4k",
        "executor.maxCores=64",
    ];
    let conf = Conf::from_pairs(pairs.iter().copied()).unwrap();
    let driver = Driver::standalone(&conf).unwrap();
    let recorder = common::Recorder::default();
    driver.add_listener(recorder.clone());
    let _executors = Processes(
        (0..2)
            .map(|i| spawn_executor(driver.address(), &format!("{i}"), &pairs, Stdio::null()))
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let mut rogue = RawPeer::connect(driver.address(), 4096).unwrap();
    let refused = rogue
        .ask_and_wait(
            DRIVER_ENDPOINT,
            &registration_of("rogue", u32::MAX),
            CLOSE_TIMEOUT,
        )
        .unwrap();
    assert_eq!(
        answer_of(&refused),
        "RegisterExecutorFailed: Executor rogue registered with 4294967295 cores, more \
         than executor.maxCores (64)"
    );
    let registered = rogue
        .ask_and_wait(
            DRIVER_ENDPOINT,
            &registration_of("rogue", 64),
            CLOSE_TIMEOUT,
        )
        .unwrap();
    assert_eq!(answer_of(&registered), "RegisteredExecutor");
    let baseline = Baseline::now(&driver);
    // Tasks of 4 KiB: the rogue's 64 cores (of 66) take more than its outbox and buffers
    // hold.
    let input = "x".repeat(4096);
    let tasks = 2_000;
    let job = driver
        .submit(TaskSet::new(4, 4, tasks, task("echo", &input)))
        .unwrap();
    // It heartbeats (never reading the answers) until the job ends.
    let heartbeat = Message::Heartbeat(Heartbeat {
        executor_id: "rogue".into(),
        accum_updates: vec![],
        block_manager_id: BlockManagerId {
            executor_id: "rogue".into(),
            host: "127.0.0.1".into(),
            port: 1,
        },
    });
    let started = Instant::now();
    while !job.is_done() {
        assert!(started.elapsed() < JOB_TIMEOUT, "{:?}", job.progress());
        let _ = rogue.ask(HEARTBEAT_ENDPOINT, &heartbeat);
        std::thread::sleep(Duration::from_millis(200));
    }
    let outcome = job.wait(JOB_TIMEOUT).unwrap();
    assert_eq!(outcome.results.len(), tasks as usize);
    assert!(outcome.results.iter().all(|r| r[..] == *input.as_bytes()));
    assert_eq!(outcome.duplicate_results, 0);
    let removed = recorder.removed();
    assert!(
        removed
            .iter()
            .any(|(id, reason)| id == "rogue" && reason.contains("has taken nothing for")),
        "{removed:?}"
    );
    drop(rogue);
    baseline.check_bounds("a peer that never reads");
    driver.stop().unwrap();
}

#[test]
fn idle_connections_from_one_host_keep_no_executor_out() {
    use flint_testkit::attack::IdleConnections;
    let _turn = one_at_a_time();
    let pairs = [
        "network.timeout=2s",
        "executor.heartbeatInterval=200ms",
        "rpc.io.maxConnections=50",
    ];
    let (driver, mut executors) = cluster(&pairs, 1);
    let baseline = Baseline::now(&driver);
    // A stranger host takes every place there is, and more.
    let idle = IdleConnections::open(loopback_host(4), driver.address(), 60).unwrap();
    executors.0.push(spawn_executor(
        driver.address(),
        "late",
        &pairs,
        Stdio::null(),
    ));
    driver
        .wait_for_executors(2, REGISTER_TIMEOUT)
        .expect("the new executor got in");
    let job = start_job(&driver, 5, 2_000);
    check_job(job, 5, 2_000);
    assert!(!idle.closed().is_empty(), "the idle ones were not closed");
    drop(idle);
    // The late executor's connections were not there at the start.
    let mut late = executors.0.pop().unwrap();
    late.kill().unwrap();
    late.wait().unwrap();
    baseline.check_bounds("idle connections");
    driver.stop().unwrap();
}

#[test]
fn a_reconnecting_trickler_holds_large_results_up_once_at_most() {
    use flint_testkit::attack::Reconnector;
    let _turn = one_at_a_time();
    let pairs = [
        "network.timeout=1s",
        "executor.heartbeatInterval=200ms",
        "rpc.io.maxReceiveBytes=16m",
    ];
    let (driver, _executors) = cluster(&pairs, 2);
    let baseline = Baseline::now(&driver);
    // 100 connections from one host, each announcing 8 MiB and sending a byte a
    // second, reconnecting as soon as they are cut off.
    let trickler = Reconnector::start(
        loopback_host(5),
        driver.address(),
        100,
        8 << 20,
        Duration::from_secs(1),
    );
    // The trickler has held the budget's room, been cut off for it and come back: the
    // job below meets the attack in its steady state, which before probation held
    // every large frame up for as long as the attack went on.
    wait_until(
        "the trickler to be cut off and reconnect",
        CLOSE_TIMEOUT,
        || trickler.reconnections() > 0,
    );
    // 40 results of 512 KiB, each a frame the budget must admit: without the attacker
    // they take well under a second.
    let started = Instant::now();
    let outcome = driver
        .submit(TaskSet::new(6, 6, 40, task("large-result", "512k")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    let took = started.elapsed();
    assert_eq!(outcome.results.len(), 40);
    assert!(outcome.results.iter().all(|r| r.len() == 512 << 10));
    assert_eq!(outcome.duplicate_results, 0);
    // Held up once for at most network.timeout, with room to spare for a busy host;
    // held per frame, as before, it would take 40 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    drop(trickler);
    baseline.check_bounds("a reconnecting trickler");
    driver.stop().unwrap();
}
