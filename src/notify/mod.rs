//! The notification pipeline, compatible with Alertmanager 0.25: its configuration file
//! ([`config`]), routing ([`route`]), grouping and timing ([`dispatch`]), inhibition
//! ([`inhibit`]), silences ([`silence`]), time intervals ([`timeinterval`], [`mute`]), the
//! notification log ([`nflog`]) and the receivers that deliver ([`receivers`]).
//!
//! Everything but the receivers is pure: time comes in as an argument, so `replay` and tests
//! drive the production code in simulated time.

pub mod alert;
pub mod config;
pub mod dispatch;
pub mod inhibit;
pub mod integrations;
pub mod links;
pub mod maintenance;
pub mod matchers;
pub mod mute;
pub mod nflog;
pub mod notifier;
pub mod owners;
pub mod receivers;
pub mod route;
pub mod routes_cli;
pub mod silence;
pub mod timeinterval;

pub use alert::{Alert, PostableAlert};
pub use config::{load_file, load_str, Config, ConfigError};
pub use notifier::{Notification, Notifier};
pub use route::{Route, RouteOpts};
pub use routes_cli::{parse_label_args, routes_show, routes_test, RoutesError};
