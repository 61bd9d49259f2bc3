//! Durations and sizes as the seeds write them (`120s`, `100ms`, `128m`, `1g`).

use std::time::Duration;

use super::key::TimeUnit;
use super::MAX_DURATION;

/// Why a size did not parse.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SizeError {
    Malformed,
    Overflow,
}

/// Why a duration did not parse.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DurationError {
    Malformed,
    /// Longer than [`MAX_DURATION`].
    TooLong,
}

/// Whether `value` is a whole number, with or without a unit, whose digits do not fit a
/// `u64`: too large rather than malformed.
fn digits_overflow(value: &str) -> bool {
    let digits = value
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic());
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Splits a trimmed value into its digits and its (lowercased) suffix.
fn split_number(value: &str) -> Option<(u64, String)> {
    let value = value.trim();
    let digits_end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, suffix) = value.split_at(digits_end);
    if digits.is_empty() || !suffix.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    // Digits only, so the parse fails only on overflow; both are "not a duration/size".
    let number = digits.parse::<u64>().ok()?;
    Some((number, suffix.to_ascii_lowercase()))
}

/// Parses a duration as the seeds do; a bare number is in `bare`. Longer than
/// [`MAX_DURATION`] is an error.
pub(crate) fn parse_duration(value: &str, bare: TimeUnit) -> Result<Duration, DurationError> {
    let Some((n, suffix)) = split_number(value) else {
        return Err(if digits_overflow(value) {
            DurationError::TooLong
        } else {
            DurationError::Malformed
        });
    };
    let suffix = match suffix.as_str() {
        "" => bare.suffix(),
        other => other,
    };
    let duration = match suffix {
        "us" => Some(Duration::from_micros(n)),
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" | "min" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(60 * 60).map(Duration::from_secs),
        "d" => n.checked_mul(24 * 60 * 60).map(Duration::from_secs),
        _ => return Err(DurationError::Malformed),
    };
    match duration {
        Some(duration) if duration <= MAX_DURATION => Ok(duration),
        _ => Err(DurationError::TooLong),
    }
}

/// Parses a size in bytes as the seeds do; a bare number is in units of `bare` bytes.
pub(crate) fn parse_size(value: &str, bare: u64) -> Result<u64, SizeError> {
    let Some((n, suffix)) = split_number(value) else {
        // Distinguish "too many digits" from "not a size".
        return if digits_overflow(value) {
            Err(SizeError::Overflow)
        } else {
            Err(SizeError::Malformed)
        };
    };
    let unit: u64 = match suffix.as_str() {
        "" => bare,
        "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        "t" | "tb" => 1 << 40,
        "p" | "pb" => 1 << 50,
        _ => return Err(SizeError::Malformed),
    };
    n.checked_mul(unit).ok_or(SizeError::Overflow)
}
