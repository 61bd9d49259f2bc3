//! Jobs of stages from the command line: a word count and a plain hash shuffle, run on a
//! driver in this process and executors from a cluster manager (`flint run --job
//! wordcount|shuffle`), with a report of how fast they went.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::timer::deadline_after;
use flint_rpc::Conf;
use flint_scheduler::{ClusterManager, Driver, JobOutcome, SchedulerEvent, SchedulerListener};

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
    /// Map tasks.
    pub maps: u32,
    /// Reduce partitions.
    pub reduces: u32,
    /// What it runs.
    pub workload: Workload,
    /// How long the driver may take to be ready.
    pub startup_timeout: Duration,
    /// How long the job may take once it is.
    pub job_timeout: Duration,
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

/// Tells the caller of each stage as it ends, with its tasks.
struct StageLines(mpsc::Sender<String>);

impl SchedulerListener for StageLines {
    fn on_event(&mut self, event: &SchedulerEvent) {
        if let SchedulerEvent::StageCompleted {
            task_set, failure, ..
        } = event
        {
            let line = match failure {
                None => format!("stage {task_set} done"),
                Some(why) => format!("stage {task_set} failed: {}", first_line(why)),
            };
            let _ = self.0.send(line);
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Runs a job of stages: starts a driver with `cluster_manager`, waits until it is
/// ready (as [`crate::job::run_job`] does), builds the job from `spec`, runs it, checks
/// its results (every word or record counted once), writes the word count's output,
/// stops everything and reports. `on_stage` gets a line as each stage attempt ends.
pub fn run_stages(
    conf: &Conf,
    spec: &StagesSpec,
    cluster_manager: Box<dyn ClusterManager>,
    mut hooks: JobHooks<'_>,
    on_stage: &mut dyn FnMut(&str),
) -> Result<StagesReport, JobError> {
    with_ready_driver(
        conf,
        cluster_manager,
        &mut hooks,
        spec.executors,
        spec.startup_timeout,
        |driver, startup, hooks| {
            let (lines, stage_ended) = mpsc::channel();
            driver.add_listener(StageLines(lines));
            let job = build(driver, spec)?;
            let handle = driver.submit_job(job)?;
            let deadline = deadline_after(Instant::now(), spec.job_timeout);
            let outcome = loop {
                if is_interrupted(hooks) {
                    driver.cancel_job(handle.job_id(), Some("interrupted"));
                    return Err(JobError::Interrupted);
                }
                for line in stage_ended.try_iter() {
                    on_stage(&line);
                }
                match handle.wait(Duration::from_millis(100)) {
                    Ok(outcome) => break outcome,
                    Err(flint_scheduler::JobError::Timeout { .. }) if Instant::now() < deadline => {
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            for line in stage_ended.try_iter() {
                on_stage(&line);
            }
            report(driver, spec, startup, &outcome)
        },
    )
}

fn build(driver: &Driver, spec: &StagesSpec) -> Result<flint_scheduler::dag::JobSpec, JobError> {
    let share = |total: u64| total.div_ceil(u64::from(spec.maps.max(1)));
    let mut job = driver.job(spec.workload.name());
    let (map, reduce, input) = match &spec.workload {
        Workload::WordCount { source, .. } => {
            let input = match source {
                WordSource::Generated {
                    words,
                    vocabulary,
                    seed,
                } => format!("gen:{}:{vocabulary}:{seed}", share(*words)),
                WordSource::File(path) => format!("file:{}:{}", spec.maps, path.display()),
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
    let shuffled = job.stage(map, spec.maps, input)?.shuffle(spec.reduces);
    Ok(job.reduce(reduce, &[shuffled], b"")?.result())
}

fn report(
    driver: &Driver,
    spec: &StagesSpec,
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
                let made = u64::from(spec.maps) * asked.div_ceil(u64::from(spec.maps.max(1)));
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
            let made = u64::from(spec.maps) * records.div_ceil(u64::from(spec.maps.max(1)));
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
        executors: driver.num_executors(),
        total_cores: driver.total_cores(),
        maps: spec.maps,
        reduces: spec.reduces,
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
    std::fs::write(path, Bytes::from(out))
        .map_err(|e| JobError::Check(format!("cannot write {}: {e}", path.display())))
}
