//! Prometheus durations (`model.Duration`): `1y2w3d4h5m6s7ms`, units in that order, each at
//! most once, or a bare `0`. Kept in milliseconds.

use std::fmt;

/// A duration in milliseconds, written the Prometheus way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(i64);

use crate::duration::DurationError;

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub fn from_ms(ms: i64) -> Self {
        Duration(ms)
    }

    pub fn ms(self) -> i64 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Parses Prometheus' duration syntax exactly as `model.ParseDuration` does.
    pub fn parse(s: &str) -> Result<Self, String> {
        crate::duration::parse_ms(s).map(Duration).map_err(|e| match e {
            DurationError::Empty => "empty duration string".into(),
            DurationError::Invalid => format!("not a valid duration string: {s:?}"),
            DurationError::UnknownUnit(unit) => format!("unknown unit {unit:?} in duration {s:?}"),
            DurationError::OutOfRange => "duration out of range".into(),
        })
    }
}

impl fmt::Display for Duration {
    /// `model.Duration.String()`: years and weeks only when exact, `0s` for zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::duration::format_ms(self.0))
    }
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
            assert_eq!(Duration::parse(s), Ok(Duration(ms)), "{s}");
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
            assert_eq!(Duration(ms).to_string(), s);
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
}
