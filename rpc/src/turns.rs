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
//! ([`LoopLease`]) and turn it whenever nobody else does: it then takes what it waits
//! for straight from the socket, without the loop thread in between (one hand-off
//! between threads fewer, which on a virtual machine is the larger part of a round trip
//! on loopback). While lent threads keep turning, the loop thread leaves the sockets to
//! them: it looks on for `rpc.io.busyPoll` (a short lease, an ask's, then hands them
//! back with no wake-up) and then parks, since two threads polling the same sockets
//! would share the CPUs with everything else for nothing.
//!
//! What the loop thread is doing decides how it learns that it must poll again, and
//! [`Lenders`] keeps the count of leases and that state in one atomic word so that no
//! hand-over is missed (model-checked with loom):
//!
//! - parked: the last lease to end unparks it; a lent thread that stops turning (a runner
//!   in a long task) is noticed when its park times out, within about two
//!   [`LEASE_CHECK`]s, as is whatever is left to it meanwhile (a command, a deadline,
//!   bytes over a turn's read budget);
//! - asleep on its poller while no thread is lent: the first lease wakes it, because
//!   turns taken by lent threads would empty the poller under it, leaving it asleep
//!   until a deadline it computed before (or for ever);
//! - asleep on its poller while threads are lent (but were not turning): it sleeps at
//!   most [`LEASE_CHECK`], and then looks again.
//!
//! A turn that finds the environment stopping wakes the loop thread whatever it is
//! doing: only the loop thread shuts the loop down.
//!
//! Only one thread turns at a time, so endpoints still get one message at a time, and
//! the thread turning is "the loop" for everything the turn does
//! ([`Shared::in_loop_turn`](crate::env::Shared::in_loop_turn)).

use std::cell::RefCell;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use tracing::error;

use crate::env::Shared;
use crate::event_loop::{EventLoop, Turn};
use crate::sync::{AtomicUsize, Ordering};

/// How long the loop thread, when lent threads stop turning the loop, leaves the sockets
/// to them before it polls again itself (it notices within about twice this): the
/// longest a message then waits, while every lent thread is busy with something else.
pub(crate) const LEASE_CHECK: Duration = Duration::from_micros(500);

/// The token of the sleeper's own waker.
const WAKE_SLEEPER: Token = Token(1);

thread_local! {
    /// The environments whose loops this thread is turning right now (a handler of one
    /// may turn another's, through a blocking ask), by address.
    static TURNING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The loop's state and who may turn it.
pub(crate) struct LoopCell {
    /// The loop; `None` once the loop thread has shut it down.
    core: Mutex<Option<EventLoop>>,
    lenders: Lenders,
    /// Turns lent threads took: the loop thread sees from it whether they still turn.
    lent_turns: AtomicU64,
    /// Set by the turn that found the environment stopping, or by a turn that panicked:
    /// from then on only the loop thread turns, to shut it down.
    stopping: std::sync::atomic::AtomicBool,
    loop_thread: OnceLock<Thread>,
    /// Wakes the loop thread from its sleep on [`Sleeper`].
    sleeper_waker: Waker,
}

impl LoopCell {
    /// A cell to be filled by [`LoopCell::install`]; `sleeper_waker` is the
    /// [`Sleeper`]'s.
    pub(crate) fn new(sleeper_waker: Waker) -> Self {
        LoopCell {
            core: Mutex::new(None),
            lenders: Lenders::new(),
            lent_turns: AtomicU64::new(0),
            stopping: std::sync::atomic::AtomicBool::new(false),
            loop_thread: OnceLock::new(),
            sleeper_waker,
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

    fn wake_sleeper(&self) {
        // A failed wake-up can only mean the loop thread is gone.
        let _ = self.sleeper_waker.wake();
    }

    fn lent_turns(&self) -> u64 {
        self.lent_turns.load(std::sync::atomic::Ordering::Acquire)
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The environment stops: the loop thread is woken, whatever it is doing, to shut
    /// it down.
    fn set_stopping(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        self.unpark_loop();
        self.wake_sleeper();
    }
}

/// How many threads are lent to the loop, and whether the loop thread is parked or
/// asleep on its poller: in one word (the count above the two lowest bits, the two
/// states in them), so that every change to any of them is one read-modify-write of one
/// location, and of two changes made at once the second sees the first. Model-checked
/// with loom.
pub(crate) struct Lenders {
    state: AtomicUsize,
}

/// The loop thread is parked, leaving the sockets to lent threads.
const PARKED: usize = 1;
/// The loop thread is asleep on its poller.
const SLEEPING: usize = 2;
/// What one lease adds to [`Lenders::state`].
const LEASE: usize = 4;

impl Lenders {
    pub(crate) fn new() -> Self {
        Lenders {
            state: AtomicUsize::new(0),
        }
    }

    /// A thread is lent; true if the loop thread must be woken from its poller (it went
    /// to sleep there with no thread lent, so for as long as it liked).
    pub(crate) fn lend(&self) -> bool {
        let before = self.state.fetch_add(LEASE, Ordering::AcqRel);
        before < LEASE && before & SLEEPING != 0
    }

    /// Whether any thread is lent.
    pub(crate) fn any(&self) -> bool {
        self.state.load(Ordering::Acquire) >= LEASE
    }

    /// A lease ends; true if it was the last and the loop thread is parked, to be woken.
    pub(crate) fn release(&self) -> bool {
        let before = self.state.fetch_sub(LEASE, Ordering::AcqRel);
        before >> 2 == 1 && before & PARKED != 0
    }

    /// Calls `park` (the loop thread parking itself) unless no thread is lent any more.
    pub(crate) fn park_while_lent(&self, park: impl FnOnce()) {
        let before = self.state.fetch_or(PARKED, Ordering::AcqRel);
        if before >= LEASE {
            park();
        }
        self.state.fetch_and(!PARKED, Ordering::AcqRel);
    }

    /// Calls `sleep` (the loop thread sleeping on its poller), telling it whether threads
    /// are lent: then it must sleep no longer than [`LEASE_CHECK`], since lent threads
    /// may empty its poller under it. With none lent it may sleep as long as it likes:
    /// the first lease wakes it ([`Lenders::lend`]).
    pub(crate) fn sleep_on_poller<R>(&self, sleep: impl FnOnce(bool) -> R) -> R {
        let before = self.state.fetch_or(SLEEPING, Ordering::AcqRel);
        let slept = sleep(before >= LEASE);
        self.state.fetch_and(!SLEEPING, Ordering::AcqRel);
        slept
    }
}

/// Marks this thread as turning `shared`'s loop while it lives.
struct Turning;

impl Turning {
    fn enter(shared: &Shared) -> Self {
        TURNING.with_borrow_mut(|turning| turning.push(shared as *const Shared as usize));
        Turning
    }
}

impl Drop for Turning {
    fn drop(&mut self) {
        TURNING.with_borrow_mut(|turning| turning.pop());
    }
}

/// Whether this thread is turning `shared`'s loop.
pub(crate) fn in_turn(shared: &Shared) -> bool {
    let address = shared as *const Shared as usize;
    TURNING.with_borrow(|turning| turning.contains(&address))
}

/// The second poller, on which the loop thread sleeps: it reports the loop's poller as
/// readable whenever that one has events ready, and has a waker of its own.
pub(crate) struct Sleeper {
    poll: Poll,
    events: Events,
}

impl Sleeper {
    /// A poller watching `poller_fd` (the loop's), and its waker for the [`LoopCell`].
    pub(crate) fn watching(poller_fd: std::os::fd::RawFd) -> std::io::Result<(Self, Waker)> {
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut SourceFd(&poller_fd), Token(0), Interest::READABLE)?;
        let waker = Waker::new(poll.registry(), WAKE_SLEEPER)?;
        let sleeper = Sleeper {
            poll,
            events: Events::with_capacity(4),
        };
        Ok((sleeper, waker))
    }

    /// Sleeps until the watched poller has events ready, the waker wakes it, or
    /// `timeout` passes.
    fn sleep(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self.poll.poll(&mut self.events, timeout) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            result => result,
        }
    }
}

/// On the loop thread's way out, including by a panic: the environment is marked
/// stopping and the loop is shut down and dropped, so that its sockets close and lent
/// threads find it gone (and the loop's own handle on the shared state goes).
struct ShutDownOnExit<'a> {
    shared: &'a Shared,
}

impl Drop for ShutDownOnExit<'_> {
    fn drop(&mut self) {
        let cell = &self.shared.cell;
        cell.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        let mut core = cell.lock();
        if let Some(mut event_loop) = core.take() {
            if !std::thread::panicking() {
                let _turning = Turning::enter(self.shared);
                event_loop.shutdown();
            }
            drop(event_loop);
        }
    }
}

/// The loop thread's body: turns the loop until it stops, then shuts it down.
pub(crate) fn run_loop_thread(shared: Arc<Shared>, mut sleeper: Sleeper) {
    let cell = &shared.cell;
    let _ = cell.loop_thread.set(std::thread::current());
    let _exit = ShutDownOnExit { shared: &shared };
    let busy_poll = shared.settings.busy_poll;
    let mut idle_since: Option<Instant> = None;
    let mut lenders_watch = LendersWatch::default();
    loop {
        if cell.is_stopping() {
            // A lent thread's turn saw the stop (or panicked): shut down.
            break;
        }
        if !cell.lenders.any() {
            lenders_watch.forget(cell.lent_turns());
        } else if lenders_watch.still_turning(cell.lent_turns(), Instant::now()) {
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
            Turn::Stopping => break,
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
        let until_due = wake_at.map(|at| at.saturating_duration_since(now));
        let slept = cell.lenders.sleep_on_poller(|lent| {
            let timeout = if lent {
                Some(until_due.map_or(LEASE_CHECK, |t| t.min(LEASE_CHECK)))
            } else {
                until_due
            };
            sleeper.sleep(timeout)
        });
        if let Err(e) = slept {
            error!("event loop poll failed: {e}");
            break;
        }
        idle_since = None;
    }
}

/// What the loop thread knows of the lent threads' turns.
#[derive(Debug, Default)]
struct LendersWatch {
    /// `lent_turns` when last looked at, and when it was first seen at that count.
    seen_turns: u64,
    moved_at: Option<Instant>,
    /// Since when the loop thread has left the sockets to lent threads.
    deferring_since: Option<Instant>,
}

impl LendersWatch {
    /// Whether lent threads turned the loop within the last [`LEASE_CHECK`] before `now`
    /// (as far as looks at their count of turns, `turns`, tell).
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

    /// No thread is lent: what they turned so far (`turns`) is not a sign that the next
    /// lease turns.
    fn forget(&mut self, turns: u64) {
        self.seen_turns = turns;
        self.moved_at = None;
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

/// Marks the environment stopping if a lent thread's turn panics outside the endpoints'
/// own isolation: the loop's state may be half-updated, and the loop thread shuts it
/// down.
struct StopOnPanic<'a>(&'a LoopCell);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.set_stopping();
        }
    }
}

impl LoopLease {
    /// Lends this thread to `shared`'s loop, waking the loop thread if it sleeps on its
    /// poller for as long as it likes.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        if shared.cell.lenders.lend() {
            shared.cell.wake_sleeper();
        }
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
            let _stop_on_panic = StopOnPanic(cell);
            let _turning = Turning::enter(&self.shared);
            event_loop.turn()
        };
        drop(core);
        match turn {
            Turn::Worked => true,
            Turn::Idle => false,
            Turn::Stopping => {
                // Only the loop thread shuts the loop down.
                cell.set_stopping();
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
    fn turns_before_the_last_lease_ended_do_not_count_for_the_next() {
        let t0 = Instant::now();
        let mut watch = LendersWatch::default();
        assert!(watch.still_turning(5, t0));
        // The lease ends after more turns than the loop thread saw.
        watch.forget(9);
        assert!(!watch.still_turning(9, t0), "the new lease has not turned");
        assert!(watch.still_turning(10, t0), "now it has");
    }

    #[test]
    fn only_the_last_lease_wakes_a_parked_loop_thread() {
        let lenders = Lenders::new();
        assert!(!lenders.lend());
        assert!(!lenders.lend());
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

    #[test]
    fn the_first_lease_wakes_a_loop_thread_asleep_on_its_poller() {
        let lenders = Lenders::new();
        let bounded = lenders.sleep_on_poller(|lent| {
            assert!(lenders.lend(), "the first lease must wake it");
            assert!(!lenders.lend(), "one wake-up is enough");
            lent
        });
        assert!(!bounded, "it went to sleep with no thread lent");
        assert!(
            lenders.sleep_on_poller(|lent| lent),
            "threads lent: bounded"
        );
        lenders.release();
        lenders.release();
        assert!(
            !lenders.sleep_on_poller(|lent| lent),
            "none lent again: unbounded"
        );
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

    /// The loop thread goes to sleep on its poller while two threads lend themselves:
    /// an unbounded sleep (modelled as parking) is always ended by a lease, and a lease
    /// taken before it makes the sleep bounded (it returns by itself).
    #[test]
    fn loom_a_lease_never_leaves_the_loop_thread_asleep_for_ever() {
        loom::model(|| {
            let lenders = Arc::new(Lenders::new());
            let loop_thread = loom::thread::current();
            let lending: Vec<_> = (0..2)
                .map(|_| {
                    let (lenders, loop_thread) = (lenders.clone(), loop_thread.clone());
                    loom::thread::spawn(move || {
                        if lenders.lend() {
                            loop_thread.unpark();
                        }
                    })
                })
                .collect();
            lenders.sleep_on_poller(|lent| {
                if !lent {
                    loom::thread::park();
                }
            });
            for lender in lending {
                lender.join().unwrap();
            }
            assert!(lenders.any());
        });
    }
}
