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
