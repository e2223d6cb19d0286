//! The on-disk cache of fetched chunks: a second replay of the same window sends nothing.
//!
//! One JSON file per (sources, selector or expression, chunk), named by a hash of all four and
//! holding them, so a hash collision reads as a miss. Values are kept as their IEEE bits, so
//! staleness markers and NaN survive; native histograms are kept whole (schema, indices, hint,
//! every float as its bits). A file carries its format: one written by an older watchfire
//! (floats only, no format) is a miss and is fetched again, never read without its
//! histograms. Only chunks that ended before `settled_before` are
//! stored: newer data may still arrive at the source. A file that cannot be read or written is
//! a miss or a warning, never an error: the source is still there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::labels::Labels;
use crate::source::{HistogramSeriesData, SeriesData};
use crate::tsdb::{CounterResetHint, FloatHistogram};

/// The file format written; files without it (the float-only format) are not read.
const FORMAT: u64 = 2;

/// One chunk's answer: float samples and native histogram samples.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chunk {
    pub floats: Vec<SeriesData>,
    pub hists: Vec<HistogramSeriesData>,
}

impl Chunk {
    pub(crate) fn samples(&self) -> u64 {
        let f: usize = self.floats.iter().map(|s| s.samples.len()).sum();
        let h: usize = self.hists.iter().map(|s| s.samples.len()).sum();
        (f + h) as u64
    }

    /// Adds `other`'s series (a neighbouring time range) to these.
    pub(crate) fn merge(&mut self, other: Chunk) {
        for r in other.floats {
            match self.floats.iter_mut().find(|l| l.labels == r.labels) {
                Some(l) => l.samples.extend(r.samples),
                None => self.floats.push(r),
            }
        }
        for r in other.hists {
            match self.hists.iter_mut().find(|l| l.labels == r.labels) {
                Some(l) => l.samples.extend(r.samples),
                None => self.hists.push(r),
            }
        }
    }
}

pub(crate) struct Cache {
    dir: Option<PathBuf>,
    /// The configured sources (names, URLs, mappings), so another configuration never reads
    /// these chunks.
    identity: String,
    settled_before: i64,
}

fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

impl Cache {
    /// A cache in `dir` (`None`: no cache) for the sources described by `identity`.
    pub(crate) fn new(dir: Option<&Path>, identity: &str, settled_before: i64) -> Cache {
        Cache {
            dir: dir.map(Path::to_path_buf),
            identity: format!("{:016x}", fnv(&[identity])),
            settled_before,
        }
    }

    fn path(&self, kind: &str, key: &str, a: i64, b: i64) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let h = fnv(&[&self.identity, kind, key, &a.to_string(), &b.to_string()]);
        Some(dir.join(format!("{h:016x}.json")))
    }

    /// Whether a chunk ending at `b` may be stored.
    pub(crate) fn keeps(&self, b: i64) -> bool {
        self.dir.is_some() && b < self.settled_before
    }

    pub(crate) fn get(&self, kind: &str, key: &str, a: i64, b: i64) -> Option<Chunk> {
        let path = self.path(kind, key, a, b)?;
        let text = std::fs::read_to_string(&path).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        let same = v["id"] == self.identity
            && v["kind"] == kind
            && v["key"] == key
            && v["a"].as_i64() == Some(a)
            && v["b"].as_i64() == Some(b);
        if !same {
            return None;
        }
        if v["format"].as_u64() != Some(FORMAT) {
            tracing::info!(
                "replay cache: {} is in another format (an older watchfire's, without native histograms); fetching it again",
                path.display()
            );
            return None;
        }
        let mut out = Chunk::default();
        for s in v["series"].as_array()? {
            let labels = labels_of(&s["labels"])?;
            let ts = s["t"].as_array()?;
            let vs = s["v"].as_array()?;
            if ts.len() != vs.len() {
                return None;
            }
            let samples = ts
                .iter()
                .zip(vs)
                .map(|(t, v)| Some((t.as_i64()?, f64::from_bits(v.as_u64()?))))
                .collect::<Option<Vec<_>>>()?;
            out.floats.push(SeriesData { labels, samples });
        }
        for s in v["histograms"].as_array()? {
            let labels = labels_of(&s["labels"])?;
            let ts = s["t"].as_array()?;
            let hs = s["h"].as_array()?;
            if ts.len() != hs.len() {
                return None;
            }
            let samples = ts
                .iter()
                .zip(hs)
                .map(|(t, h)| Some((t.as_i64()?, Arc::new(histogram_from(h)?))))
                .collect::<Option<Vec<_>>>()?;
            out.hists.push(HistogramSeriesData { labels, samples });
        }
        Some(out)
    }

    pub(crate) fn put(&self, kind: &str, key: &str, a: i64, b: i64, chunk: &Chunk) {
        if !self.keeps(b) {
            return;
        }
        let Some(path) = self.path(kind, key, a, b) else { return };
        let body = json!({
            "format": FORMAT,
            "id": self.identity,
            "kind": kind,
            "key": key,
            "a": a,
            "b": b,
            "series": chunk.floats.iter().map(|s| json!({
                "labels": labels_json(&s.labels),
                "t": s.samples.iter().map(|x| x.0).collect::<Vec<_>>(),
                "v": s.samples.iter().map(|x| x.1.to_bits()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "histograms": chunk.hists.iter().map(|s| json!({
                "labels": labels_json(&s.labels),
                "t": s.samples.iter().map(|x| x.0).collect::<Vec<_>>(),
                "h": s.samples.iter().map(|x| histogram_json(&x.1)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        let write = || -> std::io::Result<()> {
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d)?;
            }
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, body.to_string())?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            tracing::warn!("replay cache: cannot write {}: {e}", path.display());
        }
    }
}

fn labels_json(l: &Labels) -> Value {
    Value::Object(
        l.iter()
            .map(|l| (l.name.to_string(), Value::String(l.value.to_string())))
            .collect(),
    )
}

fn labels_of(v: &Value) -> Option<Labels> {
    Some(Labels::from_pairs(
        v.as_object()?
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())),
    ))
}

/// A histogram with every field, floats as their bits (the query API's shape loses some).
fn histogram_json(h: &FloatHistogram) -> Value {
    let hint = match h.counter_reset_hint {
        CounterResetHint::Unknown => "unknown",
        CounterResetHint::Reset => "reset",
        CounterResetHint::NotReset => "not_reset",
        CounterResetHint::Gauge => "gauge",
    };
    let buckets = |b: &[(i32, f64)]| b.iter().map(|&(i, c)| json!([i, c.to_bits()])).collect::<Vec<_>>();
    json!({
        "hint": hint,
        "schema": h.schema,
        "zt": h.zero_threshold.to_bits(),
        "zc": h.zero_count.to_bits(),
        "count": h.count.to_bits(),
        "sum": h.sum.to_bits(),
        "pos": buckets(&h.positive),
        "neg": buckets(&h.negative),
        "cv": h.custom_values.iter().map(|c| c.to_bits()).collect::<Vec<_>>(),
    })
}

fn histogram_from(v: &Value) -> Option<FloatHistogram> {
    let bits = |v: &Value| v.as_u64().map(f64::from_bits);
    let buckets = |v: &Value| {
        v.as_array()?
            .iter()
            .map(|b| Some((i32::try_from(b[0].as_i64()?).ok()?, bits(&b[1])?)))
            .collect::<Option<Vec<_>>>()
    };
    Some(FloatHistogram {
        counter_reset_hint: match v["hint"].as_str()? {
            "unknown" => CounterResetHint::Unknown,
            "reset" => CounterResetHint::Reset,
            "not_reset" => CounterResetHint::NotReset,
            "gauge" => CounterResetHint::Gauge,
            _ => return None,
        },
        schema: i32::try_from(v["schema"].as_i64()?).ok()?,
        zero_threshold: bits(&v["zt"])?,
        zero_count: bits(&v["zc"])?,
        count: bits(&v["count"])?,
        sum: bits(&v["sum"])?,
        positive: buckets(&v["pos"])?,
        negative: buckets(&v["neg"])?,
        custom_values: v["cv"].as_array()?.iter().map(bits).collect::<Option<Vec<_>>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(s: Vec<SeriesData>) -> Chunk {
        Chunk {
            floats: s,
            hists: Vec::new(),
        }
    }

    #[test]
    fn round_trips_values_bit_for_bit_and_keeps_only_settled_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::new(Some(dir.path()), "prom http://x", 1_000);
        let stale = crate::promql::stale_nan();
        let s = floats(vec![SeriesData {
            labels: Labels::from_pairs([("__name__", "up"), ("job", "a")]),
            samples: vec![(1, 1.5), (2, stale), (3, f64::INFINITY)],
        }]);
        c.put("select", "{up}", 0, 999, &s);
        let back = c.get("select", "{up}", 0, 999).expect("cached");
        assert_eq!(back.floats[0].labels, s.floats[0].labels);
        assert_eq!(back.floats[0].samples[1].1.to_bits(), stale.to_bits());
        assert_eq!(back.floats[0].samples[2].1, f64::INFINITY);
        assert!(back.hists.is_empty());
        assert!(c.get("select", "{up}", 0, 998).is_none(), "another chunk");
        assert!(Cache::new(Some(dir.path()), "prom http://y", 1_000)
            .get("select", "{up}", 0, 999)
            .is_none());
        c.put("select", "{up}", 1_000, 1_999, &s);
        assert!(c.get("select", "{up}", 1_000, 1_999).is_none(), "not settled yet");
    }

    #[test]
    fn round_trips_native_histograms_whole() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::new(Some(dir.path()), "prom http://x", 1_000);
        let exp = FloatHistogram {
            counter_reset_hint: CounterResetHint::Gauge,
            schema: 3,
            zero_threshold: 0.001,
            zero_count: 2.0,
            count: 9.5,
            sum: -0.1,
            positive: vec![(-2, 1.0), (5, 3.25)],
            negative: vec![(1, 3.25)],
            custom_values: Vec::new(),
        };
        let custom = FloatHistogram {
            counter_reset_hint: CounterResetHint::NotReset,
            schema: crate::tsdb::histogram::CUSTOM_BUCKETS_SCHEMA,
            count: f64::NAN,
            sum: crate::promql::stale_nan(),
            positive: vec![(0, 1.0), (2, 4.0)],
            custom_values: vec![0.5, 1.0, f64::INFINITY],
            ..FloatHistogram::default()
        };
        let lat = Labels::from_pairs([("__name__", "lat"), ("job", "a")]);
        let chunk = Chunk {
            floats: vec![SeriesData {
                labels: lat.clone(),
                samples: vec![(5, 1.0)],
            }],
            hists: vec![HistogramSeriesData {
                labels: lat.clone(),
                samples: vec![(10, Arc::new(exp.clone())), (20, Arc::new(custom.clone()))],
            }],
        };
        c.put("select", "{lat}", 0, 999, &chunk);
        let back = c.get("select", "{lat}", 0, 999).expect("cached");
        assert_eq!(back.floats, chunk.floats);
        assert_eq!(back.hists.len(), 1);
        assert_eq!(back.hists[0].labels, lat);
        let got: Vec<(i64, Value)> = back.hists[0]
            .samples
            .iter()
            .map(|(t, h)| (*t, histogram_json(h)))
            .collect();
        assert_eq!(got, vec![(10, histogram_json(&exp)), (20, histogram_json(&custom))]);
        assert_eq!(back.samples(), 3);
    }

    #[test]
    fn a_chunk_in_the_float_only_format_is_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::new(Some(dir.path()), "prom http://x", 1_000);
        let s = floats(vec![SeriesData {
            labels: Labels::from_pairs([("__name__", "lat")]),
            samples: vec![(1, 1.5)],
        }]);
        c.put("select", "{lat}", 0, 999, &s);
        let path = c.path("select", "{lat}", 0, 999).unwrap();
        // What the float-only version wrote: no format, no histograms.
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("format");
        o.remove("histograms");
        std::fs::write(&path, v.to_string()).unwrap();
        assert!(c.get("select", "{lat}", 0, 999).is_none());
        // Written again, it reads back.
        c.put("select", "{lat}", 0, 999, &s);
        assert!(c.get("select", "{lat}", 0, 999).is_some());
    }
}
