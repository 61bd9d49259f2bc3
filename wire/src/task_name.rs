//! A task's display name, "task 3.0 in stage 1.0 (TID 17)", kept as the numbers it is
//! made of until it is printed, so that launching a task allocates no string for it. On
//! the wire a numbered name is its numbers too: the driver formats nothing per launch,
//! and an executor formats the name only for a line it logs ([`ArchivedTaskName`]'s
//! `Display`). Any other name is an archived string.

use std::fmt;

use rkyv::{Archive, Deserialize, Serialize};

use crate::shared_str::{AsArchivedString, SharedStr};

/// A task attempt's display name.
#[derive(Debug, Clone, Eq, Archive, Serialize, Deserialize)]
#[rkyv(derive(Debug))]
pub enum TaskName {
    /// `task {index}.{attempt} in stage {stage_id}.{stage_attempt_id} (TID {task_id})`,
    /// as the seeds print it.
    Numbered {
        /// Index of the task in its task set.
        index: u32,
        /// Attempt number of the task.
        attempt: u32,
        /// The stage.
        stage_id: u32,
        /// The stage attempt.
        stage_attempt_id: u32,
        /// The attempt's task id.
        task_id: u64,
    },
    /// Any other name (as a caller chose it).
    Text(#[rkyv(with = AsArchivedString)] SharedStr),
}

/// Room for the longest numbered name: four numbers of up to 20 digits and 28 bytes of
/// text.
const MAX_NUMBERED: usize = 112;

/// A numbered name written out on the stack, back to front: each number's digits go
/// straight to their place, two at a time, and each piece of text is a copy of known
/// length, so formatting a name (once per task launched) costs a few dozen instructions
/// rather than a call per piece.
struct NameBuffer {
    bytes: [u8; MAX_NUMBERED],
    /// The name is `bytes[start..]`.
    start: usize,
}

/// "00" to "99", for writing two digits at once.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

impl NameBuffer {
    fn new() -> Self {
        NameBuffer {
            bytes: [0; MAX_NUMBERED],
            start: MAX_NUMBERED,
        }
    }

    #[inline(always)]
    fn prepend(&mut self, text: &[u8]) {
        let start = self.start - text.len();
        self.bytes[start..self.start].copy_from_slice(text);
        self.start = start;
    }

    #[inline(always)]
    fn prepend_number(&mut self, mut n: u64) {
        let mut at = self.start;
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            at -= 2;
            self.bytes[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            at -= 2;
            self.bytes[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        } else {
            at -= 1;
            self.bytes[at] = b'0' + n as u8;
        }
        self.start = at;
    }

    fn as_str(&self) -> &str {
        // Only ASCII digits and text were written.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

impl NameBuffer {
    /// `task {index}.{attempt} in stage {stage_id}.{stage_attempt_id} (TID {task_id})`.
    fn numbered(
        index: u32,
        attempt: u32,
        stage_id: u32,
        stage_attempt_id: u32,
        task_id: u64,
    ) -> Self {
        let mut name = NameBuffer::new();
        name.prepend(b")");
        name.prepend_number(task_id);
        name.prepend(b" (TID ");
        name.prepend_number(u64::from(stage_attempt_id));
        name.prepend(b".");
        name.prepend_number(u64::from(stage_id));
        name.prepend(b" in stage ");
        name.prepend_number(u64::from(attempt));
        name.prepend(b".");
        name.prepend_number(u64::from(index));
        name.prepend(b"task ");
        name
    }
}

impl TaskName {
    /// Calls `f` with the name as text, formatting a numbered name on the stack.
    pub fn with_str<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match *self {
            TaskName::Text(ref text) => f(text),
            TaskName::Numbered {
                index,
                attempt,
                stage_id,
                stage_attempt_id,
                task_id,
            } => f(
                NameBuffer::numbered(index, attempt, stage_id, stage_attempt_id, task_id).as_str(),
            ),
        }
    }
}

fn digits(mut n: u64) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

impl TaskName {
    /// The length of the name's text in bytes, without formatting it.
    pub fn text_len(&self) -> usize {
        match self {
            TaskName::Text(text) => text.len(),
            TaskName::Numbered {
                index,
                attempt,
                stage_id,
                stage_attempt_id,
                task_id,
            } => {
                // "task " "." " in stage " "." " (TID " ")"
                24 + digits(u64::from(*index))
                    + digits(u64::from(*attempt))
                    + digits(u64::from(*stage_id))
                    + digits(u64::from(*stage_attempt_id))
                    + digits(*task_id)
            }
        }
    }
}

impl fmt::Display for TaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_str(|text| f.write_str(text))
    }
}

impl PartialEq for TaskName {
    /// Names are equal when they read the same, however they are held.
    fn eq(&self, other: &Self) -> bool {
        self.with_str(|a| other.with_str(|b| a == b))
    }
}

impl From<&str> for TaskName {
    fn from(text: &str) -> Self {
        TaskName::Text(text.into())
    }
}

impl From<String> for TaskName {
    fn from(text: String) -> Self {
        TaskName::Text(text.into())
    }
}

impl From<SharedStr> for TaskName {
    fn from(text: SharedStr) -> Self {
        TaskName::Text(text)
    }
}

impl ArchivedTaskName {
    /// The name as it was sent, if it is numbered: its numbers, copied, with no text to
    /// check or keep.
    pub fn numbered(&self) -> Option<TaskName> {
        match self {
            ArchivedTaskName::Numbered {
                index,
                attempt,
                stage_id,
                stage_attempt_id,
                task_id,
            } => Some(TaskName::Numbered {
                index: index.to_native(),
                attempt: attempt.to_native(),
                stage_id: stage_id.to_native(),
                stage_attempt_id: stage_attempt_id.to_native(),
                task_id: task_id.to_native(),
            }),
            ArchivedTaskName::Text(_) => None,
        }
    }

    /// The text of a name that is not numbered; empty for a numbered one.
    pub fn text(&self) -> &str {
        match self {
            ArchivedTaskName::Text(text) => text.as_str(),
            ArchivedTaskName::Numbered { .. } => "",
        }
    }
}

impl fmt::Display for ArchivedTaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.numbered() {
            Some(name) => name.fmt(f),
            None => f.write_str(self.text()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(
        index: u32,
        attempt: u32,
        stage_id: u32,
        stage_attempt_id: u32,
        task_id: u64,
    ) -> TaskName {
        TaskName::Numbered {
            index,
            attempt,
            stage_id,
            stage_attempt_id,
            task_id,
        }
    }

    #[test]
    fn numbered_names_read_as_the_seeds_print_them() {
        assert_eq!(
            numbered(3, 0, 1, 0, 17).to_string(),
            "task 3.0 in stage 1.0 (TID 17)"
        );
        let max = numbered(u32::MAX, u32::MAX, u32::MAX, u32::MAX, u64::MAX);
        assert_eq!(
            max.to_string(),
            format!(
                "task {0}.{0} in stage {0}.{0} (TID {1})",
                u32::MAX,
                u64::MAX
            )
        );
    }

    #[test]
    fn every_digit_count_formats_as_std_does() {
        let mut samples = vec![0u64, u64::MAX];
        let mut power = 1u64;
        while let Some(next) = power.checked_mul(10) {
            samples.extend([power - 1, power, power + 1, next / 2 + 7]);
            power = next;
        }
        for &n in &samples {
            let small = (n % (u64::from(u32::MAX) + 1)) as u32;
            let name = numbered(small, small / 3, small / 7, small % 10, n);
            let expected = format!(
                "task {small}.{} in stage {}.{} (TID {n})",
                small / 3,
                small / 7,
                small % 10
            );
            assert_eq!(name.to_string(), expected);
            assert_eq!(name.text_len(), expected.len());
        }
    }

    #[test]
    fn text_len_counts_without_formatting() {
        for name in [
            numbered(0, 0, 0, 0, 0),
            numbered(3, 1, 12, 0, 1_234_567),
            numbered(u32::MAX, u32::MAX, u32::MAX, u32::MAX, u64::MAX),
            TaskName::from("any text"),
        ] {
            assert_eq!(name.text_len(), name.to_string().len(), "{name}");
        }
    }

    #[test]
    fn a_name_reads_back_from_its_archive_as_it_was_written() {
        for name in [
            numbered(0, 0, 0, 0, 0),
            numbered(7, 2, 31, 1, 98_765_432_101),
            numbered(u32::MAX, u32::MAX, u32::MAX, u32::MAX, u64::MAX),
            TaskName::from("a name of the caller's"),
        ] {
            let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&name).unwrap();
            let archived = rkyv::access::<ArchivedTaskName, rkyv::rancor::Error>(&bytes).unwrap();
            assert_eq!(archived.to_string(), name.to_string());
            match &name {
                TaskName::Numbered { .. } => {
                    assert_eq!(archived.numbered().as_ref(), Some(&name));
                    assert_eq!(archived.text(), "");
                }
                TaskName::Text(text) => {
                    assert_eq!(archived.numbered(), None);
                    assert_eq!(archived.text(), &**text);
                }
            }
            let back: TaskName =
                rkyv::deserialize::<TaskName, rkyv::rancor::Error>(archived).unwrap();
            assert_eq!(back.to_string(), name.to_string());
        }
    }

    #[test]
    fn names_are_equal_when_they_read_the_same() {
        let text = TaskName::from("task 3.0 in stage 1.0 (TID 17)");
        assert_eq!(numbered(3, 0, 1, 0, 17), text);
        assert_ne!(numbered(3, 1, 1, 0, 17), text);
    }
}
