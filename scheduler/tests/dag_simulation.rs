//! A randomized, deterministic simulation of jobs of stages and shuffles: the DAG
//! scheduler and the real task scheduler, wired as the driver's glue wires them, over
//! simulated executors that keep map outputs in their block stores, cache map statuses
//! by epoch, fetch what they read, fail, get lost and come back. A virtual clock jumps to
//! the next event or either scheduler's next timeout. Every seed replays identically.
//!
//! Each seed draws a universe of shuffles (a chain of 1 to 5, a diamond, a join of two
//! chains, or a random DAG where a stage reads up to two shuffles) and 1 to 3 jobs over
//! it, submitted at random times, some reading the same shuffles, some cancelled; the
//! executors' losses (of one executor or a whole host), injected fetch failures (the
//! block is gone), task failures, speculation, and FIFO or FAIR pools vary by seed.
//!
//! Checked on every step and at the end of every seed:
//! - a stage attempt is submitted only when every shuffle it reads has all its map
//!   outputs registered, and a map stage attempt computes exactly its missing
//!   partitions;
//! - the task scheduler never refuses a task set (a stage never has two active attempts);
//! - no stage gets another attempt after `stage.maxConsecutiveAttempts` consecutive
//!   attempts failed on fetch failures, and when a running stage reaches that count its
//!   jobs fail with Spark's text;
//! - every job ends exactly once; a successful one has every result partition once, in
//!   partition order, each computed from every map output of the shuffles it read; a
//!   failed one failed for a reason the simulation caused (the maximum of consecutive
//!   attempts, task.maxFailures counted failures it injected, or its cancellation);
//! - in the end, no task set, stage or job is left.
//!
//! `FLINT_DAG_SIM_SEEDS=N` sets the number of seeds (default 2,000 in debug builds, 20,000
//! in release), after which the seeds that once failed ([`FAILED_ONCE`]) run too;
//! `FLINT_DAG_SIM_SEED=S` runs only seed S, and `FLINT_DAG_SIM_TRACE=1` prints its every
//! action.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_scheduler::dag::{
    DagAction, DagConfig, DagScheduler, JobSpec, StageKind, StageSpec, StageTaskSet, TaskCompletion,
};
use flint_scheduler::{
    Action, SchedulerConfig, SchedulerEvent, SchedulingMode, SpeculationConfig, SplitMix64,
    TaskEndReason, TaskResult, TaskScheduler, TaskSetId, WorkerOffer,
};
use flint_wire::{
    BlockManagerId, ExecutorLossReason, FetchFailure, MapStatus, MapStatusCache, ShuffleRead,
    ShuffleWrite, TaskDescription, TaskFailureKind, TaskOutcome, TaskPayload, TaskState,
};

const HOSTS: u64 = 3;
const MAX_VIRTUAL_TIME_MS: u64 = 4 * 60 * 60 * 1000;
const MAX_CONSECUTIVE_ATTEMPTS: u32 = 4;
const MAX_TEXT: &str =
    "has failed the maximum allowable number of times: 4. Most recent failure reason:\n";

// ---- the universe of shuffles and jobs ------------------------------------------------

#[derive(Debug, Clone)]
struct ShuffleDef {
    maps: u32,
    /// The number of partitions of the stages that read it, once one does.
    reduces: Option<u32>,
    reads: Vec<u32>,
}

#[derive(Debug, Clone)]
struct JobDef {
    partitions: u32,
    reads: Vec<u32>,
    submit_at_ms: u64,
    cancel_at_ms: Option<u64>,
}

#[derive(Debug, Default)]
struct Universe {
    shuffles: Vec<ShuffleDef>,
}

impl Universe {
    /// A stage reading `reads`: its partitions are the reduce partitions of the shuffles
    /// it reads (a read that would disagree is dropped), else drawn.
    fn stage(&mut self, rng: &mut SplitMix64, reads: Vec<u32>) -> (u32, Vec<u32>) {
        let partitions = reads
            .iter()
            .find_map(|&s| self.shuffles[s as usize].reduces)
            .unwrap_or_else(|| 1 + rng.below(5) as u32);
        let mut kept = Vec::new();
        for s in reads {
            let shuffle = &mut self.shuffles[s as usize];
            if shuffle.reduces.is_none_or(|r| r == partitions) && !kept.contains(&s) {
                shuffle.reduces = Some(partitions);
                kept.push(s);
            }
        }
        (partitions, kept)
    }

    fn add_shuffle(&mut self, rng: &mut SplitMix64, reads: Vec<u32>) -> u32 {
        let (maps, reads) = self.stage(rng, reads);
        self.shuffles.push(ShuffleDef {
            maps,
            reduces: None,
            reads,
        });
        self.shuffles.len() as u32 - 1
    }

    fn chain(&mut self, rng: &mut SplitMix64, length: u32) -> u32 {
        let mut last = None;
        for _ in 0..length {
            last = Some(self.add_shuffle(rng, last.into_iter().collect()));
        }
        last.expect("a chain of at least one")
    }

    fn reduces(&self, shuffle_id: u32) -> u32 {
        self.shuffles[shuffle_id as usize].reduces.unwrap_or(1)
    }

    fn job_spec(&self, index: usize, job: &JobDef) -> JobSpec {
        let name = format!("job{index}");
        let result = StageSpec::new(name.as_str(), job.partitions, payload(&name))
            .reading(job.reads.iter().copied());
        let mut spec = JobSpec::new(format!("collect at job{index}.rs:1"), result);
        let mut todo = job.reads.clone();
        let mut seen = BTreeSet::new();
        while let Some(s) = todo.pop() {
            if !seen.insert(s) {
                continue;
            }
            let def = &self.shuffles[s as usize];
            let name = format!("s{s}");
            let stage = StageSpec::new(name.as_str(), def.maps, payload(&name))
                .reading(def.reads.iter().copied());
            spec = spec.with_shuffle(s, self.reduces(s), stage);
            todo.extend(def.reads.iter().copied());
        }
        spec
    }

    /// What partition `partition` of a stage reading `reads` computes: its name, and
    /// how many map outputs of each shuffle it read.
    fn expected_result(&self, name: &str, partition: u32, reads: &[u32]) -> Bytes {
        let digest: Vec<String> = reads
            .iter()
            .map(|&s| format!("{s}x{}", self.shuffles[s as usize].maps))
            .collect();
        Bytes::from(format!("{name}:p{partition}:{}", digest.join(",")))
    }
}

/// The universe and jobs of a seed, and the shape's name.
fn generate(rng: &mut SplitMix64) -> (Universe, Vec<JobDef>, &'static str) {
    let mut u = Universe::default();
    let (shape, first_reads) = match rng.below(4) {
        0 => {
            let length = 1 + rng.below(5) as u32;
            ("chain", vec![u.chain(rng, length)])
        }
        1 => {
            let top = u.add_shuffle(rng, vec![]);
            let left = u.add_shuffle(rng, vec![top]);
            let right = u.add_shuffle(rng, vec![top]);
            if rng.below(2) == 0 {
                ("diamond", vec![left, right])
            } else {
                ("diamond", vec![u.add_shuffle(rng, vec![left, right])])
            }
        }
        2 => {
            let a = 1 + rng.below(2) as u32;
            let b = 1 + rng.below(2) as u32;
            let left = u.chain(rng, a);
            let right = u.chain(rng, b);
            ("join", vec![left, right])
        }
        _ => {
            let n = 1 + rng.below(6) as u32;
            for i in 0..n {
                let mut reads = Vec::new();
                if i > 0 {
                    for _ in 0..rng.below(3) {
                        reads.push(rng.below(u64::from(i)) as u32);
                    }
                }
                u.add_shuffle(rng, reads);
            }
            let mut reads = vec![n - 1];
            if n > 1 && rng.below(2) == 0 {
                reads.push(rng.below(u64::from(n - 1)) as u32);
            }
            ("random", reads)
        }
    };
    let mut jobs = Vec::new();
    let mut add_job = |u: &mut Universe, rng: &mut SplitMix64, reads: Vec<u32>, at: u64| {
        let (partitions, reads) = u.stage(rng, reads);
        let cancel_at_ms = (rng.below(10) == 0).then(|| at + rng.below(3000));
        jobs.push(JobDef {
            partitions,
            reads,
            submit_at_ms: at,
            cancel_at_ms,
        });
    };
    add_job(&mut u, rng, first_reads, 0);
    for _ in 0..rng.below(3) {
        let n = u.shuffles.len() as u64;
        let reads: Vec<u32> = match rng.below(6) {
            0 => Vec::new(),
            1 => vec![rng.below(n) as u32, rng.below(n) as u32],
            _ => vec![rng.below(n) as u32],
        };
        let at = rng.below(3000);
        add_job(&mut u, rng, reads, at);
    }
    (u, jobs, shape)
}

// ---- the cluster ----------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    SubmitJob { index: usize },
    CancelJob { index: usize },
    TaskDone { executor: String, task_id: u64 },
    KillLands { executor: String, task_id: u64 },
    ExecutorJoins,
    ExecutorLeaves,
    ReviveTick,
}

/// A stage's payload: a plain serialized task of the simulation's one function, whose
/// input is the stage's name.
fn payload(name: &str) -> Bytes {
    TaskPayload::encode("sim", name.as_bytes()).unwrap()
}

/// The glue's encoding of a stage attempt: the stage's task, as a stage task with the
/// attempt's epoch and shuffles.
fn encode_task(set: &StageTaskSet) -> Bytes {
    let task = TaskPayload::parse(&set.payload).unwrap();
    TaskPayload::encode_stage(
        task.function,
        task.input,
        set.epoch,
        set.writes,
        &set.reads,
        &[],
    )
    .unwrap()
}

/// What a task runs, as an executor reads it from its serialized form.
#[derive(Debug, Clone)]
struct TaskInfo {
    writes: Option<ShuffleWrite>,
    reads: Vec<ShuffleRead>,
    epoch: u64,
    name: String,
}

fn decode_task(bytes: &[u8]) -> TaskInfo {
    let task = TaskPayload::parse(bytes).unwrap();
    let stage = task.stage.expect("a stage task");
    TaskInfo {
        writes: stage.writes,
        reads: stage.reads().collect(),
        epoch: stage.epoch,
        name: String::from_utf8(task.input.to_vec()).unwrap(),
    }
}

#[derive(Debug)]
struct RunningTask {
    task_set: TaskSetId,
    index: u32,
    partition: u32,
    info: TaskInfo,
    /// The statuses of each shuffle read, as the executor knew them at launch.
    inputs: Vec<(ShuffleRead, Vec<Option<MapStatus>>)>,
}

#[derive(Debug)]
struct Executor {
    host: String,
    cores: u32,
    free: u32,
    running: BTreeMap<u64, RunningTask>,
    /// Map outputs in its block store: (shuffle, map partition).
    blocks: BTreeSet<(u32, u32)>,
    statuses: MapStatusCache<Vec<Option<MapStatus>>>,
}

enum Ending {
    Fetch(FetchFailure),
    Failure,
    MapOutput(MapStatus),
    Result(Bytes),
}

#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    seeds: u64,
    jobs: u64,
    succeeded: u64,
    failed_max_attempts: u64,
    failed_task_failures: u64,
    cancelled: u64,
    launches: u64,
    fetch_failures: u64,
    metadata_fetch_failures: u64,
    executor_losses: u64,
    host_losses: u64,
    stage_attempts: u64,
    stage_retries: u64,
    partition_completions: u64,
    shared_shuffle_jobs: u64,
}

struct Sim {
    rng: SplitMix64,
    base: Instant,
    now_ms: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Event)>>,
    tasks: TaskScheduler,
    dag: DagScheduler,
    universe: Universe,
    jobs: Vec<JobDef>,
    /// DAG job id to the index of its definition.
    job_index: BTreeMap<u32, usize>,
    job_ids: BTreeMap<usize, u32>,
    job_ends: BTreeMap<u32, Result<Vec<Bytes>, String>>,
    cancelled: BTreeSet<u32>,
    executors: BTreeMap<String, Executor>,
    /// Executors lost with their whole host, until the task scheduler reports them.
    host_lost: BTreeMap<String, String>,
    next_executor: u64,
    joins_left: u32,
    max_failures: u32,
    /// FAIR scheduling, each job in one of two pools.
    fair: bool,
    fetch_probability: f64,
    fail_probability: f64,
    // The simulation's own account, to check the schedulers against.
    submitted: BTreeMap<TaskSetId, StageTaskSet>,
    latest_attempt: BTreeMap<u32, u32>,
    /// Attempts of a stage that failed on a fetch failure since it last succeeded.
    consecutive_failures: BTreeMap<u32, BTreeSet<u32>>,
    /// Stages that reached the maximum while running: their jobs must fail now.
    must_abort: Option<u32>,
    /// Counted failures the simulation caused, by task set and task index.
    counted_failures: BTreeMap<(TaskSetId, u32), u32>,
    trace: u64,
    /// `FLINT_DAG_SIM_TRACE` is set: every action is printed.
    print_actions: bool,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = SplitMix64::new(seed);
        let (universe, jobs, _shape) = generate(&mut rng);
        let max_failures = 2 + rng.below(3) as u32;
        let speculation = rng.below(3) == 0;
        let fair = rng.below(3) == 0;
        let config = SchedulerConfig {
            mode: if fair {
                SchedulingMode::Fair
            } else {
                SchedulingMode::Fifo
            },
            max_task_failures: max_failures,
            locality_wait: Duration::ZERO,
            speculation: speculation.then(|| SpeculationConfig {
                interval: Duration::from_millis(100),
                multiplier: 1.5,
                quantile: 0.5,
                min_runtime: Duration::from_millis(50),
            }),
            seed,
            ..SchedulerConfig::default()
        };
        let fetch_probability = [0.0, 0.02, 0.1, 0.3, 0.5][rng.below(5) as usize];
        let fail_probability = [0.0, 0.0, 0.03, 0.15][rng.below(4) as usize];
        let mut tasks = TaskScheduler::new(config);
        tasks.set_task_start_events(false);
        let mut sim = Sim {
            base: Instant::now(),
            now_ms: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            tasks,
            dag: DagScheduler::new(DagConfig::default()),
            universe,
            job_index: BTreeMap::new(),
            job_ids: BTreeMap::new(),
            job_ends: BTreeMap::new(),
            cancelled: BTreeSet::new(),
            executors: BTreeMap::new(),
            host_lost: BTreeMap::new(),
            next_executor: 0,
            joins_left: 1 + rng.below(6) as u32,
            max_failures,
            fair,
            fetch_probability,
            fail_probability,
            submitted: BTreeMap::new(),
            latest_attempt: BTreeMap::new(),
            consecutive_failures: BTreeMap::new(),
            must_abort: None,
            counted_failures: BTreeMap::new(),
            trace: seed,
            print_actions: std::env::var_os("FLINT_DAG_SIM_TRACE").is_some(),
            stats: Stats {
                seeds: 1,
                jobs: jobs.len() as u64,
                ..Stats::default()
            },
            jobs,
            rng,
        };
        for _ in 0..1 + sim.rng.below(3) {
            sim.join();
        }
        for index in 0..sim.jobs.len() {
            let job = &sim.jobs[index];
            let (at, cancel) = (job.submit_at_ms, job.cancel_at_ms);
            sim.schedule(at, Event::SubmitJob { index });
            if let Some(cancel) = cancel {
                sim.schedule(cancel, Event::CancelJob { index });
            }
        }
        for _ in 0..sim.rng.below(5) {
            let at = 50 + sim.rng.below(4000);
            sim.schedule(at, Event::ExecutorLeaves);
        }
        let first_join = 300 + sim.rng.below(2000);
        sim.schedule(first_join, Event::ExecutorJoins);
        sim.schedule(1000, Event::ReviveTick);
        sim
    }

    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.now_ms)
    }

    fn schedule(&mut self, after_ms: u64, event: Event) {
        self.seq += 1;
        self.queue
            .push(Reverse((self.now_ms + after_ms, self.seq, event)));
    }

    fn all_jobs_ended(&self) -> bool {
        self.job_ends.len() == self.jobs.len()
    }

    fn join(&mut self) {
        let id = format!("e{}", self.next_executor);
        self.next_executor += 1;
        let host = format!("h{}", self.rng.below(HOSTS));
        let cores = 1 + self.rng.below(4) as u32;
        self.tasks.executor_added(id.as_str(), host.as_str(), cores);
        self.dag.executor_added(&id, &host);
        self.executors.insert(
            id,
            Executor {
                host,
                cores,
                free: cores,
                running: BTreeMap::new(),
                blocks: BTreeSet::new(),
                statuses: MapStatusCache::new(),
            },
        );
    }

    fn run(&mut self) {
        loop {
            self.pump();
            self.check_registries();
            if self.all_jobs_ended() && self.executors.values().all(|e| e.running.is_empty()) {
                break;
            }
            let next_event = self.queue.peek().map(|Reverse((t, _, _))| *t);
            let ms = |at: Instant| (at - self.base).as_millis() as u64;
            let next_timeout = [self.tasks.poll_timeout(), self.dag.poll_timeout()]
                .into_iter()
                .flatten()
                .map(ms)
                .min();
            let (time, from_timeout) = match (next_event, next_timeout) {
                (Some(e), Some(t)) if t < e => (t, true),
                (Some(e), _) => (e, false),
                (None, Some(t)) => (t, true),
                (None, None) => panic!(
                    "nothing left to happen, but jobs are unfinished: {:?}",
                    self.job_ends
                ),
            };
            assert!(
                time <= MAX_VIRTUAL_TIME_MS,
                "jobs did not finish in virtual time: {} of {} ended: {:?}; task sets {:?} \
                 (FLINT_DAG_SIM_TRACE=1 prints every action)",
                self.job_ends.len(),
                self.jobs.len(),
                self.job_ends,
                self.tasks
                    .task_sets()
                    .map(|m| (m.id(), m.is_zombie()))
                    .collect::<Vec<_>>(),
            );
            self.now_ms = self.now_ms.max(time);
            if from_timeout {
                let now = self.now();
                self.tasks.handle_timeout(now);
                self.dag.handle_timeout(now);
                continue;
            }
            let Reverse((_, _, event)) = self.queue.pop().unwrap();
            self.trace = self.trace.rotate_left(7) ^ self.now_ms ^ (self.seq << 20);
            self.handle(event);
        }
        assert_eq!(self.tasks.task_sets().count(), 0, "task sets left behind");
        assert_eq!(self.dag.active_jobs().count(), 0, "jobs left behind");
        assert_eq!(self.dag.num_stages(), 0, "stages left behind");
        assert_eq!(self.job_ends.len(), self.jobs.len());
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::SubmitJob { index } => {
                let mut spec = self.universe.job_spec(index, &self.jobs[index]);
                if self.fair {
                    spec = spec.in_pool(format!("p{}", index % 2));
                }
                let shares = spec.shuffles.iter().any(|s| {
                    self.dag.map_stage_of(s.shuffle_id).is_some()
                        || self.dag.map_output_tracker().contains_shuffle(s.shuffle_id)
                });
                if shares {
                    self.stats.shared_shuffle_jobs += 1;
                }
                let now = self.now();
                let job_id = self.dag.submit_job(now, spec).expect("the jobs add up");
                self.job_index.insert(job_id, index);
                self.job_ids.insert(index, job_id);
            }
            Event::CancelJob { index } => {
                let job_id = self.job_ids[&index];
                if !self.job_ends.contains_key(&job_id) {
                    self.cancelled.insert(job_id);
                    let now = self.now();
                    assert!(self.dag.cancel_job(now, job_id, Some("by the simulation")));
                }
            }
            Event::ReviveTick => {
                if !self.all_jobs_ended() {
                    self.schedule(1000, Event::ReviveTick);
                }
                self.offer_all();
            }
            Event::ExecutorJoins => {
                if self.joins_left > 0 || self.executors.is_empty() {
                    self.joins_left = self.joins_left.saturating_sub(1);
                    self.join();
                    self.offer_all();
                }
                if self.joins_left > 0 && !self.all_jobs_ended() {
                    let after = 300 + self.rng.below(3000);
                    self.schedule(after, Event::ExecutorJoins);
                }
            }
            Event::ExecutorLeaves => self.leave(),
            Event::TaskDone { executor, task_id } => self.task_done(&executor, task_id),
            Event::KillLands { executor, task_id } => {
                let Some(exec) = self.executors.get_mut(&executor) else {
                    return;
                };
                if exec.running.remove(&task_id).is_some() {
                    exec.free += 1;
                    let now = self.now();
                    self.tasks
                        .status_update(now, task_id, TaskState::Killed, TaskOutcome::None);
                    self.offer_one(&executor);
                }
            }
        }
    }

    /// One executor, or every executor of a host, goes away with its block store.
    fn leave(&mut self) {
        if self.executors.is_empty() {
            return;
        }
        let n = self.rng.below(self.executors.len() as u64) as usize;
        let chosen = self.executors.keys().nth(n).unwrap().clone();
        let whole_host = self.rng.below(4) == 0;
        let host = self.executors[&chosen].host.clone();
        let victims: Vec<String> = if whole_host {
            self.stats.host_losses += 1;
            self.executors
                .iter()
                .filter(|(_, e)| e.host == host)
                .map(|(id, _)| id.clone())
                .collect()
        } else {
            vec![chosen]
        };
        let counted = self.rng.below(2) == 0;
        let now = self.now();
        for id in victims {
            let exec = self.executors.remove(&id).unwrap();
            self.stats.executor_losses += 1;
            if counted {
                for task in exec.running.values() {
                    *self
                        .counted_failures
                        .entry((task.task_set, task.index))
                        .or_default() += 1;
                }
            }
            if whole_host {
                self.host_lost.insert(id.clone(), host.clone());
            }
            let reason = if counted {
                ExecutorLossReason::SlaveLost {
                    message: "Remote RPC client disassociated.".into(),
                    worker_lost: whole_host,
                }
            } else {
                ExecutorLossReason::ExecutorExited {
                    exit_code: 143,
                    exit_caused_by_app: false,
                    reason: "Container killed on request".into(),
                }
            };
            self.tasks.executor_lost(now, &id, reason);
            self.pump();
        }
        if self.executors.is_empty() {
            self.schedule(200, Event::ExecutorJoins);
        }
    }

    // ---- offers and tasks ------------------------------------------------------------

    fn offer_all(&mut self) {
        let offers: Vec<WorkerOffer> = self
            .executors
            .iter()
            .filter(|(_, e)| e.free > 0)
            .map(|(id, e)| WorkerOffer::new(id.as_str(), e.host.as_str(), e.free))
            .collect();
        self.offer(&offers);
    }

    fn offer_one(&mut self, executor: &str) {
        if let Some(e) = self.executors.get(executor) {
            if e.free > 0 {
                let offer = WorkerOffer::new(executor, e.host.as_str(), e.free);
                self.offer(&[offer]);
            }
        }
    }

    fn offer(&mut self, offers: &[WorkerOffer]) {
        if offers.is_empty() {
            return;
        }
        let now = self.now();
        let launched = self.tasks.resource_offers(now, offers);
        for (offer, tasks) in offers.iter().zip(launched) {
            for task in tasks {
                self.launch(&offer.executor_id, task);
            }
        }
    }

    fn launch(&mut self, executor: &str, task: TaskDescription) {
        let task_set = self
            .tasks
            .task_set_of(task.task_id)
            .expect("a launched task's set");
        let info = decode_task(&task.serialized_task);
        let exec = self
            .executors
            .get_mut(executor)
            .expect("offers come from live executors");
        assert!(exec.free >= 1, "executor {executor} over its cores");
        exec.free -= 1;
        // As an executor: a task of a newer epoch drops the cached statuses; a shuffle
        // not cached is asked of the driver.
        exec.statuses.update_epoch(info.epoch);
        let mut inputs = Vec::new();
        for &read in &info.reads {
            let shuffle_id = read.shuffle_id;
            let statuses = match exec.statuses.get(shuffle_id) {
                Some(cached) => cached.clone(),
                None => {
                    let tracker = self.dag.map_output_tracker();
                    let served = tracker
                        .statuses(shuffle_id)
                        .map(<[_]>::to_vec)
                        .unwrap_or_default();
                    // Served with the driver's epoch, as MapOutputStatuses carries it.
                    exec.statuses
                        .insert(tracker.epoch(), shuffle_id, served.clone());
                    served
                }
            };
            inputs.push((read, statuses));
        }
        exec.running.insert(
            task.task_id,
            RunningTask {
                task_set,
                index: task.index,
                partition: task.partition_id,
                info,
                inputs,
            },
        );
        self.stats.launches += 1;
        self.trace = self.trace.rotate_left(3) ^ task.task_id ^ (u64::from(task.index) << 32);
        let mut duration = 10 + self.rng.below(100);
        if self.rng.below(15) == 0 {
            duration *= 10; // a straggler: it may outlive its stage attempt
        }
        self.schedule(
            duration,
            Event::TaskDone {
                executor: executor.to_owned(),
                task_id: task.task_id,
            },
        );
    }

    /// How a task ends: it reads every map output of every shuffle it reads from the
    /// executor holding it, then writes its output or result.
    fn ending(&mut self, executor: &str, task: &RunningTask) -> Ending {
        let partition = task.partition;
        for (read, statuses) in &task.inputs {
            let shuffle_id = read.shuffle_id;
            assert_eq!(
                statuses.len() as u32,
                read.maps,
                "the driver serves a status slot for each map partition of shuffle {shuffle_id}"
            );
            assert_eq!(read.maps, self.universe.shuffles[shuffle_id as usize].maps);
            for (map_index, status) in statuses.iter().enumerate() {
                let map_index = map_index as u32;
                let Some(status) = status else {
                    return Ending::Fetch(FetchFailure {
                        address: None,
                        shuffle_id,
                        map_index: None,
                        reduce_id: partition,
                        message: format!(
                            "Missing an output location for shuffle {shuffle_id} partition {partition}"
                        ),
                    });
                };
                assert!(
                    status.sizes.len() > partition as usize,
                    "reduce {partition} of shuffle {shuffle_id}"
                );
                let holder = &*status.location.executor_id;
                let there = self
                    .executors
                    .get(holder)
                    .is_some_and(|e| e.blocks.contains(&(shuffle_id, map_index)));
                if !there {
                    return Ending::Fetch(FetchFailure {
                        address: Some(status.location.clone()),
                        shuffle_id,
                        map_index: Some(map_index),
                        reduce_id: partition,
                        message: format!(
                            "Failed to fetch shuffle_{shuffle_id}_{map_index}_{partition} from {holder}"
                        ),
                    });
                }
            }
        }
        let readable: Vec<(u32, u32, BlockManagerId)> = task
            .inputs
            .iter()
            .flat_map(|(s, statuses)| {
                statuses.iter().enumerate().map(move |(m, st)| {
                    (
                        s.shuffle_id,
                        m as u32,
                        st.as_ref().unwrap().location.clone(),
                    )
                })
            })
            .collect();
        if !readable.is_empty() && self.rng.unit() < self.fetch_probability {
            // The block is gone from its executor (a lost disk, say).
            let (shuffle_id, map_index, location) =
                readable[self.rng.below(readable.len() as u64) as usize].clone();
            if let Some(holder) = self.executors.get_mut(&*location.executor_id) {
                holder.blocks.remove(&(shuffle_id, map_index));
            }
            return Ending::Fetch(FetchFailure {
                address: Some(location),
                shuffle_id,
                map_index: Some(map_index),
                reduce_id: partition,
                message: format!("Block shuffle_{shuffle_id}_{map_index}_{partition} not found"),
            });
        }
        if self.rng.unit() < self.fail_probability {
            return Ending::Failure;
        }
        match task.info.writes {
            Some(writes) => {
                assert_eq!(writes.partitions, self.universe.reduces(writes.shuffle_id));
                let exec = &self.executors[executor];
                Ending::MapOutput(MapStatus {
                    location: BlockManagerId {
                        executor_id: executor.into(),
                        host: exec.host.clone(),
                        port: 0,
                    },
                    sizes: vec![1; writes.partitions as usize],
                })
            }
            None => {
                // What the task read decides its value: a task that missed a map
                // output would give another one.
                let digest: Vec<String> = task
                    .inputs
                    .iter()
                    .map(|(read, statuses)| format!("{}x{}", read.shuffle_id, statuses.len()))
                    .collect();
                Ending::Result(Bytes::from(format!(
                    "{}:p{partition}:{}",
                    task.info.name,
                    digest.join(",")
                )))
            }
        }
    }

    fn task_done(&mut self, executor: &str, task_id: u64) {
        let Some(exec) = self.executors.get_mut(executor) else {
            return; // lost with its executor
        };
        let Some(task) = exec.running.remove(&task_id) else {
            return; // killed first
        };
        exec.free += 1;
        let now = self.now();
        match self.ending(executor, &task) {
            Ending::Fetch(failure) => {
                if failure.address.is_none() {
                    self.stats.metadata_fetch_failures += 1;
                    // Spark's executor: the cached statuses were stale.
                    self.executors.get_mut(executor).unwrap().statuses.clear();
                }
                self.stats.fetch_failures += 1;
                let outcome = TaskOutcome::FetchFailed {
                    failure: Box::new(failure),
                    metrics: Default::default(),
                };
                self.tasks
                    .status_update(now, task_id, TaskState::Failed, outcome);
            }
            Ending::Failure => {
                *self
                    .counted_failures
                    .entry((task.task_set, task.index))
                    .or_default() += 1;
                let outcome = TaskOutcome::Failure {
                    kind: TaskFailureKind::Exception,
                    message: format!("injected failure of partition {}", task.partition),
                    counts_towards_failures: true,
                    metrics: Default::default(),
                };
                self.tasks
                    .status_update(now, task_id, TaskState::Failed, outcome);
            }
            Ending::MapOutput(status) => {
                let shuffle_id = task.info.writes.unwrap().shuffle_id;
                self.executors
                    .get_mut(executor)
                    .unwrap()
                    .blocks
                    .insert((shuffle_id, task.partition));
                let outcome = TaskOutcome::Direct {
                    value: status.encode(),
                    metrics: Default::default(),
                    accumulators: Vec::new(),
                };
                self.tasks
                    .status_update(now, task_id, TaskState::Finished, outcome);
            }
            Ending::Result(value) => {
                let outcome = TaskOutcome::Direct {
                    value,
                    metrics: Default::default(),
                    accumulators: Vec::new(),
                };
                self.tasks
                    .status_update(now, task_id, TaskState::Finished, outcome);
            }
        }
        self.pump();
        self.offer_one(executor);
    }

    // ---- the glue ----------------------------------------------------------------------

    /// Carries out both schedulers' actions until neither has any left.
    /// With `FLINT_DAG_SIM_TRACE` set, prints each action at its virtual time.
    fn trace_action(&self, from: &str, action: &impl std::fmt::Debug) {
        if self.print_actions {
            let text: String = format!("{action:?}").chars().take(400).collect();
            eprintln!("{} ms {from}: {text}", self.now_ms);
        }
    }

    fn pump(&mut self) {
        loop {
            let mut any = false;
            while let Some(action) = self.tasks.poll_action() {
                any = true;
                self.trace_action("task scheduler", &action);
                self.on_task_scheduler_action(action);
            }
            while let Some(action) = self.dag.poll_action() {
                any = true;
                self.trace_action("DAG", &action);
                self.on_dag_action(action);
            }
            if !any {
                break;
            }
        }
        assert!(self.must_abort.is_none(), "stage {:?} reached the maximum of consecutive failed attempts, but its jobs did not fail", self.must_abort);
    }

    fn on_task_scheduler_action(&mut self, action: Action) {
        let now = self.now();
        match action {
            Action::ReviveOffers => self.offer_all(),
            Action::KillTask {
                task_id,
                executor_id,
                ..
            } => {
                let delay = 1 + self.rng.below(5);
                self.schedule(
                    delay,
                    Event::KillLands {
                        executor: executor_id.to_string(),
                        task_id,
                    },
                );
            }
            Action::Event(SchedulerEvent::TaskEnd {
                task_set,
                index,
                reason,
                ..
            }) => {
                let completion = match reason {
                    TaskEndReason::Success(TaskResult::Direct { value, .. }) => {
                        match self.dag.stage_kind(task_set.stage_id) {
                            Some(StageKind::ShuffleMap { .. }) => TaskCompletion::MapOutput(
                                MapStatus::decode(&value).expect("a map task's status"),
                            ),
                            Some(StageKind::Result) => TaskCompletion::Result(value),
                            None => return,
                        }
                    }
                    TaskEndReason::Success(TaskResult::Indirect { .. }) => {
                        panic!("the simulation sends direct results only")
                    }
                    TaskEndReason::AlreadySucceeded => return,
                    TaskEndReason::Failed { .. } => TaskCompletion::Failed,
                    TaskEndReason::FetchFailed(failure) => {
                        self.note_fetch_failure(task_set);
                        TaskCompletion::FetchFailed(failure)
                    }
                };
                self.dag.task_ended(now, task_set, index, completion);
            }
            Action::Event(SchedulerEvent::StageCompleted {
                task_set,
                failure: Some(reason),
                ..
            }) => self.dag.task_set_failed(now, task_set, &reason),
            Action::Event(SchedulerEvent::ExecutorRemoved { executor_id, .. }) => {
                let host = self.host_lost.remove(&*executor_id);
                self.dag.executor_lost(&executor_id, host.as_deref());
            }
            Action::Event(_) => {}
        }
    }

    /// The model's count of consecutive fetch-failed attempts, kept by Spark's rule:
    /// a fetch failure of the stage's latest attempt counts that attempt once.
    fn note_fetch_failure(&mut self, task_set: TaskSetId) {
        let stage_id = task_set.stage_id;
        if self.dag.stage_kind(stage_id).is_none()
            || self.latest_attempt.get(&stage_id) != Some(&task_set.stage_attempt_id)
        {
            return;
        }
        let was_running =
            self.dag.stage_state(stage_id) == Some(flint_scheduler::dag::StageState::Running);
        let failed = self.consecutive_failures.entry(stage_id).or_default();
        failed.insert(task_set.stage_attempt_id);
        if failed.len() as u32 >= MAX_CONSECUTIVE_ATTEMPTS && was_running {
            self.must_abort = Some(stage_id);
        }
    }

    fn on_dag_action(&mut self, action: DagAction) {
        let now = self.now();
        match action {
            DagAction::SubmitTaskSet(set) => {
                self.check_submission(&set);
                let task_set = set.to_task_set(encode_task);
                self.submitted.insert(set.id, set);
                self.tasks
                    .submit_tasks(now, task_set)
                    .expect("a stage never has two active attempts");
            }
            DagAction::PartitionCompleted {
                stage_id,
                partition_id,
            } => {
                self.stats.partition_completions += 1;
                self.tasks
                    .notify_partition_completion(stage_id, partition_id);
            }
            DagAction::CancelStage { stage_id, .. } => self.tasks.cancel_tasks(stage_id, false),
            DagAction::JobEnded { job_id, result } => self.check_job_end(job_id, result),
            DagAction::Event(SchedulerEvent::StageSubmitted { task_set, .. }) => {
                // Every attempt, a task set or not (one with nothing left to compute).
                let previous = self
                    .latest_attempt
                    .insert(task_set.stage_id, task_set.stage_attempt_id);
                assert_eq!(
                    task_set.stage_attempt_id,
                    previous.map_or(0, |a| a + 1),
                    "attempts follow each other"
                );
            }
            DagAction::Event(SchedulerEvent::StageCompleted {
                task_set,
                failure: None,
                ..
            }) => {
                self.consecutive_failures.remove(&task_set.stage_id);
            }
            DagAction::Event(_) => {}
        }
    }

    // ---- checks ------------------------------------------------------------------------

    fn check_submission(&mut self, set: &StageTaskSet) {
        let stage_id = set.id.stage_id;
        let tracker = self.dag.map_output_tracker();
        for read in &set.reads {
            let shuffle_id = read.shuffle_id;
            assert!(
                tracker.is_available(shuffle_id),
                "{:?} of stage {stage_id} submitted before shuffle {shuffle_id} is complete (missing {:?})",
                set.id,
                tracker.missing_partitions(shuffle_id)
            );
        }
        if let StageKind::ShuffleMap { shuffle_id } = set.kind {
            assert_eq!(
                set.partitions,
                tracker.missing_partitions(shuffle_id),
                "a map stage attempt computes exactly what is missing"
            );
        }
        assert!(!set.partitions.is_empty());
        assert_eq!(
            self.latest_attempt.get(&stage_id),
            Some(&set.id.stage_attempt_id),
            "a task set is the attempt just announced"
        );
        let failed = self
            .consecutive_failures
            .get(&stage_id)
            .map_or(0, BTreeSet::len);
        assert!(
            (failed as u32) < MAX_CONSECUTIVE_ATTEMPTS,
            "stage {stage_id} resubmitted after {failed} consecutive failed attempts"
        );
        self.stats.stage_attempts += 1;
        if set.id.stage_attempt_id > 0 {
            self.stats.stage_retries += 1;
        }
    }

    fn check_job_end(&mut self, job_id: u32, result: Result<Vec<Bytes>, String>) {
        let index = self.job_index[&job_id];
        let job = self.jobs[index].clone();
        match &result {
            Ok(results) => {
                self.stats.succeeded += 1;
                assert!(
                    !self.cancelled.contains(&job_id),
                    "job {job_id} was cancelled"
                );
                assert_eq!(results.len() as u32, job.partitions, "job {job_id}");
                for (partition, value) in results.iter().enumerate() {
                    let expected = self.universe.expected_result(
                        &format!("job{index}"),
                        partition as u32,
                        &job.reads,
                    );
                    assert_eq!(value, &expected, "job {job_id} partition {partition}");
                }
            }
            Err(text) => self.check_failure_is_justified(job_id, text),
        }
        let previous = self.job_ends.insert(job_id, result);
        assert!(previous.is_none(), "job {job_id} ended twice");
    }

    fn check_failure_is_justified(&mut self, job_id: u32, text: &str) {
        if self.cancelled.contains(&job_id) {
            assert_eq!(text, format!("Job {job_id} cancelled by the simulation"));
            self.stats.cancelled += 1;
            return;
        }
        let reason = text
            .strip_prefix("Job aborted due to stage failure: ")
            .unwrap_or_else(|| panic!("job {job_id}: {text}"));
        if let Some((stage, _)) = reason.split_once(MAX_TEXT) {
            // "ResultStage 3 (job0) " or "ShuffleMapStage 1 (s1) "
            let id: u32 = stage
                .split(' ')
                .nth(1)
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("{text}"));
            let failed = self.consecutive_failures.get(&id).map_or(0, BTreeSet::len);
            assert_eq!(
                failed as u32, MAX_CONSECUTIVE_ATTEMPTS,
                "job {job_id} failed for stage {id} after {failed} consecutive failed attempts: {text}"
            );
            if self.must_abort == Some(id) {
                self.must_abort = None;
            }
            self.stats.failed_max_attempts += 1;
            return;
        }
        // "Task 1 in stage 4.2 failed 3 times, most recent failure: ..."
        let rest = reason
            .strip_prefix("Task ")
            .unwrap_or_else(|| panic!("{text}"));
        let mut words = rest.split(' ');
        let index: u32 = words.next().unwrap().parse().unwrap();
        let stage_attempt = words.nth(2).unwrap();
        let (stage, attempt) = stage_attempt.split_once('.').unwrap();
        let task_set = TaskSetId {
            stage_id: stage.parse().unwrap(),
            stage_attempt_id: attempt.parse().unwrap(),
        };
        assert!(
            reason.contains(&format!(
                "failed {} times, most recent failure: Lost task",
                self.max_failures
            )),
            "{text}"
        );
        let injected = self
            .counted_failures
            .get(&(task_set, index))
            .copied()
            .unwrap_or(0);
        assert!(
            injected >= self.max_failures,
            "job {job_id} failed but task {index} of {task_set} failed only {injected} times: {text}"
        );
        self.stats.failed_task_failures += 1;
    }

    fn check_registries(&self) {
        for (id, exec) in &self.executors {
            let mut registered: Vec<u64> = self.tasks.running_tasks_on(id).collect();
            registered.sort_unstable();
            let running: Vec<u64> = exec.running.keys().copied().collect();
            assert_eq!(registered, running, "running tasks of executor {id}");
            assert_eq!(exec.free as usize + running.len(), exec.cores as usize);
        }
    }
}

/// Seeds past the default count that found a bug (`scripts/property-hunt` runs more):
/// 31767 never ended a job whose map stage had been aborted for another job; 340002
/// never started a job that needed a stage left waiting for that aborted stage.
const FAILED_ONCE: &[u64] = &[31_767, 340_002];

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("FLINT_DAG_SIM_SEED") {
        return vec![seed.parse().expect("FLINT_DAG_SIM_SEED is a number")];
    }
    let default = if cfg!(debug_assertions) {
        2_000
    } else {
        20_000
    };
    let count = std::env::var("FLINT_DAG_SIM_SEEDS")
        .ok()
        .map(|n| n.parse().expect("FLINT_DAG_SIM_SEEDS is a number"))
        .unwrap_or(default);
    let mut seeds: Vec<u64> = (0..count).collect();
    seeds.extend(FAILED_ONCE.iter().filter(|&&seed| seed >= count));
    seeds
}

fn run_seed(seed: u64) -> Sim {
    let mut sim = Sim::new(seed);
    sim.run();
    sim
}

#[test]
fn randomized_dags_keep_the_invariants() {
    let started = Instant::now();
    let mut total = Stats::default();
    for seed in seeds() {
        let stats = match std::panic::catch_unwind(|| run_seed(seed).stats) {
            Ok(stats) => stats,
            Err(panic) => {
                eprintln!(
                    "DAG simulation seed {seed} failed; rerun with FLINT_DAG_SIM_SEED={seed}"
                );
                std::panic::resume_unwind(panic);
            }
        };
        let fields = [
            (&mut total.seeds, stats.seeds),
            (&mut total.jobs, stats.jobs),
            (&mut total.succeeded, stats.succeeded),
            (&mut total.failed_max_attempts, stats.failed_max_attempts),
            (&mut total.failed_task_failures, stats.failed_task_failures),
            (&mut total.cancelled, stats.cancelled),
            (&mut total.launches, stats.launches),
            (&mut total.fetch_failures, stats.fetch_failures),
            (
                &mut total.metadata_fetch_failures,
                stats.metadata_fetch_failures,
            ),
            (&mut total.executor_losses, stats.executor_losses),
            (&mut total.host_losses, stats.host_losses),
            (&mut total.stage_attempts, stats.stage_attempts),
            (&mut total.stage_retries, stats.stage_retries),
            (
                &mut total.partition_completions,
                stats.partition_completions,
            ),
            (&mut total.shared_shuffle_jobs, stats.shared_shuffle_jobs),
        ];
        for (sum, value) in fields {
            *sum += value;
        }
    }
    eprintln!(
        "DAG simulation totals in {:?}: {total:?}",
        started.elapsed()
    );
    if total.seeds >= 500 {
        // The scenarios must exercise what they claim to.
        assert!(total.failed_max_attempts > 0, "{total:?}");
        assert!(total.failed_task_failures > 0, "{total:?}");
        assert!(total.cancelled > 0, "{total:?}");
        assert!(total.metadata_fetch_failures > 0, "{total:?}");
        assert!(total.host_losses > 0, "{total:?}");
        assert!(total.stage_retries > 0, "{total:?}");
        assert!(total.partition_completions > 0, "{total:?}");
        assert!(total.shared_shuffle_jobs > 0, "{total:?}");
        assert!(total.succeeded > total.jobs / 2, "{total:?}");
    }
}

#[test]
fn a_seed_replays_identically() {
    let trace = |seed: u64| {
        let sim = run_seed(seed);
        (sim.trace, sim.stats.launches, sim.now_ms, sim.job_ends)
    };
    for seed in [5, 99, 4_242] {
        assert_eq!(trace(seed), trace(seed), "seed {seed}");
    }
}
