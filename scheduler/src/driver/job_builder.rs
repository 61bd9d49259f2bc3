//! Writing a job of stages: [`JobBuilder`], from [`crate::Driver::job`].

use flint_wire::{TaskPayload, WireError};

use crate::core::dag::{JobSpec, StageSpec};
use crate::driver::Driver;

/// A shuffle a map stage writes and later stages read: its id and its reduce
/// partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shuffle {
    /// The shuffle's id, unique in the application.
    pub id: u32,
    /// Its reduce partitions: every stage that reads it has this many tasks.
    pub partitions: u32,
}

/// Builds a job of stages, the way a Spark program's transformations make one: stages
/// whose output is shuffled ([`StageBuilder::shuffle`]) feed the stages that read them,
/// and one stage's results are the job's ([`StageBuilder::result`]).
///
/// A stage runs a task function registered on the executors (by name) with an input
/// every task of it gets; a task learns its partition from its context. A map stage's
/// tasks write records partitioned by reducer (`TaskContext::shuffle_writer`, by
/// explicit partition or by a hash of a key); a reading stage's tasks read their
/// partition of each shuffle from every map output (`TaskContext::read_shuffle`).
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let driver: flint_scheduler::Driver = unimplemented!();
/// use std::time::Duration;
///
/// // Word count: 8 map tasks count the words of their part of the text and shuffle
/// // (word, count) by word into 4 partitions; 4 reduce tasks sum the counts.
/// let mut job = driver.job("word count");
/// let counts = job.stage("wordcount-map", 8, b"gen:1000000:10000:7")?.shuffle(4);
/// let spec = job.reduce("wordcount-reduce", &[counts], b"")?.result();
/// let outcome = driver.submit_job(spec)?.wait(Duration::from_secs(60))?;
/// for lines in &outcome.results {
///     print!("{}", String::from_utf8_lossy(lines)); // word<TAB>count, per partition
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct JobBuilder<'d> {
    driver: &'d Driver,
    name: String,
    shuffles: Vec<(Shuffle, StageSpec)>,
}

/// One stage being written: [`StageBuilder::shuffle`] makes it a map stage,
/// [`StageBuilder::result`] the job's result stage.
#[derive(Debug)]
pub struct StageBuilder<'j, 'd> {
    job: &'j mut JobBuilder<'d>,
    stage: StageSpec,
}

impl Driver {
    /// A job named `name` (where the driver program submits it, as Spark's call site),
    /// to write stage by stage.
    pub fn job(&self, name: impl Into<String>) -> JobBuilder<'_> {
        JobBuilder {
            driver: self,
            name: name.into(),
            shuffles: Vec::new(),
        }
    }
}

impl<'d> JobBuilder<'d> {
    /// A stage of `partitions` tasks running `function` on `input`, reading no shuffle
    /// (its input is its own: a file's split, generated data...). Fails if `function`
    /// is not a valid name.
    pub fn stage(
        &mut self,
        function: &str,
        partitions: u32,
        input: impl AsRef<[u8]>,
    ) -> Result<StageBuilder<'_, 'd>, WireError> {
        let payload = TaskPayload::encode(function, input.as_ref())?;
        Ok(StageBuilder {
            stage: StageSpec::new(format!("{function} at {}", self.name), partitions, payload),
            job: self,
        })
    }

    /// A stage reading `shuffles` (several for a join), running `function` on `input`:
    /// one task per reduce partition of the shuffles (which must all have as many).
    pub fn reduce(
        &mut self,
        function: &str,
        shuffles: &[Shuffle],
        input: impl AsRef<[u8]>,
    ) -> Result<StageBuilder<'_, 'd>, WireError> {
        let partitions = shuffles.first().map_or(0, |s| s.partitions);
        let mut stage = self.stage(function, partitions, input)?;
        stage.stage = stage.stage.reading(shuffles.iter().map(|s| s.id));
        Ok(stage)
    }
}

impl StageBuilder<'_, '_> {
    /// Names the stage in logs and events (by default `FUNCTION at JOB`).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.stage.name = name.into();
        self
    }

    /// The same stage reading `shuffles` too.
    pub fn reading(mut self, shuffles: &[Shuffle]) -> Self {
        self.stage = self.stage.reading(shuffles.iter().map(|s| s.id));
        self
    }

    /// Makes this a map stage whose tasks write a new shuffle of `partitions` reduce
    /// partitions; returns it, for the stages that read it.
    pub fn shuffle(self, partitions: u32) -> Shuffle {
        let shuffle = Shuffle {
            id: self.job.driver.new_shuffle_id(),
            partitions,
        };
        self.job.shuffles.push((shuffle, self.stage));
        shuffle
    }

    /// Makes this the job's result stage: its tasks' results are the job's, in
    /// partition order. The job, ready for [`Driver::submit_job`].
    pub fn result(self) -> JobSpec {
        let job = self.job;
        let spec = JobSpec::new(job.name.clone(), self.stage);
        job.shuffles
            .drain(..)
            .fold(spec, |spec, (shuffle, map_stage)| {
                spec.with_shuffle(shuffle.id, shuffle.partitions, map_stage)
            })
    }
}
