//! Asks as [`Future`]s, for callers inside an async runtime (tokio, async-std,
//! `futures::executor`, any executor): no runtime in the transport, the event loop
//! completes the future through its [`Waker`], from the callback form of an ask
//! ([`EndpointRef::ask_then`]), which ends each ask exactly once (reply, timeout or loss
//! of the connection).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use flint_wire::Message;

use crate::ask::Reply;
use crate::error::RpcError;
use crate::outbox::Outgoing;
use crate::refs::EndpointRef;
use crate::typed::{Request, Typed, TypedReply, UserMessage};

/// What the loop's callback and the future share.
#[derive(Default)]
struct Shared {
    outcome: Option<Result<Reply, RpcError>>,
    waker: Option<Waker>,
}

/// An ask under way: resolves to its reply, or to the error that ended it (the timeout,
/// the loss of the connection, an error reply). Made by [`EndpointRef::ask_async`].
///
/// Dropping it does not cancel the ask: its reply, when it comes, is dropped.
#[must_use = "a future does nothing unless polled (the ask is sent already)"]
pub struct AskFuture {
    shared: Arc<Mutex<Shared>>,
    /// An error from sending, before the ask was under way.
    failed: Option<RpcError>,
}

impl std::fmt::Debug for AskFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AskFuture").finish_non_exhaustive()
    }
}

impl Future for AskFuture {
    type Output = Result<Reply, RpcError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(error) = self.failed.take() {
            return Poll::Ready(Err(error));
        }
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match shared.outcome.take() {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                // The latest waker: an executor may move the task between polls.
                match &mut shared.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

/// A typed ask under way; made by [`EndpointRef::ask_typed_async`].
#[must_use = "a future does nothing unless polled (the ask is sent already)"]
pub struct TypedAskFuture<M> {
    ask: AskFuture,
    _reply: std::marker::PhantomData<fn() -> M>,
}

impl<M> std::fmt::Debug for TypedAskFuture<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedAskFuture")
            .field("reply", &std::any::type_name::<M>())
            .finish_non_exhaustive()
    }
}

impl<M: UserMessage> Future for TypedAskFuture<M> {
    type Output = Result<TypedReply<M>, RpcError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.ask)
            .poll(cx)
            .map(|outcome| outcome.and_then(TypedReply::new))
    }
}

impl EndpointRef {
    /// Asks, waiting at most rpc.askTimeout, as a future: for callers in an async
    /// runtime, which must not block in [`EndpointRef::ask`]. The ask is sent now; the
    /// event loop wakes the future when it ends. Its timeout is the loop's timer: a loop
    /// that stopped turning leaves it pending (a blocking ask gives up on its own).
    pub fn ask_async(&self, message: &Message) -> AskFuture {
        self.ask_async_timeout(message, self.env().settings().ask_timeout)
    }

    /// As [`EndpointRef::ask_async`], waiting at most `timeout`.
    pub fn ask_async_timeout(&self, message: &Message, timeout: Duration) -> AskFuture {
        self.ask_async_outgoing(message, timeout)
    }

    /// [`EndpointRef::ask_async_timeout`] of a catalogue message or a typed value.
    fn ask_async_outgoing<O: Outgoing + ?Sized>(
        &self,
        message: &O,
        timeout: Duration,
    ) -> AskFuture {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let completed = shared.clone();
        let sent = self.ask_then_outgoing(message, timeout, move |outcome| {
            let waker = {
                let mut shared = completed.lock().unwrap_or_else(|e| e.into_inner());
                shared.outcome = Some(outcome);
                shared.waker.take()
            };
            // Woken outside the lock: the executor may poll at once, on this thread.
            if let Some(waker) = waker {
                waker.wake();
            }
        });
        AskFuture {
            shared,
            failed: sent.err(),
        }
    }

    /// [`EndpointRef::ask_typed`] as a future (see [`EndpointRef::ask_async`]).
    pub fn ask_typed_async<Req: Request>(&self, request: &Req) -> TypedAskFuture<Req::Reply> {
        let ask = self.ask_async_outgoing(&Typed(request), self.env().settings().ask_timeout);
        TypedAskFuture {
            ask,
            _reply: std::marker::PhantomData,
        }
    }
}
