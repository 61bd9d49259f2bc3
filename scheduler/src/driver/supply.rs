//! The executor supply thread: where the cluster manager runs. Starting, killing and
//! reaping executor processes takes system calls that may wait (a `fork`, a `wait` for
//! a killed process); here they keep off the event loop's thread and never hold the
//! driver's lock. The thread takes requests from a channel ([`SupplyQueue`], fed with
//! the core's outputs), looks for executors that exited about once a second, and
//! reports both back to the core ([`DriverCore::executor_supply_report`]).
//!
//! [`DriverCore::executor_supply_report`]: crate::core::driver_core::DriverCore::executor_supply_report

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::error;

use crate::core::driver_core::{IfRefused, SupplyEvent};
use crate::driver::carry_out::{lock, DriverState};
use crate::driver::cluster_manager::{ClusterManager, ClusterManagerError};

/// What the supply thread is asked to do.
#[derive(Debug)]
enum Command {
    RequestTotal {
        total: u32,
        if_refused: IfRefused,
        answer: Option<SyncSender<Result<bool, ClusterManagerError>>>,
    },
    Kill(Vec<String>),
    /// Look for exited executors soon (see [`LOOK_AGAIN`]).
    LookForExits,
    Stopping(Vec<String>),
    /// Answered once everything asked before is done.
    Barrier(SyncSender<Result<bool, ClusterManagerError>>),
    /// Stop every executor (given this long to exit on their own) and end the thread.
    Stop(Duration),
}

/// When to look for exited executors after being asked to
/// ([`SupplyQueue::look_for_exits`]): an executor's connection closes as its process
/// ends, a moment before the process can be reaped, so the first look comes a little
/// later and a second one after that, before the periodic polls take over.
const LOOK_AGAIN: [Duration; 2] = [Duration::from_millis(20), Duration::from_millis(200)];

/// What the driver program waits for, with the driver's lock let go: the cluster
/// manager's answer to its request, or word that everything asked before was done.
#[derive(Debug)]
pub(crate) struct Answer(Receiver<Result<bool, ClusterManagerError>>);

impl Answer {
    /// Waits for it. A supply thread that has stopped answers `Ok(false)`, as a stopping
    /// driver does without asking.
    pub fn wait(self) -> Result<bool, ClusterManagerError> {
        self.0.recv().unwrap_or(Ok(false))
    }
}

/// The way to the supply thread. Sending never waits; once the thread has ended, what is
/// sent is dropped.
#[derive(Debug, Clone)]
pub(crate) struct SupplyQueue(Sender<Command>);

/// The supply thread's end of the channel, until it starts.
#[derive(Debug)]
pub(crate) struct SupplyInbox(Receiver<Command>);

/// A new channel to a supply thread that is yet to start ([`spawn`]).
pub(crate) fn channel() -> (SupplyQueue, SupplyInbox) {
    let (tx, rx) = mpsc::channel();
    (SupplyQueue(tx), SupplyInbox(rx))
}

impl SupplyQueue {
    /// Asks for `total` executors in all; the answer to wait for if `if_refused` is
    /// [`IfRefused::Answer`].
    pub fn request_total(&self, total: u32, if_refused: IfRefused) -> Option<Answer> {
        let (answer, waiter) = if if_refused == IfRefused::Answer {
            let (tx, rx) = mpsc::sync_channel(1);
            (Some(tx), Some(Answer(rx)))
        } else {
            (None, None)
        };
        let command = Command::RequestTotal {
            total,
            if_refused,
            answer,
        };
        self.0.send(command).ok().and(waiter)
    }

    /// Kills these executors.
    pub fn kill(&self, executor_ids: Vec<String>) {
        let _ = self.0.send(Command::Kill(executor_ids));
    }

    /// Looks for exited executors soon, not only at the next periodic poll.
    pub fn look_for_exits(&self) {
        let _ = self.0.send(Command::LookForExits);
    }

    /// The driver is stopping; `registered` are the executors registered with it.
    pub fn stopping(&self, registered: Vec<String>) {
        let _ = self.0.send(Command::Stopping(registered));
    }

    /// Word that everything asked so far was done, to wait for; `None` if the thread has
    /// ended.
    pub fn barrier(&self) -> Option<Answer> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.0.send(Command::Barrier(tx)).ok()?;
        Some(Answer(rx))
    }
}

/// The running supply thread.
#[derive(Debug)]
pub(crate) struct SupplyThread {
    queue: SupplyQueue,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Starts the supply thread: it runs `cluster_manager`, takes what comes on `inbox`, and
/// reports to `driver`, looking for exited executors every `poll_every`.
pub(crate) fn spawn(
    queue: &SupplyQueue,
    inbox: SupplyInbox,
    cluster_manager: Box<dyn ClusterManager>,
    driver: Weak<Mutex<DriverState>>,
    poll_every: Duration,
) -> std::io::Result<SupplyThread> {
    let thread = std::thread::Builder::new()
        .name("executor-supply".to_owned())
        .spawn(move || run(cluster_manager, inbox.0, &driver, poll_every))?;
    Ok(SupplyThread {
        queue: queue.clone(),
        thread: Mutex::new(Some(thread)),
    })
}

impl SupplyThread {
    /// Stops every executor the cluster manager started, giving them `grace` to exit on
    /// their own first, and ends the thread; returns once it has ended. Later calls
    /// return at once.
    pub fn stop(&self, grace: Duration) {
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(thread) = thread else {
            return;
        };
        let _ = self.queue.0.send(Command::Stop(grace));
        let _ = thread.join();
    }
}

fn run(
    mut cluster_manager: Box<dyn ClusterManager>,
    inbox: Receiver<Command>,
    driver: &Weak<Mutex<DriverState>>,
    poll_every: Duration,
) {
    let mut next_poll = Instant::now() + poll_every;
    // Looks asked for ahead of the periodic polls, soonest last.
    let mut early: Vec<Instant> = Vec::new();
    let mut events = Vec::new();
    loop {
        let due = early.last().map_or(next_poll, |&at| at.min(next_poll));
        let wait = due.saturating_duration_since(Instant::now());
        match inbox.recv_timeout(wait) {
            Ok(Command::RequestTotal {
                total,
                if_refused,
                answer,
            }) => {
                let result = cluster_manager.request_total_executors(total);
                match (answer, result) {
                    (Some(answer), result) => {
                        let _ = answer.send(result);
                    }
                    (None, Ok(_)) => {}
                    (None, Err(e)) => match if_refused {
                        IfRefused::CountFailure => {
                            events.push(SupplyEvent::RequestFailed(e.to_string()))
                        }
                        IfRefused::Log | IfRefused::Answer => {
                            error!("Cannot ask the cluster manager for executors: {e}")
                        }
                    },
                }
            }
            Ok(Command::LookForExits) => {
                let now = Instant::now();
                early.extend(LOOK_AGAIN.iter().map(|after| now + *after));
                early.sort_unstable_by(|a, b| b.cmp(a));
                // Many losses at once need no more than a few looks, the soonest; the
                // periodic polls find the rest.
                let extra = early.len().saturating_sub(LOOK_AGAIN.len() * 2);
                early.drain(..extra);
            }
            Ok(Command::Kill(executor_ids)) => {
                if let Err(e) = cluster_manager.kill_executors(&executor_ids) {
                    error!("Cannot kill executor(s) {}: {e}", executor_ids.join(", "));
                }
            }
            Ok(Command::Stopping(registered)) => cluster_manager.stopping(&registered),
            Ok(Command::Barrier(done)) => {
                let _ = done.send(Ok(true));
            }
            Ok(Command::Stop(grace)) => {
                cluster_manager.stop(grace);
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
            // The driver is gone without stopping: dropping the cluster manager stops
            // what it started.
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        let looked = early.last().is_some_and(|&at| now >= at);
        while early.last().is_some_and(|&at| now >= at) {
            early.pop();
        }
        let poll = now >= next_poll;
        if poll {
            next_poll = now + poll_every;
        }
        if poll || looked {
            events.extend(
                cluster_manager
                    .exited_executors()
                    .into_iter()
                    .map(SupplyEvent::Exited),
            );
        }
        // Every poll is reported, even with nothing in it: a failed request is made
        // again at the next one.
        if poll || !events.is_empty() {
            let Some(driver) = driver.upgrade() else {
                return;
            };
            let mut state = lock(&driver);
            let now = Instant::now();
            state.core.executor_supply_report(now, events.drain(..));
            state.carry_out(now);
        }
    }
}
