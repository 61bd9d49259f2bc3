//! What a driver program submits: a job as its result stage and the shuffles it reads.

use bytes::Bytes;
use flint_wire::{Property, SharedStr};

/// One stage of a job: how many partitions it computes, which shuffles it reads, and
/// what its tasks run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSpec {
    /// Where in the driver program the stage comes from (Spark's call site, e.g.
    /// `reduceByKey at wordcount.rs:12`); it names the stage in logs and events.
    pub name: String,
    /// Partitions the stage computes: one task each. For a map stage, the map
    /// partitions of the shuffle it writes.
    pub num_partitions: u32,
    /// The shuffles the stage reads (several for a join); empty for a stage that reads
    /// only its input.
    pub reads: Vec<u32>,
    /// The stage's task payload, opaque to the DAG scheduler: the glue encodes it with
    /// the stage's kind, shuffles and epoch into the task set's serialized task.
    pub payload: Bytes,
}

impl StageSpec {
    /// A stage of `num_partitions` tasks running `payload`, reading no shuffle.
    pub fn new(name: impl Into<String>, num_partitions: u32, payload: Bytes) -> Self {
        StageSpec {
            name: name.into(),
            num_partitions,
            reads: Vec::new(),
            payload,
        }
    }

    /// The same stage, reading `shuffles` too.
    pub fn reading(mut self, shuffles: impl IntoIterator<Item = u32>) -> Self {
        self.reads.extend(shuffles);
        self
    }
}

/// A shuffle: its id, its reduce partitions, and the map stage that writes it.
///
/// A shuffle id names one shuffle for the whole application: a later job that reads it
/// uses the same map stage while one is live, or the outputs the map output tracker
/// still holds, and computes only what is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShuffleSpec {
    /// The shuffle.
    pub shuffle_id: u32,
    /// Its reduce partitions (its partitioner's): the buckets each map task writes, and
    /// the partitions of every stage that reads it.
    pub reduce_partitions: u32,
    /// The stage whose tasks write its map outputs.
    pub map_stage: StageSpec,
}

/// A job (the seeds' action on an RDD): a result stage, and every shuffle it needs,
/// directly or through other shuffles' map stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Where in the driver program the job was submitted (the call site), for logs.
    pub name: String,
    /// The stage whose tasks' results are the job's results, one per partition.
    pub result_stage: StageSpec,
    /// The shuffles the job reads, in any order. Each must be defined once; shuffles
    /// that no stage of the job reads are ignored.
    pub shuffles: Vec<ShuffleSpec>,
    /// The FAIR pool the job's task sets run in (`None`: the pool named `default`).
    pub pool: Option<SharedStr>,
    /// Local properties, which every task of the job carries (one copy shared by the
    /// tasks of each stage).
    pub properties: Vec<Property>,
}

impl JobSpec {
    /// A job named `name` whose results are `result_stage`'s.
    pub fn new(name: impl Into<String>, result_stage: StageSpec) -> Self {
        JobSpec {
            name: name.into(),
            result_stage,
            shuffles: Vec::new(),
            pool: None,
            properties: Vec::new(),
        }
    }

    /// The same job, with shuffle `shuffle_id` of `reduce_partitions` written by
    /// `map_stage`.
    pub fn with_shuffle(
        mut self,
        shuffle_id: u32,
        reduce_partitions: u32,
        map_stage: StageSpec,
    ) -> Self {
        self.shuffles.push(ShuffleSpec {
            shuffle_id,
            reduce_partitions,
            map_stage,
        });
        self
    }

    /// The same job, in the FAIR pool `pool`.
    pub fn in_pool(mut self, pool: impl Into<SharedStr>) -> Self {
        self.pool = Some(pool.into());
        self
    }
}

/// Why a job was refused; nothing of it was registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DagError {
    /// A stage's payload is not a serialized task (`flint_wire::TaskPayload`).
    #[error("stage {stage} runs no task: {reason}")]
    BadPayload {
        /// The stage's name.
        stage: String,
        /// Why its payload does not parse.
        reason: String,
    },
    /// A stage reads a shuffle the job does not define.
    #[error("stage {stage} reads shuffle {shuffle_id}, which the job does not define")]
    UnknownShuffle {
        /// The reading stage's name.
        stage: String,
        /// The shuffle.
        shuffle_id: u32,
    },
    /// The job defines a shuffle twice.
    #[error("shuffle {shuffle_id} is defined twice by the job")]
    DuplicateShuffle {
        /// The shuffle.
        shuffle_id: u32,
    },
    /// A shuffle's map stage reads the shuffle itself, directly or not.
    #[error("shuffle {shuffle_id} depends on itself")]
    Cycle {
        /// A shuffle on the cycle.
        shuffle_id: u32,
    },
    /// A stage reads a shuffle with another number of reduce partitions than its own
    /// partitions: reduce task `p` reads reduce partition `p`.
    #[error(
        "stage {stage} has {partitions} partitions but reads shuffle {shuffle_id}, which has {reduce_partitions} reduce partitions"
    )]
    ReadPartitionsMismatch {
        /// The reading stage's name.
        stage: String,
        /// Its partitions.
        partitions: u32,
        /// The shuffle.
        shuffle_id: u32,
        /// The shuffle's reduce partitions.
        reduce_partitions: u32,
    },
    /// The job gives a shuffle another number of reduce partitions than the live map
    /// stage writing it has.
    #[error("shuffle {shuffle_id} has {known} reduce partitions, but the job gives it {given}")]
    ReducePartitionsMismatch {
        /// The shuffle.
        shuffle_id: u32,
        /// Reduce partitions its live map stage writes.
        known: u32,
        /// Reduce partitions the job gives.
        given: u32,
    },
    /// The job gives a known shuffle another number of map partitions.
    #[error(
        "shuffle {shuffle_id} has {known} map partitions, but the job gives its map stage {given}"
    )]
    MapPartitionsMismatch {
        /// The shuffle.
        shuffle_id: u32,
        /// Map partitions it was registered with.
        known: u32,
        /// Map partitions the job gives.
        given: u32,
    },
}
