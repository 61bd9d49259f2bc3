//! Jobs of stages across real processes: a driver in this process, `flint executor`
//! processes on 127.0.0.1, shuffles between them over real sockets.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use common::{spawn_executor, Processes};
use flint::executor::jobs::{count_words, generated_text};
use flint::rpc::Conf;
use flint::scheduler::dag::{JobSpec, StageSpec};
use flint::scheduler::Driver;
use flint::wire::TaskPayload;

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

fn conf(pairs: &[&str]) -> Conf {
    let mut all = vec!["executor.heartbeatInterval=500ms", "network.timeout=20s"];
    all.extend_from_slice(pairs);
    Conf::from_pairs(all).unwrap()
}

/// A word count job: `maps` map tasks generating `words` words each from a vocabulary
/// of `vocabulary`, `reduces` reduce partitions.
fn word_count(
    driver: &Driver,
    maps: u32,
    reduces: u32,
    words: u64,
    vocabulary: u64,
    seed: u64,
) -> JobSpec {
    let shuffle = driver.new_shuffle_id();
    let input = format!("gen:{words}:{vocabulary}:{seed}");
    let map = StageSpec::new(
        "wordcount-map at tests/shuffle.rs",
        maps,
        TaskPayload::encode("wordcount-map", input.as_bytes()).unwrap(),
    );
    let reduce = StageSpec::new(
        "wordcount-reduce at tests/shuffle.rs",
        reduces,
        TaskPayload::encode("wordcount-reduce", b"").unwrap(),
    )
    .reading([shuffle]);
    JobSpec::new("word count", reduce).with_shuffle(shuffle, reduces, map)
}

/// What the job must find, counted here.
fn expected_counts(maps: u32, words: u64, vocabulary: u64, seed: u64) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    for partition in 0..maps {
        let text = generated_text(partition, words, vocabulary, seed);
        let mut counts = std::collections::HashMap::new();
        count_words(&text, &mut counts);
        for (word, count) in counts {
            *total
                .entry(String::from_utf8(word.to_vec()).unwrap())
                .or_insert(0) += count;
        }
    }
    total
}

/// The counts of the reduce tasks' `word<TAB>count` lines; a word twice is an error.
fn counts_of(results: &[bytes::Bytes]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for result in results {
        for line in std::str::from_utf8(result).unwrap().lines() {
            let (word, count) = line.split_once('\t').unwrap();
            let previous = counts.insert(word.to_owned(), count.parse().unwrap());
            assert!(previous.is_none(), "{word} counted by two reduce tasks");
        }
    }
    counts
}

#[test]
fn a_word_count_over_two_executors_counts_every_word_once() {
    let conf = conf(&[]);
    let driver = Driver::standalone(&conf).unwrap();
    let _executors = Processes(
        (1..=2)
            .map(|i| spawn_executor(driver.address(), &i.to_string(), &[], Stdio::inherit()))
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let (maps, reduces, words, vocabulary, seed) = (4, 3, 250_000, 5_000, 42);
    let outcome = driver
        .submit_job(word_count(&driver, maps, reduces, words, vocabulary, seed))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), reduces as usize);
    let counts = counts_of(&outcome.results);
    assert_eq!(counts.values().sum::<u64>(), u64::from(maps) * words);
    assert_eq!(counts, expected_counts(maps, words, vocabulary, seed));
    assert_eq!(outcome.stats.stages.len(), 2);
    assert_eq!(outcome.stats.stage_attempts, 2);
    assert_eq!(outcome.stats.fetch_failures, 0);
    assert!(outcome.stats.shuffle_bytes_written > 0);
    driver.stop().unwrap();
}
