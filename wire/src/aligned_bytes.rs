//! Archiving `Bytes` as rkyv does, but starting at a multiple of [`BODY_ALIGN`] in the
//! payload.
//!
//! An application's message ([`Message::Custom`](crate::Message::Custom)) carries an rkyv
//! archive of its own in its body. An archive is read in place only where it starts at
//! an address aligned for its most aligned field; payloads start at a multiple of 16
//! ([`FRAME_ALIGN`](crate::FRAME_ALIGN)) in every receive buffer, under every chunking of
//! the stream, so a body at a multiple of 16 inside the payload is at a multiple of 16 in
//! memory. The archived form is an ordinary `ArchivedVec<u8>`: the up to 15 bytes before
//! the body are padding nobody points at, which a decoder of any version accepts.

use bytes::Bytes;
use rkyv::api::high::HighValidator;
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor::Fallible;
use rkyv::validation::archive::ArchiveValidator;
use rkyv::validation::shared::SharedValidator;
use rkyv::validation::Validator;
use rkyv::Portable;

use crate::CheckError;
use rkyv::ser::{Writer, WriterExt};
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::with::{ArchiveWith, DeserializeWith, SerializeWith};
use rkyv::Place;

/// The alignment of a [`Message::Custom`](crate::Message::Custom) body inside its frame's
/// payload, in bytes: that of the most aligned archived primitive (`u128`).
pub const BODY_ALIGN: usize = 16;

/// How many levels deep [`access_body`] follows an archive before it refuses it: the
/// root is one, and each `Box`, `Vec` or out-of-line `String` one more.
///
/// Validation recurses once per level. The catalogue's types bound their own depth, but
/// an application's type may be recursive (a list, a tree), and a peer could then send a
/// body a million levels deep within `rpc.message.maxSize` to overflow the stack of the
/// thread that validates it. 128 levels take a few tens of KiB of stack, and are deeper
/// than data that is not itself an attack.
pub const MAX_BODY_DEPTH: usize = 128;

/// Validates `body` (an application's archive, as a [`Message::Custom`](crate::Message::Custom)
/// carries) as a `T` and reads it in place, following it at most [`MAX_BODY_DEPTH`]
/// levels deep. A body not at a multiple of `T`'s alignment is an error, not a copy.
/// The error's addresses are offsets into `body` ([`CheckError::relative_to`]): its text
/// goes back to the peer that sent it.
pub fn access_body<T>(body: &[u8]) -> Result<&T, CheckError>
where
    T: Portable + for<'a> CheckBytes<HighValidator<'a, CheckError>>,
{
    // rkyv refuses the push that would bring the count to 0: one more lets the root and
    // MAX_BODY_DEPTH - 1 levels under it through.
    let depth = std::num::NonZeroUsize::new(MAX_BODY_DEPTH + 1);
    let mut validator = Validator::new(
        ArchiveValidator::with_max_depth(body, depth),
        SharedValidator::new(),
    );
    rkyv::api::access_with_context::<T, _, CheckError>(body, &mut validator)
        .map_err(|error| error.relative_to(body.as_ptr()))
}

/// rkyv wrapper that archives [`Bytes`] as an `ArchivedVec<u8>` whose bytes start at a
/// multiple of [`BODY_ALIGN`].
#[derive(Debug)]
pub struct AlignedBytes;

/// Where [`AlignedBytes`] wrote a body and how long it is.
///
/// The length travels in the resolver, not only in the field, so that an encoder that
/// archives an application's value as the body in place
/// ([`Encoder::encode_user`](crate::Encoder::encode_user)) resolves the message with the
/// length it wrote and an empty `Bytes` in the field.
#[derive(Debug)]
pub struct AlignedBytesResolver {
    pos: usize,
    len: usize,
}

impl AlignedBytesResolver {
    /// A body of `len` bytes written at `pos` (a multiple of [`BODY_ALIGN`]).
    pub(crate) fn new(pos: usize, len: usize) -> Self {
        debug_assert_eq!(pos % BODY_ALIGN, 0);
        AlignedBytesResolver { pos, len }
    }
}

impl ArchiveWith<Bytes> for AlignedBytes {
    type Archived = ArchivedVec<u8>;
    type Resolver = AlignedBytesResolver;

    fn resolve_with(_field: &Bytes, resolver: AlignedBytesResolver, out: Place<ArchivedVec<u8>>) {
        ArchivedVec::resolve_from_len(resolver.len, VecResolver::from_pos(resolver.pos), out);
    }
}

impl<S: Fallible + Writer + ?Sized> SerializeWith<Bytes, S> for AlignedBytes {
    fn serialize_with(field: &Bytes, serializer: &mut S) -> Result<AlignedBytesResolver, S::Error> {
        let pos = serializer.align(BODY_ALIGN)?;
        serializer.write(field)?;
        Ok(AlignedBytesResolver::new(pos, field.len()))
    }
}

impl<D: Fallible + ?Sized> DeserializeWith<ArchivedVec<u8>, Bytes, D> for AlignedBytes {
    fn deserialize_with(field: &ArchivedVec<u8>, _: &mut D) -> Result<Bytes, D::Error> {
        Ok(Bytes::copy_from_slice(field.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkyv::{rancor, Archive, Serialize};

    #[derive(Archive, Serialize)]
    struct Body {
        head: u8,
        #[rkyv(with = AlignedBytes)]
        body: Bytes,
    }

    #[test]
    fn the_body_starts_at_a_multiple_of_16_and_reads_as_a_plain_vec() {
        for len in [0usize, 1, 15, 16, 17, 100] {
            let bytes = rkyv::to_bytes::<rancor::Error>(&Body {
                head: 3,
                body: Bytes::from(vec![0xAB; len]),
            })
            .unwrap();
            let archived = rkyv::access::<ArchivedBody, rancor::Error>(&bytes).unwrap();
            assert_eq!(archived.head, 3);
            assert_eq!(archived.body.as_slice(), vec![0xAB; len].as_slice());
            let offset = archived.body.as_ptr() as usize - bytes.as_ptr() as usize;
            assert_eq!(offset % BODY_ALIGN, 0, "{len} bytes at offset {offset}");
        }
    }
}
