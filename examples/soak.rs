//! A soak run: jobs back to back on a driver and real executor processes for N minutes,
//! under a rotating mix of the faults flint must survive: executors killed (`kill -9`)
//! or stopped (`SIGSTOP` past `network.timeout`), bytes that are no frame, headers
//! announcing 4 GiB, forged status updates, a registered executor that never reads,
//! hosts trickling huge frames and reconnecting, and a host holding idle connections.
//!
//! It reports the results lost or duplicated (both must be 0: it exits non-zero
//! otherwise), the driver's resident memory at the start and the end, and the tasks run
//! per second. Not part of CI: `scripts/soak` builds and runs it.
//!
//! ```text
//! scripts/soak --minutes 10
//! ```
//!
//! The driver runs in this process; the executors are `flint executor` processes of the
//! same build (the `flint` binary next to this example's directory). Attackers connect
//! from 127.0.0.2 and up, so that the honest executors (from 127.0.0.1) are another host
//! to the driver's per-host rules.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use flint::rpc::Conf;
use flint::scheduler::{Driver, TaskSet};
use flint::wire::{
    BlockManagerId, Heartbeat, Message, RegisterExecutor, Route, StatusUpdate, TaskOutcome,
    TaskPayload, TaskState, DRIVER_ENDPOINT, HEARTBEAT_ENDPOINT,
};
use flint_testkit::attack;
use flint_testkit::frames::frame_bytes;
use flint_testkit::process::resident_bytes;

#[derive(Debug, Parser)]
#[command(about = "Runs jobs for N minutes under a rotating mix of faults")]
struct Args {
    /// How long to run.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Honest executor processes (of one core each) kept running.
    #[arg(long, default_value_t = 3)]
    executors: usize,
    /// Tasks of each job.
    #[arg(long, default_value_t = 2_000)]
    tasks: u32,
    /// How long each fault lasts before the next one starts.
    #[arg(long, default_value_t = 10)]
    fault_seconds: u64,
    /// The faults to rotate through (default: all of them), comma-separated.
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<Fault>,
}

/// The driver's configuration: a short `network.timeout` so that a stopped executor is
/// expired, and its tasks run elsewhere, within one fault's window.
const DRIVER_CONF: &[&str] = &[
    "network.timeout=3s",
    "rpc.io.maxConnections=128",
    // Small enough that a registered executor that never reads fills it with launches
    // (and is back-pressure, then lost); ample for executors that do.
    "rpc.outbox.maxBytes=256k",
    // Executors are killed while they run tasks: a task may meet several kills.
    "task.maxFailures=8",
];

/// What the executors get on top of it.
const EXECUTOR_CONF: &[&str] = &["network.timeout=3s", "executor.heartbeatInterval=500ms"];

/// How long a job may take, faults included, before its results count as lost.
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// The faults, in the order they rotate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Fault {
    /// `kill -9` of an executor; a new one replaces it.
    KillExecutor,
    /// `SIGSTOP` of an executor for twice `network.timeout`, then `SIGCONT`.
    StopExecutor,
    /// Connections sending bytes that are no frame, and headers announcing 4 GiB.
    Garbage,
    /// Status updates for tasks that are not the sender's, from a connection that
    /// registered nothing.
    ForgedUpdates,
    /// An executor that registers, heartbeats every second and never reads.
    NeverReads,
    /// Connections from one host announcing 128 MiB frames, sending a byte a second,
    /// reconnecting as soon as they are cut off.
    Trickle,
    /// 100 idle connections from one host.
    IdleConnections,
}

const FAULTS: [Fault; 7] = [
    Fault::KillExecutor,
    Fault::Garbage,
    Fault::StopExecutor,
    Fault::ForgedUpdates,
    Fault::NeverReads,
    Fault::Trickle,
    Fault::IdleConnections,
];

fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.faults.is_empty() {
        args.faults = FAULTS.to_vec();
    }
    // The driver's log (WARN and up unless FLINT_LOG says otherwise) goes to stderr.
    let filter = std::env::var("FLINT_LOG").unwrap_or_else(|_| "warn".to_owned());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
    match soak(&args) {
        Ok(report) => {
            println!("{report}");
            if report.lost == 0 && report.duplicated == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a soak run found.
#[derive(Debug, Default)]
struct Report {
    seconds: f64,
    jobs: u64,
    failed_jobs: u64,
    tasks: u64,
    lost: u64,
    duplicated: u64,
    failed_attempts: u64,
    faults: Vec<(Fault, u64)>,
    executors_started: u64,
    rss_start: u64,
    rss_end: u64,
    rss_peak: u64,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        writeln!(f, "soak: {:.0} s", self.seconds)?;
        writeln!(
            f,
            "  jobs {} ({} failed), tasks {}, {:.0} tasks/s",
            self.jobs,
            self.failed_jobs,
            self.tasks,
            self.tasks as f64 / self.seconds
        )?;
        writeln!(
            f,
            "  results lost {}, duplicated {}, failed attempts {}",
            self.lost, self.duplicated, self.failed_attempts
        )?;
        writeln!(
            f,
            "  driver RSS: start {:.1} MiB, end {:.1} MiB, peak {:.1} MiB",
            mib(self.rss_start),
            mib(self.rss_end),
            mib(self.rss_peak)
        )?;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(fault, n)| format!("{fault:?} x{n}"))
            .collect();
        write!(
            f,
            "  faults: {}; executors started: {}",
            faults.join(", "),
            self.executors_started
        )
    }
}

fn soak(args: &Args) -> Result<Report, String> {
    let flint = flint_binary()?;
    let conf = Conf::from_pairs(DRIVER_CONF.iter().copied()).map_err(|e| e.to_string())?;
    let driver = Driver::standalone(&conf).map_err(|e| e.to_string())?;
    let address = driver.address();
    let mut cluster = Cluster {
        flint,
        driver: address,
        children: Vec::new(),
        next_id: 0,
    };
    for _ in 0..args.executors {
        cluster.spawn()?;
    }
    driver
        .wait_for_executors(args.executors, Duration::from_secs(60))
        .map_err(|e| e.to_string())?;

    let pid = std::process::id();
    let mut report = Report {
        rss_start: resident_bytes(pid),
        faults: args.faults.iter().map(|&f| (f, 0)).collect(),
        ..Report::default()
    };
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(args.minutes * 60.0);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(report.rss_start));
    let faults = {
        let stop = stop.clone();
        let peak = peak.clone();
        let window = Duration::from_secs(args.fault_seconds);
        let executors = args.executors;
        let rotation = args.faults.clone();
        std::thread::spawn(move || {
            rotate_faults(&mut cluster, &rotation, executors, window, &stop, &peak)
        })
    };

    let mut stage = 0;
    while Instant::now() < end {
        let input = format!("soak job {stage}");
        let payload = TaskPayload::encode("echo", input.as_bytes()).map_err(|e| e.to_string())?;
        let handle = driver
            .submit(TaskSet::new(stage, stage, args.tasks, payload))
            .map_err(|e| e.to_string())?;
        report.jobs += 1;
        report.tasks += u64::from(args.tasks);
        match handle.wait(JOB_TIMEOUT) {
            Ok(outcome) => {
                let right = outcome
                    .results
                    .iter()
                    .filter(|r| r[..] == *input.as_bytes())
                    .count() as u64;
                report.lost += u64::from(args.tasks).saturating_sub(right);
                report.duplicated += outcome.duplicate_results;
                report.failed_attempts += outcome.failed_attempts;
            }
            Err(e) => {
                eprintln!("soak: job {stage} failed: {e}");
                report.failed_jobs += 1;
                report.lost += u64::from(args.tasks);
            }
        }
        stage += 1;
        if stage % 50 == 0 {
            eprintln!(
                "soak: {:.0} s, {} jobs, {} lost, {} duplicated, driver RSS {:.1} MiB",
                started.elapsed().as_secs_f64(),
                report.jobs,
                report.lost,
                report.duplicated,
                resident_bytes(pid) as f64 / (1 << 20) as f64
            );
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (applied, started_executors) = faults
        .join()
        .map_err(|_| "the fault thread panicked".to_owned())?;
    for (fault, n) in &mut report.faults {
        *n = applied.iter().filter(|f| *f == fault).count() as u64;
    }
    report.executors_started = started_executors;
    report.rss_end = resident_bytes(pid);
    report.rss_peak = peak.load(Ordering::Relaxed).max(report.rss_end);
    driver.stop().map_err(|e| e.to_string())?;
    Ok(report)
}

/// The `flint` binary of this build: `target/<profile>/flint`, beside the `examples`
/// directory this program runs from.
fn flint_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binary = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("flint"))
        .ok_or("cannot tell where the flint binary is")?;
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "{} is missing: build it first (scripts/soak does)",
            binary.display()
        ))
    }
}

/// The honest executor processes.
struct Cluster {
    flint: PathBuf,
    driver: SocketAddr,
    children: Vec<Child>,
    next_id: u64,
}

impl Cluster {
    fn spawn(&mut self) -> Result<(), String> {
        self.next_id += 1;
        let mut command = Command::new(&self.flint);
        command
            .args([
                "executor",
                "--driver",
                &self.driver.to_string(),
                "--cores",
                "1",
            ])
            .args(["--executor-id", &format!("soak-{}", self.next_id)]);
        for pair in EXECUTOR_CONF {
            command.args(["--conf", pair]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.flint.display()))?;
        self.children.push(child);
        Ok(())
    }

    /// Forgets the executors that exited.
    fn reap(&mut self) {
        self.children
            .retain_mut(|child| matches!(child.try_wait(), Ok(None)));
    }

    /// Reaps executors that exited and starts new ones until `count` run.
    fn keep(&mut self, count: usize) {
        self.reap();
        while self.children.len() < count {
            if let Err(e) = self.spawn() {
                eprintln!("soak: {e}");
                return;
            }
        }
    }

    fn signal(&self, index: usize, signal: &str) {
        if let Some(child) = self.children.get(index) {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Applies one fault after another, each for `window`, until `stop`; returns the faults
/// applied and how many executors it started.
fn rotate_faults(
    cluster: &mut Cluster,
    rotation: &[Fault],
    executors: usize,
    window: Duration,
    stop: &AtomicBool,
    peak: &AtomicU64,
) -> (Vec<Fault>, u64) {
    let first_id = cluster.next_id;
    let mut applied = Vec::new();
    let mut turn = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let fault = rotation[turn % rotation.len()];
        let until = Instant::now() + window;
        apply(fault, cluster, turn, until, stop);
        applied.push(fault);
        // What a fault left (a stopped executor expired, a killed one) is replaced.
        cluster.reap();
        for index in 0..cluster.children.len() {
            cluster.signal(index, "-CONT");
        }
        cluster.keep(executors);
        peak.fetch_max(resident_bytes(std::process::id()), Ordering::Relaxed);
        turn += 1;
    }
    (applied, cluster.next_id - first_id)
}

/// A source address on another loopback host: 127.0.0.`2 + turn % 200`.
fn attacker_host(turn: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 2 + (turn % 200) as u8)
}

/// A connection to the driver from `host`, or none if it cannot be made now.
fn connect_from(host: Ipv4Addr, driver: SocketAddr) -> Option<TcpStream> {
    attack::connect_from(host, driver).ok()
}

fn sleep_until(until: Instant, stop: &AtomicBool) {
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn apply(fault: Fault, cluster: &mut Cluster, turn: usize, until: Instant, stop: &AtomicBool) {
    let driver = cluster.driver;
    let host = attacker_host(turn);
    match fault {
        Fault::KillExecutor => {
            let index = turn % cluster.children.len().max(1);
            if let Some(child) = cluster.children.get_mut(index) {
                let _ = child.kill();
                let _ = child.wait();
            }
            sleep_until(until, stop);
        }
        Fault::StopExecutor => {
            let index = turn % cluster.children.len().max(1);
            cluster.signal(index, "-STOP");
            sleep_until(until.min(Instant::now() + Duration::from_secs(6)), stop);
            cluster.signal(index, "-CONT");
            sleep_until(until, stop);
        }
        Fault::Garbage => {
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                if let Some(mut garbage) = connect_from(host, driver) {
                    let _ = garbage.write_all(&attack::GARBAGE);
                }
                if let Some(mut huge) = connect_from(host, driver) {
                    let _ = huge.write_all(&attack::header_announcing(u32::MAX - 7));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Fault::ForgedUpdates => {
            let Some(mut forger) = connect_from(host, driver) else {
                return;
            };
            let route = Route::OneWay {
                endpoint: DRIVER_ENDPOINT.into(),
            };
            let mut task_id = 0u64;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                for executor in 1..=cluster.next_id {
                    task_id += 1;
                    let update = Message::StatusUpdate(StatusUpdate {
                        executor_id: format!("soak-{executor}").into(),
                        task_id,
                        state: TaskState::Finished,
                        outcome: TaskOutcome::Direct {
                            value: bytes::Bytes::from_static(b"forged"),
                            metrics: Default::default(),
                            accumulators: vec![],
                        },
                    });
                    if forger.write_all(&frame_bytes(&route, &update)).is_err() {
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Fault::NeverReads => {
            // A receive window of 4 KiB, never read from after the registration.
            let Ok(mut stuck) = flint_testkit::peers::RawPeer::connect(driver, 4096) else {
                return;
            };
            let id = format!("never-reads-{turn}");
            let register = Message::RegisterExecutor(RegisterExecutor {
                executor_id: id.clone().into(),
                executor_address: "127.0.0.1:1".into(),
                endpoint_name: "Executor".into(),
                hostname: "127.0.0.1".into(),
                cores: 1024,
                log_urls: vec![],
            });
            if stuck
                .ask_and_wait(DRIVER_ENDPOINT, &register, Duration::from_secs(5))
                .is_err()
            {
                return;
            }
            let heartbeat = Message::Heartbeat(Heartbeat {
                executor_id: id.clone().into(),
                accum_updates: vec![],
                block_manager_id: BlockManagerId {
                    executor_id: id.into(),
                    host: "127.0.0.1".into(),
                    port: 1,
                },
            });
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                if stuck.ask(HEARTBEAT_ENDPOINT, &heartbeat).is_err() {
                    // Removed and closed by the driver.
                    break;
                }
                sleep_until(until.min(Instant::now() + Duration::from_secs(1)), stop);
            }
        }
        Fault::Trickle => {
            // 100 connections announcing 128 MiB frames, a byte a second each.
            let trickler =
                attack::Reconnector::start(host, driver, 100, 128 << 20, Duration::from_secs(1));
            sleep_until(until, stop);
            drop(trickler);
        }
        Fault::IdleConnections => {
            let idle = attack::IdleConnections::open(host, driver, 100);
            sleep_until(until, stop);
            drop(idle);
        }
    }
}
