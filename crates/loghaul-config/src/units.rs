//! Sizes (`64KiB`, `1MiB`, `100KB`, `512`) and durations (`500ms`, `30s`, `1m30s`).
//!
//! Both are strict: a size unit is spelled out (`KB` is 1000 bytes, `KiB` 1024, case does not
//! matter), and a duration needs a unit because a bare `30` could mean seconds or milliseconds.

use std::time::Duration;

/// The hint printed for a bad size.
pub const SIZE_HINT: &str =
    "write a size like 512, 64KiB, 1MiB or 100KB (KB = 1000 bytes, KiB = 1024)";

/// The hint printed for a bad duration.
pub const DURATION_HINT: &str = "write a duration like 500ms, 30s, 5m, 1h or 1m30s";

/// Parses a size in bytes.
///
/// # Errors
///
/// A message naming what is wrong; pair it with `SIZE_HINT`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "invalid size `{text}`: expected a number of bytes with an optional unit"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("size `{text}` is too large"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" => 1 << 10,
        "mb" => 1000 * 1000,
        "mib" => 1 << 20,
        "gb" => 1000 * 1000 * 1000,
        "gib" => 1 << 30,
        "tb" => 1000 * 1000 * 1000 * 1000,
        "tib" => 1 << 40,
        other => return Err(format!("invalid size `{text}`: unknown unit `{other}`")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size `{text}` is too large"))
}

/// Parses a duration: one or more `<integer><unit>` pairs, units `ms`, `s`, `m`, `h`, `d`.
///
/// # Errors
///
/// A message naming what is wrong; pair it with `DURATION_HINT`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".to_owned());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("duration `{text}` has no unit"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, tail) = rest.split_at(split);
        if digits.is_empty() {
            return Err(format!("invalid duration `{text}`"));
        }
        let unit_len = tail
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("duration `{text}` is too large"))?;
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86400)),
            "" => return Err(format!("duration `{text}` has a number without a unit")),
            other => return Err(format!("invalid duration `{text}`: unknown unit `{other}`")),
        };
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("duration `{text}` is too large"))?;
        rest = tail;
    }
    Ok(total)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("100KB"), Ok(100_000));
        assert_eq!(parse_size("4 mib"), Ok(4 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("10B"), Ok(10));
        assert!(
            parse_size("12XB")
                .unwrap_err()
                .contains("unknown unit `xb`")
        );
        assert!(parse_size("KiB").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("1.5MiB").is_err());
        assert!(
            parse_size("99999999999999999999")
                .unwrap_err()
                .contains("too large")
        );
        assert!(parse_size("20000000TiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(
            parse_duration("1h2m3s4ms"),
            Ok(Duration::from_millis(3_723_004))
        );
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("30 s").is_err());
        assert!(
            parse_duration("3x")
                .unwrap_err()
                .contains("unknown unit `x`")
        );
        assert!(parse_duration("s").is_err());
        assert!(
            parse_duration("1m30")
                .unwrap_err()
                .contains("without a unit")
        );
        assert!(parse_duration("").is_err());
    }
}
