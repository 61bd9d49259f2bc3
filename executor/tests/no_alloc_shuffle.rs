//! Writing and reading shuffle records allocates nothing per record.
//!
//! This test binary counts the allocation calls (alloc, alloc_zeroed, realloc) its test
//! thread makes inside [`counted`] (a counting global allocator; other threads are not
//! counted). After a warm-up, a map task's [`ShuffleWriter`] writes [`RECORDS`] records
//! into [`PARTITIONS`] buckets of a [`ShuffleStore`] with room for them in memory, commits
//! them, and they are read back:
//!
//! - locally, as a reduce task reads a block of its own executor: the pieces
//!   [`ShuffleStore::read_block`] returns, read with [`Records`] or [`KeyedRecords`];
//! - as fetched: the block in chunks of [`CHUNK`] bytes as the block server sends them
//!   ([`ShuffleStore::read_range`]), put back into whole records by [`RecordPieces`],
//!   then read the same way.
//!
//! Each path may allocate when a bucket grows (doubling: O(log N) per bucket), once per
//! block or chunk, and for the writer and the store's bookkeeping; the assertion is a
//! bound well below one allocation per record: fewer than `RECORDS / 1000` calls.
//!
//! `cargo test --release -p flint-executor --test no_alloc_shuffle -- --nocapture`
//! prints the counts.

use std::path::PathBuf;
use std::sync::Arc;

use flint_executor::shuffle::{partition_of, RecordPieces, ShuffleStore, ShuffleWriter};
use flint_testkit::alloc::{counted, CountingAllocator};
use flint_wire::records::{KeyedRecords, Records};

/// Records written and read in the measured part of each case.
const RECORDS: u64 = 1_000_000;
/// Allocation calls each measured path may make: far fewer than one per record.
const ALLOWED: u64 = RECORDS / 1_000;
/// Records written and read, uncounted, before the measured part.
const WARM_UP: u64 = 10_000;
/// Reduce partitions: buckets of the writer.
const PARTITIONS: u32 = 4;
/// Bytes of an unkeyed record, as in the hash shuffle.
const RECORD_SIZE: usize = 100;
/// Bytes of a fetched chunk.
const CHUNK: u64 = 1 << 20;
/// Shuffle memory: the whole shuffle stays in memory (nothing spills).
const MAX_MEMORY: u64 = 1 << 30;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// A directory of its own under the system's temporary one, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "flint-no-alloc-shuffle-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A step of a 64-bit LCG: a key per record without allocating.
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *state >> 33
}

/// What was read back: records, and a checksum of their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Sum {
    records: u64,
    bytes: u64,
    xor: u64,
}

impl Sum {
    fn add(&mut self, record: &[u8]) {
        self.records += 1;
        self.bytes += record.len() as u64;
        self.xor ^= u64::from_le_bytes(record[..8].try_into().unwrap());
    }
}

/// Writes `records` records of [`RECORD_SIZE`] bytes, as `shuffle-write` does (each to
/// the partition of the hash of its first 8 bytes), as map output `map` of `shuffle`.
fn write_plain(store: &Arc<ShuffleStore>, shuffle: u32, map: u32, records: u64) -> Sum {
    let mut writer = ShuffleWriter::new(store.clone(), shuffle, map, PARTITIONS).unwrap();
    let mut record = [0u8; RECORD_SIZE];
    let mut state = u64::from(map);
    let mut sum = Sum::default();
    for _ in 0..records {
        let key = next(&mut state).to_le_bytes();
        record[..8].copy_from_slice(&key);
        record[8..].fill(key[0]);
        writer
            .write(partition_of(&key, PARTITIONS), &record)
            .unwrap();
        sum.add(&record);
    }
    writer.commit();
    sum
}

/// Writes `records` keyed records (an 8-byte word, an 8-byte count), as
/// `wordcount-map` does.
fn write_keyed(store: &Arc<ShuffleStore>, shuffle: u32, map: u32, records: u64) -> Sum {
    let mut writer = ShuffleWriter::new(store.clone(), shuffle, map, PARTITIONS).unwrap();
    let mut state = u64::from(map);
    let mut sum = Sum::default();
    for i in 0..records {
        let word = next(&mut state).to_le_bytes();
        writer.write_keyed(&word, &i.to_le_bytes()).unwrap();
        sum.add(&word);
    }
    writer.commit();
    sum
}

/// How a reduce task gets a block.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// The pieces of [`ShuffleStore::read_block`].
    Local,
    /// Chunks of [`ShuffleStore::read_range`] through [`RecordPieces`].
    Fetched,
}

/// How the records of a piece are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Plain records, with [`Records`].
    Plain,
    /// Keyed records, with [`KeyedRecords`].
    Keyed,
}

/// Reads every block of map output `map` of `shuffle` (summing the keys of keyed ones).
fn read_back(store: &ShuffleStore, shuffle: u32, map: u32, read: Read, format: Format) -> Sum {
    let mut sum = Sum::default();
    let mut pieces = Vec::with_capacity(64);
    for reduce in 0..PARTITIONS {
        pieces.clear();
        match read {
            Read::Local => pieces.extend(store.read_block(shuffle, map, reduce).unwrap()),
            Read::Fetched => {
                let mut offset = 0;
                // The block's size comes with its first chunk, as a map status announces
                // it to a fetching reducer.
                let mut reassembly: Option<RecordPieces> = None;
                loop {
                    let (chunk, total) = store
                        .read_range(shuffle, map, reduce, offset, CHUNK)
                        .unwrap();
                    offset += chunk.len() as u64;
                    reassembly
                        .get_or_insert_with(|| RecordPieces::new(total))
                        .push(chunk, &mut pieces)
                        .unwrap();
                    if offset >= total {
                        break;
                    }
                }
                reassembly.expect("a chunk was read").finish().unwrap();
            }
        }
        for piece in &pieces {
            match format {
                Format::Plain => {
                    for record in Records::new(piece) {
                        sum.add(record.unwrap());
                    }
                }
                Format::Keyed => {
                    for record in KeyedRecords::new(piece) {
                        let (key, value) = record.unwrap();
                        assert_eq!(value.len(), 8);
                        sum.add(key);
                    }
                }
            }
        }
    }
    sum
}

/// Warms up, then counts the allocations of writing [`RECORDS`] records and of reading
/// them back each way; checks that what was read is what was written.
fn case(name: &str, keyed: bool) {
    let dir = TempDir::new(name);
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", MAX_MEMORY));
    let write = |shuffle, records| {
        if keyed {
            write_keyed(&store, shuffle, 0, records)
        } else {
            write_plain(&store, shuffle, 0, records)
        }
    };
    // The warm-up: a map output written and read both ways, then forgotten.
    let warm = write(0, WARM_UP);
    let format = if keyed { Format::Keyed } else { Format::Plain };
    for read in [Read::Local, Read::Fetched] {
        assert_eq!(read_back(&store, 0, 0, read, format), warm);
    }
    store.remove_shuffle(0);

    let (written, write_allocations) = counted(|| write(1, RECORDS));
    assert_eq!(written.records, RECORDS);
    let mut counts = vec![("write", write_allocations.calls)];
    for (label, read) in [
        ("read, local", Read::Local),
        ("read, fetched", Read::Fetched),
    ] {
        let (read_sum, allocations) = counted(|| read_back(&store, 1, 0, read, format));
        assert_eq!(read_sum, written, "{name}, {label}: what was written");
        counts.push((label, allocations.calls));
    }
    // All of it stayed in memory: no spill file, hence no spill directory, was made.
    assert!(!store.dir().exists(), "{name}: something spilled");
    println!(
        "{name}: {RECORDS} records into {PARTITIONS} partitions; allocation calls: {}",
        counts
            .iter()
            .map(|(label, n)| format!("{label} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (label, allocations) in counts {
        assert!(
            allocations < ALLOWED,
            "{name}, {label}: {allocations} allocation calls for {RECORDS} records \
             (allowed fewer than {ALLOWED})"
        );
    }
}

#[test]
fn writing_and_reading_records_allocates_nothing_per_record() {
    case("plain", false);
}

#[test]
fn writing_and_reading_keyed_records_allocates_nothing_per_record() {
    case("keyed", true);
}
