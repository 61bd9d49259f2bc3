//! The launches of one offer round, gathered while the driver carries out the core's
//! outputs and sent as one frame per executor: a [`Message::LaunchTasks`] where an
//! executor gets several, the seeds' [`Message::LaunchTask`] where it gets one.
//!
//! With launch pipelining an offer round gives each executor many tasks, one after the
//! other in round-robin order. A frame each would pay a header, a checksum, a route and
//! a turn of the executor's loop per task; gathered, they are paid once per executor and
//! round. The glue sends the batch as soon as the core has no more outputs queued (the
//! round's last launch was taken), and before it carries out any other output, so that
//! every executor still sees the driver's messages in the order the core decided them,
//! and a launch refused goes back to the core in the same run of outputs.
//!
//! Nothing here allocates once the two buffers have grown to the largest round.
//!
//! [`Message::LaunchTasks`]: flint_wire::Message::LaunchTasks
//! [`Message::LaunchTask`]: flint_wire::Message::LaunchTask

use flint_wire::TaskDescription;

use crate::core::driver_core::PeerId;

/// The most tasks one [`Message::LaunchTasks`] frame carries.
///
/// [`Message::LaunchTasks`]: flint_wire::Message::LaunchTasks
pub(crate) const MAX_TASKS_PER_FRAME: usize = 256;

/// The most bytes of tasks (as [`encoded_size_estimate`] counts them) one frame carries,
/// far below any `rpc.message.maxSize`: a frame of large tasks is cut into several
/// rather than risk the limit, and one refused anyway is sent again task by task.
pub(crate) const MAX_BYTES_PER_FRAME: usize = 256 * 1024;

/// What the encoded form of `task` takes, near enough: its fixed part and what its
/// strings and lists add.
pub(crate) fn encoded_size_estimate(task: &TaskDescription) -> usize {
    let extras = task.extras();
    let dependencies = extras
        .added_files
        .iter()
        .chain(&extras.added_jars)
        .map(|d| d.name.len() + 24)
        .sum::<usize>();
    let properties = extras
        .properties
        .iter()
        .map(|p| p.key.len() + p.value.len() + 16)
        .sum::<usize>();
    128 + task.executor_id.len()
        + task.name.text_len()
        + task.serialized_task.len()
        + dependencies
        + properties
}

/// The launches of one batch of outputs, in the order the core made them, to be sent
/// per executor. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct LaunchBatch {
    /// The tasks, in the order they were pushed; each is taken out once sent.
    tasks: Vec<Option<TaskDescription>>,
    /// (peer, position in `tasks`), sorted by [`LaunchBatch::take_run`]: the tasks
    /// themselves are large, their keys are sorted instead.
    keys: Vec<(u32, u32)>,
    /// Where [`LaunchBatch::take_run`] is in `keys` once sorted.
    next: usize,
    /// Whether `keys` was sorted since the last push.
    sorted: bool,
}

impl LaunchBatch {
    /// Keeps a launch of `task` on `peer` for the next [`LaunchBatch::take_run`].
    pub fn push(&mut self, peer: PeerId, task: TaskDescription) {
        debug_assert!(!self.sorted, "a launch pushed while runs are being taken");
        let position = u32::try_from(self.tasks.len()).unwrap_or(u32::MAX);
        self.tasks.push(Some(task));
        self.keys.push((peer.0, position));
    }

    /// Whether no launch waits.
    pub fn is_empty(&self) -> bool {
        self.next == self.keys.len()
    }

    /// Moves the next run of launches of one executor into `frame` (empty), at most
    /// [`MAX_TASKS_PER_FRAME`] of them and about [`MAX_BYTES_PER_FRAME`], in the order
    /// they were pushed; returns the executor, or `None` once every launch was taken
    /// (the batch is then empty, its buffers kept for the next).
    pub fn take_run(&mut self, frame: &mut Vec<TaskDescription>) -> Option<PeerId> {
        debug_assert!(frame.is_empty());
        if self.next == self.keys.len() {
            self.tasks.clear();
            self.keys.clear();
            self.next = 0;
            self.sorted = false;
            return None;
        }
        if !self.sorted {
            // Unstable (it allocates nothing); positions are unique, so the order of
            // each executor's tasks is kept.
            self.keys.sort_unstable();
            self.sorted = true;
        }
        let peer = self.keys[self.next].0;
        let mut bytes = 0usize;
        while let Some(&(next_peer, position)) = self.keys.get(self.next) {
            if next_peer != peer || frame.len() == MAX_TASKS_PER_FRAME {
                break;
            }
            let Some(slot) = self.tasks.get_mut(position as usize) else {
                // Only past 2^32 launches in one round; skipped, never looped on.
                self.next += 1;
                continue;
            };
            let size = slot.as_ref().map_or(0, encoded_size_estimate);
            if !frame.is_empty() && bytes + size > MAX_BYTES_PER_FRAME {
                break;
            }
            bytes += size;
            frame.extend(slot.take());
            self.next += 1;
        }
        Some(PeerId(peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(task_id: u64, payload: usize) -> TaskDescription {
        TaskDescription {
            task_id,
            serialized_task: bytes::Bytes::from(vec![0u8; payload]),
            ..flint_wire::fuzzing::sample_task(0)
        }
    }

    fn runs(batch: &mut LaunchBatch) -> Vec<(usize, Vec<u64>)> {
        let mut frame = Vec::new();
        let mut runs = Vec::new();
        while let Some(peer) = batch.take_run(&mut frame) {
            runs.push((peer.index(), frame.drain(..).map(|t| t.task_id).collect()));
        }
        runs
    }

    #[test]
    fn round_robin_launches_become_one_run_per_executor_in_launch_order() {
        let mut batch = LaunchBatch::default();
        for task_id in 0..6 {
            batch.push(PeerId(task_id as u32 % 3), task(task_id, 8));
        }
        batch.push(PeerId(1), task(6, 8));
        assert_eq!(
            runs(&mut batch),
            vec![(0, vec![0, 3]), (1, vec![1, 4, 6]), (2, vec![2, 5])]
        );
        assert!(batch.is_empty());
        // The buffer is reused: a second round goes the same way.
        batch.push(PeerId(2), task(7, 8));
        assert_eq!(runs(&mut batch), vec![(2, vec![7])]);
    }

    #[test]
    fn a_run_is_cut_at_the_task_count_and_the_byte_budget() {
        let mut batch = LaunchBatch::default();
        for task_id in 0..(MAX_TASKS_PER_FRAME as u64 + 1) {
            batch.push(PeerId(0), task(task_id, 8));
        }
        let lengths: Vec<usize> = runs(&mut batch).iter().map(|(_, t)| t.len()).collect();
        assert_eq!(lengths, vec![MAX_TASKS_PER_FRAME, 1]);

        let big = MAX_BYTES_PER_FRAME / 2;
        for task_id in 0..3 {
            batch.push(PeerId(0), task(task_id, big));
        }
        let lengths: Vec<usize> = runs(&mut batch).iter().map(|(_, t)| t.len()).collect();
        assert_eq!(
            lengths,
            vec![1, 1, 1],
            "two of {big} B and their overhead exceed the budget"
        );

        // A task larger than the budget still goes, alone.
        batch.push(PeerId(0), task(9, MAX_BYTES_PER_FRAME * 2));
        assert_eq!(runs(&mut batch), vec![(0, vec![9])]);
    }
}
