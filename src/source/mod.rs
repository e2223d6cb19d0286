//! Where series come from. Every source answers the same question, "which series match these
//! matchers, with their samples in [mint, maxt]", so the engine never knows which one it reads.

pub mod embedded;
pub mod prometheus;

use crate::labels::{Labels, Matcher};

/// One series with its samples in time order; values may be Prometheus staleness markers.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesData {
    pub labels: Labels,
    pub samples: Vec<(i64, f64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("source {source_name} unavailable: {message}")]
    Unavailable { source_name: String, message: String },
    #[error("query limit exceeded: {0}")]
    Limit(String),
}

/// A source of series that the PromQL engine can read.
pub trait Queryable: Send + Sync {
    /// Series matching all matchers, with their samples whose timestamps lie in [mint, maxt]
    /// (both ends inclusive; the engine applies PromQL's left-open windows itself).
    /// Series with no sample in the range may be omitted.
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError>;
}
