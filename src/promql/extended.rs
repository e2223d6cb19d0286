//! Prometheus' extended range selectors (feature flag `promql-extended-range-selectors`):
//! `foo[5m] anchored` and `foo[5m] smoothed`, and the smoothed instant selector `foo smoothed`.
//!
//! Semantics (Prometheus 3.x, `promql/engine.go` and `functions.go`), for a window
//! `(start, end]` of a range selector evaluated at `end` (offset and `@` applied):
//! - `anchored` reads one lookback further back, `(start - lookback, end]`: the newest sample at
//!   or before `start` is the anchor the window is measured from. `rate`, `increase` and `delta`
//!   are `last - anchor` (counter resets corrected), not extrapolated; `changes` and `resets`
//!   count from the anchor on.
//! - `smoothed` also reads one lookback past the end, `(start - lookback, end + lookback]`, and
//!   takes the values at `start` and `end` by linear interpolation between the samples around
//!   them (a counter reset in between counts as a restart from zero for `rate`/`increase`);
//!   `foo smoothed` is the value interpolated at the evaluation time, the last one carried
//!   forward when nothing follows it.
//!
//! promql-parser's AST has no field for the modifier. The front pass (`preparse`) marks the
//! selector with a matcher, and [`take_markers`] moves it into a sub-millisecond tag of the
//! selector's range (or, for `foo smoothed`, of its offset): every reader of durations works in
//! whole milliseconds (`select::dur_ms`), so the tag changes nothing else, and the AST stays
//! promql-parser's. Printing drops it, so an expression holding one is never sent to a source
//! as text ([`has_modifier`]).

use std::sync::Arc;
use std::time::Duration;

use promql_parser::parser::{Expr, MatrixSelector, Offset, VectorSelector};

use super::annotations::Annotations;
use super::error::Error;
pub(crate) use super::preparse::RangeModifier;
use super::preparse::MODIFIER_MARKER;
use super::select::RangeWindow;
use super::value::FloatHistogram;
use crate::tsdb::histogram::HistogramError;
use crate::tsdb::CounterResetHint;

/// The tag (nanoseconds below the millisecond) for each modifier.
fn tag_nanos(m: RangeModifier) -> u32 {
    match m {
        RangeModifier::Anchored => 1,
        RangeModifier::Smoothed => 2,
    }
}

fn tag_of(d: &Duration) -> Option<RangeModifier> {
    match d.subsec_nanos() % 1_000_000 {
        1 => Some(RangeModifier::Anchored),
        2 => Some(RangeModifier::Smoothed),
        _ => None,
    }
}

fn tagged(d: Duration, m: RangeModifier) -> Duration {
    Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000 + tag_nanos(m))
}

/// The modifier of a range selector.
pub(crate) fn matrix_modifier(ms: &MatrixSelector) -> Option<RangeModifier> {
    tag_of(&ms.range)
}

/// Whether an instant selector is `smoothed`.
pub(crate) fn is_smoothed(vs: &VectorSelector) -> bool {
    matches!(&vs.offset, Some(Offset::Pos(d) | Offset::Neg(d)) if tag_of(d) == Some(RangeModifier::Smoothed))
}

/// The modifier of a function's range argument (a range selector, maybe in parentheses).
pub(crate) fn arg_modifier(e: &Expr) -> Option<RangeModifier> {
    match e {
        Expr::MatrixSelector(ms) => matrix_modifier(ms),
        Expr::Paren(p) => arg_modifier(&p.expr),
        _ => None,
    }
}

/// How far before a modified window's start and after its end its selector reads.
pub(crate) fn margins(m: Option<RangeModifier>, lookback: i64) -> (i64, i64) {
    match m {
        None => (0, 0),
        Some(RangeModifier::Anchored) => (lookback, 0),
        Some(RangeModifier::Smoothed) => (lookback, lookback),
    }
}

/// Whether any selector of `expr` carries a modifier (such an expression cannot be printed for
/// a source to evaluate: the printed text would lose it).
pub(crate) fn has_modifier(expr: &Expr) -> bool {
    match expr {
        Expr::VectorSelector(vs) => is_smoothed(vs),
        Expr::MatrixSelector(ms) => matrix_modifier(ms).is_some(),
        Expr::Subquery(sq) => has_modifier(&sq.expr),
        Expr::Aggregate(a) => a.param.as_deref().is_some_and(has_modifier) || has_modifier(&a.expr),
        Expr::Unary(u) => has_modifier(&u.expr),
        Expr::Binary(b) => has_modifier(&b.lhs) || has_modifier(&b.rhs),
        Expr::Paren(p) => has_modifier(&p.expr),
        Expr::Call(c) => c.args.args.iter().any(|a| has_modifier(a)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => false,
    }
}

/// `expr` as Prometheus reads it, modifiers included: promql-parser's printing drops them (and
/// would print a smoothed selector without an offset as `foo offset `).
pub(crate) fn to_text(expr: &Expr) -> String {
    if !has_modifier(expr) {
        return super::trim::expr_text(expr);
    }
    let mut marked = expr.clone();
    put_markers(&mut marked);
    let mut text = super::trim::expr_text(&marked);
    while let Some(next) = marker_to_keyword(&text) {
        text = next;
    }
    text
}

/// The reverse of [`take_markers`]: each tag back into a marker matcher.
fn put_markers(expr: &mut Expr) {
    let mark = |vs: &mut VectorSelector, m: RangeModifier| {
        let marker =
            promql_parser::label::Matcher::new(promql_parser::label::MatchOp::Equal, MODIFIER_MARKER, m.name());
        match vs.matchers.or_matchers.last_mut() {
            Some(alt) => alt.push(marker),
            None => vs.matchers.matchers.push(marker),
        }
    };
    let untag = |d: &Duration| Duration::from_millis(d.as_millis() as u64);
    match expr {
        Expr::VectorSelector(vs) => {
            if is_smoothed(vs) {
                mark(vs, RangeModifier::Smoothed);
                vs.offset = match vs.offset.take() {
                    Some(Offset::Pos(d)) if d.as_millis() > 0 => Some(Offset::Pos(untag(&d))),
                    Some(Offset::Neg(d)) if d.as_millis() > 0 => Some(Offset::Neg(untag(&d))),
                    _ => None,
                };
            }
        }
        Expr::MatrixSelector(ms) => {
            if let Some(m) = matrix_modifier(ms) {
                mark(&mut ms.vs, m);
                ms.range = untag(&ms.range);
            }
        }
        Expr::Subquery(sq) => put_markers(&mut sq.expr),
        Expr::Aggregate(a) => {
            if let Some(p) = a.param.as_deref_mut() {
                put_markers(p);
            }
            put_markers(&mut a.expr);
        }
        Expr::Unary(u) => put_markers(&mut u.expr),
        Expr::Binary(b) => {
            put_markers(&mut b.lhs);
            put_markers(&mut b.rhs);
        }
        Expr::Paren(p) => put_markers(&mut p.expr),
        Expr::Call(c) => c.args.args.iter_mut().for_each(|a| put_markers(a)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// The first marker matcher of printed text replaced by its keyword after the selector.
fn marker_to_keyword(text: &str) -> Option<String> {
    let head = format!("{MODIFIER_MARKER}=\"");
    let p = text.find(&head)?;
    let vstart = p + head.len();
    let q = vstart + text[vstart..].find('"')? + 1;
    let kind = &text[vstart..q - 1];
    let b = text.as_bytes();
    // The marker and one separator; the braces too when it was their only matcher.
    let (cut_start, cut_end) = if b.get(q) == Some(&b',') {
        (p, q + 1 + usize::from(b.get(q + 1) == Some(&b' ')))
    } else if text[..p].ends_with(", ") {
        (p - 2, q)
    } else if text[..p].ends_with(',') {
        (p - 1, q)
    } else {
        (p - 1, q + 1)
    };
    let mut out = format!("{}{}", &text[..cut_start], &text[cut_end..]);
    // The selector's end: its closing brace (values are quoted), range, `@` and offset.
    let ob = out.as_bytes();
    let mut i = cut_start;
    if b[p - 1] != b'{' || b.get(q) != Some(&b'}') {
        let mut quoted = false;
        while i < ob.len() {
            match ob[i] {
                b'\\' if quoted => i += 1,
                b'"' => quoted = !quoted,
                b'}' if !quoted => break,
                _ => {}
            }
            i += 1;
        }
        i += 1;
    }
    if ob.get(i) == Some(&b'[') {
        i += out[i..].find(']')? + 1;
    }
    loop {
        let rest = &out[i..];
        let word =
            |from: usize, ok: fn(char) -> bool| from + rest[from..].find(|c: char| !ok(c)).unwrap_or(rest.len() - from);
        if let Some(r) = rest.strip_prefix(" @ ") {
            let n = ["start()", "end()"].iter().find(|w| r.starts_with(*w)).map(|w| w.len());
            i += n.map_or_else(|| word(3, |c| c.is_ascii_digit() || c == '.'), |n| 3 + n);
        } else if rest.starts_with(" offset ") {
            i += word(8, |c| c.is_ascii_alphanumeric() || c == '-');
        } else {
            break;
        }
    }
    out.insert_str(i, &format!(" {kind}"));
    Some(out)
}

/// Moves the front pass' marker matchers into the selectors' tags. Errors with Prometheus'
/// message for a selector given both modifiers.
pub(crate) fn take_markers(expr: &mut Expr) -> Result<(), String> {
    match expr {
        Expr::VectorSelector(vs) => {
            if take_marker(vs)? == Some(RangeModifier::Smoothed) {
                // An anchored instant selector is a plain one (Prometheus evaluates it so).
                vs.offset = Some(match vs.offset.take() {
                    None => Offset::Pos(tagged(Duration::ZERO, RangeModifier::Smoothed)),
                    Some(Offset::Pos(d)) => Offset::Pos(tagged(d, RangeModifier::Smoothed)),
                    Some(Offset::Neg(d)) => Offset::Neg(tagged(d, RangeModifier::Smoothed)),
                });
            }
            Ok(())
        }
        Expr::MatrixSelector(ms) => {
            if let Some(m) = take_marker(&mut ms.vs)? {
                ms.range = tagged(ms.range, m);
            }
            Ok(())
        }
        Expr::Subquery(sq) => take_markers(&mut sq.expr),
        Expr::Aggregate(a) => {
            if let Some(p) = a.param.as_deref_mut() {
                take_markers(p)?;
            }
            take_markers(&mut a.expr)
        }
        Expr::Unary(u) => take_markers(&mut u.expr),
        Expr::Binary(b) => {
            take_markers(&mut b.lhs)?;
            take_markers(&mut b.rhs)
        }
        Expr::Paren(p) => take_markers(&mut p.expr),
        Expr::Call(c) => c.args.args.iter_mut().try_for_each(|a| take_markers(a)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
    }
}

fn take_marker(vs: &mut VectorSelector) -> Result<Option<RangeModifier>, String> {
    let mut found: Vec<RangeModifier> = Vec::new();
    let mut strip = |ms: &mut Vec<promql_parser::label::Matcher>| {
        ms.retain(|m| {
            if m.name != MODIFIER_MARKER {
                return true;
            }
            found.push(if m.value == RangeModifier::Anchored.name() {
                RangeModifier::Anchored
            } else {
                RangeModifier::Smoothed
            });
            false
        })
    };
    strip(&mut vs.matchers.matchers);
    for alt in &mut vs.matchers.or_matchers {
        strip(alt);
    }
    // The marker must not have made a selector of everything valid (`{a=~".*"} anchored`).
    if !found.is_empty() && vs.name.is_none() && vs.matchers.is_empty_matchers() {
        return Err("vector selector must contain at least one non-empty matcher".into());
    }
    match found.first() {
        Some(&m) if found.iter().any(|&x| x != m) => {
            Err("anchored and smoothed modifiers cannot be used together".into())
        }
        first => Ok(first.copied()),
    }
}

// ---------------------------------------------------------------------------------------------
// Floats.

/// Linear interpolation at `t` between two points; a counter that went down restarted from 0.
fn interpolate(p1: (i64, f64), p2: (i64, f64), t: i64, is_counter: bool) -> f64 {
    let y1 = if is_counter && p2.1 < p1.1 { 0.0 } else { p1.1 };
    y1 + (p2.1 - y1) * (t - p1.0) as f64 / (p2.0 - p1.0) as f64
}

/// The boundary samples of a modified window over `n` points with times `time(i)`: the index
/// of the first (the anchor: the newest at or before `start`, else the first) and of the last
/// (for `smoothed` the first at or after `end`, else the last), or `None` when the window has
/// nothing to measure.
fn boundaries(n: usize, time: impl Fn(usize) -> i64, w: &RangeWindow, smoothed: bool) -> Option<(usize, usize)> {
    if n == 0 {
        return None;
    }
    let mut last = n - 1;
    // Searches leave the last point out, as Prometheus' `sort.Search(last, ...)`.
    let first = (0..last).find(|&i| time(i) > w.start).unwrap_or(last).saturating_sub(1);
    if smoothed {
        last = (0..last).find(|&i| time(i) >= w.end).unwrap_or(last);
    }
    if time(last) <= w.start || (smoothed && time(first) > w.end) {
        return None;
    }
    Some((first, last))
}

/// `rate`, `increase` (`is_counter`) or `delta` of an anchored or smoothed window: `samples`
/// are the window's points with the margins of [`margins`] (no staleness markers).
pub(crate) fn rate(
    samples: &[(i64, f64)],
    w: &RangeWindow,
    smoothed: bool,
    is_counter: bool,
    is_rate: bool,
) -> Option<f64> {
    let (first, last) = boundaries(samples.len(), |i| samples[i].0, w, smoothed)?;
    let left = if smoothed && samples[first].0 < w.start {
        interpolate(samples[first], samples[first + 1], w.start, is_counter)
    } else {
        samples[first].1
    };
    let right = if smoothed && last > 0 && samples[last].0 > w.end {
        interpolate(samples[last - 1], samples[last], w.end, is_counter)
    } else {
        samples[last].1
    };
    let mut result = right - left;
    if is_counter {
        // Resets at the boundaries are in `left` and `right` already; only the points strictly
        // inside the window are compared.
        let lo = if samples[first].0 <= w.start { first + 1 } else { first };
        let hi = if samples[last].0 >= w.end { last } else { last + 1 };
        let inner = if lo < hi { &samples[lo..hi] } else { &[] };
        let mut prev = left;
        for &(_, v) in inner {
            if v < prev {
                result += prev;
            }
            prev = v;
        }
        if right < prev {
            result += prev;
        }
    }
    if is_rate {
        result /= w.range_ms as f64 / 1000.0;
    }
    Some(result)
}

/// For anchored `changes` and `resets`: where the float and histogram points to compare start
/// (the anchor, of either kind, and everything after the window's start), or `None` when no
/// point lies after the start.
pub(crate) fn anchored_start(
    floats: &[(i64, f64)],
    hists: &[(i64, Arc<FloatHistogram>)],
    w: &RangeWindow,
) -> Option<(usize, usize)> {
    let fl = floats.partition_point(|x| x.0 <= w.start);
    let hl = hists.partition_point(|x| x.0 <= w.start);
    if fl >= floats.len() && hl >= hists.len() {
        return None;
    }
    Some(match (fl.checked_sub(1), hl.checked_sub(1)) {
        (None, None) => (0, 0),
        (Some(f), None) => (f, hl),
        (Some(f), Some(h)) if floats[f].0 >= hists[h].0 => (f, hl),
        (_, Some(h)) => (fl, h),
    })
}

/// A bare range selector with a modifier (an instant query's `foo[1m] anchored`): the points
/// strictly inside the window between the two boundary values placed at its start and end.
pub(crate) fn extend_floats(samples: &[(i64, f64)], w: &RangeWindow, smoothed: bool) -> Vec<(i64, f64)> {
    let Some((mut first, mut last)) = boundaries(samples.len(), |i| samples[i].0, w, smoothed) else {
        return Vec::new();
    };
    let left = if smoothed && samples[first].0 < w.start {
        interpolate(samples[first], samples[first + 1], w.start, false)
    } else {
        samples[first].1
    };
    let right = if smoothed && last > 0 && samples[last].0 > w.end {
        interpolate(samples[last - 1], samples[last], w.end, false)
    } else {
        samples[last].1
    };
    if samples[first].0 <= w.start {
        first += 1;
    }
    let mut out = vec![(w.start, left)];
    if samples[last].0 >= w.end {
        if last == 0 {
            out.push((w.end, right));
            return out;
        }
        last -= 1;
    }
    if first <= last {
        out.extend_from_slice(&samples[first..=last]);
    }
    out.push((w.end, right));
    out
}

/// What `foo smoothed` gives for one series at reference time `r`.
#[derive(Debug)]
pub(crate) enum SmoothedPoint {
    Float(f64),
    Histogram(FloatHistogram),
    /// Floats and histograms in the lookback windows: a warning, no value.
    Mixed,
    /// Interpolation between exponential and custom buckets: a warning, no value.
    MixedSchemas,
}

/// `foo smoothed` for one series: its points in `(r - lookback, r + lookback]` (floats without
/// staleness markers) give the value at `r`, interpolated between the points around it, the
/// last one carried forward when none follows; nothing before the first point.
pub(crate) fn smoothed_point(
    floats: &[(i64, f64)],
    hists: &[(i64, Arc<FloatHistogram>)],
    r: i64,
    lookback: i64,
) -> Result<Option<SmoothedPoint>, Error> {
    let fl = floats.partition_point(|x| x.0 <= r - lookback);
    let fh = floats.partition_point(|x| x.0 <= r + lookback);
    let hl = hists.partition_point(|x| x.0 <= r - lookback);
    let hh = hists.partition_point(|x| x.0 <= r + lookback);
    let (floats, hists) = (&floats[fl..fh], &hists[hl..hh]);
    if !floats.is_empty() && !hists.is_empty() {
        return Ok(Some(SmoothedPoint::Mixed));
    }
    if !hists.is_empty() {
        let i = hists.partition_point(|x| x.0 < r);
        if i < hists.len() && hists[i].0 == r {
            return Ok(Some(SmoothedPoint::Histogram((*hists[i].1).clone())));
        }
        if i == 0 {
            return Ok(None);
        }
        let (prev, next) = (&hists[i - 1], hists.get(i));
        let Some(next) = next else {
            // The hint describes a sample's relation to the one before, not its value.
            let mut h = (*prev.1).clone();
            h.counter_reset_hint = CounterResetHint::Unknown;
            return Ok(Some(SmoothedPoint::Histogram(h)));
        };
        if prev.1.uses_custom_buckets() != next.1.uses_custom_buckets() {
            return Ok(Some(SmoothedPoint::MixedSchemas));
        }
        let is_counter = prev.1.counter_reset_hint != CounterResetHint::Gauge
            || next.1.counter_reset_hint != CounterResetHint::Gauge;
        return match interpolate_histograms(prev, next, r, is_counter) {
            Ok(h) => Ok(Some(SmoothedPoint::Histogram(h))),
            Err(HistogramError::MixedExponentialCustom) => Ok(Some(SmoothedPoint::MixedSchemas)),
        };
    }
    let i = floats.partition_point(|x| x.0 < r);
    if i < floats.len() && floats[i].0 == r {
        return Ok(Some(SmoothedPoint::Float(floats[i].1)));
    }
    Ok(match (i.checked_sub(1), floats.get(i)) {
        (None, _) => None,
        (Some(p), Some(&next)) => Some(SmoothedPoint::Float(interpolate(floats[p], next, r, false))),
        (Some(p), None) => Some(SmoothedPoint::Float(floats[p].1)),
    })
}

// ---------------------------------------------------------------------------------------------
// Native histograms.

type HPoint = (i64, Arc<FloatHistogram>);

/// The histogram at `t` between two points (a counter reset in between: a restart from zero).
fn interpolate_histograms(
    p1: &HPoint,
    p2: &HPoint,
    t: i64,
    is_counter: bool,
) -> Result<FloatHistogram, HistogramError> {
    if t == p1.0 {
        return Ok((*p1.1).clone());
    }
    if t == p2.0 {
        return Ok((*p2.1).clone());
    }
    let fraction = (t - p1.0) as f64 / (p2.0 - p1.0) as f64;
    if is_counter && p2.1.detect_reset(&p1.1) {
        let mut h = (*p2.1).clone();
        h.mul(fraction);
        return Ok(h);
    }
    let mut h = p2.1.sub(&p1.1)?;
    h.mul(fraction);
    h.add(&p1.1)
}

/// `rate`, `increase` or `delta` of an anchored or smoothed window of histograms, as
/// [`rate`]; warnings go to `ann` (`at` is the argument's position suffix).
#[allow(clippy::too_many_arguments)]
pub(crate) fn histogram_rate(
    ann: &Annotations,
    metric_name: &str,
    at: &str,
    h: &[HPoint],
    w: &RangeWindow,
    smoothed: bool,
    is_counter: bool,
    is_rate: bool,
) -> Result<Option<FloatHistogram>, Error> {
    let Some((first, last)) = boundaries(h.len(), |i| h[i].0, w, smoothed) else {
        return Ok(None);
    };
    let mixed_schemas = || {
        ann.warn(format!(
            "PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas for metric name \"{metric_name}\"{at}"
        ))
    };
    let custom = h[first].1.uses_custom_buckets();
    for (_, p) in &h[first..=last] {
        if p.uses_custom_buckets() != custom {
            mixed_schemas();
            return Ok(None);
        }
        if is_counter && p.counter_reset_hint == CounterResetHint::Gauge {
            ann.warn(format!(
                "PromQL warning: this native histogram metric is not a counter: \"{metric_name}\"{at}"
            ));
        }
    }
    // Histogram arithmetic fails only on mixed schemas: a warning, and no result (differing
    // custom bounds are reconciled by the arithmetic itself).
    macro_rules! try_hist {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(HistogramError::MixedExponentialCustom) => {
                    mixed_schemas();
                    return Ok(None);
                }
            }
        };
    }
    let left = if smoothed && h[first].0 < w.start {
        try_hist!(interpolate_histograms(&h[first], &h[first + 1], w.start, is_counter))
    } else {
        (*h[first].1).clone()
    };
    let right = if smoothed && last > 0 && h[last].0 > w.end {
        try_hist!(interpolate_histograms(&h[last - 1], &h[last], w.end, is_counter))
    } else {
        (*h[last].1).clone()
    };
    use CounterResetHint::Gauge;
    if !is_counter && (left.counter_reset_hint != Gauge || right.counter_reset_hint != Gauge) {
        ann.warn(format!(
            "PromQL warning: this native histogram metric is not a gauge: \"{metric_name}\"{at}"
        ));
    }
    let mut result = try_hist!(right.sub(&left));
    if is_counter {
        // The point at `first` is `left`; a smoothed left boundary interpolated across a reset
        // has that reset in it already, so the point after it is where comparing starts.
        let mut from = first + 1;
        let mut prev: &FloatHistogram = &left;
        if smoothed && h[first].0 < w.start && h[first + 1].1.detect_reset(&h[first].1) {
            prev = &h[first + 1].1;
            from += 1;
        }
        // The point at `last` is `right` (or its interpolation, with its hint): compared last.
        if from <= last {
            let mut correction: Option<FloatHistogram> = None;
            let mut add = |c: &FloatHistogram| -> Result<(), HistogramError> {
                correction = Some(match correction.take() {
                    None => c.clone(),
                    Some(acc) => acc.add(c)?,
                });
                Ok(())
            };
            for (_, p) in &h[from..last] {
                if p.detect_reset(prev) {
                    try_hist!(add(prev));
                }
                prev = p;
            }
            if right.detect_reset(prev) {
                try_hist!(add(prev));
            }
            if let Some(c) = correction {
                result = try_hist!(result.add(&c));
            }
        }
    }
    if is_rate {
        result.div(w.range_ms as f64 / 1000.0);
    }
    result.counter_reset_hint = Gauge;
    Ok(Some(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: i64, end: i64) -> RangeWindow {
        RangeWindow {
            start,
            end,
            range_ms: end - start,
            v2: false,
        }
    }

    #[test]
    fn tags_survive_only_below_the_millisecond() {
        let d = tagged(Duration::from_millis(60_000), RangeModifier::Smoothed);
        assert_eq!(tag_of(&d), Some(RangeModifier::Smoothed));
        assert_eq!(d.as_millis(), 60_000);
        assert_eq!(tag_of(&Duration::from_millis(60_001)), None);
        assert_eq!(promql_parser::util::display_duration(&d), "1m");
    }

    #[test]
    fn printed_with_their_modifiers() {
        for q in [
            "increase(foo[5m] anchored)",
            "rate(foo{a=\"}\",job=\"x\"}[5m] @ 100.000 offset -1m smoothed) + foo smoothed",
            "foo offset 1m smoothed > bar @ start() smoothed",
            "changes({__name__=\"foo\"}[1m] anchored)",
            "sum(foo{a=\"1\" or b=\"2\"} smoothed)",
            "foo smoothed </ 0.5 or increase(bar[1m] anchored)",
        ] {
            let e = crate::promql::parse(q).unwrap();
            let text = to_text(&e);
            assert!(!text.contains(MODIFIER_MARKER), "{text}");
            assert_eq!(crate::promql::parse(&text).unwrap(), e, "{q} printed as {text}");
        }
        assert_eq!(
            to_text(&crate::promql::parse("rate(foo{job=\"x\"}[5m] offset 1m anchored)").unwrap()),
            "rate(foo{job=\"x\"}[5m] offset 1m anchored)"
        );
        assert_eq!(to_text(&crate::promql::parse("foo smoothed").unwrap()), "foo smoothed");
        // With the trim operators, which promql-parser cannot print either.
        assert_eq!(
            to_text(&crate::promql::parse("foo smoothed >/ 0.5").unwrap()),
            "foo smoothed >/ 0.5"
        );
    }

    #[test]
    fn anchored_increase_measures_from_the_sample_before_the_window() {
        // 1 2 3 4 5 every 15s; at 50s the window (−10s, 50s] has its anchor at 0s.
        let s: Vec<(i64, f64)> = (0..5).map(|i| (i * 15_000, i as f64 + 1.0)).collect();
        assert_eq!(rate(&s, &window(-10_000, 50_000), false, true, false), Some(4.0));
        // Anchored at 5s: the sample at 0s alone.
        assert_eq!(rate(&s[..1], &window(-55_000, 5_000), false, true, false), Some(0.0));
        // Nothing after the start: nothing to measure.
        assert_eq!(rate(&s[..1], &window(0, 60_000), false, true, false), None);
        // A reset inside the window is corrected.
        let r = [(0, 5.0), (10_000, 10.0), (20_000, 3.0)];
        assert_eq!(rate(&r, &window(0, 20_000), false, true, false), Some(8.0));
        assert_eq!(rate(&r, &window(0, 20_000), false, false, false), Some(-2.0));
    }

    #[test]
    fn smoothed_interpolates_at_both_ends() {
        // 1..=9 every 15s; at 50s over 1m: left at −10s is the first value (nothing before),
        // right at 50s lies 1/3 of the way from 4 (45s) to 5 (60s).
        let s: Vec<(i64, f64)> = (0..9).map(|i| (i * 15_000, i as f64 + 1.0)).collect();
        let v = rate(&s, &window(-10_000, 50_000), true, true, false).unwrap();
        assert!((v - 3.333_333_333).abs() < 1e-6, "{v}");
        // A reset between the points around the start: the counter restarted from zero.
        let r = [(0, 100.0), (15_000, 10.0)];
        let v = rate(&r, &window(2_000, 12_000), true, true, true).unwrap();
        assert!((v - 0.666_666_666).abs() < 1e-6, "{v}");
    }

    #[test]
    fn anchored_changes_start_at_the_anchor_of_either_kind() {
        let h = Arc::new(FloatHistogram::default());
        let floats = [(0, 1.0), (60_000, 2.0), (180_000, 3.0)];
        let hists = [(120_000, h.clone())];
        // Window (120s, 180s]: the histogram at 120s is the anchor; floats before it are skipped.
        assert_eq!(anchored_start(&floats, &hists, &window(120_000, 180_000)), Some((2, 0)));
        // Window (180s, 240s]: nothing after the start.
        assert_eq!(anchored_start(&floats, &hists, &window(180_000, 240_000)), None);
    }

    #[test]
    fn smoothed_selector_interpolates_or_carries_forward() {
        let s = [(0, 1.0), (10_000, 2.0), (20_000, 3.0)];
        let at = |r| match smoothed_point(&s, &[], r, 300_000).unwrap() {
            Some(SmoothedPoint::Float(v)) => Some(v),
            None => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(at(15_000), Some(2.5));
        assert_eq!(at(10_000), Some(2.0));
        assert_eq!(at(50_000), Some(3.0));
        assert_eq!(at(-5_000), None);
    }

    #[test]
    fn bare_anchored_range_gets_boundary_points() {
        let s = [(0, 1.0), (30_000, 2.0), (60_000, 3.0)];
        assert_eq!(
            extend_floats(&s, &window(10_000, 70_000), false),
            vec![(10_000, 1.0), (30_000, 2.0), (60_000, 3.0), (70_000, 3.0)]
        );
    }
}
