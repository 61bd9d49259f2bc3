//! A budget for the log lines peers can cause.
//!
//! A line per bad frame, refused command or forged update tells an operator what a peer
//! did; a line per message of a peer that sends millions of them fills the disk and
//! spends the CPU on logging. Each place that logs what a peer did keeps a
//! [`LogBudget`]: a few lines per window are logged as they come, the rest are held
//! back (logged at DEBUG by the caller), and their number is told with the next line
//! that goes out.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use flint_rpc::log_budget::{LogBudget, Spend};
//!
//! let mut budget = LogBudget::new(2, Duration::from_secs(60));
//! let now = Instant::now();
//! assert_eq!(budget.spend(now), Spend::Log { held_back: 0 });
//! assert_eq!(budget.spend(now), Spend::Log { held_back: 0 });
//! assert_eq!(budget.spend(now), Spend::HoldBack);
//! // A minute later the held-back line is told with the next one.
//! let later = now + Duration::from_secs(60);
//! assert_eq!(budget.spend(later), Spend::Log { held_back: 1 });
//! ```

use std::time::{Duration, Instant};

/// Lines a place that logs what peers do may log per [`PEER_LOG_WINDOW`].
pub const PEER_LINES_PER_WINDOW: u32 = 20;

/// The window of [`PEER_LINES_PER_WINDOW`].
pub const PEER_LOG_WINDOW: Duration = Duration::from_secs(60);

/// Whether a line goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// Log it, after saying that `held_back` lines were held back since the last one
    /// that went out (when not 0).
    Log {
        /// Lines held back since the last one logged.
        held_back: u64,
    },
    /// The window's lines are spent: log it at DEBUG at most.
    HoldBack,
}

/// Lines per window, as in the [module documentation](self).
#[derive(Debug, Clone)]
pub struct LogBudget {
    lines_per_window: u32,
    window: Duration,
    window_start: Option<Instant>,
    spent: u32,
    held_back: u64,
}

impl Default for LogBudget {
    /// [`PEER_LINES_PER_WINDOW`] lines per [`PEER_LOG_WINDOW`].
    fn default() -> Self {
        LogBudget::new(PEER_LINES_PER_WINDOW, PEER_LOG_WINDOW)
    }
}

impl LogBudget {
    /// A budget of `lines_per_window` lines per `window`.
    pub const fn new(lines_per_window: u32, window: Duration) -> Self {
        LogBudget {
            lines_per_window,
            window,
            window_start: None,
            spent: 0,
            held_back: 0,
        }
    }

    /// Spends a line at `now`, if the window has one left.
    pub fn spend(&mut self, now: Instant) -> Spend {
        let fresh = self
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.window);
        if fresh {
            self.window_start = Some(now);
            self.spent = 0;
        }
        if self.spent >= self.lines_per_window {
            self.held_back = self.held_back.saturating_add(1);
            return Spend::HoldBack;
        }
        self.spent += 1;
        Spend::Log {
            held_back: std::mem::take(&mut self.held_back),
        }
    }
}

/// Logs a WARN line that a peer caused at `now`, within `budget`: held back (at DEBUG)
/// once the window's lines are spent, and the number held back told with the next one
/// that goes out.
///
/// ```
/// use std::time::Instant;
/// use flint_rpc::log_budget::LogBudget;
///
/// let mut budget = LogBudget::default();
/// let peer = "127.0.0.1:9";
/// flint_rpc::peer_warn!(budget, Instant::now(), %peer, "closing connection: bad magic");
/// ```
#[macro_export]
macro_rules! peer_warn {
    ($budget:expr, $now:expr, $($arg:tt)+) => {
        match $budget.spend($now) {
            $crate::log_budget::Spend::Log { held_back } => {
                if held_back > 0 {
                    $crate::__tracing::warn!(
                        "{held_back} warning(s) about what peers did were held back since \
                         the last one (logged at DEBUG)"
                    );
                }
                $crate::__tracing::warn!($($arg)+);
            }
            $crate::log_budget::Spend::HoldBack => $crate::__tracing::debug!($($arg)+),
        }
    };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lines_beyond_the_window_s_are_held_back_and_counted() {
        let mut budget = LogBudget::new(3, Duration::from_secs(10));
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(budget.spend(start), Spend::Log { held_back: 0 });
        }
        for second in 0..10 {
            let now = start + Duration::from_secs(second);
            assert_eq!(budget.spend(now), Spend::HoldBack, "second {second}");
        }
        let next = start + Duration::from_secs(10);
        assert_eq!(budget.spend(next), Spend::Log { held_back: 10 });
        assert_eq!(budget.spend(next), Spend::Log { held_back: 0 });
    }
}
