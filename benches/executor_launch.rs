//! The executor's share of launching a task, measured without a real driver.
//!
//! A fake driver (an RPC environment of this process that does nothing but launch a noop
//! task for every status update it gets, keeping `--in-flight` tasks launched, those it
//! launches at once in one `LaunchTasks` frame, as the driver does) drives an
//! executor (`run_executor`, 1 core) over real sockets on 127.0.0.1. Prints tasks per
//! second and the CPU time each thread spent per task (from
//! `/proc/self/task/*/schedstat`): the executor's event loop and its runner are what the
//! executor costs; the fake driver's loop is the floor of any driver.
//!
//! ```text
//! cargo bench --bench executor_launch -- [tasks] [in-flight]
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_executor::{run_executor, ExecutorConfig, TaskRegistry};
use flint_rpc::{Conf, Endpoint, EndpointContext, EndpointRef, Incoming, RpcEnv};
use flint_wire::{
    ArchivedMessage, Message, SharedStr, TaskDescription, TaskName, TaskPayload, DRIVER_ENDPOINT,
    EXECUTOR_ENDPOINT, HEARTBEAT_ENDPOINT,
};

#[derive(Default)]
struct Progress {
    reported: AtomicU64,
    executor: Mutex<Option<EndpointRef>>,
}

struct FakeDriver {
    progress: Arc<Progress>,
    executor: Option<EndpointRef>,
    executor_id: SharedStr,
    payload: Bytes,
    total: u64,
    in_flight: u64,
    launched: u64,
    reported: u64,
    unflushed: bool,
    /// The tasks of the next launch frame, kept for its capacity: the tasks launched at
    /// once go in one `LaunchTasks` frame, as the driver sends them.
    frame: Vec<TaskDescription>,
}

impl FakeDriver {
    fn launch_more(&mut self) {
        let Some(executor) = &self.executor else {
            return;
        };
        let mut frame = std::mem::take(&mut self.frame);
        while self.launched < self.total && self.launched - self.reported < self.in_flight {
            let task_id = self.launched;
            let task = TaskDescription {
                task_id,
                attempt_number: 0,
                executor_id: self.executor_id.clone(),
                name: TaskName::Numbered {
                    index: task_id as u32,
                    attempt: 0,
                    stage_id: 0,
                    stage_attempt_id: 0,
                    task_id,
                },
                index: task_id as u32,
                partition_id: task_id as u32,
                extras: None,
                cpus: 1,
                serialized_task: self.payload.clone(),
            };
            frame.push(task);
            self.launched += 1;
        }
        if let Some(message) = Message::take_launches(&mut frame) {
            executor
                .send_deferred(&message)
                .expect("the executor's connection takes the launches");
            self.unflushed = true;
            message.put_back_launches(&mut frame);
            frame.clear();
        }
        self.frame = frame;
    }
}

impl Endpoint for FakeDriver {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        match message.message() {
            ArchivedMessage::RegisterExecutor(registration) => {
                self.executor_id = SharedStr::from(registration.executor_id.as_str());
                let executor = message.sender_ref(EXECUTOR_ENDPOINT);
                *self.progress.executor.lock().unwrap() = Some(executor.clone());
                self.executor = Some(executor);
                message.reply(&Message::RegisteredExecutor).unwrap();
                self.launch_more();
            }
            updates
            @ (ArchivedMessage::StatusUpdate(_) | ArchivedMessage::StatusUpdates { .. }) => {
                self.reported += updates.status_updates().len() as u64;
                self.progress
                    .reported
                    .store(self.reported, Ordering::Release);
                self.launch_more();
            }
            other => panic!("the fake driver got {}", other.kind().name()),
        }
    }

    fn on_batch_end(&mut self, _ctx: &mut EndpointContext<'_>) {
        if std::mem::take(&mut self.unflushed) {
            if let Some(executor) = &self.executor {
                executor.flush();
            }
        }
    }
}

struct Heartbeats;

impl Endpoint for Heartbeats {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let _ = message.reply(&Message::HeartbeatResponse {
            reregister_block_manager: false,
        });
    }
}

/// CPU time so far of each thread of this process, by name: nanoseconds on a CPU, and
/// context switches.
fn thread_cpu() -> Vec<(String, u64, u64)> {
    let mut threads = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return threads;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let schedstat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
        let ns = schedstat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let switches = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        threads.push((name.trim().to_owned(), ns, switches));
    }
    threads
}

fn main() {
    // `cargo bench` passes --bench (and criterion's flags) to every bench: not ours.
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse().expect("numbers: [tasks] [in-flight]"))
        .collect();
    let total = args.first().copied().unwrap_or(1_000_000);
    let in_flight = args.get(1).copied().unwrap_or(65);
    let warm_up = (total / 10).min(50_000);

    let conf = Conf::from_pairs(["executor.heartbeatInterval=3600s", "network.timeout=7200s"])
        .expect("a valid configuration");
    let progress = Arc::new(Progress::default());
    let driver = RpcEnv::new(&conf).expect("the fake driver's environment");
    let driver_port = driver.address().port();
    let handle = driver.handle();
    handle
        .register(
            DRIVER_ENDPOINT,
            FakeDriver {
                progress: progress.clone(),
                executor: None,
                executor_id: SharedStr::from(""),
                payload: TaskPayload::encode("noop", b"").expect("a valid payload"),
                total,
                in_flight,
                launched: 0,
                reported: 0,
                unflushed: false,
                frame: Vec::new(),
            },
        )
        .expect("the fake driver's endpoint");
    handle
        .register(HEARTBEAT_ENDPOINT, Heartbeats)
        .expect("the heartbeat endpoint");

    let config = ExecutorConfig::from_conf(&conf, "1", "localhost", 1).expect("a valid conf");
    let driver_address = driver.address();
    let (exited, exit) = mpsc::channel();
    let executor_conf = conf.clone();
    std::thread::spawn(move || {
        let _ = exited.send(run_executor(
            &executor_conf,
            driver_address,
            config,
            TaskRegistry::with_builtins(),
        ));
    });

    let reported = || progress.reported.load(Ordering::Acquire);
    while reported() < warm_up {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (start, start_tasks, start_cpu) = (Instant::now(), reported(), thread_cpu());
    while reported() < total {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (seconds, tasks, end_cpu) = (
        start.elapsed().as_secs_f64(),
        reported() - start_tasks,
        thread_cpu(),
    );

    println!(
        "{tasks} noop tasks, {in_flight} in flight: {:.0} tasks/s",
        tasks as f64 / seconds
    );
    let driver_loop = format!("flint-rpc-{driver_port}");
    let mut executor_total = 0;
    for (name, end, end_switches) in &end_cpu {
        let (begin, begin_switches) = start_cpu
            .iter()
            .find(|(n, _, _)| n == name)
            .map_or((0, 0), |(_, ns, switches)| (*ns, *switches));
        let per_task = end.saturating_sub(begin) / tasks.max(1);
        let switches = (end_switches - begin_switches) as f64 * 100.0 / tasks.max(1) as f64;
        if per_task == 0 {
            continue;
        }
        let role = if *name == driver_loop {
            "fake driver loop"
        } else if name.starts_with("flint-rpc") {
            executor_total += per_task;
            "executor loop"
        } else if name.starts_with("Executor task") {
            executor_total += per_task;
            "runner"
        } else {
            "other"
        };
        println!(
            "  {role:<18} {name:<18} {per_task:>6} ns/task {switches:>6.2} switches/100 tasks"
        );
    }
    println!("  executor in all                       {executor_total:>6} ns/task");

    let executor = progress.executor.lock().unwrap().clone();
    if let Some(executor) = executor {
        let _ = executor.send(&Message::StopExecutor);
    }
    let _ = exit.recv_timeout(Duration::from_secs(10));
    driver.stop();
}
