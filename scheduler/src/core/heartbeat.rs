//! The driver's view of executor heartbeats: who was last heard from when, and who has
//! been silent for longer than `network.timeout` (the seeds' `HeartbeatReceiver`).
//!
//! A pure state machine with an injected clock; the heartbeat receiver endpoint feeds
//! it heartbeats and registrations and asks it, on a timer, which executors expired.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use flint_scheduler::heartbeat::HeartbeatTracker;
//!
//! let start = Instant::now();
//! let mut tracker = HeartbeatTracker::new(Duration::from_secs(120));
//! tracker.executor_added("1", start);
//! tracker.executor_added("2", start);
//! assert!(tracker.heartbeat("2", start + Duration::from_secs(100)));
//! let expired = tracker.expire(start + Duration::from_secs(121));
//! assert_eq!(expired.len(), 1);
//! assert_eq!(&*expired[0].executor_id, "1");
//! ```

use std::time::{Duration, Instant};

use flint_wire::SharedStr;

use crate::core::fx_hash::FxHashMap;

/// An executor that sent no heartbeat for longer than the timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredExecutor {
    /// The executor.
    pub executor_id: SharedStr,
    /// How long it has been silent.
    pub silent_for: Duration,
}

impl ExpiredExecutor {
    /// The reason the executor is removed with, as Spark words it.
    pub fn reason(&self) -> String {
        format!(
            "Executor heartbeat timed out after {} ms",
            self.silent_for.as_millis()
        )
    }
}

/// When each live executor was last heard from.
#[derive(Debug)]
pub struct HeartbeatTracker {
    timeout: Duration,
    last_seen: FxHashMap<SharedStr, Instant>,
}

impl HeartbeatTracker {
    /// A tracker that expires executors silent for longer than `timeout`
    /// (`network.timeout`).
    pub fn new(timeout: Duration) -> Self {
        HeartbeatTracker {
            timeout,
            last_seen: FxHashMap::default(),
        }
    }

    /// The expiry timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How often the receiver should look for expired executors: often enough that an
    /// executor is removed soon after its timeout, at most once a second.
    pub fn check_interval(&self) -> Duration {
        (self.timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// An executor registered: its silence is counted from `now`.
    pub fn executor_added(&mut self, executor_id: &str, now: Instant) {
        self.last_seen.insert(SharedStr::from(executor_id), now);
    }

    /// An executor was removed: it is no longer tracked.
    pub fn executor_removed(&mut self, executor_id: &str) {
        self.last_seen.remove(executor_id);
    }

    /// A heartbeat arrived; false if the executor is not tracked (it should register
    /// again).
    pub fn heartbeat(&mut self, executor_id: &str, now: Instant) -> bool {
        match self.last_seen.get_mut(executor_id) {
            Some(seen) => {
                *seen = (*seen).max(now);
                true
            }
            None => false,
        }
    }

    /// When an executor was last heard from (its registration, or its last
    /// heartbeat); `None` if it is not tracked.
    pub fn last_seen(&self, executor_id: &str) -> Option<Instant> {
        self.last_seen.get(executor_id).copied()
    }

    /// Whether an executor is tracked.
    pub fn is_tracked(&self, executor_id: &str) -> bool {
        self.last_seen.contains_key(executor_id)
    }

    /// Removes and returns the executors silent for longer than the timeout at `now`,
    /// in id order.
    pub fn expire(&mut self, now: Instant) -> Vec<ExpiredExecutor> {
        let timeout = self.timeout;
        let mut expired: Vec<ExpiredExecutor> = self
            .last_seen
            .iter()
            .filter_map(|(id, &seen)| {
                let silent_for = now.saturating_duration_since(seen);
                (silent_for > timeout).then(|| ExpiredExecutor {
                    executor_id: id.clone(),
                    silent_for,
                })
            })
            .collect();
        expired.sort_by(|a, b| a.executor_id.cmp(&b.executor_id));
        for executor in &expired {
            self.last_seen.remove(&executor.executor_id);
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn silence_is_counted_from_registration_then_from_the_last_heartbeat() {
        let t0 = Instant::now();
        let mut tracker = HeartbeatTracker::new(ms(100));
        tracker.executor_added("a", t0);
        assert!(
            tracker.expire(t0 + ms(100)).is_empty(),
            "exactly the timeout is not over it"
        );
        assert!(tracker.heartbeat("a", t0 + ms(90)));
        assert!(tracker.expire(t0 + ms(150)).is_empty());
        let expired = tracker.expire(t0 + ms(191));
        assert_eq!(
            expired,
            vec![ExpiredExecutor {
                executor_id: "a".into(),
                silent_for: ms(101)
            }]
        );
        assert_eq!(
            expired[0].reason(),
            "Executor heartbeat timed out after 101 ms"
        );
        assert!(
            !tracker.is_tracked("a"),
            "an expired executor is expired once"
        );
        assert!(tracker.expire(t0 + ms(500)).is_empty());
    }

    #[test]
    fn unknown_and_removed_executors_are_told_to_register_again() {
        let t0 = Instant::now();
        let mut tracker = HeartbeatTracker::new(ms(100));
        assert!(!tracker.heartbeat("ghost", t0));
        tracker.executor_added("a", t0);
        tracker.executor_removed("a");
        assert!(!tracker.heartbeat("a", t0));
        assert!(tracker.expire(t0 + ms(1000)).is_empty());
    }

    #[test]
    fn a_late_heartbeat_does_not_move_the_clock_back() {
        let t0 = Instant::now();
        let mut tracker = HeartbeatTracker::new(ms(100));
        tracker.executor_added("a", t0 + ms(50));
        assert!(tracker.heartbeat("a", t0));
        assert!(tracker.expire(t0 + ms(140)).is_empty());
    }

    #[test]
    fn expiry_is_reported_in_id_order_and_the_check_interval_is_bounded() {
        let t0 = Instant::now();
        let mut tracker = HeartbeatTracker::new(ms(100));
        for id in ["c", "a", "b"] {
            tracker.executor_added(id, t0);
        }
        let ids: Vec<String> = tracker
            .expire(t0 + ms(200))
            .into_iter()
            .map(|e| e.executor_id.to_string())
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(tracker.check_interval(), ms(25));
        assert_eq!(
            HeartbeatTracker::new(Duration::from_secs(120)).check_interval(),
            Duration::from_secs(1)
        );
        assert_eq!(HeartbeatTracker::new(ms(8)).check_interval(), ms(10));
    }
}
