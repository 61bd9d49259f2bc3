//! The event loop: sockets, dispatch to endpoints, timers, ask expiry, in turns that
//! whichever thread holds it takes (see `turns`).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use flint_wire::{
    ArchivedEnvelope, ArchivedMessage, ArchivedRoute, Encoder, Frame, FrameDecoder, Message,
    MessageKind, Route, SharedStr, MAX_REFUSAL_TEXT, MAX_SIZE_KEY,
};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use rustc_hash::FxHashMap;
use tracing::{debug, error, info, warn};

use crate::ask::{PendingAsk, Reply};
use crate::auth::{
    is_handshake, random_nonce, AuthError, Handshake, Step, HANDSHAKE_LIMIT_NAME,
    HANDSHAKE_MAX_PAYLOAD,
};
use crate::endpoint::{Endpoint, EndpointContext, Incoming};
use crate::error::RpcError;
use crate::log_budget::{LogBudget, Spend};
use crate::outbox::{ConnKey, Outbox, OutboxKind};
use crate::receive_budget::{ReceiveBudget, UNBUDGETED_FRAME};
use crate::refs::RpcEnvHandle;
use crate::settings::Settings;
use crate::shared::{AskCompletion, Command, Shared, LOCAL_KEY};
use crate::timer::{deadline_after, TimerQueue};

/// Token of the waker that other threads use.
pub(crate) const WAKER: Token = Token(0);
const LISTENER: Token = Token(1);
/// Most buffers handed to one `writev`.
const MAX_IOVECS: usize = 64;
/// Bytes one connection may have read and handled per wake-up of the loop (give or take
/// the last read). A peer whose socket never runs dry (it writes faster than the loop
/// takes its frames in) would otherwise keep the loop reading it forever, and every other
/// peer, timer and ask with it. What is left is read at the next wake-up, which comes at
/// once.
const READ_BUDGET: usize = 256 << 10;
/// The most often a refused connection (`rpc.io.maxConnections`), or a failed accept, is
/// a warning.
const WARNING_EVERY: Duration = Duration::from_secs(60);

/// How long after a failed `accept` (out of descriptors, say) the loop tries again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The slowest a frame may arrive, on average, once `network.timeout` has passed since
/// its first bytes: by any moment, each second past `network.timeout` must have brought
/// a MiB of it. Without it, a peer that sends a byte now and then, never stalling for
/// `network.timeout`, would hold its connection (one of `rpc.io.maxConnections`) for
/// good, and a large frame's reservation in the receive budget with it; with it, holding
/// a frame open longer than `network.timeout` costs a peer the bandwidth of sending it.
/// 1 MiB/s is 8 Mbit/s, slower than any link a cluster's control plane runs on. The loop
/// reads a connection [`READ_BUDGET`] at a time, and turns again at once while one has
/// more, so only a loop that managed fewer than four turns a second would fall below it
/// itself, and a peer whose bytes wait unread is read before it is held to it. A loop
/// that stalls for longer than `network.timeout` (an endpoint that blocks it) can still
/// cut off peers with frames under way, as their asks and heartbeats would time out.
const MIN_FRAME_RATE: u64 = 1 << 20;

/// The time a byte of a frame buys at [`MIN_FRAME_RATE`], in nanoseconds (10^9 / 2^20,
/// rounded up).
const NANOS_PER_BYTE: u64 = 1_000_000_000_u64.div_ceil(MIN_FRAME_RATE);

/// When the frame under way on a connection started to arrive, and when it is too slow
/// unless more of it has come by then.
#[derive(Debug, Clone, Copy)]
struct FrameClock {
    started: Instant,
    due: Instant,
}

impl FrameClock {
    /// The clock of a frame whose first bytes came at `started` and of which `received`
    /// bytes are in: `network.timeout` after its start, plus the time those bytes buy.
    fn new(started: Instant, settings: &Settings, received: usize) -> Self {
        let earned = Duration::from_nanos((received as u64).saturating_mul(NANOS_PER_BYTE));
        FrameClock {
            started,
            due: deadline_after(
                started,
                settings.stalled_frame_timeout.saturating_add(earned),
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Connecting { deadline: Instant },
    Open,
}

struct Connection {
    stream: TcpStream,
    outbox: Arc<Outbox>,
    decoder: FrameDecoder,
    /// Bytes taken from the outbox (or handshake frames), in order, the first one
    /// possibly part-written.
    writing: VecDeque<BytesMut>,
    peer: SocketAddr,
    state: ConnState,
    /// Present while the peer has not yet proved it knows the secret.
    handshake: Option<Handshake>,
    /// When the handshake must be done by (authenticate.timeout), while it is under way.
    handshake_deadline: Option<Instant>,
    /// When the peer must have sent more by (network.timeout), while part of a frame is
    /// buffered: a peer that stops in the middle of a frame would otherwise hold what it
    /// sent, up to `rpc.message.maxSize`, for as long as it keeps the connection open.
    frame_deadline: Option<Instant>,
    /// When a connection from a peer must have sent something, or taken something it was
    /// sent, by (rpc.io.idleTimeout), moved on by every read and every write that made
    /// progress; `None` for connections this environment opened, and when silent peers
    /// are kept. Without it, peers that connect and say nothing would hold
    /// all of `rpc.io.maxConnections`.
    idle_deadline: Option<Instant>,
    /// Bytes of the receive budget held for the large frame under way (0: none).
    reserved: usize,
    /// When the frame under way must be in by, however steadily it comes (see
    /// [`MIN_FRAME_RATE`]); `None` between frames.
    frame_clock: Option<FrameClock>,
    /// The next frame is large and the receive budget has no room for it: the
    /// connection is not read until the budget admits it. Its peer is held only to the
    /// stalled-frame deadline meanwhile, and only if it has sent nothing more (see
    /// `EventLoop::waiting_peer_sent_more`): the wait is not its doing.
    awaiting_budget: bool,
    /// Whether endpoints were told of this connection (and so must hear of its end).
    announced: bool,
    /// The loop's wake-up in which this connection was last read, and the bytes read in
    /// it: at most [`READ_BUDGET`] per wake-up.
    read_round: u64,
    read_in_round: usize,
    /// The poller reported the peer's end of stream (or an error). No further event may
    /// come, so reads go on until the socket says so instead of stopping at a short read.
    peer_closed: bool,
}

impl Connection {
    /// A connection that has sent and received nothing yet, and is not authenticating.
    fn new(
        stream: TcpStream,
        outbox: Arc<Outbox>,
        peer: SocketAddr,
        state: ConnState,
        max_payload: usize,
    ) -> Self {
        Connection {
            stream,
            outbox,
            decoder: FrameDecoder::new(max_payload),
            writing: VecDeque::new(),
            peer,
            state,
            handshake: None,
            handshake_deadline: None,
            frame_deadline: None,
            idle_deadline: None,
            reserved: 0,
            frame_clock: None,
            awaiting_budget: false,
            announced: false,
            read_round: 0,
            read_in_round: 0,
            peer_closed: false,
        }
    }

    /// Starts authenticating the peer, to be done by `deadline`: until then only frames of
    /// handshake size are taken from it.
    fn start_handshake(&mut self, handshake: Handshake, deadline: Instant) {
        self.decoder
            .set_max_payload(HANDSHAKE_MAX_PAYLOAD, HANDSHAKE_LIMIT_NAME);
        self.handshake = Some(handshake);
        self.handshake_deadline = Some(deadline);
    }

    /// The peer proved it knows the secret: frames of up to `max_payload` bytes
    /// (`rpc.message.maxSize`) from now on.
    fn end_handshake(&mut self, max_payload: usize) {
        self.handshake = None;
        self.handshake_deadline = None;
        self.decoder.set_max_payload(max_payload, MAX_SIZE_KEY);
    }

    /// Bytes came from the peer, or it took some it was sent, at `now`: a connection from
    /// a peer is not idle before `now` + `idle_timeout` (rpc.io.idleTimeout).
    fn moved_at(&mut self, now: Instant, idle_timeout: Option<Duration>) {
        if let (Some(deadline), Some(timeout)) = (self.idle_deadline.as_mut(), idle_timeout) {
            *deadline = deadline_after(now, timeout);
        }
    }

    /// Whether all of the pending frame's bytes are in, buffered or unread in the kernel:
    /// a peer whose stream ended (its end comes after all it sent) may still have sent a
    /// whole frame, which must arrive.
    fn pending_frame_is_all_here(&self) -> bool {
        let Some(frame_len) = self.decoder.pending_frame_len() else {
            return true;
        };
        // Should the kernel not say, the frame's deadline decides instead.
        let Ok(unread) = rustix::io::ioctl_fionread(&self.stream) else {
            return true;
        };
        self.decoder.buffered().saturating_add(unread as usize) >= frame_len
    }

    /// When the connection must have got further by: connected, authenticated, sent more
    /// of the frame under way (fast enough, see [`MIN_FRAME_RATE`]), or sent anything at
    /// all. A connection waiting for the receive budget is not read: its only reading
    /// deadline is the frame's, at which the loop looks whether its peer sent more
    /// meanwhile.
    fn deadline(&self) -> Option<Instant> {
        match self.state {
            ConnState::Connecting { deadline } => Some(deadline),
            ConnState::Open if self.awaiting_budget => {
                [self.handshake_deadline, self.frame_deadline]
                    .into_iter()
                    .flatten()
                    .min()
            }
            ConnState::Open => [
                self.handshake_deadline,
                self.frame_deadline,
                self.frame_clock.map(|clock| clock.due),
                self.idle_deadline,
            ]
            .into_iter()
            .flatten()
            .min(),
        }
    }

    /// Why the connection must be closed at `now`, if one of its deadlines has passed.
    fn overdue(&self, now: Instant, settings: &Settings) -> Option<CloseReason> {
        let passed = |deadline: Option<Instant>| deadline.is_some_and(|d| d <= now);
        match self.state {
            ConnState::Connecting { deadline } => {
                (deadline <= now).then_some(CloseReason::ConnectTimeout(settings.connect_timeout))
            }
            ConnState::Open if passed(self.handshake_deadline) => {
                Some(CloseReason::AuthTimeout(settings.auth_timeout))
            }
            ConnState::Open if self.awaiting_budget && !passed(self.frame_deadline) => None,
            ConnState::Open if passed(self.frame_deadline) => Some(CloseReason::StalledFrame {
                timeout: settings.stalled_frame_timeout,
                buffered: self.decoder.buffered(),
            }),
            ConnState::Open if passed(self.frame_clock.map(|clock| clock.due)) => {
                Some(CloseReason::SlowFrame {
                    frame_len: self.decoder.pending_frame_len(),
                    buffered: self.decoder.buffered(),
                })
            }
            ConnState::Open if passed(self.idle_deadline) => {
                settings.idle_timeout.map(CloseReason::Idle)
            }
            ConnState::Open => None,
        }
    }
}

/// Whether `accept` failed for the pending connection's own sake (the errors accept(2)
/// says to treat like EAGAIN and retry at once), not for want of descriptors or memory,
/// or because the listener itself is broken, which retrying at once would not cure.
fn failed_for_the_connection(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(
            libc::ECONNABORTED
                | libc::EPROTO
                | libc::EPERM
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
        )
    )
}

/// Lowers `floor` to `deadline`, a connection's new deadline (if any).
fn lower_floor(floor: &mut Option<Instant>, deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        *floor = Some(floor.map_or(deadline, |f| f.min(deadline)));
    }
}

/// Events one poll returns at most.
const POLL_EVENTS: usize = 1024;

#[cfg(not(test))]
fn poll_events() -> usize {
    POLL_EVENTS
}

#[cfg(test)]
thread_local! {
    /// The poll's event capacity for loops made on this thread in a unit test: fewer, to
    /// reach what happens when more sockets are ready than one poll returns.
    static TEST_POLL_EVENTS: std::cell::Cell<usize> = const { std::cell::Cell::new(POLL_EVENTS) };
}

#[cfg(test)]
fn poll_events() -> usize {
    TEST_POLL_EVENTS.with(std::cell::Cell::get)
}

/// Why a connection is being closed: decides the log level and what pending asks see.
enum CloseReason {
    EndOfStream,
    Io(io::Error),
    Wire(flint_wire::WireError),
    Auth(AuthError),
    ConnectFailed(io::Error),
    ConnectTimeout(Duration),
    AuthTimeout(Duration),
    /// Nothing arrived for the timeout while `buffered` bytes of a frame were in.
    StalledFrame {
        timeout: Duration,
        buffered: usize,
    },
    /// A frame came slower than [`MIN_FRAME_RATE`] after its first `network.timeout`;
    /// its length, if its header was in.
    SlowFrame {
        frame_len: Option<usize>,
        buffered: usize,
    },
    /// A peer's connection sent nothing at all for the timeout (rpc.io.idleTimeout).
    Idle(Duration),
    /// The peer closed the connection, saying why in a [`Message::Refused`].
    Refused(String),
    Stopping,
}

impl CloseReason {
    /// Whether the connection closes for something the peer did (or did not do), which
    /// it is told of with a [`Message::Refused`]: not when the peer itself closed or
    /// refused, nor when this environment stops.
    fn tells_peer(&self) -> bool {
        matches!(
            self,
            CloseReason::Wire(_)
                | CloseReason::Auth(_)
                | CloseReason::AuthTimeout(_)
                | CloseReason::StalledFrame { .. }
                | CloseReason::SlowFrame { .. }
                | CloseReason::Idle(_)
        )
    }

    fn ask_error(&self, peer: SocketAddr) -> RpcError {
        match self {
            CloseReason::ConnectFailed(e) => RpcError::Connect {
                peer,
                source: io::Error::new(e.kind(), e.to_string()),
            },
            CloseReason::ConnectTimeout(timeout) => RpcError::ConnectTimeout {
                peer,
                timeout: *timeout,
            },
            CloseReason::Stopping => RpcError::Stopped,
            _ => RpcError::Disconnected {
                peer,
                reason: self.to_string(),
            },
        }
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloseReason::EndOfStream => f.write_str("end of stream"),
            CloseReason::Io(e) => write!(f, "{e}"),
            CloseReason::Wire(e) => write!(f, "{e}"),
            CloseReason::Auth(e) => write!(f, "{e}"),
            CloseReason::ConnectFailed(e) => write!(f, "connect failed: {e}"),
            CloseReason::ConnectTimeout(t) => write!(f, "connect timed out after {t:?}"),
            CloseReason::AuthTimeout(t) => write!(
                f,
                "authentication did not finish within {t:?}; the timeout is set by \
                 authenticate.timeout"
            ),
            CloseReason::StalledFrame { timeout, buffered } => write!(
                f,
                "the peer sent nothing for {timeout:?} in the middle of a frame ({buffered} \
                 bytes of it in); the timeout is set by network.timeout"
            ),
            CloseReason::SlowFrame {
                frame_len,
                buffered,
            } => {
                match frame_len {
                    Some(len) => write!(f, "a frame of {len} bytes arrived too slowly")?,
                    None => f.write_str("a frame arrived too slowly")?,
                }
                write!(
                    f,
                    " ({buffered} bytes of it in): from network.timeout after its first bytes \
                     (or after rpc.io.maxReceiveBytes let it in), a frame must come at 1 MiB/s \
                     at least"
                )
            }
            CloseReason::Refused(reason) => {
                write!(f, "the peer closed the connection, saying: {reason}")
            }
            CloseReason::Idle(timeout) => write!(
                f,
                "the peer sent nothing for {timeout:?}; the timeout is set by \
                 rpc.io.idleTimeout (when not set, twice network.timeout or the ask \
                 timeout, whichever is longer)"
            ),
            CloseReason::Stopping => f.write_str("the RPC environment is stopping"),
        }
    }
}

/// Endpoints and their timers: everything a handler call touches.
struct Endpoints {
    env: RpcEnvHandle,
    slots: Vec<Option<Box<dyn Endpoint>>>,
    names: Vec<SharedStr>,
    by_name: FxHashMap<SharedStr, usize>,
    timers: TimerQueue<usize>,
    /// Endpoints that received a message since their last `on_batch_end`, and a flag per
    /// slot so that each is listed once.
    in_batch: Vec<usize>,
    batch_flags: Vec<bool>,
    /// Lines about messages to endpoints that are not here.
    unrouted_warnings: LogBudget,
}

impl Endpoints {
    /// Runs `call` on endpoint `index`, isolating a panic: the endpoint is stopped and the
    /// loop goes on.
    fn call(
        &mut self,
        index: usize,
        now: Instant,
        call: impl FnOnce(&mut dyn Endpoint, &mut EndpointContext<'_>),
    ) -> bool {
        let Some(endpoint) = self.slots.get_mut(index).and_then(|slot| slot.as_mut()) else {
            return false;
        };
        let mut stop = false;
        let mut ctx = EndpointContext {
            env: &self.env,
            timers: &mut self.timers,
            me: index,
            name: &self.names[index],
            now,
            stop_me: &mut stop,
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| call(endpoint.as_mut(), &mut ctx)));
        if outcome.is_err() {
            error!(endpoint = %self.names[index], "endpoint panicked; stopping it");
            stop = true;
        }
        if stop {
            self.stop(index);
        }
        outcome.is_ok()
    }

    fn stop(&mut self, index: usize) {
        if let Some(mut endpoint) = self.slots.get_mut(index).and_then(Option::take) {
            let name = self.names[index].clone();
            self.by_name.remove(&name);
            self.timers.cancel_target(|&target| target == index);
            if catch_unwind(AssertUnwindSafe(|| endpoint.on_stop())).is_err() {
                error!(endpoint = %name, "endpoint panicked in on_stop");
            }
        }
    }

    fn register(
        &mut self,
        name: SharedStr,
        endpoint: Box<dyn Endpoint>,
        now: Instant,
    ) -> Result<(), RpcError> {
        if self.by_name.contains_key(&name) {
            return Err(RpcError::EndpointExists(name.to_string()));
        }
        let index = self.slots.len();
        self.slots.push(Some(endpoint));
        self.batch_flags.push(false);
        self.names.push(name.clone());
        self.by_name.insert(name, index);
        self.call(index, now, |endpoint, ctx| endpoint.on_start(ctx));
        Ok(())
    }

    /// Calls `on_batch_end` on every endpoint that received a message since its last
    /// call; false if there was none.
    fn end_batch(&mut self, now: Instant) -> bool {
        if self.in_batch.is_empty() {
            return false;
        }
        let mut batch = std::mem::take(&mut self.in_batch);
        for &index in &batch {
            self.batch_flags[index] = false;
            self.call(index, now, |endpoint, ctx| endpoint.on_batch_end(ctx));
        }
        batch.clear();
        if self.in_batch.is_empty() {
            self.in_batch = batch;
        }
        true
    }

    fn each(
        &mut self,
        now: Instant,
        mut call: impl FnMut(&mut dyn Endpoint, &mut EndpointContext<'_>),
    ) {
        for index in 0..self.slots.len() {
            self.call(index, now, &mut call);
        }
    }

    /// Hands a routed message to its endpoint; an ask to a missing endpoint is answered
    /// with an error.
    fn deliver(&mut self, incoming: Incoming<'_>, endpoint: &str, now: Instant) {
        match self.by_name.get(endpoint) {
            Some(&index) => {
                let request = incoming.reply_handle();
                if !self.batch_flags[index] {
                    self.batch_flags[index] = true;
                    self.in_batch.push(index);
                }
                let delivered =
                    self.call(index, now, |endpoint, ctx| endpoint.receive(ctx, incoming));
                if !delivered {
                    if let Some(request) = request {
                        let _ = request.fail(format!(
                            "endpoint {endpoint} failed while handling the request"
                        ));
                    }
                }
            }
            None => {
                // The name is the peer's, up to rpc.message.maxSize: it goes into a log
                // line per message and into the error reply, so it is cut short.
                let error = RpcError::EndpointNotFound(shortened(endpoint, NAME_SHOWN));
                if incoming.is_ask() {
                    let _ = incoming.reply_error(error.to_string());
                } else {
                    crate::peer_warn!(
                        self.unrouted_warnings,
                        now,
                        sender = ?incoming.sender(),
                        "dropping a message: {error}"
                    );
                }
            }
        }
    }
}

/// How much of a peer's unknown endpoint name is shown, in bytes.
const NAME_SHOWN: usize = 128;

/// `text`, cut to at most `limit` bytes (on a character boundary) with "..." after it.
fn shortened(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// The loop: owns the poller, the listener, the connections and the endpoints.
pub(crate) struct EventLoop {
    poll: Poll,
    /// `None` for an environment that does not listen ([`crate::RpcEnv::client`]).
    listener: Option<TcpListener>,
    shared: Arc<Shared>,
    connections: FxHashMap<ConnKey, Connection>,
    /// Connections from peers open now, at most `rpc.io.maxConnections`.
    incoming: usize,
    /// Warnings of refused connections: one a minute, however many peers knock, with
    /// the number refused since the last.
    refusal_warnings: LogBudget,
    /// Lines about connections closed for what their peer did (or failed to do).
    close_warnings: LogBudget,
    /// When to try `accept` again after it failed (out of descriptors, say): the
    /// listener is edge-triggered, so connections left in its backlog raise no event.
    accept_retry_at: Option<Instant>,
    /// Warnings of failed accepts: one a minute, with the number failed since the last.
    accept_failure_warnings: LogBudget,
    endpoints: Endpoints,
    local_decoder: FrameDecoder,
    /// Encodes handshake frames, which bypass the outbox.
    control: Encoder,
    commands: Vec<Command>,
    ended_asks: Vec<PendingAsk<AskCompletion, ConnKey>>,
    /// Connections that used up their [`READ_BUDGET`] with bytes still to read: read
    /// again at the next wake-up, which comes at once.
    unfinished_reads: Vec<ConnKey>,
    /// Bytes held by large frames under way, across connections (rpc.io.maxReceiveBytes).
    receive_budget: ReceiveBudget,
    /// Room for the connections the receive budget admits, kept between calls.
    admitted: Vec<(ConnKey, usize)>,
    /// Room for [`EventLoop::flush_queued`]'s list, kept between calls.
    queued_keys: Vec<ConnKey>,
    /// The previous wake-up's `unfinished_reads`, being read (kept to reuse its memory).
    resumed_reads: Vec<ConnKey>,
    /// Counts the loop's wake-ups, for the read budget.
    round: u64,
    stopping: bool,
    /// The time of the current wake-up, read once when `poll` returns: every message of a
    /// batch is handled as of it, so that the hot path reads no clock per message.
    now: Instant,
    /// The poller's events, kept for every turn, whichever thread turns.
    events: Events,
    /// When the loop must next turn even without an event, as of its last turn that
    /// worked.
    next_deadline: Option<Instant>,
    /// No connection's deadline is earlier than this (`None`: none has one). Every
    /// deadline set lowers it; a turn that reaches it looks at every connection and
    /// sets it to their earliest deadline. So a turn costs the same with one connection
    /// or ten thousand, as long as none is due.
    conn_deadline_floor: Option<Instant>,
}

/// What a turn of the loop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Nothing was ready and nothing was due.
    Idle,
    /// It handled events, timers or commands.
    Worked,
    /// The environment is stopping: the loop thread shuts it down.
    Stopping,
}

impl EventLoop {
    pub(crate) fn new(
        poll: Poll,
        mut listener: Option<TcpListener>,
        shared: Arc<Shared>,
    ) -> io::Result<Self> {
        if let Some(listener) = &mut listener {
            poll.registry()
                .register(listener, LISTENER, Interest::READABLE)?;
        }
        let max_payload = shared.settings.max_payload;
        let max_receive_bytes = shared.settings.max_receive_bytes;
        Ok(EventLoop {
            poll,
            listener,
            endpoints: Endpoints {
                env: RpcEnvHandle {
                    shared: shared.clone(),
                },
                slots: Vec::new(),
                names: Vec::new(),
                by_name: FxHashMap::default(),
                timers: TimerQueue::new(),
                in_batch: Vec::new(),
                batch_flags: Vec::new(),
                unrouted_warnings: LogBudget::default(),
            },
            shared,
            connections: FxHashMap::default(),
            incoming: 0,
            refusal_warnings: LogBudget::new(1, WARNING_EVERY),
            close_warnings: LogBudget::default(),
            accept_retry_at: None,
            accept_failure_warnings: LogBudget::new(1, WARNING_EVERY),
            local_decoder: FrameDecoder::new(max_payload),
            control: Encoder::new(max_payload),
            commands: Vec::new(),
            ended_asks: Vec::new(),
            unfinished_reads: Vec::new(),
            receive_budget: ReceiveBudget::new(max_receive_bytes),
            admitted: Vec::new(),
            queued_keys: Vec::new(),
            resumed_reads: Vec::new(),
            round: 0,
            stopping: false,
            now: Instant::now(),
            events: Events::with_capacity(poll_events()),
            next_deadline: None,
            conn_deadline_floor: None,
        })
    }

    /// One turn of the loop, on whichever thread holds it: takes what the poller has
    /// ready without waiting and, when there is any or a deadline is due, handles it:
    /// reads and dispatches, fires timers, times asks out, runs commands and batch ends.
    /// A turn with nothing ready costs one `epoll_wait` and a clock read.
    pub(crate) fn turn(&mut self) -> Turn {
        if self.stopping {
            return Turn::Stopping;
        }
        if let Err(e) = self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            if e.kind() != io::ErrorKind::Interrupted {
                error!("event loop poll failed: {e}");
                self.stopping = true;
                return Turn::Stopping;
            }
            self.events.clear();
        }
        let now = Instant::now();
        let due = self.next_deadline.is_some_and(|deadline| deadline <= now)
            || !self.unfinished_reads.is_empty();
        // Producers wake only a sleeping loop: an awake one looks for their work itself.
        let commands = self.shared.handoff.take_pending();
        if self.events.is_empty() && !due && !commands {
            return Turn::Idle;
        }
        self.now = now;
        self.round += 1;
        // Who was left over comes first; a connection read in this turn already waits
        // for the next one.
        self.resume_reads();
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        for event in events.iter() {
            self.handle_event(event);
        }
        self.events = events;
        self.fire_timers(now);
        self.expire(now);
        self.process_commands();
        // What batch ends send (locally too) is carried out before the turn ends.
        while self.endpoints.end_batch(now) {
            self.process_commands();
        }
        if self.stopping {
            return Turn::Stopping;
        }
        self.next_deadline = self.compute_next_deadline();
        Turn::Worked
    }

    /// When the loop must turn even if nothing is ready: at its next deadline, or at once
    /// while a connection has bytes left to read.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        if self.unfinished_reads.is_empty() {
            self.next_deadline
        } else {
            Some(self.now)
        }
    }

    fn handle_event(&mut self, event: &mio::event::Event) {
        match event.token() {
            WAKER => {}
            LISTENER => {
                if !self.stopping {
                    self.accept()
                }
            }
            Token(key) => {
                let key = key as ConnKey;
                let closed = event.is_read_closed() || event.is_error();
                if closed {
                    if let Some(conn) = self.connections.get_mut(&key) {
                        conn.peer_closed = true;
                    }
                }
                let readable = event.is_readable() || closed;
                if self.connection_ready(key, event.is_writable() || event.is_error()) && readable {
                    self.read(key);
                }
                self.flush(key);
            }
        }
    }

    /// Writes what every connection's outbox holds, frames queued with
    /// [`EndpointRef::send_deferred`](crate::EndpointRef::send_deferred) and not flushed
    /// yet included: for the loop thread about to sleep while a thread lent to the loop
    /// is busy with something else (a task runner in a long task), whose own flush may be
    /// far off. Writing a frame before its sender's flush only means fewer frames per
    /// write.
    pub(crate) fn flush_queued(&mut self) {
        let mut keys = std::mem::take(&mut self.queued_keys);
        keys.extend(
            self.connections
                .iter()
                .filter(|(_, conn)| conn.outbox.queued() > 0)
                .map(|(&key, _)| key),
        );
        let open = self.connections.len();
        for key in keys.drain(..) {
            self.flush(key);
        }
        self.queued_keys = keys;
        // A connection closed by a failed write ran handlers (ask callbacks,
        // on_disconnected): what they handed to the loop from within this turn woke
        // nobody, and is taken now, and the timers they set move the next deadline.
        if self.connections.len() != open {
            self.process_commands();
            self.next_deadline = self.compute_next_deadline();
        }
    }

    /// Whether a connection still has bytes to send, or is still being set up to send
    /// them.
    fn has_pending_output(&self) -> bool {
        self.connections
            .values()
            .any(|c| matches!(c.state, ConnState::Connecting { .. }) || c.outbox.queued() > 0)
    }

    /// The earliest deadline of the timers and the asks, the retry of a failed accept,
    /// and the lower bound on connections' deadlines (which may be early: the turn at it
    /// looks at every connection and moves it on); tells the ask table that the loop
    /// turns by then without being woken.
    fn compute_next_deadline(&mut self) -> Option<Instant> {
        let mut next = self.endpoints.timers.next_deadline();
        if let Some(retry) = self.accept_retry_at {
            next = Some(next.map_or(retry, |n| n.min(retry)));
        }
        if let Some(floor) = self.conn_deadline_floor {
            next = Some(next.map_or(floor, |n| n.min(floor)));
        }
        let mut asks = self.shared.asks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(deadline) = asks.next_deadline() {
            next = Some(next.map_or(deadline, |n| n.min(deadline)));
        }
        // Under the same lock: an ask registered from here on that is due before `next`
        // wakes the loop.
        asks.loop_sleeps_until(next);
        next
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some((timer, index)) = self.endpoints.timers.pop_due(now) {
            self.endpoints
                .call(index, now, |endpoint, ctx| endpoint.on_timer(ctx, timer));
        }
    }

    fn expire(&mut self, now: Instant) {
        if !self.stopping && self.accept_retry_at.is_some_and(|at| at <= now) {
            self.accept_retry_at = None;
            self.accept();
        }
        self.shared
            .asks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_expired(now, &mut self.ended_asks);
        for ask in self.ended_asks.drain(..) {
            let error = ask.completion.timeout_error(ask.timeout);
            ask.completion.complete(Err(error));
        }
        if self.conn_deadline_floor.is_none_or(|floor| floor > now) {
            return;
        }
        #[cfg(all(test, not(loom)))]
        self.shared
            .deadline_checks
            .fetch_add(self.connections.len() as u64, Ordering::Relaxed);
        let settings = &self.shared.settings;
        let late: Vec<(ConnKey, CloseReason)> = self
            .connections
            .iter()
            .filter_map(|(&key, c)| Some((key, c.overdue(now, settings)?)))
            .collect();
        for (key, reason) in late {
            // A peer's bytes may wait in the kernel past a reading deadline while the
            // loop did not look (it stalled, and this poll returned other sockets' events
            // first): read them before holding the silence against the peer.
            let reason = match reason {
                CloseReason::StalledFrame { .. } if self.waiting_peer_sent_more(key, now) => {
                    continue
                }
                CloseReason::StalledFrame { .. }
                | CloseReason::SlowFrame { .. }
                | CloseReason::Idle(_) => {
                    self.read(key);
                    // It filled this turn's read budget: not a peer that trickles, and the
                    // rest is read at the next turn, which comes at once.
                    if self.unfinished_reads.contains(&key) {
                        continue;
                    }
                    let settings = &self.shared.settings;
                    match self.connections.get(&key).map(|c| c.overdue(now, settings)) {
                        Some(Some(reason)) => reason,
                        _ => continue,
                    }
                }
                reason => reason,
            };
            self.close(key, reason);
        }
        // Exact again: the earliest deadline of those left (it may have moved on since
        // the floor was set, or its connection closed).
        self.conn_deadline_floor = self
            .connections
            .values()
            .filter_map(Connection::deadline)
            .min();
    }

    fn process_commands(&mut self) {
        loop {
            self.shared.handoff.drain(&mut self.commands);
            if self.commands.is_empty() {
                return;
            }
            let mut commands = std::mem::take(&mut self.commands);
            for command in commands.drain(..) {
                self.command(command);
            }
            self.commands = commands;
        }
    }

    fn command(&mut self, command: Command) {
        let now = self.now;
        match command {
            Command::Flush(outbox) => match outbox.kind() {
                OutboxKind::Local => self.deliver_local(),
                _ if self.connections.contains_key(&outbox.key()) => self.flush(outbox.key()),
                // Also while stopping: what on_stop sends may need a connection, which the
                // shutdown's bound covers.
                OutboxKind::Outgoing(address) if !outbox.is_closed() => {
                    self.connect(address, outbox, now)
                }
                _ => {}
            },
            Command::Register(name, endpoint, done) => {
                let result = if self.stopping {
                    Err(RpcError::Stopped)
                } else {
                    // RpcEnvHandle::register packs nothing else.
                    let endpoint = endpoint
                        .downcast::<Box<dyn Endpoint>>()
                        .expect("a registration carries a Box<dyn Endpoint>");
                    self.endpoints.register(name, *endpoint, now)
                };
                done.complete(result);
            }
            Command::Unregister(name) => {
                if let Some(&index) = self.endpoints.by_name.get(&name) {
                    self.endpoints.stop(index);
                }
            }
            Command::Stop => self.stopping = true,
            #[cfg(all(test, not(loom)))]
            Command::PanicForTest => panic!("the loop thread panics, as a test asked"),
        }
    }

    fn accept(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    if self.incoming >= self.shared.settings.max_connections {
                        self.refuse(stream, peer);
                        continue;
                    }
                    if let Err(e) = self
                        .shared
                        .settings
                        .socket
                        .apply(socket2::SockRef::from(&stream))
                    {
                        warn!(%peer, "cannot set up an accepted socket: {e}");
                        continue;
                    }
                    let key = self.shared.new_key();
                    if let Err(e) = self.poll.registry().register(
                        &mut stream,
                        Token(key as usize),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        warn!(%peer, "cannot register an accepted socket: {e}");
                        continue;
                    }
                    let handshake = match &self.shared.settings.secret {
                        Some(secret) => match random_nonce() {
                            Ok(nonce) => Some(Handshake::accepting(secret.clone(), nonce)),
                            Err(e) => {
                                error!(%peer, "{e}");
                                continue;
                            }
                        },
                        None => None,
                    };
                    let outbox = Arc::new(Outbox::new(
                        key,
                        OutboxKind::Incoming,
                        peer,
                        self.shared.settings.max_payload,
                        self.shared.settings.outbox_limit,
                    ));
                    debug!(%peer, "accepted a connection");
                    self.shared.accepted.fetch_add(1, Ordering::Relaxed);
                    let authenticated = handshake.is_none();
                    let max_payload = self.shared.settings.max_payload;
                    let mut conn =
                        Connection::new(stream, outbox, peer, ConnState::Open, max_payload);
                    if let Some(handshake) = handshake {
                        // An unauthenticated connection is not held past authenticate.timeout.
                        let deadline =
                            deadline_after(Instant::now(), self.shared.settings.auth_timeout);
                        conn.start_handshake(handshake, deadline);
                    }
                    conn.idle_deadline = self
                        .shared
                        .settings
                        .idle_timeout
                        .map(|timeout| deadline_after(Instant::now(), timeout));
                    lower_floor(&mut self.conn_deadline_floor, conn.deadline());
                    self.connections.insert(key, conn);
                    self.incoming += 1;
                    if authenticated {
                        self.announce(key);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The connection's own failure (reset before it was taken, and the like):
                // the next one may be fine, as accept(2) advises.
                Err(e) if failed_for_the_connection(&e) => {
                    debug!("accept failed for one connection: {e}");
                    continue;
                }
                Err(e) => {
                    // Out of descriptors, memory, or a broken listener: try again a
                    // little later (not at once: it would spin), and say
                    // so at most once a minute (a peer could otherwise fill the log).
                    let now = Instant::now();
                    self.accept_retry_at = Some(now + ACCEPT_RETRY);
                    if let Spend::Log { held_back } = self.accept_failure_warnings.spend(now) {
                        warn!(
                            "accept failed ({} time(s) since the last such warning): {e}; \
                             trying again every {} ms",
                            held_back + 1,
                            ACCEPT_RETRY.as_millis()
                        );
                    }
                    return;
                }
            }
        }
    }

    /// Closes a connection accepted beyond `rpc.io.maxConnections` before it costs
    /// anything more than its accept.
    fn refuse(&mut self, stream: TcpStream, peer: SocketAddr) {
        // Counted before the peer can see the close.
        self.shared.refused.fetch_add(1, Ordering::Relaxed);
        let open = self.incoming;
        tell_refused(
            &mut self.control,
            &stream,
            &format!(
                "{open} connections from peers are open, as many as rpc.io.maxConnections \
                 allows: try again later"
            ),
        );
        drop(stream);
        match self.refusal_warnings.spend(Instant::now()) {
            Spend::Log { held_back } => warn!(
                %peer,
                "refused {} connection(s) since the last such warning: {open} connections \
                 from peers are open, as many as rpc.io.maxConnections allows",
                held_back + 1
            ),
            Spend::HoldBack => {
                debug!(%peer, "refused a connection: {open} connections from peers are open")
            }
        }
    }

    fn connect(&mut self, address: SocketAddr, outbox: Arc<Outbox>, now: Instant) {
        let key = outbox.key();
        let stream =
            crate::socket::connect(address, &self.shared.settings.socket).and_then(|mut stream| {
                self.poll.registry().register(
                    &mut stream,
                    Token(key as usize),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                Ok(stream)
            });
        match stream {
            Ok(stream) => {
                debug!(peer = %address, "connecting");
                let state = ConnState::Connecting {
                    deadline: deadline_after(now, self.shared.settings.connect_timeout),
                };
                let max_payload = self.shared.settings.max_payload;
                let conn = Connection::new(stream, outbox, address, state, max_payload);
                lower_floor(&mut self.conn_deadline_floor, conn.deadline());
                self.connections.insert(key, conn);
            }
            Err(e) => {
                warn!(peer = %address, "cannot connect: {e}");
                self.fail_outbox(&outbox, &CloseReason::ConnectFailed(e));
            }
        }
    }

    /// Completes a pending connect when the socket says so. Returns whether the
    /// connection is open and may be read.
    fn connection_ready(&mut self, key: ConnKey, writable: bool) -> bool {
        let Some(conn) = self.connections.get_mut(&key) else {
            return false;
        };
        if conn.state == ConnState::Open {
            return true;
        }
        if !writable {
            return false;
        }
        match conn.stream.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => {
                self.close(key, CloseReason::ConnectFailed(e));
                return false;
            }
        }
        match conn.stream.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return false,
            Err(e) => {
                self.close(key, CloseReason::ConnectFailed(e));
                return false;
            }
        }
        conn.state = ConnState::Open;
        debug!(peer = %conn.peer, "connected");
        self.shared.connected.fetch_add(1, Ordering::Relaxed);
        match &self.shared.settings.secret {
            Some(secret) => match random_nonce() {
                Ok(nonce) => {
                    let (handshake, challenge) = Handshake::connecting(secret.clone(), nonce);
                    let deadline =
                        deadline_after(Instant::now(), self.shared.settings.auth_timeout);
                    conn.start_handshake(handshake, deadline);
                    lower_floor(&mut self.conn_deadline_floor, Some(deadline));
                    if let Err(e) = send_control(&mut self.control, conn, &challenge) {
                        self.close(key, CloseReason::Wire(e));
                        return false;
                    }
                }
                Err(e) => {
                    self.close(key, CloseReason::Auth(e));
                    return false;
                }
            },
            None => self.announce(key),
        }
        true
    }

    fn announce(&mut self, key: ConnKey) {
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        conn.announced = true;
        // Senders on other threads may write to the socket themselves from now on, on a
        // duplicate descriptor. Only on connections this environment opened: a server
        // accepting thousands of peers would otherwise need twice the descriptors, and
        // its own sends come from its loop. Without one (out of descriptors) the loop
        // writes everything.
        #[cfg(not(loom))]
        if matches!(conn.outbox.kind(), OutboxKind::Outgoing(_)) {
            match socket2::SockRef::from(&conn.stream).try_clone() {
                Ok(socket) => conn.outbox.attach_socket(socket.into()),
                Err(e) => debug!(peer = %conn.peer, "no write-through for this connection: {e}"),
            }
        }
        let peer = conn.peer;
        self.endpoints.each(Instant::now(), |endpoint, ctx| {
            endpoint.on_connected(ctx, peer)
        });
        self.flush(key);
    }

    /// Reads on from the connections that used up their budget at the last wake-up.
    fn resume_reads(&mut self) {
        if self.unfinished_reads.is_empty() {
            return;
        }
        std::mem::swap(&mut self.unfinished_reads, &mut self.resumed_reads);
        let mut resumed = std::mem::take(&mut self.resumed_reads);
        for key in resumed.drain(..) {
            if self.connections.contains_key(&key) {
                self.read(key);
                self.flush(key);
            }
        }
        self.resumed_reads = resumed;
    }

    /// Reads and handles what the connection's socket holds, until it would block or this
    /// wake-up's [`READ_BUDGET`] for it is spent.
    fn read(&mut self, key: ConnKey) {
        loop {
            let Some(conn) = self.connections.get_mut(&key) else {
                return;
            };
            if conn.awaiting_budget {
                if conn.peer_closed && !conn.pending_frame_is_all_here() {
                    // Its frame will never be whole: it gives up its place in the queue
                    // now, not when its turn comes.
                    let reason = match conn.stream.take_error() {
                        Ok(Some(error)) => CloseReason::Io(error),
                        _ => CloseReason::EndOfStream,
                    };
                    self.close(key, reason);
                }
                return;
            }
            if conn.read_round != self.round {
                conn.read_round = self.round;
                conn.read_in_round = 0;
            }
            if conn.read_in_round >= READ_BUDGET {
                if !self.unfinished_reads.contains(&key) {
                    self.unfinished_reads.push(key);
                }
                return;
            }
            // recv(2) straight into the receive buffer's spare room, which is not zeroed
            // first (see flint_wire::ReadUninit).
            let mut socket = socket2::SockRef::from(&conn.stream);
            let mut drained = false;
            let reason = match conn.decoder.read_uninit_from(&mut socket) {
                Ok(0) => Some(CloseReason::EndOfStream),
                Ok(read) => {
                    conn.read_in_round += read;
                    conn.moved_at(self.now, self.shared.settings.idle_timeout);
                    drained = conn.decoder.last_read_was_short() && !conn.peer_closed;
                    None
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Some(CloseReason::Io(e)),
            };
            // Whole frames first: what arrived before an end of stream still counts.
            if let Err(reason) = self.handle_frames(key) {
                self.close(key, reason);
                return;
            }
            if let Some(reason) = reason {
                if let (CloseReason::EndOfStream, Some(conn)) =
                    (&reason, self.connections.get_mut(&key))
                {
                    if let Err(e) = conn.decoder.finish() {
                        debug!(peer = %conn.peer, "{e}");
                    }
                }
                self.close(key, reason);
                return;
            }
            // A short read emptied the socket: what comes next raises a new edge-triggered
            // event (an end of stream that came before this wake-up's event was reported
            // with it, see `peer_closed`), so reading again now would only hear that it
            // would block.
            if drained {
                return;
            }
        }
    }

    fn handle_frames(&mut self, key: ConnKey) -> Result<(), CloseReason> {
        loop {
            let Some(conn) = self.connections.get_mut(&key) else {
                return Ok(());
            };
            let frame = match conn.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    // Bytes just arrived: the peer has network.timeout from now to send the
                    // rest of a frame it is in the middle of.
                    conn.frame_deadline = (conn.decoder.buffered() > 0).then(|| {
                        deadline_after(self.now, self.shared.settings.stalled_frame_timeout)
                    });
                    lower_floor(&mut self.conn_deadline_floor, conn.frame_deadline);
                    // The frame's own clock, from its first bytes (which nothing sent later
                    // moves), its due time moved on by the bytes in. Never before
                    // `frame_deadline` when first set, which lowered the floor, and only
                    // later after that.
                    if conn.frame_deadline.is_some() {
                        let started = conn.frame_clock.map_or(self.now, |clock| clock.started);
                        conn.frame_clock = Some(FrameClock::new(
                            started,
                            &self.shared.settings,
                            conn.decoder.buffered(),
                        ));
                    }
                    if conn.reserved == 0
                        && conn
                            .decoder
                            .pending_frame_len()
                            .is_some_and(|len| len > UNBUDGETED_FRAME)
                    {
                        self.reserve_for_pending_frame(key);
                    }
                    return Ok(());
                }
                Err(e) => return Err(CloseReason::Wire(e)),
            };
            conn.frame_clock = None;
            // The frame is in: what it holds is its reader's from here on.
            let conn = if conn.reserved > 0 {
                let reserved = std::mem::take(&mut conn.reserved);
                self.release_budget(reserved);
                match self.connections.get_mut(&key) {
                    Some(conn) => conn,
                    None => return Ok(()),
                }
            } else {
                conn
            };
            let envelope = frame.envelope().map_err(CloseReason::Wire)?;
            // Only on the route of control frames (no ask has request id 0): an endpoint
            // that sends a Refused of its own closes nothing.
            if frame.kind() == MessageKind::Refused {
                if let (ArchivedMessage::Refused { reason }, ArchivedRoute::Reply { request_id }) =
                    (&envelope.message, &envelope.route)
                {
                    if *request_id == 0 {
                        return Err(CloseReason::Refused(printable(reason.as_str())));
                    }
                }
            }
            if let Some(handshake) = conn.handshake.as_mut() {
                let step = handshake
                    .on_message(&envelope.message)
                    .map_err(CloseReason::Auth)?;
                let reply = match step {
                    Step::Send(message) | Step::SendAndDone(message) => Some(message),
                    Step::Done => None,
                };
                let done = handshake.is_done();
                if let Some(reply) = reply {
                    send_control(&mut self.control, conn, &reply).map_err(CloseReason::Wire)?;
                }
                if done {
                    conn.end_handshake(self.shared.settings.max_payload);
                    debug!(peer = %conn.peer, "authenticated");
                    self.announce(key);
                } else {
                    self.flush(key);
                }
                continue;
            }
            if is_handshake(frame.kind()) {
                let kind = frame.kind().name();
                return Err(CloseReason::Auth(
                    if self.shared.settings.secret.is_some() {
                        AuthError::AfterHandshake(kind)
                    } else {
                        AuthError::NotEnabled(kind)
                    },
                ));
            }
            let sender = Some(conn.peer);
            let outbox = conn.outbox.clone();
            self.route(&frame, envelope, sender, &outbox, key);
        }
    }

    /// A large frame's bytes are read only with its whole length reserved: reserves it
    /// as soon as its header is in, or leaves the connection unread until the budget
    /// admits it.
    #[cold]
    fn reserve_for_pending_frame(&mut self, key: ConnKey) {
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        if conn.reserved > 0 || conn.awaiting_budget {
            return;
        }
        let Some(frame_len) = conn
            .decoder
            .pending_frame_len()
            .filter(|&len| len > UNBUDGETED_FRAME)
        else {
            return;
        };
        // The frame and one read beyond it: what its buffer is made to hold.
        let bytes = frame_len.saturating_add(UNBUDGETED_FRAME);
        if !self.receive_budget.reserve(key, conn.peer.ip(), bytes) {
            conn.awaiting_budget = true;
            self.shared.budget_waits.fetch_add(1, Ordering::Relaxed);
            debug!(
                peer = %conn.peer,
                "a frame of {frame_len} bytes waits for room in the receive budget ({} of {} \
                 bytes held; rpc.io.maxReceiveBytes)",
                self.receive_budget.in_use(),
                self.receive_budget.limit()
            );
            return;
        }
        conn.reserved = bytes;
        conn.decoder.preallocate_pending_frame();
        self.shared
            .most_reserved
            .fetch_max(self.receive_budget.in_use() as u64, Ordering::Relaxed);
    }

    /// Whether connection `key` waits for the receive budget with bytes from its peer
    /// unread in the kernel: it is held back by this side, not silent, so its frame's
    /// deadline moves on. A waiting peer with nothing unread has sent nothing since its
    /// frame's header; closing it at the deadline keeps a peer that sends a header and
    /// falls silent from holding the queue, and the budget once admitted.
    fn waiting_peer_sent_more(&mut self, key: ConnKey, now: Instant) -> bool {
        let Some(conn) = self.connections.get_mut(&key) else {
            return false;
        };
        if !conn.awaiting_budget || rustix::io::ioctl_fionread(&conn.stream).unwrap_or(0) == 0 {
            return false;
        }
        conn.frame_deadline = Some(deadline_after(
            now,
            self.shared.settings.stalled_frame_timeout,
        ));
        true
    }

    /// Gives back bytes of the receive budget, and lets in the connections waiting for
    /// them.
    fn release_budget(&mut self, bytes: usize) {
        self.receive_budget.release(bytes, &mut self.admitted);
        self.admit_waiting();
    }

    /// Connections the receive budget just admitted, their frames' bytes reserved: read
    /// at the next wake-up, which comes at once, and held to the reading deadlines from
    /// now, as if they had just read.
    fn admit_waiting(&mut self) {
        let mut admitted = std::mem::take(&mut self.admitted);
        let settings = &self.shared.settings;
        // Not `self.now`: a close outside a turn (a failed write in `flush_queued`) gets
        // here with the time of the last turn that worked, which may be long past.
        let now = Instant::now();
        let mut orphaned = 0;
        for (key, bytes) in admitted.drain(..) {
            let Some(conn) = self.connections.get_mut(&key) else {
                debug_assert!(false, "a closed connection was admitted");
                // Its bytes go back below, or the queue behind it would jam for good.
                orphaned += bytes;
                continue;
            };
            conn.awaiting_budget = false;
            conn.reserved = bytes;
            if self.stopping {
                // Every connection is about to close (and give its bytes back): none is
                // to be read.
                continue;
            }
            conn.decoder.preallocate_pending_frame();
            // Its time starts now: the wait was not its peer's doing.
            conn.frame_clock = Some(FrameClock::new(now, settings, conn.decoder.buffered()));
            conn.frame_deadline = Some(deadline_after(now, settings.stalled_frame_timeout));
            conn.moved_at(now, settings.idle_timeout);
            lower_floor(&mut self.conn_deadline_floor, conn.deadline());
            if !self.unfinished_reads.contains(&key) {
                self.unfinished_reads.push(key);
            }
        }
        self.shared
            .most_reserved
            .fetch_max(self.receive_budget.in_use() as u64, Ordering::Relaxed);
        self.admitted = admitted;
        if orphaned > 0 {
            self.release_budget(orphaned);
        }
    }

    /// Delivers one frame, already validated into `envelope`: to an endpoint, or to the
    /// ask it answers.
    fn route(
        &mut self,
        frame: &Frame,
        envelope: &ArchivedEnvelope,
        sender: Option<SocketAddr>,
        connection: &Arc<Outbox>,
        key: ConnKey,
    ) {
        let now = self.now;
        let (endpoint, request_id) = match &envelope.route {
            ArchivedRoute::OneWay { endpoint } => (endpoint.as_str(), None),
            ArchivedRoute::Ask {
                request_id,
                endpoint,
            } => (endpoint.as_str(), Some(request_id.to_native())),
            ArchivedRoute::Reply { request_id } => {
                if let Some(ask) = self.take_ask(request_id.to_native(), key, sender) {
                    ask.completion.complete(Ok(Reply {
                        frame: frame.clone(),
                    }));
                }
                return;
            }
            ArchivedRoute::ErrorReply { request_id, error } => {
                if let Some(ask) = self.take_ask(request_id.to_native(), key, sender) {
                    let target = ask.completion.target.clone();
                    ask.completion.complete(Err(RpcError::Remote {
                        target,
                        message: error.to_string(),
                    }));
                }
                return;
            }
        };
        let incoming = Incoming {
            frame,
            message: &envelope.message,
            sender,
            connection,
            request_id,
            env: &self.endpoints.env.clone(),
        };
        self.endpoints.deliver(incoming, endpoint, now);
    }

    /// Takes the ask a reply answers, but only if it travelled on the connection the
    /// reply came on: a peer cannot answer asks sent to somebody else.
    fn take_ask(
        &self,
        request_id: u64,
        key: ConnKey,
        sender: Option<SocketAddr>,
    ) -> Option<PendingAsk<AskCompletion, ConnKey>> {
        let ask = self
            .shared
            .asks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_on(request_id, key);
        if ask.is_none() {
            debug!(
                ?sender,
                request_id, "a reply to no outstanding ask (it timed out, or was never asked)"
            );
        }
        ask
    }

    fn deliver_local(&mut self) {
        let local = self.shared.local.clone();
        while let Some(bytes) = local.take() {
            local.written(bytes.len());
            let fed = self.local_decoder.feed(&bytes);
            local.recycle(bytes);
            if let Err(e) = fed {
                error!("local delivery failed: {e}");
                return;
            }
            loop {
                match self.local_decoder.next_frame() {
                    Ok(Some(frame)) => match frame.envelope() {
                        Ok(envelope) => self.route(&frame, envelope, None, &local, LOCAL_KEY),
                        Err(e) => error!("local delivery failed: {e}"),
                    },
                    Ok(None) => break,
                    Err(e) => {
                        error!("local delivery failed: {e}");
                        self.local_decoder = FrameDecoder::new(self.shared.settings.max_payload);
                        break;
                    }
                }
            }
        }
    }

    /// Writes what the connection has queued, with vectored writes, until done or the
    /// socket is full.
    fn flush(&mut self, key: ConnKey) {
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        if conn.state != ConnState::Open {
            return;
        }
        // Until the peer is authenticated only handshake frames leave.
        if conn.handshake.is_none() && conn.announced {
            if let Some(bytes) = conn.outbox.take() {
                conn.writing.push_back(bytes);
            }
        }
        match write_queued(conn) {
            // A peer that takes what it is sent, however slowly, is not idle.
            Ok(true) => conn.moved_at(self.now, self.shared.settings.idle_timeout),
            Ok(false) => {}
            Err(e) => self.close(key, CloseReason::Io(e)),
        }
    }

    fn close(&mut self, key: ConnKey, reason: CloseReason) {
        let Some(mut conn) = self.connections.remove(&key) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if matches!(conn.outbox.kind(), OutboxKind::Incoming) {
            self.incoming -= 1;
        }
        if conn.awaiting_budget {
            self.receive_budget
                .forget(key, conn.peer.ip(), &mut self.admitted);
            self.admit_waiting();
        }
        if conn.reserved > 0 {
            self.release_budget(conn.reserved);
        }
        if reason.tells_peer() {
            let text = reason.to_string();
            if conn.outbox.close_between_frames(&text) {
                tell_refused(&mut self.control, &conn.stream, &text);
            }
        }
        match &reason {
            CloseReason::EndOfStream | CloseReason::Stopping => {
                debug!(peer = %conn.peer, "connection closed: {reason}")
            }
            // What a peer that connected here did (or failed to do) is logged within a
            // budget; a connection this environment opened says why it failed each time.
            _ if matches!(conn.outbox.kind(), OutboxKind::Incoming) => {
                crate::peer_warn!(self.close_warnings, self.now, peer = %conn.peer, "closing connection: {reason}")
            }
            _ => warn!(peer = %conn.peer, "closing connection: {reason}"),
        }
        self.fail_outbox(&conn.outbox, &reason);
        if conn.announced {
            let peer = conn.peer;
            self.endpoints.each(Instant::now(), |endpoint, ctx| {
                endpoint.on_disconnected(ctx, peer)
            });
        }
    }

    /// Closes an outbox and fails the asks that travelled on it.
    fn fail_outbox(&mut self, outbox: &Arc<Outbox>, reason: &CloseReason) {
        outbox.close(&reason.to_string());
        self.shared.forget_outgoing(outbox);
        self.shared
            .asks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_connection(outbox.key(), &mut self.ended_asks);
        for ask in self.ended_asks.drain(..) {
            ask.completion
                .complete(Err(reason.ask_error(outbox.peer())));
        }
    }

    /// Stops every endpoint, gives queued frames a bounded time to leave, closes the
    /// connections and fails what is still waiting. Only the loop thread calls it.
    pub(crate) fn shutdown(&mut self) {
        // Already set when a Stop command ended the loop; not when its thread gave up on
        // a failed poll. Registrations still queued are refused either way: an endpoint
        // started now would never be stopped.
        self.stopping = true;
        // Sends are still accepted while the endpoints stop, so that what on_stop sends
        // (a last word to a peer) leaves with the rest; refused from then on.
        self.now = Instant::now();
        for index in 0..self.endpoints.slots.len() {
            self.endpoints.stop(index);
        }
        self.shared.stopped.store(true, Ordering::Release);
        // Give queued frames a bounded time to leave, finishing connects and handshakes
        // under way, so that what was sent before stop() and from on_stop is delivered.
        let deadline = deadline_after(Instant::now(), self.shared.settings.shutdown_flush);
        self.process_commands();
        let mut events = Events::with_capacity(256);
        loop {
            let keys: Vec<ConnKey> = self.connections.keys().copied().collect();
            for key in keys {
                self.flush(key);
            }
            let now = Instant::now();
            self.now = now;
            if !self.has_pending_output() || now >= deadline {
                break;
            }
            let wait = if self.unfinished_reads.is_empty() {
                deadline - now
            } else {
                Duration::ZERO
            };
            // Asleep on the poller as far as producers know, so that what they hand over
            // meanwhile (a flush from on_stop's sends) wakes this wait.
            let poll = &mut self.poll;
            match self
                .shared
                .handoff
                .sleep_unless_pending(|| poll.poll(&mut events, Some(wait)))
            {
                Some(Err(_)) => break,
                Some(Ok(())) => {}
                None => events.clear(),
            }
            self.round += 1;
            self.resume_reads();
            for event in events.iter() {
                self.handle_event(event);
            }
            self.shared.handoff.take_pending();
            self.process_commands();
        }
        let keys: Vec<ConnKey> = self.connections.keys().copied().collect();
        for key in keys {
            self.close(key, CloseReason::Stopping);
        }
        // Whatever is still queued or asked cannot be served any more.
        self.shared.refuse_the_rest();
        info!(address = %self.shared.address, "RPC environment stopped");
    }
}

/// Tells the peer, as well as it can without waiting, why its connection is about to
/// close: a [`Message::Refused`] frame, then the end of this side's stream. What the peer
/// sent meanwhile is read and dropped (a few KiB at most): closing a socket with unread
/// bytes resets the connection, and a reset can overtake the frame before the peer
/// reads it.
fn tell_refused(encoder: &mut Encoder, stream: &TcpStream, reason: &str) {
    let message = Message::Refused {
        reason: flint_wire::cut_text(reason, MAX_REFUSAL_TEXT),
    };
    let mut out = BytesMut::new();
    if encoder
        .encode(&Route::Reply { request_id: 0 }, &message, &mut out)
        .is_err()
    {
        return;
    }
    // A write the socket takes only in part leaves the peer a cut frame, which it reports
    // as the stream ending in the middle of a frame: no worse than saying nothing.
    let _ = (&*stream).write(&out);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match (&*stream).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

/// A peer's text made fit for a log line: cut to [`MAX_REFUSAL_TEXT`] bytes (on a
/// character boundary, "..." after it), and control characters, line and paragraph
/// separators and the invisible formatting characters (bidirectional overrides, say),
/// which could forge a line or reorder one, become spaces.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_REFUSAL_TEXT + 3));
    for c in text.chars() {
        if out.len() + c.len_utf8() > MAX_REFUSAL_TEXT {
            out.push_str("...");
            break;
        }
        let invisible = matches!(
            c,
            '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}'
        );
        out.push(if c.is_control() || invisible { ' ' } else { c });
    }
    out
}

/// Queues a handshake frame ahead of any application data.
fn send_control(
    encoder: &mut Encoder,
    conn: &mut Connection,
    message: &Message,
) -> Result<(), flint_wire::WireError> {
    let mut out = BytesMut::new();
    let len = encoder.encode(&Route::Reply { request_id: 0 }, message, &mut out)?;
    conn.outbox.add_queued(len);
    conn.writing.push_back(out);
    Ok(())
}

/// Writes the connection's queued buffers until they are gone or the socket would block.
/// Writes what the connection has queued until done or the socket is full; whether any
/// bytes left.
fn write_queued(conn: &mut Connection) -> io::Result<bool> {
    let mut progressed = false;
    while !conn.writing.is_empty() {
        let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
        let count = conn.writing.len().min(MAX_IOVECS);
        for (slice, bytes) in slices.iter_mut().zip(conn.writing.iter()) {
            *slice = IoSlice::new(bytes);
        }
        match conn.stream.write_vectored(&slices[..count]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket accepted no bytes",
                ))
            }
            Ok(mut written) => {
                progressed = true;
                conn.outbox.written(written);
                while written > 0 {
                    let front = conn.writing.front_mut().expect("written bytes were queued");
                    if written >= front.len() {
                        written -= front.len();
                        if let Some(done) = conn.writing.pop_front() {
                            conn.outbox.recycle(done);
                        }
                    } else {
                        front.advance(written);
                        written = 0;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(progressed),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(progressed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Records the tags of custom messages; tag 99 holds the loop for 1.5 s.
    #[derive(Clone, Default)]
    struct Stalling(std::sync::Arc<std::sync::Mutex<Vec<u32>>>);

    impl crate::Endpoint for Stalling {
        fn receive(&mut self, _ctx: &mut crate::EndpointContext<'_>, message: crate::Incoming<'_>) {
            if let flint_wire::ArchivedMessage::Custom { tag, .. } = message.message() {
                if *tag == 99 {
                    std::thread::sleep(Duration::from_millis(1500));
                }
                self.0.lock().unwrap().push(tag.to_native());
            }
        }
    }

    fn one_way_frame(tag: u32) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        let route = flint_wire::Route::OneWay {
            endpoint: "stalling".into(),
        };
        let message = flint_wire::Message::Custom {
            tag,
            body: bytes::Bytes::from(vec![7u8; 64]),
        };
        flint_wire::Encoder::new(1 << 20)
            .encode(&route, &message, &mut out)
            .unwrap();
        out.to_vec()
    }

    /// Two peers finish their frames while the loop is held past the stalled-frame
    /// timeout, and each poll returns one ready socket: the one whose event has not
    /// come yet when the deadlines are checked has its bytes in the kernel, and is read,
    /// not cut off as stalled.
    #[test]
    fn a_peer_whose_bytes_wait_unread_past_its_deadline_is_read_not_cut_off() {
        use std::io::Write;
        TEST_POLL_EVENTS.with(|n| n.set(1));
        let conf = crate::Conf::from_pairs([
            "network.timeout=1s",
            "executor.heartbeatInterval=100ms",
            "rpc.io.idleTimeout=0",
        ])
        .unwrap();
        let server = crate::RpcEnv::new(&conf).unwrap();
        TEST_POLL_EVENTS.with(|n| n.set(POLL_EVENTS));
        let seen = Stalling::default();
        server.handle().register("stalling", seen.clone()).unwrap();
        let frames = [one_way_frame(1), one_way_frame(2)];
        let mut peers: Vec<std::net::TcpStream> = frames
            .iter()
            .map(|frame| {
                let mut peer = std::net::TcpStream::connect(server.address()).unwrap();
                peer.write_all(&frame[..flint_wire::HEADER_LEN + 8])
                    .unwrap();
                peer
            })
            .collect();
        // Both halves read (each connection's stalled-frame deadline set), then the loop
        // held for 1.5 s by a third peer's message.
        std::thread::sleep(Duration::from_millis(200));
        let mut holder = std::net::TcpStream::connect(server.address()).unwrap();
        holder.write_all(&one_way_frame(99)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        for (peer, frame) in peers.iter_mut().zip(&frames) {
            peer.write_all(&frame[flint_wire::HEADER_LEN + 8..])
                .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut tags = seen.0.lock().unwrap().clone();
            tags.sort_unstable();
            if tags == [1, 2, 99] {
                break;
            }
            assert!(Instant::now() < deadline, "seen only {tags:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(server);
    }

    /// A turn looks at connections' deadlines only when one may be due: with a hundred
    /// silent peers connected, a stream of messages from another costs no look at them.
    #[test]
    fn turns_do_not_look_at_every_connection_while_no_deadline_is_due() {
        use std::io::Write;
        let server = crate::RpcEnv::new(&crate::Conf::new()).unwrap();
        let seen = Stalling::default();
        server.handle().register("stalling", seen.clone()).unwrap();
        let silent: Vec<std::net::TcpStream> = (0..100)
            .map(|_| std::net::TcpStream::connect(server.address()).unwrap())
            .collect();
        let mut talker = std::net::TcpStream::connect(server.address()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Tags from 100: 99 would hold the loop.
        for (count, tag) in (100..300).enumerate() {
            talker.write_all(&one_way_frame(tag)).unwrap();
            // One message per turn, more or less: many turns.
            while seen.0.lock().unwrap().len() <= count {
                assert!(Instant::now() < deadline, "message {tag} not seen");
                std::thread::yield_now();
            }
        }
        let checks = server
            .handle()
            .shared
            .deadline_checks
            .load(Ordering::Relaxed);
        assert!(checks < 101, "{checks} looks at connections' deadlines");
        assert_eq!(server.handle().stats().accepted, 101);
        drop(silent);
    }

    #[test]
    fn a_peer_s_long_name_is_cut_short_on_a_character_boundary() {
        assert_eq!(shortened("Executor", NAME_SHOWN), "Executor");
        let long = "x".repeat(1 << 20);
        assert_eq!(shortened(&long, NAME_SHOWN).len(), NAME_SHOWN + 3);
        // "é" is two bytes: a cut inside it moves back to before it.
        assert_eq!(shortened("aé", 2), "a...");
        assert_eq!(shortened("aéb", 3), "aé...");
    }

    /// Refusals often come during the handshake, when a peer takes only small frames.
    #[test]
    fn the_longest_refusal_fits_what_a_peer_takes_before_authenticating() {
        let reason = flint_wire::cut_text(&"é".repeat(10_000), MAX_REFUSAL_TEXT);
        let mut out = BytesMut::new();
        Encoder::new(1 << 20)
            .encode(
                &Route::Reply { request_id: 0 },
                &Message::Refused { reason },
                &mut out,
            )
            .unwrap();
        let payload = u32::from_le_bytes(out[12..16].try_into().unwrap()) as usize;
        assert!(payload <= HANDSHAKE_MAX_PAYLOAD, "{payload} bytes");
    }

    /// A refusal's text, which any peer can write, cannot forge log lines or run long.
    #[test]
    fn a_peer_s_refusal_is_logged_on_one_line_and_cut_short() {
        assert_eq!(
            printable("bad proof\n2026-11-25 INFO all is well\r\u{1b}[2J\u{2028}\u{202E}x"),
            "bad proof 2026-11-25 INFO all is well  [2J  x"
        );
        let long = "é".repeat(MAX_REFUSAL_TEXT);
        assert!(printable(&long).len() <= MAX_REFUSAL_TEXT + 3);
    }
}
