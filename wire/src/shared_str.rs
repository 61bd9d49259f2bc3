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
