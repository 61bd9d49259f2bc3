//! Encoding envelopes into frames, appended to a reused buffer.

use bytes::BytesMut;
use rkyv::munge::munge;
use rkyv::rancor::{self, Fallible};
use rkyv::ser::allocator::Arena;
use rkyv::ser::{Positional, Writer};
use rkyv::{Archive, Place, Serialize};

use crate::error::WireError;
use crate::header::{frame_crc, FrameHeader, CRC_START, FRAME_ALIGN, HEADER_LEN};
use crate::message::{ArchivedEnvelope, Message, Route};

/// Encodes messages into frames.
///
/// It keeps rkyv's scratch arena between calls, so once it and the output buffer have
/// grown to the size of the messages being sent, encoding allocates nothing.
///
/// ```
/// use bytes::BytesMut;
/// use flint_wire::{Encoder, FrameDecoder, Message, Route};
///
/// let mut encoder = Encoder::new(1 << 20);
/// let mut out = BytesMut::new();
/// let route = Route::OneWay { endpoint: "Executor".into() };
/// encoder.encode(&route, &Message::ReviveOffers, &mut out).unwrap();
///
/// let mut decoder = FrameDecoder::new(1 << 20);
/// decoder.feed(&out).unwrap();
/// let frame = decoder.next_frame().unwrap().unwrap();
/// assert_eq!(frame.envelope().unwrap().message.kind(), flint_wire::MessageKind::ReviveOffers);
/// ```
pub struct Encoder {
    arena: Arena,
    max_payload: usize,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("arena_capacity", &self.arena.capacity())
            .field("max_payload", &self.max_payload)
            .finish()
    }
}

impl Encoder {
    /// An encoder that refuses payloads above `max_payload` bytes (`rpc.message.maxSize`).
    pub fn new(max_payload: usize) -> Self {
        Encoder {
            arena: Arena::new(),
            max_payload,
        }
    }

    /// The payload limit in bytes.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Appends one frame carrying `route` and `message` to `out` and returns its length
    /// in bytes, padding included.
    ///
    /// A payload above the limit is an error and leaves `out` as it was. The frame starts
    /// at `out.len()`; when `out` holds only whole frames (as it does when only this
    /// method writes to it) every payload in it sits at a multiple of [`FRAME_ALIGN`].
    pub fn encode(
        &mut self,
        route: &Route,
        message: &Message,
        out: &mut BytesMut,
    ) -> Result<usize, WireError> {
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        let envelope = EnvelopeRef { route, message };
        let mut payload_len = 0;
        let writer = PayloadWriter {
            buf: out,
            kept: self.max_payload,
            len: &mut payload_len,
        };
        let failure = rkyv::api::low::to_bytes_in_with_alloc::<_, _, rancor::Error>(
            &envelope,
            writer,
            self.arena.acquire(),
        )
        .err();
        if payload_len > self.max_payload.min(MAX_ENCODABLE) {
            out.truncate(start);
            return Err(WireError::MessageTooLarge {
                size: payload_len,
                limit: self.max_payload.min(MAX_ENCODABLE),
            });
        }
        if let Some(error) = failure {
            out.truncate(start);
            return Err(WireError::InvalidPayload {
                kind: message.kind().name(),
                reason: error.to_string(),
            });
        }
        let mut header = FrameHeader {
            kind: message.kind(),
            flags: 0,
            payload_len: payload_len as u32,
            crc: 0,
        };
        let mut header_bytes = [0u8; HEADER_LEN];
        header.write(&mut header_bytes);
        out[start..start + HEADER_LEN].copy_from_slice(&header_bytes);
        header.crc = frame_crc(&out[start + CRC_START..]);
        out[start + 4..start + 8].copy_from_slice(&header.crc.to_le_bytes());
        let frame_len = header.frame_len();
        out.resize(start + frame_len, 0);
        debug_assert_eq!(frame_len % FRAME_ALIGN, 0);
        Ok(frame_len)
    }
}

/// The largest payload an encoder writes, whatever its limit: rkyv's relative pointers
/// are 32-bit signed offsets, and resolving one beyond them panics.
const MAX_ENCODABLE: usize = i32::MAX as usize;

/// An rkyv writer that appends to a `BytesMut`, with positions counted from the payload's
/// start so that rkyv's alignment padding is relative to where the payload will sit.
///
/// Past `kept` bytes it only counts what it is given, so that a message over the limit
/// costs no memory beyond it and its error still says how large it is; past
/// [`MAX_ENCODABLE`] it fails, before rkyv could be asked for an offset it cannot hold.
struct PayloadWriter<'a> {
    buf: &'a mut BytesMut,
    kept: usize,
    /// The payload's length so far, kept or only counted (at a failure, the length the
    /// refused write would have made).
    len: &'a mut usize,
}

impl Positional for PayloadWriter<'_> {
    fn pos(&self) -> usize {
        *self.len
    }
}

impl<E: rancor::Source> Writer<E> for PayloadWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        let end = self.len.saturating_add(bytes.len());
        *self.len = end;
        if end > MAX_ENCODABLE {
            return Err(E::new(TooLargeToEncode));
        }
        if end <= self.kept {
            self.buf.extend_from_slice(bytes);
        }
        Ok(())
    }
}

/// A payload beyond [`MAX_ENCODABLE`] (reported as [`WireError::MessageTooLarge`]).
#[derive(Debug, thiserror::Error)]
#[error("the payload is larger than 2 GiB")]
struct TooLargeToEncode;

/// An envelope made of borrowed parts, archived exactly as an owned
/// [`crate::Envelope`] would be; it lets callers encode without cloning their message.
struct EnvelopeRef<'a> {
    route: &'a Route,
    message: &'a Message,
}

impl Archive for EnvelopeRef<'_> {
    type Archived = ArchivedEnvelope;
    type Resolver = (<Route as Archive>::Resolver, <Message as Archive>::Resolver);

    fn resolve(&self, resolver: Self::Resolver, out: Place<Self::Archived>) {
        munge!(let ArchivedEnvelope { route, message } = out);
        self.route.resolve(resolver.0, route);
        self.message.resolve(resolver.1, message);
    }
}

impl<S: Fallible + ?Sized> Serialize<S> for EnvelopeRef<'_>
where
    Route: Serialize<S>,
    Message: Serialize<S>,
{
    fn serialize(&self, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        Ok((
            self.route.serialize(serializer)?,
            self.message.serialize(serializer)?,
        ))
    }
}
