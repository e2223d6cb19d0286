//! Where series come from. Every source answers the same question, "which series match these
//! matchers, with their samples in [mint, maxt]" (the engine's [`Queryable`]), so the engine never
//! knows which one it reads.

pub(crate) mod batch_plan;
pub(crate) mod cloudwatch;
pub(crate) mod config;
pub(crate) mod embedded;
pub(crate) mod federated;
pub(crate) mod mirror;
pub(crate) mod prometheus;
pub(crate) mod remote_write;

// The interface every source implements is the engine's; re-exported for the drivers.
pub(crate) use crate::promql::{HistogramSeriesData, StartTimestampSeriesData};
pub use crate::promql::{Queryable, SeriesData, SourceError};
pub use cloudwatch::{CloudWatchSource, Mapping};
pub use config::SourceKind;
pub use mirror::{Kept, Mirror, MirrorConfig, MirrorSlot, MirrorStats};
pub use prometheus::{BatchError, PrometheusSource};
