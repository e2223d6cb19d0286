//! Realistic replay scenarios: a small, deterministic EKS GPU cluster described in YAML
//! (`scenarios/*.yaml`), its series generated exactly as the real exporters emit them, replayed
//! through the shipped policy, and the scenario's expected pages and notifications checked.
//!
//! ```text
//! scenarios/x.yaml --spec--> Scenario --cluster--> Cluster --gen--> Store
//!                                  replay::run(Setup, Store) --> Outcome --check--> Report
//! ```
//!
//! - [`spec`]: the file format (positioned errors, unknown keys rejected);
//! - [`cluster`]: nodes, pods and exporter pods with their lifetimes, and the events' effects;
//! - [`gen`]: kube-state-metrics, the API server, DCGM-Exporter, node-probe, Container
//!   Insights and AWS/Usage, with `up`, target labels, staleness and CloudWatch periods; and
//!   (`gen/apps.rs`) vLLM, training progress, EKS control-plane log metric filters and the
//!   OpenTelemetry Collector;
//! - [`check`]: the expectations and the report.
//!
//! `watchfire replay --scenario FILE [--check]` (and through it tests/replay_scenarios.rs) uses
//! [`generate`] and [`check`]; [`run`] does all of it, over [`options`], for library callers.

pub(crate) mod check;
pub(crate) mod cluster;
pub(crate) mod gen;
pub(crate) mod spec;

use std::path::Path;

use crate::tsdb::Store;
use crate::yaml::FileError;

use super::{Options, Outcome, Setup};

pub use check::{CheckResult, Report};
pub use spec::Scenario;

/// A scenario's data.
pub struct Generated {
    pub store: Store,
    /// First and last sample time (ms).
    pub first_ms: i64,
    pub last_ms: i64,
}

/// Generates a scenario's series. A workload that does not fit its node group is an error at
/// its position.
pub fn generate(s: &Scenario) -> Result<Generated, FileError> {
    let c = cluster::Cluster::build(s)?;
    Ok(Generated {
        store: gen::generate(&c),
        first_ms: s.start_ms,
        last_ms: s.end_ms() - s.step_ms,
    })
}

/// The replay window of a scenario: its first to its last sample.
pub fn options(s: &Scenario) -> Options {
    Options {
        from_ms: s.start_ms,
        to_ms: s.end_ms() - s.step_ms,
        lookback_ms: None,
        step_by_step: false,
    }
}

/// Checks a replay of `s` (an expectation naming an unknown team is an error at its `owner:`).
pub fn check(s: &Scenario, setup: &Setup, o: &Outcome) -> Result<Report, FileError> {
    let mut r = check::check(s, setup, o)?;
    r.header = format!(
        "cluster {}, {} + {}, step {}; {} rule groups, {} rule evaluations in {:.1}s",
        s.cluster,
        super::output::fmt_time(s.start_ms),
        super::output::fmt_dur(s.duration_ms),
        super::output::fmt_dur(s.step_ms),
        setup.groups.len(),
        o.rule_evaluations,
        o.wall.as_secs_f64()
    );
    Ok(r)
}

/// Loads, generates, replays and checks one scenario file.
pub fn run(path: &Path, setup: &Setup) -> Result<(Outcome, Report), FileError> {
    let s = Scenario::load_file(path)?;
    let data = generate(&s)?;
    let o = super::run(setup, &data.store, &options(&s), &mut |_| {});
    let mut r = check(&s, setup, &o)?;
    r.header = format!(
        "{}; {} series, {} samples",
        r.header,
        data.store.num_series(),
        data.store.num_samples()
    );
    Ok((o, r))
}
