//! The receive budget (`rpc.io.maxReceiveBytes`) against peers that each send most of a
//! large frame, over real sockets. In a test binary of its own: the first test measures
//! the whole process's resident memory.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv};
use flint_testkit::attack::{self, loopback_host, Reconnector};
use flint_testkit::frames::frame_bytes;
use flint_testkit::process::resident_bytes;
use flint_testkit::wait::wait_until;
use flint_wire::{ArchivedMessage, FrameDecoder, Message, Route};

/// Held by each test here: the first measures the process's memory.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Records the tag and body length of every custom message.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<(u32, usize)>>>);

impl Endpoint for Sink {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let ArchivedMessage::Custom { tag, body } = message.message() {
            self.0.lock().unwrap().push((tag.to_native(), body.len()));
        }
    }
}

impl Sink {
    fn wait_for(&self, count: usize, within: Duration) -> Vec<(u32, usize)> {
        let deadline = Instant::now() + within;
        loop {
            let seen = self.0.lock().unwrap().clone();
            if seen.len() >= count {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {count} messages arrived",
                seen.len()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A one-way frame to "sink" carrying `body_len` bytes.
fn frame(tag: u32, body_len: usize) -> Vec<u8> {
    let route = Route::OneWay {
        endpoint: "sink".into(),
    };
    let message = Message::Custom {
        tag,
        body: bytes::Bytes::from(vec![7u8; body_len]),
    };
    frame_bytes(&route, &message).to_vec()
}

/// Eight peers each send all but the last bytes of a 15 MiB frame. With room for one
/// such frame, the environment reads one of them and leaves the others unread in the
/// kernel; memory grows by one frame, not eight. Once the peers finish, every frame
/// arrives, one after the other.
#[test]
fn peers_sending_large_frames_at_once_hold_no_more_than_the_budget() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const PEERS: usize = 8;
    const BODY: usize = 15 << 20;
    let conf = Conf::from_pairs(["rpc.message.maxSize=16m", "rpc.io.maxReceiveBytes=20m"]).unwrap();
    let env = RpcEnv::new(&conf).unwrap();
    let sink = Sink::default();
    env.handle().register("sink", sink.clone()).unwrap();
    // One frame, shared by every peer, so that the peers' side adds no memory per peer.
    let shared = Arc::new(frame(1, BODY));
    let held_back = 100;
    let before = resident_bytes("self");
    let mut finish = Vec::new();
    let mut peers = Vec::new();
    for _ in 0..PEERS {
        let (go, wait) = mpsc::channel::<()>();
        finish.push(go);
        let frame = shared.clone();
        let mut socket = TcpStream::connect(env.address()).unwrap();
        peers.push(std::thread::spawn(move || {
            // Blocks until the environment reads it: TCP holds back a waiting peer.
            socket.write_all(&frame[..frame.len() - held_back]).unwrap();
            let _ = wait.recv();
            socket.write_all(&frame[frame.len() - held_back..]).unwrap();
            socket
        }));
    }
    // One frame reserved, the seven others waiting for it.
    wait_until("seven connections wait", Duration::from_secs(20), || {
        env.handle().stats().budget_waits >= (PEERS - 1) as u64
    });
    std::thread::sleep(Duration::from_millis(300));
    let grown = resident_bytes("self").saturating_sub(before);
    let stats = env.handle().stats();
    assert_eq!(stats.budget_waits, (PEERS - 1) as u64);
    assert!(
        (stats.most_reserved as usize) < 20 << 20 && stats.most_reserved as usize > BODY,
        "{} bytes reserved at most",
        stats.most_reserved
    );
    // One 15 MiB frame, in a buffer made for it at once, and the start of each waiting
    // frame: 15.5 MiB measured. Reading all eight would take 120.
    assert!(
        grown < 24 << 20,
        "resident memory grew by {} MiB while {PEERS} peers each sent 15 MiB",
        grown >> 20
    );
    assert!(sink.0.lock().unwrap().is_empty());
    for go in finish {
        go.send(()).unwrap();
    }
    let seen = sink.wait_for(PEERS, Duration::from_secs(30));
    assert!(seen.iter().all(|&(tag, len)| tag == 1 && len == BODY));
    for peer in peers {
        drop(peer.join().unwrap());
    }
    env.stop();
}

/// A peer that trickles a large frame, a byte at a time but never stalling for
/// `network.timeout`, is cut off once the frame comes slower than 1 MiB/s after
/// `network.timeout`; the peer whose frame waited behind it, with its bytes unread in
/// the kernel past `network.timeout`, is kept, and its frame arrives.
#[test]
fn a_peer_trickling_a_large_frame_is_cut_off_and_the_one_waiting_behind_it_gets_in() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const BODY: usize = (2 << 20) - 4096;
    let conf = Conf::from_pairs([
        "rpc.message.maxSize=2m",
        // Raised to one frame of rpc.message.maxSize.
        "rpc.io.maxReceiveBytes=1",
        "network.timeout=1s",
        "executor.heartbeatInterval=100ms",
        "rpc.io.idleTimeout=0",
    ])
    .unwrap();
    let env = RpcEnv::new(&conf).unwrap();
    let sink = Sink::default();
    env.handle().register("sink", sink.clone()).unwrap();
    let trickled = frame(1, BODY);
    let mut trickler = TcpStream::connect(env.address()).unwrap();
    // The frame's time starts when its first bytes are in, after this.
    let started = Instant::now();
    trickler.write_all(&trickled[..64 << 10]).unwrap();
    wait_until(
        "the trickler holds the budget",
        Duration::from_secs(10),
        || env.handle().stats().most_reserved > 0,
    );
    let waiting = frame(2, BODY);
    let mut waiter = TcpStream::connect(env.address()).unwrap();
    let writer = std::thread::spawn(move || {
        waiter.write_all(&waiting).unwrap();
        waiter
    });
    wait_until("the second peer waits", Duration::from_secs(10), || {
        env.handle().stats().budget_waits >= 1
    });
    // A byte every 200 ms: never 1 s without progress, but the 64 KiB in buy only
    // 1/16 s past the 1 s network.timeout.
    let mut sent = 64 << 10;
    trickler.set_nonblocking(true).unwrap();
    let cut_off = loop {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the trickling peer is still connected"
        );
        if trickler.write_all(&trickled[sent..sent + 1]).is_err() {
            break started.elapsed();
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(200));
        if closed(&trickler) {
            break started.elapsed();
        }
    };
    assert!(
        cut_off >= Duration::from_secs(1),
        "cut off after {cut_off:?}, before the frame was late"
    );
    let reason = refusal(&mut trickler).expect("told why");
    assert!(reason.contains("arrived too slowly"), "{reason}");
    let seen = sink.wait_for(1, Duration::from_secs(10));
    assert_eq!(seen, [(2, BODY)]);
    drop(writer.join().unwrap());
    env.stop();
}

/// What the environment said as it closed `socket`: the reason of its `Refused` frame, if
/// it sent one. Reads to the end of the stream (or a reset), for at most 10 s.
fn refusal(socket: &mut TcpStream) -> Option<String> {
    socket.set_nonblocking(false).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut decoder = FrameDecoder::new(1 << 20);
    let mut buf = [0u8; 4096];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => decoder.feed(&buf[..n]).unwrap(),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the environment did not close the connection: {e}"),
        }
    }
    let frame = decoder.next_frame().unwrap()?;
    match &frame.envelope().unwrap().message {
        ArchivedMessage::Refused { reason } => Some(reason.as_str().to_owned()),
        _ => panic!("the environment sent {} as it closed", frame.kind()),
    }
}

/// Whether the environment closed `socket` (which is non-blocking): it reads an end of
/// stream or a reset at once, where a live one would block.
fn closed(socket: &TcpStream) -> bool {
    !matches!(socket.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// A peer that goes away while it waits for the budget does not hold up the one behind
/// it. Its end of stream comes after all it sent, so the environment knows, while it
/// still waits, that its frame will never be whole (a peer that sent a whole frame and
/// closed would still have it delivered): the connection closes at once, and gives up its
/// place.
#[test]
fn a_peer_that_closes_while_it_waits_does_not_hold_up_the_next() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const BODY: usize = (2 << 20) - 4096;
    let conf = Conf::from_pairs(["rpc.message.maxSize=2m", "rpc.io.maxReceiveBytes=1"]).unwrap();
    let env = RpcEnv::new(&conf).unwrap();
    let sink = Sink::default();
    env.handle().register("sink", sink.clone()).unwrap();
    let first = frame(1, BODY);
    let mut holder = TcpStream::connect(env.address()).unwrap();
    holder.write_all(&first[..first.len() - 100]).unwrap();
    let mut leaver = TcpStream::connect(env.address()).unwrap();
    leaver.write_all(&frame(2, BODY)[..64 << 10]).unwrap();
    wait_until("the second peer waits", Duration::from_secs(10), || {
        env.handle().stats().budget_waits >= 1
    });
    let last = frame(3, BODY);
    let mut behind = TcpStream::connect(env.address()).unwrap();
    behind.write_all(&last[..64 << 10]).unwrap();
    wait_until("the third peer waits", Duration::from_secs(10), || {
        env.handle().stats().budget_waits >= 2
    });
    leaver.shutdown(std::net::Shutdown::Write).unwrap();
    leaver.set_nonblocking(true).unwrap();
    wait_until(
        "the leaver's connection closes while the holder still holds the budget",
        Duration::from_secs(5),
        || closed(&leaver),
    );
    assert!(
        sink.0.lock().unwrap().is_empty(),
        "the first frame is not in"
    );
    let accepted = env.handle().stats().accepted;
    assert_eq!(accepted, 3);
    holder.write_all(&first[first.len() - 100..]).unwrap();
    assert_eq!(sink.wait_for(1, Duration::from_secs(10)), [(1, BODY)]);
    let writer = std::thread::spawn(move || {
        behind.write_all(&last[64 << 10..]).unwrap();
        behind
    });
    assert_eq!(sink.wait_for(2, Duration::from_secs(10))[1], (3, BODY));
    drop(writer.join().unwrap());
    drop(holder);
    env.stop();
}

/// A peer that sends a large frame's header and then nothing more while it waits for the
/// budget is cut off at `network.timeout`, while it still waits, and gives up its place;
/// the peer behind it, whose bytes wait unread in the kernel, is kept past that timeout
/// and gets in once the frame ahead is in.
#[test]
fn a_peer_that_falls_silent_while_it_waits_is_cut_off_and_gives_up_its_place() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // 4 MiB, nearly all sent at once: the holder's frame may then take 1 s + 4 s, well
    // past the 2 s it takes here.
    const BODY: usize = (4 << 20) - 4096;
    let conf = Conf::from_pairs([
        "rpc.message.maxSize=4m",
        "rpc.io.maxReceiveBytes=1",
        "network.timeout=1s",
        "executor.heartbeatInterval=100ms",
        "rpc.io.idleTimeout=0",
    ])
    .unwrap();
    let env = RpcEnv::new(&conf).unwrap();
    let sink = Sink::default();
    env.handle().register("sink", sink.clone()).unwrap();
    // Holds the budget for 2 s, a byte every 200 ms: never stalled, never too slow.
    let first = frame(1, BODY);
    let mut holder = TcpStream::connect(env.address()).unwrap();
    holder.write_all(&first[..first.len() - 20]).unwrap();
    wait_until(
        "the first peer holds the budget",
        Duration::from_secs(10),
        || env.handle().stats().most_reserved > 0,
    );
    let mut silent = TcpStream::connect(env.address()).unwrap();
    silent.write_all(&frame(2, BODY)[..1024]).unwrap();
    wait_until("the silent peer waits", Duration::from_secs(10), || {
        env.handle().stats().budget_waits >= 1
    });
    let last = frame(3, BODY);
    let mut behind = TcpStream::connect(env.address()).unwrap();
    let writer = std::thread::spawn(move || {
        behind.write_all(&last).unwrap();
        behind
    });
    wait_until("the third peer waits", Duration::from_secs(10), || {
        env.handle().stats().budget_waits >= 2
    });
    silent.set_nonblocking(true).unwrap();
    for sent in first.len() - 20..first.len() - 10 {
        holder.write_all(&first[sent..sent + 1]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(closed(&silent), "the silent peer still waits after 2 s");
    let reason = refusal(&mut silent).expect("told why");
    assert!(
        reason.contains("the peer sent nothing for 1s in the middle of a frame"),
        "{reason}"
    );
    assert!(
        sink.0.lock().unwrap().is_empty(),
        "the first frame is not in yet"
    );
    holder.write_all(&first[first.len() - 10..]).unwrap();
    let seen = sink.wait_for(2, Duration::from_secs(10));
    assert_eq!(seen, [(1, BODY), (3, BODY)]);
    drop(writer.join().unwrap());
    env.stop();
}

/// A connection to `env` from `source` (any address of 127.0.0.0/8 is this host's).
fn connect_from(env: &RpcEnv, source: [u8; 4]) -> TcpStream {
    attack::connect_from(source.into(), env.address()).unwrap()
}

/// Hosts take turns at the budget: one that queued three large frames first does not put
/// them all ahead of another host's one.
#[test]
fn hosts_waiting_for_the_budget_take_turns() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const BODY: usize = (1 << 20) - 4096;
    let conf = Conf::from_pairs(["rpc.message.maxSize=1m", "rpc.io.maxReceiveBytes=1"]).unwrap();
    let env = RpcEnv::new(&conf).unwrap();
    let sink = Sink::default();
    env.handle().register("sink", sink.clone()).unwrap();
    let first = frame(0, BODY);
    let mut holder = connect_from(&env, [127, 0, 0, 1]);
    holder.write_all(&first[..first.len() - 100]).unwrap();
    wait_until(
        "the holder holds the budget",
        Duration::from_secs(10),
        || env.handle().stats().most_reserved > 0,
    );
    // Host 127.0.0.3 queues three frames, then host 127.0.0.2 one.
    let mut writers = Vec::new();
    for (waits, tag, source) in [
        (1, 31, [127, 0, 0, 3]),
        (2, 32, [127, 0, 0, 3]),
        (3, 33, [127, 0, 0, 3]),
        (4, 21, [127, 0, 0, 2]),
    ] {
        let mut socket = connect_from(&env, source);
        writers.push(std::thread::spawn(move || {
            socket.write_all(&frame(tag, BODY)).unwrap();
            socket
        }));
        wait_until("the peer waits", Duration::from_secs(10), || {
            env.handle().stats().budget_waits >= waits
        });
    }
    holder.write_all(&first[first.len() - 100..]).unwrap();
    let tags: Vec<u32> = sink
        .wait_for(5, Duration::from_secs(20))
        .into_iter()
        .map(|(tag, _)| tag)
        .collect();
    assert_eq!(tags, [0, 31, 21, 32, 33]);
    for writer in writers {
        drop(writer.join().unwrap());
    }
    drop(holder);
    env.stop();
}

/// `network.timeout` of the trickler tests.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Room for the machine being slow, which a loaded CI runner is.
const SLACK: Duration = Duration::from_millis(1500);
/// A trickling attacker's frames.
const LARGE: usize = (4 << 20) - 4096;
/// An honest host's frames.
const SMALL: usize = (1 << 20) - 4096;

/// The environment the trickler tests attack, with a sink: room in the receive budget
/// for four of the attacker's frames, `network.timeout` [`TIMEOUT`].
fn trickled_env() -> (RpcEnv, Sink) {
    let conf = Conf::from_pairs([
        "rpc.message.maxSize=4m",
        // Four of the attacker's frames, each reserved with one read beyond it.
        "rpc.io.maxReceiveBytes=17m",
        "network.timeout=1s",
        "executor.heartbeatInterval=100ms",
        "rpc.io.idleTimeout=0",
    ])
    .unwrap();
    let env = RpcEnv::new(&conf).unwrap();
    let sink = Sink::default();
    env.handle().register("sink", sink.clone()).unwrap();
    (env, sink)
}

/// An honest host (127.0.0.3) sends frames of [`SMALL`] bytes one after the other for
/// four timeouts, each once the one before arrived: the times those held up for more
/// than a quarter of a timeout took, how many it sent, and how long it sent for.
fn honest_frames_held_up(env: &RpcEnv, sink: &Sink) -> (Vec<Duration>, usize, Duration) {
    let mut honest = connect_from(env, [127, 0, 0, 3]);
    let small = frame(2, SMALL);
    let started = Instant::now();
    let mut held_up = Vec::new();
    let mut sent = 0;
    while started.elapsed() < 4 * TIMEOUT {
        let asked = Instant::now();
        honest.write_all(&small).unwrap();
        sent += 1;
        sink.wait_for(sent, 2 * TIMEOUT + SLACK);
        let took = asked.elapsed();
        if took > TIMEOUT / 4 {
            held_up.push(took);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (held_up, sent, started.elapsed())
}

/// The attack of issue 22, scaled down: a host (127.0.0.2) with eight connections, each
/// announcing a frame of nearly 4 MiB, sending a byte of it every 200 ms and reconnecting
/// at once when cut off, fills the budget (four such frames) before an honest host (127.0.0.3)
/// sends its frames of 1 MiB, one after the other. The honest host is held up once, for
/// at most `network.timeout` (the attacker's first frames are cut off by then), and then
/// not again however often the attacker reconnects: on probation, it holds at most half
/// the budget, behind the honest host. Before, each honest frame waited for the next
/// attacker frame to be cut off.
#[test]
fn a_reconnecting_trickler_holds_an_honest_host_up_once_for_one_network_timeout_at_most() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (env, sink) = trickled_env();
    let trickler = Reconnector::start(
        loopback_host(2),
        env.address(),
        8,
        LARGE as u32,
        Duration::from_millis(200),
    );
    wait_until(
        "the attacker fills the budget",
        Duration::from_secs(10),
        || env.handle().stats().budget_waits >= 4,
    );
    assert!(env.handle().stats().most_reserved >= 16 << 20);
    // Frames for four timeouts, well past the attacker's first cuts and reconnections.
    let (held_up, sent, elapsed) = honest_frames_held_up(&env, &sink);
    let reconnections = trickler.reconnections();
    drop(trickler);
    // Held up once, by the attacker's first frames, for network.timeout at most (a frame
    // slowed by a busy machine now and then counts, and is in the slack).
    let total: Duration = held_up.iter().sum();
    assert!(
        total <= TIMEOUT + SLACK,
        "the honest host's frames were held up {held_up:?}, {sent} sent"
    );
    assert!(sent >= 10, "{sent} frames in {elapsed:?}");
    assert!(
        reconnections >= 8,
        "the attacker was cut off and reconnected {reconnections} times"
    );
    assert!(sink
        .0
        .lock()
        .unwrap()
        .iter()
        .all(|&(tag, len)| tag == 2 && len == SMALL));
    env.stop();
}

/// The same attack, but the attacker closes each of its connections itself 800 ms after
/// it connected, before `network.timeout` (1 s) cuts it off, and reconnects: its closes
/// are ends of stream, not cuts, yet each frame was under way for more than half of
/// `network.timeout`, so its host goes on probation all the same. The honest host is
/// held up at most once; before, each of its frames waited for the next attacker
/// connection to close.
#[test]
fn a_trickler_that_closes_its_own_connections_before_the_timeout_holds_an_honest_host_up_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (env, sink) = trickled_env();
    let trickler = Reconnector::closing_after(
        loopback_host(2),
        env.address(),
        8,
        LARGE as u32,
        Duration::from_millis(200),
        Duration::from_millis(800),
    );
    wait_until(
        "the attacker fills the budget",
        Duration::from_secs(10),
        || env.handle().stats().budget_waits >= 4,
    );
    // Frames for four timeouts, through many of the attacker's closes and reconnections.
    let (held_up, sent, elapsed) = honest_frames_held_up(&env, &sink);
    let (self_closes, reconnections) = (trickler.self_closes(), trickler.reconnections());
    drop(trickler);
    assert!(
        held_up.len() <= 1,
        "the honest host's frames were held up {held_up:?}, {sent} sent"
    );
    let total: Duration = held_up.iter().sum();
    assert!(total <= TIMEOUT + SLACK, "held up {held_up:?}");
    assert!(sent >= 10, "{sent} frames in {elapsed:?}");
    assert!(
        self_closes >= 8 && reconnections >= 8,
        "the attacker closed {self_closes} connections itself and reconnected \
         {reconnections} times"
    );
    env.stop();
}
