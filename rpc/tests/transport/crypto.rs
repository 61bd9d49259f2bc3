//! Encryption (`network.crypto.enabled=true`): sealed frames both ways, through a path
//! (a proxy on 127.0.0.1) that watches the bytes or alters, replays or reorders the
//! client's sealed frames.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::RpcError;
use flint_wire::{ArchivedMessage, FrameHeader, Message, HEADER_LEN};

use crate::common::*;

const SEALED: [&str; 4] = [
    "authenticate=true",
    "authenticate.secret=correct horse",
    "network.crypto.enabled=true",
    "rpc.askTimeout=10s",
];

const AUTHENTICATED: [&str; 3] = [
    "authenticate=true",
    "authenticate.secret=correct horse",
    "rpc.askTimeout=10s",
];

/// What the path does to the client's sealed frames, numbered from 0 as they are sealed.
#[derive(Debug, Clone, Copy)]
enum Tamper {
    /// Forwards every byte as it is.
    Nothing,
    /// Flips the lowest bit of byte `at` of sealed frame `frame`.
    Alter { frame: usize, at: usize },
    /// Sends sealed frame `of` once more, right before sealed frame `before`.
    Replay { of: usize, before: usize },
    /// Holds sealed frame `frame` back and sends it after the one behind it.
    Swap { frame: usize },
}

/// A proxy between one client and a server: everything the client sends goes through
/// [`Tamper`] and is kept in `seen`; what the server sends goes back as it is.
struct Path {
    address: SocketAddr,
    seen: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl Path {
    fn to(server: SocketAddr, tamper: Tamper) -> Path {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let thread = std::thread::spawn(move || {
            // One client, which the test makes at once; bounded all the same.
            listener.set_nonblocking(true).unwrap();
            let started = Instant::now();
            let client = loop {
                match listener.accept() {
                    Ok((client, _)) => break client,
                    Err(_) if started.elapsed() < Duration::from_secs(10) => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(e) => panic!("no client came to the path: {e}"),
                }
            };
            client.set_nonblocking(false).unwrap();
            let server = TcpStream::connect(server).unwrap();
            for socket in [&client, &server] {
                socket.set_nodelay(true).unwrap();
                socket
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
            }
            let (mut from_server, mut to_client) =
                (server.try_clone().unwrap(), client.try_clone().unwrap());
            let back = std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_server, &mut to_client);
                let _ = to_client.shutdown(Shutdown::Write);
            });
            forward_frames(client, server, tamper, &kept);
            back.join().unwrap();
        });
        Path {
            address,
            seen,
            thread: Some(thread),
        }
    }

    /// Whether `needle` went by from the client, as bytes on the wire.
    fn carried(&self, needle: &[u8]) -> bool {
        self.seen
            .lock()
            .unwrap()
            .windows(needle.len())
            .any(|window| window == needle)
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            if !std::thread::panicking() {
                join_within(thread, Duration::from_secs(30), "the path");
            }
        }
    }
}

/// Reads the client's frames whole and passes them on to the server, tampered with.
fn forward_frames(
    mut client: TcpStream,
    mut server: TcpStream,
    tamper: Tamper,
    seen: &Mutex<Vec<u8>>,
) {
    let mut sealed = 0;
    let mut held: Option<Vec<u8>> = None;
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut header = [0u8; HEADER_LEN];
        if client.read_exact(&mut header).is_err() {
            break;
        }
        let Ok(parsed) = FrameHeader::parse(&header, usize::MAX) else {
            break;
        };
        let mut frame = header.to_vec();
        frame.resize(parsed.frame_len(), 0);
        if client.read_exact(&mut frame[HEADER_LEN..]).is_err() {
            break;
        }
        seen.lock().unwrap().extend_from_slice(&frame);
        let mut out = Vec::new();
        if parsed.is_sealed() {
            let number = sealed;
            sealed += 1;
            kept.push(frame.clone());
            match tamper {
                Tamper::Alter {
                    frame: at_frame,
                    at,
                } if at_frame == number => frame[at] ^= 1,
                Tamper::Replay { of, before } if before == number => {
                    out.extend_from_slice(&kept[of])
                }
                Tamper::Swap { frame: swapped } if swapped == number => {
                    held = Some(frame);
                    continue;
                }
                _ => {}
            }
        }
        out.extend_from_slice(&frame);
        if let Some(held) = held.take() {
            out.extend_from_slice(&held);
        }
        if server.write_all(&out).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Write);
}

/// A server with a probe, and a client whose connection to it goes through a path.
fn through_path(
    server_pairs: &[&str],
    client_pairs: &[&str],
    tamper: Tamper,
) -> (flint_rpc::RpcEnv, Probe, flint_rpc::RpcEnv, Path) {
    let (server, probe) = server_with_probe(server_pairs);
    let path = Path::to(server.address(), tamper);
    let client = env(client_pairs);
    (server, probe, client, path)
}

fn disconnected_reason(error: RpcError) -> String {
    match error {
        RpcError::Disconnected { reason, .. } => reason,
        other => panic!("not a disconnection: {other:?}"),
    }
}

fn auth_failure_reason(error: RpcError) -> String {
    match error {
        RpcError::AuthenticationFailed { reason, .. } => reason,
        other => panic!("not an authentication failure: {other:?}"),
    }
}

fn messages(probe: &Probe) -> Vec<u32> {
    probe
        .seen()
        .iter()
        .filter_map(|seen| match seen {
            Seen::Message(tag) => Some(*tag),
            _ => None,
        })
        .collect()
}

/// A body that is easy to find on the wire.
fn marked(len: usize) -> Bytes {
    Bytes::from(
        b"plain-text-marker-"
            .iter()
            .copied()
            .cycle()
            .take(len)
            .collect::<Vec<_>>(),
    )
}

#[test]
fn sealed_asks_and_sends_round_trip_and_nothing_travels_in_clear() {
    for (pairs, sealed) in [(&SEALED[..], true), (&AUTHENTICATED[..], false)] {
        let (server, probe, client, path) = through_path(pairs, pairs, Tamper::Nothing);
        let remote = client.handle().endpoint_ref(path.address, "probe");
        assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
        remote.send(&custom(2)).unwrap();
        // Large both ways (the probe echoes it): many reads to a frame, at both ends.
        let large = marked(8 << 20);
        let reply = remote
            .ask(&Message::Custom {
                tag: 3,
                body: large.clone(),
            })
            .unwrap();
        let ArchivedMessage::Custom { tag, body } = reply.message() else {
            panic!("not the echo");
        };
        assert_eq!((tag.to_native(), body.as_slice()), (3, &large[..]));
        for tag in 4..20 {
            assert_eq!(tag_of(&remote.ask(&custom(tag)).unwrap()), tag);
        }
        assert_eq!(messages(&probe), (1..20).collect::<Vec<_>>());
        assert_eq!(
            path.carried(b"plain-text-marker-plain-text-marker-"),
            !sealed,
            "sealed: {sealed}"
        );
        client.stop();
        server.stop();
    }
}

#[test]
fn a_frame_altered_on_the_path_closes_the_connection_and_says_why() {
    let (_server, probe, client, path) = through_path(
        &SEALED,
        &SEALED,
        Tamper::Alter {
            frame: 0,
            at: HEADER_LEN + 3,
        },
    );
    let remote = client.handle().endpoint_ref(path.address, "probe");
    let reason = disconnected_reason(remote.ask(&custom(1)).unwrap_err());
    assert_eq!(
        reason,
        "the peer closed the connection, saying: sealed Custom frame 0 failed \
         authentication: it was altered on the way (network.crypto.enabled=true)"
    );
    assert_eq!(messages(&probe), Vec::<u32>::new(), "nothing was delivered");
}

#[test]
fn a_frame_replayed_on_the_path_closes_the_connection_and_is_not_delivered_twice() {
    let (_server, probe, client, path) =
        through_path(&SEALED, &SEALED, Tamper::Replay { of: 0, before: 1 });
    let remote = client.handle().endpoint_ref(path.address, "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    let reason = disconnected_reason(remote.ask(&custom(2)).unwrap_err());
    assert_eq!(
        reason,
        "the peer closed the connection, saying: sealed Custom frame out of sequence: it \
         carries sequence number 0 where 1 was due, so a frame was replayed, reordered or \
         dropped on the way (network.crypto.enabled=true)"
    );
    assert_eq!(messages(&probe), [1], "the replayed ask ran once");
}

#[test]
fn frames_reordered_on_the_path_close_the_connection_and_say_why() {
    let (_server, probe, client, path) = through_path(&SEALED, &SEALED, Tamper::Swap { frame: 1 });
    let remote = client.handle().endpoint_ref(path.address, "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    remote.send(&custom(2)).unwrap();
    let reason = disconnected_reason(remote.ask(&custom(3)).unwrap_err());
    assert_eq!(
        reason,
        "the peer closed the connection, saying: sealed Custom frame out of sequence: it \
         carries sequence number 2 where 1 was due, so a frame was replayed, reordered or \
         dropped on the way (network.crypto.enabled=true)"
    );
    assert_eq!(messages(&probe), [1]);
}

#[test]
fn a_side_that_encrypts_and_one_that_does_not_are_refused_at_the_handshake() {
    for (server_pairs, client_pairs, reason) in [
        (
            &SEALED[..],
            &AUTHENTICATED[..],
            "the peer closed the connection, saying: the peer does not encrypt, but \
             network.crypto.enabled=true here: both sides must set network.crypto.enabled \
             the same",
        ),
        (
            &AUTHENTICATED[..],
            &SEALED[..],
            "the peer closed the connection, saying: the peer encrypts, but \
             network.crypto.enabled=false here: both sides must set network.crypto.enabled \
             the same",
        ),
    ] {
        let (server, probe) = server_with_probe(server_pairs);
        let client = env(client_pairs);
        let remote = client.handle().endpoint_ref(server.address(), "probe");
        // The side told of the mismatch sees an authentication failure, as the side that
        // found it does (an executor exits with code 77 either way).
        assert_eq!(
            auth_failure_reason(remote.ask(&custom(1)).unwrap_err()),
            reason
        );
        assert!(
            !probe
                .seen()
                .iter()
                .any(|seen| matches!(seen, Seen::Connected(_) | Seen::Message(_))),
            "{:?}",
            probe.seen()
        );
    }
}

#[test]
fn encryption_without_authentication_is_refused_before_anything_starts() {
    let Err(error) = flint_rpc::RpcEnv::new(&conf(&["network.crypto.enabled=true"])) else {
        panic!("an environment that would seal with no keys started");
    };
    assert!(
        error
            .to_string()
            .contains("network.crypto.enabled=true needs authenticate=true"),
        "{error}"
    );
}
