//! Bookkeeping of outstanding asks: request ids, deadlines, and the one-shot slots that
//! askers wait on.
//!
//! An ask ends in exactly one way: a reply, its timeout, or the loss of its connection,
//! whichever is first. The [`PendingAsks`] table is the arbiter: whoever takes the entry
//! out completes it, and nobody else can. [`ReplySlot`] hands the result to the waiting
//! thread. Both are model-checked with loom, with the three endings racing on threads.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use crate::sync::{AtomicBool, Condvar, Mutex, Ordering};

/// A one-shot cell: completed once, taken once by the thread waiting on it.
#[derive(Debug)]
pub struct ReplySlot<T> {
    state: Mutex<SlotState<T>>,
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
            state: Mutex::new(SlotState::Waiting),
            ready: Condvar::new(),
            done: AtomicBool::new(false),
        }
    }

    /// Stores `value` if the slot is still empty; returns whether it did.
    pub fn complete(&self, value: T) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(*state, SlotState::Waiting) {
            return false;
        }
        *state = SlotState::Done(value);
        self.done.store(true, Ordering::Release);
        drop(state);
        self.ready.notify_all();
        true
    }

    /// Blocks until the slot is completed, then takes the value. Returns `None` if it
    /// was already taken.
    pub fn wait(&self) -> Option<T> {
        #[cfg(not(loom))]
        {
            let start = Instant::now();
            while !self.done.load(Ordering::Acquire) && start.elapsed() < SPIN {
                std::thread::yield_now();
            }
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match std::mem::replace(&mut *state, SlotState::Taken) {
                SlotState::Waiting => {
                    *state = SlotState::Waiting;
                    state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
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
    /// When it times out.
    pub deadline: Instant,
    /// The timeout it was given, for the error text.
    pub timeout: Duration,
    /// The connection it travels on, so that losing the connection fails it at once.
    pub connection: K,
    /// What to complete when it ends.
    pub completion: C,
}

/// Outstanding asks by request id, with their deadlines.
#[derive(Debug)]
pub struct PendingAsks<C, K> {
    next_id: u64,
    entries: HashMap<u64, PendingAsk<C, K>>,
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
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
            entries: HashMap::new(),
            deadlines: BinaryHeap::new(),
        }
    }

    /// Registers an ask and returns its request id.
    pub fn register(
        &mut self,
        now: Instant,
        timeout: Duration,
        connection: K,
        completion: C,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let deadline = crate::timer::deadline_after(now, timeout);
        self.entries.insert(
            id,
            PendingAsk {
                deadline,
                timeout,
                connection,
                completion,
            },
        );
        self.deadlines.push(Reverse((deadline, id)));
        id
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
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no ask is outstanding.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_ask_ends_once_whichever_way_comes_first() {
        let t0 = Instant::now();
        let mut asks: PendingAsks<&str, u32> = PendingAsks::new();
        let a = asks.register(t0, Duration::from_secs(1), 7, "a");
        let b = asks.register(t0, Duration::from_secs(2), 7, "b");
        let c = asks.register(t0, Duration::from_secs(3), 8, "c");
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
                .register(t0, Duration::from_millis(5), 1, slot.clone());
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
}
