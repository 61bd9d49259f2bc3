//! The scheduler's `src/core/` is its pure half (see `src/core/mod.rs`): of flint-rpc it
//! may use the generic configuration reader (`flint_rpc::conf`) and the log budget
//! (`flint_rpc::log_budget`, `flint_rpc::peer_warn!`), nothing else, and nothing of the
//! glue in `src/driver/`; outside its tests it reads no clock and touches no thread,
//! file, process, environment variable or socket. This reads every source file under
//! `src/core/` and names each line that does otherwise.
//!
//! The check is textual, over code (comments may name anything): a path into flint-rpc
//! is written out in full from the crate's name (`use flint_rpc::conf::Conf`), never
//! grouped (`use flint_rpc::{...}`) or renamed, which would hide what it names.

use std::path::{Path, PathBuf};

/// What may follow `flint_rpc::` in the core.
const ALLOWED_IN_RPC: &[&str] = &["conf", "log_budget", "peer_warn"];

/// The glue's module, which the core must not name.
const GLUE: &str = "driver";

/// What the core's code (not its tests) must not name: clocks, threads, files,
/// processes, the environment, sockets. `now` is passed in; an address is only data.
const IMPURE: &[&str] = &[
    "Instant::now",
    "SystemTime",
    "std::thread",
    "std::fs",
    "std::process",
    "std::env",
    "TcpStream",
    "TcpListener",
    "UdpSocket",
];

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The byte offsets of `word` in `line` as a whole identifier.
fn occurrences<'a>(line: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    line.match_indices(word).filter_map(move |(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        let whole = !before.is_some_and(is_ident) && !after.is_some_and(is_ident);
        whole.then_some(at)
    })
}

/// The code of `line`: what comes before a `//` comment (one outside a string or
/// character literal). Comments may say what they like.
fn code_of(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            // A character literal: 'x' or '\x' (a lifetime has no closing quote there).
            b'\'' if !in_string => {
                if bytes.get(i + 2) == Some(&b'\'') {
                    i += 2;
                } else if bytes.get(i + 1) == Some(&b'\\') && bytes.get(i + 3) == Some(&b'\'') {
                    i += 3;
                }
            }
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// Why `line` breaks the rule, once per offending path.
fn violations(line: &str) -> Vec<String> {
    let line = code_of(line);
    let mut found = Vec::new();
    for at in occurrences(line, "flint_rpc") {
        let rest = line[at + "flint_rpc".len()..].trim_start();
        let Some(rest) = rest.strip_prefix("::") else {
            found.push("flint_rpc named other than by a full path".to_owned());
            continue;
        };
        let rest = rest.trim_start();
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if !ALLOWED_IN_RPC.contains(&name.as_str()) {
            let shown = if name.is_empty() {
                rest.chars().take(12).collect()
            } else {
                name
            };
            found.push(format!("flint_rpc::{shown}"));
        } else if name == "peer_warn" && !rest[name.len()..].starts_with('!') {
            found.push("flint_rpc::peer_warn other than as the macro".to_owned());
        }
    }
    for impure in IMPURE {
        if line.contains(impure) {
            found.push(format!("{impure} outside the tests"));
        }
    }
    // In a grouped import, a path may start after `{` or `,` as well.
    let statement = line.trim_start();
    let import = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .any(|start| statement.starts_with(start));
    for at in occurrences(line, GLUE) {
        let before = line[..at].trim_end();
        let grouped = import && (before.ends_with('{') || before.ends_with(','));
        if before.ends_with("::") || grouped {
            found.push(format!("the glue's module ({GLUE})"));
        }
    }
    found
}

fn sources(dir: &Path, into: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn the_core_uses_nothing_of_flint_rpc_but_its_configuration_and_log_budget() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut files = Vec::new();
    sources(&core, &mut files);
    for expected in ["mod.rs", "task_scheduler.rs", "driver_core/mod.rs"] {
        assert!(
            files.contains(&core.join(expected)),
            "src/core/{expected} was not read"
        );
    }
    let mut broken = Vec::new();
    for file in &files {
        // Tests may read the clock: their files (a `tests.rs` and the modules in its
        // `tests/` directory), and the test module that closes a file.
        let in_tests = file
            .strip_prefix(&core)
            .unwrap_or(file)
            .components()
            .any(|part| part.as_os_str() == "tests" || part.as_os_str() == "tests.rs");
        if in_tests {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (number, line) in code.lines().enumerate() {
            for why in violations(line) {
                let shown = file.strip_prefix(&core).unwrap_or(file).display();
                broken.push(format!(
                    "src/core/{shown}:{}: {why}: {}",
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the pure core uses what it may not:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_check_tells_what_the_core_may_use_from_what_it_may_not() {
    for allowed in [
        "use flint_rpc::conf::{Conf, ConfError, Key};",
        "    peer_warnings: flint_rpc::log_budget::LogBudget,",
        "flint_rpc::peer_warn!(self.peer_warnings, now, \"Ignored {why}\");",
        ".map_err(|e: flint_rpc::conf::ConfError| error(e.to_string()))?",
        "let flint_rpc_like = 1; // flint_rpcs, not_flint_rpc",
        "use crate::core::driver_core::{Output, PeerId};",
        "/// The driver's state behind its endpoints.",
        "/// what a driver program calls, driver-side, on listeners, driver threads",
        "//! The glue (`crate::driver`) carries them out; no [`flint_rpc::EndpointRef`].",
        "let url = \"http://example.com/a\"; // flint_rpc::RpcEnv",
        "let quote = '\"'; // flint_rpc::RpcEnv",
    ] {
        assert_eq!(violations(allowed), Vec::<String>::new(), "{allowed}");
    }
    for (refused, why) in [
        ("use flint_rpc::EndpointRef;", "flint_rpc::EndpointRef"),
        (
            "use flint_rpc::{conf::Conf, RpcEnv};",
            "flint_rpc::{conf::Conf,",
        ),
        (
            "let d = flint_rpc::timer::deadline_after(now, t);",
            "flint_rpc::timer",
        ),
        ("use flint_rpc :: Settings;", "flint_rpc::Settings"),
        ("use flint_rpc::conf_extra::X;", "flint_rpc::conf_extra"),
        (
            "use flint_rpc;",
            "flint_rpc named other than by a full path",
        ),
        (
            "use flint_rpc as rpc;",
            "flint_rpc named other than by a full path",
        ),
        (
            "use flint_rpc::peer_warn;",
            "flint_rpc::peer_warn other than as the macro",
        ),
        (
            "use crate::driver::job::TaskSetShared;",
            "the glue's module (driver)",
        ),
        (
            "let now = Instant::now();",
            "Instant::now outside the tests",
        ),
        (
            "let t = std::time::SystemTime::now();",
            "SystemTime outside the tests",
        ),
        ("std::thread::spawn(f);", "std::thread outside the tests"),
        (
            "use crate::{core::events, driver};",
            "the glue's module (driver)",
        ),
        (
            "use super::super::super::driver::carry_out;",
            "the glue's module (driver)",
        ),
        (
            "let s = \"a // b\"; flint_rpc::RpcEnv::new(c) // why",
            "flint_rpc::RpcEnv",
        ),
        (
            "let c = '\\''; flint_rpc::Settings::from_conf(c)",
            "flint_rpc::Settings",
        ),
    ] {
        assert_eq!(violations(refused), [why], "{refused}");
    }
}
