//! End to end: a driver in this process, `flint executor` processes on 127.0.0.1, real
//! sockets. Every wait is bounded; every process started is killed when its test ends.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{spawn_executor, task, Recorder, FLINT};
use flint::job::{local_cluster, run_job, JobError, JobHooks, JobSpec};
use flint::rpc::Conf;
use flint::scheduler::cluster_manager::ClusterManagerError;
use flint::scheduler::{
    ClusterManager, Driver, DriverError, ExitedExecutor, LocalClusterManager, SchedulerEvent,
    TaskSet, TaskSetError,
};
use flint::wire::TaskState;
use flint_testkit::process::{wait_exit, Processes};
use flint_testkit::wait::wait_until;

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// A local cluster manager the test can still look into once the driver owns it.
#[derive(Clone)]
struct SharedCluster(Arc<Mutex<LocalClusterManager>>);

impl SharedCluster {
    fn new(cores: u32, conf: &Conf) -> Self {
        SharedCluster::of(local_cluster(FLINT, cores, conf))
    }

    fn of(manager: LocalClusterManager) -> Self {
        SharedCluster(Arc::new(Mutex::new(manager)))
    }

    fn pid(&self, executor_id: &str) -> u32 {
        self.0
            .lock()
            .unwrap()
            .pid(executor_id)
            .unwrap_or_else(|| panic!("no process for executor {executor_id}"))
    }
}

impl ClusterManager for SharedCluster {
    fn start(&mut self, driver: SocketAddr) {
        self.0.lock().unwrap().start(driver)
    }
    fn request_total_executors(&mut self, total: u32) -> Result<bool, ClusterManagerError> {
        self.0.lock().unwrap().request_total_executors(total)
    }
    fn kill_executors(&mut self, ids: &[String]) -> Result<bool, ClusterManagerError> {
        self.0.lock().unwrap().kill_executors(ids)
    }
    fn exited_executors(&mut self) -> Vec<ExitedExecutor> {
        self.0.lock().unwrap().exited_executors()
    }
    fn reports_exits(&self) -> bool {
        self.0.lock().unwrap().reports_exits()
    }
    fn stopping(&mut self, registered: &[String]) {
        self.0.lock().unwrap().stopping(registered)
    }
    fn stop(&mut self, grace: Duration) {
        self.0.lock().unwrap().stop(grace)
    }
}

/// A local cluster manager that starts at most `cap` executors, whatever is asked.
struct Capped(LocalClusterManager, u32);

impl ClusterManager for Capped {
    fn start(&mut self, driver: SocketAddr) {
        self.0.start(driver)
    }
    fn request_total_executors(&mut self, total: u32) -> Result<bool, ClusterManagerError> {
        self.0.request_total_executors(total.min(self.1))
    }
    fn kill_executors(&mut self, ids: &[String]) -> Result<bool, ClusterManagerError> {
        self.0.kill_executors(ids)
    }
    fn exited_executors(&mut self) -> Vec<ExitedExecutor> {
        self.0.exited_executors()
    }
    fn stopping(&mut self, registered: &[String]) {
        self.0.stopping(registered)
    }
    fn stop(&mut self, grace: Duration) {
        self.0.stop(grace)
    }
}

fn conf(pairs: &[&str]) -> Conf {
    Conf::from_pairs(pairs.iter().copied()).unwrap()
}

/// A driver with `executors` local executor processes of `cores` cores, registered.
fn cluster(conf: &Conf, executors: usize, cores: u32) -> (Driver, SharedCluster, Recorder) {
    let shared = SharedCluster::new(cores, conf);
    let driver = Driver::start(conf, Box::new(shared.clone())).unwrap();
    let recorder = Recorder::default();
    driver.add_listener(recorder.clone());
    driver.request_total_executors(executors as i64).unwrap();
    driver
        .wait_for_executors(executors, REGISTER_TIMEOUT)
        .unwrap();
    (driver, shared, recorder)
}

#[test]
fn a_100_000_task_noop_job_records_every_result_once() {
    let conf = conf(&[]);
    let spec = JobSpec {
        executors: 2,
        cores: 1,
        tasks: 100_000,
        task: "noop".parse().unwrap(),
        startup_timeout: REGISTER_TIMEOUT,
        job_timeout: JOB_TIMEOUT,
    };
    let report = run_job(
        &conf,
        &spec,
        Box::new(local_cluster(FLINT, 1, &conf)),
        JobHooks::default(),
    )
    .unwrap();
    assert_eq!(report.tasks, 100_000);
    assert_eq!(
        report.latency_us.count, 100_000,
        "one latency sample per task: {report:?}"
    );
    assert_eq!(report.duplicate_results, 0, "no result recorded twice");
    assert_eq!(report.failed_attempts, 0);
    assert_eq!(report.executors, 2);

    // And through the API, with each result checked by index.
    let (driver, _cluster, _) = cluster(&conf, 2, 1);
    let outcome = driver
        .submit(TaskSet::new(1, 1, 20_000, task("echo", "r")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), 20_000);
    assert!(outcome.results.iter().all(|r| &r[..] == b"r"));
    assert_eq!(outcome.duplicate_results, 0);
    driver.stop().unwrap();
}

#[test]
fn a_killed_executor_s_tasks_run_again_and_its_removal_carries_the_reason() {
    let conf = conf(&[]);
    let (driver, cluster, recorder) = cluster(&conf, 2, 1);
    let handle = driver
        .submit(TaskSet::new(0, 0, 200, task("sleep", "10")))
        .unwrap();
    wait_until("some tasks finished", JOB_TIMEOUT, || {
        handle.progress().0 >= 20
    });
    let victim = recorder
        .task_starts
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .1
        .clone();
    let pid = cluster.pid(&victim);
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());

    let outcome = handle.wait(JOB_TIMEOUT).unwrap();
    assert_eq!(outcome.results.len(), 200);
    assert!(
        outcome.failed_attempts >= 1,
        "the task running on the killed executor ran again"
    );
    // The driver started the process: its exit is the reason, not the seeds' guess for
    // a closed connection.
    let removed = recorder.removed();
    // The loss names the exit code too (128 + 9), which the cluster manager's text
    // does not.
    let killed = format!("executor {victim} was killed by signal 9 (exit code 137)");
    assert!(
        removed
            .iter()
            .any(|(id, reason)| id == &victim && *reason == killed),
        "{removed:?}"
    );
    let lost: Vec<_> = recorder
        .task_ends
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, executor, state)| executor == &victim && *state == TaskState::Lost)
        .cloned()
        .collect();
    assert!(!lost.is_empty(), "its running task ended LOST");
    driver.stop().unwrap();
}

#[test]
fn a_stopped_executor_is_expired_after_the_network_timeout_and_its_tasks_rescheduled() {
    let conf = conf(&[
        "network.timeout=1s",
        "executor.heartbeatInterval=100ms",
        "rpc.askTimeout=5s",
    ]);
    let (driver, cluster, recorder) = cluster(&conf, 2, 1);
    let handle = driver
        .submit(TaskSet::new(0, 0, 100, task("sleep", "20")))
        .unwrap();
    wait_until("some tasks finished", JOB_TIMEOUT, || {
        handle.progress().0 >= 10
    });
    let victim = recorder
        .task_starts
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .1
        .clone();
    let pid = cluster.pid(&victim).to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let stopped_at = Instant::now();

    let outcome = handle.wait(JOB_TIMEOUT).unwrap();
    assert_eq!(outcome.results.len(), 100);
    let removed = recorder.removed();
    let (_, reason) = removed
        .iter()
        .find(|(id, _)| id == &victim)
        .unwrap_or_else(|| panic!("executor {victim} was not removed: {removed:?}"));
    assert!(
        reason.starts_with("Executor heartbeat timed out after "),
        "{reason}"
    );
    assert!(stopped_at.elapsed() >= Duration::from_secs(1));
    // The heartbeats (every 100 ms) carried the running tasks' metrics to listeners.
    assert!(recorder.events.lock().unwrap().iter().any(|e| matches!(
        e,
        SchedulerEvent::ExecutorMetricsUpdate { updates, .. }
            if updates.iter().any(|u| u.metrics.run_time_ns > 0)
    )));
    // Its process was killed (a stopped process, too) and a replacement registered.
    wait_until(
        "the stopped executor was killed",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |stat| stat.contains(") Z "))
        },
    );
    wait_until("a replacement registered", REGISTER_TIMEOUT, || {
        recorder.added() >= 3
    });
    driver.stop().unwrap();
}

#[test]
fn a_second_executor_with_the_same_id_is_refused_with_the_seeds_text() {
    let driver = Driver::standalone(&conf(&[])).unwrap();
    let mut processes = Processes(vec![spawn_executor(
        driver.address(),
        "7",
        &[],
        Stdio::piped(),
    )]);
    driver.wait_for_executors(1, REGISTER_TIMEOUT).unwrap();
    processes
        .0
        .push(spawn_executor(driver.address(), "7", &[], Stdio::piped()));
    let status = wait_exit(&mut processes.0[1], REGISTER_TIMEOUT);
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(processes.0[1].stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("Duplicate executor ID: 7"), "{stderr}");
    assert_eq!(driver.executor_ids(), ["7"], "the first one stays");
    driver.stop().unwrap();
}

/// An executor that does not authenticate with a driver that requires it, that does
/// with one that does not, or that has another secret, exits with its own code (77) and
/// says why in its last line: the driver tells it before it closes, or it finds the
/// driver's proof wrong itself. Not "Driver ... disassociated", which hid the cause.
#[test]
fn an_executor_turned_away_by_the_driver_s_authentication_says_why() {
    let secret = ["authenticate=true", "authenticate.secret=correct horse"];
    let other_secret = ["authenticate=true", "authenticate.secret=battery staple"];
    for (driver_conf, executor_conf, words) in [
        (
            &secret[..],
            &[][..],
            "the peer closed the connection, saying: authentication failed: expected \
             AuthChallenge, got RegisterExecutor",
        ),
        (
            &[][..],
            &secret[..],
            "the peer closed the connection, saying: the peer sent AuthChallenge, but \
             authenticate is false here",
        ),
        (
            &secret[..],
            &other_secret[..],
            "closed: authentication failed: the peer's proof does not match the shared \
             secret (authenticate.secret)",
        ),
    ] {
        let driver = Driver::standalone(&conf(driver_conf)).unwrap();
        let mut processes = Processes(vec![spawn_executor(
            driver.address(),
            "1",
            executor_conf,
            Stdio::piped(),
        )]);
        let status = wait_exit(&mut processes.0[0], REGISTER_TIMEOUT);
        let mut stderr = String::new();
        std::io::Read::read_to_string(processes.0[0].stderr.as_mut().unwrap(), &mut stderr)
            .unwrap();
        assert_eq!(
            status.code(),
            Some(flint_executor::AUTHENTICATION_FAILED_CODE),
            "{stderr}"
        );
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains("Executor self-exiting due to : Cannot register with driver: ")
                && last.contains(words),
            "{stderr}"
        );
        assert!(driver.executor_ids().is_empty());
        driver.stop().unwrap();
    }
}

/// With `network.crypto.enabled=true` a job runs on executor processes over sealed
/// connections, to the driver and between executors: small results, and large ones
/// fetched from an executor's block server, arrive whole and once. An executor that does
/// not encrypt is turned away by such a driver at the handshake, says why, and exits with
/// the code of a failed authentication.
#[test]
fn a_job_runs_over_sealed_connections_and_an_executor_in_clear_is_told_why_not() {
    let sealed = [
        "authenticate=true",
        "authenticate.secret=correct horse",
        "network.crypto.enabled=true",
        "rpc.message.maxSize=1m",
    ];
    let (driver, _cluster, _) = cluster(&conf(&sealed), 2, 1);
    let outcome = driver
        .submit(TaskSet::new(0, 0, 200, task("echo", "sealed")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), 200);
    assert!(outcome
        .results
        .iter()
        .all(|result| &result[..] == b"sealed"));
    let outcome = driver
        .submit(TaskSet::new(1, 1, 2, task("large-result", "3m")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), 2);
    for result in &outcome.results {
        assert_eq!(result.len(), 3 << 20);
        assert!(result
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8));
    }

    let mut processes = Processes(vec![spawn_executor(
        driver.address(),
        "in-clear",
        &sealed[..2],
        Stdio::piped(),
    )]);
    let status = wait_exit(&mut processes.0[0], REGISTER_TIMEOUT);
    // Refused at the handshake: an authentication failure, not to be retried as is.
    assert_eq!(
        status.code(),
        Some(flint_executor::AUTHENTICATION_FAILED_CODE)
    );
    let mut stderr = String::new();
    std::io::Read::read_to_string(processes.0[0].stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains(
            "the peer closed the connection, saying: the peer does not encrypt, but \
             network.crypto.enabled=true here"
        ),
        "{stderr}"
    );
    assert_eq!(driver.executor_ids().len(), 2);
    driver.stop().unwrap();
}

#[test]
fn a_task_larger_than_the_message_limit_aborts_its_task_set_with_the_seeds_message() {
    let conf = conf(&["rpc.message.maxSize=1"]);
    let (driver, _cluster, _) = cluster(&conf, 1, 1);
    let input = "x".repeat(2 << 20);
    let err = driver
        .submit(TaskSet::new(0, 3, 2, task("echo", &input)))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap_err();
    let TaskSetError::Failed { message, .. } = &err else {
        panic!("{err}");
    };
    assert!(message.starts_with("Serialized task 0:0 was "), "{message}");
    assert!(
        message.ends_with(" bytes, which exceeds max allowed: rpc.message.maxSize (1048576 bytes). Consider increasing rpc.message.maxSize or using broadcast variables for large values."),
        "{message}"
    );
    // The executor is fine and the next task set runs.
    let outcome = driver
        .submit(TaskSet::new(1, 4, 3, task("echo", "small")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), 3);
    driver.stop().unwrap();
}

#[test]
fn a_10_mib_result_under_a_1_mib_limit_arrives_whole_through_the_block_fetch() {
    let conf = conf(&["rpc.message.maxSize=1m"]);
    let (driver, _cluster, _) = cluster(&conf, 1, 1);
    let outcome = driver
        .submit(TaskSet::new(0, 0, 2, task("large-result", "10m")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    for result in &outcome.results {
        assert_eq!(result.len(), 10 << 20);
        assert!(result
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8));
    }
    // driver.maxResultSize is enforced: 3 results of 10 MiB go over 25m.
    let conf = Conf::from_pairs(["rpc.message.maxSize=1m", "driver.maxResultSize=25m"]).unwrap();
    let (limited, _cluster2, _) = cluster(&conf, 1, 1);
    let err = limited
        .submit(TaskSet::new(0, 0, 3, task("large-result", "10m")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap_err();
    assert!(
        err.to_string().contains("Total size of serialized results of 3 tasks (30.0 MiB) is bigger than driver.maxResultSize (25.0 MiB)"),
        "{err}"
    );
    limited.stop().unwrap();
    driver.stop().unwrap();
}

#[test]
fn kill_task_ends_a_running_sleep_task_killed() {
    let (driver, _cluster, recorder) = cluster(&conf(&[]), 1, 1);
    let handle = driver
        .submit(TaskSet::new(0, 0, 1, task("sleep", "60000")))
        .unwrap();
    wait_until("the task started", REGISTER_TIMEOUT, || {
        !recorder.task_starts.lock().unwrap().is_empty()
    });
    let (task_id, executor_id) = recorder.task_starts.lock().unwrap()[0].clone();
    let asked = Instant::now();
    driver.kill_task(task_id, &executor_id, true, "the test asked");
    wait_until("the task ended", Duration::from_secs(10), || {
        recorder
            .task_ends
            .lock()
            .unwrap()
            .iter()
            .any(|(id, _, _)| *id == task_id)
    });
    assert!(asked.elapsed() < Duration::from_secs(5));
    let ends = recorder.task_ends.lock().unwrap().clone();
    assert_eq!(ends[0], (task_id, executor_id, TaskState::Killed));
    // The killed task is pending again; cancel the stage so the driver can stop.
    driver.cancel_stage(0, true);
    assert!(matches!(
        handle.wait(Duration::from_secs(10)),
        Err(TaskSetError::Failed { .. })
    ));
    driver.stop().unwrap();
}

/// The TCP sockets process `pid` holds, by the state /proc/net/tcp and tcp6 give them
/// ("0A" is LISTEN, "01" ESTABLISHED), each once.
/// The TCP sockets of process `pid`: each one's state (`0A` listening, `01` established)
/// and local port, read from /proc.
fn tcp_socket_states(pid: u32) -> Vec<(String, u16)> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let mut states = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let fields: Vec<&str> = row.split_whitespace().collect();
            // sl, local, remote, st, queues, tr, retrnsmt, uid, timeout, inode
            if fields.len() > 9 && inodes.iter().any(|inode| inode == fields[9]) {
                let port = fields[1]
                    .rsplit(':')
                    .next()
                    .and_then(|hex| u16::from_str_radix(hex, 16).ok())
                    .unwrap_or(0);
                states.push((fields[3].to_owned(), port));
            }
        }
    }
    states
}

/// An executor listens only on its block server's port (blockManager.port), whatever
/// rpc.port it is given: the driver reaches its endpoint over the connection it opened.
#[test]
fn an_executor_process_listens_only_for_blocks() {
    let driver = Driver::standalone(&conf(&[])).unwrap();
    let block_port = flint_testkit::ports::unused_port();
    let block_manager_port = format!("blockManager.port={block_port}");
    let mut processes = Processes(vec![spawn_executor(
        driver.address(),
        "1",
        &["rpc.port=0", &block_manager_port],
        Stdio::piped(),
    )]);
    driver.wait_for_executors(1, REGISTER_TIMEOUT).unwrap();
    let outcome = driver
        .submit(TaskSet::new(0, 0, 10, task("noop", "")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), 10);
    let pid = processes.0[0].id();
    let states = tcp_socket_states(pid);
    assert!(
        states.iter().any(|(state, _)| state == "01"),
        "the executor's connection to its driver is not among its sockets: {states:?}"
    );
    let listening: Vec<u16> = states
        .iter()
        .filter(|(state, _)| state == "0A")
        .map(|&(_, port)| port)
        .collect();
    assert_eq!(listening, [block_port], "{states:?}");
    // A listening driver, by the same reading of this process's own sockets.
    let own = tcp_socket_states(std::process::id());
    assert!(own.iter().any(|(state, _)| state == "0A"), "{own:?}");
    driver.stop().unwrap();
    let status = wait_exit(&mut processes.0[0], Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
}

#[test]
fn stop_executors_makes_every_executor_process_exit_0() {
    let driver = Driver::standalone(&conf(&[])).unwrap();
    let mut processes = Processes(
        (1..=3)
            .map(|i| spawn_executor(driver.address(), &i.to_string(), &[], Stdio::piped()))
            .collect(),
    );
    driver.wait_for_executors(3, REGISTER_TIMEOUT).unwrap();
    let outcome = driver
        .submit(TaskSet::new(0, 0, 30, task("noop", "")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), 30);
    driver.stop().unwrap();
    let codes: BTreeMap<usize, Option<i32>> = processes
        .0
        .iter_mut()
        .enumerate()
        .map(|(i, child)| (i, wait_exit(child, Duration::from_secs(20)).code()))
        .collect();
    assert!(codes.values().all(|&c| c == Some(0)), "{codes:?}");
}

#[test]
fn the_cli_runs_the_main_job_and_prints_json() {
    let output = Command::new(FLINT)
        .args([
            "run",
            "--executors",
            "2",
            "--cores",
            "1",
            "--tasks",
            "2000",
            "--task",
            "noop",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["tasks"], 2000, "{report}");
    assert_eq!(report["executors"], 2, "{report}");
    assert_eq!(report["cores_per_executor"], 1, "{report}");
    assert_eq!(report["total_cores"], 2, "{report}");
    assert!(report["tasks_per_sec"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["startup_seconds"].is_f64(), "{report}");
    assert_eq!(report["latency_us"]["count"], 2000, "{report}");
    for percentile in ["p50", "p90", "p99", "max", "mean"] {
        assert!(
            report["latency_us"][percentile].as_f64().unwrap() > 0.0,
            "{report}"
        );
    }

    // A failed job exits non-zero with the reason.
    let output = Command::new(FLINT)
        .args([
            "run",
            "--executors",
            "1",
            "--tasks",
            "1",
            "--task",
            "fail-n-attempts:100",
        ])
        .args(["--conf", "task.maxFailures=2"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("failed 2 times"), "{stderr}");
    // Under --json, the failure is one JSON object too.
    let output = Command::new(FLINT)
        .args(["run", "--executors", "1", "--tasks", "1", "--json"])
        .args([
            "--task",
            "fail-n-attempts:100",
            "--conf",
            "task.maxFailures=1",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failure: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let error = failure["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the job failed") && error.contains("failed 1 times"),
        "{failure}"
    );
    // The log went to a pipe, not a terminal: plain text, without colour codes.
    assert!(stderr.contains(" WARN "), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr}");
}

/// A task that crashes its executor process fails the job after task.maxFailures
/// attempts, each lost with an executor, instead of taking executor after executor.
/// The driver started the process and knows its exit code: that is the reason given,
/// not the seeds' guess for a closed connection ("containers exceeding thresholds").
#[test]
fn a_task_that_crashes_its_executor_fails_the_job_after_max_failures() {
    let output = Command::new(FLINT)
        .args(["run", "--executors", "2", "--tasks", "1"])
        .args(["--task", "exit-process:3"])
        .args(["--conf", "task.maxFailures=2"])
        .args(["--conf", "executor.maxNumFailures=20"])
        .args(["--job-timeout", "60"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("Task 0 in stage 0.0 failed 2 times"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ExecutorLostFailure (executor "),
        "{stderr}"
    );
    let last_failure = stderr
        .lines()
        .rfind(|line| line.contains("Task 0 in stage 0.0 failed 2 times"))
        .unwrap_or_default();
    let reason = last_failure
        .split("exited caused by one of the running tasks) Reason: ")
        .nth(1)
        .unwrap_or_default();
    let executor = reason
        .strip_prefix("executor ")
        .and_then(|rest| rest.strip_suffix(" exited with code 3"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(executor.parse::<u32>().is_ok(), "{stderr}");
    assert!(
        !stderr.contains("containers exceeding thresholds"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("Max number of executor failures"),
        "{stderr}"
    );
    // Replacements still starting as the job ends are killed, or, registering just
    // before that, sent away as StopExecutor would: neither fails to register with a
    // driver that is going.
    assert!(
        !stderr.contains("Cannot register with driver")
            && !stderr.contains("Slave registration failed"),
        "{stderr}"
    );
}

/// An executor that cannot reach its driver says why once: in its log, in the seeds'
/// words, or, with that log filtered out, in a line of the CLI's own.
#[test]
fn an_executor_says_once_why_it_exits() {
    // Port 1 on 127.0.0.1: nobody listens, the connection is refused at once.
    let run = |log: &str| {
        let output = Command::new(FLINT)
            .args(["executor", "--driver", "127.0.0.1:1", "--cores", "1"])
            // Tried again for executor.connectTimeout before it ends (tests/cli.rs).
            .args(["--conf", "executor.connectTimeout=0"])
            .env("FLINT_LOG", log)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let logged = run("warn");
    assert_eq!(
        logged
            .matches("Cannot register with driver: 127.0.0.1:1")
            .count(),
        1,
        "{logged}"
    );
    assert!(
        logged.contains("Executor self-exiting due to : "),
        "{logged}"
    );
    let quiet = run("off");
    assert!(
        quiet.starts_with("flint executor: Cannot register with driver: 127.0.0.1:1"),
        "{quiet}"
    );
    assert_eq!(quiet.lines().count(), 1, "{quiet}");
}

/// `flint run` refuses at once a job nothing could run, instead of waiting for its
/// timeout.
#[test]
fn flint_run_refuses_a_job_no_executor_can_run() {
    for (args, expected) in [
        (
            &["--conf", "task.cpus=2"][..],
            "each task needs task.cpus=2 cores, but each executor has --cores 1",
        ),
        (
            &["--executors", "0"][..],
            "invalid value '0' for '--executors <EXECUTORS>': zero; give 1 or more",
        ),
    ] {
        let started = Instant::now();
        // Bounded however it goes: were the job not refused, it would time out here.
        let output = Command::new(FLINT)
            .args(["run", "--tasks", "1"])
            .args(["--startup-timeout", "20", "--job-timeout", "20"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

/// `flint bench` refuses at once what would hang it, divide by zero, or fail only after
/// minutes of measuring.
#[test]
fn flint_bench_refuses_settings_it_cannot_measure_with() {
    for (args, expected) in [
        (&["--executors", "0"][..], "zero; give 1 or more"),
        (&["--samples", "0"][..], "zero; give 1 or more"),
        (&["--tasks", "0"][..], "zero; give 1 or more"),
        (
            &["--conf", "task.cpus=2"][..],
            "cannot take tasks of task.cpus=2",
        ),
        (&["--conf", "rpc.port=7000"][..], "rpc.port cannot be set"),
        (&["--conf", "network.timeout=0"][..], "network.timeout"),
    ] {
        let started = Instant::now();
        let mut child = Command::new(FLINT)
            .arg("bench")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Bounded however it goes: were it not refused, it would measure for minutes.
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("flint bench {args:?} was not refused");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(!status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

/// `flint driver` on the default rpc.port=0 says the address the OS gave it, and an
/// executor started with that address runs the job.
#[test]
fn flint_driver_says_the_address_executors_register_at() {
    use std::io::{BufRead, BufReader};
    let mut driver = Command::new(FLINT)
        .args([
            "driver",
            "--executors",
            "1",
            "--tasks",
            "100",
            "--task",
            "noop",
        ])
        .args(["--json", "--startup-timeout", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = driver.stdout.take().unwrap();
    let mut stderr = BufReader::new(driver.stderr.take().unwrap());
    let mut processes = Processes(vec![driver]);
    let mut line = String::new();
    let address = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no address said");
        if let Some(rest) = line.split("flint executor --driver ").nth(1) {
            break rest.trim().trim_end_matches(')').to_owned();
        }
    };
    let address: SocketAddr = address.parse().unwrap();
    assert_ne!(address.port(), 0, "{line}");
    assert!(
        line.contains(&format!("with the driver at {address}")),
        "{line}"
    );
    let executor = spawn_executor(address, "1", &[], Stdio::null());
    processes.0.push(executor);
    let status = wait_exit(&mut processes.0[0], JOB_TIMEOUT);
    assert!(status.success());
    let mut report = String::new();
    std::io::Read::read_to_string(&mut BufReader::new(stdout), &mut report).unwrap();
    assert!(report.starts_with("{\"tasks\":100,"), "{report}");
}

#[test]
fn failed_attempts_are_retried_until_they_succeed() {
    let (driver, _cluster, recorder) = cluster(&conf(&[]), 2, 1);
    let outcome = driver
        .submit(TaskSet::new(0, 0, 4, task("fail-n-attempts", "2")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(
        outcome.failed_attempts, 8,
        "two failed attempts of each of 4 tasks"
    );
    let failed = recorder
        .task_ends
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, s)| *s == TaskState::Failed)
        .count();
    assert_eq!(failed, 8);
    driver.stop().unwrap();
}

fn kill(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// Whether the process is gone (reaped; a zombie still counts as there).
fn is_gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_job_whose_only_executor_is_killed_completes_on_a_replacement() {
    let conf = conf(&[]);
    let (driver, cluster, recorder) = cluster(&conf, 1, 1);
    let handle = driver
        .submit(TaskSet::new(0, 0, 100, task("sleep", "10")))
        .unwrap();
    wait_until("some tasks finished", JOB_TIMEOUT, || {
        handle.progress().0 >= 10
    });
    let pid = cluster.pid("1");
    kill("-9", pid);

    let outcome = handle.wait(JOB_TIMEOUT).unwrap();
    assert_eq!(outcome.results.len(), 100);
    assert_eq!(outcome.duplicate_results, 0);
    assert!(recorder.added() >= 2, "a replacement registered");
    let removed = recorder.removed();
    assert!(
        removed.iter().any(|(id, reason)| id == "1"
            && reason == "executor 1 was killed by signal 9 (exit code 137)"),
        "{removed:?}"
    );
    wait_until(
        "the killed executor was reaped",
        Duration::from_secs(10),
        || is_gone(pid),
    );
    wait_until(
        "its exit was counted as a failure",
        Duration::from_secs(10),
        || driver.executor_failures() == 1,
    );
    assert!(driver.executor_failure().is_none());
    driver.stop().unwrap();
}

#[test]
fn a_job_fails_with_a_clear_message_when_replacements_keep_dying() {
    // Executor 1 is a real one; every later one exits with code 3 at once.
    let script = format!("[ \"$6\" = 1 ] && exec '{FLINT}' executor \"$@\"; exit 3");
    let shared = SharedCluster::of(LocalClusterManager::new("/bin/sh", 1).with_args([
        "-c",
        script.as_str(),
        "sh",
    ]));
    let driver = Driver::start(&conf(&[]), Box::new(shared.clone())).unwrap();
    driver.request_total_executors(1).unwrap();
    driver.wait_for_executors(1, REGISTER_TIMEOUT).unwrap();
    let handle = driver
        .submit(TaskSet::new(0, 0, 100, task("sleep", "10")))
        .unwrap();
    wait_until("some tasks finished", JOB_TIMEOUT, || {
        handle.progress().0 >= 5
    });
    kill("-9", shared.pid("1"));

    let err = handle.wait(JOB_TIMEOUT).unwrap_err();
    let expected =
        "Max number of executor failures (3) reached (the last: executor 3 exited with code 3)";
    assert_eq!(
        err,
        TaskSetError::Failed {
            task_set: handle.id(),
            message: expected.to_owned()
        }
    );
    assert!(matches!(
        driver.submit(TaskSet::new(1, 1, 1, task("noop", ""))),
        Err(DriverError::ExecutorsFailed(message)) if message == expected
    ));
    driver.stop().unwrap();
    assert!(shared.0.lock().unwrap().running().is_empty());
}

#[test]
fn executors_that_die_at_start_fail_the_main_job_without_waiting_for_its_timeouts() {
    let spec = JobSpec {
        executors: 1,
        cores: 1,
        tasks: 10,
        task: "noop".parse().unwrap(),
        startup_timeout: JOB_TIMEOUT,
        job_timeout: JOB_TIMEOUT,
    };
    let dying = LocalClusterManager::new("/bin/sh", 1).with_args(["-c", "exit 3", "sh"]);
    let err = run_job(&conf(&[]), &spec, Box::new(dying), JobHooks::default()).unwrap_err();
    assert!(
        matches!(&err, JobError::Driver(DriverError::ExecutorsFailed(_))),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "Max number of executor failures (3) reached (the last: executor 3 exited with code 3)"
    );
}

#[test]
fn the_main_job_starts_once_the_driver_is_ready() {
    // Two executors asked for, one started. By default the job waits for all of them,
    // at most maxRegisteredResourcesWaitingTime; with a ratio of a half, for one.
    let job = |pairs: &[&str]| {
        let conf = conf(pairs);
        let spec = JobSpec {
            executors: 2,
            cores: 1,
            tasks: 100,
            task: "noop".parse().unwrap(),
            startup_timeout: REGISTER_TIMEOUT,
            job_timeout: JOB_TIMEOUT,
        };
        let cluster = Capped(local_cluster(FLINT, 1, &conf), 1);
        run_job(&conf, &spec, Box::new(cluster), JobHooks::default()).unwrap()
    };
    let waited = job(&["scheduler.maxRegisteredResourcesWaitingTime=1s"]);
    assert_eq!((waited.executors, waited.latency_us.count), (1, 100));
    assert!(waited.startup_seconds >= 1.0, "{waited:?}");
    let half = job(&[
        "scheduler.minRegisteredResourcesRatio=0.5",
        "scheduler.maxRegisteredResourcesWaitingTime=1h",
    ]);
    assert_eq!((half.executors, half.latency_us.count), (1, 100));
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(end) = stat.rfind(')') else { continue };
        let ppid = stat[end + 2..]
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            children.push(child);
        }
    }
    children
}

/// `flint run` and the executors it started, killed if the test ends early.
struct RunGuard {
    run: Child,
    executors: Vec<u32>,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        // A test that failed before it listed them: whatever flint run started so far.
        if self.executors.is_empty() {
            self.executors = children_of(self.run.id());
        }
        let _ = self.run.kill();
        let _ = self.run.wait();
        for pid in &self.executors {
            let cmdline =
                std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.contains("executor") {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
    }
}

#[test]
fn ctrl_c_stops_flint_run_and_every_executor_it_started() {
    // The terminal's Ctrl-C: a SIGINT to the whole foreground process group.
    a_signal_stops_flint_run_and_every_executor_it_started("-INT", true, 130, false);
}

#[test]
fn sigterm_stops_flint_run_and_every_executor_it_started() {
    // `kill PID`, `timeout` or a service manager: a SIGTERM to flint run alone. Under
    // --json, the interruption is a failure like any other: one JSON object.
    a_signal_stops_flint_run_and_every_executor_it_started("-TERM", false, 143, true);
}

fn a_signal_stops_flint_run_and_every_executor_it_started(
    signal: &str,
    to_group: bool,
    code: i32,
    json: bool,
) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;

    // `flint run` in a process group of its own, as a shell runs a foreground job: the
    // terminal's Ctrl-C is a SIGINT to that whole group.
    let mut run = Command::new(FLINT)
        .args([
            "run",
            "--executors",
            "2",
            "--tasks",
            "1000000",
            "--task",
            "sleep:5",
        ])
        .args(json.then_some("--json"))
        .env("FLINT_LOG", "info")
        .stdin(Stdio::null())
        .stdout(if json { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = run.id();
    let stderr = Arc::new(Mutex::new(String::new()));
    let reader = {
        let stderr = stderr.clone();
        let mut pipe = run.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                stderr
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let mut guard = RunGuard {
        run,
        executors: Vec::new(),
    };
    wait_until("the job started", REGISTER_TIMEOUT, || {
        stderr
            .lock()
            .unwrap()
            .contains("SchedulerBackend is ready for scheduling")
    });
    guard.executors = children_of(pid);
    assert_eq!(guard.executors.len(), 2, "{:?}", guard.executors);
    std::thread::sleep(Duration::from_millis(200));

    let target = if to_group {
        format!("-{pid}")
    } else {
        pid.to_string()
    };
    let status = Command::new("kill")
        .args([signal, "--", &target])
        .status()
        .unwrap();
    assert!(status.success());
    let status = wait_exit(&mut guard.run, Duration::from_secs(30));
    reader.join().unwrap();
    let stderr = stderr.lock().unwrap().clone();
    assert_eq!(status.code(), Some(code), "{stderr}");
    assert!(
        stderr.contains("flint: interrupted; the driver and its executors were stopped"),
        "{stderr}"
    );
    if let Some(mut stdout) = guard.run.stdout.take() {
        let mut report = String::new();
        stdout.read_to_string(&mut report).unwrap();
        let failure: serde_json::Value =
            serde_json::from_str(report.trim()).expect("one JSON object");
        assert_eq!(
            failure["error"], "interrupted; the driver and its executors were stopped",
            "{report}"
        );
    }
    // The executors did not get the signal: the driver stopped them, none was lost.
    assert!(!stderr.contains("Lost executor"), "{stderr}");
    assert!(
        stderr.contains("Asking each executor to shut down"),
        "{stderr}"
    );
    for &executor in &guard.executors {
        wait_until("the executor is gone", Duration::from_secs(10), || {
            is_gone(executor)
        });
    }
}

/// `flint bench`'s one-CPU figure: a real driver and executor process run the strict
/// schedule on one CPU, and the raw TCP schedule runs beside it.
#[test]
fn the_one_cpu_strict_schedule_runs_a_job_and_raw_tcp_beside_it() {
    let measured =
        flint::bench::one_cpu_strict(std::path::Path::new(FLINT), &Conf::default(), 2_000)
            .expect("the job runs");
    // None: threads cannot be pinned on this machine, and there is nothing to compare.
    if let Some(one) = measured {
        assert!(one.flint_us.is_finite() && one.flint_us > 0.0, "{one:?}");
        assert!(one.raw_us.is_finite() && one.raw_us > 0.0, "{one:?}");
    }
}

/// Reads from `stream` until the peer closes it; false if it is still open after 10 s.
fn closed_by_peer(stream: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// One round of what a hostile peer on the same host throws at the driver at `address`,
/// as `hostile` (an RPC environment of its own). `registered` is an executor of the
/// job, whose results it forges.
fn hostile_round(hostile: &flint::rpc::RpcEnv, address: SocketAddr, registered: &str, round: u64) {
    use flint::wire::{
        AccumulatorUpdate, FrameHeader, Heartbeat, Message, MessageKind, RegisterExecutor,
        StatusUpdate, TaskAccumUpdates, TaskOutcome, DRIVER_ENDPOINT, HEADER_LEN,
        HEARTBEAT_ENDPOINT,
    };
    use std::io::Write;
    // Bytes that are no frame, and a header announcing 4 GiB: each connection is closed.
    let mut garbage = std::net::TcpStream::connect(address).unwrap();
    garbage.write_all(&[0x5A; 64]).unwrap();
    assert!(closed_by_peer(&mut garbage), "garbage was not refused");
    let mut header = [0u8; HEADER_LEN];
    FrameHeader {
        kind: MessageKind::Custom,
        flags: 0,
        payload_len: u32::MAX - 7,
        crc: 0,
    }
    .write(&mut header);
    let mut huge = std::net::TcpStream::connect(address).unwrap();
    huge.write_all(&header).unwrap();
    assert!(closed_by_peer(&mut huge), "a 4 GiB header was not refused");
    // Results forged for the tasks of a registered executor, from another connection.
    let driver = hostile.handle().endpoint_ref(address, DRIVER_ENDPOINT);
    for task_id in 0..200 {
        let _ = driver.send(&Message::StatusUpdate(StatusUpdate {
            executor_id: registered.into(),
            task_id,
            state: TaskState::Finished,
            outcome: TaskOutcome::Direct {
                value: bytes::Bytes::from_static(b"forged"),
                metrics: Default::default(),
                accumulators: vec![],
            },
        }));
    }
    // A registration with an ID as long as a message may carry.
    let refused = driver
        .ask(&Message::RegisterExecutor(RegisterExecutor {
            executor_id: "x".repeat(512 << 10).into(),
            executor_address: hostile.address().to_string(),
            endpoint_name: "Executor".into(),
            hostname: "hostile".into(),
            cores: u32::MAX,
            log_urls: vec![],
        }))
        .unwrap();
    assert!(
        matches!(refused.to_message(), Message::RegisterExecutorFailed { .. }),
        "round {round}"
    );
    // A heartbeat whose updates would decode to about 1.4 MB, past the 1 MiB limit.
    let heartbeats = hostile.handle().endpoint_ref(address, HEARTBEAT_ENDPOINT);
    let accumulators: Vec<AccumulatorUpdate> = (0..20_000)
        .map(|id| AccumulatorUpdate {
            id,
            name: Some("n".into()),
            value: flint::wire::AccumulatorValue::Long(1),
        })
        .collect();
    let _ = heartbeats.ask(&Message::Heartbeat(Heartbeat {
        executor_id: "hostile".into(),
        accum_updates: vec![TaskAccumUpdates {
            task_id: round,
            metrics: Default::default(),
            accumulators,
        }],
        block_manager_id: flint::wire::BlockManagerId {
            executor_id: "hostile".into(),
            host: "hostile".into(),
            port: 1,
        },
    }));
}

/// A job on real executor processes runs to its end, every result the one its task
/// made, while a peer on the same host throws at the driver what a hostile one can: bytes
/// that are no frame, a header announcing 4 GiB, results forged for the tasks of a
/// registered executor, a registration with an ID as long as a message, and heartbeats
/// whose updates would decode past `rpc.message.maxSize`.
#[test]
fn a_job_runs_to_its_end_while_a_hostile_peer_throws_everything_at_the_driver() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let conf = conf(&["rpc.message.maxSize=1"]);
    let (driver, _cluster, _) = cluster(&conf, 2, 1);
    let address = driver.address();
    let registered = driver.executor_ids()[0].clone();
    let done = Arc::new(AtomicBool::new(false));
    let hostile = {
        let done = done.clone();
        std::thread::spawn(move || {
            let env = flint::rpc::RpcEnv::new(&Conf::new()).unwrap();
            let mut rounds = 0;
            // At least one round, however quick the job.
            while rounds == 0 || (!done.load(Ordering::Acquire) && rounds < 1_000) {
                hostile_round(&env, address, &registered, rounds);
                rounds += 1;
            }
            rounds
        })
    };
    let outcome = driver
        .submit(TaskSet::new(1, 1, 20_000, task("echo", "r")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    done.store(true, Ordering::Release);
    let rounds = hostile.join().unwrap();
    assert!(rounds >= 1);
    eprintln!("{rounds} rounds of hostile traffic during the job");
    assert_eq!(outcome.results.len(), 20_000);
    assert!(
        outcome.results.iter().all(|r| &r[..] == b"r"),
        "a forged result was taken"
    );
    assert_eq!(outcome.duplicate_results, 0);
    assert_eq!(driver.executor_ids().len(), 2, "an executor was lost");
    // And the driver still serves.
    let again = driver
        .submit(TaskSet::new(2, 2, 100, task("echo", "s")))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert!(again.results.iter().all(|r| &r[..] == b"s"));
    driver.stop().unwrap();
}
