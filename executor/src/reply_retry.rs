//! Replies a full outbox refused, tried again once the connection drains.
//!
//! A reply is accepted while less than `rpc.outbox.maxBytes` is queued on its
//! connection; a large one behind another (a chunk of a large result, of a shuffle block)
//! can find the outbox full. The reply is then kept, made once (a chunk read from a file
//! is not read again), and sent again on a timer, with a growing pause, until the
//! asker's own timeout has passed.

use std::time::{Duration, Instant};

use flint_rpc::{EndpointContext, ReplyHandle, RpcError, TimerId};
use flint_wire::Message;
use tracing::warn;

/// First and longest pause before a refused reply is tried again.
const RETRY_FIRST: Duration = Duration::from_millis(1);
const RETRY_MAX: Duration = Duration::from_millis(100);

/// What answering a request came to.
pub(crate) enum Answer {
    /// This message is the reply.
    Reply(Message),
    /// The request fails, with this text (an error reply).
    Fail(String),
}

struct Refused {
    reply: ReplyHandle,
    message: Message,
    asked: Instant,
}

/// Replies a full outbox refused, with the timer that tries them again.
pub(crate) struct RetriedReplies {
    refused: Vec<Refused>,
    timer: Option<(TimerId, Duration)>,
    /// How long an asker waits: a reply later than that would find nobody.
    ask_timeout: Duration,
    /// What is answered, for log lines.
    what: &'static str,
}

impl RetriedReplies {
    /// None refused yet; `what` names the requests in log lines.
    pub(crate) fn new(what: &'static str, ask_timeout: Duration) -> Self {
        RetriedReplies {
            refused: Vec::new(),
            timer: None,
            ask_timeout,
            what,
        }
    }

    /// Sends `answer`, now or, if the outbox is full, on the retry timer.
    pub(crate) fn answer(
        &mut self,
        ctx: &mut EndpointContext<'_>,
        reply: ReplyHandle,
        answer: Answer,
    ) {
        let message = match answer {
            Answer::Reply(message) => message,
            Answer::Fail(error) => {
                if let Err(e) = reply.fail(error) {
                    warn!("cannot answer {}: {e}", self.what);
                }
                return;
            }
        };
        let refused = Refused {
            reply,
            message,
            asked: Instant::now(),
        };
        if let Some(again) = self.try_reply(refused) {
            self.refused.push(again);
            if self.timer.is_none() {
                self.timer = Some((ctx.schedule_once(RETRY_FIRST), RETRY_FIRST));
            }
        }
    }

    /// Tries the refused replies again if `timer` is theirs; returns whether it was.
    pub(crate) fn on_timer(&mut self, ctx: &mut EndpointContext<'_>, timer: TimerId) -> bool {
        let Some((mine, pause)) = self.timer else {
            return false;
        };
        if mine != timer {
            return false;
        }
        for refused in std::mem::take(&mut self.refused) {
            if let Some(again) = self.try_reply(refused) {
                self.refused.push(again);
            }
        }
        self.timer = (!self.refused.is_empty()).then(|| {
            let pause = (pause * 2).min(RETRY_MAX);
            (ctx.schedule_once(pause), pause)
        });
        true
    }

    /// Sends one reply; gives it back if the outbox is full and the asker still waits.
    fn try_reply(&self, refused: Refused) -> Option<Refused> {
        let Refused {
            reply,
            message,
            asked,
        } = refused;
        match reply.try_reply(&message) {
            Ok(()) => None,
            Err((reply, RpcError::OutboxFull { .. })) if asked.elapsed() < self.ask_timeout => {
                Some(Refused {
                    reply,
                    message,
                    asked,
                })
            }
            Err((_, e)) => {
                warn!("cannot answer {}: {e}", self.what);
                None
            }
        }
    }
}
