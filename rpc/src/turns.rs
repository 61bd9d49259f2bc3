//! Who turns the event loop: its own thread, and threads lent to it.
//!
//! The loop's state sits behind a lock, and one turn of it ([`EventLoop::turn`]) never
//! blocks: whichever thread holds the lock takes what the poller has ready and handles
//! it. The loop thread turns it, keeps turning for `rpc.io.busyPoll` after its last
//! work, and then sleeps on a second poller that watches the first one's descriptor, so
//! that it sleeps without holding the loop.
//!
//! A thread that waits for something the loop will bring (a task runner waiting for its
//! next task, an asker waiting for its reply) can lend itself to the loop
//! ([`LoopLease`]): it turns the loop whenever nobody else does, and so takes what it
//! waits for straight from the socket, without the loop thread in between (one hand-off
//! between threads fewer, which on a virtual machine is the larger part of a round trip
//! on loopback). While a lent thread keeps turning the loop, the loop thread parks
//! instead of polling: two threads polling the same sockets would share two CPUs with
//! everything else for nothing. A lent thread that stops turning (it runs a long task,
//! say) is noticed within [`LEASE_CHECK`]: the loop thread then polls again.
//!
//! Only one thread turns at a time, so endpoints still get one message at a time, and
//! the thread turning is "the loop" for everything the turn does
//! ([`Shared::in_loop_turn`](crate::env::Shared::in_loop_turn)).

use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use tracing::error;

use crate::env::Shared;
use crate::event_loop::{EventLoop, Turn};
use crate::sync::{AtomicUsize, Ordering};

/// How long the loop thread leaves the sockets to lent threads that turn no more before
/// it polls them itself again: the longest a message waits while every lent thread is
/// busy with something else.
pub(crate) const LEASE_CHECK: Duration = Duration::from_micros(500);

thread_local! {
    /// The environment whose loop this thread is turning right now, by address.
    static TURNING: Cell<usize> = const { Cell::new(0) };
}

/// The loop's state and who may turn it.
pub(crate) struct LoopCell {
    /// The loop; `None` once the loop thread has shut it down.
    core: Mutex<Option<EventLoop>>,
    lenders: Lenders,
    /// Turns lent threads took: the loop thread sees from it whether they still turn.
    lent_turns: AtomicU64,
    /// Set by the turn that found the environment stopping: from then on only the loop
    /// thread turns, to shut it down.
    stopping: std::sync::atomic::AtomicBool,
    loop_thread: OnceLock<Thread>,
}

impl LoopCell {
    /// A cell to be filled by [`LoopCell::install`].
    pub(crate) fn new() -> Self {
        LoopCell {
            core: Mutex::new(None),
            lenders: Lenders::new(),
            lent_turns: AtomicU64::new(0),
            stopping: std::sync::atomic::AtomicBool::new(false),
            loop_thread: OnceLock::new(),
        }
    }

    /// Puts the loop in the cell.
    pub(crate) fn install(&self, event_loop: EventLoop) {
        *self.lock() = Some(event_loop);
    }

    /// Takes the loop out again (its thread could not be started).
    pub(crate) fn uninstall(&self) -> Option<EventLoop> {
        self.lock().take()
    }

    fn lock(&self) -> MutexGuard<'_, Option<EventLoop>> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unpark_loop(&self) {
        if let Some(thread) = self.loop_thread.get() {
            thread.unpark();
        }
    }

    fn lent_turns(&self) -> u64 {
        self.lent_turns.load(std::sync::atomic::Ordering::Acquire)
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_stopping(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

/// How many threads are lent to the loop, and whether the loop thread parked because of
/// them: the last lease to end wakes it, and none is missed (model-checked with loom).
///
/// Both live in one word (the count above the lowest bit, the parked flag in it), so
/// that every change to either is one read-modify-write of one location: whichever of
/// "the loop thread parks" and "the last lease ends" comes second sees the first.
pub(crate) struct Lenders {
    state: AtomicUsize,
}

/// The parked flag's bit in [`Lenders::state`]; one lease counts [`LEASE`].
const PARKED: usize = 1;
const LEASE: usize = 2;

impl Lenders {
    pub(crate) fn new() -> Self {
        Lenders {
            state: AtomicUsize::new(0),
        }
    }

    /// A thread is lent.
    pub(crate) fn lend(&self) {
        self.state.fetch_add(LEASE, Ordering::AcqRel);
    }

    /// Whether any thread is lent.
    pub(crate) fn any(&self) -> bool {
        self.state.load(Ordering::Acquire) >= LEASE
    }

    /// A lease ends; true if it was the last and the loop thread is parked, to be woken.
    pub(crate) fn release(&self) -> bool {
        let before = self.state.fetch_sub(LEASE, Ordering::AcqRel);
        before & !PARKED == LEASE && before & PARKED != 0
    }

    /// Calls `park` (the loop thread parking itself) unless no thread is lent any more.
    pub(crate) fn park_while_lent(&self, park: impl FnOnce()) {
        let before = self.state.fetch_or(PARKED, Ordering::AcqRel);
        if before >= LEASE {
            park();
        }
        self.state.fetch_and(!PARKED, Ordering::AcqRel);
    }
}

/// Marks this thread as turning `shared`'s loop while it lives.
struct Turning {
    previous: usize,
}

impl Turning {
    fn enter(shared: &Shared) -> Self {
        Turning {
            previous: TURNING.replace(shared as *const Shared as usize),
        }
    }
}

impl Drop for Turning {
    fn drop(&mut self) {
        TURNING.set(self.previous);
    }
}

/// Whether this thread is turning `shared`'s loop.
pub(crate) fn in_turn(shared: &Shared) -> bool {
    TURNING.get() == shared as *const Shared as usize
}

/// The second poller, on which the loop thread sleeps: it reports the loop's poller as
/// readable whenever that one has events ready.
pub(crate) struct Sleeper {
    poll: Poll,
    events: Events,
}

impl Sleeper {
    /// A poller watching `poller_fd` (the loop's).
    pub(crate) fn watching(poller_fd: std::os::fd::RawFd) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut SourceFd(&poller_fd), Token(0), Interest::READABLE)?;
        Ok(Sleeper {
            poll,
            events: Events::with_capacity(4),
        })
    }

    /// Sleeps until the watched poller has events ready or `timeout` passes.
    fn sleep(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self.poll.poll(&mut self.events, timeout) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            result => result,
        }
    }
}

/// The loop thread's body: turns the loop until it stops, then shuts it down.
pub(crate) fn run_loop_thread(shared: Arc<Shared>, mut sleeper: Sleeper) {
    let cell = &shared.cell;
    let _ = cell.loop_thread.set(std::thread::current());
    let busy_poll = shared.settings.busy_poll;
    let mut idle_since: Option<Instant> = None;
    let mut lenders_watch = LendersWatch::default();
    loop {
        if !cell.is_stopping()
            && cell.lenders.any()
            && lenders_watch.still_turning(cell.lent_turns(), Instant::now())
        {
            // Lent threads turn the loop: leave the sockets to them. For
            // rpc.io.busyPoll look again and again (a lease that ends soon, an ask's,
            // hands the sockets back with no wake-up), then park until the last lease
            // ends (it unparks this thread), or for LEASE_CHECK.
            if lenders_watch.deferring_for(Instant::now()) < busy_poll {
                std::thread::yield_now();
            } else {
                cell.lenders
                    .park_while_lent(|| std::thread::park_timeout(LEASE_CHECK));
            }
            continue;
        }
        lenders_watch.stop_deferring();
        let (turn, wake_at) = {
            let mut core = cell.lock();
            let Some(core) = core.as_mut() else {
                return;
            };
            let _turning = Turning::enter(&shared);
            let turn = core.turn();
            (turn, core.next_wake())
        };
        match turn {
            Turn::Stopping => {
                cell.set_stopping();
                break;
            }
            Turn::Worked => {
                idle_since = None;
                continue;
            }
            Turn::Idle => {}
        }
        let now = Instant::now();
        let since = *idle_since.get_or_insert(now);
        if now.saturating_duration_since(since) < busy_poll {
            std::thread::yield_now();
            continue;
        }
        // Lent threads that take up turning again are noticed at the next event.
        let timeout = wake_at.map(|at| at.saturating_duration_since(now));
        if let Err(e) = sleeper.sleep(timeout) {
            error!("event loop poll failed: {e}");
            break;
        }
        idle_since = None;
    }
    let mut core = cell.lock();
    if let Some(mut event_loop) = core.take() {
        let _turning = Turning::enter(&shared);
        event_loop.shutdown();
        // Dropped here, on the loop thread, with the lock held: the loop's handle on the
        // shared state goes with it, and lent threads find the loop gone.
        drop(event_loop);
    }
}

/// What the loop thread knows of the lent threads' turns.
#[derive(Debug, Default)]
struct LendersWatch {
    /// `lent_turns` when last looked at, and when it last moved.
    seen_turns: u64,
    moved_at: Option<Instant>,
    /// Since when the loop thread has left the sockets to lent threads.
    deferring_since: Option<Instant>,
}

impl LendersWatch {
    /// Whether lent threads turned the loop within the last [`LEASE_CHECK`] before `now`,
    /// given their count of turns.
    fn still_turning(&mut self, turns: u64, now: Instant) -> bool {
        if turns != self.seen_turns {
            self.seen_turns = turns;
            self.moved_at = Some(now);
        }
        let turning = self
            .moved_at
            .is_some_and(|moved| now.saturating_duration_since(moved) < LEASE_CHECK);
        if turning {
            self.deferring_since.get_or_insert(now);
        }
        turning
    }

    /// How long, at `now`, the loop thread has been leaving the sockets to lent threads.
    fn deferring_for(&self, now: Instant) -> Duration {
        self.deferring_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }

    /// The loop thread polls again.
    fn stop_deferring(&mut self) {
        self.deferring_since = None;
    }
}

/// A thread lent to an environment's event loop while it waits for something the loop
/// brings: see [`RpcEnvHandle::lend`](crate::RpcEnvHandle::lend).
///
/// ```
/// use flint_rpc::{Conf, RpcEnv};
///
/// let env = RpcEnv::new(&Conf::new())?;
/// let lease = env.handle().lend();
/// // Nothing is ready: the turn finds nothing to do.
/// assert!(!lease.turn());
/// drop(lease);
/// env.stop();
/// # Ok::<(), flint_rpc::RpcError>(())
/// ```
#[must_use = "a lease only helps while it is used to turn the loop"]
pub struct LoopLease {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LoopLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopLease")
            .field("address", &self.shared.address)
            .finish()
    }
}

impl LoopLease {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        shared.cell.lenders.lend();
        LoopLease { shared }
    }

    /// Turns the loop once on this thread, unless another thread is turning it: takes
    /// what the sockets have ready and handles it, as the loop thread would (endpoints
    /// run here, for this turn). Never blocks. Returns whether the turn handled
    /// anything.
    pub fn turn(&self) -> bool {
        let cell = &self.shared.cell;
        if cell.is_stopping() {
            return false;
        }
        cell.lent_turns
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut core = match cell.core.try_lock() {
            Ok(core) => core,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let Some(event_loop) = core.as_mut() else {
            return false;
        };
        let turn = {
            let _turning = Turning::enter(&self.shared);
            event_loop.turn()
        };
        drop(core);
        match turn {
            Turn::Worked => true,
            Turn::Idle => false,
            Turn::Stopping => {
                // Only the loop thread shuts the loop down; it may be parked.
                cell.set_stopping();
                cell.unpark_loop();
                false
            }
        }
    }
}

impl Drop for LoopLease {
    fn drop(&mut self) {
        let cell = &self.shared.cell;
        if cell.lenders.release() {
            // Nobody polls the sockets any more: the loop thread goes back to it.
            cell.unpark_loop();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lent_threads_count_as_turning_until_their_turns_stop_for_the_lease_check() {
        let t0 = Instant::now();
        let mut watch = LendersWatch::default();
        assert!(!watch.still_turning(0, t0), "no turn was ever seen");
        assert_eq!(watch.deferring_for(t0), Duration::ZERO);
        assert!(watch.still_turning(1, t0));
        let later = t0 + LEASE_CHECK / 2;
        assert!(watch.still_turning(1, later), "turned within the check");
        assert_eq!(watch.deferring_for(later), LEASE_CHECK / 2);
        assert!(
            !watch.still_turning(1, t0 + LEASE_CHECK),
            "no turn for a whole check"
        );
        let resumed = t0 + LEASE_CHECK * 3;
        assert!(watch.still_turning(2, resumed), "turning again");
        watch.stop_deferring();
        assert_eq!(watch.deferring_for(resumed), Duration::ZERO);
        assert!(watch.still_turning(2, resumed + LEASE_CHECK / 4));
        assert_eq!(
            watch.deferring_for(resumed + LEASE_CHECK / 2),
            LEASE_CHECK / 4
        );
    }

    #[test]
    fn only_the_last_lease_wakes_a_parked_loop_thread() {
        let lenders = Lenders::new();
        lenders.lend();
        lenders.lend();
        assert!(lenders.any());
        let mut parked = false;
        lenders.park_while_lent(|| parked = true);
        assert!(parked, "parks while threads are lent");
        assert!(!lenders.release(), "another lease is left");
        lenders.park_while_lent(|| {
            // Released while parked: the last lease reports it.
            assert!(lenders.release());
        });
        assert!(!lenders.any());
        let mut parked = false;
        lenders.park_while_lent(|| parked = true);
        assert!(!parked, "nothing lent: no parking");
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::Arc;

    /// The loop thread parks while two leases end on other threads: whatever the
    /// interleaving, the last one to end wakes it (loom reports a thread parked forever
    /// as a deadlock).
    #[test]
    fn loom_the_last_lease_to_end_wakes_the_parked_loop_thread() {
        loom::model(|| {
            let lenders = Arc::new(Lenders::new());
            lenders.lend();
            lenders.lend();
            let loop_thread = loom::thread::current();
            let releasers: Vec<_> = (0..2)
                .map(|_| {
                    let (lenders, loop_thread) = (lenders.clone(), loop_thread.clone());
                    loom::thread::spawn(move || {
                        if lenders.release() {
                            loop_thread.unpark();
                        }
                    })
                })
                .collect();
            lenders.park_while_lent(loom::thread::park);
            for releaser in releasers {
                releaser.join().unwrap();
            }
            assert!(!lenders.any());
        });
    }
}
