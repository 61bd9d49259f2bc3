//! The `flint` command's logs: to stderr, filtered by `FLINT_LOG`, as text or as one
//! JSON object a line (`FLINT_LOG_FORMAT=json`), each line of an executor process
//! labelled with its executor's id.
//!
//! The label is the process's, not a span's: an executor's lines come from threads it
//! does not start (the transport's event loop among them), on which no span of its own
//! is entered, and `flint run` interleaves its executors' stderr with the driver's.

use std::fmt;
use std::io::{IsTerminal, Write as _};
use std::sync::OnceLock;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The variable that sets the filter (`RUST_LOG` is read when it is not set).
pub const LOG_ENV: &str = "FLINT_LOG";
/// The variable that picks the format: `text` (the default) or `json`.
pub const LOG_FORMAT_ENV: &str = "FLINT_LOG_FORMAT";

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// tracing-subscriber's full text format.
    Text,
    /// One JSON object a line (tracing-subscriber's JSON format).
    Json,
}

impl LogFormat {
    /// The format `FLINT_LOG_FORMAT` names, or what is wrong with its value.
    pub fn parse(value: Option<&str>) -> Result<LogFormat, String> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("" | "text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some(_) => Err(format!(
                "{LOG_FORMAT_ENV}={:?} is neither text nor json; logging as text",
                value.unwrap_or_default()
            )),
        }
    }
}

/// The format [`init`] chose, for [`say`].
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Logs go to stderr; `FLINT_LOG` (or `RUST_LOG`) sets the filter, WARN by default so
/// that a job's output stays readable. Colours only on a terminal: a log redirected to a
/// file (or an executor's, collected by its driver) stays plain text. `executor` labels
/// every line of an executor process with its id.
pub fn init(executor: Option<&str>) {
    let filter = std::env::var(LOG_ENV)
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".to_owned());
    let format_env = std::env::var(LOG_FORMAT_ENV).ok();
    let format = LogFormat::parse(format_env.as_deref()).unwrap_or_else(|e| {
        let _ = writeln!(std::io::stderr(), "flint: warning: {e}");
        LogFormat::Text
    });
    let _ = FORMAT.set(format);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr);
    let label = executor.map(str::to_owned);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .event_format(Labelled::text(label))
            .try_init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(Labelled::json(label))
            .try_init(),
    };
}

/// Writes one of the command's own lines to stderr (a failure, a warning about the
/// command line, a stage done), whatever the log filter: `PREFIX: MESSAGE` as text,
/// or under `FLINT_LOG_FORMAT=json` an object of the logs' shape (target `flint`), so
/// that stderr stays one JSON object a line for a log collector.
pub fn say(prefix: &str, level: Level, message: &str) {
    let line = match FORMAT.get() {
        Some(LogFormat::Json) => json_line(level, message),
        _ => format!("{prefix}: {message}"),
    };
    // Not eprintln!, which panics if stderr is gone (the driver that read an executor's
    // may have exited).
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `message` as tracing-subscriber's JSON format writes an event of target `flint`.
fn json_line(level: Level, message: &str) -> String {
    let mut timestamp = String::new();
    if SystemTime
        .format_time(&mut Writer::new(&mut timestamp))
        .is_err()
    {
        timestamp = "<unknown time>".to_owned();
    }
    serde_json::json!({
        "timestamp": timestamp,
        "level": level.as_str(),
        "fields": { "message": message },
        "target": "flint",
    })
    .to_string()
}

/// A format that puts a process's label on each line: `executor{id=3}` where a span
/// would be in text, an `"executor_id"` member in JSON.
pub struct Labelled<F> {
    label: Option<String>,
    inner: F,
}

impl Labelled<Format<Full, ()>> {
    /// Text: the time and level written here, then the label, then the rest as
    /// tracing-subscriber writes it.
    pub fn text(executor: Option<String>) -> Self {
        Labelled {
            label: executor.map(|id| format!("executor{{id={id}}}")),
            inner: tracing_subscriber::fmt::format()
                .without_time()
                .with_level(false),
        }
    }
}

impl Labelled<Format<Json, SystemTime>> {
    /// JSON: tracing-subscriber's object, the label its first member.
    pub fn json(executor: Option<String>) -> Self {
        Labelled {
            label: executor.map(|id| format!("\"executor_id\":{},", serde_json::Value::String(id))),
            inner: tracing_subscriber::fmt::format().json(),
        }
    }
}

impl<S, N> FormatEvent<S, N> for Labelled<Format<Full, ()>>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let ansi = writer.has_ansi_escapes();
        if ansi {
            writer.write_str("\x1b[2m")?;
        }
        if SystemTime.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        if ansi {
            writer.write_str("\x1b[0m")?;
        }
        let level = *event.metadata().level();
        if ansi {
            let colour = match level {
                Level::TRACE => "35",
                Level::DEBUG => "34",
                Level::INFO => "32",
                Level::WARN => "33",
                Level::ERROR => "31",
            };
            write!(writer, " \x1b[{colour}m{level:>5}\x1b[0m ")?;
        } else {
            write!(writer, " {level:>5} ")?;
        }
        if let Some(label) = &self.label {
            if ansi {
                write!(writer, "\x1b[1m{label}\x1b[0m\x1b[2m:\x1b[0m ")?;
            } else {
                write!(writer, "{label}: ")?;
            }
        }
        self.inner.format_event(ctx, writer, event)
    }
}

impl<S, N> FormatEvent<S, N> for Labelled<Format<Json, SystemTime>>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(label) = &self.label else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        // The object tracing-subscriber wrote, with the label as its first member.
        match line.strip_prefix('{') {
            Some(rest) => write!(writer, "{{{label}{rest}"),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Captures what a subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn log_text(label: Option<&str>) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .event_format(Labelled::text(label.map(str::to_owned)))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(peer = 7, "a \"line\"");
        });
        out.text()
    }

    fn log_json(label: Option<&str>) -> serde_json::Value {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(Labelled::json(label.map(str::to_owned)))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(peer = 7, "a \"line\"");
        });
        let text = out.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    #[test]
    fn text_lines_carry_the_executor_where_a_span_would_be() {
        let line = log_text(Some("3"));
        let (time, rest) = line.split_once(' ').unwrap();
        assert!(time.ends_with('Z') && time.contains('T'), "{line}");
        assert!(
            rest.starts_with(" WARN executor{id=3}: flint::logging::tests: a \"line\" peer=7\n"),
            "{line}"
        );
        let unlabelled = log_text(None);
        assert!(
            unlabelled.contains(" WARN flint::logging::tests: a \"line\""),
            "{unlabelled}"
        );
    }

    #[test]
    fn json_lines_are_one_object_with_the_executor_id() {
        let object = log_json(Some("exec \"7\""));
        assert_eq!(object["executor_id"], "exec \"7\"");
        assert_eq!(object["level"], "INFO");
        assert_eq!(object["fields"]["message"], "a \"line\"");
        assert_eq!(object["fields"]["peer"], 7);
        assert_eq!(object["target"], "flint::logging::tests");
        let object = log_json(None);
        assert!(object.get("executor_id").is_none(), "{object}");
        assert_eq!(object["level"], "INFO");
    }

    #[test]
    fn the_command_s_own_lines_have_the_logs_json_shape() {
        let object: serde_json::Value =
            serde_json::from_str(&json_line(Level::WARN, "warning: \"x\"\n")).unwrap();
        assert_eq!(object["level"], "WARN");
        assert_eq!(object["target"], "flint");
        assert_eq!(object["fields"]["message"], "warning: \"x\"\n");
        assert!(
            object["timestamp"].as_str().unwrap().ends_with('Z'),
            "{object}"
        );
    }

    #[test]
    fn the_format_is_text_or_json() {
        assert_eq!(LogFormat::parse(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("JSON ")), Ok(LogFormat::Json));
        assert_eq!(LogFormat::parse(Some("text")), Ok(LogFormat::Text));
        let err = LogFormat::parse(Some("xml")).unwrap_err();
        assert!(err.starts_with("FLINT_LOG_FORMAT=\"xml\""), "{err}");
    }
}
