//! Rules: the rule-file model with source spans ([`file`]), the alert state machine
//! ([`alerting`]), recording rules ([`recording`]) and group evaluation ([`group`]) over a view
//! that layers rule outputs on the source ([`storage`]).
//!
//! Time is injected everywhere: a group is evaluated at the timestamp it is given, so `run`,
//! `replay` and `test` drive the same code with real or simulated clocks.

pub(crate) mod alerting;
pub(crate) mod condition;
pub(crate) mod deps;
pub(crate) mod eval;
pub(crate) mod file;
pub(crate) mod group;
pub mod paths;
pub(crate) mod recording;
pub(crate) mod storage;
pub(crate) mod template;

pub(crate) use alerting::Alert;
pub use alerting::AlertState;
pub(crate) use condition::compared_side;
pub(crate) use file::RuleFile;
pub use file::{load_file, load_str, LoadOptions};
pub use file::{RuleGroup, RuleKind};
pub(crate) use group::{Group, GroupConfig, GroupRule, Hold};
pub(crate) use storage::merge_histogram_series;

/// Gives every alerting rule of `groups` the raw metric names behind the recording rules it
/// reads (for the evidence link of its notifications: the exporter's own series, not only the
/// recording rule). Call it once the whole policy is loaded: recordings of any group count.
pub(crate) fn set_evidence(groups: &mut [Group]) {
    let raw = deps::raw_metrics(&groups.iter().collect::<Vec<_>>());
    for (g, per_rule) in groups.iter_mut().zip(raw) {
        for (r, names) in g.rules_mut().iter_mut().zip(per_rule) {
            if let Some(a) = r.as_alerting_mut() {
                a.set_evidence(names);
            }
        }
    }
}
