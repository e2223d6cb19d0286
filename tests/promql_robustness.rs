//! The engine never panics: every expression from Prometheus' own test files, and thousands of
//! mutations of them, are parsed and evaluated (instant and range) over a small store.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use watchfire::labels::Labels;
use watchfire::promql::Engine;
use watchfire::tsdb::Store;

fn expressions(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("conformance data missing at {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines() {
            let l = line.trim_start();
            let expr = if let Some(rest) = l.strip_prefix("eval instant at ") {
                rest.split_once(' ').map(|x| x.1)
            } else if let Some(rest) = l.strip_prefix("eval range from ") {
                rest.splitn(6, ' ').nth(5)
            } else {
                None
            };
            if let Some(e) = expr {
                out.push(e.to_string());
            }
        }
    }
    out
}

/// A deterministic xorshift generator, so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn mutate(s: &str, rng: &mut Rng) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    const PIECES: &[&str] = &[
        "(",
        ")",
        "[5m]",
        "[1m:10s]",
        " offset -1h",
        " @ 100",
        " by (job)",
        "{a=~\".*\"}",
        " / ",
        " and ",
        "-",
        "1e308",
        "NaN",
        " anchored",
        " smoothed",
    ];
    for _ in 0..(1 + rng.next() % 3) {
        if chars.is_empty() {
            break;
        }
        let i = (rng.next() as usize) % chars.len();
        match rng.next() % 3 {
            0 => {
                chars.remove(i);
            }
            1 => {
                let p = PIECES[(rng.next() as usize) % PIECES.len()];
                for (k, c) in p.chars().enumerate() {
                    chars.insert(i + k, c);
                }
            }
            _ => {
                let j = (rng.next() as usize) % chars.len();
                chars.swap(i, j);
            }
        }
    }
    chars.into_iter().collect()
}

#[test]
fn engine_never_panics() {
    let Some(dir) = common::conformance_dir("promqltest") else {
        return;
    };
    let mut store = Store::new();
    for (i, name) in ["http_requests", "foo", "metric", "testmetric", "data"]
        .iter()
        .enumerate()
    {
        for j in 0..3 {
            let l = Labels::from_pairs([
                ("__name__", name.to_string()),
                ("job", format!("j{j}")),
                ("le", format!("{}", j as f64 * 0.5)),
            ]);
            for t in 0..60 {
                store.append(&l, t * 15_000, (t * (i as i64 + 1) + j) as f64);
            }
        }
    }
    let engine = Engine::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let base = expressions(&dir);
    assert!(
        base.len() > 1000,
        "expected Prometheus' test expressions, found {}",
        base.len()
    );
    let mut cases = base.clone();
    for k in 0..4000 {
        cases.push(mutate(&base[k % base.len()], &mut rng));
    }
    for q in &cases {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _ = engine.instant_query(&store, q, 600_000);
            let _ = engine.range_query(&store, q, 0, 900_000, 60_000);
        }));
        assert!(r.is_ok(), "engine panicked on {q:?}");
    }
}
