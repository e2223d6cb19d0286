//! The error of a query: what stops parsing or evaluation.

use super::queryable::SourceError;

/// Errors of parsing and evaluation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The expression does not parse; line and column are 1-based.
    #[error("{line}:{col}: parse error: {message}")]
    Parse { message: String, line: usize, col: usize },
    /// The expression parsed but cannot be evaluated (type errors, matching errors, ...).
    #[error("{0}")]
    Eval(String),
    /// Something the engine does not support (e.g. native histograms): never a wrong answer.
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Source(#[from] SourceError),
}
