//! The transport's modules depend on each other in layers, never in a cycle: read every
//! file under `rpc/src`, collect the `crate::` paths each top-level module uses, and fail
//! naming the first cycle found.
//!
//! A path counts wherever code names it: in `use` lines and inline (`crate::socket::x()`),
//! through the crate root's re-exports (`crate::RpcEnv` is `env`'s) and exported macros
//! (`crate::peer_warn!` is `log_budget`'s). Comments, string literals and code compiled
//! only for tests do not count: a unit test may drive its layer through the whole
//! environment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level modules each top-level module uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn the_transport_s_modules_form_no_cycle() {
    let graph = crate_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reader works: edges every version of the layering has.
    for (from, to) in [
        ("env", "turns"),
        ("turns", "event_loop"),
        ("event_loop", "shared"),
    ] {
        assert!(
            graph.get(from).is_some_and(|uses| uses.contains(to)),
            "{from} should use {to}; read: {graph:#?}"
        );
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "rpc's modules import each other in a cycle: {}\n{}",
            cycle.join(" -> "),
            describe(&graph)
        );
    }
}

#[test]
fn the_cycle_finder_names_a_made_up_cycle() {
    let graph = graph_of(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a"), ("d", "e")]);
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    // A module that uses itself (a file of a folder module naming its own folder) is
    // no cycle; layers are.
    let layers = graph_of(&[
        ("top", "mid"),
        ("mid", "low"),
        ("top", "low"),
        ("low", "low"),
    ]);
    assert_eq!(find_cycle(&layers), None);
    let two = graph_of(&[("x", "y"), ("y", "x")]);
    assert_eq!(find_cycle(&two).unwrap(), ["x", "y", "x"]);
}

#[test]
fn the_reader_counts_code_only() {
    let source = r#"
        //! Mentions crate::env in a comment.
        use std::sync::Arc;
        use crate::{shared::Shared, refs};
        use crate::settings::Settings;
        /* crate::turns in a block comment */
        fn f() -> char {
            let _ = "crate::env in a string";
            crate::socket::listen();
            crate::peer_warn!(budget, now, "{}", 'x');
            let _ = crate::RpcEnv::new;
            let _: &'static str = "";
            '"'
        }
        #[cfg(not(test))]
        mod counted {
            use crate::timer::deadline_after;
        }
        #[cfg(all(test, not(loom)))]
        mod tests {
            use crate::env::RpcEnv;
        }
    "#;
    let roots = BTreeMap::from([
        ("RpcEnv".to_owned(), "env".to_owned()),
        ("peer_warn".to_owned(), "log_budget".to_owned()),
    ]);
    let modules: BTreeSet<String> = [
        "env",
        "shared",
        "refs",
        "settings",
        "turns",
        "socket",
        "timer",
        "log_budget",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let uses = uses_of(source, &modules, &roots);
    let expected: BTreeSet<String> = [
        "shared",
        "refs",
        "settings",
        "socket",
        "log_budget",
        "env",
        "timer",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(uses, expected);
    // `crate::env` here is only `crate::RpcEnv`: without that line, env is not used.
    let without = source.replace("let _ = crate::RpcEnv::new;", "");
    assert!(!uses_of(&without, &modules, &roots).contains("env"));
}

fn graph_of(edges: &[(&str, &str)]) -> Graph {
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph
            .entry(from.to_string())
            .or_default()
            .insert(to.to_string());
        graph.entry(to.to_string()).or_default();
    }
    graph
}

/// The graph of the crate whose sources are under `src`.
fn crate_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |file: &Path| -> String {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        first.to_str().unwrap().trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> = files
        .iter()
        .map(|file| module_of(file))
        .filter(|module| module != "lib")
        .collect();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut roots = root_reexports(&lib, &modules);
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for name in exported_macros(&source) {
            roots.insert(name, module_of(file));
        }
    }
    let mut graph = Graph::new();
    for file in &files {
        let module = module_of(file);
        if module == "lib" {
            continue;
        }
        let source = std::fs::read_to_string(file).unwrap();
        let uses = graph.entry(module.clone()).or_default();
        uses.extend(uses_of(&source, &modules, &roots));
        uses.remove(&module);
    }
    graph
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            into.push(path);
        }
    }
}

/// The names the crate root re-exports (`pub use module::{A, B};`), by the module they
/// come from.
fn root_reexports(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code = code_only(lib);
    let mut roots = BTreeMap::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(path) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.rsplit_once("pub use ").map(|(_, path)| path))
        else {
            continue;
        };
        let Some((module, names)) = path.split_once("::") else {
            continue;
        };
        if !modules.contains(module.trim()) {
            continue;
        }
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',') {
            let name = name.split(" as ").last().unwrap().trim();
            let name = name.rsplit("::").next().unwrap();
            if !name.is_empty() {
                roots.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    roots
}

/// The macros a file exports at the crate root (`#[macro_export] macro_rules! name`).
fn exported_macros(source: &str) -> Vec<String> {
    let code = code_only(source);
    let mut names = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[macro_export]") {
        rest = &rest[at..];
        if let Some(def) = rest.find("macro_rules!") {
            let name: String = rest[def + "macro_rules!".len()..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
        rest = &rest["#[macro_export]".len()..];
    }
    names
}

/// The top-level modules (of `modules`) that `source` uses through `crate::` paths,
/// `roots` mapping the crate root's re-exported names (and exported macros) to theirs.
fn uses_of(
    source: &str,
    modules: &BTreeSet<String>,
    roots: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let code = without_test_modules(&code_only(source));
    let mut uses = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` is the macro's own crate, and `some_crate::` another's.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let firsts: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .map(|path| first_segment(path.trim()))
                .collect()
        } else {
            vec![first_segment(rest)]
        };
        for first in firsts {
            if modules.contains(&first) {
                uses.insert(first);
            } else if let Some(module) = roots.get(&first) {
                uses.insert(module.clone());
            }
        }
    }
    uses
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// `source` with comments, string literals and character literals blanked out.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F}'), or a lifetime ('a), kept.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` (already without comments and strings) without the modules compiled only for
/// tests: `#[cfg(test)]`, `#[cfg(all(test, ...))]` and the like before `mod name {`.
fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(") {
        out.push_str(&rest[..at]);
        let attribute = &rest[at..];
        let Some(end) = matching(attribute, "#[cfg".len()) else {
            out.push_str(attribute);
            return out;
        };
        let predicate = &attribute["#[cfg(".len()..end];
        let after = attribute[end + 1..].trim_start_matches(']').trim_start();
        let is_module = after.starts_with("mod ") || after.starts_with("pub(crate) mod ");
        if requires_test(predicate) && is_module {
            if let Some(open) = after.find('{') {
                if let Some(close) = matching(after, open) {
                    rest = &after[close + 1..];
                    continue;
                }
            }
        }
        out.push_str(&attribute[..end + 1]);
        rest = &attribute[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Whether a `cfg` predicate holds only when compiling tests: `test`, or `all(..)` with
/// `test` among its arguments.
fn requires_test(predicate: &str) -> bool {
    let predicate: String = predicate.chars().filter(|c| !c.is_whitespace()).collect();
    if predicate == "test" {
        return true;
    }
    let Some(arguments) = predicate
        .strip_prefix("all(")
        .and_then(|p| p.strip_suffix(')'))
    else {
        return false;
    };
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in arguments.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&arguments[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&arguments[start..]);
    parts.iter().any(|part| requires_test(part))
}

/// The index of the bracket closing the one at `open` in `text`.
fn matching(text: &str, open: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let (opening, closing) = match bytes[open] {
        b'(' => (b'(', b')'),
        b'{' => (b'{', b'}'),
        b'[' => (b'[', b']'),
        _ => return None,
    };
    let mut depth = 0;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if b == opening {
            depth += 1;
        } else if b == closing {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The first cycle found, as the modules along it with the first repeated at the end.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit<'a>(
        node: &'a str,
        graph: &'a Graph,
        marks: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        marks.insert(node, Mark::OnPath);
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if next == node {
                continue;
            }
            match marks.get(next.as_str()).copied().unwrap_or(Mark::New) {
                Mark::OnPath => {
                    let from = path.iter().position(|n| *n == next).unwrap();
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|n| n.to_string()).collect();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, graph, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(node, Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if marks.get(node.as_str()).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

fn describe(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(module, uses)| {
            let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
            format!("  {module} uses {}", uses.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}
