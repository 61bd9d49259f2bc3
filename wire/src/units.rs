//! Byte counts as people read them.

/// A byte count the way Spark prints it: "1024.0 MiB" (a unit is used from twice its
/// size up).
///
/// ```
/// assert_eq!(flint_wire::bytes_to_string(3 << 29), "1536.0 MiB");
/// ```
pub fn bytes_to_string(size: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "PiB"),
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (unit, name) in UNITS {
        if size >= 2 * unit {
            return format!("{:.1} {name}", size as f64 / unit as f64);
        }
    }
    format!("{size}.0 B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_start_at_twice_their_size() {
        assert_eq!(bytes_to_string(100), "100.0 B");
        assert_eq!(bytes_to_string(2048), "2.0 KiB");
        assert_eq!(bytes_to_string(1 << 30), "1024.0 MiB");
        assert_eq!(bytes_to_string(3 << 29), "1536.0 MiB");
        assert_eq!(bytes_to_string(5 << 30), "5.0 GiB");
    }
}
