//! What a task adds to the driver's accumulators while it runs.
//!
//! A task function adds through its [`crate::TaskContext`]
//! ([`add_long`](crate::TaskContext::add_long),
//! [`add_double`](crate::TaskContext::add_double),
//! [`merge_bytes`](crate::TaskContext::merge_bytes)) to accumulators the driver
//! registered, by id (the driver hands the ids to its tasks in their input). The
//! executor keeps one value per accumulator per task attempt (`TaskAccumulators`):
//! heartbeats carry copies of them as partial values while the task runs, and a task
//! that finishes with a result carries them with its status update (direct or indirect
//! result alike). A task that fails or is killed sends none: the driver merges a
//! partition's values once, from its first successful attempt.
//!
//! The list lives in the task's reused handle and is lent to the status update, then
//! taken back: a task that adds to one long accumulator allocates nothing for it once
//! the executor has warmed up.

use flint_wire::{AccumulatorUpdate, AccumulatorValue};

use crate::task::TaskError;

// The limits live in the wire crate: the driver enforces them too, on what it decodes.
// Their updates must fit beside a result in a message ([`crate::RESULT_OVERHEAD`]).
pub use flint_wire::{MAX_TASK_ACCUMULATORS, MAX_TASK_ACCUMULATOR_BYTES};

/// Why an add to an accumulator was refused. Returned by the context's add methods; with
/// `?` in a task function it fails the task.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccumulatorError {
    /// The task added a value of another kind to an accumulator it already added to.
    #[error("accumulator {id} holds a {holds} value in this task; a {added} value cannot be added to it")]
    KindMismatch {
        /// The accumulator.
        id: u64,
        /// The kind of what it holds.
        holds: &'static str,
        /// The kind of what was added.
        added: &'static str,
    },
    /// The task added to more than [`MAX_TASK_ACCUMULATORS`] accumulators.
    #[error("a task may add to at most {MAX_TASK_ACCUMULATORS} accumulators; accumulator {id} is one too many")]
    TooMany {
        /// The accumulator that was one too many.
        id: u64,
    },
    /// The task's bytes accumulators would take more than [`MAX_TASK_ACCUMULATOR_BYTES`].
    #[error("the bytes accumulators of a task may take at most {MAX_TASK_ACCUMULATOR_BYTES} bytes; accumulator {id} would take them to {total}")]
    TooLarge {
        /// The accumulator whose merge went past the limit.
        id: u64,
        /// The bytes they would take.
        total: usize,
    },
}

impl From<AccumulatorError> for TaskError {
    fn from(error: AccumulatorError) -> Self {
        TaskError::Failed(error.to_string())
    }
}

/// A task attempt's accumulator values, by id, in the order first added.
#[derive(Debug, Default)]
pub(crate) struct TaskAccumulators {
    /// Few per task: a linear search beats a map, and the list is what the status
    /// update carries.
    updates: Vec<AccumulatorUpdate>,
    /// Bytes held by bytes values.
    bytes: usize,
}

impl TaskAccumulators {
    /// The value of `id`, made `zero` if the task had not added to it.
    fn slot(
        &mut self,
        id: u64,
        zero: impl FnOnce() -> AccumulatorValue,
    ) -> Result<&mut AccumulatorValue, AccumulatorError> {
        let position = match self.updates.iter().position(|u| u.id == id) {
            Some(position) => position,
            None => {
                if self.updates.len() >= MAX_TASK_ACCUMULATORS {
                    return Err(AccumulatorError::TooMany { id });
                }
                self.updates.push(AccumulatorUpdate {
                    id,
                    name: None,
                    value: zero(),
                });
                self.updates.len() - 1
            }
        };
        Ok(&mut self.updates[position].value)
    }

    fn mismatch(id: u64, holds: &AccumulatorValue, added: &'static str) -> AccumulatorError {
        AccumulatorError::KindMismatch {
            id,
            holds: holds.kind_name(),
            added,
        }
    }

    pub(crate) fn add_long(&mut self, id: u64, n: i64) -> Result<(), AccumulatorError> {
        match self.slot(id, || AccumulatorValue::Long(0))? {
            AccumulatorValue::Long(sum) => {
                *sum = sum.wrapping_add(n);
                Ok(())
            }
            other => Err(Self::mismatch(id, other, "long")),
        }
    }

    pub(crate) fn add_double(&mut self, id: u64, x: f64) -> Result<(), AccumulatorError> {
        match self.slot(id, || AccumulatorValue::double(0.0))? {
            AccumulatorValue::Double(bits) => {
                *bits = (f64::from_bits(*bits) + x).to_bits();
                Ok(())
            }
            other => Err(Self::mismatch(id, other, "double")),
        }
    }

    /// Merges `value` into what the task holds for `id` with `merge` (the first value is
    /// taken as it is). Past [`MAX_TASK_ACCUMULATOR_BYTES`] the accumulator's value in
    /// this task is lost, and the error says so.
    pub(crate) fn merge_bytes(
        &mut self,
        id: u64,
        value: &[u8],
        merge: impl FnOnce(&mut Vec<u8>, &[u8]),
    ) -> Result<(), AccumulatorError> {
        let others = self.bytes;
        let mut fresh = false;
        let slot = self.slot(id, || {
            fresh = true;
            AccumulatorValue::Bytes(Vec::new())
        })?;
        let AccumulatorValue::Bytes(held) = slot else {
            return Err(Self::mismatch(id, slot, "bytes"));
        };
        let before = held.len();
        let mut merged = std::mem::take(held);
        if fresh {
            merged.extend_from_slice(value);
        } else {
            merge(&mut merged, value);
        }
        let total = (others - before).saturating_add(merged.len());
        if total > MAX_TASK_ACCUMULATOR_BYTES {
            // The merge consumed what was held: the accumulator is left empty in this
            // task (one made for this add goes), and the task is told.
            if fresh {
                self.updates.pop();
            }
            self.bytes = others - before;
            return Err(AccumulatorError::TooLarge { id, total });
        }
        *held = merged;
        self.bytes = total;
        Ok(())
    }

    /// Copies of the values so far, for a heartbeat.
    pub(crate) fn snapshot(&self) -> Vec<AccumulatorUpdate> {
        self.updates.clone()
    }

    /// The values, for the status update; [`TaskAccumulators::give_back`] returns the
    /// list once the update is sent, so that its room is reused.
    pub(crate) fn take(&mut self) -> Vec<AccumulatorUpdate> {
        self.bytes = 0;
        std::mem::take(&mut self.updates)
    }

    /// Takes back a list lent by [`TaskAccumulators::take`], emptied.
    pub(crate) fn give_back(&mut self, mut list: Vec<AccumulatorUpdate>) {
        list.clear();
        if self.updates.is_empty() && list.capacity() > self.updates.capacity() {
            self.updates = list;
        }
    }

    /// Forgets every value (the room is kept), for the handle's next task.
    pub(crate) fn clear(&mut self) {
        self.updates.clear();
        self.bytes = 0;
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.updates.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_of_each_kind_sum_per_id() {
        let mut accumulators = TaskAccumulators::default();
        accumulators.add_long(1, 2).unwrap();
        accumulators.add_long(1, 3).unwrap();
        accumulators.add_double(2, 0.5).unwrap();
        accumulators.add_double(2, 0.25).unwrap();
        let concat = |held: &mut Vec<u8>, more: &[u8]| held.extend_from_slice(more);
        accumulators.merge_bytes(3, b"ab", concat).unwrap();
        accumulators.merge_bytes(3, b"cd", concat).unwrap();
        let values: Vec<(u64, AccumulatorValue)> = accumulators
            .take()
            .into_iter()
            .map(|u| (u.id, u.value))
            .collect();
        assert_eq!(
            values,
            [
                (1, AccumulatorValue::Long(5)),
                (2, AccumulatorValue::double(0.75)),
                (3, AccumulatorValue::Bytes(b"abcd".to_vec())),
            ]
        );
        assert!(accumulators.is_empty());
    }

    #[test]
    fn a_value_of_another_kind_is_refused_and_the_held_one_kept() {
        let mut accumulators = TaskAccumulators::default();
        accumulators.add_long(1, 7).unwrap();
        assert_eq!(
            accumulators.add_double(1, 1.0),
            Err(AccumulatorError::KindMismatch {
                id: 1,
                holds: "long",
                added: "double"
            })
        );
        assert!(accumulators
            .merge_bytes(1, b"x", |_, _| unreachable!())
            .is_err());
        assert_eq!(accumulators.snapshot()[0].value, AccumulatorValue::Long(7));
    }

    #[test]
    fn a_task_may_add_to_a_bounded_number_of_accumulators() {
        let mut accumulators = TaskAccumulators::default();
        for id in 0..MAX_TASK_ACCUMULATORS as u64 {
            accumulators.add_long(id, 1).unwrap();
        }
        let past = MAX_TASK_ACCUMULATORS as u64;
        assert_eq!(
            accumulators.add_long(past, 1),
            Err(AccumulatorError::TooMany { id: past })
        );
        // Those it has still take adds.
        accumulators.add_long(0, 1).unwrap();
        assert_eq!(accumulators.snapshot().len(), MAX_TASK_ACCUMULATORS);
    }

    #[test]
    fn bytes_values_are_bounded_in_all() {
        let mut accumulators = TaskAccumulators::default();
        let concat = |held: &mut Vec<u8>, more: &[u8]| held.extend_from_slice(more);
        let half = vec![1u8; MAX_TASK_ACCUMULATOR_BYTES / 2];
        accumulators.merge_bytes(1, &half, concat).unwrap();
        accumulators.merge_bytes(2, &half, concat).unwrap();
        let refused = accumulators.merge_bytes(3, b"x", concat);
        assert!(
            matches!(refused, Err(AccumulatorError::TooLarge { id: 3, .. })),
            "{refused:?}"
        );
        // The refused accumulator was not kept; the others were.
        assert_eq!(accumulators.snapshot().len(), 2);
    }

    #[test]
    fn a_list_given_back_keeps_its_room() {
        let mut accumulators = TaskAccumulators::default();
        accumulators.add_long(1, 1).unwrap();
        let lent = accumulators.take();
        let room = lent.capacity();
        assert!(room >= 1);
        accumulators.give_back(lent);
        assert!(accumulators.is_empty());
        assert_eq!(accumulators.updates.capacity(), room);
        accumulators.add_long(2, 1).unwrap();
        assert_eq!(accumulators.updates.capacity(), room);
    }

    /// Through a running executor: what a task adds shows in heartbeats while it runs,
    /// and travels with its result, direct or indirect; a failed or killed attempt
    /// carries none, and a reused handle starts from nothing.
    #[cfg(not(loom))]
    mod executor {
        use std::time::Duration;

        use bytes::Bytes;
        use flint_wire::{AccumulatorValue, TaskOutcome, TaskState};

        use crate::registry::TaskRegistry;
        use crate::status::RESULT_OVERHEAD;
        use crate::task::{TaskContext, TaskError};
        use crate::testing::{executor, task, wait_until, WAIT};

        fn registry() -> TaskRegistry {
            let mut registry = TaskRegistry::with_builtins();
            registry
                .register("add-then-wait", |ctx: &TaskContext, _: &Bytes| {
                    ctx.add_long(1, 5)?;
                    ctx.add_double(2, 1.5)?;
                    while !ctx.is_interrupted() {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(TaskError::killed("stopped"))
                })
                .unwrap()
                .register("add-large", |ctx: &TaskContext, input: &Bytes| {
                    ctx.add_long(1, 3)?;
                    Ok(Bytes::from(vec![7u8; input.len() * 1024]))
                })
                .unwrap();
            registry
        }

        fn longs(outcome: &TaskOutcome) -> Vec<(u64, AccumulatorValue)> {
            let accumulators = match outcome {
                TaskOutcome::Direct { accumulators, .. }
                | TaskOutcome::Indirect { accumulators, .. } => accumulators,
                other => panic!("not a result: {other:?}"),
            };
            accumulators
                .iter()
                .map(|u| (u.id, u.value.clone()))
                .collect()
        }

        #[test]
        fn adds_show_in_heartbeats_and_travel_with_results() {
            let (executor, rx) = executor(1, 1 << 20, registry());
            executor.launch_task(task(1, "add-then-wait", b"")).unwrap();
            wait_until("the partial values in a heartbeat", || {
                executor
                    .heartbeat_updates()
                    .first()
                    .is_some_and(|u| u.accumulators.len() == 2)
            });
            let partial = &executor.heartbeat_updates()[0];
            assert_eq!(partial.accumulators[0].value, AccumulatorValue::Long(5));
            assert_eq!(partial.accumulators[1].value, AccumulatorValue::double(1.5));
            // Killed: nothing travels with its update.
            assert!(executor.kill_task(1, false, "enough"));
            let killed = rx.recv_timeout(WAIT).unwrap();
            assert_eq!(killed.state, TaskState::Killed);
            assert!(
                matches!(killed.outcome, TaskOutcome::Failure { .. }),
                "{killed:?}"
            );
            // The same handle, reused: a direct result carries only its own adds.
            executor.launch_task(task(2, "accumulate", b"9")).unwrap();
            let direct = rx.recv_timeout(WAIT).unwrap();
            assert_eq!(direct.state, TaskState::Finished);
            assert!(matches!(direct.outcome, TaskOutcome::Direct { .. }));
            assert_eq!(longs(&direct.outcome), [(9, AccumulatorValue::Long(1))]);
            // A failed attempt carries none.
            executor
                .launch_task(task(3, "accumulate", b"9,fail-below=1"))
                .unwrap();
            let failed = rx.recv_timeout(WAIT).unwrap();
            assert_eq!(failed.state, TaskState::Failed);
            assert!(matches!(failed.outcome, TaskOutcome::Failure { .. }));
            assert!(executor.stop());
        }

        #[test]
        fn an_indirect_result_carries_its_accumulators() {
            let max_message = 2 * RESULT_OVERHEAD;
            let (executor, rx) = executor(1, max_message, registry());
            // 128 KiB: past what a message of 128 KiB carries beside 64 KiB.
            let input = vec![0u8; 128];
            executor.launch_task(task(1, "add-large", &input)).unwrap();
            let update = rx.recv_timeout(WAIT).unwrap();
            assert_eq!(update.state, TaskState::Finished);
            assert!(
                matches!(update.outcome, TaskOutcome::Indirect { .. }),
                "{update:?}"
            );
            assert_eq!(longs(&update.outcome), [(1, AccumulatorValue::Long(3))]);
            assert!(executor.stop());
        }
    }
}
