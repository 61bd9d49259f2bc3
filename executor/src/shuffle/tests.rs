//! The store and the writer together: what is written is read back, within the memory
//! bound, whatever spilled.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use flint_wire::records::{KeyedRecords, Records};

use super::*;

/// A directory of its own under the system's temporary one, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("flint-test-{name}-{:x}", nonce()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn files(&self) -> usize {
        walk(&self.0)
    }
}

fn walk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| {
                    let e = e.unwrap();
                    if e.file_type().unwrap().is_dir() {
                        walk(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn records_of(pieces: &[Bytes]) -> Vec<Vec<u8>> {
    pieces
        .iter()
        .flat_map(|piece| Records::new(piece).map(|r| r.unwrap().to_vec()))
        .collect()
}

fn record(map: u32, partition: u32, i: u32) -> Vec<u8> {
    format!("{map}:{partition}:{i}:{}", "x".repeat((i % 50) as usize)).into_bytes()
}

/// Writes `count` records to each of `partitions` partitions of map output `map` of
/// shuffle 1.
fn write_map(store: &Arc<ShuffleStore>, map: u32, partitions: u32, count: u32) -> Vec<u64> {
    write_output(store, 1, map, partitions, count)
}

/// Writes `count` records to each of `partitions` partitions of map output `map` of
/// `shuffle`.
fn write_output(
    store: &Arc<ShuffleStore>,
    shuffle: u32,
    map: u32,
    partitions: u32,
    count: u32,
) -> Vec<u64> {
    let mut writer = ShuffleWriter::new(store.clone(), shuffle, map, partitions).unwrap();
    for i in 0..count {
        for partition in 0..partitions {
            writer.write(partition, &record(map, partition, i)).unwrap();
        }
    }
    writer.commit()
}

fn expected(map: u32, partition: u32, count: u32) -> Vec<Vec<u8>> {
    (0..count).map(|i| record(map, partition, i)).collect()
}

#[test]
fn what_is_written_is_read_back_by_partition() {
    let dir = TempDir::new("written");
    let store = Arc::new(ShuffleStore::new(&dir.0, "7", 64 << 20));
    let sizes = write_map(&store, 0, 3, 100);
    for partition in 0..3 {
        let pieces = store.read_block(1, 0, partition).unwrap();
        assert_eq!(records_of(&pieces), expected(0, partition, 100));
        let len: usize = pieces.iter().map(Bytes::len).sum();
        assert_eq!(sizes[partition as usize], len as u64);
    }
    assert_eq!(dir.files(), 0, "nothing spilled");
    assert!(matches!(
        store.read_block(1, 0, 3),
        Err(ShuffleError::BlockNotFound { reduce: 3, .. })
    ));
    assert!(matches!(
        store.read_block(2, 0, 0),
        Err(ShuffleError::BlockNotFound { shuffle: 2, .. })
    ));
}

#[test]
fn keyed_records_go_to_their_keys_partition() {
    let dir = TempDir::new("keyed");
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", 1 << 20));
    let mut writer = ShuffleWriter::new(store.clone(), 4, 0, 5).unwrap();
    let words = ["apple", "pear", "fig", "kiwi", "plum", "lime", "date"];
    for word in words {
        writer.write_keyed(word.as_bytes(), b"1").unwrap();
    }
    assert_eq!(writer.records_written(), 7);
    writer.commit();
    let mut seen = 0;
    for partition in 0..5 {
        for piece in store.read_block(4, 0, partition).unwrap() {
            for pair in KeyedRecords::new(&piece) {
                let (key, value) = pair.unwrap();
                assert_eq!(partition_of(key, 5), partition);
                assert_eq!(value, b"1");
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 7);
    let mut writer = ShuffleWriter::new(store, 4, 1, 5).unwrap();
    assert!(matches!(
        writer.write(5, b"x"),
        Err(ShuffleError::NoSuchPartition {
            partition: 5,
            partitions: 5
        })
    ));
}

#[test]
fn a_writer_over_the_memory_bound_spills_and_loses_nothing() {
    let dir = TempDir::new("spill");
    let limit = 64 << 10;
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", limit));
    let mut writer = ShuffleWriter::new(store.clone(), 1, 0, 4).unwrap();
    let mut peak = 0;
    for i in 0..20_000 {
        writer.write(i % 4, &record(0, i % 4, i)).unwrap();
        peak = peak.max(store.memory().used());
    }
    assert!(
        writer.bytes_written() > 10 * limit,
        "{}",
        writer.bytes_written()
    );
    writer.commit();
    assert!(
        peak <= limit,
        "held {peak} bytes, over the bound of {limit}"
    );
    assert!(dir.files() >= 1, "spilled to a file");
    for partition in 0..4 {
        let got = records_of(&store.read_block(1, 0, partition).unwrap());
        let want: Vec<Vec<u8>> = (0..20_000)
            .filter(|i| i % 4 == partition)
            .map(|i| record(0, partition, i))
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn many_partitions_stay_within_the_memory_bound() {
    let dir = TempDir::new("partitions");
    let limit = 64 << 10;
    // As many as the bound has room to keep track of.
    let partitions = 600;
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", limit));

    // One 1-byte record a partition: each bucket's first growth is the memory's share
    // of one partition, not a fixed size that hundreds of buckets would take past it.
    let mut writer = ShuffleWriter::new(store.clone(), 1, 0, partitions).unwrap();
    for partition in 0..partitions {
        writer.write(partition, b"x").unwrap();
        assert!(
            store.memory().used() <= limit,
            "held {} bytes after partition {partition}, over the bound of {limit}",
            store.memory().used()
        );
    }
    writer.commit();
    for partition in [0, 299, partitions - 1] {
        assert_eq!(
            records_of(&store.read_block(1, 0, partition).unwrap()),
            [b"x".to_vec()]
        );
    }
    store.remove_shuffle(1);
    assert_eq!(store.memory().used(), 0);

    // Records larger than a bucket's share, many rounds of them: the writer spills and
    // gives back what its empty buckets held, overdrawing by one record at most.
    let record = [7u8; 200];
    let overhead = (4 + record.len()) as u64;
    let mut writer = ShuffleWriter::new(store.clone(), 2, 0, partitions).unwrap();
    let mut peak = 0;
    for round in 0..3 {
        for partition in 0..partitions {
            writer.write(partition, &record).unwrap();
            peak = peak.max(store.memory().used());
        }
        assert!(writer.records_written() == u64::from(partitions) * (round + 1));
    }
    writer.commit();
    assert!(
        peak <= limit + overhead,
        "held {peak} bytes, over the bound of {limit} plus one record ({overhead})"
    );
    assert!(dir.files() >= 1, "spilled to a file");
    for partition in [0, 300, partitions - 1] {
        let got = records_of(&store.read_block(2, 0, partition).unwrap());
        assert_eq!(got, vec![record.to_vec(); 3], "partition {partition}");
    }
}

#[test]
fn partitions_whose_bookkeeping_exceeds_the_memory_are_refused() {
    let dir = TempDir::new("too-many");
    let limit = 64 << 10;
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", limit));
    let most = (limit / writer::PARTITION_BOOKKEEPING) as u32;
    assert!(ShuffleWriter::new(store.clone(), 1, 0, most).is_ok());
    for partitions in [most + 1, u32::MAX] {
        let error = ShuffleWriter::new(store.clone(), 1, 0, partitions).unwrap_err();
        assert!(
            matches!(
                error,
                ShuffleError::TooManyPartitions { partitions: p, key: "shuffle.maxMemory", limit: l, .. }
                    if p == partitions && l == limit
            ),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!("{partitions} reduce partitions"))
                && text.contains("shuffle.maxMemory"),
            "{text}"
        );
    }
    assert_eq!(store.memory().used(), 0);
}

#[test]
fn older_outputs_are_spilled_first_to_make_room() {
    let dir = TempDir::new("evict");
    let limit = 256 << 10;
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", limit));
    write_map(&store, 0, 2, 1_000);
    let after_first = store.memory().used();
    assert!(after_first > 0 && dir.files() == 0);
    for map in 1..6 {
        write_map(&store, map, 2, 1_000);
        assert!(store.memory().used() <= limit, "{}", store.memory().used());
    }
    assert!(dir.files() >= 1, "the oldest outputs went to disk");
    // Spilled are the oldest: a run of the first outputs, and only those.
    let in_memory: Vec<bool> = (0..6)
        .map(|map| store.output_memory(1, map).unwrap() > 0)
        .collect();
    let spilled = in_memory.iter().take_while(|&&held| !held).count();
    assert!(
        spilled >= 1 && in_memory[spilled..].iter().all(|&held| held),
        "outputs in memory, oldest first: {in_memory:?}"
    );
    assert!(in_memory[5], "the newest stays in memory");
    for map in 0..6 {
        for partition in 0..2 {
            let got = records_of(&store.read_block(1, map, partition).unwrap());
            assert_eq!(got, expected(map, partition, 1_000), "map {map}");
        }
    }
    assert_eq!(store.outputs(), 6);
}

#[test]
fn ranges_cross_memory_and_file_segments() {
    let dir = TempDir::new("ranges");
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", 16 << 10));
    let sizes = write_map(&store, 0, 1, 3_000);
    let mut whole = BytesMut::new();
    for piece in store.read_block(1, 0, 0).unwrap() {
        whole.extend_from_slice(&piece);
    }
    assert_eq!(whole.len() as u64, sizes[0]);
    let total = sizes[0];
    for (offset, len) in [
        (0, 10),
        (5, 50_000),
        (total - 3, 100),
        (0, total),
        (total, 10),
    ] {
        let (data, size) = store.read_range(1, 0, 0, offset, len).unwrap();
        assert_eq!(size, total);
        let end = (offset + len).min(total) as usize;
        assert_eq!(&data[..], &whole[offset as usize..end], "{offset}+{len}");
    }
    assert!(matches!(
        store.read_range(1, 0, 0, total + 1, 1),
        Err(ShuffleError::OffsetPastEnd { .. })
    ));
}

#[test]
fn removing_a_shuffle_frees_its_memory_and_files_and_dropping_the_store_its_directory() {
    let dir = TempDir::new("remove");
    let store = Arc::new(ShuffleStore::new(&dir.0, "exec/1", 32 << 10));
    write_map(&store, 0, 2, 2_000);
    assert!(dir.files() > 0);
    assert!(store.dir().starts_with(&dir.0));
    store.remove_shuffle(1);
    assert_eq!(store.memory().used(), 0);
    assert_eq!(store.outputs(), 0);
    assert_eq!(dir.files(), 0, "spill files removed with their outputs");
    write_output(&store, 2, 0, 2, 2_000);
    assert!(dir.files() > 0);
    let spill_dir = store.dir().to_owned();
    drop(store);
    assert!(!spill_dir.exists(), "the store's directory goes with it");
}

#[test]
fn a_writer_dropped_without_commit_gives_its_memory_back() {
    let dir = TempDir::new("abort");
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", 1 << 20));
    let mut writer = ShuffleWriter::new(store.clone(), 1, 0, 2).unwrap();
    for i in 0..500 {
        writer.write(i % 2, b"some bytes of a record").unwrap();
    }
    assert!(store.memory().used() > 0);
    drop(writer);
    assert_eq!(store.memory().used(), 0);
    assert_eq!(store.outputs(), 0);
}

#[test]
fn a_second_attempt_replaces_the_first() {
    let dir = TempDir::new("attempts");
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", 1 << 20));
    write_map(&store, 0, 1, 10);
    let first = store.memory().used();
    let mut second = ShuffleWriter::new(store.clone(), 1, 0, 1).unwrap();
    for i in 0..5 {
        second
            .write(0, format!("second attempt {i}").as_bytes())
            .unwrap();
    }
    let second_holds = store.memory().used() - first;
    second.commit();
    assert_eq!(
        store.memory().used(),
        second_holds,
        "the first attempt's memory is freed"
    );
    let want: Vec<Vec<u8>> = (0..5)
        .map(|i| format!("second attempt {i}").into_bytes())
        .collect();
    assert_eq!(records_of(&store.read_block(1, 0, 0).unwrap()), want);
    assert_eq!(store.outputs(), 1);
}

#[test]
fn an_output_committed_after_its_shuffle_was_removed_is_dropped() {
    let dir = TempDir::new("zombie");
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", 32 << 10));
    // A straggling attempt, still writing (and spilling) when the shuffle goes.
    let mut zombie = ShuffleWriter::new(store.clone(), 1, 0, 2).unwrap();
    for i in 0..2_000 {
        zombie.write(i % 2, &record(0, i % 2, i)).unwrap();
    }
    assert!(dir.files() > 0, "the straggler spilled");
    write_map(&store, 1, 2, 10);
    store.remove_shuffle(1);
    assert_eq!(store.outputs(), 0);
    zombie.commit();
    assert_eq!(store.outputs(), 0, "the late output is not kept");
    assert_eq!(store.memory().used(), 0, "nor its memory");
    assert_eq!(dir.files(), 0, "nor its spill file");
    assert!(matches!(
        store.read_block(1, 0, 0),
        Err(ShuffleError::BlockNotFound { .. })
    ));
    // A late attempt of a map output committed before the removal is dropped alike.
    write_map(&store, 1, 2, 10);
    assert_eq!(store.outputs(), 0);
    // Other shuffles are kept.
    write_output(&store, 2, 0, 2, 10);
    assert_eq!(store.outputs(), 1);
}

#[test]
fn a_failed_eviction_keeps_the_output_for_the_next_one() {
    let dir = TempDir::new("evict-fails");
    let store = Arc::new(ShuffleStore::new(&dir.0, "1", 1 << 20));
    write_map(&store, 0, 2, 100);
    let held = store.memory().used();
    assert!(held > 0);
    assert_eq!(store.output_memory(1, 0), Some(held));
    // A file where the spill directory goes: no spill file can be made (permissions
    // would not stop a test running as root).
    std::fs::write(store.dir(), b"in the way").unwrap();
    assert_eq!(store.evict(u64::MAX), 0);
    assert_eq!(store.memory().used(), held);
    assert_eq!(store.output_memory(1, 0), Some(held));
    std::fs::remove_file(store.dir()).unwrap();
    assert_eq!(
        store.evict(u64::MAX),
        held,
        "the output is evicted after all"
    );
    assert_eq!(store.memory().used(), 0);
    assert_eq!(store.output_memory(1, 0), Some(0));
    assert!(dir.files() >= 1);
    for partition in 0..2 {
        let got = records_of(&store.read_block(1, 0, partition).unwrap());
        assert_eq!(got, expected(0, partition, 100));
    }
}

mod served {
    //! The block server and the fetcher over real sockets on 127.0.0.1.

    use std::time::Duration;

    use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv};
    use flint_wire::{BlockManagerId, FetchFailure, MapStatus, BLOCK_MANAGER_ENDPOINT};

    use super::*;

    struct Side {
        env: RpcEnv,
        store: Arc<ShuffleStore>,
        id: &'static str,
    }

    impl Side {
        fn new(dir: &TempDir, id: &'static str, max_chunk: usize) -> Side {
            let conf = Conf::from_pairs(["rpc.askTimeout=5s"]).unwrap();
            let env = RpcEnv::new(&conf).unwrap();
            let store = Arc::new(ShuffleStore::new(&dir.0, id, 64 << 20));
            env.handle()
                .register(
                    BLOCK_MANAGER_ENDPOINT,
                    BlockServer::new(store.clone(), max_chunk, Duration::from_secs(5), 48 << 20),
                )
                .unwrap();
            Side { env, store, id }
        }

        fn location(&self) -> BlockManagerId {
            BlockManagerId {
                executor_id: self.id.into(),
                host: self.env.address().ip().to_string(),
                port: self.env.address().port(),
            }
        }

        fn status(&self, sizes: Vec<u64>) -> Option<MapStatus> {
            Some(MapStatus {
                location: self.location(),
                sizes,
            })
        }

        fn fetcher(&self, max_in_flight: u64, max_chunk: u32) -> ShuffleFetcher {
            ShuffleFetcher::new(
                self.env.handle(),
                self.store.clone(),
                self.id,
                max_in_flight,
                max_chunk,
                Duration::from_secs(5),
                Duration::from_micros(50),
            )
        }
    }

    fn never() -> bool {
        false
    }

    fn failed(result: Result<Vec<Bytes>, FetchError>) -> FetchFailure {
        match result {
            Err(FetchError::Failed(failure)) => *failure,
            other => panic!("expected a fetch failure, got {other:?}"),
        }
    }

    #[test]
    fn local_and_remote_blocks_arrive_whole_whatever_the_chunks() {
        let dir = TempDir::new("served");
        let (a, b) = (Side::new(&dir, "a", 1 << 20), Side::new(&dir, "b", 1 << 20));
        let sizes_a = write_map(&a.store, 0, 2, 300);
        let sizes_b = write_map(&b.store, 1, 2, 300);
        let statuses = [a.status(sizes_a), b.status(sizes_b)];
        for (max_in_flight, max_chunk) in [(48 << 20, 1 << 20), (1_000, 97), (1, 5)] {
            let fetcher = b.fetcher(max_in_flight, max_chunk);
            for reduce in 0..2 {
                let pieces = fetcher.fetch(1, reduce, &statuses, &never).unwrap();
                let mut got = records_of(&pieces);
                got.sort();
                let mut want = [expected(0, reduce, 300), expected(1, reduce, 300)].concat();
                want.sort();
                assert_eq!(
                    got, want,
                    "in flight {max_in_flight}, chunks of {max_chunk}"
                );
            }
        }
        // A block server sends chunks of at most its own bound.
        let small = Side::new(&dir, "c", 64);
        let sizes = write_map(&small.store, 0, 1, 100);
        let pieces = b
            .fetcher(48 << 20, 1 << 20)
            .fetch(1, 0, &[small.status(sizes)], &never)
            .unwrap();
        assert_eq!(records_of(&pieces), expected(0, 0, 100));
    }

    #[test]
    fn what_cannot_be_read_is_a_fetch_failure_naming_the_block() {
        let dir = TempDir::new("failures");
        let (a, b) = (Side::new(&dir, "a", 1 << 20), Side::new(&dir, "b", 1 << 20));
        let sizes = write_map(&a.store, 0, 2, 10);
        let fetcher = b.fetcher(48 << 20, 1 << 20);

        // No location known for map 1.
        let failure = failed(fetcher.fetch(1, 0, &[a.status(sizes.clone()), None], &never));
        assert_eq!((failure.address, failure.map_index), (None, Some(1)));
        assert_eq!(
            failure.message,
            "Missing an output location for shuffle 1 partition 0"
        );

        // A block the server does not hold.
        let failure = failed(fetcher.fetch(
            1,
            0,
            &[a.status(sizes.clone()), a.status(sizes.clone())],
            &never,
        ));
        assert_eq!(failure.address, Some(a.location()));
        assert_eq!(
            (failure.shuffle_id, failure.map_index, failure.reduce_id),
            (1, Some(1), 0)
        );
        assert!(failure.message.contains("not found"), "{}", failure.message);

        // A server that is gone.
        let gone = a.location();
        a.env.stop();
        let failure = failed(fetcher.fetch(1, 1, &[a.status(sizes.clone())], &never));
        assert_eq!(failure.address, Some(gone));
        assert_eq!(failure.map_index, Some(0));

        // A local block that went missing.
        let failure = failed(fetcher.fetch(1, 0, &[b.status(vec![10, 10])], &never));
        assert_eq!(failure.address, Some(b.location()));
    }

    #[test]
    fn map_tasks_of_more_partitions_than_a_status_can_carry_are_refused() {
        let dir = TempDir::new("status-size");
        let side = Side::new(&dir, "a-rather-long-executor-id", 1 << 20);
        let max_message = 1 << 20;
        let tracker = side
            .env
            .handle()
            .endpoint_ref(side.env.address(), flint_wire::MAP_OUTPUT_TRACKER_ENDPOINT);
        let service = ShuffleService::new(
            side.store.clone(),
            side.fetcher(48 << 20, 1 << 20),
            tracker,
            side.location(),
            Duration::from_secs(5),
            max_message,
        );
        // The estimate is never below what a status takes archived.
        for partitions in [0, 1, 1_000, 100_000] {
            let status = side.status(vec![u64::MAX; partitions as usize]).unwrap();
            let len = status.encode().len() as u64;
            assert!(
                len <= service.map_status_len(partitions),
                "{partitions} partitions: {len} bytes"
            );
            drop(service.writer(1, 0, partitions).unwrap());
        }
        for partitions in [max_message as u32 / 8, u32::MAX] {
            let error = service.writer(1, 0, partitions).unwrap_err();
            assert!(
                matches!(
                    error,
                    ShuffleError::TooManyPartitions {
                        key: "rpc.message.maxSize",
                        ..
                    }
                ),
                "{error:?}"
            );
            let text = error.to_string();
            assert!(
                text.contains(&format!("{partitions} reduce partitions"))
                    && text.contains("the map status")
                    && text.contains(&format!("({max_message} bytes)")),
                "{text}"
            );
        }
        assert_eq!(side.store.memory().used(), 0);
    }

    /// How a fake block server lies.
    #[derive(Debug, Clone, Copy)]
    enum Lie {
        WrongOffset,
        Oversized,
        Empty,
        BogusRecordLength,
    }

    /// Answers every FetchShuffleBlock with a chunk of a block of [`LIAR_BLOCK`] bytes,
    /// wrong in one way.
    struct Liar(Lie);

    const LIAR_BLOCK: u64 = 100;

    impl Endpoint for Liar {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, incoming: Incoming<'_>) {
            let flint_wire::ArchivedMessage::FetchShuffleBlock {
                offset, max_len, ..
            } = incoming.message()
            else {
                return;
            };
            let (offset, asked) = (offset.to_native(), max_len.to_native() as usize);
            let mut data = vec![b'r'; asked];
            let offset = match self.0 {
                Lie::WrongOffset => offset + 5,
                Lie::Oversized => {
                    data.extend_from_slice(&[0; 50]);
                    offset
                }
                Lie::Empty => {
                    data.clear();
                    offset
                }
                Lie::BogusRecordLength => {
                    data[..4].copy_from_slice(&u32::MAX.to_le_bytes());
                    offset
                }
            };
            let _ = incoming.reply(&flint_wire::Message::ShuffleBlock {
                offset,
                total_size: LIAR_BLOCK,
                data: Bytes::from(data),
            });
        }
    }

    #[test]
    fn a_block_server_that_lies_is_a_fetch_failure_saying_how() {
        let dir = TempDir::new("liar");
        let b = Side::new(&dir, "b", 1 << 20);
        let fetcher = b.fetcher(48 << 20, 1 << 20);
        for (lie, says) in [
            (
                Lie::WrongOffset,
                "the block server sent a chunk at offset 5 where 0 was asked",
            ),
            (
                Lie::Oversized,
                "the block server sent a chunk of 150 bytes past what was asked",
            ),
            (
                Lie::Empty,
                "the block server sent an empty chunk before the end of the block",
            ),
            (
                Lie::BogusRecordLength,
                "malformed records: a record at byte 0 runs past the block's end (100 bytes)",
            ),
        ] {
            let liar = RpcEnv::new(&Conf::new()).unwrap();
            liar.handle()
                .register(BLOCK_MANAGER_ENDPOINT, Liar(lie))
                .unwrap();
            let location = BlockManagerId {
                executor_id: "liar".into(),
                host: "127.0.0.1".into(),
                port: liar.address().port(),
            };
            let status = Some(MapStatus {
                location: location.clone(),
                sizes: vec![LIAR_BLOCK],
            });
            let failure = failed(fetcher.fetch(1, 0, &[status], &never));
            assert_eq!(failure.address, Some(location), "{lie:?}");
            assert_eq!(
                (failure.shuffle_id, failure.map_index, failure.reduce_id),
                (1, Some(0), 0),
                "{lie:?}"
            );
            assert_eq!(failure.message, says, "{lie:?}");
        }
    }

    /// Takes asks and never answers them.
    struct Silent;

    impl Endpoint for Silent {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {}
    }

    #[test]
    fn a_killed_task_stops_waiting() {
        let dir = TempDir::new("killed");
        let b = Side::new(&dir, "b", 1 << 20);
        let silent = RpcEnv::new(&Conf::new()).unwrap();
        silent
            .handle()
            .register(BLOCK_MANAGER_ENDPOINT, Silent)
            .unwrap();
        let status = Some(MapStatus {
            location: BlockManagerId {
                executor_id: "silent".into(),
                host: "127.0.0.1".into(),
                port: silent.address().port(),
            },
            sizes: vec![100],
        });
        let started = std::time::Instant::now();
        let result = b.fetcher(48 << 20, 1 << 20).fetch(1, 0, &[status], &|| {
            started.elapsed() > Duration::from_millis(200)
        });
        assert!(matches!(result, Err(FetchError::Interrupted)), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    /// The driver's map output tracker, answering with what it is given and counting
    /// the asks.
    struct Tracker {
        statuses: Vec<Option<MapStatus>>,
        asks: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Endpoint for Tracker {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
            let flint_wire::ArchivedMessage::GetMapOutputStatuses { shuffle_id } =
                message.message()
            else {
                return;
            };
            self.asks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // The driver's epoch is at least that of every task it has submitted.
            let _ = message.reply(&flint_wire::Message::MapOutputStatuses {
                shuffle_id: shuffle_id.to_native(),
                epoch: 10,
                statuses: self.statuses.clone(),
            });
        }
    }

    #[test]
    fn the_service_asks_the_driver_once_an_epoch_and_reads_through_the_fetcher() {
        let dir = TempDir::new("service");
        let (a, b) = (Side::new(&dir, "a", 1 << 20), Side::new(&dir, "b", 1 << 20));
        let sizes_a = write_map(&a.store, 0, 2, 50);
        let sizes_b = write_map(&b.store, 1, 2, 50);
        let asks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let driver = RpcEnv::new(&Conf::new()).unwrap();
        driver
            .handle()
            .register(
                flint_wire::MAP_OUTPUT_TRACKER_ENDPOINT,
                Tracker {
                    statuses: vec![a.status(sizes_a), b.status(sizes_b)],
                    asks: asks.clone(),
                },
            )
            .unwrap();
        let tracker = b
            .env
            .handle()
            .endpoint_ref(driver.address(), flint_wire::MAP_OUTPUT_TRACKER_ENDPOINT);
        let service = ShuffleService::new(
            b.store.clone(),
            b.fetcher(48 << 20, 1 << 20),
            tracker,
            b.location(),
            Duration::from_secs(5),
            1 << 20,
        );
        let count = || asks.load(std::sync::atomic::Ordering::SeqCst);
        service.start_task(0, &[]);
        let pieces = service.read(1, 1, &never).unwrap();
        assert_eq!(records_of(&pieces).len(), 100);
        service.read(1, 0, &never).unwrap();
        assert_eq!(count(), 1, "the statuses are cached");
        service.start_task(0, &[]);
        service.read(1, 0, &never).unwrap();
        assert_eq!(count(), 1, "the same epoch keeps them");
        service.start_task(2, &[]);
        service.read(1, 0, &never).unwrap();
        assert_eq!(count(), 2, "a newer epoch asks again");

        // A fetch failure forgets the statuses, which may be stale.
        a.env.stop();
        assert!(matches!(
            service.read(1, 0, &never),
            Err(ShuffleReadError::FetchFailed(_))
        ));
        let _ = service.read(1, 0, &never);
        assert_eq!(count(), 3);

        // Statuses a task carries are used as the driver's answer would be.
        let sizes = write_map(&b.store, 0, 2, 50);
        let known = flint_wire::KnownStatuses {
            shuffles: vec![flint_wire::ShuffleStatuses {
                shuffle_id: 1,
                statuses: vec![b.status(sizes.clone()), b.status(sizes)],
            }],
        };
        let asked = count();
        service.start_task(4, &known.encode());
        let pieces = service.read(1, 0, &never).unwrap();
        assert_eq!(records_of(&pieces).len(), 100);
        assert_eq!(count(), asked, "no ask: the task carried them");
        // Statuses that do not decode are not used: the task asks.
        service.start_task(5, b"not statuses");

        // A driver that cannot be asked fails the task, as no fetch failure.
        driver.stop();
        assert!(matches!(
            service.read(1, 0, &never),
            Err(ShuffleReadError::Failed(_))
        ));
    }
}
