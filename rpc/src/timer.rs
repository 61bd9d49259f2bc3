//! Timers of the event loop: one-shot and periodic, ordered by deadline.
//!
//! Pure bookkeeping: the loop passes `now` in, so tests drive it with made-up instants.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

/// The shortest period a periodic timer gets.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// `now + after`, or the latest instant the clock can represent when that overflows.
///
/// Delays come from the configuration (capped at [`crate::conf::MAX_DURATION`]) but also
/// from callers (an ask's timeout, a timer's delay), and `Instant + Duration` panics on
/// overflow; a deadline that far away never comes, which is what such a delay means.
pub fn deadline_after(now: Instant, after: Duration) -> Instant {
    if let Some(deadline) = now.checked_add(after) {
        return deadline;
    }
    // Rare: climb as far as the clock goes, halving the step whenever it overshoots.
    let mut deadline = now;
    let mut step = after;
    while !step.is_zero() {
        match deadline.checked_add(step) {
            Some(later) => deadline = later,
            None => step /= 2,
        }
    }
    deadline
}

/// Identifies a timer, for cancelling it and for telling its firings apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(pub u64);

#[derive(Debug)]
struct Timer<T> {
    period: Option<Duration>,
    target: T,
}

/// A set of timers, each owned by a target `T` (for the loop, the endpoint to call).
#[derive(Debug)]
pub struct TimerQueue<T> {
    next_id: u64,
    timers: FxHashMap<TimerId, Timer<T>>,
    // Deadlines with lazy deletion: an entry whose id is no longer in `timers`, or whose
    // deadline is not the timer's current one, is skipped when it comes up.
    deadlines: BinaryHeap<Reverse<(Instant, TimerId)>>,
    current: FxHashMap<TimerId, Instant>,
}

impl<T: Clone> Default for TimerQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> TimerQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        TimerQueue {
            next_id: 1,
            timers: FxHashMap::default(),
            deadlines: BinaryHeap::new(),
            current: FxHashMap::default(),
        }
    }

    /// Schedules a timer that fires once at `now + delay`, or, with a `period`, at
    /// `now + delay` and then every `period`.
    pub fn schedule(
        &mut self,
        now: Instant,
        delay: Duration,
        period: Option<Duration>,
        target: T,
    ) -> TimerId {
        // A zero period would fire on every turn of the loop.
        let period = period.map(|p| p.max(MIN_PERIOD));
        let id = TimerId(self.next_id);
        self.next_id += 1;
        let deadline = deadline_after(now, delay);
        self.timers.insert(id, Timer { period, target });
        self.current.insert(id, deadline);
        self.deadlines.push(Reverse((deadline, id)));
        id
    }

    /// Cancels a timer; returns whether it was still scheduled.
    pub fn cancel(&mut self, id: TimerId) -> bool {
        self.current.remove(&id);
        self.timers.remove(&id).is_some()
    }

    /// Cancels every timer of `target`.
    pub fn cancel_target(&mut self, mut is_target: impl FnMut(&T) -> bool) {
        let ids: Vec<TimerId> = self
            .timers
            .iter()
            .filter(|(_, timer)| is_target(&timer.target))
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.cancel(id);
        }
    }

    /// Number of scheduled timers.
    pub fn len(&self) -> usize {
        self.timers.len()
    }

    /// Whether no timer is scheduled.
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// The earliest deadline of a scheduled timer.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        self.discard_stale();
        self.deadlines
            .peek()
            .map(|Reverse((deadline, _))| *deadline)
    }

    fn discard_stale(&mut self) {
        while let Some(Reverse((deadline, id))) = self.deadlines.peek() {
            if self.current.get(id) == Some(deadline) {
                return;
            }
            self.deadlines.pop();
        }
    }

    /// Pops one timer that is due at `now`, rescheduling it if periodic.
    ///
    /// A periodic timer that fell behind fires once and is rescheduled a period after
    /// `now`, rather than firing once per missed period.
    pub fn pop_due(&mut self, now: Instant) -> Option<(TimerId, T)> {
        // The earliest deadline, stale or not, is later than `now`: nothing is due, and
        // the stale entries can wait (a loop turn asks this every time, mostly for
        // nothing).
        if self
            .deadlines
            .peek()
            .is_none_or(|Reverse((earliest, _))| *earliest > now)
        {
            return None;
        }
        self.discard_stale();
        let Reverse((deadline, id)) = *self.deadlines.peek()?;
        if deadline > now {
            return None;
        }
        self.deadlines.pop();
        let timer = self.timers.get(&id)?;
        let target = timer.target.clone();
        match timer.period {
            Some(period) => {
                let next = deadline_after(deadline, period);
                let next = if next <= now {
                    deadline_after(now, period)
                } else {
                    next
                };
                self.current.insert(id, next);
                self.deadlines.push(Reverse((next, id)));
            }
            None => {
                self.timers.remove(&id);
                self.current.remove(&id);
            }
        }
        Some((id, target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn one_shot_fires_once_at_its_deadline() {
        let t0 = Instant::now();
        let mut q = TimerQueue::new();
        let id = q.schedule(t0, ms(10), None, "a");
        assert_eq!(q.next_deadline(), Some(t0 + ms(10)));
        assert_eq!(q.pop_due(t0 + ms(9)), None);
        assert_eq!(q.pop_due(t0 + ms(10)), Some((id, "a")));
        assert_eq!(q.pop_due(t0 + ms(100)), None);
        assert!(q.is_empty());
    }

    #[test]
    fn timers_fire_in_deadline_order() {
        let t0 = Instant::now();
        let mut q = TimerQueue::new();
        q.schedule(t0, ms(30), None, 3);
        q.schedule(t0, ms(10), None, 1);
        q.schedule(t0, ms(20), None, 2);
        let fired: Vec<i32> =
            std::iter::from_fn(|| q.pop_due(t0 + ms(50)).map(|(_, t)| t)).collect();
        assert_eq!(fired, vec![1, 2, 3]);
    }

    #[test]
    fn periodic_timer_repeats_and_does_not_pile_up() {
        let t0 = Instant::now();
        let mut q = TimerQueue::new();
        let id = q.schedule(t0, ms(0), Some(ms(100)), "tick");
        assert_eq!(q.pop_due(t0), Some((id, "tick")));
        assert_eq!(q.pop_due(t0 + ms(99)), None);
        assert_eq!(q.pop_due(t0 + ms(100)), Some((id, "tick")));
        // Far behind: one firing, then the next a period later.
        assert_eq!(q.pop_due(t0 + ms(1000)), Some((id, "tick")));
        assert_eq!(q.pop_due(t0 + ms(1000)), None);
        assert_eq!(q.next_deadline(), Some(t0 + ms(1100)));
    }

    #[test]
    fn delays_past_the_end_of_the_clock_never_fire_and_do_not_panic() {
        let t0 = Instant::now();
        let mut q = TimerQueue::new();
        let once = q.schedule(t0, Duration::MAX, None, "never");
        let every = q.schedule(t0, ms(1), Some(Duration::MAX), "once");
        let far = q.next_deadline().unwrap();
        assert_eq!(far, t0 + ms(1));
        assert_eq!(q.pop_due(t0 + ms(1)), Some((every, "once")));
        // Rescheduled "a period later": as late as the clock goes, like the one-shot.
        assert_eq!(q.pop_due(t0 + Duration::from_secs(1 << 32)), None);
        let last = q.next_deadline().unwrap();
        assert!(last > t0 + Duration::from_secs(1 << 32));
        assert!(q.cancel(once) && q.cancel(every));

        assert_eq!(deadline_after(t0, ms(5)), t0 + ms(5));
        let end = deadline_after(t0, Duration::MAX);
        assert!(end.checked_add(Duration::from_secs(1)).is_none());
        assert_eq!(deadline_after(end, Duration::MAX), end);
    }

    #[test]
    fn cancelled_timers_never_fire() {
        let t0 = Instant::now();
        let mut q = TimerQueue::new();
        let a = q.schedule(t0, ms(10), None, "a");
        let b = q.schedule(t0, ms(20), Some(ms(5)), "b");
        q.schedule(t0, ms(30), None, "c");
        assert!(q.cancel(a));
        assert!(!q.cancel(a));
        q.cancel_target(|t| *t == "b");
        assert_eq!(q.next_deadline(), Some(t0 + ms(30)));
        let fired: Vec<&str> =
            std::iter::from_fn(|| q.pop_due(t0 + ms(100)).map(|(_, t)| t)).collect();
        assert_eq!(fired, vec!["c"]);
        let _ = b;
    }

    #[test]
    fn a_cancelled_timers_entry_neither_fires_nor_hides_the_next_one() {
        let t0 = Instant::now();
        let mut q = TimerQueue::new();
        let a = q.schedule(t0, ms(10), None, "a");
        q.schedule(t0, ms(20), None, "b");
        q.cancel(a);
        // Asked before, at and after the cancelled deadline, without next_deadline between.
        assert_eq!(q.pop_due(t0 + ms(5)), None);
        assert_eq!(q.pop_due(t0 + ms(10)), None);
        assert_eq!(q.pop_due(t0 + ms(15)), None);
        assert_eq!(q.pop_due(t0 + ms(20)).map(|(_, t)| t), Some("b"));
        assert_eq!(q.pop_due(t0 + ms(100)), None);
        assert_eq!(q.next_deadline(), None);
    }
}
