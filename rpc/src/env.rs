//! The RPC environment: its shared state, the handle other threads use, and references
//! to endpoints.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flint_wire::{Message, Route, SharedStr};
use rustc_hash::FxHashMap;
use tracing::{error, warn};

use crate::ask::{self, PendingAsks, ReplySlot, Started};
use crate::conf::Conf;
use crate::endpoint::{Endpoint, Reply};
use crate::error::{RpcError, TimeoutSource};
use crate::event_loop::EventLoop;
use crate::handoff::{Handoff, Notify};
use crate::outbox::{ConnKey, Outbox, OutboxKind};
use crate::settings::Settings;
use crate::timer::deadline_after;
use crate::turns::{LoopCell, LoopLease, Sleeper};

/// The address of an environment that does not listen ([`RpcEnv::client`]): the
/// unspecified address and port 0, which no peer can connect to.
pub const CLIENT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Key of the local outbox (messages between endpoints of one environment).
pub(crate) const LOCAL_KEY: ConnKey = 2;
/// The first key given to a connection.
pub(crate) const FIRST_CONNECTION_KEY: ConnKey = 3;

/// How an ask ends up with its asker.
pub(crate) enum AskWaiter {
    /// A thread blocked in [`EndpointRef::ask`].
    Blocking(Arc<ReplySlot<Result<Reply, RpcError>>>),
    /// A callback run in a turn of the loop.
    Callback(Box<dyn FnOnce(Result<Reply, RpcError>) + Send>),
}

/// An outstanding ask's waiter, with what error texts need.
pub(crate) struct AskCompletion {
    pub(crate) target: String,
    pub(crate) timeout_set_by: TimeoutSource,
    pub(crate) waiter: AskWaiter,
}

impl AskCompletion {
    /// The error of this ask's timeout.
    pub(crate) fn timeout_error(&self, timeout: Duration) -> RpcError {
        RpcError::AskTimeout {
            target: self.target.clone(),
            timeout,
            set_by: self.timeout_set_by,
        }
    }

    /// Hands the ending to the asker. A callback runs in a turn of the loop: one that panics
    /// is logged and the loop goes on, as for a panicking endpoint.
    pub(crate) fn complete(self, result: Result<Reply, RpcError>) {
        match self.waiter {
            AskWaiter::Blocking(slot) => {
                slot.complete(result);
            }
            AskWaiter::Callback(callback) => {
                if catch_unwind(AssertUnwindSafe(|| callback(result))).is_err() {
                    error!(ask = %self.target, "the callback of an ask panicked; the loop goes on");
                }
            }
        }
    }
}

/// Work handed to the loop.
pub(crate) enum Command {
    /// An outbox has frames to write (a new outgoing one also needs its connection).
    Flush(Arc<Outbox>),
    /// Register an endpoint; the reply says whether it worked.
    Register(SharedStr, Box<dyn Endpoint>, RegisterReply),
    /// Stop an endpoint.
    Unregister(SharedStr),
    /// Stop the environment.
    Stop,
    /// Panic on the loop thread: lets tests check what the thread's death leaves behind,
    /// which no endpoint can cause (the loop catches their panics).
    #[cfg(all(test, not(loom)))]
    PanicForTest,
}

/// The answer a registration waits for. Dropped unanswered (the loop shut down before it
/// came to it, or its thread died), it answers [`RpcError::Stopped`]: a caller of
/// [`RpcEnvHandle::register`] never waits for a loop that is gone.
pub(crate) struct RegisterReply(Arc<ReplySlot<Result<(), RpcError>>>);

impl RegisterReply {
    /// Answers the registration (the first answer counts).
    pub(crate) fn complete(&self, result: Result<(), RpcError>) {
        self.0.complete(result);
    }
}

impl Drop for RegisterReply {
    fn drop(&mut self) {
        // A no-op when it was answered.
        self.0.complete(Err(RpcError::Stopped));
    }
}

/// Wakes the loop thread wherever it sleeps: on the [`Sleeper`] between turns, or on
/// the loop's own poller in the shutdown's flush wait. The poller's wake-up alone would
/// not do: it reaches the [`Sleeper`] only through the poller, where a thread lent to
/// the loop may take it first and leave the loop thread asleep, with the one wake-up of
/// its sleep spent.
pub(crate) struct WakerNotify {
    pub(crate) poller: mio::Waker,
    pub(crate) sleeper: Arc<mio::Waker>,
}

impl Notify for WakerNotify {
    fn notify(&self) {
        // A failed wake-up can only mean the loop is gone, which stop() handles.
        let _ = self.sleeper.wake();
        let _ = self.poller.wake();
    }
}

/// State shared by the loop, its thread and every handle.
pub(crate) struct Shared {
    pub(crate) settings: Settings,
    pub(crate) handoff: Handoff<Command, WakerNotify>,
    pub(crate) asks: Mutex<PendingAsks<AskCompletion, ConnKey>>,
    outgoing: Mutex<FxHashMap<SocketAddr, Arc<Outbox>>>,
    pub(crate) local: Arc<Outbox>,
    next_key: AtomicU64,
    /// The loop, and who turns it.
    pub(crate) cell: LoopCell,
    pub(crate) address: SocketAddr,
    pub(crate) stopped: AtomicBool,
    pub(crate) accepted: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) connected: AtomicU64,
    pub(crate) budget_waits: AtomicU64,
    pub(crate) most_reserved: AtomicU64,
    /// Connections whose deadlines the loop looked at, one by one (unit tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) deadline_checks: AtomicU64,
}

/// Counters of an environment's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// Connections accepted from remote peers.
    pub accepted: u64,
    /// Connections from remote peers closed as soon as they were accepted, because
    /// `rpc.io.maxConnections` were open.
    pub refused: u64,
    /// Outgoing connections established.
    pub connected: u64,
    /// Times a connection waited, unread, for room in the receive budget
    /// (rpc.io.maxReceiveBytes) for its next frame.
    pub budget_waits: u64,
    /// The most bytes the receive budget held for large frames at once.
    pub most_reserved: u64,
}

impl Shared {
    pub(crate) fn new_key(&self) -> ConnKey {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether this thread is turning the loop right now (the loop thread, or a thread
    /// lent to it): what it sends is written at the end of the turn, and it must not
    /// wait for the loop.
    pub(crate) fn in_loop_turn(&self) -> bool {
        crate::turns::in_turn(self)
    }

    /// Hands `command` to the loop (from a turn of the loop with no wake-up: the turn
    /// drains the queue before it ends); once the loop has shut down, hands it back.
    pub(crate) fn command(&self, command: Command) -> Result<(), Command> {
        if self.in_loop_turn() {
            self.handoff.push_quiet(command)
        } else {
            self.handoff.push(command)
        }
    }

    /// Fails what the loop can no longer serve, once it has shut down or its thread died:
    /// closes the hand-off (commands still queued are dropped, which answers their
    /// registrations, and later ones are refused at once) and fails every ask still
    /// waiting for its reply.
    pub(crate) fn refuse_the_rest(&self) {
        let mut commands = Vec::new();
        self.handoff.close(&mut commands);
        drop(commands);
        let mut asks = Vec::new();
        self.asks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_all(&mut asks);
        for ask in asks {
            ask.completion.complete(Err(RpcError::Stopped));
        }
    }

    /// Forgets an outgoing outbox once its connection is gone, so the next send
    /// reconnects.
    pub(crate) fn forget_outgoing(&self, outbox: &Arc<Outbox>) {
        if let OutboxKind::Outgoing(address) = outbox.kind() {
            let mut outgoing = self.outgoing.lock().unwrap_or_else(|e| e.into_inner());
            if outgoing
                .get(&address)
                .is_some_and(|current| Arc::ptr_eq(current, outbox))
            {
                outgoing.remove(&address);
            }
        }
    }

    /// The outbox of the connection to `address`, opened on first use.
    fn outgoing(&self, address: SocketAddr) -> Arc<Outbox> {
        let mut outgoing = self.outgoing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(outbox) = outgoing.get(&address) {
            if !outbox.is_closed() {
                return outbox.clone();
            }
        }
        let outbox = Arc::new(Outbox::new(
            self.new_key(),
            OutboxKind::Outgoing(address),
            address,
            self.settings.max_payload,
            self.settings.outbox_limit,
        ));
        outgoing.insert(address, outbox.clone());
        outbox
    }
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

/// Says, once per process, when an environment's `rpc.io.maxConnections` is more than
/// the descriptor limit allows: connections past the limit then fail in the kernel (and
/// with them whatever else the process opens), not at flint's cap.
#[cfg(unix)]
fn warn_if_short_of_descriptors(max_connections: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let limit = crate::socket::descriptor_limit();
    if (max_connections as u64).saturating_add(DESCRIPTORS_BESIDE_PEERS) > limit
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        warn!(
            "rpc.io.maxConnections ({max_connections}) is more than this process's limit of \
             {limit} open descriptors allows; raise the limit (ulimit -n) or lower \
             rpc.io.maxConnections"
        );
    }
}

/// Descriptors a process running an environment needs besides its peers' connections
/// (its pollers, its listener, its own connections out, files): a margin, not a count.
#[cfg(unix)]
const DESCRIPTORS_BESIDE_PEERS: u64 = 64;

impl RpcEnvHandle {
    /// The address this environment listens on; for one that does not listen
    /// ([`RpcEnv::client`]), [`CLIENT_ADDRESS`], which no peer can reach.
    pub fn address(&self) -> SocketAddr {
        self.shared.address
    }

    /// Counters of its connections.
    pub fn stats(&self) -> RpcStats {
        RpcStats {
            accepted: self.shared.accepted.load(Ordering::Relaxed),
            refused: self.shared.refused.load(Ordering::Relaxed),
            connected: self.shared.connected.load(Ordering::Relaxed),
            budget_waits: self.shared.budget_waits.load(Ordering::Relaxed),
            most_reserved: self.shared.most_reserved.load(Ordering::Relaxed),
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
            target: RefTarget::Remote(address),
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

    /// Registers `endpoint` under `name` and waits until its `on_start` has run. From a
    /// turn of the loop (inside a handler) it does not wait: the endpoint starts right
    /// after the current call.
    pub fn register(&self, name: &str, endpoint: impl Endpoint) -> Result<EndpointRef, RpcError> {
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(RpcError::Stopped);
        }
        let done = Arc::new(ReplySlot::new());
        let register =
            Command::Register(name.into(), Box::new(endpoint), RegisterReply(done.clone()));
        if self.shared.command(register).is_err() {
            // The loop shut down after the check above.
            return Err(RpcError::Stopped);
        }
        if !self.shared.in_loop_turn() {
            done.wait().unwrap_or(Err(RpcError::Stopped))?;
        }
        Ok(self.local_ref(name))
    }

    /// Lends this thread to the event loop while it waits for something the loop will
    /// bring: each [`LoopLease::turn`] turns the loop on this thread if no other thread
    /// is turning it, so that what the thread waits for reaches it without a hand-off
    /// from the loop thread. While lent threads keep turning, the loop thread leaves the
    /// sockets to them; it takes them back when the last lease is dropped, or within
    /// about a millisecond once lent threads stop turning.
    ///
    /// For a thread that would otherwise poll for its work (a task runner between
    /// tasks): it then polls the sockets instead, and the loop thread does not. While the
    /// lease lasts and the thread does something else, the loop thread writes what the
    /// thread sent deferred without waiting for its flush, looking every few
    /// milliseconds. Endpoint
    /// handlers then run on this thread: lend only a thread that holds no lock a handler
    /// takes, to an environment whose handlers do not block (a blocked handler holds up
    /// the lent thread as it would the loop thread).
    pub fn lend(&self) -> LoopLease {
        LoopLease::new(self.shared.clone())
    }

    /// Stops the endpoint `name` (its `on_stop` runs on the loop).
    pub fn unregister(&self, name: &str) {
        // Refused only once the loop has shut down, which stopped every endpoint.
        let _ = self.shared.command(Command::Unregister(name.into()));
    }

    pub(crate) fn push(
        &self,
        outbox: &Arc<Outbox>,
        route: &Route,
        message: &Message,
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
    fn push_deferred(
        &self,
        outbox: &Arc<Outbox>,
        route: &Route,
        message: &Message,
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
    /// A remote listener; the connection is looked up (and opened) per send.
    Remote(SocketAddr),
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
            RefTarget::Remote(address) => Some(*address),
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
        match &self.target {
            RefTarget::Remote(address) => self.env.shared.outgoing(*address),
            RefTarget::Connection(outbox) => outbox.clone(),
        }
    }

    /// Calls `f` with the outbox, without cloning it when the reference holds it.
    fn with_outbox<R>(&self, f: impl FnOnce(&Arc<Outbox>) -> R) -> R {
        match &self.target {
            RefTarget::Remote(address) => f(&self.env.shared.outgoing(*address)),
            RefTarget::Connection(outbox) => f(outbox),
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
    /// # use flint_rpc::{Conf, RpcEnv};
    /// # use flint_wire::Message;
    /// # let env = RpcEnv::new(&Conf::new()).unwrap();
    /// # let driver = env.handle().local_ref("nobody");
    /// for _ in 0..3 {
    ///     driver.send_deferred(&Message::ReviveOffers)?;
    /// }
    /// driver.flush(); // all three leave at once
    /// # Ok::<(), flint_rpc::RpcError>(())
    /// ```
    pub fn send_deferred(&self, message: &Message) -> Result<(), RpcError> {
        let route = Route::OneWay {
            endpoint: self.name.clone(),
        };
        let outbox = self.outbox();
        if self.env.push_deferred(&outbox, &route, message)? {
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
            let _ = self.env.flush(&self.outbox(), Writer::Caller);
        }
    }

    /// Hands what [`EndpointRef::send_deferred`] queued to the event loop, which writes it
    /// while this thread goes on: for a thread with more work at hand, to which the system
    /// call of [`EndpointRef::flush`] would be a delay.
    pub fn flush_in_background(&self) {
        if self.owes_flush.swap(false, Ordering::AcqRel) {
            // Refused only once the loop has shut down (see flush).
            let _ = self.env.flush(&self.outbox(), Writer::Loop);
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
    fn start_ask(
        &self,
        message: &Message,
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

/// An RPC environment: one mio event loop thread, a listener, endpoints by name, and
/// connections opened on first use.
///
/// ```
/// use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv};
/// use flint_wire::{ArchivedMessage, Message};
///
/// struct Echo;
/// impl Endpoint for Echo {
///     fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
///         if let ArchivedMessage::Custom { tag, .. } = message.message() {
///             let _ = message.reply(&Message::Ack { ok: *tag == 7 });
///         }
///     }
/// }
///
/// let server = RpcEnv::new(&Conf::new())?;
/// server.handle().register("echo", Echo)?;
/// let client = RpcEnv::new(&Conf::new())?;
/// let echo = client.handle().endpoint_ref(server.address(), "echo");
/// let reply = echo.ask(&Message::Custom { tag: 7, body: bytes::Bytes::new() })?;
/// assert!(matches!(reply.message(), ArchivedMessage::Ack { ok: true }));
/// client.stop();
/// server.stop();
/// # Ok::<(), flint_rpc::RpcError>(())
/// ```
pub struct RpcEnv {
    handle: RpcEnvHandle,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RpcEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcEnv")
            .field("address", &self.address())
            .finish()
    }
}

impl RpcEnv {
    /// Binds the listener (rpc.bindAddress, rpc.port) and starts the loop thread.
    pub fn new(conf: &Conf) -> Result<RpcEnv, RpcError> {
        Self::with_settings(Settings::from_conf(conf)?)
    }

    /// An environment that only opens connections, as the seeds' executors run theirs
    /// ("client mode"): it has no listener, so no peer can connect to it, and its
    /// endpoints hear only from the peers it connected to, over those connections (an
    /// ask's reply, and whatever the peer sends back through [`Incoming::sender_ref`]).
    /// `rpc.bindAddress` and `rpc.port` are not used; [`RpcEnv::address`] is
    /// [`CLIENT_ADDRESS`].
    ///
    /// ```
    /// use flint_rpc::{Conf, RpcEnv, CLIENT_ADDRESS};
    ///
    /// let client = RpcEnv::client(&Conf::new())?;
    /// assert_eq!(client.address(), CLIENT_ADDRESS);
    /// client.stop();
    /// # Ok::<(), flint_rpc::RpcError>(())
    /// ```
    ///
    /// [`Incoming::sender_ref`]: crate::Incoming::sender_ref
    pub fn client(conf: &Conf) -> Result<RpcEnv, RpcError> {
        Self::with_settings(Settings {
            listen: false,
            ..Settings::from_conf(conf)?
        })
    }

    /// As [`RpcEnv::new`] (or [`RpcEnv::client`] without [`Settings::listen`]), with
    /// settings already read.
    pub fn with_settings(settings: Settings) -> Result<RpcEnv, RpcError> {
        let listener = if settings.listen {
            #[cfg(unix)]
            warn_if_short_of_descriptors(settings.max_connections);
            Some(crate::socket::listen(settings.bind, &settings.socket)?)
        } else {
            None
        };
        let address = match &listener {
            Some(listener) => listener.local_addr()?,
            None => CLIENT_ADDRESS,
        };
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), crate::event_loop::WAKER)?;
        let (sleeper, sleeper_waker) = {
            use std::os::fd::AsRawFd;
            Sleeper::watching(poll.as_raw_fd())?
        };
        let sleeper_waker = Arc::new(sleeper_waker);
        let local = Arc::new(Outbox::new(
            LOCAL_KEY,
            OutboxKind::Local,
            address,
            settings.max_payload,
            settings.outbox_limit,
        ));
        let shared = Arc::new(Shared {
            settings,
            handoff: Handoff::new(WakerNotify {
                poller: waker,
                sleeper: sleeper_waker.clone(),
            }),
            asks: Mutex::new(PendingAsks::new()),
            outgoing: Mutex::new(FxHashMap::default()),
            local,
            next_key: AtomicU64::new(FIRST_CONNECTION_KEY),
            cell: LoopCell::new(sleeper_waker),
            address,
            stopped: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            #[cfg(all(test, not(loom)))]
            deadline_checks: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            connected: AtomicU64::new(0),
            budget_waits: AtomicU64::new(0),
            most_reserved: AtomicU64::new(0),
        });
        let listener_port = listener.as_ref().map(|_| address.port());
        let event_loop = EventLoop::new(poll, listener, shared.clone())?;
        shared.cell.install(event_loop);
        let loop_shared = shared.clone();
        let thread = std::thread::Builder::new()
            // A client's loop thread is named for its outgoing connections only (a thread
            // name shows 15 bytes).
            .name(match listener_port {
                Some(port) => format!("flint-rpc-{port}"),
                None => "flint-rpc-out".to_owned(),
            })
            .spawn(move || crate::turns::run_loop_thread(loop_shared, sleeper));
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                // The loop holds the shared state: take it out so that both are freed.
                drop(shared.cell.uninstall());
                return Err(e.into());
            }
        };
        Ok(RpcEnv {
            handle: RpcEnvHandle { shared },
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The address the listener is bound to; [`CLIENT_ADDRESS`] for an environment that
    /// does not listen ([`RpcEnv::client`]).
    pub fn address(&self) -> SocketAddr {
        self.handle.address()
    }

    /// A handle for other threads and for endpoints.
    pub fn handle(&self) -> RpcEnvHandle {
        self.handle.clone()
    }

    /// Stops the environment: every endpoint's `on_stop` runs, then what was sent
    /// before and from `on_stop` gets rpc.shutdown.flushTimeout to be written (connections
    /// still being set up finish within it too), sockets close and the loop thread is
    /// joined. Sends are refused once the endpoints have stopped. Idempotent.
    pub fn stop(&self) {
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            // Refused only if the loop is already shutting down, which is what Stop asks.
            let _ = self.handle.shared.handoff.push(Command::Stop);
            let _ = thread.join();
        }
        // The loop refuses sends from when its endpoints have stopped; if it died, it
        // never got there.
        self.handle.shared.stopped.store(true, Ordering::Release);
    }
}

impl Drop for RpcEnv {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::endpoint::{EndpointContext, Incoming};
    use std::sync::mpsc;

    struct Quiet;

    impl Endpoint for Quiet {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {}
    }

    #[test]
    fn a_registration_dropped_unanswered_answers_stopped() {
        let done = Arc::new(ReplySlot::new());
        drop(RegisterReply(done.clone()));
        assert!(matches!(done.wait(), Some(Err(RpcError::Stopped))));
        // An answered one keeps its answer.
        let done = Arc::new(ReplySlot::new());
        let reply = RegisterReply(done.clone());
        reply.complete(Ok(()));
        drop(reply);
        assert!(matches!(done.wait(), Some(Ok(()))));
    }

    /// `register` checks that the environment runs, then queues its command: a loop that
    /// shuts down in between must not leave it waiting for an answer forever.
    #[test]
    fn a_registration_racing_the_shutdown_is_refused_not_left_waiting() {
        let env = RpcEnv::new(&Conf::default()).unwrap();
        let handle = env.handle();
        env.stop();
        // As if the check had passed just before the loop shut down.
        handle.shared.stopped.store(false, Ordering::Release);
        let (answer, answered) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = answer.send(handle.register("late", Quiet).map(|_| ()));
        });
        let result = answered
            .recv_timeout(Duration::from_secs(10))
            .expect("register answers once the loop is gone");
        assert!(matches!(result, Err(RpcError::Stopped)), "{result:?}");
    }

    /// A send that passed the check that the environment runs, then found the loop shut
    /// down, is refused: nobody will write its frame, so it must not report success.
    #[test]
    fn a_send_racing_the_shutdown_is_refused_not_reported_sent() {
        let env = RpcEnv::new(&Conf::default()).unwrap();
        let handle = env.handle();
        let remote = handle.endpoint_ref("127.0.0.1:9".parse().unwrap(), "anyone");
        let local = handle.local_ref("anyone");
        env.stop();
        // As if the check had passed just before the loop shut down.
        handle.shared.stopped.store(false, Ordering::Release);
        for target in [&remote, &local] {
            let sent = target.send(&Message::ReviveOffers);
            assert!(matches!(sent, Err(RpcError::Stopped)), "{sent:?}");
        }
    }

    /// Runs `f` on a thread of its own; fails the test if it takes more than 10 s, rather
    /// than hanging it.
    fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (answer, answered) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = answer.send(f());
        });
        answered
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what} waits for a loop thread that died"))
    }

    /// A panic of the loop thread itself (a bug in the loop: handlers' panics are caught)
    /// must leave nobody waiting: an ask in flight is answered, a registration and a send
    /// after it are refused, and stopping the environment returns.
    #[test]
    fn a_loop_thread_that_panics_refuses_what_waits_and_what_comes() {
        let env = RpcEnv::new(&Conf::default()).unwrap();
        let handle = env.handle();
        let quiet = handle.register("quiet", Quiet).unwrap();
        let asker = quiet.clone();
        let (answer, answered) = mpsc::channel();
        std::thread::spawn(move || {
            let asked = asker.ask_timeout(&Message::ReviveOffers, Duration::from_secs(600));
            let _ = answer.send(asked.map(|_| ()));
        });
        // The ask waits (Quiet never replies) before the loop dies.
        let deadline = Instant::now() + Duration::from_secs(10);
        while handle.shared.asks.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the ask never got under way");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(handle.shared.command(Command::PanicForTest).is_ok());

        let asked = answered
            .recv_timeout(Duration::from_secs(10))
            .expect("the ask in flight is answered once the loop thread is gone");
        assert!(matches!(asked, Err(RpcError::Stopped)), "{asked:?}");
        let registered = within_10s("register", {
            let handle = handle.clone();
            move || handle.register("late", Quiet).map(|_| ())
        });
        assert!(
            matches!(registered, Err(RpcError::Stopped)),
            "{registered:?}"
        );
        let sent = quiet.send(&Message::ReviveOffers);
        assert!(matches!(sent, Err(RpcError::Stopped)), "{sent:?}");
        within_10s("stop", move || env.stop());
    }
}
