//! Bounded waits: a test that waits for something fails after a while rather than hangs.

use std::time::{Duration, Instant};

/// The longest pause between two looks at a condition.
const MAX_PAUSE: Duration = Duration::from_millis(5);

/// Polls `check` until it holds or `timeout` has passed, and says whether it held. It
/// looks at once, then after pauses growing from 1 ms to 5 ms, and once more at the
/// end.
pub fn holds_within(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if check() {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Polls `check` until it holds, failing the test ("timed out waiting until `what`")
/// once `timeout` has passed.
#[track_caller]
pub fn wait_until(what: &str, timeout: Duration, check: impl FnMut() -> bool) {
    assert!(
        holds_within(timeout, check),
        "timed out waiting until {what} ({timeout:?})"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_holds_later_is_seen_and_one_that_never_does_times_out() {
        let start = Instant::now();
        let mut looks = 0;
        assert!(holds_within(Duration::from_secs(10), || {
            looks += 1;
            start.elapsed() >= Duration::from_millis(20)
        }));
        assert!(looks > 1);
        assert!(!holds_within(Duration::from_millis(20), || false));
        assert!(start.elapsed() >= Duration::from_millis(40));
    }

    #[test]
    #[should_panic(expected = "timed out waiting until the sky falls")]
    fn wait_until_fails_naming_what_it_waited_for() {
        wait_until("the sky falls", Duration::from_millis(10), || false);
    }
}
