//! Task functions by name ([`TaskRegistry`]) and flint's built-in ones.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_wire::MAX_FUNCTION_NAME;
use rustc_hash::FxHashMap;

use crate::jobs;
use crate::task::{TaskContext, TaskError};

/// A task function: it gets its context and its input (a view of the received frame, not
/// a copy) and returns the task's result.
pub type TaskFn = dyn Fn(&TaskContext, &Bytes) -> Result<Bytes, TaskError> + Send + Sync;

/// A name a task function cannot be registered under.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a task function name has 1 to {MAX_FUNCTION_NAME} bytes (it is written in one byte of \
     the serialized task); {name:?} has {len}"
)]
pub struct InvalidFunctionName {
    /// The name as given.
    pub name: String,
    /// Its length in bytes.
    pub len: usize,
}

/// The task functions an executor can run, by the name a serialized task gives
/// ([`flint_wire::TaskPayload`]).
///
/// [`TaskRegistry::with_builtins`] holds flint's built-in functions, which take ASCII
/// text input:
///
/// | name | input | does |
/// | --- | --- | --- |
/// | `noop` | ignored | returns an empty result |
/// | `echo` | anything | returns its input (the same bytes, not a copy) |
/// | `sleep` | milliseconds | sleeps, checking its kill flag every few milliseconds |
/// | `spin` | milliseconds | busy-loops, checking its kill flag |
/// | `fail-n-attempts` | N | fails while its attempt number is below N, then returns an empty result |
/// | `large-result` | a size: bytes, or with a `k`, `m` or `g` suffix (KiB, MiB, GiB) | returns that many bytes; byte i is `i % 251` |
/// | `exit-process` | an exit code, 1 to 255 | ends the executor's whole process with that code at once, as a task that crashes its executor does |
/// | `accumulate` | `ID[,fail-below=N][,sleep-first=MS][,exit-first=CODE][,race=NONCE][,hold=NONCE]` | adds 1 to the long accumulator `ID` (in a shuffle map stage, writes one record to each reduce partition), then: fails while its attempt number is below N; sleeps MS milliseconds in its first attempt (checking its kill flag); ends the process with CODE in its first attempt; with `race`, ignores kills and ends its first attempt and a copy of it together, both successful, through a Unix socket in a temporary directory named by NONCE; with `hold`, holds every attempt (checking its kill flag) until a file `flint-accumulate-release-NONCE` exists in the temporary directory; returns an empty result |
/// | `broadcast-read` | a broadcast id | reads the broadcast and returns its length, the address of its first byte (tasks of one executor share one copy) and the CRC32 of a 4 KiB window of it that depends on the partition ([`crate::broadcast::broadcast_read`]) |
///
/// and the functions of jobs of stages in [`crate::jobs`] (`wordcount-map`,
/// `wordcount-reduce`, `shuffle-write`, `shuffle-count`).
///
/// An input that is not what a built-in expects fails the task with a message saying
/// what was expected.
///
/// ```
/// use bytes::Bytes;
/// use flint_executor::{TaskContext, TaskRegistry};
///
/// let mut registry = TaskRegistry::with_builtins();
/// registry.register("upper", |_ctx: &TaskContext, input: &Bytes| {
///     Ok(Bytes::from(input.to_ascii_uppercase()))
/// })?;
/// let upper = registry.get("upper").expect("registered");
/// let ctx = TaskContext::new(0, 0);
/// assert_eq!(upper(&ctx, &Bytes::from_static(b"flint")).unwrap(), "FLINT");
/// assert!(registry.names().contains(&"sleep"));
/// # Ok::<(), flint_executor::InvalidFunctionName>(())
/// ```
#[derive(Clone, Default)]
pub struct TaskRegistry {
    functions: FxHashMap<String, Arc<TaskFn>>,
}

impl std::fmt::Debug for TaskRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskRegistry")
            .field("functions", &self.names())
            .finish()
    }
}

impl TaskRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        TaskRegistry::default()
    }

    /// A registry with flint's built-in functions (see the table above).
    pub fn with_builtins() -> Self {
        let mut registry = TaskRegistry::new();
        let builtins: [(&str, Arc<TaskFn>); 13] = [
            ("noop", Arc::new(noop)),
            ("echo", Arc::new(echo)),
            ("sleep", Arc::new(sleep)),
            ("spin", Arc::new(spin)),
            ("fail-n-attempts", Arc::new(fail_n_attempts)),
            ("large-result", Arc::new(large_result)),
            ("exit-process", Arc::new(exit_process)),
            ("accumulate", Arc::new(accumulate)),
            ("wordcount-map", Arc::new(jobs::wordcount_map)),
            ("wordcount-reduce", Arc::new(jobs::wordcount_reduce)),
            ("shuffle-write", Arc::new(jobs::shuffle_write)),
            ("shuffle-count", Arc::new(jobs::shuffle_count)),
            ("broadcast-read", Arc::new(crate::broadcast::broadcast_read)),
        ];
        for (name, function) in builtins {
            registry.functions.insert(name.to_owned(), function);
        }
        registry
    }

    /// Registers `function` under `name`, replacing a function already registered under
    /// it. The name must have 1 to 255 bytes, as a serialized task carries it.
    pub fn register<F>(
        &mut self,
        name: impl Into<String>,
        function: F,
    ) -> Result<&mut Self, InvalidFunctionName>
    where
        F: Fn(&TaskContext, &Bytes) -> Result<Bytes, TaskError> + Send + Sync + 'static,
    {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_FUNCTION_NAME {
            let len = name.len();
            return Err(InvalidFunctionName { name, len });
        }
        self.functions.insert(name, Arc::new(function));
        Ok(self)
    }

    /// The function registered under `name`.
    pub fn get(&self, name: &str) -> Option<&TaskFn> {
        self.functions.get(name).map(|f| &**f)
    }

    /// The function registered under `name`, with the name as the registry holds it.
    pub(crate) fn entry(&self, name: &str) -> Option<(&str, &TaskFn)> {
        self.functions
            .get_key_value(name)
            .map(|(name, f)| (name.as_str(), &**f))
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.functions.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// How many functions are registered.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// Whether no function is registered.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

/// How often `sleep` looks at its kill flag.
const SLEEP_SLICE: Duration = Duration::from_millis(5);
/// The largest result `large-result` makes: 2 GiB.
pub const MAX_LARGE_RESULT: u64 = 2 << 30;
/// The period of `large-result`'s pattern.
const PATTERN_PERIOD: usize = 251;

fn noop(_ctx: &TaskContext, _input: &Bytes) -> Result<Bytes, TaskError> {
    Ok(Bytes::new())
}

fn echo(_ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    Ok(input.clone())
}

fn sleep(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    let millis = parse_number("sleep", input, "a number of milliseconds, e.g. \"500\"")?;
    let deadline = Instant::now() + Duration::from_millis(millis);
    wait_until(ctx, deadline, SLEEP_SLICE, || false)?;
    Ok(Bytes::new())
}

/// Sleeps until `deadline` or until `done()`, looking at the task's kill flag (and at
/// `done`) every `slice`: a kill ends the wait with its error.
fn wait_until(
    ctx: &TaskContext,
    deadline: Instant,
    slice: Duration,
    done: impl Fn() -> bool,
) -> Result<(), TaskError> {
    loop {
        ctx.check_interrupted()?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || done() {
            return Ok(());
        }
        std::thread::sleep(left.min(slice));
    }
}

fn spin(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    let millis = parse_number("spin", input, "a number of milliseconds, e.g. \"500\"")?;
    let deadline = Instant::now() + Duration::from_millis(millis);
    let mut turns = 0u32;
    loop {
        ctx.check_interrupted()?;
        // Reading the clock costs more than the flag: look at it every few turns.
        turns = turns.wrapping_add(1);
        if turns % 64 == 0 && Instant::now() >= deadline {
            return Ok(Bytes::new());
        }
        std::hint::spin_loop();
    }
}

fn fail_n_attempts(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    let n = parse_number(
        "fail-n-attempts",
        input,
        "the number of attempts that fail, e.g. \"2\"",
    )?;
    let attempt = ctx.attempt_number();
    if u64::from(attempt) < n {
        return Err(TaskError::failed(format!(
            "fail-n-attempts: attempt {attempt} fails on purpose (the first {n} attempts fail)"
        )));
    }
    Ok(Bytes::new())
}

fn exit_process(_ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    let code = parse_number(
        "exit-process",
        input,
        "an exit code from 1 to 255, e.g. \"3\"",
    )?;
    // Not 0: a clean exit is no executor failure, and the task would be launched again
    // and again on executors that end cleanly.
    let code = u8::try_from(code)
        .ok()
        .filter(|&code| code > 0)
        .ok_or_else(|| {
            TaskError::failed(format!(
                "exit-process: exit code {code} is not between 1 and 255"
            ))
        })?;
    std::process::exit(i32::from(code))
}

/// Adds 1 to a long accumulator before it does anything else, so that a driver that
/// merged failed or killed attempts, or a partition twice, would count too much.
fn accumulate(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    const EXPECTED: &str =
        "ID[,fail-below=N][,sleep-first=MS][,exit-first=CODE][,race=NONCE][,hold=NONCE], e.g. \"3,fail-below=2\"";
    let bad = || {
        TaskError::failed(format!(
            "accumulate expects {EXPECTED}; got {:?}",
            String::from_utf8_lossy(input)
        ))
    };
    let text = std::str::from_utf8(input).map_err(|_| bad())?;
    let mut parts = text.trim().split(',');
    let id: u64 = parts
        .next()
        .and_then(|id| id.trim().parse().ok())
        .ok_or_else(bad)?;
    let (mut fail_below, mut sleep_first, mut exit_first, mut race_nonce, mut hold_nonce) =
        (0u64, 0u64, None, None, None);
    for part in parts {
        let (key, value) = part.split_once('=').ok_or_else(bad)?;
        let value: u64 = value.trim().parse().map_err(|_| bad())?;
        match key.trim() {
            "fail-below" => fail_below = value,
            "sleep-first" => sleep_first = value,
            "exit-first" => exit_first = Some(value),
            "race" => race_nonce = Some(value),
            "hold" => hold_nonce = Some(value),
            _ => return Err(bad()),
        }
    }
    ctx.add_long(id, 1)?;
    // In a shuffle map stage: one record for each reduce partition, so that readers
    // fetch from every map output. (Asked first: the writer's refusal is a message.)
    let writes = ctx.stage.as_ref().is_some_and(|s| s.writer.is_some());
    if writes {
        let mut writer = ctx.shuffle_writer()?;
        for partition in 0..writer.partitions() {
            writer.write(partition, b"accumulated")?;
        }
    }
    let attempt = ctx.attempt_number();
    if let Some(nonce) = race_nonce {
        race(ctx, nonce).map_err(|e| TaskError::failed(format!("accumulate: race: {e}")))?;
    }
    if let Some(nonce) = hold_nonce {
        hold(ctx, nonce)?;
    }
    if u64::from(attempt) < fail_below {
        return Err(TaskError::failed(format!(
            "accumulate: attempt {attempt} fails on purpose (attempts below {fail_below} fail)"
        )));
    }
    if attempt == 0 {
        if let Some(code) = exit_first {
            let code = u8::try_from(code).ok().filter(|&c| c > 0).ok_or_else(bad)?;
            std::process::exit(i32::from(code));
        }
        if sleep_first > 0 {
            let deadline = Instant::now() + Duration::from_millis(sleep_first);
            wait_until(ctx, deadline, SLEEP_SLICE, || false)?;
        }
    }
    Ok(Bytes::new())
}

/// How long a racing first attempt holds at least: a few heartbeats, which carry its
/// partial value.
const RACE_HOLD: Duration = Duration::from_secs(1);
/// How long a racing attempt waits for the other at most.
const RACE_WAIT: Duration = Duration::from_secs(30);

/// How often a held attempt looks for its release: finely, so that an original and its
/// copy released together end within a few milliseconds, both before the driver's kill
/// of the other can come.
const HOLD_SLICE: Duration = Duration::from_millis(2);

/// `accumulate`'s `hold`: waits, checking its kill flag, until whoever runs the job
/// releases it by creating [`accumulate_release_file`]`(nonce)`, or [`RACE_WAIT`] has
/// passed. A test keeps its job open with it until it has seen what it waits for.
fn hold(ctx: &TaskContext, nonce: u64) -> Result<(), TaskError> {
    let release = accumulate_release_file(nonce);
    wait_until(ctx, Instant::now() + RACE_WAIT, HOLD_SLICE, || {
        release.exists()
    })
}

/// The file whose existence releases the attempts of `accumulate` with `hold=nonce`.
pub fn accumulate_release_file(nonce: u64) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("flint-accumulate-release-{nonce}"))
}

/// The directory the attempts of `accumulate` with `race=nonce` meet in, for whoever runs
/// the job to remove afterwards.
pub fn accumulate_race_dir(nonce: u64) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("flint-accumulate-race-{nonce}"))
}

/// `accumulate`'s `race`: the first attempt of a partition and a (speculative) copy of it
/// both end successfully, before the driver can kill either, so that the driver gets
/// two successes of one partition (and must merge one). Neither checks its kill flag.
/// They meet through a Unix socket in a directory of the temporary directory named by
/// `nonce` (executors of a test run on one machine): the first attempt listens, holds
/// for [`RACE_HOLD`] and until a copy has connected, then writes "go" and returns; the
/// copy connects and blocks in a read until "go", then returns at once.
///
/// The copy blocks rather than spins: on a loaded host a thread that spun is scheduled
/// behind the load, and the driver's kill (the first attempt's status, a turn of the
/// driver, the kill, a turn of the copy's executor) then reaches it before it returns
/// and it ends KILLED. A thread woken from a read is scheduled at once, ahead of that
/// chain of wake-ups. Each wait is bounded by [`RACE_WAIT`]; a copy that waited in vain
/// returns all the same.
fn race(ctx: &TaskContext, nonce: u64) -> std::io::Result<()> {
    use std::io::{ErrorKind, Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};

    let dir = accumulate_race_dir(nonce);
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join(format!("{}.sock", ctx.partition_id()));
    let started = Instant::now();
    if ctx.attempt_number() == 0 {
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        listener.set_nonblocking(true)?;
        let mut copy = None;
        while started.elapsed() < RACE_WAIT {
            if copy.is_none() {
                match listener.accept() {
                    Ok((stream, _)) => copy = Some(stream),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if copy.is_some() && started.elapsed() >= RACE_HOLD {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(mut copy) = copy {
            copy.write_all(b"g")?;
        }
    } else {
        let stream = loop {
            match UnixStream::connect(&socket) {
                Ok(stream) => break Some(stream),
                Err(_) if started.elapsed() >= RACE_WAIT => break None,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        if let Some(mut stream) = stream {
            stream.set_read_timeout(Some(RACE_WAIT.saturating_sub(started.elapsed())))?;
            let mut go = [0u8; 1];
            let _ = stream.read_exact(&mut go);
        }
    }
    Ok(())
}

fn large_result(_ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    let size = large_result_size(input).ok_or_else(|| {
        TaskError::failed(format!(
            "large-result expects a size in bytes, optionally with a k, m or g suffix \
             (e.g. \"10m\"), of at most 2g; got {:?}",
            String::from_utf8_lossy(input)
        ))
    })?;
    // At most 2 GiB: fits in usize on the 64-bit targets flint runs on; checked anyway.
    let size = usize::try_from(size).map_err(|_| {
        TaskError::failed(format!("large-result: {size} bytes do not fit in memory"))
    })?;
    Ok(Bytes::from(pattern(size)))
}

/// `size` bytes of `large-result`'s pattern: byte i is `i % 251`.
pub fn pattern(size: usize) -> Vec<u8> {
    let period: Vec<u8> = (0..PATTERN_PERIOD).map(|i| i as u8).collect();
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        let take = (size - out.len()).min(PATTERN_PERIOD);
        out.extend_from_slice(&period[..take]);
    }
    out
}

fn parse_number(function: &str, input: &[u8], expected: &str) -> Result<u64, TaskError> {
    std::str::from_utf8(input)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .ok_or_else(|| {
            TaskError::failed(format!(
                "{function} expects {expected}; got {:?}",
                String::from_utf8_lossy(input)
            ))
        })
}

/// The size the built-in `large-result` takes: digits, then optionally `k`, `m` or `g`
/// (binary units), optionally followed by `b`; at most [`MAX_LARGE_RESULT`]. Public so
/// that a command line checks an input exactly as an executor will read it.
pub fn large_result_size(input: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(input).ok()?.trim().to_ascii_lowercase();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let shift = match suffix {
        "" | "b" => 0,
        "k" | "kb" => 10,
        "m" | "mb" => 20,
        "g" | "gb" => 30,
        _ => return None,
    };
    let size = number.checked_mul(1 << shift)?;
    (size <= MAX_LARGE_RESULT).then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskContext;

    fn run(name: &str, ctx: &TaskContext, input: &'static [u8]) -> Result<Bytes, TaskError> {
        let registry = TaskRegistry::with_builtins();
        let function = registry.get(name).expect("a built-in");
        function(ctx, &Bytes::from_static(input))
    }

    fn failure(result: Result<Bytes, TaskError>) -> String {
        match result {
            Err(TaskError::Failed(message)) => message,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn accumulate_adds_one_before_it_fails() {
        let ctx = TaskContext::new(1, 1);
        let message = failure(run("accumulate", &ctx, b"4,fail-below=2"));
        assert!(message.contains("attempt 1 fails on purpose"), "{message}");
        let updates = ctx.accumulator_updates();
        assert_eq!(updates.len(), 1);
        assert_eq!(
            (updates[0].id, &updates[0].value),
            (4, &flint_wire::AccumulatorValue::Long(1))
        );
        let ctx = TaskContext::new(2, 2);
        assert_eq!(run("accumulate", &ctx, b"4,fail-below=2").unwrap(), "");
        assert_eq!(ctx.accumulator_updates().len(), 1);
        let message = failure(run("accumulate", &TaskContext::new(3, 0), b"4,what=1"));
        assert!(message.starts_with("accumulate expects"), "{message}");
        // A first attempt asked to stop ends its sleep.
        let ctx = TaskContext::new(4, 0);
        ctx.request_kill("enough");
        assert_eq!(
            run("accumulate", &ctx, b"4,sleep-first=60000"),
            Err(TaskError::killed("enough"))
        );
    }

    /// A held attempt ends when its release file appears, and a kill ends it sooner.
    #[test]
    fn accumulate_s_hold_waits_for_its_release_or_a_kill() {
        let nonce = u64::from(std::process::id()) << 20 | 9;
        let input: &'static str = Box::leak(format!("4,hold={nonce}").into_boxed_str());
        let release = accumulate_release_file(nonce);
        let _ = std::fs::remove_file(&release);
        let killed = TaskContext::new(1, 0);
        killed.request_kill("enough");
        assert_eq!(
            run("accumulate", &killed, input.as_bytes()),
            Err(TaskError::killed("enough"))
        );
        let held = std::thread::spawn(move || {
            let ctx = TaskContext::new(2, 1);
            (run("accumulate", &ctx, input.as_bytes()), Instant::now())
        });
        std::thread::sleep(Duration::from_millis(100));
        let released_at = Instant::now();
        std::fs::write(&release, b"").unwrap();
        let (result, ended_at) = held.join().unwrap();
        let _ = std::fs::remove_file(&release);
        assert_eq!(result.unwrap(), "");
        assert!(ended_at >= released_at, "it waited for its release");
        assert!(ended_at.duration_since(released_at) < RACE_WAIT / 2);
    }

    /// A racing first attempt and its copy both end successfully, together, whatever
    /// kills they were asked: the copy no sooner than the first (it waits for "go").
    #[test]
    fn accumulate_s_race_ends_a_first_attempt_and_its_copy_together_ignoring_kills() {
        let nonce = u64::from(std::process::id()) << 20 | 7;
        // `run` takes a static input.
        let input: &'static str = Box::leak(format!("4,race={nonce}").into_boxed_str());
        let started = Instant::now();
        let copy = {
            std::thread::spawn(move || {
                let ctx = TaskContext::new(2, 1);
                ctx.request_kill("another attempt succeeded");
                let result = run("accumulate", &ctx, input.as_bytes());
                (result, Instant::now())
            })
        };
        let ctx = TaskContext::new(1, 0);
        ctx.request_kill("enough");
        let first = run("accumulate", &ctx, input.as_bytes());
        let first_at = Instant::now();
        let (copied, copy_at) = copy.join().unwrap();
        assert_eq!(first.unwrap(), "");
        assert_eq!(copied.unwrap(), "");
        assert!(first_at.duration_since(started) >= RACE_HOLD);
        assert!(
            copy_at.duration_since(started) < RACE_WAIT / 2,
            "the copy met the first"
        );
        assert_eq!(ctx.accumulator_updates().len(), 1);
        let _ = std::fs::remove_dir_all(accumulate_race_dir(nonce));
    }

    #[test]
    fn builtins_are_registered() {
        let registry = TaskRegistry::with_builtins();
        assert_eq!(
            registry.names(),
            [
                "accumulate",
                "broadcast-read",
                "echo",
                "exit-process",
                "fail-n-attempts",
                "large-result",
                "noop",
                "shuffle-count",
                "shuffle-write",
                "sleep",
                "spin",
                "wordcount-map",
                "wordcount-reduce"
            ]
        );
        assert!(TaskRegistry::new().is_empty());
        assert!(registry.get("nope").is_none());
    }

    #[test]
    fn noop_returns_nothing() {
        let result = run("noop", &TaskContext::new(1, 0), b"whatever").unwrap();
        assert!(result.is_empty());
    }

    #[test]
    fn echo_returns_its_input_without_copying() {
        let registry = TaskRegistry::with_builtins();
        let input = Bytes::from(vec![7u8; 1000]);
        let output = registry.get("echo").unwrap()(&TaskContext::new(1, 0), &input).unwrap();
        assert_eq!(output, input);
        assert_eq!(
            output.as_ptr(),
            input.as_ptr(),
            "the same bytes, not a copy"
        );
    }

    #[test]
    fn sleep_sleeps_and_stops_when_killed() {
        let started = Instant::now();
        run("sleep", &TaskContext::new(1, 0), b"30").unwrap();
        assert!(started.elapsed() >= Duration::from_millis(30));

        let ctx = TaskContext::new(2, 0);
        let started = Instant::now();
        let result = std::thread::scope(|scope| {
            let task = scope.spawn(|| run("sleep", &ctx, b"10000"));
            std::thread::sleep(Duration::from_millis(20));
            ctx.request_kill("enough");
            task.join().unwrap()
        });
        assert_eq!(result, Err(TaskError::killed("enough")));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn spin_spins_and_stops_when_killed() {
        let started = Instant::now();
        run("spin", &TaskContext::new(1, 0), b"20").unwrap();
        assert!(started.elapsed() >= Duration::from_millis(20));

        let ctx = TaskContext::new(2, 0);
        ctx.request_kill("now");
        assert_eq!(run("spin", &ctx, b"100000"), Err(TaskError::killed("now")));
    }

    #[test]
    fn fail_n_attempts_fails_the_first_attempts() {
        for attempt in 0..3 {
            let message = failure(run("fail-n-attempts", &TaskContext::new(1, attempt), b"3"));
            assert!(message.contains(&format!("attempt {attempt}")), "{message}");
        }
        assert!(run("fail-n-attempts", &TaskContext::new(1, 3), b"3")
            .unwrap()
            .is_empty());
        assert!(run("fail-n-attempts", &TaskContext::new(1, 0), b"0").is_ok());
    }

    #[test]
    fn large_result_follows_the_pattern() {
        let ctx = TaskContext::new(1, 0);
        let result = run("large-result", &ctx, b"1000").unwrap();
        assert_eq!(result.len(), 1000);
        assert!(result
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8));
        assert_eq!(run("large-result", &ctx, b"2k").unwrap().len(), 2048);
        assert_eq!(run("large-result", &ctx, b" 1M ").unwrap().len(), 1 << 20);
        assert!(run("large-result", &ctx, b"0").unwrap().is_empty());
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(large_result_size(b"10"), Some(10));
        assert_eq!(large_result_size(b"10b"), Some(10));
        assert_eq!(large_result_size(b"3k"), Some(3 << 10));
        assert_eq!(large_result_size(b"10m"), Some(10 << 20));
        assert_eq!(large_result_size(b"10MB"), Some(10 << 20));
        assert_eq!(large_result_size(b"2g"), Some(2 << 30));
        for bad in [
            &b""[..],
            b"m",
            b"-1",
            b"1.5m",
            b"3t",
            b"3g",
            b"99999999999999999999",
        ] {
            assert_eq!(
                large_result_size(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn bad_inputs_say_what_was_expected() {
        let ctx = TaskContext::new(1, 0);
        for (name, input, expected) in [
            ("sleep", &b"soon"[..], "milliseconds"),
            ("spin", b"", "milliseconds"),
            ("fail-n-attempts", b"two", "number of attempts"),
            ("large-result", b"lots", "size in bytes"),
            ("large-result", b"\xff", "size in bytes"),
            ("exit-process", b"now", "exit code"),
            ("exit-process", b"256", "between 1 and 255"),
            ("exit-process", b"0", "between 1 and 255"),
        ] {
            let registry = TaskRegistry::with_builtins();
            let result = registry.get(name).unwrap()(&ctx, &Bytes::copy_from_slice(input));
            let message = failure(result);
            assert!(message.starts_with(name), "{message}");
            assert!(message.contains(expected), "{message}");
        }
    }

    #[test]
    fn registering_checks_the_name_and_replaces() {
        let mut registry = TaskRegistry::new();
        registry
            .register("f", |_: &TaskContext, _: &Bytes| {
                Ok(Bytes::from_static(b"1"))
            })
            .unwrap()
            .register("f", |_: &TaskContext, _: &Bytes| {
                Ok(Bytes::from_static(b"2"))
            })
            .unwrap();
        assert_eq!(registry.len(), 1);
        let f = registry.get("f").unwrap();
        assert_eq!(f(&TaskContext::new(0, 0), &Bytes::new()).unwrap(), "2");

        let error = registry
            .register("", |_: &TaskContext, _: &Bytes| Ok(Bytes::new()))
            .unwrap_err();
        assert_eq!(error.len, 0);
        let long = "x".repeat(256);
        let error = registry
            .register(long, |_: &TaskContext, _: &Bytes| Ok(Bytes::new()))
            .unwrap_err();
        assert!(error.to_string().contains("1 to 255 bytes"), "{error}");
        assert!(registry
            .register("x".repeat(255), |_: &TaskContext, _: &Bytes| Ok(
                Bytes::new()
            ))
            .is_ok());
    }
}
