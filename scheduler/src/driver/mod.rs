//! The driver: an RPC environment with the driver's endpoints, the task scheduler, and
//! the executors the cluster manager provides (the seeds' `CoarseGrainedSchedulerBackend`
//! and what a driver program calls on it).
//!
//! The glue half of the crate, which runs the pure state machines of `core` on flint-rpc:
//!
//! - this module: [`Driver`], the API a driver program calls;
//! - [`endpoints`]: the driver's RPC endpoints, which turn messages into the core's
//!   events;
//! - [`carry_out`]: the core behind the driver's lock, and how what it decides is
//!   carried out (messages encoded into connections, events to listeners and handles,
//!   requests to the supply thread);
//! - [`cluster_manager`]: where executors come from;
//! - [`supply`]: the thread the cluster manager runs on;
//! - [`job`]: [`TaskSetHandle`], to await a task set's results;
//! - [`broadcast`]: [`Driver::broadcast`] and the broadcast manager's endpoint.

pub mod broadcast;
mod carry_out;
pub mod cluster_manager;
mod endpoints;
mod from_conf;
pub mod job;
pub(crate) mod job_builder;
mod launch_batch;
pub mod status;
mod supply;

use flint_rpc::timer::deadline_after;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use flint_rpc::conf::ConfError;
use flint_rpc::{Conf, EndpointRef, RpcEnv, RpcError};
use flint_wire::{
    ExecutorLossReason, Message, SharedStr, DRIVER_ENDPOINT, HEARTBEAT_ENDPOINT,
    MAP_OUTPUT_TRACKER_ENDPOINT,
};
use tracing::info;

use crate::core::config::SchedulerConfig;
use crate::core::dag::{DagError, JobSpec};
use crate::core::driver_core::{DriverCore, NegativeRequest, TransportLimits, DRIVER_STOPPED};
use crate::core::events::SchedulerListener;
use crate::core::task_scheduler::TaskScheduler;
use crate::core::task_set::{TaskSet, TaskSetId};
use crate::driver::carry_out::{lock, DriverState};
use crate::driver::cluster_manager::{ClusterManager, ClusterManagerError, StandaloneExecutors};
use crate::driver::endpoints::{DriverEndpoint, HeartbeatReceiver, MapOutputTrackerEndpoint};
use crate::driver::job::{JobHandle, JobShared, TaskSetHandle, TaskSetShared};
use crate::driver::supply::{Answer, SupplyThread};
use crate::SchedulerError;

/// How long [`Driver::stop`] gives executors to exit on their own once asked to.
const EXECUTOR_STOP_GRACE: Duration = Duration::from_secs(10);
/// How often [`Driver::wait_backend_ready`] looks again.
const READY_POLL: Duration = Duration::from_millis(10);

/// Polls of the cluster manager for exits that the reason of a lost executor is waited
/// for (see [`ClusterManager::reports_exits`]).
const LOSS_REASON_POLLS: u32 = 3;

/// What the driver could not do.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The transport failed (binding, an ask, ...).
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The scheduler refused (a second active task set for a stage, a bad pools file...).
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// A configuration value is invalid.
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// The cluster manager failed.
    #[error(transparent)]
    ClusterManager(#[from] ClusterManagerError),
    /// A negative number of executors was requested (the seeds' texts).
    #[error("{0}")]
    NegativeExecutors(String),
    /// The pools file of `scheduler.allocation.file` cannot be read.
    #[error("cannot read the pools file {path} (scheduler.allocation.file): {source}")]
    PoolsFile {
        /// Its path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not enough executors registered in time.
    #[error("{registered} of {wanted} executors registered within {timeout:?}")]
    ExecutorsTimeout {
        /// Executors registered by then.
        registered: usize,
        /// Executors waited for.
        wanted: usize,
        /// How long was waited.
        timeout: Duration,
    },
    /// Stopping failed (the seeds' text).
    #[error("Error stopping standalone scheduler's driver endpoint: {0}")]
    Stop(String),
    /// Executors kept failing: `executor.maxNumFailures` was reached ("Max number of
    /// executor failures (N) reached (...)"). The driver runs nothing more.
    #[error("{0}")]
    ExecutorsFailed(String),
    /// The driver was stopped while a submission waited for it to be ready.
    #[error("the driver was stopped while waiting for executors to register")]
    Stopped,
    /// A task set was submitted to a driver that is stopping or stopped: nothing would
    /// run it.
    #[error("the driver is stopping: task set {0} is not taken")]
    Stopping(TaskSetId),
    /// A job was submitted to a driver that is stopping or stopped.
    #[error("the driver is stopping: job {0:?} is not taken")]
    StoppingJob(String),
    /// The job's stages do not make a job (a shuffle read but not defined, a stage
    /// that runs no task...).
    #[error(transparent)]
    Job(#[from] DagError),
}

impl From<NegativeRequest> for DriverError {
    fn from(refused: NegativeRequest) -> Self {
        DriverError::NegativeExecutors(refused.0)
    }
}

/// A running driver.
///
/// The first [`Driver::submit`] waits until the driver is ready (the seeds' `isReady`:
/// `scheduler.minRegisteredResourcesRatio` of the executors asked for registered, or
/// `scheduler.maxRegisteredResourcesWaitingTime` passed).
///
/// Lost executors are replaced: the driver asks the cluster manager for the total it
/// was last asked for whenever an executor is removed or the cluster manager reports an
/// executor process that exited. Executor failures (abnormal exits the driver did not
/// ask for, executors that could not be started) are counted; at
/// `executor.maxNumFailures` (by default twice the executors asked for, at least 3, over
/// the driver's life, as Spark on YARN counts them without a validity interval) the
/// driver gives up: its task sets are aborted with "Max number of executor failures (N)
/// reached (...)" and later submissions fail with [`DriverError::ExecutorsFailed`].
///
/// ```no_run
/// use std::time::Duration;
/// use flint_rpc::Conf;
/// use flint_scheduler::{Driver, LocalClusterManager, TaskSet};
/// use flint_wire::TaskPayload;
///
/// let conf = Conf::new();
/// let executors = LocalClusterManager::new("target/release/flint", 2);
/// let driver = Driver::start(&conf, Box::new(executors))?;
/// driver.request_total_executors(2)?;
/// driver.wait_for_executors(2, Duration::from_secs(30))?;
///
/// let task_set = TaskSet::new(0, 0, 100, TaskPayload::encode("echo", b"hi")?);
/// let outcome = driver.submit(task_set)?.wait(Duration::from_secs(60))?;
/// assert!(outcome.results.iter().all(|r| &r[..] == b"hi"));
/// driver.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Driver {
    env: RpcEnv,
    state: Arc<Mutex<DriverState>>,
    endpoint: EndpointRef,
    supply: SupplyThread,
    stopped: AtomicBool,
    /// The next shuffle id [`Driver::new_shuffle_id`] gives.
    next_shuffle_id: AtomicU32,
    /// When it started, and its status board once [`Driver::publish_status`] was called.
    started: Instant,
    status: std::sync::OnceLock<status::StatusBoard>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("address", &self.address())
            .finish()
    }
}

impl Driver {
    /// Starts the driver's RPC environment (on `rpc.bindAddress`:`rpc.port`) with its
    /// endpoints, configured from `conf`. Executors come from `cluster_manager` once
    /// asked for ([`Driver::request_total_executors`]), or register on their own.
    pub fn start(
        conf: &Conf,
        mut cluster_manager: Box<dyn ClusterManager>,
    ) -> Result<Driver, DriverError> {
        let started = Instant::now();
        let config = SchedulerConfig::from_conf(conf)?;
        let mut scheduler = TaskScheduler::new(config.clone());
        if let Some(path) = &config.allocation_file {
            let text = std::fs::read_to_string(path).map_err(|source| DriverError::PoolsFile {
                path: path.clone(),
                source,
            })?;
            scheduler.add_pools_file(&text)?;
        }
        let env = RpcEnv::new(conf)?;
        cluster_manager.start(env.address());
        let settings = env.handle().settings().clone();
        let limits = TransportLimits {
            max_message_size: settings.max_payload,
            network_timeout: settings.stalled_frame_timeout,
            outbox_limit: settings.outbox_limit,
        };
        let revive_interval = config.revive_interval;
        let mut core = DriverCore::new(config, limits, scheduler, Instant::now());
        let poll_every = core.heartbeats().check_interval();
        if cluster_manager.reports_exits() {
            // The exit is reaped at the supply thread's next poll; a few polls, and at
            // least a second, leave room for a poll that waits behind a slow request.
            core.wait_for_loss_reasons(
                (poll_every * LOSS_REASON_POLLS).max(Duration::from_secs(1)),
            );
        }
        let (queue, inbox) = supply::channel();
        let state = DriverState::new(core, queue.clone(), settings.ask_timeout);
        // A piece and its reply's envelope fit one message.
        let block_size = crate::core::config::broadcast_block_size(conf)?
            .min((settings.max_payload as u64).saturating_sub(broadcast::PIECE_OVERHEAD))
            .max(1);
        lock(&state).broadcast_piece_size = u32::try_from(block_size).unwrap_or(u32::MAX);
        let supply = supply::spawn(
            &queue,
            inbox,
            cluster_manager,
            Arc::downgrade(&state),
            poll_every,
        )
        .map_err(RpcError::Io)?;
        let handle = env.handle();
        let endpoint = handle.register(
            DRIVER_ENDPOINT,
            DriverEndpoint::new(state.clone(), revive_interval, settings.max_payload),
        )?;
        handle.register(
            HEARTBEAT_ENDPOINT,
            HeartbeatReceiver::new(state.clone(), settings.max_payload),
        )?;
        handle.register(
            MAP_OUTPUT_TRACKER_ENDPOINT,
            MapOutputTrackerEndpoint::new(state.clone()),
        )?;
        handle.register(
            flint_wire::BROADCAST_ENDPOINT,
            broadcast::BroadcastEndpoint::new(state.clone()),
        )?;
        info!("Driver listening on {}", env.address());
        Ok(Driver {
            env,
            state,
            endpoint,
            supply,
            stopped: AtomicBool::new(false),
            next_shuffle_id: AtomicU32::new(0),
            started,
            status: std::sync::OnceLock::new(),
        })
    }

    /// A driver whose executors register on their own ([`StandaloneExecutors`]).
    pub fn standalone(conf: &Conf) -> Result<Driver, DriverError> {
        Driver::start(conf, Box::new(StandaloneExecutors))
    }

    fn state(&self) -> MutexGuard<'_, DriverState> {
        lock(&self.state)
    }

    /// The driver core, to look at: what changes it goes through [`Driver::with_core`]
    /// or [`Driver::state`], and carries out what it decided.
    fn core(&self) -> CoreRef<'_> {
        CoreRef(self.state())
    }

    /// Calls `f` on the core, then carries out what it decided.
    fn with_core<R>(&self, f: impl FnOnce(&mut DriverCore, Instant) -> R) -> R {
        let mut state = self.state();
        let now = Instant::now();
        let result = f(&mut state.core, now);
        state.carry_out(now);
        result
    }

    /// Waits, with the driver's lock let go, for what the supply thread was asked.
    fn await_supply(answer: Option<Answer>) -> Result<bool, ClusterManagerError> {
        answer.map_or(Ok(false), Answer::wait)
    }

    /// The scheduler's configuration, as the driver read it at start.
    pub fn config(&self) -> SchedulerConfig {
        self.core().config.clone()
    }

    /// Where executors register: the driver's RPC address.
    pub fn address(&self) -> SocketAddr {
        self.env.address()
    }

    /// Adds a listener for the scheduler's events. Listeners run in turns of the driver's
    /// event loop (on its thread, or a thread lent to it), on the thread that called the
    /// driver, or on the executor supply thread (for exits the cluster manager reports),
    /// with the driver locked: they must return quickly and must not call the driver.
    pub fn add_listener(&self, listener: impl SchedulerListener + Send + 'static) {
        self.state().add_listener(Box::new(listener));
    }

    /// Registers an accumulator before the jobs that add to it: its tasks add to the
    /// returned id through their `TaskContext` (flint-executor's `add_long`,
    /// `add_double`, `merge_bytes`; hand them the id in their input). Each partition's
    /// values are merged once, from its first successful attempt
    /// ([`crate::accumulators`]); read the result with [`Driver::accumulator_value`]
    /// after the job.
    pub fn register_accumulator(
        &self,
        name: &str,
        kind: crate::accumulators::AccumulatorKind,
    ) -> crate::accumulators::AccumulatorId {
        self.state()
            .core
            .scheduler
            .accumulators_mut()
            .register(name, kind)
    }

    /// The merged value of accumulator `id` (`None` if no accumulator has that id):
    /// final once the jobs that add to it have ended. Heartbeats' partial values are
    /// never in it (listeners see them in `ExecutorMetricsUpdate`).
    pub fn accumulator_value(&self, id: u64) -> Option<flint_wire::AccumulatorValue> {
        self.state()
            .core
            .scheduler
            .accumulators()
            .value(id)
            .cloned()
    }

    /// Submits a task set (the seeds' `submitTasks`): free cores are offered at once.
    ///
    /// The first submission waits until the driver is ready
    /// ([`Driver::wait_backend_ready`]). Once executors kept failing
    /// (`executor.maxNumFailures`), submissions fail with
    /// [`DriverError::ExecutorsFailed`].
    ///
    /// A task set's ids (job, stage and attempt) may be used again once the task set
    /// that had them ended, even while attempts of it killed at its end still finish:
    /// those stay the old task set's (their results, accumulator updates and result
    /// sizes are not the new one's). Ids of a task set still running are refused
    /// ("task set 0.0 was already submitted").
    pub fn submit(&self, task_set: TaskSet) -> Result<TaskSetHandle, DriverError> {
        let (id, job_id) = (task_set.id, task_set.job_id);
        self.admit(
            || DriverError::Stopping(id),
            |state, now| {
                let shared = TaskSetShared::new(task_set.tasks.len(), now);
                let first_task_id = state.core.scheduler.next_task_id();
                state.core.submit(now, task_set)?;
                state.track(id, first_task_id, shared.clone());
                Ok(TaskSetHandle { id, job_id, shared })
            },
        )
    }

    /// What [`Driver::submit`] and [`Driver::submit_job`] share: waits until the driver
    /// is ready, refuses once executors kept failing or the driver stops (`stopping`
    /// gives that error), and hands `submit` the state with everything decided before
    /// carried out (an end, for one, so that a new task set with the same id can take
    /// the old one's place), then carries out what it decided and revives offers, which
    /// also picks up the scheduler's new timers (starvation, speculation).
    fn admit<T>(
        &self,
        stopping: impl FnOnce() -> DriverError,
        submit: impl FnOnce(&mut DriverState, Instant) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        self.wait_backend_ready()?;
        let admitted = {
            let mut state = self.state();
            if let Some(failure) = state.core.failure() {
                return Err(DriverError::ExecutorsFailed(failure.to_owned()));
            }
            // Under the lock that stop takes to begin: a submission is either refused
            // here or ended by the stop.
            if state.core.is_stopping() {
                return Err(stopping());
            }
            let now = Instant::now();
            state.carry_out(now);
            let admitted = submit(&mut state, now)?;
            state.carry_out(now);
            admitted
        };
        self.revive_offers();
        Ok(admitted)
    }

    /// Publishes a [`crate::status::StatusSnapshot`] of the driver every `interval` (at least
    /// [`status::MIN_PUBLISH_INTERVAL`]), on a timer of its event loop, and returns where
    /// to read the last one: for a status page or metrics, off the launch path. Later
    /// calls return the same board.
    pub fn publish_status(&self, interval: Duration) -> Result<status::StatusBoard, DriverError> {
        if let Some(board) = self.status.get() {
            return Ok(board.clone());
        }
        let board = status::start(&self.state, self.env.handle(), self.started, interval)?;
        Ok(self.status.get_or_init(|| board).clone())
    }

    /// A shuffle id no other shuffle of this driver has: shuffle ids name shuffles for
    /// the application's life, so that a later job reading a shuffle reuses its map
    /// outputs.
    pub fn new_shuffle_id(&self) -> u32 {
        self.next_shuffle_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Submits a job of stages (the seeds' `runJob`): its map stages run first, each
    /// once every shuffle it reads is written, then its result stage; the handle gives
    /// the results in partition order. A stage's payload is a serialized task
    /// ([`flint_wire::TaskPayload::encode`]): the function to run and its input; its
    /// tasks learn their partition from their context, map tasks write their shuffle
    /// and reduce tasks read theirs through it (flint-executor's `TaskContext`). Job and
    /// stage ids of such jobs start at 2^30 ([`crate::FIRST_JOB_ID`]), apart from the ids
    /// of task sets submitted with [`Driver::submit`].
    ///
    /// The first submission waits until the driver is ready, as [`Driver::submit`]
    /// does.
    pub fn submit_job(&self, job: JobSpec) -> Result<JobHandle, DriverError> {
        let name = job.name.clone();
        self.admit(
            || DriverError::StoppingJob(name),
            |state, now| {
                let job_id = state.core.submit_job(now, job)?;
                let shared = JobShared::new(now);
                state.track_job(job_id, shared.clone());
                Ok(JobHandle { job_id, shared })
            },
        )
    }

    /// Cancels a job of stages: it fails with "Job N cancelled" (and `reason`), and its
    /// stages that no other job needs stop. False if it had ended.
    pub fn cancel_job(&self, job_id: u32, reason: Option<&str>) -> bool {
        let mut state = self.state();
        let now = Instant::now();
        let cancelled = state.core.cancel_job(now, job_id, reason);
        state.carry_out(now);
        cancelled
    }

    /// Forgets the map outputs of a shuffle no later job will read, and tells the
    /// executors to free them.
    pub fn remove_shuffle(&self, shuffle_id: u32) {
        let mut state = self.state();
        let now = Instant::now();
        if state.core.unregister_shuffle(shuffle_id) {
            state.remove_shuffle_everywhere(shuffle_id);
        }
        state.carry_out(now);
    }

    /// Sends ReviveOffers to the driver endpoint: free cores are offered.
    pub fn revive_offers(&self) {
        let _ = self.endpoint.send(&Message::ReviveOffers);
    }

    /// The seeds' `requestExecutors`: `additional` more executors. Negative counts are
    /// refused with the seeds' text. Returns the cluster manager's answer, which the
    /// executor supply thread gets while the driver goes on.
    pub fn request_executors(&self, additional: i64) -> Result<bool, DriverError> {
        let answer = {
            let mut state = self.state();
            state.core.request_executors(additional)?;
            state.carry_out(Instant::now());
            state.take_answer()
        };
        Ok(Self::await_supply(answer)?)
    }

    /// The seeds' `requestTotalExecutors`: `total` executors in all. Negative counts are
    /// refused with the seeds' text. Returns the cluster manager's answer, as
    /// [`Driver::request_executors`].
    pub fn request_total_executors(&self, total: i64) -> Result<bool, DriverError> {
        let answer = {
            let mut state = self.state();
            state.core.request_total_executors(total)?;
            state.carry_out(Instant::now());
            state.take_answer()
        };
        Ok(Self::await_supply(answer)?)
    }

    /// The seeds' `killExecutors`: kills these executors and asks for fewer in all;
    /// executors running tasks are kept unless `force`. Returns those asked to be killed,
    /// once the cluster manager did it.
    pub fn kill_executors(&self, executor_ids: &[String], force: bool) -> Vec<String> {
        let (killed, done) = {
            let mut state = self.state();
            let killed = state.core.kill_executors(executor_ids, false, force);
            state.carry_out(Instant::now());
            (killed, state.supply_barrier())
        };
        // Returns once the cluster manager did it.
        let _ = Self::await_supply(done);
        killed
    }

    /// Kills every executor on `host` and asks for replacements (a KillExecutorsOnHost
    /// message to the driver endpoint).
    pub fn kill_executors_on_host(&self, host: &str) {
        let _ = self.endpoint.send(&Message::KillExecutorsOnHost {
            host: host.to_owned(),
        });
    }

    /// The seeds' `killTask`: a KillTask message to the driver endpoint, which forwards
    /// it to the executor.
    pub fn kill_task(&self, task_id: u64, executor_id: &str, interrupt_thread: bool, reason: &str) {
        let _ = self.endpoint.send(&Message::KillTask {
            task_id,
            executor_id: SharedStr::from(executor_id),
            interrupt_thread,
            reason: reason.to_owned(),
        });
    }

    /// Kills a task attempt wherever it runs; false if no such attempt runs.
    pub fn kill_task_attempt(&self, task_id: u64, interrupt_thread: bool, reason: &str) -> bool {
        self.with_core(|core, _| {
            core.scheduler
                .kill_task_attempt(task_id, interrupt_thread, reason)
        })
    }

    /// Cancels every task set of a stage (the seeds' `cancelTasks`).
    pub fn cancel_stage(&self, stage_id: u32, interrupt_thread: bool) {
        self.with_core(|core, _| core.scheduler.cancel_tasks(stage_id, interrupt_thread));
    }

    /// The seeds' `removeExecutor`: a blocking RemoveExecutor to the driver endpoint.
    pub fn remove_executor(
        &self,
        executor_id: &str,
        reason: ExecutorLossReason,
    ) -> Result<(), DriverError> {
        self.endpoint.ask(&Message::RemoveExecutor {
            executor_id: SharedStr::from(executor_id),
            reason,
        })?;
        Ok(())
    }

    /// The seeds' `removeWorker`: a blocking RemoveWorker to the driver endpoint, for a
    /// cluster manager that lost a worker (the scheduler hears of it; its executors are
    /// removed as they disconnect).
    pub fn remove_worker(
        &self,
        worker_id: &str,
        host: &str,
        message: &str,
    ) -> Result<(), DriverError> {
        self.endpoint.ask(&Message::RemoveWorker {
            worker_id: worker_id.into(),
            host: host.into(),
            message: message.into(),
        })?;
        Ok(())
    }

    /// Excludes a host for the application: its offers are ignored and executors from
    /// it are refused ("Executor is blacklisted: ...").
    pub fn exclude_host(&self, host: &str) {
        self.state().core.scheduler.exclude_host(host);
    }

    /// Lifts [`Driver::exclude_host`]: the host's executors get offers again, from the
    /// next periodic revive (`scheduler.revive.interval`) on.
    pub fn include_host(&self, host: &str) {
        self.state().core.scheduler.include_host(host);
    }

    /// The seeds' `isReady`: `scheduler.minRegisteredResourcesRatio` of the executors
    /// asked for have registered, or `scheduler.maxRegisteredResourcesWaitingTime` has
    /// passed since the driver started. The seeds' INFO line is logged the first time.
    pub fn is_ready(&self) -> bool {
        self.state().core.is_ready(Instant::now())
    }

    /// Spark's `waitBackendReady`: waits until [`Driver::is_ready`] has held once, which
    /// is at most `scheduler.maxRegisteredResourcesWaitingTime` after the driver
    /// started. [`Driver::submit`] calls it; later calls return at once. Fails if the
    /// driver is stopped or gives up on executors meanwhile.
    pub fn wait_backend_ready(&self) -> Result<(), DriverError> {
        loop {
            {
                let mut state = self.state();
                if let Some(failure) = state.core.failure() {
                    return Err(DriverError::ExecutorsFailed(failure.to_owned()));
                }
                if state.core.backend_ready(Instant::now()) {
                    return Ok(());
                }
            }
            if self.stopped.load(Ordering::Acquire) {
                return Err(DriverError::Stopped);
            }
            std::thread::sleep(READY_POLL);
        }
    }

    /// Why the driver gave up on executors (`executor.maxNumFailures` reached), if it
    /// has.
    pub fn executor_failure(&self) -> Option<String> {
        self.core().failure().map(str::to_owned)
    }

    /// Executor failures counted so far: executor processes that exited abnormally
    /// without the driver asking, and executors that could not be started.
    pub fn executor_failures(&self) -> u32 {
        self.core().executor_failures()
    }

    /// The number of registered executors.
    pub fn num_executors(&self) -> usize {
        self.core().num_executors()
    }

    /// Waits at most `timeout` for `count` executors to be registered. Fails at once if
    /// executors kept failing ([`DriverError::ExecutorsFailed`]).
    pub fn wait_for_executors(&self, count: usize, timeout: Duration) -> Result<(), DriverError> {
        let deadline = deadline_after(Instant::now(), timeout);
        loop {
            let (registered, failure) = {
                let core = self.core();
                (core.num_executors(), core.failure().map(str::to_owned))
            };
            if registered >= count {
                return Ok(());
            }
            if let Some(failure) = failure {
                return Err(DriverError::ExecutorsFailed(failure));
            }
            if Instant::now() >= deadline {
                return Err(DriverError::ExecutorsTimeout {
                    registered,
                    wanted: count,
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Registered executors' ids.
    pub fn executor_ids(&self) -> Vec<String> {
        self.core().executor_ids()
    }

    /// Cores of the registered executors, in all.
    pub fn total_cores(&self) -> u32 {
        self.core().total_cores()
    }

    /// Free cores of an executor, plus its prefetch slots not taken
    /// (`executor.taskPrefetch`): what an offer on it can give now.
    pub fn free_slots(&self, executor_id: &str) -> Option<u32> {
        self.core().free_slots(executor_id)
    }

    /// Executors asked for and not registered yet.
    pub fn num_pending_executors(&self) -> u32 {
        self.core().num_pending_executors()
    }

    /// The seeds' `defaultParallelism`.
    pub fn default_parallelism(&self) -> usize {
        self.core().default_parallelism()
    }

    /// The number of task attempts launched and not yet ended.
    pub fn running_tasks(&self) -> usize {
        self.core().scheduler.running_tasks()
    }

    /// The seeds' `reset`: pending requests are forgotten and every executor is removed
    /// as stale.
    pub fn reset(&self) {
        self.with_core(|core, now| core.reset(now));
    }

    /// Stops the driver (the seeds' `stop`): StopExecutor to every executor, the driver
    /// endpoint stopped, the executors the cluster manager started given time to exit
    /// and then killed, the RPC environment stopped. Idempotent.
    pub fn stop(&self) -> Result<(), DriverError> {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        info!("Shutting down all executors");
        let told = {
            let mut state = self.state();
            let now = Instant::now();
            // What is already decided (an abort, say) ends its task sets as it would have.
            state.carry_out(now);
            state.core.begin_stopping();
            state.end_open_task_sets(now, DRIVER_STOPPED);
            state.carry_out(now);
            state.supply_barrier()
        };
        // The cluster manager has killed the executors that never registered.
        let _ = Self::await_supply(told);
        let stopping = self
            .endpoint
            .ask(&Message::StopExecutors)
            .and_then(|_| self.endpoint.ask(&Message::StopDriver));
        // Without the driver locked: executors disconnecting reach the endpoint meanwhile.
        self.supply.stop(EXECUTOR_STOP_GRACE);
        self.env.stop();
        stopping
            .map(drop)
            .map_err(|e| DriverError::Stop(e.to_string()))
    }
}

/// The driver core under the driver's lock.
struct CoreRef<'a>(MutexGuard<'a, DriverState>);

impl std::ops::Deref for CoreRef<'_> {
    type Target = DriverCore;

    fn deref(&self) -> &DriverCore {
        &self.0.core
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
