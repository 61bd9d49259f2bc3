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
use rkyv::rancor::Fallible;
use rkyv::ser::{Writer, WriterExt};
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::with::{ArchiveWith, DeserializeWith, SerializeWith};
use rkyv::Place;

/// The alignment of a [`Message::Custom`](crate::Message::Custom) body inside its frame's
/// payload, in bytes: that of the most aligned archived primitive (`u128`).
pub const BODY_ALIGN: usize = 16;

/// rkyv wrapper that archives [`Bytes`] as an `ArchivedVec<u8>` whose bytes start at a
/// multiple of [`BODY_ALIGN`].
#[derive(Debug)]
pub struct AlignedBytes;

impl ArchiveWith<Bytes> for AlignedBytes {
    type Archived = ArchivedVec<u8>;
    type Resolver = VecResolver;

    fn resolve_with(field: &Bytes, resolver: VecResolver, out: Place<ArchivedVec<u8>>) {
        ArchivedVec::resolve_from_len(field.len(), resolver, out);
    }
}

impl<S: Fallible + Writer + ?Sized> SerializeWith<Bytes, S> for AlignedBytes {
    fn serialize_with(field: &Bytes, serializer: &mut S) -> Result<VecResolver, S::Error> {
        let pos = serializer.align(BODY_ALIGN)?;
        serializer.write(field)?;
        Ok(VecResolver::from_pos(pos))
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
