//! The clock runners time tasks with: the TSC, through quanta, calibrated off the
//! executor's start-up path.
//!
//! A runner reads the clock twice per task. quanta's read of the TSC and its duration
//! cost 9 ns here against 25 ns for std's `Instant` through the vDSO. quanta calibrates
//! the TSC once per process, which takes 0.6 ms on a quiet host and was seen to take
//! 108 ms on two CPUs shared with three busy loops: that runs on a thread of its own
//! from the executor's start, so that registering with the driver does not wait for it
//! (a runner's first task does, if it comes before the calibration ends). quanta falls
//! back to the OS's monotonic clock where the CPU reports no invariant TSC; it does not
//! ask the kernel whether it trusts the TSC.

use std::sync::{Arc, OnceLock};

/// The calibrated clock and the executor's epoch on it.
type Calibrated = (quanta::Clock, quanta::Instant);

/// A monotonic clock for timing tasks; cheap to read once calibrated.
#[derive(Debug)]
pub(crate) struct TaskClock {
    calibrated: Arc<OnceLock<Calibrated>>,
}

impl TaskClock {
    /// A clock whose calibration starts now, on a thread of its own (or, if no thread
    /// can be started, at the first read).
    pub(crate) fn start() -> TaskClock {
        let calibrated = Arc::new(OnceLock::new());
        let warm = calibrated.clone();
        let _ = std::thread::Builder::new()
            .name("clock-calibration".into())
            .spawn(move || {
                warm.get_or_init(calibrate);
            });
        TaskClock { calibrated }
    }

    fn calibrated(&self) -> &Calibrated {
        self.calibrated.get_or_init(calibrate)
    }

    /// Now.
    #[inline]
    pub(crate) fn now(&self) -> quanta::Instant {
        self.calibrated().0.now()
    }

    /// Nanoseconds from the executor's epoch (the clock's calibration) to `now`.
    pub(crate) fn since_epoch(&self, now: quanta::Instant) -> u64 {
        let epoch = self.calibrated().1;
        u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

fn calibrate() -> Calibrated {
    let clock = quanta::Clock::new();
    let epoch = clock.now();
    (clock, epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_clock_measures_what_std_measures_and_counts_from_its_epoch() {
        let clock = TaskClock::start();
        // std's reads bracket each of the clock's, so that a thread preempted between
        // two reads widens the bracket rather than failing the test.
        let before_start = Instant::now();
        let start = clock.now();
        let after_start = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let before_end = Instant::now();
        let end = clock.now();
        let after_end = Instant::now();
        let elapsed = end.duration_since(start);
        let (least, most) = (before_end - after_start, after_end - before_start);
        assert!(elapsed >= Duration::from_millis(20), "{elapsed:?}");
        // The TSC's rate is calibrated, not assumed: within 1 % of std's.
        assert!(
            elapsed >= least - least / 100 && elapsed <= most + most / 100,
            "{elapsed:?} outside {least:?}..{most:?}"
        );
        assert!(clock.since_epoch(end) >= clock.since_epoch(start) + 20_000_000);
    }
}
