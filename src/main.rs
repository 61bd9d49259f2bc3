//! The `flint` command: the main job, a driver, an executor.

use std::io::IsTerminal;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use flint::bench::{run_bench, BenchOptions};
use flint::executor::{run_executor, ExecutorConfig, TaskRegistry};
use flint::job::{
    local_cluster, run_job, JobError, JobHooks, JobSpec, TaskSpec, STARTED_BY_DRIVER,
};
use flint::rpc::Conf;
use flint::scheduler::cluster_manager::SECRET_ENV;
use flint::scheduler::{ClusterManager, SchedulerConfig, StandaloneExecutors};
use flint::stages::{run_stages, StagesSpec, WordSource, Workload};

mod logging;
mod progress;

/// flint: a zero-copy task-launch control plane (driver, executors, and the RPC
/// transport under them).
#[derive(Debug, Parser)]
#[command(name = "flint", version, about, long_about = None, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Examples and the environment, under `flint --help`: what a new user types first.
const AFTER_HELP: &str = "\
Examples:
  flint run --executors 2 --tasks 100000             100,000 no-op tasks on 2 local executors
  flint run --task sleep:100 --tasks 20 --json       20 tasks of 100 ms, the report as JSON
  flint run --job wordcount --input words.txt --output counts.tsv
  flint driver --executors 2 --conf rpc.bindAddress=0.0.0.0 --conf rpc.port=7077
  flint executor --driver driver-host:7077 --cores 4
  flint conf                                         every configuration key

Environment:
  FLINT_LOG                  log filter, e.g. info or warn,flint_scheduler=debug (default: warn;
                             RUST_LOG is read when it is not set)
  FLINT_LOG_FORMAT           text (default) or json: one JSON object a line
  FLINT_AUTHENTICATE_SECRET  authenticate.secret, kept out of the command line (and out of ps)

`flint COMMAND --help` has each command's options.";

/// Examples under `flint run --help`.
const RUN_EXAMPLES: &str = "\
Examples:
  flint run                                          10,000 no-op tasks on 2 executors
  flint run --executors 4 --cores 2 --tasks 100000 --task noop
  flint run --task fail-n-attempts:1 --tasks 100     every task fails once, then succeeds
  flint run --job shuffle --records 1000000 --record-size 100
  flint run --conf executor.taskPrefetch=64 --json

Task functions (--task): noop, sleep:MS, echo:TEXT, fail-n-attempts:N, large-result:SIZE,
spin:MS, exit-process:CODE.";

/// Examples under `flint driver --help`.
const DRIVER_EXAMPLES: &str = "\
Examples:
  flint driver --executors 2 --tasks 100000 --conf rpc.bindAddress=0.0.0.0 --conf rpc.port=7077
  FLINT_AUTHENTICATE_SECRET=s3cr3t flint driver --executors 2 --conf authenticate=true

It prints the address executors register at; on each executor host:
  flint executor --driver driver-host:7077 --cores 4";

/// Examples under `flint executor --help`.
const EXECUTOR_EXAMPLES: &str = "\
Examples:
  flint executor --driver driver-host:7077 --cores 4 --hostname $(hostname)
  FLINT_AUTHENTICATE_SECRET=s3cr3t flint executor --driver driver-host:7077 --conf authenticate=true

An executor started before its driver tries again for executor.connectTimeout (30s).";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a job: a driver here, executor processes started on this host, N tasks.
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Run a job on executors that register on their own (`flint executor --driver`).
    #[command(after_help = DRIVER_EXAMPLES)]
    Driver(DriverArgs),
    /// Run an executor: register with the driver and run the tasks it sends.
    #[command(after_help = EXECUTOR_EXAMPLES)]
    Executor(ExecutorArgs),
    /// Measure task launch beside its floors: raw TCP round trip, one-task job latency,
    /// throughput with and without launch pipelining.
    Bench(BenchArgs),
    /// List every configuration key with its default, unit and meaning, by crate.
    Conf,
    /// The CPU load of `flint bench --busy`: PERCENT of every CPU until killed.
    #[command(name = flint::bench::LOAD_COMMAND, hide = true)]
    Load {
        /// Percent of each CPU kept busy.
        #[arg(value_parser = clap::value_parser!(u8).range(1..=100))]
        percent: u8,
    },
}

// Counts take allow_negative_numbers: without it, clap reads `--executors -5` as an
// unknown option `-5`, where it is a value to refuse as invalid; `count` says what is
// wrong with it (negative, zero).
#[derive(Debug, Args)]
struct BenchArgs {
    /// Round trips measured for the floor, and one-task jobs for latency.
    #[arg(
        long,
        default_value_t = 5_000,
        value_parser = count::<usize>(1),
        allow_negative_numbers = true
    )]
    samples: usize,
    /// Tasks of each throughput job.
    #[arg(
        long,
        default_value_t = 100_000,
        value_parser = count::<u32>(1),
        allow_negative_numbers = true
    )]
    tasks: u32,
    /// Executors (of 1 core) of the throughput jobs.
    #[arg(long, default_value_t = 2, value_parser = count::<usize>(1), allow_negative_numbers = true)]
    executors: usize,
    /// executor.taskPrefetch of the pipelined job.
    #[arg(long, default_value_t = 256, value_parser = count::<usize>(0), allow_negative_numbers = true)]
    prefetch: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Configuration, KEY=VALUE, for every driver and executor.
    #[arg(long = "conf", value_name = "KEY=VALUE")]
    conf: Vec<String>,
    /// Measure beside a fixed CPU load of PERCENT of every CPU (default 50), so that a
    /// busy host is the same from run to run.
    #[arg(
        long,
        value_name = "PERCENT",
        num_args = 0..=1,
        default_missing_value = "50",
        value_parser = clap::value_parser!(u8).range(1..=100),
        allow_negative_numbers = true
    )]
    busy: Option<u8>,
}

/// The kind of job `flint run` and `flint driver` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum JobKind {
    /// One task set of N tasks of one built-in function (--tasks, --task).
    Tasks,
    /// Two stages: count words per map task, shuffle by word, sum (--words or --input).
    Wordcount,
    /// Two stages: make records in map tasks, hash-shuffle them, count them (--records).
    Shuffle,
}

#[derive(Debug, Args)]
struct JobArgs {
    /// The job: tasks of one function, or a job of stages with a shuffle.
    #[arg(long, value_enum, default_value_t = JobKind::Tasks)]
    job: JobKind,
    /// Tasks in the job.
    #[arg(long, default_value_t = 10_000, value_parser = count::<u32>(1), allow_negative_numbers = true)]
    tasks: u32,
    /// What each task runs, a built-in function: noop, sleep:MS, echo:TEXT,
    /// fail-n-attempts:N, large-result:SIZE, spin:MS, exit-process:CODE (ends the
    /// executor process).
    #[arg(long, default_value = "noop", value_parser = TaskSpec::builtin)]
    task: TaskSpec,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Serve the status page (ui.enabled=true) and keep it up after the job, showing
    /// the job as it ended, until Ctrl-C.
    #[arg(long)]
    ui: bool,
    /// Configuration, KEY=VALUE (any key of the configuration, `spark.` prefix optional).
    #[arg(long = "conf", value_name = "KEY=VALUE")]
    conf: Vec<String>,
    /// How long executors may take to register, in seconds.
    #[arg(long, default_value_t = 60, value_parser = count::<u64>(1), allow_negative_numbers = true)]
    startup_timeout: u64,
    /// How long the job may take once they did, in seconds.
    #[arg(long, default_value_t = 3600, value_parser = count::<u64>(1), allow_negative_numbers = true)]
    job_timeout: u64,
    /// Word count: words to generate, in all (split between the map tasks, each making
    /// as many: rounded up to a multiple of --maps).
    #[arg(
        long,
        default_value_t = 1_000_000,
        conflicts_with = "input",
        value_parser = count::<u64>(1),
        allow_negative_numbers = true
    )]
    words: u64,
    /// Word count: distinct words the generated words are drawn from.
    #[arg(
        long,
        default_value_t = 10_000,
        value_parser = count::<u64>(1),
        allow_negative_numbers = true
    )]
    vocabulary: u64,
    /// Word count: a text file to count (every executor must be able to read it).
    #[arg(long)]
    input: Option<std::path::PathBuf>,
    /// Word count: where to write the counts, one `word<TAB>count` line per word.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
    /// Shuffle: records to shuffle, in all (split between the map tasks, each making as
    /// many: rounded up to a multiple of --maps).
    #[arg(long, default_value_t = 1_000_000, value_parser = count::<u64>(1), allow_negative_numbers = true)]
    records: u64,
    /// Shuffle: bytes of each record.
    #[arg(
        long,
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(8..=1_048_576),
        allow_negative_numbers = true
    )]
    record_size: u32,
    /// Jobs of stages: map tasks (default: twice the registered executors' cores).
    #[arg(long, value_parser = count::<u32>(1), allow_negative_numbers = true)]
    maps: Option<u32>,
    /// Jobs of stages: reduce partitions (default: default.parallelism if set, else the
    /// registered executors' cores, at least 2).
    #[arg(long, value_parser = count::<u32>(1), allow_negative_numbers = true)]
    reduces: Option<u32>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Executor processes to start.
    #[arg(long, default_value_t = 2, value_parser = count::<usize>(1), allow_negative_numbers = true)]
    executors: usize,
    /// Cores of each executor.
    #[arg(long, default_value_t = 1, value_parser = count::<u32>(1), allow_negative_numbers = true)]
    cores: u32,
    #[command(flatten)]
    job: JobArgs,
}

#[derive(Debug, Args)]
struct DriverArgs {
    /// Executors to wait for before the job starts.
    #[arg(long, default_value_t = 1, value_parser = count::<usize>(1), allow_negative_numbers = true)]
    executors: usize,
    #[command(flatten)]
    job: JobArgs,
}

#[derive(Debug, Args)]
struct ExecutorArgs {
    /// The driver's address, HOST:PORT.
    #[arg(long)]
    driver: String,
    /// Cores to offer (tasks run at once).
    #[arg(long, default_value_t = 1, value_parser = count::<u32>(1), allow_negative_numbers = true)]
    cores: u32,
    /// This executor's id (default: the process id).
    #[arg(long)]
    executor_id: Option<String>,
    /// The host name to report (default: localhost).
    #[arg(long, default_value = "localhost")]
    hostname: String,
    /// Configuration, KEY=VALUE.
    #[arg(long = "conf", value_name = "KEY=VALUE")]
    conf: Vec<String>,
    /// Started by a driver's local cluster manager, with the driver's configuration,
    /// about which the command the user typed has already warned.
    #[arg(long = STARTED_BY_DRIVER, hide = true)]
    started_by_driver: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return command_line_error(e),
    };
    // An executor's lines say which executor they come from.
    let executor_id = match &cli.command {
        Command::Executor(args) => Some(
            args.executor_id
                .clone()
                .unwrap_or_else(|| std::process::id().to_string()),
        ),
        _ => None,
    };
    logging::init(executor_id.as_deref());
    // A driver holds a connection, and a descriptor, per executor and more.
    if let Err(e) = flint_rpc::raise_descriptor_limit() {
        tracing::debug!("cannot raise the limit on open descriptors: {e}");
    }
    match cli.command {
        Command::Run(args) => run(args),
        Command::Driver(args) => driver(args),
        Command::Executor(args) => executor(args),
        Command::Bench(args) => bench(args),
        Command::Load { percent } => flint::bench::run_cpu_load(percent),
        Command::Conf => {
            print!("{}", flint::conf::catalogue_text());
            ExitCode::SUCCESS
        }
    }
}

/// A command line clap refuses. `flint run` and `flint driver` under `--json` say so in
/// one JSON object too, as they do every other failure; help and the version are not
/// failures.
fn command_line_error(error: clap::Error) -> ExitCode {
    let _ = error.print();
    if !error.use_stderr() {
        return ExitCode::SUCCESS;
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let job_command = matches!(
        args.first().and_then(|a| a.to_str()),
        Some("run" | "driver")
    );
    if job_command && args.iter().any(|a| a == "--json") {
        let text = error.render().to_string();
        let first = text.lines().next().unwrap_or_default();
        println!(
            "{}",
            flint::job::error_json(&first.strip_prefix("error: ").unwrap_or(first))
        );
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
}

/// The configuration of `--conf` arguments, checked as a whole. A key no crate reads is
/// not an error (other tools' `spark.` keys pass through), but it is named in a warning
/// with the closest known key, as it is most likely misspelt, when `warn_unknown`: the
/// executors a driver starts get its configuration, about which it warned already.
fn parse_conf(pairs: &[String], warn_unknown: bool) -> Result<Conf, String> {
    let mut conf = Conf::from_pairs(pairs.iter().map(String::as_str)).map_err(|e| e.to_string())?;
    if let Ok(secret) = std::env::var(SECRET_ENV) {
        conf.set("authenticate.secret", secret);
    }
    for unknown in flint::conf::unknown_keys(&conf)
        .into_iter()
        .filter(|_| warn_unknown)
    {
        let hint = match unknown.suggestion {
            Some(known) => format!(" (did you mean {known}?)"),
            None => String::new(),
        };
        logging::say(
            "flint",
            tracing::Level::WARN,
            &format!(
                "warning: no part of flint reads the key {}{hint}; `flint conf` lists them",
                unknown.key
            ),
        );
    }
    flint::conf::validate(&conf).map_err(|e| e.to_string())?;
    Ok(conf)
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    logging::say("flint", tracing::Level::ERROR, &message.to_string());
    ExitCode::FAILURE
}

/// Why `flint run` or `flint driver` did not produce a report, and the code to exit with.
struct Failure {
    message: String,
    code: ExitCode,
}

impl<T: std::fmt::Display> From<T> for Failure {
    fn from(message: T) -> Self {
        Failure {
            message: message.to_string(),
            code: ExitCode::FAILURE,
        }
    }
}

/// Prints the report, or the failure: for a person on stderr and, under `--json`, as
/// one JSON object on stdout, where the report would have been.
fn finish(json: bool, result: Result<String, Failure>) -> ExitCode {
    match result {
        Ok(report) => {
            // Empty: already printed (flint run --ui prints it before its wait).
            if !report.is_empty() {
                println!("{report}");
            }
            ExitCode::SUCCESS
        }
        Err(failure) => {
            logging::say("flint", tracing::Level::ERROR, &failure.message);
            if json {
                println!("{}", flint::job::error_json(&failure.message));
            }
            failure.code
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    let json = args.job.json;
    finish(json, run_job_here(args))
}

fn run_job_here(args: RunArgs) -> Result<String, Failure> {
    let conf = parse_conf(&args.job.conf, true)?;
    // --executors and --cores are at least 1 (`count`): a job that no executor could
    // run would wait for its timeout.
    let task_cpus = SchedulerConfig::read(&conf).map_or(1, |c| c.task_cpus);
    if task_cpus > args.cores {
        return Err(format!(
            "each task needs task.cpus={task_cpus} cores, but each executor has --cores {}",
            args.cores
        )
        .into());
    }
    let program = std::env::current_exe()
        .map_err(|e| format!("cannot find the flint executable to start executors: {e}"))?;
    let cluster = local_cluster(program, args.cores, &conf);
    run_and_report(
        &conf,
        args.executors,
        args.cores,
        &args.job,
        Box::new(cluster),
    )
}

fn driver(args: DriverArgs) -> ExitCode {
    let json = args.job.json;
    finish(json, run_driver_here(args))
}

fn run_driver_here(args: DriverArgs) -> Result<String, Failure> {
    let conf = parse_conf(&args.job.conf, true)?;
    run_and_report(
        &conf,
        args.executors,
        0,
        &args.job,
        Box::new(StandaloneExecutors),
    )
}

fn run_and_report(
    conf: &Conf,
    executors: usize,
    cores: u32,
    job: &JobArgs,
    cluster: Box<dyn ClusterManager>,
) -> Result<String, Failure> {
    let stages = match job.job {
        JobKind::Tasks => None,
        JobKind::Wordcount | JobKind::Shuffle => {
            let stages = stages_spec(executors, cores, job);
            // Before anything starts: a job of minutes would otherwise fail at its end,
            // or after every attempt of its map tasks.
            stages.check_files()?;
            Some(stages)
        }
    };
    let spec = JobSpec {
        executors,
        cores,
        tasks: job.tasks,
        task: job.task.clone(),
        startup_timeout: Duration::from_secs(job.startup_timeout),
        job_timeout: Duration::from_secs(job.job_timeout),
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    let terminated = Arc::new(AtomicBool::new(false));
    {
        // SIGINT (Ctrl-C) and SIGTERM (kill, timeout, a service manager) stop the driver
        // and its executors in order; a second one ends the process at once, with the
        // shell's code for the signal. SIGHUP is left alone, so that nohup still keeps a
        // job running past a logout.
        use signal_hook::consts::{SIGINT, SIGTERM};
        for (signal, code) in [(SIGINT, 130), (SIGTERM, 143)] {
            let _ =
                signal_hook::flag::register_conditional_shutdown(signal, code, interrupted.clone());
            let _ = signal_hook::flag::register(signal, interrupted.clone());
        }
        let _ = signal_hook::flag::register(SIGTERM, terminated.clone());
    }
    let terminal = std::io::stderr().is_terminal();
    let bar = (job.job == JobKind::Tasks && !job.json && terminal).then(|| {
        let bar = indicatif::ProgressBar::new(u64::from(job.tasks));
        bar.set_style(bar_style());
        bar
    });
    // Where no bar is drawn (a log file, CI), a line at INFO every few seconds instead.
    let mut lines = (!terminal)
        .then(|| progress::ProgressLines::new(std::time::Instant::now(), progress::LINE_INTERVAL));
    let mut on_progress = |done: usize, total: usize| {
        if let Some(bar) = &bar {
            bar.set_position(done as u64);
        }
        if let Some(line) = lines
            .as_mut()
            .and_then(|lines| lines.on_progress(std::time::Instant::now(), done, total))
        {
            tracing::info!(target: "flint::progress", "{line}");
        }
    };
    // Executors that register on their own need the address the driver got (with the
    // default rpc.port=0, the OS picks the port).
    let standalone = cores == 0;
    let mut on_listening = |address: std::net::SocketAddr| {
        if !standalone {
            return;
        }
        // Bound to every interface, it is reached at any of this host's addresses.
        let reach = if address.ip().is_unspecified() {
            format!("THIS_HOST:{}", address.port())
        } else {
            address.to_string()
        };
        logging::say(
            "flint",
            tracing::Level::INFO,
            &format!(
                "waiting for {executors} executor(s) to register with the driver at \
                 {address} (flint executor --driver {reach})"
            ),
        );
    };
    let mut kept_ui = None;
    let conf = &if job.ui {
        let mut conf = conf.clone();
        conf.set("ui.enabled", "true");
        conf
    } else {
        conf.clone()
    };
    let hooks = JobHooks {
        listening: Some(&mut on_listening),
        progress: Some(&mut on_progress),
        interrupted: Some(&interrupted),
        keep_ui: job.ui.then_some(&mut kept_ui),
    };
    let result = match &stages {
        None => run_job(conf, &spec, cluster, hooks).map(|report| {
            if job.json {
                report.to_json()
            } else {
                report.to_text()
            }
        }),
        Some(stages) => {
            let quiet = job.json;
            let mut on_stage = |line: &str| {
                if !quiet {
                    logging::say("flint", tracing::Level::INFO, line);
                }
            };
            run_stages(conf, stages, cluster, hooks, &mut on_stage).map(|report| {
                if job.json {
                    report.to_json()
                } else {
                    report.to_text()
                }
            })
        }
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    if let (Some(server), Ok(report)) = (&kept_ui, &result) {
        // The report first, then the page until Ctrl-C.
        println!("{report}");
        eprintln!(
            "flint: the status page stays up at http://{}/ until Ctrl-C",
            server.address()
        );
        while !interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        return Ok(String::new());
    }
    match result {
        Ok(report) => Ok(report),
        Err(JobError::Interrupted) => Err(Failure {
            message: "interrupted; the driver and its executors were stopped".to_owned(),
            // 128 + the signal's number, as a shell reports a job a signal ended.
            code: if terminated.load(std::sync::atomic::Ordering::Relaxed) {
                ExitCode::from(143)
            } else {
                ExitCode::from(130)
            },
        }),
        // The job never started: the driver could not.
        Err(JobError::Driver(flint::scheduler::DriverError::Rpc(
            e @ flint::rpc::RpcError::Listen { .. },
        ))) => Err(e.into()),
        Err(e) => Err(format!("the job failed: {e}").into()),
    }
}

/// The bar of a job of tasks on a terminal: the rate rounded to what a person reads,
/// and the time left.
fn bar_style() -> indicatif::ProgressStyle {
    indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} tasks ({rate} tasks/s, ETA {eta})",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .with_key(
        "rate",
        |state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write| {
            let _ = out.write_str(&progress::rate_text(state.per_sec()));
        },
    )
}

/// The job of stages `--job` names, with its sizes; map tasks and reduce partitions not
/// given are left to the executors that register.
fn stages_spec(executors: usize, cores: u32, job: &JobArgs) -> StagesSpec {
    let workload = match job.job {
        JobKind::Wordcount => Workload::WordCount {
            source: match &job.input {
                // Executors read it from their own working directory otherwise.
                Some(path) => {
                    WordSource::File(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()))
                }
                None => WordSource::Generated {
                    words: job.words,
                    vocabulary: job.vocabulary,
                    seed: 7,
                },
            },
            output: job.output.clone(),
        },
        JobKind::Shuffle | JobKind::Tasks => Workload::Shuffle {
            records: job.records,
            record_size: job.record_size,
        },
    };
    StagesSpec {
        executors,
        cores,
        maps: job.maps,
        reduces: job.reduces,
        workload,
        startup_timeout: Duration::from_secs(job.startup_timeout),
        job_timeout: Duration::from_secs(job.job_timeout),
    }
}

/// The integer types of counts on the command line, with their largest value.
trait CountType: TryFrom<u64> + Clone + Send + Sync + 'static {
    const MAX: u64;
}

impl CountType for u32 {
    const MAX: u64 = u32::MAX as u64;
}

impl CountType for u64 {
    const MAX: u64 = u64::MAX;
}

impl CountType for usize {
    const MAX: u64 = usize::MAX as u64;
}

/// A value parser of a count of at least `min` whose refusal says what is wrong in the
/// user's terms: clap's own ranges read "-5 is not in 1..=4294967295", and a negative
/// number given to an unsigned type is "invalid digit found in string".
fn count<T: CountType>(min: u64) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync {
    move |text: &str| {
        let text = text.trim();
        let digits = text.strip_prefix('-').unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("not a whole number; give {min} or more"));
        }
        if text.starts_with('-') && digits.bytes().any(|b| b != b'0') {
            return Err(format!("a negative count; give {min} or more"));
        }
        let value: u64 = digits
            .parse()
            .map_err(|_| format!("too large: at most {}", T::MAX))?;
        if value < min {
            return Err(if value == 0 {
                format!("zero; give {min} or more")
            } else {
                format!("below {min}; give {min} or more")
            });
        }
        if value > T::MAX {
            return Err(format!("too large: at most {}", T::MAX));
        }
        T::try_from(value).map_err(|_| format!("too large: at most {}", T::MAX))
    }
}

fn bench(args: BenchArgs) -> ExitCode {
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => {
            return fail(format!(
                "cannot find the flint executable to start executors: {e}"
            ))
        }
    };
    // Checked as a whole first, before minutes of measuring.
    let checked = match parse_conf(&args.conf, true) {
        Ok(conf) => conf,
        Err(e) => return fail(e),
    };
    if let Ok(SchedulerConfig {
        task_cpus: cpus @ 2..,
        ..
    }) = SchedulerConfig::read(&checked)
    {
        return fail(format!(
            "flint bench runs executors of 1 core, which cannot take tasks of task.cpus={cpus}"
        ));
    }
    let mut conf = Vec::new();
    for pair in &args.conf {
        match Conf::parse_pair(pair) {
            Ok(pair) if pair.0 == "rpc.port" => {
                return fail(
                    "flint bench starts several RPC environments in this process, which bind \
                     ports of their own: rpc.port cannot be set",
                )
            }
            Ok(pair) => conf.push(pair),
            Err(e) => return fail(e),
        }
    }
    let options = BenchOptions {
        program,
        samples: args.samples,
        tasks: args.tasks,
        executors: args.executors,
        prefetch: args.prefetch,
        conf,
        busy_load_percent: args.busy,
    };
    match run_bench(&options) {
        Ok(report) if args.json => {
            println!("{}", report.to_json());
            ExitCode::SUCCESS
        }
        Ok(report) => {
            print!("{}", report.to_table());
            ExitCode::SUCCESS
        }
        Err(e) => fail(format!("the bench failed: {e}")),
    }
}

/// The driver's address. A name with several addresses (`localhost` is often ::1 and
/// 127.0.0.1, and a driver binds 127.0.0.1 unless told otherwise) gets the first, IPv4
/// ones first, that takes a connection; the first of them if none does.
fn resolve(address: &str) -> Result<SocketAddr, String> {
    let mut addresses: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| format!("bad driver address {address}: {e}"))?
        .collect();
    addresses.sort_by_key(|a| a.is_ipv6());
    let first = *addresses
        .first()
        .ok_or_else(|| format!("the driver address {address} resolves to nothing"))?;
    if addresses.len() == 1 {
        return Ok(first);
    }
    Ok(addresses
        .into_iter()
        .find(|a| std::net::TcpStream::connect_timeout(a, Duration::from_secs(2)).is_ok())
        .unwrap_or(first))
}

fn executor(args: ExecutorArgs) -> ExitCode {
    let conf = match parse_conf(&args.conf, !args.started_by_driver) {
        Ok(conf) => conf,
        Err(e) => return fail(e),
    };
    let driver = match resolve(&args.driver) {
        Ok(driver) => driver,
        Err(e) => return fail(e),
    };
    // The same default as the log label's (main).
    let executor_id = args
        .executor_id
        .unwrap_or_else(|| std::process::id().to_string());
    let mut config = match ExecutorConfig::from_conf(&conf, executor_id, args.hostname, args.cores)
    {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    // The driver that started this executor listens already: one that takes no
    // connection is gone, and the executor ends at once rather than outlive it.
    if args.started_by_driver {
        config.connect_timeout = Duration::ZERO;
    }
    // The driver's limit, as its cluster manager passes it on; an executor that was not
    // told keeps every result and leaves the refusal to the driver.
    if conf.get("driver.maxResultSize").is_some() {
        match SchedulerConfig::read(&conf) {
            Ok(driver) => config.max_result_size = driver.max_result_size,
            Err(e) => return fail(e),
        }
    }
    let exit = run_executor(&conf, driver, config, TaskRegistry::with_builtins());
    let code = exit.code();
    // The executor logged why it exits (the seeds' "Executor self-exiting due to : ..."),
    // unless that log is filtered out: only then is the reason printed here.
    if code != 0 && !tracing::enabled!(target: "flint_executor::backend", tracing::Level::ERROR) {
        logging::say("flint executor", tracing::Level::ERROR, &exit.to_string());
    }
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
