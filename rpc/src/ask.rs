//! Bookkeeping of outstanding asks: request ids, deadlines, and the one-shot slots that
//! askers wait on.
//!
//! An ask ends in exactly one way: a reply, its timeout, or the loss of its connection,
//! whichever is first. The [`PendingAsks`] table is the arbiter: whoever takes the entry
//! out completes it, and nobody else can. [`ReplySlot`] hands the result to the waiting
//! thread. [`start`] registers an ask and sends it so that its asker sees one outcome even
//! when the send fails because the connection was lost at that moment. All three are
//! model-checked with loom, with the endings racing on threads. What a successful ask
//! gets back is a [`Reply`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use std::ops::DerefMut;
use std::time::{Duration, Instant};

use flint_wire::{ArchivedMessage, Frame, Message};
use rkyv::rancor;

use crate::sync::{AtomicBool, Condvar, Mutex, Ordering};

/// The answer to an ask: the reply frame, kept whole so the message is read in place.
#[derive(Debug, Clone)]
pub struct Reply {
    pub(crate) frame: Frame,
}

impl Reply {
    /// The reply message.
    pub fn message(&self) -> &ArchivedMessage {
        // The frame was validated when it arrived and its bytes are immutable.
        &self
            .frame
            .envelope()
            .expect("a reply frame is validated on receipt")
            .message
    }

    /// The frame, for zero-copy views of the reply's blobs.
    pub fn frame(&self) -> &Frame {
        &self.frame
    }

    /// The reply as an owned [`Message`].
    pub fn to_message(&self) -> Message {
        rkyv::deserialize::<Message, rancor::Error>(self.message())
            .expect("a validated message deserializes")
    }
}

/// A one-shot cell: completed once, taken once by the thread waiting on it.
#[derive(Debug)]
pub struct ReplySlot<T> {
    state: Mutex<Guarded<T>>,
    ready: Condvar,
    /// Set once the slot is completed: lets a waiter spin without taking the lock.
    done: AtomicBool,
}

/// How long a waiter spins (yielding) for its value before it sleeps. A reply on a fast
/// path comes back within tens of microseconds; waking a sleeping thread costs about as
/// much again, which is what spinning saves.
#[cfg(not(loom))]
const SPIN: Duration = Duration::from_micros(250);

#[derive(Debug)]
struct Guarded<T> {
    state: SlotState<T>,
    /// Waiters asleep on the condition variable. Only when there are any does completing
    /// the slot notify: a notification is a system call even with nobody waiting, and a
    /// waiter that spins for its reply (the fast path) needs none.
    sleepers: u32,
}

#[derive(Debug)]
enum SlotState<T> {
    Waiting,
    Done(T),
    Taken,
}

impl<T> Default for ReplySlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ReplySlot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        ReplySlot {
            state: Mutex::new(Guarded {
                state: SlotState::Waiting,
                sleepers: 0,
            }),
            ready: Condvar::new(),
            done: AtomicBool::new(false),
        }
    }

    /// Stores `value` if the slot is still empty; returns whether it did.
    pub fn complete(&self, value: T) -> bool {
        let mut guarded = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(guarded.state, SlotState::Waiting) {
            return false;
        }
        guarded.state = SlotState::Done(value);
        self.done.store(true, Ordering::Release);
        let sleeping = guarded.sleepers > 0;
        drop(guarded);
        if sleeping {
            self.ready.notify_all();
        }
        true
    }

    /// Blocks until the slot is completed, then takes the value. Returns `None` if it
    /// was already taken.
    pub fn wait(&self) -> Option<T> {
        self.wait_inner(None)
    }

    /// As [`ReplySlot::wait`], but gives up at `deadline`: `None` then, or if the value
    /// was already taken.
    pub fn wait_until(&self, deadline: Instant) -> Option<T> {
        self.wait_inner(Some(deadline))
    }

    fn wait_inner(&self, deadline: Option<Instant>) -> Option<T> {
        #[cfg(not(loom))]
        {
            let start = Instant::now();
            let spin_until = deadline.map_or(SPIN, |d| d.saturating_duration_since(start));
            while !self.done.load(Ordering::Acquire) && start.elapsed() < spin_until.min(SPIN) {
                std::thread::yield_now();
            }
        }
        let mut guarded = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match std::mem::replace(&mut guarded.state, SlotState::Taken) {
                SlotState::Waiting => {
                    guarded.state = SlotState::Waiting;
                    let timeout = match deadline {
                        None => None,
                        Some(deadline) => {
                            let now = Instant::now();
                            if now >= deadline {
                                return None;
                            }
                            Some(deadline - now)
                        }
                    };
                    // Counted under the lock that `complete` takes, so that it either
                    // sees the sleeper or completes before the waiter looks again.
                    guarded.sleepers += 1;
                    guarded = match timeout {
                        None => self.ready.wait(guarded).unwrap_or_else(|e| e.into_inner()),
                        Some(timeout) => {
                            self.ready
                                .wait_timeout(guarded, timeout)
                                .unwrap_or_else(|e| e.into_inner())
                                .0
                        }
                    };
                    guarded.sleepers -= 1;
                }
                SlotState::Done(value) => return Some(value),
                SlotState::Taken => return None,
            }
        }
    }
}

/// One outstanding ask.
#[derive(Debug)]
pub struct PendingAsk<C, K> {
    /// The timeout it was given, for the error text.
    pub timeout: Duration,
    /// The connection it travels on, so that losing the connection fails it at once.
    pub connection: K,
    /// What to complete when it ends.
    pub completion: C,
}

/// A registered ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// Its request id.
    pub id: u64,
    /// Whether its deadline comes before the loop would next wake up by itself, so the
    /// loop must be woken to arm its timeout (see [`PendingAsks::loop_sleeps_until`]).
    pub wake_loop: bool,
}

/// Outstanding asks by request id, with their deadlines.
#[derive(Debug)]
pub struct PendingAsks<C, K> {
    next_id: u64,
    entries: FxHashMap<u64, PendingAsk<C, K>>,
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// When the loop last said it would wake up by itself; `None`: only when woken.
    loop_wakes_at: Option<Instant>,
}

impl<C, K: PartialEq + Copy> Default for PendingAsks<C, K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C, K: PartialEq + Copy> PendingAsks<C, K> {
    /// An empty table.
    pub fn new() -> Self {
        PendingAsks {
            next_id: 1,
            entries: FxHashMap::default(),
            deadlines: BinaryHeap::new(),
            loop_wakes_at: None,
        }
    }

    /// The loop, at the end of a turn that worked (on whichever thread turned it), says
    /// by when it turns again without being woken (`None`: only when woken). It says so
    /// under
    /// the same lock as [`PendingAsks::register`], having read
    /// [`PendingAsks::next_deadline`]: an ask registered afterwards that is due earlier
    /// is told to wake the loop, so that no ask waits past its timeout for a loop that
    /// sleeps on (as it would behind a deferred send, which wakes nobody).
    pub fn loop_sleeps_until(&mut self, wake_at: Option<Instant>) {
        self.loop_wakes_at = wake_at;
    }

    /// Registers an ask and returns its request id, and whether the loop must be woken
    /// to see its deadline.
    pub fn register(
        &mut self,
        now: Instant,
        timeout: Duration,
        connection: K,
        completion: C,
    ) -> Registered {
        let id = self.next_id;
        self.next_id += 1;
        let deadline = crate::timer::deadline_after(now, timeout);
        self.entries.insert(
            id,
            PendingAsk {
                timeout,
                connection,
                completion,
            },
        );
        self.deadlines.push(Reverse((deadline, id)));
        // The loop's own wake-up is not moved: each earlier ask wakes it (cheap while a
        // wake-up is on its way), so none relies on another's wake-up that may not come.
        let wake_loop = self.loop_wakes_at.is_none_or(|wake_at| deadline < wake_at);
        Registered { id, wake_loop }
    }

    /// Takes the ask a reply answers; `None` if it already ended (or never existed).
    pub fn take(&mut self, request_id: u64) -> Option<PendingAsk<C, K>> {
        self.entries.remove(&request_id)
    }

    /// Takes the ask a reply answers, only if it travelled on `connection`: a peer
    /// cannot end an ask that was sent to somebody else.
    pub fn take_on(&mut self, request_id: u64, connection: K) -> Option<PendingAsk<C, K>> {
        match self.entries.get(&request_id) {
            Some(ask) if ask.connection == connection => self.entries.remove(&request_id),
            _ => None,
        }
    }

    /// Takes every ask whose deadline is at or before `now`.
    pub fn take_expired(&mut self, now: Instant, into: &mut Vec<PendingAsk<C, K>>) {
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if deadline > now {
                break;
            }
            self.deadlines.pop();
            if let Some(ask) = self.entries.remove(&id) {
                into.push(ask);
            }
        }
    }

    /// Takes every outstanding ask (the environment is stopping).
    pub fn take_all(&mut self, into: &mut Vec<PendingAsk<C, K>>) {
        self.deadlines.clear();
        into.extend(self.entries.drain().map(|(_, ask)| ask));
    }

    /// Takes every ask travelling on `connection`.
    pub fn take_connection(&mut self, connection: K, into: &mut Vec<PendingAsk<C, K>>) {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, ask)| ask.connection == connection)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(ask) = self.entries.remove(&id) {
                into.push(ask);
            }
        }
    }

    /// The earliest deadline of an outstanding ask.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if self.entries.contains_key(&id) {
                return Some(deadline);
            }
            self.deadlines.pop();
        }
        None
    }

    /// Number of outstanding asks.
    #[cfg(all(test, not(loom)))]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no ask is outstanding.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// How [`start`] went.
#[derive(Debug, PartialEq, Eq)]
pub enum Started<R> {
    /// The ask is registered and `send` returned `sent`; `wake_loop` as in
    /// [`Registered`].
    Sent {
        /// The request id.
        id: u64,
        /// Whether the loop must be woken to arm the ask's timeout.
        wake_loop: bool,
        /// What `send` returned.
        sent: R,
    },
    /// `send` failed, but by then the ask had already ended another way (its connection
    /// was lost, or it timed out, at that moment): its completion has that ending, so
    /// the send's error is not the outcome.
    EndedElsewhere {
        /// The request id.
        id: u64,
    },
}

/// Registers an ask in the table `lock` gives, then sends it with its request id.
///
/// If the send fails, the ask is taken back, and the error is the outcome: nothing else
/// completes it. But the send fails when the connection was closed, and the loop, which
/// closes it, then fails the connection's asks: if it got to this one first, the ask's
/// completion has its ending and the error is dropped ([`Started::EndedElsewhere`]). So
/// the asker gets exactly one outcome, never both an error and a completion.
pub fn start<C, K, G, R, E>(
    lock: impl Fn() -> G,
    now: Instant,
    timeout: Duration,
    connection: K,
    completion: C,
    send: impl FnOnce(u64) -> Result<R, E>,
) -> Result<Started<R>, E>
where
    K: PartialEq + Copy,
    G: DerefMut<Target = PendingAsks<C, K>>,
{
    let Registered { id, wake_loop } = lock().register(now, timeout, connection, completion);
    match send(id) {
        Ok(sent) => Ok(Started::Sent {
            id,
            wake_loop,
            sent,
        }),
        Err(error) => match lock().take(id) {
            Some(_never_sent) => Err(error),
            None => Ok(Started::EndedElsewhere { id }),
        },
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_ask_ends_once_whichever_way_comes_first() {
        let t0 = Instant::now();
        let mut asks: PendingAsks<&str, u32> = PendingAsks::new();
        let a = asks.register(t0, Duration::from_secs(1), 7, "a").id;
        let b = asks.register(t0, Duration::from_secs(2), 7, "b").id;
        let c = asks.register(t0, Duration::from_secs(3), 8, "c").id;
        assert_ne!(a, b);
        assert_eq!(asks.next_deadline(), Some(t0 + Duration::from_secs(1)));
        // A reply to `a` on another connection is ignored; the one on 7 ends it, and its
        // timeout later finds nothing.
        assert!(asks.take_on(a, 8).is_none());
        assert_eq!(asks.take_on(a, 7).unwrap().completion, "a");
        assert!(asks.take(a).is_none());
        let mut ended = Vec::new();
        asks.take_expired(t0 + Duration::from_secs(1), &mut ended);
        assert!(ended.is_empty());
        // Connection 7 drops: `b` fails at once, long before its deadline.
        asks.take_connection(7, &mut ended);
        assert_eq!(
            ended.iter().map(|e| e.completion).collect::<Vec<_>>(),
            ["b"]
        );
        assert!(asks.take(b).is_none(), "a late reply to b finds nothing");
        ended.clear();
        // `c` times out.
        assert_eq!(asks.next_deadline(), Some(t0 + Duration::from_secs(3)));
        asks.take_expired(t0 + Duration::from_secs(3), &mut ended);
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].timeout, Duration::from_secs(3));
        assert!(asks.take(c).is_none());
        assert!(asks.is_empty());
        assert_eq!(asks.next_deadline(), None);
    }

    #[test]
    fn an_ask_due_before_the_loop_wakes_up_wakes_it() {
        let t0 = Instant::now();
        let mut asks: PendingAsks<(), u32> = PendingAsks::new();
        // The loop sleeps until woken: any ask must wake it.
        assert!(asks.register(t0, Duration::from_secs(9), 1, ()).wake_loop);
        let next = asks.next_deadline();
        asks.loop_sleeps_until(next);
        // Due later than the loop wakes up anyway: no wake-up; earlier: one.
        assert!(!asks.register(t0, Duration::from_secs(10), 1, ()).wake_loop);
        assert!(!asks.register(t0, Duration::from_secs(9), 1, ()).wake_loop);
        assert!(asks.register(t0, Duration::from_secs(1), 1, ()).wake_loop);
        // Until the loop says otherwise, each earlier ask wakes it again.
        assert!(asks.register(t0, Duration::from_secs(2), 1, ()).wake_loop);
        let next = asks.next_deadline();
        asks.loop_sleeps_until(next);
        assert!(!asks.register(t0, Duration::from_secs(2), 1, ()).wake_loop);
        asks.loop_sleeps_until(None);
        assert!(asks.register(t0, Duration::from_secs(60), 1, ()).wake_loop);
    }

    #[test]
    fn a_failed_send_is_the_outcome_only_if_nothing_else_ended_the_ask() {
        let t0 = Instant::now();
        let table: std::sync::Mutex<PendingAsks<&str, u32>> =
            std::sync::Mutex::new(PendingAsks::new());
        let lock = || table.lock().unwrap();
        let sent = start(lock, t0, Duration::from_secs(1), 1, "a", |_| Ok::<_, ()>(7));
        assert!(matches!(
            sent,
            Ok(Started::Sent {
                wake_loop: true,
                sent: 7,
                ..
            })
        ));
        // Refused: taken back, the error is the outcome.
        let refused = start(lock, t0, Duration::from_secs(1), 1, "b", |_| {
            Err::<(), _>("closed")
        });
        assert_eq!(refused, Err("closed"));
        assert_eq!(lock().len(), 1);
        // Refused after the connection's asks were failed: the completion has it.
        let mut ended = Vec::new();
        let raced = start(lock, t0, Duration::from_secs(1), 1, "c", |_| {
            lock().take_connection(1, &mut ended);
            Err::<(), _>("closed")
        });
        assert!(
            matches!(raced, Ok(Started::EndedElsewhere { .. })),
            "{raced:?}"
        );
        let mut completions: Vec<_> = ended.iter().map(|ask| ask.completion).collect();
        completions.sort_unstable();
        assert_eq!(completions, ["a", "c"]);
        assert!(lock().is_empty());
    }

    #[test]
    fn a_slot_waited_on_until_a_deadline_gives_up_then() {
        let slot: ReplySlot<u32> = ReplySlot::new();
        let start = Instant::now();
        assert_eq!(slot.wait_until(start + Duration::from_millis(30)), None);
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(slot.complete(4));
        assert_eq!(slot.wait_until(start), Some(4));
        assert_eq!(
            slot.wait_until(Instant::now() + Duration::from_secs(60)),
            None
        );
    }

    #[test]
    fn a_slot_gives_its_value_once() {
        let slot = std::sync::Arc::new(ReplySlot::new());
        let waiter = {
            let slot = slot.clone();
            std::thread::spawn(move || slot.wait())
        };
        assert!(slot.complete(1));
        assert!(!slot.complete(2));
        assert_eq!(waiter.join().unwrap(), Some(1));
        assert_eq!(slot.wait(), None);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::Arc;

    #[derive(Debug, PartialEq, Eq, Clone, Copy)]
    enum Ending {
        Reply,
        Timeout,
        Disconnect,
    }

    /// A reply, the timeout and a disconnect race to end one ask while the asker waits:
    /// exactly one racer takes the ask out of the table and completes it, the asker gets
    /// that ending, and the table is empty afterwards.
    #[test]
    fn loom_reply_races_timeout_and_disconnect() {
        loom::model(|| {
            let t0 = Instant::now();
            let table: Arc<Mutex<PendingAsks<Arc<ReplySlot<Ending>>, u32>>> =
                Arc::new(Mutex::new(PendingAsks::new()));
            let slot = Arc::new(ReplySlot::new());
            let id = table
                .lock()
                .unwrap()
                .register(t0, Duration::from_millis(5), 1, slot.clone())
                .id;
            let racer = |ending: Ending| {
                let table = table.clone();
                loom::thread::spawn(move || {
                    let mut ended = Vec::new();
                    {
                        let mut table = table.lock().unwrap();
                        match ending {
                            Ending::Reply => ended.extend(table.take(id)),
                            Ending::Timeout => {
                                table.take_expired(t0 + Duration::from_millis(5), &mut ended)
                            }
                            Ending::Disconnect => table.take_connection(1, &mut ended),
                        }
                    }
                    let taken = ended.len();
                    for ask in ended {
                        assert!(
                            ask.completion.complete(ending),
                            "a taken ask was already completed"
                        );
                    }
                    taken
                })
            };
            let racers = [
                racer(Ending::Reply),
                racer(Ending::Timeout),
                racer(Ending::Disconnect),
            ];
            slot.wait().expect("the asker gets an ending");
            let taken: usize = racers.into_iter().map(|r| r.join().unwrap()).sum();
            assert_eq!(taken, 1, "exactly one racer takes the ask out of the table");
            assert!(table.lock().unwrap().is_empty());
        });
    }

    /// An asker starts an ask ([`start`]: register, then push to the outbox) while the
    /// loop loses its connection (close the outbox, then fail the connection's asks).
    /// The asker sees exactly one outcome, the send's error or the completion, and no ask
    /// is left behind.
    #[test]
    fn loom_ask_start_races_disconnect() {
        loom::model(|| {
            let t0 = Instant::now();
            let table: Arc<Mutex<PendingAsks<Arc<ReplySlot<Ending>>, u32>>> =
                Arc::new(Mutex::new(PendingAsks::new()));
            // The outbox's closed flag, behind its lock as in `Outbox`.
            let closed = Arc::new(Mutex::new(false));
            let slot = Arc::new(ReplySlot::new());
            let asker = {
                let (table, closed, slot) = (table.clone(), closed.clone(), slot.clone());
                loom::thread::spawn(move || {
                    let started = start(
                        || table.lock().unwrap(),
                        t0,
                        Duration::from_millis(5),
                        1,
                        slot,
                        |_id| match *closed.lock().unwrap() {
                            true => Err("the connection closed"),
                            false => Ok(()),
                        },
                    );
                    started.is_err()
                })
            };
            *closed.lock().unwrap() = true;
            let mut ended = Vec::new();
            table.lock().unwrap().take_connection(1, &mut ended);
            for ask in ended {
                assert!(ask.completion.complete(Ending::Disconnect));
            }
            let failed = asker.join().unwrap();
            let completed = slot.done.load(Ordering::Acquire);
            assert!(
                failed != completed,
                "the asker saw {} outcomes",
                if failed { 2 } else { 0 }
            );
            assert!(table.lock().unwrap().is_empty());
        });
    }
}
