//! Helpers shared by the facade's end-to-end tests that need the `flint` binary of this
//! build or the scheduler's types: executor processes, a recording listener, task
//! payloads. The generic ones (bounded waits, killing children) are in flint-testkit.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use flint::rpc::Conf;
use flint::scheduler::{SchedulerEvent, SchedulerListener, TaskEndReason};
use flint::wire::{TaskPayload, TaskState};

/// A configuration of `pairs` over a quick heartbeat (500 ms) and a `network.timeout` of
/// 20 s, for jobs on executor processes of this host.
pub fn conf(pairs: &[&str]) -> Conf {
    let mut all = vec!["executor.heartbeatInterval=500ms", "network.timeout=20s"];
    all.extend_from_slice(pairs);
    Conf::from_pairs(all).unwrap()
}

/// The `flint` binary of this build.
pub const FLINT: &str = env!("CARGO_BIN_EXE_flint");

/// Records the events that are not about single tasks, and every task end's state.
#[derive(Clone, Default)]
pub struct Recorder {
    pub events: Arc<Mutex<Vec<SchedulerEvent>>>,
    pub task_ends: Arc<Mutex<Vec<(u64, String, TaskState)>>>,
    pub task_starts: Arc<Mutex<Vec<(u64, String)>>>,
}

impl SchedulerListener for Recorder {
    fn on_event(&mut self, event: &SchedulerEvent) {
        match event {
            SchedulerEvent::TaskStart {
                task_id,
                executor_id,
                ..
            } => self
                .task_starts
                .lock()
                .unwrap()
                .push((*task_id, executor_id.to_string())),
            SchedulerEvent::TaskEnd {
                task_id,
                executor_id,
                state,
                ..
            } => self
                .task_ends
                .lock()
                .unwrap()
                .push((*task_id, executor_id.to_string(), *state)),
            other => self.events.lock().unwrap().push(other.clone()),
        }
    }
}

impl Recorder {
    pub fn removed(&self) -> Vec<(String, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                SchedulerEvent::ExecutorRemoved {
                    executor_id,
                    reason,
                } => Some((executor_id.to_string(), reason.clone())),
                _ => None,
            })
            .collect()
    }

    pub fn added(&self) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, SchedulerEvent::ExecutorAdded { .. }))
            .count()
    }
}

/// A serialized task: the built-in `function` with `input`.
pub fn task(function: &str, input: &str) -> bytes::Bytes {
    TaskPayload::encode(function, input.as_bytes()).unwrap()
}

/// A `flint executor` of one core with `conf`, registering with the driver at `driver`
/// as `executor_id`; its stderr goes to `stderr`.
pub fn spawn_executor(
    driver: SocketAddr,
    executor_id: &str,
    conf: &[&str],
    stderr: Stdio,
) -> Child {
    let mut command = Command::new(FLINT);
    command
        .args(["executor", "--driver", &driver.to_string(), "--cores", "1"])
        .args(["--executor-id", executor_id]);
    for pair in conf {
        command.args(["--conf", pair]);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// The map outputs each executor computed in the map stage's first attempt.
pub type OutputsByExecutor = BTreeMap<String, u32>;

/// The executor holding the most map outputs (the lowest id among equals), and how many.
pub fn most_outputs(outputs: &OutputsByExecutor) -> (String, u32) {
    let (id, held) = outputs
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .expect("the map stage ran somewhere");
    (id.clone(), *held)
}

/// Calls `act` once, on the driver's event loop, when the job's map stage (its first
/// stage submitted) first completes: in the turn that submits the reduce stage, before
/// any reduce task is launched. `act` gets the map outputs each executor computed; it
/// must be quick (a signal, a few files), as every listener must.
pub struct AtMapStageEnd<F> {
    map_stage: Option<u32>,
    outputs: OutputsByExecutor,
    act: Option<F>,
}

impl<F: FnOnce(&OutputsByExecutor) + Send + 'static> AtMapStageEnd<F> {
    pub fn new(act: F) -> Self {
        AtMapStageEnd {
            map_stage: None,
            outputs: BTreeMap::new(),
            act: Some(act),
        }
    }
}

impl<F: FnOnce(&OutputsByExecutor) + Send> SchedulerListener for AtMapStageEnd<F> {
    fn on_event(&mut self, event: &SchedulerEvent) {
        match event {
            SchedulerEvent::StageSubmitted { task_set, .. } if self.map_stage.is_none() => {
                self.map_stage = Some(task_set.stage_id);
            }
            SchedulerEvent::TaskEnd {
                task_set,
                executor_id,
                reason: TaskEndReason::Success(_),
                ..
            } if Some(task_set.stage_id) == self.map_stage => {
                *self.outputs.entry(executor_id.to_string()).or_default() += 1;
            }
            SchedulerEvent::StageCompleted {
                task_set,
                failure: None,
                ..
            } if Some(task_set.stage_id) == self.map_stage => {
                if let Some(act) = self.act.take() {
                    act(&self.outputs);
                }
            }
            _ => {}
        }
    }
}
