//! What an archived list takes in memory once decoded into owned values.
//!
//! Most handlers read a message in place, but a few lists are decoded into `Vec`s of
//! owned values: a heartbeat's accumulator updates, a result's accumulators, a launch's
//! files, jars and properties. Decoded, such a list can take several times its frame (an
//! archived empty string is 8 bytes, an owned one 24; an archived short string lives
//! inline, an owned one is a heap block), so a frame that `rpc.message.maxSize` allows
//! could still make its reader allocate a multiple of that. A handler asks
//! [`DecodedSize::decoded_size`] first and refuses ([`check_decoded_size`]) what would
//! not fit, before it allocates anything.

use std::mem::size_of;

use rkyv::string::ArchivedString;
use rkyv::vec::ArchivedVec;

use crate::error::WireError;
use crate::message::{
    AccumulatorUpdate, ArchivedAccumulatorUpdate, ArchivedDependency, ArchivedMapStatus,
    ArchivedProperty, ArchivedTaskAccumUpdates, Dependency, MapStatus, Property, TaskAccumUpdates,
};

/// Bytes a heap block of `len` bytes takes from the allocator: glibc's malloc adds 8
/// bytes of header, rounds up to 16 and hands out no block under 32. An empty string or
/// list allocates nothing.
pub(crate) const fn heap_block(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        let chunk = len.saturating_add(8 + 15) & !15;
        if chunk < 32 {
            32
        } else {
            chunk
        }
    }
}

/// The memory an archived value's owned form takes beyond its own inline size: its heap
/// blocks, and the inline sizes of what they hold.
pub trait DecodedSize {
    /// Bytes of heap the owned form allocates.
    fn decoded_size(&self) -> usize;
}

impl DecodedSize for ArchivedString {
    fn decoded_size(&self) -> usize {
        heap_block(self.len())
    }
}

impl DecodedSize for ArchivedAccumulatorUpdate {
    fn decoded_size(&self) -> usize {
        let bytes = match &self.value {
            crate::message::ArchivedAccumulatorValue::Bytes(bytes) => heap_block(bytes.len()),
            _ => 0,
        };
        self.name
            .as_ref()
            .map_or(0, DecodedSize::decoded_size)
            .saturating_add(bytes)
    }
}

impl DecodedSize for ArchivedTaskAccumUpdates {
    fn decoded_size(&self) -> usize {
        self.accumulators.decoded_size()
    }
}

impl DecodedSize for ArchivedDependency {
    fn decoded_size(&self) -> usize {
        self.name.decoded_size()
    }
}

impl DecodedSize for ArchivedProperty {
    fn decoded_size(&self) -> usize {
        self.key
            .decoded_size()
            .saturating_add(self.value.decoded_size())
    }
}

impl DecodedSize for ArchivedMapStatus {
    fn decoded_size(&self) -> usize {
        // The executor id is a shared string: one block with two counters before it.
        heap_block(self.location.executor_id.len().saturating_add(16))
            .saturating_add(self.location.host.decoded_size())
            .saturating_add(heap_block(
                self.sizes.len().saturating_mul(size_of::<u64>()),
            ))
    }
}

impl<A: DecodedSize> DecodedSize for rkyv::option::ArchivedOption<A> {
    fn decoded_size(&self) -> usize {
        self.as_ref().map_or(0, DecodedSize::decoded_size)
    }
}

/// The owned element type of an archived list element, for its inline size.
pub trait Owned {
    /// Size of the owned element inside its `Vec`.
    const OWNED_SIZE: usize;
}

impl Owned for ArchivedAccumulatorUpdate {
    const OWNED_SIZE: usize = size_of::<AccumulatorUpdate>();
}

impl Owned for ArchivedTaskAccumUpdates {
    const OWNED_SIZE: usize = size_of::<TaskAccumUpdates>();
}

impl Owned for ArchivedDependency {
    const OWNED_SIZE: usize = size_of::<Dependency>();
}

impl Owned for ArchivedProperty {
    const OWNED_SIZE: usize = size_of::<Property>();
}

impl Owned for rkyv::option::ArchivedOption<ArchivedMapStatus> {
    const OWNED_SIZE: usize = size_of::<Option<MapStatus>>();
}

/// A list decodes to one heap block of its elements' owned forms, plus what each element
/// allocates itself.
impl<A: DecodedSize + Owned> DecodedSize for ArchivedVec<A> {
    fn decoded_size(&self) -> usize {
        let inline = heap_block(self.len().saturating_mul(A::OWNED_SIZE));
        self.iter().fold(inline, |total, item| {
            total.saturating_add(item.decoded_size())
        })
    }
}

/// `Ok` if decoding `what`, `size` bytes by [`DecodedSize::decoded_size`], stays within
/// `limit` (`rpc.message.maxSize`); otherwise the error to report, naming both.
pub fn check_decoded_size(what: &'static str, size: usize, limit: usize) -> Result<(), WireError> {
    if size <= limit {
        Ok(())
    } else {
        Err(WireError::DecodedTooLarge { what, size, limit })
    }
}
