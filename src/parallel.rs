//! Data parallelism for the few loops that dominate large queries (decoding the chunks of tens
//! of thousands of series, evaluating range functions over them): the work is split into one
//! contiguous part per core with scoped threads, and the results come back in input order, so
//! what follows (aggregation in series order, float sums) is exactly what a sequential loop
//! gives. Small inputs stay on the calling thread: a spawn costs tens of microseconds.

use std::sync::OnceLock;

/// Below this many items a loop runs on the calling thread.
pub const MIN_PARALLEL: usize = 4096;

/// Cores to use, at most 8 (the machine's, read once).
fn workers() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(8)))
}

/// `items.iter().filter_map(f).collect()`, split over the cores when `items` is large.
pub fn filter_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> Option<R> + Sync) -> Vec<R> {
    let workers = workers();
    if items.len() < MIN_PARALLEL || workers < 2 {
        return items.iter().filter_map(f).collect();
    }
    let part = items.len().div_ceil(workers);
    let f = &f;
    std::thread::scope(|s| {
        let mut parts = items.chunks(part);
        let first = parts.next().unwrap_or_default();
        let handles: Vec<_> = parts
            .map(|p| s.spawn(move || p.iter().filter_map(f).collect::<Vec<R>>()))
            .collect();
        let mut out: Vec<R> = first.iter().filter_map(f).collect();
        for h in handles {
            match h.join() {
                Ok(v) => out.extend(v),
                // A panic in a part is the caller's panic.
                Err(e) => std::panic::resume_unwind(e),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_input_order_small_and_large() {
        for n in [0, 10, MIN_PARALLEL - 1, MIN_PARALLEL, 3 * MIN_PARALLEL + 7] {
            let items: Vec<usize> = (0..n).collect();
            let got = filter_map(&items, |&i| (i % 3 != 0).then_some(i * 2));
            let want: Vec<usize> = items.iter().filter(|&&i| i % 3 != 0).map(|&i| i * 2).collect();
            assert_eq!(got, want, "n = {n}");
        }
    }
}
