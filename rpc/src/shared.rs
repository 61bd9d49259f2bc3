//! The state an environment's threads share: its settings, the hand-off of work to the
//! loop, the table of outstanding asks, the outboxes of its outgoing connections and its
//! counters. Every layer above (references, endpoints, the event loop, the threads that
//! turn it) works on this; this knows none of them.
//!
//! Two things it carries are typed by a layer above, and held here without their type:
//! the endpoint a registration hands to the loop (see [`Command::Register`]), and the
//! loop itself, which a handle reaches only to lend a thread to it (see
//! [`Shared::loop_cell`]). Both are crossed once per registration or lease, never per
//! message.

use std::any::Any;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe, RefUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use flint_wire::SharedStr;
use rustc_hash::FxHashMap;
use tracing::error;

use crate::ask::{PendingAsks, Reply, ReplySlot};
use crate::error::{RpcError, TimeoutSource};
use crate::handoff::{Handoff, Notify};
use crate::outbox::{ConnKey, Outbox, OutboxKind};
use crate::settings::Settings;

/// Key of the local outbox (messages between endpoints of one environment).
pub(crate) const LOCAL_KEY: ConnKey = 2;
/// The first key given to a connection.
const FIRST_CONNECTION_KEY: ConnKey = 3;

/// How an ask ends up with its asker.
pub(crate) enum AskWaiter {
    /// A thread blocked in [`EndpointRef::ask`](crate::EndpointRef::ask).
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
    /// Register an endpoint; the reply says whether it worked. The endpoint is a
    /// `Box<dyn Endpoint>`, packed by
    /// [`RpcEnvHandle::register`](crate::RpcEnvHandle::register) and unpacked by the
    /// loop: the trait belongs to the endpoints' layer, above this one, since what
    /// endpoints are handed names the state here.
    Register(SharedStr, Box<dyn Any + Send>, RegisterReply),
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
/// [`RpcEnvHandle::register`](crate::RpcEnvHandle::register) never waits for a loop that
/// is gone.
pub(crate) struct RegisterReply(Arc<ReplySlot<Result<(), RpcError>>>);

impl RegisterReply {
    /// The answer to a registration whose caller waits on `slot`.
    pub(crate) fn new(slot: Arc<ReplySlot<Result<(), RpcError>>>) -> Self {
        RegisterReply(slot)
    }

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

/// Wakes the loop thread wherever it sleeps: on the [`Sleeper`](crate::turns::Sleeper)
/// between turns, or on the loop's own poller in the shutdown's flush wait. The poller's
/// wake-up alone would not do: it reaches the sleeper only through the poller, where a
/// thread lent to the loop may take it first and leave the loop thread asleep, with the
/// one wake-up of its sleep spent.
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

/// The loop's cell as the shared state holds it (see [`Shared::loop_cell`]). Unwind-safe,
/// as the cell is, so that handles stay usable across `catch_unwind`.
pub(crate) type ErasedLoopCell = dyn Any + Send + Sync + RefUnwindSafe;

/// State shared by the loop, its thread and every handle.
pub(crate) struct Shared {
    pub(crate) settings: Settings,
    pub(crate) handoff: Handoff<Command, WakerNotify>,
    pub(crate) asks: Mutex<PendingAsks<AskCompletion, ConnKey>>,
    outgoing: Mutex<FxHashMap<SocketAddr, Arc<Outbox>>>,
    pub(crate) local: Arc<Outbox>,
    next_key: AtomicU64,
    /// The loop and who turns it ([`LoopCell`](crate::turns::LoopCell)), for
    /// [`RpcEnvHandle::lend`](crate::RpcEnvHandle::lend) alone: held weakly, since the
    /// loop holds this state (its owners are the loop thread and the leases), and without
    /// its type, which lives in the lending layer above. A lease downcasts it once.
    pub(crate) loop_cell: Weak<ErasedLoopCell>,
    pub(crate) address: SocketAddr,
    pub(crate) stopped: AtomicBool,
    pub(crate) accepted: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) evicted: AtomicU64,
    pub(crate) connected: AtomicU64,
    pub(crate) budget_waits: AtomicU64,
    pub(crate) most_reserved: AtomicU64,
    /// Bytes read from and written to sockets, and frames received: one relaxed add per
    /// read or write syscall and per frame, from the loop thread alone.
    pub(crate) bytes_received: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) frames_received: AtomicU64,
    /// Connections closed for what their peer did, by reason (see [`RpcStats`]).
    ///
    /// [`RpcStats`]: crate::RpcStats
    pub(crate) closed_protocol: AtomicU64,
    pub(crate) closed_auth: AtomicU64,
    pub(crate) closed_timeout: AtomicU64,
    /// Connections whose deadlines the loop looked at, one by one (unit tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) deadline_checks: AtomicU64,
    /// What the loop thread runs before it writes, for lent threads busy elsewhere, what
    /// they queued ([`RpcEnvHandle::on_lent_flush`](crate::RpcEnvHandle::on_lent_flush)).
    pub(crate) lent_flush_hooks: Mutex<LentFlushHooks>,
}

/// See [`Shared::lent_flush_hooks`].
#[derive(Default)]
pub(crate) struct LentFlushHooks {
    /// The number the next hook gets.
    pub(crate) next: u64,
    /// By number, in the order they were added.
    pub(crate) hooks: Vec<(u64, Box<dyn Fn() + Send + Sync>)>,
}

impl Shared {
    /// The state of an environment at `address` (its listener's, or
    /// [`CLIENT_ADDRESS`](crate::CLIENT_ADDRESS)), whose loop is woken through `notify`
    /// and lent through `loop_cell`.
    pub(crate) fn new(
        settings: Settings,
        address: SocketAddr,
        notify: WakerNotify,
        loop_cell: Weak<ErasedLoopCell>,
    ) -> Self {
        let local = Arc::new(Outbox::new(
            LOCAL_KEY,
            OutboxKind::Local,
            address,
            settings.max_payload,
            settings.outbox_limit,
        ));
        Shared {
            settings,
            handoff: Handoff::new(notify),
            asks: Mutex::new(PendingAsks::new()),
            outgoing: Mutex::new(FxHashMap::default()),
            local,
            next_key: AtomicU64::new(FIRST_CONNECTION_KEY),
            loop_cell,
            address,
            stopped: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            #[cfg(all(test, not(loom)))]
            deadline_checks: AtomicU64::new(0),
            lent_flush_hooks: Mutex::new(LentFlushHooks::default()),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            connected: AtomicU64::new(0),
            budget_waits: AtomicU64::new(0),
            most_reserved: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            frames_received: AtomicU64::new(0),
            closed_protocol: AtomicU64::new(0),
            closed_auth: AtomicU64::new(0),
            closed_timeout: AtomicU64::new(0),
        }
    }

    pub(crate) fn new_key(&self) -> ConnKey {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether this thread is turning the loop right now (the loop thread, or a thread
    /// lent to it): what it sends is written at the end of the turn, and it must not
    /// wait for the loop.
    pub(crate) fn in_loop_turn(&self) -> bool {
        in_turn(self)
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

    /// Bytes queued on the connection to `address` and bytes written to it so far, if
    /// one is open; none is opened.
    pub(crate) fn queued_to(&self, address: SocketAddr) -> (usize, u64) {
        let outgoing = self.outgoing.lock().unwrap_or_else(|e| e.into_inner());
        outgoing
            .get(&address)
            .map_or((0, 0), |outbox| (outbox.queued(), outbox.written_total()))
    }

    /// The outbox of the connection to `address`, opened on first use.
    pub(crate) fn outgoing(&self, address: SocketAddr) -> Arc<Outbox> {
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

thread_local! {
    /// The environments whose loops this thread is turning right now (a handler of one
    /// may turn another's, through a blocking ask), by address.
    static TURNING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks this thread as turning `shared`'s loop while it lives.
pub(crate) struct Turning;

impl Turning {
    pub(crate) fn enter(shared: &Shared) -> Self {
        TURNING.with_borrow_mut(|turning| turning.push(shared as *const Shared as usize));
        Turning
    }
}

impl Drop for Turning {
    fn drop(&mut self) {
        TURNING.with_borrow_mut(|turning| turning.pop());
    }
}

/// Whether this thread is turning `shared`'s loop.
fn in_turn(shared: &Shared) -> bool {
    let address = shared as *const Shared as usize;
    TURNING.with_borrow(|turning| turning.contains(&address))
}
