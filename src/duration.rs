//! Durations: Prometheus' syntax (`model.Duration`: `1y2w3d4h5m6s7ms`, units in that order, each
//! at most once, or a bare `0`) with one parser, one [`Duration`] type, and Go's
//! `time.ParseDuration` where Alertmanager reads that instead. Rule files, Alertmanager configs,
//! SLO specs and promqltest scripts all write durations this way; each caller words errors as its
//! peer tool does ([`DurationError::prometheus_message`], [`parse_alertmanager`]).

use crate::gofmt::quote_common_invisibles;
use std::fmt;

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

/// A duration in milliseconds, written the Prometheus way. Negative values only arise from
/// arithmetic (offsets); the parsers never produce them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(i64);

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub const fn from_ms(ms: i64) -> Self {
        Duration(ms)
    }

    /// From unsigned milliseconds, saturating at `i64::MAX`.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(if ms > i64::MAX as u64 { i64::MAX } else { ms as i64 })
    }

    pub const fn from_secs(s: u64) -> Self {
        Duration::from_millis(s.saturating_mul(1000))
    }

    pub const fn minutes(m: u64) -> Self {
        Duration::from_millis(m.saturating_mul(60_000))
    }

    pub const fn hours(h: u64) -> Self {
        Duration::from_millis(h.saturating_mul(3_600_000))
    }

    pub const fn days(d: u64) -> Self {
        Duration::from_millis(d.saturating_mul(86_400_000))
    }

    pub const fn ms(self) -> i64 {
        self.0
    }

    /// Milliseconds as unsigned (negative durations count as zero).
    pub const fn as_millis(self) -> u64 {
        if self.0 < 0 {
            0
        } else {
            self.0 as u64
        }
    }

    pub const fn as_secs(self) -> u64 {
        self.as_millis() / 1000
    }

    pub fn as_hours_f64(self) -> f64 {
        self.0 as f64 / 3_600_000.0
    }

    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.as_millis())
    }

    pub fn as_chrono(self) -> chrono::Duration {
        chrono::Duration::milliseconds(self.0)
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Parses Prometheus' duration syntax exactly as `model.ParseDuration` does, with
    /// Prometheus' wording of errors.
    pub fn parse(s: &str) -> Result<Self, String> {
        parse_ms(s).map(Duration).map_err(|e| e.prometheus_message(s))
    }
}

impl fmt::Display for Duration {
    /// `model.Duration.String()`: years and weeks only when exact, `0s` for zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_ms(self.0))
    }
}

impl DurationError {
    /// The message Prometheus (rule files, promtool tests) gives for `s`.
    pub fn prometheus_message(&self, s: &str) -> String {
        match self {
            DurationError::Empty => "empty duration string".into(),
            DurationError::Invalid => format!("not a valid duration string: {s:?}"),
            DurationError::UnknownUnit(unit) => format!("unknown unit {unit:?} in duration {s:?}"),
            DurationError::OutOfRange => "duration out of range".into(),
        }
    }
}

/// `model.ParseDuration` worded as Alertmanager 0.25 words it: its prometheus/common matches the
/// whole string first, so an unknown unit is just "not a valid duration string" there.
pub fn parse_alertmanager(s: &str) -> Result<Duration, String> {
    parse_ms(s).map(Duration).map_err(|e| match e {
        DurationError::Empty => "empty duration string".into(),
        DurationError::Invalid | DurationError::UnknownUnit(_) => {
            format!("not a valid duration string: {}", quote_common_invisibles(s))
        }
        DurationError::OutOfRange => "duration out of range".into(),
    })
}

/// Go's `time.ParseDuration` (`300ms`, `-1.5h`, `2h45m`), to nanoseconds, with Go's messages.
pub fn parse_go_ns(s: &str) -> Result<i128, String> {
    let orig = s;
    let err = || format!("time: invalid duration {}", quote_common_invisibles(orig));
    let (neg, mut s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(err());
    }
    let mut total: f64 = 0.0;
    while !s.is_empty() {
        let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let num = &s[..num_end];
        if num.is_empty() || num == "." {
            return Err(err());
        }
        let v: f64 = num.parse().map_err(|_| err())?;
        s = &s[num_end..];
        let unit_end = s.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(s.len());
        let unit = &s[..unit_end];
        let mult: f64 = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => {
                return Err(format!(
                    "time: missing unit in duration {}",
                    quote_common_invisibles(orig)
                ))
            }
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    quote_common_invisibles(unit),
                    quote_common_invisibles(orig)
                ))
            }
        };
        total += v * mult;
        s = &s[unit_end..];
    }
    if total > i64::MAX as f64 {
        return Err(err());
    }
    Ok(if neg { -(total as i128) } else { total as i128 })
}

/// Go's `time.Duration.String()` for a millisecond duration: `0s`, `500ms`, `1m0s`, `1h2m3.5s`.
pub fn go_duration_string(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let neg = ms < 0;
    let a = ms.unsigned_abs();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if a < 1000 {
        out.push_str(&format!("{a}ms"));
        return out;
    }
    let h = a / 3_600_000;
    let m = (a % 3_600_000) / 60_000;
    let s = (a % 60_000) / 1000;
    let frac = a % 1000;
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&s.to_string());
    if frac > 0 {
        let f = format!("{frac:03}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out.push('s');
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

    // Prometheus wording (rule files, promtool tests)

    #[test]
    fn parses_prometheus_durations() {
        let ok = [
            ("0", 0),
            ("0s", 0),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("1d", 86_400_000),
            ("1w", 604_800_000),
            ("1y", 31_536_000_000),
            ("1s500ms", 1500),
            ("2h0m", 7_200_000),
        ];
        for (s, ms) in ok {
            assert_eq!(Duration::parse(s), Ok(Duration::from_ms(ms)), "{s}");
        }
        for bad in ["", "5", "1.5m", "m", "5m1h", "1h1h", "-1m", "5x", " 5m", "1mm"] {
            assert!(Duration::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(Duration::parse("1000y").unwrap_err().contains("out of range"));
        assert!(Duration::parse("5x").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn formats_like_model_duration() {
        let cases = [
            (0, "0s"),
            (60_000, "1m"),
            (5_400_000, "1h30m"),
            (86_400_000, "1d"),
            (604_800_000, "1w"),
            (90 * 86_400_000, "90d"),
            (31_536_000_000, "1y"),
            (1500, "1s500ms"),
        ];
        for (ms, s) in cases {
            assert_eq!(Duration::from_ms(ms).to_string(), s);
        }
    }

    #[test]
    fn formats_like_go_duration() {
        assert_eq!(go_duration_string(0), "0s");
        assert_eq!(go_duration_string(500), "500ms");
        assert_eq!(go_duration_string(60_000), "1m0s");
        assert_eq!(go_duration_string(3_723_500), "1h2m3.5s");
        assert_eq!(go_duration_string(86_400_000), "24h0m0s");
    }

    // Alertmanager wording and Go durations

    #[test]
    fn parses_like_alertmanager() {
        assert_eq!(parse_alertmanager("0"), Ok(Duration::from_ms(0)));
        assert_eq!(parse_alertmanager("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_alertmanager("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_alertmanager("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_alertmanager("1w2d"), Ok(Duration::from_secs(9 * 86400)));
        assert_eq!(parse_alertmanager("100ms"), Ok(Duration::from_ms(100)));
        assert_eq!(parse_alertmanager("1m1ms"), Ok(Duration::from_ms(60_001)));
        assert_eq!(parse_alertmanager(""), Err("empty duration string".into()));
        assert_eq!(
            parse_alertmanager("1.5h"),
            Err("not a valid duration string: \"1.5h\"".into())
        );
        assert!(parse_alertmanager("30m1h").is_err());
        assert!(parse_alertmanager("1h1h").is_err());
        assert!(parse_alertmanager("5").is_err());
        assert!(parse_alertmanager("-5m").is_err());
        assert_eq!(parse_alertmanager("300y"), Err("duration out of range".into()));
    }

    #[test]
    fn prints_like_alertmanager() {
        assert_eq!(Duration::from_ms(0).to_string(), "0s");
        assert_eq!(Duration::from_secs(5400).to_string(), "1h30m");
        assert_eq!(Duration::from_secs(90 * 86400).to_string(), "90d");
        assert_eq!(Duration::from_secs(14 * 86400).to_string(), "2w");
        assert_eq!(Duration::from_ms(1500).to_string(), "1s500ms");
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_ns("1m30s"), Ok(90_000_000_000));
        assert_eq!(parse_go_ns("1.5h"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_ns("0"), Ok(0));
        assert!(parse_go_ns("1d").is_err());
        assert!(parse_go_ns("10").is_err());
    }
}
