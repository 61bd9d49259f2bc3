//! The generic readers (on a table of made-up keys) and the transport's keys.

use std::net::IpAddr;
use std::time::Duration;

use super::*;

const MIB: usize = 1 << 20;

/// Keys of every kind, for the generic readers: the transport has no millisecond
/// duration, fraction or number of its own.
const TEST_KEYS: &[KeyInfo] = &[
    KeyInfo::new("test.bool", Some("false"), Unit::Bool, "A boolean."),
    KeyInfo::new("test.count", Some("1"), Unit::Count, "A count."),
    KeyInfo::new("test.fraction", Some("0.75"), Unit::Fraction, "A fraction."),
    KeyInfo::new(
        "test.millis",
        Some("3s"),
        Unit::Duration(TimeUnit::Millis),
        "A duration in milliseconds when bare.",
    ),
    KeyInfo::new("test.number", Some("1.5"), Unit::Number, "A number."),
    KeyInfo::new(
        "test.optionalCount",
        None,
        Unit::Count,
        "A count with no default.",
    ),
    KeyInfo::new(
        "test.poll",
        Some("50us"),
        Unit::Duration(TimeUnit::Micros),
        "A busy poll.",
    ),
    KeyInfo::new("test.seed", None, Unit::Count, "A 64-bit number."),
    KeyInfo::new("test.size", Some("1g"), Unit::Bytes, "A size."),
];
const BOOL: Key = Key::of(TEST_KEYS, "test.bool");
const COUNT: Key = Key::of(TEST_KEYS, "test.count");
const FRACTION: Key = Key::of(TEST_KEYS, "test.fraction");
const MILLIS: Key = Key::of(TEST_KEYS, "test.millis");
const NUMBER: Key = Key::of(TEST_KEYS, "test.number");
const OPTIONAL_COUNT: OptionalKey = OptionalKey::of(TEST_KEYS, "test.optionalCount");
const POLL: Key = Key::of(TEST_KEYS, "test.poll");
const SEED: OptionalKey = OptionalKey::of(TEST_KEYS, "test.seed");
const SIZE: Key = Key::of(TEST_KEYS, "test.size");

fn conf(pairs: &[(&str, &str)]) -> Conf {
    pairs.iter().copied().collect()
}

/// Asserts that `err` is an invalid-value error whose text names `key` and `value`.
fn assert_names(err: ConfError, key: &str, value: &str) {
    let text = err.to_string();
    assert!(
        matches!(&err, ConfError::InvalidValue { key: k, value: v, .. } if *k == key && v == value),
        "{err:?}"
    );
    assert!(text.contains(key), "{text}");
    assert!(text.contains(&format!("{value:?}")), "{text}");
    assert!(text.contains("expected "), "{text}");
}

#[test]
fn every_transport_getter_has_its_default() {
    let c = Conf::new();
    assert_eq!(c.message_max_size(), Ok(128 * MIB));
    assert_eq!(
        c.message_max_size(),
        Ok(flint_wire::DEFAULT_MAX_MESSAGE_SIZE)
    );
    assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(120)));
    assert_eq!(c.network_timeout(), Ok(Duration::from_secs(120)));
    assert_eq!(c.connect_timeout(), Ok(Duration::from_secs(10)));
    assert_eq!(c.bind_address(), Ok(IpAddr::from([127, 0, 0, 1])));
    assert_eq!(c.port(), Ok(0));
    assert_eq!(c.shutdown_flush_timeout(), Ok(Duration::from_secs(2)));
    assert_eq!(c.rpc_busy_poll(), Ok(Duration::from_micros(50)));
    assert_eq!(c.send_buffer_size(), Ok(None));
    assert_eq!(c.receive_buffer_size(), Ok(None));
    assert_eq!(c.outbox_max_bytes(), Ok(64 * MIB));
    assert_eq!(c.authenticate(), Ok(false));
    assert_eq!(c.authenticate_secret(), None);
    assert_eq!(c.authenticate_timeout(), Ok(Duration::from_secs(10)));
    assert_eq!(c.crypto_enabled(), Ok(false));
    assert_eq!(c.max_connections(), Ok(10_000));
    assert_eq!(c.max_connections_per_host(), Ok(1000));
    assert_eq!(c.max_receive_bytes(), Ok(512 << 20));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn the_table_is_sorted_unique_and_documented_in_one_line() {
    let keys: Vec<_> = KEYS.iter().map(|k| k.key).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(keys, sorted);
    assert_eq!(keys.len(), 19);
    for info in KEYS {
        assert!(!info.doc.is_empty(), "{}", info.key);
        assert!(!info.doc.contains('\n'), "{}", info.key);
        assert!(!info.key.starts_with("spark."), "{}", info.key);
    }
    assert_eq!(
        find(KEYS, "rpc.port").default,
        Some("0"),
        "the table's default"
    );
}

#[test]
fn every_table_default_is_what_its_getter_returns_when_set_explicitly() {
    // Setting each key to its table default changes nothing.
    let explicit: Conf = KEYS
        .iter()
        .filter_map(|k| k.default.map(|d| (k.key, d)))
        .collect();
    let c = Conf::new();
    assert_eq!(explicit.message_max_size(), c.message_max_size());
    assert_eq!(explicit.ask_timeout(), c.ask_timeout());
    assert_eq!(explicit.idle_timeout(), c.idle_timeout());
    assert_eq!(explicit.outbox_max_bytes(), c.outbox_max_bytes());
    assert_eq!(explicit.rpc_busy_poll(), c.rpc_busy_poll());
    assert_eq!(explicit.validate(), Ok(()));
}

#[test]
fn units_are_printed_for_a_person() {
    assert_eq!(
        Unit::Duration(TimeUnit::Millis).to_string(),
        "duration (ms)"
    );
    assert_eq!(Unit::Mebibytes.to_string(), "size (MiB)");
    assert_eq!(Unit::Choice(&["FIFO", "FAIR"]).to_string(), "FIFO|FAIR");
}

#[test]
fn spark_prefix_is_the_same_key() {
    let mut c = Conf::new();
    c.set("spark.rpc.port", "2");
    assert_eq!(c.get("rpc.port"), Some("2"));
    assert_eq!(c.get("spark.rpc.port"), Some("2"));
    assert_eq!(c.port(), Ok(2));
    c.set("rpc.port", "3");
    assert_eq!(c.len(), 1);
    assert_eq!(c.port(), Ok(3));
    assert_eq!(c.remove("spark.rpc.port").as_deref(), Some("3"));
    assert!(c.is_empty());
    assert_eq!(c.port(), Ok(0));

    let c = Conf::from_pairs([
        "spark.rpc.message.maxSize=256",
        "spark.test.count=7",
        " spark.network.timeout =30s",
    ])
    .unwrap();
    assert_eq!(c.message_max_size(), Ok(256 * MIB));
    assert_eq!(c.count(COUNT, 1), Ok(7));
    assert_eq!(c.network_timeout(), Ok(Duration::from_secs(30)));
    // Only one leading prefix is dropped, and a bare "spark." is a key of its own.
    assert_eq!(normalize("spark.spark.x"), "spark.x");
    assert_eq!(normalize("spark."), "spark.");
}

#[test]
fn parse_pair_and_from_pairs() {
    assert_eq!(
        Conf::parse_pair("spark.authenticate.secret=a=b"),
        Ok(("authenticate.secret".into(), "a=b".into()))
    );
    assert_eq!(
        Conf::parse_pair("task.cpus="),
        Ok(("task.cpus".into(), String::new()))
    );
    let err = Conf::parse_pair("task.cpus").unwrap_err();
    assert_eq!(
        err,
        ConfError::MissingEquals {
            pair: "task.cpus".into()
        }
    );
    assert_eq!(
        err.to_string(),
        r#"invalid --conf "task.cpus": expected key=value, but there is no '='"#
    );
    let err = Conf::parse_pair(" =2").unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"invalid --conf " =2": expected key=value, but the key is empty"#
    );
    assert!(Conf::from_pairs(["task.cpus=2", "oops"]).is_err());

    // A later setting wins.
    let c = Conf::from_pairs(["test.count=2", "spark.test.count=5"]).unwrap();
    assert_eq!(c.count(COUNT, 1), Ok(5));
}

#[test]
fn iteration_is_sorted_and_printing_redacts_secrets() {
    let c = conf(&[
        ("task.cpus", "2"),
        ("spark.authenticate.secret", "hunter2"),
        ("authenticate", "true"),
        ("my.token", "t"),
    ]);
    assert_eq!(
        c.iter().collect::<Vec<_>>(),
        [
            ("authenticate", "true"),
            ("authenticate.secret", "hunter2"),
            ("my.token", "t"),
            ("task.cpus", "2"),
        ]
    );
    assert_eq!(
        c.iter_redacted().collect::<Vec<_>>(),
        [
            ("authenticate", "true"),
            ("authenticate.secret", REDACTED),
            ("my.token", REDACTED),
            ("task.cpus", "2"),
        ]
    );
    let debug = format!("{c:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(debug.contains("task.cpus"), "{debug}");
    assert_eq!(c.authenticate_secret(), Some("hunter2"));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn keys_no_crate_reads_are_kept() {
    let c = conf(&[("task.cpu", "2"), ("spark.foo.bar", "x")]);
    assert_eq!(c.get("foo.bar"), Some("x"));
    assert_eq!(c.get("task.cpu"), Some("2"));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn duration_units() {
    let cases = [
        ("500us", Duration::from_micros(500)),
        ("100ms", Duration::from_millis(100)),
        ("120s", Duration::from_secs(120)),
        ("2m", Duration::from_secs(120)),
        ("2min", Duration::from_secs(120)),
        ("1h", Duration::from_secs(3600)),
        ("1d", Duration::from_secs(86_400)),
        ("10S", Duration::from_secs(10)),
        ("2MIN", Duration::from_secs(120)),
        (" 7s ", Duration::from_secs(7)),
    ];
    for (value, expected) in cases {
        let c = conf(&[("network.timeout", value), ("test.millis", value)]);
        assert_eq!(c.network_timeout(), Ok(expected), "{value}");
        assert_eq!(c.duration(MILLIS), Ok(expected), "{value}");
    }
}

#[test]
fn durations_are_at_most_100_years() {
    let c = conf(&[
        ("network.timeout", "36500d"),
        ("rpc.connect.timeout", "36500d"),
    ]);
    assert_eq!(c.network_timeout(), Ok(MAX_DURATION));
    assert_eq!(c.connect_timeout(), Ok(MAX_DURATION));
    // One past the bound, and values whose deadlines would overflow a clock reading
    // (`Instant + Duration` panics): refused, naming key and value.
    for value in [
        "36501d",
        "3153600001",
        "3153600001s",
        "18446744073709551615s",
        "18446744073709551615",
        "18446744073709551615d",
        "99999999999999999999s",
    ] {
        let c = conf(&[("rpc.connect.timeout", value), ("rpc.askTimeout", value)]);
        let err = c.connect_timeout().unwrap_err();
        assert_names(err.clone(), "rpc.connect.timeout", value);
        assert!(err.to_string().contains("at most 36500d"), "{err}");
        assert_names(c.ask_timeout().unwrap_err(), "rpc.askTimeout", value);
        assert_names(c.validate().unwrap_err(), "rpc.askTimeout", value);
        let c = conf(&[("rpc.connect.timeout", value)]);
        assert_names(c.validate().unwrap_err(), "rpc.connect.timeout", value);
    }
    // Millisecond keys are capped alike.
    let c = conf(&[("test.millis", "3153600000001")]);
    assert_names(
        c.duration(MILLIS).unwrap_err(),
        "test.millis",
        "3153600000001",
    );
    let c = conf(&[("test.millis", "3153600000000")]);
    assert_eq!(c.duration(MILLIS), Ok(MAX_DURATION));
}

#[test]
fn bare_durations_take_the_key_unit() {
    let c = conf(&[
        ("network.timeout", "60"),
        ("rpc.askTimeout", "30"),
        ("rpc.connect.timeout", "5"),
        ("rpc.shutdown.flushTimeout", "3"),
        ("authenticate.timeout", "4"),
        ("test.millis", "250"),
        ("test.poll", "20"),
    ]);
    assert_eq!(c.network_timeout(), Ok(Duration::from_secs(60)));
    assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(30)));
    assert_eq!(c.connect_timeout(), Ok(Duration::from_secs(5)));
    assert_eq!(c.shutdown_flush_timeout(), Ok(Duration::from_secs(3)));
    assert_eq!(c.authenticate_timeout(), Ok(Duration::from_secs(4)));
    assert_eq!(c.duration(MILLIS), Ok(Duration::from_millis(250)));
    assert_eq!(c.duration(POLL), Ok(Duration::from_micros(20)));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn bad_durations_name_key_and_value() {
    for value in [
        "12x",
        "",
        "s",
        "1.5s",
        "-1s",
        "1 s",
        "ten",
        "99999999999999999999d",
        "18446744073709551615d",
    ] {
        let c = conf(&[
            ("network.timeout", value),
            ("test.millis", value),
            ("rpc.shutdown.flushTimeout", value),
        ]);
        assert_names(c.network_timeout().unwrap_err(), "network.timeout", value);
        assert_names(c.duration(MILLIS).unwrap_err(), "test.millis", value);
        assert_names(
            c.shutdown_flush_timeout().unwrap_err(),
            "rpc.shutdown.flushTimeout",
            value,
        );
    }
    let c = conf(&[("network.timeout", "12x")]);
    assert_eq!(
        c.network_timeout().unwrap_err().to_string(),
        r#"invalid value "12x" for network.timeout: expected a duration such as 120s, 100ms or 2min"#
    );
    // The ask timeout's fallback reports the key the bad value was set under.
    assert_names(c.ask_timeout().unwrap_err(), "network.timeout", "12x");
}

#[test]
fn busy_polls_take_microseconds_when_bare_zero_and_at_most_a_second() {
    for key in ["rpc.io.busyPoll", "test.poll"] {
        let get = |c: &Conf| {
            if key.starts_with("rpc") {
                c.rpc_busy_poll()
            } else {
                c.busy_poll(POLL)
            }
        };
        for (value, expected) in [
            ("20", Duration::from_micros(20)),
            ("0", Duration::ZERO),
            ("2ms", Duration::from_millis(2)),
            ("1s", Duration::from_secs(1)),
        ] {
            let c = Conf::from_pairs([format!("{key}={value}")]).unwrap();
            assert_eq!(get(&c), Ok(expected), "{key}={value}");
        }
        for value in ["2s", "fast", "-5"] {
            let c = Conf::from_pairs([format!("{key}={value}")]).unwrap();
            let err = get(&c).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(value), "{err}");
        }
    }
    let c = conf(&[("rpc.io.busyPoll", "2s")]);
    assert!(c.validate().is_err());
}

#[test]
fn zero_is_rejected_where_it_would_spin_or_expire_at_once() {
    let zero_keys = [
        "authenticate.timeout",
        "network.timeout",
        "rpc.askTimeout",
        "rpc.connect.timeout",
        "test.millis",
    ];
    let c: Conf = zero_keys.iter().map(|&k| (k, "0s")).collect();
    for (key, result) in [
        ("authenticate.timeout", c.authenticate_timeout()),
        ("network.timeout", c.network_timeout()),
        ("rpc.askTimeout", c.ask_timeout()),
        ("rpc.connect.timeout", c.connect_timeout()),
        ("test.millis", c.positive_duration(MILLIS)),
    ] {
        let err = result.unwrap_err();
        assert_names(err.clone(), key, "0s");
        assert!(err.to_string().contains("above zero"), "{err}");
    }
    // Zero is meaningful for these.
    let c = conf(&[("test.millis", "0"), ("rpc.shutdown.flushTimeout", "0")]);
    assert_eq!(c.shutdown_flush_timeout(), Ok(Duration::ZERO));
    assert_eq!(c.duration(MILLIS), Ok(Duration::ZERO));
}

#[test]
fn ask_timeout_falls_back_to_network_timeout() {
    let c = conf(&[("network.timeout", "45s")]);
    assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(45)));
    assert_eq!(c.ask_timeout_key(), "network.timeout");
    assert_eq!(Conf::new().ask_timeout_key(), "network.timeout");
    let c = conf(&[("network.timeout", "45s"), ("spark.rpc.askTimeout", "5s")]);
    assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(5)));
    assert_eq!(c.ask_timeout_key(), "rpc.askTimeout");
    let c = conf(&[("rpc.askTimeout", "5")]);
    assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(5)));
    assert_eq!(c.network_timeout(), Ok(Duration::from_secs(120)));
    let c = conf(&[("rpc.askTimeout", "soon"), ("network.timeout", "45s")]);
    assert_names(c.ask_timeout().unwrap_err(), "rpc.askTimeout", "soon");
}

#[test]
fn optional_readers_read_none_when_not_set() {
    let c = Conf::new();
    assert_eq!(c.optional_count(OPTIONAL_COUNT, 1), Ok(None));
    assert_eq!(c.optional_u64(SEED), Ok(None));
    let c = conf(&[
        ("test.optionalCount", "8"),
        ("test.seed", "18446744073709551615"),
    ]);
    assert_eq!(c.optional_count(OPTIONAL_COUNT, 1), Ok(Some(8)));
    assert_eq!(c.optional_u64(SEED), Ok(Some(u64::MAX)));
    let c = conf(&[("test.optionalCount", "0"), ("test.seed", "random")]);
    assert_names(
        c.optional_count(OPTIONAL_COUNT, 1).unwrap_err(),
        "test.optionalCount",
        "0",
    );
    assert_names(c.optional_u64(SEED).unwrap_err(), "test.seed", "random");
}

#[test]
fn size_units() {
    let cases = [
        ("10b", 10),
        ("512k", 512 << 10),
        ("512kb", 512 << 10),
        ("128m", 128 << 20),
        ("128MB", 128 << 20),
        ("1g", 1 << 30),
        ("1GB", 1 << 30),
        ("2G", 2 << 30),
        ("1t", 1 << 40),
        ("1tb", 1 << 40),
        ("1p", 1 << 50),
        ("4096", 4096),
        (" 1k ", 1024),
        ("0", 0),
    ];
    for (value, expected) in cases {
        let c = conf(&[("test.size", value)]);
        assert_eq!(c.size(SIZE), Ok(expected), "{value}");
    }
    let c = conf(&[
        ("rpc.io.sendBufferSize", "256k"),
        ("rpc.io.receiveBufferSize", "1048576"),
        ("rpc.outbox.maxBytes", "8m"),
        ("rpc.io.maxReceiveBytes", "2g"),
    ]);
    assert_eq!(c.max_receive_bytes(), Ok(2048 * MIB));
    assert_eq!(c.send_buffer_size(), Ok(Some(256 << 10)));
    assert_eq!(c.receive_buffer_size(), Ok(Some(MIB)));
    assert_eq!(c.outbox_max_bytes(), Ok(8 * MIB));
}

#[test]
fn bad_sizes_name_key_and_value() {
    for value in [
        "12x",
        "",
        "m",
        "1.5g",
        "-1m",
        "1 m",
        "20000000p",
        "99999999999999999999",
    ] {
        let c = conf(&[
            ("test.size", value),
            ("rpc.io.sendBufferSize", value),
            ("rpc.io.receiveBufferSize", value),
            ("rpc.outbox.maxBytes", value),
            ("rpc.io.maxReceiveBytes", value),
        ]);
        assert_names(
            c.max_receive_bytes().unwrap_err(),
            "rpc.io.maxReceiveBytes",
            value,
        );
        assert_names(c.size(SIZE).unwrap_err(), "test.size", value);
        assert_names(
            c.send_buffer_size().unwrap_err(),
            "rpc.io.sendBufferSize",
            value,
        );
        assert_names(
            c.receive_buffer_size().unwrap_err(),
            "rpc.io.receiveBufferSize",
            value,
        );
        assert_names(
            c.outbox_max_bytes().unwrap_err(),
            "rpc.outbox.maxBytes",
            value,
        );
    }
    let c = conf(&[("test.size", "1x")]);
    assert_eq!(
        c.size(SIZE).unwrap_err().to_string(),
        r#"invalid value "1x" for test.size: expected a size such as 128m, 512k or 1g"#
    );
    let c = conf(&[("rpc.outbox.maxBytes", "0")]);
    assert_names(
        c.outbox_max_bytes().unwrap_err(),
        "rpc.outbox.maxBytes",
        "0",
    );
    let c = conf(&[("rpc.io.maxReceiveBytes", "0")]);
    assert_names(
        c.max_receive_bytes().unwrap_err(),
        "rpc.io.maxReceiveBytes",
        "0",
    );
}

#[test]
fn message_max_size_is_mib_when_bare_and_at_most_2047() {
    let c = conf(&[("rpc.message.maxSize", "2047")]);
    assert_eq!(c.message_max_size(), Ok(2047 * MIB));
    let c = conf(&[("rpc.message.maxSize", "1")]);
    assert_eq!(c.message_max_size(), Ok(MIB));
    let c = conf(&[("rpc.message.maxSize", "512k")]);
    assert_eq!(c.message_max_size(), Ok(512 << 10));
    let c = conf(&[("rpc.message.maxSize", "1g")]);
    assert_eq!(c.message_max_size(), Ok(1024 * MIB));
    let c = conf(&[("rpc.message.maxSize", "2047m")]);
    assert_eq!(c.message_max_size(), Ok(2047 * MIB));

    for value in [
        "2048",
        "2048m",
        "2g",
        "2146435073b",
        "4096",
        "99999999999999999999",
        "99999999999p",
    ] {
        let c = conf(&[("spark.rpc.message.maxSize", value)]);
        let err = c.message_max_size().unwrap_err();
        assert_eq!(
            err,
            ConfError::MessageMaxSizeTooLarge {
                value: value.into()
            }
        );
        assert_eq!(
            err.to_string(),
            "rpc.message.maxSize should not be greater than 2047 MB"
        );
    }
    for value in ["0", "0m", "big", "1.5", "-1"] {
        let c = conf(&[("rpc.message.maxSize", value)]);
        assert_names(
            c.message_max_size().unwrap_err(),
            "rpc.message.maxSize",
            value,
        );
    }
}

#[test]
fn fractions_are_bounded() {
    for (value, expected) in [("0", 0.0), ("0.5", 0.5), ("1", 1.0), ("1.0", 1.0)] {
        let c = conf(&[("test.fraction", value)]);
        assert_eq!(c.fraction(FRACTION), Ok(expected));
    }
    assert_eq!(Conf::new().fraction(FRACTION), Ok(0.75));
    for value in ["1.01", "-0.1", "NaN", "inf", "half", ""] {
        let c = conf(&[("test.fraction", value)]);
        let err = c.fraction(FRACTION).unwrap_err();
        assert_names(err.clone(), "test.fraction", value);
        assert!(err
            .to_string()
            .ends_with("expected a number between 0.0 and 1.0"));
    }
}

#[test]
fn positive_numbers_are_positive_and_finite() {
    let c = conf(&[("test.number", "3")]);
    assert_eq!(c.positive_number(NUMBER), Ok(3.0));
    assert_eq!(Conf::new().positive_number(NUMBER), Ok(1.5));
    for value in ["0", "-1.5", "NaN", "inf", "x"] {
        let c = conf(&[("test.number", value)]);
        assert_names(c.positive_number(NUMBER).unwrap_err(), "test.number", value);
    }
}

#[test]
fn counts() {
    let c = conf(&[("test.count", "4"), ("rpc.io.maxConnections", "1")]);
    assert_eq!(c.max_connections(), Ok(1));
    assert_eq!(c.count(COUNT, 1), Ok(4));
    assert_eq!(c.count(COUNT, 0), Ok(4));

    for value in ["0", "-1", "1.5", "two", ""] {
        let c = conf(&[("test.count", value), ("rpc.io.maxConnections", value)]);
        assert_names(c.count(COUNT, 1).unwrap_err(), "test.count", value);
        assert_names(
            c.max_connections().unwrap_err(),
            "rpc.io.maxConnections",
            value,
        );
        let c = conf(&[("rpc.io.maxConnectionsPerHost", value)]);
        assert_names(
            c.max_connections_per_host().unwrap_err(),
            "rpc.io.maxConnectionsPerHost",
            value,
        );
        assert!(c.validate().is_err(), "{value}");
    }
    let c = conf(&[
        ("rpc.io.maxConnections", "50"),
        ("rpc.io.maxConnectionsPerHost", "20"),
    ]);
    assert_eq!(c.max_connections_per_host(), Ok(20));
    let c = conf(&[("test.count", "0")]);
    assert_eq!(c.count(COUNT, 0), Ok(0));
    assert_eq!(
        c.count(COUNT, 1).unwrap_err().to_string(),
        r#"invalid value "0" for test.count: expected a whole number of at least 1"#
    );
    for value in ["-1", "x"] {
        let c = conf(&[("test.count", value)]);
        assert_names(c.count(COUNT, 0).unwrap_err(), "test.count", value);
    }
}

#[test]
fn booleans() {
    for (value, expected) in [
        ("true", true),
        ("TRUE", true),
        ("False", false),
        (" true", true),
    ] {
        let c = conf(&[
            ("test.bool", value),
            ("authenticate", value),
            ("authenticate.secret", "s"),
        ]);
        assert_eq!(c.boolean(BOOL), Ok(expected));
        assert_eq!(c.authenticate(), Ok(expected));
    }
    for value in ["yes", "1", ""] {
        let c = conf(&[("test.bool", value), ("authenticate", value)]);
        assert_names(c.boolean(BOOL).unwrap_err(), "test.bool", value);
        assert_names(c.authenticate().unwrap_err(), "authenticate", value);
    }
    assert_eq!(
        conf(&[("test.bool", "yes")])
            .boolean(BOOL)
            .unwrap_err()
            .to_string(),
        r#"invalid value "yes" for test.bool: expected true or false"#
    );
}

#[test]
fn transport_addresses() {
    let c = conf(&[("rpc.bindAddress", "0.0.0.0"), ("rpc.port", "7077")]);
    assert_eq!(c.bind_address(), Ok(IpAddr::from([0, 0, 0, 0])));
    assert_eq!(c.port(), Ok(7077));
    let c = conf(&[("rpc.bindAddress", "::1")]);
    assert_eq!(c.bind_address(), Ok("::1".parse().unwrap()));
    for value in ["localhost", "300.1.1.1", ""] {
        let c = conf(&[("rpc.bindAddress", value)]);
        assert_names(c.bind_address().unwrap_err(), "rpc.bindAddress", value);
    }
    for value in ["65536", "-1", "http"] {
        let c = conf(&[("rpc.port", value)]);
        assert_names(c.port().unwrap_err(), "rpc.port", value);
    }
}

#[test]
fn idle_timeout_is_twice_the_network_timeout_unless_set() {
    assert_eq!(conf(&[]).idle_timeout(), Ok(Some(Duration::from_secs(240))));
    let c = conf(&[("network.timeout", "30s")]);
    assert_eq!(c.idle_timeout(), Ok(Some(Duration::from_secs(60))));
    let c = conf(&[("network.timeout", "30s"), ("rpc.askTimeout", "50s")]);
    assert_eq!(c.idle_timeout(), Ok(Some(Duration::from_secs(100))));
    let c = conf(&[("network.timeout", "30s"), ("rpc.io.idleTimeout", "45")]);
    assert_eq!(c.idle_timeout(), Ok(Some(Duration::from_secs(45))));
    let c = conf(&[("rpc.io.idleTimeout", "0s")]);
    assert_eq!(c.idle_timeout(), Ok(None));
    for value in ["-1", "soon", ""] {
        let c = conf(&[("rpc.io.idleTimeout", value)]);
        assert_names(c.idle_timeout().unwrap_err(), "rpc.io.idleTimeout", value);
    }
}

#[test]
fn validate_checks_every_transport_key_and_the_rules_between_them() {
    let c = conf(&[("rpc.port", "x")]);
    assert_names(c.validate().unwrap_err(), "rpc.port", "x");
    // Other crates' keys are theirs to check.
    let c = conf(&[("task.cpus", "0")]);
    assert_eq!(c.validate(), Ok(()));

    let c = conf(&[("rpc.io.idleTimeout", "2s"), ("rpc.askTimeout", "1999ms")]);
    assert_eq!(c.validate(), Ok(()));
    let c = conf(&[("rpc.io.idleTimeout", "120s")]);
    let err = c.validate().unwrap_err();
    assert_eq!(
        err,
        ConfError::MustBeGreater {
            key: "rpc.io.idleTimeout",
            value: Duration::from_secs(120),
            than_key: "network.timeout",
            than: Duration::from_secs(120),
        }
    );
    assert_eq!(
        err.to_string(),
        "The value of rpc.io.idleTimeout=120s must be greater than the value of \
         network.timeout=120s"
    );
    let c = conf(&[("rpc.io.idleTimeout", "200s"), ("rpc.askTimeout", "300s")]);
    assert_eq!(
        c.validate().unwrap_err().to_string(),
        "The value of rpc.io.idleTimeout=200s must be greater than the value of \
         rpc.askTimeout=300s"
    );
    // Silent connections kept open: nothing to compare.
    let c = conf(&[("rpc.io.idleTimeout", "0")]);
    assert_eq!(c.validate(), Ok(()));

    let c = conf(&[("authenticate", "true")]);
    assert_eq!(c.validate(), Err(ConfError::MissingSecret));
    let c = conf(&[("authenticate", "true"), ("authenticate.secret", "")]);
    assert_eq!(c.validate(), Err(ConfError::MissingSecret));
    let c = conf(&[("authenticate", "true"), ("authenticate.secret", "s3cr3t")]);
    assert_eq!(c.validate(), Ok(()));

    // Encryption's keys come from the secret: it needs authentication.
    let c = conf(&[("spark.network.crypto.enabled", "true")]);
    let error = c.validate().unwrap_err();
    assert_eq!(error, ConfError::CryptoWithoutAuthentication);
    assert!(
        error.to_string().starts_with(
            "network.crypto.enabled=true needs authenticate=true and an authenticate.secret"
        ),
        "{error}"
    );
    let c = conf(&[
        ("network.crypto.enabled", "true"),
        ("authenticate", "true"),
        ("authenticate.secret", ""),
    ]);
    assert_eq!(c.validate(), Err(ConfError::MissingSecret));
    let c = conf(&[
        ("network.crypto.enabled", " TRUE"),
        ("authenticate", "true"),
        ("authenticate.secret", "s3cr3t"),
    ]);
    assert_eq!((c.crypto_enabled(), c.validate()), (Ok(true), Ok(())));
    let c = conf(&[("network.crypto.enabled", "yes")]);
    assert_eq!(
        c.validate().unwrap_err().to_string(),
        r#"invalid value "yes" for network.crypto.enabled: expected true or false"#
    );
}

#[test]
fn choices_are_refused_in_the_seeds_words() {
    let err = ConfError::Unrecognized {
        key: "scheduler.mode",
        value: "LIFO".into(),
    };
    assert_eq!(err.to_string(), "Unrecognized scheduler.mode: LIFO");
}
