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
    let mut child = Command::new(FLINT)
        .args(args)
        .env("FLINT_LOG", "warn")
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
            "flint run needs at least 1 executor (--executors)",
        ),
        (
            &["driver", "--executors", "0"][..],
            "flint driver needs at least 1 executor (--executors)",
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
            "invalid value '-5' for '--executors <EXECUTORS>'",
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
fn negative_counts_are_invalid_values() {
    for args in [
        &["run", "--executors", "-5"][..],
        &["run", "--tasks", "-1"][..],
        &["executor", "--driver", "127.0.0.1:1", "--cores", "-2"][..],
        &["bench", "--samples", "-3"][..],
    ] {
        let output = flint(args, Duration::from_secs(20));
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("invalid value '-"), "{args:?}: {stderr}");
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
