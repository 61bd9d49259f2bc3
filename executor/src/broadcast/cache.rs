//! The broadcasts an executor holds: whole values its tasks read, and the pieces of
//! those still being fetched, which its block server already serves to other executors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use super::BroadcastError;

/// How often a task waiting for another task's fetch looks whether it was killed.
const KILL_POLL: Duration = Duration::from_millis(100);

#[derive(Debug)]
enum Entry {
    /// A task fetches it; pieces are kept as they arrive (views of the frames they came
    /// in), to be served.
    Fetching {
        generation: u64,
        pieces: HashMap<u32, Bytes>,
    },
    /// The whole value; a piece is a view of it.
    Ready { value: Bytes, piece_size: u32 },
}

#[derive(Debug, Default)]
struct Entries {
    entries: HashMap<u64, Entry>,
    /// Tells fetches apart: one whose entry was removed (unpersisted) meanwhile does
    /// not put its value back.
    next_generation: u64,
}

/// What a fetch reports pieces to as they arrive (so that they are served at once),
/// for the fetch's own entry only.
#[derive(Debug)]
pub struct PieceSink<'c> {
    cache: &'c BroadcastCache,
    broadcast_id: u64,
    generation: u64,
}

impl PieceSink<'_> {
    /// Keeps `data`, checked, as piece `piece`.
    pub fn add(&self, piece: u32, data: Bytes) {
        let mut entries = self.cache.lock();
        if let Some(Entry::Fetching { generation, pieces }) =
            entries.entries.get_mut(&self.broadcast_id)
        {
            if *generation == self.generation {
                pieces.insert(piece, data);
            }
        }
    }
}

/// The broadcasts of one executor, shared by its task runners (which read them, one
/// fetch for all the tasks that want the same one) and its block server (which serves
/// their pieces).
///
/// ```
/// use bytes::Bytes;
/// use flint_executor::broadcast::BroadcastCache;
///
/// let cache = BroadcastCache::new();
/// let value = cache.get_or_fetch(3, |_| Ok((Bytes::from_static(b"lookup table"), 8)), &|| false)?;
/// // A second read finds it: no fetch, the same bytes.
/// let again = cache.get_or_fetch(3, |_| unreachable!(), &|| false)?;
/// assert_eq!(again.as_ptr(), value.as_ptr());
/// // Its pieces (of 8 bytes) are views of it, for other executors.
/// assert_eq!(&cache.piece(3, 1).unwrap()[..], b"able");
/// assert!(cache.remove(3));
/// assert!(cache.piece(3, 0).is_none());
/// # Ok::<(), flint_executor::broadcast::BroadcastError>(())
/// ```
#[derive(Debug, Default)]
pub struct BroadcastCache {
    inner: Mutex<Entries>,
    changed: Condvar,
    bytes_served: AtomicU64,
    pieces_served: AtomicU64,
}

impl BroadcastCache {
    /// An empty cache.
    pub fn new() -> Self {
        BroadcastCache::default()
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `broadcast_id`: held, or fetched with `fetch` (which returns the
    /// value and its piece size) by this caller while other callers wanting it wait for
    /// that one fetch (looking at `interrupted` now and then). A failed fetch is not
    /// kept: the next caller fetches again.
    pub fn get_or_fetch(
        &self,
        broadcast_id: u64,
        fetch: impl FnOnce(&PieceSink<'_>) -> Result<(Bytes, u32), BroadcastError>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Bytes, BroadcastError> {
        let mut entries = self.lock();
        let generation = loop {
            match entries.entries.get(&broadcast_id) {
                Some(Entry::Ready { value, .. }) => return Ok(value.clone()),
                Some(Entry::Fetching { .. }) => {
                    if interrupted() {
                        return Err(BroadcastError::Interrupted);
                    }
                    entries = self
                        .changed
                        .wait_timeout(entries, KILL_POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => {
                    let generation = entries.next_generation;
                    entries.next_generation += 1;
                    entries.entries.insert(
                        broadcast_id,
                        Entry::Fetching {
                            generation,
                            pieces: HashMap::new(),
                        },
                    );
                    break generation;
                }
            }
        };
        drop(entries);
        let sink = PieceSink {
            cache: self,
            broadcast_id,
            generation,
        };
        // A panic in the fetch must not leave the others waiting for ever.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fetch(&sink)))
            .unwrap_or_else(|_| {
                Err(BroadcastError::Failed {
                    broadcast_id,
                    why: "the fetch panicked".to_owned(),
                })
            });
        let mut entries = self.lock();
        let ours = matches!(
            entries.entries.get(&broadcast_id),
            Some(Entry::Fetching { generation: g, .. }) if *g == generation
        );
        if ours {
            match &result {
                Ok((value, piece_size)) => {
                    entries.entries.insert(
                        broadcast_id,
                        Entry::Ready {
                            value: value.clone(),
                            piece_size: (*piece_size).max(1),
                        },
                    );
                }
                Err(_) => {
                    entries.entries.remove(&broadcast_id);
                }
            }
        }
        drop(entries);
        self.changed.notify_all();
        result.map(|(value, _)| value)
    }

    /// Puts a whole value whose pieces are `piece_size` bytes (what a fetch does, and
    /// what tests and a driver-side executor may do).
    pub fn insert(&self, broadcast_id: u64, value: Bytes, piece_size: u32) {
        self.lock().entries.insert(
            broadcast_id,
            Entry::Ready {
                value,
                piece_size: piece_size.max(1),
            },
        );
        self.changed.notify_all();
    }

    /// Piece `piece` of `broadcast_id`, if it is held here: a view, never a copy.
    pub fn piece(&self, broadcast_id: u64, piece: u32) -> Option<Bytes> {
        match self.lock().entries.get(&broadcast_id)? {
            Entry::Fetching { pieces, .. } => pieces.get(&piece).cloned(),
            Entry::Ready { value, piece_size } => {
                let start = usize::try_from(u64::from(piece) * u64::from(*piece_size)).ok()?;
                if start >= value.len() {
                    return None;
                }
                let end = start.saturating_add(*piece_size as usize).min(value.len());
                Some(value.slice(start..end))
            }
        }
    }

    /// Forgets `broadcast_id` (unpersisted, or its job ended); a fetch under way keeps
    /// its value for its own task only. Whether it was held.
    pub fn remove(&self, broadcast_id: u64) -> bool {
        let removed = self.lock().entries.remove(&broadcast_id).is_some();
        self.changed.notify_all();
        removed
    }

    /// Broadcasts held whole.
    pub fn len(&self) -> usize {
        self.lock()
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Ready { .. }))
            .count()
    }

    /// Whether no broadcast is held whole.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts a piece of `len` bytes served to another executor.
    pub fn note_served(&self, len: u64) {
        self.bytes_served.fetch_add(len, Ordering::Relaxed);
        self.pieces_served.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes and pieces served to other executors so far.
    pub fn served(&self) -> (u64, u64) {
        (
            self.bytes_served.load(Ordering::Relaxed),
            self.pieces_served.load(Ordering::Relaxed),
        )
    }
}
