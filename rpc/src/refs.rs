//! What any thread holds to reach an environment and its endpoints: the
//! [`RpcEnvHandle`] and [`EndpointRef`]s, through which messages are sent and asks made.
//! They work on the shared state alone; endpoints are handed them, so they sit below the
//! endpoints' layer. The two things a handle does that need a layer above are defined
//! there: [`RpcEnvHandle::register`] with the endpoints, [`RpcEnvHandle::lend`] with the
//! threads that turn the loop.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use flint_wire::{Message, Route, SharedStr};

use crate::ask::{self, Reply, ReplySlot, Started};
use crate::error::{RpcError, TimeoutSource};
use crate::outbox::{Outbox, OutboxKind, Outgoing};
use crate::settings::Settings;
use crate::shared::{AskCompletion, AskWaiter, Command, Shared};
use crate::timer::deadline_after;

/// The address of an environment that does not listen
/// ([`RpcEnv::client`](crate::RpcEnv::client)): the unspecified address and port 0,
/// which no peer can connect to.
pub const CLIENT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Counters of an environment's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// Connections accepted from remote peers.
    pub accepted: u64,
    /// Connections from remote peers closed as soon as they were accepted, because
    /// `rpc.io.maxConnections` were open and established, or
    /// `rpc.io.maxConnectionsPerHost` from their host.
    pub refused: u64,
    /// Connections from remote peers, not established yet, closed to make room for a new
    /// one at `rpc.io.maxConnections`.
    pub evicted: u64,
    /// Outgoing connections established.
    pub connected: u64,
    /// Times a connection waited, unread, for room in the receive budget
    /// (rpc.io.maxReceiveBytes) for its next frame.
    pub budget_waits: u64,
    /// The most bytes the receive budget held for large frames at once.
    pub most_reserved: u64,
    /// Bytes read from connections' sockets (handshakes included).
    pub bytes_received: u64,
    /// Bytes written to connections' sockets (handshakes included).
    pub bytes_sent: u64,
    /// Whole frames received on connections.
    pub frames_received: u64,
    /// Connections closed for a frame that broke the protocol (bad header, checksum,
    /// oversized, undecodable).
    pub closed_protocol: u64,
    /// Connections closed because their peer failed authentication or did not finish it
    /// within `authenticate.timeout`.
    pub closed_auth: u64,
    /// Connections closed for a stalled or trickled frame, or for idling
    /// (`network.timeout`, `rpc.io.idleTimeout`).
    pub closed_timeout: u64,
}

/// A cheap, clonable handle on an environment, usable from any thread.
#[derive(Clone)]
pub struct RpcEnvHandle {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for RpcEnvHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcEnvHandle")
            .field("address", &self.shared.address)
            .finish()
    }
}

impl RpcEnvHandle {
    /// The address this environment listens on; for one that does not listen
    /// ([`RpcEnv::client`](crate::RpcEnv::client)), [`CLIENT_ADDRESS`], which no peer can
    /// reach.
    pub fn address(&self) -> SocketAddr {
        self.shared.address
    }

    /// Counters of its connections.
    pub fn stats(&self) -> RpcStats {
        RpcStats {
            accepted: self.shared.accepted.load(Ordering::Relaxed),
            refused: self.shared.refused.load(Ordering::Relaxed),
            evicted: self.shared.evicted.load(Ordering::Relaxed),
            connected: self.shared.connected.load(Ordering::Relaxed),
            budget_waits: self.shared.budget_waits.load(Ordering::Relaxed),
            most_reserved: self.shared.most_reserved.load(Ordering::Relaxed),
            bytes_received: self.shared.bytes_received.load(Ordering::Relaxed),
            bytes_sent: self.shared.bytes_sent.load(Ordering::Relaxed),
            frames_received: self.shared.frames_received.load(Ordering::Relaxed),
            closed_protocol: self.shared.closed_protocol.load(Ordering::Relaxed),
            closed_auth: self.shared.closed_auth.load(Ordering::Relaxed),
            closed_timeout: self.shared.closed_timeout.load(Ordering::Relaxed),
        }
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// A reference to the endpoint `name` of the environment listening at `address`.
    /// Its own address, if it listens, gives a local reference.
    pub fn endpoint_ref(&self, address: SocketAddr, name: &str) -> EndpointRef {
        // A client's address is no address: a reference to it is as remote as any.
        if self.shared.settings.listen && address == self.shared.address {
            return self.local_ref(name);
        }
        EndpointRef {
            env: self.clone(),
            name: name.into(),
            target: RefTarget::Remote {
                address,
                first: OnceLock::new(),
            },
            owes_flush: Arc::default(),
        }
    }

    /// A reference to the endpoint `name` of this environment, reached without a socket.
    pub fn local_ref(&self, name: &str) -> EndpointRef {
        EndpointRef {
            env: self.clone(),
            name: name.into(),
            target: RefTarget::Connection(self.shared.local.clone()),
            owes_flush: Arc::default(),
        }
    }

    pub(crate) fn push<O: Outgoing + ?Sized>(
        &self,
        outbox: &Arc<Outbox>,
        route: &Route,
        message: &O,
        writer: Writer,
    ) -> Result<(), RpcError> {
        if self.push_deferred(outbox, route, message)? {
            // Refused: the loop shut down after the check above, and nobody will write
            // the frame.
            self.flush(outbox, writer)?;
        }
        Ok(())
    }

    /// Queues a frame; true if the loop has yet to be told of the outbox.
    fn push_deferred<O: Outgoing + ?Sized>(
        &self,
        outbox: &Arc<Outbox>,
        route: &Route,
        message: &O,
    ) -> Result<bool, RpcError> {
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(RpcError::Stopped);
        }
        outbox.push(route, message)
    }

    /// Sends what the outbox holds: for [`Writer::Caller`] from this thread straight to
    /// the socket when it can ([`Outbox::write_through`]), else by the loop. Returns
    /// whether the loop was told; [`RpcError::Stopped`] if the loop has shut down (and
    /// closed every connection), so that nobody will write what the outbox holds. The
    /// loop's own sends are left to the end of its batch, which writes them together.
    fn flush(&self, outbox: &Arc<Outbox>, writer: Writer) -> Result<bool, RpcError> {
        if writer == Writer::Caller && !self.shared.in_loop_turn() && outbox.write_through() {
            if self.shared.stopped.load(Ordering::Acquire) {
                // A stopping loop waits for queued bytes to leave; these left without it.
                self.shared.handoff.wake();
            }
            return Ok(false);
        }
        match self.shared.command(Command::Flush(outbox.clone())) {
            Ok(()) => Ok(true),
            Err(_) => Err(RpcError::Stopped),
        }
    }
}

/// Who writes the frames a thread other than the loop's queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    /// The sending thread itself, when the loop has none of the connection's bytes in
    /// flight: for frames someone waits on (an ask, a reply, an explicit flush), which
    /// then leave without a hand-off to the loop.
    Caller,
    /// The loop, which writes everything queued in one system call: for streams of
    /// one-way sends, where a system call per frame in the sender would cost far more.
    Loop,
}

#[derive(Clone, Debug)]
enum RefTarget {
    /// A remote listener. The connection to it is looked up (and opened if need be) by
    /// the first send and kept for the next ones while it stays open; once it is closed,
    /// each send looks it up again. A send to a kept one locks no map of the environment
    /// and touches no reference count shared with the event loop.
    Remote {
        address: SocketAddr,
        /// The connection the first send found. Once the loop has closed it, it holds no
        /// buffer, socket or session keys, only its encoder's scratch, until the
        /// reference goes.
        first: OnceLock<Arc<Outbox>>,
    },
    /// A given connection (or the local outbox).
    Connection(Arc<Outbox>),
}

/// A reference to an endpoint, local or remote: an address and a name.
#[derive(Clone)]
pub struct EndpointRef {
    env: RpcEnvHandle,
    name: SharedStr,
    target: RefTarget,
    /// Whether a deferred send left the loop untold (shared by clones).
    owes_flush: Arc<AtomicBool>,
}

impl std::fmt::Debug for EndpointRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EndpointRef({})", self.describe())
    }
}

impl EndpointRef {
    pub(crate) fn over(env: RpcEnvHandle, connection: Arc<Outbox>, name: SharedStr) -> Self {
        EndpointRef {
            env,
            name,
            target: RefTarget::Connection(connection),
            owes_flush: Arc::default(),
        }
    }

    /// The environment this reference sends through.
    pub fn env(&self) -> &RpcEnvHandle {
        &self.env
    }

    /// The endpoint's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The remote address, or `None` for an endpoint of this environment.
    pub fn address(&self) -> Option<SocketAddr> {
        match &self.target {
            RefTarget::Remote { address, .. } => Some(*address),
            RefTarget::Connection(outbox) if outbox.kind() == OutboxKind::Local => None,
            RefTarget::Connection(outbox) => Some(outbox.peer()),
        }
    }

    fn describe(&self) -> String {
        match self.address() {
            Some(address) => format!("endpoint {} at {address}", self.name),
            None => format!("local endpoint {}", self.name),
        }
    }

    fn outbox(&self) -> Arc<Outbox> {
        self.with_outbox(Arc::clone)
    }

    /// Calls `f` with the outbox, without cloning it when the reference holds it.
    fn with_outbox<R>(&self, f: impl FnOnce(&Arc<Outbox>) -> R) -> R {
        match &self.target {
            RefTarget::Remote { address, first } => {
                if let Some(kept) = first.get().filter(|kept| !kept.is_closed()) {
                    return f(kept);
                }
                let outbox = self.env.shared.outgoing(*address);
                // Only the first is kept: after a reconnection every send looks up.
                let _ = first.set(outbox.clone());
                f(&outbox)
            }
            RefTarget::Connection(outbox) => f(outbox),
        }
    }

    /// Bytes queued on this endpoint's connection and not yet written to its socket: how
    /// far the peer is behind in taking what it was sent. 0 for a remote listener this
    /// environment has no connection to (none is opened to find out). A sender refused
    /// with [`RpcError::OutboxFull`] reads it to learn when there is room again; it
    /// stays within `rpc.outbox.maxBytes` plus one frame.
    pub fn queued_bytes(&self) -> usize {
        match &self.target {
            RefTarget::Remote { address, .. } => self.env.shared.queued_to(*address).0,
            RefTarget::Connection(outbox) => outbox.queued(),
        }
    }

    /// Bytes written to this endpoint's connection's socket over its life (0 where
    /// [`EndpointRef::queued_bytes`] is 0 for want of a connection). Read twice with
    /// bytes queued in between, it tells a peer that takes what it is sent slowly (it
    /// grew) from one that takes nothing (it did not).
    pub fn bytes_written(&self) -> u64 {
        match &self.target {
            RefTarget::Remote { address, .. } => self.env.shared.queued_to(*address).1,
            RefTarget::Connection(outbox) => outbox.written_total(),
        }
    }

    /// Sends a one-way message. Fails at once if the connection's outbox is full
    /// ([`RpcError::OutboxFull`]), the connection is gone, or the message is too large.
    ///
    /// The event loop writes it, together with whatever else is queued for the connection
    /// by then: streams of sends leave many frames per system call. For one message that
    /// should leave without a hand-off to the loop, [`EndpointRef::send_deferred`] it and
    /// [`EndpointRef::flush`].
    pub fn send(&self, message: &Message) -> Result<(), RpcError> {
        self.send_outgoing(message)
    }

    /// [`EndpointRef::send`] of a catalogue message or a typed value.
    pub(crate) fn send_outgoing<O: Outgoing + ?Sized>(&self, message: &O) -> Result<(), RpcError> {
        let route = Route::OneWay {
            endpoint: self.name.clone(),
        };
        self.with_outbox(|outbox| self.env.push(outbox, &route, message, Writer::Loop))
    }

    /// Queues a one-way message without telling the event loop: it leaves with the next
    /// [`EndpointRef::flush`] of this reference (or of a clone). For a thread that sends
    /// many messages in a row: one wake-up of the loop, and one write, for all of them.
    ///
    /// Flush soon: until then, frames that others send to the same connection wait too
    /// (the loop is told of a connection once for everything queued on it).
    ///
    /// ```
    /// # use flint_rpc::{Bytes, Conf, Message, RpcEnv};
    /// # let env = RpcEnv::new(&Conf::new()).unwrap();
    /// # let peer = env.handle().local_ref("nobody");
    /// for tag in 0..3 {
    ///     peer.send_deferred(&Message::Custom { tag, body: Bytes::new() })?;
    /// }
    /// peer.flush(); // all three leave at once
    /// # Ok::<(), flint_rpc::RpcError>(())
    /// ```
    pub fn send_deferred(&self, message: &Message) -> Result<(), RpcError> {
        self.send_deferred_outgoing(message)
    }

    /// [`EndpointRef::send_deferred`] of a catalogue message or a typed value.
    pub(crate) fn send_deferred_outgoing<O: Outgoing + ?Sized>(
        &self,
        message: &O,
    ) -> Result<(), RpcError> {
        let route = Route::OneWay {
            endpoint: self.name.clone(),
        };
        if self.with_outbox(|outbox| self.env.push_deferred(outbox, &route, message))? {
            self.owes_flush.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Sends what [`EndpointRef::send_deferred`] queued. On a connection this environment
    /// opened, this thread writes it to the socket itself when the loop has none of the
    /// connection's bytes in flight (one hand-off between threads fewer); else the loop
    /// does. (Frames another sender queued first, and has yet to flush, wait for that
    /// sender's flush.)
    pub fn flush(&self) {
        if self.owes_flush.swap(false, Ordering::AcqRel) {
            // Refused only once the loop has shut down: what send_deferred queued is
            // then lost, as anything still queued when an environment stops.
            let _ = self.with_outbox(|outbox| self.env.flush(outbox, Writer::Caller));
        }
    }

    /// Hands what [`EndpointRef::send_deferred`] queued to the event loop, which writes it
    /// while this thread goes on: for a thread with more work at hand, to which the system
    /// call of [`EndpointRef::flush`] would be a delay.
    pub fn flush_in_background(&self) {
        if self.owes_flush.swap(false, Ordering::AcqRel) {
            // Refused only once the loop has shut down (see flush).
            let _ = self.with_outbox(|outbox| self.env.flush(outbox, Writer::Loop));
        }
    }

    /// Asks and waits for the reply, at most rpc.askTimeout.
    pub fn ask(&self, message: &Message) -> Result<Reply, RpcError> {
        self.ask_timeout(message, self.env.shared.settings.ask_timeout)
    }

    /// Asks and waits for the reply, at most `timeout`. Not from a turn of the loop
    /// (a handler), which would wait on itself: handlers use [`EndpointRef::ask_then`].
    ///
    /// A timeout error names what set the timeout: a `timeout` equal to the configured
    /// one (callers usually pass [`Settings::ask_timeout`] on) is put down to its key,
    /// any other to the caller.
    pub fn ask_timeout(&self, message: &Message, timeout: Duration) -> Result<Reply, RpcError> {
        self.ask_timeout_outgoing(message, timeout)
    }

    /// [`EndpointRef::ask_timeout`] of a catalogue message or a typed value.
    pub(crate) fn ask_timeout_outgoing<O: Outgoing + ?Sized>(
        &self,
        message: &O,
        timeout: Duration,
    ) -> Result<Reply, RpcError> {
        assert!(
            !self.env.shared.in_loop_turn(),
            "a blocking ask in a turn of the event loop would wait forever; use ask_then"
        );
        let slot = Arc::new(ReplySlot::new());
        let now = Instant::now();
        let id = self.start_ask(message, now, timeout, AskWaiter::Blocking(slot.clone()))?;
        if let Some(result) = slot.wait_until(deadline_after(now, timeout)) {
            return result;
        }
        // The loop times asks out itself, at this same deadline; if it has not, it is busy,
        // stuck or gone, and the asker must not wait on it. Whichever ending completes the
        // slot first is the outcome; taking the ask out of the table stops later ones.
        let shared = &self.env.shared;
        shared
            .asks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(id);
        slot.complete(Err(RpcError::AskTimeout {
            target: self.describe(),
            timeout,
            set_by: self.timeout_set_by(timeout),
        }));
        slot.wait().unwrap_or(Err(RpcError::Stopped))
    }

    /// Asks, and calls `then` in a turn of the loop with the reply, the timeout or the loss
    /// of the connection, whichever comes first. A timeout error names what set the
    /// timeout, as for [`EndpointRef::ask_timeout`].
    pub fn ask_then(
        &self,
        message: &Message,
        timeout: Duration,
        then: impl FnOnce(Result<Reply, RpcError>) + Send + 'static,
    ) -> Result<(), RpcError> {
        self.ask_then_outgoing(message, timeout, then)
    }

    /// [`EndpointRef::ask_then`] of a catalogue message or a typed value.
    pub(crate) fn ask_then_outgoing<O: Outgoing + ?Sized>(
        &self,
        message: &O,
        timeout: Duration,
        then: impl FnOnce(Result<Reply, RpcError>) + Send + 'static,
    ) -> Result<(), RpcError> {
        self.start_ask(
            message,
            Instant::now(),
            timeout,
            AskWaiter::Callback(Box::new(then)),
        )
        .map(drop)
    }

    fn timeout_set_by(&self, timeout: Duration) -> TimeoutSource {
        let settings = &self.env.shared.settings;
        if timeout == settings.ask_timeout {
            settings.ask_timeout_set_by
        } else {
            TimeoutSource::Caller
        }
    }

    /// Registers and sends an ask, returning its request id. An error means the waiter
    /// will never be called; otherwise it will be, exactly once.
    fn start_ask<O: Outgoing + ?Sized>(
        &self,
        message: &O,
        now: Instant,
        timeout: Duration,
        waiter: AskWaiter,
    ) -> Result<u64, RpcError> {
        let outbox = self.outbox();
        // A blocking asker waits for its own deadline and then ends the ask itself; only
        // a callback needs the loop to time it out.
        let loop_times_out = !matches!(waiter, AskWaiter::Blocking(_));
        let completion = AskCompletion {
            target: self.describe(),
            timeout_set_by: self.timeout_set_by(timeout),
            waiter,
        };
        let shared = &self.env.shared;
        let started = ask::start(
            || shared.asks.lock().unwrap_or_else(|e| e.into_inner()),
            now,
            timeout,
            outbox.key(),
            completion,
            |request_id| {
                let route = Route::Ask {
                    request_id,
                    endpoint: self.name.clone(),
                };
                self.env.push_deferred(&outbox, &route, message)
            },
        )?;
        match started {
            Started::Sent {
                id,
                wake_loop,
                sent: flush,
            } => {
                // A refusal leaves the ask to its timeout or to the shutdown's refusal of
                // every waiting ask: it is registered, and its waiter is called once.
                let told = flush && self.env.flush(&outbox, Writer::Caller).unwrap_or(false);
                if !told && wake_loop && loop_times_out && !shared.in_loop_turn() {
                    // Nothing else may wake the loop (the outbox waits for a deferred
                    // flush, say), and it sleeps past this ask's deadline.
                    shared.handoff.wake();
                }
                Ok(id)
            }
            Started::EndedElsewhere { id } => Ok(id),
        }
    }
}
