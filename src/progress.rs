//! How a job's progress is shown: a bar on a terminal (rounded rate, ETA), and when
//! stderr is not one (a log file, a CI job), a line at INFO every few seconds
//! ([`ProgressLines`]), which decides from the instants it is given.

use std::time::{Duration, Instant};

/// How often a progress line is logged when stderr is not a terminal.
pub const LINE_INTERVAL: Duration = Duration::from_secs(5);

/// A rate (per second) rounded for a person: `0.5`, `12`, `12,346`.
pub fn rate_text(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec <= 0.0 {
        return "0".to_owned();
    }
    if per_sec < 9.95 {
        return format!("{per_sec:.1}");
    }
    // Beyond what an f64 holds as a whole number the digits mean nothing anyway.
    let whole = per_sec.round().min(1e15) as u64;
    let digits = whole.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 2);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A time left, rounded to what matters at its size: `7s`, `3m05s`, `2h10m`.
pub fn duration_text(duration: Duration) -> String {
    let seconds = duration.as_secs_f64().round() as u64;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, (seconds % 3600) / 60),
    }
}

/// The time `left` tasks take at `per_sec`, when there is a rate to go by.
pub fn eta(left: u64, per_sec: f64) -> Option<Duration> {
    (per_sec.is_finite() && per_sec > 0.0)
        .then(|| Duration::try_from_secs_f64(left as f64 / per_sec).ok())
        .flatten()
}

/// The periodic progress line of a job whose stderr is not a terminal: at most one each
/// `interval`, none once every task is done (the report follows), its rate over the
/// time since the previous line. When the tasks counted change (a job of stages moves
/// to its next stage), the rate starts again from there.
#[derive(Debug)]
pub struct ProgressLines {
    interval: Duration,
    next: Instant,
    /// When the previous line (or the change of tasks) was, and the tasks done then.
    last: (Instant, usize),
    /// The tasks in all of the last call.
    total: usize,
}

impl ProgressLines {
    /// Lines for a job that starts at `now`, the first one `interval` later.
    pub fn new(now: Instant, interval: Duration) -> Self {
        ProgressLines {
            interval,
            next: now + interval,
            last: (now, 0),
            total: 0,
        }
    }

    /// `done` of `total` tasks are done at `now`: the line to log, if one is due.
    pub fn on_progress(&mut self, now: Instant, done: usize, total: usize) -> Option<String> {
        if total != self.total || done < self.last.1 {
            self.total = total;
            self.last = (now, done);
        }
        if now < self.next || done >= total {
            return None;
        }
        let (then, done_then) = self.last;
        // Too soon after a change for a rate: the line waits a little.
        if now.saturating_duration_since(then) < self.interval / 5 {
            return None;
        }
        let elapsed = now.saturating_duration_since(then).as_secs_f64();
        let per_sec = if elapsed > 0.0 {
            done.saturating_sub(done_then) as f64 / elapsed
        } else {
            0.0
        };
        self.last = (now, done);
        self.next = now + self.interval;
        let left = total.saturating_sub(done) as u64;
        let eta = eta(left, per_sec).map_or_else(|| "unknown".to_owned(), duration_text);
        Some(format!(
            "{done}/{total} tasks done ({}%), {} tasks/s, ETA {eta}",
            done * 100 / total.max(1),
            rate_text(per_sec),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_rounded_for_a_person() {
        assert_eq!(rate_text(0.0), "0");
        assert_eq!(rate_text(f64::NAN), "0");
        assert_eq!(rate_text(0.449), "0.4");
        assert_eq!(rate_text(9.94), "9.9");
        assert_eq!(rate_text(9.96), "10");
        assert_eq!(rate_text(999.5), "1,000");
        assert_eq!(rate_text(123_456.789), "123,457");
        assert_eq!(rate_text(1_234_567.0), "1,234,567");
    }

    #[test]
    fn times_left_are_rounded_to_their_size() {
        assert_eq!(duration_text(Duration::from_millis(6_600)), "7s");
        assert_eq!(duration_text(Duration::from_secs(185)), "3m05s");
        assert_eq!(duration_text(Duration::from_secs(7_830)), "2h10m");
        assert_eq!(eta(100, 50.0), Some(Duration::from_secs(2)));
        assert_eq!(eta(100, 0.0), None);
        assert_eq!(eta(u64::MAX, f64::MIN_POSITIVE), None);
    }

    #[test]
    fn a_line_every_interval_with_the_rate_since_the_last_one() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut lines = ProgressLines::new(start, Duration::from_secs(5));
        assert_eq!(lines.on_progress(at(100), 10, 1000), None);
        assert_eq!(lines.on_progress(at(4_999), 400, 1000), None);
        assert_eq!(
            lines.on_progress(at(5_000), 500, 1000).as_deref(),
            Some("500/1000 tasks done (50%), 100 tasks/s, ETA 5s")
        );
        // Not again before the interval, whatever happens meanwhile.
        assert_eq!(lines.on_progress(at(9_999), 900, 1000), None);
        // The rate of the last interval: 100 tasks in 5 s.
        assert_eq!(
            lines.on_progress(at(10_000), 600, 1000).as_deref(),
            Some("600/1000 tasks done (60%), 20 tasks/s, ETA 20s")
        );
        // Nothing done in an interval: no rate, no ETA.
        assert_eq!(
            lines.on_progress(at(15_000), 600, 1000).as_deref(),
            Some("600/1000 tasks done (60%), 0 tasks/s, ETA unknown")
        );
        // Done: the report says the rest.
        assert_eq!(lines.on_progress(at(60_000), 1000, 1000), None);
    }

    #[test]
    fn the_rate_starts_again_when_the_tasks_counted_change() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut lines = ProgressLines::new(start, Duration::from_secs(5));
        assert_eq!(lines.on_progress(at(0), 0, 100), None);
        // The first stage ends at 4 s; the second, of 50 tasks, starts.
        assert_eq!(lines.on_progress(at(4_000), 99, 100), None);
        // Due, but 100 ms into the new stage: no rate yet.
        assert_eq!(lines.on_progress(at(5_000), 0, 50), None);
        assert_eq!(lines.on_progress(at(5_500), 5, 50), None);
        // 20 tasks in 2 s of this stage.
        assert_eq!(
            lines.on_progress(at(7_000), 20, 50).as_deref(),
            Some("20/50 tasks done (40%), 10 tasks/s, ETA 3s")
        );
        assert_eq!(lines.on_progress(at(8_000), 30, 50), None);
    }
}
