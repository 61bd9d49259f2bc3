//! A broadcast's fetch on an executor: the driver's description of it, then its pieces,
//! asked as [`FetchPlan`] decides, of other executors' block servers and of the driver.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::log_budget::LogBudget;
use flint_rpc::{EndpointRef, Reply, RpcEnvHandle, RpcError};
use flint_wire::{ArchivedMessage, BlockManagerId, Message, BLOCK_MANAGER_ENDPOINT};
use tracing::debug;

use super::plan::{Arrival, FetchPlan, Layout, PlanLimits, Source};
use super::{BroadcastError, PieceSink};

/// How often a waiting fetch looks whether its task was killed.
const KILL_POLL: Duration = Duration::from_millis(100);

/// Pieces one fetch has asked for and not received, at most: eight 4 MiB pieces keep
/// a link busy, and stay within a source's outbox (`rpc.outbox.maxBytes`, 64 MiB)
/// whatever `reducer.maxSizeInFlight` says.
const MAX_PIECES_IN_FLIGHT: u64 = 8;

/// Holders of pieces a fetch considers, at most: the driver's list is a peer's word on
/// the wire, and a few sources are plenty.
const MAX_HOLDERS: usize = 32;

/// What bounds a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// The largest value taken (`broadcast.maxSize`).
    pub max_size: u64,
    /// Bytes of pieces asked for and not yet received (`reducer.maxSizeInFlight`): at
    /// least one piece is always out, and at most eight.
    pub max_in_flight: u64,
    /// How long an ask may take (`rpc.askTimeout`).
    pub ask_timeout: Duration,
    /// Attempts of one piece of the driver before the fetch fails; a peer is asked for
    /// it once at most, besides.
    pub max_attempts: u32,
    /// How long a piece the driver failed waits before it is asked of the driver again.
    pub retry_wait: Duration,
}

impl FetchLimits {
    /// Attempts of one piece of the driver, by default: after a corrupt or missing copy
    /// at a peer, the driver, and two more tries of it.
    pub const MAX_ATTEMPTS: u32 = 3;
    /// The wait before the driver is asked again, by default.
    pub const RETRY_WAIT: Duration = Duration::from_millis(200);
}

/// Fetches broadcasts for the task runners of one executor.
#[derive(Debug)]
pub struct BroadcastFetcher {
    env: RpcEnvHandle,
    driver: EndpointRef,
    /// The driver's broadcast manager on the connection the executor registered on:
    /// the driver takes reports of pieces held from there only.
    reports: EndpointRef,
    location: BlockManagerId,
    limits: FetchLimits,
    /// Lines about pieces peers got wrong.
    peer_warnings: Mutex<LogBudget>,
}

/// An answer to a piece ask.
struct Arrived {
    piece: u32,
    source: Source,
    reply: Result<Reply, RpcError>,
}

impl BroadcastFetcher {
    /// A fetcher for the executor whose block server is `location`, asking `driver` (the
    /// driver's [`flint_wire::BROADCAST_ENDPOINT`]) and other executors' block servers
    /// over `env`, and telling the driver of the pieces it holds through `reports` (the
    /// same endpoint, on the connection the executor registered on).
    pub fn new(
        env: RpcEnvHandle,
        driver: EndpointRef,
        reports: EndpointRef,
        location: BlockManagerId,
        limits: FetchLimits,
    ) -> Self {
        BroadcastFetcher {
            env,
            driver,
            reports,
            location,
            limits,
            peer_warnings: Mutex::new(LogBudget::default()),
        }
    }

    /// The value of `broadcast_id` and its piece size, fetched whole into `sink`, which
    /// allocates it once; each piece is put in `sink` as it arrives and, once the
    /// cache keeps it (and its block server serves it), reported to the driver. Pieces
    /// an earlier fetch left in `sink` are not fetched again.
    pub fn fetch(
        &self,
        broadcast_id: u64,
        sink: &PieceSink<'_>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<(Bytes, u32), BroadcastError> {
        let failed = |why: String| BroadcastError::Failed { broadcast_id, why };
        let (sender, replies) = mpsc::channel();
        self.driver
            .ask_then(
                &Message::GetBroadcastInfo { broadcast_id },
                self.limits.ask_timeout,
                move |reply| {
                    let _ = sender.send(reply);
                },
            )
            .map_err(|e| failed(e.to_string()))?;
        let reply = wait(broadcast_id, &replies, None, interrupted)?
            .ok_or_else(|| failed("no answer".to_owned()))?
            .map_err(|e| failed(e.to_string()))?;
        let ArchivedMessage::BroadcastInfo(info) = reply.message() else {
            return Err(failed(format!(
                "the driver answered {}",
                reply.message().kind()
            )));
        };
        if info.broadcast_id.to_native() != broadcast_id {
            return Err(failed(format!(
                "the driver answered for broadcast {}",
                info.broadcast_id
            )));
        }
        let layout = Layout::new(
            broadcast_id,
            info.total_size.to_native(),
            info.piece_size.to_native(),
            info.checksums.iter().map(|c| c.to_native()),
            self.limits.max_size,
        )?;
        let mut peers = Vec::new();
        let mut addresses = Vec::new();
        let mut held = Vec::new();
        for holder in info.holders.iter().take(MAX_HOLDERS) {
            if holder.location.executor_id.as_str() == &*self.location.executor_id {
                continue;
            }
            let host = holder.location.host.as_str();
            let port = holder.location.port.to_native();
            let Some(address) = resolve(host, port) else {
                debug!("broadcast {broadcast_id}: cannot resolve the holder {host}:{port}");
                continue;
            };
            peers.push(self.env.endpoint_ref(address, BLOCK_MANAGER_ENDPOINT));
            addresses.push(address);
            held.push(
                holder
                    .pieces
                    .iter()
                    .take(layout.pieces() as usize)
                    .map(|p| p.to_native())
                    .collect::<Vec<u32>>(),
            );
        }
        let generation = info.generation.to_native();
        drop(reply);
        let piece_size = layout.piece_size();
        let max_in_flight = (self.limits.max_in_flight / u64::from(piece_size.max(1)))
            .clamp(1, MAX_PIECES_IN_FLIGHT);
        let plan_limits = PlanLimits {
            max_in_flight: usize::try_from(max_in_flight).unwrap_or(usize::MAX),
            max_attempts: self.limits.max_attempts,
            ask_timeout: self.limits.ask_timeout,
            retry_wait: self.limits.retry_wait,
        };
        // The declared size, checked against broadcast.maxSize by the layout.
        let kept = sink.start(layout.total_size(), piece_size, generation);
        let mut plan = FetchPlan::new(layout, &held, plan_limits, seed());
        for piece in kept {
            plan.mark_held(piece);
        }
        self.fetch_pieces(
            &mut plan,
            generation,
            (&peers, &addresses),
            sink,
            interrupted,
        )?;
        let value = sink
            .finish()
            .ok_or_else(|| failed("every piece arrived but the value is not whole".to_owned()))?;
        Ok((value, piece_size))
    }

    fn fetch_pieces(
        &self,
        plan: &mut FetchPlan,
        generation: u64,
        (peers, addresses): (&[EndpointRef], &[SocketAddr]),
        sink: &PieceSink<'_>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<(), BroadcastError> {
        let broadcast_id = plan.layout().broadcast_id();
        let (sender, arrivals) = mpsc::channel::<Arrived>();
        loop {
            let now = Instant::now();
            plan.on_timeout(now)?;
            while let Some(request) = plan.next_request(now) {
                let (piece, source) = (request.piece, request.source);
                let target = match source {
                    Source::Driver => &self.driver,
                    Source::Peer(i) => &peers[i],
                };
                let sender = sender.clone();
                let asked = target.ask_then(
                    &Message::FetchBroadcastPiece {
                        broadcast_id,
                        piece,
                    },
                    self.limits.ask_timeout,
                    move |reply| {
                        let _ = sender.send(Arrived {
                            piece,
                            source,
                            reply,
                        });
                    },
                );
                if let Err(e) = asked {
                    plan.on_failure(now, piece, source, &e.to_string())?;
                }
            }
            if plan.is_complete() {
                return Ok(());
            }
            let Some(arrived) = wait(broadcast_id, &arrivals, plan.poll_timeout(), interrupted)?
            else {
                continue;
            };
            let now = Instant::now();
            let (piece, source) = (arrived.piece, arrived.source);
            let reply = match arrived.reply {
                Ok(reply) => reply,
                Err(e) => {
                    plan.on_failure(now, piece, source, &e.to_string())?;
                    continue;
                }
            };
            let ArchivedMessage::BroadcastPiece {
                broadcast_id: answered,
                piece: answered_piece,
                data,
            } = reply.message()
            else {
                let why = format!("answered {}", reply.message().kind());
                plan.on_failure(now, piece, source, &why)?;
                continue;
            };
            if answered.to_native() != broadcast_id || answered_piece.to_native() != piece {
                let why = format!("answered with piece {answered_piece} of broadcast {answered}");
                plan.on_failure(now, piece, source, &why)?;
                continue;
            }
            match plan.on_arrival(now, piece, source, data.as_slice())? {
                Arrival::Accepted => {
                    // Copied into the value; the frame goes with the reply. Reported
                    // only if the block server serves it: not once the value was
                    // unpersisted meanwhile.
                    if sink.add(piece, data.as_slice()) {
                        let _ = self.reports.send(&Message::BroadcastPieceStored {
                            broadcast_id,
                            generation,
                            piece,
                            location: self.location.clone(),
                        });
                    }
                }
                Arrival::Stale => {}
                Arrival::Rejected(why) => {
                    let source = match source {
                        Source::Driver => "the driver".to_owned(),
                        Source::Peer(i) => format!("the block server at {}", addresses[i]),
                    };
                    let mut budget = self.peer_warnings.lock().unwrap_or_else(|e| e.into_inner());
                    flint_rpc::peer_warn!(
                        budget,
                        now,
                        "Piece broadcast_{broadcast_id}_piece{piece} from {source} was \
                         dropped, to be fetched again: {why}"
                    );
                }
            }
        }
    }
}

/// The next of `arrivals`, or `None` at `until`; looks at `interrupted` now and then.
fn wait<T>(
    broadcast_id: u64,
    arrivals: &Receiver<T>,
    until: Option<Instant>,
    interrupted: &dyn Fn() -> bool,
) -> Result<Option<T>, BroadcastError> {
    loop {
        let poll = until.map_or(KILL_POLL, |until| {
            until
                .saturating_duration_since(Instant::now())
                .min(KILL_POLL)
        });
        match arrivals.recv_timeout(poll) {
            Ok(arrival) => return Ok(Some(arrival)),
            Err(RecvTimeoutError::Timeout) => {
                if interrupted() {
                    return Err(BroadcastError::Interrupted);
                }
                if until.is_some_and(|until| Instant::now() >= until) {
                    return Ok(None);
                }
            }
            // The environment dropped the ask without an answer: it is stopping.
            Err(RecvTimeoutError::Disconnected) => {
                return Err(BroadcastError::Failed {
                    broadcast_id,
                    why: "the executor is stopping".to_owned(),
                })
            }
        }
    }
}

/// The address of a block server: `host` may be an IP address or a name.
fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()?
        .min_by_key(SocketAddr::is_ipv6)
}

/// A seed of the piece order that differs between fetches and executors.
fn seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    time ^ u64::from(std::process::id()).rotate_left(32) ^ NEXT.fetch_add(1, Ordering::Relaxed)
}
