//! Aggregations sent to the source whole, inside an instant query the source cannot answer
//! whole.
//!
//! A rule such as `max by (node) (rate(x[5m])) > 0.5 or on (node) local:recorded` reads a
//! recording rule's output, so the source (a federation of remote Prometheus-compatible
//! sources) cannot evaluate it (`Queryable::pushdown` of the root says no), and without this
//! the engine would fetch every raw sample of `x` over HTTP to aggregate a few series
//! locally. Here every outermost aggregation is offered to the source first; those it answers
//! come back as their (small) result vector and the engine evaluates only the rest.
//!
//! Only aggregations whose output labels are exactly their grouping labels are offered (`sum`,
//! `min`, `max`, `avg`, `count`, `group`, `stddev`, `stdvar`, `quantile`): the answer then
//! carries no metric name, and nothing of the engine's delayed name removal can differ.
//! Subqueries are not entered: their inside is evaluated at other times than the query's.

use std::collections::HashMap;

use promql_parser::parser::token::{T_AVG, T_COUNT, T_GROUP, T_MAX, T_MIN, T_QUANTILE, T_STDDEV, T_STDVAR, T_SUM};
use promql_parser::parser::Expr;

use super::error::Error;
use super::eval::StepVectors;
use super::queryable::Queryable;
use super::select::node_key;
use super::value::Sample;

/// The aggregations of `expr` (outside subqueries) that `src` answered at `t`, keyed by node,
/// as one-step vectors.
pub(crate) fn aggregations(src: &dyn Queryable, expr: &Expr, t: i64) -> Result<HashMap<usize, StepVectors>, Error> {
    let mut out = HashMap::new();
    visit(src, expr, t, &mut out)?;
    Ok(out)
}

fn visit(src: &dyn Queryable, expr: &Expr, t: i64, out: &mut HashMap<usize, StepVectors>) -> Result<(), Error> {
    match expr {
        Expr::Aggregate(a) => {
            let id = a.op.id();
            let labels_only = [
                T_SUM, T_MIN, T_MAX, T_AVG, T_COUNT, T_GROUP, T_STDDEV, T_STDVAR, T_QUANTILE,
            ]
            .contains(&id);
            // A modifier is lost in the text a source gets.
            if labels_only && !super::extended::has_modifier(expr) {
                if let Some(res) = src.pushdown(expr, t) {
                    let v = res?
                        .into_iter()
                        .map(|p| Sample {
                            metric: p.labels,
                            t,
                            v: p.v,
                            drop_name: false,
                            h: p.h,
                        })
                        .collect();
                    out.insert(
                        node_key(a),
                        StepVectors {
                            start: t,
                            step: 1,
                            steps: vec![v],
                        },
                    );
                    return Ok(());
                }
            }
            if let Some(p) = &a.param {
                visit(src, p, t, out)?;
            }
            visit(src, &a.expr, t, out)
        }
        Expr::Binary(b) => {
            visit(src, &b.lhs, t, out)?;
            visit(src, &b.rhs, t, out)
        }
        Expr::Paren(p) => visit(src, &p.expr, t, out),
        Expr::Unary(u) => visit(src, &u.expr, t, out),
        Expr::Call(c) => c.args.args.iter().try_for_each(|a| visit(src, a, t, out)),
        _ => Ok(()),
    }
}
