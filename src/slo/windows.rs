//! Multi-window multi-burn-rate alert windows: Sloth's catalogs (`AlertWindows`) and their
//! scaling to any SLO period.
//!
//! A tier consumes `budget_percent` of the period's error budget over its long window; its burn
//! factor is `budget_percent × period / 100 / long_window` (Sloth, internal/alert/window.go).
//! Built in: Sloth's 30d and 28d catalogs (2/5/10/10 % over 1h/6h/1d/3d, short windows
//! 5m/30m/2h/6h) and the 7d catalog of Sloth's examples (8/12.5/20/42 %). Any other period keeps
//! the 30d percentages and scales every window by `period / 30d` (rounded to the minute), so the
//! factors stay 14.4, 6, 3 and 1.

use crate::duration::Duration;

use super::num::{Decimal, Ratio, MINUTE};
use super::spec::{TierName, TierOverride};
use super::yaml::{self, Node};
use crate::gofmt::format_g;

/// One tier of a catalog.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub budget_percent: Decimal,
    pub short: Duration,
    pub long: Duration,
}

/// A catalog for one SLO period (Sloth's `AlertWindows` spec).
#[derive(Clone, Debug, PartialEq)]
pub struct AlertWindows {
    pub period: Duration,
    pub page_quick: Window,
    pub page_slow: Window,
    pub ticket_quick: Window,
    pub ticket_slow: Window,
}

fn w(pct: i64, short: Duration, long: Duration) -> Window {
    Window {
        budget_percent: Decimal::from_int(pct),
        short,
        long,
    }
}

impl AlertWindows {
    /// Sloth's google-30d.yaml.
    pub fn google_30d() -> Self {
        Self::google(Duration::days(30))
    }

    /// Sloth's google-28d.yaml.
    pub fn google_28d() -> Self {
        Self::google(Duration::days(28))
    }

    fn google(period: Duration) -> Self {
        AlertWindows {
            period,
            page_quick: w(2, Duration::minutes(5), Duration::hours(1)),
            page_slow: w(5, Duration::minutes(30), Duration::hours(6)),
            ticket_quick: w(10, Duration::hours(2), Duration::days(1)),
            ticket_slow: w(10, Duration::hours(6), Duration::days(3)),
        }
    }

    /// The 7d catalog of Sloth's examples (examples/windows/7d.yaml).
    pub fn sloth_7d() -> Self {
        let pct = |s: &str| Decimal::parse(s).unwrap_or(Decimal::from_int(0));
        AlertWindows {
            period: Duration::days(7),
            page_quick: Window {
                budget_percent: pct("8"),
                short: Duration::minutes(5),
                long: Duration::hours(1),
            },
            page_slow: Window {
                budget_percent: pct("12.5"),
                short: Duration::minutes(30),
                long: Duration::hours(6),
            },
            ticket_quick: Window {
                budget_percent: pct("20"),
                short: Duration::hours(2),
                long: Duration::days(1),
            },
            ticket_slow: Window {
                budget_percent: pct("42"),
                short: Duration::hours(6),
                long: Duration::days(3),
            },
        }
    }

    /// The 30d catalog scaled to `period`.
    pub fn scaled(period: Duration) -> Self {
        let base = Self::google_30d();
        let scale = |d: Duration| -> Duration {
            let ms = (d.as_millis() as u128 * period.as_millis() as u128) / base.period.as_millis() as u128;
            let minutes = ((ms + MINUTE as u128 / 2) / MINUTE as u128).max(1) as u64;
            Duration::minutes(minutes)
        };
        let sw = |x: &Window| Window {
            budget_percent: x.budget_percent,
            short: scale(x.short),
            long: scale(x.long),
        };
        AlertWindows {
            period,
            page_quick: sw(&base.page_quick),
            page_slow: sw(&base.page_slow),
            ticket_quick: sw(&base.ticket_quick),
            ticket_slow: sw(&base.ticket_slow),
        }
    }

    /// The catalog for `period`: a custom one if given, else a built-in one, else scaled.
    pub fn for_period(period: Duration, custom: &[AlertWindows]) -> Self {
        if let Some(c) = custom.iter().find(|c| c.period == period) {
            return c.clone();
        }
        if period == Duration::days(30) {
            Self::google_30d()
        } else if period == Duration::days(28) {
            Self::google_28d()
        } else if period == Duration::days(7) {
            Self::sloth_7d()
        } else {
            Self::scaled(period)
        }
    }

    pub fn get(&self, t: TierName) -> &Window {
        match t {
            TierName::PageQuick => &self.page_quick,
            TierName::PageSlow => &self.page_slow,
            TierName::TicketQuick => &self.ticket_quick,
            TierName::TicketSlow => &self.ticket_slow,
        }
    }

    /// Parses a Sloth `AlertWindows` file (`apiVersion: sloth.slok.dev/v1`, `kind: AlertWindows`).
    pub fn parse(text: &str) -> Result<AlertWindows, String> {
        let docs = yaml::parse_stream(text).map_err(|e| e.to_string())?;
        let root = docs.first().map(|d| &d.root).ok_or("empty AlertWindows file")?;
        let api = root.get_str("apiVersion").unwrap_or_default();
        let kind = root.get_str("kind").unwrap_or_default();
        if api != "sloth.slok.dev/v1" || kind != "AlertWindows" {
            return Err(format!(
                "{}: expected apiVersion sloth.slok.dev/v1 and kind AlertWindows",
                root.pos()
            ));
        }
        only_keys(root, &["apiVersion", "kind", "spec"])?;
        let spec = root.get("spec").ok_or("spec is required")?;
        only_keys(spec, &["sloPeriod", "page", "ticket"])?;
        let period = super::num::parse_dur(spec.get_str("sloPeriod").ok_or("spec.sloPeriod is required")?)?;
        let sev = |k: &str| -> Result<(Window, Window), String> {
            let n = spec.get(k).ok_or_else(|| format!("spec.{k} is required"))?;
            only_keys(n, &["quick", "slow"])?;
            let one = |q: &str| -> Result<Window, String> {
                let x = n.get(q).ok_or_else(|| format!("spec.{k}.{q} is required"))?;
                only_keys(x, &["errorBudgetPercent", "shortWindow", "longWindow"])?;
                let pct = x
                    .get_str("errorBudgetPercent")
                    .and_then(Decimal::parse)
                    .filter(|d| d.is_positive())
                    .ok_or_else(|| format!("{}: errorBudgetPercent must be a positive number", x.pos()))?;
                let short = super::num::parse_dur(x.get_str("shortWindow").ok_or("shortWindow is required")?)?;
                let long = super::num::parse_dur(x.get_str("longWindow").ok_or("longWindow is required")?)?;
                Ok(Window {
                    budget_percent: pct,
                    short,
                    long,
                })
            };
            Ok((one("quick")?, one("slow")?))
        };
        let (pq, ps) = sev("page")?;
        let (tq, ts) = sev("ticket")?;
        Ok(AlertWindows {
            period,
            page_quick: pq,
            page_slow: ps,
            ticket_quick: tq,
            ticket_slow: ts,
        })
    }
}

fn only_keys(n: &Node, allowed: &[&str]) -> Result<(), String> {
    match n {
        Node::Map(entries, _) => {
            for (k, _) in entries {
                if !allowed.contains(&k.value.as_str()) {
                    return Err(format!("{}: unknown key `{}`", k.pos, k.value));
                }
            }
            Ok(())
        }
        other => Err(format!("{}: expected a mapping", other.pos())),
    }
}

/// How a tier's burn factor was obtained.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Factor {
    /// From a catalog's budget percent: `pct × period / 100 / long`.
    Budget(Decimal),
    /// Given as is (`watchfire.tiers.<tier>.factor`).
    Explicit(Decimal),
}

/// A resolved tier of one SLO.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tier {
    pub name: TierName,
    pub enabled: bool,
    pub short: Duration,
    pub long: Duration,
    pub factor: Factor,
    pub period: Duration,
}

impl Tier {
    /// The factor as Sloth computes it, in float64 and in its operation order.
    pub(crate) fn factor_f64(&self) -> f64 {
        match &self.factor {
            Factor::Budget(p) => p.to_f64() * self.period.as_hours_f64() / 100.0 / self.long.as_hours_f64(),
            Factor::Explicit(d) => d.to_f64(),
        }
    }

    /// The exact factor, when it has a finite decimal expansion.
    pub(crate) fn factor_exact(&self) -> Option<Decimal> {
        match &self.factor {
            Factor::Budget(p) => p
                .to_ratio()?
                .checked_mul(Ratio::new(
                    self.period.as_millis() as i128,
                    100 * self.long.as_millis() as i128,
                )?)?
                .to_decimal(),
            Factor::Explicit(d) => Some(*d),
        }
    }

    /// The factor as written in the rules: Sloth's `%g`, or exact when asked and possible.
    pub(crate) fn factor_text(&self, exact: bool) -> String {
        match (&self.factor, exact) {
            (Factor::Explicit(d), _) => d.to_string(),
            (Factor::Budget(_), true) => self
                .factor_exact()
                .map(|d| d.to_string())
                .unwrap_or_else(|| format_g(self.factor_f64())),
            (Factor::Budget(_), false) => format_g(self.factor_f64()),
        }
    }
}

/// The four tiers of an SLO: the catalog for its period with the spec's overrides applied.
pub(crate) fn resolve_tiers(
    period: Duration,
    custom: &[AlertWindows],
    overrides: &std::collections::BTreeMap<TierName, TierOverride>,
) -> Vec<Tier> {
    let cat = AlertWindows::for_period(period, custom);
    TierName::ALL
        .iter()
        .map(|&name| {
            let base = cat.get(name);
            let ov = overrides.get(&name);
            let factor = match ov {
                Some(TierOverride { factor: Some(f), .. }) => Factor::Explicit(*f),
                Some(TierOverride {
                    budget_percent: Some(p),
                    ..
                }) => Factor::Budget(*p),
                _ => Factor::Budget(base.budget_percent),
            };
            Tier {
                name,
                enabled: !ov.and_then(|o| o.disable).unwrap_or(false),
                short: ov.and_then(|o| o.short_window).unwrap_or(base.short),
                long: ov.and_then(|o| o.long_window).unwrap_or(base.long),
                factor,
                period,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn factors(p: Duration) -> Vec<String> {
        resolve_tiers(p, &[], &BTreeMap::new())
            .iter()
            .map(|t| t.factor_text(false))
            .collect()
    }

    #[test]
    fn sloth_factors() {
        assert_eq!(factors(Duration::days(30)), ["14.4", "6", "3", "1"]);
        assert_eq!(
            factors(Duration::days(28)),
            [
                "13.44",
                "5.6000000000000005",
                "2.8000000000000003",
                "0.9333333333333333"
            ]
        );
        assert_eq!(
            factors(Duration::days(7)),
            ["13.44", "3.5", "1.4000000000000001", "0.98"]
        );
        let exact: Vec<String> = resolve_tiers(Duration::days(28), &[], &BTreeMap::new())
            .iter()
            .map(|t| t.factor_text(true))
            .collect();
        assert_eq!(exact, ["13.44", "5.6", "2.8", "0.9333333333333333"]);
    }

    #[test]
    fn scaled_periods_keep_factors() {
        let t = resolve_tiers(Duration::days(90), &[], &BTreeMap::new());
        assert_eq!(t[0].short, Duration::minutes(15));
        assert_eq!(t[0].long, Duration::hours(3));
        assert_eq!(t[3].long, Duration::days(9));
        let f: Vec<String> = t.iter().map(|t| t.factor_text(true)).collect();
        assert_eq!(f, ["14.4", "6", "3", "1"]);
    }

    #[test]
    fn parses_alert_windows() {
        let text = "apiVersion: sloth.slok.dev/v1\nkind: AlertWindows\nspec:\n  sloPeriod: 7d\n  page:\n    quick: {errorBudgetPercent: 8, shortWindow: 5m, longWindow: 1h}\n    slow: {errorBudgetPercent: 12.5, shortWindow: 30m, longWindow: 6h}\n  ticket:\n    quick: {errorBudgetPercent: 20, shortWindow: 2h, longWindow: 24h}\n    slow: {errorBudgetPercent: 42, shortWindow: 6h, longWindow: 72h}\n";
        let w = AlertWindows::parse(text).unwrap();
        assert_eq!(w, AlertWindows::sloth_7d());
        assert!(AlertWindows::parse("apiVersion: x").is_err());
        assert!(AlertWindows::parse(&text.replace("sloPeriod", "period")).is_err());
    }
}
