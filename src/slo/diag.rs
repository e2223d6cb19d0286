//! Diagnostics with a file position, shared by the loader, `check` and the CLI.

use std::fmt;

use serde::Serialize;

use super::yaml::Pos;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding about an SLO spec, at `file:line:col`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub severity: Severity,
    /// A stable identifier, e.g. `slo-objective-range`.
    pub code: &'static str,
    pub message: String,
}

impl Diagnostic {
    pub fn new(file: &str, pos: Pos, severity: Severity, code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_string(),
            line: pos.line,
            col: pos.col,
            severity,
            code,
            message: message.into(),
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {}[{}]: {}",
            self.file, self.line, self.col, sev, self.code, self.message
        )
    }
}

/// Collects diagnostics for one file.
#[derive(Debug)]
pub(crate) struct Sink {
    pub file: String,
    pub diags: Vec<Diagnostic>,
}

impl Sink {
    pub(crate) fn new(file: &str) -> Self {
        Sink {
            file: file.to_string(),
            diags: Vec::new(),
        }
    }

    pub(crate) fn error(&mut self, pos: Pos, code: &'static str, msg: impl Into<String>) {
        self.diags
            .push(Diagnostic::new(&self.file, pos, Severity::Error, code, msg));
    }

    pub(crate) fn warn(&mut self, pos: Pos, code: &'static str, msg: impl Into<String>) {
        self.diags
            .push(Diagnostic::new(&self.file, pos, Severity::Warning, code, msg));
    }
}
