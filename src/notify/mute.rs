//! Route-level muting by time, as Alertmanager's `TimeActiveStage` and `TimeMuteStage` do at
//! each flush: outside all `active_time_intervals` (when there are any), or inside any
//! `mute_time_intervals`, nothing is sent. watchfire's maintenance windows act like mute
//! intervals.

use chrono::{DateTime, Utc};

use super::config::Config;
use super::route::RouteOpts;

/// Why notifications of a route are muted at `now`, or `None` when they are not.
pub(crate) fn route_muted_at(cfg: &Config, opts: &RouteOpts, now: DateTime<Utc>) -> Option<String> {
    if !opts.active_time_intervals.is_empty() {
        let active = opts
            .active_time_intervals
            .iter()
            .any(|n| cfg.time_interval(n).is_some_and(|ti| ti.contains(now)));
        if !active {
            return Some(format!(
                "active_time_intervals: {}",
                opts.active_time_intervals.join(",")
            ));
        }
    }
    for n in &opts.mute_time_intervals {
        if cfg.time_interval(n).is_some_and(|ti| ti.contains(now)) {
            return Some(format!("mute_time_intervals: {n}"));
        }
    }
    for w in &opts.maintenance_windows {
        if w.contains(now) {
            let name = if w.name.is_empty() {
                w.cron.as_str()
            } else {
                w.name.as_str()
            };
            return Some(format!("maintenance window: {name}"));
        }
    }
    None
}
