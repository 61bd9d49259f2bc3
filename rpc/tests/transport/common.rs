//! What the topics share: the [`Probe`] endpoint that records what happens to it, and
//! ways to make environments and raw frames, and to watch a server close a peer.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv, TimerId};
pub(crate) use flint_testkit::frames::frame_bytes;
use flint_testkit::wait::holds_within;
use flint_wire::{ArchivedMessage, Message};

/// What a [`Probe`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    Started,
    Message(u32),
    Connected(SocketAddr),
    Disconnected(SocketAddr),
    Timer,
    Stopped,
}

/// An endpoint that records what happens to it and answers asks for `Custom { tag }`
/// with `Custom { tag }` (tag 999: never answers; tag 998: answers with an error; tag
/// [`FLOOD`]: only counted).
#[derive(Clone, Default)]
pub(crate) struct Probe {
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    pub(crate) flooded: Arc<AtomicU64>,
}

/// The tag of one-way messages a [`Probe`] only counts, for floods of millions.
pub(crate) const FLOOD: u32 = u32::MAX;

impl Probe {
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn record(&self, event: Seen) {
        self.seen.lock().unwrap().push(event);
    }

    /// Waits (bounded) until `check` holds for what was seen.
    pub(crate) fn wait_for(&self, what: &str, check: impl Fn(&[Seen]) -> bool) {
        assert!(
            holds_within(Duration::from_secs(10), || check(&self.seen())),
            "timed out waiting for {what}: {:?}",
            self.seen()
        );
    }
}

impl Endpoint for Probe {
    fn on_start(&mut self, _ctx: &mut EndpointContext<'_>) {
        self.record(Seen::Started);
    }

    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let ArchivedMessage::Custom { tag, body } = message.message() {
            let tag = tag.to_native();
            if tag == FLOOD {
                self.flooded.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.record(Seen::Message(tag));
            match tag {
                999 => {}
                998 => message.reply_error("no such partition: 7").unwrap(),
                _ => message
                    .reply(&Message::Custom {
                        tag,
                        body: message.frame().bytes_of(body.as_slice()),
                    })
                    .unwrap(),
            }
        }
    }

    fn on_timer(&mut self, _ctx: &mut EndpointContext<'_>, _timer: TimerId) {
        self.record(Seen::Timer);
    }

    fn on_connected(&mut self, _ctx: &mut EndpointContext<'_>, remote: SocketAddr) {
        self.record(Seen::Connected(remote));
    }

    fn on_disconnected(&mut self, _ctx: &mut EndpointContext<'_>, remote: SocketAddr) {
        self.record(Seen::Disconnected(remote));
    }

    fn on_stop(&mut self) {
        self.record(Seen::Stopped);
    }
}

pub(crate) fn custom(tag: u32) -> Message {
    Message::Custom {
        tag,
        body: Bytes::from(vec![tag as u8; 128]),
    }
}

pub(crate) fn conf(pairs: &[&str]) -> Conf {
    Conf::from_pairs(pairs.iter().copied()).unwrap()
}

pub(crate) fn env(pairs: &[&str]) -> RpcEnv {
    RpcEnv::new(&conf(pairs)).unwrap()
}

pub(crate) fn server_with_probe(pairs: &[&str]) -> (RpcEnv, Probe) {
    let server = env(pairs);
    let probe = Probe::default();
    server.handle().register("probe", probe.clone()).unwrap();
    (server, probe)
}

pub(crate) fn tag_of(reply: &flint_rpc::Reply) -> u32 {
    match reply.message() {
        ArchivedMessage::Custom { tag, .. } => tag.to_native(),
        other => panic!("unexpected reply {other:?}"),
    }
}

/// Waits (at most 10 s) for the server to close `raw`: an end of stream, or a reset
/// (the server closed with bytes of ours unread), after at most one frame, which must be
/// a `Refused`; returns its reason, or `None` if the server said nothing. Other bytes from
/// the server, a timeout or any other error fail.
pub(crate) fn assert_closed_by_server(raw: &mut TcpStream) -> Option<String> {
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
    let mut buf = [0u8; 4096];
    loop {
        match raw.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => decoder.feed(&buf[..n]).unwrap(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                break
            }
            Err(e) => panic!("the server did not close the connection: {e}"),
        }
    }
    let frame = decoder.next_frame().expect("a whole frame or none")?;
    assert!(
        decoder.next_frame().unwrap().is_none(),
        "more than one frame"
    );
    let envelope = frame.envelope().unwrap();
    let ArchivedMessage::Refused { reason } = &envelope.message else {
        panic!("the server sent {} instead of closing", frame.kind());
    };
    Some(reason.as_str().to_owned())
}

/// [`assert_closed_by_server`], which must have been told why, in words containing
/// `words`.
pub(crate) fn assert_refused_by_server(raw: &mut TcpStream, words: &str) {
    let reason = assert_closed_by_server(raw).expect("the server said why it closed");
    assert!(reason.contains(words), "{reason}");
}

/// Returns once the loop's current turn has ended: registering an endpoint is done by a
/// command, which a turn runs after it has handled (and flushed) its connections.
pub(crate) fn wait_for_the_turn_to_end(env: &RpcEnv) {
    static BARRIERS: AtomicUsize = AtomicUsize::new(0);
    let name = format!("barrier-{}", BARRIERS.fetch_add(1, Ordering::Relaxed));
    env.handle().register(&name, Probe::default()).unwrap();
}

/// Joins `thread`, failing the test if it does not end within `bound`.
pub(crate) fn join_within<T>(thread: std::thread::JoinHandle<T>, bound: Duration, what: &str) -> T {
    assert!(
        holds_within(bound, || thread.is_finished()),
        "{what} did not end within {bound:?}"
    );
    thread.join().unwrap()
}
