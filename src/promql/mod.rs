//! PromQL evaluator over promql-parser's AST with Prometheus 3.x semantics.

mod aggregate;
mod annotations;
mod binary;
mod call;
mod depth;
mod error;
mod eval;
mod extended;
mod fastpath;
mod features;
mod functions;
mod histogram;
mod info;
mod mathx;
mod native;
mod needs;
mod options;
mod preparse;
mod pushdown;
mod queryable;
mod select;
mod starts;
mod trim;
mod value;
mod walk;

pub use depth::{MAX_DEPTH, QUERY_STACK_KB};
pub use error::Error;
pub use features::{flagged_syntax, FlaggedUse};
pub use needs::{selector_windows, uses_start_or_end, SelectorWindow};
pub use options::EngineOptions;
pub use preparse::QueryTimes;
pub(crate) use select::node_key;
pub use value::is_stale_nan;
pub(crate) use value::stale_nan;
pub use value::{QueryResult, Sample, Series, Value};
pub(crate) use walk::{vector_selectors, walk_expr};

use std::collections::{HashMap, HashSet};

use promql_parser::parser::value::ValueType;
pub(crate) use promql_parser::parser::Expr;

use crate::labels::Labels;
use eval::Evaluator;
pub(crate) use queryable::{HistogramSeriesData, StartTimestampSeriesData};
pub use queryable::{PushedSample, Queryable, SeriesData, SourceError};

/// The PromQL engine. Stateless apart from its options; cheap to share.
#[derive(Clone, Debug, Default)]
pub struct Engine {
    pub opts: EngineOptions,
}

impl Engine {
    pub fn new(opts: EngineOptions) -> Self {
        Engine { opts }
    }

    /// Evaluates `expr` at time `t` (ms since the epoch).
    pub fn instant_query(&self, src: &dyn Queryable, expr: &str, t: i64) -> Result<QueryResult, Error> {
        let ast = parse(expr)?;
        self.instant_query_text(src, &ast, Some(expr), t)
    }

    /// The series labels of an instant vector query at `t` (an error for other result types).
    pub fn instant_vector_labels(&self, src: &dyn Queryable, expr: &str, t: i64) -> Result<Vec<Labels>, Error> {
        match self.instant_query(src, expr, t)?.value {
            Value::Vector(v) => Ok(v.into_iter().map(|s| s.metric).collect()),
            other => Err(Error::Eval(format!(
                "expected an instant vector, got a {}",
                other.type_name()
            ))),
        }
    }

    /// Evaluates a parsed expression at time `t`.
    pub fn instant_query_ast(&self, src: &dyn Queryable, ast: &Expr, t: i64) -> Result<QueryResult, Error> {
        self.instant_query_text(src, ast, None, t)
    }

    fn instant_query_text(
        &self,
        src: &dyn Queryable,
        ast: &Expr,
        text: Option<&str>,
        t: i64,
    ) -> Result<QueryResult, Error> {
        let mut ev = Evaluator::new(src, ast, &self.opts, t, t, text);
        // Aggregations over selectors and range functions series-major, as for a one-step
        // range query: their per-series work then runs on every core for large inputs.
        // Aggregations the source answers itself first (a remote Prometheus); the fast path then
        // computes the others.
        let pushed = if src.pushdown_parts() {
            pushdown::aggregations(src, ast, t)?
        } else {
            HashMap::new()
        };
        ev.precomputed = fastpath::precompute(&ev, ast, t, t, 1, pushed)?;
        let value = match ev.eval(ast, t)? {
            Value::Vector(v) => Value::Vector(finish_vector(v)?),
            Value::Matrix(m) => Value::Matrix(finish_matrix(m)?),
            other => other,
        };
        let (warnings, infos) = ev.annotations.into_lists();
        Ok(QueryResult { value, warnings, infos })
    }

    /// The aggregations of `ast` (outside subqueries) that the series-major path computes,
    /// each at every step from `start` to `end`: per aggregation node (its address in `ast`),
    /// per step, the vector an instant query of `ast` at that step computes for it, in the same
    /// order. A replay hands them to the rules it must still evaluate step by step.
    pub(crate) fn aggregations_over(
        &self,
        src: &dyn Queryable,
        ast: &Expr,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<HashMap<usize, Vec<Vec<Sample>>>, Error> {
        if step <= 0 || end < start {
            return Ok(HashMap::new());
        }
        let mut ev = Evaluator::new(src, ast, &self.opts, start, end, None);
        ev.q_step = step;
        let steps = fastpath::precompute(&ev, ast, start, end, step, HashMap::new())?;
        Ok(steps.into_iter().map(|(k, v)| (k, v.steps)).collect())
    }

    /// Evaluates `expr` at every step from `start` to `end` (ms); the value is a Matrix.
    pub fn range_query(
        &self,
        src: &dyn Queryable,
        expr: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<QueryResult, Error> {
        let ast = parse_for(expr, &QueryTimes::range(start, end, step))?;
        self.range_query_text(src, &ast, Some(expr), start, end, step)
    }

    /// Evaluates a parsed expression over a range.
    pub fn range_query_ast(
        &self,
        src: &dyn Queryable,
        ast: &Expr,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<QueryResult, Error> {
        self.range_query_text(src, ast, None, start, end, step)
    }

    fn range_query_text(
        &self,
        src: &dyn Queryable,
        ast: &Expr,
        text: Option<&str>,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<QueryResult, Error> {
        if step <= 0 {
            return Err(Error::Eval(
                "zero or negative query resolution step widths are not accepted".into(),
            ));
        }
        if end < start {
            return Err(Error::Eval("end timestamp must not be before start time".into()));
        }
        match ast.value_type() {
            ValueType::Vector | ValueType::Scalar => {}
            other => {
                return Err(Error::Eval(format!(
                    "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                    match other {
                        ValueType::Matrix => "range vector",
                        _ => "string",
                    }
                )))
            }
        }
        let mut ev = Evaluator::new(src, ast, &self.opts, start, end, text);
        ev.q_step = step;
        ev.precomputed = fastpath::precompute(&ev, ast, start, end, step, HashMap::new())?;
        warn_ineffective_sort(&ev, ast);
        let mut index: HashMap<(Labels, bool), usize, ahash::RandomState> = HashMap::default();
        let mut out: Vec<Series> = Vec::new();
        let mut t = start;
        while t <= end {
            match ev.eval(ast, t)? {
                Value::Vector(v) => {
                    for s in v {
                        let key = (s.metric, s.drop_name);
                        let i = match index.get(&key) {
                            Some(&i) => i,
                            None => {
                                out.push(Series {
                                    histograms: Vec::new(),
                                    metric: key.0.clone(),
                                    samples: Vec::new(),
                                    drop_name: key.1,
                                });
                                index.insert(key.clone(), out.len() - 1);
                                out.len() - 1
                            }
                        };
                        // Two samples of one step in one series: the step's vector held the
                        // label set twice, which Prometheus refuses at each step of a range
                        // query as it does in an instant query.
                        let dst = &mut out[i];
                        if dst.samples.last().is_some_and(|x| x.0 == t)
                            || dst.histograms.last().is_some_and(|x| x.0 == t)
                        {
                            return Err(Error::Eval(DUPLICATE_LABELSET.into()));
                        }
                        match s.h {
                            Some(h) => dst.histograms.push((t, h)),
                            None => dst.samples.push((t, s.v)),
                        }
                    }
                }
                Value::Scalar { v, .. } => {
                    let key = (Labels::empty(), false);
                    let i = *index.entry(key).or_insert_with(|| {
                        out.push(Series {
                            histograms: Vec::new(),
                            metric: Labels::empty(),
                            samples: Vec::new(),
                            drop_name: false,
                        });
                        out.len() - 1
                    });
                    out[i].samples.push((t, v));
                }
                other => return Err(Error::Eval(format!("unexpected {} in range query", other.type_name()))),
            }
            t += step;
        }
        let value = Value::Matrix(finish_matrix(out)?);
        let (warnings, infos) = ev.annotations.into_lists();
        Ok(QueryResult { value, warnings, infos })
    }
}

/// Sorting functions do nothing in a range query, whose result is ordered by labels.
fn warn_ineffective_sort(ev: &Evaluator, e: &Expr) {
    match e {
        Expr::Call(c) => {
            if matches!(
                c.func.name,
                "sort" | "sort_desc" | "sort_by_label" | "sort_by_label_desc"
            ) {
                ev.warn(format!(
                    "PromQL warning: sort is ineffective for range queries since results are always ordered by labels{}",
                    ev.pos(e)
                ));
            }
            for a in &c.args.args {
                warn_ineffective_sort(ev, a);
            }
        }
        Expr::Aggregate(a) => warn_ineffective_sort(ev, &a.expr),
        Expr::Binary(b) => {
            warn_ineffective_sort(ev, &b.lhs);
            warn_ineffective_sort(ev, &b.rhs);
        }
        Expr::Paren(p) => warn_ineffective_sort(ev, &p.expr),
        Expr::Unary(u) => warn_ineffective_sort(ev, &u.expr),
        _ => {}
    }
}

const DUPLICATE_LABELSET: &str = "vector cannot contain metrics with the same labelset";

/// Removes names marked for removal, then rejects duplicate label sets.
fn finish_vector(mut v: Vec<Sample>) -> Result<Vec<Sample>, Error> {
    let mut any = false;
    for s in &mut v {
        if s.drop_name {
            s.metric = s.metric.without_name();
            s.drop_name = false;
            any = true;
        }
    }
    if any || v.len() < 64 {
        let mut seen: HashSet<&Labels, ahash::RandomState> =
            HashSet::with_capacity_and_hasher(v.len(), ahash::RandomState::new());
        for s in &v {
            if !seen.insert(&s.metric) {
                return Err(Error::Eval(DUPLICATE_LABELSET.into()));
            }
        }
    }
    Ok(v)
}

/// Removes names marked for removal and merges series that end up with the same labels,
/// which is only an error when they have samples at the same timestamp.
fn finish_matrix(m: Vec<Series>) -> Result<Vec<Series>, Error> {
    let mut index: HashMap<Labels, usize, ahash::RandomState> =
        HashMap::with_capacity_and_hasher(m.len(), ahash::RandomState::new());
    let mut out: Vec<Series> = Vec::with_capacity(m.len());
    for mut s in m {
        if s.drop_name {
            s.metric = s.metric.without_name();
            s.drop_name = false;
        }
        match index.get(&s.metric) {
            Some(&i) => {
                let dst = &mut out[i];
                dst.samples.extend(s.samples);
                dst.samples.sort_by_key(|x| x.0);
                if dst.samples.windows(2).any(|w| w[0].0 == w[1].0) {
                    return Err(Error::Eval(DUPLICATE_LABELSET.into()));
                }
                if !s.histograms.is_empty() || !dst.histograms.is_empty() {
                    dst.histograms.extend(s.histograms);
                    dst.histograms.sort_by_key(|x| x.0);
                    let mut times: Vec<i64> = dst.histograms.iter().map(|x| x.0).collect();
                    times.extend(dst.samples.iter().map(|x| x.0));
                    times.sort_unstable();
                    if times.windows(2).any(|w| w[0] == w[1]) {
                        return Err(Error::Eval(DUPLICATE_LABELSET.into()));
                    }
                }
            }
            None => {
                index.insert(s.metric.clone(), out.len());
                out.push(s);
            }
        }
    }
    // Prometheus returns matrices sorted by label set.
    out.sort_by(|a, b| a.metric.cmp(&b.metric));
    Ok(out)
}

/// The series a series selector (`match[]` of Prometheus' series and label APIs) names, with
/// any float or native histogram sample in [mint, maxt]; only the labels are kept, sorted.
pub fn selector_series(src: &dyn Queryable, selector: &str, mint: i64, maxt: i64) -> Result<Vec<Labels>, Error> {
    let Expr::VectorSelector(vs) = parse(selector)? else {
        return Err(Error::Eval(format!("{selector:?} is not a series selector")));
    };
    // The parser already refuses selectors that match every series (`{}`), as Prometheus does.
    let mut seen: HashSet<Labels> = select::select(src, &vs, mint, maxt)?
        .into_iter()
        .filter(|s| !s.samples.is_empty())
        .map(|s| s.labels)
        .collect();
    if src.has_histograms() {
        seen.extend(
            select::select_histograms(src, &vs, mint, maxt)?
                .into_iter()
                .filter(|s| !s.samples.is_empty())
                .map(|s| s.labels),
        );
    }
    let mut out: Vec<Labels> = seen.into_iter().collect();
    out.sort();
    Ok(out)
}

/// Whether `expr` holds an `anchored` or `smoothed` selector. promql-parser's printing loses
/// the modifier, so such an expression is never sent to a source as text.
pub fn has_range_modifier(expr: &Expr) -> bool {
    extended::has_modifier(expr)
}

/// `expr` as text Prometheus reads: promql-parser's printing (`Display`) with the trim operators
/// and the `anchored` and `smoothed` modifiers it cannot print.
pub fn expr_text(expr: &Expr) -> String {
    extended::to_text(expr)
}

/// Parses a PromQL expression for an instant query (a rule, an instant query): `step()` and
/// `range()` in durations are 0. Errors carry a 1-based line and column where one can be found.
pub fn parse(expr: &str) -> Result<Expr, Error> {
    parse_for(expr, &QueryTimes::default())
}

/// Parses a PromQL expression for a query: what promql-parser cannot read of Prometheus 3.x's
/// syntax (duration expressions, `step()`, ...) is first rewritten by the front pass
/// ([`preparse`]); errors point into `expr` as written.
pub fn parse_for(expr: &str, times: &QueryTimes) -> Result<Expr, Error> {
    // Before anything recurses over it.
    if let Some((offset, _)) = depth::too_deep(expr, MAX_DEPTH) {
        let (line, col) = line_col(expr, offset);
        return Err(Error::Parse {
            message: depth::message(MAX_DEPTH),
            line,
            col,
        });
    }
    let rw = preparse::preparse(expr, times).map_err(|e| {
        let (line, col) = line_col(expr, e.offset);
        Error::Parse {
            message: e.message,
            line,
            col,
        }
    })?;
    let mut ast = raw_parse(&rw.text).map_err(|message| {
        let off = error_offset(&rw.text, &message);
        let (line, col) = line_col(expr, rw.original_offset(off));
        Error::Parse { message, line, col }
    })?;
    if rw.info_marker {
        info::strip_selector_marker(&mut ast);
    }
    trim::mark(&mut ast, &rw.trims).map_err(|e| {
        let (line, col) = line_col(expr, e.offset);
        Error::Parse {
            message: e.message.to_string(),
            line,
            col,
        }
    })?;
    // The extended range selectors: Prometheus' parse errors for a modifier on anything but a
    // selector, then the marked selectors tagged; its evaluation error for a function that
    // does not take the modifier comes after the other evaluation errors of the text.
    if let Some(x) = rw.extended.first() {
        let at = |offset: usize, message: String| {
            let (line, col) = line_col(expr, offset);
            Error::Parse { message, line, col }
        };
        if let Some((x, message)) = rw.extended.iter().find_map(|x| x.misplaced().map(|m| (x, m))) {
            return Err(at(x.offset, message));
        }
        extended::take_markers(&mut ast).map_err(|message| at(x.offset, message))?;
    }
    if let Some(message) = rw.bad_label_name {
        return Err(Error::Eval(message));
    }
    if let Some(refusal) = rw.extended.iter().find_map(|x| x.refusal()) {
        return Err(Error::Eval(refusal));
    }
    Ok(ast)
}

/// promql-parser, with its panics (it has some, e.g. on `offset NaN-50s`) turned into errors.
fn raw_parse(expr: &str) -> Result<Expr, String> {
    std::panic::catch_unwind(|| promql_parser::parser::parse(expr))
        .unwrap_or_else(|_| Err("invalid expression (the parser could not read it)".to_string()))
}

/// Finds where in `expr` a parse error lies. promql-parser's messages carry no position, so it
/// is recovered from what the message names (a character, a function, an unbalanced bracket)
/// or, failing that, from the longest prefix that parses.
fn error_offset(expr: &str, message: &str) -> usize {
    named_offset(expr, message).unwrap_or_else(|| longest_valid_prefix_end(expr))
}

fn line_col(expr: &str, offset: usize) -> (usize, usize) {
    let before = &expr[..expr.floor_char_boundary_compat(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, col)
}

/// Byte offsets of code outside string literals, paired with their characters.
fn code_chars(expr: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in expr.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q != '`' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => {
                if c == '"' || c == '\'' || c == '`' {
                    quote = Some(c);
                } else {
                    out.push((i, c));
                }
            }
        }
    }
    out
}

fn named_offset(expr: &str, message: &str) -> Option<usize> {
    let code = code_chars(expr);
    let quoted = |m: &str| -> Option<String> {
        let start = m.find('\'')? + 1;
        let end = m[start..].find('\'')? + start;
        Some(m[start..end].to_string())
    };
    if message.contains("unexpected character") {
        let c = quoted(message)?;
        return code.iter().find(|(_, ch)| c.starts_with(*ch)).map(|(i, _)| *i);
    }
    // Prometheus' lexer finds an unclosed bracket at the end of the input and says so there
    // (promtool: `1:LEN+1: parse error: unclosed left parenthesis`), not at the bracket.
    if message.starts_with("unclosed left") {
        return Some(expr.len());
    }
    if message.starts_with("unexpected right") || message.contains("inside braces") {
        // Find the unbalanced bracket.
        let mut stack = Vec::new();
        for &(i, c) in &code {
            match c {
                '(' | '[' | '{' => stack.push(i),
                ')' | ']' | '}' if stack.pop().is_none() => return Some(i),
                _ => {}
            }
        }
        if message.contains("unexpected end") {
            return Some(expr.len());
        }
        return stack.last().copied();
    }
    if message.contains("unexpected character") {
        let c = quoted(message)?;
        return code.iter().find(|(_, ch)| c.starts_with(*ch)).map(|(i, _)| *i);
    }
    if message.contains("function") || message.contains("in call to") {
        let name = quoted(message)?;
        let mut from = 0;
        while let Some(k) = expr[from..].find(&name) {
            let at = from + k;
            let after = expr[at + name.len()..].trim_start();
            let before_ok = expr[..at]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if before_ok && after.starts_with('(') {
                return Some(at);
            }
            from = at + name.len();
        }
        return None;
    }
    if let Some(rest) = message.strip_prefix("bad number or duration syntax: ") {
        return expr.find(rest.trim());
    }
    if let Some(re) = message.strip_prefix("illegal regex for ") {
        // The string literal holding it, else the first regex matcher.
        return expr
            .find(re)
            .map(|at| at.saturating_sub(1))
            .or_else(|| expr.find("=~").or_else(|| expr.find("!~")));
    }
    None
}

/// Prefixes [`longest_valid_prefix_end`] parses at most, and the bytes they may hold in all
/// beyond a multiple of the text's length: the search stays linear in the text (each parse is),
/// so an invalid query of 20 KB costs a few parses, not 20,000 (it once ran for minutes after its
/// query's timeout, holding a query slot). A short text is searched in full.
const PREFIX_PARSES: usize = 64;
const PREFIX_BYTES: usize = 16 * 1024;

/// The byte offset just past the longest prefix that parses, then on to the next token; the
/// start of the text when none is found within the bound.
fn longest_valid_prefix_end(expr: &str) -> usize {
    let bounds: Vec<usize> = expr
        .char_indices()
        .map(|(i, _)| i)
        .skip(1)
        .chain([expr.len()])
        .collect();
    let mut best = 0;
    let mut budget = PREFIX_BYTES + 4 * expr.len();
    for &k in bounds
        .iter()
        .rev()
        .take(PREFIX_PARSES.max(PREFIX_BYTES / expr.len().max(1)))
    {
        if k > budget {
            break;
        }
        budget -= k;
        if raw_parse(&expr[..k]).is_ok() {
            best = k;
            break;
        }
    }
    let rest = &expr[best..];
    best + (rest.len() - rest.trim_start().len())
}

trait FloorCharBoundary {
    fn floor_char_boundary_compat(&self, i: usize) -> usize;
}

impl FloorCharBoundary for str {
    fn floor_char_boundary_compat(&self, mut i: usize) -> usize {
        i = i.min(self.len());
        while !self.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use crate::tsdb::Store;

    /// Where promtool 2.42 puts the error: the end of the input for an unclosed bracket.
    #[test]
    fn an_unclosed_parenthesis_is_reported_where_the_input_ends() {
        let e = "sum by (job) (rate(x{job=\"api\"}[5m])) / sum by (job) (rate(x[5m] offset 1h) > 0.5";
        match parse(e) {
            Err(Error::Parse { message, line, col }) => {
                assert!(message.contains("unclosed left parenthesis"), "{message}");
                assert_eq!((line, col), (1, e.len() + 1));
            }
            other => panic!("{other:?}"),
        }
    }

    fn store() -> Store {
        let mut s = Store::new();
        for i in 0..=10 {
            let t = i * 60_000;
            s.append(
                &Labels::from_pairs([("__name__", "req_total"), ("job", "a")]),
                t,
                (i * 60) as f64,
            );
            s.append(
                &Labels::from_pairs([("__name__", "req_total"), ("job", "b")]),
                t,
                (i * 120) as f64,
            );
        }
        s
    }

    fn vector(r: QueryResult) -> Vec<(String, f64)> {
        match r.value {
            Value::Vector(v) => {
                let mut out: Vec<_> = v.into_iter().map(|s| (s.metric.to_string(), s.v)).collect();
                out.sort_by(|a, b| a.0.cmp(&b.0));
                out
            }
            other => panic!("expected a vector, got {other:?}"),
        }
    }

    #[test]
    fn rate_and_aggregation() {
        let e = Engine::default();
        let r = e
            .instant_query(&store(), "sum by (job) (rate(req_total[5m]))", 600_000)
            .unwrap();
        assert_eq!(
            vector(r),
            vec![("{job=\"a\"}".into(), 1.0), ("{job=\"b\"}".into(), 2.0)]
        );
    }

    #[test]
    fn delayed_name_removal_detects_collisions() {
        let e = Engine::default();
        let err = e.instant_query(&store(), "ceil(req_total) or ceil(req_total)", 600_000);
        assert!(err.is_ok());
        let err = e.instant_query(
            &store(),
            "label_replace(ceil(req_total), \"job\", \"x\", \"\", \"\")",
            600_000,
        );
        assert!(matches!(err, Err(Error::Eval(m)) if m.contains("same labelset")));
    }

    #[test]
    fn range_query_refuses_a_step_with_a_label_set_twice() {
        let e = Engine::default();
        // Both jobs' series lose their only distinguishing label: each step holds `{}` twice.
        let err = e.range_query(
            &store(),
            "label_replace(req_total, \"job\", \"\", \"\", \"\")",
            300_000,
            600_000,
            60_000,
        );
        assert!(
            matches!(&err, Err(Error::Eval(m)) if m == DUPLICATE_LABELSET),
            "{:?}",
            err.map(|r| r.value)
        );
        // One series per label set is fine.
        assert!(e
            .range_query(
                &store(),
                "label_replace(req_total, \"x\", \"1\", \"\", \"\")",
                300_000,
                600_000,
                60_000
            )
            .is_ok());
    }

    #[test]
    fn lookback_and_staleness() {
        let e = Engine::default();
        let s = store();
        assert_eq!(
            vector(e.instant_query(&s, "req_total{job=\"a\"}", 899_999).unwrap()).len(),
            1
        );
        // The last sample is at 10m; a 5m lookback window is left-open.
        assert!(vector(e.instant_query(&s, "req_total{job=\"a\"}", 900_000).unwrap()).is_empty());
    }

    #[test]
    fn range_query_sorted_by_labels() {
        let e = Engine::default();
        let r = e.range_query(&store(), "req_total", 0, 120_000, 60_000).unwrap();
        let Value::Matrix(m) = r.value else {
            panic!("expected a matrix")
        };
        assert_eq!(m.len(), 2);
        assert!(m[0].metric < m[1].metric);
        assert_eq!(m[0].samples, vec![(0, 0.0), (60_000, 60.0), (120_000, 120.0)]);
    }

    /// The series-major range path (fastpath, on every core past `parallel::MIN_PARALLEL`
    /// series, counter resets looked up once per series) gives exactly what evaluating each
    /// step on its own gives, resets and gaps included.
    #[test]
    fn range_aggregations_equal_step_by_step_evaluation() {
        let mut s = Store::new();
        let mut seed = 42u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as f64 / (1u64 << 31) as f64
        };
        let n = crate::parallel::MIN_PARALLEL + 100;
        for i in 0..n {
            let l = Labels::from_pairs([
                ("__name__", "c_total".to_string()),
                ("g", (i % 7).to_string()),
                ("i", i.to_string()),
            ]);
            let mut v = 0.0;
            for k in 0..60 {
                // Every series resets now and then; some miss scrapes.
                v = if rnd() < 0.05 { rnd() * 3.0 } else { v + rnd() * 10.0 };
                if rnd() < 0.9 {
                    s.append(&l, k * 15_000 + (i as i64 % 5), v);
                }
            }
        }
        let e = Engine::default();
        for q in [
            "sum by (g) (rate(c_total[2m]))",
            "avg by (g) (increase(c_total[1m]))",
            "max by (g) (resets(c_total[3m]))",
            "count(delta(c_total[2m]))",
            "sum by (g) (c_total)",
        ] {
            let (start, end, step) = (120_000, 870_000, 30_000);
            let Value::Matrix(m) = e.range_query(&s, q, start, end, step).unwrap().value else {
                panic!("{q}: expected a matrix")
            };
            let mut t = start;
            while t <= end {
                let Value::Vector(v) = e.instant_query(&s, q, t).unwrap().value else {
                    panic!("{q}: expected a vector")
                };
                for x in &v {
                    let series = m
                        .iter()
                        .find(|r| r.metric == x.metric)
                        .expect("series in the range result");
                    let got = series.samples.iter().find(|p| p.0 == t).map(|p| p.1);
                    assert_eq!(got.map(f64::to_bits), Some(x.v.to_bits()), "{q} at {t}: {}", x.metric);
                }
                let at_t = m.iter().filter(|r| r.samples.iter().any(|p| p.0 == t)).count();
                assert_eq!(at_t, v.len(), "{q} at {t}");
                t += step;
            }
        }
    }

    #[test]
    fn parse_errors_have_positions() {
        let pos = |q: &str| match parse(q) {
            Err(Error::Parse { line, col, .. }) => (line, col),
            other => panic!("expected a parse error for {q}, got {other:?}"),
        };
        // An unclosed bracket: at the end of the input, where promtool points.
        assert_eq!(pos("sum(foo"), (1, 8));
        assert_eq!(pos("foo{a=1}"), (1, 7));
        assert_eq!(pos("foo bar"), (1, 5));
        assert_eq!(pos("sum(rate(foo[5m], 1))"), (1, 5));
        assert_eq!(pos("foo\n  $"), (2, 3));
        // Through the front pass: positions in the text as written.
        assert_eq!(pos("rate(foo[1m+1m]) + (x offset (1h/2)) $"), (1, 38));
        assert_eq!(pos("x[1m:1m+1m] offset (1s/0)"), (1, 23));
    }

    #[test]
    fn prometheus_3_syntax_through_the_front_pass() {
        let e = Engine::default();
        let v = |q: &str| match e.instant_query(&store(), q, 600_000) {
            Ok(r) => format!("{:?}", r.value),
            Err(err) => format!("error: {err}"),
        };
        assert_eq!(v("rate(req_total[2m+3m])"), v("rate(req_total[5m])"));
        assert_eq!(v("req_total offset (1m * 2)"), v("req_total offset 2m"));
        assert_eq!(v("req_total offset (1m - 60s)"), v("req_total"));
        assert_eq!(
            v("deriv(req_total[5m] anchored)"),
            "error: anchored modifier can only be used with: changes, delta, increase, rate, resets - not with deriv"
        );
        // A parse error elsewhere comes first, as in Prometheus.
        assert!(matches!(parse("deriv(x[5m] anchored) +"), Err(Error::Parse { .. })));
        let perr = |q: &str| match parse(q) {
            Err(Error::Parse { message, line, col }) => format!("{line}:{col}: {message}"),
            other => panic!("expected a parse error for {q}, got {other:?}"),
        };
        assert_eq!(
            perr("rate(x[5m:1m] anchored)"),
            "1:15: anchored modifier is not supported for subqueries"
        );
        assert_eq!(perr("rate(x[5m]) smoothed"), "1:13: smoothed modifier not implemented");
        assert_eq!(
            perr("rate({a=~\".*\"}[5m] anchored)"),
            "1:20: vector selector must contain at least one non-empty matcher"
        );
        assert_eq!(
            perr("rate(x[5m] anchored smoothed)"),
            "1:21: anchored and smoothed modifiers cannot be used together"
        );
    }

    /// Prometheus' `TestExtendedRangeSelectors` (engine_test.go): a bare modified range
    /// selector gives the window's points between its two boundary values.
    #[test]
    fn bare_modified_range_selectors_as_prometheus() {
        let mut s = Store::new();
        let name = |n: &str| Labels::from_pairs([("__name__", n)]);
        for i in 0..=10 {
            s.append(&name("metric"), i * 10_000, (i + 1) as f64);
        }
        for (i, v) in [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 6].into_iter().enumerate() {
            s.append(&name("withreset"), i as i64 * 10_000, v as f64);
        }
        for (i, v) in [0, 5, 100, 2, 8].into_iter().enumerate() {
            s.append(&name("notregular"), i as i64 * 10_000, v as f64);
        }
        let e = Engine::default();
        // (query, evaluation time in s, the points Prometheus returns)
        type Case<'a> = (&'a str, i64, &'a [(i64, f64)]);
        let cases: &[Case] = &[
            ("metric[10s] smoothed", 10, &[(0, 1.0), (10_000, 2.0)]),
            (
                "metric[10s] smoothed",
                15,
                &[(5_000, 1.5), (10_000, 2.0), (15_000, 2.5)],
            ),
            ("metric[10s] smoothed", 5, &[(-5_000, 1.0), (0, 1.0), (5_000, 1.5)]),
            (
                "metric[10s] smoothed",
                105,
                &[(95_000, 10.5), (100_000, 11.0), (105_000, 11.0)],
            ),
            (
                "withreset[10s] smoothed",
                45,
                &[(35_000, 4.5), (40_000, 5.0), (45_000, 3.0)],
            ),
            ("metric[10s] anchored", 10, &[(0, 1.0), (10_000, 2.0)]),
            (
                "metric[10s] anchored",
                15,
                &[(5_000, 1.0), (10_000, 2.0), (15_000, 2.0)],
            ),
            ("metric[10s] anchored", 5, &[(-5_000, 1.0), (0, 1.0), (5_000, 1.0)]),
            (
                "metric[10s] anchored",
                105,
                &[(95_000, 10.0), (100_000, 11.0), (105_000, 11.0)],
            ),
            (
                "withreset[10s] anchored",
                45,
                &[(35_000, 4.0), (40_000, 5.0), (45_000, 5.0)],
            ),
            (
                "notregular[20s] smoothed",
                30,
                &[(10_000, 5.0), (20_000, 100.0), (30_000, 2.0)],
            ),
            (
                "notregular[20s] anchored",
                30,
                &[(10_000, 5.0), (20_000, 100.0), (30_000, 2.0)],
            ),
        ];
        for &(q, t, want) in cases {
            let Value::Matrix(m) = e.instant_query(&s, q, t * 1000).unwrap().value else {
                panic!("{q}: not a matrix")
            };
            assert_eq!(m.len(), 1, "{q} at {t}s");
            assert_eq!(m[0].samples, want, "{q} at {t}s");
        }
    }

    #[test]
    fn anchored_and_smoothed_in_instant_and_range_queries() {
        let e = Engine::default();
        let s = store();
        // The anchor (the sample 5m back) counts: 5 changes where the plain window sees 4.
        assert_eq!(
            vector(e.instant_query(&s, "changes(req_total[5m] anchored)", 600_000).unwrap()),
            vec![("{job=\"a\"}".to_string(), 5.0), ("{job=\"b\"}".to_string(), 5.0)]
        );
        // Not extrapolated: exactly the difference to the anchor, with `offset` and `@`.
        assert_eq!(
            vector(
                e.instant_query(&s, "increase(req_total{job=\"a\"}[2m] anchored offset 1m)", 450_000)
                    .unwrap()
            ),
            vec![("{job=\"a\"}".to_string(), 120.0)]
        );
        assert_eq!(
            vector(
                e.instant_query(&s, "delta(req_total{job=\"a\"}[2m] anchored @ 300)", 0)
                    .unwrap()
            ),
            vec![("{job=\"a\"}".to_string(), 120.0)]
        );
        // Smoothed: interpolated at both ends of the window (90s and 210s).
        assert_eq!(
            vector(
                e.instant_query(&s, "increase(req_total{job=\"b\"}[2m] smoothed)", 210_000)
                    .unwrap()
            ),
            vec![("{job=\"b\"}".to_string(), 240.0)]
        );
        // Range queries (through the aggregation the fast path would take) agree step by step.
        for q in [
            "sum(changes(req_total[5m] anchored))",
            "sum(rate(req_total[3m] smoothed))",
            "sum(req_total smoothed)",
            "req_total offset 30s smoothed",
        ] {
            let range = e.range_query(&s, q, 330_000, 570_000, 60_000).unwrap();
            let Value::Matrix(m) = range.value else { panic!("{q}") };
            for series in &m {
                for &(t, v) in &series.samples {
                    let at = vector(e.instant_query(&s, q, t).unwrap());
                    let want = at.iter().find(|x| x.0 == series.metric.to_string()).map(|x| x.1);
                    assert_eq!(Some(v), want, "{q} at {t}");
                }
            }
            assert!(!m.is_empty(), "{q}");
        }
        let r = e
            .range_query(&s, "sum(changes(req_total[5m] anchored))", 300_000, 420_000, 60_000)
            .unwrap();
        let Value::Matrix(m) = r.value else { panic!() };
        assert_eq!(m[0].samples, vec![(300_000, 10.0), (360_000, 10.0), (420_000, 10.0)]);
        let r = e
            .range_query(&s, "sum(req_total smoothed)", 30_000, 90_000, 60_000)
            .unwrap();
        let Value::Matrix(m) = r.value else { panic!() };
        // At 30s and 90s: interpolated (the plain selector would give 0 and 180).
        assert_eq!(m[0].samples, vec![(30_000, 90.0), (90_000, 270.0)]);
    }

    #[test]
    fn matching_errors() {
        let e = Engine::default();
        let r = e.instant_query(&store(), "req_total + on() req_total", 600_000);
        assert!(matches!(r, Err(Error::Eval(m)) if m.contains("many-to-many matching not allowed")));
    }
}
