//! The notification pipeline, compatible with Alertmanager 0.25: its configuration file
//! ([`config`]), routing ([`route`]), grouping and timing ([`dispatch`]), inhibition
//! ([`inhibit`]), silences ([`silence`]), time intervals ([`timeinterval`], [`mute`]), the
//! notification log ([`nflog`]) and the receivers that deliver ([`receivers`]).
//!
//! Everything but the receivers is pure: time comes in as an argument, so `replay` and tests
//! drive the production code in simulated time.

pub(crate) mod alert;
pub(crate) mod blocks;
pub(crate) mod config;
pub(crate) mod dispatch;
pub(crate) mod history;
pub(crate) mod inhibit;
pub mod integrations;
pub(crate) mod links;
pub(crate) mod maintenance;
pub(crate) mod matchers;
pub(crate) mod mute;
pub(crate) mod nflog;
pub(crate) mod notifier;
pub(crate) mod owners;
pub mod receivers;
pub(crate) mod route;
pub(crate) mod routes_cli;
pub mod secrets;
pub(crate) mod silence;
pub(crate) mod timeinterval;

pub(crate) use crate::alert::Alert;
pub use alert::{decode_ingest_body, PostableAlert};
pub(crate) use config::ConfigError;
pub use config::{
    load_delivery_file, load_delivery_str, load_file, load_str, notify_templates, Config, PINNED_RECEIVER_LABEL,
};
pub use history::{HistoryEvent, Outcome};
pub(crate) use notifier::flushes;
pub use notifier::{Notification, Notifier};
pub use owners::Owners;
pub use route::Route;
pub use routes_cli::{parse_label_args, routes_show, routes_test, routes_test_owned};
