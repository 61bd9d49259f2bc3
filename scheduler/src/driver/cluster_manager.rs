//! Where executors come from: the [`ClusterManager`] trait the scheduler backend asks
//! for executors and kills them through (the seeds' `doRequestTotalExecutors` and
//! `doKillExecutors`), and [`LocalClusterManager`], which starts executor processes on
//! this host.
//!
//! A cluster manager also tells the driver which of its executor processes ended
//! without being asked to ([`ClusterManager::exited_executors`], polled about once a
//! second): the driver counts the abnormal exits towards `executor.maxNumFailures` and
//! asks for replacements (see [`crate::Driver`]).
//!
//! ```no_run
//! use flint_scheduler::cluster_manager::{ClusterManager, LocalClusterManager};
//!
//! // Executors are `flint executor --driver ... --cores 2 ...` processes.
//! let mut manager = LocalClusterManager::new("target/release/flint", 2);
//! manager.start("127.0.0.1:7077".parse().unwrap());
//! manager.request_total_executors(4)?;
//! // ...
//! manager.stop(std::time::Duration::from_secs(5));
//! # Ok::<(), flint_scheduler::cluster_manager::ClusterManagerError>(())
//! ```

use flint_rpc::timer::deadline_after;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

pub use crate::core::driver_core::ExitedExecutor;

/// The environment variable a local executor reads `authenticate.secret` from: a secret
/// on a command line would be visible to every user of the host.
pub const SECRET_ENV: &str = "FLINT_AUTHENTICATE_SECRET";

/// A cluster manager could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ClusterManagerError {
    /// An executor process could not be started.
    #[error("cannot start executor {executor_id} ({program}): {source}")]
    Spawn {
        /// The executor it was to be.
        executor_id: String,
        /// The program it ran.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Asked for executors before [`ClusterManager::start`] said where the driver is.
    #[error("the cluster manager was not started: it does not know the driver's address")]
    NotStarted,
}

/// How a process the cluster manager started ended, as [`ExitedExecutor`] reports it.
fn exit_of(executor_id: &str, status: ExitStatus) -> ExitedExecutor {
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal: Option<i32> = None;
    let (exit_code, message) = match (status.code(), signal) {
        (Some(code), _) => (
            code,
            format!("executor {executor_id} exited with code {code}"),
        ),
        (None, Some(signal)) => (
            128 + signal,
            format!("executor {executor_id} was killed by signal {signal}"),
        ),
        (None, None) => (-1, format!("executor {executor_id} ended: {status}")),
    };
    ExitedExecutor {
        executor_id: executor_id.to_owned(),
        exit_code,
        message,
    }
}

/// What the scheduler backend needs of a cluster manager.
///
/// Every method but [`ClusterManager::start`] is called on the driver's executor supply
/// thread, one call at a time and never with the driver's state locked: a call may take
/// its time (starting a process, waiting for a killed one), but the driver's requests
/// and reports of exits wait behind it, so it must not wait for executors to register.
pub trait ClusterManager: Send {
    /// The driver listens at `driver`: executors are to register there.
    fn start(&mut self, driver: SocketAddr);

    /// Asks for `total` executors in all, those already running included. Returns
    /// whether the request was acknowledged.
    fn request_total_executors(&mut self, total: u32) -> Result<bool, ClusterManagerError>;

    /// Kills these executors. Returns whether the request was acknowledged.
    fn kill_executors(&mut self, executor_ids: &[String]) -> Result<bool, ClusterManagerError>;

    /// The executors that ended since the last call without the driver asking (neither
    /// killed through [`ClusterManager::kill_executors`] nor stopped), with how they
    /// ended. The driver calls it about once a second. The default reports nothing: a
    /// cluster manager that cannot tell leaves the driver to learn of losses from
    /// closed connections and missing heartbeats alone.
    fn exited_executors(&mut self) -> Vec<ExitedExecutor> {
        Vec::new()
    }

    /// Whether [`ClusterManager::exited_executors`] reports every executor it started
    /// that exits. If so, the driver holds an executor whose connection closed (no
    /// offers, its tasks not yet re-run) until that report says why, for a few polls
    /// at most, and its exit is the reason of the loss ("executor 2 exited with code
    /// 3"); if not (the default), the closed connection is the reason, at once.
    fn reports_exits(&self) -> bool {
        false
    }

    /// The driver is about to ask its executors to stop; `registered` are those
    /// registered with it. No executor is to be started from now on. The default does
    /// nothing; [`LocalClusterManager`] also kills at once the executors it started that
    /// are not among them: the driver cannot ask them to stop, and they hold no task
    /// (one starting as a job ends would otherwise try to register with a driver that is
    /// going, and fail noisily). A cluster manager that wraps another passes this on.
    fn stopping(&mut self, _registered: &[String]) {}

    /// Stops every executor it started, giving them `grace` to exit on their own first
    /// (the driver has asked them to stop), then killing the rest.
    fn stop(&mut self, grace: Duration);
}

/// A cluster manager that has no executors and starts none: executors register on their
/// own (for example `flint executor --driver HOST:PORT` started by hand or by another
/// system).
#[derive(Debug, Default, Clone, Copy)]
pub struct StandaloneExecutors;

impl ClusterManager for StandaloneExecutors {
    fn start(&mut self, _driver: SocketAddr) {}

    fn request_total_executors(&mut self, _total: u32) -> Result<bool, ClusterManagerError> {
        Ok(false)
    }

    fn kill_executors(&mut self, _executor_ids: &[String]) -> Result<bool, ClusterManagerError> {
        Ok(false)
    }

    fn stop(&mut self, _grace: Duration) {}
}

/// Starts executor processes on this host: `PROGRAM [ARGS...] --driver ADDR --cores C
/// --executor-id ID --hostname HOST [--conf KEY=VALUE]...`, ids counting from 1.
///
/// Processes it started are killed when it stops or is dropped; those that exit on their
/// own are reaped (no zombie is left) and reported by
/// [`ClusterManager::exited_executors`].
///
/// Each executor runs in a process group of its own (on Unix): a Ctrl-C in the driver's
/// terminal, which the terminal sends to its whole foreground process group, reaches the
/// driver alone, and the driver stops its executors in order instead of losing them
/// first. Nothing else ties an executor's life to the driver's process (flint has no
/// crate offering `PR_SET_PDEATHSIG` without unsafe code): a driver killed outright
/// leaves its executors to notice the closed connection, after which they exit on their
/// own (the executor's `DriverLost` exit).
///
/// An executor's standard error comes back through a pipe, and a thread of the driver's
/// copies it to the driver's own a line at a time. A process in a background group that
/// wrote to the terminal itself would be stopped (`SIGTTOU`) on a terminal set to
/// `tostop`, and the lines of several executors could run into each other.
#[derive(Debug)]
pub struct LocalClusterManager {
    program: PathBuf,
    args: Vec<OsString>,
    cores: u32,
    hostname: String,
    conf: Vec<(String, String)>,
    secret: Option<String>,
    driver: Option<SocketAddr>,
    next_id: u64,
    children: BTreeMap<String, Child>,
    /// Set by [`ClusterManager::stopping`]: no more executors are started.
    stopping: bool,
    /// The threads copying executors' standard error, awaited (briefly) at the end of
    /// [`ClusterManager::stop`] so that an executor's last lines are not lost.
    forwarders: Vec<std::thread::JoinHandle<()>>,
    /// Executors reaped since the last [`ClusterManager::exited_executors`].
    exited: Vec<ExitedExecutor>,
}

impl LocalClusterManager {
    /// Executors of `cores` cores each, started as `program executor ...`.
    pub fn new(program: impl Into<PathBuf>, cores: u32) -> Self {
        LocalClusterManager {
            program: program.into(),
            args: vec!["executor".into()],
            cores,
            hostname: "localhost".to_owned(),
            conf: Vec::new(),
            secret: None,
            driver: None,
            next_id: 1,
            children: BTreeMap::new(),
            stopping: false,
            forwarders: Vec::new(),
            exited: Vec::new(),
        }
    }

    /// The arguments that come before the executor options (default `executor`, the
    /// `flint` subcommand); none for a program that is an executor main itself.
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Configuration handed to every executor (`--conf KEY=VALUE`); the secret
    /// `authenticate.secret` travels in the environment ([`SECRET_ENV`]) instead.
    pub fn with_conf<'a>(mut self, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        for (key, value) in pairs {
            let bare = key.strip_prefix("spark.").unwrap_or(key);
            if bare == "authenticate.secret" {
                self.secret = Some(value.to_owned());
            } else {
                self.conf.push((key.to_owned(), value.to_owned()));
            }
        }
        self
    }

    /// The host name executors report (default `localhost`).
    pub fn with_hostname(mut self, hostname: impl Into<String>) -> Self {
        self.hostname = hostname.into();
        self
    }

    /// The ids of the executor processes still running, reaping those that exited.
    pub fn running(&mut self) -> Vec<String> {
        self.reap();
        self.children.keys().cloned().collect()
    }

    /// The process id of an executor it started, while it runs.
    pub fn pid(&self, executor_id: &str) -> Option<u32> {
        self.children.get(executor_id).map(Child::id)
    }

    /// Reaps the executors that exited, keeping how they ended for
    /// [`ClusterManager::exited_executors`].
    fn reap(&mut self) {
        let exited = &mut self.exited;
        self.children.retain(|id, child| match child.try_wait() {
            Ok(Some(status)) => {
                log_exit(id, status);
                exited.push(exit_of(id, status));
                false
            }
            Ok(None) => true,
            Err(e) => {
                warn!("cannot check on executor {id}: {e}");
                true
            }
        });
    }

    fn spawn(&mut self, driver: SocketAddr) -> Result<(), ClusterManagerError> {
        let executor_id = self.next_id.to_string();
        self.next_id += 1;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .arg("--driver")
            .arg(driver.to_string())
            .arg("--cores")
            .arg(self.cores.to_string())
            .arg("--executor-id")
            .arg(&executor_id)
            .arg("--hostname")
            .arg(&self.hostname)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Out of the driver's process group: see the type's docs.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        for (key, value) in &self.conf {
            command.arg("--conf").arg(format!("{key}={value}"));
        }
        if let Some(secret) = &self.secret {
            command.env(SECRET_ENV, secret);
        }
        let mut child = command
            .spawn()
            .map_err(|source| ClusterManagerError::Spawn {
                executor_id: executor_id.clone(),
                program: self.program.display().to_string(),
                source,
            })?;
        if let Some(stderr) = child.stderr.take() {
            let forwarded = std::thread::Builder::new()
                .name(format!("executor-{executor_id}-stderr"))
                .spawn(move || forward_lines(stderr, &mut std::io::stderr()));
            match forwarded {
                Ok(forwarder) => {
                    self.forwarders.retain(|f| !f.is_finished());
                    self.forwarders.push(forwarder);
                }
                Err(e) => warn!("cannot forward the output of executor {executor_id}: {e}"),
            }
        }
        info!(
            "Started executor {executor_id} (pid {}) with {} cores",
            child.id(),
            self.cores
        );
        self.children.insert(executor_id, child);
        Ok(())
    }

    fn kill(executor_id: &str, mut child: Child) {
        match child.kill() {
            Ok(()) => debug!("Killed executor {executor_id} (pid {})", child.id()),
            Err(e) => debug!("executor {executor_id} was already gone: {e}"),
        }
        match child.wait() {
            Ok(status) => log_exit(executor_id, status),
            Err(e) => warn!("cannot reap executor {executor_id}: {e}"),
        }
    }
}

/// How long a stopping manager waits for executors' last output to be copied.
const FORWARDERS_GRACE: Duration = Duration::from_millis(500);

/// The longest piece of an executor's output forwarded in one write: a longer line goes
/// in pieces of this size.
const MAX_FORWARDED_LINE: usize = 64 * 1024;

/// Copies `from` to `to` a line at a time, each line in one write (which the lock of the
/// process's standard error keeps whole), until `from` ends or `to` fails.
fn forward_lines(from: impl Read, to: &mut impl Write) {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        let chunk = match from.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => &[],
        };
        if chunk.is_empty() {
            let _ = to.write_all(&line);
            return;
        }
        let room = MAX_FORWARDED_LINE - line.len();
        let take = chunk[..chunk.len().min(room)]
            .iter()
            .position(|&byte| byte == b'\n')
            .map_or(chunk.len().min(room), |newline| newline + 1);
        line.extend_from_slice(&chunk[..take]);
        from.consume(take);
        if line.ends_with(b"\n") || line.len() == MAX_FORWARDED_LINE {
            if to.write_all(&line).is_err() {
                return;
            }
            line.clear();
        }
    }
}

fn log_exit(executor_id: &str, status: ExitStatus) {
    if status.success() {
        debug!("Executor {executor_id} exited: {status}");
    } else {
        info!("Executor {executor_id} exited: {status}");
    }
}

impl ClusterManager for LocalClusterManager {
    fn start(&mut self, driver: SocketAddr) {
        self.driver = Some(driver);
    }

    fn request_total_executors(&mut self, total: u32) -> Result<bool, ClusterManagerError> {
        let driver = self.driver.ok_or(ClusterManagerError::NotStarted)?;
        if self.stopping {
            return Ok(false);
        }
        self.reap();
        while self.children.len() < total as usize {
            self.spawn(driver)?;
        }
        Ok(true)
    }

    fn kill_executors(&mut self, executor_ids: &[String]) -> Result<bool, ClusterManagerError> {
        for executor_id in executor_ids {
            if let Some(child) = self.children.remove(executor_id) {
                Self::kill(executor_id, child);
            }
        }
        Ok(true)
    }

    fn exited_executors(&mut self) -> Vec<ExitedExecutor> {
        self.reap();
        std::mem::take(&mut self.exited)
    }

    fn reports_exits(&self) -> bool {
        true
    }

    fn stopping(&mut self, registered: &[String]) {
        self.stopping = true;
        let (registered, unregistered) = std::mem::take(&mut self.children)
            .into_iter()
            .partition(|(executor_id, _)| registered.contains(executor_id));
        self.children = registered;
        for (executor_id, child) in unregistered {
            debug!("Executor {executor_id} never registered; killing it");
            Self::kill(&executor_id, child);
        }
    }

    fn stop(&mut self, grace: Duration) {
        self.stopping = true;
        let deadline = deadline_after(Instant::now(), grace);
        while !self.children.is_empty() && Instant::now() < deadline {
            self.reap();
            if !self.children.is_empty() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        for (executor_id, child) in std::mem::take(&mut self.children) {
            warn!("Executor {executor_id} did not stop within {grace:?}; killing it");
            Self::kill(&executor_id, child);
        }
        // Every executor is gone, so its pipe has ended, unless a process it started
        // still holds it open: the forwarders get a moment, not more.
        let deadline = deadline_after(Instant::now(), FORWARDERS_GRACE);
        while self.forwarders.iter().any(|f| !f.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for forwarder in std::mem::take(&mut self.forwarders) {
            if forwarder.is_finished() {
                let _ = forwarder.join();
            }
        }
    }
}

impl Drop for LocalClusterManager {
    fn drop(&mut self) {
        for (executor_id, child) in std::mem::take(&mut self.children) {
            Self::kill(&executor_id, child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flint_wire::ExecutorLossReason;

    fn driver() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    /// A stand-in executor program: `sh -c 'sleep 30' sh [the executor options]`.
    fn sleeper() -> LocalClusterManager {
        LocalClusterManager::new("/bin/sh", 1).with_args(["-c", "sleep 30", "sh"])
    }

    #[test]
    fn requests_start_processes_up_to_the_total_and_kills_stop_them() {
        let mut manager = sleeper();
        assert!(matches!(
            manager.request_total_executors(1),
            Err(ClusterManagerError::NotStarted)
        ));
        manager.start(driver());
        assert!(manager.request_total_executors(2).unwrap());
        assert_eq!(manager.running(), ["1", "2"]);
        assert!(manager.request_total_executors(2).unwrap());
        assert_eq!(
            manager.running().len(),
            2,
            "a total already met starts nothing"
        );
        let pid = manager.pid("1").unwrap();
        manager
            .kill_executors(&["1".to_owned(), "9".to_owned()])
            .unwrap();
        assert_eq!(manager.running(), ["2"]);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "killed and reaped"
        );
        // A replacement gets a new id.
        manager.request_total_executors(2).unwrap();
        assert_eq!(manager.running(), ["2", "3"]);
        manager.stop(Duration::from_millis(50));
        assert!(manager.running().is_empty());
    }

    #[test]
    fn executors_that_exit_on_their_own_are_reaped_within_the_grace() {
        let mut manager = LocalClusterManager::new("/bin/sh", 1).with_args(["-c", "exit 0", "sh"]);
        manager.start(driver());
        manager.request_total_executors(3).unwrap();
        let started = Instant::now();
        manager.stop(Duration::from_secs(10));
        assert!(manager.running().is_empty());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// Polls `exited_executors` until `count` exits were reported (bounded).
    fn exits(manager: &mut LocalClusterManager, count: usize) -> Vec<ExitedExecutor> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut exits = Vec::new();
        while exits.len() < count {
            assert!(Instant::now() < deadline, "only {exits:?} exited");
            exits.extend(manager.exited_executors());
            std::thread::sleep(Duration::from_millis(5));
        }
        exits.sort_by(|a, b| a.executor_id.cmp(&b.executor_id));
        exits
    }

    #[test]
    fn executors_that_exit_on_their_own_are_reaped_and_reported_with_their_exit() {
        let mut manager =
            LocalClusterManager::new("/bin/sh", 1).with_args(["-c", "exit \"$0\"", "3"]);
        manager.start(driver());
        manager.request_total_executors(1).unwrap();
        let pid = manager.pid("1").unwrap();
        let exits = exits(&mut manager, 1);
        assert_eq!(
            exits,
            [ExitedExecutor {
                executor_id: "1".into(),
                exit_code: 3,
                message: "executor 1 exited with code 3".into(),
            }]
        );
        assert!(exits[0].is_failure());
        assert_eq!(
            exits[0].loss_reason(),
            ExecutorLossReason::ExecutorExited {
                exit_code: 3,
                exit_caused_by_app: true,
                reason: "executor 1 exited with code 3".into(),
            }
        );
        assert!(exits[0].loss_reason().counts_towards_task_failures());
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "reaped, not a zombie"
        );
        assert!(manager.exited_executors().is_empty(), "reported once");

        // Asked for the same total again, it starts a replacement.
        manager.request_total_executors(1).unwrap();
        assert_eq!(manager.pid("1"), None);
        assert!(manager.pid("2").is_some());
        manager.stop(Duration::from_secs(10));
    }

    #[test]
    fn a_killed_process_reports_its_signal_and_one_the_driver_killed_is_not_reported() {
        let mut manager = sleeper();
        manager.start(driver());
        manager.request_total_executors(2).unwrap();
        let pid = manager.pid("1").unwrap();
        assert!(std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success());
        manager.kill_executors(&["2".to_owned()]).unwrap();
        let exits = exits(&mut manager, 1);
        assert_eq!(exits[0].executor_id, "1");
        assert_eq!(exits[0].exit_code, 137);
        assert_eq!(exits[0].message, "executor 1 was killed by signal 9");
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            manager.exited_executors().is_empty(),
            "executor 2 was killed on purpose"
        );
        // Normal exits are reported, and are no failure of the executor; but the tasks
        // they took with them count, as they would had the disconnection come first.
        let normal = ExitedExecutor {
            executor_id: "3".into(),
            exit_code: 0,
            message: "executor 3 exited with code 0".into(),
        };
        assert!(!normal.is_failure());
        assert!(normal.loss_reason().counts_towards_task_failures());
    }

    #[test]
    fn output_is_forwarded_in_whole_lines_and_long_lines_in_pieces() {
        let long = "x".repeat(MAX_FORWARDED_LINE + 10);
        let input = format!("one\ntwo\n{long}\nlast, unended");
        // A reader that gives a byte at a time: lines still go out whole.
        struct ByteAtATime<'a>(&'a [u8]);
        impl Read for ByteAtATime<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(1);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        // Records each write separately.
        #[derive(Default)]
        struct Writes(Vec<Vec<u8>>);
        impl Write for Writes {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.push(buf.to_vec());
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        for whole in [true, false] {
            let mut writes = Writes::default();
            if whole {
                forward_lines(input.as_bytes(), &mut writes);
            } else {
                forward_lines(ByteAtATime(input.as_bytes()), &mut writes);
            }
            let writes: Vec<String> = writes
                .0
                .into_iter()
                .map(|w| String::from_utf8(w).unwrap())
                .collect();
            assert_eq!(writes.len(), 5, "whole {whole}");
            assert_eq!(writes[0], "one\n");
            assert_eq!(writes[1], "two\n");
            assert_eq!(writes[2], long[..MAX_FORWARDED_LINE]);
            assert_eq!(writes[3], "x".repeat(10) + "\n");
            assert_eq!(writes[4], "last, unended");
        }
    }

    #[test]
    fn an_executor_s_standard_error_is_a_pipe_to_the_driver() {
        let mut manager = sleeper();
        manager.start(driver());
        manager.request_total_executors(1).unwrap();
        let pid = manager.pid("1").unwrap();
        let stderr = std::fs::read_link(format!("/proc/{pid}/fd/2")).unwrap();
        assert!(
            stderr.to_string_lossy().starts_with("pipe:"),
            "{}",
            stderr.display()
        );
        // Its own pipe, not this process's standard error handed down (which may be a
        // pipe too, under a test runner).
        let ours = std::fs::read_link("/proc/self/fd/2").unwrap();
        assert_ne!(stderr, ours);
        manager.stop(Duration::from_millis(50));
    }

    #[test]
    fn stopping_kills_at_once_only_the_executors_that_never_registered() {
        let mut manager = sleeper();
        manager.start(driver());
        manager.request_total_executors(2).unwrap();
        let [never, registered] = [manager.pid("1").unwrap(), manager.pid("2").unwrap()];
        let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
        manager.stopping(&["2".to_owned(), "not started here".to_owned()]);
        assert!(
            !alive(never),
            "the executor that never registered is still there"
        );
        assert!(
            alive(registered),
            "the registered executor was not left to stop"
        );
        manager.stop(Duration::from_millis(50));
        assert!(!alive(registered));
    }

    #[test]
    fn a_stopping_manager_starts_no_executor() {
        let mut manager = sleeper();
        manager.start(driver());
        manager.stopping(&[]);
        assert!(!manager.request_total_executors(1).unwrap());
        assert!(manager.pid("1").is_none());
    }

    #[test]
    fn executors_run_in_a_process_group_of_their_own() {
        let mut manager = sleeper();
        manager.start(driver());
        manager.request_total_executors(1).unwrap();
        let pid = manager.pid("1").unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // pid (comm) state ppid pgrp ...
        let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
        let pgrp: u32 = after_comm.split(' ').nth(2).unwrap().parse().unwrap();
        assert_eq!(pgrp, pid, "{stat}");
        manager.stop(Duration::from_millis(50));
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let mut manager = LocalClusterManager::new("/nonexistent/flint", 1);
        manager.start(driver());
        let text = manager.request_total_executors(1).unwrap_err().to_string();
        assert!(
            text.contains("/nonexistent/flint") && text.contains("executor 1"),
            "{text}"
        );
    }

    #[test]
    fn the_secret_goes_in_the_environment_not_on_the_command_line() {
        // The stand-in prints its arguments and the secret's variable to a file.
        let out = std::env::temp_dir().join(format!("flint-cm-{}", std::process::id()));
        let script = format!(
            "echo \"$@\" > {0}; echo \"${SECRET_ENV}\" >> {0}",
            out.display()
        );
        let mut manager = LocalClusterManager::new("/bin/sh", 3)
            .with_args(["-c", script.as_str(), "sh"])
            .with_conf([("spark.authenticate.secret", "s3cret"), ("task.cpus", "1")]);
        manager.start(driver());
        manager.request_total_executors(1).unwrap();
        manager.stop(Duration::from_secs(10));
        let text = std::fs::read_to_string(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            "--driver 127.0.0.1:9 --cores 3 --executor-id 1 --hostname localhost --conf task.cpus=1"
        );
        assert_eq!(lines.next().unwrap(), "s3cret");
    }
}
