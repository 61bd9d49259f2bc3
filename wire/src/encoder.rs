//! Encoding envelopes into frames, appended to a reused buffer.

use std::cell::Cell;

use bytes::BytesMut;
use rkyv::munge::munge;
use rkyv::rancor::{self, Fallible};
use rkyv::ser::allocator::Arena;
use rkyv::ser::{Positional, Writer};
use rkyv::{Archive, Place, Serialize};

use crate::error::WireError;
use crate::header::{
    frame_crc, FrameHeader, CRC_START, FLAG_SEALED, FRAME_ALIGN, HEADER_LEN, KNOWN_FLAGS,
    MAX_FRAME_PAYLOAD,
};
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
        self.encode_with_flags(route, message, 0, out)
    }

    /// As [`Encoder::encode`], with the header's flag bits set to `flags` (of
    /// [`KNOWN_FLAGS`]).
    ///
    /// With [`FLAG_SEALED`] the frame is laid out to be sealed, and is not ready to be
    /// sent until the caller has sealed it: no CRC is computed (the field is left 0, for
    /// the sequence number), and [`crate::TAG_LEN`] zero bytes follow the padding, for the tag;
    /// the length returned counts them. The caller encrypts the payload and padding in
    /// place, with the header as associated data.
    pub fn encode_with_flags(
        &mut self,
        route: &Route,
        message: &Message,
        flags: u16,
        out: &mut BytesMut,
    ) -> Result<usize, WireError> {
        debug_assert_eq!(
            flags & !KNOWN_FLAGS,
            0,
            "flags this version does not define"
        );
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        let envelope = EnvelopeRef { route, message };
        let limit = self.max_payload.min(MAX_ENCODABLE);
        let refused = Cell::new(None);
        let writer = PayloadWriter {
            buf: out,
            base: start + HEADER_LEN,
            kept_end: start + HEADER_LEN + limit,
            counted: 0,
            refused: &refused,
        };
        let written = rkyv::api::low::to_bytes_in_with_alloc::<_, _, rancor::Error>(
            &envelope,
            writer,
            self.arena.acquire(),
        );
        let payload_len = match written {
            Ok(writer) => writer.pos(),
            Err(error) => {
                out.truncate(start);
                return Err(match refused.get() {
                    Some(size) => WireError::MessageTooLarge { size, limit },
                    None => WireError::InvalidPayload {
                        kind: message.kind().name(),
                        reason: error.to_string(),
                    },
                });
            }
        };
        if payload_len > limit {
            out.truncate(start);
            return Err(WireError::MessageTooLarge {
                size: payload_len,
                limit,
            });
        }
        let mut header = FrameHeader {
            kind: message.kind(),
            flags,
            payload_len: payload_len as u32,
            crc: 0,
        };
        let mut header_bytes = [0u8; HEADER_LEN];
        header.write(&mut header_bytes);
        out[start..start + HEADER_LEN].copy_from_slice(&header_bytes);
        if flags & FLAG_SEALED == 0 {
            header.crc = frame_crc(&out[start + CRC_START..]);
            out[start + 4..start + 8].copy_from_slice(&header.crc.to_le_bytes());
        }
        // Padding, and a sealed frame's room for its tag.
        let frame_len = header.frame_len();
        out.resize(start + frame_len, 0);
        debug_assert_eq!(frame_len % FRAME_ALIGN, 0);
        Ok(frame_len)
    }
}

/// The largest payload an encoder writes, whatever its limit: resolving an rkyv relative
/// pointer beyond it panics.
const MAX_ENCODABLE: usize = MAX_FRAME_PAYLOAD;

/// An rkyv writer that appends to a `BytesMut`, with positions counted from the payload's
/// start so that rkyv's alignment padding is relative to where the payload will sit.
///
/// Past the encoder's limit it only counts what it is given, so that a message over it
/// costs no memory beyond the limit and its error still says how large it is; past
/// [`MAX_ENCODABLE`] it fails (and says how far it got in `refused`), before rkyv could
/// be asked for an offset it cannot hold.
struct PayloadWriter<'a> {
    buf: &'a mut BytesMut,
    base: usize,
    /// The buffer's length that the payload may fill, `base` + at most `MAX_ENCODABLE`
    /// bytes; 0 once bytes are only counted.
    kept_end: usize,
    /// Bytes past what was kept, counted only.
    counted: usize,
    refused: &'a Cell<Option<usize>>,
}

impl PayloadWriter<'_> {
    /// A write that takes the payload past what is kept.
    #[cold]
    fn count_only<E: rancor::Source>(&mut self, len: usize) -> Result<(), E> {
        let end = self.pos().saturating_add(len);
        if end > MAX_ENCODABLE {
            self.refused.set(Some(end));
            return Err(E::new(TooLargeToEncode));
        }
        self.counted = end - (self.buf.len() - self.base);
        self.kept_end = 0;
        Ok(())
    }
}

impl Positional for PayloadWriter<'_> {
    fn pos(&self) -> usize {
        self.buf.len() - self.base + self.counted
    }
}

impl<E: rancor::Source> Writer<E> for PayloadWriter<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        if self.buf.len() + bytes.len() <= self.kept_end {
            self.buf.extend_from_slice(bytes);
            return Ok(());
        }
        self.count_only(bytes.len())
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
