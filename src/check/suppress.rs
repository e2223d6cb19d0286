//! Suppressions in the rule file, as pint users know them:
//!
//! ```yaml
//! # rulecheck file/disable catalogue/unknown-metric     <- the whole file (anywhere in it)
//! groups:
//!   # rulecheck disable policy/                          <- the group below
//!   - name: vendor
//!     rules:
//!       # rulecheck disable promql/range alerts/for      <- the rule below
//!       - alert: X
//!         expr: rate(x[1m]) > 0    # rulecheck disable promql/range   <- the rule it stands in
//! ```
//!
//! A comment `# rulecheck disable CODE...` applies to what it stands above or in: a rule, a
//! group's header, or (above the first group) the whole file. Codes are exact (`promql/range`) or
//! prefixes (`policy/`, or `policy`). A code rulecheck does not know is itself a finding
//! (`rulecheck/suppression`), at its position: a typo must not silence nothing quietly.

use std::collections::HashMap;

use super::{Diagnostic, Severity, KNOWN_CODES};
use crate::rules::RuleFile;

/// One suppression comment: the codes, the lines it covers.
#[derive(Debug, PartialEq)]
struct Suppression {
    codes: Vec<String>,
    from: usize,
    to: usize,
}

/// Whether `code` is a code or a prefix of codes rulecheck reports.
fn known(code: &str) -> bool {
    let prefix = if code.ends_with('/') {
        code.to_string()
    } else {
        format!("{code}/")
    };
    KNOWN_CODES.contains(&code) || code.starts_with("slo/") || KNOWN_CODES.iter().any(|k| k.starts_with(&prefix))
}

fn covers(codes: &[String], code: &str) -> bool {
    codes.iter().any(|c| {
        code == c
            || (c.ends_with('/') && code.starts_with(c.as_str()))
            || (!c.contains('/') && code.starts_with(&format!("{c}/")))
    })
}

/// The suppressions of one file, and the findings about unknown codes in them.
fn parse(file: &str, text: &str, rf: Option<&RuleFile>, out: &mut Vec<Diagnostic>) -> Vec<Suppression> {
    let lines: Vec<&str> = text.lines().collect();
    // Spans: each rule from its line to the line before the next rule or group; each group's
    // header from its line to its first rule.
    let mut starts: Vec<usize> = Vec::new();
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut rules: Vec<usize> = Vec::new();
    if let Some(rf) = rf {
        for g in &rf.groups {
            starts.push(g.pos.line);
            for r in &g.rules {
                starts.push(r.pos.line);
                rules.push(r.pos.line);
            }
        }
        starts.sort_unstable();
        let group_starts: Vec<usize> = rf.groups.iter().map(|g| g.pos.line).collect();
        for (i, s) in group_starts.iter().enumerate() {
            let end = group_starts.get(i + 1).map_or(lines.len().max(*s), |n| n - 1);
            groups.push((*s, end));
        }
    }
    let end_of = |line: usize| {
        starts
            .iter()
            .find(|&&s| s > line)
            .map_or(lines.len().max(line), |s| s - 1)
    };
    let first_group = groups.first().map_or(usize::MAX, |g| g.0);
    let mut out_s = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(hash) = comment_start(l) else { continue };
        let comment = l[hash + 1..].trim_start();
        let Some(rest) = comment.strip_prefix("rulecheck ") else {
            continue;
        };
        let line = i + 1;
        let (whole_file, codes_text) = if let Some(r) = rest.trim_start().strip_prefix("file/disable") {
            (true, r)
        } else if let Some(r) = rest.trim_start().strip_prefix("disable") {
            (false, r)
        } else {
            out.push(Diagnostic::new(
                file,
                line,
                hash + 1,
                Severity::Error,
                "rulecheck/suppression",
                format!("unknown rulecheck comment {:?}: expected `# rulecheck disable CODE...` or `# rulecheck file/disable CODE...`", comment.trim_end()),
            ));
            continue;
        };
        let mut codes = Vec::new();
        let base = l.len() - codes_text.len();
        for (off, code) in words(codes_text) {
            if known(code) {
                codes.push(code.to_string());
            } else {
                out.push(
                    Diagnostic::new(
                        file,
                        line,
                        base + off + 1,
                        Severity::Error,
                        "rulecheck/suppression",
                        format!("unknown code {code:?} in a rulecheck suppression: it silences nothing"),
                    )
                    .with_suggestion("codes are what rulecheck prints in brackets (error[promql/range]), or a prefix such as policy/"),
                );
            }
        }
        if codes.is_empty() {
            continue;
        }
        // What the comment applies to: its own line when it trails code, else the next line
        // with content.
        let trailing = !l[..hash].trim().is_empty();
        let target = if trailing {
            line
        } else {
            (line + 1..=lines.len())
                .find(|&n| {
                    let t = lines[n - 1].trim();
                    !t.is_empty() && !t.starts_with('#')
                })
                .unwrap_or(line)
        };
        let (from, to) = if whole_file || target < first_group {
            (1, usize::MAX)
        } else if let Some(&r) = rules.iter().rev().find(|&&r| r <= target && target <= end_of(r)) {
            (r, end_of(r))
        } else if let Some(&(s, e)) = groups.iter().find(|(s, e)| *s <= target && target <= *e) {
            (s, e)
        } else {
            (line, line)
        };
        out_s.push(Suppression { codes, from, to });
    }
    out_s
}

/// Where a YAML comment starts on a line (a `#` at the start or after a space, outside quotes).
fn comment_start(l: &str) -> Option<usize> {
    let (mut single, mut double) = (false, false);
    let b = l.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || b[i - 1] == b' ' || b[i - 1] == b'\t') => return Some(i),
            _ => {}
        }
    }
    None
}

/// The words of `s` with their byte offsets.
fn words(s: &str) -> impl Iterator<Item = (usize, &str)> {
    s.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(move |w| (w.as_ptr() as usize - s.as_ptr() as usize, w))
}

/// Removes the findings the files' suppression comments cover, and adds one for each unknown
/// code in them.
pub(crate) fn apply(diags: &mut Vec<Diagnostic>, sources: &HashMap<String, String>, files: &[RuleFile]) {
    let mut by_file: HashMap<&str, Vec<Suppression>> = HashMap::new();
    let mut found = Vec::new();
    for f in files {
        let name = f.path.display().to_string();
        let Some(text) = sources.get(&name) else { continue };
        if !text.contains("rulecheck ") {
            continue;
        }
        let s = parse(&name, text, Some(f), &mut found);
        if let Some((key, _)) = sources.get_key_value(&name) {
            by_file.insert(key.as_str(), s);
        }
    }
    diags.retain(|d| {
        by_file.get(d.file.as_str()).is_none_or(|ss| {
            !ss.iter()
                .any(|s| s.from <= d.line && d.line <= s.to && covers(&s.codes, &d.code))
        })
    });
    diags.extend(found);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::{parse as parse_rules, LoadOptions};
    use std::path::Path;

    const TEXT: &str = r#"# rulecheck file/disable catalogue/
groups:
  # rulecheck disable policy/
  - name: g
    rules:
      # rulecheck disable promql/range alerts/bogus
      - alert: A
        expr: rate(x[1m]) > 0
      - alert: B
        expr: rate(x[1m]) > 0   # rulecheck disable promql
  - name: h
    rules:
      - alert: C
        expr: up == 0
"#;

    #[test]
    fn every_code_the_checks_write_is_known() {
        let sources = [
            include_str!("mod.rs"),
            include_str!("lints.rs"),
            include_str!("labelflow.rs"),
            include_str!("duplicates.rs"),
            include_str!("intent.rs"),
            include_str!("suppress.rs"),
        ];
        let re = regex::Regex::new(r#""([a-z]+/[a-z-]+)""#).unwrap();
        for src in sources {
            let code_part = src.split("#[cfg(test)]").next().unwrap();
            for c in re.captures_iter(code_part) {
                let code = &c[1];
                if code.ends_with('/') || code.starts_with("slo/") || code == "file/disable" {
                    continue;
                }
                assert!(KNOWN_CODES.contains(&code), "{code} is written but not in KNOWN_CODES");
            }
        }
    }

    #[test]
    fn scopes_and_unknown_codes() {
        let rf = parse_rules(TEXT, Path::new("r.yaml"), LoadOptions::default()).file;
        let mut found = Vec::new();
        let s = parse("r.yaml", TEXT, Some(&rf), &mut found);
        let spans: Vec<(usize, usize)> = s.iter().map(|s| (s.from, s.to)).collect();
        assert_eq!(spans, [(1, usize::MAX), (4, 10), (7, 8), (9, 10)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].line, found[0].col, found[0].code.as_str()),
            (6, 40, "rulecheck/suppression")
        );
        assert!(found[0].message.contains("\"alerts/bogus\""));

        let d = |line: usize, code: &str| Diagnostic::new("r.yaml", line, 1, Severity::Error, code, "x");
        let mut diags = vec![
            d(8, "promql/range"),
            d(10, "promql/range"),
            d(13, "promql/range"),
            d(14, "policy/label"),
            d(8, "policy/label"),
            d(14, "catalogue/unknown-metric"),
        ];
        let sources = HashMap::from([("r.yaml".to_string(), TEXT.to_string())]);
        apply(&mut diags, &sources, &[rf]);
        let left: Vec<(usize, &str)> = diags.iter().map(|d| (d.line, d.code.as_str())).collect();
        assert_eq!(
            left,
            [(13, "promql/range"), (14, "policy/label"), (6, "rulecheck/suppression")]
        );
    }
}
