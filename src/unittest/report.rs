//! Results of a test run: per file, per test group, per case; a promtool-like printable
//! summary ending in `N passed, N failed`, and JUnit XML.

use std::fmt;
use std::path::PathBuf;

use crate::duration::Duration;

/// Which kind of test case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseKind {
    /// `alert_rule_test`
    Alert,
    /// `promql_expr_test`
    Promql,
    /// `watchfire_alert_state_test`
    AlertState,
    /// `watchfire_notification_test`
    Notification,
}

impl CaseKind {
    pub fn key(self) -> &'static str {
        match self {
            CaseKind::Alert => "alert_rule_test",
            CaseKind::Promql => "promql_expr_test",
            CaseKind::AlertState => "watchfire_alert_state_test",
            CaseKind::Notification => "watchfire_notification_test",
        }
    }
}

/// One test case and its verdict.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub kind: CaseKind,
    /// Index within its list in the test group.
    pub index: usize,
    pub eval_time: Duration,
    /// The alert name or the expression.
    pub subject: String,
    /// `None`: not run (only while running); `Ok`: passed; `Err`: the failure message.
    pub outcome: Option<Result<(), String>>,
}

impl CaseResult {
    pub(crate) fn new(kind: CaseKind, index: usize, eval_time: Duration, subject: &str) -> Self {
        CaseResult {
            kind,
            index,
            eval_time,
            subject: subject.to_string(),
            outcome: None,
        }
    }

    pub fn passed(&self) -> bool {
        matches!(self.outcome, Some(Ok(())))
    }

    pub fn failure(&self) -> Option<&str> {
        match &self.outcome {
            Some(Err(e)) => Some(e),
            None => Some("not run"),
            Some(Ok(())) => None,
        }
    }
}

/// One entry of `tests`.
#[derive(Clone, Debug, Default)]
pub struct GroupResult {
    /// Index in the file's `tests`.
    pub index: usize,
    pub name: String,
    pub cases: Vec<CaseResult>,
    /// Errors of the group as a whole (rule loading, input series, rule evaluation).
    pub errors: Vec<String>,
}

impl GroupResult {
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.passed()).count()
    }

    /// Failed cases; a group-level error with no failed case counts as one failure.
    pub fn failed(&self) -> usize {
        let n = self.cases.len() - self.passed();
        if n == 0 && !self.errors.is_empty() {
            1
        } else {
            n
        }
    }

    /// The group's display name: its `name`, or its position.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            format!("tests[{}]", self.index)
        } else {
            self.name.clone()
        }
    }
}

/// One test file.
#[derive(Clone, Debug, Default)]
pub struct FileResult {
    pub path: PathBuf,
    /// Problems with the file as a whole (unreadable, invalid YAML, unknown fields).
    pub errors: Vec<String>,
    /// Things promtool warns about (e.g. a rule_files glob that matches nothing).
    pub warnings: Vec<String>,
    pub groups: Vec<GroupResult>,
}

impl FileResult {
    pub fn passed(&self) -> usize {
        self.groups.iter().map(GroupResult::passed).sum()
    }

    /// Failed cases; a file-level error counts as one failure.
    pub fn failed(&self) -> usize {
        self.groups.iter().map(GroupResult::failed).sum::<usize>() + usize::from(!self.errors.is_empty())
    }

    pub fn success(&self) -> bool {
        self.failed() == 0
    }

    /// The failure messages, in the order promtool prints them.
    pub fn messages(&self) -> Vec<String> {
        let mut out = self.errors.clone();
        for g in &self.groups {
            out.extend(g.errors.iter().cloned());
            for c in &g.cases {
                if let Some(Err(e)) = &c.outcome {
                    if !e.starts_with("not checked: ") {
                        out.push(e.clone());
                    }
                }
            }
        }
        out
    }
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub files: Vec<FileResult>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.files.iter().map(FileResult::passed).sum()
    }

    pub fn failed(&self) -> usize {
        self.files.iter().map(FileResult::failed).sum()
    }

    /// Whether everything passed (the exit status).
    pub fn success(&self) -> bool {
        self.failed() == 0
    }

    /// JUnit XML: one `testsuite` per file, one `testcase` per test case.
    pub fn junit_xml(&self) -> String {
        let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        s.push_str(&format!(
            "<testsuites name=\"watchfire test rules\" tests=\"{}\" failures=\"{}\">\n",
            self.passed() + self.failed(),
            self.failed()
        ));
        for f in &self.files {
            let path = f.path.display().to_string();
            s.push_str(&format!(
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n",
                xml_escape(&path),
                f.passed() + f.failed(),
                f.failed(),
                usize::from(!f.errors.is_empty())
            ));
            if !f.errors.is_empty() {
                let text = f.errors.join("\n");
                s.push_str(&format!(
                    "    <testcase classname=\"{}\" name=\"(file)\">\n      <error message=\"{}\">{}</error>\n    </testcase>\n",
                    xml_escape(&path),
                    xml_escape(first_line(&text)),
                    xml_escape(&text)
                ));
            }
            for g in &f.groups {
                let class = format!("{path}: {}", g.label());
                if g.cases.is_empty() && !g.errors.is_empty() {
                    let text = g.errors.join("\n");
                    s.push_str(&format!(
                        "    <testcase classname=\"{}\" name=\"(test group)\">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                        xml_escape(&class),
                        xml_escape(first_line(&text)),
                        xml_escape(&text)
                    ));
                }
                for c in &g.cases {
                    let name = format!("{}[{}] {} at {}", c.kind.key(), c.index, c.subject, c.eval_time);
                    match c.failure() {
                        None => s.push_str(&format!(
                            "    <testcase classname=\"{}\" name=\"{}\"/>\n",
                            xml_escape(&class),
                            xml_escape(&name)
                        )),
                        Some(msg) => {
                            let mut text = msg.to_string();
                            if msg.starts_with("not checked: ") && !g.errors.is_empty() {
                                text = format!("{msg}\n{}", g.errors.join("\n"));
                            }
                            s.push_str(&format!(
                                "    <testcase classname=\"{}\" name=\"{}\">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                                xml_escape(&class),
                                xml_escape(&name),
                                xml_escape(first_line(msg.trim())),
                                xml_escape(&text)
                            ));
                        }
                    }
                }
            }
            s.push_str("  </testsuite>\n");
        }
        s.push_str("</testsuites>\n");
        s
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => out.push_str(&format!("&#x{:x};", c as u32)),
            c => out.push(c),
        }
    }
    out
}

impl fmt::Display for Report {
    /// promtool's layout (`Unit Testing:  file`, then `SUCCESS` or `FAILED:` and the messages),
    /// with case counts per file and a closing `TOTAL: N passed, N failed` line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for file in &self.files {
            writeln!(f, "Unit Testing:  {}", file.path.display())?;
            for w in &file.warnings {
                writeln!(f, "  WARNING: {w}")?;
            }
            if file.success() {
                writeln!(f, "  SUCCESS: {} passed, {} failed", file.passed(), file.failed())?;
            } else {
                writeln!(f, "  FAILED: {} passed, {} failed", file.passed(), file.failed())?;
                for m in file.messages() {
                    writeln!(f, "{m}")?;
                    writeln!(f)?;
                }
            }
            writeln!(f)?;
        }
        writeln!(f, "TOTAL: {} passed, {} failed", self.passed(), self.failed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_junit() {
        let mut ok = CaseResult::new(CaseKind::Alert, 0, Duration::from_ms(60_000), "A");
        ok.outcome = Some(Ok(()));
        let mut bad = CaseResult::new(CaseKind::Promql, 0, Duration::ZERO, "x < 1");
        bad.outcome = Some(Err(
            "    expr: \"x < 1\", time: 0s,\n        exp: nil\n        got: {} 1E+00".into(),
        ));
        let report = Report {
            files: vec![
                FileResult {
                    path: "a.yml".into(),
                    groups: vec![GroupResult {
                        index: 0,
                        name: "g".into(),
                        cases: vec![ok, bad],
                        errors: vec![],
                    }],
                    ..FileResult::default()
                },
                FileResult {
                    path: "b.yml".into(),
                    errors: vec!["b.yml:1:1: bad".into()],
                    ..FileResult::default()
                },
            ],
        };
        assert_eq!(report.passed(), 1);
        assert_eq!(report.failed(), 2);
        assert!(!report.success());
        let text = report.to_string();
        assert!(
            text.contains("Unit Testing:  a.yml\n  FAILED: 1 passed, 1 failed\n"),
            "{text}"
        );
        assert!(text.ends_with("TOTAL: 1 passed, 2 failed\n"), "{text}");
        let xml = report.junit_xml();
        assert!(
            xml.contains("<testsuite name=\"a.yml\" tests=\"2\" failures=\"1\" errors=\"0\">"),
            "{xml}"
        );
        assert!(xml.contains("name=\"promql_expr_test[0] x &lt; 1 at 0s\""), "{xml}");
        assert!(xml.contains("<error message=\"b.yml:1:1: bad\">"), "{xml}");
    }
}
