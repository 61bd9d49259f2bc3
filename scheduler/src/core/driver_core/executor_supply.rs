//! The executors the driver wants and what became of them: requests to the cluster
//! manager, kills, replacements of lost executors, and the count of executor failures
//! (`executor.maxNumFailures`). The cluster manager itself runs elsewhere (the glue's
//! executor supply thread): the core says what to ask of it ([`Output`]) and hears back
//! what happened ([`SupplyEvent`]).

use std::time::Instant;

use flint_wire::{ExecutorLossReason, SharedStr};
use tracing::{debug, error, info, warn};

use super::output::{IfRefused, Output};
use super::DriverCore;
use crate::core::fx_hash::FxHashSet;

/// An executor process that ended without the driver asking (not killed through
/// [`ClusterManager::kill_executors`] nor stopped), as its cluster manager reports it.
///
/// [`ClusterManager::kill_executors`]: crate::ClusterManager::kill_executors
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitedExecutor {
    /// The executor it was started as.
    pub executor_id: String,
    /// Its exit code; 128 + the signal's number for a process killed by a signal, as a
    /// shell reports it (137 for `kill -9`).
    pub exit_code: i32,
    /// How it ended, e.g. "executor 2 exited with code 3" or "executor 2 was killed by
    /// signal 9": the reason of its loss, and of the failure it counts as.
    pub message: String,
}

impl ExitedExecutor {
    /// Whether the exit was abnormal (a non-zero code or a signal): it then counts
    /// towards `executor.maxNumFailures`.
    pub fn is_failure(&self) -> bool {
        self.exit_code != 0
    }

    /// The loss reason of the executor: Spark's `ExecutorExited`, caused by the
    /// application whatever the code, as Spark's standalone backend takes every exit
    /// with a code, so that its running tasks count towards `task.maxFailures`. An
    /// executor that exits on its own closes its connection too, and the driver may hear
    /// of either first: a disconnection always counts, so an exit must count alike.
    pub fn loss_reason(&self) -> ExecutorLossReason {
        ExecutorLossReason::ExecutorExited {
            exit_code: self.exit_code,
            exit_caused_by_app: true,
            reason: self.message.clone(),
        }
    }
}

/// What the cluster manager's side reports back to the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SupplyEvent {
    /// An executor process ended without the driver asking.
    Exited(ExitedExecutor),
    /// A request made with [`IfRefused::CountFailure`] failed, for this reason.
    RequestFailed(String),
}

/// A request for a negative number of executors, refused with the seeds' text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NegativeRequest(pub String);

/// How the driver's want of executors stands.
#[derive(Debug, Default)]
pub(crate) struct ExecutorSupply {
    /// Executors asked to be killed whose removal has not come yet (the seeds'
    /// `executorsPendingToRemove`).
    pub pending_to_remove: FxHashSet<SharedStr>,
    /// Executors asked for and not registered yet (the seeds' `numPendingExecutors`).
    pub num_pending_executors: u32,
    /// The executors the cluster manager was last asked for in all.
    pub target_executors: u32,
    /// Executor failures so far (see the module docs of `driver_core`).
    pub executor_failures: u32,
    /// Why the driver gave up on executors, once it has.
    pub failure: Option<String>,
    /// Whether asking for replacements failed and is to be asked again at the next
    /// report.
    pub replace_pending: bool,
}

impl DriverCore {
    /// Executors asked for and not registered yet.
    pub fn num_pending_executors(&self) -> u32 {
        self.supply.num_pending_executors
    }

    /// Why the driver gave up on executors (`executor.maxNumFailures` reached), if it
    /// has.
    pub fn failure(&self) -> Option<&str> {
        self.supply.failure.as_deref()
    }

    /// Executor failures counted so far.
    pub fn executor_failures(&self) -> u32 {
        self.supply.executor_failures
    }

    /// `executor.maxNumFailures`, or twice the executors asked for, at least 3.
    pub fn max_executor_failures(&self) -> u32 {
        self.config
            .max_executor_failures
            .unwrap_or_else(|| self.supply.target_executors.saturating_mul(2).max(3))
    }

    /// What the cluster manager's side reports: an abnormal exit is an executor failure,
    /// a still registered executor is removed with Spark's `ExecutorExited` reason, and
    /// lost executors are replaced. A failed request for replacements is an executor
    /// failure too, and is made again at the next report. Reports come about once a
    /// second, empty ones included, and at once when a request fails.
    pub fn executor_supply_report(
        &mut self,
        now: Instant,
        events: impl IntoIterator<Item = SupplyEvent>,
    ) {
        if self.stopping {
            return;
        }
        let retry = std::mem::take(&mut self.supply.replace_pending);
        let mut exited = false;
        for event in events {
            match event {
                SupplyEvent::Exited(exit) => {
                    exited = true;
                    self.executor_exited(now, exit);
                }
                SupplyEvent::RequestFailed(why) => {
                    self.supply.replace_pending = true;
                    self.executor_failed(why);
                }
            }
        }
        if exited || retry {
            self.replace_lost_executors();
        }
    }

    fn executor_exited(&mut self, now: Instant, exit: ExitedExecutor) {
        let ExitedExecutor {
            executor_id,
            message,
            ..
        } = &exit;
        if exit.is_failure() {
            self.executor_failed(message.clone());
        } else {
            info!("Executor {executor_id} exited: {message}");
        }
        if self.executors.contains_key(executor_id.as_str())
            || self.pending_loss.contains_key(executor_id.as_str())
        {
            self.lose_executor(now, executor_id, exit.loss_reason());
        }
    }

    /// Counts an executor failure; at `executor.maxNumFailures` the driver gives up
    /// (see the module docs of `driver_core`).
    fn executor_failed(&mut self, what: String) {
        let supply = &mut self.supply;
        supply.executor_failures = supply.executor_failures.saturating_add(1);
        let failures = supply.executor_failures;
        let max = self.max_executor_failures();
        warn!("Executor failure {failures} of at most {max} (executor.maxNumFailures): {what}");
        if failures < max || self.supply.failure.is_some() {
            return;
        }
        let message = format!("Max number of executor failures ({max}) reached (the last: {what})");
        error!("{message}");
        let task_sets: Vec<_> = self.scheduler.task_sets().map(|t| t.id()).collect();
        for task_set in task_sets {
            self.scheduler.abort_task_set(task_set, message.clone());
        }
        self.supply.failure = Some(message);
    }

    /// Asks the cluster manager again for the executors wanted in all, so that lost
    /// ones are replaced; nothing once stopping or given up, or if none were asked for.
    pub(super) fn replace_lost_executors(&mut self) {
        self.supply.replace_pending = false;
        if self.stopping || self.supply.failure.is_some() || self.supply.target_executors == 0 {
            return;
        }
        let target = self.supply.target_executors;
        self.supply.num_pending_executors = target
            .saturating_add(self.pending_removals())
            .saturating_sub(self.num_existing_executors());
        self.outputs.push_back(Output::RequestTotalExecutors {
            total: target,
            if_refused: IfRefused::CountFailure,
        });
    }

    fn num_existing_executors(&self) -> u32 {
        u32::try_from(self.executors.len()).unwrap_or(u32::MAX)
    }

    fn pending_removals(&self) -> u32 {
        u32::try_from(self.supply.pending_to_remove.len()).unwrap_or(u32::MAX)
    }

    /// Makes `total` the executors wanted and asks the cluster manager for them, unless
    /// the driver is stopping.
    fn request_total(&mut self, total: u32, if_refused: IfRefused) {
        self.supply.target_executors = total;
        if !self.stopping {
            self.outputs
                .push_back(Output::RequestTotalExecutors { total, if_refused });
        }
    }

    /// The seeds' `requestExecutors`: the request is an [`Output::RequestTotalExecutors`]
    /// whose refusal is the caller's answer ([`IfRefused::Answer`]); none once stopping.
    pub fn request_executors(&mut self, additional: i64) -> Result<(), NegativeRequest> {
        if additional < 0 {
            return Err(NegativeRequest(format!(
                "Attempted to request a negative number of additional executor(s) {additional} from the cluster manager. Please specify a positive number!"
            )));
        }
        info!("Requesting {additional} additional executor(s) from the cluster manager");
        let additional = u32::try_from(additional).unwrap_or(u32::MAX);
        let supply = &mut self.supply;
        supply.num_pending_executors = supply.num_pending_executors.saturating_add(additional);
        debug!(
            "Number of pending executors is now {}",
            supply.num_pending_executors
        );
        let total = self
            .num_existing_executors()
            .saturating_add(self.supply.num_pending_executors)
            .saturating_sub(self.pending_removals());
        self.request_total(total, IfRefused::Answer);
        Ok(())
    }

    /// The seeds' `requestTotalExecutors`, answered as [`DriverCore::request_executors`].
    pub fn request_total_executors(&mut self, total: i64) -> Result<(), NegativeRequest> {
        if total < 0 {
            return Err(NegativeRequest(format!(
                "Attempted to request a negative number of executor(s) {total} from the cluster manager. Please specify a positive number!"
            )));
        }
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        self.supply.num_pending_executors = total
            .saturating_add(self.pending_removals())
            .saturating_sub(self.num_existing_executors());
        self.request_total(total, IfRefused::Answer);
        Ok(())
    }

    /// The seeds' `killExecutors`: returns the executors asked to be killed. With
    /// `replace`, the cluster manager is asked for as many executors as before; without,
    /// the total asked for shrinks. Without `force`, executors running tasks are kept.
    pub fn kill_executors(
        &mut self,
        executor_ids: &[String],
        replace: bool,
        force: bool,
    ) -> Vec<String> {
        self.kill_and_maybe_stop(executor_ids, replace, force, !replace)
    }

    /// [`DriverCore::kill_executors`]; `tell_to_stop` also sends each StopExecutor, for
    /// executors the cluster manager may not have started (it registered on its own):
    /// they would otherwise stay pending removal, and get no task, for as long as they
    /// live. An executor killed and replaced for its silence is not told: should its
    /// network heal, it registers again.
    fn kill_and_maybe_stop(
        &mut self,
        executor_ids: &[String],
        replace: bool,
        force: bool,
        tell_to_stop: bool,
    ) -> Vec<String> {
        info!("Requesting to kill executor(s) {}", executor_ids.join(", "));
        let mut to_kill = Vec::new();
        for id in executor_ids {
            if !self.executors.contains_key(id.as_str()) {
                warn!("Executor to kill {id} does not exist!");
            } else if self.supply.pending_to_remove.contains(id.as_str()) {
                debug!("Executor {id} is already being removed");
            } else if !force && self.scheduler.running_tasks_on(id).next().is_some() {
                debug!("Not killing executor {id}: it runs tasks");
            } else {
                to_kill.push(id.clone());
            }
        }
        if to_kill.is_empty() {
            return to_kill;
        }
        let count = u32::try_from(to_kill.len()).unwrap_or(u32::MAX);
        for id in &to_kill {
            self.supply
                .pending_to_remove
                .insert(SharedStr::from(id.as_str()));
        }
        self.outputs
            .push_back(Output::KillExecutors(to_kill.clone()));
        if tell_to_stop {
            for id in &to_kill {
                if let Some(executor) = self.executors.get(id.as_str()) {
                    self.outputs.push_back(Output::StopExecutor {
                        peer: executor.peer,
                        executor_id: executor.id.clone(),
                    });
                }
            }
        }
        if replace && self.supply.failure.is_some() {
            // Given up on executors: none is replaced.
        } else if replace {
            let supply = &mut self.supply;
            supply.num_pending_executors = supply.num_pending_executors.saturating_add(count);
            self.request_total(self.supply.target_executors, IfRefused::Log);
        } else {
            let total = self
                .num_existing_executors()
                .saturating_add(self.supply.num_pending_executors)
                .saturating_sub(self.pending_removals());
            self.request_total(total, IfRefused::Log);
        }
        to_kill
    }

    /// The KillExecutorsOnHost handler: every executor on the host, replaced, and told
    /// to stop.
    pub fn kill_executors_on_host(&mut self, host: &str) -> Vec<String> {
        let ids: Vec<String> = self
            .executors
            .iter()
            .filter(|(_, e)| &*e.host == host)
            .map(|(id, _)| id.to_string())
            .collect();
        if ids.is_empty() {
            return ids;
        }
        self.kill_and_maybe_stop(&ids, true, true, true)
    }
}
