//! Comparing a query result with an eval command's expectations, with compact diffs.

use std::collections::HashMap;

use crate::labels::Labels;
use crate::promql::{stale_nan, Sample, Series, Value};
use crate::tsdb::notation::SeriesValue;
use crate::tsdb::{CounterResetHint, FloatHistogram};

use super::format::{format_secs3, format_value};
use super::script::{EvalCmd, ExpectedSeries};

/// Relative error allowed for sample values.
pub(crate) const DEFAULT_EPSILON: f64 = 0.000001;

/// Most series shown on each side of a diff.
const MAX_DIFF_SERIES: usize = 10;
/// Most values shown for one series.
const MAX_VALUES: usize = 16;

/// Prometheus' `almost.Equal`: NaN equals NaN, otherwise a relative tolerance of `epsilon`.
pub(crate) fn almost_equal(a: f64, b: f64, epsilon: f64) -> bool {
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let min_normal = f64::from_bits(0x0010_0000_0000_0000);
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < min_normal {
        return diff < epsilon * min_normal;
    }
    diff / abs_sum.min(f64::MAX) < epsilon
}

/// What differs: compact, human-readable renderings of both sides.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mismatch {
    pub expected: String,
    pub got: String,
}

impl Mismatch {
    pub(crate) fn new(expected: impl Into<String>, got: impl Into<String>) -> Self {
        Mismatch {
            expected: expected.into(),
            got: got.into(),
        }
    }
}

/// The time grid expected values are laid on: `start + i*step`, up to `end` (`None`: no room for
/// any point, as for an instant query without `expect range vector`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    pub start: i64,
    pub end: Option<i64>,
    pub step: i64,
}

impl Grid {
    fn time(&self, i: usize) -> i64 {
        self.start + i as i64 * self.step
    }

    fn fits(&self, i: usize) -> bool {
        self.end.is_some_and(|end| self.time(i) <= end)
    }

    fn index_of(&self, t: i64) -> Option<usize> {
        let end = self.end?;
        if t < self.start || t > end {
            return None;
        }
        if self.step <= 0 {
            return (t == self.start).then_some(0);
        }
        let d = t - self.start;
        (d % self.step == 0).then_some((d / self.step) as usize)
    }
}

/// One point's value: a float or a native histogram.
#[derive(Clone, Copy, Debug)]
enum Pt<'a> {
    F(f64),
    H(&'a FloatHistogram),
}

impl Pt<'_> {
    fn matches(self, got: Pt<'_>) -> bool {
        match (self, got) {
            (Pt::F(e), Pt::F(g)) => almost_equal(e, g, DEFAULT_EPSILON),
            (Pt::H(e), Pt::H(g)) => histogram_matches(e, g),
            _ => false,
        }
    }

    fn render(self) -> String {
        match self {
            Pt::F(v) => format_value(v),
            Pt::H(h) => h.test_expression(),
        }
    }
}

/// Histograms compare after compaction, floats within [`DEFAULT_EPSILON`]; the counter reset
/// hint only when the expectation names one.
pub(crate) fn histogram_matches(exp: &FloatHistogram, got: &FloatHistogram) -> bool {
    exp.equals_ignoring_hint(got, DEFAULT_EPSILON)
        && (exp.counter_reset_hint == CounterResetHint::Unknown || exp.counter_reset_hint == got.counter_reset_hint)
}

fn seq_pt(v: &Option<SeriesValue>) -> Option<Pt<'_>> {
    match v {
        None => None,
        Some(SeriesValue::Float(f)) => Some(Pt::F(*f)),
        Some(SeriesValue::Stale) => Some(Pt::F(stale_nan())),
        Some(SeriesValue::Histogram(h)) => Some(Pt::H(h)),
    }
}

fn fmt_seq(v: &Option<SeriesValue>) -> String {
    seq_pt(v).map_or_else(|| "_".to_string(), Pt::render)
}

fn sample_pt(s: &Sample) -> Pt<'_> {
    match &s.h {
        Some(h) => Pt::H(h),
        None => Pt::F(s.v),
    }
}

/// A series' float and histogram points merged in time order.
fn series_points(s: &Series) -> Vec<(i64, Pt<'_>)> {
    let mut pts: Vec<(i64, Pt<'_>)> = s.samples.iter().map(|&(t, v)| (t, Pt::F(v))).collect();
    if !s.histograms.is_empty() {
        pts.extend(s.histograms.iter().map(|(t, h)| (*t, Pt::H(h))));
        pts.sort_by_key(|p| p.0);
    }
    pts
}

/// Renders a list of values, windowed around `focus` when long.
fn fmt_values(vals: &[String], focus: Option<usize>) -> String {
    if vals.len() <= MAX_VALUES {
        return vals.join(" ");
    }
    let f = focus.unwrap_or(0).min(vals.len() - 1);
    let lo = f.saturating_sub(4);
    let hi = (lo + MAX_VALUES).min(vals.len());
    let mut s = String::new();
    if lo > 0 {
        s.push_str(&format!("[{lo} more] ... "));
    }
    s.push_str(&vals[lo..hi].join(" "));
    if hi < vals.len() {
        s.push_str(&format!(" ... [{} more]", vals.len() - hi));
    }
    s
}

/// Joins diff lines, capped at [`MAX_DIFF_SERIES`].
fn join_lines(lines: &[String]) -> String {
    if lines.is_empty() {
        return "(nothing)".into();
    }
    let mut out: Vec<String> = lines.iter().take(MAX_DIFF_SERIES).cloned().collect();
    if lines.len() > MAX_DIFF_SERIES {
        out.push(format!("... and {} more", lines.len() - MAX_DIFF_SERIES));
    }
    out.join("\n")
}

/// A one-line description of what the command expects, for messages.
pub(crate) fn describe_expected(cmd: &EvalCmd) -> String {
    if let Some(v) = cmd.expected_scalar {
        return format!("scalar {}", format_value(v));
    }
    if cmd.expected_series.is_empty() {
        return "empty result".into();
    }
    let lines: Vec<String> = cmd.expected_series.iter().map(fmt_expected_series).collect();
    join_lines(&lines)
}

fn fmt_expected_series(s: &ExpectedSeries) -> String {
    let vals: Vec<String> = s.values.iter().map(fmt_seq).collect();
    format!("{} {}", s.labels, fmt_values(&vals, None))
}

/// A compact description of a value, for messages.
pub(crate) fn describe_value(v: &Value) -> String {
    match v {
        Value::Scalar { v, .. } => format!("scalar {}", format_value(*v)),
        Value::String { s, .. } => format!("string {s:?}"),
        Value::Vector(samples) => {
            if samples.is_empty() {
                return "empty vector".into();
            }
            let lines: Vec<String> = samples
                .iter()
                .map(|s| format!("{} {}", s.metric, sample_pt(s).render()))
                .collect();
            join_lines(&lines)
        }
        Value::Matrix(series) => {
            if series.is_empty() {
                return "empty matrix".into();
            }
            let lines: Vec<String> = series
                .iter()
                .map(|s| {
                    let vals: Vec<String> = series_points(s)
                        .iter()
                        .map(|(t, v)| format!("{}@{}", v.render(), format_secs3(*t)))
                        .collect();
                    format!("{} {}", s.metric, fmt_values(&vals, None))
                })
                .collect();
            join_lines(&lines)
        }
    }
}

/// Compares `value` with the expectations of `cmd`, laying expected values on `grid`.
pub(crate) fn compare_result(cmd: &EvalCmd, grid: Grid, value: &Value) -> Result<(), Mismatch> {
    match value {
        Value::Matrix(series) => {
            if cmd.is_ordered() {
                return Err(Mismatch::new("an ordered result (instant vector)", "a matrix"));
            }
            if cmd.expected_scalar.is_some() {
                return Err(Mismatch::new(
                    describe_expected(cmd),
                    format!("matrix:\n{}", describe_value(value)),
                ));
            }
            check_sorted(series)?;
            compare_matrix(cmd, grid, series)
        }
        Value::Vector(samples) => {
            if cmd.expected_scalar.is_some() {
                return Err(Mismatch::new(
                    describe_expected(cmd),
                    format!("vector:\n{}", describe_value(value)),
                ));
            }
            compare_vector(cmd, samples)
        }
        Value::Scalar { v, .. } => match cmd.expected_scalar {
            None => Err(Mismatch::new(
                format!("vector or matrix result: {}", describe_expected(cmd)),
                format!("scalar {}", format_value(*v)),
            )),
            Some(e) if !almost_equal(e, *v, DEFAULT_EPSILON) => Err(Mismatch::new(
                format!("scalar {}", format_value(e)),
                format!("scalar {}", format_value(*v)),
            )),
            Some(_) => Ok(()),
        },
        Value::String { s, .. } => {
            if *s != cmd.expected_string {
                Err(Mismatch::new(
                    format!("string {:?}", cmd.expected_string),
                    format!("string {s:?}"),
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Prometheus requires matrices sorted by label set.
pub(crate) fn check_sorted(series: &[Series]) -> Result<(), Mismatch> {
    for w in series.windows(2) {
        if w[0].metric > w[1].metric {
            return Err(Mismatch::new(
                "matrix sorted by labels",
                format!("{} before {}", w[0].metric, w[1].metric),
            ));
        }
    }
    Ok(())
}

fn compare_matrix(cmd: &EvalCmd, grid: Grid, series: &[Series]) -> Result<(), Mismatch> {
    let expected: HashMap<&Labels, &ExpectedSeries> = cmd.expected_series.iter().map(|s| (&s.labels, s)).collect();
    let mut exp_lines = Vec::new();
    let mut got_lines = Vec::new();
    let mut seen: HashMap<&Labels, ()> = HashMap::new();

    for s in series {
        let actual = series_points(s);
        let Some(exp) = expected.get(&s.metric) else {
            got_lines.push(format!(
                "{} {} (unexpected)",
                s.metric,
                render_actual(grid, &actual, None)
            ));
            continue;
        };
        seen.insert(&s.metric, ());
        // Expected points, as (time, value), skipping `_`.
        let mut points = Vec::new();
        let mut overflow = false;
        for (i, v) in exp.values.iter().enumerate() {
            if !grid.fits(i) {
                overflow = true;
                break;
            }
            if let Some(f) = seq_pt(v) {
                points.push((grid.time(i), f));
            }
        }
        let exp_vals: Vec<String> = exp.values.iter().map(fmt_seq).collect();
        if overflow {
            exp_lines.push(format!(
                "{} {} ({} points; the query range has room for fewer)",
                s.metric,
                fmt_values(&exp_vals, None),
                exp.values.len()
            ));
            got_lines.push(format!("{} {}", s.metric, render_actual(grid, &actual, None)));
            continue;
        }
        let differs = |(e, a): (&(i64, Pt<'_>), &(i64, Pt<'_>))| e.0 != a.0 || !e.1.matches(a.1);
        let first_diff = if points.len() != actual.len() {
            Some(
                points
                    .iter()
                    .zip(&actual)
                    .position(differs)
                    .unwrap_or(points.len().min(actual.len())),
            )
        } else {
            points.iter().zip(&actual).position(differs)
        };
        if let Some(k) = first_diff {
            // Focus the rendering on the grid index of the first difference.
            let t = points.get(k).map(|p| p.0).or_else(|| actual.get(k).map(|p| p.0));
            let focus = t.and_then(|t| grid.index_of(t));
            exp_lines.push(format!("{} {}", s.metric, fmt_values(&exp_vals, focus)));
            got_lines.push(format!("{} {}", s.metric, render_actual(grid, &actual, focus)));
        }
    }
    for exp in &cmd.expected_series {
        if !seen.contains_key(&exp.labels) {
            exp_lines.push(fmt_expected_series(exp));
            got_lines.push(format!("{} (missing)", exp.labels));
        }
    }
    if exp_lines.is_empty() && got_lines.is_empty() {
        return Ok(());
    }
    Err(Mismatch::new(join_lines(&exp_lines), join_lines(&got_lines)))
}

/// Renders actual points on the grid (`_` where there is none); points off the grid as `v@t`.
fn render_actual(grid: Grid, samples: &[(i64, Pt<'_>)], focus: Option<usize>) -> String {
    let mut on_grid: Vec<Option<Pt<'_>>> = Vec::new();
    let mut off = Vec::new();
    for &(t, v) in samples {
        match grid.index_of(t) {
            Some(i) => {
                if on_grid.len() <= i {
                    on_grid.resize(i + 1, None);
                }
                on_grid[i] = Some(v);
            }
            None => off.push(format!("{}@{}", v.render(), format_secs3(t))),
        }
    }
    let vals: Vec<String> = on_grid
        .iter()
        .map(|v| v.map_or_else(|| "_".to_string(), Pt::render))
        .collect();
    let mut s = fmt_values(&vals, focus);
    if !off.is_empty() {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(&fmt_values(&off, None));
    }
    if s.is_empty() {
        s = "(no points)".into();
    }
    s
}

fn compare_vector(cmd: &EvalCmd, samples: &[Sample]) -> Result<(), Mismatch> {
    let expected: HashMap<&Labels, &ExpectedSeries> = cmd.expected_series.iter().map(|s| (&s.labels, s)).collect();
    let ordered = cmd.is_ordered();
    let mut exp_lines = Vec::new();
    let mut got_lines = Vec::new();
    let mut seen: HashMap<&Labels, ()> = HashMap::new();
    for (pos, s) in samples.iter().enumerate() {
        let got = sample_pt(s);
        let Some(exp) = expected.get(&s.metric) else {
            got_lines.push(format!("{} {} (unexpected)", s.metric, got.render()));
            continue;
        };
        seen.insert(&s.metric, ());
        let exp0 = exp.values.first().and_then(seq_pt).unwrap_or(Pt::F(0.0));
        if ordered && exp.pos != pos + 1 {
            exp_lines.push(format!("{} {} at position {}", s.metric, exp0.render(), exp.pos));
            got_lines.push(format!("{} {} at position {}", s.metric, got.render(), pos + 1));
            continue;
        }
        if !exp0.matches(got) {
            exp_lines.push(format!("{} {}", s.metric, exp0.render()));
            got_lines.push(format!("{} {}", s.metric, got.render()));
        }
    }
    for exp in &cmd.expected_series {
        if !seen.contains_key(&exp.labels) {
            exp_lines.push(fmt_expected_series(exp));
            got_lines.push(format!("{} (missing)", exp.labels));
        }
    }
    if exp_lines.is_empty() && got_lines.is_empty() {
        return Ok(());
    }
    Err(Mismatch::new(join_lines(&exp_lines), join_lines(&got_lines)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promqltest::script::RangeSpec;

    fn series(labels: &[(&str, &str)], pos: usize, vals: &[Option<f64>]) -> ExpectedSeries {
        ExpectedSeries {
            pos,
            labels: Labels::from_pairs(labels.iter().copied()),
            values: vals.iter().map(|v| v.map(SeriesValue::Float)).collect(),
        }
    }

    fn sample(labels: &[(&str, &str)], v: f64) -> Sample {
        Sample {
            h: None,
            metric: Labels::from_pairs(labels.iter().copied()),
            t: 0,
            v,
            drop_name: false,
        }
    }

    const INSTANT: Grid = Grid {
        start: 0,
        end: None,
        step: 0,
    };

    #[test]
    fn almost_equal_semantics() {
        assert!(almost_equal(f64::NAN, f64::NAN, DEFAULT_EPSILON));
        assert!(almost_equal(stale_nan(), f64::NAN, DEFAULT_EPSILON));
        assert!(!almost_equal(f64::NAN, 1.0, DEFAULT_EPSILON));
        assert!(almost_equal(1.0, 1.0 + 1e-7, DEFAULT_EPSILON));
        assert!(!almost_equal(1.0, 1.0 + 1e-5, DEFAULT_EPSILON));
        assert!(almost_equal(1e20, 1e20 * (1.0 + 1e-7), DEFAULT_EPSILON));
        assert!(!almost_equal(0.0, 1e-300, DEFAULT_EPSILON));
        assert!(almost_equal(0.0, -0.0, DEFAULT_EPSILON));
        assert!(almost_equal(f64::INFINITY, f64::INFINITY, DEFAULT_EPSILON));
        assert!(!almost_equal(f64::INFINITY, f64::NEG_INFINITY, DEFAULT_EPSILON));
    }

    #[test]
    fn vector_unordered_and_ordered() {
        let mut cmd = EvalCmd {
            expected_series: vec![
                series(&[("a", "1")], 1, &[Some(1.0)]),
                series(&[("a", "2")], 2, &[Some(2.0)]),
            ],
            ..Default::default()
        };
        let v = Value::Vector(vec![sample(&[("a", "2")], 2.0), sample(&[("a", "1")], 1.0000001)]);
        assert_eq!(compare_result(&cmd, INSTANT, &v), Ok(()));
        cmd.expects.ordered = true;
        let err = compare_result(&cmd, INSTANT, &v).unwrap_err();
        assert!(err.got.contains("at position 1"), "{err:?}");
        let v = Value::Vector(vec![sample(&[("a", "1")], 1.0), sample(&[("a", "2")], 2.0)]);
        assert_eq!(compare_result(&cmd, INSTANT, &v), Ok(()));
    }

    #[test]
    fn vector_diff_shows_only_differences() {
        let cmd = EvalCmd {
            expected_series: vec![
                series(&[("a", "1")], 1, &[Some(1.0)]),
                series(&[("a", "2")], 2, &[Some(f64::NAN)]),
                series(&[("a", "3")], 3, &[Some(3.0)]),
            ],
            ..Default::default()
        };
        let v = Value::Vector(vec![
            sample(&[("a", "1")], 1.0),
            sample(&[("a", "2")], f64::NAN),
            sample(&[("a", "4")], 4.0),
        ]);
        let err = compare_result(&cmd, INSTANT, &v).unwrap_err();
        assert_eq!(err.expected, "{a=\"3\"} 3");
        assert_eq!(err.got, "{a=\"4\"} 4 (unexpected)\n{a=\"3\"} (missing)");
    }

    #[test]
    fn scalar_and_type_mismatch() {
        let cmd = EvalCmd {
            expected_scalar: Some(2.0),
            ..Default::default()
        };
        assert_eq!(compare_result(&cmd, INSTANT, &Value::Scalar { t: 0, v: 2.0 }), Ok(()));
        assert!(compare_result(&cmd, INSTANT, &Value::Scalar { t: 0, v: 3.0 }).is_err());
        assert!(compare_result(&cmd, INSTANT, &Value::Vector(vec![])).is_err());
        let nan = EvalCmd {
            expected_scalar: Some(f64::NAN),
            ..Default::default()
        };
        assert_eq!(
            compare_result(&nan, INSTANT, &Value::Scalar { t: 0, v: f64::NAN }),
            Ok(())
        );
        let none = EvalCmd::default();
        assert!(compare_result(&none, INSTANT, &Value::Scalar { t: 0, v: 1.0 }).is_err());
        assert_eq!(compare_result(&none, INSTANT, &Value::Vector(vec![])), Ok(()));
    }

    #[test]
    fn matrix_with_gaps() {
        let r = RangeSpec {
            start: 0,
            end: 120_000,
            step: 60_000,
        };
        let grid = Grid {
            start: r.start,
            end: Some(r.end),
            step: r.step,
        };
        let cmd = EvalCmd {
            range: Some(r),
            expected_series: vec![series(&[("a", "1")], 1, &[Some(1.0), None, Some(3.0)])],
            ..Default::default()
        };
        let m = |samples: Vec<(i64, f64)>| {
            Value::Matrix(vec![Series {
                histograms: Vec::new(),
                metric: Labels::from_pairs([("a", "1")]),
                samples,
                drop_name: false,
            }])
        };
        assert_eq!(compare_result(&cmd, grid, &m(vec![(0, 1.0), (120_000, 3.0)])), Ok(()));
        let err = compare_result(&cmd, grid, &m(vec![(0, 1.0), (60_000, 2.0), (120_000, 3.0)])).unwrap_err();
        assert_eq!(err.expected, "{a=\"1\"} 1 _ 3");
        assert_eq!(err.got, "{a=\"1\"} 1 2 3");
        // Too many expected points for the range.
        let long = EvalCmd {
            range: Some(r),
            expected_series: vec![series(&[("a", "1")], 1, &[Some(1.0), Some(2.0), Some(3.0), Some(4.0)])],
            ..Default::default()
        };
        assert!(compare_result(&long, grid, &m(vec![(0, 1.0)])).is_err());
        // Unsorted matrix.
        let unsorted = Value::Matrix(vec![
            Series {
                histograms: Vec::new(),
                metric: Labels::from_pairs([("a", "2")]),
                samples: vec![],
                drop_name: false,
            },
            Series {
                histograms: Vec::new(),
                metric: Labels::from_pairs([("a", "1")]),
                samples: vec![],
                drop_name: false,
            },
        ]);
        assert!(compare_result(&cmd, grid, &unsorted)
            .unwrap_err()
            .expected
            .contains("sorted"));
    }

    #[test]
    fn strings() {
        let cmd = EvalCmd {
            expected_string: "Foo".into(),
            ..Default::default()
        };
        assert_eq!(
            compare_result(&cmd, INSTANT, &Value::String { t: 0, s: "Foo".into() }),
            Ok(())
        );
        assert!(compare_result(&cmd, INSTANT, &Value::String { t: 0, s: "Bar".into() }).is_err());
    }
}
