//! flint's built-in functions for jobs of stages: a word count and a plain hash shuffle,
//! for trying flint's shuffle and measuring it (`flint run --job wordcount|shuffle`).
//!
//! | name | input | does |
//! | --- | --- | --- |
//! | `wordcount-map` | `gen:WORDS:VOCABULARY:SEED`, or `file:MAPS:PATH` | counts the words of its partition (generated, or its split of the file) and writes `(word, count)` keyed records, by the hash of the word |
//! | `wordcount-reduce` | ignored | sums the counts of its partition of the shuffle it reads; returns `word<TAB>count` lines, sorted |
//! | `shuffle-write` | `RECORDS:SIZE:SEED` | writes RECORDS generated records of SIZE bytes (at least 8), each to the partition of the hash of its first 8 bytes |
//! | `shuffle-count` | ignored | counts the records and bytes of its partition of every shuffle it reads; returns both as 8-byte little-endian numbers |
//!
//! Generated words and records are a function of the seed and the partition only
//! ([`generated_text`]), so a driver program can compute what a job must find. A map
//! task generates at most [`MAX_GENERATED_WORDS`] words from a vocabulary of at most
//! [`MAX_VOCABULARY`]; larger numbers fail the task, saying so.

use std::collections::HashMap;
use std::hash::BuildHasher;

use bytes::{BufMut, Bytes, BytesMut};
use rustc_hash::FxHashMap;

use crate::shuffle::partition_of;
use crate::task::{TaskContext, TaskError};

/// Looks at the kill flag once per this many words or records.
const KILL_CHECK: usize = 1 << 16;

/// The most words one `wordcount-map` task generates: its text (a few bytes a word) is
/// held in memory whole.
pub const MAX_GENERATED_WORDS: u64 = 1 << 28;

/// The largest vocabulary `wordcount-map` generates words from: every word of it is
/// held in memory.
pub const MAX_VOCABULARY: u64 = 1 << 20;

/// The most bytes of generated text reserved before the first word is written: more is
/// grown into as the words come.
const INITIAL_TEXT: usize = 16 << 20;

/// A step of a 64-bit LCG (Knuth's MMIX constants): cheap, deterministic, and good
/// enough to pick words.
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *state >> 33
}

/// Word `i` of a generated vocabulary: 3 to 10 lowercase letters, distinct for distinct
/// `i` (the letters spell `i` in base 26 after a prefix of its own).
pub fn vocabulary_word(i: u64) -> String {
    let mut word = Vec::new();
    let mut n = i;
    loop {
        word.push(b'a' + (n % 26) as u8);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    // Lengths vary with i; the digits above decide the word, so padding keeps it unique.
    let len = 3 + (i.wrapping_mul(7) % 8) as usize;
    while word.len() < len {
        word.push(b'z');
    }
    // 'z' padding after a final digit can collide across lengths: mark the length.
    word.push(b'a' + (word.len() % 26) as u8);
    String::from_utf8(word).expect("ASCII")
}

/// The text `wordcount-map` generates for `partition` from `gen:WORDS:VOCABULARY:SEED`:
/// `words` words of a vocabulary of `vocabulary`, separated by spaces. (The task refuses
/// numbers above [`MAX_GENERATED_WORDS`] and [`MAX_VOCABULARY`]; this function takes
/// any, and holds the text and the vocabulary in memory.)
pub fn generated_text(partition: u32, words: u64, vocabulary: u64, seed: u64) -> Vec<u8> {
    let vocabulary: Vec<String> = (0..vocabulary.max(1)).map(vocabulary_word).collect();
    let mut state = seed ^ (u64::from(partition) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    let mut text = Vec::with_capacity(
        usize::try_from(words.saturating_mul(8)).map_or(INITIAL_TEXT, |n| n.min(INITIAL_TEXT)),
    );
    for _ in 0..words {
        let word = &vocabulary[(next(&mut state) % vocabulary.len() as u64) as usize];
        text.extend_from_slice(word.as_bytes());
        text.push(b' ');
    }
    text
}

/// Counts the words of `text` (split at ASCII whitespace) into `counts`.
pub fn count_words<'t, S: BuildHasher>(text: &'t [u8], counts: &mut HashMap<&'t [u8], u64, S>) {
    for word in text
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
    {
        *counts.entry(word).or_insert(0) += 1;
    }
}

/// The part of `text` split `partition` of `maps` reads: whole words from the first word
/// that starts in its share of the bytes, through the last word that does. A partition
/// past the last (`partition >= maps`) reads nothing.
pub fn split_of(text: &[u8], partition: u32, maps: u32) -> &[u8] {
    let len = text.len() as u128;
    let maps = u128::from(maps.max(1));
    // In u128: a large file's length times a partition can pass u64.
    let at = |p: u64| (len * u128::from(p).min(maps) / maps) as usize;
    let word_start = |mut i: usize| {
        // A split that starts inside a word leaves it to the split before.
        if i > 0 && i < text.len() && !text[i - 1].is_ascii_whitespace() {
            while i < text.len() && !text[i].is_ascii_whitespace() {
                i += 1;
            }
        }
        i
    };
    let start = word_start(at(u64::from(partition)));
    let end = word_start(at(u64::from(partition) + 1)).max(start);
    &text[start..end]
}

fn bad_input(function: &str, expected: &str, input: &[u8]) -> TaskError {
    TaskError::failed(format!(
        "{function} expects {expected}; got {:?}",
        String::from_utf8_lossy(input)
    ))
}

fn numbers<const N: usize>(text: &str) -> Option<[u64; N]> {
    let mut out = [0; N];
    let mut parts = text.split(':');
    for slot in &mut out {
        *slot = parts.next()?.trim().parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// `wordcount-map`: see the module docs.
pub fn wordcount_map(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    const EXPECTED: &str = "gen:WORDS:VOCABULARY:SEED or file:MAPS:PATH";
    let text =
        std::str::from_utf8(input).map_err(|_| bad_input("wordcount-map", EXPECTED, input))?;
    let owned;
    let split: &[u8] = if let Some(spec) = text.strip_prefix("gen:") {
        let [words, vocabulary, seed] =
            numbers(spec).ok_or_else(|| bad_input("wordcount-map", EXPECTED, input))?;
        if words > MAX_GENERATED_WORDS {
            return Err(TaskError::failed(format!(
                "wordcount-map generates at most {MAX_GENERATED_WORDS} words a task, not {words}"
            )));
        }
        if vocabulary > MAX_VOCABULARY {
            return Err(TaskError::failed(format!(
                "wordcount-map draws words from a vocabulary of at most {MAX_VOCABULARY}, \
                 not {vocabulary}"
            )));
        }
        owned = generated_text(ctx.partition_id(), words, vocabulary, seed);
        &owned
    } else if let Some(spec) = text.strip_prefix("file:") {
        let (maps, path) = spec
            .split_once(':')
            .and_then(|(maps, path)| Some((maps.parse::<u32>().ok()?, path)))
            .ok_or_else(|| bad_input("wordcount-map", EXPECTED, input))?;
        if ctx.partition_id() >= maps {
            return Err(TaskError::failed(format!(
                "wordcount-map of partition {} cannot read {path} split in {maps}: its \
                 partitions are 0 to {}",
                ctx.partition_id(),
                i64::from(maps) - 1
            )));
        }
        owned = std::fs::read(path)
            .map_err(|e| TaskError::failed(format!("wordcount-map cannot read {path}: {e}")))?;
        split_of(&owned, ctx.partition_id(), maps)
    } else {
        return Err(bad_input("wordcount-map", EXPECTED, input));
    };
    ctx.add_input_bytes(split.len() as u64);
    ctx.check_interrupted()?;
    let mut counts = FxHashMap::default();
    count_words(split, &mut counts);
    ctx.check_interrupted()?;
    let mut writer = ctx.shuffle_writer()?;
    for (word, count) in counts {
        writer.write_keyed(word, &count.to_le_bytes())?;
    }
    Ok(Bytes::new())
}

/// `wordcount-reduce`: see the module docs.
pub fn wordcount_reduce(ctx: &TaskContext, _input: &Bytes) -> Result<Bytes, TaskError> {
    let Some(read) = ctx.shuffle_reads().first().copied() else {
        return Err(TaskError::failed("wordcount-reduce reads no shuffle"));
    };
    let input = ctx.read_shuffle(read.shuffle_id)?;
    let mut counts: FxHashMap<&[u8], u64> = FxHashMap::default();
    for (n, record) in input.keyed_records().enumerate() {
        if n % KILL_CHECK == 0 {
            ctx.check_interrupted()?;
        }
        let (word, count) = record?;
        let count: [u8; 8] = count
            .try_into()
            .map_err(|_| TaskError::failed(format!("a count of {} bytes, not 8", count.len())))?;
        *counts.entry(word).or_insert(0) += u64::from_le_bytes(count);
    }
    let mut words: Vec<(&[u8], u64)> = counts.into_iter().collect();
    words.sort_unstable();
    let mut out = BytesMut::new();
    for (word, count) in words {
        out.put_slice(word);
        out.put_u8(b'\t');
        out.put_slice(count.to_string().as_bytes());
        out.put_u8(b'\n');
    }
    Ok(out.freeze())
}

/// `shuffle-write`: see the module docs.
pub fn shuffle_write(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    const EXPECTED: &str = "RECORDS:SIZE:SEED, SIZE at least 8";
    let [records, size, seed] = std::str::from_utf8(input)
        .ok()
        .and_then(numbers)
        .filter(|[_, size, _]| (8..=1 << 20).contains(size))
        .ok_or_else(|| bad_input("shuffle-write", EXPECTED, input))?;
    let mut writer = ctx.shuffle_writer()?;
    let partitions = writer.partitions();
    let mut record = vec![0u8; size as usize];
    let mut state = seed ^ (u64::from(ctx.partition_id()) << 32);
    for i in 0..records as usize {
        if i % KILL_CHECK == 0 {
            ctx.check_interrupted()?;
        }
        let key = next(&mut state).to_le_bytes();
        record[..8].copy_from_slice(&key);
        record[8..].fill(key[0]);
        writer.write(partition_of(&key, partitions), &record)?;
    }
    Ok(Bytes::new())
}

/// `shuffle-count`: see the module docs.
pub fn shuffle_count(ctx: &TaskContext, _input: &Bytes) -> Result<Bytes, TaskError> {
    let (mut records, mut bytes) = (0u64, 0u64);
    for read in ctx.shuffle_reads().to_vec() {
        let input = ctx.read_shuffle(read.shuffle_id)?;
        for (n, record) in input.records().enumerate() {
            if n % KILL_CHECK == 0 {
                ctx.check_interrupted()?;
            }
            bytes += record?.len() as u64;
            records += 1;
        }
    }
    let mut out = BytesMut::with_capacity(16);
    out.put_u64_le(records);
    out.put_u64_le(bytes);
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_words_are_distinct_and_short() {
        let words: std::collections::HashSet<String> = (0..20_000).map(vocabulary_word).collect();
        assert_eq!(words.len(), 20_000);
        assert!(words.iter().all(|w| (4..=12).contains(&w.len())));
    }

    #[test]
    fn generated_text_depends_on_seed_and_partition_only() {
        let a = generated_text(3, 1_000, 50, 7);
        assert_eq!(a, generated_text(3, 1_000, 50, 7));
        assert_ne!(a, generated_text(4, 1_000, 50, 7));
        let mut counts = FxHashMap::default();
        count_words(&a, &mut counts);
        assert_eq!(counts.values().sum::<u64>(), 1_000);
        assert!(counts.len() <= 50);
    }

    #[test]
    fn splits_give_every_word_to_exactly_one_partition() {
        let text = b"  alpha beta\ngamma   delta epsilon zeta eta theta iota kappa ";
        for maps in 1..=9 {
            let mut all = FxHashMap::default();
            for p in 0..maps {
                count_words(split_of(text, p, maps), &mut all);
            }
            let mut whole = FxHashMap::default();
            count_words(text, &mut whole);
            assert_eq!(all, whole, "{maps} splits");
        }
    }

    #[test]
    fn splits_past_the_last_are_empty() {
        let text = b"alpha beta gamma";
        for (partition, maps) in [(3, 3), (7, 3), (u32::MAX, 1), (1, 0)] {
            assert_eq!(
                split_of(text, partition, maps),
                b"",
                "{partition} of {maps}"
            );
        }
        assert_eq!(split_of(text, 0, 0), text);
    }

    #[test]
    fn numbers_a_task_cannot_honour_fail_it_saying_why() {
        let ctx = TaskContext::new(0, 0);
        let run = |ctx: &TaskContext, input: &'static [u8]| {
            wordcount_map(ctx, &Bytes::from_static(input))
                .unwrap_err()
                .to_string()
        };
        // 160 GB of text, were it generated.
        let error = run(&ctx, b"gen:20000000000:10:1");
        assert!(
            error.contains(&format!("at most {MAX_GENERATED_WORDS} words"))
                && error.contains("20000000000"),
            "{error}"
        );
        let error = run(&ctx, b"gen:10:99999999999:1");
        assert!(
            error.contains(&format!("vocabulary of at most {MAX_VOCABULARY}")),
            "{error}"
        );
        // A partition the file is not split into, checked before the file is read.
        let mut ctx = TaskContext::new(0, 0);
        ctx.partition_id = 5;
        let error = run(&ctx, b"file:3:/nonexistent/words.txt");
        assert!(
            error.contains("partition 5") && error.contains("0 to 2"),
            "{error}"
        );
        ctx.partition_id = 0;
        let error = run(&ctx, b"file:0:/nonexistent/words.txt");
        assert!(error.contains("split in 0"), "{error}");
        // Within the bounds, the map runs on (and fails later, outside a stage).
        let error = run(&ctx, b"gen:1000:1000:1");
        assert!(error.contains("not a shuffle map task"), "{error}");
    }

    #[test]
    fn bad_inputs_say_what_was_expected() {
        let ctx = TaskContext::new(0, 0);
        let error = wordcount_map(&ctx, &Bytes::from_static(b"gen:1:2")).unwrap_err();
        assert!(
            error.to_string().contains("gen:WORDS:VOCABULARY:SEED"),
            "{error}"
        );
        let error = shuffle_write(&ctx, &Bytes::from_static(b"10:4:1")).unwrap_err();
        assert!(error.to_string().contains("SIZE at least 8"), "{error}");
        // Not a stage task: there is no writer to write to.
        let error = wordcount_map(&ctx, &Bytes::from_static(b"gen:10:5:1")).unwrap_err();
        assert!(
            error.to_string().contains("not a shuffle map task"),
            "{error}"
        );
        let error = wordcount_reduce(&ctx, &Bytes::new()).unwrap_err();
        assert!(error.to_string().contains("reads no shuffle"), "{error}");
    }
}
