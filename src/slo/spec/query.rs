//! Query templates: `{{.window}}` rendering, PromQL validation, and the mapping of error
//! offsets in a rendered query back to line and column in the YAML file.

use std::sync::OnceLock;

use regex::Regex;

use crate::slo::yaml::{self, Node, Pos, Scalar};

use super::{Cx, Query};

impl Cx {
    /// Reads and validates a query template: `{{.window}}` present, PromQL once rendered.
    pub(super) fn query(&mut self, node: Option<&Node>, at: Pos, what: &str) -> Option<Query> {
        let Some(n) = node else {
            self.sink.error(at, "slo-required", format!("{what} is required"));
            return None;
        };
        let s = self.scalar(n, what)?.clone();
        if s.value.trim().is_empty() {
            self.sink.error(s.pos, "slo-required", format!("{what} is required"));
            return None;
        }
        let q = Query {
            text: s.value.clone(),
            pos: s.pos,
        };
        self.validate_query(&q.text, &s, what).then_some(q)
    }

    /// Checks a query template; positions of errors point into the YAML scalar `s`.
    fn validate_query(&mut self, text: &str, s: &Scalar, what: &str) -> bool {
        if !window_re().is_match(text) {
            self.sink.error(
                s.pos,
                "slo-query-window",
                format!("{what} must contain the {{{{.window}}}} template variable"),
            );
            return false;
        }
        let (rendered, spans) = render_window(text, "5m");
        if let Some(i) = rendered.find("{{") {
            let orig = map_back(i, &spans);
            let (l, c) = line_col(text, orig);
            self.sink.error(
                yaml::scalar_offset_pos(s, l, c),
                "slo-query-template",
                format!("{what}: only the {{{{.window}}}} template variable is supported"),
            );
            return false;
        }
        match crate::promql::parse(&rendered) {
            Ok(expr) => {
                use promql_parser::parser::value::ValueType;
                match expr.value_type() {
                    ValueType::Vector | ValueType::Scalar => true,
                    other => {
                        self.sink.error(
                            s.pos,
                            "slo-query-type",
                            format!("{what} must return an instant vector, not a {other}"),
                        );
                        false
                    }
                }
            }
            Err(crate::promql::Error::Parse { message, line, col }) => {
                let off = offset_of(&rendered, line, col);
                let orig = map_back(off, &spans);
                let (l, c) = line_col(text, orig);
                self.sink.error(
                    yaml::scalar_offset_pos(s, l, c),
                    "slo-query-parse",
                    format!("{what} is not valid PromQL: {message}"),
                );
                false
            }
            Err(e) => {
                self.sink
                    .error(s.pos, "slo-query-parse", format!("{what} is not valid PromQL: {e}"));
                false
            }
        }
    }
}

fn window_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\{\{ *\.window *\}\}").expect("static regex"))
}

/// Replaces every `{{.window}}` (spaces allowed inside the braces) by `window`. Returns the text
/// and, for each replacement, `(original start, original len, rendered start, rendered len)`.
pub(super) fn render_window(text: &str, window: &str) -> (String, Vec<(usize, usize, usize, usize)>) {
    let mut out = String::with_capacity(text.len());
    let mut spans = Vec::new();
    let mut last = 0;
    for m in window_re().find_iter(text) {
        out.push_str(&text[last..m.start()]);
        spans.push((m.start(), m.len(), out.len(), window.len()));
        out.push_str(window);
        last = m.end();
    }
    out.push_str(&text[last..]);
    (out, spans)
}

/// Maps an offset in a rendered query back to the template.
fn map_back(off: usize, spans: &[(usize, usize, usize, usize)]) -> usize {
    let mut delta: isize = 0;
    for &(os, ol, rs, rl) in spans {
        if off < rs {
            break;
        }
        if off < rs + rl {
            return os;
        }
        delta = (os + ol) as isize - (rs + rl) as isize;
    }
    (off as isize + delta).max(0) as usize
}

/// Byte offset of a 1-based line and (character) column.
fn offset_of(text: &str, line: usize, col: usize) -> usize {
    let mut off = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return off
                + l.char_indices()
                    .nth(col.saturating_sub(1))
                    .map(|(b, _)| b)
                    .unwrap_or(l.len());
        }
        off += l.len();
    }
    text.len()
}

/// 1-based line and character column of a byte offset.
fn line_col(text: &str, off: usize) -> (usize, usize) {
    let mut off = off.min(text.len());
    while !text.is_char_boundary(off) {
        off -= 1;
    }
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slo::spec::tests::{errors, BASE};

    #[test]
    fn query_errors_point_into_the_file() {
        let e = errors(&BASE.replace("[{{ .window }}]))", "[5m]))"));
        assert!(
            e.iter().any(|x| x.contains("slo-query-window") && x.contains(":13:")),
            "{e:?}"
        );
        let e = errors(&BASE.replace(
            r#"sum(rate(http_requests_total{code"#,
            r#"sum(rate(http_requests_total{{code"#,
        ));
        assert!(e.iter().any(|x| x.contains("slo-query")), "{e:?}");
        // A bad character: the column points at it.
        let e = errors(&BASE.replace("sum(rate(http_requests_total[", "sum(rate(http_requests_total $["));
        assert!(
            e.iter()
                .any(|x| x.contains("t.yaml:13:") && x.contains("slo-query-parse")),
            "{e:?}"
        );
    }

    #[test]
    fn window_rendering_maps_offsets() {
        let (r, spans) = render_window("a[{{.window}}] + b[{{ .window }}]", "5m");
        assert_eq!(r, "a[5m] + b[5m]");
        let i = r.find('b').unwrap();
        assert_eq!(map_back(i, &spans), "a[{{.window}}] + b".len() - 1);
    }
}
