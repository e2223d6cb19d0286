//! Output formats: human (rustc-like snippets), GitHub workflow annotations, JSON.

use std::fmt::Write as _;

use super::{Diagnostic, Report, Severity};

/// `error[code]: message` with a `--> file:line:col` header, the source line and a caret.
pub(crate) fn human(report: &Report) -> String {
    let mut s = String::new();
    let mut lines: std::collections::HashMap<&str, Vec<&str>> = std::collections::HashMap::new();
    for d in &report.diagnostics {
        let _ = writeln!(s, "{}[{}]: {}", d.severity, d.code, d.message);
        let _ = writeln!(s, "  --> {}:{}:{}", d.file, d.line, d.col);
        if !lines.contains_key(d.file.as_str()) {
            let split = report
                .sources
                .get(&d.file)
                .map(|src| src.split('\n').collect())
                .unwrap_or_default();
            lines.insert(d.file.as_str(), split);
        }
        let src_line = lines
            .get(d.file.as_str())
            .and_then(|ls| ls.get(d.line.saturating_sub(1)))
            .map(|l| l.trim_end_matches('\r'));
        if let Some(text) = src_line {
            let w = d.line.to_string().len();
            let pad = " ".repeat(w);
            let caret_pad: String = text
                .chars()
                .take(d.col.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            let _ = writeln!(s, "{pad} |");
            let _ = writeln!(s, "{} | {}", d.line, text);
            let _ = writeln!(s, "{pad} | {caret_pad}^");
            if let Some(h) = &d.suggestion {
                let _ = writeln!(s, "{pad} = help: {h}");
            }
        } else if let Some(h) = &d.suggestion {
            let _ = writeln!(s, "   = help: {h}");
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "{} file(s), {} rule(s) checked: {} error(s), {} warning(s)",
        report.files_checked,
        report.rules_checked,
        report.errors(),
        report.warnings()
    );
    s
}

fn gh_escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

fn gh_escape_prop(s: &str) -> String {
    gh_escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// `::error file=F,line=L,col=C,title=CODE::message` lines.
pub(crate) fn github(report: &Report) -> String {
    let mut s = String::new();
    for d in &report.diagnostics {
        let kind = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut msg = d.message.clone();
        if let Some(h) = &d.suggestion {
            msg.push('\n');
            msg.push_str(h);
        }
        let _ = writeln!(
            s,
            "::{kind} file={},line={},col={},title={}::{}",
            gh_escape_prop(&d.file),
            d.line,
            d.col,
            gh_escape_prop(&d.code),
            gh_escape_data(&msg)
        );
    }
    s
}

/// A JSON document: `{"diagnostics": [...], "errors": N, "warnings": N, ...}`.
pub(crate) fn json(report: &Report) -> String {
    #[derive(serde::Serialize)]
    struct Out<'a> {
        diagnostics: &'a [Diagnostic],
        errors: usize,
        warnings: usize,
        files_checked: usize,
        rules_checked: usize,
    }
    serde_json::to_string_pretty(&Out {
        diagnostics: &report.diagnostics,
        errors: report.errors(),
        warnings: report.warnings(),
        files_checked: report.files_checked,
        rules_checked: report.rules_checked,
    })
    .unwrap_or_else(|_| "{}".into())
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let mut r = Report::default();
        r.sources.insert("r.yaml".into(), "a\n  expr: foo\n".into());
        r.diagnostics.push(
            Diagnostic::new("r.yaml", 2, 9, Severity::Error, "promql/x", "bad, really: 100%").with_suggestion("fix"),
        );
        r
    }

    #[test]
    fn human_has_caret() {
        let s = human(&report());
        assert!(s.contains("error[promql/x]: bad"));
        assert!(s.contains("--> r.yaml:2:9"));
        assert!(s.contains("2 |   expr: foo\n  |         ^"), "{s}");
    }

    #[test]
    fn github_escapes() {
        let s = github(&report());
        assert!(
            s.starts_with("::error file=r.yaml,line=2,col=9,title=promql/x::bad, really: 100%25%0Afix"),
            "{s}"
        );
    }

    #[test]
    fn json_parses() {
        let v: serde_json::Value = serde_json::from_str(&json(&report())).unwrap();
        assert_eq!(v["errors"], 1);
        assert_eq!(v["diagnostics"][0]["code"], "promql/x");
    }
}
