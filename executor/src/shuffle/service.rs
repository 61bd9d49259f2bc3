//! What an executor's tasks use of shuffles: its store, its fetcher, the driver's map
//! output tracker, and the statuses it already knows (the seeds' `MapOutputTrackerWorker`
//! with the executor's share of the `BlockManager`).

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use flint_rpc::EndpointRef;
use flint_wire::{
    check_decoded_size, ArchivedMessage, BlockManagerId, DecodedSize, FetchFailure, KnownStatuses,
    MapStatus, MapStatusCache, Message,
};
use rkyv::rancor;
use tracing::debug;

use super::wait::next_arrival;
use super::{FetchError, ShuffleError, ShuffleFetcher, ShuffleStore, ShuffleWriter};

/// Bytes of an archived map status besides its sizes and its location's text.
const MAP_STATUS_OVERHEAD: u64 = 64;

/// A shuffle's statuses, by map partition, as the driver served them.
pub type MapStatuses = Arc<[Option<MapStatus>]>;

/// Why a task could not get what it needs of a shuffle.
#[derive(Debug)]
pub enum ShuffleReadError {
    /// A block could not be read: the map output is lost, the task ends FetchFailed.
    FetchFailed(Box<FetchFailure>),
    /// The task was killed while it waited.
    Interrupted,
    /// Anything else (the driver could not be asked): the task fails.
    Failed(String),
}

/// The executor's shuffle side, shared by its task runners.
#[derive(Debug)]
pub struct ShuffleService {
    store: Arc<ShuffleStore>,
    fetcher: ShuffleFetcher,
    tracker: EndpointRef,
    location: BlockManagerId,
    cache: Mutex<MapStatusCache<MapStatuses>>,
    ask_timeout: Duration,
    max_decoded: usize,
}

impl ShuffleService {
    /// The service of the executor at `location`, keeping map outputs in `store`,
    /// fetching with `fetcher`, and asking `tracker` (the driver's map output tracker)
    /// for statuses it does not know, waiting `ask_timeout`; a reply that would decode
    /// to more than `max_decoded` bytes is refused.
    pub fn new(
        store: Arc<ShuffleStore>,
        fetcher: ShuffleFetcher,
        tracker: EndpointRef,
        location: BlockManagerId,
        ask_timeout: Duration,
        max_decoded: usize,
    ) -> Self {
        ShuffleService {
            store,
            fetcher,
            tracker,
            location,
            cache: Mutex::new(MapStatusCache::new()),
            ask_timeout,
            max_decoded,
        }
    }

    /// The map outputs held here.
    pub fn store(&self) -> &Arc<ShuffleStore> {
        &self.store
    }

    /// Where this executor's blocks are served: a map status's location.
    pub fn location(&self) -> &BlockManagerId {
        &self.location
    }

    /// A writer of map output `map` of `shuffle_id`, with `partitions` buckets.
    ///
    /// Refused when the output's map status (8 bytes a partition) would not fit in a
    /// message of `rpc.message.maxSize` (the `max_decoded` this service was made with),
    /// since the driver could then never serve it, or when the partitions' bookkeeping
    /// would not fit the shuffle memory ([`ShuffleWriter::new`]).
    pub fn writer(
        &self,
        shuffle_id: u32,
        map: u32,
        partitions: u32,
    ) -> Result<ShuffleWriter, ShuffleError> {
        let status = self.map_status_len(partitions);
        let limit = self.max_decoded as u64;
        if status > limit {
            return Err(ShuffleError::TooManyPartitions {
                partitions,
                what: "the map status",
                need: status,
                key: "rpc.message.maxSize",
                limit,
            });
        }
        ShuffleWriter::new(self.store.clone(), shuffle_id, map, partitions)
    }

    /// At least the bytes of the archived map status of an output of `partitions`
    /// reduce partitions written here.
    pub(crate) fn map_status_len(&self, partitions: u32) -> u64 {
        let location = self.location.executor_id.len() + self.location.host.len();
        u64::from(partitions) * 8 + location as u64 + MAP_STATUS_OVERHEAD
    }

    /// The status of a committed map output of `sizes` bytes per reduce partition.
    pub fn map_status(&self, sizes: Vec<u64>) -> MapStatus {
        MapStatus {
            location: self.location.clone(),
            sizes,
        }
    }

    /// Forgets what is cached if a task of map-output epoch `epoch` starts, and the
    /// driver has lost outputs since the cache was filled.
    ///
    /// `known` are the statuses the task carries (`flint_wire::StageInfo::statuses`),
    /// cached as the driver's answer would be; they are not when they do not decode
    /// (the task then asks the driver).
    pub fn start_task(&self, epoch: u64, known: &[u8]) {
        let known = (!known.is_empty())
            .then(|| KnownStatuses::decode(known, self.max_decoded))
            .and_then(|decoded| {
                decoded
                    .map_err(|e| debug!("A task's map statuses are not used: {e}"))
                    .ok()
            });
        let mut cache = self.lock_cache();
        cache.update_epoch(epoch);
        for shuffle in known.into_iter().flat_map(|known| known.shuffles) {
            cache.insert(epoch, shuffle.shuffle_id, shuffle.statuses.into());
        }
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, MapStatusCache<MapStatuses>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The statuses of `shuffle_id`: cached, or asked of the driver.
    pub fn statuses(
        &self,
        shuffle_id: u32,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<MapStatuses, ShuffleReadError> {
        if let Some(statuses) = self.lock_cache().get(shuffle_id) {
            return Ok(statuses.clone());
        }
        let failed = |what: String| {
            ShuffleReadError::Failed(format!(
                "cannot get the map output locations of shuffle {shuffle_id}: {what}"
            ))
        };
        // Asked as the fetches are: the reply is read on this thread if it comes soon.
        let (sender, replies) = mpsc::channel();
        self.tracker
            .ask_then(
                &Message::GetMapOutputStatuses { shuffle_id },
                self.ask_timeout,
                move |reply| {
                    let _ = sender.send(reply);
                },
            )
            .map_err(|e| failed(e.to_string()))?;
        let reply = next_arrival(
            self.fetcher.env(),
            &replies,
            self.fetcher.spin(),
            interrupted,
        )
        .map_err(|_| ShuffleReadError::Interrupted)?
        .map_err(|e| failed(e.to_string()))?;
        let ArchivedMessage::MapOutputStatuses {
            shuffle_id: answered,
            epoch,
            statuses,
        } = reply.message()
        else {
            return Err(failed(format!(
                "the driver answered {}",
                reply.message().kind()
            )));
        };
        if answered.to_native() != shuffle_id {
            return Err(failed(format!(
                "the driver answered for shuffle {answered}"
            )));
        }
        check_decoded_size(
            "map output statuses",
            statuses.decoded_size(),
            self.max_decoded,
        )
        .map_err(|e| failed(e.to_string()))?;
        let statuses: Vec<Option<MapStatus>> =
            rkyv::deserialize::<_, rancor::Error>(statuses).map_err(|e| failed(e.to_string()))?;
        let statuses: MapStatuses = statuses.into();
        self.lock_cache()
            .insert(epoch.to_native(), shuffle_id, statuses.clone());
        Ok(statuses)
    }

    /// Reduce partition `reduce_id` of `shuffle_id`, from every map output, as pieces of
    /// whole records.
    pub fn read(
        &self,
        shuffle_id: u32,
        reduce_id: u32,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Vec<Bytes>, ShuffleReadError> {
        let statuses = self.statuses(shuffle_id, interrupted)?;
        match self
            .fetcher
            .fetch(shuffle_id, reduce_id, &statuses, interrupted)
        {
            Ok(pieces) => Ok(pieces),
            Err(FetchError::Interrupted) => Err(ShuffleReadError::Interrupted),
            Err(FetchError::Failed(failure)) => {
                // What was cached is stale: the next task asks the driver again.
                self.lock_cache().clear();
                Err(ShuffleReadError::FetchFailed(failure))
            }
        }
    }
}
