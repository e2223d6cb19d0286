//! PromQL evaluator over promql-parser's AST with Prometheus 3.x semantics.

mod aggregate;
mod binary;
mod eval;
mod functions;
mod histogram;
mod info;
pub mod mathx;
mod value;

pub use value::{is_stale_nan, stale_nan, QueryResult, Sample, Series, Value, STALE_NAN_BITS};

use std::collections::{HashMap, HashSet};

use promql_parser::parser::value::ValueType;
pub use promql_parser::parser::Expr;

use crate::labels::Labels;
use crate::source::{Queryable, SourceError};
use eval::Evaluator;

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

/// Engine options.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// How far back an instant selector looks for a sample, in ms (Prometheus: 5m).
    pub lookback_ms: i64,
    /// Default subquery resolution in ms when the subquery gives no step (Prometheus: the
    /// global evaluation interval, 1m by default).
    pub default_subquery_step_ms: i64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lookback_ms: 5 * 60 * 1000,
            default_subquery_step_ms: 60 * 1000,
        }
    }
}

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
        self.instant_query_text(src, &ast, expr, t)
    }

    /// Evaluates a parsed expression at time `t`.
    pub fn instant_query_ast(&self, src: &dyn Queryable, ast: &Expr, t: i64) -> Result<QueryResult, Error> {
        self.instant_query_text(src, ast, &ast.to_string(), t)
    }

    fn instant_query_text(&self, src: &dyn Queryable, ast: &Expr, text: &str, t: i64) -> Result<QueryResult, Error> {
        let ev = Evaluator::new(
            src,
            ast,
            self.opts.lookback_ms,
            self.opts.default_subquery_step_ms,
            t,
            t,
            text,
        );
        let value = match ev.eval(ast, t)? {
            Value::Vector(v) => Value::Vector(finish_vector(v)?),
            Value::Matrix(m) => Value::Matrix(finish_matrix(m)?),
            other => other,
        };
        let ann = ev.annotations.into_inner();
        Ok(QueryResult {
            value,
            warnings: ann.warnings,
            infos: ann.infos,
        })
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
        let ast = parse(expr)?;
        self.range_query_text(src, &ast, expr, start, end, step)
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
        self.range_query_text(src, ast, &ast.to_string(), start, end, step)
    }

    fn range_query_text(
        &self,
        src: &dyn Queryable,
        ast: &Expr,
        text: &str,
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
        let mut ev = Evaluator::new(
            src,
            ast,
            self.opts.lookback_ms,
            self.opts.default_subquery_step_ms,
            start,
            end,
            text,
        );
        ev.q_step = step;
        warn_ineffective_sort(&ev, ast);
        let mut index: HashMap<(Labels, bool), usize> = HashMap::new();
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
                                    metric: key.0.clone(),
                                    samples: Vec::new(),
                                    drop_name: key.1,
                                });
                                index.insert(key.clone(), out.len() - 1);
                                out.len() - 1
                            }
                        };
                        out[i].samples.push((t, s.v));
                    }
                }
                Value::Scalar { v, .. } => {
                    let key = (Labels::empty(), false);
                    let i = *index.entry(key).or_insert_with(|| {
                        out.push(Series {
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
        let ann = ev.annotations.into_inner();
        Ok(QueryResult {
            value,
            warnings: ann.warnings,
            infos: ann.infos,
        })
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

/// Warnings and infos collected during evaluation, without duplicates.
#[derive(Debug, Default)]
pub(crate) struct Annotations {
    warnings: Vec<String>,
    infos: Vec<String>,
}

impl Annotations {
    fn add_warning(&mut self, m: String) {
        if !self.warnings.contains(&m) {
            self.warnings.push(m);
        }
    }

    fn add_info(&mut self, m: String) {
        if !self.infos.contains(&m) {
            self.infos.push(m);
        }
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
        let mut seen = HashSet::with_capacity(v.len());
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
    let mut index: HashMap<Labels, usize> = HashMap::with_capacity(m.len());
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

/// Parses a PromQL expression; errors carry a 1-based line and column where one can be found.
pub fn parse(expr: &str) -> Result<Expr, Error> {
    promql_parser::parser::parse(expr).map_err(|message| {
        let (line, col) = error_position(expr, &message);
        Error::Parse { message, line, col }
    })
}

/// promql-parser reports byte offsets in some messages ("... at 12"); map one to line:col.
fn error_position(expr: &str, message: &str) -> (usize, usize) {
    let offset = message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse::<usize>().ok())
        .find(|&n| n <= expr.len());
    match offset {
        Some(off) => {
            let before = &expr[..expr.floor_char_boundary_compat(off)];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
            (line, col)
        }
        None => (1, 1),
    }
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
