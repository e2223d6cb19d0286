//! `load_with_nhcb`: the native histograms with custom buckets (NHCB) Prometheus' test
//! framework derives from classic histogram series (`_bucket` with `le`, `_count`, `_sum`).

use std::collections::HashMap;

use super::script::LoadSeries;
use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};
use crate::tsdb::histogram::CUSTOM_BUCKETS_SCHEMA;
use crate::tsdb::notation::SeriesValue;
use crate::tsdb::FloatHistogram;

/// The labels of the NHCB series Prometheus derives from a classic histogram series, if any.
pub(crate) fn nhcb_labels(labels: &Labels) -> Option<Labels> {
    let name = labels.metric_name()?;
    let base = ["_bucket", "_count", "_sum"]
        .iter()
        .find_map(|suf| name.strip_suffix(suf))?;
    if name.ends_with("_bucket") && !labels.has("le") {
        return None;
    }
    let mut b = LabelsBuilder::new(labels);
    b.del("le");
    b.set(METRIC_NAME, base);
    Some(b.build())
}

/// One classic histogram's series: its buckets by upper bound, its count and its sum.
#[derive(Default)]
struct Classic<'a> {
    line: usize,
    buckets: Vec<(f64, &'a [Option<SeriesValue>])>,
    count: Option<&'a [Option<SeriesValue>]>,
    sum: Option<&'a [Option<SeriesValue>]>,
}

fn float_at(values: &[Option<SeriesValue>], i: usize) -> Option<f64> {
    match values.get(i) {
        Some(Some(SeriesValue::Float(v))) => Some(*v),
        _ => None,
    }
}

/// The NHCB series for the classic histograms among `series`, in first-seen order. At every
/// point where a bucket has a value, as Prometheus' `convertnhcb`: buckets by bound, made
/// non-cumulative; a missing +Inf bucket is the count (or the last bucket); a missing count is
/// the +Inf bucket; a missing sum is 0; empty buckets are left out.
pub(crate) fn derive(series: &[LoadSeries]) -> Vec<LoadSeries> {
    let mut order: Vec<Labels> = Vec::new();
    let mut groups: HashMap<Labels, Classic> = HashMap::new();
    for s in series {
        let Some(key) = nhcb_labels(&s.labels) else { continue };
        let g = groups.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            Classic {
                line: s.line,
                ..Classic::default()
            }
        });
        let name = s.labels.metric_name().unwrap_or("");
        if name.ends_with("_bucket") {
            let le = s.labels.get("le").unwrap_or("");
            // A bound that is no number is no bucket (Prometheus ignores the series too).
            if let Ok(le) = le.trim().parse::<f64>().or_else(|e| match le.trim() {
                "+Inf" | "Inf" | "inf" | "+inf" => Ok(f64::INFINITY),
                _ => Err(e),
            }) {
                g.buckets.push((le, &s.values));
            }
        } else if name.ends_with("_count") {
            g.count = Some(&s.values);
        } else {
            g.sum = Some(&s.values);
        }
    }
    let mut out = Vec::new();
    for key in order {
        let Some(mut g) = groups.remove(&key) else { continue };
        if g.buckets.is_empty() {
            continue;
        }
        g.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let len = g.buckets.iter().map(|b| b.1.len()).max().unwrap_or(0);
        let mut values = Vec::with_capacity(len);
        for i in 0..len {
            let mut bs: Vec<(f64, f64)> = g
                .buckets
                .iter()
                .filter_map(|(le, v)| Some((*le, float_at(v, i)?)))
                .collect();
            if bs.is_empty() {
                values.push(None);
                continue;
            }
            let count = g.count.and_then(|v| float_at(v, i));
            if bs.last().is_some_and(|b| b.0 != f64::INFINITY) {
                let c = count.unwrap_or(bs[bs.len() - 1].1);
                bs.push((f64::INFINITY, c));
            }
            let mut h = FloatHistogram {
                schema: CUSTOM_BUCKETS_SCHEMA,
                count: count.unwrap_or(bs[bs.len() - 1].1),
                sum: g.sum.and_then(|v| float_at(v, i)).unwrap_or(0.0),
                ..FloatHistogram::default()
            };
            let mut prev = 0.0;
            for (j, &(le, c)) in bs.iter().enumerate() {
                if le.is_finite() {
                    h.custom_values.push(le);
                }
                let d = c - prev;
                prev = c;
                if d != 0.0 {
                    h.positive.push((j as i32, d));
                }
            }
            values.push(Some(SeriesValue::Histogram(Box::new(h))));
        }
        out.push(LoadSeries {
            line: g.line,
            labels: key,
            values,
            starts: None,
        });
    }
    out
}
