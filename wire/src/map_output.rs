//! Map outputs on the wire: a map task's [`MapStatus`] as its result value, and the
//! executors' epoch rule for caching the statuses the driver serves.
//!
//! ```
//! use flint_wire::{BlockManagerId, MapStatus, MapStatusCache};
//!
//! let status = MapStatus {
//!     location: BlockManagerId { executor_id: "3".into(), host: "node-1".into(), port: 0 },
//!     sizes: vec![120, 0, 4096],
//! };
//! let value = status.encode(); // the map task's result value
//! assert_eq!(MapStatus::decode(&value)?, status);
//!
//! // An executor caches a shuffle's statuses until a task brings a newer epoch.
//! let mut cache = MapStatusCache::new();
//! cache.update_epoch(4);
//! assert!(cache.insert(4, 7, vec![Some(status.clone())]));
//! assert!(!cache.insert(3, 7, vec![Some(status)])); // served before an output was lost
//! assert!(!cache.update_epoch(4)); // same epoch: still good
//! assert!(cache.update_epoch(5)); // outputs were lost since: forget them
//! assert!(cache.get(7).is_none());
//! # Ok::<(), flint_wire::WireError>(())
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;
use rkyv::{rancor, Archive, Deserialize, Serialize};

use crate::check_error::CheckError;
use crate::decoded_size::{check_decoded_size, DecodedSize, Owned};
use crate::error::WireError;
use crate::header::FRAME_ALIGN;
use crate::message::{ArchivedMapStatus, MapStatus};

/// The map statuses of one shuffle, by map partition (`None`: missing).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ShuffleStatuses {
    /// The shuffle.
    pub shuffle_id: u32,
    /// Its map outputs' statuses.
    pub statuses: Vec<Option<MapStatus>>,
}

/// The statuses of the shuffles a reduce task reads, sent along with the task when they
/// are few (`flint_wire::StageInfo::statuses`), so that its executor need not ask the
/// driver's map output tracker for them: one round trip fewer per reduce task.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[rkyv(derive(Debug))]
pub struct KnownStatuses {
    /// By shuffle.
    pub shuffles: Vec<ShuffleStatuses>,
}

impl KnownStatuses {
    /// Archived, as a stage task carries them.
    pub fn encode(&self) -> Bytes {
        let bytes = rkyv::to_bytes::<rancor::Error>(self).expect("statuses always archive");
        Bytes::from(bytes.into_vec())
    }

    /// Reads what a stage task carries: validated first, as any bytes from a peer, and
    /// refused if decoding would take more than `max_decoded` bytes.
    pub fn decode(bytes: &[u8], max_decoded: usize) -> Result<KnownStatuses, WireError> {
        let mut aligned = rkyv::util::AlignedVec::<FRAME_ALIGN>::with_capacity(bytes.len());
        aligned.extend_from_slice(bytes);
        let invalid = |error: CheckError| WireError::InvalidPayload {
            kind: "KnownStatuses",
            reason: error.to_string(),
        };
        let archived =
            rkyv::access::<ArchivedKnownStatuses, CheckError>(&aligned).map_err(invalid)?;
        // The aligned copy above is the frame's bytes again, which the frame limit bounds.
        let size = archived.shuffles.decoded_size();
        check_decoded_size("the map statuses of a task", size, max_decoded)?;
        rkyv::deserialize::<KnownStatuses, CheckError>(archived).map_err(invalid)
    }
}

impl DecodedSize for ArchivedShuffleStatuses {
    fn decoded_size(&self) -> usize {
        self.statuses.decoded_size()
    }
}

impl Owned for ArchivedShuffleStatuses {
    const OWNED_SIZE: usize = std::mem::size_of::<ShuffleStatuses>();
}

impl MapStatus {
    /// The status archived, as a map task's result value.
    pub fn encode(&self) -> Bytes {
        let bytes = rkyv::to_bytes::<rancor::Error>(self).expect("a map status always archives");
        Bytes::from(bytes.into_vec())
    }

    /// Reads a map task's result value: validated first, as any bytes from a peer.
    /// The bytes need no particular alignment (they are copied to an aligned buffer, a
    /// few bytes per reduce partition).
    pub fn decode(bytes: &[u8]) -> Result<MapStatus, WireError> {
        let mut aligned = rkyv::util::AlignedVec::<FRAME_ALIGN>::with_capacity(bytes.len());
        aligned.extend_from_slice(bytes);
        let invalid = |error: CheckError| WireError::InvalidPayload {
            kind: "MapStatus",
            reason: error.to_string(),
        };
        let archived = rkyv::access::<ArchivedMapStatus, CheckError>(&aligned).map_err(invalid)?;
        rkyv::deserialize::<MapStatus, CheckError>(archived).map_err(invalid)
    }
}

/// An executor's cache of shuffles' statuses (Spark's `MapOutputTrackerWorker`), kept
/// for one map-output epoch.
///
/// The driver moves its epoch on whenever a map output is lost, and every task carries
/// the epoch of its submission. A task with a newer epoch than the cache's may need an
/// output that has since moved, so the whole cache goes; with the same or an older
/// epoch the cache is as fresh as the task needs.
#[derive(Debug, Clone)]
pub struct MapStatusCache<V> {
    epoch: u64,
    statuses: BTreeMap<u32, V>,
}

impl<V> Default for MapStatusCache<V> {
    fn default() -> Self {
        MapStatusCache {
            epoch: 0,
            statuses: BTreeMap::new(),
        }
    }
}

impl<V> MapStatusCache<V> {
    /// An empty cache at epoch 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The epoch the cached statuses belong to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A task with map-output epoch `epoch` starts: if it is newer, the cache is
    /// dropped (Spark's `updateEpoch`). True if it was.
    pub fn update_epoch(&mut self, epoch: u64) -> bool {
        if epoch <= self.epoch {
            return false;
        }
        self.epoch = epoch;
        self.statuses.clear();
        true
    }

    /// A shuffle's cached statuses.
    pub fn get(&self, shuffle_id: u32) -> Option<&V> {
        self.statuses.get(&shuffle_id)
    }

    /// Caches a shuffle's statuses as the driver served them at map-output `epoch`;
    /// statuses of an epoch older than the cache's are not (a task submitted before
    /// outputs were lost may carry locations that are gone). True if cached.
    pub fn insert(&mut self, epoch: u64, shuffle_id: u32, statuses: V) -> bool {
        if epoch < self.epoch {
            return false;
        }
        self.statuses.insert(shuffle_id, statuses);
        true
    }

    /// Drops every cached status, keeping the epoch: after a fetch failure the cache
    /// is known to be stale before a newer epoch arrives.
    pub fn clear(&mut self) {
        self.statuses.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_map_status_round_trips(status: MapStatus) {
            prop_assert_eq!(MapStatus::decode(&status.encode()).unwrap(), status);
        }

        #[test]
        fn random_bytes_are_refused_or_read_never_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let _ = MapStatus::decode(&bytes);
        }
    }

    #[test]
    fn a_truncated_status_is_refused_with_its_kind_named() {
        let status = MapStatus {
            location: crate::BlockManagerId {
                executor_id: "1".into(),
                host: "h".into(),
                port: 7,
            },
            sizes: vec![1, 2, 3],
        };
        let bytes = status.encode();
        let error = MapStatus::decode(&bytes[..bytes.len() - 4]).unwrap_err();
        assert!(
            error.to_string().starts_with("invalid MapStatus payload"),
            "{error}"
        );
    }

    #[test]
    fn known_statuses_round_trip_and_are_bounded() {
        let status = MapStatus {
            location: crate::BlockManagerId {
                executor_id: "1".into(),
                host: "h".into(),
                port: 7,
            },
            sizes: vec![1, 2, 3],
        };
        let known = KnownStatuses {
            shuffles: vec![ShuffleStatuses {
                shuffle_id: 4,
                statuses: vec![Some(status), None],
            }],
        };
        let bytes = known.encode();
        assert_eq!(KnownStatuses::decode(&bytes, 1 << 20).unwrap(), known);
        assert!(KnownStatuses::decode(&bytes, 10).is_err(), "over the limit");
        assert!(KnownStatuses::decode(&bytes[..bytes.len() - 4], 1 << 20).is_err());
    }

    #[test]
    fn the_cache_is_dropped_only_for_a_newer_epoch() {
        let mut cache = MapStatusCache::new();
        assert!(cache.insert(0, 1, "a"));
        assert!(!cache.update_epoch(0));
        assert_eq!(cache.get(1), Some(&"a"));
        assert!(cache.update_epoch(3));
        assert_eq!((cache.get(1), cache.epoch()), (None, 3));
        assert!(cache.insert(3, 1, "b"));
        assert!(
            !cache.update_epoch(2),
            "an older task keeps the newer cache"
        );
        assert!(
            !cache.insert(2, 1, "stale"),
            "nor are an older task's statuses cached"
        );
        assert_eq!(cache.get(1), Some(&"b"));
        cache.clear();
        assert_eq!((cache.get(1), cache.epoch()), (None, 3));
    }
}
