//! Replies a full outbox refused, tried again once the connection drains.
//!
//! A reply is accepted while less than `rpc.outbox.maxBytes` is queued on its
//! connection; a large one behind another (a chunk of a large result, of a shuffle block)
//! can find the outbox full. The reply is then kept, made once (a chunk read from a file
//! is not read again), and sent again on a timer, with a growing pause, until the
//! asker's own timeout has passed.
//!
//! What is kept is bounded in bytes: a peer that asks and never reads would otherwise
//! have every reply kept for a whole ask timeout, however many it asked for. A refused
//! reply beyond the bound is answered with an error if the connection takes one, and
//! dropped if not (its asker times out), with a log line within a budget.

use std::time::{Duration, Instant};

use flint_rpc::log_budget::LogBudget;
use flint_rpc::{EndpointContext, ReplyHandle, RpcError, TimerId};
use flint_wire::Message;
use tracing::warn;

/// First and longest pause before a refused reply is tried again.
const RETRY_FIRST: Duration = Duration::from_millis(1);
const RETRY_MAX: Duration = Duration::from_millis(100);

/// What a kept reply counts for besides its data: its handle, its message's other
/// fields, its place in the list. Keeps a flood of empty replies bounded too.
const KEPT_OVERHEAD: u64 = 128;

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
    /// What it counts for against the bound.
    bytes: u64,
}

/// The bytes a kept reply counts for: its data and [`KEPT_OVERHEAD`].
fn kept_bytes(message: &Message) -> u64 {
    let data = match message {
        Message::ShuffleBlock { data, .. } | Message::BlockChunk { data, .. } => data.len(),
        _ => 0,
    };
    data as u64 + KEPT_OVERHEAD
}

/// Replies a full outbox refused, with the timer that tries them again.
pub(crate) struct RetriedReplies {
    refused: Vec<Refused>,
    timer: Option<(TimerId, Duration)>,
    /// How long an asker waits: a reply later than that would find nobody.
    ask_timeout: Duration,
    /// What is answered, for log lines.
    what: &'static str,
    /// The most bytes the kept replies count for together.
    max_bytes: u64,
    /// What they count for now.
    bytes: u64,
    /// Refused replies not kept, for the bound.
    dropped: u64,
    drop_warnings: LogBudget,
}

impl RetriedReplies {
    /// None refused yet; `what` names the requests in log lines. The replies kept count
    /// for at most `max_bytes` together (their data and a little each); one is kept
    /// whatever its size, so that a reply larger than the bound is not always lost.
    pub(crate) fn new(what: &'static str, ask_timeout: Duration, max_bytes: u64) -> Self {
        RetriedReplies {
            refused: Vec::new(),
            timer: None,
            ask_timeout,
            what,
            max_bytes,
            bytes: 0,
            dropped: 0,
            drop_warnings: LogBudget::default(),
        }
    }

    /// The replies kept, and the bytes they count for.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> (usize, u64) {
        (self.refused.len(), self.bytes)
    }

    /// Refused replies that were not kept.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
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
        let bytes = kept_bytes(&message);
        let refused = Refused {
            reply,
            message,
            asked: Instant::now(),
            bytes,
        };
        let Some(again) = self.try_reply(refused) else {
            return;
        };
        if !self.refused.is_empty() && self.bytes.saturating_add(bytes) > self.max_bytes {
            self.drop_reply(ctx, again);
            return;
        }
        self.bytes += bytes;
        self.refused.push(again);
        if self.timer.is_none() {
            self.timer = Some((ctx.schedule_once(RETRY_FIRST), RETRY_FIRST));
        }
    }

    /// Gives up on a refused reply the bound has no room for: its asker gets an error if
    /// the connection takes one now, else nothing (and times out).
    fn drop_reply(&mut self, ctx: &mut EndpointContext<'_>, refused: Refused) {
        self.dropped += 1;
        let error = format!(
            "{} refused: replies waiting for a full connection already hold {} bytes, \
             the most kept",
            self.what, self.bytes
        );
        let answered = refused.reply.fail(error.clone());
        flint_rpc::peer_warn!(
            self.drop_warnings,
            ctx.now(),
            "{error}; the asker was {}",
            if answered.is_ok() {
                "told"
            } else {
                "not answered (its connection is full) and will time out"
            }
        );
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
            let bytes = refused.bytes;
            match self.try_reply(refused) {
                Some(again) => self.refused.push(again),
                None => self.bytes -= bytes,
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
            bytes,
        } = refused;
        match reply.try_reply(&message) {
            Ok(()) => None,
            Err((reply, RpcError::OutboxFull { .. })) if asked.elapsed() < self.ask_timeout => {
                Some(Refused {
                    reply,
                    message,
                    asked,
                    bytes,
                })
            }
            Err((_, e)) => {
                warn!("cannot answer {}: {e}", self.what);
                None
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    use bytes::{Bytes, BytesMut};
    use flint_rpc::{Conf, Endpoint, Incoming, RpcEnv};
    use flint_wire::Route;

    use super::*;
    use crate::testing::{wait_until, WAIT};

    /// What the endpoint under test saw, for the test's thread.
    #[derive(Default)]
    struct Seen {
        answered: AtomicUsize,
        most_kept: AtomicU64,
        kept_now: AtomicU64,
        dropped: AtomicU64,
    }

    /// Answers every ask with a chunk of a block, as the block server does.
    struct Bulk {
        replies: RetriedReplies,
        chunk: Bytes,
        seen: Arc<Seen>,
    }

    impl Bulk {
        fn report(&self) {
            let (_, bytes) = self.replies.kept();
            self.seen.most_kept.fetch_max(bytes, SeqCst);
            self.seen.kept_now.store(bytes, SeqCst);
            self.seen.dropped.store(self.replies.dropped(), SeqCst);
        }
    }

    impl Endpoint for Bulk {
        fn receive(&mut self, ctx: &mut EndpointContext<'_>, incoming: Incoming<'_>) {
            let Some(reply) = incoming.reply_handle() else {
                return;
            };
            let message = Message::ShuffleBlock {
                offset: 0,
                total_size: self.chunk.len() as u64,
                data: self.chunk.clone(),
            };
            self.replies.answer(ctx, reply, Answer::Reply(message));
            self.report();
            self.seen.answered.fetch_add(1, SeqCst);
        }

        fn on_timer(&mut self, ctx: &mut EndpointContext<'_>, timer: TimerId) {
            self.replies.on_timer(ctx, timer);
            self.report();
        }
    }

    #[test]
    fn replies_kept_for_a_peer_that_does_not_read_stay_within_the_bound() {
        const CHUNK: usize = 64 << 10;
        const BOUND: u64 = 1 << 20;
        // 64 MB of replies: far more than the outbox, the sockets' buffers and the bound.
        const ASKS: u64 = 1_000;
        let conf =
            Conf::from_pairs(["rpc.outbox.maxBytes=256k", "rpc.io.sendBufferSize=64k"]).unwrap();
        let server = RpcEnv::new(&conf).unwrap();
        let seen = Arc::new(Seen::default());
        let bulk = Bulk {
            replies: RetriedReplies::new("Bulk", Duration::from_secs(60), BOUND),
            chunk: Bytes::from(vec![7; CHUNK]),
            seen: seen.clone(),
        };
        server.handle().register("bulk", bulk).unwrap();

        let mut peer = TcpStream::connect(server.address()).unwrap();
        let mut asks = BytesMut::new();
        for request_id in 0..ASKS {
            let route = Route::Ask {
                request_id,
                endpoint: "bulk".into(),
            };
            asks.extend_from_slice(&flint_testkit::frames::frame_bytes(&route, &Message::Empty));
        }
        peer.write_all(&asks).unwrap();
        wait_until("every ask answered", || {
            seen.answered.load(SeqCst) == ASKS as usize
        });
        let most = seen.most_kept.load(SeqCst);
        assert!(
            most > 0 && most <= BOUND,
            "kept {most} bytes of replies, bound {BOUND}"
        );
        assert!(seen.dropped.load(SeqCst) > 0, "replies beyond the bound");

        // The peer reads at last: what was kept is sent, and no longer counted.
        peer.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut buf = vec![0; 1 << 20];
        flint_testkit::wait::wait_until("the kept replies sent", WAIT, || {
            while peer.read(&mut buf).is_ok_and(|n| n > 0) {}
            seen.kept_now.load(SeqCst) == 0
        });
    }
}
