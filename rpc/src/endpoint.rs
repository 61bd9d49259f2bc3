//! What endpoints implement and what they are handed: the [`Endpoint`] trait, incoming
//! messages, reply handles, and the context of a call; and how an endpoint is registered
//! ([`RpcEnvHandle::register`]). The event loop above runs them.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use flint_wire::{ArchivedMessage, Frame, Message, Route, SharedStr};
use rkyv::rancor;

use crate::ask::ReplySlot;
use crate::error::RpcError;
use crate::outbox::{Outbox, Outgoing};
use crate::refs::{EndpointRef, RpcEnvHandle, Writer};
use crate::shared::{Command, RegisterReply};
use crate::timer::{TimerId, TimerQueue};

/// A named receiver of messages, run by the event loop.
///
/// As the seeds' `ThreadSafeRpcEndpoint`: an endpoint handles one message at a time,
/// `on_start` runs before its first message and `on_stop` when it is unregistered or the
/// environment stops. Every call runs in a turn of the event loop, on the loop thread or
/// on a thread lent to the loop ([`RpcEnvHandle::lend`](crate::RpcEnvHandle::lend)), one
/// at a time, so a handler must not block: hand long work to other threads and reply
/// later through a [`ReplyHandle`].
pub trait Endpoint: Send + 'static {
    /// Called once, before the first message.
    fn on_start(&mut self, _ctx: &mut EndpointContext<'_>) {}

    /// A message arrived. Asks are answered with [`Incoming::reply`], now or later.
    fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>);

    /// Called once the loop has delivered every message that arrived in one of its
    /// wake-ups, to each endpoint that received at least one. Work that gains from
    /// batching (a decision over many updates, one flush for many frames) waits here
    /// instead of running per message; what is sent from here leaves in the same write.
    fn on_batch_end(&mut self, _ctx: &mut EndpointContext<'_>) {}

    /// A timer this endpoint scheduled fired.
    fn on_timer(&mut self, _ctx: &mut EndpointContext<'_>, _timer: TimerId) {}

    /// A remote peer connected (after authentication, where it is required).
    fn on_connected(&mut self, _ctx: &mut EndpointContext<'_>, _remote: SocketAddr) {}

    /// A remote peer's connection closed (end of stream, reset, protocol error).
    fn on_disconnected(&mut self, _ctx: &mut EndpointContext<'_>, _remote: SocketAddr) {}

    /// Called once, when the endpoint stops. When the environment stops, sends are still
    /// accepted here, and what this sends is written before the sockets close (within
    /// rpc.shutdown.flushTimeout).
    fn on_stop(&mut self) {}
}

/// A message delivered to an endpoint. Borrowed from the receive buffer: nothing of it
/// was copied, and [`Incoming::frame`] turns parts of it into `Bytes` without copying.
pub struct Incoming<'a> {
    pub(crate) frame: &'a Frame,
    pub(crate) message: &'a ArchivedMessage,
    pub(crate) sender: Option<SocketAddr>,
    pub(crate) connection: &'a Arc<Outbox>,
    pub(crate) request_id: Option<u64>,
    pub(crate) env: &'a RpcEnvHandle,
}

impl<'a> Incoming<'a> {
    /// The message, validated and read in place.
    pub fn message(&self) -> &'a ArchivedMessage {
        self.message
    }

    /// The frame it came in, for zero-copy views of its blobs ([`Frame::bytes_of`]).
    pub fn frame(&self) -> &'a Frame {
        self.frame
    }

    /// The remote address it came from; `None` for a message from this environment.
    pub fn sender(&self) -> Option<SocketAddr> {
        self.sender
    }

    /// Whether the sender waits for a reply.
    pub fn is_ask(&self) -> bool {
        self.request_id.is_some()
    }

    /// A handle to answer this ask later, from any thread; `None` for a one-way message.
    pub fn reply_handle(&self) -> Option<ReplyHandle> {
        Some(ReplyHandle {
            connection: self.connection.clone(),
            request_id: self.request_id?,
            env: self.env.clone(),
        })
    }

    /// Answers this ask now. A one-way message has nobody to answer: that is ignored.
    pub fn reply(&self, message: &Message) -> Result<(), RpcError> {
        match self.reply_handle() {
            Some(handle) => handle.reply(message),
            None => Ok(()),
        }
    }

    /// Answers this ask with an error the asker sees as [`RpcError::Remote`].
    pub fn reply_error(&self, error: impl Into<String>) -> Result<(), RpcError> {
        match self.reply_handle() {
            Some(handle) => handle.fail(error),
            None => Ok(()),
        }
    }

    /// A reference to the endpoint `name` of the sender, reached over the connection this
    /// message came on (no new connection). For a local message, the local endpoint.
    pub fn sender_ref(&self, name: &str) -> EndpointRef {
        EndpointRef::over(self.env.clone(), self.connection.clone(), name.into())
    }

    /// Deserializes the message into an owned [`Message`] (a copy; handlers usually read
    /// the archived form instead).
    pub fn to_message(&self) -> Message {
        rkyv::deserialize::<Message, rancor::Error>(self.message)
            .expect("a validated message deserializes")
    }
}

/// The means to answer an ask, possibly after the handler returned and from another
/// thread. Answering consumes it: an ask is answered once.
#[derive(Debug)]
pub struct ReplyHandle {
    connection: Arc<Outbox>,
    request_id: u64,
    env: RpcEnvHandle,
}

impl ReplyHandle {
    /// Sends `message` as the reply.
    pub fn reply(self, message: &Message) -> Result<(), RpcError> {
        self.reply_outgoing(message)
    }

    /// [`ReplyHandle::reply`] of a catalogue message or a typed value.
    pub(crate) fn reply_outgoing<O: Outgoing + ?Sized>(self, message: &O) -> Result<(), RpcError> {
        let route = Route::Reply {
            request_id: self.request_id,
        };
        self.env
            .push(&self.connection, &route, message, Writer::Caller)
    }

    /// Sends `message` as the reply, or gives the handle back with the error, so that a
    /// reply refused for a full outbox ([`RpcError::OutboxFull`]) can be tried again
    /// once the connection has drained.
    pub fn try_reply(self, message: &Message) -> Result<(), (Self, RpcError)> {
        let route = Route::Reply {
            request_id: self.request_id,
        };
        match self
            .env
            .push(&self.connection, &route, message, Writer::Caller)
        {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }

    /// Sends an error reply with this text.
    pub fn fail(self, error: impl Into<String>) -> Result<(), RpcError> {
        let route = Route::ErrorReply {
            request_id: self.request_id,
            error: error.into(),
        };
        self.env
            .push(&self.connection, &route, &Message::Empty, Writer::Caller)
    }
}

/// What an endpoint can do while it handles a call: schedule timers, reach other
/// endpoints, stop itself.
pub struct EndpointContext<'a> {
    pub(crate) env: &'a RpcEnvHandle,
    pub(crate) timers: &'a mut TimerQueue<usize>,
    pub(crate) me: usize,
    pub(crate) name: &'a SharedStr,
    pub(crate) now: std::time::Instant,
    pub(crate) stop_me: &'a mut bool,
}

impl EndpointContext<'_> {
    /// The environment, to make references to other endpoints.
    pub fn env(&self) -> &RpcEnvHandle {
        self.env
    }

    /// This endpoint's name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The time of the event loop's current wake-up: every call of one batch sees the
    /// same instant, read once when the loop woke, so a handler needs no clock read of
    /// its own. It lags the wall clock by at most the time the batch has taken so far.
    pub fn now(&self) -> std::time::Instant {
        self.now
    }

    /// Calls [`Endpoint::on_timer`] once, after `delay`.
    pub fn schedule_once(&mut self, delay: Duration) -> TimerId {
        self.timers.schedule(self.now, delay, None, self.me)
    }

    /// Calls [`Endpoint::on_timer`] after `first`, then every `period`.
    pub fn schedule_every(&mut self, first: Duration, period: Duration) -> TimerId {
        self.timers.schedule(self.now, first, Some(period), self.me)
    }

    /// Cancels a timer of this endpoint.
    pub fn cancel_timer(&mut self, timer: TimerId) -> bool {
        self.timers.cancel(timer)
    }

    /// Stops this endpoint once the current call returns (`on_stop` follows).
    pub fn stop(&mut self) {
        *self.stop_me = true;
    }
}

impl RpcEnvHandle {
    /// Registers `endpoint` under `name` and waits until its `on_start` has run. From a
    /// turn of the loop (inside a handler) it does not wait: the endpoint starts right
    /// after the current call.
    pub fn register(&self, name: &str, endpoint: impl Endpoint) -> Result<EndpointRef, RpcError> {
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(RpcError::Stopped);
        }
        let done = Arc::new(ReplySlot::new());
        // The loop unpacks exactly this type (see Command::Register).
        let endpoint: Box<dyn Endpoint> = Box::new(endpoint);
        let register = Command::Register(
            name.into(),
            Box::new(endpoint),
            RegisterReply::new(done.clone()),
        );
        if self.shared.command(register).is_err() {
            // The loop shut down after the check above.
            return Err(RpcError::Stopped);
        }
        if !self.shared.in_loop_turn() {
            done.wait().unwrap_or(Err(RpcError::Stopped))?;
        }
        Ok(self.local_ref(name))
    }

    /// Stops the endpoint `name` (its `on_stop` runs on the loop).
    pub fn unregister(&self, name: &str) {
        // Refused only once the loop has shut down, which stopped every endpoint.
        let _ = self.shared.command(Command::Unregister(name.into()));
    }
}
