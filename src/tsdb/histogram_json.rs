//! Prometheus' JSON shape of a native histogram (`web/api/v1` `marshalHistogram` in 2.42,
//! `jsonutil.MarshalHistogram` in 3.x): written by the query API and `watchfire query`, read
//! back from remote Prometheus-compatible sources.
//!
//! ```json
//! {"count":"4","sum":"5","buckets":[[3,"-0.001","0.001","1"],[0,"1","2","2"],[1,"-4","-2","1"]]}
//! ```
//!
//! Each bucket is `[boundary rule, lower, upper, count]`, the rule telling which ends are
//! closed: 0 `(lower, upper]`, 1 `[lower, upper)`, 2 `(lower, upper)`, 3 `[lower, upper]`.
//! Only buckets holding something are written.
//!
//! The shape keeps count, sum and every non-empty bucket with its bounds. It drops the schema,
//! the bucket indices, the zero threshold (unless the zero bucket holds something), the empty
//! buckets and the counter reset hint. [`from_json`] rebuilds what it can:
//! * exponential schemas (-4..8) are recognised from the bounds, which are exactly
//!   Prometheus' `getBound` values: the schema, indices and counts come back exactly, the zero
//!   threshold too when the zero bucket holds observations or a bucket's edge was clipped to it;
//!   otherwise it reads as 0 (only the width of an empty zero bucket is lost);
//! * anything else (custom buckets of Prometheus 3.x, bounds no schema produces) becomes a
//!   histogram with custom bounds: every edge seen becomes a bound, so quantiles and fractions
//!   interpolate over the same intervals;
//! * the counter reset hint is always unknown: `rate` and `increase` detect resets by
//!   comparing counts, as they do for any histogram without a hint (a gauge histogram's hint is
//!   lost, so it reads as a counter one).

use serde_json::Value as Json;

use super::histogram::{exponential_bound, FloatHistogram, CUSTOM_BUCKETS_SCHEMA};

/// Highest and lowest exponential schemas Prometheus accepts.
const SCHEMAS: std::ops::RangeInclusive<i32> = -4..=8;

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)` with Prometheus' names for the specials, quoted.
fn num(out: &mut String, f: f64) {
    out.push('"');
    out.push_str(&crate::gofmt::format_f(f));
    out.push('"');
}

impl FloatHistogram {
    /// The histogram as Prometheus writes it in query answers, byte for byte (`count`, `sum`,
    /// then `buckets` when any holds something).
    pub fn prometheus_json(&self) -> String {
        let h = self;
        let custom = h.uses_custom_buckets();
        let mut buckets = String::new();
        let mut push = |rule: u8, lower: f64, upper: f64, count: f64| {
            if count == 0.0 {
                return;
            }
            buckets.push_str(if buckets.is_empty() { "[" } else { "," });
            buckets.push_str(&format!("[{rule},"));
            num(&mut buckets, lower);
            buckets.push(',');
            num(&mut buckets, upper);
            buckets.push(',');
            num(&mut buckets, count);
            buckets.push(']');
        };
        // Prometheus' `allFloatBucketIterator`: negative buckets (highest first), the zero bucket
        // when it holds something, positive buckets; edges inside the zero bucket are clipped.
        for &(i, c) in h.negative.iter().rev() {
            let lower = -h.bound(i);
            let upper = (-h.bound(i - 1)).min(-h.zero_threshold);
            push(rule(lower < 0.0, upper > 0.0), lower, upper, c);
        }
        if !custom && h.zero_count > 0.0 {
            push(3, -h.zero_threshold, h.zero_threshold, h.zero_count);
        }
        for &(i, c) in &h.positive {
            let upper = h.bound(i);
            if custom {
                // Prometheus 3.x: the first custom bucket reaches -Inf and is closed there.
                let lower = if i == 0 { f64::NEG_INFINITY } else { h.bound(i - 1) };
                push(rule(i == 0, true), lower, upper, c);
            } else {
                let lower = h.bound(i - 1).max(h.zero_threshold);
                push(rule(lower < 0.0, upper > 0.0), lower, upper, c);
            }
        }
        let mut out = String::with_capacity(32 + buckets.len());
        out.push_str("{\"count\":");
        num(&mut out, h.count);
        out.push_str(",\"sum\":");
        num(&mut out, h.sum);
        if !buckets.is_empty() {
            out.push_str(",\"buckets\":");
            out.push_str(&buckets);
            out.push(']');
        }
        out.push('}');
        out
    }
}

/// The boundary rule of a bucket with these closed ends.
fn rule(lower_inclusive: bool, upper_inclusive: bool) -> u8 {
    match (lower_inclusive, upper_inclusive) {
        (true, true) => 3,
        (true, false) => 1,
        (false, true) => 0,
        (false, false) => 2,
    }
}

/// One bucket as read: (rule, lower, upper, count).
type Bucket = (u8, f64, f64, f64);

/// Reads a histogram of Prometheus' JSON shape back (see the module comment for what is
/// rebuilt and what cannot be).
pub(crate) fn from_json(v: &Json) -> Result<FloatHistogram, String> {
    let o = v
        .as_object()
        .ok_or_else(|| format!("histogram is not an object: {v}"))?;
    let field = |k: &str| -> Result<f64, String> {
        match o.get(k) {
            Some(x) => number(x).map_err(|e| format!("histogram {k}: {e}")),
            None => Err(format!("histogram without {k}")),
        }
    };
    let count = field("count")?;
    let sum = field("sum")?;
    let mut buckets: Vec<Bucket> = Vec::new();
    if let Some(list) = o.get("buckets") {
        let list = list
            .as_array()
            .ok_or_else(|| format!("histogram buckets are not a list: {list}"))?;
        for b in list {
            buckets.push(bucket(b)?);
        }
    }
    let mut h = exponential(&buckets).map_or_else(|| custom(&buckets), Ok)?;
    h.count = count;
    h.sum = sum;
    Ok(h)
}

fn number(x: &Json) -> Result<f64, String> {
    let s = x.as_str().ok_or_else(|| format!("{x} is not a string"))?;
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => s.parse::<f64>().map_err(|_| format!("{s:?} is not a number")),
    }
}

fn bucket(b: &Json) -> Result<Bucket, String> {
    let bad = || format!("histogram bucket {b} is not [rule, lower, upper, count]");
    let a = b.as_array().filter(|a| a.len() == 4).ok_or_else(bad)?;
    let rule = a[0].as_u64().filter(|r| *r <= 3).ok_or_else(bad)? as u8;
    let lower = number(&a[1]).map_err(|e| format!("histogram bucket {b}: {e}"))?;
    let upper = number(&a[2]).map_err(|e| format!("histogram bucket {b}: {e}"))?;
    let count = number(&a[3]).map_err(|e| format!("histogram bucket {b}: {e}"))?;
    if lower.is_nan() || upper.is_nan() || lower > upper {
        return Err(format!("histogram bucket {b}: bounds out of order"));
    }
    Ok((rule, lower, upper, count))
}

/// Whether `a` and `b` are the same bound (they are printed shortest-exact, so this is exact
/// for Prometheus' own output; the margin covers other encoders' rounding).
fn same(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// The index `i` with `exponential_bound(i, schema) == x`, for `x > 0`.
fn index_of(x: f64, schema: i32) -> Option<i32> {
    if !(x > 0.0 && x.is_finite()) {
        return None;
    }
    let guess = (x.log2() * 2f64.powi(schema)).round();
    if !guess.is_finite() || guess.abs() > f64::from(i32::MAX / 2) {
        return None;
    }
    let guess = guess as i32;
    (guess - 1..=guess + 1).find(|&i| same(exponential_bound(i, schema), x))
}

/// Whether a bucket is the zero bucket: closed on both ends, symmetric around 0.
fn is_zero_bucket(b: &Bucket) -> bool {
    b.0 == 3 && b.2.is_finite() && b.2 >= 0.0 && same(b.1, -b.2)
}

/// The histogram with the exponential schema these bounds come from, if one does.
fn exponential(buckets: &[Bucket]) -> Option<FloatHistogram> {
    // Each bucket whose both edges are bounds of a schema names that schema (an edge clipped to
    // the zero threshold can make a bucket look like one of another schema): the first under
    // which every bucket fits wins.
    let mut candidates: Vec<i32> = Vec::new();
    for &(_, lower, upper, _) in buckets.iter().filter(|b| !is_zero_bucket(b)) {
        let fits = SCHEMAS.clone().find(|&s| {
            if lower >= 0.0 {
                index_of(upper, s).is_some_and(|i| same(exponential_bound(i - 1, s), lower))
            } else {
                index_of(-lower, s).is_some_and(|i| same(-exponential_bound(i - 1, s), upper))
            }
        });
        if let Some(s) = fits.filter(|s| !candidates.contains(s)) {
            candidates.push(s);
        }
    }
    if candidates.is_empty() && buckets.iter().all(is_zero_bucket) {
        // Nothing but a zero bucket (or nothing at all): any schema holds it; 0 is the usual.
        candidates.push(0);
    }
    candidates.into_iter().find_map(|s| with_schema(buckets, s))
}

/// The histogram of these buckets at exponential `schema`, if they all fit it.
fn with_schema(buckets: &[Bucket], schema: i32) -> Option<FloatHistogram> {
    let mut h = FloatHistogram {
        schema,
        ..FloatHistogram::default()
    };
    // The zero threshold, from the zero bucket or from an edge clipped to it.
    let mut threshold: Option<f64> = None;
    let mut agree = |t: f64| match threshold {
        Some(x) => same(x, t),
        None => {
            threshold = Some(t);
            true
        }
    };
    for b in buckets {
        let &(rule, lower, upper, count) = b;
        if is_zero_bucket(b) {
            if !agree(upper) {
                return None;
            }
            h.zero_count += count;
        } else if lower >= 0.0 && upper > 0.0 {
            let i = index_of(upper, schema)?;
            let full = exponential_bound(i - 1, schema);
            // The full bucket, or its lower edge clipped to the zero threshold.
            let fits = same(full, lower) || (lower > full && agree(lower));
            if !fits {
                return None;
            }
            if rule != 0 {
                return None;
            }
            h.positive.push((i, count));
        } else if upper <= 0.0 && lower < 0.0 {
            let i = index_of(-lower, schema)?;
            let full = -exponential_bound(i - 1, schema);
            let fits = same(full, upper) || (upper < full && agree(-upper));
            if !fits {
                return None;
            }
            if rule != 1 {
                return None;
            }
            h.negative.push((i, count));
        } else {
            return None;
        }
    }
    h.zero_threshold = threshold.unwrap_or(0.0);
    h.positive.sort_by_key(|b| b.0);
    h.negative.sort_by_key(|b| b.0);
    let distinct = |v: &[(i32, f64)]| v.windows(2).all(|w| w[0].0 != w[1].0);
    (distinct(&h.positive) && distinct(&h.negative)).then_some(h)
}

/// A histogram with custom bounds: every finite edge of the buckets is a bound, so each bucket
/// is exactly one interval between neighbouring bounds.
fn custom(buckets: &[Bucket]) -> Result<FloatHistogram, String> {
    let mut bounds: Vec<f64> = buckets
        .iter()
        .flat_map(|b| [b.1, b.2])
        .filter(|x| x.is_finite())
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    let mut h = FloatHistogram {
        schema: CUSTOM_BUCKETS_SCHEMA,
        ..FloatHistogram::default()
    };
    for &(_, lower, upper, count) in buckets {
        // Bucket i of a custom layout covers (bounds[i-1], bounds[i]]; the last one reaches +Inf.
        let i = if upper == f64::INFINITY {
            bounds.len()
        } else {
            bounds.partition_point(|b| *b < upper)
        };
        let expected_lower = if i == 0 { f64::NEG_INFINITY } else { bounds[i - 1] };
        if lower != expected_lower {
            return Err(format!(
                "histogram buckets overlap: [{lower}, {upper}] spans more than one interval"
            ));
        }
        if h.positive.iter().any(|b| b.0 == i as i32) {
            return Err(format!("histogram bucket [{lower}, {upper}] appears twice"));
        }
        h.positive.push((i as i32, count));
    }
    h.positive.sort_by_key(|b| b.0);
    h.custom_values = bounds;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tsdb::histogram::parse;

    fn to_json(h: &FloatHistogram) -> String {
        h.prometheus_json()
    }

    fn round_trip(notation: &str) -> FloatHistogram {
        let h = parse(notation).unwrap();
        let back = from_json(&serde_json::from_str(&to_json(&h)).unwrap()).unwrap();
        assert_eq!(to_json(&back), to_json(&h), "{notation}");
        back
    }

    #[test]
    fn writes_prometheus_shape() {
        let h = parse("{{schema:0 sum:5 count:4 z_bucket:1 z_bucket_w:0.001 buckets:[1 0 2] n_buckets:[1]}}").unwrap();
        assert_eq!(
            to_json(&h),
            r#"{"count":"4","sum":"5","buckets":[[1,"-1","-0.5","1"],[3,"-0.001","0.001","1"],[0,"0.5","1","1"],[0,"2","4","2"]]}"#
        );
        // An empty zero bucket is not written, nor empty buckets.
        let h = parse("{{schema:1 count:2 sum:3 z_bucket_w:0.5 buckets:[0 2]}}").unwrap();
        assert_eq!(
            to_json(&h),
            r#"{"count":"2","sum":"3","buckets":[[0,"1","1.4142135623730951","2"]]}"#
        );
        let h = parse("{{schema:-53 count:3 sum:1 custom_values:[1 2] buckets:[1 0 2]}}").unwrap();
        assert_eq!(
            to_json(&h),
            r#"{"count":"3","sum":"1","buckets":[[3,"-Inf","1","1"],[0,"2","+Inf","2"]]}"#
        );
    }

    #[test]
    fn exponential_schemas_come_back_exactly() {
        let h = round_trip("{{schema:0 sum:5 count:4 buckets:[1 2 1]}}");
        assert_eq!(h.schema, 0);
        assert_eq!(h.positive, vec![(0, 1.0), (1, 2.0), (2, 1.0)]);
        for s in [-4, -1, 1, 3, 8] {
            let h = round_trip(&format!(
                "{{{{schema:{s} sum:-3 count:9 z_bucket:2 z_bucket_w:0.01 offset:1 buckets:[1 0 3] n_offset:2 n_buckets:[2 1]}}}}"
            ));
            assert_eq!(h.schema, s);
            assert_eq!(h.zero_threshold, 0.01);
            assert_eq!(h.positive, vec![(1, 1.0), (3, 3.0)]);
            assert_eq!(h.negative, vec![(2, 2.0), (3, 1.0)]);
        }
        // Without zero observations the zero bucket's width is not in the JSON.
        let h = round_trip("{{schema:2 count:1 sum:1 z_bucket_w:0.001 buckets:[1]}}");
        assert_eq!((h.schema, h.zero_threshold), (2, 0.0));
    }

    #[test]
    fn a_bucket_clipped_by_the_zero_bucket_gives_its_width() {
        // Bucket 0 at schema -2 is (1/16, 1]: its lower edge is clipped to the threshold 0.5.
        let h = round_trip("{{schema:-2 count:4 sum:1 z_bucket_w:0.5 buckets:[3 1]}}");
        assert_eq!((h.schema, h.zero_threshold), (-2, 0.5));
        assert_eq!(h.positive, vec![(0, 3.0), (1, 1.0)]);
        // Alone, that bucket reads as (0.5, 1], bucket 0 of schema 0: the same JSON, whichever.
        let h = round_trip("{{schema:-2 count:3 sum:1 z_bucket_w:0.5 buckets:[3]}}");
        assert_eq!((h.schema, h.zero_threshold), (0, 0.0));
    }

    #[test]
    fn other_bounds_become_custom_ones() {
        let h = round_trip("{{schema:-53 count:3 sum:1 custom_values:[1 2.5 7] buckets:[1 0 2]}}");
        assert!(h.uses_custom_buckets());
        assert_eq!(h.custom_values, vec![1.0, 2.5, 7.0]);
        assert_eq!(h.positive, vec![(0, 1.0), (2, 2.0)]);
        let v: Json =
            serde_json::from_str(r#"{"count":"5","sum":"9","buckets":[[0,"0.1","0.3","2"],[0,"0.5","0.7","3"]]}"#)
                .unwrap();
        let h = from_json(&v).unwrap();
        assert_eq!(h.custom_values, vec![0.1, 0.3, 0.5, 0.7]);
        assert_eq!(h.positive, vec![(1, 2.0), (3, 3.0)]);
        assert_eq!((h.count, h.sum), (5.0, 9.0));
    }

    #[test]
    fn malformed_answers_are_errors() {
        for (text, want) in [
            (r#"[1]"#, "not an object"),
            (r#"{"sum":"1"}"#, "without count"),
            (r#"{"count":"x","sum":"1"}"#, "not a number"),
            (r#"{"count":"1","sum":"1","buckets":[[0,"1","2"]]}"#, "is not [rule"),
            (r#"{"count":"1","sum":"1","buckets":[[7,"1","2","1"]]}"#, "is not [rule"),
            (r#"{"count":"1","sum":"1","buckets":[[0,"2","1","1"]]}"#, "out of order"),
            (
                r#"{"count":"1","sum":"1","buckets":[[0,"0.1","0.5","1"],[0,"0.3","0.7","1"]]}"#,
                "overlap",
            ),
        ] {
            let v: Json = serde_json::from_str(text).unwrap();
            let err = from_json(&v).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
