//! Handing frames on: to the endpoint they are for (one message at a time, panics
//! isolated), or to the ask they answer; and the endpoints' registry.

use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use flint_wire::{ArchivedEnvelope, ArchivedRoute, Frame, FrameDecoder, SharedStr};
use rustc_hash::FxHashMap;
use tracing::{debug, error};

use super::EventLoop;
use crate::ask::{PendingAsk, Reply};
use crate::endpoint::{Endpoint, EndpointContext, Incoming};
use crate::error::RpcError;
use crate::log_budget::LogBudget;
use crate::outbox::{ConnKey, Outbox};
use crate::refs::RpcEnvHandle;
use crate::shared::{AskCompletion, LOCAL_KEY};
use crate::timer::TimerQueue;

/// Endpoints and their timers: everything a handler call touches.
pub(super) struct Endpoints {
    pub(super) env: RpcEnvHandle,
    pub(super) slots: Vec<Option<Box<dyn Endpoint>>>,
    pub(super) names: Vec<SharedStr>,
    pub(super) by_name: FxHashMap<SharedStr, usize>,
    pub(super) timers: TimerQueue<usize>,
    /// Endpoints that received a message since their last `on_batch_end`, and a flag per
    /// slot so that each is listed once.
    pub(super) in_batch: Vec<usize>,
    pub(super) batch_flags: Vec<bool>,
    /// Lines about messages to endpoints that are not here.
    pub(super) unrouted_warnings: LogBudget,
}

impl Endpoints {
    /// Runs `call` on endpoint `index`, isolating a panic: the endpoint is stopped and the
    /// loop goes on.
    pub(super) fn call(
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

    pub(super) fn stop(&mut self, index: usize) {
        if let Some(mut endpoint) = self.slots.get_mut(index).and_then(Option::take) {
            let name = self.names[index].clone();
            self.by_name.remove(&name);
            self.timers.cancel_target(|&target| target == index);
            if catch_unwind(AssertUnwindSafe(|| endpoint.on_stop())).is_err() {
                error!(endpoint = %name, "endpoint panicked in on_stop");
            }
        }
    }

    pub(super) fn register(
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
    pub(super) fn end_batch(&mut self, now: Instant) -> bool {
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

    pub(super) fn each(
        &mut self,
        now: Instant,
        mut call: impl FnMut(&mut dyn Endpoint, &mut EndpointContext<'_>),
    ) {
        for index in 0..self.slots.len() {
            self.call(index, now, &mut call);
        }
    }

    /// Hands a routed message to its endpoint; an ask to a missing endpoint is answered
    /// with an error. Returns whether the endpoint was there.
    fn deliver(&mut self, incoming: Incoming<'_>, endpoint: &str, now: Instant) -> bool {
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
                true
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
                false
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

impl EventLoop {
    /// Delivers one frame, already validated into `envelope`: to an endpoint, or to the
    /// ask it answers. Returns whether it reached either (not: no such endpoint, or no
    /// such ask on this connection).
    pub(super) fn route(
        &mut self,
        frame: &Frame,
        envelope: &ArchivedEnvelope,
        sender: Option<SocketAddr>,
        connection: &Arc<Outbox>,
        key: ConnKey,
    ) -> bool {
        let now = self.now;
        let (endpoint, request_id) = match &envelope.route {
            ArchivedRoute::OneWay { endpoint } => (endpoint.as_str(), None),
            ArchivedRoute::Ask {
                request_id,
                endpoint,
            } => (endpoint.as_str(), Some(request_id.to_native())),
            ArchivedRoute::Reply { request_id } => {
                let Some(ask) = self.take_ask(request_id.to_native(), key, sender) else {
                    return false;
                };
                ask.completion.complete(Ok(Reply {
                    frame: frame.clone(),
                }));
                return true;
            }
            ArchivedRoute::ErrorReply { request_id, error } => {
                let Some(ask) = self.take_ask(request_id.to_native(), key, sender) else {
                    return false;
                };
                let target = ask.completion.target.clone();
                ask.completion.complete(Err(RpcError::Remote {
                    target,
                    message: error.to_string(),
                }));
                return true;
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
        self.endpoints.deliver(incoming, endpoint, now)
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

    pub(super) fn deliver_local(&mut self) {
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
                        Ok(envelope) => {
                            self.route(&frame, envelope, None, &local, LOCAL_KEY);
                        }
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
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_peer_s_long_name_is_cut_short_on_a_character_boundary() {
        assert_eq!(shortened("Executor", NAME_SHOWN), "Executor");
        let long = "x".repeat(1 << 20);
        assert_eq!(shortened(&long, NAME_SHOWN).len(), NAME_SHOWN + 3);
        // "é" is two bytes: a cut inside it moves back to before it.
        assert_eq!(shortened("aé", 2), "a...");
        assert_eq!(shortened("aéb", 3), "aé...");
    }
}
