//! The block server: an executor's endpoint that serves its shuffle blocks to other
//! executors ([`BLOCK_MANAGER_ENDPOINT`], on `blockManager.port`).

use std::sync::Arc;
use std::time::Duration;

use flint_rpc::log_budget::LogBudget;
use flint_rpc::{Endpoint, EndpointContext, Incoming, TimerId};
use flint_wire::{ArchivedMessage, Message, BLOCK_MANAGER_ENDPOINT};
use tracing::debug;

use super::ShuffleStore;
use crate::broadcast::BroadcastCache;
use crate::reply_retry::{Answer, RetriedReplies};

/// Answers `FetchShuffleBlock` asks with chunks of the store's blocks, at most
/// `max_chunk` bytes each (what a message can carry). A chunk within one memory segment
/// is a view of it; one read from a spill file is read on this endpoint's loop, which
/// serves blocks and nothing else.
///
/// A chunk its connection's outbox refuses is kept and sent again, within a bound on
/// the bytes kept for every connection together: beyond it, the ask fails (or, when
/// not even the error fits, goes unanswered), so that a peer that asks and never reads
/// cannot make the server hold its replies without end.
pub struct BlockServer {
    store: Arc<ShuffleStore>,
    max_chunk: u64,
    refused: RetriedReplies,
    peer_warnings: LogBudget,
    /// The executor's broadcasts, whose pieces it serves too.
    broadcasts: Option<Arc<BroadcastCache>>,
}

impl BlockServer {
    /// A server of `store`'s blocks in chunks of at most `max_chunk` bytes, whose askers
    /// wait `ask_timeout`, keeping at most `max_kept` bytes of refused chunks (the
    /// executor keeps `reducer.maxSizeInFlight`, what one reducer may ask for at once).
    pub fn new(
        store: Arc<ShuffleStore>,
        max_chunk: usize,
        ask_timeout: Duration,
        max_kept: u64,
    ) -> Self {
        BlockServer {
            store,
            max_chunk: max_chunk as u64,
            refused: RetriedReplies::new("FetchShuffleBlock", ask_timeout, max_kept),
            peer_warnings: LogBudget::default(),
            broadcasts: None,
        }
    }

    /// The same server serving the pieces `cache` holds of broadcasts
    /// (`FetchBroadcastPiece`), and what it served of them (`GetBlockServerStats`).
    pub fn with_broadcasts(mut self, cache: Arc<BroadcastCache>) -> Self {
        self.broadcasts = Some(cache);
        self
    }

    /// Answers the broadcast asks; false for any other message.
    fn receive_broadcast(
        &mut self,
        ctx: &mut EndpointContext<'_>,
        incoming: &Incoming<'_>,
    ) -> bool {
        let Some(cache) = &self.broadcasts else {
            return false;
        };
        let answer = match incoming.message() {
            ArchivedMessage::FetchBroadcastPiece {
                broadcast_id,
                piece,
            } => crate::broadcast::serve_piece(cache, broadcast_id.to_native(), piece.to_native()),
            ArchivedMessage::GetBlockServerStats => {
                let (bytes, pieces) = cache.served();
                Answer::Reply(Message::BlockServerStats {
                    broadcast_bytes_served: bytes,
                    broadcast_pieces_served: pieces,
                })
            }
            _ => return false,
        };
        match incoming.reply_handle() {
            Some(reply) => self.refused.answer(ctx, reply, answer),
            None => flint_rpc::peer_warn!(
                self.peer_warnings,
                ctx.now(),
                "{} from {:?} was not an ask: there is nobody to answer",
                incoming.message().kind(),
                incoming.sender()
            ),
        }
        true
    }
}

impl Endpoint for BlockServer {
    fn receive(&mut self, ctx: &mut EndpointContext<'_>, incoming: Incoming<'_>) {
        if self.receive_broadcast(ctx, &incoming) {
            return;
        }
        let ArchivedMessage::FetchShuffleBlock {
            shuffle_id,
            map_index,
            reduce_id,
            offset,
            max_len,
        } = incoming.message()
        else {
            flint_rpc::peer_warn!(
                self.peer_warnings,
                ctx.now(),
                "{BLOCK_MANAGER_ENDPOINT} ignores {} from {:?}",
                incoming.message().kind(),
                incoming.sender()
            );
            return;
        };
        let Some(reply) = incoming.reply_handle() else {
            flint_rpc::peer_warn!(
                self.peer_warnings,
                ctx.now(),
                "FetchShuffleBlock from {:?} was not an ask: there is nobody to answer",
                incoming.sender()
            );
            return;
        };
        let offset = offset.to_native();
        let max_len = u64::from(max_len.to_native()).min(self.max_chunk);
        let (shuffle, map, reduce) = (
            shuffle_id.to_native(),
            map_index.to_native(),
            reduce_id.to_native(),
        );
        let answer = match self.store.read_range(shuffle, map, reduce, offset, max_len) {
            Ok((data, total_size)) => Answer::Reply(Message::ShuffleBlock {
                offset,
                total_size,
                data,
            }),
            Err(e) => {
                debug!("cannot serve a shuffle block: {e}");
                Answer::Fail(e.to_string())
            }
        };
        self.refused.answer(ctx, reply, answer);
    }

    fn on_timer(&mut self, ctx: &mut EndpointContext<'_>, timer: TimerId) {
        self.refused.on_timer(ctx, timer);
    }
}
