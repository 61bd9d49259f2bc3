//! Large results fetched from their executor in chunks, and the ways a fetch fails.

use super::*;

/// Registers executor 1 (from `127.0.0.1:1001`), runs one task and has it report an
/// indirect result of `size` bytes: the core, the peer, the task and the first
/// FetchChunk's length.
fn fetching(t0: Instant, size: u64) -> (DriverCore, PeerId, u64, u32) {
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let peer = core.register_executor(t0, remote("1", 1001)).unwrap();
    let launched = launches(&submit(&mut core, t0, 0, 1));
    let [(_, task_id)] = launched[..] else {
        panic!("{launched:?}")
    };
    let outcome = TaskOutcome::Indirect {
        block_id: BlockId::TaskResult { task_id },
        size,
        metrics: Default::default(),
        accumulators: Vec::new(),
    };
    core.status_update(t0, None, "1", task_id, TaskState::Finished, outcome);
    let max_len = drain(&mut core, t0)
        .iter()
        .find_map(|o| match o {
            Output::FetchChunk {
                offset: 0, max_len, ..
            } => Some(*max_len),
            _ => None,
        })
        .expect("a fetch");
    (core, peer, task_id, max_len)
}

/// The failed attempts among `outputs`: (task id, message, counted).
fn failed_attempts(outputs: &[Output]) -> Vec<(u64, String, bool)> {
    events(outputs)
        .filter_map(|e| match e {
            SchedulerEvent::TaskEnd {
                task_id,
                reason:
                    TaskEndReason::Failed {
                        message, counted, ..
                    },
                ..
            } => Some((*task_id, message.clone(), *counted)),
            _ => None,
        })
        .collect()
}

/// A chunk fetch the glue cannot send (the connection's outbox is full, or it closed
/// as the ask was made) fails the fetch at once: the task's result is lost
/// (TaskResultLost, counted), the block is asked to be removed, and the task runs again.
#[test]
fn an_indirect_result_whose_fetch_fails_as_it_is_sent_runs_its_task_again() {
    let t0 = Instant::now();
    let (mut core, peer, task_id, _) = fetching(t0, 3_000_000);
    let refused = "outbox to 127.0.0.1:1001 is full: 10 bytes queued, the limit \
                   (rpc.outbox.maxBytes) is 10 bytes";
    core.chunk_received(t0, task_id, Err(ChunkFailure::Other(refused.to_owned())));
    let outputs = drain(&mut core, t0);
    assert_eq!(
        failed_attempts(&outputs),
        [(
            task_id,
            format!(
                "TaskResultLost (result lost from block manager): cannot fetch the result of \
                 task {task_id} from executor 1: {refused}"
            ),
            true
        )]
    );
    assert!(outputs
        .iter()
        .any(|o| matches!(o, Output::RemoveBlock { peer: p, .. } if *p == peer)));
    assert_eq!(launches(&outputs).len(), 1, "it runs again");
    // The reply of the ask, had it gone after all, changes nothing.
    core.chunk_received(
        t0,
        task_id,
        Ok(ChunkReply::Chunk {
            offset: 0,
            total_size: 3_000_000,
            data: &[0; 16],
        }),
    );
    assert!(drain(&mut core, t0).is_empty());
}

/// A chunk that does not check out against what was asked (its offset, the block's
/// size, its length, an empty chunk before the end) fails the fetch, after a good first
/// chunk too: the result is lost, the block removed, the task run again.
#[test]
fn an_indirect_result_whose_chunk_fails_validation_runs_its_task_again() {
    let t0 = Instant::now();
    let size = 3_000_000u64;
    let long = vec![0u8; 2 << 20];
    let first = vec![7u8; 1000];
    let cases: [(u64, u64, &[u8], &str); 4] = [
        (
            5,
            size,
            &first[..10],
            "a chunk at offset 5 where 1000 was asked",
        ),
        (
            1000,
            size + 1,
            &first[..10],
            "a block of 3000001 bytes where 3000000 were announced",
        ),
        (
            1000,
            size,
            &long,
            "a chunk of 2097152 bytes past what was asked",
        ),
        (
            1000,
            size,
            &[],
            "an empty chunk before the end of the block",
        ),
    ];
    for (offset, total_size, data, why) in cases {
        let (mut core, peer, task_id, _) = fetching(t0, size);
        // A first chunk that checks out: the next one is asked for.
        core.chunk_received(
            t0,
            task_id,
            Ok(ChunkReply::Chunk {
                offset: 0,
                total_size: size,
                data: &first,
            }),
        );
        assert!(drain(&mut core, t0)
            .iter()
            .any(|o| matches!(o, Output::FetchChunk { offset: 1000, .. })));
        core.chunk_received(
            t0,
            task_id,
            Ok(ChunkReply::Chunk {
                offset,
                total_size,
                data,
            }),
        );
        let outputs = drain(&mut core, t0);
        let failed = failed_attempts(&outputs);
        assert_eq!(failed.len(), 1, "{why}: {failed:?}");
        assert!(
            failed[0]
                .1
                .ends_with(&format!("from executor 1: the executor sent {why}"))
                && failed[0].2,
            "{failed:?}"
        );
        assert!(outputs
            .iter()
            .any(|o| matches!(o, Output::RemoveBlock { peer: p, .. } if *p == peer)));
        assert!(
            !outputs
                .iter()
                .any(|o| matches!(o, Output::FetchChunk { .. })),
            "{why}: no more chunks asked"
        );
        assert_eq!(launches(&outputs).len(), 1, "{why}: it runs again");
    }
}

/// The executor's connection closes in the middle of a fetch: the executor is lost and
/// its task with it (ExecutorLostFailure, once), although the fetch's failure (its ask
/// fails with the connection) comes before the news of the closed connection; neither
/// is a second failure, and the task is not offered to the executor that is gone. With
/// a cluster manager that reports exits, the task waits for the exit's report.
#[test]
fn an_indirect_result_whose_executor_vanishes_mid_fetch_runs_its_task_again_once() {
    let t0 = Instant::now();
    for wait in [None, Some(Duration::from_secs(3))] {
        let (mut core, peer, task_id, _) = fetching(t0, 3_000_000);
        if let Some(wait) = wait {
            core.wait_for_loss_reasons(wait);
        }
        core.register_executor(t0, remote("2", 1002)).unwrap();
        drain(&mut core, t0);
        core.chunk_received(
            t0,
            task_id,
            Ok(ChunkReply::Chunk {
                offset: 0,
                total_size: 3_000_000,
                data: &[1; 1000],
            }),
        );
        drain(&mut core, t0);
        // As the transport does it: the asks on the connection fail first, then the
        // driver endpoint hears that it closed.
        core.chunk_received(
            t0,
            task_id,
            Err(ChunkFailure::ConnectionClosed(
                "connection to 127.0.0.1:1001 closed: end of stream".to_owned(),
            )),
        );
        let mut outputs = drain(&mut core, t0);
        core.disconnected(t0, address(1001));
        outputs.extend(drain(&mut core, t0));
        assert!(
            outputs
                .iter()
                .any(|o| matches!(o, Output::ForgetPeer(p) if *p == peer)),
            "the fetch let go of the peer: {outputs:?}"
        );
        if wait.is_some() {
            assert_eq!(failed_attempts(&outputs), [], "held for the exit's report");
            core.executor_supply_report(t0, [exit("1", 137)]);
            outputs = drain(&mut core, t0);
        }
        let failed = failed_attempts(&outputs);
        let reason = if wait.is_some() {
            "executor 1 exited with code 137"
        } else {
            DISASSOCIATED
        };
        assert_eq!(
            failed,
            [(
                task_id,
                format!(
                    "ExecutorLostFailure (executor 1 exited caused by one of the running \
                     tasks) Reason: {reason}"
                ),
                true
            )]
        );
        assert_eq!(launches(&outputs).len(), 1, "it runs again, on executor 2");
    }
}

/// An indirect result's accumulator updates wait for its fetch: merged once the block
/// has arrived, and not at all when the fetch fails (the task runs again and its next
/// success brings them).
#[test]
fn an_indirect_result_s_accumulators_are_merged_once_it_is_fetched() {
    use flint_wire::{AccumulatorUpdate, AccumulatorValue};
    let t0 = Instant::now();
    for fetched in [true, false] {
        let mut core = core(0.0, Duration::from_secs(30), t0);
        let id = core
            .scheduler
            .accumulators_mut()
            .register("n", crate::AccumulatorKind::Long)
            .id;
        core.register_executor(t0, remote("1", 1001)).unwrap();
        let launched = launches(&submit(&mut core, t0, 0, 1));
        let [(_, task_id)] = launched[..] else {
            panic!("{launched:?}")
        };
        let outcome = TaskOutcome::Indirect {
            block_id: BlockId::TaskResult { task_id },
            size: 4,
            metrics: Default::default(),
            accumulators: vec![AccumulatorUpdate {
                id,
                name: None,
                value: AccumulatorValue::Long(5),
            }],
        };
        core.status_update(t0, None, "1", task_id, TaskState::Finished, outcome);
        drain(&mut core, t0);
        let value = |core: &DriverCore| core.scheduler.accumulators().value(id).cloned();
        assert_eq!(value(&core), Some(AccumulatorValue::Long(0)), "not before");
        let reply = if fetched {
            Ok(ChunkReply::Chunk {
                offset: 0,
                total_size: 4,
                data: &[1, 2, 3, 4],
            })
        } else {
            Err(ChunkFailure::Other("gone".to_owned()))
        };
        core.chunk_received(t0, task_id, reply);
        drain(&mut core, t0);
        let expected = if fetched { 5 } else { 0 };
        assert_eq!(value(&core), Some(AccumulatorValue::Long(expected)));
    }
}
