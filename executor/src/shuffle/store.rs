//! Map outputs on an executor: each map task's records, one block per reduce partition,
//! kept in memory while `shuffle.maxMemory` allows and in spill files under `local.dir`
//! beyond it.
//!
//! A block is a list of segments, each a run of whole records: views of memory, or
//! ranges of a spill file. A map task's writer spills its own buffers when memory runs
//! out; committed outputs still in memory are spilled first, oldest first, when a writer
//! needs room ([`ShuffleStore::evict`]). Spill files are removed with the last segment
//! that refers to them, and the executor's spill directory when the store is dropped.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use tracing::{debug, warn};

use super::memory::ShuffleMemory;
use super::ShuffleError;

/// A spill file, removed when the last segment that refers to it goes.
///
/// It is written through a descriptor held while it is written, and read by opening it
/// for each read, as block files are: a file that has gone (a disk lost, a directory
/// cleaned) fails the reads of its blocks, which the reader reports as a fetch failure,
/// instead of being served from a descriptor still open.
#[derive(Debug)]
pub(crate) struct SpillFile {
    path: PathBuf,
    writer: Option<File>,
    len: u64,
}

impl SpillFile {
    fn create(path: PathBuf) -> Result<Self, ShuffleError> {
        let file = File::options()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| ShuffleError::io(&path, source))?;
        Ok(SpillFile {
            path,
            writer: Some(file),
            len: 0,
        })
    }

    /// Appends `data`, returning where it starts.
    pub(crate) fn append(&mut self, data: &[u8]) -> Result<u64, ShuffleError> {
        let offset = self.len;
        let Some(file) = self.writer.as_mut() else {
            return Err(ShuffleError::io(
                &self.path,
                std::io::Error::other("the spill file was finished"),
            ));
        };
        file.write_all(data)
            .map_err(|source| ShuffleError::io(&self.path, source))?;
        self.len += data.len() as u64;
        Ok(offset)
    }

    /// Closes the file for writing: from now on it is only read.
    pub(crate) fn finish(mut self) -> Self {
        self.writer = None;
        self
    }

    fn read(&self, offset: u64, len: usize) -> Result<Bytes, ShuffleError> {
        let file = File::open(&self.path).map_err(|source| ShuffleError::io(&self.path, source))?;
        let mut buffer = vec![0; len];
        file.read_exact_at(&mut buffer, offset)
            .map_err(|source| ShuffleError::io(&self.path, source))?;
        Ok(Bytes::from(buffer))
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            debug!("Cannot remove the spill file {}: {e}", self.path.display());
        }
    }
}

/// A run of whole records of a block.
#[derive(Debug, Clone)]
pub(crate) enum Segment {
    /// In memory.
    Memory(Bytes),
    /// A range of a spill file.
    File {
        file: Arc<SpillFile>,
        offset: u64,
        len: u64,
    },
}

impl Segment {
    fn len(&self) -> u64 {
        match self {
            Segment::Memory(bytes) => bytes.len() as u64,
            Segment::File { len, .. } => *len,
        }
    }
}

/// One reduce partition's records of one map output.
#[derive(Debug, Clone, Default)]
pub(crate) struct Block {
    pub(crate) segments: Vec<Segment>,
}

impl Block {
    pub(crate) fn len(&self) -> u64 {
        self.segments.iter().map(Segment::len).sum()
    }
}

#[derive(Debug)]
struct MapOutput {
    blocks: Vec<Block>,
    /// Shuffle memory its memory segments hold.
    memory: u64,
    /// Tells an eviction that found the output apart from one committed since.
    generation: u64,
}

/// Removed shuffles remembered, to refuse their late outputs: shuffle ids only grow, so
/// the oldest removals, forgotten first, are the least likely to see a late commit.
const REMOVED_REMEMBERED: usize = 1024;

#[derive(Debug, Default)]
struct Outputs {
    maps: HashMap<(u32, u32), MapOutput>,
    /// Outputs that hold memory, oldest commit first (some may have gone since).
    in_memory: VecDeque<(u32, u32, u64)>,
    /// The latest shuffles removed, at most [`REMOVED_REMEMBERED`] of them.
    removed: BTreeSet<u32>,
}

/// The map outputs of one executor, shared by its task runners (which write and read
/// them) and its block server (which serves them to other executors).
#[derive(Debug)]
pub struct ShuffleStore {
    dir: PathBuf,
    memory: ShuffleMemory,
    outputs: Mutex<Outputs>,
    next_id: AtomicU64,
}

impl ShuffleStore {
    /// A store whose spill files go to a directory of its own under `local_dir` (made
    /// when the first file is), holding at most `max_memory` bytes in memory.
    pub fn new(local_dir: &Path, executor_id: &str, max_memory: u64) -> Self {
        let name: String = executor_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let dir = local_dir.join(format!(
            "flint-shuffle-{name}-{}-{:x}",
            std::process::id(),
            crate::shuffle::nonce()
        ));
        ShuffleStore {
            dir,
            memory: ShuffleMemory::new(max_memory),
            outputs: Mutex::new(Outputs::default()),
            next_id: AtomicU64::new(0),
        }
    }

    /// The directory spill files go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The shuffle memory.
    pub fn memory(&self) -> &ShuffleMemory {
        &self.memory
    }

    fn lock(&self) -> MutexGuard<'_, Outputs> {
        self.outputs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new, empty spill file.
    pub(crate) fn spill_file(&self) -> Result<SpillFile, ShuffleError> {
        std::fs::create_dir_all(&self.dir).map_err(|source| ShuffleError::io(&self.dir, source))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        SpillFile::create(self.dir.join(format!("spill-{id}.data")))
    }

    /// Records map output `map` of `shuffle`, whose memory segments hold `memory` bytes of
    /// the shuffle memory (reserved by its writer), in place of any output of an earlier
    /// attempt. Returns the size of each block.
    ///
    /// The output of a shuffle already removed (a straggling or speculative attempt that
    /// ended after the driver let the shuffle go) is dropped at once, memory and files:
    /// nobody would ever remove it again.
    pub(crate) fn commit(
        &self,
        shuffle: u32,
        map: u32,
        blocks: Vec<Block>,
        memory: u64,
    ) -> Vec<u64> {
        let sizes = blocks.iter().map(Block::len).collect();
        let generation = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut outputs = self.lock();
        if outputs.removed.contains(&shuffle) {
            drop(outputs);
            debug!("Map output {map} of shuffle {shuffle} dropped: the shuffle was removed");
            drop(blocks);
            self.memory.release(memory);
            return sizes;
        }
        if memory > 0 {
            outputs.in_memory.push_back((shuffle, map, generation));
        }
        let replaced = outputs.maps.insert(
            (shuffle, map),
            MapOutput {
                blocks,
                memory,
                generation,
            },
        );
        drop(outputs);
        if let Some(old) = replaced {
            self.memory.release(old.memory);
        }
        sizes
    }

    /// The segments of block `reduce` of map output `map` of `shuffle`.
    pub(crate) fn block(&self, shuffle: u32, map: u32, reduce: u32) -> Result<Block, ShuffleError> {
        let outputs = self.lock();
        outputs
            .maps
            .get(&(shuffle, map))
            .and_then(|output| output.blocks.get(reduce as usize))
            .cloned()
            .ok_or(ShuffleError::BlockNotFound {
                shuffle,
                map,
                reduce,
            })
    }

    /// The block's records, as pieces of whole records: views of memory, and what is read
    /// from spill files.
    pub fn read_block(
        &self,
        shuffle: u32,
        map: u32,
        reduce: u32,
    ) -> Result<Vec<Bytes>, ShuffleError> {
        let block = self.block(shuffle, map, reduce)?;
        block
            .segments
            .iter()
            .filter(|segment| segment.len() > 0)
            .map(|segment| match segment {
                Segment::Memory(bytes) => Ok(bytes.clone()),
                Segment::File { file, offset, len } => file.read(*offset, to_usize(*len)?),
            })
            .collect()
    }

    /// Up to `max_len` bytes of the block from `offset`, and the block's size: what the
    /// block server sends another executor. A range within one memory segment is a view
    /// of it; anything else is copied or read.
    pub fn read_range(
        &self,
        shuffle: u32,
        map: u32,
        reduce: u32,
        offset: u64,
        max_len: u64,
    ) -> Result<(Bytes, u64), ShuffleError> {
        let block = self.block(shuffle, map, reduce)?;
        let total = block.len();
        if offset > total {
            return Err(ShuffleError::OffsetPastEnd {
                offset,
                size: total,
            });
        }
        let end = offset.saturating_add(max_len).min(total);
        let mut out: Option<BytesMut> = None;
        let mut single: Option<Bytes> = None;
        let mut start = 0;
        for segment in &block.segments {
            let (seg_start, seg_end) = (start, start + segment.len());
            start = seg_end;
            let (from, to) = (offset.max(seg_start), end.min(seg_end));
            if from >= to {
                continue;
            }
            let (at, len) = (from - seg_start, to_usize(to - from)?);
            let piece = match segment {
                Segment::Memory(bytes) => bytes.slice(to_usize(at)?..to_usize(at)? + len),
                Segment::File { file, offset, .. } => file.read(offset + at, len)?,
            };
            match (&mut out, &single) {
                (None, None) => single = Some(piece),
                (None, Some(first)) => {
                    let mut buffer = BytesMut::with_capacity(to_usize(end - offset)?);
                    buffer.extend_from_slice(first);
                    buffer.extend_from_slice(&piece);
                    out = Some(buffer);
                }
                (Some(buffer), _) => buffer.extend_from_slice(&piece),
            }
        }
        let data = match out {
            Some(buffer) => buffer.freeze(),
            None => single.unwrap_or_default(),
        };
        Ok((data, total))
    }

    /// Forgets every map output of `shuffle` (the driver no longer needs it), and refuses
    /// those committed later.
    pub fn remove_shuffle(&self, shuffle: u32) {
        let mut outputs = self.lock();
        outputs.removed.insert(shuffle);
        if outputs.removed.len() > REMOVED_REMEMBERED {
            outputs.removed.pop_first();
        }
        let mut freed = 0;
        outputs.maps.retain(|&(s, _), output| {
            if s == shuffle {
                freed += output.memory;
            }
            s != shuffle
        });
        outputs.in_memory.retain(|&(s, _, _)| s != shuffle);
        drop(outputs);
        self.memory.release(freed);
    }

    /// Spills committed outputs still in memory, oldest first, until `want` bytes of the
    /// shuffle memory are free again or none is left; returns the bytes freed.
    pub(crate) fn evict(&self, want: u64) -> u64 {
        let mut freed = 0;
        while freed < want {
            let (key, generation, memory_segments) = {
                let mut outputs = self.lock();
                let Some((shuffle, map, generation)) = outputs.in_memory.pop_front() else {
                    break;
                };
                match outputs.maps.get(&(shuffle, map)) {
                    Some(output) if output.generation == generation && output.memory > 0 => {
                        let segments: Vec<(usize, usize, Bytes)> = output
                            .blocks
                            .iter()
                            .enumerate()
                            .flat_map(|(b, block)| {
                                block
                                    .segments
                                    .iter()
                                    .enumerate()
                                    .filter_map(move |(s, seg)| match seg {
                                        Segment::Memory(bytes) => Some((b, s, bytes.clone())),
                                        Segment::File { .. } => None,
                                    })
                            })
                            .collect();
                        ((shuffle, map), generation, segments)
                    }
                    _ => continue,
                }
            };
            match self.write_out(&memory_segments) {
                Ok(file_segments) => {
                    let mut outputs = self.lock();
                    if let Some(output) = outputs.maps.get_mut(&key) {
                        if output.generation == generation {
                            for ((b, s, _), segment) in memory_segments.iter().zip(file_segments) {
                                output.blocks[*b].segments[*s] = segment;
                            }
                            freed += output.memory;
                            self.memory.release(output.memory);
                            output.memory = 0;
                        }
                    }
                }
                Err(e) => {
                    warn!(
                        "Cannot spill map output {} of shuffle {}: {e}",
                        key.1, key.0
                    );
                    // Still in memory: the next eviction tries it again, first.
                    self.lock().in_memory.push_front((key.0, key.1, generation));
                    break;
                }
            }
        }
        freed
    }

    fn write_out(&self, segments: &[(usize, usize, Bytes)]) -> Result<Vec<Segment>, ShuffleError> {
        let mut file = self.spill_file()?;
        let mut ranges = Vec::with_capacity(segments.len());
        for (_, _, bytes) in segments {
            ranges.push((file.append(bytes)?, bytes.len() as u64));
        }
        let file = Arc::new(file.finish());
        Ok(ranges
            .into_iter()
            .map(|(offset, len)| Segment::File {
                file: file.clone(),
                offset,
                len,
            })
            .collect())
    }

    /// Map outputs held, for tests and metrics.
    pub fn outputs(&self) -> usize {
        self.lock().maps.len()
    }

    /// Shuffle memory map output `map` of `shuffle` holds (0 once spilled), if it is
    /// held; for tests and metrics.
    pub fn output_memory(&self, shuffle: u32, map: u32) -> Option<u64> {
        self.lock()
            .maps
            .get(&(shuffle, map))
            .map(|output| output.memory)
    }
}

impl Drop for ShuffleStore {
    fn drop(&mut self) {
        // The outputs' spill files go first, then the directory.
        self.outputs
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .maps
            .clear();
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(
                "Cannot remove the shuffle directory {}: {e}",
                self.dir.display()
            ),
        }
    }
}

fn to_usize(n: u64) -> Result<usize, ShuffleError> {
    usize::try_from(n).map_err(|_| ShuffleError::TooLarge(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_removed_shuffles_remembered_are_the_latest_and_bounded() {
        let store = ShuffleStore::new(&std::env::temp_dir(), "1", 1 << 20);
        let last = REMOVED_REMEMBERED as u32 + 100;
        for shuffle in 0..=last {
            store.remove_shuffle(shuffle);
        }
        let outputs = store.lock();
        assert_eq!(outputs.removed.len(), REMOVED_REMEMBERED);
        assert_eq!(
            outputs.removed.first(),
            Some(&(last + 1 - REMOVED_REMEMBERED as u32))
        );
        assert_eq!(outputs.removed.last(), Some(&last));
    }
}
