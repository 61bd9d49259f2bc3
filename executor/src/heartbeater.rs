//! When to send heartbeats and when to give up: a state machine with no clock of its own.
//!
//! The executor's endpoint drives it with loop timers (at [`Heartbeater::poll_timeout`])
//! and the outcomes of its heartbeat asks; tests drive it with made-up instants.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

/// What the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum HeartbeatAction {
    /// Send a heartbeat now, and report its outcome with [`Heartbeater::on_success`] or
    /// [`Heartbeater::on_failure`].
    Send,
    /// Nothing to send now.
    Wait,
}

/// Heartbeats failed `executor.heartbeat.maxFailures` times in a row: the executor exits
/// with code 56.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Exit as unable to send heartbeats to driver more than {max_failures} times")]
pub struct HeartbeatExit {
    /// `executor.heartbeat.maxFailures`.
    pub max_failures: u32,
}

/// The heartbeat schedule of an executor, as the seeds' heartbeater: after an initial
/// delay, one heartbeat every interval, never two at once. A heartbeat that comes due while
/// the previous one is still waiting for its answer is sent as soon as that answer (or its
/// failure) arrives. A success resets the failure count; reaching
/// `executor.heartbeat.maxFailures` failures in a row ends the executor.
///
/// ```
/// use std::time::{Duration, Instant};
/// use flint_executor::{HeartbeatAction, Heartbeater};
///
/// let start = Instant::now();
/// let interval = Duration::from_secs(10);
/// let mut heartbeater = Heartbeater::new(interval, 2, Duration::from_secs(3), start);
/// assert_eq!(heartbeater.poll_timeout(), start + Duration::from_secs(3));
/// assert_eq!(heartbeater.on_timeout(start + Duration::from_secs(3)), HeartbeatAction::Send);
/// assert_eq!(heartbeater.on_failure(), Ok(HeartbeatAction::Wait));
/// assert_eq!(heartbeater.poll_timeout(), start + Duration::from_secs(13));
/// assert_eq!(heartbeater.on_timeout(start + Duration::from_secs(13)), HeartbeatAction::Send);
/// assert!(heartbeater.on_failure().is_err()); // the second failure in a row: exit 56
/// ```
#[derive(Debug, Clone)]
pub struct Heartbeater {
    interval: Duration,
    max_failures: u32,
    failures: u32,
    next_due: Instant,
    in_flight: bool,
    /// A heartbeat came due while one was in flight.
    owed: bool,
    exhausted: bool,
}

impl Heartbeater {
    /// A schedule whose first heartbeat is due at `now + initial_delay`. `interval` is at
    /// least 1 ms and `max_failures` at least 1.
    pub fn new(
        interval: Duration,
        max_failures: u32,
        initial_delay: Duration,
        now: Instant,
    ) -> Self {
        Heartbeater {
            interval: interval.max(Duration::from_millis(1)),
            max_failures: max_failures.max(1),
            failures: 0,
            next_due: now + initial_delay,
            in_flight: false,
            owed: false,
            exhausted: false,
        }
    }

    /// The interval between heartbeats (also the timeout of each heartbeat's ask).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// When [`Heartbeater::on_timeout`] next has something to do.
    pub fn poll_timeout(&self) -> Instant {
        self.next_due
    }

    /// Failed heartbeats since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether a heartbeat was sent and its outcome is not known yet.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Whether the failures reached the maximum (nothing is sent any more).
    pub fn is_exhausted(&self) -> bool {
        self.exhausted
    }

    /// Time passed: sends the heartbeat that is due, unless one is still in flight, in
    /// which case it is sent when that one ends.
    pub fn on_timeout(&mut self, now: Instant) -> HeartbeatAction {
        if self.exhausted || now < self.next_due {
            return HeartbeatAction::Wait;
        }
        // Keep the rhythm; after a stall, skip the missed beats rather than burst.
        self.next_due += self.interval;
        if self.next_due <= now {
            self.next_due = now + self.interval;
        }
        if self.in_flight {
            self.owed = true;
            return HeartbeatAction::Wait;
        }
        self.in_flight = true;
        HeartbeatAction::Send
    }

    /// The driver answered the heartbeat in flight.
    pub fn on_success(&mut self) -> HeartbeatAction {
        self.failures = 0;
        self.finish()
    }

    /// The heartbeat in flight failed (error reply, timeout, lost connection, or it could
    /// not be sent). `Err` when that makes `max_failures` failures in a row.
    pub fn on_failure(&mut self) -> Result<HeartbeatAction, HeartbeatExit> {
        self.failures = self.failures.saturating_add(1);
        if self.failures >= self.max_failures {
            self.exhausted = true;
            self.in_flight = false;
            self.owed = false;
            return Err(HeartbeatExit {
                max_failures: self.max_failures,
            });
        }
        Ok(self.finish())
    }

    fn finish(&mut self) -> HeartbeatAction {
        self.in_flight = false;
        if self.owed && !self.exhausted {
            self.owed = false;
            self.in_flight = true;
            return HeartbeatAction::Send;
        }
        HeartbeatAction::Wait
    }
}

/// A random delay in `[0, interval)`, so that executors started together do not all send
/// their heartbeats at the same moments.
pub fn random_initial_delay(interval: Duration) -> Duration {
    let nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    // std's hasher keys are random per process and per call.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(nanos);
    Duration::from_nanos(hasher.finish() % nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: Duration = Duration::from_secs(1);

    fn at(start: Instant, secs: u64) -> Instant {
        start + SEC * secs as u32
    }

    #[test]
    fn nothing_happens_before_the_initial_delay() {
        let start = Instant::now();
        let mut hb = Heartbeater::new(SEC * 10, 3, SEC * 4, start);
        assert_eq!(hb.poll_timeout(), at(start, 4));
        assert_eq!(hb.on_timeout(at(start, 3)), HeartbeatAction::Wait);
        assert!(!hb.in_flight());
        assert_eq!(hb.on_timeout(at(start, 4)), HeartbeatAction::Send);
        assert!(hb.in_flight());
        assert_eq!(hb.poll_timeout(), at(start, 14));
    }

    #[test]
    fn heartbeats_keep_their_rhythm() {
        let start = Instant::now();
        let mut hb = Heartbeater::new(SEC * 10, 3, Duration::ZERO, start);
        for beat in 0..5u64 {
            let due = at(start, beat * 10);
            assert_eq!(hb.poll_timeout(), due);
            // A late timer does not shift the following beats.
            assert_eq!(hb.on_timeout(due + SEC), HeartbeatAction::Send);
            assert_eq!(hb.on_success(), HeartbeatAction::Wait);
        }
    }

    #[test]
    fn a_long_stall_skips_beats_instead_of_bursting() {
        let start = Instant::now();
        let mut hb = Heartbeater::new(SEC * 10, 3, Duration::ZERO, start);
        assert_eq!(hb.on_timeout(start), HeartbeatAction::Send);
        assert_eq!(hb.on_success(), HeartbeatAction::Wait);
        assert_eq!(hb.on_timeout(at(start, 55)), HeartbeatAction::Send);
        assert_eq!(hb.poll_timeout(), at(start, 65));
        assert_eq!(hb.on_success(), HeartbeatAction::Wait);
        assert_eq!(hb.on_timeout(at(start, 56)), HeartbeatAction::Wait);
    }

    #[test]
    fn a_beat_due_while_one_is_in_flight_goes_when_it_ends() {
        let start = Instant::now();
        let mut hb = Heartbeater::new(SEC * 10, 3, Duration::ZERO, start);
        assert_eq!(hb.on_timeout(start), HeartbeatAction::Send);
        // The timer fires before the ask's timeout is reported.
        assert_eq!(hb.on_timeout(at(start, 10)), HeartbeatAction::Wait);
        assert_eq!(hb.poll_timeout(), at(start, 20));
        // The timeout: a failure, and the owed beat goes at once.
        assert_eq!(hb.on_failure(), Ok(HeartbeatAction::Send));
        assert!(hb.in_flight());
        assert_eq!(hb.on_success(), HeartbeatAction::Wait);
        assert!(!hb.in_flight());
        assert_eq!(hb.failures(), 0);
    }

    #[test]
    fn max_failures_in_a_row_exit_and_a_success_resets_the_count() {
        let start = Instant::now();
        let mut hb = Heartbeater::new(SEC, 3, Duration::ZERO, start);
        let mut now = start;
        let mut beat = |hb: &mut Heartbeater| {
            assert_eq!(hb.on_timeout(now), HeartbeatAction::Send);
            now += SEC;
        };
        beat(&mut hb);
        assert_eq!(hb.on_failure(), Ok(HeartbeatAction::Wait));
        beat(&mut hb);
        assert_eq!(hb.on_failure(), Ok(HeartbeatAction::Wait));
        assert_eq!(hb.failures(), 2);
        beat(&mut hb);
        assert_eq!(hb.on_success(), HeartbeatAction::Wait);
        assert_eq!(hb.failures(), 0);
        for _ in 0..2 {
            beat(&mut hb);
            assert_eq!(hb.on_failure(), Ok(HeartbeatAction::Wait));
        }
        beat(&mut hb);
        let exit = hb.on_failure().unwrap_err();
        assert_eq!(exit, HeartbeatExit { max_failures: 3 });
        assert_eq!(
            exit.to_string(),
            "Exit as unable to send heartbeats to driver more than 3 times"
        );
        assert!(hb.is_exhausted());
        assert_eq!(hb.on_timeout(now + SEC * 100), HeartbeatAction::Wait);
    }

    #[test]
    fn one_allowed_failure_exits_at_the_first() {
        let start = Instant::now();
        let mut hb = Heartbeater::new(SEC, 1, Duration::ZERO, start);
        assert_eq!(hb.on_timeout(start), HeartbeatAction::Send);
        assert!(hb.on_failure().is_err());
    }

    #[test]
    fn initial_delays_stay_below_the_interval() {
        let interval = Duration::from_millis(50);
        for _ in 0..200 {
            assert!(random_initial_delay(interval) < interval);
        }
        assert_eq!(random_initial_delay(Duration::ZERO), Duration::ZERO);
        let delays: std::collections::HashSet<_> =
            (0..20).map(|_| random_initial_delay(SEC)).collect();
        assert!(delays.len() > 1, "the delay is random");
    }

    /// Outcomes the model can see, driven by a virtual clock that jumps to the next
    /// deadline (or to an outcome in between).
    #[derive(Debug, Clone)]
    enum Event {
        Tick(u16),
        Success,
        Failure,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u16..3000).prop_map(Event::Tick),
            Just(Event::Success),
            Just(Event::Failure),
        ]
    }

    proptest! {
        #[test]
        fn never_two_in_flight_and_exits_exactly_at_max(
            max in 1u32..6,
            events in proptest::collection::vec(event(), 0..200),
        ) {
            let start = Instant::now();
            let interval = Duration::from_millis(1000);
            let mut hb = Heartbeater::new(interval, max, Duration::from_millis(300), start);
            let mut now = start;
            let mut in_flight = false;
            let mut in_a_row = 0u32;
            for event in events {
                let action = match event {
                    Event::Tick(ms) => {
                        now += Duration::from_millis(u64::from(ms));
                        let deadline = hb.poll_timeout();
                        let action = hb.on_timeout(now);
                        if now < deadline {
                            prop_assert_eq!(action, HeartbeatAction::Wait);
                        }
                        prop_assert!(hb.poll_timeout() > now || now < deadline || hb.is_exhausted());
                        action
                    }
                    Event::Success if in_flight => {
                        in_flight = false;
                        in_a_row = 0;
                        hb.on_success()
                    }
                    Event::Failure if in_flight => {
                        in_flight = false;
                        in_a_row += 1;
                        match hb.on_failure() {
                            Ok(action) => {
                                prop_assert!(in_a_row < max);
                                action
                            }
                            Err(exit) => {
                                prop_assert_eq!(in_a_row, max);
                                prop_assert_eq!(exit.max_failures, max);
                                prop_assert!(!hb.in_flight());
                                continue;
                            }
                        }
                    }
                    _ => HeartbeatAction::Wait,
                };
                if action == HeartbeatAction::Send {
                    prop_assert!(!in_flight, "a second heartbeat while one is in flight");
                    prop_assert!(!hb.is_exhausted());
                    in_flight = true;
                }
                prop_assert_eq!(hb.in_flight(), in_flight);
                prop_assert_eq!(hb.failures(), in_a_row);
            }
        }
    }
}
