//! Child processes of a test, and what `/proc` says of a process.

use std::fmt::Display;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Processes started by a test (executors, `flint run`), killed and reaped when it
/// ends, however it ends.
pub struct Processes(pub Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for `child` to exit, failing the test after `timeout`.
#[track_caller]
pub fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "process {} did not exit within {timeout:?}",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A size field of `/proc/PID/status` of process `pid` (`"self"`: this one), in bytes
/// (Linux only): `VmRSS`, resident now, `VmHWM`, resident at its peak.
pub fn proc_status_bytes(pid: impl Display, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    kib * 1024
}

/// The resident memory of process `pid` (`"self"`: this one), in bytes: its `VmRSS`.
pub fn resident_bytes(pid: impl Display) -> u64 {
    proc_status_bytes(pid, "VmRSS")
}

/// The descriptors process `pid` (`"self"`: this one) has open (Linux only): a test of
/// an attack checks they are back to where they were once it ends.
pub fn open_descriptors(pid: impl Display) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// The CPU time process `pid` (`"self"`: this one) has used, user and system, from
/// `/proc/PID/stat` (Linux only).
pub fn cpu_time(pid: impl Display) -> Duration {
    stat_cpu_time(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap())
}

/// The CPU time the threads of process `pid` named `name` have used (Linux only): an
/// event loop's, say, apart from the rest of a test process.
pub fn thread_cpu_time(pid: impl Display, name: &str) -> Duration {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            if let Ok(stat) = std::fs::read_to_string(path.join("stat")) {
                total += stat_cpu_time(&stat);
            }
        }
    }
    total
}

/// utime + stime of a `stat` line of `/proc`, in clock ticks of the usual 100 a second
/// (USER_HZ, 100 on every architecture Linux runs flint on).
fn stat_cpu_time(stat: &str) -> Duration {
    // Fields after the command name, which is in parentheses and may hold spaces:
    // utime and stime are the 12th and 13th of them.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn sleeper() -> Child {
        std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap()
    }

    #[test]
    fn this_process_is_resident_and_its_peak_is_at_least_that() {
        let now = resident_bytes("self");
        assert!(now > 0);
        assert!(proc_status_bytes(std::process::id(), "VmHWM") >= now);
    }

    #[test]
    fn spinning_is_cpu_time_of_the_process_and_of_the_thread() {
        // However busy the machine, spinning until 100 ms of CPU are counted ends: the
        // process's and the thread's figures both grow by them.
        let spinner = std::thread::Builder::new()
            .name("cpu-spinner".to_owned())
            .spawn(|| {
                let before = cpu_time("self");
                let started = Instant::now();
                let mut x = 0u64;
                while cpu_time("self") < before + Duration::from_millis(100) {
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "no CPU time counted"
                    );
                    for _ in 0..100_000 {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
                thread_cpu_time("self", "cpu-spinner")
            })
            .unwrap();
        let spun = spinner.join().unwrap();
        assert!(spun >= Duration::from_millis(50), "{spun:?}");
        assert_eq!(thread_cpu_time("self", "no-such-thread"), Duration::ZERO);
    }

    #[test]
    fn a_killed_child_exits_and_dropped_processes_are_killed_and_reaped() {
        let mut child = sleeper();
        child.kill().unwrap();
        assert!(!wait_exit(&mut child, Duration::from_secs(10)).success());
        let child = sleeper();
        let pid = child.id();
        drop(Processes(vec![child]));
        // Reaped: no zombie left under its pid.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
