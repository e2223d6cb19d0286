//! Trimming a native histogram at a value, Prometheus' `FloatHistogram.TrimBuckets`: the
//! arithmetic of the PromQL operators `</` (keep what lies below) and `>/` (keep what lies
//! above).
//!
//! A bucket wholly on the kept side stays, one wholly on the other side is emptied, and one the
//! value cuts keeps the share of its count on the kept side: interpolated linearly for custom
//! buckets, on the log scale for exponential ones. Buckets reaching ±Inf are kept or dropped
//! whole, except that a custom first bucket with a positive upper bound is treated as starting
//! at 0. The zero bucket is cut linearly, over its positive half only when the histogram has
//! only positive buckets (and likewise for negative ones). When anything was cut, the count is
//! the sum of what is kept and the sum is re-estimated from each kept share's midpoint
//! (geometric for exponential buckets); otherwise both stay as they were.

use super::histogram::FloatHistogram;

/// One bucket as Prometheus' bucket iterator yields it: lower < upper, negative buckets
/// mirrored to negative bounds.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    lower: f64,
    upper: f64,
    count: f64,
}

impl FloatHistogram {
    /// Trims the histogram at `at`: keeps the observations below it when `upper` (`h </ at`),
    /// above it otherwise (`h >/ at`).
    pub fn trim(&mut self, at: f64, upper: bool) {
        let linear = self.uses_custom_buckets();
        let mut kept_count = 0.0;
        let mut kept_sum = 0.0;
        let mut trimmed = false;
        let mut has = [false, false];
        // Positive buckets first, then negative ones, each in index order: the order Prometheus
        // adds up the new count and sum in.
        for positive in [true, false] {
            let n = if positive {
                self.positive.len()
            } else {
                self.negative.len()
            };
            for k in 0..n {
                let (i, count) = if positive { self.positive[k] } else { self.negative[k] };
                if count == 0.0 {
                    continue;
                }
                has[usize::from(positive)] = true;
                let (lo, hi) = (self.bound(i.saturating_sub(1)), self.bound(i));
                let (lower, upper_bound) = if positive { (lo, hi) } else { (-hi, -lo) };
                let b = Bucket {
                    lower,
                    upper: upper_bound,
                    count,
                };
                let whole = if upper { b.upper <= at } else { b.lower >= at };
                let cut = if upper { b.lower < at } else { b.upper > at };
                let keep = if whole {
                    kept_sum += midpoint(b.lower, b.upper, positive, linear) * count;
                    kept_count += count;
                    continue;
                } else if cut {
                    let (keep, mid) = bucket_trim(b, at, upper, positive, linear);
                    kept_sum += mid * keep;
                    kept_count += keep;
                    keep
                } else {
                    0.0
                };
                if keep != count {
                    trimmed = true;
                    if positive {
                        self.positive[k].1 = keep;
                    } else {
                        self.negative[k].1 = keep;
                    }
                }
            }
        }
        // Histograms with custom buckets have no zero bucket.
        if self.zero_count > 0.0 && !linear {
            let (keep, mid) = zero_bucket_trim(self, at, has[0], has[1], upper);
            if self.zero_count != keep {
                self.zero_count = keep;
                trimmed = true;
            }
            kept_sum += mid * keep;
            kept_count += keep;
        }
        if trimmed {
            self.count = kept_count;
            self.sum = kept_sum;
            self.positive.retain(|b| b.1 != 0.0);
            self.negative.retain(|b| b.1 != 0.0);
        }
    }
}

/// The part of a bucket the cut at `at` keeps, and that part's midpoint.
fn bucket_trim(b: Bucket, at: f64, upper: bool, positive: bool, linear: bool) -> (f64, f64) {
    if b.lower == f64::NEG_INFINITY || b.upper == f64::INFINITY {
        return infinite_bucket_trim(b, at, upper);
    }
    let below = if at <= b.lower {
        0.0
    } else if at >= b.upper {
        b.count
    } else {
        b.count * fraction_below(b, at, linear)
    };
    if upper {
        (below, midpoint(b.lower, at, positive, linear))
    } else {
        (b.count - below, midpoint(at, b.upper, positive, linear))
    }
}

/// The share of a bucket below `v` (Prometheus' `Bucket.FractionBelow`): linear, or linear in
/// the log of the bounds (mirrored for negative buckets).
fn fraction_below(b: Bucket, v: f64, linear: bool) -> f64 {
    if linear {
        return (v - b.lower) / (b.upper - b.lower);
    }
    let log_lower = b.lower.abs().log2();
    let log_upper = b.upper.abs().log2();
    let log_v = v.abs().log2();
    if v > 0.0 {
        (log_v - log_lower) / (log_upper - log_lower)
    } else {
        1.0 - (log_v - log_upper) / (log_lower - log_upper)
    }
}

/// A bucket reaching -Inf or +Inf: the distribution inside is unknown, so it is kept or dropped
/// whole, except a first custom bucket with a finite positive upper bound, read as starting at
/// 0 (only custom buckets can have a finite upper bound above -Inf).
fn infinite_bucket_trim(b: Bucket, at: f64, upper: bool) -> (f64, f64) {
    let finite_or_zero = |x: f64| if x.is_infinite() { 0.0 } else { x };
    if b.lower == f64::NEG_INFINITY {
        if upper {
            if at >= b.upper {
                return (b.count, 0.0);
            }
            if at > 0.0 && b.upper > 0.0 && b.upper.is_finite() {
                return (b.count * at / b.upper, at / 2.0);
            }
            if b.upper <= 0.0 {
                return (b.count, at);
            }
            return (0.0, finite_or_zero(b.upper));
        }
        if at <= b.lower {
            return (b.count, 0.0);
        }
        if at >= 0.0 && b.upper > at && b.upper.is_finite() {
            return (b.count * (1.0 - at / b.upper), (at + b.upper) / 2.0);
        }
        return (0.0, finite_or_zero(b.upper));
    }
    // The upper bound is +Inf.
    if upper {
        // Some of it may lie above `at` whatever the lower bound: it goes.
        return (0.0, finite_or_zero(b.lower));
    }
    if at >= b.lower {
        return (b.count, at);
    }
    (0.0, finite_or_zero(b.lower))
}

/// The zero bucket's kept part and its midpoint: the bucket spans [-threshold, threshold], or
/// only its positive (negative) half when all other buckets are positive (negative).
fn zero_bucket_trim(h: &FloatHistogram, at: f64, has_negative: bool, has_positive: bool, upper: bool) -> (f64, f64) {
    let mut lower = -h.zero_threshold;
    let mut upper_bound = h.zero_threshold;
    if has_negative && !has_positive {
        upper_bound = 0.0;
    }
    if has_positive && !has_negative {
        lower = 0.0;
    }
    let (fraction, mid) = if upper {
        if at <= lower {
            return (0.0, 0.0);
        }
        if at >= upper_bound {
            return (h.zero_count, (lower + upper_bound) / 2.0);
        }
        ((at - lower) / (upper_bound - lower), (lower + at) / 2.0)
    } else {
        if at <= lower {
            return (h.zero_count, (lower + upper_bound) / 2.0);
        }
        if at >= upper_bound {
            return (0.0, 0.0);
        }
        ((upper_bound - at) / (upper_bound - lower), (at + upper_bound) / 2.0)
    };
    (h.zero_count * fraction, mid)
}

/// Where the observations of a kept interval are assumed to lie on average: the arithmetic
/// mean of its bounds for custom buckets, the geometric one for exponential buckets, a finite
/// bound when the other is infinite.
fn midpoint(lower: f64, upper: f64, positive: bool, linear: bool) -> f64 {
    if lower.is_infinite() {
        if upper.is_infinite() {
            return 0.0;
        }
        if upper > 0.0 {
            return upper / 2.0;
        }
        return upper;
    }
    if upper.is_infinite() {
        return lower;
    }
    if linear {
        return (lower + upper) / 2.0;
    }
    let geo = (lower * upper).abs().sqrt();
    if positive {
        geo
    } else {
        -geo
    }
}

#[cfg(test)]
mod tests {
    use crate::tsdb::histogram::parse;

    fn trimmed(h: &str, at: f64, upper: bool) -> String {
        let mut h = parse(h).unwrap();
        h.trim(at, upper);
        h.test_expression()
    }

    fn same(got: &str, want: &str) {
        let (g, w) = (parse(got).unwrap(), parse(want).unwrap());
        assert!(g.equals_ignoring_hint(&w, 1e-9), "got {got}, want {want}");
    }

    const EXP: &str = "{{schema:0 sum:123.75 count:34 z_bucket:1 z_bucket_w:0.001 buckets:[2 4 8 16] n_buckets:[1 2]}}";
    const NHCB: &str = "{{schema:-53 sum:172.5 count:15 custom_values:[5 10 15 20] buckets:[1 6 4 3 1]}}";

    #[test]
    fn nothing_cut_keeps_count_and_sum() {
        assert_eq!(trimmed(EXP, f64::INFINITY, true), parse(EXP).unwrap().test_expression());
        assert_eq!(
            trimmed(EXP, f64::NEG_INFINITY, false),
            parse(EXP).unwrap().test_expression()
        );
        assert_eq!(trimmed(NHCB, 0.0, false), parse(NHCB).unwrap().test_expression());
        assert_eq!(trimmed("{{}}", 5.0, true), "{{}}");
    }

    #[test]
    fn everything_cut_leaves_an_empty_layout() {
        same(&trimmed(EXP, f64::INFINITY, false), "{{schema:0 z_bucket_w:0.001}}");
        same(&trimmed(EXP, f64::NEG_INFINITY, true), "{{schema:0 z_bucket_w:0.001}}");
        same(&trimmed(NHCB, 0.0, true), "{{schema:-53 custom_values:[5 10 15 20]}}");
    }

    #[test]
    fn exponential_buckets_cut_on_the_log_scale() {
        // sqrt(2) is half-way between 1 and 2 on the log scale.
        same(
            &trimmed(EXP, std::f64::consts::SQRT_2, true),
            "{{count:8 sum:0.2570938865989847 z_bucket:1 z_bucket_w:0.001 buckets:[2 2] n_buckets:[1 2]}}",
        );
        same(
            &trimmed(EXP, 2.0, false),
            "{{count:24 sum:113.13708498984761 z_bucket_w:0.001 offset:2 buckets:[8 16]}}",
        );
        same(
            &trimmed(EXP, 0.0, true),
            "{{schema:0 sum:-3.53578390593273768 count:3.5 z_bucket:0.5 z_bucket_w:0.001 n_buckets:[1 2]}}",
        );
        // Negative buckets are mirrored.
        same(
            &trimmed(
                "{{schema:2 sum:12.8286080906 count:28 z_bucket:1 z_bucket_w:0.001 buckets:[1 2 4 7 3] n_buckets:[1 5 3 1]}}",
                -1.3,
                true,
            ),
            "{{schema:2 count:2.45786052095524 sum:-3.5189307983595066 z_bucket_w:0.001 n_offset:2 n_buckets:[1.45786052095524 1]}}",
        );
    }

    #[test]
    fn custom_buckets_cut_linearly_and_infinite_ones_whole() {
        same(
            &trimmed(NHCB, 13.0, true),
            "{{schema:-53 count:9.4 sum:75.1 custom_values:[5 10 15 20] buckets:[1 6 2.4]}}",
        );
        same(
            &trimmed(NHCB, 13.0, false),
            "{{schema:-53 count:5.6 sum:94.9 custom_values:[5 10 15 20] offset:2 buckets:[1.6 3 1]}}",
        );
        // The +Inf bucket goes even though 50 is above its lower bound.
        same(
            &trimmed(NHCB, 50.0, true),
            "{{schema:-53 count:14 sum:150.0 custom_values:[5 10 15 20] buckets:[1 6 4 3]}}",
        );
        // The first bucket with a positive upper bound is read as starting at 0.
        same(
            &trimmed(
                "{{schema:-53 sum:33 count:101 custom_values:[5] buckets:[1 100]}}",
                1.0,
                false,
            ),
            "{{schema:-53 count:100.8 sum:502.4 custom_values:[5] buckets:[0.8 100]}}",
        );
        // One bucket from -Inf to +Inf cannot be cut.
        same(
            &trimmed("{{schema:-53 sum:100.0 count:100 buckets:[100]}}", 10.0, true),
            "{{schema:-53 sum:0 count:0}}",
        );
    }

    #[test]
    fn zero_bucket_takes_the_side_of_the_other_buckets() {
        let pos = "{{schema:0 sum:8.0210678118654755 count:12 z_bucket:2 z_bucket_w:0.5 buckets:[10]}}";
        same(
            &trimmed(pos, 0.1, false),
            "{{schema:0 count:11.6 sum:7.551067811865476 z_bucket:1.6 z_bucket_w:0.5 buckets:[10]}}",
        );
        same(
            &trimmed(pos, 0.1, true),
            "{{schema:0 count:0.4 sum:0.02 z_bucket:0.4 z_bucket_w:0.5}}",
        );
        let only = "{{schema:0 count:5 sum:0 z_bucket:5 z_bucket_w:0.1}}";
        same(
            &trimmed(only, 0.05, true),
            "{{schema:0 count:3.75 sum:-0.09375 z_bucket:3.75 z_bucket_w:0.1}}",
        );
        same(&trimmed(only, 0.1, false), "{{schema:0 z_bucket_w:0.1}}");
    }
}
