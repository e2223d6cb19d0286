//! The on-disk cache of fetched chunks: a second replay of the same window sends nothing.
//!
//! One JSON file per (sources, selector or expression, chunk), named by a hash of all four and
//! holding them, so a hash collision reads as a miss. Values are kept as their IEEE bits, so
//! staleness markers and NaN survive. Only chunks that ended before `settled_before` are
//! stored: newer data may still arrive at the source. A file that cannot be read or written is
//! a miss or a warning, never an error: the source is still there.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::labels::Labels;
use crate::source::SeriesData;

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

    pub(crate) fn get(&self, kind: &str, key: &str, a: i64, b: i64) -> Option<Vec<SeriesData>> {
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
        let mut out = Vec::new();
        for s in v["series"].as_array()? {
            let labels = Labels::from_pairs(
                s["labels"]
                    .as_object()?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())),
            );
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
            out.push(SeriesData { labels, samples });
        }
        Some(out)
    }

    pub(crate) fn put(&self, kind: &str, key: &str, a: i64, b: i64, series: &[SeriesData]) {
        if !self.keeps(b) {
            return;
        }
        let Some(path) = self.path(kind, key, a, b) else { return };
        let body = json!({
            "id": self.identity,
            "kind": kind,
            "key": key,
            "a": a,
            "b": b,
            "series": series.iter().map(|s| json!({
                "labels": s.labels.iter().map(|l| (l.name.to_string(), Value::String(l.value.to_string()))).collect::<serde_json::Map<_, _>>(),
                "t": s.samples.iter().map(|x| x.0).collect::<Vec<_>>(),
                "v": s.samples.iter().map(|x| x.1.to_bits()).collect::<Vec<_>>(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_values_bit_for_bit_and_keeps_only_settled_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::new(Some(dir.path()), "prom http://x", 1_000);
        let stale = crate::promql::stale_nan();
        let s = vec![SeriesData {
            labels: Labels::from_pairs([("__name__", "up"), ("job", "a")]),
            samples: vec![(1, 1.5), (2, stale), (3, f64::INFINITY)],
        }];
        c.put("select", "{up}", 0, 999, &s);
        let back = c.get("select", "{up}", 0, 999).expect("cached");
        assert_eq!(back[0].labels, s[0].labels);
        assert_eq!(back[0].samples[1].1.to_bits(), stale.to_bits());
        assert_eq!(back[0].samples[2].1, f64::INFINITY);
        assert!(c.get("select", "{up}", 0, 998).is_none(), "another chunk");
        assert!(Cache::new(Some(dir.path()), "prom http://y", 1_000)
            .get("select", "{up}", 0, 999)
            .is_none());
        c.put("select", "{up}", 1_000, 1_999, &s);
        assert!(c.get("select", "{up}", 1_000, 1_999).is_none(), "not settled yet");
    }
}
