//! Encoding envelopes into frames, appended to a reused buffer.

use std::cell::Cell;

use bytes::Bytes;
use bytes::BytesMut;
use rkyv::api::high::HighSerializer;
use rkyv::munge::munge;
use rkyv::rancor::{self, Fallible};
use rkyv::ser::allocator::{Arena, ArenaHandle};
use rkyv::ser::{Positional, Writer, WriterExt};
use rkyv::SerializeUnsized;
use rkyv::{Archive, Place, Serialize};

use crate::aligned_bytes::{AlignedBytesResolver, BODY_ALIGN};
use crate::error::WireError;
use crate::header::{
    frame_crc, FrameHeader, CRC_START, FLAG_SEALED, FRAME_ALIGN, HEADER_LEN, KNOWN_FLAGS,
    MAX_FRAME_PAYLOAD,
};
use crate::kind::MessageKind;
use crate::message::{ArchivedEnvelope, Message, MessageResolver, Route};

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
        let envelope = EnvelopeRef { route, message };
        self.encode_frame(message.kind(), flags, out, |writer, arena| {
            rkyv::api::low::to_bytes_in_with_alloc::<_, _, rancor::Error>(&envelope, writer, arena)
        })
    }

    /// Appends one frame carrying `route` and a [`Message::Custom`] tagged `tag` whose
    /// body is `body`'s rkyv archive, written in place: the frame is byte for byte the
    /// one [`Encoder::encode_with_flags`] makes of a `Custom` message whose body holds
    /// `rkyv::to_bytes(body)`, without that intermediate buffer (flint-rpc's typed user
    /// messages). `flags` and the result are as [`Encoder::encode_with_flags`]'s.
    ///
    /// The body starts at a multiple of [`BODY_ALIGN`] in the payload, so every position
    /// inside it is aligned as it would be at the start of a buffer of its own.
    pub fn encode_user<B>(
        &mut self,
        route: &Route,
        tag: u32,
        body: &B,
        flags: u16,
        out: &mut BytesMut,
    ) -> Result<usize, WireError>
    where
        B: for<'a, 'b> Serialize<UserSerializer<'a, 'b>>,
    {
        let envelope = UserEnvelopeRef { route, tag, body };
        self.encode_frame(MessageKind::Custom, flags, out, |writer, arena| {
            rkyv::api::high::to_bytes_in_with_alloc::<_, _, rancor::Error>(&envelope, writer, arena)
        })
    }

    /// Writes a frame around the payload `serialize` archives into the writer it is
    /// given (see [`Encoder::encode_with_flags`]).
    fn encode_frame(
        &mut self,
        kind: MessageKind,
        flags: u16,
        out: &mut BytesMut,
        serialize: impl for<'w, 'a> FnOnce(
            PayloadWriter<'w>,
            ArenaHandle<'a>,
        ) -> Result<PayloadWriter<'w>, rancor::Error>,
    ) -> Result<usize, WireError> {
        debug_assert_eq!(
            flags & !KNOWN_FLAGS,
            0,
            "flags this version does not define"
        );
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        let limit = self.max_payload.min(MAX_ENCODABLE);
        let refused = Cell::new(None);
        let writer = PayloadWriter {
            buf: &mut *out,
            base: start + HEADER_LEN,
            kept_end: start + HEADER_LEN + limit,
            counted: 0,
            refused: &refused,
        };
        let payload_len = match serialize(writer, self.arena.acquire()) {
            Ok(writer) => writer.pos(),
            Err(error) => {
                out.truncate(start);
                return Err(match refused.get() {
                    Some(size) => WireError::MessageTooLarge { size, limit },
                    None => WireError::InvalidPayload {
                        kind: kind.name(),
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
            kind,
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

/// The rkyv serializer [`Encoder::encode_user`] archives an application's value with:
/// rkyv's high-level one (with sharing, for `Rc` and `Arc`) writing straight into the
/// frame. Types that derive `Serialize` serialize with it; it appears only in bounds.
pub type UserSerializer<'a, 'b> = HighSerializer<PayloadWriter<'b>, ArenaHandle<'a>, rancor::Error>;

/// An rkyv writer that appends to a `BytesMut`, with positions counted from the payload's
/// start so that rkyv's alignment padding is relative to where the payload will sit.
///
/// Past the encoder's limit it only counts what it is given, so that a message over it
/// costs no memory beyond the limit and its error still says how large it is; past
/// `MAX_ENCODABLE` (2 GiB) it fails (and says how far it got in `refused`), before rkyv could
/// be asked for an offset it cannot hold.
pub struct PayloadWriter<'a> {
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

/// An envelope carrying an application's value as the body of a [`Message::Custom`],
/// archived exactly as an owned envelope with that body's archive would be.
struct UserEnvelopeRef<'a, B> {
    route: &'a Route,
    tag: u32,
    body: &'a B,
}

impl<B> Archive for UserEnvelopeRef<'_, B> {
    type Archived = ArchivedEnvelope;
    type Resolver = (<Route as Archive>::Resolver, MessageResolver);

    fn resolve(&self, resolver: Self::Resolver, out: Place<Self::Archived>) {
        munge!(let ArchivedEnvelope { route, message } = out);
        self.route.resolve(resolver.0, route);
        // The body's length comes from the resolver (`AlignedBytesResolver`): the empty
        // `Bytes` stands in for the archive written in place, and costs no allocation.
        let custom = Message::Custom {
            tag: self.tag,
            body: Bytes::new(),
        };
        custom.resolve(resolver.1, message);
    }
}

impl<S, B> Serialize<S> for UserEnvelopeRef<'_, B>
where
    S: Fallible + Writer<S::Error> + ?Sized,
    Route: Serialize<S>,
    B: Serialize<S>,
{
    fn serialize(&self, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        let route = self.route.serialize(serializer)?;
        // As `rkyv::to_bytes` would lay the body out in a buffer of its own: its
        // dependencies, then its root, last, where a reader looks for it.
        let pos = serializer.align(BODY_ALIGN)?;
        self.body.serialize_unsized(serializer)?;
        let len = serializer.pos() - pos;
        Ok((
            route,
            MessageResolver::Custom {
                tag: (),
                body: AlignedBytesResolver::new(pos, len),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;
    use rkyv::rancor;

    use super::Encoder;
    use crate::header::FLAG_SEALED;
    use crate::{access_body, FrameDecoder, Message, Route, WireError};

    /// An application's value of every shape the typed messages document.
    #[derive(
        rkyv::Archive, rkyv::Serialize, Debug, Clone, PartialEq, proptest_derive::Arbitrary,
    )]
    #[rkyv(derive(Debug))]
    struct Shape {
        small: u8,
        wide: u128,
        name: String,
        bytes: Vec<u8>,
        nested: Vec<Inner>,
        choice: Choice,
        maybe: Option<Box<Inner>>,
    }

    #[derive(
        rkyv::Archive, rkyv::Serialize, Debug, Clone, PartialEq, proptest_derive::Arbitrary,
    )]
    #[rkyv(derive(Debug))]
    struct Inner {
        label: String,
        values: Vec<i64>,
    }

    #[derive(
        rkyv::Archive, rkyv::Serialize, Debug, Clone, PartialEq, proptest_derive::Arbitrary,
    )]
    #[rkyv(derive(Debug))]
    enum Choice {
        Nothing,
        Number(f64),
        Pair { left: u32, right: String },
    }

    #[derive(rkyv::Archive, rkyv::Serialize)]
    struct Empty;

    /// The frame of a `Custom` message whose body is `body`'s archive, made the long way.
    fn through_a_buffer_of_its_own<B>(route: &Route, tag: u32, body: &B, flags: u16) -> BytesMut
    where
        B: for<'a> rkyv::Serialize<
            rkyv::api::high::HighSerializer<
                rkyv::util::AlignedVec,
                rkyv::ser::allocator::ArenaHandle<'a>,
                rancor::Error,
            >,
        >,
    {
        let archive = rkyv::to_bytes::<rancor::Error>(body).unwrap();
        let message = Message::Custom {
            tag,
            body: Bytes::copy_from_slice(&archive),
        };
        let mut out = BytesMut::new();
        Encoder::new(1 << 24)
            .encode_with_flags(route, &message, flags, &mut out)
            .unwrap();
        out
    }

    proptest! {
        #[test]
        fn a_value_archived_in_place_makes_the_frame_its_own_buffer_would(
            shape: Shape,
            tag: u32,
            prefix in 0usize..3,
            sealed: bool,
        ) {
            let route = Route::Ask { request_id: 9, endpoint: "adder".into() };
            let flags = if sealed { FLAG_SEALED } else { 0 };
            let expected = through_a_buffer_of_its_own(&route, tag, &shape, flags);
            // Frames already queued before it change nothing: payloads stay aligned.
            let mut encoder = Encoder::new(1 << 24);
            let mut out = BytesMut::new();
            for _ in 0..prefix {
                encoder.encode(&route, &Message::ReviveOffers, &mut out).unwrap();
            }
            let start = out.len();
            let len = encoder.encode_user(&route, tag, &shape, flags, &mut out).unwrap();
            prop_assert_eq!(len, out.len() - start);
            prop_assert_eq!(&out[start..], &expected[..]);
        }
    }

    #[test]
    fn a_value_archived_in_place_reads_back_in_place() {
        let shape = Shape {
            small: 7,
            wide: u128::MAX - 3,
            name: "a name longer than eight bytes".into(),
            bytes: vec![0xAB; 1000],
            nested: vec![Inner {
                label: "inner".into(),
                values: vec![-1, 2, -3],
            }],
            choice: Choice::Pair {
                left: 4,
                right: "right".into(),
            },
            maybe: Some(Box::new(Inner {
                label: String::new(),
                values: vec![],
            })),
        };
        let mut encoder = Encoder::new(1 << 20);
        let mut out = BytesMut::new();
        let route = Route::OneWay {
            endpoint: "e".into(),
        };
        encoder.encode_user(&route, 5, &shape, 0, &mut out).unwrap();
        encoder.encode_user(&route, 6, &Empty, 0, &mut out).unwrap();
        let mut decoder = FrameDecoder::new(1 << 20);
        decoder.feed(&out).unwrap();
        let frame = decoder.next_frame().unwrap().unwrap();
        let crate::ArchivedMessage::Custom { tag, body } = &frame.envelope().unwrap().message
        else {
            panic!("not a Custom message");
        };
        assert_eq!(*tag, 5);
        let archived = access_body::<ArchivedShape>(body.as_slice()).unwrap();
        assert_eq!(archived.small, 7);
        assert_eq!(archived.wide, u128::MAX - 3);
        assert_eq!(archived.name, "a name longer than eight bytes");
        assert_eq!(archived.bytes.as_slice(), &[0xAB; 1000][..]);
        assert_eq!(archived.nested[0].values.as_slice(), &[-1, 2, -3]);
        assert!(
            matches!(&archived.choice, ArchivedChoice::Pair { left, right } if *left == 4 && right == "right")
        );
        // Read where it lies: the archive is inside the frame's payload.
        let payload = frame.payload().as_ptr_range();
        assert!(payload.contains(&archived.bytes.as_slice().as_ptr()));
        let frame = decoder.next_frame().unwrap().unwrap();
        let crate::ArchivedMessage::Custom { tag, body } = &frame.envelope().unwrap().message
        else {
            panic!("not a Custom message");
        };
        assert_eq!((tag.to_native(), body.len()), (6, 0));
    }

    #[test]
    fn a_value_over_the_limit_is_refused_and_leaves_the_buffer_as_it_was() {
        let mut encoder = Encoder::new(4096);
        let mut out = BytesMut::new();
        let route = Route::OneWay {
            endpoint: "e".into(),
        };
        encoder
            .encode(&route, &Message::ReviveOffers, &mut out)
            .unwrap();
        let before = out.clone();
        let big = vec![1u8; 1 << 20];
        let error = encoder
            .encode_user(&route, 1, &big, 0, &mut out)
            .unwrap_err();
        assert!(
            matches!(error, WireError::MessageTooLarge { size, limit: 4096 } if size > 1 << 20),
            "{error:?}"
        );
        assert_eq!(out, before);
        // Nothing beyond the limit was kept while it was being archived.
        assert!(out.capacity() < 64 << 10, "{}", out.capacity());
    }
}
