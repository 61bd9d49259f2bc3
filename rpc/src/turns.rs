//! Who turns the event loop: its own thread, and threads lent to it.
//!
//! The loop's state sits behind a lock, and one turn of it ([`EventLoop::turn`]) never
//! blocks: whichever thread holds the lock takes what the poller has ready and handles
//! it. The loop thread turns it, keeps turning for `rpc.io.busyPoll` after its last
//! work, and then sleeps on a second poller that watches the first one's descriptor, so
//! that it sleeps without holding the loop.
//!
//! A thread that waits for something the loop will bring (an executor's task runner
//! waiting for its next task) can lend itself to the loop ([`LoopLease`]) and turn it
//! whenever nobody else does: it then takes what it waits for straight from the socket,
//! without the loop thread in between (one hand-off between threads fewer, which on a
//! virtual machine is the larger part of a round trip on loopback). While lent threads
//! keep turning, the loop thread leaves the sockets to them: it looks on for
//! `rpc.io.busyPoll` (a lease that ends within it hands them back with no wake-up) and
//! then parks, since two threads polling the same sockets would share the CPUs with
//! everything else for nothing.
//!
//! The hand-overs between them ([`Handover`], model-checked with loom):
//!
//! - the loop thread parked: the last lease to end unparks it; lent threads that stop
//!   turning (a runner in a long task) are noticed when its park times out, within about
//!   two [`LEASE_CHECK`]s, and so is whatever is left to them meanwhile (a command, a
//!   deadline, bytes over a turn's read budget);
//! - the loop thread asleep on its poller, until its own next deadline: lent turns empty
//!   the poller under it, so it would not wake for what they leave behind. A lent turn
//!   that ends with an earlier deadline than the one the loop thread sleeps to (or bytes
//!   left to read) wakes it, and a loop thread about to sleep goes round once more
//!   instead if a lent turn came after its own. The first lease wakes it too, so that it
//!   parks rather than being woken by each event the lent threads take;
//! - a turn that finds the environment stopping wakes it whatever it is doing: only the
//!   loop thread shuts the loop down.
//!
//! A lent thread that stops turning may also have left frames queued for a flush of its
//! own that is now far off (a runner's deferred status update, before a long task): the
//! loop thread, once it has taken the sockets back, writes what outboxes hold before it
//! sleeps (and every [`LENT_FLUSH_CHECK`] of a longer `rpc.io.busyPoll`), and while the
//! lease lasts sleeps at most [`LENT_FLUSH_CHECK`] at a time to look again.
//!
//! Only one thread turns at a time, so endpoints still get one message at a time, and
//! the thread turning is "the loop" for everything the turn does
//! ([`Shared::in_loop_turn`](crate::shared::Shared::in_loop_turn)).
//!
//! The [`LoopCell`] holds the loop; the loop thread and the leases hold the cell. The
//! shared state knows the cell only weakly and without its type (see
//! [`Shared::loop_cell`](crate::shared::Shared::loop_cell)): [`RpcEnvHandle::lend`]
//! finds it there once per lease, and every turn after that goes straight to it.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use tracing::error;

use crate::event_loop::{EventLoop, Turn};
use crate::refs::RpcEnvHandle;
use crate::shared::{Shared, Turning};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// How long the loop thread, when lent threads stop turning the loop, leaves the sockets
/// to them before it polls again itself (it notices within about twice this): the
/// longest a message then waits, while every lent thread is busy with something else.
pub(crate) const LEASE_CHECK: Duration = Duration::from_micros(500);

/// How often the loop thread, while a lent thread is busy with something else, writes
/// what that thread queued and has not flushed: about the longest such a frame waits
/// then (after the loop thread noticed, within two [`LEASE_CHECK`]s, that the lent
/// thread stopped turning). Each look costs a wake-up and a turn.
pub(crate) const LENT_FLUSH_CHECK: Duration = Duration::from_millis(5);

/// The token of the sleeper's own waker.
const WAKE_SLEEPER: Token = Token(1);

/// The loop's state and who may turn it.
pub(crate) struct LoopCell {
    /// The loop; `None` once the loop thread has shut it down.
    core: Mutex<Option<EventLoop>>,
    handover: Handover,
    /// What the loop thread's planned wake-ups are counted from.
    epoch: Instant,
    /// Set by the turn that found the environment stopping, by a lent turn that
    /// panicked, or by the loop thread on its way out: from then on only the loop thread
    /// turns, to shut the loop down.
    stopping: AtomicBool,
    loop_thread: OnceLock<Thread>,
    /// Wakes the loop thread from its sleep on [`Sleeper`] (shared with the hand-off's
    /// notifier).
    sleeper_waker: Arc<Waker>,
}

impl LoopCell {
    /// A cell to be filled by [`LoopCell::install`]; `sleeper_waker` is the
    /// [`Sleeper`]'s.
    pub(crate) fn new(sleeper_waker: Arc<Waker>) -> Self {
        LoopCell {
            core: Mutex::new(None),
            handover: Handover::new(),
            epoch: Instant::now(),
            stopping: AtomicBool::new(false),
            loop_thread: OnceLock::new(),
            sleeper_waker,
        }
    }

    /// Puts the loop in the cell.
    pub(crate) fn install(&self, event_loop: EventLoop) {
        *self.lock() = Some(event_loop);
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

    /// `at` as a planned wake-up: nanoseconds since the cell's epoch; never as `u64::MAX`.
    fn wake_code(&self, at: Option<Instant>) -> u64 {
        at.map_or(u64::MAX, |at| {
            u64::try_from(at.saturating_duration_since(self.epoch).as_nanos())
                .unwrap_or(u64::MAX - 1)
        })
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// The environment stops: the loop thread is woken, whatever it is doing, to shut
    /// it down.
    fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
        self.unpark_loop();
        self.wake_sleeper();
    }
}

/// What the loop thread and lent threads tell each other: how many threads are lent,
/// whether the loop thread is parked or asleep on its poller and until when, and how
/// many turns lent threads took. Model-checked with loom.
///
/// The count of leases and the two states share one word (the count above the two
/// lowest bits), so that every change to any of them is one read-modify-write of one
/// location: of two changes made at once, the second sees the first.
pub(crate) struct Handover {
    state: AtomicUsize,
    /// Turns lent threads took, counted under the loop's lock.
    lent_turns: AtomicU64,
    /// When the loop thread, asleep on its poller, wakes by itself (see
    /// [`LoopCell::wake_code`]).
    planned_wake: AtomicU64,
}

/// The loop thread is parked, leaving the sockets to lent threads.
const PARKED: usize = 1;
/// The loop thread is asleep on its poller.
const SLEEPING: usize = 2;
/// What one lease adds to [`Handover::state`].
const LEASE: usize = 4;

impl Handover {
    pub(crate) fn new() -> Self {
        Handover {
            state: AtomicUsize::new(0),
            lent_turns: AtomicU64::new(0),
            planned_wake: AtomicU64::new(u64::MAX),
        }
    }

    /// A thread is lent; true if the loop thread sleeps on its poller and this is the
    /// first lease, to be woken (so that it parks instead).
    pub(crate) fn lend(&self) -> bool {
        let before = self.state.fetch_add(LEASE, Ordering::AcqRel);
        before < LEASE && before & SLEEPING != 0
    }

    /// Whether any thread is lent.
    pub(crate) fn any_lent(&self) -> bool {
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

    /// Turns lent threads took so far: the loop thread reads it under the loop's lock,
    /// after its own turn.
    pub(crate) fn lent_turns(&self) -> u64 {
        self.lent_turns.load(Ordering::Acquire)
    }

    /// A lent thread took a turn: counted under the loop's lock, at the turn's end.
    pub(crate) fn count_lent_turn(&self) {
        self.lent_turns.fetch_add(1, Ordering::AcqRel);
    }

    /// The loop thread calls `sleep` (sleeping on its poller until `planned`, a
    /// [`LoopCell::wake_code`]) unless a lent thread turned the loop since it saw
    /// `seen_turns` after its own turn: that turn may have left an earlier deadline, or
    /// bytes to read, that its planned sleep does not know of. Nor does it sleep if a
    /// thread was lent since it looked (`lent_seen` false): it planned its sleep without
    /// the lease's bound (`LENT_FLUSH_CHECK`), and the lease, taken before it was asleep,
    /// did not wake it. `None` if it did not sleep.
    pub(crate) fn sleep_unless_turned<R>(
        &self,
        seen_turns: u64,
        lent_seen: bool,
        planned: u64,
        sleep: impl FnOnce() -> R,
    ) -> Option<R> {
        self.planned_wake.store(planned, Ordering::Release);
        let before = self.state.fetch_or(SLEEPING, Ordering::AcqRel);
        let unseen_lease = before >= LEASE && !lent_seen;
        let slept = (!unseen_lease && self.lent_turns() == seen_turns).then(sleep);
        self.state.fetch_and(!SLEEPING, Ordering::AcqRel);
        slept
    }

    /// A lent thread's turn ended (the loop's lock released) with the loop due to turn
    /// again by `wake` (a [`LoopCell::wake_code`]): true if the loop thread sleeps on its
    /// poller past it, to be woken.
    pub(crate) fn must_wake_sleeper(&self, wake: u64) -> bool {
        // A read-modify-write, not a load: ordered with the loop thread's going to sleep,
        // so that either this sees it asleep, or it sees this turn counted and stays up.
        let state = self.state.fetch_add(0, Ordering::AcqRel);
        state & SLEEPING != 0 && wake < self.planned_wake.load(Ordering::Acquire)
    }
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
    /// `timeout` passes; whether anything woke it before the timeout (a signal counts).
    fn sleep(&mut self, timeout: Option<Duration>) -> std::io::Result<bool> {
        match self.poll.poll(&mut self.events, timeout) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e),
            Ok(()) => Ok(!self.events.is_empty()),
        }
    }
}

/// On the loop thread's way out: the environment is marked stopping, and the loop is
/// shut down (unless the thread is panicking: its state may be half-updated) and
/// dropped, so that its sockets close, lent threads find it gone, and the loop's own
/// handle on the shared state goes; commands still queued and asks still waiting are
/// refused, after a panic too.
struct ShutDownOnExit<'a> {
    shared: &'a Shared,
    cell: &'a LoopCell,
}

impl Drop for ShutDownOnExit<'_> {
    fn drop(&mut self) {
        let cell = self.cell;
        cell.stopping.store(true, Ordering::Release);
        let mut core = cell.lock();
        if let Some(mut event_loop) = core.take() {
            if !std::thread::panicking() {
                let _turning = Turning::enter(self.shared);
                event_loop.shutdown();
            }
            drop(event_loop);
        }
        drop(core);
        // After a panic the loop did not shut down: refuse sends, and answer whoever
        // waits for it (a no-op after a shutdown, which did the same).
        self.shared.stopped.store(true, Ordering::Release);
        self.shared.refuse_the_rest();
    }
}

/// Whether an idle loop busy-polls (rpc.io.busyPoll) before it sleeps.
///
/// A busy poll pays when the next event comes within it: a reply a round trip away, the
/// next status of a stream of tasks. Under sparse traffic (heartbeats of a thousand
/// executors, a millisecond apart) every poll runs out, and the loop spends the whole
/// poll once per event for nothing: 50 us at a thousand events a second is 5 % of a CPU.
/// So after [`SpinPolicy::GIVE_UP_AFTER`] polls in a row ran out, the loop sleeps at
/// once, until a sleep shorter than [`SpinPolicy::SHORT_SLEEP_POLLS`] polls shows that
/// events come close together again.
#[derive(Debug, Default)]
pub(crate) struct SpinPolicy {
    /// Busy polls in a row that ran out with nothing found.
    wasted: u32,
    /// How long the last sleep lasted.
    last_sleep: Option<Duration>,
}

impl SpinPolicy {
    /// Polls in a row that may run out before the loop stops polling.
    pub(crate) const GIVE_UP_AFTER: u32 = 16;
    /// A sleep shorter than this many busy polls means events come close together.
    pub(crate) const SHORT_SLEEP_POLLS: u32 = 4;

    /// Whether to busy-poll now that the loop found nothing to do.
    pub(crate) fn should_poll(&self, busy_poll: Duration) -> bool {
        self.wasted < Self::GIVE_UP_AFTER
            || self
                .last_sleep
                .is_some_and(|slept| slept < busy_poll.saturating_mul(Self::SHORT_SLEEP_POLLS))
    }

    /// A busy poll found work.
    pub(crate) fn poll_found_work(&mut self) {
        self.wasted = 0;
    }

    /// A busy poll ran out with nothing found.
    pub(crate) fn poll_ran_out(&mut self) {
        self.wasted = self.wasted.saturating_add(1);
    }

    /// The loop slept this long.
    pub(crate) fn slept(&mut self, slept: Duration) {
        self.last_sleep = Some(slept);
    }
}

/// The loop thread's body: turns the loop until it stops, then shuts it down.
pub(crate) fn run_loop_thread(shared: Arc<Shared>, cell: Arc<LoopCell>, mut sleeper: Sleeper) {
    let cell = &*cell;
    let handover = &cell.handover;
    let _ = cell.loop_thread.set(std::thread::current());
    let _exit = ShutDownOnExit {
        shared: &shared,
        cell,
    };
    let busy_poll = shared.settings.busy_poll;
    let mut idle_since: Option<Instant> = None;
    // The last sleep ended at the lent check's time with nothing ready.
    let mut check_only = false;
    // When the current busy poll last wrote a lent thread's frames.
    let mut lent_flushed_at: Option<Instant> = None;
    let mut lenders_watch = LendersWatch::default();
    let mut spin = SpinPolicy::default();
    // Whether the loop busy-polled since it last worked.
    let mut polled = false;
    loop {
        if cell.is_stopping() {
            // A lent thread's turn saw the stop (or panicked): shut down.
            break;
        }
        let now = Instant::now();
        if !handover.any_lent() {
            lenders_watch.forget(handover.lent_turns());
        } else if lenders_watch.still_turning(handover.lent_turns(), now) {
            // Lent threads turn the loop: leave the sockets to them. For
            // rpc.io.busyPoll look again and again (a lease that ends within it hands
            // them back with no wake-up), then park until the last lease ends (it
            // unparks this thread), or for LEASE_CHECK.
            if lenders_watch.deferring_for(now) < busy_poll {
                std::thread::yield_now();
            } else {
                handover.park_while_lent(|| std::thread::park_timeout(LEASE_CHECK));
            }
            continue;
        }
        lenders_watch.stop_deferring();
        let (turn, wake_at, seen_turns) = {
            let mut core = cell.lock();
            let Some(core) = core.as_mut() else {
                return;
            };
            let _turning = Turning::enter(&shared);
            let turn = core.turn();
            (turn, core.next_wake(), handover.lent_turns())
        };
        match turn {
            Turn::Stopping => break,
            Turn::Worked => {
                if polled {
                    spin.poll_found_work();
                    polled = false;
                }
                idle_since = None;
                lent_flushed_at = None;
                check_only = false;
                continue;
            }
            Turn::Idle => {}
        }
        let now = Instant::now();
        // While a thread is lent but no longer turning the loop, it is busy with something
        // else (a task runner in a long task), and frames it queued for its own flush (a
        // quick task's status update) would wait for the end of that: this thread writes
        // them before it sleeps (not as soon as it finds nothing to do, which would cut a
        // runner's batches of updates short), and looks again every LENT_FLUSH_CHECK
        // while the lease lasts.
        let lent = handover.any_lent();
        let mut wake_at = wake_at;
        let since = *idle_since.get_or_insert(now);
        if !check_only
            && (polled || spin.should_poll(busy_poll))
            && now.saturating_duration_since(since) < busy_poll
        {
            polled = true;
            // A long rpc.io.busyPoll does not hold them back for longer than a sleep would.
            let last = lent_flushed_at.unwrap_or(since);
            if lent && now.saturating_duration_since(last) >= LENT_FLUSH_CHECK {
                flush_for_lent(&shared, cell);
                lent_flushed_at = Some(now);
            }
            std::thread::yield_now();
            continue;
        }
        if lent {
            wake_at = flush_for_lent(&shared, cell).unwrap_or(wake_at);
            let check = now + LENT_FLUSH_CHECK;
            wake_at = Some(wake_at.map_or(check, |at| at.min(check)));
        }
        if polled {
            spin.poll_ran_out();
            polled = false;
        }
        let timeout = wake_at.map(|at| at.saturating_duration_since(now));
        let sleep_started = Instant::now();
        let slept = shared
            .handoff
            .sleep_unless_pending(|| {
                handover.sleep_unless_turned(seen_turns, lent, cell.wake_code(wake_at), || {
                    sleeper.sleep(timeout)
                })
            })
            .flatten();
        let woken = match slept {
            Some(Err(e)) => {
                error!("event loop poll failed: {e}");
                break;
            }
            Some(Ok(woken)) => woken,
            None => true,
        };
        spin.slept(sleep_started.elapsed());
        // Woken by the lent check alone: if the turn finds nothing, back to sleep at once
        // rather than after a whole rpc.io.busyPoll.
        check_only = lent && !woken;
        idle_since = None;
        lent_flushed_at = None;
    }
}

/// Writes what the loop's outboxes hold for a lent thread busy elsewhere (see
/// [`EventLoop::flush_queued`]); the loop's next wake-up after it (a connection it closed
/// may have moved it), or `None` if the loop is gone.
fn flush_for_lent(shared: &Shared, cell: &LoopCell) -> Option<Option<Instant>> {
    // Frames lent threads keep to send together are queued first, to leave with the rest.
    for (_, hook) in &shared
        .lent_flush_hooks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .hooks
    {
        hook();
    }
    let mut core = cell.lock();
    let core = core.as_mut()?;
    let _turning = Turning::enter(shared);
    core.flush_queued();
    Some(core.next_wake())
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
    /// `None` if the loop thread had ended, and its cell was gone, before the lease was
    /// taken: there is no loop left to turn.
    cell: Option<Arc<LoopCell>>,
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
    fn new(shared: Arc<Shared>) -> Self {
        // The only cell ever put there is a LoopCell (see RpcEnv::with_settings).
        let cell = shared.loop_cell.upgrade().and_then(|cell| {
            let cell: Arc<dyn Any + Send + Sync> = cell;
            cell.downcast::<LoopCell>().ok()
        });
        if let Some(cell) = &cell {
            if cell.handover.lend() {
                cell.wake_sleeper();
            }
        }
        LoopLease { shared, cell }
    }

    /// Turns the loop once on this thread, unless another thread is turning it: takes
    /// what the sockets have ready and handles it, as the loop thread would (endpoints
    /// run here, for this turn). Never blocks. Returns whether the turn handled
    /// anything.
    pub fn turn(&self) -> bool {
        let Some(cell) = self.cell.as_deref() else {
            return false;
        };
        if cell.is_stopping() {
            return false;
        }
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
        let wake_at = event_loop.next_wake();
        cell.handover.count_lent_turn();
        drop(core);
        match turn {
            Turn::Worked => {
                if cell.handover.must_wake_sleeper(cell.wake_code(wake_at)) {
                    cell.wake_sleeper();
                }
                true
            }
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
        let Some(cell) = &self.cell else {
            return;
        };
        if cell.handover.release() {
            // Nobody polls the sockets any more: the loop thread goes back to it.
            cell.unpark_loop();
        }
    }
}

impl RpcEnvHandle {
    /// Lends this thread to the event loop while it waits for something the loop will
    /// bring: each [`LoopLease::turn`] turns the loop on this thread if no other thread
    /// is turning it, so that what the thread waits for reaches it without a hand-off
    /// from the loop thread. While lent threads keep turning, the loop thread leaves the
    /// sockets to them; it takes them back when the last lease is dropped, or within
    /// about a millisecond once lent threads stop turning.
    ///
    /// For a thread that would otherwise poll for its work (a task runner between
    /// tasks): it then polls the sockets instead, and the loop thread does not. While the
    /// lease lasts and the thread does something else, the loop thread writes what the
    /// thread sent deferred without waiting for its flush, looking every few
    /// milliseconds. Endpoint
    /// handlers then run on this thread: lend only a thread that holds no lock a handler
    /// takes, to an environment whose handlers do not block (a blocked handler holds up
    /// the lent thread as it would the loop thread).
    pub fn lend(&self) -> LoopLease {
        LoopLease::new(self.shared.clone())
    }

    /// Runs `hook` on the loop thread each time it writes, for lent threads busy with
    /// something else, what they sent deferred and did not flush (see
    /// [`RpcEnvHandle::lend`]). For a lent thread that keeps messages of its own to send
    /// together (a task runner's status updates, sent as one frame), whose last ones
    /// would otherwise wait for the end of what it does next: `hook` sends them
    /// deferred, and they leave with the rest.
    ///
    /// `hook` runs with the loop's turn not taken, and must not block: the loop waits for
    /// it (a hook that finds the lent thread's messages locked leaves them to it). It runs
    /// until the returned [`LentFlushHook`] is dropped.
    pub fn on_lent_flush(&self, hook: impl Fn() + Send + Sync + 'static) -> LentFlushHook {
        let mut hooks = self
            .shared
            .lent_flush_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let id = hooks.next;
        hooks.next += 1;
        hooks.hooks.push((id, Box::new(hook)));
        LentFlushHook {
            shared: Arc::downgrade(&self.shared),
            id,
        }
    }
}

/// A hook added with [`RpcEnvHandle::on_lent_flush`]: dropping it removes the hook, once
/// a run of it that is under way has ended, so that nothing the hook holds (weakly) is
/// reached from the loop thread afterwards.
#[must_use = "the hook is removed when this is dropped"]
pub struct LentFlushHook {
    shared: std::sync::Weak<Shared>,
    id: u64,
}

impl std::fmt::Debug for LentFlushHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentFlushHook")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for LentFlushHook {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared
                .lent_flush_hooks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .hooks
                .retain(|(id, _)| *id != self.id);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn busy_polls_stop_when_they_keep_running_out_and_resume_when_events_come_close() {
        let busy_poll = Duration::from_micros(50);
        let mut spin = SpinPolicy::default();
        // Heartbeats a millisecond apart: every poll runs out.
        for _ in 0..SpinPolicy::GIVE_UP_AFTER {
            assert!(spin.should_poll(busy_poll));
            spin.poll_ran_out();
            spin.slept(Duration::from_millis(1));
        }
        assert!(
            !spin.should_poll(busy_poll),
            "sleeps at once under sparse traffic"
        );
        // One poll that finds work is not enough to be given up on.
        let mut lucky = SpinPolicy::default();
        for _ in 0..SpinPolicy::GIVE_UP_AFTER - 1 {
            lucky.poll_ran_out();
        }
        lucky.poll_found_work();
        lucky.poll_ran_out();
        assert!(lucky.should_poll(busy_poll));
        // A stream of tasks starts: a short sleep brings the polls back...
        spin.slept(Duration::from_micros(150));
        assert!(spin.should_poll(busy_poll));
        // ...and one that finds work keeps them, whatever the next sleep.
        spin.poll_found_work();
        spin.slept(Duration::from_secs(1));
        assert!(spin.should_poll(busy_poll));
        // rpc.io.busyPoll=0: the window is empty, the policy changes nothing.
        assert!(!SpinPolicy {
            wasted: SpinPolicy::GIVE_UP_AFTER,
            last_sleep: Some(Duration::ZERO),
        }
        .should_poll(Duration::ZERO));
    }

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
        let handover = Handover::new();
        assert!(!handover.lend());
        assert!(!handover.lend());
        assert!(handover.any_lent());
        let mut parked = false;
        handover.park_while_lent(|| parked = true);
        assert!(parked, "parks while threads are lent");
        assert!(!handover.release(), "another lease is left");
        handover.park_while_lent(|| {
            // Released while parked: the last lease reports it.
            assert!(handover.release());
        });
        assert!(!handover.any_lent());
        let mut parked = false;
        handover.park_while_lent(|| parked = true);
        assert!(!parked, "nothing lent: no parking");
    }

    #[test]
    fn the_first_lease_wakes_a_loop_thread_asleep_on_its_poller() {
        let handover = Handover::new();
        let slept = handover.sleep_unless_turned(0, false, u64::MAX, || {
            assert!(handover.lend(), "the first lease wakes it");
            assert!(!handover.lend(), "one wake-up is enough");
        });
        assert!(slept.is_some());
        assert!(!handover.lend(), "awake: nobody to wake");
    }

    #[test]
    fn a_lent_turn_wakes_the_sleeper_only_for_an_earlier_wake_up() {
        let handover = Handover::new();
        assert!(!handover.must_wake_sleeper(5), "nobody asleep");
        handover.sleep_unless_turned(0, false, 100, || {
            assert!(
                handover.must_wake_sleeper(99),
                "due before the planned wake-up"
            );
            assert!(!handover.must_wake_sleeper(100));
            assert!(!handover.must_wake_sleeper(u64::MAX), "nothing due");
        });
        handover.sleep_unless_turned(0, false, u64::MAX, || {
            assert!(handover.must_wake_sleeper(7), "the sleeper had no deadline");
        });
        assert!(!handover.must_wake_sleeper(1), "awake again");
    }

    #[test]
    fn the_loop_thread_does_not_sleep_after_a_lent_turn_it_did_not_see() {
        let handover = Handover::new();
        let seen = handover.lent_turns();
        handover.count_lent_turn();
        assert_eq!(
            handover.sleep_unless_turned(seen, false, u64::MAX, || ()),
            None
        );
        let seen = handover.lent_turns();
        assert_eq!(
            handover.sleep_unless_turned(seen, false, u64::MAX, || ()),
            Some(())
        );
    }

    #[test]
    fn the_loop_thread_does_not_sleep_past_a_lease_it_did_not_see() {
        let handover = Handover::new();
        // Lent after the loop thread looked, before it was asleep: no wake-up comes.
        assert!(!handover.lend());
        assert_eq!(
            handover.sleep_unless_turned(0, false, u64::MAX, || ()),
            None
        );
        // Seen: its sleep was planned for the lease.
        assert_eq!(handover.sleep_unless_turned(0, true, 5, || ()), Some(()));
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::{Arc, Mutex};

    /// The loop thread parks while two leases end on other threads: whatever the
    /// interleaving, the last one to end wakes it (loom reports a thread parked forever
    /// as a deadlock).
    #[test]
    fn loom_the_last_lease_to_end_wakes_the_parked_loop_thread() {
        loom::model(|| {
            let handover = Arc::new(Handover::new());
            handover.lend();
            handover.lend();
            let loop_thread = loom::thread::current();
            let releasers: Vec<_> = (0..2)
                .map(|_| {
                    let (handover, loop_thread) = (handover.clone(), loop_thread.clone());
                    loom::thread::spawn(move || {
                        if handover.release() {
                            loop_thread.unpark();
                        }
                    })
                })
                .collect();
            handover.park_while_lent(loom::thread::park);
            for releaser in releasers {
                releaser.join().unwrap();
            }
            assert!(!handover.any_lent());
        });
    }

    /// A lent thread takes a turn of the loop (under the loop's lock) that leaves a
    /// deadline due, and ends its lease, while the loop thread takes its own turn and
    /// goes to sleep on its poller, with no deadline unless its turn came after the lent
    /// one (a sleep with none is modelled as parking): whatever the interleaving, the
    /// loop thread either sees the lent turn and stays up, or is woken by it.
    #[test]
    fn loom_a_lent_turn_never_leaves_the_loop_thread_asleep_past_its_deadline() {
        loom::model(|| {
            let handover = Arc::new(Handover::new());
            let core = Arc::new(Mutex::new(()));
            let loop_thread = loom::thread::current();
            let lender = {
                let (handover, core, loop_thread) =
                    (handover.clone(), core.clone(), loop_thread.clone());
                loom::thread::spawn(move || {
                    if handover.lend() {
                        loop_thread.unpark();
                    }
                    {
                        let _turn = core.lock().unwrap();
                        handover.count_lent_turn();
                    }
                    // The turn left something due at time 10.
                    if handover.must_wake_sleeper(10) {
                        loop_thread.unpark();
                    }
                    if handover.release() {
                        loop_thread.unpark();
                    }
                })
            };
            // The loop thread's own turn, under the same lock: when it comes after the
            // lent one, it sees what that left due, and plans to wake for it.
            let seen = {
                let _turn = core.lock().unwrap();
                handover.lent_turns()
            };
            let planned = if seen == 1 { 10 } else { u64::MAX };
            handover.sleep_unless_turned(seen, false, planned, || {
                // A sleep with a deadline ends by itself; one without only when woken.
                if planned == u64::MAX {
                    loom::thread::park();
                }
            });
            lender.join().unwrap();
        });
    }

    /// A thread is lent while the loop thread, having found none, goes to sleep with no
    /// deadline (modelled as parking); with one seen it sleeps a bounded time (not
    /// modelled: it ends by itself). Whatever the interleaving, it is never left asleep
    /// without a bound while the lease lasts: the lease either wakes it, or is seen as it
    /// goes to sleep and keeps it up.
    #[test]
    fn loom_a_lease_taken_as_the_loop_thread_goes_to_sleep_is_never_missed() {
        loom::model(|| {
            let handover = Arc::new(Handover::new());
            let loop_thread = loom::thread::current();
            let lender = {
                let (handover, loop_thread) = (handover.clone(), loop_thread.clone());
                loom::thread::spawn(move || {
                    if handover.lend() {
                        loop_thread.unpark();
                    }
                })
            };
            let lent = handover.any_lent();
            handover.sleep_unless_turned(0, lent, u64::MAX, || {
                if !lent {
                    loom::thread::park();
                }
            });
            lender.join().unwrap();
        });
    }
}
