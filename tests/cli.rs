//! The `flint` command as a person (or a script reading `--json`) meets it: warnings said
//! once, failures said in one line (one JSON object under `--json`), files checked before
//! anything starts, stages and jobs in the user's numbering. Every process is a real
//! `flint` on 127.0.0.1; every run is bounded in time and killed if the test fails.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::FLINT;
use flint_testkit::process::{wait_exit, Processes};

/// Runs `flint ARGS`, killed (with what it started, which dies with its driver) if it
/// takes longer than `timeout`.
fn flint(args: &[&str], timeout: Duration) -> Output {
    flint_with(args, &[], timeout)
}

/// [`flint`] with more environment (`FLINT_LOG` is `warn` unless `env` sets it).
fn flint_with(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let mut child = Command::new(FLINT)
        .args(args)
        .env("FLINT_LOG", "warn")
        .env_remove("FLINT_LOG_FORMAT")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read while it runs, so that a full pipe never holds it up.
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = reader(Box::new(child.stdout.take().unwrap()));
    let stderr = reader(Box::new(child.stderr.take().unwrap()));
    let mut processes = Processes(vec![child]);
    let status = wait_exit(&mut processes.0[0], timeout);
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one JSON object a failed `--json` run prints on stdout: its error.
#[track_caller]
fn json_error(output: &Output) -> String {
    let stdout = text(&output.stdout);
    let value: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {stdout:?}"));
    let object = value.as_object().expect("an object");
    assert_eq!(object.len(), 1, "{stdout}");
    object["error"].as_str().expect("a string").to_owned()
}

/// A directory of its own under the temporary directory, removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("flint-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn a_misspelt_key_is_warned_about_once_not_again_by_each_executor() {
    let output = flint(
        &[
            "run",
            "--executors",
            "2",
            "--tasks",
            "10",
            "--conf",
            "executor.taskPrefech=4",
        ],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stderr
            .matches("did you mean executor.taskPrefetch?")
            .count(),
        1,
        "{stderr}"
    );
}

#[test]
fn under_json_every_failure_is_one_json_object_and_a_line_for_a_person() {
    let input = std::env::temp_dir().join(format!("flint-cli-absent-{}", std::process::id()));
    let input = input.to_str().unwrap();
    for (args, expected) in [
        (
            &["run", "--conf", "task.cpus=x"][..],
            r#"invalid value "x" for task.cpus"#,
        ),
        (
            &["run", "--executors", "0"][..],
            "invalid value '0' for '--executors <EXECUTORS>': zero; give 1 or more",
        ),
        (
            &["driver", "--executors", "0"][..],
            "invalid value '0' for '--executors <EXECUTORS>': zero; give 1 or more",
        ),
        (
            &["run", "--task", "slep:5"][..],
            "no built-in task function \"slep\" (did you mean sleep?)",
        ),
        (
            &["run", "--conf", "network.crypto.enabled=true"][..],
            "network.crypto.enabled=true needs authenticate=true",
        ),
        (
            &["run", "--job", "wordcount", "--input", input][..],
            "cannot read the input",
        ),
        // Refused by the command-line parser itself: still JSON.
        (
            &["run", "--executors", "-5"][..],
            "invalid value '-5' for '--executors <EXECUTORS>': a negative count",
        ),
        (&["driver", "--tasks", "many"][..], "invalid value 'many'"),
    ] {
        let started = Instant::now();
        let output = flint(&[args, &["--json"]].concat(), Duration::from_secs(20));
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        let error = json_error(&output);
        assert!(error.contains(expected), "{args:?}: {error}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?}");
    }
}

#[test]
fn negative_and_zero_counts_are_invalid_values_named_as_such() {
    for (args, says) in [
        (
            &["run", "--executors", "-5"][..],
            "a negative count; give 1 or more",
        ),
        (
            &["run", "--tasks", "-1"][..],
            "a negative count; give 1 or more",
        ),
        (
            &["executor", "--driver", "127.0.0.1:1", "--cores", "-2"][..],
            "a negative count; give 1 or more",
        ),
        (&["bench", "--samples", "-3"][..], "a negative count"),
        (
            &["bench", "--prefetch", "-3"][..],
            "a negative count; give 0 or more",
        ),
        (&["run", "--tasks", "0"][..], "zero; give 1 or more"),
        (&["run", "--cores", "0"][..], "zero; give 1 or more"),
        (&["run", "--job-timeout", "0"][..], "zero; give 1 or more"),
        (&["driver", "--executors", "0"][..], "zero; give 1 or more"),
        (
            &["executor", "--driver", "127.0.0.1:1", "--cores", "0"][..],
            "zero; give 1 or more",
        ),
        (
            &["run", "--tasks", "5000000000"][..],
            "too large: at most 4294967295",
        ),
        (&["run", "--tasks", "many"][..], "not a whole number"),
    ] {
        let started = Instant::now();
        let output = flint(args, Duration::from_secs(20));
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        let flag = args[args.len() - 2];
        assert!(
            stderr.contains(&format!(
                "invalid value '{}' for '{flag} <",
                args[args.len() - 1]
            )) && stderr.contains(says),
            "{args:?}: {stderr}"
        );
        // Refused by the parser: nothing started, nothing waited for.
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
    }
}

#[test]
fn a_task_that_is_no_built_in_function_is_refused_before_anything_starts() {
    for (task, says) in [
        (
            "bogus",
            "no built-in task function \"bogus\"; they are: noop, sleep:MS, echo:TEXT, \
             fail-n-attempts:N, large-result:SIZE, spin:MS, exit-process:CODE",
        ),
        (
            "wordcount-map",
            "no built-in task function \"wordcount-map\"",
        ),
        ("sleep:1s", "sleep takes a number of milliseconds"),
        (
            "exit-process:0",
            "exit-process takes an exit code from 1 to 255",
        ),
    ] {
        for command in ["run", "driver"] {
            let started = Instant::now();
            let output = flint(&[command, "--task", task], Duration::from_secs(20));
            let stderr = text(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{task}: {stderr}");
            assert!(
                stderr.starts_with(&format!(
                    "error: invalid value '{task}' for '--task <TASK>': {says}"
                )),
                "{task}: {stderr}"
            );
            // No executor was started, no driver waited for one.
            assert!(!stderr.contains("executor"), "{task}: {stderr}");
            assert!(started.elapsed() < Duration::from_secs(5), "{task}");
        }
    }
}

#[test]
fn help_shows_examples_and_the_environment() {
    let output = flint(&["--help"], Duration::from_secs(20));
    assert!(output.status.success());
    let help = text(&output.stdout);
    for expected in [
        "Examples:\n  flint run --executors 2 --tasks 100000",
        "flint executor --driver driver-host:7077",
        "Environment:\n  FLINT_LOG ",
        "FLINT_LOG_FORMAT           text (default) or json",
        "FLINT_AUTHENTICATE_SECRET  authenticate.secret",
    ] {
        assert!(help.contains(expected), "{expected:?} in {help}");
    }
    for (command, expected) in [
        ("run", "Task functions (--task): noop, sleep:MS"),
        ("driver", "It prints the address executors register at"),
        ("executor", "tries again for executor.connectTimeout (30s)"),
    ] {
        let output = flint(&[command, "--help"], Duration::from_secs(20));
        assert!(output.status.success());
        let help = text(&output.stdout);
        assert!(help.contains("Examples:\n  "), "{command}: {help}");
        assert!(help.contains(expected), "{command}: {help}");
    }
}

#[test]
fn an_address_that_cannot_be_listened_on_is_named_with_its_key() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap();
    let port = format!("rpc.port={}", address.port());
    let output = flint(&["run", "--tasks", "1", "--conf", &port], RUN_TIMEOUT);
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.starts_with(&format!("flint: cannot listen on {address} (rpc.port): ")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    drop(taken);

    // 192.0.2.0/24 is reserved for documentation: no host has it.
    let output = flint(
        &["run", "--tasks", "1", "--conf", "rpc.bindAddress=192.0.2.1"],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot listen on 192.0.2.1:0 (rpc.bindAddress): "),
        "{stderr}"
    );
}

#[test]
fn input_and_output_files_are_checked_before_anything_starts() {
    let dir = TempDir::new("files");
    let missing = dir.path().join("missing.txt");
    let in_missing_dir = dir.path().join("no-such-dir").join("counts.tsv");
    let words = dir.path().join("words.txt");
    std::fs::write(&words, "b a\nb c b\n").unwrap();
    let counts = dir.path().join("counts.tsv");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    for (args, expected) in [
        (
            vec!["--input".to_owned(), path(&missing)],
            format!("cannot read the input {}: ", path(&missing)),
        ),
        (
            vec!["--input".to_owned(), path(dir.path())],
            format!(
                "cannot read the input {}: it is a directory",
                path(dir.path())
            ),
        ),
        (
            vec!["--output".to_owned(), path(&in_missing_dir)],
            format!("cannot write the output {}: ", path(&in_missing_dir)),
        ),
        (
            vec!["--output".to_owned(), path(dir.path())],
            format!(
                "cannot write the output {}: it is a directory",
                path(dir.path())
            ),
        ),
    ] {
        let started = Instant::now();
        let mut command = vec!["run", "--job", "wordcount", "--words", "100"];
        if args[0] == "--input" {
            command.truncate(3);
        }
        command.extend(args.iter().map(String::as_str));
        let output = flint(&command, RUN_TIMEOUT);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        // One line, before any executor started or stage ran.
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("flint: {expected}")),
            "{args:?}: {stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
    }
    assert!(!in_missing_dir.exists());

    // A readable input and a writable output: the counts, and no file left from checks.
    let output = flint(
        &[
            "run",
            "--job",
            "wordcount",
            "--executors",
            "1",
            "--input",
            &path(&words),
            "--output",
            &path(&counts),
        ],
        RUN_TIMEOUT,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        std::fs::read_to_string(&counts).unwrap(),
        "a\t1\nb\t3\nc\t1\n"
    );
}

#[test]
fn stage_jobs_speak_of_their_stages_and_timeout_as_the_user_knows_them() {
    // 10 records over 4 map tasks of one size each: the note says what runs.
    let output = flint(
        &[
            "run",
            "--job",
            "shuffle",
            "--executors",
            "1",
            "--records",
            "10",
            "--maps",
            "4",
            "--conf",
            "default.parallelism=3",
        ],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "flint: note: 10 records do not split evenly between 4 map tasks: each makes 3, \
             12 in all"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("flint: stage 1 (shuffle-write) done\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("flint: stage 2 (shuffle-count) done\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("1073741"), "{stderr}");
    // default.parallelism gives the reduce partitions --reduces does not.
    assert!(
        stdout.starts_with("shuffle of 12 records (4 maps, 3 reduces)"),
        "{stdout}"
    );

    // Without default.parallelism, Spark's default: the cores, at least 2.
    let output = flint(
        &[
            "run",
            "--job",
            "shuffle",
            "--executors",
            "1",
            "--records",
            "1000",
            "--json",
        ],
        RUN_TIMEOUT,
    );
    let report: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(
        (&report["maps"], &report["reduces"]),
        (&2.into(), &2.into())
    );

    // A job far longer than its --job-timeout is stopped at it, and said so in its terms.
    let started = Instant::now();
    let output = flint(
        &[
            "run",
            "--job",
            "shuffle",
            "--executors",
            "1",
            "--records",
            "1000000000000",
            "--record-size",
            "8",
            "--job-timeout",
            "1",
        ],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "flint: the job failed: the shuffle job did not finish within its job timeout \
             of 1s (--job-timeout)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("1073741"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// A port on 127.0.0.1 nothing listens on (it was free a moment ago), which no outgoing
/// connection takes meanwhile.
fn free_port() -> u16 {
    flint_testkit::ports::unused_port()
}

#[test]
fn an_executor_whose_driver_never_comes_tries_for_its_connect_timeout_then_says_so_once() {
    // Port 1: nobody listens, whatever the other tests bind meanwhile.
    let driver = "127.0.0.1:1";
    let started = Instant::now();
    let output = flint(
        &[
            "executor",
            "--driver",
            driver,
            "--conf",
            "executor.connectTimeout=1s",
        ],
        Duration::from_secs(20),
    );
    let took = started.elapsed();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(took >= Duration::from_secs(1), "{took:?}: {stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}: {stderr}");
    // One line, naming the address and what to change.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "Executor self-exiting due to : Cannot register with driver: {driver}: nothing \
             took a connection at {driver} within executor.connectTimeout=1s ("
        )),
        "{stderr}"
    );
}

#[test]
fn an_executor_started_before_its_driver_waits_for_it_and_runs_its_tasks() {
    let port = free_port();
    let dir = TempDir::new("early-executor");
    let log = dir.path().join("executor.err");
    let mut processes = Processes(vec![Command::new(FLINT)
        .args(["executor", "--driver", &format!("127.0.0.1:{port}")])
        .args(["--executor-id", "early-7"])
        .env("FLINT_LOG", "info")
        .env_remove("FLINT_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap()]);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    flint_testkit::wait::wait_until(
        "the executor found no driver",
        Duration::from_secs(20),
        || read_log().contains("Cannot reach the driver at"),
    );
    let output = flint(
        &[
            "driver",
            "--executors",
            "1",
            "--tasks",
            "50",
            "--json",
            "--startup-timeout",
            "30",
            "--conf",
            &format!("rpc.port={port}"),
        ],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}\n{}", read_log());
    let report: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(report["tasks"], 50, "{report}");
    assert_eq!(report["executors"], 1, "{report}");
    let status = wait_exit(&mut processes.0[0], Duration::from_secs(20));
    let executor_log = read_log();
    assert!(status.success(), "{status}: {executor_log}");
    assert!(
        executor_log.contains(&format!(
            "Cannot reach the driver at 127.0.0.1:{port} yet (Connection refused (os error \
             111)); trying again for up to executor.connectTimeout=30s"
        )),
        "{executor_log}"
    );
    assert!(
        executor_log.contains(&format!("Reached the driver at 127.0.0.1:{port} after ")),
        "{executor_log}"
    );
    // Every line says which executor it is from.
    for line in executor_log.lines() {
        assert!(line.contains(" executor{id=early-7}: "), "{line}");
    }
}

#[test]
fn info_logs_a_line_per_task_set_and_progress_and_labels_executors_lines() {
    // 2 executors of 1 core, 28 tasks of 400 ms: about 5.6 s, past the first progress
    // line at 5 s. stderr is a pipe here: no bar, lines instead.
    let output = flint_with(
        &[
            "run",
            "--executors",
            "2",
            "--tasks",
            "28",
            "--task",
            "sleep:400",
        ],
        &[(
            "FLINT_LOG",
            "info,flint_scheduler::core::task_set_manager=debug",
        )],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let with = |text: &str| {
        lines
            .iter()
            .filter(|l| l.contains(text))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        with("Adding task set 0.0 with 28 tasks").len(),
        1,
        "{stderr}"
    );
    assert_eq!(
        with(" INFO ")
            .iter()
            .filter(|l| l.contains("task set") || l.contains("TaskSet"))
            .count(),
        2,
        "{stderr}"
    );
    // Per task at DEBUG, one each.
    let finished = with("Finished task ");
    assert_eq!(finished.len(), 28, "{stderr}");
    assert!(finished.iter().all(|l| l.contains(" DEBUG ")), "{stderr}");
    // The periodic progress line.
    let progress = with(" INFO flint::progress: ");
    assert!(!progress.is_empty(), "{stderr}");
    assert!(
        progress
            .iter()
            .all(|l| l.contains("/28 tasks done (") && l.contains(" tasks/s, ETA ")),
        "{stderr}"
    );
    // Each executor's lines say which it is; the driver's do not.
    for id in ["1", "2"] {
        assert!(
            stderr.contains(&format!(
                " INFO executor{{id={id}}}: flint_executor::executor: Starting executor ID {id}"
            )),
            "{stderr}"
        );
    }
    assert!(
        with("flint_scheduler::")
            .iter()
            .all(|l| !l.contains("executor{id=")),
        "{stderr}"
    );
}

#[test]
fn json_log_format_gives_one_object_a_line() {
    let output = flint_with(
        &["run", "--executors", "2", "--tasks", "20"],
        &[("FLINT_LOG", "info"), ("FLINT_LOG_FORMAT", "json")],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let objects: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?} in {stderr}"))
        })
        .collect();
    assert!(objects.len() > 10, "{stderr}");
    for object in &objects {
        assert!(object["timestamp"].is_string(), "{object}");
        assert!(object["level"].is_string(), "{object}");
        assert!(object["target"].is_string(), "{object}");
        assert!(object["fields"]["message"].is_string(), "{object}");
    }
    let message =
        |object: &serde_json::Value| object["fields"]["message"].as_str().unwrap().to_owned();
    assert!(objects
        .iter()
        .any(|o| message(o) == "Adding task set 0.0 with 20 tasks" && o["level"] == "INFO"));
    // The executors' objects name them.
    for id in ["1", "2"] {
        assert!(
            objects.iter().any(|o| o["executor_id"] == id
                && message(o) == format!("Starting executor ID {id} on host localhost")),
            "{stderr}"
        );
    }

    // The command's own lines (a warning, the stages done) are objects too, whatever
    // the filter.
    let output = flint_with(
        &[
            "run",
            "--job",
            "shuffle",
            "--executors",
            "1",
            "--records",
            "1000",
            "--conf",
            "executor.taskPrefech=4",
        ],
        &[("FLINT_LOG_FORMAT", "json")],
        RUN_TIMEOUT,
    );
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let objects: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?} in {stderr}"))
        })
        .collect();
    let said = |level: &str, text: &str| {
        objects
            .iter()
            .any(|o| o["target"] == "flint" && o["level"] == level && message(o).contains(text))
    };
    assert!(
        said("WARN", "did you mean executor.taskPrefetch?"),
        "{stderr}"
    );
    assert!(said("INFO", "stage 1 (shuffle-write) done"), "{stderr}");
    assert!(said("INFO", "stage 2 (shuffle-count) done"), "{stderr}");
}

#[test]
fn the_progress_bar_on_a_terminal_shows_a_rounded_rate_and_an_eta() {
    // script(1) gives flint a terminal for stderr.
    let command = format!("{FLINT} run --executors 2 --tasks 600 --task sleep:2");
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("FLINT_LOG", "warn")
        .env_remove("FLINT_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1), from util-linux, gives the bar a terminal");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let mut processes = Processes(vec![child]);
    let status = wait_exit(&mut processes.0[0], RUN_TIMEOUT);
    let screen = text(&reader.join().unwrap());
    assert!(status.success(), "{screen}");
    // Redrawn in place: the last drawing of the bar before the report.
    let drawings: Vec<&str> = screen
        .split(['\r', '\n'])
        .filter(|part| part.contains("/600 tasks ("))
        .collect();
    assert!(!drawings.is_empty(), "{screen:?}");
    for drawing in &drawings {
        let rate = drawing
            .split("/600 tasks (")
            .nth(1)
            .and_then(|rest| rest.split(" tasks/s, ETA ").next())
            .unwrap_or_else(|| panic!("{drawing:?}"));
        // A whole number (with thousands separators) or one decimal below 10.
        let digits = rate.replace(',', "");
        assert!(
            digits.bytes().all(|b| b.is_ascii_digit())
                || (digits.len() <= 3 && digits.contains('.') && digits.parse::<f64>().is_ok()),
            "{drawing:?}"
        );
        let eta = drawing.split(" tasks/s, ETA ").nth(1).unwrap();
        assert!(
            eta.trim_end().ends_with("s)") || eta.contains("m)"),
            "{drawing:?}"
        );
    }
    assert!(
        screen.contains("600 tasks (sleep:2) on 2 executors"),
        "{screen:?}"
    );
}

#[test]
fn a_busy_load_out_of_range_is_refused_before_anything_starts() {
    for value in ["0", "101", "-5"] {
        let output = flint(&["bench", "--busy", value], Duration::from_secs(20));
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "--busy {value}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '--busy")),
            "--busy {value}: {stderr}"
        );
    }
}
