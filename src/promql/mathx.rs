//! Numeric helpers shared by functions and aggregations, matching Prometheus' arithmetic.

/// One step of Kahan–Neumaier summation; returns the new sum and compensation.
pub(crate) fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

/// Linear interpolation quantile of Prometheus' `quantile`; sorts `values` (NaN first).
pub(crate) fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal),
    });
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

/// Least-squares fit of `samples` with time measured from `intercept_t` (ms), in seconds.
pub(crate) fn linear_regression(samples: &[(i64, f64)], intercept_t: i64) -> (f64, f64) {
    let (mut n, mut sx, mut cx, mut sy, mut cy, mut sxy, mut cxy, mut sx2, mut cx2) =
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    let init_y = samples[0].1;
    let mut const_y = true;
    for (i, &(t, v)) in samples.iter().enumerate() {
        if const_y && i > 0 && v != init_y {
            const_y = false;
        }
        n += 1.0;
        let x = (t - intercept_t) as f64 / 1e3;
        (sx, cx) = kahan_inc(x, sx, cx);
        (sy, cy) = kahan_inc(v, sy, cy);
        (sxy, cxy) = kahan_inc(x * v, sxy, cxy);
        (sx2, cx2) = kahan_inc(x * x, sx2, cx2);
    }
    if const_y {
        if init_y.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init_y);
    }
    let (sx, sy, sxy, sx2) = (sx + cx, sy + cy, sxy + cxy, sx2 + cx2);
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    let intercept = sy / n - slope * sx / n;
    (slope, intercept)
}

/// Whether `a` and `b` are equal within a relative tolerance (Prometheus' almost.Equal).
pub(crate) fn almost_equal(a: f64, b: f64, epsilon: f64) -> bool {
    const MIN_NORMAL: f64 = f64::MIN_POSITIVE;
    if a == b {
        return true;
    }
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || (a.abs() + b.abs()) < MIN_NORMAL {
        return diff < epsilon * MIN_NORMAL;
    }
    diff / (a.abs() + b.abs()).min(f64::MAX) < epsilon
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gofmt::format_f as format_go_float;

    #[test]
    fn go_float_format() {
        assert_eq!(format_go_float(1.0), "1");
        assert_eq!(format_go_float(0.1), "0.1");
        assert_eq!(format_go_float(1e21), "1000000000000000000000");
        assert_eq!(format_go_float(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn quantile_interpolates() {
        let mut v = vec![4.0, 1.0, 2.0, 3.0];
        assert_eq!(quantile(0.5, &mut v), 2.5);
        assert_eq!(quantile(1.5, &mut v), f64::INFINITY);
    }

    #[test]
    fn kahan_compensates() {
        let (mut s, mut c) = (0.0, 0.0);
        for x in [1e100, 1.0, -1e100] {
            (s, c) = kahan_inc(x, s, c);
        }
        assert_eq!(s + c, 1.0);
    }
}
