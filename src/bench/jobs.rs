//! Jobs of stages as issue 21 measures them, each beside its baseline in the same run,
//! on one [`BenchCluster`] (a driver and executor processes, started once):
//!
//! - latency: a two-stage tiny job ([`tiny_job`]: 2 `shuffle-write` map tasks of a few
//!   records, 2 `shuffle-count` reduce partitions) and a one-task noop job, from
//!   submission to result at the driver, in alternating blocks of back-to-back jobs of
//!   one kind ([`measure_latencies`]); the p50 of each and their ratio (target: at most
//!   5 x), and apart the tiny job's p50 right after a one-task job;
//! - a hash shuffle ([`hash_shuffle_job`]: `shuffle-write` maps of records of 100 bytes,
//!   `shuffle-count` reduces, counts checked) in records and shuffle bytes per second,
//!   beside raw TCP's pipelined 4 KiB throughput between two processes
//!   ([`super::stream`]), in alternating rounds; the ratio is the median of the rounds'
//!   ratios (targets: 8 M records/s, a quarter of raw TCP);
//! - a word count ([`word_count_job`]: `wordcount-map` of generated words,
//!   `wordcount-reduce`, total checked) in words per second (target: 30 M words/s).
//!
//! Shuffle bytes are what the map tasks wrote (`JobStats::shuffle_bytes_written`: the
//! records with their 4-byte length prefixes). With 2 executors about half of them are
//! read by a reduce task on the executor that wrote them, in place, and half fetched
//! over TCP from the other one.
//!
//! The executors' `shuffle.maxMemory` is 1g ([`jobs_conf`]) so that a 400 MB shuffle
//! stays in memory (the default, 256m, would spill part of it to `local.dir`). Each
//! job's shuffles are removed once it ends, so that runs do not pile up map outputs.

use std::time::Duration;

use bytes::Bytes;
use flint_rpc::Conf;
use flint_scheduler::dag::JobSpec;
use flint_scheduler::{Driver, JobOutcome};

use super::stream::RawStream;
use super::{io_error, BenchCluster};
use crate::job::JobError;

/// The longest a job may take.
const JOB_TIMEOUT: Duration = Duration::from_secs(600);
/// Records each map task of the tiny job writes.
const TINY_RECORDS: u64 = 4;
/// Bytes of each record of the tiny job.
const TINY_RECORD_SIZE: u64 = 16;

/// The issue's targets.
pub mod targets {
    /// Two-stage tiny job p50 over one-task job p50: at most this.
    pub const TINY_OVER_ONE_TASK: f64 = 5.0;
    /// Hash shuffle records per second: at least this.
    pub const SHUFFLE_RECORDS_PER_SEC: f64 = 8e6;
    /// Shuffle bytes per second over raw TCP's: at least this.
    pub const SHUFFLE_OVER_RAW_TCP: f64 = 0.25;
    /// Word count words per second: at least this.
    pub const WORDS_PER_SEC: f64 = 30e6;
}

/// The sizes of the jobs, and how many times each is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSizes {
    /// Alternating samples of the one-task and the tiny job.
    pub latency_samples: usize,
    /// Measured runs of each large job (after one that warms up).
    pub runs: usize,
    /// Map tasks of the hash shuffle.
    pub shuffle_maps: u32,
    /// Reduce partitions of the hash shuffle.
    pub shuffle_reduces: u32,
    /// Records each map task writes.
    pub records_per_map: u64,
    /// Bytes of each record.
    pub record_size: u64,
    /// Map tasks of the word count.
    pub word_maps: u32,
    /// Reduce partitions of the word count.
    pub word_reduces: u32,
    /// Words each map task generates.
    pub words_per_map: u64,
    /// Distinct words.
    pub vocabulary: u64,
}

impl Default for JobSizes {
    /// Issue 21's sizes.
    fn default() -> Self {
        JobSizes {
            latency_samples: 1_000,
            runs: 5,
            shuffle_maps: 4,
            shuffle_reduces: 4,
            records_per_map: 1_000_000,
            record_size: 100,
            word_maps: 8,
            word_reduces: 4,
            words_per_map: 2_000_000,
            vocabulary: 10_000,
        }
    }
}

impl JobSizes {
    /// Tiny sizes, to check that everything runs.
    pub fn smoke() -> Self {
        JobSizes {
            latency_samples: 20,
            runs: 1,
            records_per_map: 10_000,
            words_per_map: 20_000,
            ..JobSizes::default()
        }
    }

    /// These sizes with any of these environment variables applied:
    /// `FLINT_BENCH_LATENCY_SAMPLES`, `FLINT_BENCH_RUNS`, `FLINT_BENCH_SHUFFLE_RECORDS`
    /// (records per map task), `FLINT_BENCH_WORDS` (words per map task). A value that is
    /// not a number is an error naming the variable.
    pub fn with_env(mut self) -> Result<Self, String> {
        fn read<T: std::str::FromStr>(name: &str, slot: &mut T) -> Result<(), String> {
            match std::env::var(name) {
                Ok(value) => {
                    *slot = value
                        .trim()
                        .replace('_', "")
                        .parse()
                        .map_err(|_| format!("{name}={value} is not a number"))?;
                    Ok(())
                }
                Err(_) => Ok(()),
            }
        }
        read("FLINT_BENCH_LATENCY_SAMPLES", &mut self.latency_samples)?;
        read("FLINT_BENCH_RUNS", &mut self.runs)?;
        read("FLINT_BENCH_SHUFFLE_RECORDS", &mut self.records_per_map)?;
        read("FLINT_BENCH_WORDS", &mut self.words_per_map)?;
        self.latency_samples = self.latency_samples.max(1);
        self.runs = self.runs.max(1);
        Ok(self)
    }

    /// Records of the hash shuffle.
    pub fn shuffle_records(&self) -> u64 {
        u64::from(self.shuffle_maps) * self.records_per_map
    }

    /// Words of the word count.
    pub fn words(&self) -> u64 {
        u64::from(self.word_maps) * self.words_per_map
    }
}

/// The configuration the jobs run with: `shuffle.maxMemory=1g`, so that the hash
/// shuffle's map outputs stay in memory.
pub fn jobs_conf() -> Conf {
    Conf::from_pairs(["shuffle.maxMemory=1g"]).expect("a valid conf")
}

/// The two-stage tiny job: 2 map tasks writing `TINY_RECORDS` records each, 2 reduce
/// partitions counting them.
pub fn tiny_job(driver: &Driver) -> Result<JobSpec, JobError> {
    hash_shuffle_job(driver, 2, 2, TINY_RECORDS, TINY_RECORD_SIZE, 1)
}

/// A hash shuffle: `maps` `shuffle-write` tasks of `records` records of `size` bytes
/// each, `reduces` `shuffle-count` partitions.
pub fn hash_shuffle_job(
    driver: &Driver,
    maps: u32,
    reduces: u32,
    records: u64,
    size: u64,
    seed: u64,
) -> Result<JobSpec, JobError> {
    let mut job = driver.job("hash shuffle");
    let input = format!("{records}:{size}:{seed}");
    let written = job.stage("shuffle-write", maps, input)?.shuffle(reduces);
    Ok(job.reduce("shuffle-count", &[written], b"")?.result())
}

/// A word count: `maps` `wordcount-map` tasks generating `words` words each from a
/// vocabulary of `vocabulary`, `reduces` `wordcount-reduce` partitions.
pub fn word_count_job(
    driver: &Driver,
    maps: u32,
    reduces: u32,
    words: u64,
    vocabulary: u64,
    seed: u64,
) -> Result<JobSpec, JobError> {
    let mut job = driver.job("word count");
    let input = format!("gen:{words}:{vocabulary}:{seed}");
    let counts = job.stage("wordcount-map", maps, input)?.shuffle(reduces);
    Ok(job.reduce("wordcount-reduce", &[counts], b"")?.result())
}

/// Records and record bytes (without length prefixes) that `shuffle-count` tasks
/// counted, in all.
pub fn shuffle_counts(results: &[Bytes]) -> Result<(u64, u64), JobError> {
    results.iter().try_fold((0, 0), |(records, bytes), result| {
        let (r, b) = result
            .split_first_chunk::<8>()
            .and_then(|(r, rest)| Some((r, rest.first_chunk::<8>()?)))
            .filter(|_| result.len() == 16)
            .ok_or_else(|| {
                JobError::Check(format!(
                    "a shuffle-count result of {} bytes, not 16",
                    result.len()
                ))
            })?;
        Ok((
            records + u64::from_le_bytes(*r),
            bytes + u64::from_le_bytes(*b),
        ))
    })
}

/// Words counted by `wordcount-reduce` tasks in all, and distinct words; a word counted
/// by two partitions is an error.
pub fn word_count_totals(results: &[Bytes]) -> Result<(u64, u64), JobError> {
    let mut seen = std::collections::HashSet::new();
    let (mut total, mut distinct) = (0, 0);
    for result in results {
        let text = std::str::from_utf8(result)
            .map_err(|_| JobError::Check("a word count result is not UTF-8".into()))?;
        for line in text.lines() {
            let count = line
                .split_once('\t')
                .filter(|(word, _)| seen.insert(*word))
                .and_then(|(_, count)| count.parse::<u64>().ok())
                .ok_or_else(|| {
                    JobError::Check(format!(
                        "{line:?}: not a word and its count, or a word counted twice"
                    ))
                })?;
            total += count;
            distinct += 1;
        }
    }
    Ok((total, distinct))
}

impl BenchCluster {
    /// The driver.
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Runs a job of stages and waits for it; then removes its shuffles.
    pub fn run_job(&mut self, job: JobSpec) -> Result<JobOutcome, JobError> {
        let shuffles: Vec<u32> = job.shuffles.iter().map(|s| s.shuffle_id).collect();
        let outcome = self.driver.submit_job(job)?.wait(JOB_TIMEOUT);
        for shuffle in shuffles {
            self.driver.remove_shuffle(shuffle);
        }
        Ok(outcome?)
    }

    /// Runs [`tiny_job`], checks its count; returns the time from submission to result.
    pub fn run_tiny_job(&mut self) -> Result<Duration, JobError> {
        let outcome = self.run_job(tiny_job(&self.driver)?)?;
        let (records, _) = shuffle_counts(&outcome.results)?;
        if records != 2 * TINY_RECORDS {
            return Err(JobError::Check(format!(
                "the tiny job counted {records} records of {}",
                2 * TINY_RECORDS
            )));
        }
        Ok(outcome.elapsed)
    }

    /// Runs the hash shuffle of `sizes`, checks its counts.
    pub fn run_hash_shuffle(
        &mut self,
        sizes: &JobSizes,
        seed: u64,
    ) -> Result<ShuffleRun, JobError> {
        let job = hash_shuffle_job(
            &self.driver,
            sizes.shuffle_maps,
            sizes.shuffle_reduces,
            sizes.records_per_map,
            sizes.record_size,
            seed,
        )?;
        let outcome = self.run_job(job)?;
        let (records, bytes) = shuffle_counts(&outcome.results)?;
        let expected = sizes.shuffle_records();
        if (records, bytes) != (expected, expected * sizes.record_size) {
            return Err(JobError::Check(format!(
                "the hash shuffle counted {records} records of {expected}, {bytes} bytes of {}",
                expected * sizes.record_size
            )));
        }
        Ok(ShuffleRun {
            elapsed: outcome.elapsed,
            records,
            shuffle_bytes: outcome.stats.shuffle_bytes_written,
        })
    }

    /// Runs the word count of `sizes`, checks its total; returns the time from
    /// submission to result.
    pub fn run_word_count(&mut self, sizes: &JobSizes, seed: u64) -> Result<Duration, JobError> {
        let job = word_count_job(
            &self.driver,
            sizes.word_maps,
            sizes.word_reduces,
            sizes.words_per_map,
            sizes.vocabulary,
            seed,
        )?;
        let outcome = self.run_job(job)?;
        let (total, distinct) = word_count_totals(&outcome.results)?;
        if total != sizes.words() || distinct > sizes.vocabulary {
            return Err(JobError::Check(format!(
                "the word count counted {total} words of {}, {distinct} distinct of at most {}",
                sizes.words(),
                sizes.vocabulary
            )));
        }
        Ok(outcome.elapsed)
    }
}

/// One run of the hash shuffle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShuffleRun {
    /// From submission to result.
    pub elapsed: Duration,
    /// Records shuffled.
    pub records: u64,
    /// Bytes the map tasks wrote, length prefixes included.
    pub shuffle_bytes: u64,
}

/// One-task and two-stage tiny job latency, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobLatencies {
    /// Samples of each.
    pub samples: usize,
    /// One-task noop job, median.
    pub one_task_p50_us: f64,
    /// One-task noop job, 99th percentile.
    pub one_task_p99_us: f64,
    /// Two-stage tiny job, median.
    pub tiny_p50_us: f64,
    /// Two-stage tiny job, 99th percentile.
    pub tiny_p99_us: f64,
    /// Two-stage tiny job right after a one-task job, median: one executor then comes
    /// to it from an idle wait.
    pub tiny_after_one_task_p50_us: f64,
}

impl JobLatencies {
    /// Tiny job p50 over one-task job p50.
    pub fn ratio(&self) -> f64 {
        self.tiny_p50_us / self.one_task_p50_us
    }
}

/// Jobs of one kind run back to back in [`measure_latencies`], the first not counted.
const LATENCY_BLOCK: usize = 10;

/// Measures both latencies, `samples` of each, after a tenth as many that warm up: in
/// alternating blocks of `LATENCY_BLOCK` jobs of one kind run back to back, so that
/// drift on the host falls on both alike while each kind is measured as back-to-back
/// jobs find the executors (as `flint bench` measures the one-task job). A block's first
/// job, which finds them as the other kind left them, is not counted; the tiny job's is
/// reported apart.
pub fn measure_latencies(
    cluster: &mut BenchCluster,
    samples: usize,
) -> Result<JobLatencies, JobError> {
    for _ in 0..samples.div_ceil(10) {
        cluster.run_noop(1)?;
        cluster.run_tiny_job()?;
    }
    let (mut one, mut tiny, mut tiny_after_one) =
        (super::histogram(), super::histogram(), super::histogram());
    let record = |h: &mut hdrhistogram::Histogram<u64>, elapsed: Duration| {
        h.saturating_record(elapsed.as_nanos() as u64)
    };
    let mut taken = 0;
    while taken < samples {
        let block = LATENCY_BLOCK.min(samples - taken);
        cluster.run_noop(1)?;
        for _ in 0..block {
            record(&mut one, cluster.run_noop(1)?);
        }
        record(&mut tiny_after_one, cluster.run_tiny_job()?);
        for _ in 0..block {
            record(&mut tiny, cluster.run_tiny_job()?);
        }
        taken += block;
    }
    let us = |h: &hdrhistogram::Histogram<u64>, q| super::micros(h.value_at_quantile(q));
    Ok(JobLatencies {
        samples,
        one_task_p50_us: us(&one, 0.5),
        one_task_p99_us: us(&one, 0.99),
        tiny_p50_us: us(&tiny, 0.5),
        tiny_p99_us: us(&tiny, 0.99),
        tiny_after_one_task_p50_us: us(&tiny_after_one, 0.5),
    })
}

/// The hash shuffle beside raw TCP, medians over the rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShuffleThroughput {
    /// Rounds measured.
    pub runs: usize,
    /// Records shuffled by each run.
    pub records: u64,
    /// Shuffle bytes of each run (length prefixes included).
    pub shuffle_bytes: u64,
    /// A run's time, median.
    pub elapsed: Duration,
    /// Records per second, median.
    pub records_per_sec: f64,
    /// Shuffle bytes per second, median.
    pub bytes_per_sec: f64,
    /// Raw TCP's pipelined throughput of as many bytes, median.
    pub raw_bytes_per_sec: f64,
    /// Median of the rounds' shuffle over raw TCP ratios.
    pub raw_ratio: f64,
    /// The lowest and the highest of the rounds' ratios.
    pub raw_ratio_range: (f64, f64),
}

/// Runs the hash shuffle of `sizes` once to warm up, then `sizes.runs` rounds of a run
/// and raw TCP streaming as many bytes through `raw`.
pub fn measure_shuffle(
    cluster: &mut BenchCluster,
    sizes: &JobSizes,
    raw: &mut RawStream,
) -> Result<ShuffleThroughput, JobError> {
    let warm = cluster.run_hash_shuffle(sizes, 0)?;
    raw.send(warm.shuffle_bytes).map_err(io_error)?;
    let (mut times, mut rates, mut raws, mut ratios) = (vec![], vec![], vec![], vec![]);
    for round in 0..sizes.runs {
        let run = cluster.run_hash_shuffle(sizes, 1 + round as u64)?;
        let rate = run.shuffle_bytes as f64 / run.elapsed.as_secs_f64();
        let raw_rate = raw.throughput(run.shuffle_bytes).map_err(io_error)?;
        times.push(run.elapsed);
        rates.push(rate);
        raws.push(raw_rate);
        ratios.push(rate / raw_rate);
    }
    let elapsed = median(&mut times);
    let raw_ratio = median_f64(&mut ratios);
    Ok(ShuffleThroughput {
        runs: sizes.runs,
        records: warm.records,
        shuffle_bytes: warm.shuffle_bytes,
        elapsed,
        records_per_sec: warm.records as f64 / elapsed.as_secs_f64(),
        bytes_per_sec: median_f64(&mut rates),
        raw_bytes_per_sec: median_f64(&mut raws),
        raw_ratio,
        raw_ratio_range: (ratios[0], ratios[ratios.len() - 1]),
    })
}

/// The word count, median over the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WordCountThroughput {
    /// Runs measured.
    pub runs: usize,
    /// Words counted by each run.
    pub words: u64,
    /// A run's time, median.
    pub elapsed: Duration,
    /// Words per second, of the median time.
    pub words_per_sec: f64,
}

/// Runs the word count of `sizes` once to warm up, then `sizes.runs` times.
pub fn measure_word_count(
    cluster: &mut BenchCluster,
    sizes: &JobSizes,
) -> Result<WordCountThroughput, JobError> {
    cluster.run_word_count(sizes, 0)?;
    let mut times = (0..sizes.runs)
        .map(|run| cluster.run_word_count(sizes, 1 + run as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let elapsed = median(&mut times);
    Ok(WordCountThroughput {
        runs: sizes.runs,
        words: sizes.words(),
        elapsed,
        words_per_sec: sizes.words() as f64 / elapsed.as_secs_f64(),
    })
}

/// Everything measured, for [`JobsReport::to_table`].
#[derive(Debug, Clone, PartialEq)]
pub struct JobsReport {
    /// The sizes measured.
    pub sizes: JobSizes,
    /// Executors and cores of each.
    pub executors: (usize, u32),
    /// Where raw TCP's reading end ran: "two processes" or "two threads".
    pub raw_peer: &'static str,
    /// Job latencies.
    pub latency: JobLatencies,
    /// The hash shuffle.
    pub shuffle: ShuffleThroughput,
    /// The word count.
    pub word_count: WordCountThroughput,
}

impl JobsReport {
    /// A table for people: each figure, its baseline, the ratio, the target and whether
    /// it is met.
    pub fn to_table(&self) -> String {
        let (latency, shuffle, words, sizes) =
            (&self.latency, &self.shuffle, &self.word_count, &self.sizes);
        let met = |ok: bool| if ok { "met" } else { "NOT met" };
        let rows = [
            (
                format!("one-task noop job, p50 of {}", latency.samples),
                format!("{:.1} us", latency.one_task_p50_us),
                format!("p99 {:.1} us", latency.one_task_p99_us),
                String::new(),
                String::new(),
                "",
            ),
            (
                format!(
                    "two-stage tiny job (2 maps, 2 reduces), p50 of {}",
                    latency.samples
                ),
                format!("{:.1} us", latency.tiny_p50_us),
                format!(
                    "one-task job p50 {:.1} us; tiny job p99 {:.1} us, p50 right after a one-task job {:.1} us",
                    latency.one_task_p50_us, latency.tiny_p99_us, latency.tiny_after_one_task_p50_us
                ),
                format!("{:.2} x", latency.ratio()),
                format!("<= {:.0} x", targets::TINY_OVER_ONE_TASK),
                met(latency.ratio() <= targets::TINY_OVER_ONE_TASK),
            ),
            (
                format!(
                    "hash shuffle {} x {} records of {} B, {} reduces",
                    sizes.shuffle_maps,
                    sizes.records_per_map,
                    sizes.record_size,
                    sizes.shuffle_reduces
                ),
                format!("{:.2} M rec/s", shuffle.records_per_sec / 1e6),
                format!(
                    "median of {} runs: {:.3} s",
                    shuffle.runs,
                    shuffle.elapsed.as_secs_f64()
                ),
                String::new(),
                format!(">= {:.0} M rec/s", targets::SHUFFLE_RECORDS_PER_SEC / 1e6),
                met(shuffle.records_per_sec >= targets::SHUFFLE_RECORDS_PER_SEC),
            ),
            (
                format!(
                    "  its shuffle bytes ({:.0} MB)",
                    shuffle.shuffle_bytes as f64 / 1e6
                ),
                format!("{:.0} MB/s", shuffle.bytes_per_sec / 1e6),
                format!(
                    "raw TCP, 4 KiB pipelined, {}: {:.0} MB/s",
                    self.raw_peer,
                    shuffle.raw_bytes_per_sec / 1e6
                ),
                format!(
                    "{:.2} x ({:.2}-{:.2})",
                    shuffle.raw_ratio, shuffle.raw_ratio_range.0, shuffle.raw_ratio_range.1
                ),
                format!(">= {:.2} x", targets::SHUFFLE_OVER_RAW_TCP),
                met(shuffle.raw_ratio >= targets::SHUFFLE_OVER_RAW_TCP),
            ),
            (
                format!(
                    "word count {} x {} words, vocabulary {}, {} reduces",
                    sizes.word_maps, sizes.words_per_map, sizes.vocabulary, sizes.word_reduces
                ),
                format!("{:.2} M words/s", words.words_per_sec / 1e6),
                format!(
                    "median of {} runs: {:.3} s",
                    words.runs,
                    words.elapsed.as_secs_f64()
                ),
                String::new(),
                format!(">= {:.0} M words/s", targets::WORDS_PER_SEC / 1e6),
                met(words.words_per_sec >= targets::WORDS_PER_SEC),
            ),
        ];
        let mut out = format!(
            "{} executors of {} core{}, shuffle.maxMemory=1g\n",
            self.executors.0,
            self.executors.1,
            if self.executors.1 == 1 { "" } else { "s" }
        );
        let mut line = |cells: [&str; 6]| {
            let [what, figure, baseline, ratio, target, met] = cells;
            let row =
                format!("{what:<56} {figure:>16}   {baseline:<52} {ratio:>18}  {target:<16} {met}");
            out.push_str(row.trim_end());
            out.push('\n');
        };
        line([
            "what",
            "figure",
            "baseline, same run",
            "ratio",
            "target",
            "",
        ]);
        for (what, figure, baseline, ratio, target, met) in &rows {
            line([what, figure, baseline, ratio, target, met]);
        }
        let issue = JobSizes {
            latency_samples: sizes.latency_samples,
            runs: sizes.runs,
            ..JobSizes::default()
        };
        if *sizes != issue {
            out.push_str("(sizes are not issue 21's: the targets are for its sizes)\n");
        }
        out
    }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn median_f64(values: &mut [f64]) -> f64 {
    values.sort_unstable_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(u64, u64)]) -> Vec<Bytes> {
        pairs
            .iter()
            .map(|(r, b)| {
                let mut out = r.to_le_bytes().to_vec();
                out.extend_from_slice(&b.to_le_bytes());
                Bytes::from(out)
            })
            .collect()
    }

    #[test]
    fn results_are_added_up_and_bad_ones_refused() {
        assert_eq!(
            shuffle_counts(&counts(&[(3, 300), (4, 400)])).unwrap(),
            (7, 700)
        );
        assert!(shuffle_counts(&[Bytes::from_static(b"short")]).is_err());
        let words = [
            Bytes::from_static(b"fig\t3\nkiwi\t4\n"),
            Bytes::from_static(b"pear\t5\n"),
        ];
        assert_eq!(word_count_totals(&words).unwrap(), (12, 3));
        let twice = [
            Bytes::from_static(b"fig\t3\n"),
            Bytes::from_static(b"fig\t1\n"),
        ];
        assert!(word_count_totals(&twice).is_err());
        assert!(word_count_totals(&[Bytes::from_static(b"fig 3\n")]).is_err());
    }

    #[test]
    fn sizes_default_to_the_issues_and_the_table_says_which_targets_are_met() {
        let sizes = JobSizes::default();
        assert_eq!(sizes.shuffle_records(), 4_000_000);
        assert_eq!(sizes.words(), 16_000_000);
        let report = JobsReport {
            sizes,
            executors: (2, 1),
            raw_peer: "two processes",
            latency: JobLatencies {
                samples: 1_000,
                one_task_p50_us: 100.0,
                one_task_p99_us: 200.0,
                tiny_p50_us: 450.0,
                tiny_p99_us: 900.0,
                tiny_after_one_task_p50_us: 500.0,
            },
            shuffle: ShuffleThroughput {
                runs: 5,
                records: 4_000_000,
                shuffle_bytes: 416_000_000,
                elapsed: Duration::from_millis(400),
                records_per_sec: 10e6,
                bytes_per_sec: 1.04e9,
                raw_bytes_per_sec: 5e9,
                raw_ratio: 0.208,
                raw_ratio_range: (0.2, 0.3),
            },
            word_count: WordCountThroughput {
                runs: 5,
                words: 16_000_000,
                elapsed: Duration::from_millis(500),
                words_per_sec: 32e6,
            },
        };
        let table = report.to_table();
        assert!(table.contains("4.50 x"), "{table}");
        assert!(table.contains("10.00 M rec/s"), "{table}");
        assert!(table.contains("0.21 x (0.20-0.30)"), "{table}");
        assert_eq!(table.matches("NOT met").count(), 1, "{table}");
        assert!(!table.contains("not issue 21's"), "{table}");
        let smoke = JobsReport {
            sizes: JobSizes::smoke(),
            ..report
        };
        assert!(smoke.to_table().contains("not issue 21's"));
        // Fewer runs or samples measure the same jobs.
        let fewer_runs = JobsReport {
            sizes: JobSizes {
                runs: 1,
                latency_samples: 20,
                ..JobSizes::default()
            },
            ..smoke
        };
        assert!(!fewer_runs.to_table().contains("not issue 21's"));
    }
}
