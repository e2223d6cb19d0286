//! Replay in blocks: the rules' answers for the next hour of evaluations, each rule's computed
//! at once as a range query, instead of one instant query per evaluation.
//!
//! An instant query at each evaluation re-selects, re-decodes and re-plans what the one before
//! it read: a rule reading `[1h]` every minute decodes each sample sixty times. A range query
//! over the block's evaluation times does that once, and PromQL defines its value at each step
//! as the instant query's at that time. The replay's loop is unchanged: groups still run one
//! evaluation at a time in time order, with their alert state, outputs and notifications; a
//! rule computed ahead is handed its answer ([`Group::eval_answered`]) instead of querying.
//!
//! A rule reading other rules' outputs is computed ahead only where those outputs are known for
//! the whole block before they are written: each rule it may read ([`deps::inputs`]) is a
//! recording rule computed ahead, and evaluated before it at equal times (an earlier group, or
//! earlier in the same group), so that what it reads at each step is what the step-by-step
//! replay would have written by then. Those outputs are derived from their answers exactly as
//! the group derives them ([`crate::rules::recording::RecordingRule::outputs_of`], staleness
//! markers included) into a layer of the block's outputs that only these range queries read.
//! Everything else runs step by step, as before:
//! - rules reading `ALERTS` or `ALERTS_FOR_STATE` (alert state is not derived from answers
//!   alone), a rule reading itself, or a rule of a later group or later in its group;
//! - expressions reading after their evaluation time (`@ start()`, `@ end()`, a time in the
//!   future, a negative offset), whose range query would read what the replay hides;
//! - a block whose range query fails (one step's error fails the range query): that rule and
//!   its readers run step by step over that block, and each step gets its own error;
//! - groups with different query offsets, and replays from the sources ([`super::history`]),
//!   whose data arrives with the replay's time.
//!
//! `replay --step-by-step` turns blocks off; `tests/replay_blocks.rs` holds the two to the same
//! transitions, notifications and outputs.

use crate::promql::{Engine, Expr, PushedSample, Queryable, Value};
use crate::rules::deps;
use crate::rules::storage::{Layered, Parts, PushedAnswer};
use crate::rules::{Group, GroupRule};
use crate::tsdb::Store;

/// Simulated time a block covers: long enough that a rule reading `[1h]` decodes its window
/// about twice instead of sixty times, short enough that a block's answers stay small.
pub(super) const BLOCK_MS: i64 = 3_600_000;

/// The answers of one rule over one block.
struct Steps {
    first_qt: i64,
    step: i64,
    /// Per evaluation of the block, in order: the answer, taken once.
    at: Vec<Option<Vec<PushedSample>>>,
}

/// The aggregations of a rule left step by step, computed for one block: per step, per
/// aggregation node (by address), its vector.
struct PartSteps {
    first_qt: i64,
    step: i64,
    at: Vec<Parts>,
}

/// Answers computed ahead, a block at a time.
pub(super) struct Blocks {
    /// The rules that can be computed ahead, each after the rules it reads.
    order: Vec<(usize, usize)>,
    /// Per group, per rule: the rules whose outputs it may read, in all and per selector.
    inputs: Vec<Vec<Vec<(usize, usize)>>>,
    by_selector: deps::SelectorReads,
    /// Per group, per rule left step by step this block: its aggregations computed ahead.
    parts: Vec<Vec<Option<PartSteps>>>,
    lookback_ms: i64,
    /// Evaluations before this time were prepared (or run step by step).
    block_end: i64,
    /// The replay's last evaluation time.
    to_ms: i64,
    /// Per group, per rule: its answers over the current block, where computed.
    steps: Vec<Vec<Option<Steps>>>,
    width_ms: i64,
}

impl Blocks {
    /// Blocks for `groups`; `None` when no rule can be computed ahead.
    pub(super) fn new(groups: &[Group], lookback_ms: i64, to_ms: i64) -> Option<Blocks> {
        let order = eligible(groups, lookback_ms);
        if order.is_empty() {
            return None;
        }
        Some(Blocks {
            steps: groups
                .iter()
                .map(|g| g.rules().iter().map(|_| None).collect())
                .collect(),
            order,
            inputs: deps::inputs(&groups.iter().collect::<Vec<_>>()),
            by_selector: deps::by_selector(&groups.iter().collect::<Vec<_>>()),
            parts: groups
                .iter()
                .map(|g| g.rules().iter().map(|_| None).collect())
                .collect(),
            lookback_ms,
            block_end: i64::MIN,
            to_ms,
            width_ms: BLOCK_MS,
        })
    }

    /// Computes the answers of the block starting at `ts` if the last one ended: every
    /// evaluation of each group in `[ts, ts + width)` (up to the replay's end), where each
    /// group's next evaluation is `next[g]` (`None`: no more). Called before any evaluation
    /// at `ts`.
    pub(super) fn prepare(
        &mut self,
        ts: i64,
        next: &[Option<i64>],
        groups: &[Group],
        engine: &Engine,
        source: &dyn Queryable,
        outputs: &Store,
    ) {
        if ts < self.block_end {
            return;
        }
        let end = ts.saturating_add(self.width_ms);
        self.block_end = end;
        let last_ts = end.saturating_sub(1).min(self.to_ms);
        // The rules' outputs so far, and the block's written into them as the groups will
        // write them: a copy, so that series keep the places the replay's own writes give
        // them (which series a read lists first must not change: a sum adds in that order).
        let mut ahead = outputs.clone();
        for s in self.steps.iter_mut().flatten() {
            *s = None;
        }
        for &(gi, ri) in &self.order {
            let g = &groups[gi];
            // Every input computed for this block (an input whose range query failed
            // leaves its readers step by step too).
            if !self.inputs[gi][ri].iter().all(|&(gj, rj)| self.steps[gj][rj].is_some()) {
                continue;
            }
            let Some(first) = next[gi].filter(|t| *t <= last_ts) else {
                // No evaluation in this block: nothing to read, nothing written.
                self.steps[gi][ri] = Some(Steps {
                    first_qt: 0,
                    step: 1,
                    at: Vec::new(),
                });
                continue;
            };
            let (first_qt, last_qt, interval) = query_times(g, first, last_ts);
            let view = Layered::new(source, &ahead);
            let rule = &g.rules()[ri];
            let Some(at) = answers(engine, &view, rule.expr(), first_qt, last_qt, interval) else {
                continue;
            };
            if let GroupRule::Recording(r) = rule {
                write_ahead(&mut ahead, r, g, ri, &at, first_qt, interval);
            }
            self.steps[gi][ri] = Some(Steps {
                first_qt,
                step: interval,
                at,
            });
        }
        // The rules left step by step: their aggregations that read what is known for the
        // block (the source, recordings computed ahead), series-major for the whole block.
        for (gi, g) in groups.iter().enumerate() {
            for ri in 0..g.rules().len() {
                self.parts[gi][ri] = None;
                if self.steps[gi][ri].is_some() {
                    continue;
                }
                let allowed = self.known_aggregations(groups, gi, ri);
                if allowed.is_empty() {
                    continue;
                }
                let Some(first) = next[gi].filter(|t| *t <= last_ts) else {
                    continue;
                };
                let (first_qt, last_qt, interval) = query_times(g, first, last_ts);
                let view = Layered::new(source, &ahead);
                let Ok(found) = engine.aggregations_over(&view, g.rules()[ri].expr(), first_qt, last_qt, interval)
                else {
                    continue;
                };
                let n = usize::try_from((last_qt - first_qt) / interval + 1).unwrap_or(0);
                let mut at: Vec<Parts> = vec![Parts::default(); n];
                for (node, steps) in found {
                    // Only as the instant query's own: floats whose name stays.
                    if !allowed.contains(&node)
                        || steps.len() != n
                        || steps.iter().flatten().any(|s| s.drop_name || s.h.is_some())
                    {
                        continue;
                    }
                    for (k, v) in steps.into_iter().enumerate() {
                        at[k].insert(
                            node,
                            v.into_iter().map(|s| PushedSample::float(s.metric, s.v)).collect(),
                        );
                    }
                }
                if at.iter().any(|p| !p.is_empty()) {
                    self.parts[gi][ri] = Some(PartSteps {
                        first_qt,
                        step: interval,
                        at,
                    });
                }
            }
        }
    }

    /// The aggregation nodes (by address) of rule `ri` of group `gi` whose values over this
    /// block are known ahead: every selector in them reads the source or one recording computed
    /// ahead for the block and evaluated before this rule at equal times, and none reads after
    /// its evaluation time.
    fn known_aggregations(&self, groups: &[Group], gi: usize, ri: usize) -> std::collections::HashSet<usize> {
        let rule = &groups[gi].rules()[ri];
        let reads: std::collections::HashMap<usize, &Vec<(usize, usize)>> =
            crate::promql::vector_selectors(rule.expr())
                .into_iter()
                .map(|vs| std::ptr::from_ref(vs) as usize)
                .zip(&self.by_selector[gi][ri])
                .collect();
        let known = |vs: &promql_parser::parser::VectorSelector| {
            reads.get(&(std::ptr::from_ref(vs) as usize)).is_some_and(|rs| {
                rs.len() <= 1
                    && rs.iter().all(|&(gj, rj)| {
                        self.steps[gj][rj].is_some()
                            && matches!(groups[gj].rules()[rj], GroupRule::Recording(_))
                            && ((gj, rj) < (gi, ri) || (gj != gi && never_together(&groups[gi], &groups[gj])))
                    })
            })
        };
        let mut out = std::collections::HashSet::new();
        crate::promql::walk_expr(rule.expr(), &mut |e| {
            if let Expr::Aggregate(a) = e {
                if crate::promql::vector_selectors(e).into_iter().all(known) && reads_only_its_past(e, self.lookback_ms)
                {
                    out.insert(crate::promql::node_key(a));
                }
            }
        });
        out
    }

    /// The aggregations computed for group `gi`'s evaluation at query time `qt`, by rule
    /// (each handed out once).
    pub(super) fn take_parts(&mut self, gi: usize, qt: i64) -> Vec<Parts> {
        self.parts[gi]
            .iter_mut()
            .map(|p| {
                let Some(p) = p.as_mut() else {
                    return Parts::default();
                };
                let d = qt - p.first_qt;
                if d < 0 || d % p.step != 0 {
                    return Parts::default();
                }
                usize::try_from(d / p.step)
                    .ok()
                    .and_then(|k| p.at.get_mut(k))
                    .map(std::mem::take)
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The answers computed for group `gi`'s evaluation at query time `qt`, by rule (each
    /// handed out once).
    pub(super) fn take(&mut self, gi: usize, qt: i64) -> Vec<Option<PushedAnswer>> {
        self.steps[gi]
            .iter_mut()
            .map(|s| {
                let s = s.as_mut()?;
                let d = qt.checked_sub(s.first_qt)?;
                if d < 0 || d % s.step != 0 {
                    return None;
                }
                let k = usize::try_from(d / s.step).ok()?;
                s.at.get_mut(k)?.take().map(Ok)
            })
            .collect()
    }
}

/// The query times of group `g`'s evaluations from `first` to at most `last_ts`: the first,
/// the last, and the interval between them.
fn query_times(g: &Group, first: i64, last_ts: i64) -> (i64, i64, i64) {
    let interval = g.interval_ms().max(1000);
    let last = first + (last_ts - first) / interval * interval;
    let offset = g.query_offset_ms();
    (first.saturating_sub(offset), last.saturating_sub(offset), interval)
}

/// The rules that can be computed ahead (module docs), in an order to compute them in: each
/// after the rules it reads.
fn eligible(groups: &[Group], lookback_ms: i64) -> Vec<(usize, usize)> {
    let mut out: Vec<Vec<bool>> = groups.iter().map(|g| vec![false; g.rules().len()]).collect();
    let one_offset = groups
        .windows(2)
        .all(|w| w[0].query_offset_ms() == w[1].query_offset_ms());
    if !one_offset {
        return Vec::new();
    }
    let refs: Vec<&Group> = groups.iter().collect();
    let inputs = deps::inputs(&refs);
    let by_selector = deps::by_selector(&refs);
    for (gi, g) in groups.iter().enumerate() {
        for (ri, rule) in g.rules().iter().enumerate() {
            out[gi][ri] = reads_only_its_past(rule.expr(), lookback_ms)
                && !keeps_by_order(rule.expr())
                // Series of two rules a selector reads are listed in the order the replay
                // wrote them (time first), which the block's writes (rule first) do not keep.
                && by_selector[gi][ri].iter().all(|reads| reads.len() <= 1)
                && inputs[gi][ri].iter().all(|&(gj, rj)| {
                    matches!(groups[gj].rules()[rj], GroupRule::Recording(_))
                        && ((gj, rj) < (gi, ri) || (gj != gi && never_together(&groups[gi], &groups[gj])))
                });
        }
    }
    // Kahn's order over the rules left: a rule goes once every rule it reads went; rules
    // reading a rule not computed ahead, or in a circle of reads, never go.
    let mut waiting: Vec<Vec<usize>> = inputs.iter().map(|g| g.iter().map(Vec::len).collect()).collect();
    let mut readers: Vec<Vec<Vec<(usize, usize)>>> = groups.iter().map(|g| vec![Vec::new(); g.rules().len()]).collect();
    for (gi, g) in inputs.iter().enumerate() {
        for (ri, reads) in g.iter().enumerate() {
            for &(gj, rj) in reads {
                readers[gj][rj].push((gi, ri));
            }
        }
    }
    let mut ready: std::collections::VecDeque<(usize, usize)> = (0..groups.len())
        .flat_map(|gi| (0..groups[gi].rules().len()).map(move |ri| (gi, ri)))
        .filter(|&(gi, ri)| out[gi][ri] && waiting[gi][ri] == 0)
        .collect();
    let mut order = Vec::new();
    while let Some((gi, ri)) = ready.pop_front() {
        order.push((gi, ri));
        for &(g2, r2) in &readers[gi][ri] {
            waiting[g2][r2] -= 1;
            if waiting[g2][r2] == 0 && out[g2][r2] {
                ready.push_back((g2, r2));
            }
        }
    }
    order
}

/// Whether groups `a` and `b` never evaluate at the same time: their slots (offset plus a
/// multiple of the interval) meet only where the offsets agree modulo the intervals' gcd.
fn never_together(a: &Group, b: &Group) -> bool {
    let (ia, ib) = (a.interval_ms().max(1000), b.interval_ms().max(1000));
    let gcd = {
        let (mut x, mut y) = (ia, ib);
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    (a.offset_ms() - b.offset_ms()).rem_euclid(gcd) != 0
}

/// Whether `expr` chooses series by their order on ties (`topk`, `bottomk`, `limitk`,
/// `limit_ratio`): a range query may list a step's series in another order than the instant
/// query does, which changes nothing else a rule computes.
fn keeps_by_order(expr: &Expr) -> bool {
    use promql_parser::parser::token::{T_BOTTOMK, T_LIMITK, T_LIMIT_RATIO, T_TOPK};
    let mut found = false;
    crate::promql::walk_expr(expr, &mut |e| {
        if let Expr::Aggregate(a) = e {
            found |= matches!(a.op.id(), T_TOPK | T_BOTTOMK | T_LIMITK | T_LIMIT_RATIO);
        }
    });
    found
}

/// Whether every sample `expr` reads at time t is at or before t, the same whichever way it
/// is evaluated: no `@ start()` / `@ end()` (their meaning differs in a range query), no
/// window ending after t (a negative offset, an `@` time).
fn reads_only_its_past(expr: &Expr, lookback_ms: i64) -> bool {
    if crate::promql::uses_start_or_end(expr) {
        return false;
    }
    let t = 1_000_000_000_000;
    crate::promql::selector_windows(expr, t, t, lookback_ms).is_ok_and(|w| w.iter().all(|w| w.maxt <= t))
}

/// The answers of `expr` at `first`, `first + step`, ..., `last` from one range query, as the
/// instant queries at those times would give them (`None`: the range query failed).
fn answers(
    engine: &Engine,
    view: &dyn Queryable,
    expr: &Expr,
    first: i64,
    last: i64,
    step: i64,
) -> Option<Vec<Option<Vec<PushedSample>>>> {
    let n = usize::try_from((last - first) / step + 1).ok()?;
    let res = engine.range_query_ast(view, expr, first, last, step).ok()?;
    let Value::Matrix(series) = res.value else {
        return None;
    };
    let mut at: Vec<Vec<PushedSample>> = vec![Vec::new(); n];
    let index = |t: i64| usize::try_from((t - first) / step).ok().filter(|k| *k < n);
    for s in series {
        for (t, v) in s.samples {
            at[index(t)?].push(PushedSample::float(s.metric.clone(), v));
        }
        for (t, h) in s.histograms {
            at[index(t)?].push(PushedSample {
                labels: s.metric.clone(),
                v: 0.0,
                h: Some(h),
            });
        }
    }
    Some(at.into_iter().map(Some).collect())
}

/// Writes into `ahead` what recording rule `r` (rule `ri` of `g`) writes at each step given
/// these answers, as [`Group::eval`] writes it: the renamed samples, and staleness markers for
/// the series of its previous successful evaluation that are gone; a refused answer (labels
/// colliding, over the limit) writes nothing.
fn write_ahead(
    ahead: &mut Store,
    r: &crate::rules::recording::RecordingRule,
    g: &Group,
    ri: usize,
    at: &[Option<Vec<PushedSample>>],
    first_qt: i64,
    step: i64,
) {
    let mut previous = g.previous_series(ri).cloned().unwrap_or_default();
    for (k, answer) in at.iter().enumerate() {
        let t = first_qt + k as i64 * step;
        let Some(answer) = answer else { continue };
        let Ok(samples) = r.outputs_of(answer.clone(), t, g.limit()) else {
            continue;
        };
        previous = crate::rules::group::write_outputs(ahead, samples, &previous, t);
    }
}
