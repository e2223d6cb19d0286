//! Start timestamps (Prometheus 3.x's `ST`, OpenTelemetry's start time) in the counter
//! functions: `rate`, `increase`, `irate` and `resets` read a reset where a sample's start
//! time says its counter started after the previous sample, and `rate`/`increase` count from
//! a zero at the first sample's start time instead of extrapolating towards the window's start.
//!
//! A start timestamp of 0 is unknown. Only range selectors carry them (subqueries cut them, as
//! in Prometheus); the histogram versions live with the other histogram functions (`native`).

use super::annotations::Annotations;
use super::select::RangeWindow;

/// Prometheus' `isStartTimestampReset`: whether the current sample's start time says its
/// counter restarted since the previous sample.
pub(crate) fn is_reset(prev_st: i64, prev_t: i64, cur_st: i64, cur_t: i64) -> bool {
    // Unknown, invalid (after the sample) or OpenTelemetry's "unknown start" (equal to it).
    if cur_st == 0 || cur_st >= cur_t {
        return false;
    }
    if cur_st != prev_t {
        return cur_st > prev_t;
    }
    // Pointing exactly at the previous sample: a delta point (a reset) unless the previous
    // start is unknown (a cumulative series of unknown start) or invalid.
    prev_st != 0 && prev_st < prev_t
}

/// Prometheus' `checkStartTimeOverlap`: a start time inside the previous sample's interval
/// that is not the previous start time either (neither delta nor cumulative).
pub(crate) fn overlaps(prev_st: i64, prev_t: i64, cur_st: i64) -> bool {
    cur_st != 0 && cur_st < prev_t && cur_st != prev_st
}

/// Warns once per series about overlapping start times among `points` (times) and `sts`.
pub(crate) fn warn_overlap(ann: &Annotations, times: &[i64], sts: &[i64], metric_name: &str, at: &str) {
    let hit = (1..times.len().min(sts.len())).any(|i| overlaps(sts[i - 1], times[i - 1], sts[i]));
    if hit {
        ann.warn(format!(
            "PromQL warning: sample has start time that overlaps with previous sample timestamp for metric \"{metric_name}\"{at}"
        ));
    }
}

/// Where a window's points lie, for the extrapolation of `rate`, `increase` and `delta`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) first_t: i64,
    pub(crate) last_t: i64,
    /// Number of points minus one.
    pub(crate) gaps: usize,
    /// Start timestamp of the first point (0: unknown).
    pub(crate) first_st: i64,
}

/// How to finish a rate: multiply the window's change by `factor`, after adding the first
/// point's value to it when `from_start` (the counter is taken to start from zero at the first
/// point's start time, inside the window).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Extrapolation {
    pub(crate) factor: f64,
    pub(crate) from_start: bool,
}

/// Prometheus' extrapolation in `extrapolatedRate`. `zero_ratio` is the first value over the
/// change (when the change is positive and the first value not negative), which limits the
/// extrapolation towards the start to where a counter would have been zero. `None`: a single
/// point without a usable start time gives no result.
pub(crate) fn extrapolation(
    span: Span,
    w: &RangeWindow,
    is_counter: bool,
    is_rate: bool,
    zero_ratio: impl FnOnce() -> Option<f64>,
) -> Option<Extrapolation> {
    let mut to_start = (span.first_t - w.start) as f64 / 1000.0;
    let mut to_end = (w.end - span.last_t) as f64 / 1000.0;
    let mut sampled = (span.last_t - span.first_t) as f64 / 1000.0;
    let avg_step = if span.gaps > 0 { sampled / span.gaps as f64 } else { 0.0 };
    let threshold = avg_step * 1.1;
    let st = span.first_st;
    let from_start = is_counter && st != 0 && st > w.start && st < span.first_t;
    if from_start {
        // The window's start is exclusive: a start time on it lies outside.
        to_start = 0.0;
        sampled = (span.last_t - st) as f64 / 1000.0;
    } else if span.gaps == 0 {
        return None;
    } else {
        if to_start >= threshold {
            to_start = avg_step / 2.0;
        }
        if is_counter {
            if let Some(r) = zero_ratio() {
                to_start = to_start.min(sampled * r);
            }
        }
    }
    if to_end >= threshold {
        to_end = avg_step / 2.0;
    }
    let mut factor = if sampled != 0.0 {
        (sampled + to_start + to_end) / sampled
    } else {
        1.0
    };
    if is_rate {
        factor /= w.range_ms as f64 / 1000.0;
    }
    Some(Extrapolation { factor, from_start })
}

/// `rate`, `increase`, `irate` or `resets` over float points `s` with start timestamps `sts`
/// (aligned with `s`). `None`: no output for the series.
pub(crate) fn float_range_fn(
    ann: &Annotations,
    name: &str,
    s: &[(i64, f64)],
    sts: &[i64],
    w: &RangeWindow,
    metric_name: &str,
    at: &str,
) -> Option<f64> {
    let st = |i: usize| sts.get(i).copied().unwrap_or(0);
    let reset = |i: usize| s[i].1 < s[i - 1].1 || is_reset(st(i - 1), s[i - 1].0, st(i), s[i].0);
    match name {
        "rate" | "increase" => {
            let (first, last) = (s.first()?, s.last()?);
            let mut change = last.1 - first.1;
            let times: Vec<i64> = s.iter().map(|x| x.0).collect();
            warn_overlap(ann, &times, sts, metric_name, at);
            for i in 1..s.len() {
                if reset(i) {
                    change += s[i - 1].1;
                }
            }
            let span = Span {
                first_t: first.0,
                last_t: last.0,
                gaps: s.len() - 1,
                first_st: st(0),
            };
            let ratio = || (change > 0.0 && first.1 >= 0.0).then(|| first.1 / change);
            let e = extrapolation(span, w, true, name == "rate", ratio)?;
            if e.from_start {
                change += first.1;
            }
            Some(change * e.factor)
        }
        "irate" => {
            let n = s.len();
            if n < 2 {
                return None;
            }
            let ((pt, pv), (lt, lv)) = (s[n - 2], s[n - 1]);
            if lt == pt {
                return None;
            }
            let v = if reset(n - 1) { lv } else { lv - pv };
            Some(v / ((lt - pt) as f64 / 1000.0))
        }
        "resets" => Some((1..s.len()).filter(|&i| reset(i)).count() as f64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(end: i64, range: i64) -> RangeWindow {
        RangeWindow {
            start: end - range,
            end,
            range_ms: range,
            v2: false,
        }
    }

    #[test]
    fn start_time_resets() {
        // Unknown, invalid and "unknown start" (ST == T) are never resets.
        assert!(!is_reset(0, 60_000, 0, 120_000));
        assert!(!is_reset(0, 60_000, 130_000, 120_000));
        assert!(!is_reset(0, 60_000, 120_000, 120_000));
        // Started before the previous sample: the same counter.
        assert!(!is_reset(30_000, 60_000, 30_000, 120_000));
        // Started after the previous sample: a new counter.
        assert!(is_reset(30_000, 60_000, 90_000, 120_000));
        // Delta points (start at the previous sample, whose start is known) reset; a
        // cumulative series of unknown start, or an invalid previous start, does not.
        assert!(is_reset(1, 60_000, 60_000, 120_000));
        assert!(!is_reset(0, 60_000, 60_000, 120_000));
        assert!(!is_reset(60_000, 60_000, 60_000, 120_000));
        assert!(!is_reset(120_000, 60_000, 60_000, 120_000));
    }

    #[test]
    fn overlap_is_neither_delta_nor_cumulative() {
        assert!(!overlaps(60_000, 120_000, 120_000)); // delta
        assert!(!overlaps(30_000, 120_000, 30_000)); // cumulative
        assert!(overlaps(60_000, 120_000, 90_000));
        assert!(!overlaps(60_000, 120_000, 0));
    }

    #[test]
    fn rate_counts_from_a_start_time_inside_the_window() {
        let ann = Annotations::default();
        // One sample at 3m, started at 2m, window (−2m, 3m]: 60 over 60s, a rate of 60/300.
        let w = window(180_000, 300_000);
        let r = float_range_fn(&ann, "rate", &[(180_000, 60.0)], &[120_000], &w, "x", "").unwrap();
        assert!((r - 0.2).abs() < 1e-12, "{r}");
        // Without a start time a single sample gives nothing.
        assert_eq!(
            float_range_fn(&ann, "rate", &[(180_000, 60.0)], &[0], &w, "x", ""),
            None
        );
        // Delta points: each starts at the previous one, every step is a reset.
        let s = [(60_000, 60.0), (120_000, 60.0), (180_000, 60.0)];
        let sts = [0, 60_000, 120_000];
        assert_eq!(float_range_fn(&ann, "resets", &s, &sts, &w, "x", ""), Some(1.0));
        let sts = [1, 60_000, 120_000];
        assert_eq!(float_range_fn(&ann, "resets", &s, &sts, &w, "x", ""), Some(2.0));
        assert_eq!(float_range_fn(&ann, "irate", &s, &sts, &w, "x", ""), Some(1.0));
        let (warnings, _) = ann.into_lists();
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn overlapping_start_times_warn() {
        let ann = Annotations::default();
        let s = [(120_000, 60.0), (180_000, 120.0), (240_000, 180.0)];
        let sts = [0, 0, 1];
        let w = window(240_000, 180_000);
        float_range_fn(&ann, "rate", &s, &sts, &w, "c", " (1:6)");
        let (warnings, _) = ann.into_lists();
        assert_eq!(
            warnings,
            vec!["PromQL warning: sample has start time that overlaps with previous sample timestamp for metric \"c\" (1:6)"]
        );
    }
}
