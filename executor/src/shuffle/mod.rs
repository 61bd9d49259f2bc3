//! Shuffles on the executor side: map tasks write their records partitioned by reducer
//! ([`ShuffleWriter`], optionally merged by key first with a [`Combiner`]) into the
//! executor's [`ShuffleStore`] (memory up to `shuffle.maxMemory`, spill files under
//! `local.dir` beyond it), which its [`BlockServer`] serves to other executors; reduce
//! tasks read their partition of every map output ([`ShuffleInput`]), local blocks in
//! place and remote ones fetched ([`ShuffleFetcher`]), as pieces of whole records
//! ([`RecordPieces`]). Task functions reach all of it through their context:
//! `TaskContext::shuffle_writer` and `TaskContext::read_shuffle`.

use std::path::Path;

mod combiner;
mod fetch;
mod input;
mod memory;
mod pieces;
mod server;
mod service;
mod store;
mod wait;
mod writer;

pub use combiner::Combiner;
pub use fetch::{FetchError, ShuffleFetcher};
pub use input::ShuffleInput;
pub use memory::ShuffleMemory;
pub use pieces::RecordPieces;
pub use server::BlockServer;
pub use service::{MapStatuses, ShuffleReadError, ShuffleService};
pub use store::ShuffleStore;
pub use writer::{partition_of, ShuffleWriter};

/// What can go wrong writing or reading shuffle data.
#[derive(Debug, thiserror::Error)]
pub enum ShuffleError {
    /// A spill file or the spill directory could not be written or read.
    #[error("shuffle file {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// No such block is held here (never written, or removed).
    #[error("Block shuffle_{shuffle}_{map}_{reduce} not found")]
    BlockNotFound {
        /// The shuffle.
        shuffle: u32,
        /// The map output.
        map: u32,
        /// The reduce partition.
        reduce: u32,
    },
    /// A read starts after the block's end.
    #[error("offset {offset} is past the end of a block of {size} bytes")]
    OffsetPastEnd {
        /// The requested offset.
        offset: u64,
        /// The block's size.
        size: u64,
    },
    /// A record written to a reduce partition the shuffle does not have.
    #[error("reduce partition {partition} does not exist: the shuffle has {partitions}")]
    NoSuchPartition {
        /// The partition written to.
        partition: u32,
        /// The shuffle's partitions.
        partitions: u32,
    },
    /// A map task writes more reduce partitions than this executor can honour: their
    /// bookkeeping would not fit `shuffle.maxMemory`, or the map status would not fit a
    /// message.
    #[error(
        "a map output of {partitions} reduce partitions cannot be written here: {what} would \
         take {need} bytes, more than {key} allows ({limit} bytes)"
    )]
    TooManyPartitions {
        /// The partitions asked for.
        partitions: u32,
        /// What would not fit.
        what: &'static str,
        /// The bytes it would take.
        need: u64,
        /// The key that sets the limit.
        key: &'static str,
        /// The limit.
        limit: u64,
    },
    /// A record, or a block, too large for this machine or the record format.
    #[error("{0} bytes is too large")]
    TooLarge(u64),
    /// A block's records do not fit it.
    #[error(transparent)]
    Malformed(#[from] flint_wire::records::MalformedRecords),
}

impl ShuffleError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        ShuffleError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// A number that differs between stores of one process, for their directories' names.
fn nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    time ^ NEXT.fetch_add(1, Ordering::Relaxed).rotate_left(48)
}

#[cfg(test)]
mod tests;
