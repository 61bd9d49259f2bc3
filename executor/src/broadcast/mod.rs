//! Broadcast variables on the executor side: a value the driver made once, read by any
//! number of tasks through `TaskContext::broadcast`, fetched once per executor and kept
//! ([`BroadcastCache`]) until the driver unpersists it.
//!
//! A fetch ([`BroadcastFetcher`]) asks the driver's broadcast manager
//! ([`flint_wire::BROADCAST_ENDPOINT`]) how the value is cut (`broadcast.blockSize`
//! pieces, each with its CRC32) and which executors hold which pieces, then asks for
//! the pieces in a random order, of executors that hold them first (their block servers,
//! on `blockManager.port`, serve what their cache holds) and of the driver otherwise,
//! as the seeds' `TorrentBroadcast` does. Every piece is checked on arrival; a wrong one
//! is dropped and asked again, of the driver ([`FetchPlan`], a pure state machine).
//! Each piece is reported to the driver once the cache keeps it (its block server
//! serves it from then on), so that later executors can fetch it here; the report
//! carries the unpersist generation of the description it was fetched by, so that the
//! driver drops one that crosses an unpersist. A fetch cut short (its task killed)
//! leaves the pieces it has in the cache, still served, and another task that wants the
//! value goes on from them.
//!
//! The value is allocated once, at the size the driver declared (refused above
//! `broadcast.maxSize`), and each piece is copied into it as it arrives. A task reading
//! the value gets a view of the one cached buffer: no copy.

mod cache;
mod fetch;
mod plan;

pub use cache::{BroadcastCache, PieceSink};
pub use fetch::{BroadcastFetcher, FetchLimits};
pub use plan::{Arrival, FetchPlan, Layout, PlanLimits, Request, Source};

use std::sync::Arc;

use bytes::Bytes;
use flint_wire::Message;

use crate::reply_retry::Answer;

/// Why a broadcast could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BroadcastError {
    /// The driver declared a value larger than this executor takes.
    #[error(
        "broadcast {broadcast_id} declares {size} bytes, more than broadcast.maxSize allows \
         ({limit} bytes)"
    )]
    TooLarge {
        /// The broadcast.
        broadcast_id: u64,
        /// Its declared size.
        size: u64,
        /// `broadcast.maxSize`.
        limit: u64,
    },
    /// The driver's description of the pieces does not add up.
    #[error("broadcast {broadcast_id} is described inconsistently: {why}")]
    BadLayout {
        /// The broadcast.
        broadcast_id: u64,
        /// What does not add up.
        why: String,
    },
    /// A piece could not be had right in the attempts allowed.
    #[error(
        "cannot fetch piece {piece} of broadcast {broadcast_id} (broadcast_{broadcast_id}_piece{piece}) \
         after {attempts} attempts: {last}"
    )]
    PieceFailed {
        /// The broadcast.
        broadcast_id: u64,
        /// The piece.
        piece: u32,
        /// Attempts made.
        attempts: u32,
        /// Why the last one failed.
        last: String,
    },
    /// The driver does not know the broadcast, or could not be asked.
    #[error("cannot read broadcast {broadcast_id}: {why}")]
    Failed {
        /// The broadcast.
        broadcast_id: u64,
        /// Why.
        why: String,
    },
    /// The task was killed while it waited.
    #[error("interrupted while reading a broadcast")]
    Interrupted,
}

/// What tasks of one executor use of broadcasts: its cache and its fetcher.
#[derive(Debug)]
pub struct BroadcastService {
    cache: Arc<BroadcastCache>,
    fetcher: BroadcastFetcher,
}

impl BroadcastService {
    /// Reads into `cache` with `fetcher`.
    pub fn new(cache: Arc<BroadcastCache>, fetcher: BroadcastFetcher) -> Self {
        BroadcastService { cache, fetcher }
    }

    /// The cache, which the block server serves pieces from.
    pub fn cache(&self) -> &Arc<BroadcastCache> {
        &self.cache
    }

    /// The value of `broadcast_id`: cached, or fetched once for every task that asks
    /// meanwhile.
    pub fn get(
        &self,
        broadcast_id: u64,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Bytes, BroadcastError> {
        self.cache.get_or_fetch(
            broadcast_id,
            |sink| self.fetcher.fetch(broadcast_id, sink, interrupted),
            interrupted,
        )
    }
}

/// The window of a broadcast `broadcast-read` checks for `partition`: 4 KiB (or the
/// whole value, when smaller) at an offset that varies with the partition.
pub fn read_window(len: usize, partition: u32) -> std::ops::Range<usize> {
    const WINDOW: usize = 4096;
    if len <= WINDOW {
        return 0..len;
    }
    let start = (u64::from(partition) * 4099 * WINDOW as u64 % (len - WINDOW) as u64) as usize;
    start..start + WINDOW
}

/// The built-in `broadcast-read`: reads the broadcast whose id is its input (decimal)
/// and returns 20 bytes, little-endian: the value's length (u64), the address of its
/// first byte (u64: every task of an executor sees the same one, the cached copy), and
/// the CRC32 of [`read_window`] of it (u32), so that a driver program can check the
/// bytes each task saw without the task reading them all.
pub fn broadcast_read(ctx: &crate::TaskContext, input: &Bytes) -> Result<Bytes, crate::TaskError> {
    let id: u64 = std::str::from_utf8(input)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| {
            crate::TaskError::failed(format!(
                "broadcast-read expects a broadcast id; got {:?}",
                String::from_utf8_lossy(input)
            ))
        })?;
    let value = ctx.broadcast(id)?;
    ctx.add_input_bytes(value.len() as u64);
    let window = read_window(value.len(), ctx.partition_id());
    let mut out = Vec::with_capacity(20);
    out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    out.extend_from_slice(&(value.as_ptr() as usize as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&value[window]).to_le_bytes());
    Ok(Bytes::from(out))
}

/// The block server's answer to `FetchBroadcastPiece`: the piece if `cache` holds it
/// (counted as served), an error saying it does not otherwise.
pub(crate) fn serve_piece(cache: &BroadcastCache, broadcast_id: u64, piece: u32) -> Answer {
    match cache.piece(broadcast_id, piece) {
        Some(data) => {
            cache.note_served(data.len() as u64);
            Answer::Reply(Message::BroadcastPiece {
                broadcast_id,
                piece,
                data,
            })
        }
        None => Answer::Fail(format!(
            "Block broadcast_{broadcast_id}_piece{piece} not found"
        )),
    }
}

#[cfg(test)]
mod tests;
