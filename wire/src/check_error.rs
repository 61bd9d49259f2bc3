//! The error type validation runs with: which check failed, and where in the message.
//!
//! rkyv's general-purpose `rancor::Error` keeps nothing in builds without debug
//! assertions ("failed without error information; enable debug assertions ..."), which
//! tells an operator nothing about what a peer sent. [`CheckError`] keeps the failed
//! check's text and the path bytecheck traces on the way out (the fields, variants and
//! indices it was checking). It costs nothing until a check fails: a valid payload
//! allocates nothing, and the error is one pointer wide, as small in a `Result` as a
//! `Box`.

use std::fmt;

use rkyv::rancor::{Source, Trace};

/// The most trace entries kept: bytecheck adds one per level of nesting, which the
/// message types bound, but a long path says no more than its innermost steps.
const MAX_TRACE: usize = 16;

/// Why a payload failed validation: the failed check and where it was made.
///
/// Its `Display` is the check, then the path from the innermost field out, e.g.
/// "invalid UTF-8 while checking field 'message' of variant 'Exception' of enum
/// 'ArchivedTaskOutcome', ...".
#[derive(Debug)]
pub struct CheckError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    check: String,
    /// Innermost first, as the traces are added on the way out.
    trace: Vec<String>,
    /// Trace entries beyond [`MAX_TRACE`], dropped.
    dropped: usize,
}

impl CheckError {
    /// The failed check alone, without where it was made.
    pub fn check(&self) -> &str {
        &self.0.check
    }
}

impl CheckError {
    /// The same error with the addresses bytecheck prints (`0x` and 16 hex digits, as in
    /// "ptr 0x00007f392c0024c0 size 8 in range ...") written as offsets from `base`
    /// (`+8`, `-16`): for a text that goes back to the peer that sent the bytes, which
    /// must learn nothing of this process's memory layout, and to whom offsets into what
    /// it sent say more anyway.
    pub fn relative_to(mut self, base: *const u8) -> Self {
        let base = base as usize;
        self.0.check = relative(&self.0.check, base);
        for step in &mut self.0.trace {
            *step = relative(step, base);
        }
        self
    }
}

/// `text` with each `0x` followed by exactly 16 hex digits replaced by its offset from
/// `base`.
fn relative(text: &str, base: usize) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let digits = &rest[at + 2..];
        let len = digits.bytes().take_while(u8::is_ascii_hexdigit).count();
        let address = (len == 16)
            .then(|| u64::from_str_radix(&digits[..16], 16).ok())
            .flatten();
        match address {
            Some(address) => {
                let address = address as usize;
                let _ = if address >= base {
                    write!(out, "+{}", address - base)
                } else {
                    write!(out, "-{}", base - address)
                };
                rest = &digits[16..];
            }
            None => {
                out.push_str("0x");
                rest = digits;
            }
        }
    }
    out.push_str(rest);
    out
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.check)?;
        let mut separator = " ";
        for step in &self.0.trace {
            write!(f, "{separator}{step}")?;
            separator = ", ";
        }
        if self.0.dropped > 0 {
            write!(f, " (and {} more)", self.0.dropped)?;
        }
        Ok(())
    }
}

impl std::error::Error for CheckError {}

impl Trace for CheckError {
    fn trace<R>(mut self, trace: R) -> Self
    where
        R: fmt::Debug + fmt::Display + Send + Sync + 'static,
    {
        if self.0.trace.len() < MAX_TRACE {
            self.0.trace.push(trace.to_string());
        } else {
            self.0.dropped += 1;
        }
        self
    }
}

impl Source for CheckError {
    fn new<T: std::error::Error + Send + Sync + 'static>(source: T) -> Self {
        CheckError(Box::new(Inner {
            check: source.to_string(),
            trace: Vec::new(),
            dropped: 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Bad;
    impl fmt::Display for Bad {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("invalid UTF-8")
        }
    }
    impl std::error::Error for Bad {}

    #[test]
    fn addresses_become_offsets_from_the_base_and_other_numbers_stay() {
        #[derive(Debug)]
        struct Overran;
        impl fmt::Display for Overran {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "subtree pointer overran range: ptr 0x00007f392c0024b0 size 31 in range \
                     0x00007f392c0024c0..0x00007f392c0024e0 (tag 0x1f)",
                )
            }
        }
        impl std::error::Error for Overran {}
        let error = CheckError::new(Overran)
            .trace("while checking at 0x00007f392c0024c8")
            .relative_to(0x7f39_2c00_24c0usize as *const u8);
        assert_eq!(
            error.to_string(),
            "subtree pointer overran range: ptr -16 size 31 in range +0..+32 (tag 0x1f) \
             while checking at +8"
        );
    }

    #[test]
    fn the_check_comes_first_then_the_path_innermost_first_and_a_long_path_is_cut() {
        let error = CheckError::new(Bad)
            .trace("while checking field 'a' of struct 'B'")
            .trace("while checking field 'c' of struct 'D'");
        assert_eq!(
            error.to_string(),
            "invalid UTF-8 while checking field 'a' of struct 'B', while checking field 'c' \
             of struct 'D'"
        );
        assert_eq!(error.check(), "invalid UTF-8");
        let mut deep = CheckError::new(Bad);
        for i in 0..MAX_TRACE + 3 {
            deep = deep.trace(format!("step {i}"));
        }
        let text = deep.to_string();
        assert!(
            text.ends_with(&format!("step {} (and 3 more)", MAX_TRACE - 1)),
            "{text}"
        );
        assert_eq!(std::mem::size_of::<Result<(), CheckError>>(), 8);
    }
}
