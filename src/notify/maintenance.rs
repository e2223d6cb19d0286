//! watchfire's route extensions (the `watchfire:` key on a route), beyond Alertmanager:
//!
//! ```yaml
//! routes:
//! - matchers: [team="ml-infra"]
//!   receiver: ml-infra-pager
//!   watchfire:
//!     inherit_time_intervals: true       # take the parent's mute/active intervals and windows
//!     maintenance_windows:
//!     - name: weekly-node-rotation
//!       cron: "0 2 * * sun"              # standard 5-field cron (or 6/7 fields with seconds)
//!       duration: 2h
//!       location: Europe/Berlin          # default UTC
//! ```
//!
//! A maintenance window mutes the route's notifications from each time the cron expression
//! fires until `duration` later, like a `mute_time_intervals` entry.
//!
//! `resolve_through_mutes` (default `true`, inherited by child routes that do not set it): a
//! receiver that was told an alert fires is told when it resolves, whatever mutes the alert at
//! that moment (silence, inhibition, time interval, maintenance window), so no incident is left
//! open at PagerDuty or Opsgenie. `false` restores Alertmanager's behaviour, where a muted
//! alert's resolve is never sent (Alertmanager #226).

use std::str::FromStr;

use chrono::{DateTime, Utc};

use super::timeinterval::Location;
use crate::duration::{parse_alertmanager as parse_duration, Duration};
use crate::gofmt::quote_common_invisibles as go_quote;
use crate::yaml::v2::{DResult, Decoder, Fail, Node, Pos};

/// The `watchfire:` extensions of one route.
#[derive(Clone, Debug, Default)]
pub struct RouteExtensions {
    pub maintenance_windows: Vec<MaintenanceWindow>,
    /// Take the parent's `mute_time_intervals`, `active_time_intervals` and maintenance windows
    /// (Alertmanager itself does not inherit them).
    pub inherit_time_intervals: bool,
    /// `resolve_through_mutes`, when the route sets it (`None`: the parent's, at the root `true`).
    pub resolve_through_mutes: Option<bool>,
}

/// A recurring maintenance window.
#[derive(Clone, Debug)]
pub struct MaintenanceWindow {
    pub name: String,
    /// The expression as written.
    pub cron: String,
    pub schedule: cron::Schedule,
    pub duration: Duration,
    pub location: Location,
    pub pos: Pos,
}

impl MaintenanceWindow {
    /// Whether `t` lies in `[fire, fire + duration)` for some fire time of the schedule.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        if self.duration.is_zero() {
            return false;
        }
        let from = t - self.duration.as_chrono();
        let first = match &self.location {
            Location::Utc => self.schedule.after(&from).next().map(|d| d.with_timezone(&Utc)),
            Location::Local => self
                .schedule
                .after(&from.with_timezone(&chrono::Local))
                .next()
                .map(|d| d.with_timezone(&Utc)),
            Location::Tz(tz) => self
                .schedule
                .after(&from.with_timezone(tz))
                .next()
                .map(|d| d.with_timezone(&Utc)),
        };
        matches!(first, Some(f) if f <= t)
    }
}

/// Parses a cron expression: standard 5 fields (minute hour day-of-month month day-of-week,
/// Sunday = 0 or 7), or the `cron` crate's 6/7 fields with seconds first.
pub(crate) fn parse_cron(expr: &str) -> Result<cron::Schedule, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let full = if fields.len() == 5 {
        let dow = translate_dow(fields[4])?;
        format!("0 {} {} {} {} {}", fields[0], fields[1], fields[2], fields[3], dow)
    } else {
        expr.to_string()
    };
    cron::Schedule::from_str(&full).map_err(|e| e.to_string())
}

/// Standard cron's day-of-week numbers (0-7, Sunday = 0 or 7) to the `cron` crate's (1-7,
/// Sunday = 1); names pass through.
fn translate_dow(field: &str) -> Result<String, String> {
    let map = |s: &str| -> Result<String, String> {
        match s.parse::<u32>() {
            Ok(n) if n <= 7 => Ok(((n % 7) + 1).to_string()),
            Ok(n) => Err(format!("day of week {n} out of range 0-7")),
            Err(_) => Ok(s.to_string()),
        }
    };
    let mut parts = Vec::new();
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let translated = if range == "*" || range == "?" {
            range.to_string()
        } else if let Some((a, b)) = range.split_once('-') {
            let (ta, tb) = (map(a)?, map(b)?);
            if b.trim() == "7" && a.parse::<u32>().is_ok_and(|a| a > 0) {
                // e.g. 5-7 (Friday to Sunday): 6-7 and 1.
                parts.push(format!("{ta}-7"));
                "1".to_string()
            } else {
                format!("{ta}-{tb}")
            }
        } else {
            map(range)?
        };
        parts.push(match step {
            Some(s) => format!("{translated}/{s}"),
            None => translated,
        });
    }
    Ok(parts.join(","))
}

/// Decodes a route's `watchfire:` key.
pub(crate) fn decode_route_extensions(d: &mut Decoder, node: &Node) -> DResult<RouteExtensions> {
    let mut ext = RouteExtensions::default();
    d.fields(
        node,
        "watchfire.RouteExtensions",
        &["maintenance_windows", "inherit_time_intervals", "resolve_through_mutes"],
        &mut |d, k, _, v| {
            if k == "inherit_time_intervals" {
                ext.inherit_time_intervals = d.bool(v);
                return Ok(());
            }
            if k == "resolve_through_mutes" {
                ext.resolve_through_mutes = Some(d.bool(v));
                return Ok(());
            }
            ext.maintenance_windows.clear();
            for item in d.seq(v, "[]watchfire.MaintenanceWindow") {
                if let Some(w) = decode_window(d, item)? {
                    ext.maintenance_windows.push(w);
                }
            }
            Ok(())
        },
    )?;
    Ok(ext)
}

fn decode_window(d: &mut Decoder, node: &Node) -> DResult<Option<MaintenanceWindow>> {
    if node.is_null() {
        return Err(Fail::new(node.pos(), "a maintenance window must not be empty"));
    }
    let mark = d.mark();
    let mut name = String::new();
    let mut expr: Option<(String, Pos)> = None;
    let mut duration: Option<Duration> = None;
    let mut location = Location::Utc;
    d.fields(
        node,
        "watchfire.MaintenanceWindow",
        &["name", "cron", "duration", "location"],
        &mut |d, k, _, v| {
            match k {
                "name" => name = d.string(v, "string"),
                "cron" => expr = Some((d.string(v, "string"), v.pos())),
                "duration" => {
                    if let Some(s) = d.custom_string(v) {
                        duration = Some(parse_duration(&s).map_err(|e| Fail::new(v.pos(), e))?);
                    }
                }
                _ => {
                    if let Some(s) = d.custom_string(v) {
                        location = Location::load(&s).map_err(|e| Fail::new(v.pos(), e))?;
                    }
                }
            }
            Ok(())
        },
    )?;
    if d.failed_since(mark) {
        return Ok(None);
    }
    let Some((cron_expr, cron_pos)) = expr.filter(|(e, _)| !e.is_empty()) else {
        return Err(Fail::new(node.pos(), "missing cron in maintenance window"));
    };
    let schedule = parse_cron(&cron_expr).map_err(|e| {
        Fail::new(
            cron_pos,
            format!(
                "invalid cron expression {} in maintenance window: {e}",
                go_quote(&cron_expr)
            ),
        )
    })?;
    let Some(duration) = duration.filter(|d| !d.is_zero()) else {
        return Err(Fail::new(
            node.pos(),
            "missing duration in maintenance window (for example `duration: 2h`)",
        ));
    };
    Ok(Some(MaintenanceWindow {
        name,
        cron: cron_expr,
        schedule,
        duration,
        location,
        pos: node.pos(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::v2::parse;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn ext(y: &str) -> Result<RouteExtensions, String> {
        let n = parse(y).unwrap().unwrap();
        let mut d = Decoder::new();
        let r = decode_route_extensions(&mut d, &n).map_err(|f| f.message)?;
        if let Some(i) = d.issues.first() {
            return Err(i.message.clone());
        }
        Ok(r)
    }

    #[test]
    fn weekly_window() {
        // Sundays 02:00-04:00 UTC. 2024-06-02 is a Sunday.
        let e = ext("maintenance_windows:\n- cron: '0 2 * * 0'\n  duration: 2h\n").unwrap();
        let w = &e.maintenance_windows[0];
        assert!(w.contains(at("2024-06-02T02:00:00Z")));
        assert!(w.contains(at("2024-06-02T03:59:59Z")));
        assert!(!w.contains(at("2024-06-02T04:00:00Z")));
        assert!(!w.contains(at("2024-06-02T01:59:59Z")));
        assert!(!w.contains(at("2024-06-03T02:30:00Z")));
    }

    #[test]
    fn weekday_numbers_follow_standard_cron() {
        // 1-5 = Monday to Friday in standard cron.
        let e = ext("maintenance_windows:\n- cron: '0 12 * * 1-5'\n  duration: 30m\n").unwrap();
        let w = &e.maintenance_windows[0];
        assert!(w.contains(at("2024-06-03T12:10:00Z"))); // Monday
        assert!(w.contains(at("2024-06-07T12:10:00Z"))); // Friday
        assert!(!w.contains(at("2024-06-08T12:10:00Z"))); // Saturday
        assert!(!w.contains(at("2024-06-02T12:10:00Z"))); // Sunday
        let e = ext("maintenance_windows:\n- cron: '0 12 * * 5-7'\n  duration: 30m\n").unwrap();
        let w = &e.maintenance_windows[0];
        assert!(w.contains(at("2024-06-02T12:10:00Z"))); // Sunday
        assert!(!w.contains(at("2024-06-03T12:10:00Z"))); // Monday
    }

    #[test]
    fn windows_in_a_location() {
        let e = ext("maintenance_windows:\n- cron: '0 2 * * *'\n  duration: 1h\n  location: Europe/Berlin\n").unwrap();
        let w = &e.maintenance_windows[0];
        // 02:30 in Berlin (CEST, UTC+2) is 00:30 UTC.
        assert!(w.contains(at("2024-06-03T00:30:00Z")));
        assert!(!w.contains(at("2024-06-03T02:30:00Z")));
    }

    #[test]
    fn validation() {
        assert_eq!(
            ext("maintenance_windows:\n- duration: 1h\n").unwrap_err(),
            "missing cron in maintenance window"
        );
        assert!(ext("maintenance_windows:\n- cron: 'not cron'\n  duration: 1h\n")
            .unwrap_err()
            .starts_with("invalid cron expression \"not cron\""));
        assert!(ext("maintenance_windows:\n- cron: '0 2 * * *'\n")
            .unwrap_err()
            .starts_with("missing duration"));
        assert_eq!(
            ext("foo: 1").unwrap_err(),
            "field foo not found in type watchfire.RouteExtensions"
        );
        assert!(ext("inherit_time_intervals: true").unwrap().inherit_time_intervals);
    }
}
