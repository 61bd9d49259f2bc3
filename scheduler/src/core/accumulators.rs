//! The driver's accumulators, and the decision of which task updates they take: a pure
//! state machine (events in, no clock, no socket).
//!
//! A driver program registers an accumulator ([`Accumulators::register`]: a long sum, a
//! double sum, or bytes with a user-defined merge) and gets its id, which its tasks add
//! to through their `TaskContext`. Each task attempt that finishes with a result brings
//! its values; `Accumulators::attempt_ended` merges them **exactly once per successful
//! partition**: keyed by (stage, partition) for the stages of jobs of stages (a stage may
//! serve several jobs, and runs under the id of the job that submitted it), by (run of
//! the job, stage, partition) for a task set's job; the first successful attempt wins.
//! Failed, killed and lost attempts bring nothing to merge; a speculative copy that also
//! succeeds, a duplicate report, and an attempt of a resubmitted stage that runs a
//! partition again (its map output lost with an executor, say) find the partition
//! already merged. This is what Spark guarantees for accumulators updated in actions,
//! extended to every stage of a job.
//!
//! A heartbeat's partial values are not seen here: they are progress for listeners only
//! (`SchedulerEvent::ExecutorMetricsUpdate`).
//!
//! Updates come from executors: an unknown accumulator id, a value of the wrong kind, an
//! id repeated in one result (merged once) and a user merge that panics are ignored with
//! a rate-limited warning. The count and size of a task's updates are bounded before
//! they get here ([`flint_wire::MAX_TASK_ACCUMULATORS`] and
//! [`flint_wire::MAX_TASK_ACCUMULATOR_BYTES`], as the driver decodes them).
//!
//! What a stage of a job of stages merged is remembered until the DAG scheduler drops
//! the stage (no job needs it any more: `Accumulators::stage_dropped`); what a task
//! set's job merged, until the job ends (`Accumulators::job_ended`). A task set's job
//! whose task set ended on a fetch failure is not ended for this
//! (`Accumulators::job_interrupted`): it is submitted again under the same id and must
//! not merge its partitions twice; the last [`ENDED_JOBS_KEPT`] such jobs are kept. A
//! success after its stage was dropped or its job ended (a straggler) is not merged: the
//! last [`ENDED_JOBS_KEPT`] dropped stages and ended jobs are remembered for that.
//!
//! A task set names its own job id, and may use it again once that job ended: each
//! submission of an id that is not running is a new [`JobRun`]
//! (`Accumulators::job_started`), and a task set's partitions are keyed by the run
//! that submitted it. A straggler of the ended run (a speculative copy still running
//! when its original completed the job, say) is then refused as that run's, not merged
//! into the next run's partition of the same index.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use flint_wire::{AccumulatorUpdate, AccumulatorValue, SharedStr};

use crate::core::driver_core::FIRST_JOB_ID;
use crate::core::fx_hash::{FxHashMap, FxHashSet};

/// How many ended jobs (and dropped stages) are remembered, so that their stragglers'
/// updates are not merged: a job's attempts are killed when it ends, and their reports
/// come within moments, long before thousands of other jobs end. Also how many task
/// sets' jobs interrupted by a fetch failure keep what they merged.
pub const ENDED_JOBS_KEPT: usize = 4096;

/// A result's updates past which repeated ids are found with a set rather than by
/// scanning the earlier ones.
const SCAN_DUPLICATES_UP_TO: usize = 16;

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

/// One run of a task set's job: from its submission under an id that was not running
/// to its end (a fetch failure does not end it). [`JobRun::NONE`] for jobs of stages,
/// whose stages are tracked instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobRun(u64);

impl JobRun {
    /// Not a run of a task set's job: a job of stages.
    pub const NONE: JobRun = JobRun(0);
}

/// One partition of one stage, run by one job: a stage of a job of stages (job id from
/// [`FIRST_JOB_ID`]) is merged at most once whichever job runs it; a task set's job's,
/// once per run of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    /// The job whose task set ran it.
    pub job_id: u32,
    /// The run of the task set's job that submitted the task set
    /// (`Accumulators::job_started`); [`JobRun::NONE`] for a job of stages.
    pub job_run: JobRun,
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

/// What `Accumulators::attempt_ended` did with an attempt's updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The partition's first success: its updates were merged (those that named a
    /// registered accumulator of their kind).
    Merged,
    /// The partition was merged before: nothing was.
    AlreadyMerged,
    /// Not a success: nothing was merged.
    NotMerged,
    /// A success of a task set's job that ended: nothing was merged.
    JobEnded,
    /// A success of a stage the DAG scheduler dropped: nothing was merged.
    StageDropped,
}

/// What a partition's merge is remembered under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scope {
    /// A stage of a job of stages, whichever job's task set ran it.
    Stage(u32),
    /// A stage of a run of a task set's job: (run, stage).
    TaskSetJob(JobRun, u32),
}

impl Scope {
    fn of(key: PartitionKey) -> Self {
        if key.job_id >= FIRST_JOB_ID {
            Scope::Stage(key.stage_id)
        } else {
            Scope::TaskSetJob(key.job_run, key.stage_id)
        }
    }
}

/// The last [`ENDED_JOBS_KEPT`] keys put in, oldest first, each with a value.
struct Recent<K, V = ()> {
    order: VecDeque<K>,
    map: FxHashMap<K, V>,
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Recent {
            order: VecDeque::new(),
            map: FxHashMap::default(),
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash, V> Recent<K, V> {
    fn contains(&self, key: K) -> bool {
        !self.map.is_empty() && self.map.contains_key(&key)
    }

    /// Puts `key` in (its value replaced if it was in); returns the oldest entry if it
    /// fell out.
    fn insert(&mut self, key: K, value: V) -> Option<(K, V)> {
        if self.map.insert(key, value).is_some() {
            return None;
        }
        self.order.push_back(key);
        if self.order.len() > ENDED_JOBS_KEPT {
            let oldest = self.order.pop_front()?;
            let value = self.map.remove(&oldest)?;
            return Some((oldest, value));
        }
        None
    }

    fn get(&self, key: K) -> Option<&V> {
        if self.map.is_empty() {
            return None;
        }
        self.map.get(&key)
    }

    fn remove(&mut self, key: K) -> Option<V> {
        if self.map.is_empty() {
            return None;
        }
        let value = self.map.remove(&key)?;
        self.order.retain(|&kept| kept != key);
        Some(value)
    }
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
    /// Partitions merged, per stage (or run of a task set's job and stage).
    merged: FxHashMap<Scope, FxHashSet<u32>>,
    /// The last run handed out.
    last_run: u64,
    /// Runs of task sets' jobs that ended.
    ended: Recent<JobRun>,
    /// Task sets' jobs whose task set ended on a fetch failure, with their run: they
    /// keep it, and what it merged, for their next submission.
    interrupted: Recent<u32, JobRun>,
    /// Stages of jobs of stages that the DAG scheduler dropped.
    dropped: Recent<u32>,
    /// The accumulator ids of the result being merged, when it has many.
    seen: FxHashSet<u64>,
    /// A bytes value being merged: the accumulator's keeps its value if the merge
    /// panics.
    scratch: Vec<u8>,
    /// Lines about updates that name no accumulator, or the wrong kind.
    warnings: flint_rpc::log_budget::LogBudget,
}

impl Default for Accumulators {
    fn default() -> Self {
        Accumulators {
            registered: FxHashMap::default(),
            next_id: 1,
            merged: FxHashMap::default(),
            last_run: JobRun::NONE.0,
            ended: Recent::default(),
            interrupted: Recent::default(),
            dropped: Recent::default(),
            seen: FxHashSet::default(),
            scratch: Vec::new(),
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
    pub(crate) fn attempt_ended(
        &mut self,
        now: Instant,
        key: PartitionKey,
        end: AttemptEnd,
        updates: &[AccumulatorUpdate],
    ) -> Merge {
        if end != AttemptEnd::Succeeded {
            return Merge::NotMerged;
        }
        let scope = Scope::of(key);
        match scope {
            Scope::Stage(stage) if self.dropped.contains(stage) => return Merge::StageDropped,
            Scope::TaskSetJob(run, _) if self.ended.contains(run) => return Merge::JobEnded,
            _ => {}
        }
        let first = self.merged.entry(scope).or_default().insert(key.partition);
        if !first {
            return Merge::AlreadyMerged;
        }
        let many = updates.len() > SCAN_DUPLICATES_UP_TO;
        if many {
            self.seen.clear();
        }
        for (i, update) in updates.iter().enumerate() {
            let repeated = if many {
                !self.seen.insert(update.id)
            } else {
                updates[..i].iter().any(|earlier| earlier.id == update.id)
            };
            if repeated {
                flint_rpc::peer_warn!(
                    self.warnings,
                    now,
                    "Ignored a repeated update of accumulator {} in the result of partition {} of stage {}",
                    update.id,
                    key.partition,
                    key.stage_id
                );
                continue;
            }
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
                let Some(merge) = &registered.merge else {
                    return;
                };
                // The user's merge runs on bytes an executor sent: a panic must neither
                // unwind out of the driver's endpoint (which would stop it) nor leave a
                // half-merged value, so it merges into a copy.
                self.scratch.clear();
                self.scratch.extend_from_slice(held);
                let scratch = &mut self.scratch;
                if catch_unwind(AssertUnwindSafe(|| merge(scratch, value))).is_ok() {
                    std::mem::swap(held, &mut self.scratch);
                } else {
                    flint_rpc::peer_warn!(
                        self.warnings,
                        now,
                        "Ignored an update of accumulator {} ({}): its merge panicked",
                        update.id,
                        registered.name
                    );
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

    /// Run `run` of task set's job `job_id` ended (its last stage completed, or it was
    /// aborted, or it was interrupted and will not go on): what it merged is forgotten,
    /// and its later successes are not merged (see the module docs). [`JobRun::NONE`] (a
    /// job of stages) is not tracked: its stages are dropped instead
    /// (`Accumulators::stage_dropped`).
    pub(crate) fn job_ended(&mut self, job_id: u32, run: JobRun) {
        if run == JobRun::NONE {
            return;
        }
        if self.interrupted.get(job_id) == Some(&run) {
            self.interrupted.remove(job_id);
        }
        self.forget_run(run);
        self.ended.insert(run, ());
    }

    /// Run `run` of task set's job `job_id` ended on a fetch failure: the job is
    /// submitted again under its id and goes on as the same run, with what it merged
    /// (its partitions are not merged again). The oldest of more than
    /// [`ENDED_JOBS_KEPT`] such jobs is forgotten, as ended.
    pub(crate) fn job_interrupted(&mut self, job_id: u32, run: JobRun) {
        if job_id >= FIRST_JOB_ID || run == JobRun::NONE {
            return;
        }
        if let Some((oldest_job, oldest_run)) = self.interrupted.insert(job_id, run) {
            self.job_ended(oldest_job, oldest_run);
        }
    }

    fn forget_run(&mut self, run: JobRun) {
        if !self.merged.is_empty() {
            self.merged
                .retain(|scope, _| !matches!(*scope, Scope::TaskSetJob(r, _) if r == run));
        }
    }

    /// Job `job_id` is submitted while not running; returns the run its task sets'
    /// partitions are keyed by: the run it was interrupted in (it goes on with what it
    /// merged), or a new one (a task set's job id used again after its job ended starts
    /// afresh, and its last run's stragglers stay that run's). [`JobRun::NONE`] for a
    /// job of stages.
    pub(crate) fn job_started(&mut self, job_id: u32) -> JobRun {
        if job_id >= FIRST_JOB_ID {
            return JobRun::NONE;
        }
        if let Some(run) = self.interrupted.remove(job_id) {
            return run;
        }
        self.last_run += 1;
        JobRun(self.last_run)
    }

    /// The DAG scheduler dropped a stage (no job needs it any more): what it merged is
    /// forgotten, and its later successes are not merged.
    pub(crate) fn stage_dropped(&mut self, stage_id: u32) {
        self.merged.remove(&Scope::Stage(stage_id));
        self.dropped.insert(stage_id, ());
    }

    /// The stages of jobs of stages whose merged partitions are remembered, for the
    /// driver to tell which ones the DAG scheduler dropped.
    pub(crate) fn dag_stages(&self) -> impl Iterator<Item = u32> + '_ {
        self.merged.keys().filter_map(|scope| match *scope {
            Scope::Stage(stage) => Some(stage),
            Scope::TaskSetJob(..) => None,
        })
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
            job_run: JobRun(1),
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
        let other = accumulators.register("m", AccumulatorKind::Long);
        let doubled = accumulators.register("d", AccumulatorKind::Double);
        let updates = [
            AccumulatorUpdate {
                id: 99,
                name: None,
                value: AccumulatorValue::Long(5),
            },
            AccumulatorUpdate {
                id: other.id,
                name: None,
                value: AccumulatorValue::double(2.0),
            },
            AccumulatorUpdate {
                id: doubled.id,
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
        assert_eq!(
            accumulators.value(other.id),
            Some(&AccumulatorValue::Long(0))
        );
        assert_eq!(
            accumulators.value(doubled.id),
            Some(&AccumulatorValue::double(0.0))
        );
        assert_eq!(accumulators.value(99), None);
    }

    #[test]
    fn a_job_s_end_forgets_what_it_merged_and_no_other_job_s() {
        let now = Instant::now();
        let mut accumulators = Accumulators::default();
        let n = accumulators.register("n", AccumulatorKind::Long);
        let (run, other) = (accumulators.job_started(1), accumulators.job_started(2));
        let of = |job_id, job_run, partition| PartitionKey {
            job_id,
            job_run,
            stage_id: 5,
            partition,
        };
        let end = |acc: &mut Accumulators, key| {
            acc.attempt_ended(now, key, AttemptEnd::Succeeded, &one(n.id))
        };
        assert_eq!(end(&mut accumulators, of(1, run, 0)), Merge::Merged);
        assert_eq!(end(&mut accumulators, of(2, other, 0)), Merge::Merged);
        assert_eq!(accumulators.tracked_stages(), 2);
        accumulators.job_ended(1, run);
        assert_eq!(accumulators.tracked_stages(), 1);
        // A straggler of the ended job is not merged; a job submitted again under its
        // id is a new run, which starts afresh.
        assert_eq!(end(&mut accumulators, of(1, run, 1)), Merge::JobEnded);
        let again = accumulators.job_started(1);
        assert_ne!(again, run);
        assert_eq!(end(&mut accumulators, of(1, again, 0)), Merge::Merged);
        // The ended run's straggler stays that run's: it does not take the new run's
        // partition (a speculative copy still running when its original ended the job).
        assert_eq!(end(&mut accumulators, of(1, run, 1)), Merge::JobEnded);
        assert_eq!(end(&mut accumulators, of(1, again, 1)), Merge::Merged);
        assert_eq!(
            end(&mut accumulators, of(2, other, 0)),
            Merge::AlreadyMerged
        );
        assert_eq!(accumulators.value(n.id), Some(&AccumulatorValue::Long(4)));
    }

    fn bytes(id: u64, value: &[u8]) -> AccumulatorUpdate {
        AccumulatorUpdate {
            id,
            name: None,
            value: AccumulatorValue::Bytes(value.to_vec()),
        }
    }

    /// A user's merge that panics on what an executor sent is an ignored update: the
    /// panic does not unwind out (into the driver's endpoint), the value is as before
    /// the merge (not half-merged), and later updates merge.
    #[test]
    fn a_panicking_bytes_merge_is_ignored_and_leaves_the_value_as_it_was() {
        let now = Instant::now();
        let mut accumulators = Accumulators::default();
        let concat = accumulators.register(
            "concat",
            AccumulatorKind::bytes(b"<".to_vec(), |held: &mut Vec<u8>, value: &[u8]| {
                held.extend_from_slice(b"half");
                assert!(value != b"boom", "a bad value");
                held.truncate(held.len() - 4);
                held.extend_from_slice(value);
            }),
        );
        let n = accumulators.register("n", AccumulatorKind::Long);
        let first = [bytes(concat.id, b"a")];
        assert_eq!(
            accumulators.attempt_ended(now, key(0, 0), AttemptEnd::Succeeded, &first),
            Merge::Merged
        );
        let bad = [bytes(concat.id, b"boom"), one(n.id).remove(0)];
        assert_eq!(
            accumulators.attempt_ended(now, key(0, 1), AttemptEnd::Succeeded, &bad),
            Merge::Merged
        );
        assert_eq!(
            accumulators.value(concat.id),
            Some(&AccumulatorValue::Bytes(b"<a".to_vec()))
        );
        assert_eq!(accumulators.value(n.id), Some(&AccumulatorValue::Long(1)));
        let last = [bytes(concat.id, b"b")];
        accumulators.attempt_ended(now, key(0, 2), AttemptEnd::Succeeded, &last);
        assert_eq!(
            accumulators.value(concat.id),
            Some(&AccumulatorValue::Bytes(b"<ab".to_vec()))
        );
    }

    /// An executor that repeats an id in one result has it merged once, whether the
    /// result is short (scanned) or long (a set).
    #[test]
    fn an_id_repeated_in_one_result_is_merged_once() {
        let now = Instant::now();
        for len in [3, SCAN_DUPLICATES_UP_TO + 5] {
            let mut accumulators = Accumulators::default();
            let n = accumulators.register("n", AccumulatorKind::Long);
            let other = accumulators.register("other", AccumulatorKind::Long);
            let mut updates: Vec<AccumulatorUpdate> =
                (0..len).map(|_| one(n.id)[0].clone()).collect();
            updates.push(one(other.id).remove(0));
            let merged =
                accumulators.attempt_ended(now, key(0, 0), AttemptEnd::Succeeded, &updates);
            assert_eq!(merged, Merge::Merged);
            assert_eq!(
                accumulators.value(n.id),
                Some(&AccumulatorValue::Long(1)),
                "{len}"
            );
            assert_eq!(
                accumulators.value(other.id),
                Some(&AccumulatorValue::Long(1))
            );
        }
    }

    /// A map stage shared by two jobs of stages runs under the first job's id: its
    /// successes still merge after that job ends (for the other), a resubmission under
    /// the other job merges no partition twice, and only once the DAG scheduler drops
    /// the stage are its stragglers refused and what it merged forgotten.
    #[test]
    fn a_stage_shared_by_two_jobs_is_merged_once_until_it_is_dropped() {
        let now = Instant::now();
        let mut accumulators = Accumulators::default();
        let n = accumulators.register("n", AccumulatorKind::Long);
        let (a, b, stage) = (FIRST_JOB_ID, FIRST_JOB_ID + 1, FIRST_JOB_ID + 2);
        // Jobs of stages have no run: their stage is tracked, whichever job runs it.
        assert_eq!(accumulators.job_started(a), JobRun::NONE);
        assert_eq!(accumulators.job_started(b), JobRun::NONE);
        let of = |job_id, partition| PartitionKey {
            job_id,
            job_run: JobRun::NONE,
            stage_id: stage,
            partition,
        };
        let end = |acc: &mut Accumulators, k| {
            acc.attempt_ended(now, k, AttemptEnd::Succeeded, &one(n.id))
        };
        assert_eq!(end(&mut accumulators, of(a, 0)), Merge::Merged);
        accumulators.job_ended(a, JobRun::NONE);
        assert_eq!(end(&mut accumulators, of(a, 1)), Merge::Merged);
        // Its outputs lost, the stage runs again under the other job.
        assert_eq!(end(&mut accumulators, of(b, 0)), Merge::AlreadyMerged);
        assert_eq!(end(&mut accumulators, of(b, 1)), Merge::AlreadyMerged);
        assert_eq!(end(&mut accumulators, of(b, 2)), Merge::Merged);
        assert_eq!(accumulators.value(n.id), Some(&AccumulatorValue::Long(3)));
        accumulators.job_ended(b, JobRun::NONE);
        assert_eq!(accumulators.dag_stages().collect::<Vec<_>>(), vec![stage]);
        accumulators.stage_dropped(stage);
        assert_eq!(accumulators.tracked_stages(), 0);
        assert_eq!(end(&mut accumulators, of(b, 3)), Merge::StageDropped);
        assert_eq!(accumulators.value(n.id), Some(&AccumulatorValue::Long(3)));
    }

    /// A task set's job whose task set ended on a fetch failure is submitted again
    /// under its id: its partitions merged before are not merged again. A job that
    /// ended and is submitted again under its id starts afresh.
    #[test]
    fn a_task_set_job_interrupted_by_a_fetch_failure_keeps_what_it_merged() {
        let now = Instant::now();
        let mut accumulators = Accumulators::default();
        let n = accumulators.register("n", AccumulatorKind::Long);
        let end = |acc: &mut Accumulators, job_run, p| {
            let key = PartitionKey {
                job_run,
                ..key(4, p)
            };
            acc.attempt_ended(now, key, AttemptEnd::Succeeded, &one(n.id))
        };
        let run = accumulators.job_started(1);
        assert_eq!(end(&mut accumulators, run, 0), Merge::Merged);
        accumulators.job_interrupted(1, run);
        // A straggler of the interrupted task set still counts, once.
        assert_eq!(end(&mut accumulators, run, 1), Merge::Merged);
        assert_eq!(
            accumulators.job_started(1),
            run,
            "it goes on as the same run"
        );
        assert_eq!(end(&mut accumulators, run, 0), Merge::AlreadyMerged);
        assert_eq!(end(&mut accumulators, run, 1), Merge::AlreadyMerged);
        assert_eq!(end(&mut accumulators, run, 2), Merge::Merged);
        accumulators.job_ended(1, run);
        assert_eq!(accumulators.tracked_stages(), 0);
        assert_eq!(end(&mut accumulators, run, 3), Merge::JobEnded);
        let again = accumulators.job_started(1);
        assert_ne!(again, run);
        assert_eq!(end(&mut accumulators, again, 0), Merge::Merged);
        assert_eq!(accumulators.value(n.id), Some(&AccumulatorValue::Long(4)));
    }

    /// What happens to the jobs and stages of the lifecycle proptest.
    #[derive(Debug, Clone)]
    enum Life {
        /// Partition `p` of the stage shared by two jobs of stages succeeds, reported
        /// under the job whose task set runs it.
        SharedSuccess(u32),
        /// A job of stages (0 or 1) ends; the stage is dropped once both have.
        DagJobEnds(usize),
        /// The shared stage runs again under a job of stages (0 or 1) that has not
        /// ended: its task set now has that job's id.
        SharedResubmitted(usize),
        /// Partition `p` of the task set's job succeeds.
        TaskSetSuccess(u32),
        /// A straggler of the task set's job's last ended run (a speculative copy that
        /// was still running when the run ended) succeeds in partition `p`.
        TaskSetStraggler(u32),
        /// An attempt fails (of either).
        Failure(u32),
        /// The task set's job's task set ends on a fetch failure.
        TaskSetFetchFailure,
        /// The task set's job ends (its last stage completed, or it was aborted).
        TaskSetJobEnds,
        /// The task set's job is submitted again under its id (after a fetch failure
        /// it goes on; after its end it is a new job).
        TaskSetSubmitted,
    }

    fn life(partitions: u32) -> impl Strategy<Value = Life> {
        prop_oneof![
            4 => (0..partitions).prop_map(Life::SharedSuccess),
            1 => (0..2usize).prop_map(Life::DagJobEnds),
            1 => (0..2usize).prop_map(Life::SharedResubmitted),
            4 => (0..partitions).prop_map(Life::TaskSetSuccess),
            1 => (0..partitions).prop_map(Life::TaskSetStraggler),
            1 => (0..partitions).prop_map(Life::Failure),
            1 => Just(Life::TaskSetFetchFailure),
            1 => Just(Life::TaskSetJobEnds),
            1 => Just(Life::TaskSetSubmitted),
        ]
    }

    /// The task set's job, as the model sees it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum TaskSetJob {
        Running,
        Interrupted,
        Ended,
    }

    proptest! {
        /// Jobs end, a stage is shared by two jobs of stages, a task set's job is
        /// interrupted by fetch failures and submitted again under its id: the value is
        /// the number of distinct partitions that succeeded while their stage or job was
        /// live (each run of the task set's job its own), computed here without the
        /// code's sets.
        #[test]
        fn the_value_is_the_number_of_distinct_successful_partitions_across_job_ends(
            steps in (1u32..8).prop_flat_map(|n| {
                (Just(n), proptest::collection::vec(life(n), 0..150))
            })
        ) {
            let (_, steps) = steps;
            let now = Instant::now();
            let mut acc = Accumulators::default();
            let n = acc.register("n", AccumulatorKind::Long);
            let dag_jobs = [FIRST_JOB_ID, FIRST_JOB_ID + 1];
            let shared = FIRST_JOB_ID + 2;
            let (task_set_job, task_set_stage) = (9, 4);
            // The model.
            let mut dag_alive = [true, true];
            let mut runner = 0usize;
            let mut task_set = TaskSetJob::Running;
            let mut run = 0u32;
            let mut counted = std::collections::BTreeSet::new();
            let mut job_run = acc.job_started(task_set_job);
            let mut ended_run = None;
            for step in &steps {
                let succeed = |acc: &mut Accumulators, job_id, job_run, stage_id, partition| {
                    let key = PartitionKey { job_id, job_run, stage_id, partition };
                    acc.attempt_ended(now, key, AttemptEnd::Succeeded, &one(n.id))
                };
                match *step {
                    Life::SharedSuccess(p) => {
                        let merge = succeed(&mut acc, dag_jobs[runner], JobRun::NONE, shared, p);
                        if dag_alive.iter().any(|&alive| alive) {
                            counted.insert((0, 0, p));
                        } else {
                            prop_assert_eq!(merge, Merge::StageDropped);
                        }
                    }
                    Life::DagJobEnds(j) => {
                        if std::mem::replace(&mut dag_alive[j], false)
                            && !dag_alive.iter().any(|&alive| alive)
                        {
                            acc.stage_dropped(shared);
                        }
                    }
                    Life::SharedResubmitted(j) => {
                        if dag_alive[j] {
                            runner = j;
                        }
                    }
                    Life::TaskSetSuccess(p) => {
                        let merge = succeed(&mut acc, task_set_job, job_run, task_set_stage, p);
                        if task_set == TaskSetJob::Ended {
                            prop_assert_eq!(merge, Merge::JobEnded);
                        } else {
                            counted.insert((1, run, p));
                        }
                    }
                    Life::TaskSetStraggler(p) => {
                        if let Some(ended) = ended_run {
                            let merge = succeed(&mut acc, task_set_job, ended, task_set_stage, p);
                            prop_assert_eq!(merge, Merge::JobEnded);
                        }
                    }
                    Life::Failure(p) => {
                        let key = PartitionKey { job_id: task_set_job, job_run, stage_id: task_set_stage, partition: p };
                        prop_assert_eq!(acc.attempt_ended(now, key, AttemptEnd::Failed, &one(n.id)), Merge::NotMerged);
                        let key = PartitionKey { job_id: dag_jobs[runner], job_run: JobRun::NONE, stage_id: shared, partition: p };
                        prop_assert_eq!(acc.attempt_ended(now, key, AttemptEnd::Failed, &one(n.id)), Merge::NotMerged);
                    }
                    Life::TaskSetFetchFailure => {
                        if task_set == TaskSetJob::Running {
                            task_set = TaskSetJob::Interrupted;
                            acc.job_interrupted(task_set_job, job_run);
                        }
                    }
                    Life::TaskSetJobEnds => {
                        if task_set != TaskSetJob::Ended {
                            task_set = TaskSetJob::Ended;
                            acc.job_ended(task_set_job, job_run);
                            ended_run = Some(job_run);
                        }
                    }
                    Life::TaskSetSubmitted => {
                        if task_set != TaskSetJob::Running {
                            let started = acc.job_started(task_set_job);
                            if task_set == TaskSetJob::Ended {
                                run += 1;
                                prop_assert_ne!(started, job_run, "a new run");
                            } else {
                                prop_assert_eq!(started, job_run, "the interrupted run");
                            }
                            job_run = started;
                            task_set = TaskSetJob::Running;
                        }
                    }
                }
                prop_assert_eq!(
                    acc.value(n.id),
                    Some(&AccumulatorValue::Long(counted.len() as i64)),
                    "after {:?}", step
                );
            }
        }
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
