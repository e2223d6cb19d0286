//! watchfire: an alerting and SLO rule engine for ML training and serving on Amazon EKS.
//!
//! Data flows one way: sources → engine (`promql`, over `tsdb` or a remote source) → rules → notify.

#![warn(unreachable_pub)]

pub mod alert;
pub mod aws;
pub mod check;
pub mod duration;
pub mod gofmt;
pub mod labels;
pub mod notify;
pub mod promql;
pub mod promqltest;
pub mod replay;
pub mod rules;
pub mod run;
pub mod server;
pub mod slo;
pub mod source;
pub mod state;
pub mod template;
pub mod tsdb;
pub mod unittest;
pub mod url;
pub mod yaml;
