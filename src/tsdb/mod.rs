//! Embedded in-memory series store and its loaders.
//!
//! - [`chunk`]: Gorilla-style sample compression (delta-of-delta timestamps, XOR values);
//! - `store`: series with interned labels, compressed chunks and an inverted index;
//! - [`notation`]: promqltest / promtool series notation (`metric{l="v"} 0+10x5 _ stale`);
//! - [`openmetrics`]: OpenMetrics / Prometheus text exposition with timestamps (backfill input).

pub(crate) mod chunk;
mod error;
pub(crate) mod histogram;
pub(crate) mod notation;
pub(crate) mod openmetrics;
mod store;

pub use chunk::{ClosedChunk, XorChunk, MAX_SAMPLES_PER_CHUNK};
pub use error::LoadError;
pub use histogram::{CounterResetHint, FloatHistogram};
pub use notation::{load_notation, parse_metric, parse_series_line, parse_values, SeriesValue};
pub use openmetrics::{detect_unit, load_file, load_openmetrics, load_text, LoadStats, TimestampUnit};
pub use store::{SeriesId, Store};
