//! The driver's broadcasts (the seeds' `BroadcastManager` with the piece locations its
//! `BlockManagerMaster` keeps): each value cut in pieces with their CRC32s, and which
//! executors hold which pieces, to send executors that want a broadcast to each other
//! rather than all to the driver. Pure: no sockets, no clock.

use std::collections::BTreeMap;

use bytes::Bytes;
use flint_wire::{BlockManagerId, BroadcastInfo, PieceHolder, SharedStr, MAX_BROADCAST_PIECES};

use crate::core::fx_hash::FxHashMap;

/// Holders named in one [`BroadcastInfo`], at most: enough sources to spread the load,
/// a reply of bounded size however many executors there are.
pub const MAX_HOLDERS_IN_INFO: usize = 16;

#[derive(Debug)]
struct Holder {
    location: BlockManagerId,
    /// By piece.
    pieces: Vec<bool>,
}

#[derive(Debug)]
struct Entry {
    value: Bytes,
    piece_size: u32,
    checksums: Vec<u32>,
    /// By executor id.
    holders: FxHashMap<SharedStr, Holder>,
    /// Unpersisted everywhere when this job ends.
    job: Option<u32>,
    /// Unpersists so far: reports carry the generation their fetch was told, and one
    /// sent before an unpersist (on another connection than the unpersist's) is dropped
    /// rather than naming an executor that no longer holds the piece.
    generation: u64,
}

/// Why a piece is not served, or a report not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BroadcastRefusal {
    /// No such broadcast (never made, or destroyed).
    #[error("Broadcast {0} not found")]
    Unknown(u64),
    /// No such piece.
    #[error(
        "Block broadcast_{broadcast_id}_piece{piece} not found: the broadcast has {pieces} pieces"
    )]
    NoSuchPiece {
        /// The broadcast.
        broadcast_id: u64,
        /// The piece asked for.
        piece: u32,
        /// The pieces it has.
        pieces: u32,
    },
    /// A report of a piece from an executor the driver does not know.
    #[error("executor {0} is not registered")]
    UnknownExecutor(String),
}

/// The broadcasts of one driver. See the module docs.
///
/// ```
/// use bytes::Bytes;
/// use flint_scheduler::broadcast::BroadcastManager;
///
/// let mut broadcasts = BroadcastManager::new();
/// let id = broadcasts.create(Bytes::from_static(b"0123456789"), 4);
/// let info = broadcasts.info(id, |_| true).unwrap();
/// assert_eq!((info.total_size, info.piece_size, info.checksums.len()), (10, 4, 3));
/// assert_eq!(&broadcasts.piece(id, 2)?[..], b"89");
/// assert_eq!(broadcasts.served(), (2, 1));
/// # Ok::<(), flint_scheduler::broadcast::BroadcastRefusal>(())
/// ```
#[derive(Debug, Default)]
pub struct BroadcastManager {
    entries: BTreeMap<u64, Entry>,
    next_id: u64,
    /// Where the next info's holders start, so that executors are named in turn.
    rotation: usize,
    bytes_served: u64,
    pieces_served: u64,
}

impl BroadcastManager {
    /// No broadcasts.
    pub fn new() -> Self {
        BroadcastManager::default()
    }

    /// Makes `value` a broadcast cut in pieces of `piece_size` bytes (at least 1, and
    /// larger when that would make more than [`MAX_BROADCAST_PIECES`] pieces); returns
    /// its id, unique for the driver's life.
    pub fn create(&mut self, value: Bytes, piece_size: u32) -> u64 {
        let fewest = (value.len() as u64).div_ceil(u64::from(MAX_BROADCAST_PIECES));
        let piece_size = piece_size
            .max(1)
            .max(u32::try_from(fewest).unwrap_or(u32::MAX));
        let id = self.next_id;
        self.next_id += 1;
        let checksums = value
            .chunks(piece_size as usize)
            .map(crc32fast::hash)
            .collect();
        self.entries.insert(
            id,
            Entry {
                value,
                piece_size,
                checksums,
                holders: FxHashMap::default(),
                job: None,
                generation: 0,
            },
        );
        id
    }

    /// How many times broadcast `id` was unpersisted (its descriptions' generation), if
    /// it exists: what executors are told with an unpersist.
    pub fn generation(&self, id: u64) -> Option<u64> {
        self.entries.get(&id).map(|e| e.generation)
    }

    /// The size of broadcast `id`, if it exists.
    pub fn size(&self, id: u64) -> Option<u64> {
        self.entries.get(&id).map(|e| e.value.len() as u64)
    }

    /// What an executor needs to fetch broadcast `id`: its layout, and up to
    /// [`MAX_HOLDERS_IN_INFO`] executors that hold pieces of it and are still
    /// registered (`is_registered`), named in turn from one answer to the next.
    pub fn info(&mut self, id: u64, is_registered: impl Fn(&str) -> bool) -> Option<BroadcastInfo> {
        let entry = self.entries.get(&id)?;
        let mut holders: Vec<&Holder> = entry
            .holders
            .iter()
            .filter(|(executor, _)| is_registered(executor))
            .map(|(_, holder)| holder)
            .collect();
        // A stable order, then a turn: every holder is named by some answer.
        holders.sort_by(|a, b| a.location.executor_id.cmp(&b.location.executor_id));
        if !holders.is_empty() {
            let start = self.rotation % holders.len();
            holders.rotate_left(start);
        }
        self.rotation = self.rotation.wrapping_add(1);
        Some(BroadcastInfo {
            broadcast_id: id,
            generation: entry.generation,
            total_size: entry.value.len() as u64,
            piece_size: entry.piece_size,
            checksums: entry.checksums.clone(),
            holders: holders
                .into_iter()
                .take(MAX_HOLDERS_IN_INFO)
                .map(|h| PieceHolder {
                    location: h.location.clone(),
                    pieces: (0..h.pieces.len() as u32)
                        .filter(|&p| h.pieces[p as usize])
                        .collect(),
                })
                .collect(),
        })
    }

    /// Piece `piece` of broadcast `id`, a view of the value, counted as served.
    pub fn piece(&mut self, id: u64, piece: u32) -> Result<Bytes, BroadcastRefusal> {
        let entry = self.entries.get(&id).ok_or(BroadcastRefusal::Unknown(id))?;
        let pieces = entry.checksums.len() as u32;
        if piece >= pieces {
            return Err(BroadcastRefusal::NoSuchPiece {
                broadcast_id: id,
                piece,
                pieces,
            });
        }
        let start = piece as usize * entry.piece_size as usize;
        let end = (start + entry.piece_size as usize).min(entry.value.len());
        let data = entry.value.slice(start..end);
        self.bytes_served += data.len() as u64;
        self.pieces_served += 1;
        Ok(data)
    }

    /// An executor's report that it holds piece `piece` of broadcast `id`, fetched by
    /// the description of generation `generation`, served at `location`; taken only
    /// from a registered executor (`is_registered`), for a piece that exists. A report
    /// for a broadcast unpersisted since that description is dropped quietly: the
    /// executor was told to drop the piece.
    pub fn piece_stored(
        &mut self,
        id: u64,
        generation: u64,
        piece: u32,
        location: BlockManagerId,
        is_registered: impl Fn(&str) -> bool,
    ) -> Result<(), BroadcastRefusal> {
        if !is_registered(&location.executor_id) {
            return Err(BroadcastRefusal::UnknownExecutor(
                location.executor_id.to_string(),
            ));
        }
        let entry = self
            .entries
            .get_mut(&id)
            .ok_or(BroadcastRefusal::Unknown(id))?;
        if generation != entry.generation {
            return Ok(());
        }
        let pieces = entry.checksums.len();
        if piece as usize >= pieces {
            return Err(BroadcastRefusal::NoSuchPiece {
                broadcast_id: id,
                piece,
                pieces: pieces as u32,
            });
        }
        let holder = entry
            .holders
            .entry(location.executor_id.clone())
            .or_insert_with(|| Holder {
                location: location.clone(),
                pieces: vec![false; pieces],
            });
        holder.location = location;
        holder.pieces[piece as usize] = true;
        Ok(())
    }

    /// The executors that hold pieces of broadcast `id` (their block servers), with how
    /// many pieces each, by executor id.
    pub fn holders(&self, id: u64) -> Vec<(BlockManagerId, u32)> {
        let mut holders: Vec<(BlockManagerId, u32)> = self
            .entries
            .get(&id)
            .map(|e| {
                e.holders
                    .values()
                    .map(|h| {
                        let held = h.pieces.iter().filter(|&&held| held).count() as u32;
                        (h.location.clone(), held)
                    })
                    .collect()
            })
            .unwrap_or_default();
        holders.sort_by(|a, b| a.0.executor_id.cmp(&b.0.executor_id));
        holders
    }

    /// Forgets what executors hold of broadcast `id` (they are told to drop it) and
    /// starts a new generation, so that reports of fetches described before are
    /// dropped; the value stays, to be fetched again. Whether it exists.
    pub fn unpersist(&mut self, id: u64) -> bool {
        match self.entries.get_mut(&id) {
            Some(entry) => {
                entry.holders.clear();
                entry.generation += 1;
                true
            }
            None => false,
        }
    }

    /// Forgets broadcast `id` altogether. Whether it existed.
    pub fn destroy(&mut self, id: u64) -> bool {
        self.entries.remove(&id).is_some()
    }

    /// Unpersists broadcast `id` when job `job_id` ends ([`BroadcastManager::job_ended`]).
    pub fn unpersist_at_job_end(&mut self, id: u64, job_id: u32) -> bool {
        match self.entries.get_mut(&id) {
            Some(entry) => {
                entry.job = Some(job_id);
                true
            }
            None => false,
        }
    }

    /// Job `job_id` ended: the broadcasts bound to it are unpersisted; their ids, for
    /// the executors to be told.
    pub fn job_ended(&mut self, job_id: u32) -> Vec<u64> {
        let mut ended = Vec::new();
        for (&id, entry) in &mut self.entries {
            if entry.job == Some(job_id) {
                entry.job = None;
                entry.holders.clear();
                entry.generation += 1;
                ended.push(id);
            }
        }
        ended
    }

    /// Forgets what a removed executor held.
    pub fn executor_removed(&mut self, executor_id: &str) {
        for entry in self.entries.values_mut() {
            entry.holders.remove(executor_id);
        }
    }

    /// Piece bytes and pieces the driver has served.
    pub fn served(&self) -> (u64, u64) {
        (self.bytes_served, self.pieces_served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(executor: &str) -> BlockManagerId {
        BlockManagerId {
            executor_id: executor.into(),
            host: "127.0.0.1".into(),
            port: 7000,
        }
    }

    fn value(len: usize) -> Bytes {
        Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
    }

    #[test]
    fn pieces_are_views_with_their_checksums_and_count_as_served() {
        let mut m = BroadcastManager::new();
        let v = value(10);
        let id = m.create(v.clone(), 4);
        let info = m.info(id, |_| true).unwrap();
        assert_eq!(
            info.checksums,
            [
                crc32fast::hash(&v[..4]),
                crc32fast::hash(&v[4..8]),
                crc32fast::hash(&v[8..])
            ]
        );
        let piece = m.piece(id, 1).unwrap();
        assert_eq!(piece.as_ptr(), v[4..].as_ptr(), "a view, not a copy");
        assert_eq!(
            m.piece(id, 3),
            Err(BroadcastRefusal::NoSuchPiece {
                broadcast_id: id,
                piece: 3,
                pieces: 3
            })
        );
        assert_eq!(m.piece(id + 1, 0), Err(BroadcastRefusal::Unknown(id + 1)));
        assert_eq!(m.served(), (4, 1));
        assert_ne!(m.create(value(1), 4), id, "ids are not reused");
        // Pieces of 1 byte would be too many: larger ones instead.
        let many = m.create(value(200_000), 1);
        let info = m.info(many, |_| true).unwrap();
        assert_eq!(info.piece_size, 4);
        assert_eq!(info.checksums.len(), 50_000);
    }

    #[test]
    fn holders_are_registered_executors_named_in_turn_and_bounded() {
        let mut m = BroadcastManager::new();
        let id = m.create(value(10), 4);
        assert_eq!(
            m.piece_stored(id, 0, 0, location("ghost"), |_| false),
            Err(BroadcastRefusal::UnknownExecutor("ghost".into()))
        );
        assert!(m.piece_stored(id, 0, 3, location("1"), |_| true).is_err());
        for e in 0..20 {
            m.piece_stored(id, 0, 0, location(&e.to_string()), |_| true)
                .unwrap();
        }
        m.piece_stored(id, 0, 2, location("1"), |_| true).unwrap();
        let first = m.info(id, |_| true).unwrap();
        assert_eq!(first.holders.len(), MAX_HOLDERS_IN_INFO);
        let second = m.info(id, |_| true).unwrap();
        assert_ne!(
            first.holders[0].location.executor_id, second.holders[0].location.executor_id,
            "another holder first"
        );
        let one = m.info(id, |e| e == "1").unwrap();
        assert_eq!(one.holders.len(), 1);
        assert_eq!(one.holders[0].pieces, [0, 2]);
        m.executor_removed("1");
        assert!(m.info(id, |e| e == "1").unwrap().holders.is_empty());
        assert_eq!(m.holders(id).len(), 19);
    }

    #[test]
    fn unpersist_forgets_holders_and_a_job_end_unpersists_what_is_bound_to_it() {
        let mut m = BroadcastManager::new();
        let a = m.create(value(10), 4);
        let b = m.create(value(10), 4);
        for id in [a, b] {
            m.piece_stored(id, 0, 0, location("1"), |_| true).unwrap();
        }
        assert!(m.unpersist_at_job_end(a, 7));
        assert!(!m.unpersist_at_job_end(99, 7));
        assert_eq!(m.job_ended(6), Vec::<u64>::new());
        assert_eq!(m.generation(a), Some(0));
        assert_eq!(m.job_ended(7), [a]);
        assert_eq!(m.generation(a), Some(1));
        assert!(m.holders(a).is_empty());
        assert_eq!(m.holders(b), [(location("1"), 1)]);
        assert_eq!(m.job_ended(7), Vec::<u64>::new(), "once");
        // Unpersisted, the value stays; destroyed, it goes.
        assert!(m.unpersist(b));
        assert!(m.holders(b).is_empty());
        // A report sent before the unpersist and received after it is dropped; one of
        // a fetch since is taken.
        assert_eq!(m.info(b, |_| true).unwrap().generation, 1);
        assert_eq!(m.piece_stored(b, 0, 0, location("1"), |_| true), Ok(()));
        assert!(m.holders(b).is_empty(), "a stale report re-adds no holder");
        m.piece_stored(b, 1, 0, location("1"), |_| true).unwrap();
        assert_eq!(m.holders(b), [(location("1"), 1)]);
        // A job end unpersists too: a's reports of generation 0 are stale now.
        assert_eq!(m.piece_stored(a, 0, 1, location("2"), |_| true), Ok(()));
        assert!(m.holders(a).is_empty());
        assert!(m.unpersist(b));
        assert!(m.piece(b, 0).is_ok());
        assert!(m.destroy(b));
        assert!(!m.destroy(b));
        assert!(m.info(b, |_| true).is_none());
    }
}
