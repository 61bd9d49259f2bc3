//! Reading a `LaunchTask` into what a runner needs of it ([`Launch`]): in place, with no
//! copy of the serialized task, and with the decoded size of its files, jars and
//! properties checked before any of them is decoded.
//!
//! A small launch is then copied out of its frame into its task handle's reused buffer
//! ([`COPY_LIMIT`]); a large one stays a view of the frame.

use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use flint_wire::{
    check_decoded_size, ArchivedDependency, ArchivedTaskDescription, DecodedSize, Dependency,
    Frame, Property, TaskDescription, TaskExtras, TaskName, WireError,
};

/// A launch whose name and serialized task together are at most this long is copied out
/// of the frame it came in (into its handle's reused buffer) rather than kept as views of
/// it: views of a frame keep the event loop's whole receive buffer alive, and while
/// queued tasks hold it the loop must allocate a new one for every few frames it reads.
/// Larger launches stay views (no copy), and cost the buffers they pin.
pub(crate) const COPY_LIMIT: usize = 512;

/// A task's display name as a runner keeps it, made into text only when it is printed.
pub(crate) enum LaunchName {
    /// A name of text: a view of the launch frame, or its copy (the archived string,
    /// already checked to be UTF-8).
    Wire(Bytes),
    /// A numbered name as the launch carried it, or the name a [`TaskDescription`]
    /// gave.
    Given(TaskName),
}

impl fmt::Display for LaunchName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchName::Wire(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => f.write_str(text),
                Err(_) => f.write_str(&String::from_utf8_lossy(bytes)),
            },
            LaunchName::Given(name) => name.fmt(f),
        }
    }
}

/// What a runner needs of one launched task: its numbers, its name and its serialized
/// task (views of the launch frame when it came from the driver: nothing is copied), and
/// its files, jars and properties only when it has some.
pub(crate) struct Launch {
    pub(crate) task_id: u64,
    pub(crate) attempt_number: u32,
    pub(crate) index: u32,
    pub(crate) partition_id: u32,
    pub(crate) cpus: u32,
    pub(crate) name: LaunchName,
    pub(crate) serialized_task: Bytes,
    /// Refused if they would take more than `max_decoded` bytes decoded: the task fails.
    pub(crate) extras: Result<Option<Arc<TaskExtras>>, Box<WireError>>,
}

impl Launch {
    /// Reads an archived task description in place; allocates only for a task with files,
    /// jars or properties other than `last_extras` (the last launch's that had some), and
    /// for those at most `max_decoded` bytes.
    pub(crate) fn from_archived(
        frame: &Frame,
        task: &ArchivedTaskDescription,
        max_decoded: usize,
        last_extras: &mut Option<Arc<TaskExtras>>,
    ) -> Launch {
        Self::read(frame, task, max_decoded, None, last_extras)
    }

    /// [`Launch::from_archived`], with a small launch ([`COPY_LIMIT`]) copied straight
    /// from the frame into `scratch` (which keeps its memory from task to task), so that
    /// the frame's receive buffer is free again once the event loop is done with it; no
    /// views of the frame are made on the way (each made and dropped is two atomic
    /// operations on a buffer the event loop's reads share).
    pub(crate) fn from_archived_into(
        frame: &Frame,
        task: &ArchivedTaskDescription,
        max_decoded: usize,
        scratch: &mut BytesMut,
        last_extras: &mut Option<Arc<TaskExtras>>,
    ) -> Launch {
        Self::read(frame, task, max_decoded, Some(scratch), last_extras)
    }

    /// `last_extras` are the files, jars and properties the last launch with some had:
    /// the tasks of a task set share theirs, and a launch with the same takes them
    /// rather than decode its own.
    fn read(
        frame: &Frame,
        task: &ArchivedTaskDescription,
        max_decoded: usize,
        scratch: Option<&mut BytesMut>,
        last_extras: &mut Option<Arc<TaskExtras>>,
    ) -> Launch {
        let wire = &task.extras;
        let extras = if wire.added_files.is_empty()
            && wire.added_jars.is_empty()
            && wire.properties.is_empty()
        {
            Ok(None)
        } else if let Some(last) = last_extras.as_ref().filter(|last| wire.matches(last)) {
            Ok(Some(last.clone()))
        } else if let Err(refused) = check_decoded_size(
            "its files, jars and properties",
            wire.added_files
                .decoded_size()
                .saturating_add(wire.added_jars.decoded_size())
                .saturating_add(wire.properties.decoded_size()),
            max_decoded,
        ) {
            Err(Box::new(refused))
        } else {
            let dependency = |d: &ArchivedDependency| Dependency {
                name: d.name.to_string(),
                timestamp: d.timestamp.to_native(),
            };
            let extras = TaskExtras {
                added_files: wire.added_files.iter().map(dependency).collect(),
                added_jars: wire.added_jars.iter().map(dependency).collect(),
                properties: wire
                    .properties
                    .iter()
                    .map(|p| Property {
                        key: p.key.to_string(),
                        value: p.value.to_string(),
                    })
                    .collect(),
            }
            .shared();
            last_extras.clone_from(&extras);
            Ok(extras)
        };
        // A numbered name is kept as its numbers; only a name of text is copied or viewed.
        let (text, serialized_task) =
            (task.name.text().as_bytes(), task.serialized_task.as_slice());
        let (text, serialized_task) = match scratch {
            Some(scratch) if text.len() + serialized_task.len() <= COPY_LIMIT => {
                let copy = copy_into(scratch, serialized_task, text);
                (
                    copy.slice(serialized_task.len()..),
                    copy.slice(..serialized_task.len()),
                )
            }
            _ => (frame.bytes_of(text), frame.bytes_of(serialized_task)),
        };
        let name = match task.name.numbered() {
            Some(numbered) => LaunchName::Given(numbered),
            None => LaunchName::Wire(text),
        };
        Launch {
            task_id: task.task_id.to_native(),
            attempt_number: task.attempt_number.to_native(),
            index: task.index.to_native(),
            partition_id: task.partition_id.to_native(),
            cpus: task.cpus.to_native(),
            name,
            serialized_task,
            extras,
        }
    }

    /// A launch given as a [`TaskDescription`] (not read off the wire).
    pub(crate) fn from_description(task: TaskDescription) -> Launch {
        Launch {
            task_id: task.task_id,
            attempt_number: task.attempt_number,
            index: task.index,
            partition_id: task.partition_id,
            cpus: task.cpus,
            name: LaunchName::Given(task.name),
            serialized_task: task.serialized_task,
            // As read off the wire: none at all when all three lists are empty.
            extras: Ok(task.extras.filter(|extras| !extras.is_empty())),
        }
    }

    /// The serialized task's length byte and function name, if it has them.
    fn function_prefix(&self) -> Option<&[u8]> {
        let len = usize::from(*self.serialized_task.first()?);
        self.serialized_task.get(..=len)
    }

    /// Whether both run the same task function.
    pub(crate) fn same_function(&self, other: &Launch) -> bool {
        self.function_prefix()
            .is_some_and(|prefix| other.function_prefix() == Some(prefix))
    }
}

/// `serialized_task` then `name`, copied into `scratch`'s memory, which is taken back
/// from the handle's previous task when nothing holds it any more.
fn copy_into(scratch: &mut BytesMut, serialized_task: &[u8], name: &[u8]) -> Bytes {
    scratch.reserve(serialized_task.len() + name.len());
    scratch.extend_from_slice(serialized_task);
    scratch.extend_from_slice(name);
    scratch.split().freeze()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::executor::Staged;
    use crate::registry::TaskRegistry;
    use crate::task::TaskContext;
    use crate::testing::{archived, executor, launch_frame, task, WAIT};
    use flint_wire::{TaskFailureKind, TaskOutcome, TaskPayload, TaskState};

    fn inside(part: &[u8], frame: &Frame) -> bool {
        let payload = frame.payload().as_ptr_range();
        payload.contains(&part.as_ptr())
    }

    #[test]
    fn a_small_launch_is_copied_out_of_its_frame_and_a_large_one_is_not() {
        let (executor, _rx) = executor(1, 1 << 20, TaskRegistry::with_builtins());
        let mut staged = Staged::with_capacity(8);
        let small = launch_frame(task(1, "echo", b"hi"));
        executor.stage_archived(&mut staged, &small, archived(&small));
        let launch = &staged.jobs[0].launch;
        assert!(!inside(&launch.serialized_task, &small));
        assert_eq!(
            launch.serialized_task,
            TaskPayload::encode("echo", b"hi").unwrap()
        );
        assert_eq!(launch.name.to_string(), "task 1.0 in stage 0.0 (TID 1)");
        assert!(matches!(launch.extras, Ok(None)));

        let input = vec![b'x'; COPY_LIMIT];
        let large = launch_frame(task(2, "echo", &input));
        executor.stage_archived(&mut staged, &large, archived(&large));
        let launch = &staged.jobs[1].launch;
        assert!(
            inside(&launch.serialized_task, &large),
            "a view, not a copy"
        );
        assert_eq!(launch.serialized_task.len(), 1 + 4 + COPY_LIMIT);
        assert_eq!(launch.name.to_string(), "task 2.0 in stage 0.0 (TID 2)");

        // A numbered name, as the scheduler sends it, is kept as its numbers.
        let numbered = launch_frame(TaskDescription {
            name: TaskName::Numbered {
                index: 4,
                attempt: 1,
                stage_id: 5,
                stage_attempt_id: 2,
                task_id: 3,
            },
            ..task(3, "echo", b"hi")
        });
        executor.stage_archived(&mut staged, &numbered, archived(&numbered));
        let launch = &staged.jobs[2].launch;
        assert!(matches!(
            launch.name,
            LaunchName::Given(TaskName::Numbered { .. })
        ));
        assert_eq!(launch.name.to_string(), "task 4.1 in stage 5.2 (TID 3)");
        assert!(!inside(&launch.serialized_task, &numbered));
        staged.jobs.clear();
    }

    #[test]
    fn a_launch_whose_properties_would_decode_past_the_limit_fails_without_decoding_them() {
        let limit = 64 << 10;
        let (executor, rx) = executor(1, limit, TaskRegistry::with_builtins());
        // Empty properties: 16 bytes each archived, 48 decoded.
        let mut flood = task(1, "echo", b"hi");
        let mut properties = vec![
            Property {
                key: String::new(),
                value: String::new(),
            };
            limit / 32
        ];
        flood.extras = TaskExtras {
            properties: properties.clone(),
            ..TaskExtras::NONE
        }
        .shared();
        let frame = launch_frame(flood.clone());
        assert!(frame.payload().len() < limit, "the frame itself is allowed");
        let mut staged = Staged::with_capacity(2);
        executor.stage_archived(&mut staged, &frame, archived(&frame));
        assert!(staged.jobs[0].launch.extras.is_err());
        // A few properties within the limit are decoded and the task runs.
        flood.task_id = 2;
        properties.truncate(8);
        flood.extras = TaskExtras {
            properties,
            ..TaskExtras::NONE
        }
        .shared();
        let frame = launch_frame(flood);
        executor.stage_archived(&mut staged, &frame, archived(&frame));
        executor.commit(&mut staged).unwrap();
        let mut updates = [
            rx.recv_timeout(WAIT).unwrap(),
            rx.recv_timeout(WAIT).unwrap(),
        ];
        updates.sort_by_key(|u| u.task_id);
        let TaskOutcome::Failure { kind, message, .. } = &updates[0].outcome else {
            panic!("{:?}", updates[0])
        };
        assert_eq!(*kind, TaskFailureKind::Undeserializable);
        assert!(
            message.starts_with("Could not deserialize task 1.0 in stage 0.0 (TID 1): its files, jars and properties would take ")
                && message.ends_with(&format!("more than rpc.message.maxSize ({limit} bytes)")),
            "{message}"
        );
        assert_eq!(updates[1].state, TaskState::Finished, "{:?}", updates[1]);
    }

    #[test]
    fn a_task_sees_its_cpus_files_jars_and_properties() {
        let mut registry = TaskRegistry::new();
        registry
            .register("describe", |ctx: &TaskContext, _: &Bytes| {
                Ok(Bytes::from(format!(
                    "{} {:?} {:?} {:?} {:?}",
                    ctx.cpus(),
                    ctx.added_files()
                        .iter()
                        .map(|d| &d.name)
                        .collect::<Vec<_>>(),
                    ctx.added_jars()
                        .iter()
                        .map(|d| d.timestamp)
                        .collect::<Vec<_>>(),
                    ctx.local_property("spark.job.description"),
                    ctx.local_property("absent"),
                )))
            })
            .unwrap();
        let (executor, rx) = executor(1, 1 << 20, registry);
        let mut described = task(1, "describe", b"");
        described.cpus = 2;
        described.extras = TaskExtras {
            added_files: vec![Dependency {
                name: "data.csv".into(),
                timestamp: 5,
            }],
            added_jars: vec![Dependency {
                name: "lib.jar".into(),
                timestamp: 7,
            }],
            properties: vec![Property {
                key: "spark.job.description".into(),
                value: "nightly".into(),
            }],
        }
        .shared();
        let frame = launch_frame(described.clone());
        let mut staged = Staged::with_capacity(2);
        executor.stage_archived(&mut staged, &frame, archived(&frame));
        executor.commit(&mut staged).unwrap();
        executor
            .launch_task(TaskDescription {
                task_id: 2,
                ..described
            })
            .unwrap();
        let plain = task(3, "describe", b"");
        let frame = launch_frame(plain);
        executor.stage_archived(&mut staged, &frame, archived(&frame));
        executor.commit(&mut staged).unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let update = rx.recv_timeout(WAIT).unwrap();
            let TaskOutcome::Direct { value, .. } = update.outcome else {
                panic!("{update:?}")
            };
            seen.push((update.task_id, String::from_utf8(value.to_vec()).unwrap()));
        }
        seen.sort();
        let full = r#"2 ["data.csv"] [7] Some("nightly") None"#;
        assert_eq!(seen[0], (1, full.to_owned()));
        assert_eq!(seen[1], (2, full.to_owned()));
        assert_eq!(seen[2], (3, "1 [] [] None None".to_owned()));
    }
}
