//! The broadcasts an executor holds: whole values its tasks read, and the pieces of
//! those still being fetched, which its block server already serves to other executors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use super::BroadcastError;

/// How often a task waiting for another task's fetch looks whether it was killed.
const KILL_POLL: Duration = Duration::from_millis(100);

/// A value being fetched: allocated once at its declared size, each piece copied in as
/// it arrives (the reply frame it came in is let go at once), frozen as it is when the
/// last piece is in. No second copy of the value is ever made.
#[derive(Debug)]
struct Partial {
    value: Vec<u8>,
    piece_size: u32,
    /// The generation of the description it is fetched by.
    generation: u64,
    /// By piece.
    held: Vec<bool>,
    count: usize,
}

impl Partial {
    fn range(&self, piece: u32) -> Option<std::ops::Range<usize>> {
        if !*self.held.get(piece as usize)? {
            return None;
        }
        let start = piece as usize * self.piece_size as usize;
        Some(start..(start + self.piece_size as usize).min(self.value.len()))
    }
}

/// A partial value, shared by the cache entry (which serves its pieces) and the fetch
/// that fills it (which keeps it if the entry is removed meanwhile).
type SharedPartial = Arc<Mutex<Option<Partial>>>;

fn lock_partial(partial: &SharedPartial) -> MutexGuard<'_, Option<Partial>> {
    partial.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug)]
enum Entry {
    /// Being fetched; its pieces are served as they arrive.
    Fetching {
        /// The fetch filling it; `None` when that one ended without the value (its
        /// task killed, or a failure) but left pieces: they were reported to the
        /// driver and stay served, and the next reader goes on from them.
        fetch: Option<u64>,
        partial: SharedPartial,
    },
    /// The whole value; a piece is a view of it.
    Ready {
        value: Bytes,
        piece_size: u32,
        /// The generation of the description it was fetched by.
        generation: u64,
    },
}

#[derive(Debug, Default)]
struct Entries {
    entries: HashMap<u64, Entry>,
    /// Tells fetches apart: one whose entry was removed (unpersisted) meanwhile does
    /// not put its value back.
    next_generation: u64,
}

/// What a fetch puts the value's pieces in as they arrive (so that they are served at
/// once), for the fetch's own entry only.
#[derive(Debug)]
pub struct PieceSink<'c> {
    cache: &'c BroadcastCache,
    broadcast_id: u64,
    partial: SharedPartial,
}

impl PieceSink<'_> {
    /// Readies the value for `total_size` bytes in pieces of `piece_size` (the layout
    /// the driver declared, of unpersist generation `generation`, already checked
    /// against `broadcast.maxSize`): allocated here, once, unless an earlier fetch of
    /// this value left pieces, which are kept. The pieces held already, not to be
    /// fetched again.
    pub fn start(&self, total_size: u64, piece_size: u32, generation: u64) -> Vec<u32> {
        let mut partial = lock_partial(&self.partial);
        if let Some(p) = &mut *partial {
            if p.value.len() as u64 == total_size && p.piece_size == piece_size {
                p.generation = p.generation.max(generation);
                return (0..p.held.len() as u32)
                    .filter(|&i| p.held[i as usize])
                    .collect();
            }
        }
        let pieces = if total_size == 0 {
            0
        } else {
            total_size.div_ceil(u64::from(piece_size.max(1)))
        };
        *partial = Some(Partial {
            value: vec![0; total_size as usize],
            piece_size: piece_size.max(1),
            generation,
            held: vec![false; pieces as usize],
            count: 0,
        });
        Vec::new()
    }

    /// Copies `data`, checked, in as piece `piece`. Whether the cache keeps it (its
    /// block server serves it from now on): only then may it be reported to the
    /// driver. Not kept once the value was unpersisted meanwhile, nor when `data` is
    /// not that piece's length, nor before [`PieceSink::start`].
    pub fn add(&self, piece: u32, data: &[u8]) -> bool {
        {
            let mut partial = lock_partial(&self.partial);
            let Some(p) = partial.as_mut() else {
                return false;
            };
            let Some(&held) = p.held.get(piece as usize) else {
                return false;
            };
            let start = piece as usize * p.piece_size as usize;
            let end = (start + p.piece_size as usize).min(p.value.len());
            if data.len() != end - start {
                return false;
            }
            p.value[start..end].copy_from_slice(data);
            if !held {
                p.held[piece as usize] = true;
                p.count += 1;
            }
        }
        let entries = self.cache.lock();
        matches!(
            entries.entries.get(&self.broadcast_id),
            Some(Entry::Fetching { partial, .. }) if Arc::ptr_eq(partial, &self.partial)
        )
    }

    /// The whole value, once every piece is in: from then on the cache holds it whole
    /// (if it was not unpersisted meanwhile). `None` while pieces are missing.
    pub fn finish(&self) -> Option<Bytes> {
        let mut entries = self.cache.lock();
        let mut partial = lock_partial(&self.partial);
        if partial.as_ref()?.count != partial.as_ref()?.held.len() {
            return None;
        }
        let Partial {
            value,
            piece_size,
            generation,
            ..
        } = partial.take()?;
        let value = Bytes::from(value);
        if let Some(entry) = entries.entries.get_mut(&self.broadcast_id) {
            if matches!(entry, Entry::Fetching { partial, .. } if Arc::ptr_eq(partial, &self.partial))
            {
                *entry = Entry::Ready {
                    value: value.clone(),
                    piece_size,
                    generation,
                };
            }
        }
        drop(entries);
        self.cache.changed.notify_all();
        Some(value)
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
    /// that one fetch (looking at `interrupted` now and then). When that fetch ends
    /// without the value (its task killed, say), a waiting caller takes over, going on
    /// from the pieces it received, which stay served meanwhile. A fetch that failed
    /// before any piece leaves nothing: the next caller fetches again.
    pub fn get_or_fetch(
        &self,
        broadcast_id: u64,
        fetch: impl FnOnce(&PieceSink<'_>) -> Result<(Bytes, u32), BroadcastError>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Bytes, BroadcastError> {
        let mut entries = self.lock();
        let (generation, partial) = loop {
            let generation = entries.next_generation;
            match entries.entries.get_mut(&broadcast_id) {
                Some(Entry::Ready { value, .. }) => return Ok(value.clone()),
                Some(Entry::Fetching { fetch: Some(_), .. }) => {
                    if interrupted() {
                        return Err(BroadcastError::Interrupted);
                    }
                    entries = self
                        .changed
                        .wait_timeout(entries, KILL_POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    continue;
                }
                Some(Entry::Fetching { fetch, partial }) => {
                    if interrupted() {
                        return Err(BroadcastError::Interrupted);
                    }
                    *fetch = Some(generation);
                    let partial = partial.clone();
                    entries.next_generation += 1;
                    break (generation, partial);
                }
                None => {
                    let partial = SharedPartial::default();
                    entries.next_generation += 1;
                    entries.entries.insert(
                        broadcast_id,
                        Entry::Fetching {
                            fetch: Some(generation),
                            partial: partial.clone(),
                        },
                    );
                    break (generation, partial);
                }
            }
        };
        drop(entries);
        let sink = PieceSink {
            cache: self,
            broadcast_id,
            partial,
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
        let ours = match entries.entries.get_mut(&broadcast_id) {
            Some(Entry::Fetching { fetch, partial }) if *fetch == Some(generation) => {
                match &result {
                    Ok(_) => true,
                    Err(_) => {
                        let left = lock_partial(partial).as_ref().is_some_and(|p| p.count > 0);
                        if left {
                            // Reported, and served: kept for the next reader to go on.
                            *fetch = None;
                        }
                        !left
                    }
                }
            }
            _ => false,
        };
        if ours {
            match &result {
                Ok((value, piece_size)) => {
                    entries.entries.insert(
                        broadcast_id,
                        Entry::Ready {
                            value: value.clone(),
                            piece_size: (*piece_size).max(1),
                            generation: 0,
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
    /// what tests and a driver-side executor may do), of generation 0.
    pub fn insert(&self, broadcast_id: u64, value: Bytes, piece_size: u32) {
        self.lock().entries.insert(
            broadcast_id,
            Entry::Ready {
                value,
                piece_size: piece_size.max(1),
                generation: 0,
            },
        );
        self.changed.notify_all();
    }

    /// Piece `piece` of `broadcast_id`, if it is held here: a view of a whole value;
    /// of one being fetched, a copy of the piece (the value is still being written).
    pub fn piece(&self, broadcast_id: u64, piece: u32) -> Option<Bytes> {
        let partial = match self.lock().entries.get(&broadcast_id)? {
            Entry::Fetching { partial, .. } => partial.clone(),
            Entry::Ready {
                value, piece_size, ..
            } => {
                let start = usize::try_from(u64::from(piece) * u64::from(*piece_size)).ok()?;
                if start >= value.len() {
                    return None;
                }
                let end = start.saturating_add(*piece_size as usize).min(value.len());
                return Some(value.slice(start..end));
            }
        };
        let partial = lock_partial(&partial);
        let p = partial.as_ref()?;
        Some(Bytes::copy_from_slice(&p.value[p.range(piece)?]))
    }

    /// Forgets `broadcast_id` (unpersisted, or its job ended), and the pieces a fetch
    /// left; a fetch under way keeps its value for its own task only. Whether it was
    /// held.
    pub fn remove(&self, broadcast_id: u64) -> bool {
        let removed = self.lock().entries.remove(&broadcast_id).is_some();
        self.changed.notify_all();
        removed
    }

    /// The driver unpersisted `broadcast_id`, making its descriptions of generation
    /// `generation`: forgets it (as [`BroadcastCache::remove`]) unless it was fetched by
    /// a description of that generation or later, after the unpersist (the driver
    /// takes that fetch's reports, and sends other executors here for its pieces).
    /// Whether it was forgotten.
    pub fn unpersist(&self, broadcast_id: u64, generation: u64) -> bool {
        let mut entries = self.lock();
        let newer = match entries.entries.get(&broadcast_id) {
            None => return false,
            Some(Entry::Ready { generation: g, .. }) => *g >= generation,
            Some(Entry::Fetching { partial, .. }) => lock_partial(partial)
                .as_ref()
                .is_some_and(|p| p.generation >= generation),
        };
        if newer {
            return false;
        }
        entries.entries.remove(&broadcast_id);
        drop(entries);
        self.changed.notify_all();
        true
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
