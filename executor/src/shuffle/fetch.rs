//! A reduce task's fetch of its partition: from every map output of a shuffle, local
//! blocks read in place, remote ones asked of their executors' block servers with at most
//! `reducer.maxSizeInFlight` bytes outstanding (the seeds' `BlockStoreShuffleFetcher`).

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flint_rpc::{Reply, RpcEnvHandle, RpcError};
use flint_wire::{
    ArchivedMessage, BlockManagerId, FetchFailure, MapStatus, Message, BLOCK_MANAGER_ENDPOINT,
};

use super::wait::next_arrival;
use super::{RecordPieces, ShuffleStore};

/// Why a fetch did not complete.
#[derive(Debug)]
pub enum FetchError {
    /// A block could not be read: the task ends FetchFailed.
    Failed(Box<FetchFailure>),
    /// The task was killed while it waited.
    Interrupted,
}

/// Fetches reduce partitions' blocks for the task runners of one executor.
#[derive(Debug, Clone)]
pub struct ShuffleFetcher {
    /// The environment whose connections reach other executors' block servers.
    env: RpcEnvHandle,
    store: Arc<ShuffleStore>,
    executor_id: String,
    max_in_flight: u64,
    max_chunk: u32,
    ask_timeout: Duration,
    /// How long a fetch turns the loop itself for a reply before it sleeps
    /// (`executor.busyPoll`).
    spin: Duration,
}

/// One remote block being fetched.
struct RemoteBlock {
    map: u32,
    location: BlockManagerId,
    address: SocketAddr,
    size: u64,
    received: u64,
    pieces: RecordPieces,
}

/// The partition a fetch reads, which its failures name.
#[derive(Debug, Clone, Copy)]
struct Read {
    shuffle_id: u32,
    reduce_id: u32,
}

impl Read {
    fn failure(
        self,
        location: Option<&BlockManagerId>,
        map: Option<u32>,
        message: String,
    ) -> FetchError {
        FetchError::Failed(Box::new(FetchFailure {
            address: location.cloned(),
            shuffle_id: self.shuffle_id,
            map_index: map,
            reduce_id: self.reduce_id,
            message,
        }))
    }
}

/// What a block server's answer to one chunk ask came to.
struct Arrived {
    block: usize,
    asked_at: u64,
    asked_len: u64,
    reply: Result<Reply, RpcError>,
}

impl ShuffleFetcher {
    /// A fetcher for executor `executor_id`, reading its own blocks from `store` and
    /// asking others' over `env`, with `max_in_flight` bytes outstanding at most and chunks
    /// of at most `max_chunk` bytes, each ask waiting `ask_timeout`; a wait for a reply
    /// turns `env`'s loop on the task's thread for up to `spin` before it sleeps.
    pub fn new(
        env: RpcEnvHandle,
        store: Arc<ShuffleStore>,
        executor_id: impl Into<String>,
        max_in_flight: u64,
        max_chunk: u32,
        ask_timeout: Duration,
        spin: Duration,
    ) -> Self {
        ShuffleFetcher {
            env,
            store,
            executor_id: executor_id.into(),
            max_in_flight,
            max_chunk: max_chunk.max(1),
            ask_timeout,
            spin,
        }
    }

    /// The environment fetches go through.
    pub(crate) fn env(&self) -> &RpcEnvHandle {
        &self.env
    }

    /// How long a wait turns the loop before it sleeps.
    pub(crate) fn spin(&self) -> Duration {
        self.spin
    }

    /// Reduce partition `reduce_id` of `shuffle_id` from every map output in `statuses`
    /// (by map partition), as pieces of whole records. `interrupted` is looked at while
    /// the fetch waits.
    pub fn fetch(
        &self,
        shuffle_id: u32,
        reduce_id: u32,
        statuses: &[Option<MapStatus>],
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Vec<Bytes>, FetchError> {
        let read = Read {
            shuffle_id,
            reduce_id,
        };
        let failure = |location: Option<&BlockManagerId>, map: Option<u32>, message: String| {
            read.failure(location, map, message)
        };
        let mut pieces = Vec::new();
        let mut remote = Vec::new();
        let mut addresses: HashMap<(String, u16), SocketAddr> = HashMap::new();
        for (map, status) in statuses.iter().enumerate() {
            let map = map as u32;
            // The seeds' MetadataFetchFailedException.
            let Some(status) = status else {
                return Err(failure(
                    None,
                    Some(map),
                    format!(
                        "Missing an output location for shuffle {shuffle_id} partition {reduce_id}"
                    ),
                ));
            };
            let location = &status.location;
            let Some(&size) = status.sizes.get(reduce_id as usize) else {
                return Err(failure(
                    Some(location),
                    Some(map),
                    format!(
                        "the map output has {} reduce partitions, not {}",
                        status.sizes.len(),
                        reduce_id + 1
                    ),
                ));
            };
            if size == 0 {
                continue;
            }
            if *location.executor_id == *self.executor_id {
                let local = self
                    .store
                    .read_block(shuffle_id, map, reduce_id)
                    .map_err(|e| failure(Some(location), Some(map), e.to_string()))?;
                let len: u64 = local.iter().map(|piece| piece.len() as u64).sum();
                if len != size {
                    return Err(failure(
                        Some(location),
                        Some(map),
                        format!("the local block has {len} bytes where {size} were announced"),
                    ));
                }
                pieces.extend(local);
                continue;
            }
            let key = (location.host.clone(), location.port);
            let address = match addresses.get(&key) {
                Some(&address) => address,
                None => {
                    let address = resolve(&location.host, location.port)
                        .map_err(|e| failure(Some(location), Some(map), e))?;
                    addresses.insert(key, address);
                    address
                }
            };
            remote.push(RemoteBlock {
                map,
                location: location.clone(),
                address,
                size,
                received: 0,
                pieces: RecordPieces::new(size),
            });
        }
        self.fetch_remote(read, &mut remote, &mut pieces, interrupted)?;
        Ok(pieces)
    }

    fn fetch_remote(
        &self,
        read: Read,
        blocks: &mut [RemoteBlock],
        pieces: &mut Vec<Bytes>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<(), FetchError> {
        let Read {
            shuffle_id,
            reduce_id,
        } = read;
        let (sender, arrivals) = mpsc::channel();
        // Blocks waiting to ask for their next chunk; one chunk of a block is out at a
        // time, so that its chunks arrive in order.
        let mut waiting: VecDeque<usize> = (0..blocks.len()).collect();
        let (mut in_flight, mut outstanding) = (0u64, 0usize);
        loop {
            while let Some(&index) = waiting.front() {
                let block = &blocks[index];
                let len = (block.size - block.received).min(u64::from(self.max_chunk));
                // At least one ask is always out, however large its chunk.
                if outstanding > 0 && in_flight + len > self.max_in_flight {
                    break;
                }
                waiting.pop_front();
                let message = Message::FetchShuffleBlock {
                    shuffle_id,
                    map_index: block.map,
                    reduce_id,
                    offset: block.received,
                    max_len: len as u32,
                };
                let sender = sender.clone();
                let asked_at = block.received;
                let server = self.env.endpoint_ref(block.address, BLOCK_MANAGER_ENDPOINT);
                let asked = server.ask_then(&message, self.ask_timeout, move |reply| {
                    let _ = sender.send(Arrived {
                        block: index,
                        asked_at,
                        asked_len: len,
                        reply,
                    });
                });
                if let Err(e) = asked {
                    return Err(read.failure(
                        Some(&block.location),
                        Some(block.map),
                        e.to_string(),
                    ));
                }
                in_flight += len;
                outstanding += 1;
            }
            if outstanding == 0 {
                return Ok(());
            }
            let arrived = next_arrival(&self.env, &arrivals, self.spin, interrupted)
                .map_err(|_| FetchError::Interrupted)?;
            outstanding -= 1;
            in_flight -= arrived.asked_len;
            let block = &mut blocks[arrived.block];
            let blame =
                |message: String| read.failure(Some(&block.location), Some(block.map), message);
            let reply = arrived.reply.map_err(|e| blame(e.to_string()))?;
            let ArchivedMessage::ShuffleBlock {
                offset,
                total_size,
                data,
            } = reply.message()
            else {
                let kind = reply.message().kind();
                return Err(blame(format!("the block server answered {kind}")));
            };
            let data = data.as_slice();
            let bad = if offset.to_native() != arrived.asked_at {
                Some(format!(
                    "a chunk at offset {offset} where {} was asked",
                    arrived.asked_at
                ))
            } else if total_size.to_native() != block.size {
                Some(format!(
                    "a block of {total_size} bytes where {} were announced",
                    block.size
                ))
            } else if data.len() as u64 > arrived.asked_len {
                Some(format!(
                    "a chunk of {} bytes past what was asked",
                    data.len()
                ))
            } else if data.is_empty() {
                Some("an empty chunk before the end of the block".to_owned())
            } else {
                None
            };
            if let Some(bad) = bad {
                return Err(blame(format!("the block server sent {bad}")));
            }
            block.received += data.len() as u64;
            if let Err(e) = block.pieces.push(reply.frame().bytes_of(data), pieces) {
                return Err(blame(e.to_string()));
            }
            if block.received < block.size {
                waiting.push_front(arrived.block);
            } else if let Err(e) = block.pieces.finish() {
                return Err(blame(e.to_string()));
            }
        }
    }
}

/// The address of a block server: `host` may be an IP address or a name.
fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve the block server {host}:{port}: {e}"))?
        .min_by_key(SocketAddr::is_ipv6)
        .ok_or_else(|| format!("the block server {host}:{port} resolves to nothing"))
}
