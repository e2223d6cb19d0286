//! Numbers and durations as Sloth prints them, and exact decimals for watchfire's exact budgets.
//! (Sloth writes floats with Go's `%g`: [`crate::gofmt::format_g`].)
//!
//! - [`Decimal`] keeps a number as written (`99.9` is 999 × 10⁻¹), so that the error budget of a
//!   99.9 objective is exactly `0.001` rather than the float artefact `0.0009999999999999432`.
//! - [`parse_dur`] reads an SLO period or window into the crate's one [`crate::duration::Duration`]
//!   (`30d`, `4w`, `1h30m`).

use std::fmt;

use crate::duration::Duration;

/// An exact decimal: `mantissa × 10^-scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    pub mantissa: i128,
    pub scale: u32,
}

const MAX_SCALE: u32 = 30;

impl Decimal {
    pub fn from_int(v: i64) -> Self {
        Decimal {
            mantissa: v as i128,
            scale: 0,
        }
    }

    /// Parses a decimal literal as YAML/JSON write numbers: `99`, `99.9`, `.5`, `9.99e1`, `-1`.
    pub fn parse(text: &str) -> Option<Decimal> {
        let t = text.trim();
        let (neg, t) = match t.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, t.strip_prefix('+').unwrap_or(t)),
        };
        let (num, exp) = match t.find(['e', 'E']) {
            Some(i) => {
                let e = t[i + 1..].parse::<i32>().ok()?;
                if e.abs() > 100 {
                    return None;
                }
                (&t[..i], e)
            }
            None => (t, 0),
        };
        let (int, frac) = match num.split_once('.') {
            Some((a, b)) => (a, b),
            None => (num, ""),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        if !int.chars().all(|c| c.is_ascii_digit()) || !frac.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let digits = format!("{int}{frac}");
        let digits = digits.trim_start_matches('0');
        let mut scale = frac.len() as i64 - exp as i64;
        let mut mantissa: i128 = 0;
        for c in digits.chars() {
            mantissa = mantissa.checked_mul(10)?.checked_add((c as u8 - b'0') as i128)?;
        }
        while scale < 0 {
            mantissa = mantissa.checked_mul(10)?;
            scale += 1;
        }
        if scale > MAX_SCALE as i64 {
            return None;
        }
        let d = Decimal {
            mantissa: if neg { -mantissa } else { mantissa },
            scale: scale as u32,
        };
        Some(d.normalized())
    }

    /// Removes trailing zeros of the fraction.
    pub fn normalized(mut self) -> Self {
        while self.scale > 0 && self.mantissa % 10 == 0 {
            self.mantissa /= 10;
            self.scale -= 1;
        }
        self
    }

    fn rescale(self, scale: u32) -> Option<i128> {
        let mut m = self.mantissa;
        for _ in self.scale..scale {
            m = m.checked_mul(10)?;
        }
        Some(m)
    }

    pub fn checked_sub(self, o: Decimal) -> Option<Decimal> {
        let scale = self.scale.max(o.scale);
        let m = self.rescale(scale)?.checked_sub(o.rescale(scale)?)?;
        Some(Decimal { mantissa: m, scale }.normalized())
    }

    /// Divides by 10^n exactly.
    pub fn shift_left(self, n: u32) -> Option<Decimal> {
        let scale = self.scale + n;
        if scale > MAX_SCALE {
            return None;
        }
        Some(
            Decimal {
                mantissa: self.mantissa,
                scale,
            }
            .normalized(),
        )
    }

    pub fn to_f64(self) -> f64 {
        // Parsing the decimal text gives the nearest float, like Go's ParseFloat.
        self.to_string().parse().unwrap_or(f64::NAN)
    }

    pub fn is_positive(self) -> bool {
        self.mantissa > 0
    }

    pub fn cmp_int(self, v: i64) -> std::cmp::Ordering {
        match Decimal::from_int(v).rescale(self.scale) {
            Some(o) => self.mantissa.cmp(&o),
            None => std::cmp::Ordering::Less,
        }
    }

    /// As a rational number.
    pub fn to_ratio(self) -> Option<Ratio> {
        Ratio::new(self.mantissa, 10i128.checked_pow(self.scale)?)
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.mantissa < 0;
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let s = if scale == 0 {
            digits
        } else if digits.len() > scale {
            format!(
                "{}.{}",
                &digits[..digits.len() - scale],
                &digits[digits.len() - scale..]
            )
        } else {
            format!("0.{}{}", "0".repeat(scale - digits.len()), digits)
        };
        if neg {
            write!(f, "-{s}")
        } else {
            f.write_str(&s)
        }
    }
}

/// A reduced fraction, for burn-rate factors (budget% × period / 100 / long window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    pub num: i128,
    pub den: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

impl Ratio {
    pub fn new(num: i128, den: i128) -> Option<Ratio> {
        if den == 0 {
            return None;
        }
        let g = gcd(num, den).max(1);
        let (mut n, mut d) = (num / g, den / g);
        if d < 0 {
            n = -n;
            d = -d;
        }
        Some(Ratio { num: n, den: d })
    }

    pub fn checked_mul(self, o: Ratio) -> Option<Ratio> {
        let g1 = gcd(self.num, o.den).max(1);
        let g2 = gcd(o.num, self.den).max(1);
        Ratio::new(
            (self.num / g1).checked_mul(o.num / g2)?,
            (self.den / g2).checked_mul(o.den / g1)?,
        )
    }

    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// The exact decimal, when the denominator only has factors 2 and 5.
    pub fn to_decimal(self) -> Option<Decimal> {
        let mut d = self.den;
        let (mut twos, mut fives) = (0u32, 0u32);
        while d % 2 == 0 {
            d /= 2;
            twos += 1;
        }
        while d % 5 == 0 {
            d /= 5;
            fives += 1;
        }
        if d != 1 {
            return None;
        }
        let scale = twos.max(fives);
        if scale > MAX_SCALE {
            return None;
        }
        let m = self.num.checked_mul(10i128.checked_pow(scale)?)? / self.den;
        Some(Decimal { mantissa: m, scale }.normalized())
    }
}

pub(crate) const MINUTE: u64 = 60_000;
pub(crate) const HOUR: u64 = 60 * MINUTE;
pub(crate) const DAY: u64 = 24 * HOUR;

/// Parses an SLO period or window (`5m`, `1h30m`, `30d`, `4w`): Prometheus' syntax, but plain
/// numbers and zero are refused, with the SLO tools' wording.
pub fn parse_dur(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() || s.parse::<f64>().is_ok() || !s.chars().any(|c| c.is_ascii_alphabetic()) {
        return Err(format!("not a valid duration: {s:?} (use e.g. 5m, 1h, 30d)"));
    }
    match crate::duration::parse_ms(s) {
        Ok(0) | Err(crate::duration::DurationError::OutOfRange) => Err(format!("duration {s:?} out of range")),
        Ok(ms) => Ok(Duration::from_ms(ms)),
        Err(e) => Err(format!("not a valid duration {s:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gofmt::format_g as go_g;

    #[test]
    fn go_g_matches_sloth_outputs() {
        assert_eq!(go_g(99.9 / 100.0), "0.9990000000000001");
        assert_eq!(go_g(99.99 / 100.0), "0.9998999999999999");
        assert_eq!(go_g(95.0 / 100.0), "0.95");
        assert_eq!(go_g((100.0 - 99.9) / 100.0), "0.0009999999999999432");
        assert_eq!(go_g((100.0 - 99.99) / 100.0), "0.00010000000000005117");
        assert_eq!(go_g((100.0 - 95.0) / 100.0), "0.05");
        assert_eq!(go_g(14.4), "14.4");
        assert_eq!(go_g(30.0), "30");
        assert_eq!(go_g(5.0 * 28.0 * 24.0 / 100.0 / 6.0), "5.6000000000000005");
        assert_eq!(go_g(10.0 * 28.0 * 24.0 / 100.0 / 72.0), "0.9333333333333333");
        assert_eq!(go_g(1e-5), "1e-05");
        assert_eq!(go_g(1e6), "1e+06");
        assert_eq!(go_g(123456.0), "123456");
        assert_eq!(go_g(1.5e-7), "1.5e-07");
        assert_eq!(go_g(-2.5), "-2.5");
        assert_eq!(go_g(0.0001), "0.0001");
    }

    #[test]
    fn decimals_are_exact() {
        let o = Decimal::parse("99.9").unwrap();
        let budget = Decimal::from_int(100).checked_sub(o).unwrap().shift_left(2).unwrap();
        assert_eq!(budget.to_string(), "0.001");
        assert_eq!(o.shift_left(2).unwrap().to_string(), "0.999");
        assert_eq!(Decimal::parse("95").unwrap().to_string(), "95");
        assert_eq!(Decimal::parse("9.99e1").unwrap().to_string(), "99.9");
        assert_eq!(Decimal::parse("0.9990").unwrap().to_string(), "0.999");
        assert_eq!(Decimal::parse(".5").unwrap().to_string(), "0.5");
        assert!(Decimal::parse("abc").is_none());
        assert!(Decimal::parse("1e400").is_none());
        assert!(Decimal::parse("").is_none());
        let r = Ratio::new(5 * 28 * 24, 100 * 6).unwrap();
        assert_eq!(r.to_decimal().unwrap().to_string(), "5.6");
        assert!(Ratio::new(10 * 28 * 24, 100 * 72).unwrap().to_decimal().is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_dur("30d").unwrap(), Duration::days(30));
        assert_eq!(Duration::days(28).to_string(), "4w");
        assert_eq!(Duration::days(7).to_string(), "1w");
        assert_eq!(Duration::hours(24).to_string(), "1d");
        assert_eq!(Duration::hours(72).to_string(), "3d");
        assert_eq!(Duration::days(90).to_string(), "90d");
        assert_eq!(Duration::minutes(90).to_string(), "1h30m");
        assert!(parse_dur("5").is_err());
        assert!(parse_dur("").is_err());
        assert!(parse_dur("5x").is_err());
        assert!(parse_dur("0s").is_err());
    }
}
