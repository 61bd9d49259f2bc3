//! Jobs of stages from the command line: a word count and a plain hash shuffle, run on a
//! driver in this process and executors from a cluster manager (`flint run --job
//! wordcount|shuffle`), with a report of how fast they went.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::timer::deadline_after;
use flint_rpc::Conf;
use flint_scheduler::{
    ClusterManager, Driver, JobOutcome, SchedulerEvent, SchedulerListener, TaskEndReason,
    TaskSetId, FIRST_JOB_ID,
};

use crate::job::{is_interrupted, with_ready_driver, JobError, JobHooks};

/// Where a word count's words come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WordSource {
    /// `words` words in all, generated in the map tasks from a vocabulary of
    /// `vocabulary` words (the built-in `wordcount-map`'s `gen:` input).
    Generated {
        /// Words in all (each map task makes its share).
        words: u64,
        /// Distinct words to draw from.
        vocabulary: u64,
        /// Seed of the draw.
        seed: u64,
    },
    /// A text file every executor can read at this path; each map task counts its
    /// split.
    File(PathBuf),
}

/// What a job of stages runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// Map: count the words of a split; shuffle (word, count) by word; reduce: sum.
    WordCount {
        /// The words.
        source: WordSource,
        /// Where to write `word<TAB>count` lines, sorted by word.
        output: Option<PathBuf>,
    },
    /// Map tasks make `records` records of `record_size` bytes in all and shuffle them
    /// by a hash of their first 8 bytes; reduce tasks count them.
    Shuffle {
        /// Records in all.
        records: u64,
        /// Bytes of each record, at least 8.
        record_size: u32,
    },
}

impl Workload {
    /// The job's name, as `--job` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::WordCount { .. } => "wordcount",
            Workload::Shuffle { .. } => "shuffle",
        }
    }
}

/// A job of stages to run.
#[derive(Debug, Clone)]
pub struct StagesSpec {
    /// Executors to ask for and wait for.
    pub executors: usize,
    /// Cores of each executor the local cluster manager starts.
    pub cores: u32,
    /// Map tasks; `None`: twice the registered executors' cores.
    pub maps: Option<u32>,
    /// Reduce partitions; `None`: the driver's default parallelism (`default.parallelism`
    /// if set, else the registered executors' cores, at least 2, as Spark's
    /// coarse-grained backends have it).
    pub reduces: Option<u32>,
    /// What it runs.
    pub workload: Workload,
    /// How long the driver may take to be ready.
    pub startup_timeout: Duration,
    /// How long the job may take once it is.
    pub job_timeout: Duration,
}

impl StagesSpec {
    /// Checks what can be checked before anything starts: a word count's input is a
    /// regular file this process can read, and its output can be created (a file that
    /// did not exist is created and removed again). Executors must be able to read the
    /// input too, which only they can tell.
    pub fn check_files(&self) -> Result<(), JobError> {
        let Workload::WordCount { source, output } = &self.workload else {
            return Ok(());
        };
        if let WordSource::File(path) = source {
            check_input(path).map_err(|source| JobError::Input {
                path: path.clone(),
                source,
            })?;
        }
        if let Some(path) = output {
            check_output(path).map_err(|source| JobError::Output {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

fn check_input(path: &Path) -> std::io::Result<()> {
    let metadata = std::fs::metadata(path)?;
    if metadata.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    if !metadata.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    // Permissions alone do not say it (ACLs, a root that reads anything): open it.
    std::fs::File::open(path).map(drop)
}

fn check_output(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    // Opened for writing without truncating, an existing file keeps its contents until
    // the job has counts to replace them with.
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if !existed {
        // Left behind, an empty file would pass for the output of a job that failed.
        std::fs::remove_file(path)?;
    }
    Ok(())
}

/// The sizes a job of stages runs with, once the executors it runs on are known.
#[derive(Debug, Clone, Copy)]
struct Shape {
    maps: u32,
    reduces: u32,
    /// The executors registered when the job started, and their cores: what the report
    /// says the job ran on, whoever joins (or replaces one lost) on the way.
    executors: usize,
    total_cores: u32,
}

impl Shape {
    fn of(spec: &StagesSpec, driver: &Driver) -> Shape {
        let total_cores = driver.total_cores();
        let cores = total_cores.max(1);
        let parallelism = u32::try_from(driver.default_parallelism()).unwrap_or(u32::MAX);
        Shape {
            maps: spec.maps.unwrap_or(cores.saturating_mul(2)).max(1),
            reduces: spec.reduces.unwrap_or(parallelism).max(1),
            executors: driver.num_executors(),
            total_cores,
        }
    }

    /// Each map task's share of `total`: they all make as many (the built-in map
    /// functions take one size, in an input all tasks of the stage share).
    fn share(&self, total: u64) -> u64 {
        total.div_ceil(u64::from(self.maps))
    }

    /// What the map tasks make in all when asked for `total`.
    fn made(&self, total: u64) -> u64 {
        u64::from(self.maps) * self.share(total)
    }
}

/// How a job of stages went; its JSON form (`flint run --job ... --json`) has these
/// fields by these names.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StagesReport {
    /// `wordcount` or `shuffle`.
    pub job: String,
    /// Executors registered when the job started.
    pub executors: usize,
    /// Their cores, in all.
    pub total_cores: u32,
    /// Map tasks and reduce partitions.
    pub maps: u32,
    /// Reduce partitions.
    pub reduces: u32,
    /// From the driver's start to the executors registered.
    pub startup_seconds: f64,
    /// From submitting the job to its last result.
    pub seconds: f64,
    /// Words counted (word count) or records shuffled (shuffle).
    pub records: u64,
    /// `records` per second over `seconds`.
    pub records_per_sec: f64,
    /// Distinct words (word count only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distinct_words: Option<u64>,
    /// Bytes the map tasks wrote to the shuffle.
    pub shuffle_bytes_written: u64,
    /// Bytes the reduce tasks read of it, local and fetched.
    pub shuffle_bytes_fetched: u64,
    /// Stages that ran.
    pub stages: usize,
    /// Stage attempts (more than `stages` after fetch failures).
    pub stage_attempts: u32,
    /// Task attempts that could not fetch a block.
    pub fetch_failures: u32,
}

impl StagesReport {
    /// One JSON object of every field.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    /// A few lines for a person.
    pub fn to_text(&self) -> String {
        let unit = if self.job == "wordcount" {
            "words"
        } else {
            "records"
        };
        let mut text = format!(
            "{} of {} {unit} ({} maps, {} reduces) on {} executors ({} cores) in {:.3} s: {:.0} {unit}/s\n\
             shuffle: {} bytes written, {} read; {} stages, {} stage attempts, {} fetch failures\n\
             executor start-up: {:.3} s",
            self.job,
            self.records,
            self.maps,
            self.reduces,
            self.executors,
            self.total_cores,
            self.seconds,
            self.records_per_sec,
            self.shuffle_bytes_written,
            self.shuffle_bytes_fetched,
            self.stages,
            self.stage_attempts,
            self.fetch_failures,
            self.startup_seconds,
        );
        if let Some(distinct) = self.distinct_words {
            text.push_str(&format!("; {distinct} distinct words"));
        }
        text
    }
}

/// The stages of the job as a user sees them: numbered from 1 and named by their
/// function, where the scheduler's ids (from [`FIRST_JOB_ID`], apart from task sets'
/// ids) mean nothing to them.
#[derive(Debug, Clone, Copy)]
struct StageNames {
    /// The functions of the map stage and the reduce stage.
    functions: [&'static str; 2],
}

impl StageNames {
    fn of(workload: &Workload) -> StageNames {
        StageNames {
            functions: match workload {
                Workload::WordCount { .. } => ["wordcount-map", "wordcount-reduce"],
                Workload::Shuffle { .. } => ["shuffle-write", "shuffle-count"],
            },
        }
    }

    /// `stage N (function)`, and the attempt when it is not the first. The job is the
    /// first of a driver of its own, whose DAG scheduler makes its map stage, then its
    /// result stage, with ids from [`FIRST_JOB_ID`] on.
    fn label(&self, stage_id: u32, attempt: u32) -> Option<String> {
        let index = stage_id.checked_sub(FIRST_JOB_ID)? as usize;
        let function = self.functions.get(index)?;
        let mut label = format!("stage {} ({function})", index + 1);
        if attempt > 0 {
            label.push_str(&format!(" attempt {attempt}"));
        }
        Some(label)
    }

    /// `text` with each `stage ID.ATTEMPT` of the scheduler's messages (the seeds'
    /// texts) in the user's terms.
    fn in_user_terms(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find("stage ") {
            let (before, from) = rest.split_at(at);
            out.push_str(before);
            let after = &from["stage ".len()..];
            let id_len = after.bytes().take_while(u8::is_ascii_digit).count();
            let attempt_len = after[id_len..]
                .strip_prefix('.')
                .map_or(0, |a| a.bytes().take_while(u8::is_ascii_digit).count());
            let label = (id_len > 0 && attempt_len > 0)
                .then(|| {
                    let id = after[..id_len].parse().ok()?;
                    let attempt = after[id_len + 1..id_len + 1 + attempt_len].parse().ok()?;
                    self.label(id, attempt)
                })
                .flatten();
            match label {
                Some(label) => {
                    out.push_str(&label);
                    rest = &after[id_len + 1 + attempt_len..];
                }
                None => {
                    out.push_str("stage ");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// Tells the caller of each stage as it ends, in the user's terms; the log keeps the
/// scheduler's ids.
struct StageLines {
    lines: mpsc::Sender<String>,
    names: StageNames,
    progress: Arc<Mutex<StageProgress>>,
}

/// The tasks of the stage attempts running, for the progress hook: a job of stages has
/// no count of its own, and its later stages' tasks are not known until they are
/// submitted.
#[derive(Debug, Default)]
struct StageProgress {
    /// Each running stage attempt's tasks succeeded and tasks in all.
    running: BTreeMap<TaskSetId, (usize, usize)>,
}

impl StageProgress {
    fn on_event(&mut self, event: &SchedulerEvent) {
        match event {
            SchedulerEvent::StageSubmitted {
                task_set,
                num_tasks,
                ..
            } => {
                self.running.insert(*task_set, (0, *num_tasks as usize));
            }
            // The first success of each task, once.
            SchedulerEvent::TaskEnd {
                task_set,
                reason: TaskEndReason::Success(_),
                ..
            } => {
                if let Some((done, _)) = self.running.get_mut(task_set) {
                    *done += 1;
                }
            }
            SchedulerEvent::StageCompleted { task_set, .. } => {
                self.running.remove(task_set);
            }
            _ => {}
        }
    }

    /// Tasks done and tasks in all, over the stage attempts running.
    fn done_of(&self) -> (usize, usize) {
        self.running
            .values()
            .fold((0, 0), |(done, total), (d, t)| (done + d, total + t))
    }
}

impl SchedulerListener for StageLines {
    fn on_event(&mut self, event: &SchedulerEvent) {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_event(event);
        if let SchedulerEvent::StageCompleted {
            task_set, failure, ..
        } = event
        {
            tracing::debug!(
                "stage {task_set} ended{}",
                if failure.is_some() { " failed" } else { "" }
            );
            let label = self
                .names
                .label(task_set.stage_id, task_set.stage_attempt_id)
                .unwrap_or_else(|| format!("stage {task_set}"));
            let line = match failure {
                None => format!("{label} done"),
                Some(why) => format!(
                    "{label} failed: {}",
                    self.names.in_user_terms(first_line(why))
                ),
            };
            let _ = self.lines.send(line);
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Runs a job of stages: starts a driver with `cluster_manager`, waits until it is
/// ready (as [`crate::job::run_job`] does), builds the job from `spec`, runs it, checks
/// its results (every word or record counted once), writes the word count's output,
/// stops everything and reports. `on_stage` gets a line as each stage attempt ends, and
/// notes on how the job runs. Files are checked first ([`StagesSpec::check_files`]).
pub fn run_stages(
    conf: &Conf,
    spec: &StagesSpec,
    cluster_manager: Box<dyn ClusterManager>,
    mut hooks: JobHooks<'_>,
    on_stage: &mut dyn FnMut(&str),
) -> Result<StagesReport, JobError> {
    spec.check_files()?;
    let names = StageNames::of(&spec.workload);
    with_ready_driver(
        conf,
        cluster_manager,
        &mut hooks,
        spec.executors,
        spec.startup_timeout,
        |driver, startup, hooks| {
            let (lines, stage_ended) = mpsc::channel();
            let progress = Arc::new(Mutex::new(StageProgress::default()));
            driver.add_listener(StageLines {
                lines,
                names,
                progress: progress.clone(),
            });
            let shape = Shape::of(spec, driver);
            if let Some(note) = rounding_note(spec, &shape) {
                on_stage(&note);
            }
            let job = build(driver, spec, &shape)?;
            let handle = driver.submit_job(job)?;
            tracing::debug!(
                "the {} job is job {}",
                spec.workload.name(),
                handle.job_id()
            );
            let deadline = deadline_after(Instant::now(), spec.job_timeout);
            let outcome = loop {
                if is_interrupted(hooks) {
                    driver.cancel_job(handle.job_id(), Some("interrupted"));
                    return Err(JobError::Interrupted);
                }
                for line in stage_ended.try_iter() {
                    on_stage(&line);
                }
                if let Some(hook) = hooks.progress.as_mut() {
                    let (done, total) =
                        progress.lock().unwrap_or_else(|e| e.into_inner()).done_of();
                    if total > 0 {
                        hook(done, total);
                    }
                }
                let remaining = deadline.saturating_duration_since(Instant::now());
                match handle.wait(remaining.min(Duration::from_millis(100))) {
                    Ok(outcome) => break outcome,
                    Err(flint_scheduler::JobError::Timeout { .. }) if !remaining.is_zero() => {}
                    Err(flint_scheduler::JobError::Timeout { .. }) => {
                        driver.cancel_job(handle.job_id(), Some("job timeout"));
                        return Err(JobError::JobTimeout {
                            job: spec.workload.name(),
                            timeout: spec.job_timeout,
                        });
                    }
                    Err(flint_scheduler::JobError::Failed { message, .. }) => {
                        for line in stage_ended.try_iter() {
                            on_stage(&line);
                        }
                        return Err(JobError::Stages(names.in_user_terms(&message)));
                    }
                }
            };
            for line in stage_ended.try_iter() {
                on_stage(&line);
            }
            report(spec, &shape, startup, &outcome)
        },
    )
}

/// A note when the map tasks make more than was asked, each making the same share.
fn rounding_note(spec: &StagesSpec, shape: &Shape) -> Option<String> {
    let (asked, unit) = match &spec.workload {
        Workload::WordCount {
            source: WordSource::Generated { words, .. },
            ..
        } => (*words, "words"),
        Workload::WordCount { .. } => return None,
        Workload::Shuffle { records, .. } => (*records, "records"),
    };
    let made = shape.made(asked);
    (made != asked).then(|| {
        format!(
            "note: {asked} {unit} do not split evenly between {} map tasks: each makes {}, \
             {made} in all",
            shape.maps,
            shape.share(asked)
        )
    })
}

fn build(
    driver: &Driver,
    spec: &StagesSpec,
    shape: &Shape,
) -> Result<flint_scheduler::dag::JobSpec, JobError> {
    let share = |total: u64| shape.share(total);
    let mut job = driver.job(spec.workload.name());
    let (map, reduce, input) = match &spec.workload {
        Workload::WordCount { source, .. } => {
            let input = match source {
                WordSource::Generated {
                    words,
                    vocabulary,
                    seed,
                } => format!("gen:{}:{vocabulary}:{seed}", share(*words)),
                WordSource::File(path) => format!("file:{}:{}", shape.maps, path.display()),
            };
            ("wordcount-map", "wordcount-reduce", input)
        }
        Workload::Shuffle {
            records,
            record_size,
        } => (
            "shuffle-write",
            "shuffle-count",
            format!("{}:{record_size}:7", share(*records)),
        ),
    };
    let shuffled = job.stage(map, shape.maps, input)?.shuffle(shape.reduces);
    Ok(job.reduce(reduce, &[shuffled], b"")?.result())
}

fn report(
    spec: &StagesSpec,
    shape: &Shape,
    startup: Duration,
    outcome: &JobOutcome,
) -> Result<StagesReport, JobError> {
    let (records, distinct_words) = match &spec.workload {
        Workload::WordCount { source, output } => {
            let mut lines: Vec<(&[u8], u64)> = Vec::new();
            for result in &outcome.results {
                for line in result.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    let parsed = line.iter().position(|&b| b == b'\t').and_then(|tab| {
                        let count = std::str::from_utf8(&line[tab + 1..]).ok()?.parse().ok()?;
                        Some((&line[..tab], count))
                    });
                    lines.push(parsed.ok_or_else(|| {
                        JobError::Check(format!(
                            "a reduce task returned a line that is not word<TAB>count: {:?}",
                            String::from_utf8_lossy(line)
                        ))
                    })?);
                }
            }
            lines.sort_unstable();
            if let Some(twice) = lines.windows(2).find(|pair| pair[0].0 == pair[1].0) {
                return Err(JobError::Check(format!(
                    "the word {:?} was counted by two reduce tasks",
                    String::from_utf8_lossy(twice[0].0)
                )));
            }
            let words: u64 = lines.iter().map(|(_, count)| count).sum();
            if let WordSource::Generated { words: asked, .. } = source {
                let made = shape.made(*asked);
                if words != made {
                    return Err(JobError::Check(format!(
                        "the job counted {words} words where the map tasks made {made}"
                    )));
                }
            }
            if let Some(path) = output {
                write_counts(path, &lines)?;
            }
            (words, Some(lines.len() as u64))
        }
        Workload::Shuffle { records, .. } => {
            let mut counted = 0u64;
            for result in &outcome.results {
                let number: [u8; 8] =
                    result
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(|| {
                            JobError::Check(format!(
                                "a reduce task returned {} bytes, not 16",
                                result.len()
                            ))
                        })?;
                counted += u64::from_le_bytes(number);
            }
            let made = shape.made(*records);
            if counted != made {
                return Err(JobError::Check(format!(
                    "the reduce tasks counted {counted} records where the map tasks wrote {made}"
                )));
            }
            (counted, None)
        }
    };
    let seconds = outcome.elapsed.as_secs_f64();
    Ok(StagesReport {
        job: spec.workload.name().to_owned(),
        executors: shape.executors,
        total_cores: shape.total_cores,
        maps: shape.maps,
        reduces: shape.reduces,
        startup_seconds: startup.as_secs_f64(),
        seconds,
        records,
        records_per_sec: if seconds > 0.0 {
            records as f64 / seconds
        } else {
            0.0
        },
        distinct_words,
        shuffle_bytes_written: outcome.stats.shuffle_bytes_written,
        shuffle_bytes_fetched: outcome.stats.shuffle_bytes_read,
        stages: outcome.stats.stages.len(),
        stage_attempts: outcome.stats.stage_attempts,
        fetch_failures: outcome.stats.fetch_failures,
    })
}

fn write_counts(path: &std::path::Path, lines: &[(&[u8], u64)]) -> Result<(), JobError> {
    use std::io::Write;
    let mut out = Vec::with_capacity(lines.len() * 16);
    for (word, count) in lines {
        out.extend_from_slice(word);
        out.push(b'\t');
        let _ = write!(out, "{count}");
        out.push(b'\n');
    }
    std::fs::write(path, Bytes::from(out)).map_err(|source| JobError::Output {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_counts_the_first_success_of_each_task_of_the_running_stages() {
        use flint_scheduler::TaskResult;
        use flint_wire::{SharedStr, TaskMetrics, TaskState};

        let map = TaskSetId {
            stage_id: 0,
            stage_attempt_id: 0,
        };
        let reduce = TaskSetId {
            stage_id: 1,
            stage_attempt_id: 0,
        };
        let submitted = |task_set, num_tasks| SchedulerEvent::StageSubmitted {
            task_set,
            job_id: 0,
            num_tasks,
        };
        let ended = |task_set, reason| SchedulerEvent::TaskEnd {
            task_id: 0,
            task_set,
            index: 0,
            attempt: 0,
            executor_id: SharedStr::from("1"),
            state: TaskState::Finished,
            duration: Duration::ZERO,
            reason,
        };
        let success = || {
            TaskEndReason::Success(TaskResult::Direct {
                value: Bytes::new(),
                metrics: TaskMetrics::default(),
            })
        };
        let mut progress = StageProgress::default();
        assert_eq!(progress.done_of(), (0, 0));
        progress.on_event(&submitted(map, 4));
        progress.on_event(&ended(map, success()));
        progress.on_event(&ended(map, success()));
        // A speculative copy's success and a failure are no task done.
        progress.on_event(&ended(map, TaskEndReason::AlreadySucceeded));
        progress.on_event(&ended(
            map,
            TaskEndReason::Failed {
                kind: flint_wire::TaskFailureKind::Exception,
                message: "x".into(),
                counted: true,
            },
        ));
        assert_eq!(progress.done_of(), (2, 4));
        progress.on_event(&submitted(reduce, 3));
        assert_eq!(progress.done_of(), (2, 7));
        progress.on_event(&SchedulerEvent::StageCompleted {
            task_set: map,
            job_id: 0,
            failure: None,
        });
        progress.on_event(&ended(reduce, success()));
        // A late end of a stage no longer running counts nowhere.
        progress.on_event(&ended(map, success()));
        assert_eq!(progress.done_of(), (1, 3));
    }

    #[test]
    fn scheduler_stage_ids_read_as_the_user_s_numbered_stages() {
        let names = StageNames::of(&Workload::Shuffle {
            records: 1,
            record_size: 8,
        });
        let (map, reduce) = (FIRST_JOB_ID, FIRST_JOB_ID + 1);
        assert_eq!(names.label(map, 0).unwrap(), "stage 1 (shuffle-write)");
        assert_eq!(
            names.label(reduce, 2).unwrap(),
            "stage 2 (shuffle-count) attempt 2"
        );
        assert_eq!(names.label(FIRST_JOB_ID + 2, 0), None);
        assert_eq!(names.label(0, 0), None);
        let message = format!(
            "Job aborted due to stage failure: Task 3 in stage {map}.0 failed 4 times, most \
             recent failure: Lost task 3.3 in stage {reduce}.1 (TID 12, localhost, executor \
             1): boom in stage 7.0 at the stage end"
        );
        assert_eq!(
            names.in_user_terms(&message),
            "Job aborted due to stage failure: Task 3 in stage 1 (shuffle-write) failed 4 \
             times, most recent failure: Lost task 3.3 in stage 2 (shuffle-count) attempt 1 \
             (TID 12, localhost, executor 1): boom in stage 7.0 at the stage end"
        );
        assert_eq!(names.in_user_terms("stage "), "stage ");
        assert_eq!(
            names.in_user_terms("stage 1073741824."),
            "stage 1073741824."
        );
    }

    #[test]
    fn map_tasks_make_equal_shares_and_the_note_says_when_that_is_more() {
        let shape = Shape {
            maps: 4,
            reduces: 2,
            executors: 1,
            total_cores: 1,
        };
        assert_eq!((shape.share(10), shape.made(10)), (3, 12));
        assert_eq!((shape.share(12), shape.made(12)), (3, 12));
        let spec = |records| StagesSpec {
            executors: 1,
            cores: 1,
            maps: Some(4),
            reduces: None,
            workload: Workload::Shuffle {
                records,
                record_size: 8,
            },
            startup_timeout: Duration::from_secs(1),
            job_timeout: Duration::from_secs(1),
        };
        assert_eq!(
            rounding_note(&spec(10), &shape).unwrap(),
            "note: 10 records do not split evenly between 4 map tasks: each makes 3, 12 in all"
        );
        assert_eq!(rounding_note(&spec(12), &shape), None);
    }

    #[test]
    fn checking_an_output_keeps_an_existing_file_and_leaves_no_new_one() {
        let dir = std::env::temp_dir().join(format!("flint-check-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let existing = dir.join("existing");
        std::fs::write(&existing, "kept").unwrap();
        check_output(&existing).unwrap();
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "kept");
        let new = dir.join("new");
        check_output(&new).unwrap();
        assert!(!new.exists());
        assert!(check_output(&dir).is_err());
        assert!(check_output(&dir.join("no-dir").join("out")).is_err());
        assert!(check_input(&dir).is_err());
        assert!(check_input(&new).is_err());
        check_input(&existing).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
