//! The serialized form of a task, and the names of the endpoints the driver and the
//! executors talk to.
//!
//! A task's serialized form ([`crate::TaskDescription::serialized_task`]) names the task
//! function to run and carries its input:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 1 | length `n` of the function name, 1 to 255 |
//! | 1 | n | the function name, UTF-8 |
//! | 1 + n | rest | the input, opaque bytes handed to the function |
//!
//! The executor reads both in place: the input it hands to the function is a view of the
//! received frame.
//!
//! ```
//! use flint_wire::TaskPayload;
//!
//! let payload = TaskPayload::encode("sleep", b"50")?;
//! let task = TaskPayload::parse(&payload)?;
//! assert_eq!(task.function, "sleep");
//! assert_eq!(task.input, b"50");
//! # Ok::<(), flint_wire::WireError>(())
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::WireError;

/// Name of the driver's endpoint (the seeds' `CoarseGrainedScheduler`): executors
/// register with it and send it status updates.
pub const DRIVER_ENDPOINT: &str = "CoarseGrainedScheduler";
/// Name of the driver's heartbeat receiver endpoint.
pub const HEARTBEAT_ENDPOINT: &str = "HeartbeatReceiver";
/// Name of an executor's endpoint: the driver sends it tasks, kills and stops.
pub const EXECUTOR_ENDPOINT: &str = "Executor";

/// The longest function name a serialized task can carry.
pub const MAX_FUNCTION_NAME: usize = u8::MAX as usize;

/// A serialized task, read in place: the function to run and its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPayload<'a> {
    /// The registered name of the task function.
    pub function: &'a str,
    /// The function's input.
    pub input: &'a [u8],
}

impl<'a> TaskPayload<'a> {
    /// Reads a serialized task; fails if it is empty, its name is empty, longer than the
    /// bytes that follow, or not UTF-8.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, WireError> {
        let (&len, rest) = bytes
            .split_first()
            .ok_or_else(|| bad("the serialized task is empty"))?;
        let len = usize::from(len);
        if len == 0 {
            return Err(bad("the serialized task names no function"));
        }
        if rest.len() < len {
            return Err(bad(format!(
                "the function name announces {len} bytes but only {} follow",
                rest.len()
            )));
        }
        let (name, input) = rest.split_at(len);
        let function =
            std::str::from_utf8(name).map_err(|_| bad("the function name is not UTF-8"))?;
        Ok(TaskPayload { function, input })
    }

    /// Serializes a task that runs `function` on `input`.
    pub fn encode(function: &str, input: &[u8]) -> Result<Bytes, WireError> {
        if function.is_empty() || function.len() > MAX_FUNCTION_NAME {
            return Err(bad(format!(
                "a task function name has 1 to {MAX_FUNCTION_NAME} bytes, not {}",
                function.len()
            )));
        }
        let mut out = BytesMut::with_capacity(1 + function.len() + input.len());
        out.put_u8(function.len() as u8);
        out.put_slice(function.as_bytes());
        out.put_slice(input);
        Ok(out.freeze())
    }
}

fn bad(reason: impl Into<String>) -> WireError {
    WireError::BadTaskPayload(reason.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_the_documented_bytes() {
        let bytes = TaskPayload::encode("echo", b"hi").unwrap();
        assert_eq!(&bytes[..], b"\x04echohi");
    }

    #[test]
    fn malformed_payloads_are_errors_that_say_why() {
        for (bytes, why) in [
            (&b""[..], "empty"),
            (b"\x00abc", "names no function"),
            (b"\x09abc", "announces 9 bytes but only 3 follow"),
            (b"\x02\xff\xfe", "not UTF-8"),
        ] {
            let text = TaskPayload::parse(bytes).unwrap_err().to_string();
            assert!(text.contains(why), "{text}");
        }
        assert!(TaskPayload::encode("", b"").is_err());
        assert!(TaskPayload::encode(&"x".repeat(256), b"").is_err());
    }

    proptest! {
        #[test]
        fn round_trips(function in "[a-z:-]{1,255}", input in proptest::collection::vec(any::<u8>(), 0..64)) {
            let bytes = TaskPayload::encode(&function, &input).unwrap();
            let task = TaskPayload::parse(&bytes).unwrap();
            prop_assert_eq!(task.function, function.as_str());
            prop_assert_eq!(task.input, &input[..]);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = TaskPayload::parse(&bytes);
        }
    }
}
