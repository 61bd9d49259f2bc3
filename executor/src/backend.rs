//! The executor backend: the executor's endpoint, its registration with the driver, its
//! heartbeats, and [`run_executor`], which runs an executor process until it ends.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use flint_rpc::log_budget::LogBudget;
use flint_rpc::{
    Conf, Endpoint, EndpointContext, EndpointRef, Incoming, Reply, RpcEnv, RpcError, TimerId,
};
use flint_wire::{
    ArchivedBlockId, ArchivedMessage, ArchivedTaskDescription, BlockId, BlockManagerId, Heartbeat,
    Message, RegisterExecutor, BLOCK_MANAGER_ENDPOINT, BROADCAST_ENDPOINT, DRIVER_ENDPOINT,
    DRIVER_STOPPING_REFUSAL, EXECUTOR_ENDPOINT, HEARTBEAT_ENDPOINT, MAP_OUTPUT_TRACKER_ENDPOINT,
};
use tracing::{debug, error, info, warn};

use crate::broadcast::{BroadcastCache, BroadcastFetcher, BroadcastService, FetchLimits};
use crate::config::ExecutorConfig;
use crate::executor::{Executor, Staged};
use crate::heartbeater::{random_initial_delay, HeartbeatAction, Heartbeater};
use crate::registration::{Answered, Disconnected, Registration};
use crate::registry::TaskRegistry;
use crate::reply_retry::{Answer, RetriedReplies};
use crate::shuffle::{BlockServer, ShuffleFetcher, ShuffleService, ShuffleStore};
use crate::status::RESULT_OVERHEAD;

/// Launches of one batch of the event loop the endpoint has room for before its staging
/// buffer grows.
const STAGED_CAPACITY: usize = 256;

/// The exit code of an executor whose connection to the driver failed authentication
/// ([`ExecutorExit::AuthenticationFailed`]).
pub const AUTHENTICATION_FAILED_CODE: i32 = 77;

/// Why an executor ended ([`run_executor`]'s result), with the process exit code that
/// goes with it ([`ExecutorExit::code`]). Its `Display` is a sentence for a person.
///
/// ```
/// use flint_executor::ExecutorExit;
///
/// assert_eq!(ExecutorExit::Stopped.code(), 0);
/// let exit = ExecutorExit::HeartbeatFailures(60);
/// assert_eq!(exit.code(), 56);
/// assert_eq!(exit.to_string(), "Exit as unable to send heartbeats to driver more than 60 times");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorExit {
    /// The driver sent StopExecutor, or refused the registration because it is stopping
    /// ([`DRIVER_STOPPING_REFUSAL`]) (exit code 0).
    Stopped,
    /// The driver refused the registration, with its reason, e.g. "Duplicate executor
    /// ID: 3" (exit code 1).
    RegistrationFailed(String),
    /// The connection to the driver closed; the text is the seeds' "Driver {address}
    /// disassociated! Shutting down." (exit code 1).
    DriverLost(String),
    /// This many heartbeats in a row (`executor.heartbeat.maxFailures`) failed (exit
    /// code 56).
    HeartbeatFailures(u32),
    /// The connection to the driver failed its authentication: no secret where the
    /// driver requires one, a secret where it requires none, or a different secret
    /// (`authenticate`, `authenticate.secret`). The text says which, as the driver or
    /// this side found it (exit code 77, sysexits' `EX_NOPERM`: starting again with the
    /// same configuration fails the same way).
    AuthenticationFailed(String),
    /// Anything else: a bad configuration, an RPC environment that cannot start, a
    /// driver that cannot be reached (exit code 1).
    Error(String),
}

impl ExecutorExit {
    /// The exit code of the executor process.
    pub fn code(&self) -> i32 {
        match self {
            ExecutorExit::Stopped => 0,
            ExecutorExit::HeartbeatFailures(_) => 56,
            ExecutorExit::AuthenticationFailed(_) => AUTHENTICATION_FAILED_CODE,
            ExecutorExit::RegistrationFailed(_)
            | ExecutorExit::DriverLost(_)
            | ExecutorExit::Error(_) => 1,
        }
    }
}

impl std::fmt::Display for ExecutorExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecutorExit::Stopped => f.write_str("Driver commanded a shutdown"),
            ExecutorExit::RegistrationFailed(reason) => {
                write!(f, "Slave registration failed: {reason}")
            }
            ExecutorExit::DriverLost(text)
            | ExecutorExit::AuthenticationFailed(text)
            | ExecutorExit::Error(text) => f.write_str(text),
            ExecutorExit::HeartbeatFailures(max) => write!(
                f,
                "Exit as unable to send heartbeats to driver more than {max} times"
            ),
        }
    }
}

/// The first reason to end, and the means to wait for it.
#[derive(Default)]
struct ExitSignal {
    exit: Mutex<Option<ExecutorExit>>,
    ended: Condvar,
}

impl ExitSignal {
    /// Records `exit` unless an exit was recorded already; returns whether it was.
    fn set(&self, exit: ExecutorExit) -> bool {
        let mut slot = self.exit.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return false;
        }
        *slot = Some(exit);
        self.ended.notify_all();
        true
    }

    fn wait(&self) -> ExecutorExit {
        let mut slot = self.exit.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(exit) = slot.as_ref() {
                return exit.clone();
            }
            slot = self.ended.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// What the executor's endpoint and the completions of its asks share.
struct Backend {
    executor: Executor,
    driver_address: SocketAddr,
    driver: EndpointRef,
    heartbeat_receiver: EndpointRef,
    registration: RegisterExecutor,
    block_manager_id: BlockManagerId,
    ask_timeout: Duration,
    heartbeat_interval: Duration,
    heartbeat_max_failures: u32,
    heartbeater: Mutex<Option<Heartbeater>>,
    /// The largest chunk of a block served in one reply.
    max_chunk: usize,
    stopping: AtomicBool,
    /// Where the registration stands: what a close of the driver's connection means.
    registration_state: Mutex<Registration>,
    exit: ExitSignal,
}

impl Backend {
    /// Ends the executor for this reason (the first reason wins).
    fn exit(&self, exit: ExecutorExit) {
        self.stopping.store(true, Ordering::Release);
        if self.exit.set(exit.clone()) {
            match exit {
                ExecutorExit::Stopped | ExecutorExit::HeartbeatFailures(_) => {}
                other => error!("Executor self-exiting due to : {other}"),
            }
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    fn with_heartbeater<T>(&self, f: impl FnOnce(&mut Heartbeater) -> T) -> Option<T> {
        let mut heartbeater = self.heartbeater.lock().unwrap_or_else(|e| e.into_inner());
        heartbeater.as_mut().map(f)
    }

    /// Asks the heartbeat receiver, from a turn of the loop; the outcome comes back to
    /// [`Backend::on_heartbeat_result`].
    fn send_heartbeat(self: &Arc<Self>) {
        let message = Message::Heartbeat(Heartbeat {
            executor_id: self.executor.shared_id().clone(),
            accum_updates: self.executor.heartbeat_updates(),
            block_manager_id: self.block_manager_id.clone(),
        });
        let backend = self.clone();
        let sent =
            self.heartbeat_receiver
                .ask_then(&message, self.heartbeat_interval, move |result| {
                    backend.on_heartbeat_result(result)
                });
        if let Err(e) = sent {
            self.on_heartbeat_result(Err(e));
        }
        // A runner's deferred status updates may hold the connection's flush: the
        // heartbeat must not wait for them.
        self.driver.flush();
    }

    fn on_heartbeat_result(self: &Arc<Self>, result: Result<Reply, RpcError>) {
        if self.is_stopping() {
            return;
        }
        let answer = match result {
            Ok(reply) => match reply.message() {
                ArchivedMessage::HeartbeatResponse {
                    reregister_block_manager,
                } => Ok(*reregister_block_manager),
                other => Err(format!(
                    "unexpected reply {} to a heartbeat",
                    other.kind().name()
                )),
            },
            Err(e) => Err(e.to_string()),
        };
        let action = match answer {
            Ok(reregister) => {
                let action = self.with_heartbeater(Heartbeater::on_success);
                if reregister {
                    info!("Told to re-register on heartbeat");
                    self.reregister();
                }
                action
            }
            Err(e) => {
                warn!(error = %e, "Issue communicating with driver in heartbeater");
                match self.with_heartbeater(Heartbeater::on_failure) {
                    Some(Err(exit)) => {
                        error!("{exit}");
                        self.exit(ExecutorExit::HeartbeatFailures(exit.max_failures));
                        return;
                    }
                    Some(Ok(action)) => Some(action),
                    None => None,
                }
            }
        };
        if action == Some(HeartbeatAction::Send) {
            self.send_heartbeat();
        }
    }

    /// Registers again, as the heartbeat receiver asked; a refusal ends the executor.
    ///
    /// The driver asks only an executor it has removed: it failed the tasks it had
    /// launched here and runs them elsewhere, and it counts every core here free once
    /// the executor is back. Those tasks are killed first, so that they neither hold the
    /// cores the driver will fill nor report results nobody waits for.
    fn reregister(self: &Arc<Self>) {
        let killed = self
            .executor
            .kill_all_tasks("the driver removed this executor; its tasks run elsewhere");
        if killed > 0 {
            info!(
                "Killed {killed} task(s) that the driver no longer counts on before re-registering"
            );
        }
        let backend = self.clone();
        let message = Message::RegisterExecutor(self.registration.clone());
        let asked = self
            .driver
            .ask_then(&message, self.ask_timeout, move |result| match result {
                Ok(reply) => match reply.message() {
                    ArchivedMessage::RegisteredExecutor => {
                        info!("Successfully registered with driver")
                    }
                    ArchivedMessage::RegisterExecutorFailed { message } => {
                        backend.exit(ExecutorExit::RegistrationFailed(message.to_string()))
                    }
                    other => warn!(
                        "Cannot register with driver: {}: unexpected reply {}",
                        backend.driver_address,
                        other.kind().name()
                    ),
                },
                Err(e) => warn!(
                    "Cannot register with driver: {}: {e}",
                    backend.driver_address
                ),
            });
        if let Err(e) = asked {
            warn!("Cannot register with driver: {}: {e}", self.driver_address);
        }
    }
}

/// The executor's endpoint (the seeds' `CoarseGrainedExecutorBackend`), registered as
/// [`EXECUTOR_ENDPOINT`].
///
/// Launches are read in place and staged as they arrive; they are handed to the runners
/// all at once, waking sleeping ones, at the end of the event loop's batch
/// ([`Endpoint::on_batch_end`]), or before any other message is handled (a kill must
/// find the launch that came before it).
struct ExecutorEndpoint {
    backend: Arc<Backend>,
    heartbeat_timer: Option<TimerId>,
    staged: Staged,
    /// Chunk fetches whose reply the connection's full outbox refused (a large direct
    /// result queued ahead of it), tried again until the asker's timeout.
    refused_chunks: RetriedReplies,
    /// Lines about peers other than the driver that connect and send commands.
    stranger_warnings: LogBudget,
}

impl ExecutorEndpoint {
    fn launch(&mut self, incoming: &Incoming<'_>, task: &ArchivedTaskDescription) {
        let task_id = task.task_id.to_native();
        debug!("Got assigned task {task_id}");
        let executor = &self.backend.executor;
        if task.executor_id.as_str() != executor.executor_id() {
            warn!(
                "task (TID {task_id}) was launched for executor {}, not this one ({}); \
                 running it here",
                task.executor_id,
                executor.executor_id()
            );
        }
        executor.stage_archived(&mut self.staged, incoming.frame(), task);
    }

    /// Hands the staged launches to the runners.
    fn commit(&mut self) {
        if !self.staged.is_empty() {
            // A stopped executor logs what it drops.
            let _ = self.backend.executor.commit(&mut self.staged);
        }
    }

    fn fetch_chunk(
        &mut self,
        ctx: &mut EndpointContext<'_>,
        incoming: &Incoming<'_>,
        block_id: BlockId,
        offset: u64,
        max_len: u32,
    ) {
        let Some(reply) = incoming.reply_handle() else {
            warn!("FetchBlockChunk of {block_id} was not an ask: there is nobody to answer");
            return;
        };
        let max_len = (max_len as usize).min(self.backend.max_chunk);
        let answer = match self
            .backend
            .executor
            .block_store()
            .chunk(block_id, offset, max_len)
        {
            Ok((data, total_size)) => Answer::Reply(Message::BlockChunk {
                block_id,
                offset,
                total_size,
                data,
            }),
            Err(e) => {
                debug!("cannot serve a chunk: {e}");
                Answer::Fail(e.to_string())
            }
        };
        self.refused_chunks.answer(ctx, reply, answer);
    }

    fn start_heartbeats(&mut self, ctx: &mut EndpointContext<'_>) {
        if self.heartbeat_timer.is_some() || self.backend.is_stopping() {
            return;
        }
        let interval = self.backend.heartbeat_interval;
        let delay = random_initial_delay(interval);
        let heartbeater = Heartbeater::new(
            interval,
            self.backend.heartbeat_max_failures,
            delay,
            Instant::now(),
        );
        *self
            .backend
            .heartbeater
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(heartbeater);
        self.heartbeat_timer = Some(ctx.schedule_once(delay));
    }
}

impl Endpoint for ExecutorEndpoint {
    fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        // Commands come from the driver, over the connection this executor opened to it,
        // or from this process. The executor does not listen, so no other peer can
        // reach it today; this check is the second line, should it ever open another
        // connection (anyone on it could otherwise launch or kill tasks, read or remove
        // results, or stop the executor).
        if let Some(sender) = message.sender() {
            if sender != self.backend.driver_address {
                let kind = message.message().kind().name();
                flint_rpc::peer_warn!(
                    self.stranger_warnings,
                    ctx.now(),
                    %sender,
                    "Ignored {kind} from a peer that is not the driver"
                );
                let _ = message.reply_error(format!(
                    "executor {} takes commands only from its driver",
                    self.backend.executor.executor_id()
                ));
                return;
            }
        }
        if let ArchivedMessage::LaunchTask(task) = message.message() {
            if self.backend.is_stopping() {
                // The driver told this executor to stop: what it launched after that
                // would start only to be killed without a word.
                warn!(
                    "Ignored LaunchTask of task (TID {}): the executor is stopping",
                    task.task_id.to_native()
                );
                return;
            }
            self.launch(&message, task);
            return;
        }
        if let ArchivedMessage::LaunchTasks { tasks } = message.message() {
            if self.backend.is_stopping() {
                warn!(
                    "Ignored LaunchTasks of {} task(s): the executor is stopping",
                    tasks.len()
                );
                return;
            }
            for task in tasks.iter() {
                self.launch(&message, task);
            }
            return;
        }
        // Launches staged before this message go first: a kill must find them.
        self.commit();
        let backend = &self.backend;
        match message.message() {
            ArchivedMessage::KillTask {
                task_id,
                interrupt_thread,
                reason,
                ..
            } => {
                let found = backend.executor.kill_task(
                    task_id.to_native(),
                    *interrupt_thread,
                    reason.as_str(),
                );
                // Normally one-way; an ask is answered with whether the task was here.
                let _ = message.reply(&Message::Ack { ok: found });
            }
            ArchivedMessage::FetchBlockChunk {
                block_id,
                offset,
                max_len,
            } => self.fetch_chunk(
                ctx,
                &message,
                block_id_of(block_id),
                offset.to_native(),
                max_len.to_native(),
            ),
            ArchivedMessage::RemoveBlock { block_id } => {
                let block_id = block_id_of(block_id);
                let removed = backend.executor.block_store().remove(block_id).is_some();
                debug!(removed, "RemoveBlock {block_id}");
                if let Err(e) = message.reply(&Message::Ack { ok: removed }) {
                    warn!("cannot answer RemoveBlock of {block_id}: {e}");
                }
            }
            ArchivedMessage::RemoveShuffle { shuffle_id } => {
                let shuffle_id = shuffle_id.to_native();
                debug!("RemoveShuffle {shuffle_id}");
                if let Some(service) = backend.executor.shuffle_service() {
                    service.store().remove_shuffle(shuffle_id);
                }
            }
            ArchivedMessage::UnpersistBroadcast {
                broadcast_id,
                generation,
            } => {
                let (broadcast_id, generation) = (broadcast_id.to_native(), generation.to_native());
                if let Some(service) = backend.executor.broadcast_service() {
                    let removed = service.cache().unpersist(broadcast_id, generation);
                    debug!(
                        removed,
                        "UnpersistBroadcast {broadcast_id} (generation {generation})"
                    );
                }
            }
            ArchivedMessage::StopExecutor => {
                info!("Driver commanded a shutdown");
                backend.stopping.store(true, Ordering::Release);
                let _ = message.reply(&Message::Ack { ok: true });
                let me = ctx.env().local_ref(EXECUTOR_ENDPOINT);
                if me.send(&Message::Shutdown).is_err() {
                    backend.exit(ExecutorExit::Stopped);
                }
            }
            // Sent by StopExecutor's handler above, from this process; the driver sends
            // StopExecutor.
            ArchivedMessage::Shutdown if message.sender().is_none() => {
                backend.exit(ExecutorExit::Stopped)
            }
            // Sent by run_executor once the driver accepted the registration.
            ArchivedMessage::RegisteredExecutor if message.sender().is_none() => {
                info!("Successfully registered with driver");
                self.start_heartbeats(ctx);
            }
            other => {
                warn!(
                    sender = ?message.sender(),
                    "Received unexpected message {}", other.kind().name()
                );
                let _ = message.reply_error(format!(
                    "executor {} does not handle {}",
                    backend.executor.executor_id(),
                    other.kind().name()
                ));
            }
        }
    }

    fn on_batch_end(&mut self, _ctx: &mut EndpointContext<'_>) {
        self.commit();
        // Replies sent from this batch share the connection with the runners' deferred
        // status updates: hand whatever they left queued to the loop now (updates a
        // runner still holds leave with its own flush, or the loop's for a busy runner).
        self.backend.driver.flush();
    }

    fn on_timer(&mut self, ctx: &mut EndpointContext<'_>, timer: TimerId) {
        if self.refused_chunks.on_timer(ctx, timer) {
            return;
        }
        if self.heartbeat_timer != Some(timer) {
            return;
        }
        self.heartbeat_timer = None;
        let backend = self.backend.clone();
        if backend.is_stopping() {
            return;
        }
        let now = Instant::now();
        let Some(action) = backend.with_heartbeater(|hb| hb.on_timeout(now)) else {
            return;
        };
        if action == HeartbeatAction::Send {
            backend.send_heartbeat();
        }
        let next = backend.with_heartbeater(|hb| (!hb.is_exhausted()).then(|| hb.poll_timeout()));
        if let Some(Some(next)) = next {
            let delay = next.saturating_duration_since(Instant::now());
            self.heartbeat_timer = Some(ctx.schedule_once(delay));
        }
    }

    fn on_disconnected(&mut self, ctx: &mut EndpointContext<'_>, remote: SocketAddr) {
        let backend = &self.backend;
        if remote != backend.driver_address {
            flint_rpc::peer_warn!(
                self.stranger_warnings,
                ctx.now(),
                "An unknown ({remote}) driver disconnected."
            );
        } else if backend.is_stopping() {
            info!("Driver from {remote} disconnected during shutdown");
        } else {
            let disconnected = backend
                .registration_state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .on_disconnected();
            match disconnected {
                // The registration's ask fails with the cause; its outcome ends the
                // executor (see Running::register).
                Disconnected::AwaitOutcome => {
                    debug!("Driver {remote} disconnected before it answered the registration")
                }
                Disconnected::AlreadyEnded => {}
                Disconnected::DriverLost => backend.exit(ExecutorExit::DriverLost(format!(
                    "Driver {remote} disassociated! Shutting down."
                ))),
            }
        }
    }
}

fn block_id_of(block_id: &ArchivedBlockId) -> BlockId {
    match block_id {
        ArchivedBlockId::TaskResult { task_id } => BlockId::TaskResult {
            task_id: task_id.to_native(),
        },
    }
}

/// The running executor's parts, until it ends.
struct Running {
    /// `executor.connectTimeout`: how long to wait for the driver to take a connection.
    connect_timeout: Duration,
    env: RpcEnv,
    /// The block server's environment, which also fetches other executors' blocks.
    blocks: RpcEnv,
    backend: Arc<Backend>,
}

fn start(
    conf: &Conf,
    driver_address: SocketAddr,
    mut config: ExecutorConfig,
    registry: TaskRegistry,
) -> Result<Running, ExecutorExit> {
    // No listener: the driver reaches the executor over the connection it opens, and
    // nobody else has any business with its commands.
    let env = RpcEnv::client(conf).map_err(|e| {
        ExecutorExit::Error(format!("Cannot start the executor's RPC environment: {e}"))
    })?;
    // Shuffle blocks go through an environment of their own, on blockManager.port: bulk
    // transfers never stand in the way of launches and status updates.
    let mut block_conf = conf.clone();
    block_conf.set("rpc.port", config.block_manager_port.to_string());
    let blocks = RpcEnv::new(&block_conf).map_err(|e| match e {
        // The port is blockManager.port's, set as rpc.port of this environment only.
        flint_rpc::RpcError::Listen {
            address,
            key: Some(flint_rpc::conf::PORT_KEY),
            source,
        } => ExecutorExit::Error(format!(
            "Cannot start the executor's block server: cannot listen on {address} \
             (blockManager.port): {source}"
        )),
        e => ExecutorExit::Error(format!("Cannot start the executor's block server: {e}")),
    })?;
    let handle = env.handle();
    let settings = handle.settings();
    let max_payload = settings.max_payload;
    let ask_timeout = settings.ask_timeout;
    config.max_message_size = max_payload;
    let heartbeat_interval = config.heartbeat_interval;
    let heartbeat_max_failures = config.heartbeat_max_failures;
    let connect_timeout = config.connect_timeout;
    let hostname = config.hostname.clone();
    let cores = config.cores;
    let driver = handle.endpoint_ref(driver_address, DRIVER_ENDPOINT);
    let (local_dir, shuffle_memory, max_in_flight, busy_poll) = (
        config.local_dir.clone(),
        config.shuffle_max_memory,
        config.max_size_in_flight,
        config.busy_poll,
    );
    let broadcast_max_size = config.broadcast_max_size;
    let executor = Executor::new(config, registry, driver.clone())
        .map_err(|e| ExecutorExit::Error(format!("Cannot start the executor: {e}")))?;
    let executor_id = executor.shared_id().clone();
    let max_chunk = max_payload
        .saturating_sub(RESULT_OVERHEAD)
        .max(max_payload / 2);
    // Where other executors reach the block server: its address, or this host's name
    // when it listens on every interface.
    let served = blocks.address();
    let block_manager_id = BlockManagerId {
        executor_id: executor_id.clone(),
        host: if served.ip().is_unspecified() {
            hostname.clone()
        } else {
            served.ip().to_string()
        },
        port: served.port(),
    };
    let store = Arc::new(ShuffleStore::new(&local_dir, &executor_id, shuffle_memory));
    let fetcher = ShuffleFetcher::new(
        blocks.handle(),
        store.clone(),
        executor_id.to_string(),
        max_in_flight,
        u32::try_from(max_chunk).unwrap_or(u32::MAX),
        ask_timeout,
        busy_poll,
    );
    executor.set_shuffle_service(Arc::new(ShuffleService::new(
        store.clone(),
        fetcher,
        // Asked from a running task: through the block server's environment, whose loop
        // thread no runner lends itself to, the reply is read at once.
        blocks
            .handle()
            .endpoint_ref(driver_address, MAP_OUTPUT_TRACKER_ENDPOINT),
        block_manager_id.clone(),
        ask_timeout,
        max_payload,
    )));
    // Broadcasts travel as shuffle blocks do: through the block server's environment,
    // from other executors' block servers and from the driver.
    let broadcasts = Arc::new(BroadcastCache::new());
    executor.set_broadcast_service(Arc::new(BroadcastService::new(
        broadcasts.clone(),
        BroadcastFetcher::new(
            blocks.handle(),
            blocks
                .handle()
                .endpoint_ref(driver_address, BROADCAST_ENDPOINT),
            // Reports of pieces held go on the connection the executor registers on:
            // the driver takes them from there only.
            handle.endpoint_ref(driver_address, BROADCAST_ENDPOINT),
            block_manager_id.clone(),
            FetchLimits {
                max_size: broadcast_max_size,
                max_in_flight,
                ask_timeout,
                max_attempts: FetchLimits::MAX_ATTEMPTS,
                retry_wait: FetchLimits::RETRY_WAIT,
            },
        ),
    )));
    blocks
        .handle()
        .register(
            BLOCK_MANAGER_ENDPOINT,
            BlockServer::new(
                store,
                max_chunk,
                ask_timeout,
                max_in_flight.max(max_chunk as u64),
            )
            .with_broadcasts(broadcasts),
        )
        .map_err(|e| {
            ExecutorExit::Error(format!("Cannot start the executor's block server: {e}"))
        })?;
    let backend = Arc::new(Backend {
        driver_address,
        heartbeat_receiver: handle.endpoint_ref(driver_address, HEARTBEAT_ENDPOINT),
        driver,
        registration: RegisterExecutor {
            executor_id: executor_id.clone(),
            executor_address: served.to_string(),
            endpoint_name: EXECUTOR_ENDPOINT.to_owned(),
            hostname: hostname.clone(),
            cores,
            log_urls: Vec::new(),
        },
        block_manager_id,
        ask_timeout,
        heartbeat_interval,
        heartbeat_max_failures,
        heartbeater: Mutex::new(None),
        max_chunk,
        stopping: AtomicBool::new(false),
        registration_state: Mutex::new(Registration::Pending),
        exit: ExitSignal::default(),
        executor,
    });
    handle
        .register(
            EXECUTOR_ENDPOINT,
            ExecutorEndpoint {
                backend: backend.clone(),
                heartbeat_timer: None,
                // Only the driver reaches this endpoint, over the connection it opened,
                // and it asks for the results it waits for: no bound of its own.
                refused_chunks: RetriedReplies::new("FetchBlockChunk", ask_timeout, u64::MAX),
                staged: Staged::with_capacity(STAGED_CAPACITY),
                stranger_warnings: LogBudget::default(),
            },
        )
        .map_err(|e| ExecutorExit::Error(format!("Cannot start the executor's endpoint: {e}")))?;
    Ok(Running {
        connect_timeout,
        env,
        blocks,
        backend,
    })
}

impl Running {
    /// Waits for the driver to take connections, registers with it, then waits for the
    /// executor to end and stops it.
    fn run(self) -> ExecutorExit {
        let backend = &self.backend;
        if let Err(exit) = wait_for_driver(backend.driver_address, self.connect_timeout) {
            backend.exit(exit);
        } else {
            self.register();
        }
        let exit = backend.exit.wait();
        backend.stopping.store(true, Ordering::Release);
        backend.executor.stop();
        self.blocks.stop();
        self.env.stop();
        exit
    }

    /// Registers with the driver; a failure ends the executor.
    fn register(&self) {
        let backend = &self.backend;
        let driver = backend.driver_address;
        info!("Connecting to driver: {driver}");
        let registration = Message::RegisterExecutor(backend.registration.clone());
        let result = backend
            .driver
            .ask_timeout(&registration, backend.ask_timeout);
        let accepted = matches!(&result, Ok(reply)
            if matches!(reply.message(), ArchivedMessage::RegisteredExecutor));
        let answered = backend
            .registration_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_outcome(accepted);
        match result {
            Ok(_) if answered == Answered::AcceptedThenLost => backend.exit(
                ExecutorExit::DriverLost(format!("Driver {driver} disassociated! Shutting down.")),
            ),
            Ok(reply) => match reply.message() {
                ArchivedMessage::RegisteredExecutor => {
                    let me = self.env.handle().local_ref(EXECUTOR_ENDPOINT);
                    if let Err(e) = me.send(&Message::RegisteredExecutor) {
                        backend.exit(ExecutorExit::Error(format!(
                            "Cannot start heartbeats after registering: {e}"
                        )));
                    }
                }
                ArchivedMessage::RegisterExecutorFailed { message } => {
                    let exit = refusal_exit(message.as_str());
                    if exit == ExecutorExit::Stopped {
                        info!("Driver commanded a shutdown: {message}");
                    }
                    backend.exit(exit)
                }
                other => backend.exit(ExecutorExit::Error(format!(
                    "Cannot register with driver: {driver}: unexpected reply {}",
                    other.kind().name()
                ))),
            },
            Err(e @ RpcError::AuthenticationFailed { .. }) => {
                backend.exit(ExecutorExit::AuthenticationFailed(format!(
                    "Cannot register with driver: {driver}: {e}"
                )))
            }
            Err(e) => backend.exit(ExecutorExit::Error(format!(
                "Cannot register with driver: {driver}: {e}"
            ))),
        }
    }
}

/// How an executor ends when the driver refuses its registration with `message`: as on
/// StopExecutor if the driver is stopping ([`DRIVER_STOPPING_REFUSAL`]), a registration
/// failed otherwise.
fn refusal_exit(message: &str) -> ExecutorExit {
    if message.starts_with(DRIVER_STOPPING_REFUSAL) {
        ExecutorExit::Stopped
    } else {
        ExecutorExit::RegistrationFailed(message.to_owned())
    }
}

/// When to try the driver's address again while it takes no connection, and when to
/// stop: attempts 100 ms apart at first, twice as far each time up to 2 s, the last one
/// at the deadline, `executor.connectTimeout` after the first.
#[derive(Debug)]
struct ConnectRetry {
    deadline: Instant,
    delay: Duration,
}

impl ConnectRetry {
    const FIRST_DELAY: Duration = Duration::from_millis(100);
    const MAX_DELAY: Duration = Duration::from_secs(2);

    /// Retries for `timeout` from `now`, the time of the first attempt.
    fn new(now: Instant, timeout: Duration) -> Self {
        ConnectRetry {
            deadline: now + timeout,
            delay: Self::FIRST_DELAY,
        }
    }

    /// An attempt failed at `now`: when to make the next one, or `None` when the time
    /// is up.
    fn on_failure(&mut self, now: Instant) -> Option<Instant> {
        if now >= self.deadline {
            return None;
        }
        let next = (now + self.delay).min(self.deadline);
        self.delay = (self.delay * 2).min(Self::MAX_DELAY);
        Some(next)
    }

    /// How long an attempt starting at `now` may wait for its connection: until the
    /// deadline, and at least a second (a connection already on its way is not cut).
    fn attempt_timeout(&self, now: Instant) -> Duration {
        self.deadline
            .saturating_duration_since(now)
            .max(Duration::from_secs(1))
    }
}

/// Waits until `driver` takes a TCP connection, for `timeout` at most (a driver on
/// another host may start after its executors), or ends the executor with one line
/// naming the address. A zero `timeout` leaves the one attempt to the registration.
///
/// The attempts are plain TCP connections, closed at once (the driver logs such a
/// close at DEBUG): through the RPC environment each failed attempt would log a
/// warning of its own.
fn wait_for_driver(driver: SocketAddr, timeout: Duration) -> Result<(), ExecutorExit> {
    if timeout.is_zero() {
        return Ok(());
    }
    let started = Instant::now();
    let mut retry = ConnectRetry::new(started, timeout);
    let mut failures = 0u32;
    loop {
        let now = Instant::now();
        let error = match std::net::TcpStream::connect_timeout(&driver, retry.attempt_timeout(now))
        {
            Ok(_) => {
                if failures > 0 {
                    info!(
                        "Reached the driver at {driver} after {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                }
                return Ok(());
            }
            Err(e) => e,
        };
        failures += 1;
        let now = Instant::now();
        let Some(next) = retry.on_failure(now) else {
            return Err(ExecutorExit::Error(format!(
                "Cannot register with driver: {driver}: nothing took a connection at {driver} \
                 within {} ({failures} attempt{}): {error}",
                timeout_text(timeout),
                if failures == 1 { "" } else { "s" }
            )));
        };
        if failures == 1 {
            info!(
                "Cannot reach the driver at {driver} yet ({error}); trying again for up to {}",
                timeout_text(timeout)
            );
        } else {
            debug!("Cannot reach the driver at {driver} yet: {error}");
        }
        std::thread::sleep(next.saturating_duration_since(now));
    }
}

/// `executor.connectTimeout=30s`, as a user would set it.
fn timeout_text(timeout: Duration) -> String {
    let key = crate::config::CONNECT_TIMEOUT_KEY;
    if timeout.subsec_millis() == 0 {
        format!("{key}={}s", timeout.as_secs())
    } else {
        format!("{key}={}ms", timeout.as_millis())
    }
}

/// Runs an executor until it ends, and returns why.
///
/// Starts an RPC environment from `conf` that does not listen ([`RpcEnv::client`]),
/// registers the executor's endpoint as [`EXECUTOR_ENDPOINT`], registers with the
/// driver's [`DRIVER_ENDPOINT`] at `driver`, and from then on runs the tasks the
/// driver launches with the functions of `registry`, sending a heartbeat to
/// [`HEARTBEAT_ENDPOINT`] every `executor.heartbeatInterval`. It ends when the driver
/// stops it, refuses it, goes away, or stops answering heartbeats
/// (`executor.heartbeat.maxFailures` in a row); then it stops the task runners (a
/// bounded wait) and the RPC environment. A process exits with [`ExecutorExit::code`].
///
/// A driver that takes no connection is tried again for `executor.connectTimeout`
/// ([`ExecutorConfig::connect_timeout`]) before the registration; then the executor
/// ends with [`ExecutorExit::Error`] naming its address. (The configuration is read
/// first: a bad value ends the executor at once.)
///
/// `config` is read from the same `conf` ([`ExecutorConfig::from_conf`]); the transport's
/// keys are read from `conf` here.
pub fn run_executor(
    conf: &Conf,
    driver: SocketAddr,
    config: ExecutorConfig,
    registry: TaskRegistry,
) -> ExecutorExit {
    match start(conf, driver, config, registry) {
        Ok(running) => running.run(),
        Err(exit) => {
            error!("Executor self-exiting due to : {exit}");
            exit
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver that is stopping sends an executor registering meanwhile away as it would
    /// have with StopExecutor: exit code 0, not a registration failed.
    #[test]
    fn a_refusal_because_the_driver_is_stopping_ends_the_executor_as_stopped() {
        let stopping = format!("{DRIVER_STOPPING_REFUSAL}: executor 3 is not needed");
        assert_eq!(refusal_exit(&stopping), ExecutorExit::Stopped);
        assert_eq!(refusal_exit(&stopping).code(), 0);
        let duplicate = refusal_exit("Duplicate executor ID: 3");
        assert_eq!(
            duplicate,
            ExecutorExit::RegistrationFailed("Duplicate executor ID: 3".into())
        );
        assert_eq!(duplicate.code(), 1);
    }

    #[test]
    fn a_driver_that_takes_no_connection_is_tried_again_until_the_timeout() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut retry = ConnectRetry::new(start, Duration::from_secs(5));
        assert_eq!(retry.attempt_timeout(start), Duration::from_secs(5));
        // Each delay twice the last, up to 2 s.
        let mut now = start;
        let mut delays = Vec::new();
        while let Some(next) = retry.on_failure(now) {
            delays.push(next.duration_since(now).as_millis());
            now = next;
        }
        assert_eq!(delays, [100, 200, 400, 800, 1600, 1900]);
        // The last attempt is at the deadline; none after it.
        assert_eq!(now, at(5_000));
        assert_eq!(retry.on_failure(at(6_000)), None);
        // An attempt near the deadline still gets a second to connect.
        assert_eq!(retry.attempt_timeout(at(4_900)), Duration::from_secs(1));
    }

    #[test]
    fn a_slow_attempt_does_not_earn_more_than_the_deadline() {
        let start = Instant::now();
        let mut retry = ConnectRetry::new(start, Duration::from_millis(250));
        // The first attempt took 200 ms to fail: the next is at the deadline.
        let next = retry
            .on_failure(start + Duration::from_millis(200))
            .unwrap();
        assert_eq!(next, start + Duration::from_millis(250));
        assert_eq!(retry.on_failure(next), None);
    }

    #[test]
    fn an_address_nobody_listens_on_ends_the_wait_naming_it_and_the_key() {
        // Port 1: nobody listens (a port freed by this test could be taken by another
        // test's listener meanwhile).
        let driver: SocketAddr = ([127, 0, 0, 1], 1).into();
        let started = Instant::now();
        let exit = wait_for_driver(driver, Duration::from_millis(300)).unwrap_err();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        let text = exit.to_string();
        assert!(
            text.starts_with(&format!(
                "Cannot register with driver: {driver}: nothing took a connection at {driver} \
                 within executor.connectTimeout=300ms ("
            )),
            "{text}"
        );
        assert_eq!(exit.code(), 1);
        // Zero: the registration's one attempt says why.
        assert!(wait_for_driver(driver, Duration::ZERO).is_ok());
        // A listener: at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let started = Instant::now();
        assert!(wait_for_driver(listener.local_addr().unwrap(), Duration::from_secs(30)).is_ok());
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
