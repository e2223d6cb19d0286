//! Classic (bucket-series) histograms: `histogram_quantile` and `histogram_fraction`.

use ahash::AHashMap as HashMap;

use super::annotations::Annotations;
use super::mathx::almost_equal;
use super::value::Sample;
use crate::labels::{Labels, LabelsBuilder};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    pub(crate) upper: f64,
    pub(crate) count: f64,
}

/// Groups bucket series by their labels without `le` and applies `f` to each group's buckets.
pub(crate) fn classic(
    ann: &Annotations,
    v: Vec<Sample>,
    t: i64,
    at: &str,
    f: impl Fn(&mut Vec<Bucket>) -> (f64, bool),
) -> Vec<Sample> {
    let mut order: Vec<Labels> = Vec::new();
    let mut groups: HashMap<Labels, Vec<Bucket>> = HashMap::new();
    for s in v {
        let upper = match s.metric.get("le").map(parse_go_float) {
            Some(Some(u)) => u,
            _ => {
                ann.warn(format!(
                    "PromQL warning: bucket label \"le\" is missing or has a malformed value of \"{}\" for metric name \"{}\"{at}",
                    s.metric.get("le").unwrap_or(""),
                    s.metric.metric_name().unwrap_or("")
                ));
                continue;
            }
        };
        // The name stays in the key until the result leaves the engine (delayed name removal),
        // so buckets of differently named histograms never mix.
        let mut b = LabelsBuilder::new(&s.metric);
        b.del("le");
        let key = b.build();
        groups
            .entry(key.clone())
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(Bucket { upper, count: s.v });
    }
    let mut out = Vec::with_capacity(order.len());
    for key in order {
        let Some(mut buckets) = groups.remove(&key) else {
            continue;
        };
        let (v, forced) = f(&mut buckets);
        if forced {
            ann.info(format!(
                "PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) for metric name \"{}\"{at}",
                key.metric_name().unwrap_or("")
            ));
        }
        out.push(Sample {
            h: None,
            metric: key,
            t,
            v,
            drop_name: true,
        });
    }
    out
}

/// Go's strconv.ParseFloat for the forms that appear in `le` labels.
pub(crate) fn parse_go_float(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "inf" | "+inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => s.trim().parse::<f64>().ok().filter(|_| !s.is_empty() && s.trim() == s),
    }
}

fn sort_and_coalesce(buckets: &mut Vec<Bucket>) {
    buckets.sort_by(|a, b| a.upper.partial_cmp(&b.upper).unwrap_or(std::cmp::Ordering::Equal));
    let mut out: Vec<Bucket> = Vec::with_capacity(buckets.len());
    for b in buckets.iter() {
        match out.last_mut() {
            Some(last) if last.upper == b.upper => last.count += b.count,
            _ => out.push(*b),
        }
    }
    *buckets = out;
}

/// Forces bucket counts to be monotonic; returns whether a real decrease was fixed.
fn ensure_monotonic(buckets: &mut [Bucket]) -> bool {
    let mut forced = false;
    let mut prev = buckets[0].count;
    for b in buckets.iter_mut().skip(1) {
        let curr = b.count;
        if curr == prev {
            continue;
        }
        if almost_equal(prev, curr, 1e-12) {
            b.count = prev;
            continue;
        }
        if curr < prev {
            b.count = prev;
            forced = true;
            continue;
        }
        prev = curr;
    }
    forced
}

pub(crate) fn bucket_quantile(q: f64, buckets: &mut Vec<Bucket>) -> (f64, bool) {
    if q.is_nan() {
        return (f64::NAN, false);
    }
    if q < 0.0 {
        return (f64::NEG_INFINITY, false);
    }
    if q > 1.0 {
        return (f64::INFINITY, false);
    }
    sort_and_coalesce(buckets);
    if buckets.is_empty() || buckets[buckets.len() - 1].upper != f64::INFINITY {
        return (f64::NAN, false);
    }
    let forced = ensure_monotonic(buckets);
    if buckets.len() < 2 {
        return (f64::NAN, forced);
    }
    let observations = buckets[buckets.len() - 1].count;
    if observations == 0.0 {
        return (f64::NAN, forced);
    }
    let mut rank = q * observations;
    let b = buckets[..buckets.len() - 1].partition_point(|x| x.count < rank);
    if b == buckets.len() - 1 {
        return (buckets[buckets.len() - 2].upper, forced);
    }
    if b == 0 && buckets[0].upper <= 0.0 {
        return (buckets[0].upper, forced);
    }
    let mut start = 0.0;
    let end = buckets[b].upper;
    let mut count = buckets[b].count;
    if b > 0 {
        start = buckets[b - 1].upper;
        count -= buckets[b - 1].count;
        rank -= buckets[b - 1].count;
    }
    (start + (end - start) * (rank / count), forced)
}

pub(crate) fn bucket_fraction(lower: f64, upper: f64, buckets: &mut Vec<Bucket>) -> (f64, bool) {
    sort_and_coalesce(buckets);
    if buckets.is_empty() || buckets[buckets.len() - 1].upper != f64::INFINITY {
        return (f64::NAN, false);
    }
    let forced = ensure_monotonic(buckets);
    let total = buckets[buckets.len() - 1].count;
    if total == 0.0 || lower.is_nan() || upper.is_nan() {
        return (f64::NAN, forced);
    }
    if lower >= upper {
        return (0.0, forced);
    }
    // The rank (cumulative count) at value x, interpolating linearly inside a bucket. Inside a
    // bucket of infinite width there is nothing to interpolate, so, as Prometheus does, a bound in
    // the +Inf bucket ranks as the bucket's start and a bound in a first bucket from -Inf as its end.
    let rank_at = |x: f64| -> f64 {
        let mut prev_upper = f64::NEG_INFINITY;
        let mut prev_count = 0.0;
        for (i, b) in buckets.iter().enumerate() {
            let lower_bound = if i == 0 {
                if b.upper > 0.0 {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            } else {
                prev_upper
            };
            if x <= lower_bound {
                return prev_count;
            }
            if x < b.upper {
                if lower_bound == f64::NEG_INFINITY {
                    return b.count;
                }
                if b.upper == f64::INFINITY {
                    return prev_count;
                }
                return prev_count + (b.count - prev_count) * (x - lower_bound) / (b.upper - lower_bound);
            }
            prev_upper = b.upper;
            prev_count = b.count;
        }
        total
    };
    let (lo, hi) = (rank_at(lower), rank_at(upper));
    ((hi - lo).max(0.0) / total, forced)
}
