//! Routes, and the JSON API: Spark's REST API shapes (`/api/v1/applications/...`) where
//! flint has the same thing, and flint's whole snapshot at `/api/v1/status`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flint_scheduler::status::{ExecutorStatus, JobStatus, StageStatus, StatusSnapshot};
use serde::Serialize;

use crate::http::{Request, Response};
use crate::Site;

/// The page, with its script and style inline: nothing is fetched from elsewhere.
const PAGE: &str = include_str!("page.html");

const JSON: &str = "application/json";

/// Jobs, and stages, that `/api/v1/status` gives: the newest (the Spark-shaped
/// endpoints give every one retained).
const PAGE_ROWS: usize = 100;

pub(crate) fn route(site: &Site, request: &Request<'_>) -> Response {
    let path = request.path.trim_end_matches('/');
    let _ = request.query;
    match path {
        "" | "/index.html" => Response::new(200, "text/html; charset=utf-8", PAGE),
        "/metrics" => Response::new(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::render(&site.snapshot()),
        ),
        "/api/v1/status" => json(&Status::of(site, &site.snapshot())),
        "/api/v1/applications" => json(&[Application::of(site, &site.snapshot())]),
        _ => app_route(site, path).unwrap_or_else(|| Response::text(404, "no such page")),
    }
}

fn app_route(site: &Site, path: &str) -> Option<Response> {
    let rest = path.strip_prefix("/api/v1/applications/")?;
    let (app, what) = rest.split_once('/').unwrap_or((rest, ""));
    if app != site.app_id {
        return None;
    }
    let snapshot = site.snapshot();
    let response = match what {
        "" => json(&Application::of(site, &snapshot)),
        "jobs" => json(&jobs(site, &snapshot)),
        "stages" => json(&stages(site, &snapshot)),
        "executors" | "allexecutors" => {
            let all = what == "allexecutors";
            let executors: Vec<Executor> = snapshot
                .executors
                .iter()
                .filter(|e| all || e.active)
                .map(|e| Executor::of(site, e))
                .collect();
            json(&executors)
        }
        _ => {
            if let Some(id) = what.strip_prefix("jobs/") {
                let id: u32 = id.parse().ok()?;
                let job = snapshot.jobs.iter().find(|j| j.job_id == id)?;
                json(&Job::of(site, job))
            } else {
                return None;
            }
        }
    };
    Some(response)
}

fn json(value: &impl Serialize) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => Response::new(200, JSON, body),
        Err(e) => Response::text(500, format!("cannot encode: {e}")),
    }
}

/// Spark's date format: `2015-02-03T16:42:40.000GMT`.
pub(crate) fn spark_date(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}GMT",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_millis()
    )
}

fn at(site: &Site, since_start: Duration) -> SystemTime {
    site.started + since_start
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Attempt {
    start_time: String,
    end_time: String,
    last_updated: String,
    duration: u64,
    spark_user: String,
    completed: bool,
    app_spark_version: &'static str,
    start_time_epoch: u64,
    last_updated_epoch: u64,
}

#[derive(Serialize)]
struct Application {
    id: String,
    name: String,
    attempts: Vec<Attempt>,
}

impl Application {
    fn of(site: &Site, snapshot: &StatusSnapshot) -> Self {
        let now = at(site, snapshot.uptime);
        let stopped = site.stopped_at();
        let epoch = |t: SystemTime| millis(t.duration_since(UNIX_EPOCH).unwrap_or_default());
        Application {
            id: site.app_id.clone(),
            name: site.app_name.clone(),
            attempts: vec![Attempt {
                start_time: spark_date(site.started),
                end_time: spark_date(stopped.unwrap_or(UNIX_EPOCH)),
                last_updated: spark_date(now),
                duration: millis(snapshot.uptime),
                spark_user: std::env::var("USER").unwrap_or_default(),
                completed: stopped.is_some(),
                app_spark_version: concat!("flint ", env!("CARGO_PKG_VERSION")),
                start_time_epoch: epoch(site.started),
                last_updated_epoch: epoch(now),
            }],
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Job {
    job_id: u32,
    name: String,
    submission_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_time: Option<String>,
    stage_ids: Vec<u32>,
    status: &'static str,
    num_tasks: u32,
    num_active_tasks: u32,
    num_completed_tasks: u32,
    num_skipped_tasks: u32,
    num_failed_tasks: u32,
    num_killed_tasks: u32,
    num_active_stages: u32,
    num_completed_stages: u32,
    num_skipped_stages: u32,
    num_failed_stages: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_reason: Option<String>,
}

impl Job {
    fn of(site: &Site, job: &JobStatus) -> Self {
        let stages = job.stage_ids.len() as u32;
        Job {
            job_id: job.job_id,
            name: format!("job {}", job.job_id),
            submission_time: spark_date(at(site, job.submitted)),
            completion_time: job.completed.map(|c| spark_date(at(site, c))),
            stage_ids: job.stage_ids.clone(),
            status: job.phase.job_word(),
            num_tasks: job.num_tasks,
            num_active_tasks: job.active_tasks,
            num_completed_tasks: job.completed_tasks,
            num_skipped_tasks: 0,
            num_failed_tasks: job.failed_tasks,
            num_killed_tasks: 0,
            num_active_stages: stages.saturating_sub(job.completed_stages + job.failed_stages),
            num_completed_stages: job.completed_stages,
            num_skipped_stages: 0,
            num_failed_stages: job.failed_stages,
            failure_reason: job.failure.clone(),
        }
    }
}

fn jobs(site: &Site, snapshot: &StatusSnapshot) -> Vec<Job> {
    snapshot.jobs.iter().map(|j| Job::of(site, j)).collect()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Stage {
    status: &'static str,
    stage_id: u32,
    attempt_id: u32,
    job_id: u32,
    num_tasks: u32,
    num_active_tasks: u32,
    num_complete_tasks: u32,
    num_failed_tasks: u32,
    num_killed_tasks: u32,
    submission_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_time: Option<String>,
    name: String,
    scheduling_pool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_reason: Option<String>,
}

impl Stage {
    fn of(site: &Site, stage: &StageStatus) -> Self {
        Stage {
            status: stage.phase.stage_word(),
            stage_id: stage.id.stage_id,
            attempt_id: stage.id.stage_attempt_id,
            job_id: stage.job_id,
            num_tasks: stage.num_tasks,
            num_active_tasks: stage.active_tasks,
            num_complete_tasks: stage.completed_tasks,
            num_failed_tasks: stage.failed_tasks,
            num_killed_tasks: 0,
            submission_time: spark_date(at(site, stage.submitted)),
            completion_time: stage.completed.map(|c| spark_date(at(site, c))),
            name: if stage.name.is_empty() {
                format!("TaskSet_{}", stage.id)
            } else {
                stage.name.clone()
            },
            scheduling_pool: stage.pool.clone(),
            failure_reason: stage.failure.clone(),
        }
    }
}

fn stages(site: &Site, snapshot: &StatusSnapshot) -> Vec<Stage> {
    snapshot.stages.iter().map(|s| Stage::of(site, s)).collect()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Executor {
    id: String,
    host_port: String,
    is_active: bool,
    total_cores: u32,
    max_tasks: u32,
    active_tasks: u32,
    failed_tasks: u64,
    completed_tasks: u64,
    total_tasks: u64,
    /// Milliseconds.
    total_duration: u64,
    add_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    remove_reason: Option<String>,
    /// flint's own: milliseconds since its last heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    since_heartbeat_ms: Option<u64>,
    /// flint's own: no offers until its connection drains.
    backlogged: bool,
}

impl Executor {
    fn of(site: &Site, e: &ExecutorStatus) -> Self {
        Executor {
            id: e.id.clone(),
            host_port: e.host.clone(),
            is_active: e.active,
            total_cores: e.cores,
            max_tasks: e.cores,
            active_tasks: e.running_tasks,
            failed_tasks: e.failed_tasks,
            completed_tasks: e.completed_tasks,
            total_tasks: e.completed_tasks + e.failed_tasks + u64::from(e.running_tasks),
            total_duration: millis(e.task_time),
            add_time: spark_date(at(site, e.added)),
            remove_reason: e.removed_reason.clone(),
            since_heartbeat_ms: e.since_heartbeat.map(millis),
            backlogged: e.backlogged,
        }
    }
}

/// The page's view: everything in one answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    app_id: String,
    app_name: String,
    sequence: u64,
    uptime_ms: u64,
    /// Whether the driver stopped: the figures are its last.
    driver_stopped: bool,
    tasks_succeeded: u64,
    tasks_failed: u64,
    tasks_finished: u64,
    running_tasks: u32,
    total_cores: u32,
    pending_executors: u32,
    executor_failures: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
    jobs_started: u64,
    jobs_succeeded: u64,
    jobs_failed: u64,
    window_secs: f64,
    tasks_per_sec: f64,
    latency_p50_ms: Option<f64>,
    latency_p90_ms: Option<f64>,
    latency_p99_ms: Option<f64>,
    /// Task attempts ended in each of the last seconds, oldest first.
    throughput: Vec<u64>,
    transport: Transport,
    jobs: Vec<Job>,
    stages: Vec<Stage>,
    executors: Vec<Executor>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Transport {
    accepted: u64,
    connected: u64,
    frames_received: u64,
    bytes_received: u64,
    bytes_sent: u64,
    refused_limits: u64,
    evicted: u64,
    closed_protocol: u64,
    closed_auth: u64,
    closed_timeout: u64,
    budget_waits: u64,
}

impl Status {
    fn of(site: &Site, s: &StatusSnapshot) -> Self {
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
        let t = &s.transport;
        Status {
            app_id: site.app_id.clone(),
            app_name: site.app_name.clone(),
            sequence: s.sequence,
            uptime_ms: millis(s.uptime),
            driver_stopped: site.stopped_at().is_some(),
            tasks_succeeded: s.totals.tasks_succeeded,
            tasks_failed: s.totals.tasks_failed,
            tasks_finished: s.totals.tasks_finished(),
            running_tasks: s.running_tasks,
            total_cores: s.total_cores,
            pending_executors: s.pending_executors,
            executor_failures: s.executor_failures,
            failure: s.failure.clone(),
            jobs_started: s.totals.jobs_started,
            jobs_succeeded: s.totals.jobs_succeeded,
            jobs_failed: s.totals.jobs_failed,
            window_secs: s.window.span.as_secs_f64(),
            tasks_per_sec: s.window.tasks_per_sec,
            latency_p50_ms: ms(s.window.p50),
            latency_p90_ms: ms(s.window.p90),
            latency_p99_ms: ms(s.window.p99),
            throughput: s.throughput.clone(),
            transport: Transport {
                accepted: t.accepted,
                connected: t.connected,
                frames_received: t.frames_received,
                bytes_received: t.bytes_received,
                bytes_sent: t.bytes_sent,
                refused_limits: t.refused,
                evicted: t.evicted,
                closed_protocol: t.closed_protocol,
                closed_auth: t.closed_auth,
                closed_timeout: t.closed_timeout,
                budget_waits: t.budget_waits,
            },
            // The newest only: the page polls this twice a second, and shows no more.
            jobs: s
                .jobs
                .iter()
                .take(PAGE_ROWS)
                .map(|j| Job::of(site, j))
                .collect(),
            stages: s
                .stages
                .iter()
                .take(PAGE_ROWS)
                .map(|st| Stage::of(site, st))
                .collect(),
            executors: s.executors.iter().map(|e| Executor::of(site, e)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_in_sparks_format() {
        let at = UNIX_EPOCH + Duration::from_millis(1_422_981_760_123);
        assert_eq!(spark_date(at), "2015-02-03T16:42:40.123GMT");
        assert_eq!(spark_date(UNIX_EPOCH), "1970-01-01T00:00:00.000GMT");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(spark_date(leap), "2000-02-29T00:00:00.000GMT");
    }
}
