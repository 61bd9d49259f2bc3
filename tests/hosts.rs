//! Hosts on a real network: the driver and each executor run as `flint` processes in
//! network namespaces of their own, joined by veth links to a bridge in the driver's
//! namespace (10.77.0.0/24), as separate machines on one switch would be. Nothing goes
//! through 127.0.0.1: each process binds and connects to its host's own address.
//!
//! Making namespaces takes root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2's `ip`; without
//! them each test says so on stderr and passes without running (any other failure to make
//! them fails it). Every wait is bounded, and a test's processes and namespaces are removed
//! when it ends, whatever happened; namespaces that a killed run left are removed by the
//! next.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::FLINT;
use flint::rpc::{Conf, RpcEnv};
use flint::wire::{Message, TaskDescription, TaskPayload, EXECUTOR_ENDPOINT};
use flint_testkit::process::wait_exit;
use flint_testkit::wait::wait_until;

const DRIVER_PORT: u16 = 7077;
const EXECUTOR_PORT: u16 = 7078;
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
const JOB_TIMEOUT: Duration = Duration::from_secs(90);
/// Where the stranger's helper test finds the executor it tries to command.
const STRANGER_TARGET: &str = "FLINT_TEST_STRANGER_TARGET";

/// Network namespaces named `flint-<pid>-<tag>-<host>`, the first one (the driver's) with
/// the bridge, and the processes started in them. Dropping it kills the processes, then
/// deletes the namespaces (which deletes their links).
struct Hosts {
    namespaces: Vec<String>,
    children: Vec<Child>,
    logs: PathBuf,
}

impl Hosts {
    /// Hosts `names[i]` at 10.77.0.(i+1); `None` (with the reason on stderr) where
    /// namespaces cannot be made here.
    fn new(tag: &str, names: &[&str]) -> Option<Hosts> {
        let prefix = format!("flint-{}-{tag}", std::process::id());
        let logs = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).unwrap();
        let mut hosts = Hosts {
            namespaces: Vec::new(),
            children: Vec::new(),
            logs,
        };
        remove_abandoned_namespaces();
        for name in names {
            let namespace = format!("{prefix}-{name}");
            if let Err(e) = ip(&["netns", "add", &namespace]) {
                let not_allowed = ["Operation not permitted", "Permission denied", "ip: "];
                if not_allowed.iter().any(|why| e.contains(why)) {
                    eprintln!("skipped: cannot make a network namespace here ({e})");
                    return None;
                }
                panic!("cannot make network namespace {namespace}: {e}");
            }
            hosts.namespaces.push(namespace);
        }
        let switch = hosts.namespaces[0].clone();
        for (i, namespace) in hosts.namespaces.iter().enumerate() {
            ip(&["-n", namespace, "link", "set", "lo", "up"]).unwrap();
            let address = format!("10.77.0.{}/24", i + 1);
            if i == 0 {
                ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]).unwrap();
                ip(&["-n", &switch, "addr", "add", &address, "dev", "br0"]).unwrap();
                ip(&["-n", &switch, "link", "set", "br0", "up"]).unwrap();
                continue;
            }
            let port = format!("v{i}");
            ip(&[
                "-n", &switch, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", namespace,
            ])
            .unwrap();
            ip(&["-n", &switch, "link", "set", &port, "master", "br0"]).unwrap();
            ip(&["-n", &switch, "link", "set", &port, "up"]).unwrap();
            ip(&["-n", namespace, "addr", "add", &address, "dev", "eth0"]).unwrap();
            ip(&["-n", namespace, "link", "set", "eth0", "up"]).unwrap();
        }
        Some(hosts)
    }

    /// The address of host `i`.
    fn address(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    /// Starts `program args` on host `i`, its stdout and stderr into files named `log`;
    /// returns its index among the children.
    fn spawn(&mut self, i: usize, log: &str, program: &Path, args: &[&str]) -> usize {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespaces[i]])
            .arg(program)
            .args(args)
            .env("FLINT_LOG", "info,flint_executor=debug")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(self.log_path(log, "out")).unwrap())
            .stderr(std::fs::File::create(self.log_path(log, "err")).unwrap());
        self.spawn_command(command)
    }

    fn spawn_command(&mut self, mut command: Command) -> usize {
        // `ip netns exec` enters the namespace and execs the program: the child is it.
        self.children.push(command.spawn().unwrap());
        self.children.len() - 1
    }

    fn log_path(&self, log: &str, stream: &str) -> PathBuf {
        self.logs.join(format!("{log}.{stream}"))
    }

    fn log(&self, log: &str, stream: &str) -> String {
        std::fs::read_to_string(self.log_path(log, stream)).unwrap_or_default()
    }

    /// Waits for child `index` to exit, at most `timeout`.
    fn wait(&mut self, index: usize, timeout: Duration) -> ExitStatus {
        wait_exit(&mut self.children[index], timeout)
    }

    /// Limits host `i`'s link to `rate` (tc's token bucket, e.g. "24mbit") each way:
    /// senders' socket buffers fill and drain at that rate, as on a slow network.
    /// (This kernel has no netem, so there is no added delay beyond the queue's.)
    fn limit(&self, i: usize, rate: &str) -> Result<(), String> {
        let tbf = [
            "root", "tbf", "rate", rate, "burst", "32kb", "latency", "200ms",
        ];
        let on = |namespace: &str, device: &str| {
            let output = Command::new("ip")
                .args([
                    "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device,
                ])
                .args(tbf)
                .output()
                .map_err(|e| format!("tc: {e}"))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
            }
        };
        on(&self.namespaces[i], "eth0")?;
        on(&self.namespaces[0], &format!("v{i}"))
    }

    /// Takes host `i`'s link to the bridge down: nothing crosses it either way, and
    /// neither end hears of it, as when a machine loses its network.
    fn cut(&self, i: usize) {
        ip(&[
            "-n",
            &self.namespaces[0],
            "link",
            "set",
            &format!("v{i}"),
            "down",
        ])
        .unwrap();
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for namespace in &self.namespaces {
            let _ = ip(&["netns", "del", namespace]);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
    }
}

/// Deletes the namespaces of test runs whose process is gone (killed before its `Drop`).
fn remove_abandoned_namespaces() {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = name
            .strip_prefix("flint-")
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        let ours = pid == std::process::id().to_string();
        if !ours && !Path::new("/proc").join(pid).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// `flint driver` on host 0 for `executors` executors and a job of `tasks` `task`s, once
/// it listens (an executor that cannot reach its driver exits at once).
fn start_driver(
    hosts: &mut Hosts,
    executors: usize,
    tasks: u32,
    task: &str,
    conf: &[&str],
) -> usize {
    let bind = format!("rpc.bindAddress={}", Hosts::address(0));
    let port = format!("rpc.port={DRIVER_PORT}");
    let executors = executors.to_string();
    let tasks = tasks.to_string();
    let mut args = vec![
        "driver",
        "--executors",
        &executors,
        "--tasks",
        &tasks,
        "--task",
        task,
        "--json",
        "--startup-timeout",
        "30",
        "--job-timeout",
        "90",
        "--conf",
        &bind,
        "--conf",
        &port,
    ];
    for pair in conf {
        args.extend(["--conf", pair]);
    }
    let driver = hosts.spawn(0, "driver", Path::new(FLINT), &args);
    wait_until("the driver listens", REGISTER_TIMEOUT, || {
        if let Some(status) = hosts.children[driver].try_wait().unwrap() {
            panic!(
                "the driver exited ({status}) before it listened: {}",
                hosts.log("driver", "err")
            );
        }
        hosts.log("driver", "err").contains("Driver listening on")
    });
    driver
}

/// `flint executor` `id` of one core on host `i`, told to listen on its host's address
/// and [`EXECUTOR_PORT`], which it does not: executors listen nowhere.
fn start_executor(hosts: &mut Hosts, i: usize, id: &str, conf: &[&str]) -> usize {
    let driver = format!("{}:{DRIVER_PORT}", Hosts::address(0));
    let bind = format!("rpc.bindAddress={}", Hosts::address(i));
    let port = format!("rpc.port={EXECUTOR_PORT}");
    let hostname = format!("host-{id}");
    let mut args = vec![
        "executor",
        "--driver",
        &driver,
        "--cores",
        "1",
        "--executor-id",
        id,
        "--hostname",
        &hostname,
        "--conf",
        &bind,
        "--conf",
        &port,
    ];
    for pair in conf {
        args.extend(["--conf", pair]);
    }
    hosts.spawn(i, id, Path::new(FLINT), &args)
}

/// Tasks the executor's log says it was given.
fn tasks_assigned(log: &str) -> usize {
    log.matches("Got assigned task ").count()
}

/// The value of a numeric field of the driver's one-line JSON report.
fn json_u64(report: &str, field: &str) -> u64 {
    let key = format!("\"{field}\":");
    let start = report
        .find(&key)
        .unwrap_or_else(|| panic!("no {field} in {report}"))
        + key.len();
    let digits: String = report[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

/// A job runs on executors on two other hosts; a third host that is not the driver cannot
/// command them, as it cannot even connect to them; when the job ends every process exits
/// cleanly.
#[test]
fn a_job_runs_on_executors_on_other_hosts_and_only_the_driver_commands_them() {
    let Some(mut hosts) = Hosts::new("job", &["driver", "a", "b", "stranger"]) else {
        return;
    };
    // Tasks of 5 ms leave the job running (about 2.5 s) long enough for the stranger's
    // attempt.
    // About 10 s of tasks: the stranger, started in its own namespace, acts well within.
    let driver = start_driver(&mut hosts, 2, 1_000, "sleep:20", &[]);
    let a = start_executor(&mut hosts, 1, "a", &[]);
    let b = start_executor(&mut hosts, 2, "b", &[]);
    wait_until("executor a ran tasks", REGISTER_TIMEOUT, || {
        tasks_assigned(&hosts.log("a", "err")) > 0
    });

    // The stranger: this test binary's helper below, on host 3, asks executor a to launch
    // a task and to stop, at the address and port the executor was told to listen on.
    let target = format!("{}:{EXECUTOR_PORT}", Hosts::address(1));
    let mut stranger = Command::new("ip");
    stranger
        .args(["netns", "exec", &hosts.namespaces[3]])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "stranger_on_another_host",
            "--ignored",
            "--nocapture",
        ])
        .env(STRANGER_TARGET, &target)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(hosts.log_path("stranger", "out")).unwrap())
        .stderr(std::fs::File::create(hosts.log_path("stranger", "err")).unwrap());
    let stranger = hosts.spawn_command(stranger);
    let status = hosts.wait(stranger, Duration::from_secs(60));
    let said = hosts.log("stranger", "out") + &hosts.log("stranger", "err");
    assert!(status.success(), "the stranger's helper failed: {said}");
    assert_eq!(
        said.matches("refused: ").count(),
        2,
        "the stranger's commands were not both refused: {said}"
    );
    assert_eq!(
        said.matches("cannot connect to").count(),
        2,
        "the executor took a connection: {said}"
    );

    let status = hosts.wait(driver, JOB_TIMEOUT);
    let report = hosts.log("driver", "out");
    assert!(status.success(), "{report}{}", hosts.log("driver", "err"));
    assert_eq!(json_u64(&report, "tasks"), 1_000, "{report}");
    assert_eq!(json_u64(&report, "executors"), 2, "{report}");
    assert_eq!(json_u64(&report, "failed_attempts"), 0, "{report}");
    assert_eq!(json_u64(&report, "duplicate_results"), 0, "{report}");
    // The driver stopped its executors, over the network, and each had run a share.
    for (executor, id) in [(a, "a"), (b, "b")] {
        let status = hosts.wait(executor, Duration::from_secs(30));
        let log = hosts.log(id, "err");
        assert!(status.success(), "executor {id}: {status}: {log}");
        assert!(log.contains("Driver commanded a shutdown"), "{log}");
    }
    let (on_a, on_b) = (
        tasks_assigned(&hosts.log("a", "err")),
        tasks_assigned(&hosts.log("b", "err")),
    );
    assert_eq!(on_a + on_b, 1_000, "a ran {on_a}, b ran {on_b}");
    assert!(on_a >= 100 && on_b >= 100, "a ran {on_a}, b ran {on_b}");
    let log = hosts.log("a", "err");
    assert!(!log.contains("from a peer that is not the driver"), "{log}");
    assert!(!hosts.log("driver", "err").contains("Lost executor"));
}

/// Run by the test above on another host: asks an executor at $FLINT_TEST_STRANGER_TARGET
/// to launch a task and to stop, and prints each refusal. Passes without doing anything
/// when that is not set.
#[test]
#[ignore = "a helper that the multi-host test runs on a host of its own"]
fn stranger_on_another_host() {
    let Ok(target) = std::env::var(STRANGER_TARGET) else {
        return;
    };
    let target: SocketAddr = target.parse().unwrap();
    let env = RpcEnv::client(&Conf::new()).unwrap();
    let executor = env.handle().endpoint_ref(target, EXECUTOR_ENDPOINT);
    let launch = TaskDescription {
        task_id: 1_000_000,
        attempt_number: 0,
        executor_id: "a".into(),
        name: "task 0.0 in stage 9.0 (TID 1000000)".into(),
        index: 0,
        partition_id: 0,
        extras: None,
        cpus: 1,
        serialized_task: TaskPayload::encode("noop", b"").unwrap(),
    };
    for message in [Message::LaunchTask(launch), Message::StopExecutor] {
        let kind = message.kind();
        match executor.ask_timeout(&message, Duration::from_secs(20)) {
            Ok(_) => panic!("the executor took {kind} from a stranger"),
            Err(e) => println!("refused: {kind}: {e}"),
        }
    }
}

/// A host that loses its network mid-job: the driver hears nothing from its executor and
/// removes it once `network.timeout` passes, the lost task runs again on the other host,
/// and the cut-off executor, whose heartbeats go unanswered, exits with the seeds' code 56.
#[test]
fn an_executor_whose_host_loses_the_network_is_removed_and_its_task_runs_elsewhere() {
    let Some(mut hosts) = Hosts::new("cut", &["driver", "a", "b"]) else {
        return;
    };
    let timeouts = [
        "network.timeout=2s",
        "executor.heartbeatInterval=200ms",
        "rpc.askTimeout=1s",
        "executor.heartbeat.maxFailures=3",
    ];
    let driver = start_driver(&mut hosts, 2, 1_000, "sleep:2", &timeouts);
    let a = start_executor(&mut hosts, 1, "a", &timeouts);
    // b keeps the default executor.heartbeat.maxFailures: three late answers in a row on
    // a busy machine must not end the executor the job relies on.
    let b = start_executor(&mut hosts, 2, "b", &timeouts[..3]);
    wait_until("executor a ran 50 tasks", REGISTER_TIMEOUT, || {
        tasks_assigned(&hosts.log("a", "err")) >= 50
    });
    hosts.cut(1);
    let cut_at = Instant::now();
    wait_until("the driver removes executor a", JOB_TIMEOUT, || {
        hosts.log("driver", "err").contains("Removing executor a")
    });
    // Its last heartbeat came about one interval (200 ms) before the cut, more on a busy
    // machine: half the timeout is a bound that holds (the driver's log names the
    // timeout it applied).
    let removed_after = cut_at.elapsed();
    assert!(
        removed_after >= Duration::from_millis(1_000),
        "removed {removed_after:?} after the cut"
    );

    let status = hosts.wait(driver, JOB_TIMEOUT);
    let report = hosts.log("driver", "out");
    let driver_log = hosts.log("driver", "err");
    assert!(status.success(), "{report}{driver_log}");
    assert_eq!(json_u64(&report, "tasks"), 1_000, "{report}");
    assert_eq!(json_u64(&report, "duplicate_results"), 0, "{report}");
    assert!(json_u64(&report, "failed_attempts") >= 1, "{report}");
    assert!(
        driver_log.contains("Removing executor a with no recent heartbeats")
            && driver_log.contains("Lost executor a on host-a: Executor heartbeat timed out after"),
        "{driver_log}"
    );

    let status = hosts.wait(a, Duration::from_secs(60));
    assert_eq!(status.code(), Some(56), "{}", hosts.log("a", "err"));
    let status = hosts.wait(b, Duration::from_secs(30));
    assert!(status.success(), "{}", hosts.log("b", "err"));
}

/// Results larger than a message cross a slow link whole: an executor on a 24 Mbit/s link
/// returns 2 MiB results under a 1 MiB message limit, so each goes through the block
/// fetch in chunks, behind which its heartbeats and status updates queue; the job ends
/// with no failure and no executor lost, in the time the link's rate says.
#[test]
fn large_results_cross_a_slow_link_through_the_block_fetch() {
    let Some(mut hosts) = Hosts::new("slow", &["driver", "a"]) else {
        return;
    };
    if let Err(e) = hosts.limit(1, "24mbit") {
        eprintln!("skipped: cannot limit a link's rate here ({e})");
        return;
    }
    let conf = [
        "rpc.message.maxSize=1",
        "network.timeout=10s",
        "executor.heartbeatInterval=500ms",
    ];
    let tasks = 6u32;
    let driver = start_driver(&mut hosts, 1, tasks, "large-result:2m", &conf);
    let a = start_executor(&mut hosts, 1, "a", &conf);

    let status = hosts.wait(driver, JOB_TIMEOUT);
    let report = hosts.log("driver", "out");
    let driver_log = hosts.log("driver", "err");
    assert!(status.success(), "{report}{driver_log}");
    assert_eq!(json_u64(&report, "tasks"), u64::from(tasks), "{report}");
    assert_eq!(json_u64(&report, "failed_attempts"), 0, "{report}");
    assert!(!driver_log.contains("Lost executor"), "{driver_log}");
    // 12 MiB at 24 Mbit/s take 4.2 s: the link was as slow as it was made.
    let seconds: f64 = {
        let key = "\"seconds\":";
        let start = report.find(key).unwrap() + key.len();
        let end = start + report[start..].find(',').unwrap();
        report[start..end].parse().unwrap()
    };
    assert!(
        seconds >= 3.5,
        "{seconds} s: the link was not limited: {report}"
    );
    let log = hosts.log("a", "err");
    assert_eq!(
        log.matches("bytes result sent via BlockManager").count(),
        tasks as usize,
        "{log}"
    );
    let status = hosts.wait(a, Duration::from_secs(30));
    assert!(status.success(), "{status}: {log}");
}
