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
//! A task of a job's stage ([`StageInfo`]) also says which shuffle it writes and which it
//! reads; its form starts with a 0 byte, which no plain task's does (a name has at least
//! one byte):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 1 | 0: a stage task |
//! | 1 | 1 | length `n` of the function name, 1 to 255 |
//! | 2 | n | the function name, UTF-8 |
//! | 2 + n | 8 | the map-output epoch the driver launched it with, little endian |
//! | 10 + n | 4 | the shuffle it writes, or `u32::MAX` for none (a result task) |
//! | 14 + n | 4 | that shuffle's reduce partitions |
//! | 18 + n | 2 | `k`, the shuffles it reads |
//! | 20 + n | 8 k | each: shuffle id, its map partitions (4 bytes each) |
//! | 20 + n + 8k | 4 | `s`, the length of the map statuses it carries (0: none) |
//! | 24 + n + 8k | s | the map statuses of the shuffles it reads, when the driver sends them along ([`crate::KnownStatuses`]) |
//! | 24 + n + 8k + s | rest | the input |
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
/// Name of the driver's map output tracker endpoint (the seeds' `MapOutputTracker`):
/// executors ask it where a shuffle's map outputs are.
pub const MAP_OUTPUT_TRACKER_ENDPOINT: &str = "MapOutputTracker";
/// Name of an executor's block server endpoint (the seeds' `BlockManager`), on its own
/// port (`blockManager.port`): other executors fetch shuffle blocks from it.
pub const BLOCK_MANAGER_ENDPOINT: &str = "BlockManager";
/// The driver's broadcast manager: where executors learn how a broadcast is cut and
/// fetch pieces no other executor holds yet.
pub const BROADCAST_ENDPOINT: &str = "BroadcastManager";

/// The longest function name a serialized task can carry.
pub const MAX_FUNCTION_NAME: usize = u8::MAX as usize;

/// A serialized task, read in place: the function to run and its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPayload<'a> {
    /// The registered name of the task function.
    pub function: &'a str,
    /// The function's input.
    pub input: &'a [u8],
    /// For a task of a job's stage: the shuffles it writes and reads.
    pub stage: Option<StageInfo<'a>>,
}

/// The shuffle a stage's map tasks write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShuffleWrite {
    /// The shuffle.
    pub shuffle_id: u32,
    /// Its reduce partitions: the buckets each map task writes.
    pub partitions: u32,
}

/// A shuffle a stage's tasks read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShuffleRead {
    /// The shuffle.
    pub shuffle_id: u32,
    /// Its map partitions: the outputs each reduce partition gathers.
    pub maps: u32,
}

/// What a stage task's serialized form says about shuffles, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageInfo<'a> {
    /// The map-output epoch the driver knew when it launched the task: an executor whose
    /// cached map output locations are older asks again.
    pub epoch: u64,
    /// The shuffle this task writes (a shuffle map task), or `None` (a result task).
    pub writes: Option<ShuffleWrite>,
    reads: &'a [u8],
    /// The statuses of the shuffles it reads, archived, when the driver sent them along
    /// ([`crate::KnownStatuses::decode`]); empty when it did not.
    pub statuses: &'a [u8],
}

/// Bytes of one read in the serialized form.
const READ_LEN: usize = 8;
/// The marker of a stage task's serialized form.
const STAGE_MARKER: u8 = 0;
/// The shuffle id that says "writes none".
const NO_SHUFFLE: u32 = u32::MAX;

impl<'a> StageInfo<'a> {
    /// The shuffles the task reads, in the order the driver listed them.
    pub fn reads(&self) -> impl ExactSizeIterator<Item = ShuffleRead> + 'a {
        self.reads.chunks_exact(READ_LEN).map(|read| ShuffleRead {
            shuffle_id: u32::from_le_bytes([read[0], read[1], read[2], read[3]]),
            maps: u32::from_le_bytes([read[4], read[5], read[6], read[7]]),
        })
    }
}

impl<'a> TaskPayload<'a> {
    /// Reads a serialized task; fails if it is empty, its name is empty, longer than the
    /// bytes that follow, or not UTF-8, or a stage task's header is cut short.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, WireError> {
        let (&first, rest) = bytes
            .split_first()
            .ok_or_else(|| bad("the serialized task is empty"))?;
        if first == STAGE_MARKER {
            return Self::parse_stage(rest);
        }
        let (function, input) = name_then_rest(first, rest)?;
        Ok(TaskPayload {
            function,
            input,
            stage: None,
        })
    }

    fn parse_stage(bytes: &'a [u8]) -> Result<Self, WireError> {
        let (&len, rest) = bytes
            .split_first()
            .ok_or_else(|| bad("the stage task names no function"))?;
        let (function, rest) = name_then_rest(len, rest)?;
        let Some((header, rest)) = rest.split_first_chunk::<18>() else {
            return Err(bad("the stage task's header is cut short"));
        };
        let epoch = u64::from_le_bytes(header[0..8].try_into().expect("8 bytes"));
        let shuffle_id = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        let partitions = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        let reads = usize::from(u16::from_le_bytes([header[16], header[17]]));
        // One encoding for a task that writes no shuffle: nothing else may read the same.
        if shuffle_id == NO_SHUFFLE && partitions != 0 {
            return Err(bad(format!(
                "the stage task writes no shuffle but announces {partitions} partitions"
            )));
        }
        if rest.len() < reads * READ_LEN {
            return Err(bad(format!(
                "the stage task announces {reads} shuffles read but only {} bytes follow",
                rest.len()
            )));
        }
        let (reads, rest) = rest.split_at(reads * READ_LEN);
        let Some((length, rest)) = rest.split_first_chunk::<4>() else {
            return Err(bad("the stage task's statuses length is cut short"));
        };
        let length = u32::from_le_bytes(*length) as usize;
        if rest.len() < length {
            return Err(bad(format!(
                "the stage task announces {length} bytes of map statuses but only {} follow",
                rest.len()
            )));
        }
        let (statuses, input) = rest.split_at(length);
        Ok(TaskPayload {
            function,
            input,
            stage: Some(StageInfo {
                epoch,
                writes: (shuffle_id != NO_SHUFFLE).then_some(ShuffleWrite {
                    shuffle_id,
                    partitions,
                }),
                reads,
                statuses,
            }),
        })
    }

    /// Serializes a task that runs `function` on `input`.
    pub fn encode(function: &str, input: &[u8]) -> Result<Bytes, WireError> {
        check_name(function)?;
        let mut out = BytesMut::with_capacity(1 + function.len() + input.len());
        out.put_u8(function.len() as u8);
        out.put_slice(function.as_bytes());
        out.put_slice(input);
        Ok(out.freeze())
    }

    /// Serializes a task of a job's stage: it runs `function` on `input`, writes the
    /// shuffle `writes` (if any) and reads the shuffles `reads`, with the driver's
    /// map-output `epoch` and, if not empty, the statuses of the shuffles it reads
    /// ([`crate::KnownStatuses::encode`]).
    pub fn encode_stage(
        function: &str,
        input: &[u8],
        epoch: u64,
        writes: Option<ShuffleWrite>,
        reads: &[ShuffleRead],
        statuses: &[u8],
    ) -> Result<Bytes, WireError> {
        check_name(function)?;
        let count = u16::try_from(reads.len()).map_err(|_| {
            bad(format!(
                "a stage task reads at most 65535 shuffles, not {}",
                reads.len()
            ))
        })?;
        if writes.is_some_and(|w| w.shuffle_id == NO_SHUFFLE) {
            return Err(bad(format!("shuffle id {NO_SHUFFLE} is reserved")));
        }
        let statuses_len =
            u32::try_from(statuses.len()).map_err(|_| bad("map statuses of 4 GiB or more"))?;
        let mut out = BytesMut::with_capacity(
            26 + function.len() + reads.len() * READ_LEN + statuses.len() + input.len(),
        );
        out.put_u8(STAGE_MARKER);
        out.put_u8(function.len() as u8);
        out.put_slice(function.as_bytes());
        out.put_u64_le(epoch);
        let (shuffle_id, partitions) =
            writes.map_or((NO_SHUFFLE, 0), |w| (w.shuffle_id, w.partitions));
        out.put_u32_le(shuffle_id);
        out.put_u32_le(partitions);
        out.put_u16_le(count);
        for read in reads {
            out.put_u32_le(read.shuffle_id);
            out.put_u32_le(read.maps);
        }
        out.put_u32_le(statuses_len);
        out.put_slice(statuses);
        out.put_slice(input);
        Ok(out.freeze())
    }
}

/// A name of `len` bytes at the start of `rest`, and what follows it.
fn name_then_rest(len: u8, rest: &[u8]) -> Result<(&str, &[u8]), WireError> {
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
    let (name, rest) = rest.split_at(len);
    let function = std::str::from_utf8(name).map_err(|_| bad("the function name is not UTF-8"))?;
    Ok((function, rest))
}

fn check_name(function: &str) -> Result<(), WireError> {
    if function.is_empty() || function.len() > MAX_FUNCTION_NAME {
        return Err(bad(format!(
            "a task function name has 1 to {MAX_FUNCTION_NAME} bytes, not {}",
            function.len()
        )));
    }
    Ok(())
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
            (b"\x00", "names no function"),
            (b"\x00\x00abc", "names no function"),
            (b"\x00\x01a\x01", "header is cut short"),
            (
                b"\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x02\x00abc",
                "announces 2 shuffles read but only 3 bytes follow",
            ),
            (
                b"\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00abc",
                "announces 9 bytes of map statuses but only 3 follow",
            ),
            (
                b"\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00",
                "writes no shuffle but announces 5 partitions",
            ),
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
        fn stage_tasks_round_trip(
            function in "[a-z:-]{1,255}",
            input in proptest::collection::vec(any::<u8>(), 0..64),
            epoch in any::<u64>(),
            writes in proptest::option::of((0..u32::MAX, any::<u32>())),
            reads in proptest::collection::vec((any::<u32>(), any::<u32>()), 0..5),
            statuses in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let writes = writes.map(|(shuffle_id, partitions)| ShuffleWrite { shuffle_id, partitions });
            let reads: Vec<ShuffleRead> = reads.into_iter().map(|(shuffle_id, maps)| ShuffleRead { shuffle_id, maps }).collect();
            let bytes = TaskPayload::encode_stage(&function, &input, epoch, writes, &reads, &statuses).unwrap();
            let task = TaskPayload::parse(&bytes).unwrap();
            prop_assert_eq!(task.function, function.as_str());
            prop_assert_eq!(task.input, &input[..]);
            let stage = task.stage.unwrap();
            prop_assert_eq!(stage.epoch, epoch);
            prop_assert_eq!(stage.writes, writes);
            prop_assert_eq!(stage.reads().collect::<Vec<_>>(), reads);
            prop_assert_eq!(stage.statuses, &statuses[..]);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = TaskPayload::parse(&bytes);
        }

        #[test]
        fn random_stage_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let mut stage = vec![STAGE_MARKER];
            stage.extend_from_slice(&bytes);
            if let Ok(task) = TaskPayload::parse(&stage) {
                let _ = task.stage.map(|stage| stage.reads().count());
            }
        }
    }
}
