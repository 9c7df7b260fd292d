//! Sizes in bytes written with a unit: `'512KiB'`, `'64MiB'`, `'10GiB'`, `'1TB'`.

/// What a size option expects, for error messages.
pub(super) const EXPECTED: &str =
    "a size in bytes, such as 1048576, '512KiB', '64MiB', '10GiB' or '1GB'";

/// Parses a size: a whole number of bytes, optionally followed by a unit (`B`, `KB`, `MB`,
/// `GB`, `TB` are powers of 1000; `KiB`, `MiB`, `GiB`, `TiB` powers of 1024; case does not
/// matter, spaces around the unit are allowed). A fraction is allowed with a unit
/// (`'1.5GiB'`); the result is rounded down to a whole byte. `None` for anything else or a
/// size past `u64`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return None,
    };
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return None;
    }
    match number.split_once('.') {
        None => number.parse::<u64>().ok()?.checked_mul(factor),
        Some(_) if factor == 1 => None,
        Some(_) => {
            let value: f64 = number.parse().ok()?;
            let bytes = value * factor as f64;
            (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("10GiB"), Some(10 << 30));
        assert_eq!(parse_size("10 gib"), Some(10 << 30));
        assert_eq!(parse_size("512KiB"), Some(512 << 10));
        assert_eq!(parse_size("1GB"), Some(1_000_000_000));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("64B"), Some(64));
        for bad in [
            "",
            "GiB",
            "1.5",
            "1.GiB",
            ".5GiB",
            "10 parsecs",
            "-1MiB",
            "1e9",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(parse_size("99999999999TiB"), None);
    }
}
