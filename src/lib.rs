//! watchfire: an alerting and SLO rule engine for ML training and serving on Amazon EKS.
//!
//! Data flows one way: sources → engine (`promql`, over `tsdb` or a remote source) → rules →
//! notify; ARCHITECTURE.md draws the layout and what may import what.
//!
//! The public API is what the `watchfire` and `rulecheck` binaries, the integration tests and the
//! benchmarks use; each module re-exports it at its root:
//! - engine: [`promql::Engine`] over a [`promql::Queryable`] ([`tsdb::Store`], or a source from
//!   [`source`]: Prometheus/AMP, CloudWatch);
//! - rules and SLOs: [`rules::load_file`], [`slo::generate`], [`unittest::run_files`],
//!   [`check::cli`] (rulecheck);
//! - notify: [`notify::load_file`] (Alertmanager configuration), [`notify::Notifier`],
//!   [`notify::receivers`];
//! - drivers: [`run::load`] and [`run::Service`] (`watchfire run`), [`server`] (its HTTP face),
//!   [`state::StateStore`], [`replay`] (`watchfire replay`, the demo and scenarios);
//! - the ground floor: [`labels`], [`duration`], [`yaml`], [`gofmt`], [`url`], [`aws`], [`alert`], [`secret`], [`svgchart`],
//!   [`template`].
//!
//! Everything else is `pub(crate)`: `unreachable_pub` keeps it so.

#![warn(unreachable_pub)]

pub mod alert;
pub mod aws;
pub mod cause;
pub mod check;
pub mod duration;
pub mod gofmt;
pub mod labels;
pub mod notify;
pub mod parallel;
pub mod promql;
pub mod promqltest;
pub mod replay;
pub mod rules;
pub mod run;
pub mod secret;
pub mod server;
pub mod slo;
pub mod source;
pub mod state;
pub mod svgchart;
pub mod template;
pub mod tsdb;
pub mod unittest;
pub mod url;
pub mod yaml;
