//! Errors of loading data into the store.

/// A load failed; the store keeps what was loaded before the failing line.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Reading the input failed.
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The input is malformed; `line` and `col` are 1-based (`col` counts characters).
    #[error("{file}:{line}:{col}: {message}")]
    Syntax {
        file: String,
        line: u64,
        col: usize,
        message: String,
    },
}
