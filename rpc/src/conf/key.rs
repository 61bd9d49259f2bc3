//! What a crate says about each key it reads: the table entry ([`KeyInfo`]) and the
//! handles its readers take ([`Key`], [`OptionalKey`]), looked up in the table when the
//! crate is built.

use std::fmt;

/// The unit of a bare number in a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Secs,
}

impl TimeUnit {
    /// The suffix that means this unit.
    pub fn suffix(self) -> &'static str {
        match self {
            TimeUnit::Micros => "us",
            TimeUnit::Millis => "ms",
            TimeUnit::Secs => "s",
        }
    }
}

/// What kind of value a key takes, and the unit of a bare number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A duration such as `120s`; a bare number is in the given unit.
    Duration(TimeUnit),
    /// A size such as `128m`; a bare number is bytes.
    Bytes,
    /// A size such as `128m`; a bare number is MiB.
    Mebibytes,
    /// A whole number.
    Count,
    /// `true` or `false`.
    Bool,
    /// A number between 0.0 and 1.0.
    Fraction,
    /// A number with a fraction, such as `1.5`.
    Number,
    /// One of a few words, in any case.
    Choice(&'static [&'static str]),
    /// An IP address.
    Address,
    /// A port number.
    Port,
    /// Free text (a path, a secret).
    Text,
}

impl Unit {
    /// The bytes a bare number stands for, for sizes.
    pub(crate) fn bare_bytes(self) -> u64 {
        match self {
            Unit::Mebibytes => 1 << 20,
            _ => 1,
        }
    }

    /// The unit of a bare number, for durations.
    pub(crate) fn bare_time(self) -> TimeUnit {
        match self {
            Unit::Duration(unit) => unit,
            _ => TimeUnit::Secs,
        }
    }
}

impl fmt::Display for Unit {
    /// How `flint conf` names the unit: `duration (ms)` says a bare number is in
    /// milliseconds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Duration(unit) => write!(f, "duration ({})", unit.suffix()),
            Unit::Bytes => f.write_str("size (bytes)"),
            Unit::Mebibytes => f.write_str("size (MiB)"),
            Unit::Count => f.write_str("count"),
            Unit::Bool => f.write_str("true|false"),
            Unit::Fraction => f.write_str("0.0..1.0"),
            Unit::Number => f.write_str("number"),
            Unit::Choice(words) => f.write_str(&words.join("|")),
            Unit::Address => f.write_str("IP address"),
            Unit::Port => f.write_str("port"),
            Unit::Text => f.write_str("text"),
        }
    }
}

/// A key a crate reads, with its default, unit and what it means: one row of the crate's
/// key table.
///
/// Each crate keeps one table (`flint_rpc::conf::KEYS`, the scheduler's and the
/// executor's), the one place its keys and their defaults are written; its readers take
/// [`Key`]s looked up in that table, so a reader of a key that is not in the table does
/// not compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key, without the `spark.` prefix.
    pub key: &'static str,
    /// The value the key has when it is not set, as it would be written in a `Conf`;
    /// `None` when there is no fixed default (`doc` says what happens then).
    pub default: Option<&'static str>,
    /// What a value is, and the unit of a bare number.
    pub unit: Unit,
    /// What the key does, in one line.
    pub doc: &'static str,
}

impl KeyInfo {
    /// A table row.
    pub const fn new(
        key: &'static str,
        default: Option<&'static str>,
        unit: Unit,
        doc: &'static str,
    ) -> KeyInfo {
        KeyInfo {
            key,
            default,
            unit,
            doc,
        }
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The row of `key` in `table`; used in constants, where a key missing from the table
/// fails the build.
pub const fn find(table: &'static [KeyInfo], key: &str) -> &'static KeyInfo {
    let mut i = 0;
    while i < table.len() {
        if str_eq(table[i].key, key) {
            return &table[i];
        }
        i += 1;
    }
    panic!("a reader reads a key that is missing from its crate's key table")
}

/// A key with a fixed default, as a reader takes it.
///
/// ```
/// use flint_rpc::conf::{Conf, Key, KeyInfo, TimeUnit, Unit};
///
/// const KEYS: &[KeyInfo] = &[KeyInfo::new(
///     "myapp.flushInterval",
///     Some("5s"),
///     Unit::Duration(TimeUnit::Secs),
///     "How often myapp flushes.",
/// )];
/// const FLUSH_INTERVAL: Key = Key::of(KEYS, "myapp.flushInterval");
///
/// let conf = Conf::from_pairs(["myapp.flushInterval=250ms"])?;
/// assert_eq!(conf.duration(FLUSH_INTERVAL)?, std::time::Duration::from_millis(250));
/// assert_eq!(Conf::new().duration(FLUSH_INTERVAL)?, std::time::Duration::from_secs(5));
/// # Ok::<(), flint_rpc::conf::ConfError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key(&'static KeyInfo);

impl Key {
    /// The key `name` of `table`; in a constant, a key missing from the table, or without
    /// a default there, fails the build.
    pub const fn of(table: &'static [KeyInfo], name: &str) -> Key {
        let info = find(table, name);
        if info.default.is_none() {
            panic!("a reader takes a default that its key table does not give");
        }
        Key(info)
    }

    /// The key's name.
    pub const fn name(self) -> &'static str {
        self.0.key
    }

    /// Its table row.
    pub const fn info(self) -> &'static KeyInfo {
        self.0
    }

    /// Its default, as written in the table.
    pub fn default_value(self) -> &'static str {
        self.0.default.unwrap_or_default()
    }
}

/// A key without a fixed default, as a reader takes it: it reads as `None` when not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalKey(&'static KeyInfo);

impl OptionalKey {
    /// The key `name` of `table`; in a constant, a key missing from the table fails the
    /// build.
    pub const fn of(table: &'static [KeyInfo], name: &str) -> OptionalKey {
        OptionalKey(find(table, name))
    }

    /// The key's name.
    pub const fn name(self) -> &'static str {
        self.0.key
    }

    /// Its table row.
    pub const fn info(self) -> &'static KeyInfo {
        self.0
    }
}
