//! Broadcast variables across real processes: a driver in this process, `flint
//! executor` processes on 127.0.0.1, pieces over real sockets from the driver and from
//! executors' block servers. Bytes are counted where they are sent: the driver's
//! broadcast manager and each block server count the piece bytes they serve.

mod common;

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{conf, spawn_executor};
use flint::executor::broadcast::read_window;
use flint::executor::pattern;
use flint::rpc::{Endpoint, EndpointContext, Incoming, RpcEnv};
use flint::scheduler::{Broadcast, Driver, TaskSet};
use flint::wire::{
    ArchivedMessage, BlockManagerId, Message, RegisterExecutor, TaskPayload,
    BLOCK_MANAGER_ENDPOINT, BROADCAST_ENDPOINT, DRIVER_ENDPOINT, EXECUTOR_ENDPOINT,
};
use flint_testkit::process::Processes;

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
const JOB_TIMEOUT: Duration = Duration::from_secs(180);
const MIB: u64 = 1 << 20;

/// Runs `tasks` tasks of `broadcast-read` of `broadcast` as task set `stage`, and checks
/// every task's answer against `value`: its length, and the CRC32 of the window its
/// partition reads. Returns the addresses the tasks saw the value at.
fn read_everywhere(
    driver: &Driver,
    stage: u32,
    tasks: u32,
    broadcast: Broadcast,
    value: &[u8],
) -> Vec<u64> {
    let payload =
        TaskPayload::encode("broadcast-read", broadcast.id().to_string().as_bytes()).unwrap();
    let outcome = driver
        .submit(TaskSet::new(stage, stage, tasks, payload))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), tasks as usize);
    outcome
        .results
        .iter()
        .enumerate()
        .map(|(partition, result)| {
            assert_eq!(result.len(), 20, "a broadcast-read result");
            let len = u64::from_le_bytes(result[..8].try_into().unwrap());
            let address = u64::from_le_bytes(result[8..16].try_into().unwrap());
            let crc = u32::from_le_bytes(result[16..20].try_into().unwrap());
            assert_eq!(len, value.len() as u64);
            let window = read_window(value.len(), partition as u32);
            assert_eq!(
                crc,
                crc32fast::hash(&value[window]),
                "task {partition} read other bytes"
            );
            address
        })
        .collect()
}

/// Waits (bounded) until `executors` executors reported holding every piece of
/// `broadcast`; returns their block servers.
fn wait_for_holders(
    driver: &Driver,
    broadcast: Broadcast,
    pieces: u32,
    executors: usize,
) -> Vec<BlockManagerId> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let holders = driver.broadcast_holders(broadcast.id());
        let whole: Vec<BlockManagerId> = holders
            .iter()
            .filter(|(_, held)| *held == pieces)
            .map(|(location, _)| location.clone())
            .collect();
        if whole.len() >= executors {
            return whole;
        }
        assert!(
            Instant::now() < deadline,
            "holders of broadcast {}: {holders:?}",
            broadcast.id()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a block server says it served of broadcasts: (bytes, pieces).
fn served_by(asker: &RpcEnv, location: &BlockManagerId) -> (u64, u64) {
    let server: SocketAddr = (location.host.as_str(), location.port)
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap();
    let reply = asker
        .handle()
        .endpoint_ref(server, BLOCK_MANAGER_ENDPOINT)
        .ask(&Message::GetBlockServerStats)
        .unwrap();
    let ArchivedMessage::BlockServerStats {
        broadcast_bytes_served,
        broadcast_pieces_served,
    } = reply.message()
    else {
        panic!("the block server answered {}", reply.message().kind());
    };
    (
        broadcast_bytes_served.to_native(),
        broadcast_pieces_served.to_native(),
    )
}

/// The test: 64 MiB read by 1,000 tasks on two executors crosses the network at
/// most once per executor. Every piece the driver and the block servers sent is
/// counted; together they come to the value's size once per executor, and each
/// executor's tasks all saw its one cached copy (at most two addresses in all).
#[test]
fn a_64_mib_broadcast_read_by_1000_tasks_on_two_executors_crosses_the_network_once_per_executor() {
    let conf = conf(&[]);
    let driver = Driver::standalone(&conf).unwrap();
    let _executors = Processes(
        (1..=2)
            .map(|i| spawn_executor(driver.address(), &i.to_string(), &[], Stdio::inherit()))
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let value = Bytes::from(pattern(64 << 20));
    let broadcast = driver.broadcast(value.clone());
    assert_eq!(broadcast.size(), 64 * MIB);
    let addresses = read_everywhere(&driver, 0, 1_000, broadcast, &value);
    let mut distinct = addresses.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() <= 2,
        "1,000 tasks on 2 executors saw {} copies",
        distinct.len()
    );
    // 4 MiB pieces (broadcast.blockSize's default).
    let holders = wait_for_holders(&driver, broadcast, 16, 2);
    let asker = RpcEnv::client(&conf).unwrap();
    let (driver_bytes, driver_pieces) = driver.broadcast_bytes_served();
    let mut total = driver_bytes;
    let mut pieces = driver_pieces;
    for holder in &holders {
        let (bytes, served) = served_by(&asker, holder);
        total += bytes;
        pieces += served;
    }
    assert_eq!(
        total,
        2 * 64 * MIB,
        "bytes sent: driver {driver_bytes}, in all {total}"
    );
    assert_eq!(pieces, 2 * 16);
    asker.stop();
    driver.stop().unwrap();
}

/// A peer that claims to hold every piece of a broadcast and serves each with one bit
/// flipped, counting what it served.
struct HostilePeer {
    served: Arc<AtomicU64>,
    value: Bytes,
    piece_size: usize,
}

impl Endpoint for HostilePeer {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, incoming: Incoming<'_>) {
        let ArchivedMessage::FetchBroadcastPiece {
            broadcast_id,
            piece,
        } = incoming.message()
        else {
            return;
        };
        let piece = piece.to_native();
        let start = piece as usize * self.piece_size;
        let end = (start + self.piece_size).min(self.value.len());
        let mut data = self.value[start..end].to_vec();
        let middle = data.len() / 2;
        data[middle] ^= 0x10;
        self.served.fetch_add(1, Ordering::SeqCst);
        let _ = incoming.reply(&Message::BroadcastPiece {
            broadcast_id: broadcast_id.to_native(),
            piece,
            data: data.into(),
        });
    }
}

/// An executor asks a hostile peer first (the only executor the driver names as
/// holding the pieces): every piece it serves is corrupt, is dropped, and is fetched
/// again from the driver; the tasks read the right bytes.
#[test]
fn a_piece_corrupted_in_flight_is_fetched_again_and_not_handed_to_a_task() {
    let block = ["broadcast.blockSize=1m"];
    let conf = conf(&block);
    let driver = Driver::standalone(&conf).unwrap();
    let value = Bytes::from(pattern(8 << 20));
    let broadcast = driver.broadcast(value.clone());
    let pieces = 8u32;

    // The hostile peer registers as an executor of no cores (it runs no task), then
    // reports every piece held.
    let served = Arc::new(AtomicU64::new(0));
    let hostile = RpcEnv::new(&conf).unwrap();
    hostile
        .handle()
        .register(
            BLOCK_MANAGER_ENDPOINT,
            HostilePeer {
                served: served.clone(),
                value: value.clone(),
                piece_size: MIB as usize,
            },
        )
        .unwrap();
    let registered = hostile
        .handle()
        .endpoint_ref(driver.address(), DRIVER_ENDPOINT)
        .ask(&Message::RegisterExecutor(RegisterExecutor {
            executor_id: "hostile".into(),
            executor_address: hostile.address().to_string(),
            endpoint_name: EXECUTOR_ENDPOINT.to_owned(),
            hostname: "127.0.0.1".into(),
            cores: 0,
            log_urls: Vec::new(),
        }))
        .unwrap();
    assert!(matches!(
        registered.message(),
        ArchivedMessage::RegisteredExecutor
    ));
    let manager = hostile
        .handle()
        .endpoint_ref(driver.address(), BROADCAST_ENDPOINT);
    let location = BlockManagerId {
        executor_id: "hostile".into(),
        host: "127.0.0.1".into(),
        port: hostile.address().port(),
    };
    for piece in 0..pieces {
        manager
            .send(&Message::BroadcastPieceStored {
                broadcast_id: broadcast.id(),
                generation: 0,
                piece,
                location: location.clone(),
            })
            .unwrap();
    }
    wait_for_holders(&driver, broadcast, pieces, 1);
    // A report naming a block server on another host than the one the reporter
    // registered with, or a host name of a megabyte (which would make every
    // description of the broadcast too large to send), names the registered host
    // (the ask after it is answered once it was handled: one connection, in order).
    for host in ["192.0.2.1".to_owned(), "h".repeat(1 << 20)] {
        manager
            .send(&Message::BroadcastPieceStored {
                broadcast_id: broadcast.id(),
                generation: 0,
                piece: 0,
                location: BlockManagerId {
                    host,
                    ..location.clone()
                },
            })
            .unwrap();
    }
    // A report for the hostile executor from another connection is not taken: it
    // would point other executors at port 1.
    let stranger = RpcEnv::client(&conf).unwrap();
    let stranger_manager = stranger
        .handle()
        .endpoint_ref(driver.address(), BROADCAST_ENDPOINT);
    stranger_manager
        .send(&Message::BroadcastPieceStored {
            broadcast_id: broadcast.id(),
            generation: 0,
            piece: 0,
            location: BlockManagerId {
                port: 1,
                ..location.clone()
            },
        })
        .unwrap();
    stranger_manager
        .ask(&Message::GetBroadcastInfo {
            broadcast_id: broadcast.id(),
        })
        .unwrap();
    stranger.stop();
    manager
        .ask(&Message::GetBroadcastInfo {
            broadcast_id: broadcast.id(),
        })
        .unwrap();
    assert_eq!(
        driver.broadcast_holders(broadcast.id()),
        [(location.clone(), pieces)]
    );

    let _executor = Processes(vec![spawn_executor(
        driver.address(),
        "1",
        &block,
        Stdio::inherit(),
    )]);
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    read_everywhere(&driver, 0, 4, broadcast, &value);
    assert_eq!(
        served.load(Ordering::SeqCst),
        u64::from(pieces),
        "every piece was asked of the hostile peer first"
    );
    assert_eq!(
        driver.broadcast_bytes_served(),
        (8 * MIB, u64::from(pieces)),
        "every corrupt piece was fetched again from the driver, once"
    );
    // Unpersisted: a report sent before (of generation 0) and received after is
    // dropped; one of the generation a fetch is told now is taken.
    assert!(driver.unpersist_broadcast(broadcast.id()));
    let report = |generation| {
        manager
            .send(&Message::BroadcastPieceStored {
                broadcast_id: broadcast.id(),
                generation,
                piece: 0,
                location: location.clone(),
            })
            .unwrap();
        let info = manager
            .ask(&Message::GetBroadcastInfo {
                broadcast_id: broadcast.id(),
            })
            .unwrap();
        let ArchivedMessage::BroadcastInfo(info) = info.message() else {
            panic!("no description");
        };
        info.generation.to_native()
    };
    assert_eq!(report(0), 1);
    assert!(
        !driver
            .broadcast_holders(broadcast.id())
            .iter()
            .any(|(l, _)| l.executor_id == location.executor_id),
        "a stale report names no holder"
    );
    report(1);
    assert_eq!(
        driver.broadcast_holders(broadcast.id())[0],
        (location.clone(), 1)
    );
    // The hostile executor goes: it is no longer named as a holder.
    hostile.stop();
    let deadline = Instant::now() + Duration::from_secs(20);
    while driver
        .broadcast_holders(broadcast.id())
        .iter()
        .any(|(l, _)| l.executor_id == location.executor_id)
    {
        assert!(
            Instant::now() < deadline,
            "the removed executor is still a holder"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    driver.stop().unwrap();
}

/// An executor that registers after the broadcast was made and read elsewhere fetches
/// it from the executor that holds it, not from the driver; once unpersisted, the
/// executors drop it and fetch it again from the driver.
#[test]
fn an_executor_that_joins_after_the_broadcast_was_made_gets_it_from_a_peer() {
    let block = ["broadcast.blockSize=1m"];
    let conf = conf(&block);
    let driver = Driver::standalone(&conf).unwrap();
    let value = Bytes::from(pattern(8 << 20));
    let broadcast = driver.broadcast(value.clone());
    let mut executors = Processes(vec![spawn_executor(
        driver.address(),
        "1",
        &block,
        Stdio::inherit(),
    )]);
    driver.wait_for_executors(1, REGISTER_TIMEOUT).unwrap();
    read_everywhere(&driver, 0, 10, broadcast, &value);
    let first = wait_for_holders(&driver, broadcast, 8, 1);
    assert_eq!(driver.broadcast_bytes_served().0, 8 * MIB);

    executors.0.push(spawn_executor(
        driver.address(),
        "2",
        &block,
        Stdio::inherit(),
    ));
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    // Until executor 2 has run one of the tasks (and so read the broadcast).
    let mut stage = 1;
    while driver.broadcast_holders(broadcast.id()).len() < 2 {
        assert!(stage <= 10, "executor 2 never read the broadcast");
        read_everywhere(&driver, stage, 40, broadcast, &value);
        stage += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for_holders(&driver, broadcast, 8, 2);
    assert_eq!(
        driver.broadcast_bytes_served().0,
        8 * MIB,
        "the new executor fetched nothing from the driver"
    );
    let asker = RpcEnv::client(&conf).unwrap();
    assert_eq!(served_by(&asker, &first[0]), (8 * MIB, 8));

    // Unpersisted: dropped everywhere, fetched again (from the driver: nobody holds it).
    assert!(driver.unpersist_broadcast(broadcast.id()));
    assert!(driver.broadcast_holders(broadcast.id()).is_empty());
    let deadline = Instant::now() + Duration::from_secs(20);
    while driver.broadcast_bytes_served().0 == 8 * MIB {
        assert!(Instant::now() < deadline, "nothing fetched again");
        read_everywhere(&driver, stage, 10, broadcast, &value);
        stage += 1;
    }
    assert!(driver.broadcast_bytes_served().0 >= 16 * MIB);
    assert!(driver.destroy_broadcast(broadcast.id()));
    asker.stop();
    driver.stop().unwrap();
}

/// A broadcast bound to a job lives on the executors for the job's lifetime: when the
/// job ends they drop it, and the next read fetches it again from the driver. Bound to
/// a job that has ended already, it is dropped at once.
#[test]
fn a_broadcast_bound_to_a_job_is_dropped_by_the_executors_when_the_job_ends() {
    let block = ["broadcast.blockSize=1m"];
    let conf = conf(&block);
    let driver = Driver::standalone(&conf).unwrap();
    let _executor = Processes(vec![spawn_executor(
        driver.address(),
        "1",
        &block,
        Stdio::inherit(),
    )]);
    driver.wait_for_executors(1, REGISTER_TIMEOUT).unwrap();
    let value = Bytes::from(pattern(4 << 20));
    let broadcast = driver.broadcast(value.clone());
    let mut job = driver.job("reads a broadcast");
    let spec = job
        .stage("broadcast-read", 4, broadcast.id().to_string())
        .unwrap()
        .result();
    // Bound before its tasks can end: the stage waits for the driver's lock, held here.
    let handle = driver.submit_job(spec).unwrap();
    assert!(driver.unpersist_at_job_end(broadcast.id(), handle.job_id()));
    let outcome = handle.wait(JOB_TIMEOUT).unwrap();
    assert_eq!(outcome.results.len(), 4);
    assert!(outcome
        .results
        .iter()
        .all(|r| r[..8] == value.len().to_le_bytes()));
    assert_eq!(driver.broadcast_bytes_served().0, 4 * MIB);
    assert!(
        driver.broadcast_holders(broadcast.id()).is_empty(),
        "forgotten with the job"
    );
    // The job's end was told to the executor before anything launched after it.
    read_everywhere(&driver, 0, 4, broadcast, &value);
    assert_eq!(driver.broadcast_bytes_served().0, 8 * MIB, "fetched again");
    // Bound to the job that has ended: dropped at once, fetched once more.
    assert!(driver.unpersist_at_job_end(broadcast.id(), handle.job_id()));
    read_everywhere(&driver, 1, 4, broadcast, &value);
    assert_eq!(driver.broadcast_bytes_served().0, 12 * MIB);
    // Destroyed, it cannot be read: the tasks fail, saying why.
    assert!(driver.destroy_broadcast(broadcast.id()));
    let payload =
        TaskPayload::encode("broadcast-read", broadcast.id().to_string().as_bytes()).unwrap();
    let error = driver
        .submit(TaskSet::new(2, 2, 1, payload))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap_err()
        .to_string();
    let id = broadcast.id();
    assert!(
        error.contains(&format!("cannot read broadcast {id}:"))
            && error.contains(&format!("Broadcast {id} not found")),
        "{error}"
    );
    driver.stop().unwrap();
}
