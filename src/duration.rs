//! Prometheus' duration syntax (`model.Duration`): `1y2w3d4h5m6s7ms`, units in that order, each
//! at most once, or a bare `0`. Rule files, Alertmanager configs, SLO specs and promqltest
//! scripts all write durations this way; each caller words errors as its peer tool does.

/// Units with their length in milliseconds, in the order they must appear.
pub const UNITS: [(&str, i64); 7] = [
    ("y", 365 * 24 * 3_600_000),
    ("w", 7 * 24 * 3_600_000),
    ("d", 24 * 3_600_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1000),
    ("ms", 1),
];

/// The largest duration Go's `time.Duration` holds, in ms (about 292 years).
pub const MAX_MS: i64 = i64::MAX / 1_000_000;

/// Why a duration does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration string")]
    Empty,
    /// Not of the form `<int><unit>...` with units in order.
    #[error("not a valid duration string")]
    Invalid,
    /// A run of letters that is no unit.
    #[error("unknown unit {0:?}")]
    UnknownUnit(String),
    #[error("duration out of range")]
    OutOfRange,
}

/// Parses a `model.Duration` into milliseconds. Syntax errors win over range errors, as in Go,
/// which matches the whole string before it computes anything.
pub fn parse_ms(s: &str) -> Result<i64, DurationError> {
    match s {
        "0" => return Ok(0),
        "" => return Err(DurationError::Empty),
        _ => {}
    }
    let b = s.as_bytes();
    let mut i = 0;
    let mut next_unit = 0;
    let mut total: i64 = 0;
    let mut overflow = false;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(DurationError::Invalid);
        }
        let digits = &s[start..i];
        let ustart = i;
        while i < b.len() && !b[i].is_ascii_digit() {
            i += 1;
        }
        if i == ustart {
            return Err(DurationError::Invalid);
        }
        let unit = &s[ustart..i];
        let Some(pos) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(DurationError::UnknownUnit(unit.to_string()));
        };
        if pos < next_unit {
            return Err(DurationError::Invalid);
        }
        next_unit = pos + 1;
        match digits.parse::<i64>().ok().and_then(|n| n.checked_mul(UNITS[pos].1)) {
            Some(add) if add <= MAX_MS => match total.checked_add(add) {
                Some(t) if t <= MAX_MS => total = t,
                _ => overflow = true,
            },
            _ => overflow = true,
        }
    }
    if overflow {
        return Err(DurationError::OutOfRange);
    }
    Ok(total)
}

/// `model.Duration.String()`: `0s`, `1d`, `1h30m`, `90d`; years and weeks only when exact.
pub fn format_ms(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut ms = ms;
    if ms < 0 {
        out.push('-');
        ms = ms.saturating_neg();
    }
    for (i, (unit, mult)) in UNITS.iter().enumerate() {
        if i < 2 && ms % mult != 0 {
            continue;
        }
        let v = ms / mult;
        if v > 0 {
            out.push_str(&format!("{v}{unit}"));
            ms -= v * mult;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse_ms("1h30m"), Ok(5_400_000));
        assert_eq!(
            parse_ms("1y2w3d4h5m6s7ms"),
            Ok(31_536_000_000 + 1_209_600_000 + 259_200_000 + 14_706_007)
        );
        assert_eq!(parse_ms("0"), Ok(0));
        assert_eq!(parse_ms(""), Err(DurationError::Empty));
        assert_eq!(parse_ms("5m1h"), Err(DurationError::Invalid));
        assert_eq!(parse_ms("1h1h"), Err(DurationError::Invalid));
        assert_eq!(parse_ms("5x"), Err(DurationError::UnknownUnit("x".into())));
        assert_eq!(parse_ms("1.5h"), Err(DurationError::UnknownUnit(".".into())));
        assert_eq!(parse_ms("99999999999999y"), Err(DurationError::OutOfRange));
        assert_eq!(format_ms(5_400_000), "1h30m");
        assert_eq!(format_ms(14 * 24 * 3_600_000), "2w");
        assert_eq!(format_ms(0), "0s");
    }
}
