//! The driver's status page, JSON API and metrics against `flint run --ui` jobs with
//! real executor processes on 127.0.0.1: what they report equals what the job did, a
//! counter scraped twice grows, bad requests get their codes, slow clients do not hold
//! the job up, and the page itself, loaded in a headless Chromium (skipped, saying why,
//! when `chromium` is not installed: scripts/install-chromium installs it), shows the
//! job's live numbers. Every process is bounded in time and killed if the test fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

mod common;

use common::FLINT;
use flint_testkit::process::{wait_exit, Processes};

/// A `flint run --ui` job, its status page's address, and its stderr lines as they come.
struct UiJob {
    processes: Processes,
    address: SocketAddr,
    stderr: Receiver<String>,
    stdout: std::thread::JoinHandle<String>,
}

impl UiJob {
    /// Starts `tasks` tasks of `task` on 2 executors, and waits for the page's address.
    fn start(tasks: u32, task: &str) -> UiJob {
        let mut child = Command::new(FLINT)
            .args(["run", "--ui", "--executors", "2", "--tasks"])
            .arg(tasks.to_string())
            .args(["--task", task, "--conf", "ui.port=0"])
            .env("FLINT_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, stderr) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("[flint] {line}");
                let _ = lines.send(line);
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        let processes = Processes(vec![child]);
        let line = wait_line(&stderr, "status page at http://", Duration::from_secs(60));
        let address = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.trim_end_matches('/').parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        UiJob {
            processes,
            address,
            stderr,
            stdout,
        }
    }

    fn child(&mut self) -> &mut Child {
        &mut self.processes.0[0]
    }

    /// Waits for the job to end (the page then stays up), and returns its report.
    fn wait_job_end(&mut self, timeout: Duration) -> String {
        wait_line(&self.stderr, "stays up", timeout);
        String::new()
    }

    /// Ctrl-C: the page goes, the process exits well; returns its stdout.
    fn interrupt(mut self) -> String {
        let pid = self.child().id().to_string();
        let status = Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(status.success());
        let status = wait_exit(self.child(), Duration::from_secs(30));
        assert!(status.success(), "flint run --ui ended with {status}");
        let stdout = std::mem::replace(&mut self.stdout, std::thread::spawn(String::new));
        stdout.join().unwrap()
    }
}

#[track_caller]
fn wait_line(lines: &Receiver<String>, text: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(_) => {}
            Err(e) => panic!("no line with {text:?} within {timeout:?}: {e}"),
        }
    }
}

/// One request, raw; the status code and the body.
fn request(address: SocketAddr, raw: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // A server that refuses early may close before all of a huge request is written.
    let _ = stream.write_all(raw);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn get(address: SocketAddr, path: &str) -> (u16, String) {
    request(
        address,
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

fn get_json(address: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = get(address, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// The value of a sample line `name` (with its labels) in a Prometheus text.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
        .trim()
        .parse()
        .unwrap()
}

const SUCCEEDED: &str = "flint_tasks_finished_total{outcome=\"succeeded\"}";

#[test]
fn the_api_and_metrics_count_what_the_job_did() {
    const TASKS: u32 = 1500;
    // 2 executors of 1 core, 2 ms a task: about 1.5 s of work.
    let mut job = UiJob::start(TASKS, "sleep:2");
    let address = job.address;

    // While it runs: a counter scraped twice grows (once the executors are in).
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let first = sample(&get(address, "/metrics").1, SUCCEEDED);
        if first > 0.0 {
            break first;
        }
        assert!(
            Instant::now() < deadline,
            "no task finished within a minute"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(400));
    let second = sample(&get(address, "/metrics").1, SUCCEEDED);
    assert!(
        second > first,
        "{SUCCEEDED} did not grow while the job ran: {first} then {second}"
    );
    assert!(
        second < f64::from(TASKS),
        "the job ended too soon to see it run"
    );

    // Slow clients, holding connections without a byte, do not hold the job up.
    let silent: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();

    // Bad requests get their codes, answered while the silent clients hold theirs.
    assert_eq!(get(address, "/no/such/page").0, 404);
    assert_eq!(
        get(address, "/api/v1/applications/someone-else/jobs").0,
        404
    );
    let huge_head = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    assert_eq!(request(address, huge_head.as_bytes()).0, 431);
    let body = "GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000000\r\n\r\nxx";
    assert_eq!(request(address, body.as_bytes()).0, 413);
    let post = "POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(request(address, post.as_bytes()).0, 405);

    job.wait_job_end(Duration::from_secs(120));
    drop(silent);

    // Once it ended, every count is the job's.
    let apps = get_json(address, "/api/v1/applications");
    let app_id = apps[0]["id"].as_str().unwrap().to_owned();
    // The driver stopped: the attempt is complete.
    assert_eq!(apps[0]["attempts"][0]["completed"], true, "{apps}");
    assert!(apps[0]["attempts"][0]["startTime"]
        .as_str()
        .unwrap()
        .ends_with("GMT"));
    let jobs = get_json(address, &format!("/api/v1/applications/{app_id}/jobs"));
    assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs}");
    assert_eq!(jobs[0]["status"], "SUCCEEDED");
    assert_eq!(jobs[0]["numTasks"], TASKS);
    assert_eq!(jobs[0]["numCompletedTasks"], TASKS);
    assert_eq!(jobs[0]["numFailedTasks"], 0);
    assert_eq!(jobs[0]["numActiveTasks"], 0);
    let stages = get_json(address, &format!("/api/v1/applications/{app_id}/stages"));
    assert_eq!(stages[0]["status"], "COMPLETE");
    assert_eq!(stages[0]["numCompleteTasks"], TASKS);
    let executors = get_json(address, &format!("/api/v1/applications/{app_id}/executors"));
    let executors = executors.as_array().unwrap();
    assert_eq!(executors.len(), 2);
    let finished: u64 = executors
        .iter()
        .map(|e| e["completedTasks"].as_u64().unwrap())
        .sum();
    assert_eq!(finished, u64::from(TASKS));
    for executor in executors {
        assert_eq!(executor["isActive"], true);
        assert_eq!(executor["totalCores"], 1);
        assert_eq!(executor["hostPort"], "localhost");
        assert!(
            executor["sinceHeartbeatMs"].as_u64().is_some(),
            "{executor}"
        );
    }
    let metrics = get(address, "/metrics").1;
    assert_eq!(sample(&metrics, SUCCEEDED), f64::from(TASKS));
    assert_eq!(
        sample(&metrics, "flint_task_launch_latency_seconds_count"),
        f64::from(TASKS)
    );
    assert_eq!(
        sample(
            &metrics,
            "flint_task_launch_latency_seconds_bucket{le=\"+Inf\"}"
        ),
        f64::from(TASKS)
    );
    // 2 ms tasks: none ended faster than launched, all within a second.
    assert_eq!(
        sample(
            &metrics,
            "flint_task_launch_latency_seconds_bucket{le=\"0.001\"}"
        ),
        0.0
    );
    assert_eq!(
        sample(&metrics, "flint_jobs_total{state=\"succeeded\"}"),
        1.0
    );
    assert_eq!(sample(&metrics, "flint_executors"), 2.0);
    // Every result came as a frame on an executor's connection.
    assert!(sample(&metrics, "flint_rpc_frames_received_total") > f64::from(TASKS));
    assert!(sample(&metrics, "flint_rpc_sent_bytes_total") > 0.0);
    assert_eq!(
        sample(&metrics, "flint_rpc_connections_accepted_total"),
        2.0
    );
    let status = get_json(address, "/api/v1/status");
    assert_eq!(status["tasksFinished"], TASKS);
    assert_eq!(status["driverStopped"], true);
    assert!(status["tasksPerSec"].as_f64().unwrap() > 0.0, "{status}");
    assert!(status["latencyP50Ms"].as_f64().unwrap() >= 1.0, "{status}");

    let report = job.interrupt();
    assert!(report.contains(&format!("{TASKS} tasks")), "{report}");
}

#[test]
fn a_frame_that_breaks_the_protocol_is_counted_as_a_refusal() {
    let mut job = UiJob::start(400, "sleep:5");
    let address = job.address;
    let before = sample(
        &get(address, "/metrics").1,
        "flint_rpc_connections_refused_total{reason=\"protocol\"}",
    );
    assert_eq!(before, 0.0);
    // The driver's RPC address is not on the page: the executors' command lines have it.
    let rpc = driver_rpc_address(job.child().id());
    let mut peer = TcpStream::connect(rpc).unwrap();
    peer.write_all(&[0xff; 64]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = sample(
            &get(address, "/metrics").1,
            "flint_rpc_connections_refused_total{reason=\"protocol\"}",
        );
        if now == 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no protocol refusal counted");
        std::thread::sleep(Duration::from_millis(100));
    }
    job.wait_job_end(Duration::from_secs(120));
    job.interrupt();
}

/// The driver's RPC address, from the `--driver` argument of an executor it started.
fn driver_rpc_address(driver_pid: u32) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Each thread's children: the executor supply thread starts them.
        let mut children = String::new();
        for task in std::fs::read_dir(format!("/proc/{driver_pid}/task"))
            .unwrap()
            .flatten()
        {
            children += &std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            children.push(' ');
        }
        for child in children.split_whitespace() {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if let Some(at) = args.iter().position(|a| a == "--driver") {
                if let Some(Ok(address)) = args.get(at + 1).map(|a| a.parse()) {
                    return address;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no executor of {driver_pid} found"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The text of the element with `id` in a dumped DOM.
fn element_text(dom: &str, id: &str) -> Option<String> {
    let start = dom.find(&format!("id=\"{id}\""))?;
    let after = &dom[start..];
    let open_end = after.find('>')? + 1;
    let close = after[open_end..].find('<')?;
    Some(after[open_end..open_end + close].to_owned())
}

fn chromium() -> Option<String> {
    let found = Command::new("sh")
        .args(["-c", "command -v chromium"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&found.stdout).trim().to_owned();
    (found.status.success() && !path.is_empty()).then_some(path)
}

/// Runs headless Chromium with `args` on `url`, bounded in time; its stdout.
fn headless(chromium: &str, args: &[&str], url: &str) -> String {
    let profile = tempdir("chromium-profile");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--window-size=1280,1400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let mut processes = Processes(vec![child]);
    let status = wait_exit(&mut processes.0[0], Duration::from_secs(90));
    assert!(status.success(), "chromium {args:?} ended with {status}");
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap()
}

fn tempdir(name: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_page_in_headless_chromium_shows_the_running_job() {
    let Some(chromium) = chromium() else {
        eprintln!(
            "SKIPPED the_page_in_headless_chromium_shows_the_running_job: `chromium` is not \
             installed (scripts/install-chromium installs Debian's package)"
        );
        return;
    };
    const TASKS: u32 = 4000;
    // 2 executors of 1 core, 5 ms a task: about 10 s, long enough for Chromium to start.
    let mut job = UiJob::start(TASKS, "sleep:5");
    let url = format!("http://{}/", job.address);

    // The script polls every 500 ms; a virtual time budget lets it run a few times.
    let dom = headless(
        &chromium,
        &["--virtual-time-budget=3000", "--dump-dom"],
        &url,
    );
    let finished: u32 = element_text(&dom, "tasks-finished")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no tasks-finished number in the DOM:\n{dom}"));
    let executors: u32 = element_text(&dom, "executor-count")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no executor-count in the DOM:\n{dom}"));
    assert_eq!(executors, 2);
    assert!(
        finished > 0 && finished < TASKS,
        "tasks-finished {finished} while the job runs"
    );
    assert_eq!(element_text(&dom, "state").as_deref(), Some("live"));
    assert!(dom.contains("<polyline id=\"chart-line\""), "no chart");

    let shot_dir = tempdir("status-page");
    let shot = shot_dir.join("status-page.png");
    headless(
        &chromium,
        &[
            "--virtual-time-budget=3000",
            &format!("--screenshot={}", shot.display()),
        ],
        &url,
    );
    let png = std::fs::read(&shot).expect("chromium wrote no screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    assert!(png.len() > 10_000, "a screenshot of {} bytes", png.len());
    eprintln!("the status page's screenshot: {}", shot.display());

    // A later look shows more done: the numbers are live.
    let later = headless(
        &chromium,
        &["--virtual-time-budget=2000", "--dump-dom"],
        &url,
    );
    let later_finished: u32 = element_text(&later, "tasks-finished")
        .and_then(|t| t.parse().ok())
        .unwrap();
    assert!(
        later_finished > finished,
        "tasks-finished went from {finished} to {later_finished}"
    );
    job.wait_job_end(Duration::from_secs(120));
    job.interrupt();
}
