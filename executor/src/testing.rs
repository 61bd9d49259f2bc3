//! Helpers the crate's unit tests share: an executor whose status updates are collected,
//! task descriptions, launch frames, and bounded waits.

// The loom models use only some of them.
#![cfg_attr(loom, allow(dead_code))]

use std::sync::{mpsc, Mutex};
use std::time::Duration;

use flint_rpc::RpcError;
use flint_wire::{
    ArchivedTaskDescription, Frame, Message, StatusUpdate, TaskDescription, TaskPayload,
};

use crate::config::ExecutorConfig;
use crate::executor::Executor;
use crate::registry::TaskRegistry;
use crate::status::StatusSender;

/// How long a test waits for anything before it fails.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Sends every status update to a channel, at once.
pub(crate) struct Collect(pub(crate) Mutex<mpsc::Sender<StatusUpdate>>);

impl StatusSender for Collect {
    fn send_status(&self, message: &Message) -> Result<(), RpcError> {
        let updates = message.status_updates();
        assert!(!updates.is_empty(), "not a status update: {message:?}");
        for update in updates {
            let _ = self.0.lock().unwrap().send(update.clone());
        }
        Ok(())
    }
}

/// An executor of `cores` runners whose status updates come out of the receiver.
pub(crate) fn executor(
    cores: u32,
    max_message_size: usize,
    registry: TaskRegistry,
) -> (Executor, mpsc::Receiver<StatusUpdate>) {
    let (tx, rx) = mpsc::channel();
    let config = ExecutorConfig {
        max_message_size,
        ..ExecutorConfig::new("7", "localhost", cores)
    };
    let executor = Executor::new(config, registry, Collect(Mutex::new(tx))).unwrap();
    (executor, rx)
}

/// A one-cpu task of executor "7" running `function` on `input`.
pub(crate) fn task(task_id: u64, function: &str, input: &[u8]) -> TaskDescription {
    TaskDescription {
        task_id,
        attempt_number: 0,
        executor_id: "7".into(),
        name: format!("task {task_id}.0 in stage 0.0 (TID {task_id})").into(),
        index: task_id as u32,
        partition_id: task_id as u32,
        extras: None,
        cpus: 1,
        serialized_task: TaskPayload::encode(function, input).unwrap(),
    }
}

/// Waits until `check` holds, failing the test after [`WAIT`].
#[track_caller]
pub(crate) fn wait_until(what: &str, check: impl Fn() -> bool) {
    flint_testkit::wait::wait_until(what, WAIT, check);
}

/// An archived launch of `task`, in a frame of its own.
pub(crate) fn launch_frame(task: TaskDescription) -> Frame {
    let route = flint_wire::Route::OneWay {
        endpoint: "Executor".into(),
    };
    flint_testkit::frames::frame_of(&route, &Message::LaunchTask(task))
}

/// The task description a launch frame carries, in place.
pub(crate) fn archived(frame: &Frame) -> &ArchivedTaskDescription {
    match &frame.envelope().unwrap().message {
        flint_wire::ArchivedMessage::LaunchTask(task) => task,
        other => panic!("not a launch: {other:?}"),
    }
}
