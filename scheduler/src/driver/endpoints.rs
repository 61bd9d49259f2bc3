//! The driver's endpoints on its RPC environment: [`DriverEndpoint`] (the seeds'
//! `CoarseGrainedScheduler`) and [`HeartbeatReceiver`]. Both are thin: they read the
//! message in place, call the driver core, carry out what it decided
//! ([`DriverState::carry_out`]), reply, and keep their timers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::log_budget::LogBudget;
use flint_rpc::{Endpoint, EndpointContext, Incoming, TimerId};
use flint_wire::{
    check_decoded_size, cut_text, AccumulatorUpdate, AccumulatorValue, ArchivedAccumulatorUpdate,
    ArchivedAccumulatorValue, ArchivedMessage, ArchivedStatusUpdate, ArchivedTaskMetrics,
    ArchivedTaskOutcome, BlockId, DecodedSize, Frame, Message, SharedStr, TaskMetrics, TaskOutcome,
    TaskState, EXECUTOR_ENDPOINT, MAX_FAILURE_TEXT, MAX_TASK_ACCUMULATORS,
    MAX_TASK_ACCUMULATOR_BYTES,
};
use rkyv::rancor;
use tracing::{debug, warn};

use crate::core::driver_core::{DriverCore, Registration};
use crate::driver::carry_out::{lock, DriverState};

/// The driver's endpoint: registrations, status updates, offers, kills, removals and
/// stops (every handler of the seeds' `DriverEndpoint`).
pub(crate) struct DriverEndpoint {
    state: Arc<Mutex<DriverState>>,
    revive_interval: Duration,
    /// `rpc.message.maxSize`, which also bounds what a result's accumulators take
    /// decoded.
    max_decoded: usize,
    revive_timer: Option<TimerId>,
    /// The schedulers' next timeout (starvation, speculation, locality, stages to
    /// resubmit) and its timer.
    scheduler_timer: Option<(Instant, TimerId)>,
    /// Lines about messages peers should not have sent.
    peer_warnings: LogBudget,
}

impl DriverEndpoint {
    pub(crate) fn new(
        state: Arc<Mutex<DriverState>>,
        revive_interval: Duration,
        max_decoded: usize,
    ) -> Self {
        DriverEndpoint {
            state,
            revive_interval,
            max_decoded,
            revive_timer: None,
            scheduler_timer: None,
            peer_warnings: LogBudget::default(),
        }
    }

    /// Keeps one timer at the schedulers' next timeout.
    fn sync_timer(&mut self, ctx: &mut EndpointContext<'_>, state: &DriverState, now: Instant) {
        let wanted = state.core.poll_timeout();
        if self.scheduler_timer.map(|(at, _)| at) == wanted {
            return;
        }
        if let Some((_, timer)) = self.scheduler_timer.take() {
            ctx.cancel_timer(timer);
        }
        if let Some(at) = wanted {
            let timer = ctx.schedule_once(at.saturating_duration_since(now));
            self.scheduler_timer = Some((at, timer));
        }
    }

    /// One task's status update, alone in its frame or one of a
    /// [`Message::StatusUpdates`], from a sender that may speak for its executor.
    fn status_update(
        &mut self,
        core: &mut DriverCore,
        message: &Incoming<'_>,
        update: &ArchivedStatusUpdate,
        now: Instant,
    ) {
        let spare = &mut || core.scheduler.spare_accumulator_list();
        let mut ignored = 0;
        let (task_state, outcome) = match outcome_from_archived(
            message.frame(),
            &update.outcome,
            self.max_decoded,
            spare,
            &mut ignored,
        ) {
            Ok(outcome) => (TaskState::from(&update.state), outcome),
            Err(refused) => (TaskState::Failed, refused),
        };
        if ignored > 0 {
            let task_id = update.task_id.to_native();
            flint_rpc::peer_warn!(self.peer_warnings, now, "Ignored {ignored} accumulator update(s) of TID {task_id}: a task sends at most {MAX_TASK_ACCUMULATORS}, with at most {MAX_TASK_ACCUMULATOR_BYTES} bytes of bytes values");
        }
        let unfetched = core.status_update_from_checked_sender(
            now,
            update.executor_id.as_str(),
            update.task_id.to_native(),
            task_state,
            outcome,
        );
        if let (Some(block_id), Some(_)) = (unfetched, message.sender()) {
            let executor = message.sender_ref(EXECUTOR_ENDPOINT);
            let _ = executor.send(&Message::RemoveBlock { block_id });
        }
    }
}

impl Endpoint for DriverEndpoint {
    fn on_start(&mut self, ctx: &mut EndpointContext<'_>) {
        // Offers every scheduler.revive.interval, the first one at once.
        self.revive_timer = Some(ctx.schedule_every(Duration::ZERO, self.revive_interval));
    }

    fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let Some(sender) = message.sender() {
            if is_for_the_driver_process_only(message.message()) {
                let kind = message.message().kind();
                flint_rpc::peer_warn!(self.peer_warnings, ctx.now(), %sender, "the driver endpoint refused {kind} from a remote peer: only the driver's own process sends it");
                let _ = message.reply_error(format!(
                    "{kind} is taken only from the driver's own process"
                ));
                return;
            }
        }
        let now = ctx.now();
        let state = self.state.clone();
        let mut state = lock(&state);
        match message.message() {
            updates
            @ (ArchivedMessage::StatusUpdate(_) | ArchivedMessage::StatusUpdates { .. }) => {
                state.core.for_each_update_its_sender_may_send(
                    now,
                    message.sender(),
                    updates.status_updates(),
                    |update| update.executor_id.as_str(),
                    |update| (update.task_id.to_native(), TaskState::from(&update.state)),
                    |core, update| self.status_update(core, &message, update, now),
                );
            }
            ArchivedMessage::RegisterExecutor(registration) => {
                let executor_id = SharedStr::from(registration.executor_id.as_str());
                let endpoint = message.sender_ref(EXECUTOR_ENDPOINT);
                let registration = Registration {
                    executor_id: executor_id.clone(),
                    host: SharedStr::from(registration.hostname.as_str()),
                    cores: registration.cores.to_native(),
                    address: message.sender(),
                    endpoint: format!("{endpoint:?}"),
                };
                let reply = match state.core.register_executor(now, registration) {
                    Ok(peer) => {
                        state.connect(peer, endpoint);
                        Message::RegisteredExecutor
                    }
                    Err(reason) => Message::RegisterExecutorFailed { message: reason },
                };
                let registered = matches!(reply, Message::RegisteredExecutor);
                if let Err(e) = message.reply(&reply) {
                    flint_rpc::peer_warn!(
                        self.peer_warnings,
                        now,
                        "Cannot answer the registration of executor {executor_id}: {e}"
                    );
                }
                if registered {
                    state.core.offer_after_registration(now);
                }
            }
            ArchivedMessage::ReviveOffers => state.core.make_offers(now),
            ArchivedMessage::KillTask {
                task_id,
                executor_id,
                interrupt_thread,
                reason,
            } => state.core.kill_task(
                task_id.to_native(),
                executor_id.as_str(),
                *interrupt_thread,
                reason.to_string(),
            ),
            ArchivedMessage::KillExecutorsOnHost { host } => {
                state.core.kill_executors_on_host(host.as_str());
            }
            ArchivedMessage::RemoveExecutor {
                executor_id,
                reason,
            } => {
                let reason = rkyv::deserialize::<_, rancor::Error>(reason)
                    .unwrap_or(flint_wire::ExecutorLossReason::LossReasonPending);
                state
                    .core
                    .remove_executor(now, executor_id.as_str(), reason);
                state.carry_out(now);
                let _ = message.reply(&Message::Ack { ok: true });
            }
            ArchivedMessage::RemoveWorker {
                worker_id,
                host,
                message: why,
            } => {
                state
                    .core
                    .remove_worker(worker_id.as_str(), host.as_str(), why.as_str());
                let _ = message.reply(&Message::Ack { ok: true });
            }
            ArchivedMessage::StopExecutors => {
                state.core.stop_executors();
                state.carry_out(now);
                let _ = message.reply(&Message::Ack { ok: true });
            }
            ArchivedMessage::StopDriver => {
                // No batch end follows a stopped endpoint.
                state.carry_out(now);
                let _ = message.reply(&Message::Ack { ok: true });
                ctx.stop();
            }
            other => {
                flint_rpc::peer_warn!(self.peer_warnings, ctx.now(), sender = ?message.sender(), "the driver endpoint got an unexpected {}", other.kind());
                let _ = message
                    .reply_error(format!("{} is not a message for the driver", other.kind()));
            }
        }
        // The rest is carried out at the end of the batch, once for all its messages.
        self.sync_timer(ctx, &state, now);
    }

    fn on_batch_end(&mut self, ctx: &mut EndpointContext<'_>) {
        let now = ctx.now();
        let state = self.state.clone();
        let mut state = lock(&state);
        state.core.flush_offers(now);
        state.carry_out(now);
        self.sync_timer(ctx, &state, now);
    }

    fn on_timer(&mut self, ctx: &mut EndpointContext<'_>, timer: TimerId) {
        let now = ctx.now();
        let state = self.state.clone();
        let mut state = lock(&state);
        if Some(timer) == self.revive_timer {
            // A timer's turn has no batch end: what the launches asked for (a task set
            // aborted for a task over rpc.message.maxSize, its kills, its end) is carried
            // out here, not at some later message.
            state.core.make_offers(now);
        } else if self.scheduler_timer.map(|(_, t)| t) == Some(timer) {
            self.scheduler_timer = None;
            state.core.handle_timeout(now);
        }
        state.carry_out(now);
        self.sync_timer(ctx, &state, now);
    }

    fn on_disconnected(&mut self, ctx: &mut EndpointContext<'_>, remote: SocketAddr) {
        let now = ctx.now();
        let state = self.state.clone();
        let mut state = lock(&state);
        state.core.disconnected(now, remote);
        state.carry_out(now);
        self.sync_timer(ctx, &state, now);
    }

    fn on_stop(&mut self) {
        debug!("The driver endpoint stopped");
    }
}

/// Messages that only the driver's own process sends to its endpoint (its [`Driver`]
/// handle and cluster manager): from a remote peer they would let anyone stop the
/// driver or its executors, kill tasks, or remove executors.
///
/// [`Driver`]: crate::Driver
fn is_for_the_driver_process_only(message: &ArchivedMessage) -> bool {
    matches!(
        message,
        ArchivedMessage::ReviveOffers
            | ArchivedMessage::KillTask { .. }
            | ArchivedMessage::KillExecutorsOnHost { .. }
            | ArchivedMessage::RemoveExecutor { .. }
            | ArchivedMessage::RemoveWorker { .. }
            | ArchivedMessage::StopExecutors
            | ArchivedMessage::StopDriver
    )
}

/// The driver's heartbeat receiver: executors' heartbeats in (their tasks' metrics go to
/// the task scheduler), re-registration asked of unknown executors, and silent
/// executors expired after `network.timeout`.
pub(crate) struct HeartbeatReceiver {
    state: Arc<Mutex<DriverState>>,
    check_interval: Duration,
    /// `rpc.message.maxSize`, which also bounds what a heartbeat's task updates take
    /// decoded.
    max_decoded: usize,
    /// Lines about heartbeats that are ignored.
    peer_warnings: LogBudget,
}

impl HeartbeatReceiver {
    pub(crate) fn new(state: Arc<Mutex<DriverState>>, max_decoded: usize) -> Self {
        let check_interval = lock(&state).core.heartbeats().check_interval();
        HeartbeatReceiver {
            state,
            check_interval,
            max_decoded,
            peer_warnings: LogBudget::default(),
        }
    }
}

impl Endpoint for HeartbeatReceiver {
    fn on_start(&mut self, ctx: &mut EndpointContext<'_>) {
        ctx.schedule_every(self.check_interval, self.check_interval);
    }

    fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let ArchivedMessage::Heartbeat(heartbeat) = message.message() else {
            let kind = message.message().kind();
            let _ = message.reply_error(format!("{kind} is not a heartbeat"));
            return;
        };
        let executor_id = heartbeat.executor_id.as_str();
        let speaks_for = lock(&self.state)
            .core
            .sender_may_speak_for(message.sender(), executor_id);
        if let Err(why) = speaks_for {
            // Not a stranger to be told to register: the executor it names is
            // registered, on another connection.
            flint_rpc::peer_warn!(self.peer_warnings, ctx.now(), "Ignored heartbeat {why}");
            let _ = message.reply(&Message::HeartbeatResponse {
                reregister_block_manager: false,
            });
            return;
        }
        // Decoded outside the driver's lock, and only if that stays within
        // rpc.message.maxSize: decoded, short names and empty lists take several times
        // their frame.
        let size = heartbeat.accum_updates.decoded_size();
        let updates = match check_decoded_size("its task updates", size, self.max_decoded) {
            Ok(()) => {
                rkyv::deserialize::<_, rancor::Error>(&heartbeat.accum_updates).unwrap_or_default()
            }
            Err(refused) => {
                flint_rpc::peer_warn!(self.peer_warnings, ctx.now(), "Ignored the task updates in a heartbeat from executor {executor_id}: {refused}");
                Vec::new()
            }
        };
        let reregister = {
            let mut state = lock(&self.state);
            let now = Instant::now();
            let reregister = state.core.heartbeat(now, executor_id, updates);
            state.carry_out(now);
            reregister
        };
        let _ = message.reply(&Message::HeartbeatResponse {
            reregister_block_manager: reregister,
        });
    }

    fn on_timer(&mut self, _ctx: &mut EndpointContext<'_>, _timer: TimerId) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        state.core.expire_dead_executors(now);
        state.check_backlogs(now);
        state.core.drop_stale_result_tallies();
        state.carry_out(now);
    }
}

fn metrics_from_archived(metrics: &ArchivedTaskMetrics) -> TaskMetrics {
    TaskMetrics {
        deserialize_time_ns: metrics.deserialize_time_ns.to_native(),
        run_time_ns: metrics.run_time_ns.to_native(),
        cpu_time_ns: metrics.cpu_time_ns.to_native(),
        result_size: metrics.result_size.to_native(),
        input_bytes: metrics.input_bytes.to_native(),
        output_bytes: metrics.output_bytes.to_native(),
    }
}

/// A direct result shorter than this is copied out of its frame: the frame decoder's
/// largest read, above which a frame has an allocation of its own (the decoder moves
/// what follows it to a new buffer).
const VIEW_AT_LEAST: usize = 256 * 1024;

/// A direct result's value, kept until its job's handle is dropped. A view of the frame
/// keeps the frame's whole allocation alive, which the result's size, all that
/// `driver.maxResultSize` counts, does not show. A result stays a view only when its
/// frame has an allocation of its own (at most about twice the frame) and the result
/// is at least half of it: a few times the result's size at most. Others are copied.
fn result_value(frame: &Frame, value: &[u8]) -> Bytes {
    if value.is_empty() {
        // A noop's: nothing to copy or keep.
        Bytes::new()
    } else if value.len() >= VIEW_AT_LEAST && value.len() * 2 >= frame.payload().len() {
        frame.bytes_of(value)
    } else {
        Bytes::copy_from_slice(value)
    }
}

/// A task's outcome, read from the frame it came in: a large result value stays a view of
/// the frame ([`result_value`]). A result whose accumulators would take more than
/// `max_decoded` bytes decoded is refused: the error is the failure to report for the
/// attempt instead.
/// A result's accumulator updates, decoded into `list` (a spare one: a result with
/// updates then allocates nothing for them, short of names or bytes values). What an
/// executor would not have sent is not decoded: the updates past
/// [`MAX_TASK_ACCUMULATORS`], and bytes values that would take those decoded past
/// [`MAX_TASK_ACCUMULATOR_BYTES`]; `ignored` counts them.
fn accumulators_from_archived(
    archived: &[ArchivedAccumulatorUpdate],
    mut list: Vec<AccumulatorUpdate>,
    ignored: &mut usize,
) -> Vec<AccumulatorUpdate> {
    list.clear();
    *ignored += archived.len().saturating_sub(MAX_TASK_ACCUMULATORS);
    let mut bytes_total = 0usize;
    list.extend(
        archived
            .iter()
            .take(MAX_TASK_ACCUMULATORS)
            .filter(|update| match &update.value {
                ArchivedAccumulatorValue::Bytes(bytes) => {
                    let total = bytes_total.saturating_add(bytes.len());
                    if total > MAX_TASK_ACCUMULATOR_BYTES {
                        *ignored += 1;
                        return false;
                    }
                    bytes_total = total;
                    true
                }
                _ => true,
            })
            .map(|update| AccumulatorUpdate {
                id: update.id.to_native(),
                name: update.name.as_ref().map(|name| name.as_str().to_owned()),
                value: match &update.value {
                    ArchivedAccumulatorValue::Long(n) => AccumulatorValue::Long(n.to_native()),
                    ArchivedAccumulatorValue::Double(bits) => {
                        AccumulatorValue::Double(bits.to_native())
                    }
                    ArchivedAccumulatorValue::Bytes(bytes) => {
                        AccumulatorValue::Bytes(bytes.to_vec())
                    }
                },
            }),
    );
    list
}

fn outcome_from_archived(
    frame: &Frame,
    outcome: &ArchivedTaskOutcome,
    max_decoded: usize,
    spare: &mut dyn FnMut() -> Vec<AccumulatorUpdate>,
    ignored: &mut usize,
) -> Result<TaskOutcome, TaskOutcome> {
    if let ArchivedTaskOutcome::Direct {
        metrics,
        accumulators,
        ..
    }
    | ArchivedTaskOutcome::Indirect {
        metrics,
        accumulators,
        ..
    } = outcome
    {
        let size = accumulators.decoded_size();
        if let Err(refused) = check_decoded_size("its accumulator updates", size, max_decoded) {
            return Err(TaskOutcome::Failure {
                kind: flint_wire::TaskFailureKind::ResultLost,
                message: format!("TaskResultLost (result lost from block manager): the result was refused: {refused}"),
                counts_towards_failures: true,
                metrics: metrics_from_archived(metrics),
            });
        }
    }
    Ok(match outcome {
        ArchivedTaskOutcome::None => TaskOutcome::None,
        ArchivedTaskOutcome::Direct {
            value,
            metrics,
            accumulators,
        } => TaskOutcome::Direct {
            value: result_value(frame, value.as_slice()),
            metrics: metrics_from_archived(metrics),
            accumulators: if accumulators.is_empty() {
                Vec::new()
            } else {
                accumulators_from_archived(accumulators, spare(), ignored)
            },
        },
        ArchivedTaskOutcome::Indirect {
            block_id,
            size,
            metrics,
            accumulators,
        } => TaskOutcome::Indirect {
            accumulators: if accumulators.is_empty() {
                Vec::new()
            } else {
                accumulators_from_archived(accumulators, spare(), ignored)
            },
            block_id: match block_id {
                flint_wire::ArchivedBlockId::TaskResult { task_id } => BlockId::TaskResult {
                    task_id: task_id.to_native(),
                },
            },
            size: size.to_native(),
            metrics: metrics_from_archived(metrics),
        },
        ArchivedTaskOutcome::Failure {
            kind,
            message,
            counts_towards_failures,
            metrics,
        } => TaskOutcome::Failure {
            kind: rkyv::deserialize::<_, rancor::Error>(kind)
                .unwrap_or(flint_wire::TaskFailureKind::Exception),
            // The executor cuts its own; a peer that does not is not kept to its word.
            message: cut_text(message.as_str(), MAX_FAILURE_TEXT),
            counts_towards_failures: *counts_towards_failures,
            metrics: metrics_from_archived(metrics),
        },
        ArchivedTaskOutcome::FetchFailed { failure, metrics } => {
            let archived = failure.get();
            // A few small fields, each no larger decoded than in the frame.
            let mut failure: flint_wire::FetchFailure =
                rkyv::deserialize::<_, rancor::Error>(archived).unwrap_or_else(|_| {
                    flint_wire::FetchFailure {
                        address: None,
                        shuffle_id: archived.shuffle_id.to_native(),
                        map_index: None,
                        reduce_id: archived.reduce_id.to_native(),
                        message: String::new(),
                    }
                });
            failure.message = cut_text(&failure.message, MAX_FAILURE_TEXT);
            TaskOutcome::FetchFailed {
                failure: Box::new(failure),
                metrics: metrics_from_archived(metrics),
            }
        }
    })
}

/// The driver's map output tracker (the seeds' `MapOutputTrackerMasterEndpoint`):
/// executors ask it where a shuffle's map outputs are, before their reduce tasks fetch.
pub(crate) struct MapOutputTrackerEndpoint {
    state: Arc<Mutex<DriverState>>,
    peer_warnings: LogBudget,
}

impl MapOutputTrackerEndpoint {
    pub(crate) fn new(state: Arc<Mutex<DriverState>>) -> Self {
        MapOutputTrackerEndpoint {
            state,
            peer_warnings: LogBudget::default(),
        }
    }
}

impl Endpoint for MapOutputTrackerEndpoint {
    fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let ArchivedMessage::GetMapOutputStatuses { shuffle_id } = message.message() else {
            let kind = message.message().kind();
            flint_rpc::peer_warn!(
                self.peer_warnings,
                ctx.now(),
                "The map output tracker ignored {kind} from {:?}",
                message.sender()
            );
            let _ = message.reply_error(format!("{kind} is not a map output request"));
            return;
        };
        let shuffle_id = shuffle_id.to_native();
        let statuses = lock(&self.state).core.map_output_statuses(shuffle_id);
        let replied = match statuses {
            Some((epoch, statuses)) => {
                debug!("Asked to send map output locations for shuffle {shuffle_id}");
                message.reply(&Message::MapOutputStatuses {
                    shuffle_id,
                    epoch,
                    statuses,
                })
            }
            None => message.reply_error(format!("Shuffle {shuffle_id} is not registered")),
        };
        if let Err(e) = replied {
            let why = format!("Cannot send the map output locations of shuffle {shuffle_id}: {e}");
            warn!("{why}");
            // Too large for a message, say: the asking executor would otherwise wait
            // out its ask and report a timeout instead of the reason.
            let _ = message.reply_error(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use flint_wire::{Route, StatusUpdate};

    use super::*;

    fn result_frame(value: Vec<u8>, accumulators: u64) -> Frame {
        let update = Message::StatusUpdate(StatusUpdate {
            executor_id: "1".into(),
            task_id: 1,
            state: TaskState::Finished,
            outcome: TaskOutcome::Direct {
                value: value.into(),
                metrics: TaskMetrics::default(),
                accumulators: (0..accumulators)
                    .map(|id| flint_wire::AccumulatorUpdate {
                        id,
                        name: None,
                        value: flint_wire::AccumulatorValue::Long(0),
                    })
                    .collect(),
            },
        });
        let route = Route::OneWay {
            endpoint: "CoarseGrainedScheduler".into(),
        };
        flint_testkit::frames::frame_of(&route, &update)
    }

    fn value_in(frame: &Frame) -> &[u8] {
        let ArchivedMessage::StatusUpdate(update) = &frame.envelope().unwrap().message else {
            unreachable!()
        };
        let ArchivedTaskOutcome::Direct { value, .. } = &update.outcome else {
            unreachable!()
        };
        value.as_slice()
    }

    fn is_view(frame: &Frame, value: &Bytes) -> bool {
        frame.payload().as_ptr_range().contains(&value.as_ptr())
    }

    #[test]
    fn a_short_result_is_copied_out_of_its_frame_and_a_large_one_is_not() {
        // Beside 20,000 accumulators (over 320 KiB), a large value is less than half its
        // frame: copied too.
        for (len, accumulators, view) in [
            (1, 0, false),
            (VIEW_AT_LEAST - 1, 0, false),
            (VIEW_AT_LEAST, 0, true),
            (VIEW_AT_LEAST, 20_000, false),
        ] {
            let frame = result_frame(vec![5; len], accumulators);
            let value = result_value(&frame, value_in(&frame));
            assert_eq!(value.len(), len);
            assert_eq!(is_view(&frame, &value), view, "{len} bytes");
        }
    }

    fn outcome_frame(outcome: TaskOutcome) -> Frame {
        let update = Message::StatusUpdate(StatusUpdate {
            executor_id: "1".into(),
            task_id: 1,
            state: TaskState::Finished,
            outcome,
        });
        let route = Route::OneWay {
            endpoint: "CoarseGrainedScheduler".into(),
        };
        flint_testkit::frames::frame_of(&route, &update)
    }

    fn archived_outcome(frame: &Frame) -> &ArchivedTaskOutcome {
        let ArchivedMessage::StatusUpdate(update) = &frame.envelope().unwrap().message else {
            unreachable!()
        };
        &update.outcome
    }

    fn update(id: u64, value: AccumulatorValue) -> AccumulatorUpdate {
        AccumulatorUpdate {
            id,
            name: None,
            value,
        }
    }

    #[test]
    fn accumulators_are_decoded_into_the_spare_list_for_direct_and_indirect_results() {
        let updates = vec![
            update(1, AccumulatorValue::Long(-3)),
            update(2, AccumulatorValue::double(2.5)),
            update(3, AccumulatorValue::Bytes(b"xyz".to_vec())),
        ];
        let indirect = TaskOutcome::Indirect {
            block_id: BlockId::TaskResult { task_id: 1 },
            size: 10,
            metrics: TaskMetrics::default(),
            accumulators: updates.clone(),
        };
        let direct = TaskOutcome::Direct {
            value: Bytes::from_static(b"v"),
            metrics: TaskMetrics::default(),
            accumulators: updates.clone(),
        };
        for outcome in [direct, indirect] {
            let frame = outcome_frame(outcome.clone());
            let spare = Vec::with_capacity(8);
            let room = spare.as_ptr();
            let mut given = Some(spare);
            let mut take = || given.take().expect("one list asked for");
            let mut ignored = 0;
            let decoded = outcome_from_archived(
                &frame,
                archived_outcome(&frame),
                1 << 20,
                &mut take,
                &mut ignored,
            )
            .unwrap();
            assert_eq!(decoded, outcome);
            assert_eq!(ignored, 0);
            let (TaskOutcome::Direct { accumulators, .. }
            | TaskOutcome::Indirect { accumulators, .. }) = &decoded
            else {
                unreachable!()
            };
            assert_eq!(accumulators.as_ptr(), room, "decoded into the spare list");
        }
    }

    #[test]
    fn an_indirect_result_whose_accumulators_would_decode_past_the_limit_is_refused() {
        let named = (0..100)
            .map(|id| AccumulatorUpdate {
                id,
                name: Some("a name of some length".into()),
                value: AccumulatorValue::Long(1),
            })
            .collect();
        let frame = outcome_frame(TaskOutcome::Indirect {
            block_id: BlockId::TaskResult { task_id: 1 },
            size: 10,
            metrics: TaskMetrics::default(),
            accumulators: named,
        });
        let mut take = || -> Vec<AccumulatorUpdate> { panic!("nothing is decoded") };
        let refused =
            outcome_from_archived(&frame, archived_outcome(&frame), 1024, &mut take, &mut 0);
        let Err(TaskOutcome::Failure { message, .. }) = refused else {
            panic!("{refused:?}")
        };
        assert!(message.contains("accumulator updates"), "{message}");
    }

    /// An executor that sends more than a task may add (more accumulators, or more
    /// bytes of bytes values) has the excess ignored, not merged: the driver does not
    /// trust the executor to have checked.
    #[test]
    fn updates_past_the_task_limits_are_not_decoded() {
        let many: Vec<AccumulatorUpdate> = (0..MAX_TASK_ACCUMULATORS as u64 + 5)
            .map(|id| update(id, AccumulatorValue::Long(1)))
            .collect();
        let half = MAX_TASK_ACCUMULATOR_BYTES / 2 + 1;
        let bytes = vec![
            update(1, AccumulatorValue::Bytes(vec![1; half])),
            update(2, AccumulatorValue::Long(7)),
            update(3, AccumulatorValue::Bytes(vec![2; half])),
            update(4, AccumulatorValue::Bytes(vec![3; 10])),
        ];
        for (updates, kept, expect_ignored) in [
            (
                many,
                (0..MAX_TASK_ACCUMULATORS as u64).collect::<Vec<_>>(),
                5,
            ),
            (bytes, vec![1, 2, 4], 1),
        ] {
            let frame = outcome_frame(TaskOutcome::Direct {
                value: Bytes::from_static(b"v"),
                metrics: TaskMetrics::default(),
                accumulators: updates,
            });
            let mut take = Vec::new;
            let mut ignored = 0;
            let decoded = outcome_from_archived(
                &frame,
                archived_outcome(&frame),
                1 << 30,
                &mut take,
                &mut ignored,
            )
            .unwrap();
            let TaskOutcome::Direct { accumulators, .. } = decoded else {
                panic!("{decoded:?}")
            };
            let ids: Vec<u64> = accumulators.iter().map(|u| u.id).collect();
            assert_eq!(ids, kept);
            assert_eq!(ignored, expect_ignored);
        }
    }
}
