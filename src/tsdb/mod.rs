//! Embedded in-memory series store and its loaders.
//!
//! - [`chunk`]: Gorilla-style sample compression (delta-of-delta timestamps, XOR values);
//! - `store`: series with interned labels, compressed chunks and an inverted index;
//! - [`notation`]: promqltest / promtool series notation (`metric{l="v"} 0+10x5 _ stale`);
//! - [`histogram_json`]: Prometheus' JSON shape of a native histogram, written and read back;
//! - [`openmetrics`]: OpenMetrics / Prometheus text exposition with timestamps (backfill input).

pub(crate) mod chunk;
mod error;
pub(crate) mod histogram;
pub(crate) mod histogram_json;
mod histogram_trim;
pub(crate) mod notation;
pub(crate) mod openmetrics;
mod store;

pub(crate) use histogram::{CounterResetHint, FloatHistogram};
pub use notation::load_notation;
pub(crate) use notation::parse_metric;
pub use notation::parse_series_line;
pub(crate) use notation::parse_values;
pub use notation::{PointBudget, SeriesValue};
pub use openmetrics::{load_file, load_str, write_openmetrics};
pub(crate) use store::SeriesId;
pub use store::Store;
