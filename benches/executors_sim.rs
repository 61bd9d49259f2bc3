//! A driver in front of many executors: the driver in this process, N simulated
//! executors ([`flint::bench::sim`]) on one thread of a child process (this program run
//! again), for N = 2, 100 and 1,000 by default. The same total of cores (1,000 by
//! default, so the same tasks in flight) is shared among the N executors. For each N:
//!
//! - registering: from the child's start until the driver has all N;
//! - throughput: a job of noop tasks (200,000 by default) answered at once;
//! - turnaround: per executor, from a status it sent to the next launch it got, p50 and
//!   p99 (the driver's share of a task's launch latency);
//! - memory: the driver process's resident set after the jobs (each N runs in a driver
//!   process of its own), and what each executor beyond the first row's N adds to it;
//! - heartbeats: the driver process's CPU over 5 idle seconds with every executor
//!   heartbeating at 1 s, as a share of one CPU.
//!
//! `cargo bench --bench executors_sim [-- --executors 2,100,1000 --tasks 200000 --cores 1000]`

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flint::bench::sim::{SimConfig, SimExecutors};
use flint::rpc::Conf;
use flint::scheduler::{Driver, TaskSet};
use flint::wire::TaskPayload;
use flint_testkit::process::{cpu_time, resident_bytes};

/// Set in the executors' child: `driver-address executors cores heartbeat-ms`.
const CHILD: &str = "FLINT_SIM_EXECUTORS";
/// Set in the driver's child: `executors total-cores tasks`. Each N runs in a process
/// of its own, so that its resident set is its own.
const DRIVER_CHILD: &str = "FLINT_SIM_DRIVER";
/// Set in the raw baseline's "driver": `executors total-cores tasks`.
const RAW_DRIVER: &str = "FLINT_SIM_RAW_DRIVER";
/// Set in the raw baseline's "executors": `driver-address executors`.
const RAW_EXECUTORS: &str = "FLINT_SIM_RAW_EXECUTORS";
/// Bytes of a launch and of a status in the raw baseline: about those of a noop task's
/// `LaunchTask` and `StatusUpdate` frames.
const RAW_LAUNCH: usize = 256;
const RAW_STATUS: usize = 160;
const HEARTBEAT: Duration = Duration::from_secs(1);
const IDLE: Duration = Duration::from_secs(5);

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec);
    }
    if let Ok(spec) = std::env::var(RAW_EXECUTORS) {
        let fields: Vec<&str> = spec.split_whitespace().collect();
        let _ = flint::rpc::raise_descriptor_limit();
        raw::answer(
            fields[0].parse().expect("an address"),
            fields[1].parse().expect("a count"),
        );
        return;
    }
    if let Ok(spec) = std::env::var(RAW_DRIVER) {
        let fields: Vec<u64> = spec
            .split_whitespace()
            .map(|f| f.parse().expect("a number"))
            .collect();
        let _ = flint::rpc::raise_descriptor_limit();
        println!(
            "{}",
            raw::drive(fields[0] as usize, fields[1] as u32, fields[2])
        );
        return;
    }
    if let Ok(spec) = std::env::var(DRIVER_CHILD) {
        let fields: Vec<u64> = spec
            .split_whitespace()
            .map(|f| f.parse().expect("a number"))
            .collect();
        let _ = flint::rpc::raise_descriptor_limit();
        let row = measure(fields[0] as usize, fields[1] as u32, fields[2] as u32);
        println!(
            "{} {} {} {} {} {} {}",
            row.cores,
            row.register.as_secs_f64(),
            row.tasks_per_sec,
            row.turnaround_p50_us,
            row.turnaround_p99_us,
            row.rss_bytes,
            row.heartbeat_cpu_percent
        );
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes --bench; anything else is ours.
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let counts: Vec<usize> = value("--executors")
        .unwrap_or_else(|| "2,100,1000".into())
        .split(',')
        .map(|n| n.trim().parse().expect("--executors: a list of counts"))
        .collect();
    let tasks: u32 = value("--tasks").map_or(200_000, |t| t.parse().expect("--tasks"));
    let total_cores: u32 = value("--cores").map_or(1_000, |c| c.parse().expect("--cores"));
    println!(
        "| executors | cores each | register (ms) | tasks/s | raw TCP tasks/s | turnaround p50 (us) | p99 (us) | driver RSS (MiB) | RSS per executor over the first row's (KiB) | heartbeat CPU (% of one) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut first: Option<(usize, f64)> = None;
    for &executors in &counts {
        let output = Command::new(std::env::current_exe().expect("this program"))
            .env(DRIVER_CHILD, format!("{executors} {total_cores} {tasks}"))
            .stderr(Stdio::inherit())
            .output()
            .expect("the driver's process");
        assert!(
            output.status.success(),
            "N = {executors}: {}",
            output.status
        );
        let line = String::from_utf8_lossy(&output.stdout);
        let f: Vec<f64> = line
            .split_whitespace()
            .map(|f| f.parse().expect("a number"))
            .collect();
        let rss = f[5];
        let raw = Command::new(std::env::current_exe().expect("this program"))
            .env(RAW_DRIVER, format!("{executors} {total_cores} {tasks}"))
            .stderr(Stdio::inherit())
            .output()
            .expect("the raw baseline's process");
        assert!(raw.status.success(), "raw, N = {executors}: {}", raw.status);
        let raw_tps: f64 = String::from_utf8_lossy(&raw.stdout)
            .trim()
            .parse()
            .expect("tasks/s");
        let per_executor = match first {
            Some((n, base)) if executors > n => {
                format!("{:.1}", (rss - base) / 1024.0 / (executors - n) as f64)
            }
            _ => "-".into(),
        };
        first.get_or_insert((executors, rss));
        println!(
            "| {} | {} | {:.1} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {:.2} |",
            executors,
            f[0],
            f[1] * 1e3,
            f[2],
            raw_tps,
            f[3],
            f[4],
            rss / 1048576.0,
            per_executor,
            f[6],
        );
    }
}

struct Row {
    cores: u32,
    register: Duration,
    tasks_per_sec: f64,
    turnaround_p50_us: f64,
    turnaround_p99_us: f64,
    /// The driver process's resident set after the jobs.
    rss_bytes: u64,
    heartbeat_cpu_percent: f64,
}

fn measure(executors: usize, total_cores: u32, tasks: u32) -> Row {
    let cores = (total_cores / executors as u32).max(1);
    let max_connections = (executors + 64).to_string();
    let conf = Conf::from_pairs([
        format!("rpc.io.maxConnections={max_connections}"),
        format!("rpc.io.maxConnectionsPerHost={max_connections}"),
        format!("executor.maxCores={}", cores.max(1024)),
    ])
    .expect("conf");
    let driver = Driver::standalone(&conf).expect("driver");
    let pid = std::process::id();
    let started = Instant::now();
    let mut child = spawn_child(driver.address(), executors, cores);
    driver
        .wait_for_executors(executors, Duration::from_secs(120))
        .expect("the simulated executors register");
    let register = started.elapsed();
    let payload = TaskPayload::encode("noop", b"").expect("a valid name");
    // A first job warms the driver up (its buffers and tables grow to the load).
    let warm = (cores * executors as u32 * 10).min(tasks);
    driver
        .submit(TaskSet::new(0, 0, warm, payload.clone()))
        .expect("submit")
        .wait(Duration::from_secs(600))
        .expect("the warm-up job");
    reset_child(&mut child);
    let outcome = driver
        .submit(TaskSet::new(1, 1, tasks, payload))
        .expect("submit")
        .wait(Duration::from_secs(600))
        .expect("the job");
    let tasks_per_sec = f64::from(tasks) / outcome.elapsed.as_secs_f64();
    let rss_bytes = resident_bytes(pid);
    let cpu_before = cpu_time(pid);
    std::thread::sleep(IDLE);
    let idle_cpu = cpu_time(pid).saturating_sub(cpu_before);
    let (p50, p99) = finish_child(&mut child);
    driver.stop().expect("stop");
    Row {
        cores,
        register,
        tasks_per_sec,
        turnaround_p50_us: p50,
        turnaround_p99_us: p99,
        rss_bytes,
        heartbeat_cpu_percent: idle_cpu.as_secs_f64() / IDLE.as_secs_f64() * 100.0,
    }
}

fn spawn_child(driver: SocketAddr, executors: usize, cores: u32) -> Child {
    Command::new(std::env::current_exe().expect("this program"))
        .env_remove(DRIVER_CHILD)
        .env(
            CHILD,
            format!("{driver} {executors} {cores} {}", HEARTBEAT.as_millis()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the simulated executors' process")
}

/// Has the child forget its figures so far, and waits until it has.
fn reset_child(child: &mut Child) {
    let stdin = child.stdin.as_mut().expect("piped");
    writeln!(stdin, "reset").expect("the child's stdin");
    stdin.flush().expect("the child's stdin");
    assert_eq!(read_line(child).trim(), "reset", "the child's answer");
}

/// A line of the child's stdout.
fn read_line(child: &mut Child) -> String {
    let stdout = child.stdout.as_mut().expect("piped");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte: a buffered reader would keep what follows the line.
    while std::io::Read::read(stdout, &mut byte).expect("the child's stdout") == 1 {
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line).into_owned()
}

/// Ends the child (its stdin closes) and reads its turnaround percentiles.
fn finish_child(child: &mut Child) -> (f64, f64) {
    drop(child.stdin.take());
    let line = read_line(child);
    let _ = child.wait();
    let fields: Vec<f64> = line
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    (fields[0], fields[1])
}

/// The child: simulated executors until stdin closes, then `p50-us p99-us` on stdout.
fn child(spec: &str) {
    let fields: Vec<&str> = spec.split_whitespace().collect();
    let config = SimConfig {
        driver: fields[0].parse().expect("the driver's address"),
        executors: fields[1].parse().expect("a count"),
        cores: fields[2].parse().expect("cores"),
        heartbeat_interval: Duration::from_millis(fields[3].parse().expect("milliseconds")),
    };
    let _ = flint::rpc::raise_descriptor_limit();
    let stop = Arc::new(AtomicBool::new(false));
    let resets = Arc::new(AtomicU64::new(0));
    let (watch_stop, watch_resets) = (stop.clone(), resets.clone());
    // "reset" lines, then the end of stdin.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(line) if line.trim() == "reset" => {
                    watch_resets.fetch_add(1, Ordering::AcqRel);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        watch_stop.store(true, Ordering::Relaxed);
    });
    let report = SimExecutors::connect(&config)
        .expect("connect")
        .run_with_resets(&stop, &resets, || {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "reset");
            let _ = out.flush();
        })
        .expect("run");
    let us = |q: f64| report.turnaround_ns.value_at_quantile(q) as f64 / 1e3;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{:.1} {:.1}", us(0.5), us(0.99));
}

/// The raw TCP baseline: the same schedule with no framework. A "driver" sends fixed-size
/// launches over N connections, `cores` outstanding on each, and sends the next launch
/// on a connection as each fixed-size status comes back; "executors" in another process,
/// on one thread, answer each launch at once. Both ends are one thread of mio.
mod raw {
    use super::*;
    use mio::net::{TcpListener, TcpStream};
    use mio::{Events, Interest, Poll, Token};
    use std::io::{ErrorKind, Read};

    struct Conn {
        stream: TcpStream,
        inbound: usize,
        out: Vec<u8>,
    }

    /// Writes what `conn.out` holds as far as the socket takes it.
    fn flush(conn: &mut Conn) {
        while !conn.out.is_empty() {
            match conn.stream.write(&conn.out) {
                Ok(n) => {
                    conn.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("raw write: {e}"),
            }
        }
    }

    /// Reads what there is; returns the whole messages of `size` bytes that came.
    fn read(conn: &mut Conn, buf: &mut [u8], size: usize) -> Option<usize> {
        loop {
            match conn.stream.read(buf) {
                Ok(0) => return None,
                Ok(n) => conn.inbound += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        let whole = conn.inbound / size;
        conn.inbound %= size;
        Some(whole)
    }

    /// The "driver": returns launches answered per second, warm-up excluded.
    pub fn drive(executors: usize, total_cores: u32, tasks: u64) -> f64 {
        let cores = (total_cores / executors as u32).max(1) as u64;
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = listener.local_addr().unwrap();
        let mut child = Command::new(std::env::current_exe().expect("this program"))
            .env_remove(RAW_DRIVER)
            .env(RAW_EXECUTORS, format!("{address} {executors}"))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the raw executors' process");
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut listener, Token(usize::MAX), Interest::READABLE)
            .unwrap();
        let mut conns: Vec<Conn> = Vec::with_capacity(executors);
        let mut events = Events::with_capacity(1024);
        while conns.len() < executors {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            while let Ok((mut stream, _)) = listener.accept() {
                stream.set_nodelay(true).unwrap();
                let token = Token(conns.len());
                poll.registry()
                    .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                    .unwrap();
                conns.push(Conn {
                    stream,
                    inbound: 0,
                    out: Vec::new(),
                });
            }
        }
        let warm = (cores * executors as u64 * 10).min(tasks);
        let total = warm + tasks;
        let mut sent = 0u64;
        let mut answered = 0u64;
        for conn in &mut conns {
            for _ in 0..cores {
                if sent < total {
                    conn.out.extend_from_slice(&[0x4C; RAW_LAUNCH]);
                    sent += 1;
                }
            }
            flush(conn);
        }
        let mut buf = vec![0u8; 64 << 10];
        let mut started = None;
        while answered < total {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            for event in events.iter() {
                let conn = &mut conns[event.token().0];
                if event.is_readable() {
                    let statuses = read(conn, &mut buf, RAW_STATUS).expect("the executors stay");
                    answered += statuses as u64;
                    for _ in 0..statuses {
                        if sent < total {
                            conn.out.extend_from_slice(&[0x4C; RAW_LAUNCH]);
                            sent += 1;
                        }
                    }
                }
                flush(conn);
            }
            if started.is_none() && answered >= warm {
                started = Some((Instant::now(), answered));
            }
        }
        let (at, from) = started.expect("the warm-up ended");
        let rate = (answered - from) as f64 / at.elapsed().as_secs_f64();
        drop(conns);
        let _ = child.wait();
        rate
    }

    /// The "executors": answer every launch with a status until the driver closes.
    pub fn answer(driver: SocketAddr, executors: usize) {
        let mut poll = Poll::new().unwrap();
        let mut conns: Vec<Conn> = (0..executors)
            .map(|i| {
                let std_stream = std::net::TcpStream::connect(driver).unwrap();
                std_stream.set_nodelay(true).unwrap();
                std_stream.set_nonblocking(true).unwrap();
                let mut stream = TcpStream::from_std(std_stream);
                poll.registry()
                    .register(
                        &mut stream,
                        Token(i),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .unwrap();
                Conn {
                    stream,
                    inbound: 0,
                    out: Vec::new(),
                }
            })
            .collect();
        let mut events = Events::with_capacity(1024);
        let mut buf = vec![0u8; 64 << 10];
        let mut open = executors;
        while open > 0 {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            for event in events.iter() {
                let conn = &mut conns[event.token().0];
                if event.is_readable() {
                    match read(conn, &mut buf, RAW_LAUNCH) {
                        Some(launches) => {
                            for _ in 0..launches {
                                conn.out.extend_from_slice(&[0x53; RAW_STATUS]);
                            }
                        }
                        None => {
                            open -= 1;
                            let _ = poll.registry().deregister(&mut conn.stream);
                            continue;
                        }
                    }
                }
                flush(conn);
            }
        }
    }
}
