//! `/metrics`: the snapshot in the Prometheus text format (version 0.0.4).

use std::fmt::Write as _;

use flint_scheduler::status::{StatusSnapshot, LATENCY_BOUNDS_NS};

/// Bounds of the exported latency buckets, in nanoseconds: 1, 2.5 and 5 a decade from
/// 10 µs to 50 s (all of them bounds of the book's finer histogram).
const EXPORTED_BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    50_000_000_000,
];

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn one(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// Renders the snapshot.
pub(crate) fn render(s: &StatusSnapshot) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let t = &s.totals;
    family(
        &mut out,
        "flint_tasks_finished_total",
        "counter",
        "Task attempts that ended, by outcome.",
    );
    let _ = writeln!(
        out,
        "flint_tasks_finished_total{{outcome=\"succeeded\"}} {}",
        t.tasks_succeeded
    );
    let _ = writeln!(
        out,
        "flint_tasks_finished_total{{outcome=\"failed\"}} {}",
        t.tasks_failed
    );
    one(
        &mut out,
        "flint_tasks_running",
        "gauge",
        "Task attempts running.",
        s.running_tasks,
    );
    family(
        &mut out,
        "flint_jobs_total",
        "counter",
        "Jobs that started, and that ended by outcome.",
    );
    let _ = writeln!(
        out,
        "flint_jobs_total{{state=\"started\"}} {}",
        t.jobs_started
    );
    let _ = writeln!(
        out,
        "flint_jobs_total{{state=\"succeeded\"}} {}",
        t.jobs_succeeded
    );
    let _ = writeln!(
        out,
        "flint_jobs_total{{state=\"failed\"}} {}",
        t.jobs_failed
    );
    family(
        &mut out,
        "flint_stages_total",
        "counter",
        "Stage attempts submitted, and ended by outcome.",
    );
    let _ = writeln!(
        out,
        "flint_stages_total{{state=\"submitted\"}} {}",
        t.stages_submitted
    );
    let _ = writeln!(
        out,
        "flint_stages_total{{state=\"completed\"}} {}",
        t.stages_completed
    );
    let _ = writeln!(
        out,
        "flint_stages_total{{state=\"failed\"}} {}",
        t.stages_failed
    );
    one(
        &mut out,
        "flint_executors",
        "gauge",
        "Registered executors.",
        s.executors.iter().filter(|e| e.active).count(),
    );
    one(
        &mut out,
        "flint_executors_added_total",
        "counter",
        "Executors that registered.",
        t.executors_added,
    );
    one(
        &mut out,
        "flint_executors_removed_total",
        "counter",
        "Executors removed.",
        t.executors_removed,
    );
    one(
        &mut out,
        "flint_executor_failures_total",
        "counter",
        "Executor failures counted towards executor.maxNumFailures.",
        s.executor_failures,
    );
    one(
        &mut out,
        "flint_executors_pending",
        "gauge",
        "Executors asked for and not registered yet.",
        s.pending_executors,
    );
    one(
        &mut out,
        "flint_cores",
        "gauge",
        "Cores of the registered executors.",
        s.total_cores,
    );
    family(
        &mut out,
        "flint_executor_tasks_total",
        "counter",
        "Task attempts that ended on each live executor.",
    );
    for e in s.executors.iter().filter(|e| e.active) {
        let id = escape(&e.id);
        let _ = writeln!(
            out,
            "flint_executor_tasks_total{{executor=\"{id}\",outcome=\"succeeded\"}} {}",
            e.completed_tasks
        );
        let _ = writeln!(
            out,
            "flint_executor_tasks_total{{executor=\"{id}\",outcome=\"failed\"}} {}",
            e.failed_tasks
        );
    }

    family(
        &mut out,
        "flint_task_launch_latency_seconds",
        "histogram",
        "Task attempts' time from launch at the driver to result at the driver.",
    );
    for bound in EXPORTED_BOUNDS_NS {
        debug_assert!(LATENCY_BOUNDS_NS.contains(&bound));
        let _ = writeln!(
            out,
            "flint_task_launch_latency_seconds_bucket{{le=\"{}\"}} {}",
            bound as f64 / 1e9,
            s.latency.count_at_most(bound)
        );
    }
    let count = s.latency.count();
    let _ = writeln!(
        out,
        "flint_task_launch_latency_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        out,
        "flint_task_launch_latency_seconds_sum {}",
        s.latency.sum_ns as f64 / 1e9
    );
    let _ = writeln!(out, "flint_task_launch_latency_seconds_count {count}");

    let r = &s.transport;
    one(
        &mut out,
        "flint_rpc_connections_accepted_total",
        "counter",
        "Connections accepted from remote peers.",
        r.accepted,
    );
    one(
        &mut out,
        "flint_rpc_connections_opened_total",
        "counter",
        "Outgoing connections established.",
        r.connected,
    );
    family(
        &mut out,
        "flint_rpc_connections_refused_total",
        "counter",
        "Connections refused or closed for what their peer did, by reason.",
    );
    for (reason, n) in [
        ("limits", r.refused),
        ("evicted", r.evicted),
        ("protocol", r.closed_protocol),
        ("auth", r.closed_auth),
        ("timeout", r.closed_timeout),
    ] {
        let _ = writeln!(
            out,
            "flint_rpc_connections_refused_total{{reason=\"{reason}\"}} {n}"
        );
    }
    one(
        &mut out,
        "flint_rpc_frames_received_total",
        "counter",
        "Whole frames received.",
        r.frames_received,
    );
    one(
        &mut out,
        "flint_rpc_received_bytes_total",
        "counter",
        "Bytes read from sockets.",
        r.bytes_received,
    );
    one(
        &mut out,
        "flint_rpc_sent_bytes_total",
        "counter",
        "Bytes written to sockets.",
        r.bytes_sent,
    );
    one(
        &mut out,
        "flint_rpc_receive_budget_waits_total",
        "counter",
        "Times a connection waited for room in rpc.io.maxReceiveBytes.",
        r.budget_waits,
    );
    one(
        &mut out,
        "flint_uptime_seconds",
        "gauge",
        "Time since the driver started.",
        s.uptime.as_secs_f64(),
    );
    out
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flint_scheduler::status::{LatencyHistogram, Totals, WindowStats};

    use super::*;

    fn snapshot(latencies_us: &[u64]) -> StatusSnapshot {
        let mut latency = LatencyHistogram::default();
        for &us in latencies_us {
            latency.record(Duration::from_micros(us));
        }
        StatusSnapshot {
            uptime: Duration::from_secs(3),
            sequence: 1,
            jobs: Vec::new(),
            stages: Vec::new(),
            executors: Vec::new(),
            totals: Totals {
                tasks_succeeded: latencies_us.len() as u64 - 1,
                tasks_failed: 1,
                ..Totals::default()
            },
            latency,
            window: WindowStats::default(),
            throughput: Vec::new(),
            total_cores: 4,
            running_tasks: 2,
            pending_executors: 0,
            executor_failures: 0,
            failure: None,
            transport: Default::default(),
        }
    }

    #[test]
    fn every_sample_belongs_to_a_declared_family_and_buckets_are_cumulative() {
        let text = render(&snapshot(&[5, 80, 80, 300, 2_000_000, 90_000_000]));
        let mut families = Vec::new();
        let mut buckets = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families.push(rest.split(' ').next().unwrap().to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (name, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
            let bare = name.split('{').next().unwrap();
            let family = bare
                .strip_suffix("_bucket")
                .or_else(|| bare.strip_suffix("_sum"))
                .or_else(|| bare.strip_suffix("_count"))
                .filter(|f| families.iter().any(|known| known == f))
                .unwrap_or(bare);
            assert!(families.iter().any(|f| f == family), "{line}: no # TYPE");
            if bare == "flint_task_launch_latency_seconds_bucket" {
                buckets.push(value);
            }
        }
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert_eq!(*buckets.last().unwrap(), 6.0);
        // 5 µs, 80 µs twice, 300 µs: 1 under 10 µs, 3 under 100 µs, 4 under 500 µs.
        assert_eq!(&buckets[..6], &[1.0, 1.0, 1.0, 3.0, 3.0, 4.0]);
        assert!(text.contains("flint_tasks_finished_total{outcome=\"succeeded\"} 5\n"));
        assert!(text.contains("flint_tasks_finished_total{outcome=\"failed\"} 1\n"));
        assert!(text.contains("flint_task_launch_latency_seconds_count 6\n"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
