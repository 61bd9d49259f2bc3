//! The executor's broadcast cache: one fetch for concurrent readers, views not copies,
//! unpersist, failures not kept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;

use bytes::Bytes;
use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv};
use flint_wire::{ArchivedMessage, BlockManagerId, BroadcastInfo, Message, PieceHolder};

use super::*;

fn value(len: usize) -> Bytes {
    Bytes::from(crate::registry::pattern(len))
}

#[test]
fn concurrent_readers_of_one_broadcast_trigger_one_fetch_and_share_its_buffer() {
    const READERS: usize = 8;
    let cache = Arc::new(BroadcastCache::new());
    let fetches = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Barrier::new(READERS));
    let (release, released) = mpsc::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(released));
    let source = value(1 << 20);
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (cache, fetches, started) = (cache.clone(), fetches.clone(), started.clone());
            let (released, source) = (released.clone(), source.clone());
            thread::spawn(move || {
                started.wait();
                cache.get_or_fetch(
                    5,
                    |_| {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        // Held until the test lets go: the other readers come meanwhile.
                        // A second fetch gets no release: it goes on after a while, and
                        // the count below fails the test rather than hang it.
                        let _ = released
                            .lock()
                            .unwrap()
                            .recv_timeout(std::time::Duration::from_secs(5));
                        Ok((source, 4096))
                    },
                    &|| false,
                )
            })
        })
        .collect();
    // Every reader is past the barrier before the one fetch may end.
    thread::sleep(std::time::Duration::from_millis(50));
    release.send(()).unwrap();
    let values: Vec<Bytes> = readers
        .into_iter()
        .map(|r| r.join().unwrap().unwrap())
        .collect();
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "one fetch for all readers"
    );
    let cached = source.as_ptr_range();
    for v in &values {
        assert_eq!(v.len(), source.len());
        assert_eq!(v.as_ptr(), source.as_ptr(), "a view of the one buffer");
        assert!(cached.contains(&v.as_ptr()));
    }
    // A later read finds it, the same buffer again; its pieces are views of it too.
    let later = cache
        .get_or_fetch(5, |_| unreachable!(), &|| false)
        .unwrap();
    assert_eq!(later.as_ptr(), values[0].as_ptr());
    let piece = cache.piece(5, 3).unwrap();
    assert_eq!(piece.as_ptr(), source[3 * 4096..].as_ptr());
    assert_eq!(piece.len(), 4096);
    assert!(cache.piece(5, 256).is_none(), "past the end");
    assert!(cache.piece(5, u32::MAX).is_none());
}

#[test]
fn a_failed_fetch_is_not_kept_and_the_next_reader_fetches_again() {
    let cache = BroadcastCache::new();
    let error = BroadcastError::Failed {
        broadcast_id: 2,
        why: "no such broadcast".into(),
    };
    let got = cache.get_or_fetch(2, |_| Err(error.clone()), &|| false);
    assert_eq!(got, Err(error));
    assert!(cache.is_empty());
    let panicked = cache.get_or_fetch(2, |_| panic!("boom"), &|| false);
    assert!(matches!(panicked, Err(BroadcastError::Failed { .. })));
    let got = cache.get_or_fetch(2, |_| Ok((value(10), 4)), &|| false);
    assert_eq!(got.unwrap().len(), 10);
    assert_eq!(cache.len(), 1);
}

#[test]
fn pieces_are_served_while_the_fetch_goes_on_and_an_unpersist_meanwhile_wins() {
    let cache = BroadcastCache::new();
    let whole = value(10);
    let got = cache.get_or_fetch(
        4,
        |sink| {
            assert_eq!(sink.start(10, 4, 0), Vec::<u32>::new());
            assert!(sink.add(0, &whole[..4]), "kept, to be reported");
            assert!(!sink.add(1, &whole[..3]), "not a piece's length");
            // Served before the value is whole.
            assert_eq!(&cache.piece(4, 0).unwrap()[..], &whole[..4]);
            assert!(cache.piece(4, 1).is_none());
            assert_eq!(sink.finish(), None, "pieces are missing");
            // Unpersisted meanwhile: the fetching task gets its value, nobody keeps it,
            // and nothing more is reported.
            assert!(cache.remove(4));
            assert!(!sink.add(1, &whole[4..8]));
            assert!(!sink.add(2, &whole[8..]));
            Ok((sink.finish().unwrap(), 4))
        },
        &|| false,
    );
    assert_eq!(got.unwrap(), whole);
    assert!(cache.piece(4, 0).is_none());
    assert!(cache.is_empty());
}

#[test]
fn a_reader_waiting_for_another_fetch_sees_its_kill() {
    let cache = Arc::new(BroadcastCache::new());
    let (entered, in_fetch) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let fetcher = {
        let cache = cache.clone();
        thread::spawn(move || {
            cache.get_or_fetch(
                1,
                |_| {
                    entered.send(()).unwrap();
                    released.recv().unwrap();
                    Ok((value(3), 3))
                },
                &|| false,
            )
        })
    };
    in_fetch.recv().unwrap();
    let waited = cache.get_or_fetch(1, |_| unreachable!("one fetch"), &|| true);
    assert_eq!(waited, Err(BroadcastError::Interrupted));
    release.send(()).unwrap();
    assert_eq!(fetcher.join().unwrap().unwrap().len(), 3);
}

#[test]
fn the_block_server_answer_names_a_piece_it_does_not_hold() {
    let cache = BroadcastCache::new();
    match serve_piece(&cache, 3, 1) {
        crate::reply_retry::Answer::Fail(text) => {
            assert_eq!(text, "Block broadcast_3_piece1 not found")
        }
        crate::reply_retry::Answer::Reply(m) => panic!("served {m:?}"),
    }
    cache.insert(3, value(10), 4);
    match serve_piece(&cache, 3, 2) {
        crate::reply_retry::Answer::Reply(flint_wire::Message::BroadcastPiece {
            piece,
            data,
            ..
        }) => assert_eq!((piece, data.len()), (2, 2)),
        _ => panic!("piece 2 of a held broadcast was not served"),
    }
    assert_eq!(cache.served(), (2, 1));
}

#[test]
fn broadcast_read_windows_stay_inside_the_value() {
    for len in [0usize, 1, 4095, 4096, 4097, 64 << 20] {
        for partition in [0, 1, 7, 999, u32::MAX] {
            let w = read_window(len, partition);
            assert!(
                w.end <= len && w.len() == len.min(4096),
                "{len} {partition}"
            );
        }
    }
    let ctx = crate::TaskContext::new(1, 0);
    let error = broadcast_read(&ctx, &Bytes::from_static(b"x")).unwrap_err();
    assert!(
        error.to_string().contains("expects a broadcast id"),
        "{error}"
    );
    let error = broadcast_read(&ctx, &Bytes::from_static(b"3")).unwrap_err();
    assert!(error.to_string().contains("has no broadcasts"), "{error}");
}

#[test]
fn a_killed_first_reader_leaves_its_pieces_served_and_a_waiter_goes_on_from_them() {
    let cache = Arc::new(BroadcastCache::new());
    let whole = value(10);
    let (entered, in_fetch) = mpsc::channel();
    let (kill, killed) = mpsc::channel::<()>();
    let first = {
        let (cache, whole) = (cache.clone(), whole.clone());
        thread::spawn(move || {
            cache.get_or_fetch(
                6,
                |sink| {
                    sink.start(10, 4, 0);
                    assert!(sink.add(0, &whole[..4]));
                    entered.send(()).unwrap();
                    // Its task is killed with one piece in.
                    killed
                        .recv_timeout(std::time::Duration::from_secs(10))
                        .unwrap();
                    Err(BroadcastError::Interrupted)
                },
                &|| false,
            )
        })
    };
    in_fetch
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    let waiter = {
        let (cache, whole) = (cache.clone(), whole.clone());
        thread::spawn(move || {
            cache.get_or_fetch(
                6,
                |sink| {
                    // The piece the killed reader had stays: only the others are fetched.
                    assert_eq!(sink.start(10, 4, 0), [0]);
                    assert!(sink.add(1, &whole[4..8]));
                    assert!(sink.add(2, &whole[8..]));
                    Ok((sink.finish().unwrap(), 4))
                },
                &|| false,
            )
        })
    };
    kill.send(()).unwrap();
    assert_eq!(first.join().unwrap(), Err(BroadcastError::Interrupted));
    assert_eq!(waiter.join().unwrap().unwrap(), whole);
    assert_eq!(&cache.piece(6, 2).unwrap()[..], &whole[8..]);
    assert_eq!(cache.len(), 1);
    // Given up with nobody waiting, the pieces stay served until an unpersist.
    let _ = cache.get_or_fetch(
        8,
        |sink| {
            sink.start(10, 4, 0);
            sink.add(1, &whole[4..8]);
            Err(BroadcastError::Interrupted)
        },
        &|| false,
    );
    assert_eq!(&cache.piece(8, 1).unwrap()[..], &whole[4..8]);
    assert!(cache.remove(8));
    assert!(cache.piece(8, 1).is_none());
}

/// A driver's broadcast manager for one value of 4 pieces of 10 bytes, generation 7,
/// that names `holders`, takes reports, and runs `on_piece` (with the number of piece
/// asks so far) before it answers a piece ask; it answers only when that says so.
struct FakeDriver {
    value: Bytes,
    holders: Vec<PieceHolder>,
    reports: mpsc::Sender<(u64, u32)>,
    asks: Arc<AtomicUsize>,
    on_piece: Box<dyn FnMut(usize) -> bool + Send>,
}

const FAKE_ID: u64 = 11;
const FAKE_GENERATION: u64 = 7;

impl Endpoint for FakeDriver {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, incoming: Incoming<'_>) {
        match incoming.message() {
            ArchivedMessage::GetBroadcastInfo { .. } => {
                let _ = incoming.reply(&Message::BroadcastInfo(BroadcastInfo {
                    broadcast_id: FAKE_ID,
                    generation: FAKE_GENERATION,
                    total_size: self.value.len() as u64,
                    piece_size: 10,
                    checksums: self.value.chunks(10).map(crc32fast::hash).collect(),
                    holders: self.holders.clone(),
                }));
            }
            ArchivedMessage::FetchBroadcastPiece { piece, .. } => {
                let asks = self.asks.fetch_add(1, Ordering::SeqCst) + 1;
                if (self.on_piece)(asks) {
                    let start = piece.to_native() as usize * 10;
                    let _ = incoming.reply(&Message::BroadcastPiece {
                        broadcast_id: FAKE_ID,
                        piece: piece.to_native(),
                        data: self.value.slice(start..start + 10),
                    });
                }
            }
            ArchivedMessage::BroadcastPieceStored {
                generation, piece, ..
            } => {
                let _ = self
                    .reports
                    .send((generation.to_native(), piece.to_native()));
            }
            _ => {}
        }
    }
}

struct Fetch {
    driver: RpcEnv,
    executor: RpcEnv,
    service: BroadcastService,
    reports: mpsc::Receiver<(u64, u32)>,
    asks: Arc<AtomicUsize>,
}

impl Fetch {
    /// A fetcher of one piece in flight, `max_attempts` asks of the driver per piece,
    /// against a [`FakeDriver`].
    fn new(
        cache: Arc<BroadcastCache>,
        holders: Vec<PieceHolder>,
        max_attempts: u32,
        on_piece: Box<dyn FnMut(usize) -> bool + Send>,
    ) -> Fetch {
        let (sender, reports) = mpsc::channel();
        let asks = Arc::new(AtomicUsize::new(0));
        let driver = RpcEnv::new(&Conf::new()).unwrap();
        driver
            .handle()
            .register(
                flint_wire::BROADCAST_ENDPOINT,
                FakeDriver {
                    value: value(40),
                    holders,
                    reports: sender,
                    asks: asks.clone(),
                    on_piece,
                },
            )
            .unwrap();
        let executor = RpcEnv::client(&Conf::new()).unwrap();
        let manager = executor
            .handle()
            .endpoint_ref(driver.address(), flint_wire::BROADCAST_ENDPOINT);
        let fetcher = BroadcastFetcher::new(
            executor.handle(),
            manager.clone(),
            manager,
            BlockManagerId {
                executor_id: "me".into(),
                host: "127.0.0.1".into(),
                port: 1,
            },
            FetchLimits {
                max_size: 1 << 20,
                max_in_flight: 10,
                ask_timeout: std::time::Duration::from_secs(10),
                max_attempts,
                retry_wait: std::time::Duration::from_millis(10),
            },
        );
        Fetch {
            driver,
            executor,
            service: BroadcastService::new(cache, fetcher),
            reports,
            asks,
        }
    }

    /// The reports received within a second of the last.
    fn reports(&self) -> Vec<(u64, u32)> {
        let mut got: Vec<(u64, u32)> = std::iter::from_fn(|| {
            self.reports
                .recv_timeout(std::time::Duration::from_secs(1))
                .ok()
        })
        .take(100)
        .collect();
        got.sort_unstable();
        got
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        self.executor.stop();
        self.driver.stop();
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn the_fetcher_asks_the_driver_after_any_number_of_stale_holders_and_reports_with_the_generation() {
    // Four holders the driver still names, all gone: each piece costs one peer ask, and
    // the driver is asked even though it may be asked once only.
    let holders = (0..4)
        .map(|i| PieceHolder {
            location: BlockManagerId {
                executor_id: format!("gone-{i}").into(),
                host: "127.0.0.1".into(),
                port: closed_port(),
            },
            pieces: vec![0, 1, 2, 3],
        })
        .collect();
    let cache = Arc::new(BroadcastCache::new());
    let fetch = Fetch::new(cache.clone(), holders, 1, Box::new(|_| true));
    let got = fetch.service.get(FAKE_ID, &|| false).unwrap();
    assert_eq!(got, value(40));
    assert_eq!(
        fetch.asks.load(Ordering::SeqCst),
        4,
        "each piece once of the driver"
    );
    assert_eq!(
        fetch.reports(),
        (0..4).map(|p| (FAKE_GENERATION, p)).collect::<Vec<_>>()
    );
    assert_eq!(&cache.piece(FAKE_ID, 3).unwrap()[..], &value(40)[30..]);
}

#[test]
fn the_fetcher_reports_no_piece_once_unpersisted_and_a_kill_leaves_its_pieces_to_the_next() {
    // Unpersisted while the third piece is on its way: the fetching task gets the value,
    // the driver hears of the first two pieces only.
    let cache = Arc::new(BroadcastCache::new());
    let on_piece = {
        let cache = cache.clone();
        Box::new(move |asks: usize| {
            if asks == 3 {
                cache.remove(FAKE_ID);
            }
            true
        })
    };
    let fetch = Fetch::new(cache.clone(), Vec::new(), 3, on_piece);
    assert_eq!(fetch.service.get(FAKE_ID, &|| false).unwrap(), value(40));
    assert_eq!(
        fetch.reports().len(),
        2,
        "nothing reported after the unpersist"
    );
    assert!(cache.is_empty() && cache.piece(FAKE_ID, 0).is_none());
    drop(fetch);

    // Killed while its third piece is asked: the two it has stay served, and the next
    // reader asks the driver for the other two only.
    let cache = Arc::new(BroadcastCache::new());
    let kill = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on_piece = {
        let kill = kill.clone();
        Box::new(move |asks: usize| {
            if asks == 3 {
                kill.store(true, Ordering::SeqCst);
                return false;
            }
            true
        })
    };
    let fetch = Fetch::new(cache.clone(), Vec::new(), 3, on_piece);
    let killed = fetch.service.get(FAKE_ID, &|| kill.load(Ordering::SeqCst));
    assert_eq!(killed, Err(BroadcastError::Interrupted));
    let reported = fetch.reports();
    assert_eq!(reported.len(), 2);
    for &(_, piece) in &reported {
        assert!(
            cache.piece(FAKE_ID, piece).is_some(),
            "a reported piece is served"
        );
    }
    assert_eq!(fetch.service.get(FAKE_ID, &|| false).unwrap(), value(40));
    assert_eq!(
        fetch.asks.load(Ordering::SeqCst),
        5,
        "two pieces, the one the kill cut short, then the two missing"
    );
}

#[test]
fn an_unpersist_drops_only_what_was_fetched_before_it() {
    let cache = BroadcastCache::new();
    let whole = value(10);
    let got = cache.get_or_fetch(
        9,
        |sink| {
            // Described after the driver's second unpersist.
            sink.start(10, 4, 2);
            assert!(sink.add(0, &whole[..4]));
            // The second unpersist's message comes late: this fetch is after it, the
            // driver takes its reports, and it stays.
            assert!(!cache.unpersist(9, 2));
            assert!(cache.piece(9, 0).is_some());
            assert!(sink.add(1, &whole[4..8]));
            assert!(sink.add(2, &whole[8..]));
            Ok((sink.finish().unwrap(), 4))
        },
        &|| false,
    );
    assert_eq!(got.unwrap(), whole);
    assert!(!cache.unpersist(9, 1) && !cache.unpersist(9, 2));
    assert_eq!(cache.len(), 1);
    // A third unpersist: gone.
    assert!(cache.unpersist(9, 3));
    assert!(cache.is_empty() && cache.piece(9, 0).is_none());
    assert!(!cache.unpersist(9, 3), "nothing left");
    // A fetch not yet described is dropped: its pieces are not kept nor reported.
    let got = cache.get_or_fetch(
        9,
        |sink| {
            assert!(cache.unpersist(9, 3));
            sink.start(10, 4, 3);
            assert!(!sink.add(0, &whole[..4]));
            Ok((whole.clone(), 4))
        },
        &|| false,
    );
    assert_eq!(got.unwrap(), whole);
    assert!(cache.is_empty());
}
