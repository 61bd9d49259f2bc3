//! Archiving `Arc<str>` as a plain archived string.
//!
//! Identifiers that repeat on every message of the hot path (executor ids, endpoint
//! names) are held as `Arc<str>` so that building a message clones a pointer instead of
//! allocating a string. On the wire they are ordinary `ArchivedString`s.

use std::sync::Arc;

use rkyv::rancor::{Fallible, Source};
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::with::{ArchiveWith, DeserializeWith, SerializeWith};
use rkyv::{Place, SerializeUnsized};

/// An immutable, cheaply cloned string.
pub type SharedStr = Arc<str>;

/// rkyv wrapper that archives a [`SharedStr`] as an [`ArchivedString`].
#[derive(Debug)]
pub struct AsArchivedString;

impl ArchiveWith<SharedStr> for AsArchivedString {
    type Archived = ArchivedString;
    type Resolver = StringResolver;

    fn resolve_with(field: &SharedStr, resolver: StringResolver, out: Place<ArchivedString>) {
        ArchivedString::resolve_from_str(field, resolver, out);
    }
}

impl<S> SerializeWith<SharedStr, S> for AsArchivedString
where
    S: Fallible + ?Sized,
    S::Error: Source,
    str: SerializeUnsized<S>,
{
    fn serialize_with(field: &SharedStr, serializer: &mut S) -> Result<StringResolver, S::Error> {
        ArchivedString::serialize_from_str(field, serializer)
    }
}

impl<D: Fallible + ?Sized> DeserializeWith<ArchivedString, SharedStr, D> for AsArchivedString {
    fn deserialize_with(field: &ArchivedString, _: &mut D) -> Result<SharedStr, D::Error> {
        Ok(Arc::from(field.as_str()))
    }
}

/// rkyv wrapper that archives a `Vec<T>` exactly as rkyv does, but serializes an empty one
/// without touching the serializer's scratch arena.
///
/// rkyv sets up scratch space for the element resolvers of every vector, empty or not;
/// the hot messages carry several vectors that are almost always empty.
#[derive(Debug)]
pub struct LeanVec;

impl<T: rkyv::Archive> ArchiveWith<Vec<T>> for LeanVec {
    type Archived = rkyv::vec::ArchivedVec<T::Archived>;
    type Resolver = rkyv::vec::VecResolver;

    fn resolve_with(field: &Vec<T>, resolver: Self::Resolver, out: Place<Self::Archived>) {
        rkyv::vec::ArchivedVec::resolve_from_len(field.len(), resolver, out);
    }
}

impl<T, S> SerializeWith<Vec<T>, S> for LeanVec
where
    T: rkyv::Serialize<S>,
    S: Fallible + rkyv::ser::Allocator + rkyv::ser::Writer + ?Sized,
{
    fn serialize_with(field: &Vec<T>, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        use rkyv::ser::WriterExt;
        if field.is_empty() {
            // What rkyv writes for an empty slice: nothing, at an aligned position.
            let pos = serializer.align_for::<T::Archived>()?;
            return Ok(rkyv::vec::VecResolver::from_pos(pos));
        }
        rkyv::vec::ArchivedVec::serialize_from_slice(field.as_slice(), serializer)
    }
}

impl<T, D> DeserializeWith<rkyv::vec::ArchivedVec<T::Archived>, Vec<T>, D> for LeanVec
where
    T: rkyv::Archive,
    T::Archived: rkyv::Deserialize<T, D>,
    D: Fallible + ?Sized,
    D::Error: Source,
{
    fn deserialize_with(
        field: &rkyv::vec::ArchivedVec<T::Archived>,
        deserializer: &mut D,
    ) -> Result<Vec<T>, D::Error> {
        field
            .iter()
            .map(|item| rkyv::Deserialize::deserialize(item, deserializer))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Property;
    use rkyv::{rancor, Archive, Serialize};

    #[derive(Archive, Serialize)]
    struct Plain {
        head: u8,
        items: Vec<Property>,
        tail: u64,
    }

    #[derive(Archive, Serialize)]
    struct Lean {
        head: u8,
        #[rkyv(with = LeanVec)]
        items: Vec<Property>,
        tail: u64,
    }

    #[test]
    fn lean_vec_writes_the_same_bytes_as_rkyv() {
        for len in [0, 1, 3] {
            let items: Vec<Property> = (0..len)
                .map(|i| Property {
                    key: format!("a fairly long key {i}"),
                    value: "v".into(),
                })
                .collect();
            let plain = rkyv::to_bytes::<rancor::Error>(&Plain {
                head: 1,
                items: items.clone(),
                tail: 2,
            })
            .unwrap();
            let lean = rkyv::to_bytes::<rancor::Error>(&Lean {
                head: 1,
                items,
                tail: 2,
            })
            .unwrap();
            assert_eq!(plain.as_slice(), lean.as_slice(), "{len} items");
        }
    }
}
