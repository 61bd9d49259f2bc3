//! Broadcast variables on the driver: [`Driver::broadcast`] and its kin, and the
//! broadcast manager's endpoint ([`BROADCAST_ENDPOINT`]), which tells executors how a
//! broadcast is cut and who holds its pieces, serves pieces, and takes executors'
//! reports of the pieces they hold. The decisions are [`BroadcastManager`]'s.
//!
//! [`BroadcastManager`]: crate::broadcast::BroadcastManager

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use flint_rpc::log_budget::LogBudget;
use flint_rpc::{Endpoint, EndpointContext, Incoming};
use flint_wire::{ArchivedMessage, BlockManagerId, Message, BROADCAST_ENDPOINT};
use tracing::debug;

use crate::driver::carry_out::{lock, DriverState};
use crate::driver::Driver;

/// Bytes of a piece reply besides the piece: what `broadcast.blockSize` is cut to below
/// `rpc.message.maxSize`.
pub(crate) const PIECE_OVERHEAD: u64 = 64 * 1024;

/// A broadcast variable: a value every task can read once per executor
/// (`TaskContext::broadcast` on the executors, with [`Broadcast::id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Broadcast {
    id: u64,
    size: u64,
}

impl Broadcast {
    /// Its id, which tasks read it by.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Driver {
    /// Makes `value` a broadcast variable (the seeds' `SparkContext.broadcast`): tasks
    /// read it by its id through their context, and each executor fetches it once, in
    /// pieces of `broadcast.blockSize` checked by CRC32, from executors that already hold
    /// them or from the driver, then keeps it until [`Driver::unpersist_broadcast`].
    /// Executors refuse a value above their `broadcast.maxSize` (1 GiB by default).
    ///
    /// A task set whose serialized tasks are larger than `rpc.message.maxSize` aborts;
    /// the same data as a broadcast travels once per executor instead of with every
    /// task:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let driver: flint_scheduler::Driver = unimplemented!();
    /// use std::time::Duration;
    /// use flint_scheduler::TaskSet;
    /// use flint_wire::TaskPayload;
    ///
    /// let table = vec![7u8; 200 << 20]; // more than a message carries
    /// // Aborts: "Serialized task 0:0 was ... bytes, which exceeds max allowed:
    /// // rpc.message.maxSize (...). Consider increasing rpc.message.maxSize or using
    /// // broadcast variables for large values."
    /// let inline = TaskSet::new(0, 0, 100, TaskPayload::encode("lookup", &table)?);
    /// assert!(driver.submit(inline)?.wait(Duration::from_secs(60)).is_err());
    ///
    /// // The same job with a broadcast: each task carries 8 bytes, the id, and
    /// // `ctx.broadcast(id)?` gives it the table (the built-in `broadcast-read` reads
    /// // it and describes what it read).
    /// let table = driver.broadcast(table);
    /// let id = table.id().to_string();
    /// let tasks = TaskSet::new(1, 1, 100, TaskPayload::encode("broadcast-read", id.as_bytes())?);
    /// let outcome = driver.submit(tasks)?.wait(Duration::from_secs(60))?;
    /// assert_eq!(outcome.results.len(), 100);
    /// driver.unpersist_broadcast(table.id());
    /// # Ok(()) }
    /// ```
    pub fn broadcast(&self, value: impl Into<Bytes>) -> Broadcast {
        let value = value.into();
        let size = value.len() as u64;
        let mut state = self.state();
        let piece_size = state.broadcast_piece_size;
        let id = state.broadcasts.create(value, piece_size);
        debug!("Created broadcast {id} of {size} bytes in pieces of {piece_size} bytes");
        Broadcast { id, size }
    }

    /// Tells every executor to drop broadcast `id` (its value and pieces); the driver
    /// keeps it, and a task that reads it later fetches it again. False if there is no
    /// such broadcast.
    pub fn unpersist_broadcast(&self, id: u64) -> bool {
        let mut state = self.state();
        let found = state.broadcasts.unpersist(id);
        if let (true, Some(generation)) = (found, state.broadcasts.generation(id)) {
            state.send_to_executors(&Message::UnpersistBroadcast {
                broadcast_id: id,
                generation,
            });
        }
        found
    }

    /// Unpersists broadcast `id` everywhere and forgets it: tasks can no longer read it.
    /// False if there is no such broadcast.
    pub fn destroy_broadcast(&self, id: u64) -> bool {
        let found = self.unpersist_broadcast(id);
        self.state().broadcasts.destroy(id);
        found
    }

    /// Unpersists broadcast `id` when job `job_id` (of [`Driver::submit_job`]) ends,
    /// however it ends: the value lives on executors for the job's lifetime. A job that
    /// has ended already (or was never submitted) unpersists it at once. False if there
    /// is no such broadcast.
    pub fn unpersist_at_job_end(&self, id: u64, job_id: u32) -> bool {
        let mut state = self.state();
        if state.job_is_open(job_id) {
            return state.broadcasts.unpersist_at_job_end(id, job_id);
        }
        drop(state);
        self.unpersist_broadcast(id)
    }

    /// Bytes of broadcast pieces the driver has sent, and how many pieces.
    pub fn broadcast_bytes_served(&self) -> (u64, u64) {
        self.state().broadcasts.served()
    }

    /// The executors (their block servers) that reported holding pieces of broadcast
    /// `id`, with how many pieces each, by executor id.
    pub fn broadcast_holders(&self, id: u64) -> Vec<(BlockManagerId, u32)> {
        self.state().broadcasts.holders(id)
    }
}

/// The driver's broadcast manager endpoint, [`BROADCAST_ENDPOINT`].
pub(crate) struct BroadcastEndpoint {
    state: Arc<Mutex<DriverState>>,
    peer_warnings: LogBudget,
}

impl BroadcastEndpoint {
    pub(crate) fn new(state: Arc<Mutex<DriverState>>) -> Self {
        BroadcastEndpoint {
            state,
            peer_warnings: LogBudget::default(),
        }
    }
}

impl Endpoint for BroadcastEndpoint {
    fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let replied = match message.message() {
            ArchivedMessage::GetBroadcastInfo { broadcast_id } => {
                let id = broadcast_id.to_native();
                let info = {
                    let mut state = lock(&self.state);
                    let DriverState {
                        core, broadcasts, ..
                    } = &mut *state;
                    broadcasts.info(id, |e| core.free_slots(e).is_some())
                };
                match info {
                    Some(info) => message.reply(&Message::BroadcastInfo(info)),
                    None => message.reply_error(format!("Broadcast {id} not found")),
                }
            }
            ArchivedMessage::FetchBroadcastPiece {
                broadcast_id,
                piece,
            } => {
                let (id, piece) = (broadcast_id.to_native(), piece.to_native());
                // A view of the value, taken under the lock and sent outside it.
                let data = lock(&self.state).broadcasts.piece(id, piece);
                match data {
                    Ok(data) => message.reply(&Message::BroadcastPiece {
                        broadcast_id: id,
                        piece,
                        data,
                    }),
                    Err(refused) => message.reply_error(refused.to_string()),
                }
            }
            ArchivedMessage::BroadcastPieceStored {
                broadcast_id,
                generation,
                piece,
                location,
            } => {
                let executor_id = location.executor_id.as_str();
                let stored = {
                    let mut state = lock(&self.state);
                    let DriverState {
                        core, broadcasts, ..
                    } = &mut *state;
                    // Only the executor itself, on the connection it registered on,
                    // reports its pieces; and its block server is named on the host it
                    // registered with, not the report's word: other executors are sent
                    // there, and every description carries it.
                    match core.sender_may_speak_for(message.sender(), executor_id) {
                        Err(why) => Err(why),
                        Ok(()) => match core.scheduler.host_of(executor_id) {
                            None => Err(format!("executor {executor_id} is not registered")),
                            Some(host) => {
                                let location = BlockManagerId {
                                    executor_id: location.executor_id.as_str().into(),
                                    host: host.to_string(),
                                    port: location.port.to_native(),
                                };
                                broadcasts
                                    .piece_stored(
                                        broadcast_id.to_native(),
                                        generation.to_native(),
                                        piece.to_native(),
                                        location,
                                        |e| core.free_slots(e).is_some(),
                                    )
                                    .map_err(|refused| refused.to_string())
                            }
                        },
                    }
                };
                if let Err(why) = stored {
                    flint_rpc::peer_warn!(
                        self.peer_warnings,
                        ctx.now(),
                        "A report of a broadcast piece from {:?} was not taken: {why}",
                        message.sender()
                    );
                }
                Ok(())
            }
            other => {
                let kind = other.kind();
                flint_rpc::peer_warn!(
                    self.peer_warnings,
                    ctx.now(),
                    "{BROADCAST_ENDPOINT} ignored {kind} from {:?}",
                    message.sender()
                );
                message.reply_error(format!("{kind} is not a broadcast request"))
            }
        };
        if let Err(e) = replied {
            // A full outbox, say: the executor asks another source, or again.
            flint_rpc::peer_warn!(
                self.peer_warnings,
                ctx.now(),
                "Cannot answer {} from {:?}: {e}",
                message.message().kind(),
                message.sender()
            );
            let _ = message.reply_error(e.to_string());
        }
    }
}
