//! The driver's accumulators, and the decision of which task updates they take: a pure
//! state machine (events in, no clock, no socket).
//!
//! A driver program registers an accumulator ([`Accumulators::register`]: a long sum, a
//! double sum, or bytes with a user-defined merge) and gets its id, which its tasks add
//! to through their `TaskContext`. Each task attempt that finishes with a result brings
//! its values; [`Accumulators::attempt_ended`] merges them **exactly once per successful
//! partition**: keyed by (job, stage, partition), the first successful attempt wins.
//! Failed, killed and lost attempts bring nothing to merge; a speculative copy that also
//! succeeds, a duplicate report, and an attempt of a resubmitted stage that runs a
//! partition again (its map output lost with an executor, say) find the partition
//! already merged. This is what Spark guarantees for accumulators updated in actions,
//! extended to every stage of a job.
//!
//! A heartbeat's partial values are not seen here: they are progress for listeners only
//! (`SchedulerEvent::ExecutorMetricsUpdate`).
//!
//! Updates come from executors: an unknown accumulator id or a value of the wrong kind is
//! ignored with a rate-limited warning. The count and size of a task's updates are
//! bounded before they get here (a message's `rpc.message.maxSize`, checked on what they
//! take decoded).
//!
//! What a job merged is remembered until the job ends ([`Accumulators::job_ended`]: a
//! job of stages when the DAG scheduler ends it, a task set's job when its task set
//! does). A success of a job that ended (a straggler) is not merged: the last
//! [`ENDED_JOBS_KEPT`] ended jobs are remembered for that.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use flint_wire::{AccumulatorUpdate, AccumulatorValue, SharedStr};

use crate::core::fx_hash::{FxHashMap, FxHashSet};

/// How many ended jobs are remembered, so that their stragglers' updates are not
/// merged: a job's attempts are killed when it ends, and their reports come within
/// moments, long before thousands of other jobs end.
pub const ENDED_JOBS_KEPT: usize = 4096;

/// A user-defined merge of a bytes accumulator: folds a partition's value (the second
/// argument) into the accumulator's (the first). Tasks merge their own adds with the same
/// function.
pub type MergeFn = Arc<dyn Fn(&mut Vec<u8>, &[u8]) + Send + Sync>;

/// What an accumulator sums.
#[derive(Clone)]
pub enum AccumulatorKind {
    /// `i64`s, wrapping; starts at 0.
    Long,
    /// `f64`s; starts at 0.0.
    Double,
    /// Bytes, merged with a user-defined function, starting from `zero`.
    Bytes {
        /// The value before any partition is merged.
        zero: Vec<u8>,
        /// How a partition's value is merged in.
        merge: MergeFn,
    },
}

impl fmt::Debug for AccumulatorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccumulatorKind::Long => f.write_str("Long"),
            AccumulatorKind::Double => f.write_str("Double"),
            AccumulatorKind::Bytes { zero, .. } => {
                f.debug_struct("Bytes").field("zero", zero).finish()
            }
        }
    }
}

impl AccumulatorKind {
    /// A bytes accumulator starting at `zero`, merged with `merge`.
    pub fn bytes(
        zero: impl Into<Vec<u8>>,
        merge: impl Fn(&mut Vec<u8>, &[u8]) + Send + Sync + 'static,
    ) -> Self {
        AccumulatorKind::Bytes {
            zero: zero.into(),
            merge: Arc::new(merge),
        }
    }
}

/// A registered accumulator's id and name, as the driver hands them out: its tasks add
/// to the id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccumulatorId {
    /// The id tasks add to.
    pub id: u64,
    /// The name it was registered with.
    pub name: SharedStr,
}

/// One partition of one stage of one job: what is merged at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    /// The job.
    pub job_id: u32,
    /// The stage (any attempt of it).
    pub stage_id: u32,
    /// The partition the task computed.
    pub partition: u32,
}

/// How a task attempt ended, as far as accumulators care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// It finished with a result the scheduler took.
    Succeeded,
    /// It failed, was killed or lost, or its result could not be taken.
    Failed,
}

/// What [`Accumulators::attempt_ended`] did with an attempt's updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The partition's first success: its updates were merged (those that named a
    /// registered accumulator of their kind).
    Merged,
    /// The partition was merged before: nothing was.
    AlreadyMerged,
    /// Not a success: nothing was merged.
    NotMerged,
    /// A success of a job that ended: nothing was merged.
    JobEnded,
}

struct Registered {
    name: SharedStr,
    value: AccumulatorValue,
    merge: Option<MergeFn>,
}

/// The driver's accumulators and the partitions whose updates they took. See the module
/// docs.
pub struct Accumulators {
    registered: FxHashMap<u64, Registered>,
    next_id: u64,
    /// Partitions merged, per (job, stage).
    merged: FxHashMap<(u32, u32), FxHashSet<u32>>,
    /// The last [`ENDED_JOBS_KEPT`] jobs that ended, oldest first, and as a set.
    ended_order: VecDeque<u32>,
    ended: FxHashSet<u32>,
    /// Lines about updates that name no accumulator, or the wrong kind.
    warnings: flint_rpc::log_budget::LogBudget,
}

impl Default for Accumulators {
    fn default() -> Self {
        Accumulators {
            registered: FxHashMap::default(),
            next_id: 1,
            merged: FxHashMap::default(),
            ended_order: VecDeque::new(),
            ended: FxHashSet::default(),
            warnings: flint_rpc::log_budget::LogBudget::default(),
        }
    }
}

impl fmt::Debug for Accumulators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Accumulators")
            .field("registered", &self.registered.len())
            .field("stages", &self.merged.len())
            .finish()
    }
}

impl Accumulators {
    /// Registers an accumulator; returns its id (from 1, in order) with its name.
    pub fn register(&mut self, name: impl Into<SharedStr>, kind: AccumulatorKind) -> AccumulatorId {
        let id = self.next_id;
        self.next_id += 1;
        let name = name.into();
        let (value, merge) = match kind {
            AccumulatorKind::Long => (AccumulatorValue::Long(0), None),
            AccumulatorKind::Double => (AccumulatorValue::double(0.0), None),
            AccumulatorKind::Bytes { zero, merge } => (AccumulatorValue::Bytes(zero), Some(merge)),
        };
        self.registered.insert(
            id,
            Registered {
                name: name.clone(),
                value,
                merge,
            },
        );
        AccumulatorId { id, name }
    }

    /// Whether any accumulator is registered: until one is, nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.registered.is_empty()
    }

    /// The merged value of accumulator `id`.
    pub fn value(&self, id: u64) -> Option<&AccumulatorValue> {
        self.registered.get(&id).map(|r| &r.value)
    }

    /// The name accumulator `id` was registered with.
    pub fn name(&self, id: u64) -> Option<&SharedStr> {
        self.registered.get(&id).map(|r| &r.name)
    }

    /// An attempt of `key`'s partition ended: its updates are merged if it succeeded
    /// and is the partition's first success. See the module docs.
    pub fn attempt_ended(
        &mut self,
        now: Instant,
        key: PartitionKey,
        end: AttemptEnd,
        updates: &[AccumulatorUpdate],
    ) -> Merge {
        if end != AttemptEnd::Succeeded {
            return Merge::NotMerged;
        }
        if !self.ended.is_empty() && self.ended.contains(&key.job_id) {
            return Merge::JobEnded;
        }
        let first = self
            .merged
            .entry((key.job_id, key.stage_id))
            .or_default()
            .insert(key.partition);
        if !first {
            return Merge::AlreadyMerged;
        }
        for update in updates {
            self.merge_one(now, update);
        }
        Merge::Merged
    }

    fn merge_one(&mut self, now: Instant, update: &AccumulatorUpdate) {
        let Some(registered) = self.registered.get_mut(&update.id) else {
            flint_rpc::peer_warn!(
                self.warnings,
                now,
                "Ignored an update of accumulator {}, which is not registered",
                update.id
            );
            return;
        };
        match (&mut registered.value, &update.value) {
            (AccumulatorValue::Long(sum), AccumulatorValue::Long(n)) => {
                *sum = sum.wrapping_add(*n);
            }
            (AccumulatorValue::Double(sum), AccumulatorValue::Double(x)) => {
                *sum = (f64::from_bits(*sum) + f64::from_bits(*x)).to_bits();
            }
            (AccumulatorValue::Bytes(held), AccumulatorValue::Bytes(value)) => {
                if let Some(merge) = &registered.merge {
                    merge(held, value);
                }
            }
            (held, added) => {
                let (held, added) = (held.kind_name(), added.kind_name());
                flint_rpc::peer_warn!(
                    self.warnings,
                    now,
                    "Ignored a {added} update of accumulator {} ({}), which holds a {held} value",
                    update.id,
                    registered.name
                );
            }
        }
    }

    /// A job ended: what it merged is forgotten (its later successes are not brought
    /// here; see the module docs).
    pub fn job_ended(&mut self, job_id: u32) {
        if !self.merged.is_empty() {
            self.merged.retain(|&(job, _), _| job != job_id);
        }
        if self.ended.insert(job_id) {
            self.ended_order.push_back(job_id);
            if self.ended_order.len() > ENDED_JOBS_KEPT {
                if let Some(oldest) = self.ended_order.pop_front() {
                    self.ended.remove(&oldest);
                }
            }
        }
    }

    /// A job is submitted: a job id used again (task sets name their own) starts
    /// afresh.
    pub fn job_started(&mut self, job_id: u32) {
        if self.ended.remove(&job_id) {
            self.ended_order.retain(|&job| job != job_id);
        }
    }

    /// Stages whose merged partitions are remembered.
    pub fn tracked_stages(&self) -> usize {
        self.merged.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(id: u64) -> Vec<AccumulatorUpdate> {
        vec![AccumulatorUpdate {
            id,
            name: None,
            value: AccumulatorValue::Long(1),
        }]
    }

    fn key(stage_id: u32, partition: u32) -> PartitionKey {
        PartitionKey {
            job_id: 1,
            stage_id,
            partition,
        }
    }

    #[test]
    fn each_kind_merges_its_own_values() {
        let now = Instant::now();
        let mut accumulators = Accumulators::default();
        let long = accumulators.register("records", AccumulatorKind::Long);
        let double = accumulators.register("seconds", AccumulatorKind::Double);
        let max = accumulators.register(
            "longest",
            AccumulatorKind::bytes(Vec::new(), |held: &mut Vec<u8>, value: &[u8]| {
                if value.len() > held.len() {
                    *held = value.to_vec();
                }
            }),
        );
        assert_eq!((long.id, double.id, max.id), (1, 2, 3));
        for (partition, word) in [(0, "ab"), (1, "abcd"), (2, "a")] {
            let updates = [
                AccumulatorUpdate {
                    id: long.id,
                    name: None,
                    value: AccumulatorValue::Long(10),
                },
                AccumulatorUpdate {
                    id: double.id,
                    name: None,
                    value: AccumulatorValue::double(0.5),
                },
                AccumulatorUpdate {
                    id: max.id,
                    name: None,
                    value: AccumulatorValue::Bytes(word.as_bytes().to_vec()),
                },
            ];
            let merged =
                accumulators.attempt_ended(now, key(0, partition), AttemptEnd::Succeeded, &updates);
            assert_eq!(merged, Merge::Merged);
        }
        assert_eq!(accumulators.value(1), Some(&AccumulatorValue::Long(30)));
        assert_eq!(accumulators.value(2), Some(&AccumulatorValue::double(1.5)));
        assert_eq!(
            accumulators.value(3),
            Some(&AccumulatorValue::Bytes(b"abcd".to_vec()))
        );
        assert_eq!(accumulators.name(1).map(|n| &**n), Some("records"));
    }

    #[test]
    fn unknown_ids_and_wrong_kinds_are_ignored_and_the_rest_merged() {
        let now = Instant::now();
        let mut accumulators = Accumulators::default();
        let long = accumulators.register("n", AccumulatorKind::Long);
        let updates = [
            AccumulatorUpdate {
                id: 99,
                name: None,
                value: AccumulatorValue::Long(5),
            },
            AccumulatorUpdate {
                id: long.id,
                name: None,
                value: AccumulatorValue::double(2.0),
            },
            AccumulatorUpdate {
                id: long.id,
                name: None,
                value: AccumulatorValue::Bytes(vec![1; 10]),
            },
            AccumulatorUpdate {
                id: long.id,
                name: Some("n".into()),
                value: AccumulatorValue::Long(3),
            },
        ];
        let merged = accumulators.attempt_ended(now, key(0, 0), AttemptEnd::Succeeded, &updates);
        assert_eq!(merged, Merge::Merged);
        assert_eq!(
            accumulators.value(long.id),
            Some(&AccumulatorValue::Long(3))
        );
        assert_eq!(accumulators.value(99), None);
    }

    #[test]
    fn a_job_s_end_forgets_what_it_merged_and_no_other_job_s() {
        let now = Instant::now();
        let mut accumulators = Accumulators::default();
        let n = accumulators.register("n", AccumulatorKind::Long);
        let other = PartitionKey {
            job_id: 2,
            ..key(5, 0)
        };
        accumulators.attempt_ended(now, key(5, 0), AttemptEnd::Succeeded, &one(n.id));
        accumulators.attempt_ended(now, other, AttemptEnd::Succeeded, &one(n.id));
        assert_eq!(accumulators.tracked_stages(), 2);
        accumulators.job_ended(1);
        assert_eq!(accumulators.tracked_stages(), 1);
        // A straggler of the ended job is not merged; a job submitted again under its
        // id starts afresh.
        assert_eq!(
            accumulators.attempt_ended(now, key(5, 1), AttemptEnd::Succeeded, &one(n.id)),
            Merge::JobEnded
        );
        accumulators.job_started(1);
        assert_eq!(
            accumulators.attempt_ended(now, key(5, 0), AttemptEnd::Succeeded, &one(n.id)),
            Merge::Merged
        );
        assert_eq!(
            accumulators.attempt_ended(now, other, AttemptEnd::Succeeded, &one(n.id)),
            Merge::AlreadyMerged
        );
        assert_eq!(accumulators.value(n.id), Some(&AccumulatorValue::Long(3)));
    }

    /// What can happen to a partition's attempts, in any order.
    #[derive(Debug, Clone)]
    enum Step {
        /// An attempt of the partition succeeds (the first one, a speculative copy, a
        /// duplicate report, or an attempt of a resubmitted stage).
        Success(u32),
        /// An attempt fails, after it added.
        Failure(u32),
        /// An attempt is killed, after it added.
        Kill(u32),
        /// A speculative copy and its original both succeed.
        SpeculativePair(u32),
        /// The stage is resubmitted: every partition runs again, and succeeds.
        Resubmission,
    }

    fn step(partitions: u32) -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..partitions).prop_map(Step::Success),
            (0..partitions).prop_map(Step::Failure),
            (0..partitions).prop_map(Step::Kill),
            (0..partitions).prop_map(Step::SpeculativePair),
            Just(Step::Resubmission),
        ]
    }

    proptest! {
        /// Every task adds 1: whatever the interleaving of attempt outcomes, the value is
        /// the number of partitions that succeeded at least once, each counted once.
        #[test]
        fn each_successful_partition_is_merged_exactly_once(
            steps in (1u32..24).prop_flat_map(|n| {
                (Just(n), proptest::collection::vec(step(n), 0..120))
            })
        ) {
            let (partitions, steps) = steps;
            let now = Instant::now();
            let mut accumulators = Accumulators::default();
            let n = accumulators.register("n", AccumulatorKind::Long);
            let mut succeeded = std::collections::BTreeSet::new();
            let mut merges = vec![0u32; partitions as usize];
            let mut end = |acc: &mut Accumulators, p: u32, end: AttemptEnd| {
                if acc.attempt_ended(now, key(3, p), end, &one(n.id)) == Merge::Merged {
                    merges[p as usize] += 1;
                }
            };
            for step in &steps {
                match *step {
                    Step::Success(p) => {
                        end(&mut accumulators, p, AttemptEnd::Succeeded);
                        succeeded.insert(p);
                    }
                    Step::Failure(p) | Step::Kill(p) => end(&mut accumulators, p, AttemptEnd::Failed),
                    Step::SpeculativePair(p) => {
                        end(&mut accumulators, p, AttemptEnd::Succeeded);
                        end(&mut accumulators, p, AttemptEnd::Succeeded);
                        succeeded.insert(p);
                    }
                    Step::Resubmission => {
                        for p in 0..partitions {
                            end(&mut accumulators, p, AttemptEnd::Succeeded);
                            succeeded.insert(p);
                        }
                    }
                }
            }
            prop_assert!(merges.iter().all(|&m| m <= 1), "{merges:?}");
            for p in 0..partitions {
                prop_assert_eq!(merges[p as usize] == 1, succeeded.contains(&p));
            }
            prop_assert_eq!(
                accumulators.value(n.id),
                Some(&AccumulatorValue::Long(succeeded.len() as i64))
            );
        }
    }
}
