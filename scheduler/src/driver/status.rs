//! Publishing [`StatusSnapshot`]s: the glue around the pure [`StatusBook`].
//!
//! A listener feeds the book the scheduler's events (with the driver locked, as every
//! listener runs: a counter or two per task end). An endpoint of its own on the driver's
//! RPC environment, `FlintStatus`, ticks on the event loop's timer every publishing
//! interval: it copies the core's live figures out under the driver's lock, builds a
//! snapshot and swaps it into the [`StatusBoard`]. Readers (the HTTP server's thread)
//! take an `Arc` of the last snapshot under the board's own mutex, held only for the
//! clone: however often the page is polled, the driver's lock is never taken for it.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use flint_rpc::log_budget::LogBudget;
use flint_rpc::RpcStats;
use flint_rpc::{Endpoint, EndpointContext, Incoming, RpcEnvHandle, TimerId};

use crate::core::driver_core::CoreView;
use crate::core::events::{SchedulerEvent, SchedulerListener};
use crate::driver::carry_out::{lock, DriverState};
use crate::status::{StatusBook, StatusSnapshot};

/// The endpoint that publishes snapshots; it takes no messages.
pub const STATUS_ENDPOINT: &str = "FlintStatus";

/// The shortest publishing interval: snapshots are built at most this often.
pub const MIN_PUBLISH_INTERVAL: Duration = Duration::from_millis(100);

/// Where the last [`StatusSnapshot`] is: cheap to clone, readable from any thread.
#[derive(Debug, Clone)]
pub struct StatusBoard {
    current: Arc<Mutex<Arc<StatusSnapshot>>>,
}

impl StatusBoard {
    fn new(first: StatusSnapshot) -> Self {
        StatusBoard {
            current: Arc::new(Mutex::new(Arc::new(first))),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Arc<StatusSnapshot>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last snapshot published.
    pub fn latest(&self) -> Arc<StatusSnapshot> {
        self.slot().clone()
    }

    fn publish(&self, snapshot: StatusSnapshot) {
        let new = Arc::new(snapshot);
        // The old one is dropped after the lock is let go: a reader never waits on it.
        let _old = std::mem::replace(&mut *self.slot(), new);
    }
}

/// Feeds the book the scheduler's events.
struct BookListener {
    book: Arc<Mutex<StatusBook>>,
}

fn lock_book(book: &Mutex<StatusBook>) -> MutexGuard<'_, StatusBook> {
    book.lock().unwrap_or_else(|e| e.into_inner())
}

impl SchedulerListener for BookListener {
    fn on_event(&mut self, event: &SchedulerEvent) {
        lock_book(&self.book).on_event(Instant::now, event);
    }
}

/// Builds a snapshot of the driver and the book at `now`.
fn take_snapshot(
    state: &Mutex<DriverState>,
    book: &Mutex<StatusBook>,
    transport: RpcStats,
    now: Instant,
) -> StatusSnapshot {
    let view: CoreView = lock(state).core.view(now);
    lock_book(book).snapshot(now, view, transport)
}

/// The publishing endpoint: a timer, and no messages.
struct Publisher {
    state: Weak<Mutex<DriverState>>,
    book: Arc<Mutex<StatusBook>>,
    board: StatusBoard,
    env: RpcEnvHandle,
    interval: Duration,
    timer: Option<TimerId>,
    warnings: LogBudget,
}

impl Endpoint for Publisher {
    fn on_start(&mut self, ctx: &mut EndpointContext<'_>) {
        self.timer = Some(ctx.schedule_every(self.interval, self.interval));
    }

    fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let kind = message.message().kind();
        flint_rpc::peer_warn!(self.warnings, ctx.now(), sender = ?message.sender(), "the status endpoint got an unexpected {kind}");
        let _ = message.reply_error(format!("{STATUS_ENDPOINT} takes no messages"));
    }

    fn on_timer(&mut self, ctx: &mut EndpointContext<'_>, timer: TimerId) {
        if Some(timer) != self.timer {
            return;
        }
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let snapshot = take_snapshot(&state, &self.book, self.env.stats(), ctx.now());
        self.board.publish(snapshot);
    }
}

/// Starts publishing: a listener on the driver and the endpoint on its environment.
pub(crate) fn start(
    state: &Arc<Mutex<DriverState>>,
    env: RpcEnvHandle,
    start: Instant,
    interval: Duration,
) -> Result<StatusBoard, flint_rpc::RpcError> {
    let interval = interval.max(MIN_PUBLISH_INTERVAL);
    let now = Instant::now();
    let book = Arc::new(Mutex::new(StatusBook::new(start)));
    let first = {
        let mut driver = lock(state);
        driver.add_quiet_listener(Box::new(BookListener { book: book.clone() }));
        let view = driver.core.view(now);
        lock_book(&book).snapshot(now, view, env.stats())
    };
    let board = StatusBoard::new(first);
    env.register(
        STATUS_ENDPOINT,
        Publisher {
            state: Arc::downgrade(state),
            book,
            board: board.clone(),
            env: env.clone(),
            interval,
            timer: None,
            warnings: LogBudget::default(),
        },
    )?;
    Ok(board)
}
