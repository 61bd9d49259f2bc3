//! A connection's outbox: frames encoded by any thread, waiting for the loop to write
//! them, or written by the sending thread itself when the loop has none of them in flight
//! ([`Outbox::write_through`]). Bounded by `rpc.outbox.maxBytes`: a frame that does not fit
//! is refused, but for a reply or a frame larger than the bound while under it (see
//! [`Outbox`]). On a connection that encrypts, each frame is sealed as it is pushed, under
//! the outbox's lock, so that the frames' sequence numbers follow their order in the
//! outbox, which is the order they are written in.

use std::io::Write;
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use flint_wire::{Encoder, Message, Route, WireError, FLAG_SEALED, TAG_LEN};

use crate::crypto::Sealer;
use crate::error::RpcError;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};

/// The socket a write-through writes to: the connection's own (a duplicate descriptor),
/// or under loom a model of one.
#[cfg(not(loom))]
pub(crate) type Socket = std::net::TcpStream;
#[cfg(loom)]
pub(crate) type Socket = loom_socket::Socket;

/// What a sender gives the transport to encode into a frame: a catalogue [`Message`],
/// or an application's typed value ([`crate::typed`]), archived straight into the
/// outbox either way.
pub(crate) trait Outgoing {
    /// Appends the frame carrying `self` along `route` to `out` (see
    /// [`Encoder::encode_with_flags`]).
    fn encode(
        &self,
        encoder: &mut Encoder,
        route: &Route,
        flags: u16,
        out: &mut BytesMut,
    ) -> Result<usize, WireError>;
}

impl Outgoing for Message {
    fn encode(
        &self,
        encoder: &mut Encoder,
        route: &Route,
        flags: u16,
        out: &mut BytesMut,
    ) -> Result<usize, WireError> {
        encoder.encode_with_flags(route, self, flags, out)
    }
}

/// Identifies a connection (and its outbox) for the life of an RPC environment.
pub type ConnKey = u64;

/// Where an outbox's frames go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxKind {
    /// Endpoints of this environment, without a socket.
    Local,
    /// A connection this environment opened to a remote listener at this address.
    Outgoing(SocketAddr),
    /// A connection a remote peer opened to this environment.
    Incoming,
}

#[derive(Debug)]
struct OutboxState {
    buf: BytesMut,
    encoder: Encoder,
    /// Why the connection closed, once it has.
    closed: Option<Box<str>>,
    /// The connection's socket (a duplicate descriptor), once it is open and its peer
    /// authenticated: threads other than the loop's may then write to it themselves.
    socket: Option<Socket>,
    /// Seals every frame pushed, once the handshake gave the keys
    /// (`network.crypto.enabled`).
    sealer: Option<Sealer>,
}

/// The most capacity a written buffer may keep to be filled again: enough for the
/// batches a stream of small frames makes, little for an idle connection to hold.
const MAX_SPARE_CAPACITY: usize = 256 * 1024;

/// The capacity a fresh buffer starts with when no written one is back yet, so that a
/// stream of frames does not grow it from nothing, reallocating and copying as it goes.
const FRESH_CAPACITY: usize = 16 * 1024;

/// Frames waiting to be written to one connection.
///
/// The bytes queued (encoded and not yet written, including those the loop took and is
/// writing) stay within the limit: a frame that would take them past it is refused
/// with [`RpcError::OutboxFull`]. The exceptions are a frame larger than the whole
/// limit, which would never fit, and a reply, which an asker waits for: each is
/// accepted whenever less than the limit is queued, so the outbox then holds less than
/// the limit plus that one frame. (The handshake's few frames, queued by the loop
/// before any other, are not counted against it.)
#[derive(Debug)]
pub struct Outbox {
    key: ConnKey,
    kind: OutboxKind,
    peer: SocketAddr,
    limit: usize,
    state: Mutex<OutboxState>,
    /// Bytes queued and not yet written: in `state.buf` or taken by the loop.
    queued: AtomicUsize,
    /// Bytes written to the socket over the connection's life: whether a peer with bytes
    /// queued to it takes any of them ([`Outbox::written_total`]).
    written_total: AtomicU64,
    /// Whether a sender has taken it upon itself to get what is queued written: by
    /// telling the loop, or by writing it through. Cleared when the loop takes the outbox
    /// and when a write-through empties it.
    flush_requested: AtomicBool,
    /// A buffer the loop has written and handed back ([`Outbox::recycle`]), emptied, for
    /// the next [`Outbox::take`] to leave to the senders. Without it every batch would be
    /// a fresh allocation that the sending thread makes and the loop's thread frees,
    /// and the two would meet on the allocator's lock. Apart from `state`, so that the
    /// loop handing a buffer back does not wait on a sender encoding.
    spare: Mutex<Option<BytesMut>>,
}

impl Outbox {
    /// An empty outbox.
    pub fn new(
        key: ConnKey,
        kind: OutboxKind,
        peer: SocketAddr,
        max_payload: usize,
        limit: usize,
    ) -> Self {
        Outbox {
            key,
            kind,
            peer,
            limit,
            state: Mutex::new(OutboxState {
                buf: BytesMut::new(),
                encoder: Encoder::new(max_payload),
                closed: None,
                socket: None,
                sealer: None,
            }),
            queued: AtomicUsize::new(0),
            written_total: AtomicU64::new(0),
            flush_requested: AtomicBool::new(false),
            spare: Mutex::new(None),
        }
    }

    /// The connection's key.
    pub fn key(&self) -> ConnKey {
        self.key
    }

    /// Where the frames go.
    pub fn kind(&self) -> OutboxKind {
        self.kind
    }

    /// The remote address (this environment's own for the local outbox).
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn lock(&self) -> crate::sync::MutexGuard<'_, OutboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encodes a frame into the outbox, if it fits (see [`Outbox`]). Returns whether the
    /// caller must see it written, by the loop or by [`Outbox::write_through`]: the first
    /// frame since the loop last took the outbox or a write-through emptied it.
    pub fn push<O: Outgoing + ?Sized>(&self, route: &Route, message: &O) -> Result<bool, RpcError> {
        let mut state = self.lock();
        if let Some(reason) = &state.closed {
            return Err(RpcError::Disconnected {
                peer: self.peer,
                reason: reason.to_string(),
            });
        }
        // Apart from the handshake's frames, only pushes, under this lock, add to `queued`
        // (the loop subtracts what it wrote): it does not grow between the two checks.
        let queued = self.queued.load(Ordering::Acquire);
        let full = || RpcError::OutboxFull {
            peer: self.peer,
            queued,
            limit: self.limit,
        };
        if queued >= self.limit {
            return Err(full());
        }
        let OutboxState {
            buf,
            encoder,
            sealer,
            ..
        } = &mut *state;
        let flags = if sealer.is_some() { FLAG_SEALED } else { 0 };
        let written = message.encode(encoder, route, flags, buf)?;
        // A reply answers an ask the peer made and waits for: it may take the queue past
        // the bound by one frame, as an oversized frame may, rather than be refused for
        // want of room and leave the ask to time out (or be encoded again and again).
        let is_reply = matches!(route, Route::Reply { .. } | Route::ErrorReply { .. });
        // The frame's size is known only now: one that does not fit is cut off again,
        // which keeps the buffer's capacity.
        if queued + written > self.limit && written <= self.limit && !is_reply {
            buf.truncate(buf.len() - written);
            return Err(full());
        }
        // Sealed only once it is sure to stay: a frame cut off again takes no number.
        if let Some(sealer) = sealer {
            let start = buf.len() - written;
            sealer.seal(&mut buf[start..]);
        }
        self.queued.fetch_add(written, Ordering::AcqRel);
        drop(state);
        Ok(!self.flush_requested.swap(true, Ordering::AcqRel))
    }

    /// The loop takes everything queued so far (frames stay counted until `written`).
    /// Senders go on in the spare buffer the loop last handed back, if any.
    ///
    /// A `BytesMut`, not a frozen `Bytes`: freezing a buffer with room to spare boxes a
    /// reference count for it, an allocation per take, and only a buffer nobody else
    /// refers to can be handed back.
    pub fn take(&self) -> Option<BytesMut> {
        // A swap for loom's sake, as in `write_through`.
        self.flush_requested.swap(false, Ordering::AcqRel);
        let mut state = self.lock();
        if state.buf.is_empty() {
            return None;
        }
        // The whole buffer goes, not a split-off part of it, which would share its
        // allocation with what senders fill next.
        let next = self
            .spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_else(|| BytesMut::with_capacity(FRESH_CAPACITY));
        Some(std::mem::replace(&mut state.buf, next))
    }

    /// Hands back a buffer [`Outbox::take`] gave out, once all of it is written (or
    /// delivered), for senders to fill again. One grown past what an idle connection
    /// should hold is dropped instead, as is one smaller than the spare already kept.
    pub fn recycle(&self, mut written: BytesMut) {
        if written.capacity() > MAX_SPARE_CAPACITY {
            return;
        }
        written.clear();
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare
            .as_ref()
            .is_none_or(|kept| kept.capacity() < written.capacity())
        {
            *spare = Some(written);
        }
    }

    /// Notes that `n` taken bytes left for the socket (or were delivered locally).
    pub fn written(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::AcqRel);
        self.written_total.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes written to the socket so far, by the loop and by write-throughs: a sender
    /// that finds bytes queued reads it again later to tell a peer that takes them
    /// slowly from one that takes none.
    pub fn written_total(&self) -> u64 {
        self.written_total.load(Ordering::Relaxed)
    }

    /// Counts `n` bytes the loop queued itself (handshake frames) until `written`.
    pub fn add_queued(&self, n: usize) {
        self.queued.fetch_add(n, Ordering::AcqRel);
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Seals every frame from now on with `sealer`, and the frames queued before (in
    /// clear: the handshake had not given the keys yet) first, in their order. Called as
    /// the handshake ends, before anything of the outbox is taken or written through.
    pub(crate) fn start_sealing(&self, mut sealer: Sealer) {
        let mut state = self.lock();
        if state.closed.is_some() {
            return;
        }
        if !state.buf.is_empty() {
            let mut sealed = BytesMut::with_capacity(state.buf.len() + FRESH_CAPACITY);
            let frames = sealer.seal_frames_in_clear(&state.buf, &mut sealed);
            state.buf = sealed;
            self.queued.fetch_add(frames * TAG_LEN, Ordering::AcqRel);
        }
        state.sealer = Some(sealer);
    }

    /// The sealer, taken from a closed outbox to seal one last frame (a `Refused`) with
    /// the next number in sequence; `None` if the connection did not seal.
    pub(crate) fn take_sealer(&self) -> Option<Sealer> {
        let mut state = self.lock();
        // Taken from an open outbox, it would leave later frames in clear.
        state.closed.as_ref()?;
        state.sealer.take()
    }

    /// Lets [`Outbox::write_through`] write to `socket`: the loop's connection is open,
    /// and its peer authenticated (until then only the loop writes, handshake frames).
    // Under loom the event loop attaches nothing; only the model does.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn attach_socket(&self, socket: Socket) {
        let mut state = self.lock();
        if state.closed.is_none() {
            state.socket = Some(socket);
        }
    }

    /// Writes what is queued to the socket from the calling thread, if the loop has none
    /// of this outbox's bytes in flight (taken and not yet written) so that the order of
    /// frames is kept. Returns `true` if nothing is left for the loop: the sender need not
    /// wake it, which saves a hand-off between threads on every send from another thread.
    /// A write that would block or fails leaves the rest to the loop, which waits for the
    /// socket or reports the failure.
    pub fn write_through(&self) -> bool {
        let mut state = self.lock();
        let OutboxState { buf, socket, .. } = &mut *state;
        let Some(socket) = socket.as_ref() else {
            return false;
        };
        // Under the lock only pushes add to `queued`, and `take` empties `buf`: equal,
        // they say that every byte not yet written is here.
        if buf.is_empty() || self.queued.load(Ordering::Acquire) != buf.len() {
            return false;
        }
        let mut written = 0;
        while written < buf.len() {
            // std's write passes MSG_NOSIGNAL: a peer gone away is an error, not SIGPIPE.
            match (&*socket).write(&buf[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        buf.advance(written);
        self.queued.fetch_sub(written, Ordering::AcqRel);
        self.written_total
            .fetch_add(written as u64, Ordering::Relaxed);
        if !buf.is_empty() {
            return false;
        }
        // Nothing waits for the loop: the next push must tell it (or write through). A swap,
        // not a store: loom lets a plain store slip into the middle of a concurrent push's
        // swap (tokio-rs/loom#254), which real hardware never does.
        self.flush_requested.swap(false, Ordering::AcqRel);
        true
    }

    /// Refuses further frames and drops what is queued (the connection is gone, for
    /// `reason`, which later sends are told), and its session keys: for the loop once it
    /// is done with the connection (any last sealed frame written, see
    /// [`Outbox::take_sealer`]), so that the keys do not live on in whatever still holds
    /// the outbox (an `EndpointRef` keeps its connection's).
    pub(crate) fn close_for_good(&self, reason: &str) {
        self.close_between_frames(reason);
        self.lock().sealer = None;
    }

    /// Refuses further frames and drops what is queued, keeping the session keys for a
    /// last frame ([`Outbox::take_sealer`]), and says whether every byte it was given had
    /// been written: then the stream stands between two frames, and a last frame written
    /// to the socket now reaches the peer whole. No thread writes through once it is
    /// closed.
    pub(crate) fn close_between_frames(&self, reason: &str) -> bool {
        let mut state = self.lock();
        // Under the lock: no push, and so no write-through, comes between the look and
        // the close.
        let between_frames = self.queued.load(Ordering::Acquire) == 0;
        state.closed = Some(reason.into());
        state.buf = BytesMut::new();
        state.socket = None;
        self.queued.store(0, Ordering::Release);
        drop(state);
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).take();
        between_frames
    }

    /// Whether the outbox was closed.
    pub fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::net::TcpStream;

    fn outbox(limit: usize) -> Outbox {
        Outbox::new(
            3,
            OutboxKind::Incoming,
            "127.0.0.1:1".parse().unwrap(),
            1 << 20,
            limit,
        )
    }

    #[test]
    fn first_push_asks_for_a_flush_and_later_ones_do_not() {
        let outbox = outbox(1 << 20);
        let route = Route::Reply { request_id: 1 };
        assert!(outbox.push(&route, &Message::Empty).unwrap());
        assert!(!outbox.push(&route, &Message::Empty).unwrap());
        let taken = outbox.take().unwrap();
        assert_eq!(outbox.queued(), taken.len());
        outbox.written(taken.len());
        assert_eq!(outbox.queued(), 0);
        assert!(outbox.push(&route, &Message::Empty).unwrap());
    }

    /// A closing connection may write a last frame of its own only where no frame of the
    /// outbox is under way, part-written or waiting.
    #[test]
    fn closing_says_whether_the_stream_stands_between_frames() {
        let route = Route::Reply { request_id: 1 };
        let idle = outbox(1 << 20);
        assert!(idle.close_between_frames("closed"));
        assert!(idle.is_closed());

        let waiting = outbox(1 << 20);
        waiting.push(&route, &Message::Empty).unwrap();
        assert!(!waiting.close_between_frames("closed"));
        assert_eq!(waiting.queued(), 0, "what waited is dropped");

        let part_written = outbox(1 << 20);
        part_written.push(&route, &Message::Empty).unwrap();
        let taken = part_written.take().unwrap();
        part_written.written(taken.len() - 1);
        assert!(!part_written.close_between_frames("closed"));

        let written = outbox(1 << 20);
        written.push(&route, &Message::Empty).unwrap();
        let taken = written.take().unwrap();
        written.written(taken.len());
        assert!(written.close_between_frames("closed"));
    }

    #[test]
    fn a_full_outbox_refuses_and_names_the_limit() {
        let outbox = outbox(1000);
        let route = Route::OneWay {
            endpoint: "sink".into(),
        };
        let mut accepted = 0;
        let error = loop {
            match outbox.push(&route, &Message::Empty) {
                Ok(_) => accepted += 1,
                Err(error) => break error,
            }
        };
        assert!(accepted >= 1);
        // Exactly bounded: the frame that would have gone past the limit was refused.
        let frame = outbox.queued() / accepted;
        assert_eq!(accepted, 1000 / frame, "{frame}-byte frames");
        assert!(outbox.queued() <= 1000);
        assert!(
            matches!(error, RpcError::OutboxFull { queued, limit: 1000, .. } if queued == outbox.queued()),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains("rpc.outbox.maxBytes") && text.contains("1000"),
            "{text}"
        );
        // Writing frees room again.
        let taken = outbox.take().unwrap();
        outbox.written(taken.len());
        assert!(outbox.push(&route, &Message::Empty).is_ok());
    }

    #[test]
    fn a_reply_goes_while_the_outbox_is_below_the_limit() {
        let outbox = outbox(1000);
        let message = Message::Custom {
            tag: 1,
            body: bytes::Bytes::from(vec![7u8; 600]),
        };
        let one_way = Route::OneWay {
            endpoint: "sink".into(),
        };
        assert!(outbox.push(&one_way, &message).unwrap());
        // A send that does not fit is refused; a reply of the same size is not.
        assert!(matches!(
            outbox.push(&one_way, &message),
            Err(RpcError::OutboxFull { .. })
        ));
        outbox
            .push(&Route::Reply { request_id: 9 }, &message)
            .unwrap();
        let both = outbox.queued();
        assert!(both > 1000, "{both}");
        // Once at the limit, a reply waits too.
        assert!(matches!(
            outbox.push(&Route::Reply { request_id: 10 }, &message),
            Err(RpcError::OutboxFull { .. })
        ));
    }

    #[test]
    fn a_frame_larger_than_the_limit_goes_while_the_outbox_is_below_it() {
        let outbox = outbox(1000);
        let route = Route::OneWay {
            endpoint: "sink".into(),
        };
        let message = |len: usize| Message::Custom {
            tag: 1,
            body: bytes::Bytes::from(vec![7u8; len]),
        };
        assert!(outbox.push(&route, &message(600)).unwrap());
        let first = outbox.queued();
        // Would fit an empty outbox, not this one: refused, and taken back out.
        assert!(matches!(
            outbox.push(&route, &message(600)),
            Err(RpcError::OutboxFull { .. })
        ));
        assert_eq!(outbox.queued(), first);
        // Could never fit: accepted while less than the limit is queued...
        assert!(!outbox.push(&route, &message(1200)).unwrap());
        let both = outbox.queued();
        assert!(both > 1000 && both < 1000 + 1200 + 200, "{both}");
        // ...and not past it.
        assert!(matches!(
            outbox.push(&route, &message(1200)),
            Err(RpcError::OutboxFull { .. })
        ));
        let taken = outbox.take().unwrap();
        assert_eq!(taken.len(), both, "nothing of the refused frames is left");
    }

    #[test]
    fn a_written_buffer_is_filled_again_instead_of_a_fresh_one() {
        let outbox = outbox(1 << 20);
        let route = Route::Reply { request_id: 1 };
        let round = |recycle: bool| {
            outbox.push(&route, &Message::Empty).unwrap();
            let taken = outbox.take().unwrap();
            outbox.written(taken.len());
            let at = taken.as_ptr();
            if recycle {
                outbox.recycle(taken);
            }
            at
        };
        // Each take leaves the senders the buffer handed back before it: with two
        // buffers in turn, steady state allocates nothing.
        let first = round(true);
        let second = round(true);
        assert_ne!(first, second);
        assert_eq!(round(true), first);
        assert_eq!(round(true), second);
        assert_eq!(round(true), first);
        // One not handed back is not waited for.
        assert_eq!(round(false), second);
        assert_eq!(round(true), first);
    }

    #[test]
    fn a_buffer_grown_past_the_spare_bound_is_not_kept() {
        let outbox = outbox(8 << 20);
        let route = Route::Reply { request_id: 1 };
        let large = Message::Custom {
            tag: 1,
            body: bytes::Bytes::from(vec![7u8; 2 * MAX_SPARE_CAPACITY]),
        };
        outbox.push(&route, &large).unwrap();
        let taken = outbox.take().unwrap();
        let large_at = taken.as_ptr();
        outbox.written(taken.len());
        outbox.recycle(taken);
        outbox.push(&route, &Message::Empty).unwrap();
        // The buffer after the large one was fresh; the one after it is not the large one.
        let next = outbox.take().unwrap();
        outbox.written(next.len());
        outbox.recycle(next);
        outbox.push(&route, &Message::Empty).unwrap();
        let after = outbox.take().unwrap();
        assert_ne!(after.as_ptr(), large_at);
        assert!(after.len() < MAX_SPARE_CAPACITY);
    }

    /// Sealing follows the outbox's order: frames queued in clear before the keys are
    /// sealed first, a frame refused for want of room takes no number, and the peer opens
    /// every frame that was accepted, in order.
    #[test]
    fn frames_are_sealed_in_outbox_order_and_a_refused_one_takes_no_number() {
        use crate::crypto::SessionKeys;
        let keys = SessionKeys::derive(b"k", &[1; 32], &[2; 32]);
        let (sealer, _) = keys.session(true);
        let (_, opener) = keys.session(false);
        let outbox = outbox(1000);
        let route = Route::OneWay {
            endpoint: "sink".into(),
        };
        let message = |tag: u32, len: usize| Message::Custom {
            tag,
            body: bytes::Bytes::from(vec![0x5A; len]),
        };
        outbox.push(&route, &message(0, 10)).unwrap();
        let clear = outbox.queued();
        outbox.start_sealing(sealer);
        assert_eq!(outbox.queued(), clear + TAG_LEN, "the tag is counted");
        outbox.push(&route, &message(1, 600)).unwrap();
        assert!(matches!(
            outbox.push(&route, &message(2, 600)),
            Err(RpcError::OutboxFull { .. })
        ));
        let mut wire = outbox.take().unwrap();
        assert_eq!(wire.len(), outbox.queued());
        outbox.written(wire.len());
        outbox.push(&route, &message(3, 10)).unwrap();
        wire.extend_from_slice(&outbox.take().unwrap());
        assert!(
            !wire.windows(16).any(|w| w == [0x5A; 16]),
            "a body went out in clear"
        );
        let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
        decoder.set_opener(Box::new(opener));
        decoder.feed(&wire).unwrap();
        let mut tags = Vec::new();
        while let Some(frame) = decoder.next_frame().unwrap() {
            let flint_wire::ArchivedMessage::Custom { tag, .. } =
                &frame.envelope().unwrap().message
            else {
                panic!("not a Custom frame");
            };
            tags.push(tag.to_native());
        }
        assert_eq!(tags, [0, 1, 3]);
        // Closed, it gives its sealer up for a last frame, numbered on.
        assert!(outbox.take_sealer().is_none(), "not while open");
        outbox.close_between_frames("done");
        assert!(outbox.take_sealer().is_some());
    }

    /// Closed for good, an outbox holds no session keys, whoever still holds it.
    #[test]
    fn an_outbox_closed_for_good_keeps_no_keys() {
        use crate::crypto::SessionKeys;
        let keys = SessionKeys::derive(b"k", &[1; 32], &[2; 32]);
        let (sealer, _) = keys.session(true);
        let outbox = outbox(1000);
        outbox.start_sealing(sealer);
        outbox.close_between_frames("done");
        assert!(
            outbox.take_sealer().is_some(),
            "a plain close keeps it for the last frame"
        );
        let outbox = self::outbox(1000);
        let (sealer, _) = keys.session(true);
        outbox.start_sealing(sealer);
        outbox.close_for_good("done");
        assert!(outbox.is_closed());
        assert!(outbox.take_sealer().is_none());
    }

    /// A connected pair of sockets on loopback: the outbox's end, and the peer's.
    fn socket_pair() -> (TcpStream, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (theirs, _) = listener.accept().unwrap();
        (ours, theirs)
    }

    fn read_exactly(peer: &mut TcpStream, n: usize) -> Vec<u8> {
        use std::io::Read;
        peer.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut bytes = vec![0u8; n];
        peer.read_exact(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn write_through_writes_from_the_caller_only_with_nothing_in_flight() {
        let outbox = outbox(1 << 20);
        let (ours, mut theirs) = socket_pair();
        let loops_socket = ours.try_clone().unwrap();
        let route = Route::Reply { request_id: 1 };
        let frame = |tag| {
            let mut out = BytesMut::new();
            let message = Message::Custom {
                tag,
                body: bytes::Bytes::from(vec![tag as u8; 100]),
            };
            Encoder::new(1 << 20)
                .encode(&route, &message, &mut out)
                .unwrap();
            (message, out)
        };
        let (first, first_bytes) = frame(1);
        let (second, second_bytes) = frame(2);

        // No socket yet (not connected, or not authenticated): the loop writes.
        assert!(outbox.push(&route, &first).unwrap());
        assert!(!outbox.write_through());
        outbox.attach_socket(ours);

        // The loop took the first frame and has not written it: the second must not
        // overtake it, so it is left to the loop too.
        let taken = outbox.take().unwrap();
        assert_eq!(taken, first_bytes);
        assert!(outbox.push(&route, &second).unwrap());
        assert!(!outbox.write_through());
        assert_eq!(outbox.queued(), first_bytes.len() + second_bytes.len());

        // Once the loop has written its bytes, the caller writes the rest itself.
        (&loops_socket).write_all(&taken).unwrap();
        outbox.written(taken.len());
        assert!(outbox.write_through());
        assert_eq!(outbox.queued(), 0);
        let arrived = read_exactly(&mut theirs, first_bytes.len() + second_bytes.len());
        assert_eq!(arrived, [&first_bytes[..], &second_bytes[..]].concat());

        // Nothing waits for the loop: the next push must tell it (or write through).
        assert!(outbox.push(&route, &first).unwrap());
        assert!(outbox.write_through());
        assert_eq!(read_exactly(&mut theirs, first_bytes.len()), first_bytes);
    }

    #[test]
    fn write_through_leaves_what_the_socket_does_not_take_to_the_loop() {
        let outbox = Outbox::new(
            3,
            OutboxKind::Incoming,
            "127.0.0.1:1".parse().unwrap(),
            64 << 20,
            64 << 20,
        );
        let (ours, mut theirs) = socket_pair();
        ours.set_nonblocking(true).unwrap();
        // Small kernel buffers (set, they are no longer tuned up): 16 MiB cannot fit.
        socket2::SockRef::from(&ours)
            .set_send_buffer_size(64 << 10)
            .unwrap();
        socket2::SockRef::from(&theirs)
            .set_recv_buffer_size(64 << 10)
            .unwrap();
        outbox.attach_socket(ours);
        let route = Route::Reply { request_id: 1 };
        // More than the socket buffers hold while the peer reads nothing.
        let big = Message::Custom {
            tag: 9,
            body: bytes::Bytes::from(vec![9u8; 16 << 20]),
        };
        assert!(outbox.push(&route, &big).unwrap());
        let total = outbox.queued();
        assert!(
            !outbox.write_through(),
            "the socket cannot take 16 MiB at once"
        );
        let left = outbox.queued();
        assert!(left > 0 && left < total, "{left} of {total} left");
        // The loop takes exactly the rest, after what went out.
        let rest = outbox.take().unwrap();
        assert_eq!(rest.len(), left);
        let sent = read_exactly(&mut theirs, total - left);
        let mut frame = BytesMut::new();
        Encoder::new(64 << 20)
            .encode(&route, &big, &mut frame)
            .unwrap();
        assert_eq!(&sent[..], &frame[..total - left]);
        assert_eq!(&rest[..], &frame[total - left..]);
    }

    #[test]
    fn a_closed_outbox_lets_go_of_its_socket() {
        let outbox = outbox(1 << 20);
        let (ours, theirs) = socket_pair();
        outbox.attach_socket(ours);
        outbox.close_between_frames("gone");
        // Its descriptor was the only one: the peer sees the end of the stream.
        assert!(read_to_end(theirs).is_empty());
        outbox.attach_socket(socket_pair().0);
        assert!(!outbox.write_through(), "a closed outbox takes no socket");
    }

    fn read_to_end(mut peer: TcpStream) -> Vec<u8> {
        use std::io::Read;
        peer.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut bytes = Vec::new();
        peer.read_to_end(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_closed_outbox_refuses() {
        let outbox = outbox(100);
        outbox.close_between_frames("connection reset by peer");
        let error = outbox
            .push(&Route::Reply { request_id: 1 }, &Message::Empty)
            .unwrap_err();
        assert!(
            matches!(&error, RpcError::Disconnected { reason, .. } if reason == "connection reset by peer"),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "connection to 127.0.0.1:1 closed: connection reset by peer"
        );
    }
}

/// A model of a non-blocking socket for the loom model: it takes at most a few bytes per
/// write (so that write-throughs are partial), and keeps everything written, in order.
#[cfg(loom)]
mod loom_socket {
    use loom::sync::{Arc, Mutex};

    /// The bytes "on the wire", shared by every handle.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Socket {
        pub(crate) wire: Arc<Mutex<Vec<u8>>>,
    }

    /// The most bytes one write takes.
    pub(crate) const WRITE_LIMIT: usize = 96;

    impl std::io::Write for &Socket {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf.len().min(WRITE_LIMIT);
            self.wire.lock().unwrap().extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use flint_wire::{ArchivedMessage, FrameDecoder};
    use loom::sync::Arc;

    /// The tags of the `Custom` frames on the wire, in order.
    fn tags_on(wire: &[u8]) -> Vec<u32> {
        let mut decoder = FrameDecoder::new(1 << 20);
        decoder.feed(wire).unwrap();
        let mut tags = Vec::new();
        while let Some(frame) = decoder.next_frame().unwrap() {
            if let ArchivedMessage::Custom { tag, .. } = &frame.envelope().unwrap().message {
                tags.push(tag.to_native());
            }
        }
        assert_eq!(decoder.buffered(), 0, "a frame was cut short on the wire");
        tags
    }

    /// What the loop does when told: takes what is queued, writes all of it, accounts
    /// for it.
    fn loop_flush(outbox: &Outbox, socket: &Socket) {
        if let Some(bytes) = outbox.take() {
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let n = (&*socket).write(rest).unwrap();
                outbox.written(n);
                rest = &rest[n..];
            }
        }
    }

    /// Two senders each push two frames and flush as an ask does (write-through, else
    /// tell the loop), while the loop flushes once whenever it likes; after the senders
    /// are done the loop flushes for every time it was told. Every frame must reach the
    /// wire once, each sender's in its order, and nothing may be left queued: a frame is
    /// never written ahead of bytes the loop has in flight, nor stranded with nobody
    /// responsible for it.
    #[test]
    fn loom_write_through_keeps_order_and_strands_nothing() {
        // Three preemptions: a sender overtaking bytes the loop has taken but not yet
        // written needs the loop stopped between its take and its write.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let socket = Socket::default();
            let outbox = Arc::new(Outbox::new(
                1,
                OutboxKind::Outgoing("127.0.0.1:1".parse().unwrap()),
                "127.0.0.1:1".parse().unwrap(),
                1 << 20,
                1 << 20,
            ));
            outbox.attach_socket(socket.clone());
            let told = Arc::new(AtomicUsize::new(0));
            let senders: Vec<_> = (0..2u32)
                .map(|sender| {
                    let (outbox, told) = (outbox.clone(), told.clone());
                    loom::thread::spawn(move || {
                        for seq in 0..2u32 {
                            let message = Message::Custom {
                                tag: sender * 10 + seq,
                                body: bytes::Bytes::from_static(&[7; 40]),
                            };
                            let route = Route::Reply { request_id: 1 };
                            if outbox.push(&route, &message).unwrap() && !outbox.write_through() {
                                told.fetch_add(1, Ordering::AcqRel);
                            }
                        }
                    })
                })
                .collect();
            // The loop, woken by anything, flushes while the senders work.
            loop_flush(&outbox, &socket);
            for sender in senders {
                sender.join().unwrap();
            }
            for _ in 0..told.load(Ordering::Acquire) {
                loop_flush(&outbox, &socket);
            }
            let (left_len, left_tags) = {
                let state = outbox.lock();
                (state.buf.len(), tags_on(&state.buf))
            };
            assert_eq!(
                outbox.queued(),
                0,
                "a frame was stranded: {} bytes in the buffer {:?}, flush requested: {}, told {}",
                left_len,
                left_tags,
                outbox.flush_requested.load(Ordering::Acquire),
                told.load(Ordering::Acquire)
            );
            let tags = tags_on(&socket.wire.lock().unwrap());
            let of = |sender: u32| -> Vec<u32> {
                tags.iter().copied().filter(|t| t / 10 == sender).collect()
            };
            assert_eq!(of(0), [0, 1], "{tags:?}");
            assert_eq!(of(1), [10, 11], "{tags:?}");
        });
    }
}
