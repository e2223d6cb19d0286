//! Prometheus' float native histogram (`model/histogram.FloatHistogram`): the value type, the
//! promqltest / promtool notation (`{{schema:1 count:3 sum:2 buckets:[1 2]}}`), arithmetic and
//! counter-reset detection.
//!
//! Buckets are kept sparse, as `(index, count)` pairs in ascending index order, instead of
//! Prometheus' spans: every operation Prometheus defines on spans (compaction, merging, schema
//! reduction) only ever depends on which index holds which count, and a missing bucket counts
//! as an empty one. Equality and [`FloatHistogram::test_expression`] therefore look at non-empty
//! buckets only, exactly what Prometheus gets after `Compact`.

use std::fmt;

use crate::gofmt::format_g;

/// Schema of histograms with custom bucket boundaries (NHCB).
pub(crate) const CUSTOM_BUCKETS_SCHEMA: i32 = -53;

/// Highest and lowest exponential schemas Prometheus accepts.
const MAX_SCHEMA: i32 = 8;
const MIN_SCHEMA: i32 = -4;

/// Bucket indices beyond this cannot hold a finite float at any schema; it also bounds the
/// dense bucket lists notation output fills in between sparse indices.
const MAX_INDEX_SPAN: i64 = 1 << 22;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CounterResetHint {
    #[default]
    Unknown,
    Reset,
    NotReset,
    Gauge,
}

#[derive(Clone, Debug, Default)]
pub struct FloatHistogram {
    pub counter_reset_hint: CounterResetHint,
    pub schema: i32,
    pub zero_threshold: f64,
    pub zero_count: f64,
    pub count: f64,
    pub sum: f64,
    /// `(bucket index, count)` ascending by index; index i at schema s covers
    /// (base^(i-1), base^i] with base = 2^(2^-s), for custom buckets (bound[i-1], bound[i]].
    pub positive: Vec<(i32, f64)>,
    /// Same for negative observations, mirrored (index i covers [-base^i, -base^(i-1))).
    pub negative: Vec<(i32, f64)>,
    /// Upper bounds of the custom buckets (schema -53 only); the last bucket reaches +Inf.
    pub custom_values: Vec<f64>,
}

impl FloatHistogram {
    pub fn uses_custom_buckets(&self) -> bool {
        self.schema == CUSTOM_BUCKETS_SCHEMA
    }

    /// Prometheus' `TestExpression`: the notation promqltest and promtool print and compare.
    pub fn test_expression(&self) -> String {
        let mut res: Vec<String> = Vec::new();
        if self.schema != 0 {
            res.push(format!("schema:{}", self.schema));
        }
        if self.count != 0.0 {
            res.push(format!("count:{}", format_g(self.count)));
        }
        if self.sum != 0.0 {
            res.push(format!("sum:{}", format_g(self.sum)));
        }
        if self.zero_count != 0.0 {
            res.push(format!("z_bucket:{}", format_g(self.zero_count)));
        }
        if self.zero_threshold != 0.0 {
            res.push(format!("z_bucket_w:{}", format_g(self.zero_threshold)));
        }
        if self.uses_custom_buckets() {
            let vs: Vec<String> = self.custom_values.iter().map(|v| format_g(*v)).collect();
            res.push(format!("custom_values:[{}]", vs.join(" ")));
        }
        match self.counter_reset_hint {
            CounterResetHint::Unknown => {}
            CounterResetHint::Reset => res.push("counter_reset_hint:reset".into()),
            CounterResetHint::NotReset => res.push("counter_reset_hint:not_reset".into()),
            CounterResetHint::Gauge => res.push("counter_reset_hint:gauge".into()),
        }
        for (buckets, bkey, okey) in [
            (&self.positive, "buckets", "offset"),
            (&self.negative, "n_buckets", "n_offset"),
        ] {
            // Compact(MaxInt): one span from the first to the last non-empty bucket.
            let nz: Vec<(i32, f64)> = buckets.iter().copied().filter(|b| b.1 != 0.0).collect();
            let (Some(first), Some(last)) = (nz.first(), nz.last()) else {
                continue;
            };
            if first.0 != 0 {
                res.push(format!("{okey}:{}", first.0));
            }
            let width = i64::from(last.0) - i64::from(first.0) + 1;
            let mut dense = vec![0.0; width.clamp(0, MAX_INDEX_SPAN) as usize];
            for (i, c) in &nz {
                if let Some(slot) = dense.get_mut((i64::from(*i) - i64::from(first.0)) as usize) {
                    *slot = *c;
                }
            }
            let vs: Vec<String> = dense.iter().map(|v| format_g(*v)).collect();
            res.push(format!("{bkey}:[{}]", vs.join(" ")));
        }
        format!("{{{{{}}}}}", res.join(" "))
    }

    /// Equality after compaction, as Prometheus' `Equals` on compacted histograms, including
    /// the counter reset hint. Floats compare exactly, NaN equal to NaN.
    pub fn equals(&self, other: &FloatHistogram) -> bool {
        self.counter_reset_hint == other.counter_reset_hint && self.equals_ignoring_hint(other, 0.0)
    }

    /// Equality of everything but the counter reset hint, floats within relative `eps`
    /// (exact when 0), NaN equal to NaN.
    pub fn equals_ignoring_hint(&self, other: &FloatHistogram, eps: f64) -> bool {
        let eq = |a: f64, b: f64| almost_equal(a, b, eps);
        self.schema == other.schema
            && self.zero_threshold == other.zero_threshold
            && eq(self.zero_count, other.zero_count)
            && eq(self.count, other.count)
            && eq(self.sum, other.sum)
            && (!self.uses_custom_buckets() || floats_identical(&self.custom_values, &other.custom_values))
            && buckets_equal(&self.positive, &other.positive, eps)
            && buckets_equal(&self.negative, &other.negative, eps)
    }

    /// Multiplies every count and the sum by `f` (`histogram * scalar`).
    pub fn mul(&mut self, f: f64) {
        self.zero_count *= f;
        self.count *= f;
        self.sum *= f;
        for b in self.positive.iter_mut().chain(self.negative.iter_mut()) {
            b.1 *= f;
        }
    }

    /// Divides every count and the sum by `f` (`histogram / scalar`); division by zero
    /// removes all buckets, as in Prometheus.
    pub fn div(&mut self, f: f64) {
        self.zero_count /= f;
        self.count /= f;
        self.sum /= f;
        if f == 0.0 {
            self.positive.clear();
            self.negative.clear();
            return;
        }
        for b in self.positive.iter_mut().chain(self.negative.iter_mut()) {
            b.1 /= f;
        }
    }

    /// `self + other`, reconciling schemas (the lower wins) and zero buckets (the wider wins)
    /// as Prometheus' `Add`. Custom-bucket histograms add only with identical bounds.
    pub fn add(&self, other: &FloatHistogram) -> Result<FloatHistogram, HistogramError> {
        self.combine(other, 1.0)
    }

    /// `self - other`, like [`FloatHistogram::add`].
    pub fn sub(&self, other: &FloatHistogram) -> Result<FloatHistogram, HistogramError> {
        self.combine(other, -1.0)
    }

    fn combine(&self, other: &FloatHistogram, sign: f64) -> Result<FloatHistogram, HistogramError> {
        if self.uses_custom_buckets() != other.uses_custom_buckets() {
            return Err(HistogramError::MixedExponentialCustom);
        }
        if self.uses_custom_buckets() && !floats_identical(&self.custom_values, &other.custom_values) {
            return Err(HistogramError::MismatchedCustomBuckets);
        }
        let mut a = self.clone();
        let mut b = other.clone();
        let schema = a.schema.min(b.schema);
        if !a.uses_custom_buckets() {
            a.reduce_resolution(schema);
            b.reduce_resolution(schema);
            // The wider zero bucket wins; both must agree on it before buckets add up.
            let mut threshold = a.zero_threshold.max(b.zero_threshold);
            loop {
                let ta = a.widen_zero_bucket(threshold);
                let tb = b.widen_zero_bucket(ta);
                if ta == threshold && tb == threshold {
                    break;
                }
                threshold = ta.max(tb);
            }
        }
        a.counter_reset_hint = adjust_hint(a.counter_reset_hint, b.counter_reset_hint);
        a.zero_count += sign * b.zero_count;
        a.count += sign * b.count;
        a.sum += sign * b.sum;
        a.positive = merge_buckets(&a.positive, &b.positive, sign);
        a.negative = merge_buckets(&a.negative, &b.negative, sign);
        Ok(a)
    }

    /// Lowers the schema to `target` (no-op when already at or below), merging buckets.
    pub fn reduce_resolution(&mut self, target: i32) {
        if self.uses_custom_buckets() || target >= self.schema {
            return;
        }
        let shift = (self.schema - target).min(31) as u32;
        for buckets in [&mut self.positive, &mut self.negative] {
            let mut out: Vec<(i32, f64)> = Vec::with_capacity(buckets.len());
            for &(i, c) in buckets.iter() {
                let j = ((i64::from(i) - 1) >> shift) as i32 + 1;
                match out.last_mut() {
                    Some(last) if last.0 == j => last.1 += c,
                    _ => out.push((j, c)),
                }
            }
            *buckets = out;
        }
        self.schema = target;
    }

    /// Moves every bucket lying within `threshold` into the zero bucket and sets the zero
    /// threshold to it; a populated bucket straddling the threshold widens it to the bucket's
    /// upper bound. Returns the threshold in effect afterwards.
    fn widen_zero_bucket(&mut self, mut threshold: f64) -> f64 {
        if threshold <= self.zero_threshold {
            return self.zero_threshold;
        }
        loop {
            let mut widened = false;
            for (i, c) in self.positive.iter().chain(self.negative.iter()) {
                let lower = self.bound(i - 1);
                let upper = self.bound(*i);
                if lower < threshold && upper > threshold && *c != 0.0 {
                    threshold = upper;
                    widened = true;
                }
            }
            if !widened {
                break;
            }
        }
        let mut absorbed = 0.0;
        let schema_bounds = |h: &FloatHistogram, i: i32| h.bound(i);
        let keep = |h: &FloatHistogram, b: &(i32, f64), absorbed: &mut f64| {
            if schema_bounds(h, b.0 - 1) < threshold {
                *absorbed += b.1;
                false
            } else {
                true
            }
        };
        let this = self.clone();
        self.positive.retain(|b| keep(&this, b, &mut absorbed));
        self.negative.retain(|b| keep(&this, b, &mut absorbed));
        self.zero_count += absorbed;
        self.zero_threshold = threshold;
        threshold
    }

    /// Upper bound of positive bucket `i` (Prometheus' `getBound`).
    pub fn bound(&self, i: i32) -> f64 {
        if self.uses_custom_buckets() {
            if i < 0 {
                return f64::NEG_INFINITY;
            }
            return self.custom_values.get(i as usize).copied().unwrap_or(f64::INFINITY);
        }
        exponential_bound(i, self.schema)
    }

    /// Prometheus' `DetectReset`: whether `self`, following `prev`, means the counter reset.
    pub fn detect_reset(&self, prev: &FloatHistogram) -> bool {
        match self.counter_reset_hint {
            CounterResetHint::Reset => return true,
            CounterResetHint::NotReset => return false,
            _ => {}
        }
        if self.count < prev.count {
            return true;
        }
        if self.uses_custom_buckets() != prev.uses_custom_buckets()
            || (self.uses_custom_buckets() && !floats_identical(&self.custom_values, &prev.custom_values))
        {
            return true;
        }
        if self.schema > prev.schema || self.zero_threshold < prev.zero_threshold {
            return true;
        }
        let mut p = prev.clone();
        p.reduce_resolution(self.schema);
        if p.widen_zero_bucket(self.zero_threshold) != self.zero_threshold {
            return true;
        }
        if self.zero_count < p.zero_count {
            return true;
        }
        decreased(&p.positive, &self.positive) || decreased(&p.negative, &self.negative)
    }

    /// Every bucket and the zero bucket, lowest first, as (lower, upper, count): negative
    /// buckets, the zero bucket, then positive buckets.
    pub fn all_buckets(&self) -> Vec<(f64, f64, f64)> {
        let mut out = Vec::with_capacity(self.positive.len() + self.negative.len() + 1);
        for &(i, c) in self.negative.iter().rev() {
            out.push((-self.bound(i), -self.bound(i - 1), c));
        }
        if !self.uses_custom_buckets() && (self.zero_count != 0.0 || self.zero_threshold != 0.0) {
            out.push((-self.zero_threshold, self.zero_threshold, self.zero_count));
        }
        for &(i, c) in &self.positive {
            let lower = if self.uses_custom_buckets() && i == 0 {
                f64::NEG_INFINITY
            } else {
                self.bound(i - 1)
            };
            out.push((lower, self.bound(i), c));
        }
        out
    }

    /// Prometheus' `FloatHistogram.String()` (what `count_values` writes as a histogram's label
    /// value): count, sum and every non-empty bucket, lowest first, with Go's `%g` numbers.
    pub fn go_string(&self) -> String {
        let mut s = format!("{{count:{}, sum:{}", format_g(self.count), format_g(self.sum));
        let mut bucket = |open: char, lo: f64, hi: f64, close: char, c: f64| {
            s.push_str(&format!(
                ", {open}{},{}{close}:{}",
                format_g(lo),
                format_g(hi),
                format_g(c)
            ));
        };
        for &(i, c) in self.negative.iter().rev().filter(|b| b.1 != 0.0) {
            bucket('[', -self.bound(i), -self.bound(i - 1), ')', c);
        }
        if self.zero_count != 0.0 {
            bucket('[', -self.zero_threshold, self.zero_threshold, ']', self.zero_count);
        }
        for &(i, c) in self.positive.iter().filter(|b| b.1 != 0.0) {
            let lower = if self.uses_custom_buckets() && i == 0 {
                f64::NEG_INFINITY
            } else {
                self.bound(i - 1)
            };
            bucket('(', lower, self.bound(i), ']', c);
        }
        s.push('}');
        s
    }

    /// Checks the invariants Prometheus' parser does not, but arithmetic relies on.
    fn validate(&self) -> Result<(), String> {
        if self.uses_custom_buckets() {
            if !self.negative.is_empty() || self.zero_count != 0.0 || self.zero_threshold != 0.0 {
                return Err("histograms with custom buckets have no negative or zero buckets".into());
            }
            if self.custom_values.windows(2).any(|w| w[0] >= w[1]) {
                return Err("custom_values must be strictly increasing".into());
            }
            if self
                .positive
                .iter()
                .any(|b| b.0 < 0 || b.0 as usize > self.custom_values.len())
            {
                return Err("more buckets than custom_values allow".into());
            }
        } else if !(MIN_SCHEMA..=MAX_SCHEMA).contains(&self.schema) {
            return Err(format!(
                "schema {} out of range (must be {MIN_SCHEMA}..{MAX_SCHEMA} or {CUSTOM_BUCKETS_SCHEMA})",
                self.schema
            ));
        }
        Ok(())
    }
}

/// [`FloatHistogram::equals`]: layouts holding the same buckets are equal.
impl PartialEq for FloatHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.equals(other)
    }
}

impl fmt::Display for FloatHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.test_expression())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    #[error("histograms with exponential and custom buckets cannot be combined")]
    MixedExponentialCustom,
    #[error("histograms with mismatched custom buckets cannot be combined")]
    MismatchedCustomBuckets,
}

/// The hint of a sum or difference, as Prometheus' `adjustCounterReset`: gauges stay gauges,
/// anything else not agreeing becomes unknown.
pub(crate) fn combined_hint(a: CounterResetHint, b: CounterResetHint) -> CounterResetHint {
    adjust_hint(a, b)
}

/// Whether histograms summed together (an aggregation, `sum_over_time`, `avg_over_time`) have
/// both a `reset` and a `not_reset` hint: Prometheus warns of conflicting counter resets then,
/// whatever else is among them.
pub(crate) fn hints_collide(hints: impl Iterator<Item = CounterResetHint>) -> bool {
    let (mut reset, mut not_reset) = (false, false);
    for h in hints {
        reset |= h == CounterResetHint::Reset;
        not_reset |= h == CounterResetHint::NotReset;
    }
    reset && not_reset
}

fn adjust_hint(a: CounterResetHint, b: CounterResetHint) -> CounterResetHint {
    use CounterResetHint::*;
    match (a, b) {
        _ if a == b => a,
        (Gauge, _) | (_, Gauge) => Gauge,
        _ => Unknown,
    }
}

fn almost_equal(a: f64, b: f64, eps: f64) -> bool {
    if a == b || (a.is_nan() && b.is_nan()) {
        return true;
    }
    if eps == 0.0 {
        return false;
    }
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || diff < f64::MIN_POSITIVE {
        return diff < eps * f64::MIN_POSITIVE;
    }
    diff / (a.abs() + b.abs()).min(f64::MAX) < eps
}

fn floats_identical(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
}

fn buckets_equal(a: &[(i32, f64)], b: &[(i32, f64)], eps: f64) -> bool {
    let mut ia = a.iter().filter(|x| x.1 != 0.0);
    let mut ib = b.iter().filter(|x| x.1 != 0.0);
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if x.0 == y.0 && almost_equal(x.1, y.1, eps) => {}
            _ => return false,
        }
    }
}

/// Sorted-merge of two bucket lists: `a + sign * b`.
fn merge_buckets(a: &[(i32, f64)], b: &[(i32, f64)], sign: f64) -> Vec<(i32, f64)> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                out.push((x.0, x.1 + sign * y.1));
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                out.push(*x);
                i += 1;
            }
            (Some(x), None) => {
                out.push(*x);
                i += 1;
            }
            (_, Some(y)) => {
                out.push((y.0, sign * y.1));
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

/// Whether any bucket of `cur` holds less than the same bucket of `prev` (missing = empty).
fn decreased(prev: &[(i32, f64)], cur: &[(i32, f64)]) -> bool {
    merge_buckets(cur, prev, -1.0).iter().any(|b| b.1 < 0.0)
}

/// Upper bound of bucket `i` at exponential `schema`: 2^(i * 2^-schema), with Prometheus'
/// special cases for the last finite bucket.
pub(crate) fn exponential_bound(i: i32, schema: i32) -> f64 {
    if schema < 0 {
        let exp = i64::from(i) << (-schema).min(31);
        if exp == 1024 {
            return f64::MAX;
        }
        return ldexp(1.0, exp);
    }
    let frac_idx = i & ((1 << schema) - 1);
    let frac = exponential_frac(frac_idx, schema);
    let exp = i64::from(i >> schema) + 1;
    if frac == 0.5 && exp == 1025 {
        return f64::MAX;
    }
    ldexp(frac, exp)
}

/// 2^(j / 2^schema) / 2, in [0.5, 1): the mantissa of a bucket bound.
fn exponential_frac(j: i32, schema: i32) -> f64 {
    if j == 0 {
        return 0.5;
    }
    0.5 * (f64::from(j) / f64::from(1 << schema)).exp2()
}

fn ldexp(frac: f64, exp: i64) -> f64 {
    if exp > 2000 {
        return f64::INFINITY;
    }
    if exp < -2000 {
        return 0.0;
    }
    let e = exp as i32;
    // Split the power so that neither factor overflows or goes subnormal early.
    frac * 2f64.powi(e / 2) * 2f64.powi(e - e / 2)
}

/// Parses one histogram in notation, `{{...}}` included.
pub(crate) fn parse(s: &str) -> Result<FloatHistogram, String> {
    let inner = s
        .trim()
        .strip_prefix("{{")
        .and_then(|r| r.strip_suffix("}}"))
        .ok_or_else(|| format!("a histogram is written {{{{...}}}}, got {s:?}"))?;
    let mut h = FloatHistogram::default();
    let (mut buckets, mut offset, mut n_buckets, mut n_offset) = (Vec::new(), 0i64, Vec::new(), 0i64);
    let mut seen: Vec<&str> = Vec::new();
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let colon = rest
            .find(':')
            .ok_or_else(|| format!("expected key:value in histogram, got {:?}", head(rest)))?;
        let key = rest[..colon].trim();
        if seen.contains(&key) {
            return Err(format!("duplicate key {key:?} in histogram"));
        }
        rest = rest[colon + 1..].trim_start();
        let value: &str;
        if rest.starts_with('[') {
            let end = rest.find(']').ok_or_else(|| format!("unclosed '[' after {key}:"))?;
            value = &rest[..=end];
            rest = rest[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value = &rest[..end];
            rest = rest[end..].trim_start();
        }
        let num = || parse_number(value).map_err(|e| format!("histogram {key}: {e}"));
        let int = || {
            value
                .parse::<i64>()
                .map_err(|_| format!("histogram {key}: expected an integer, got {value:?}"))
        };
        let list = || parse_list(value).map_err(|e| format!("histogram {key}: {e}"));
        match key {
            "schema" => {
                h.schema = i32::try_from(int()?).map_err(|_| format!("histogram schema {value} out of range"))?
            }
            "sum" => h.sum = num()?,
            "count" => h.count = num()?,
            "z_bucket" => h.zero_count = num()?,
            "z_bucket_w" => h.zero_threshold = num()?,
            "buckets" => buckets = list()?,
            "offset" => offset = int()?,
            "n_buckets" => n_buckets = list()?,
            "n_offset" => n_offset = int()?,
            "custom_values" => h.custom_values = list()?,
            "counter_reset_hint" => {
                h.counter_reset_hint = match value {
                    "unknown" => CounterResetHint::Unknown,
                    "reset" => CounterResetHint::Reset,
                    "not_reset" => CounterResetHint::NotReset,
                    "gauge" => CounterResetHint::Gauge,
                    _ => return Err(format!("invalid counter_reset_hint {value:?}")),
                }
            }
            _ => return Err(format!("unknown histogram key {key:?}")),
        }
        seen.push(key);
    }
    h.positive = index_buckets(&buckets, offset)?;
    h.negative = index_buckets(&n_buckets, n_offset)?;
    h.validate()?;
    Ok(h)
}

fn head(s: &str) -> &str {
    let end = s.char_indices().nth(16).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

fn index_buckets(counts: &[f64], offset: i64) -> Result<Vec<(i32, f64)>, String> {
    let last = offset + counts.len() as i64;
    if offset.abs() > MAX_INDEX_SPAN || last > MAX_INDEX_SPAN {
        return Err(format!("histogram bucket offset {offset} out of range"));
    }
    Ok(counts
        .iter()
        .enumerate()
        .map(|(k, c)| ((offset + k as i64) as i32, *c))
        .collect())
}

fn parse_list(s: &str) -> Result<Vec<f64>, String> {
    let inner = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| format!("expected [...], got {s:?}"))?;
    inner.split_whitespace().map(parse_number).collect()
}

fn parse_number(s: &str) -> Result<f64, String> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let v = if body.eq_ignore_ascii_case("inf") {
        f64::INFINITY
    } else if body.eq_ignore_ascii_case("nan") {
        f64::NAN
    } else if !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit() || b"._eE+-".contains(&b)) {
        body.replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("expected a number, got {s:?}"))?
    } else {
        return Err(format!("expected a number, got {s:?}"));
    };
    Ok(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "{{schema:1 sum:-0.3 count:32.1 z_bucket:7.1 z_bucket_w:0.05 buckets:[5.1 10 7] offset:-3 n_buckets:[4.1 5] n_offset:-5}}";

    #[test]
    fn parse_and_print_like_prometheus() {
        let h = parse(FIXTURE).unwrap();
        assert_eq!(h.schema, 1);
        assert_eq!(h.positive, vec![(-3, 5.1), (-2, 10.0), (-1, 7.0)]);
        assert_eq!(h.negative, vec![(-5, 4.1), (-4, 5.0)]);
        assert_eq!(
            h.test_expression(),
            "{{schema:1 count:32.1 sum:-0.3 z_bucket:7.1 z_bucket_w:0.05 offset:-3 buckets:[5.1 10 7] n_offset:-5 n_buckets:[4.1 5]}}"
        );
        let h = parse("{{count:2 sum:3 counter_reset_hint:not_reset buckets:[0 2 0 0 1 0]}}").unwrap();
        assert_eq!(
            h.test_expression(),
            "{{count:2 sum:3 counter_reset_hint:not_reset offset:1 buckets:[2 0 0 1]}}"
        );
        assert_eq!(parse("{{}}").unwrap().test_expression(), "{{}}");
    }

    #[test]
    fn bad_notation_is_an_error() {
        for bad in [
            "{{schema:x}}",
            "{{buckets:[1 2}}",
            "{{foo:1}}",
            "{{sum:1 sum:2}}",
            "{{schema:9}}",
            "{{counter_reset_hint:maybe}}",
            "{{offset:99999999999 buckets:[1]}}",
            "{{sum}}",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn equality_ignores_empty_buckets() {
        let a = parse("{{count:3 buckets:[0 1 0 2]}}").unwrap();
        let b = parse("{{count:3 offset:1 buckets:[1 0 2 0 0]}}").unwrap();
        assert!(a.equals(&b));
        let c = parse("{{count:3 offset:1 buckets:[1 0 2.5]}}").unwrap();
        assert!(!a.equals(&c));
        assert!(a.equals_ignoring_hint(&parse("{{count:3.0000000001 buckets:[0 1 0 2]}}").unwrap(), 1e-6));
    }

    #[test]
    fn add_sub_and_scale() {
        let a = parse("{{sum:3 count:2 buckets:[2]}}").unwrap();
        let b = parse("{{sum:1.3 count:1 buckets:[1]}}").unwrap();
        let c = a.add(&b).unwrap().add(&b).unwrap();
        assert_eq!(c.test_expression(), "{{count:4 sum:5.6 buckets:[4]}}");
        let d = c.sub(&b).unwrap();
        assert!(d.equals_ignoring_hint(&parse("{{count:3 sum:4.3 buckets:[3]}}").unwrap(), 1e-12));
        let mut e = a.clone();
        e.mul(2.0);
        assert_eq!(e.test_expression(), "{{count:4 sum:6 buckets:[4]}}");
        e.div(4.0);
        assert_eq!(e.test_expression(), "{{count:1 sum:1.5 buckets:[1]}}");
    }

    #[test]
    fn add_reduces_schema_and_widens_zero_bucket() {
        // Schema 1 buckets 1 and 2 both fall into schema 0 bucket 1.
        let a = parse("{{schema:1 count:2 offset:1 buckets:[1 1]}}").unwrap();
        let b = parse("{{schema:0 count:1 offset:1 buckets:[1]}}").unwrap();
        let s = a.add(&b).unwrap();
        assert_eq!(s.schema, 0);
        assert_eq!(s.positive, vec![(1, 3.0)]);
        // Bucket 0 at schema 0 is (0.5, 1]: inside a zero bucket of width 1.
        let z = parse("{{count:1 z_bucket:1 z_bucket_w:1}}").unwrap();
        let p = parse("{{count:2 buckets:[2 3]}}").unwrap();
        let s = z.add(&p).unwrap();
        assert_eq!(s.zero_threshold, 1.0);
        assert_eq!(s.zero_count, 3.0);
        assert_eq!(s.positive, vec![(1, 3.0)]);
    }

    #[test]
    fn custom_buckets_combine_only_when_identical() {
        let a = parse("{{schema:-53 count:1 custom_values:[1 2] buckets:[1]}}").unwrap();
        let b = parse("{{schema:-53 count:1 custom_values:[1 3] buckets:[1]}}").unwrap();
        let e = parse("{{count:1 buckets:[1]}}").unwrap();
        assert_eq!(a.add(&b).unwrap_err(), HistogramError::MismatchedCustomBuckets);
        assert_eq!(a.add(&e).unwrap_err(), HistogramError::MixedExponentialCustom);
        assert_eq!(
            a.add(&a).unwrap().test_expression(),
            "{{schema:-53 count:2 custom_values:[1 2] buckets:[2]}}"
        );
    }

    #[test]
    fn counter_resets() {
        let a = parse("{{count:3 buckets:[1 2]}}").unwrap();
        assert!(!parse("{{count:4 buckets:[2 2]}}").unwrap().detect_reset(&a));
        assert!(parse("{{count:2 buckets:[1 1]}}").unwrap().detect_reset(&a));
        // A bucket emptied while the count grew is still a reset.
        assert!(parse("{{count:5 buckets:[5]}}").unwrap().detect_reset(&a));
        assert!(parse("{{schema:1 count:5 buckets:[5]}}").unwrap().detect_reset(&a));
        assert!(!parse("{{schema:-1 count:5 buckets:[2 3]}}").unwrap().detect_reset(&a));
        assert!(parse("{{schema:-1 count:5 buckets:[5]}}").unwrap().detect_reset(&a));
        assert!(parse("{{count:9 counter_reset_hint:reset buckets:[9]}}")
            .unwrap()
            .detect_reset(&a));
    }

    #[test]
    fn bounds() {
        assert_eq!(exponential_bound(0, 0), 1.0);
        assert_eq!(exponential_bound(1, 0), 2.0);
        assert_eq!(exponential_bound(-1, 0), 0.5);
        assert_eq!(exponential_bound(2, 1), 2.0);
        assert!((exponential_bound(1, 1) - std::f64::consts::SQRT_2).abs() < 1e-15);
        assert_eq!(exponential_bound(1, -1), 4.0);
        assert_eq!(exponential_bound(1024, 0), f64::MAX);
    }
}
