//! Durations as Alertmanager's configuration writes them: Prometheus' `model.Duration`
//! (`1d`, `1h30m`, `0`) and Go's `time.ParseDuration` (`1m30s`, `1.5h`) where Alertmanager uses it.

use std::fmt;
use std::time::Duration as StdDuration;

/// A non-negative duration with millisecond precision (`model.Duration`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub u64 /* ms */);

impl Duration {
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms)
    }
    pub const fn from_secs(s: u64) -> Self {
        Duration(s * 1000)
    }
    pub const fn as_millis(self) -> u64 {
        self.0
    }
    pub fn as_std(self) -> StdDuration {
        StdDuration::from_millis(self.0)
    }
    pub fn as_chrono(self) -> chrono::Duration {
        chrono::Duration::milliseconds(self.0.min(i64::MAX as u64) as i64)
    }
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

/// `model.ParseDuration`: `((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?` or `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    use crate::duration::DurationError;
    // Alertmanager 0.25's prometheus/common matches the whole string first, so an unknown unit
    // is just "not a valid duration string" there.
    crate::duration::parse_ms(s)
        .map(|ms| Duration(ms as u64))
        .map_err(|e| match e {
            DurationError::Empty => "empty duration string".into(),
            DurationError::Invalid | DurationError::UnknownUnit(_) => {
                format!(
                    "not a valid duration string: {}",
                    crate::gofmt::quote_common_invisibles(s)
                )
            }
            DurationError::OutOfRange => "duration out of range".into(),
        })
}

impl fmt::Display for Duration {
    /// `model.Duration.String()`: `0s`, `1d`, `1h30m`, `90d` (years and weeks only when exact).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::duration::format_ms(self.0.min(i64::MAX as u64) as i64))
    }
}

/// Go's `time.ParseDuration` (`300ms`, `-1.5h`, `2h45m`), to nanoseconds.
pub fn parse_go_duration(s: &str) -> Result<i128, String> {
    let orig = s;
    let err = || format!("time: invalid duration {}", crate::gofmt::quote_common_invisibles(orig));
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
                    crate::gofmt::quote_common_invisibles(orig)
                ))
            }
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    crate::gofmt::quote_common_invisibles(unit),
                    crate::gofmt::quote_common_invisibles(orig)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_durations() {
        assert_eq!(parse_duration("0"), Ok(Duration(0)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_duration("1w2d"), Ok(Duration::from_secs(9 * 86400)));
        assert_eq!(parse_duration("100ms"), Ok(Duration(100)));
        assert_eq!(parse_duration("1m1ms"), Ok(Duration(60_001)));
        assert_eq!(parse_duration(""), Err("empty duration string".into()));
        assert_eq!(
            parse_duration("1.5h"),
            Err("not a valid duration string: \"1.5h\"".into())
        );
        assert!(parse_duration("30m1h").is_err());
        assert!(parse_duration("1h1h").is_err());
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-5m").is_err());
        assert_eq!(parse_duration("300y"), Err("duration out of range".into()));
    }

    #[test]
    fn prints_like_model_duration() {
        assert_eq!(Duration(0).to_string(), "0s");
        assert_eq!(Duration::from_secs(5400).to_string(), "1h30m");
        assert_eq!(Duration::from_secs(90 * 86400).to_string(), "90d");
        assert_eq!(Duration::from_secs(14 * 86400).to_string(), "2w");
        assert_eq!(Duration(1500).to_string(), "1s500ms");
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_duration("1m30s"), Ok(90_000_000_000));
        assert_eq!(parse_go_duration("1.5h"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert!(parse_go_duration("1d").is_err());
        assert!(parse_go_duration("10").is_err());
    }
}
