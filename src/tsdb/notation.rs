//! The series notation of promqltest `load` blocks and `promtool test rules` input series:
//! `metric{label="value"} 0+10x10 _ stale 1 -2-3x4 _x3 1e3 Inf`.
//!
//! Semantics follow Prometheus' series-description parser: `a+bxN` yields N+1 values computed
//! by repeated addition (so float drift matches Prometheus exactly), `axN` N+1 copies, `_` one
//! missing point, `_xN` N missing points, `stale` the staleness marker. Native histogram values
//! are `{{...}}` (see [`super::histogram`]), repeated with `{{h}}xN` and expanded with
//! `{{h}}+{{d}}xN` / `{{h}}-{{d}}xN`.

use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};

use super::histogram::{self, CounterResetHint, FloatHistogram};
use super::store::Store;

/// Bits of Prometheus' staleness marker NaN.
pub(crate) const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Prefix of errors about native histogram values, so callers can tell them apart.
pub(crate) const NATIVE_HISTOGRAM_ERROR: &str = "native histogram";

/// One point of a series description.
#[derive(Clone, Debug)]
pub enum SeriesValue {
    Float(f64),
    Stale,
    Histogram(Box<FloatHistogram>),
}

impl PartialEq for SeriesValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (SeriesValue::Float(a), SeriesValue::Float(b)) => a == b,
            (SeriesValue::Stale, SeriesValue::Stale) => true,
            (SeriesValue::Histogram(a), SeriesValue::Histogram(b)) => a.equals(b),
            _ => false,
        }
    }
}

impl SeriesValue {
    /// The stored float value: the staleness marker is the NaN with [`STALE_NAN_BITS`]; a
    /// histogram has none (NaN).
    pub fn to_f64(&self) -> f64 {
        match self {
            SeriesValue::Float(v) => *v,
            SeriesValue::Stale => f64::from_bits(STALE_NAN_BITS),
            SeriesValue::Histogram(_) => f64::NAN,
        }
    }

    pub fn as_histogram(&self) -> Option<&FloatHistogram> {
        match self {
            SeriesValue::Histogram(h) => Some(h),
            _ => None,
        }
    }

    fn from_f64(v: f64) -> Self {
        if v.to_bits() == STALE_NAN_BITS {
            SeriesValue::Stale
        } else {
            SeriesValue::Float(v)
        }
    }
}

/// The most points one series line expands to: 16.8 M (real promtool test files hold lines of
/// 10 M points, `0x10000000`).
const MAX_LINE_POINTS: usize = 1 << 24;

/// The most native histogram points one series line expands to: each is a whole histogram,
/// and each step of `{{h}}+{{d}}xN` adds two.
const MAX_LINE_HISTOGRAMS: usize = 1 << 17;

/// The points the lines of one file (a test's input series, a load block) may expand to in
/// all: without a bound, a few hundred short lines of `0x10000000` ask for billions of points
/// and the loader runs out of memory instead of saying what is wrong.
pub struct PointBudget {
    left: usize,
}

/// What a [`PointBudget`] starts with: 67 M points.
const MAX_FILE_POINTS: usize = 1 << 26;

impl Default for PointBudget {
    fn default() -> Self {
        PointBudget { left: MAX_FILE_POINTS }
    }
}

impl PointBudget {
    /// [`parse_series_line`], its points counted against the budget.
    pub fn series_line(&mut self, line: &str) -> Result<(Labels, Vec<Option<SeriesValue>>), String> {
        let (labels, values) = parse_series_line_within(line, self.room())?;
        self.left -= values.len();
        Ok((labels, values))
    }

    /// [`parse_values`], its points counted against the budget.
    pub fn values(&mut self, s: &str) -> Result<Vec<Option<SeriesValue>>, String> {
        let values = parse_values_within(s, self.room())?;
        self.left -= values.len();
        Ok(values)
    }

    fn room(&self) -> Room {
        Room {
            points: self.left.min(MAX_LINE_POINTS),
            per_file: self.left < MAX_LINE_POINTS,
        }
    }
}

/// How many points a line may still expand to, and whether the file's budget is what bounds it.
#[derive(Clone, Copy)]
struct Room {
    points: usize,
    per_file: bool,
}

impl Room {
    fn line() -> Room {
        Room {
            points: MAX_LINE_POINTS,
            per_file: false,
        }
    }

    /// An error unless `n` more points fit after the `have` already expanded.
    fn fits(self, have: usize, n: u64) -> Result<(), String> {
        if (have as u64).saturating_add(n) <= self.points as u64 {
            return Ok(());
        }
        Err(if self.per_file {
            format!("the series of this file expand to more than {MAX_FILE_POINTS} points in all")
        } else {
            format!("the series expands to more than {MAX_LINE_POINTS} points")
        })
    }
}

/// Parses `metric values...` into the label set and the expanded points.
pub fn parse_series_line(line: &str) -> Result<(Labels, Vec<Option<SeriesValue>>), String> {
    parse_series_line_within(line, Room::line())
}

fn parse_series_line_within(line: &str, room: Room) -> Result<(Labels, Vec<Option<SeriesValue>>), String> {
    let line = line.trim();
    let mut p = Cursor::new(line);
    let labels = p.metric()?;
    let rest = &line[p.pos..];
    if !rest.is_empty() && !rest.starts_with(|c: char| c.is_whitespace()) {
        return Err(format!(
            "unexpected {:?} after the series selector at column {}",
            rest_head(rest),
            p.pos + 1
        ));
    }
    let values = parse_values_within(rest, room)?;
    Ok((labels, values))
}

/// Parses a series selector alone: `name`, `name{l="v"}`, `{l="v"}`, `{"quoted.name", l="v"}`.
pub(crate) fn parse_metric(s: &str) -> Result<Labels, String> {
    let s = s.trim();
    let mut p = Cursor::new(s);
    let labels = p.metric()?;
    if p.pos != s.len() {
        return Err(format!(
            "unexpected {:?} after the series selector at column {}",
            rest_head(&s[p.pos..]),
            p.pos + 1
        ));
    }
    Ok(labels)
}

/// Parses and expands a whitespace-separated value sequence.
pub(crate) fn parse_values(s: &str) -> Result<Vec<Option<SeriesValue>>, String> {
    parse_values_within(s, Room::line())
}

fn parse_values_within(s: &str, room: Room) -> Result<Vec<Option<SeriesValue>>, String> {
    let mut out = Vec::new();
    let mut histograms = 0;
    for item in split_items(s)? {
        let res = if item.starts_with("{{") {
            let before = out.len();
            let r = expand_histogram_item(item, &mut out, room, MAX_LINE_HISTOGRAMS - histograms);
            histograms += out.len() - before;
            r
        } else {
            expand_item(item, &mut out, room)
        };
        res.map_err(|e| format!("bad series value {item:?}: {e}"))?;
    }
    Ok(out)
}

/// Splits on whitespace outside `{{...}}` (a histogram holds spaces).
fn split_items(s: &str) -> Result<Vec<&str>, String> {
    let b = s.as_bytes();
    let mut items = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let mut depth = 0usize;
        while i < b.len() && (depth > 0 || !b[i].is_ascii_whitespace()) {
            if b[i..].starts_with(b"{{") {
                depth += 1;
                i += 2;
            } else if depth > 0 && b[i..].starts_with(b"}}") {
                depth -= 1;
                i += 2;
            } else {
                i += 1;
            }
        }
        if depth > 0 {
            return Err(format!(
                "{NATIVE_HISTOGRAM_ERROR} value {:?} is missing its closing \"}}}}\"",
                &s[start..]
            ));
        }
        items.push(&s[start..i]);
    }
    Ok(items)
}

/// Expands `{{h}}`, `{{h}}xN`, `{{h}}+{{d}}xN` and `{{h}}-{{d}}xN` as Prometheus' series
/// description parser: each step adds (subtracts) `d` to the previous histogram.
fn expand_histogram_item(
    item: &str,
    out: &mut Vec<Option<SeriesValue>>,
    room: Room,
    histograms_left: usize,
) -> Result<(), String> {
    let fits = |out: &Vec<Option<SeriesValue>>, n: u64| {
        if n > histograms_left as u64 {
            return Err(format!(
                "the series expands to more than {MAX_LINE_HISTOGRAMS} {NATIVE_HISTOGRAM_ERROR} points"
            ));
        }
        room.fits(out.len(), n)
    };
    let end = item.find("}}").map(|i| i + 2).unwrap_or(item.len());
    let base = histogram::parse(&item[..end])?;
    let rest = &item[end..];
    if rest.is_empty() {
        fits(out, 1)?;
        out.push(Some(SeriesValue::Histogram(Box::new(base))));
        return Ok(());
    }
    if let Some(times) = rest.strip_prefix('x') {
        let n = parse_times(times)?;
        fits(out, n + 1)?;
        for _ in 0..=n {
            out.push(Some(SeriesValue::Histogram(Box::new(base.clone()))));
        }
        return Ok(());
    }
    let (sign, rest) = match rest.as_bytes()[0] {
        b'+' => (1.0, &rest[1..]),
        b'-' => (-1.0, &rest[1..]),
        _ => return Err(format!("unexpected {rest:?} after a histogram")),
    };
    if !rest.starts_with("{{") {
        return Err("a histogram can only be incremented by a histogram".into());
    }
    let end = rest.find("}}").map(|i| i + 2).unwrap_or(rest.len());
    let inc = histogram::parse(&rest[..end])?;
    let n = rest[end..]
        .strip_prefix('x')
        .ok_or_else(|| "an increment needs a repetition count ('x' and a number)".to_string())
        .and_then(parse_times)?;
    fits(out, n + 1)?;
    let mut cur = base;
    out.push(Some(SeriesValue::Histogram(Box::new(cur.clone()))));
    for _ in 0..n {
        if cur.schema > inc.schema && !cur.uses_custom_buckets() {
            return Err(format!(
                "error combining histograms: cannot merge from schema {} to {}",
                inc.schema, cur.schema
            ));
        }
        cur = if sign > 0.0 { cur.add(&inc) } else { cur.sub(&inc) }.map_err(|e| e.to_string())?;
        out.push(Some(SeriesValue::Histogram(Box::new(cur.clone()))));
    }
    Ok(())
}

/// Appends the points of a description: value `i` at `start_ms + i * interval_ms`, missing
/// points skipped.
pub fn load_notation(
    store: &mut Store,
    interval_ms: i64,
    start_ms: i64,
    labels: &Labels,
    values: &[Option<SeriesValue>],
) {
    // A description with only missing points creates no series, as in Prometheus.
    if values.iter().all(Option::is_none) {
        return;
    }
    let id = store.get_or_create(labels);
    // The previous histogram of an uninterrupted run of histograms, for the counter reset hint.
    let mut prev: Option<&FloatHistogram> = None;
    for (i, v) in values.iter().enumerate() {
        let Some(v) = v else { continue };
        let t = start_ms.saturating_add((i as i64).saturating_mul(interval_ms));
        match v {
            SeriesValue::Histogram(h) => {
                let mut stored = (**h).clone();
                stored.counter_reset_hint = stored_hint(h, prev);
                store.append_histogram_id(id, t, stored);
                prev = Some(h);
            }
            other => {
                store.append_id(id, t, other.to_f64());
                prev = None;
            }
        }
    }
}

/// Parses the offsets of a start-timestamp line (promqltest's `metric@st <offsets>`): per
/// position the start time relative to the sample's time in ms, `None` where omitted. Items
/// are `_`, `_xN` (N omitted), `<dur>`, `<dur>xN` (N+1 copies) and `<dur>+<dur>xN` /
/// `<dur>-<dur>xN` (N+1 offsets stepping by the second duration); a duration is one signed
/// Prometheus duration (`-30s`, `1ms`, `0`).
pub(crate) fn parse_start_offsets(s: &str) -> Result<Vec<Option<i64>>, String> {
    let mut out = Vec::new();
    for item in s.split_whitespace() {
        start_offset_item(item, &mut out).map_err(|e| format!("invalid start timestamp item {item:?}: {e}"))?;
    }
    Ok(out)
}

fn start_offset_item(item: &str, out: &mut Vec<Option<i64>>) -> Result<(), String> {
    if item == "_" {
        out.push(None);
        return Ok(());
    }
    if let Some(n) = item.strip_prefix("_x") {
        let n = repeat_count(n)?;
        if n == 0 {
            return Err("invalid repeat count".into());
        }
        out.extend(std::iter::repeat_n(None, n));
        return Ok(());
    }
    let (base, rest) = signed_duration_prefix(item)?;
    if rest.is_empty() {
        out.push(Some(base));
        return Ok(());
    }
    if let Some(n) = rest.strip_prefix('x') {
        out.extend(std::iter::repeat_n(Some(base), repeat_count(n)? + 1));
        return Ok(());
    }
    let sign = match rest.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return Err(format!("unexpected {:?} after the duration", &rest[..1])),
    };
    let (delta, rest) = signed_duration_prefix(&rest[1..])?;
    let n = rest
        .strip_prefix('x')
        .ok_or("expected 'x<count>' after the step duration")
        .and_then(|n| repeat_count(n).map_err(|_| "invalid repeat count"))?;
    let mut off = base;
    for _ in 0..=n {
        out.push(Some(off));
        off = off.saturating_add(sign * delta);
    }
    Ok(())
}

/// A repeat count, bounded so that a typo cannot ask for billions of points.
fn repeat_count(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|_| format!("invalid repeat count {s:?}"))?;
    if n > MAX_REPEAT {
        return Err(format!("repeat count {n} too large (at most {MAX_REPEAT})"));
    }
    Ok(n)
}

const MAX_REPEAT: usize = 1 << 20;

/// One optionally signed duration of a single unit (`-30s`, `1ms`, `0`) at the start of `s`,
/// in ms, and what follows it (`x` is never part of a unit).
fn signed_duration_prefix(s: &str) -> Result<(i64, &str), String> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!("expected digits in duration {s:?}"));
    }
    let unit = body[digits..]
        .bytes()
        .take_while(|b| b.is_ascii_alphabetic() && *b != b'x')
        .count();
    let text = &body[..digits + unit];
    let ms = if unit == 0 && text.bytes().all(|b| b == b'0') {
        0
    } else {
        crate::duration::parse_ms(text).map_err(|_| format!("invalid duration {text:?}"))?
    };
    Ok((if neg { -ms } else { ms }, &body[digits + unit..]))
}

/// Records the start timestamps of a loaded series: `offsets[i]` (see
/// [`parse_start_offsets`]) relative to the time of point `i`, for the points present.
pub(crate) fn load_start_timestamps(
    store: &mut Store,
    interval_ms: i64,
    start_ms: i64,
    labels: &Labels,
    values: &[Option<SeriesValue>],
    offsets: &[Option<i64>],
) {
    let Some(id) = store.lookup(labels) else {
        return;
    };
    for (i, (v, off)) in values.iter().zip(offsets).enumerate() {
        if let (Some(_), Some(off)) = (v, off) {
            let t = start_ms.saturating_add((i as i64).saturating_mul(interval_ms));
            store.append_start_timestamp(id, t, t.saturating_add(*off));
        }
    }
}

/// The counter reset hint a histogram reads back with from Prometheus' TSDB: samples after the
/// first of a chunk read `not_reset`; the first of a chunk reads `unknown` (a chunk starts at
/// the first histogram of a run, at a reset, at a change of schema or zero bucket and between
/// gauge and counter histograms; a chunk's `reset` header is not passed on to readers,
/// prometheus/prometheus#15346). Gauge histograms stay gauges.
pub(crate) fn stored_hint(h: &FloatHistogram, prev: Option<&FloatHistogram>) -> CounterResetHint {
    use CounterResetHint::*;
    if h.counter_reset_hint == Gauge {
        return Gauge;
    }
    let Some(p) = prev else {
        return Unknown;
    };
    let mut cur = h.clone();
    cur.counter_reset_hint = if h.counter_reset_hint == Reset { Reset } else { Unknown };
    if p.counter_reset_hint == Gauge
        || cur.detect_reset(p)
        || h.schema != p.schema
        || h.zero_threshold != p.zero_threshold
    {
        Unknown
    } else {
        NotReset
    }
}

fn rest_head(s: &str) -> &str {
    let end = s.char_indices().nth(12).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

/// Expands one item: `_`, `_xN`, `v`, `vxN`, `v+dxN`, `v-dxN`.
fn expand_item(item: &str, out: &mut Vec<Option<SeriesValue>>, room: Room) -> Result<(), String> {
    if let Some(rest) = item.strip_prefix('_') {
        if rest.is_empty() {
            room.fits(out.len(), 1)?;
            out.push(None);
            return Ok(());
        }
        let n = rest
            .strip_prefix('x')
            .ok_or_else(|| "expected 'x' after '_'".to_string())
            .and_then(parse_times)?;
        room.fits(out.len(), n)?;
        out.extend(std::iter::repeat_n(None, n as usize));
        return Ok(());
    }
    let (first, len) = scan_value(item, true)?;
    let mut rest = &item[len..];
    if rest.is_empty() {
        room.fits(out.len(), 1)?;
        out.push(Some(SeriesValue::from_f64(first)));
        return Ok(());
    }
    let mut step = 0.0;
    if rest.starts_with(['+', '-']) {
        let (d, len) = scan_value(rest, false)?;
        step = d;
        rest = &rest[len..];
        if rest.is_empty() {
            return Err("an increment needs a repetition count ('x' and a number)".into());
        }
    }
    let times = rest
        .strip_prefix('x')
        .ok_or_else(|| format!("unexpected {rest:?}"))
        .and_then(parse_times)?;
    room.fits(out.len(), times + 1)?;
    // Prometheus adds the step repeatedly; multiplying would drift differently.
    let mut k = first;
    for _ in 0..=times {
        out.push(Some(SeriesValue::from_f64(k)));
        k += step;
    }
    Ok(())
}

/// Repetition counts: decimal digits only, as Prometheus' `ParseUint(s, 10, 64)`; capped so a
/// typo cannot exhaust memory.
fn parse_times(s: &str) -> Result<u64, String> {
    const MAX: u64 = 10_000_000;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid repetition count {s:?}"));
    }
    let n: u64 = s.parse().map_err(|_| format!("invalid repetition count {s:?}"))?;
    if n > MAX {
        return Err(format!("repetition count {n} is larger than {MAX}"));
    }
    Ok(n)
}

/// Scans a value at the start of `s`: an optional sign, then a number, `Inf`, `NaN` or (when
/// `allow_stale`, without sign) `stale`. Returns the value and the bytes consumed; stops before
/// a trailing `x`, `+` or `-` that starts a step or a count.
fn scan_value(s: &str, allow_stale: bool) -> Result<(f64, usize), String> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut neg = false;
    if let Some(&c @ (b'+' | b'-')) = b.first() {
        neg = c == b'-';
        i = 1;
    }
    let start = i;
    match b.get(i) {
        Some(c) if c.is_ascii_alphabetic() => {
            // Words run over letters, digits, '_' and ':' like Prometheus identifiers, so
            // `stalex3` is one (invalid) word there too.
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let word = &s[start..i];
            let v = if word.eq_ignore_ascii_case("inf") {
                f64::INFINITY
            } else if word.eq_ignore_ascii_case("nan") {
                f64::NAN
            } else if word == "stale" && allow_stale && start == 0 {
                f64::from_bits(STALE_NAN_BITS)
            } else {
                return Err(format!("expected a number or \"stale\", got {word:?}"));
            };
            Ok((if neg { -v } else { v }, i))
        }
        Some(c) if c.is_ascii_digit() || *c == b'.' => {
            let end = scan_number(b, i);
            if end == start {
                return Err("expected a number".into());
            }
            let v = parse_go_number(&s[start..end])?;
            Ok((if neg { -v } else { v }, end))
        }
        _ => Err("expected a number".into()),
    }
}

/// The end of a number token starting at `i`: digits, one '.', one exponent with optional sign,
/// and '_' separators; `0x` followed by hex digits containing a letter is a hex literal (a
/// purely decimal `0x10` is "0 repeated 10 times", as in Prometheus).
fn scan_number(b: &[u8], i: usize) -> usize {
    if b.get(i) == Some(&b'0') && matches!(b.get(i + 1), Some(b'x' | b'X')) {
        let mut j = i + 2;
        while j < b.len() && (b[j].is_ascii_hexdigit() || b[j] == b'_') {
            j += 1;
        }
        let digits = &b[i + 2..j];
        if digits.iter().any(|c| c.is_ascii_alphabetic()) && !b.get(j).is_some_and(|c| c.is_ascii_alphanumeric()) {
            return j;
        }
    }
    let mut j = i;
    let mut seen_dot = false;
    let mut seen_exp = false;
    while j < b.len() {
        match b[j] {
            b'0'..=b'9' | b'_' => j += 1,
            b'.' if !seen_dot && !seen_exp => {
                seen_dot = true;
                j += 1;
            }
            b'e' | b'E' if !seen_exp => {
                seen_exp = true;
                j += 1;
                if matches!(b.get(j), Some(b'+' | b'-')) {
                    j += 1;
                }
            }
            _ => break,
        }
    }
    j
}

/// Go's `ParseInt(s, 0, 64)` then `ParseFloat(s, 64)`, as Prometheus' parser does: so `0x1F`
/// and `0o17` work, `017` is octal, and `1_000` is allowed.
pub(crate) fn parse_go_number(s: &str) -> Result<f64, String> {
    if let Some(v) = parse_go_int(s) {
        return Ok(v as f64);
    }
    if !s.contains('_') {
        if let Ok(v) = s.parse::<f64>() {
            return Ok(v);
        }
    }
    Err(format!("invalid number {s:?}"))
}

/// Go's integer literal syntax with base prefixes and underscores between digits.
fn parse_go_int(s: &str) -> Option<i64> {
    let (digits, radix, prefixed) = match s.as_bytes() {
        [b'0', b'x' | b'X', ..] => (&s[2..], 16, true),
        [b'0', b'o' | b'O', ..] => (&s[2..], 8, true),
        [b'0', b'b' | b'B', ..] => (&s[2..], 2, true),
        [b'0', _, ..] => (&s[1..], 8, true),
        _ => (s, 10, false),
    };
    if s.contains('_') {
        // Underscores only between digits (or right after a base prefix).
        let bytes = digits.as_bytes();
        let bad_edge = bytes.last() == Some(&b'_') || (!prefixed && bytes.first() == Some(&b'_'));
        if bad_edge || digits.contains("__") {
            return None;
        }
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    i64::from_str_radix(&clean, radix).ok()
}

/// A byte cursor over a series selector.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Self {
        Cursor { s, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn err(&self, msg: &str) -> String {
        format!(
            "{msg} at column {}",
            self.s[..self.pos.min(self.s.len())].chars().count() + 1
        )
    }

    /// `name`, `name{...}` or `{...}`.
    fn metric(&mut self) -> Result<Labels, String> {
        let mut b = LabelsBuilder::new(&Labels::empty());
        let name = self.ident(true);
        if name.is_empty() && self.peek() != Some(b'{') {
            return Err(self.err("expected a metric name or '{'"));
        }
        if self.peek() == Some(b'{') {
            self.pos += 1;
            self.label_set(&mut b)?;
        }
        if !name.is_empty() {
            b.set(METRIC_NAME, name);
        }
        Ok(b.build())
    }

    /// An identifier: `[a-zA-Z_][a-zA-Z0-9_]*`, with ':' allowed in metric names.
    fn ident(&mut self, metric: bool) -> &'a str {
        let start = self.pos;
        let b = self.s.as_bytes();
        while let Some(&c) = b.get(self.pos) {
            let ok = c.is_ascii_alphabetic()
                || c == b'_'
                || (metric && c == b':')
                || (self.pos > start && c.is_ascii_digit());
            if !ok {
                break;
            }
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    /// The inside of `{...}` after the brace: `l="v"` pairs, a lone quoted metric name, trailing
    /// comma allowed.
    fn label_set(&mut self, b: &mut LabelsBuilder) -> Result<(), String> {
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                None => return Err(self.err("unclosed '{'")),
                _ => {}
            }
            let quoted_name = matches!(self.peek(), Some(b'"' | b'\'' | b'`'));
            let name = if quoted_name {
                self.quoted()?
            } else {
                let n = self.ident(false);
                if n.is_empty() {
                    return Err(self.err("expected a label name"));
                }
                n.to_string()
            };
            self.skip_ws();
            match self.peek() {
                Some(b'=') => {
                    self.pos += 1;
                    self.skip_ws();
                    if !matches!(self.peek(), Some(b'"' | b'\'' | b'`')) {
                        return Err(self.err("expected a quoted label value"));
                    }
                    let value = self.quoted()?;
                    b.set(&name, &value);
                }
                // A lone quoted string is the metric name (Prometheus 3 UTF-8 names).
                Some(b',' | b'}') if quoted_name => {
                    b.set(METRIC_NAME, &name);
                }
                _ => return Err(self.err(&format!("expected '=' after label name {name:?}"))),
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                None => return Err(self.err("unclosed '{'")),
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    /// A Go-style quoted string at the cursor: "..." or '...' with escapes, or `...` raw.
    fn quoted(&mut self) -> Result<String, String> {
        let start = self.pos;
        let rest = &self.s[self.pos..];
        match unquote_prefix(rest) {
            Ok((v, len)) => {
                self.pos += len;
                Ok(v)
            }
            Err((msg, off)) => {
                self.pos = start + off;
                Err(self.err(&msg))
            }
        }
    }
}

/// Unquotes the Go-style string literal that starts `s`; returns it and the bytes consumed, or
/// a message and the byte offset of the problem.
pub(crate) fn unquote_prefix(s: &str) -> Result<(String, usize), (String, usize)> {
    let b = s.as_bytes();
    let q = match b.first() {
        Some(&q @ (b'"' | b'\'' | b'`')) => q,
        _ => return Err(("expected a quoted string".into(), 0)),
    };
    if q == b'`' {
        return match s[1..].find('`') {
            Some(end) => Ok((s[1..1 + end].to_string(), end + 2)),
            None => Err(("unterminated raw string".into(), s.len())),
        };
    }
    let mut out: Vec<u8> = Vec::new();
    let mut i = 1;
    while i < b.len() {
        let c = b[i];
        if c == q {
            return String::from_utf8(out)
                .map(|v| (v, i + 1))
                .map_err(|_| ("string is not valid UTF-8".to_string(), i));
        }
        if c == b'\n' {
            return Err(("newline in quoted string".into(), i));
        }
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let esc_at = i;
        i += 1;
        let Some(&e) = b.get(i) else {
            return Err(("unterminated escape sequence".into(), esc_at));
        };
        i += 1;
        let simple = match e {
            b'a' => Some(0x07),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(0x0b),
            b'\\' => Some(b'\\'),
            b'"' => Some(b'"'),
            b'\'' => Some(b'\''),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (n, radix, is_byte) = match e {
            b'0'..=b'7' => {
                i -= 1;
                (3, 8, true)
            }
            b'x' => (2, 16, true),
            b'u' => (4, 16, false),
            b'U' => (8, 16, false),
            _ => return Err((format!("unknown escape sequence \\{}", e as char), esc_at)),
        };
        let digits = s
            .get(i..i + n)
            .ok_or(("escape sequence not terminated".to_string(), esc_at))?;
        let x = u32::from_str_radix(digits, radix)
            .map_err(|_| (format!("invalid escape sequence \\{}{digits}", e as char), esc_at))?;
        i += n;
        if is_byte {
            let byte = u8::try_from(x).map_err(|_| ("octal escape value > 255".to_string(), esc_at))?;
            out.push(byte);
        } else {
            let ch =
                char::from_u32(x).ok_or(("escape sequence is an invalid Unicode code point".to_string(), esc_at))?;
            let mut buf = [0u8; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
    }
    Err(("unterminated quoted string".into(), s.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Matcher;

    fn floats(vs: &[Option<SeriesValue>]) -> Vec<Option<f64>> {
        vs.iter().map(|v| v.as_ref().map(|v| v.to_f64())).collect()
    }

    fn vals(s: &str) -> Vec<Option<f64>> {
        floats(&parse_values(s).unwrap())
    }

    #[test]
    fn start_offsets_as_promqltest_writes_them() {
        let p = |s: &str| parse_start_offsets(s).unwrap();
        assert_eq!(p("_ _x2 -1m"), vec![None, None, None, Some(-60_000)]);
        assert_eq!(p("-30s-1mx2"), vec![Some(-30_000), Some(-90_000), Some(-150_000)]);
        assert_eq!(
            p("0-1mx1 +1m 1ms -0ms"),
            vec![Some(0), Some(-60_000), Some(60_000), Some(1), Some(0)]
        );
        assert_eq!(p("-59999msx1"), vec![Some(-59_999), Some(-59_999)]);
        assert_eq!(p("1s+500msx2"), vec![Some(1000), Some(1500), Some(2000)]);
        for bad in [
            "x",
            "_x0",
            "_xa",
            "1m*2",
            "1m+1m",
            "1m+1mxq",
            "-",
            "1q",
            "1mx99999999999",
        ] {
            assert!(parse_start_offsets(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn start_timestamps_load_beside_the_samples() {
        let mut store = Store::new();
        let (labels, values) = parse_series_line("c _ 1 2 _ 4").unwrap();
        load_notation(&mut store, 60_000, 0, &labels, &values);
        assert!(!store.has_start_timestamps());
        // Offsets of omitted samples are dropped with them.
        let offsets = parse_start_offsets("-1m -1m _ -1m -1m").unwrap();
        load_start_timestamps(&mut store, 60_000, 0, &labels, &values, &offsets);
        assert!(store.has_start_timestamps());
        let id = store.lookup(&labels).unwrap();
        let mut out = Vec::new();
        store.start_timestamps(id, 0, 240_000, &mut out);
        assert_eq!(out, vec![(60_000, 0), (240_000, 180_000)]);
        out.clear();
        store.start_timestamps(id, 61_000, 240_000, &mut out);
        assert_eq!(out, vec![(240_000, 180_000)]);
        // Out of order, and a replacement.
        store.append_start_timestamp(id, 120_000, 100_000);
        store.append_start_timestamp(id, 240_000, 200_000);
        out.clear();
        store.start_timestamps(id, 0, i64::MAX, &mut out);
        assert_eq!(out, vec![(60_000, 0), (120_000, 100_000), (240_000, 200_000)]);
        // The float samples are untouched.
        let mut samples = Vec::new();
        store.samples(id, 0, i64::MAX, &mut samples);
        assert_eq!(samples, vec![(60_000, 1.0), (120_000, 2.0), (240_000, 4.0)]);
    }

    #[test]
    fn expansions() {
        assert_eq!(vals("1+1x3"), [Some(1.0), Some(2.0), Some(3.0), Some(4.0)]);
        assert_eq!(vals("-2-3x2"), [Some(-2.0), Some(-5.0), Some(-8.0)]);
        assert_eq!(vals("5x2"), [Some(5.0); 3]);
        assert_eq!(vals("_x2 1"), [None, None, Some(1.0)]);
        assert_eq!(vals("_ 1 _"), [None, Some(1.0), None]);
        assert_eq!(vals("0+10x0"), [Some(0.0)]);
        assert_eq!(vals("1-1x2"), [Some(1.0), Some(0.0), Some(-1.0)]);
        assert_eq!(vals("+1 -1"), [Some(1.0), Some(-1.0)]);
        assert_eq!(vals("0x3"), [Some(0.0); 4]);
        assert_eq!(vals("  "), []);
    }

    #[test]
    fn repeated_addition_matches_prometheus() {
        // 0.1 added ten times is not 1.0; Prometheus keeps that drift.
        let v = vals("0+0.1x10");
        let mut k = 0.0f64;
        for x in &v {
            assert_eq!(x.unwrap().to_bits(), k.to_bits());
            k += 0.1;
        }
        assert_ne!(v[10].unwrap(), 1.0);
    }

    #[test]
    fn numbers_and_specials() {
        let v = parse_values("stale 1e3 Inf -Inf NaN +Inf .5 0x1F 017 1_000 inf -nan 2.5e-1").unwrap();
        assert_eq!(v[0], Some(SeriesValue::Stale));
        assert_eq!(v[0].as_ref().unwrap().to_f64().to_bits(), STALE_NAN_BITS);
        let f = floats(&v);
        assert_eq!(f[1], Some(1000.0));
        assert_eq!(f[2], Some(f64::INFINITY));
        assert_eq!(f[3], Some(f64::NEG_INFINITY));
        assert!(f[4].unwrap().is_nan());
        assert_eq!(f[5], Some(f64::INFINITY));
        assert_eq!(f[6], Some(0.5));
        assert_eq!(f[7], Some(31.0));
        assert_eq!(f[8], Some(15.0));
        assert_eq!(f[9], Some(1000.0));
        assert_eq!(f[10], Some(f64::INFINITY));
        assert!(f[11].unwrap().is_nan());
        assert_eq!(f[12], Some(0.25));
        assert_eq!(vals("1e3+1e3x1"), [Some(1000.0), Some(2000.0)]);
        assert_eq!(vals("Inf-1x1"), [Some(f64::INFINITY), Some(f64::INFINITY)]);
    }

    #[test]
    fn bad_values() {
        for bad in [
            "abc", "1+1", "1x", "1xa", "_y", "stalex3", "1..2", "x3", "1+x2", "-stale", "1x-2", "_x",
        ] {
            assert!(parse_values(bad).is_err(), "{bad}");
        }
        for bad in [
            "{{sum:1",
            "{{sum:1}}x",
            "{{sum:1}}+1x2",
            "{{sum:1}}+{{sum:1}}",
            "{{bad:1}}",
        ] {
            assert!(parse_values(bad).is_err(), "{bad}");
        }
        let e = parse_values("1 {{count:1").unwrap_err();
        assert!(e.starts_with(NATIVE_HISTOGRAM_ERROR), "{e}");
    }

    #[test]
    fn histogram_values_expand_and_load_with_counter_reset_hints() {
        let v = parse_values("1 {{schema:1 count:3 buckets:[1 2]}} _ {{sum:3 count:2 buckets:[2]}}x2").unwrap();
        assert_eq!(v.len(), 6);
        assert_eq!(v[0], Some(SeriesValue::Float(1.0)));
        assert_eq!(v[1].as_ref().and_then(|x| x.as_histogram()).map(|h| h.schema), Some(1));
        assert_eq!(v[2], None);
        let v = parse_values("{{sum:3 count:2 buckets:[2]}}+{{sum:1.3 count:1 buckets:[1]}}x2").unwrap();
        let last = v[2].as_ref().and_then(|x| x.as_histogram()).unwrap();
        assert_eq!(last.test_expression(), "{{count:4 sum:5.6 buckets:[4]}}");
        let v = parse_values("{{count:5 buckets:[5]}}-{{count:1 buckets:[1]}}x1").unwrap();
        let last = v[1].as_ref().and_then(|x| x.as_histogram()).unwrap();
        assert_eq!(last.test_expression(), "{{count:4 buckets:[4]}}");

        // Hints as Prometheus' TSDB reads them back: unknown first, then not_reset, unknown at a
        // reset and after a float or a staleness marker; gauges stay gauges.
        let mut store = Store::new();
        let (labels, values) = parse_series_line(
            "h {{count:2 buckets:[2]}}x1 {{count:1 buckets:[1]}} {{count:3 buckets:[3]}} stale {{count:4 buckets:[4]}} \
             5 {{count:4 buckets:[4]}} {{counter_reset_hint:gauge count:1}}",
        )
        .unwrap();
        load_notation(&mut store, 1000, 0, &labels, &values);
        let mut out = Vec::new();
        store.histogram_samples(0, 0, 100_000, &mut out);
        let hints: Vec<CounterResetHint> = out.iter().map(|(_, h)| h.counter_reset_hint).collect();
        use CounterResetHint::*;
        assert_eq!(hints, [Unknown, NotReset, Unknown, NotReset, Unknown, Unknown, Gauge]);
        assert_eq!(store.num_histograms(), 7);
        let mut floats = Vec::new();
        store.samples(0, 0, 100_000, &mut floats);
        assert_eq!(floats.len(), 2);
    }

    #[test]
    fn full_lines() {
        let (l, v) = parse_series_line(r#"http_requests{job="api", instance="0"} 0+10x2 _ stale"#).unwrap();
        assert_eq!(l.to_string(), r#"http_requests{instance="0", job="api"}"#);
        assert_eq!(v.len(), 5);
        assert_eq!(v[4], Some(SeriesValue::Stale));

        let (l, v) = parse_series_line("up 1").unwrap();
        assert_eq!(l.metric_name(), Some("up"));
        assert_eq!(v, [Some(SeriesValue::Float(1.0))]);

        let (l, _) = parse_series_line(r#"{__name__="x", l="v",} 1"#).unwrap();
        assert_eq!(l.metric_name(), Some("x"));
        assert_eq!(l.get("l"), Some("v"));

        let (l, _) = parse_series_line(r#"{"some.metric", "l.x"="v", 'b'='q\'s'} 1"#).unwrap();
        assert_eq!(l.metric_name(), Some("some.metric"));
        assert_eq!(l.get("l.x"), Some("v"));
        assert_eq!(l.get("b"), Some("q's"));

        let (l, v) = parse_series_line("name:with:colons{} ").unwrap();
        assert_eq!(l.metric_name(), Some("name:with:colons"));
        assert!(v.is_empty());

        let (l, _) = parse_series_line("m{a=\"x\\ny\\\"z\\\\\", b=`raw\\n`, c=\"\\u00e9\\x41\\101\"} 1").unwrap();
        assert_eq!(l.get("a"), Some("x\ny\"z\\"));
        assert_eq!(l.get("b"), Some("raw\\n"));
        assert_eq!(l.get("c"), Some("éAA"));
    }

    #[test]
    fn metric_selectors() {
        let l = parse_metric(r#"{job="x"}"#).unwrap();
        assert_eq!(l.metric_name(), None);
        assert_eq!(l.get("job"), Some("x"));
        assert!(parse_metric("{}").unwrap().is_empty());
        // An empty value means "absent".
        assert!(!parse_metric(r#"m{a=""}"#).unwrap().has("a"));
        for bad in [
            "",
            "m{",
            r#"m{a="b""#,
            r#"m{a}"#,
            r#"m{a="b" c="d"}"#,
            r#"m{="b"}"#,
            "m x",
            r#"m{a="\q"}"#,
            "1m",
        ] {
            assert!(parse_metric(bad).is_err(), "{bad}");
        }
        let e = parse_metric(r#"m{a "b"}"#).unwrap_err();
        assert!(e.contains("expected '='") && e.contains("column 5"), "{e}");
    }

    #[test]
    fn load_into_store() {
        let mut store = Store::new();
        let (l, v) = parse_series_line("m{a=\"1\"} 1 _ 3 stale").unwrap();
        load_notation(&mut store, 60_000, 0, &l, &v);
        let ids = store.select_ids(&[Matcher::equal("a", "1")]);
        let mut out = Vec::new();
        store.samples(ids[0], i64::MIN, i64::MAX, &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1], (120_000, 3.0));
        assert_eq!(out[2].0, 180_000);
        assert_eq!(out[2].1.to_bits(), STALE_NAN_BITS);
        let (l, v) = parse_series_line("empty _x3").unwrap();
        load_notation(&mut store, 60_000, 0, &l, &v);
        assert_eq!(store.num_series(), 1);
    }
}
