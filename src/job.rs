//! The main job: a driver in this process, executors from a cluster manager, one task set
//! of a built-in task function, and a report of how fast it went.
//!
//! `flint run` and `flint driver` are thin wrappers around [`run_job`]; the end-to-end
//! tests and the task-launch benches use it too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flint_rpc::timer::deadline_after;
use flint_rpc::Conf;
use flint_scheduler::{
    ClusterManager, Driver, DriverError, LatencySummary, LocalClusterManager, TaskSet, TaskSetError,
};
use flint_wire::{TaskPayload, WireError};

/// A task as the command line names it: `noop`, `sleep:MS`, `echo:TEXT`,
/// `fail-n-attempts:N`, `large-result:SIZE`, `spin:MS`, `exit-process:CODE`, or any
/// registered function `NAME[:INPUT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSpec {
    /// The registered task function.
    pub function: String,
    /// Its input.
    pub input: String,
}

impl std::str::FromStr for TaskSpec {
    type Err = WireError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (function, input) = text.split_once(':').unwrap_or((text, ""));
        // Checks the name as the serialized form will.
        TaskPayload::encode(function, input.as_bytes())?;
        Ok(TaskSpec {
            function: function.to_owned(),
            input: input.to_owned(),
        })
    }
}

impl std::fmt::Display for TaskSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.input.is_empty() {
            f.write_str(&self.function)
        } else {
            write!(f, "{}:{}", self.function, self.input)
        }
    }
}

/// The built-in task functions `flint run --task` and `flint driver --task` take (every
/// `flint executor` has them), each with the form of its input. The functions of jobs of
/// stages are left out: they run only inside a job of stages (`--job`).
pub const TASK_FUNCTIONS: [(&str, &str); 7] = [
    ("noop", ""),
    ("sleep", "MS"),
    ("echo", "TEXT"),
    ("fail-n-attempts", "N"),
    ("large-result", "SIZE"),
    ("spin", "MS"),
    ("exit-process", "CODE"),
];

/// The built-in functions as the command line writes them: `noop, sleep:MS, ...`.
fn task_functions_text() -> String {
    TASK_FUNCTIONS
        .iter()
        .map(|(name, input)| {
            if input.is_empty() {
                (*name).to_owned()
            } else {
                format!("{name}:{input}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl TaskSpec {
    /// A task of one of the built-in functions ([`TASK_FUNCTIONS`]) with an input it
    /// takes, or why not: checked on the command line, before anything starts, where a
    /// misspelt function would otherwise fail every attempt of every task on the
    /// executors.
    ///
    /// ```
    /// use flint::job::TaskSpec;
    ///
    /// assert_eq!(TaskSpec::builtin("sleep:50").unwrap().to_string(), "sleep:50");
    /// let err = TaskSpec::builtin("slep:50").unwrap_err();
    /// assert!(err.starts_with("no built-in task function \"slep\" (did you mean sleep?)"));
    /// assert!(TaskSpec::builtin("exit-process:0").is_err());
    /// ```
    pub fn builtin(text: &str) -> Result<TaskSpec, String> {
        let spec: TaskSpec = text.parse().map_err(|e: WireError| e.to_string())?;
        let input = spec.input.trim();
        let number = || input.parse::<u64>().ok();
        let expected = match spec.function.as_str() {
            "noop" | "echo" => None,
            "sleep" | "spin" => number()
                .is_none()
                .then_some("a number of milliseconds, e.g. sleep:500"),
            "fail-n-attempts" => number()
                .is_none()
                .then_some("the number of attempts that fail, e.g. fail-n-attempts:2"),
            "exit-process" => (!matches!(number(), Some(1..=255)))
                .then_some("an exit code from 1 to 255, e.g. exit-process:3"),
            "large-result" => flint_executor::large_result_size(input.as_bytes())
                .is_none()
                .then_some(
                    "a size in bytes, optionally with a k, m or g suffix, of at most 2g, e.g. \
                 large-result:10m",
                ),
            other => {
                let hint = TASK_FUNCTIONS
                    .iter()
                    .map(|(name, _)| (strsim::levenshtein(other, name), *name))
                    .filter(|&(distance, _)| distance <= 2)
                    .min()
                    .map(|(_, name)| format!(" (did you mean {name}?)"))
                    .unwrap_or_default();
                return Err(format!(
                    "no built-in task function {other:?}{hint}; they are: {}",
                    task_functions_text()
                ));
            }
        };
        match expected {
            Some(expected) => Err(format!(
                "{} takes {expected}; got {:?}",
                spec.function, spec.input
            )),
            None => Ok(spec),
        }
    }

    /// The serialized task every task of the job shares.
    pub fn payload(&self) -> bytes::Bytes {
        TaskPayload::encode(&self.function, self.input.as_bytes())
            .expect("checked when the spec was parsed")
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Executors to ask for (with a local cluster manager, to start) and, as
    /// `scheduler.minRegisteredResourcesRatio` says, to wait for.
    pub executors: usize,
    /// Cores of each executor the local cluster manager starts.
    pub cores: u32,
    /// Tasks in the job.
    pub tasks: u32,
    /// What each task runs.
    pub task: TaskSpec,
    /// How long the driver may take to be ready (see [`run_job`]).
    pub startup_timeout: Duration,
    /// How long the job may take once they did.
    pub job_timeout: Duration,
}

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatencyUs {
    /// Tasks measured.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl From<LatencySummary> for LatencyUs {
    fn from(l: LatencySummary) -> Self {
        LatencyUs {
            count: l.count,
            p50: l.p50_us,
            p90: l.p90_us,
            p99: l.p99_us,
            max: l.max_us,
            mean: l.mean_us,
        }
    }
}

/// How the job went; its JSON form (`flint run --json`) has these fields by these names.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JobReport {
    /// Tasks run.
    pub tasks: u32,
    /// Executors registered when the job started.
    pub executors: usize,
    /// Cores of each executor the local cluster manager started (`--cores`); 0 when
    /// executors registered on their own.
    pub cores_per_executor: u32,
    /// Cores of the registered executors, in all.
    pub total_cores: u32,
    /// The task.
    pub task: String,
    /// `executor.taskPrefetch` the job ran with.
    pub prefetch: usize,
    /// From the driver's start to every executor registered.
    pub startup_seconds: f64,
    /// From submitting the task set to its last result.
    pub seconds: f64,
    /// Tasks per second over `seconds`.
    pub tasks_per_sec: f64,
    /// Task latency, from launch at the driver to result at the driver.
    pub latency_us: LatencyUs,
    /// Attempts that failed on the way (retried).
    pub failed_attempts: u64,
    /// Successes reported for a task whose result was already recorded (0: every
    /// result is recorded exactly once).
    pub duplicate_results: u64,
}

impl JobReport {
    /// One JSON object of every field.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    /// A few lines for a person.
    pub fn to_text(&self) -> String {
        let l = &self.latency_us;
        format!(
            "{} tasks ({}) on {} executors ({} cores) in {:.3} s: {:.0} tasks/s\n\
             task latency (launch to result at the driver): p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, max {:.1} us\n\
             executor start-up: {:.3} s; failed attempts retried: {}",
            self.tasks,
            self.task,
            self.executors,
            self.total_cores,
            self.seconds,
            self.tasks_per_sec,
            l.p50,
            l.p90,
            l.p99,
            l.max,
            self.startup_seconds,
            self.failed_attempts
        )
    }
}

/// A failed job as one JSON object (`flint run --json`): `{"error": "..."}`.
pub fn error_json(error: &dyn std::fmt::Display) -> String {
    serde_json::json!({ "error": error.to_string() }).to_string()
}

/// Why a job did not complete.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The driver failed (start-up, executors not registering, ...).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The job's task set failed or timed out.
    #[error(transparent)]
    TaskSet(#[from] TaskSetError),
    /// The configuration is invalid.
    #[error(transparent)]
    Conf(#[from] flint_rpc::conf::ConfError),
    /// A job of stages failed or timed out.
    #[error(transparent)]
    Job(#[from] flint_scheduler::JobError),
    /// A stage's function name or input cannot be serialized.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A job of stages failed: why, with its stages numbered as the user sees them.
    #[error("{0}")]
    Stages(String),
    /// A job of stages did not end within its job timeout.
    #[error("the {job} job did not finish within its job timeout of {timeout:?} (--job-timeout)")]
    JobTimeout {
        /// `wordcount` or `shuffle`.
        job: &'static str,
        /// The timeout.
        timeout: Duration,
    },
    /// A word count's input cannot be read.
    #[error("cannot read the input {}: {source}", path.display())]
    Input {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A word count's output cannot be written.
    #[error("cannot write the output {}: {source}", path.display())]
    Output {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A job's results are not what its tasks must have produced.
    #[error("the job's results do not add up: {0}")]
    Check(String),
    /// Interrupted (SIGINT, Ctrl-C, or SIGTERM).
    #[error("interrupted")]
    Interrupted,
}

/// Hooks a caller can give [`run_job`]: where the driver listens, progress, and a flag
/// that interrupts it.
#[derive(Default)]
pub struct JobHooks<'a> {
    /// Called once the driver listens, with its address (the one executors register at).
    pub listening: Option<&'a mut dyn FnMut(std::net::SocketAddr)>,
    /// Called about ten times a second with (tasks done, tasks in all); for a job of
    /// stages ([`crate::stages::run_stages`]), of the stage attempts running.
    pub progress: Option<&'a mut dyn FnMut(usize, usize)>,
    /// When it becomes true the job stops (its executors with it) and
    /// [`JobError::Interrupted`] is returned.
    pub interrupted: Option<&'a AtomicBool>,
    /// Where to keep the driver's status page once the job ended (`flint run --ui`):
    /// given, the page is moved here, showing the job as it ended, rather than stopped
    /// with the driver.
    pub keep_ui: Option<&'a mut Option<flint_ui::StatusServer>>,
}

/// The configuration pairs to hand to the executors a local cluster manager starts: all
/// of `conf` but the driver's own port.
pub fn executor_conf(conf: &Conf) -> Vec<(String, String)> {
    conf.iter()
        .filter(|(key, _)| key.strip_prefix("spark.").unwrap_or(key) != "rpc.port")
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// The (hidden) option of `flint executor` that [`local_cluster`] passes: the executor
/// was started by a driver, whose command already warned about the configuration it
/// hands on, so the executor does not warn again.
pub const STARTED_BY_DRIVER: &str = "started-by-driver";

/// A local cluster manager starting `program executor --started-by-driver ...` (see
/// [`STARTED_BY_DRIVER`]) with `cores` cores each and the executors' share of `conf`.
pub fn local_cluster(
    program: impl Into<std::path::PathBuf>,
    cores: u32,
    conf: &Conf,
) -> LocalClusterManager {
    let pairs = executor_conf(conf);
    LocalClusterManager::new(program, cores)
        .with_args(["executor".to_owned(), format!("--{STARTED_BY_DRIVER}")])
        .with_conf(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// Runs the job: starts a driver with `cluster_manager`, asks it for the executors,
/// waits until the driver is ready, runs the task set, stops everything, and reports.
///
/// Ready is Spark's `waitBackendReady`: `scheduler.minRegisteredResourcesRatio` of the
/// executors have registered, or `scheduler.maxRegisteredResourcesWaitingTime` (30 s by
/// default) has passed since the driver started, and at least one executor has
/// registered. Unless the configuration sets the ratio, the job waits for all its
/// executors (a ratio of 1, the way Spark's YARN and Kubernetes backends default it to
/// 0.8 rather than standalone's 0): its clock starts once they have registered, and
/// their start-up is reported apart. Not ready within `startup_timeout`, or executors
/// failing `executor.maxNumFailures` times, fails the job.
pub fn run_job(
    conf: &Conf,
    spec: &JobSpec,
    cluster_manager: Box<dyn ClusterManager>,
    mut hooks: JobHooks<'_>,
) -> Result<JobReport, JobError> {
    with_ready_driver(
        conf,
        cluster_manager,
        &mut hooks,
        spec.executors,
        spec.startup_timeout,
        |driver, startup, hooks| {
            let executors = driver.num_executors();
            let cores = driver.total_cores();
            let handle = driver.submit(TaskSet::new(0, 0, spec.tasks, spec.task.payload()))?;
            let deadline = deadline_after(Instant::now(), spec.job_timeout);
            let outcome = loop {
                if is_interrupted(hooks) {
                    return Err(JobError::Interrupted);
                }
                if let Some(progress) = hooks.progress.as_mut() {
                    let (done, total) = handle.progress();
                    progress(done, total);
                }
                let remaining = deadline.saturating_duration_since(Instant::now());
                match handle.wait(remaining.min(Duration::from_millis(100))) {
                    Ok(outcome) => break outcome,
                    Err(TaskSetError::Timeout { .. }) if !remaining.is_zero() => continue,
                    Err(TaskSetError::Timeout {
                        finished, total, ..
                    }) => {
                        return Err(JobError::TaskSet(TaskSetError::Timeout {
                            task_set: handle.id(),
                            timeout: spec.job_timeout,
                            finished,
                            total,
                        }))
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            if let Some(progress) = hooks.progress.as_mut() {
                let (done, total) = handle.progress();
                progress(done, total);
            }
            let seconds = outcome.elapsed.as_secs_f64();
            Ok(JobReport {
                tasks: spec.tasks,
                executors,
                cores_per_executor: spec.cores,
                total_cores: cores,
                task: spec.task.to_string(),
                startup_seconds: startup.as_secs_f64(),
                seconds,
                tasks_per_sec: if seconds > 0.0 {
                    f64::from(spec.tasks) / seconds
                } else {
                    0.0
                },
                latency_us: outcome.latency.into(),
                failed_attempts: outcome.failed_attempts,
                duplicate_results: outcome.duplicate_results,
                prefetch: driver.config().prefetch as usize,
            })
        },
    )
}

/// Starts a driver with `cluster_manager`, waits until it is ready for `executors`
/// (see [`run_job`]), runs `run` with it and the start-up time, and stops it: a
/// failure to stop after `run` succeeded is logged, the run's result standing.
pub(crate) fn with_ready_driver<R>(
    conf: &Conf,
    cluster_manager: Box<dyn ClusterManager>,
    hooks: &mut JobHooks<'_>,
    executors: usize,
    startup_timeout: Duration,
    run: impl FnOnce(&Driver, Duration, &mut JobHooks<'_>) -> Result<R, JobError>,
) -> Result<R, JobError> {
    let started = Instant::now();
    let driver = start_driver(conf, cluster_manager, hooks)?;
    let ui = crate::ui::serve(conf, &driver, "flint")?;
    if let (Some(ui), Some(_)) = (&ui, &hooks.keep_ui) {
        eprintln!("flint: status page at http://{}/", ui.address());
    }
    let result = wait_until_ready(&driver, executors, started, startup_timeout, hooks)
        .and_then(|()| run(&driver, started.elapsed(), hooks));
    if let (Some(ui), Some(keep)) = (ui, hooks.keep_ui.as_mut()) {
        // Two publishing intervals: the page shows the job's end, not 100 ms before it.
        std::thread::sleep(flint_ui::PUBLISH_INTERVAL * 2);
        **keep = Some(ui);
    }
    let stopped = driver.stop();
    if let Some(Some(ui)) = hooks.keep_ui.as_deref() {
        ui.driver_stopped();
    }
    let ran = result?;
    if let Err(e) = stopped {
        // The job ran to its end: its report stands.
        tracing::warn!("the job ended, but stopping the driver did not: {e}");
    }
    Ok(ran)
}

/// Starts a driver with `cluster_manager` (see [`run_job`] for the readiness it waits
/// for) and tells the hooks where it listens.
pub(crate) fn start_driver(
    conf: &Conf,
    cluster_manager: Box<dyn ClusterManager>,
    hooks: &mut JobHooks<'_>,
) -> Result<Driver, JobError> {
    let mut conf = conf.clone();
    if conf.get(MIN_REGISTERED_RATIO).is_none() {
        conf.set(MIN_REGISTERED_RATIO, "1.0");
    }
    let driver = Driver::start(&conf, cluster_manager)?;
    if let Some(listening) = hooks.listening.as_mut() {
        listening(driver.address());
    }
    Ok(driver)
}

/// Asks for `executors` and waits until the driver is ready with at least one
/// registered, at most until `startup_timeout` after `started`.
pub(crate) fn wait_until_ready(
    driver: &Driver,
    executors: usize,
    started: Instant,
    startup_timeout: Duration,
    hooks: &JobHooks<'_>,
) -> Result<(), JobError> {
    driver.request_total_executors(executors as i64)?;
    let deadline = deadline_after(started, startup_timeout);
    loop {
        if is_interrupted(hooks) {
            return Err(JobError::Interrupted);
        }
        if let Some(failure) = driver.executor_failure() {
            return Err(DriverError::ExecutorsFailed(failure).into());
        }
        let registered = driver.num_executors();
        if (registered > 0 || executors == 0) && driver.is_ready() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DriverError::ExecutorsTimeout {
                registered,
                wanted: executors,
                timeout: startup_timeout,
            }
            .into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The key [`run_job`] sets to 1 unless the configuration sets it.
const MIN_REGISTERED_RATIO: &str = "scheduler.minRegisteredResourcesRatio";

pub(crate) fn is_interrupted(hooks: &JobHooks<'_>) -> bool {
    hooks
        .interrupted
        .is_some_and(|flag| flag.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_specs_parse_name_and_input() {
        let spec: TaskSpec = "sleep:50".parse().unwrap();
        assert_eq!(
            (spec.function.as_str(), spec.input.as_str()),
            ("sleep", "50")
        );
        assert_eq!(spec.to_string(), "sleep:50");
        let spec: TaskSpec = "echo:a:b".parse().unwrap();
        assert_eq!(spec.input, "a:b");
        let noop: TaskSpec = "noop".parse().unwrap();
        assert_eq!(&noop.payload()[..], b"\x04noop");
        assert!("".parse::<TaskSpec>().is_err());
        assert!(":x".parse::<TaskSpec>().is_err());
    }

    #[test]
    fn only_built_in_functions_with_inputs_they_take_are_tasks_of_the_command_line() {
        // Every function offered is one a `flint executor` has.
        let registry = flint_executor::TaskRegistry::with_builtins();
        for (name, _) in TASK_FUNCTIONS {
            assert!(registry.get(name).is_some(), "{name}");
        }
        for good in [
            "noop",
            "echo:a:b",
            "sleep:5",
            "spin:0",
            "fail-n-attempts:2",
            "exit-process:255",
            "large-result:10m",
            "large-result:2g",
            "large-result:512",
        ] {
            assert!(TaskSpec::builtin(good).is_ok(), "{good}");
        }
        let err = TaskSpec::builtin("bogus").unwrap_err();
        assert_eq!(
            err,
            "no built-in task function \"bogus\"; they are: noop, sleep:MS, echo:TEXT, \
             fail-n-attempts:N, large-result:SIZE, spin:MS, exit-process:CODE"
        );
        assert!(TaskSpec::builtin("nop")
            .unwrap_err()
            .contains("(did you mean noop?)"));
        // Functions of jobs of stages need their job's shuffle.
        assert!(TaskSpec::builtin("wordcount-map").is_err());
        for (bad, says) in [
            ("sleep", "sleep takes a number of milliseconds"),
            ("sleep:1s", "sleep takes a number of milliseconds"),
            ("spin:-1", "spin takes a number of milliseconds"),
            ("fail-n-attempts:x", "fail-n-attempts takes the number"),
            (
                "exit-process:0",
                "exit-process takes an exit code from 1 to 255",
            ),
            ("exit-process:256", "exit-process takes an exit code"),
            ("large-result:3g", "large-result takes a size"),
            ("large-result:10t", "large-result takes a size"),
        ] {
            let err = TaskSpec::builtin(bad).unwrap_err();
            assert!(err.starts_with(says), "{bad}: {err}");
        }
    }

    #[test]
    fn reports_print_as_json() {
        let report = JobReport {
            tasks: 10,
            executors: 2,
            cores_per_executor: 1,
            total_cores: 2,
            task: "echo:\"hi\"".into(),
            startup_seconds: 0.5,
            seconds: 0.25,
            tasks_per_sec: 40.0,
            latency_us: LatencyUs {
                count: 10,
                p50: 12.5,
                p90: 20.0,
                p99: 30.0,
                max: 31.0,
                mean: 14.0,
            },
            failed_attempts: 0,
            duplicate_results: 0,
            prefetch: 0,
        };
        assert_eq!(
            report.to_json(),
            "{\"tasks\":10,\"executors\":2,\"cores_per_executor\":1,\"total_cores\":2,\"task\":\"echo:\\\"hi\\\"\",\"prefetch\":0,\"startup_seconds\":0.5,\"seconds\":0.25,\"tasks_per_sec\":40.0,\"latency_us\":{\"count\":10,\"p50\":12.5,\"p90\":20.0,\"p99\":30.0,\"max\":31.0,\"mean\":14.0},\"failed_attempts\":0,\"duplicate_results\":0}"
        );
        assert!(report
            .to_text()
            .contains("10 tasks (echo:\"hi\") on 2 executors (2 cores)"));
        assert_eq!(
            error_json(&"the job failed: \"x\"\n"),
            "{\"error\":\"the job failed: \\\"x\\\"\\n\"}"
        );
    }

    #[test]
    fn executors_get_the_conf_but_the_driver_port() {
        let conf = Conf::from_pairs([
            "rpc.port=7077",
            "spark.task.cpus=1",
            "rpc.message.maxSize=1",
        ])
        .unwrap();
        let pairs = executor_conf(&conf);
        assert!(
            pairs.iter().all(|(k, _)| !k.ends_with("rpc.port")),
            "{pairs:?}"
        );
        assert_eq!(pairs.len(), 2);
    }
}
