//! A map task's shuffle writer: records into one bucket per reduce partition, within the
//! executor's shuffle memory, spilling to a file of its own when that runs out.

use std::hash::Hasher;
use std::sync::Arc;

use bytes::BytesMut;
use flint_wire::records::{fits, keyed_record_len, put_keyed, put_record, LENGTH_PREFIX};
use rustc_hash::FxHasher;

use super::store::{Block, Segment, ShuffleStore, SpillFile};
use super::ShuffleError;

/// The smallest a bucket grows to at once: small buckets would reserve memory a few bytes
/// at a time. With many partitions it is less (see [`ShuffleWriter::new`]).
const MIN_BUCKET: usize = 4 << 10;

/// What a writer and its output keep per reduce partition besides the records: its
/// bucket, its spilled ranges, its block, its size in the map status.
pub(crate) const PARTITION_BOOKKEEPING: u64 = (std::mem::size_of::<BytesMut>()
    + std::mem::size_of::<Vec<(u64, u64)>>()
    + std::mem::size_of::<Block>()
    + std::mem::size_of::<u64>()) as u64;

/// The reduce partition of `key` among `partitions`: a hash of its bytes that every
/// executor computes alike (no random seed), so that one key's records meet in one
/// reduce task.
pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    let mut hasher = FxHasher::default();
    hasher.write(key);
    (hasher.finish() % u64::from(partitions.max(1))) as u32
}

/// Writes one map task's records, partitioned by reducer (the seeds' shuffle writer
/// group): [`ShuffleWriter::write`] to a partition chosen by the task,
/// [`ShuffleWriter::write_keyed`] to the partition of the key's hash.
///
/// Records are appended to a bucket per reduce partition. The buckets' memory comes from
/// the executor's `shuffle.maxMemory`; when none is left, the store spills older map
/// outputs first, then this writer appends its buckets to a spill file of its own and
/// starts them again. Writing a record allocates nothing but when a bucket grows.
///
/// The shuffle memory is a bound whatever the number of partitions: a bucket's first
/// growth is at most the memory's share of one partition, and a record that finds no
/// room even after the writer spilled takes back the room of its other (empty) buckets.
/// Only a record the pool cannot hold at all overdraws it, by that record's length.
#[derive(Debug)]
pub struct ShuffleWriter {
    store: Arc<ShuffleStore>,
    shuffle_id: u32,
    map_index: u32,
    buckets: Vec<BytesMut>,
    /// What each partition has spilled, in order.
    spilled: Vec<Vec<(u64, u64)>>,
    spill: Option<SpillFile>,
    /// Shuffle memory this writer holds: its buckets' capacity.
    reserved: u64,
    /// The least a bucket grows to.
    min_bucket: usize,
    records: u64,
    bytes: u64,
}

impl ShuffleWriter {
    /// A writer of map output `map_index` of `shuffle_id`, with `partitions` buckets.
    ///
    /// Refused when the partitions' bookkeeping (`PARTITION_BOOKKEEPING` bytes each)
    /// would not fit the store's shuffle memory: the partition count comes from the
    /// task, and nothing is allocated for it before it is checked.
    pub fn new(
        store: Arc<ShuffleStore>,
        shuffle_id: u32,
        map_index: u32,
        partitions: u32,
    ) -> Result<Self, ShuffleError> {
        let limit = store.memory().limit();
        let bookkeeping = u64::from(partitions) * PARTITION_BOOKKEEPING;
        if bookkeeping > limit {
            return Err(ShuffleError::TooManyPartitions {
                partitions,
                what: "their bookkeeping",
                need: bookkeeping,
                key: "shuffle.maxMemory",
                limit,
            });
        }
        let mut buckets = Vec::new();
        buckets
            .try_reserve_exact(partitions as usize)
            .map_err(|_| ShuffleError::TooLarge(bookkeeping))?;
        buckets.extend((0..partitions).map(|_| BytesMut::new()));
        // Every bucket at its least still fits in the shuffle memory: with many
        // partitions, a fixed least would take more than the bound in first growths.
        let share = limit / u64::from(partitions.max(1));
        let min_bucket = usize::try_from(share).map_or(MIN_BUCKET, |s| s.clamp(1, MIN_BUCKET));
        Ok(ShuffleWriter {
            store,
            shuffle_id,
            map_index,
            buckets,
            spilled: Vec::new(),
            spill: None,
            reserved: 0,
            min_bucket,
            records: 0,
            bytes: 0,
        })
    }

    /// The reduce partitions: buckets written to.
    pub fn partitions(&self) -> u32 {
        self.buckets.len() as u32
    }

    /// The shuffle written.
    pub fn shuffle_id(&self) -> u32 {
        self.shuffle_id
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Bytes written so far, length prefixes included.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// The reduce partition of `key`: see [`partition_of`].
    pub fn partition_of(&self, key: &[u8]) -> u32 {
        partition_of(key, self.partitions())
    }

    /// Writes `record` to reduce partition `partition`.
    #[inline]
    pub fn write(&mut self, partition: u32, record: &[u8]) -> Result<(), ShuffleError> {
        let need = LENGTH_PREFIX + record.len();
        self.room(partition, need, fits(record.len()))?;
        put_record(&mut self.buckets[partition as usize], record);
        self.records += 1;
        self.bytes += need as u64;
        Ok(())
    }

    /// Writes a keyed record to the reduce partition of its key's hash.
    #[inline]
    pub fn write_keyed(&mut self, key: &[u8], value: &[u8]) -> Result<(), ShuffleError> {
        let partition = self.partition_of(key);
        self.write_keyed_to(partition, key, value)
    }

    /// Writes a keyed record to reduce partition `partition`.
    #[inline]
    pub fn write_keyed_to(
        &mut self,
        partition: u32,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ShuffleError> {
        let need = keyed_record_len(key.len(), value.len());
        self.room(partition, need, fits(need - LENGTH_PREFIX))?;
        put_keyed(&mut self.buckets[partition as usize], key, value);
        self.records += 1;
        self.bytes += need as u64;
        Ok(())
    }

    #[inline]
    fn room(&mut self, partition: u32, need: usize, fits: bool) -> Result<(), ShuffleError> {
        let Some(bucket) = self.buckets.get(partition as usize) else {
            return Err(ShuffleError::NoSuchPartition {
                partition,
                partitions: self.partitions(),
            });
        };
        if !fits {
            return Err(ShuffleError::TooLarge(need as u64));
        }
        if bucket.capacity() - bucket.len() >= need {
            return Ok(());
        }
        self.grow(partition as usize, need)
    }

    /// Makes room for `need` more bytes in bucket `index`: from the shuffle memory if it
    /// has some, else by spilling older outputs, else by spilling this writer's buckets
    /// (whose capacity it keeps), else with the room of its other buckets, and only then
    /// beyond the limit, by the record's length.
    #[cold]
    fn grow(&mut self, index: usize, need: usize) -> Result<(), ShuffleError> {
        let bucket = &self.buckets[index];
        let (len, capacity) = (bucket.len(), bucket.capacity());
        let mut target = (len + need)
            .max(capacity.saturating_mul(2))
            .max(self.min_bucket);
        let mut delta = (target - capacity) as u64;
        let store = self.store.clone();
        let memory = store.memory();
        if !memory.try_reserve(delta) {
            store.evict(delta);
            if !memory.try_reserve(delta) {
                self.spill_buckets()?;
                let bucket = &self.buckets[index];
                if bucket.capacity() - bucket.len() >= need {
                    return Ok(());
                }
                // Every bucket is empty now. Room kept for the others is of no use to
                // this record: given back, it lets the record in within the bound.
                self.release_buckets();
                target = need;
                delta = need as u64;
                if !memory.try_reserve(delta) {
                    // The pool holds less than one record (others hold the rest):
                    // overdrawn by that record alone.
                    memory.force_reserve(delta);
                }
            }
        }
        let bucket = &mut self.buckets[index];
        let capacity = bucket.capacity();
        bucket.reserve(target - bucket.len());
        let grown = (bucket.capacity() - capacity) as u64;
        // Vec's growth may differ from the target by a little either way.
        if grown > delta {
            memory.force_reserve(grown - delta);
        } else {
            memory.release(delta - grown);
        }
        self.reserved += grown;
        Ok(())
    }

    /// Frees every bucket's memory (they are all empty) and gives it back to the pool.
    fn release_buckets(&mut self) {
        let mut freed = 0;
        for bucket in &mut self.buckets {
            debug_assert!(bucket.is_empty());
            freed += bucket.capacity() as u64;
            *bucket = BytesMut::new();
        }
        self.reserved -= freed;
        self.store.memory().release(freed);
    }

    /// Appends every bucket's records to this writer's spill file and empties the
    /// buckets, keeping their capacity.
    fn spill_buckets(&mut self) -> Result<(), ShuffleError> {
        if self.buckets.iter().all(BytesMut::is_empty) {
            return Ok(());
        }
        if self.spill.is_none() {
            self.spill = Some(self.store.spill_file()?);
            self.spilled = vec![Vec::new(); self.buckets.len()];
        }
        let file = self.spill.as_mut().expect("made above");
        for (bucket, spilled) in self.buckets.iter_mut().zip(&mut self.spilled) {
            if !bucket.is_empty() {
                let offset = file.append(bucket)?;
                spilled.push((offset, bucket.len() as u64));
                bucket.clear();
            }
        }
        Ok(())
    }

    /// Hands the map output to the store, returning each block's size: the map status's
    /// sizes.
    pub fn commit(mut self) -> Vec<u64> {
        let file = self.spill.take().map(|file| Arc::new(file.finish()));
        let spilled = std::mem::take(&mut self.spilled);
        let buckets = std::mem::take(&mut self.buckets);
        let blocks = buckets
            .into_iter()
            .enumerate()
            .map(|(index, bucket)| {
                let mut segments = Vec::new();
                if let (Some(file), Some(ranges)) = (&file, spilled.get(index)) {
                    segments.extend(ranges.iter().map(|&(offset, len)| Segment::File {
                        file: file.clone(),
                        offset,
                        len,
                    }));
                }
                if !bucket.is_empty() {
                    segments.push(Segment::Memory(bucket.freeze()));
                }
                Block { segments }
            })
            .collect();
        let reserved = std::mem::take(&mut self.reserved);
        self.store
            .commit(self.shuffle_id, self.map_index, blocks, reserved)
    }
}

impl Drop for ShuffleWriter {
    /// A writer dropped without a commit (its task failed) gives its memory back; its
    /// spill file goes with it.
    fn drop(&mut self) {
        self.store.memory().release(self.reserved);
    }
}
