//! The executor's broadcast cache: one fetch for concurrent readers, views not copies,
//! unpersist, failures not kept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;

use bytes::Bytes;

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
                        released.lock().unwrap().recv().unwrap();
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
            sink.add(0, whole.slice(..4));
            // Served before the value is whole.
            assert_eq!(&cache.piece(4, 0).unwrap()[..], &whole[..4]);
            assert!(cache.piece(4, 1).is_none());
            // Unpersisted meanwhile: the fetching task gets its value, nobody keeps it.
            assert!(cache.remove(4));
            sink.add(1, whole.slice(4..8));
            Ok((whole.clone(), 4))
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
