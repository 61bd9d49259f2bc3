//! Results too large for a message: the executor keeps them in its block store and the
//! driver fetches them chunk by chunk ([`Output::FetchChunk`]), then has the block
//! removed. Each result counts against `driver.maxResultSize` first.

use std::time::Instant;

use bytes::BytesMut;
use flint_wire::{
    bytes_to_string, AccumulatorUpdate, BlockId, SharedStr, TaskFailureKind, TaskMetrics,
    TaskOutcome, TaskState,
};
use tracing::{debug, warn};

use super::output::{ChunkFailure, ChunkReply, Output, PeerId};
use super::DriverCore;

/// Room left in a message around a result or a chunk of one.
const MESSAGE_OVERHEAD: usize = 64 * 1024;
/// The most bytes asked for in one block fetch.
const MAX_CHUNK: usize = 8 * 1024 * 1024;

/// A large result being fetched from an executor's block store, chunk by chunk.
#[derive(Debug)]
pub(super) struct ResultFetch {
    executor_id: SharedStr,
    /// The executor's connection, held for the fetch: it outlives the executor's
    /// registration if that ends first.
    peer: PeerId,
    block_id: BlockId,
    size: u64,
    metrics: TaskMetrics,
    /// The task's accumulator updates, merged once its result is fetched.
    accumulators: Vec<AccumulatorUpdate>,
    received: BytesMut,
}

impl DriverCore {
    /// Spark's `canFetchMoreResults`: counts a result against `driver.maxResultSize`,
    /// aborting its task set when the total goes over.
    pub(super) fn can_take_result(&mut self, task_id: u64, size: u64) -> bool {
        let Some(limit) = self.config.max_result_size else {
            return true;
        };
        // By the task set's key, not its id: a newer task set of the same id (once this
        // one ended) has a tally of its own, which a late result of this one must not
        // add to, nor abort.
        let Some(task_set) = self.scheduler.task_set_key_of(task_id) else {
            return true;
        };
        // A task set that ended keeps its tally, and late results count against it, as in
        // Spark; the heartbeat timer drops tallies of task sets that are gone.
        let entry = self.result_sizes.entry(task_set).or_default();
        entry.0 = entry.0.saturating_add(size);
        entry.1 = entry.1.saturating_add(1);
        if entry.0 <= limit {
            return true;
        }
        let message = format!(
            "Total size of serialized results of {} tasks ({}) is bigger than driver.maxResultSize ({})",
            entry.1,
            bytes_to_string(entry.0),
            bytes_to_string(limit)
        );
        self.scheduler.abort_task_set_by_key(task_set, message);
        false
    }

    /// Drops the `driver.maxResultSize` tallies of task sets that are gone (a task set's
    /// tally outlives its StageCompleted, for late results). Called on the heartbeat
    /// receiver's timer.
    pub fn drop_stale_result_tallies(&mut self) {
        let scheduler = &self.scheduler;
        self.result_sizes
            .retain(|&key, _| scheduler.has_task_set_key(key));
    }

    /// Whether the result of `task_id` is being fetched.
    pub(super) fn is_fetching(&self, task_id: u64) -> bool {
        !self.fetches.is_empty() && self.fetches.contains_key(&task_id)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_fetch(
        &mut self,
        now: Instant,
        executor_id: &str,
        task_id: u64,
        block_id: BlockId,
        size: u64,
        metrics: TaskMetrics,
        accumulators: Vec<AccumulatorUpdate>,
    ) {
        let Some(executor) = self.executors.get(executor_id) else {
            self.fetch_failed(now, task_id, format!("executor {executor_id} is gone"));
            return;
        };
        debug!("Fetching {size} bytes of the result of task {task_id} from executor {executor_id}");
        let peer = executor.peer;
        self.peers.hold(peer);
        // The size was checked against driver.maxResultSize; without a limit the buffer
        // grows with what arrives.
        let reserve = usize::try_from(size).unwrap_or(usize::MAX).min(64 << 20);
        self.fetches.insert(
            task_id,
            ResultFetch {
                executor_id: SharedStr::from(executor_id),
                peer,
                block_id,
                size,
                metrics,
                accumulators,
                received: BytesMut::with_capacity(reserve),
            },
        );
        self.request_chunk(task_id);
    }

    fn chunk_size(&self) -> u32 {
        let room = self
            .limits
            .max_message_size
            .saturating_sub(MESSAGE_OVERHEAD)
            .max(1024);
        u32::try_from(room.min(MAX_CHUNK)).unwrap_or(u32::MAX)
    }

    fn request_chunk(&mut self, task_id: u64) {
        let max_len = self.chunk_size();
        let Some(fetch) = self.fetches.get(&task_id) else {
            return;
        };
        self.outputs.push_back(Output::FetchChunk {
            peer: fetch.peer,
            task_id,
            block_id: fetch.block_id,
            offset: fetch.received.len() as u64,
            max_len,
        });
    }

    /// What came of an [`Output::FetchChunk`]: the reply, or why there is none (the ask
    /// could not be sent, timed out, or its connection closed). The next chunk is asked
    /// for, or the result is complete and recorded, or the fetch failed and the task runs
    /// again (TaskResultLost). A closed connection is the executor's loss first
    /// ([`DriverCore::disconnected`]): the task is lost with it, once.
    pub fn chunk_received(
        &mut self,
        now: Instant,
        task_id: u64,
        reply: Result<ChunkReply<'_>, ChunkFailure>,
    ) {
        let max_len = self.chunk_size() as usize;
        let Some(fetch) = self.fetches.get_mut(&task_id) else {
            return;
        };
        let (offset, total_size, data) = match reply {
            Ok(ChunkReply::Chunk {
                offset,
                total_size,
                data,
            }) => (offset, total_size, data),
            Ok(ChunkReply::Other(kind)) => {
                return self.fetch_failed(now, task_id, format!("the executor answered {kind}"))
            }
            Err(ChunkFailure::ConnectionClosed(why)) => {
                // The connection's end reaches the driver endpoint only after the asks
                // on it failed: the executor is lost now, and the task with it, rather
                // than the fetch's failure being read first as a lost result (a second
                // failure, and the task offered again to the executor that is gone).
                let address = self
                    .executors
                    .get(&fetch.executor_id)
                    .filter(|e| e.peer == fetch.peer)
                    .and_then(|e| e.address);
                if let Some(address) = address {
                    self.disconnected(now, address);
                }
                return self.fetch_failed(now, task_id, why);
            }
            Err(ChunkFailure::Other(why)) => return self.fetch_failed(now, task_id, why),
        };
        let expected = fetch.received.len() as u64;
        let bad = if offset != expected {
            Some(format!(
                "a chunk at offset {offset} where {expected} was asked"
            ))
        } else if total_size != fetch.size {
            Some(format!(
                "a block of {total_size} bytes where {} were announced",
                fetch.size
            ))
        } else if data.len() > max_len || expected + data.len() as u64 > fetch.size {
            Some(format!(
                "a chunk of {} bytes past what was asked",
                data.len()
            ))
        } else if data.is_empty() && expected < fetch.size {
            Some("an empty chunk before the end of the block".to_owned())
        } else {
            None
        };
        if let Some(bad) = bad {
            return self.fetch_failed(now, task_id, format!("the executor sent {bad}"));
        }
        fetch.received.extend_from_slice(data);
        if (fetch.received.len() as u64) < fetch.size {
            return self.request_chunk(task_id);
        }
        let Some(fetch) = self.fetches.remove(&task_id) else {
            return;
        };
        debug!(
            "Fetched the result of task {task_id} ({} bytes) from executor {}",
            fetch.size, fetch.executor_id
        );
        self.end_fetch(fetch.peer, fetch.block_id);
        if let Some(problem) = self.map_output_problem(task_id, &fetch.executor_id, &fetch.received)
        {
            return self.invalid_map_output(now, task_id, &fetch.executor_id, problem);
        }
        let outcome = TaskOutcome::Direct {
            value: fetch.received.freeze(),
            metrics: fetch.metrics,
            accumulators: fetch.accumulators,
        };
        self.scheduler
            .status_update(now, task_id, TaskState::Finished, outcome);
    }

    /// The block leaves the executor's block store, and the fetch lets go of the peer.
    fn end_fetch(&mut self, peer: PeerId, block_id: BlockId) {
        self.outputs
            .push_back(Output::RemoveBlock { peer, block_id });
        self.release_peer(peer);
    }

    pub(super) fn fetch_failed(&mut self, now: Instant, task_id: u64, reason: String) {
        let fetch = self.fetches.remove(&task_id);
        if let Some(fetch) = &fetch {
            // The task runs again; the block the failed fetch left behind would stay in
            // the executor's memory for good. (Gone with its connection, if that failed.)
            self.end_fetch(fetch.peer, fetch.block_id);
        }
        let from = fetch
            .as_ref()
            .map_or_else(String::new, |f| format!(" from executor {}", f.executor_id));
        let message = format!("TaskResultLost (result lost from block manager): cannot fetch the result of task {task_id}{from}: {reason}");
        if self.scheduler.task_set_of(task_id).is_none() {
            // Lost with its executor (whose connection the fetch's failure is likely
            // the news of), or its task set is gone: the task has had its ending.
            debug!("{message} (the task is no longer running)");
            return;
        }
        warn!("{message}");
        let outcome = TaskOutcome::Failure {
            kind: TaskFailureKind::ResultLost,
            message,
            counts_towards_failures: true,
            metrics: fetch.map(|f| f.metrics).unwrap_or_default(),
        };
        self.scheduler
            .status_update(now, task_id, TaskState::Failed, outcome);
    }
}
