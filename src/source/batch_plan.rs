//! How a group's expressions for one Prometheus source are cut into requests.
//!
//! A batch is evaluated by the backend one expression after another, so a group whose batch is
//! heavy (a burn-rate group reading `[1d]` and `[3d]` windows) waits for all of it in one round
//! trip, as it would in Prometheus' own rule manager. Light groups are best asked in as few
//! requests as the batch size allows (each request costs the backend a parse, a preparation
//! and an HTTP exchange); heavy ones are spread over the source's `query_concurrency`, so the
//! backend works on them in parallel. What is heavy is learnt: each expression's cost is the
//! wall time of the requests it went in, shared among their expressions, averaged over
//! evaluations ([`Costs`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// A group's expressions estimated to take longer than this in one request are split over
/// more requests: about one per this much work, at most the source's concurrency. Above the
/// few milliseconds a request costs on its own, below what a group of heavy rules takes.
pub(crate) const SPLIT_SECONDS: f64 = 0.01;

/// Each expression's recent cost (s): the requests it went in, their wall time shared evenly
/// among their expressions, as a running average.
#[derive(Default)]
pub(crate) struct Costs {
    by_text: Mutex<HashMap<u64, f64>>,
}

fn key(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Costs {
    /// The estimated cost of each expression (0 when never seen).
    pub(crate) fn estimates(&self, texts: &[&str]) -> Vec<f64> {
        let Ok(m) = self.by_text.lock() else {
            return vec![0.0; texts.len()];
        };
        texts.iter().map(|t| m.get(&key(t)).copied().unwrap_or(0.0)).collect()
    }

    /// A request with these expressions was answered in `seconds`.
    pub(crate) fn observe(&self, texts: &[&str], seconds: f64) {
        if texts.is_empty() || !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let each = seconds / texts.len() as f64;
        if let Ok(mut m) = self.by_text.lock() {
            for t in texts {
                m.entry(key(t))
                    .and_modify(|c| *c = 0.5 * *c + 0.5 * each)
                    .or_insert(each);
            }
        }
    }
}

/// The requests for expressions with estimated `costs`: indices into `costs`, each request at
/// most `batch` of them, in their order. As few requests as `batch` allows while the total is
/// under [`SPLIT_SECONDS`]; above, about one request per `SPLIT_SECONDS`, at most
/// `concurrency` (or one per expression), balanced by cost (largest first, each to the
/// lightest request).
pub(crate) fn plan(costs: &[f64], batch: usize, concurrency: usize) -> Vec<Vec<usize>> {
    let n = costs.len();
    if n == 0 {
        return Vec::new();
    }
    let batch = batch.max(1);
    let fewest = n.div_ceil(batch);
    let total: f64 = costs.iter().filter(|c| c.is_finite()).sum();
    let most = fewest.max(concurrency.min(n));
    let wanted = if total > SPLIT_SECONDS {
        (total / SPLIT_SECONDS).ceil() as usize
    } else {
        1
    };
    let k = wanted.clamp(fewest, most);
    if total <= 0.0 {
        // Nothing known yet: even runs in order.
        let size = n.div_ceil(k);
        return (0..n).collect::<Vec<_>>().chunks(size).map(<[usize]>::to_vec).collect();
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| costs[*b].total_cmp(&costs[*a]).then(a.cmp(b)));
    let mut bins: Vec<(f64, Vec<usize>)> = vec![(0.0, Vec::new()); k];
    for i in order {
        // k * batch >= n, so some request always has room.
        let Some(bin) = bins
            .iter_mut()
            .filter(|b| b.1.len() < batch)
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.len().cmp(&b.1.len())))
        else {
            break;
        };
        bin.0 += if costs[i].is_finite() { costs[i] } else { 0.0 };
        bin.1.push(i);
    }
    bins.into_iter()
        .map(|(_, mut b)| {
            b.sort_unstable();
            b
        })
        .filter(|b| !b.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(p: &[Vec<usize>]) -> Vec<usize> {
        p.iter().map(Vec::len).collect()
    }

    #[test]
    fn unknown_or_light_expressions_go_in_as_few_requests_as_the_batch_allows() {
        assert_eq!(plan(&[0.0; 10], 16, 4), vec![(0..10).collect::<Vec<_>>()]);
        assert_eq!(sizes(&plan(&[0.0; 40], 16, 4)), vec![14, 14, 12]);
        assert_eq!(sizes(&plan(&[0.0005; 10], 16, 4)), vec![10]);
        assert!(plan(&[], 16, 4).is_empty());
    }

    #[test]
    fn heavy_expressions_are_spread_over_the_concurrency_by_cost() {
        // 120 ms of work: twelve requests wanted, four allowed.
        let costs = [0.05, 0.001, 0.001, 0.04, 0.001, 0.025, 0.001, 0.001];
        let p = plan(&costs, 16, 4);
        assert_eq!(p.len(), 4);
        let mut all: Vec<usize> = p.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        // The three heavy ones each lead a request of their own.
        for heavy in [0, 3, 5] {
            let with = p.iter().find(|r| r.contains(&heavy)).unwrap();
            assert!(!with.iter().any(|i| [0, 3, 5].contains(i) && *i != heavy), "{p:?}");
        }
        // Never more requests than expressions, never more than the batch in one.
        assert_eq!(plan(&[0.5, 0.5], 16, 4).len(), 2);
        assert!(plan(&[0.1; 10], 3, 2).iter().all(|r| r.len() <= 3));
        assert_eq!(plan(&[0.1; 10], 3, 2).len(), 4);
        // Concurrency 1: one request unless the batch size says otherwise.
        assert_eq!(plan(&[0.5; 5], 16, 1).len(), 1);
    }

    #[test]
    fn costs_are_shared_among_a_request_and_averaged() {
        let c = Costs::default();
        assert_eq!(c.estimates(&["a", "b"]), vec![0.0, 0.0]);
        c.observe(&["a", "b"], 0.1);
        assert_eq!(c.estimates(&["a", "b", "c"]), vec![0.05, 0.05, 0.0]);
        c.observe(&["a"], 0.15);
        assert!((c.estimates(&["a"])[0] - 0.1).abs() < 1e-12);
        c.observe(&["a"], f64::NAN);
        assert!((c.estimates(&["a"])[0] - 0.1).abs() < 1e-12);
    }
}
