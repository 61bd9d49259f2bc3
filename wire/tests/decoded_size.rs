//! `DecodedSize` bounds what decoding a list really allocates, and not loosely: for
//! every list flint decodes into owned values (a heartbeat's task updates, a result's
//! accumulators, a launch's files, jars and properties), with names from none to long,
//! the bytes the allocator is asked for while decoding are at most the estimate, and the
//! estimate exceeds them by no more than one allocator block per allocation.

use bytes::Bytes;
use flint_testkit::alloc::{counted, CountingAllocator};
use flint_wire::fuzzing::{sample_message, sample_route};
use flint_wire::{
    AccumulatorUpdate, ArchivedKnownStatuses, ArchivedMessage, ArchivedTaskOutcome, BlockManagerId,
    DecodedSize, Dependency, Frame, KnownStatuses, MapStatus, Message, MessageKind, Property,
    ShuffleStatuses, StatusUpdate, TaskAccumUpdates, TaskExtras, TaskMetrics, TaskOutcome,
    TaskState,
};
use rkyv::rancor;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Names of every kind: none, empty, stored inline when archived, and on the heap.
fn name(i: usize) -> Option<String> {
    match i % 5 {
        0 => None,
        1 => Some(String::new()),
        2 => Some("n".into()),
        3 => Some("exactly8".into()),
        _ => Some("x".repeat(9 + i % 90)),
    }
}

fn accumulators(count: usize) -> Vec<AccumulatorUpdate> {
    (0..count)
        .map(|i| AccumulatorUpdate {
            id: i as u64,
            name: name(i),
            // Each kind; bytes values of several lengths (0 allocates nothing).
            value: match i % 3 {
                0 => flint_wire::AccumulatorValue::Long(-(i as i64)),
                1 => flint_wire::AccumulatorValue::double(i as f64),
                _ => flint_wire::AccumulatorValue::Bytes(vec![7; i % 50]),
            },
        })
        .collect()
}

const COUNTS: [usize; 5] = [0, 1, 2, 7, 300];

fn frame_of(kind: MessageKind, message: &Message) -> Frame {
    flint_testkit::frames::frame_of(&sample_route(kind), message)
}

/// Checks the estimate against what `decode` allocates.
fn check(what: &str, estimate: usize, decode: impl FnOnce()) {
    let ((), counts) = counted(decode);
    let (allocations, bytes) = (counts.calls as usize, counts.bytes as usize);
    assert!(
        bytes <= estimate,
        "{what}: decoding asked for {bytes} bytes, more than the estimate {estimate}"
    );
    assert!(
        estimate <= bytes + 32 * allocations,
        "{what}: estimate {estimate} is loose: {bytes} bytes in {allocations} allocations"
    );
}

#[test]
fn heartbeat_updates_decode_within_their_estimate() {
    for tasks in COUNTS {
        for each in COUNTS {
            let Message::Heartbeat(mut h) = sample_message(MessageKind::Heartbeat) else {
                unreachable!()
            };
            h.accum_updates = (0..tasks)
                .map(|t| TaskAccumUpdates {
                    task_id: t as u64,
                    metrics: TaskMetrics::default(),
                    accumulators: accumulators(each),
                })
                .collect();
            let frame = frame_of(MessageKind::Heartbeat, &Message::Heartbeat(h.clone()));
            let ArchivedMessage::Heartbeat(archived) = &frame.envelope().unwrap().message else {
                unreachable!()
            };
            let mut decoded = Vec::new();
            check(
                &format!("{tasks} tasks of {each} accumulators"),
                archived.accum_updates.decoded_size(),
                || {
                    decoded = rkyv::deserialize::<Vec<TaskAccumUpdates>, rancor::Error>(
                        &archived.accum_updates,
                    )
                    .unwrap()
                },
            );
            assert_eq!(decoded, h.accum_updates);
        }
    }
}

#[test]
fn result_accumulators_decode_within_their_estimate() {
    for count in COUNTS {
        let update = Message::StatusUpdate(StatusUpdate {
            executor_id: "e".into(),
            task_id: 1,
            state: TaskState::Finished,
            outcome: TaskOutcome::Direct {
                value: Bytes::from_static(b"v"),
                metrics: TaskMetrics::default(),
                accumulators: accumulators(count),
            },
        });
        let frame = frame_of(MessageKind::StatusUpdate, &update);
        let ArchivedMessage::StatusUpdate(archived) = &frame.envelope().unwrap().message else {
            unreachable!()
        };
        let ArchivedTaskOutcome::Direct { accumulators, .. } = &archived.outcome else {
            unreachable!()
        };
        let mut decoded = Vec::new();
        check(
            &format!("{count} accumulators"),
            accumulators.decoded_size(),
            || {
                decoded = rkyv::deserialize::<Vec<AccumulatorUpdate>, rancor::Error>(accumulators)
                    .unwrap()
            },
        );
        assert_eq!(decoded.len(), count);
    }
}

#[test]
fn launch_files_jars_and_properties_decode_within_their_estimate() {
    for count in COUNTS {
        let Message::LaunchTask(mut task) = sample_message(MessageKind::LaunchTask) else {
            unreachable!()
        };
        let text = |i: usize| name(i).unwrap_or_default();
        let added_files: Vec<Dependency> = (0..count)
            .map(|i| Dependency {
                name: text(i),
                timestamp: i as i64,
            })
            .collect();
        let extras = TaskExtras {
            added_jars: added_files.iter().rev().cloned().collect(),
            added_files,
            properties: (0..count)
                .map(|i| Property {
                    key: text(i),
                    value: text(i + 2),
                })
                .collect(),
        };
        task.extras = extras.clone().shared();
        let frame = frame_of(MessageKind::LaunchTask, &Message::LaunchTask(task.clone()));
        let ArchivedMessage::LaunchTask(archived) = &frame.envelope().unwrap().message else {
            unreachable!()
        };
        let (mut files, mut properties) = (Vec::new(), Vec::new());
        check(
            &format!("{count} files"),
            archived.extras.added_files.decoded_size(),
            || {
                files = rkyv::deserialize::<Vec<Dependency>, rancor::Error>(
                    &archived.extras.added_files,
                )
                .unwrap()
            },
        );
        check(
            &format!("{count} properties"),
            archived.extras.properties.decoded_size(),
            || {
                properties =
                    rkyv::deserialize::<Vec<Property>, rancor::Error>(&archived.extras.properties)
                        .unwrap()
            },
        );
        assert_eq!(files, extras.added_files);
        assert_eq!(properties, extras.properties);
    }
}

#[test]
fn map_output_statuses_decode_within_their_estimate() {
    for count in COUNTS {
        let statuses: Vec<Option<MapStatus>> = (0..count)
            .map(|i| {
                (i % 4 != 3).then(|| MapStatus {
                    location: BlockManagerId {
                        executor_id: name(i).unwrap_or_default().into(),
                        host: name(i + 1).unwrap_or_default(),
                        port: i as u16,
                    },
                    sizes: (0..i % 9).map(|s| s as u64).collect(),
                })
            })
            .collect();
        let message = Message::MapOutputStatuses {
            shuffle_id: 1,
            epoch: 2,
            statuses: statuses.clone(),
        };
        let frame = frame_of(MessageKind::MapOutputStatuses, &message);
        let ArchivedMessage::MapOutputStatuses {
            statuses: archived, ..
        } = &frame.envelope().unwrap().message
        else {
            unreachable!()
        };
        let mut decoded = Vec::new();
        check(
            &format!("{count} map statuses"),
            archived.decoded_size(),
            || {
                decoded =
                    rkyv::deserialize::<Vec<Option<MapStatus>>, rancor::Error>(archived).unwrap()
            },
        );
        assert_eq!(decoded, statuses);
    }
}

#[test]
fn known_statuses_decode_within_their_estimate_however_many_shuffles() {
    for shuffles in [0usize, 1, 3, 1_000] {
        let known = KnownStatuses {
            shuffles: (0..shuffles)
                .map(|shuffle| ShuffleStatuses {
                    shuffle_id: shuffle as u32,
                    statuses: (0..shuffle % 3)
                        .map(|i| {
                            Some(MapStatus {
                                location: BlockManagerId {
                                    executor_id: name(i).unwrap_or_default().into(),
                                    host: name(i + 2).unwrap_or_default(),
                                    port: 1,
                                },
                                sizes: vec![7; i],
                            })
                        })
                        .collect(),
                })
                .collect(),
        };
        let bytes = rkyv::to_bytes::<rancor::Error>(&known).unwrap();
        let archived = rkyv::access::<ArchivedKnownStatuses, rancor::Error>(&bytes).unwrap();
        let mut decoded = KnownStatuses::default();
        check(
            &format!("the statuses of {shuffles} shuffles"),
            archived.shuffles.decoded_size(),
            || decoded = rkyv::deserialize::<KnownStatuses, rancor::Error>(archived).unwrap(),
        );
        assert_eq!(decoded, known);
        // Many empty shuffles are refused by the list's own size, not let through.
        if shuffles == 1_000 {
            let limit = archived.shuffles.decoded_size() - 1;
            assert!(KnownStatuses::decode(&bytes, limit).is_err());
        }
    }
}
