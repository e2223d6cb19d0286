//! The values a PromQL expression evaluates to.

use std::sync::Arc;

use crate::labels::Labels;
pub(crate) use crate::tsdb::FloatHistogram;

/// Prometheus' staleness marker: a NaN with a distinct bit pattern.
pub(crate) const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

pub(crate) fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

pub fn is_stale_nan(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One element of an instant vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub metric: Labels,
    pub t: i64,
    pub v: f64,
    /// Prometheus 3.x delayed name removal: the metric name is still carried but will be
    /// removed when the result leaves the engine.
    pub drop_name: bool,
    /// A native histogram sample (then `v` is 0 and meaningless), as Prometheus' `Sample.H`.
    pub h: Option<Arc<FloatHistogram>>,
}

/// One element of a range vector (matrix).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub metric: Labels,
    pub samples: Vec<(i64, f64)>,
    pub drop_name: bool,
    /// Native histogram points, in time order (a lane of their own, usually empty).
    pub histograms: Vec<(i64, Arc<FloatHistogram>)>,
}

/// A PromQL value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Scalar { t: i64, v: f64 },
    String { t: i64, s: String },
    Vector(Vec<Sample>),
    Matrix(Vec<Series>),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Scalar { .. } => "scalar",
            Value::String { .. } => "string",
            Value::Vector(_) => "vector",
            Value::Matrix(_) => "matrix",
        }
    }
}

/// The result of a query: its value and the annotations Prometheus would attach.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryResult {
    pub value: Value,
    /// "PromQL warning: ..." annotations.
    pub warnings: Vec<String>,
    /// "PromQL info: ..." annotations.
    pub infos: Vec<String>,
}
