//! flint-wire: the frames and messages flint speaks on a TCP connection.
//!
//! No I/O, no threads, no clock: this crate turns messages into bytes and bytes into
//! validated messages, and is the part of flint that reads untrusted input. The RPC layer
//! (flint-rpc) moves its frames over sockets.
//!
//! ```
//! use bytes::BytesMut;
//! use flint_wire::{Encoder, FrameDecoder, Message, Route, TaskDescription};
//!
//! let task = TaskDescription {
//!     task_id: 17,
//!     attempt_number: 0,
//!     executor_id: "exec-1".into(),
//!     name: "task 0.0 in stage 0.0 (TID 17)".into(),
//!     index: 0,
//!     partition_id: 0,
//!     extras: None,
//!     cpus: 1,
//!     serialized_task: bytes::Bytes::from_static(b"noop"),
//! };
//! let limit = 128 << 20; // rpc.message.maxSize, in bytes
//! let mut out = BytesMut::new();
//! let route = Route::OneWay { endpoint: "Executor".into() };
//! Encoder::new(limit).encode(&route, &Message::LaunchTask(task), &mut out)?;
//!
//! let mut decoder = FrameDecoder::new(limit);
//! decoder.feed(&out)?;
//! let frame = decoder.next_frame()?.expect("a whole frame");
//! let envelope = frame.envelope()?; // validated, read in place
//! let flint_wire::ArchivedMessage::LaunchTask(task) = &envelope.message else { unreachable!() };
//! let serialized = frame.bytes_of(task.serialized_task.as_slice()); // no copy
//! assert_eq!(&serialized[..], b"noop");
//! # Ok::<(), flint_wire::WireError>(())
//! ```
//!
//! # Frame format (protocol version 1)
//!
//! A connection carries a sequence of frames. Every frame starts at an offset in the
//! stream that is a multiple of 16 and is a 16-byte header, the payload, and 0 to 15 zero
//! bytes of padding that bring the frame to a multiple of 16 bytes. All integers are
//! little-endian.
//!
//! | offset | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 0 | 4 | magic | the bytes `F` `L` `N` `T` (`46 4C 4E 54`) |
//! | 4 | 4 | crc | `u32` CRC-32 (IEEE, as `crc32fast`) of bytes 8..16 of the header followed by the payload: one contiguous range; in a sealed frame, the low 32 bits of its sequence number |
//! | 8 | 1 | version | protocol version, `1` |
//! | 9 | 1 | kind | [`MessageKind`] code of the message in the payload |
//! | 10 | 2 | flags | `u16`: bit 0 [`FLAG_SEALED`], bit 1 [`FLAG_WILL_SEAL`] (handshake frames only); every other bit must be 0 |
//! | 12 | 4 | payload length | `u32`, bytes of payload, padding excluded |
//! | 16 | n | payload | an rkyv 0.8 archive of an [`Envelope`] (little-endian, aligned, 32-bit relative pointers), root at its end |
//! | 16 + n | 0..15 | padding | zero bytes up to the next multiple of 16 |
//! | after the padding | 16 | tag | sealed frames only: the AEAD's authentication tag |
//!
//! Checks, in the order the receiver makes them:
//!
//! 1. As soon as the 16 bytes of a header are in (checked by the first
//!    [`FrameDecoder::next_frame`] or [`FrameDecoder::read_from`] that finds them, before
//!    either waits for or reads more of the frame): the magic ([`WireError::BadMagic`]), the
//!    version ([`WireError::VersionMismatch`], naming both versions), the kind
//!    ([`WireError::UnknownKind`]), the flags ([`WireError::UnknownFlags`]), and the
//!    payload length against `rpc.message.maxSize` ([`WireError::FrameTooLarge`], naming
//!    the key, the announced size and the limit), and whether the frame is sealed as the
//!    connection requires ([`WireError::Unsealed`], [`WireError::UnexpectedSeal`]). Nothing more of the frame is read or
//!    awaited before these pass, but what arrived together with the header is buffered
//!    already: with `read_from`, at most one read (up to 256 KiB); with
//!    [`FrameDecoder::feed`], whatever the caller fed. Once they pass, room for up to 256 KiB of the frame is reserved and the rest
//!    grows with the bytes that actually arrive. `read_from` never takes the receive
//!    buffer beyond one frame at the limit plus one read
//!    ([`FrameDecoder::buffer_bound`]).
//! 2. Once the whole frame is in: a sealed frame is opened ([`WireError::OutOfSequence`],
//!    [`WireError::Forged`]); the padding is zero ([`WireError::BadPadding`]) and, for a
//!    frame in clear, the CRC matches ([`WireError::ChecksumMismatch`]).
//! 3. When the receiver reads the message ([`Frame::envelope`]): the payload is a valid
//!    archive (bytecheck; [`WireError::InvalidPayload`], naming the message kind, the
//!    check that failed and the field it was in, see [`CheckError`]) whose message is of the header's
//!    kind ([`WireError::KindMismatch`]).
//!
//! A failure at step 1 or 2 closes the decoder: it yields nothing more, so nothing the
//! peer sent after a bad frame is processed, and the connection is to be closed.
//!
//! Because frames are padded to 16 bytes and the receive buffer's allocation is aligned
//! to 16, every payload starts at an address that is a multiple of 16, which is at least
//! the alignment of every archived type here, so payloads are read in place. The body of
//! a [`Message::Custom`] (an application's own archive, as flint-rpc's typed user
//! messages carry) starts at a multiple of [`BODY_ALIGN`] inside the payload, 0 to 15
//! unreferenced bytes after what precedes it, so it is read in place as well. Should an
//! allocator hand out a less aligned buffer, the decoder copies that payload to an
//! aligned one and counts it in [`DecoderStats::realigned`].
//!
//! # Sealed frames
//!
//! A connection that encrypts (flint-rpc's `network.crypto.enabled`) seals every frame
//! after its handshake: the payload and padding are encrypted in place, the whole header
//! is the associated data, and the tag follows the padding ([`TAG_LEN`], 16 bytes, so
//! frames stay aligned and payloads are still read in place, once opened where they
//! lie). The cipher and its keys are the transport's; a sealed frame's CRC field carries
//! the low 32 bits of its sequence number (the nonce is the whole number, which the
//! receiver counts itself), so that a frame out of sequence is named as such rather than
//! as merely failing to authenticate. Kind and length travel in clear, as TLS's record
//! lengths do. A decoder given a [`FrameOpener`] ([`FrameDecoder::set_opener`]) refuses a
//! frame in clear, and one without refuses a sealed frame, from the header alone.

#![warn(missing_docs)]
// The one exception is reading into uninitialized memory (`read_uninit`), each block
// with its safety argument.
#![deny(unsafe_code)]

mod aligned_bytes;
mod check_error;
mod decoded_size;
mod decoder;
mod encoder;
mod error;
mod failure_text;
#[doc(hidden)]
pub mod fuzzing;
mod header;
mod kind;
mod map_output;
// rkyv's derive generates public resolver enums whose variant fields carry no docs; every
// item written in this module is documented.
#[allow(missing_docs)]
mod message;
#[allow(unsafe_code)]
mod read_uninit;
pub mod records;
mod shared_str;
mod task_name;
mod task_payload;
#[cfg(test)]
mod tests;
mod units;

pub use aligned_bytes::{
    access_body, AlignedBytes, AlignedBytesResolver, BODY_ALIGN, MAX_BODY_DEPTH,
};
pub use check_error::CheckError;
pub use decoded_size::{check_decoded_size, DecodedSize, Owned};
pub use decoder::{validate_envelope, DecoderStats, Frame, FrameDecoder, FrameOpener};
pub use encoder::{Encoder, PayloadWriter, UserSerializer};
pub use error::{WireError, CRYPTO_KEY, MAX_SIZE_KEY};
pub use failure_text::{cut_text, MAX_FAILURE_TEXT, MAX_REFUSAL_TEXT};
pub use header::{
    padded_frame_len, FrameHeader, FLAG_SEALED, FLAG_WILL_SEAL, FRAME_ALIGN, HEADER_LEN,
    KNOWN_FLAGS, MAGIC, MAX_FRAME_PAYLOAD, PROTOCOL_VERSION, TAG_LEN,
};
pub use kind::MessageKind;
pub use map_output::{
    ArchivedKnownStatuses, ArchivedShuffleStatuses, KnownStatuses, MapStatusCache, ShuffleStatuses,
};
pub use message::*;
pub use read_uninit::ReadUninit;
pub use shared_str::{AsArchivedString, SharedStr};
pub use task_name::{ArchivedTaskName, TaskName};
pub use task_payload::{
    ShuffleRead, ShuffleWrite, StageInfo, TaskPayload, BLOCK_MANAGER_ENDPOINT, BROADCAST_ENDPOINT,
    DRIVER_ENDPOINT, EXECUTOR_ENDPOINT, HEARTBEAT_ENDPOINT, MAP_OUTPUT_TRACKER_ENDPOINT,
    MAX_FUNCTION_NAME,
};
pub use units::bytes_to_string;

/// The default `rpc.message.maxSize`: 128 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 128 * 1024 * 1024;
