//! The nesting bound of PromQL text, checked before anything parses it. promql-parser, the front
//! pass and the evaluator all recurse over the expression tree, so a client's `abs(abs(…))`
//! 2,000 deep, 20,000 unary minus signs or `1+1+…` with 5,000 terms would overflow a thread's
//! stack and abort the process. This is one linear scan of the text that bounds the depth of the
//! tree the parser would build from above, so anything under [`MAX_DEPTH`] is safe to parse and
//! evaluate; Prometheus has no such limit (Go's stacks grow), real queries nest a few dozen deep.

/// The deepest expression tree accepted: each bracket level counts one, and each operator
/// (binary or unary) counts one within its bracket level (a chain `a + b + c` nests left).
/// Nested function calls are the costliest shape: about 33 KB of stack a level in the
/// unoptimised build (254 levels overflowed 8 MiB), far less optimised.
pub const MAX_DEPTH: usize = 128;

/// The stack of the threads that parse and evaluate queries (`run`'s and `serve`'s runtimes,
/// and so the query API, the rules and their templates): the default 2 MiB holds fewer than
/// [`MAX_DEPTH`] nested calls in the unoptimised build.
pub const QUERY_STACK_KB: usize = 8 * 1024;

/// Where the text first goes past `max` levels, as a byte offset, with the depth found so far
/// (at least `max + 1`); `None` when it stays within `max`.
pub(crate) fn too_deep(expr: &str, max: usize) -> Option<(usize, usize)> {
    /// One bracket level: the operators and the deepest child of the current argument
    /// (comma-separated arguments are siblings), and the deepest argument before it.
    struct Level {
        open: usize,
        /// Inside `{…}`: label matchers, whose `=`, `!=`, `=~` are no operators.
        braces: bool,
        ops: usize,
        child: usize,
        best: usize,
    }
    impl Level {
        fn new(open: usize, braces: bool) -> Self {
            Level {
                open,
                braces,
                ops: 0,
                child: 0,
                best: 0,
            }
        }
        fn cost(&self) -> usize {
            self.best.max(self.ops + self.child) + 1
        }
    }
    // Where a level goes over: at the operator that takes it over, or at its opening bracket.
    let over = |l: &Level, at: usize| (l.cost() > max).then_some((at, l.cost()));
    let b = expr.as_bytes();
    let mut stack = vec![Level::new(0, false)];
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => {
                // A string literal (no operator, no bracket); backquotes have no escapes.
                i += 1;
                while i < b.len() && b[i] != c {
                    if b[i] == b'\\' && c != b'`' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                stack.push(Level::new(i, c == b'{'));
                if stack.len() > max {
                    return Some((i, stack.len()));
                }
            }
            b')' | b']' | b'}' if stack.len() > 1 => {
                let done = stack.pop().expect("more than the root");
                if let Some(hit) = over(&done, done.open) {
                    return Some(hit);
                }
                let top = stack.last_mut().expect("the root");
                top.child = top.child.max(done.cost());
            }
            b',' => {
                let top = stack.last_mut().expect("the root");
                top.best = top.best.max(top.ops + top.child);
                top.ops = 0;
                top.child = 0;
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'=' | b'!' | b'<' | b'>' => {
                // `==`, `>=`, `</` are one operator; in `--1` each sign is a unary level.
                let top = stack.last_mut().expect("the root");
                if !top.braces {
                    while i + 1 < b.len() && matches!(b[i + 1], b'=' | b'!' | b'<' | b'>' | b'/' | b'~') {
                        i += 1;
                    }
                    top.ops += 1;
                    if let Some(hit) = over(top, i) {
                        return Some(hit);
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i + 1 < b.len() && (b[i + 1].is_ascii_alphanumeric() || matches!(b[i + 1], b'_' | b':')) {
                    i += 1;
                }
                let word = &expr[start..=i];
                let top = stack.last_mut().expect("the root");
                if !top.braces
                    && ["and", "or", "unless", "atan2"]
                        .iter()
                        .any(|k| word.eq_ignore_ascii_case(k))
                {
                    top.ops += 1;
                    if let Some(hit) = over(top, start) {
                        return Some(hit);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    // Unclosed levels (the parser refuses them) still count.
    while let Some(done) = stack.pop() {
        if let Some(hit) = over(&done, done.open) {
            return Some(hit);
        }
        if let Some(top) = stack.last_mut() {
            top.child = top.child.max(done.cost());
        }
    }
    None
}

/// The message of an expression over the bound.
pub(crate) fn message(max: usize) -> String {
    format!(
        "expression nests deeper than the limit of {max} levels (brackets, function calls, aggregations and operators each count one)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(e: &str) -> usize {
        // The smallest bound the text stays within.
        (1..10_000).find(|&m| too_deep(e, m).is_none()).unwrap()
    }

    #[test]
    fn counts_brackets_and_operators() {
        assert_eq!(depth("up"), 1);
        assert_eq!(depth("abs(up)"), 2);
        assert_eq!(depth("sum by (job) (rate(x{a=~\"b|c\", d!=\"e\"}[5m]))"), 4);
        assert_eq!(depth("1+1+1"), 3);
        assert_eq!(depth("- - -1"), 4);
        // Arguments are siblings: the deepest one counts.
        assert_eq!(depth("clamp(1+1+1, 2, 3)"), 4);
        assert_eq!(depth("a or b unless c and d"), 4);
        // Strings and comments hold no structure.
        assert_eq!(depth("x{a=\"((((((\"} # (((((\n"), 2);
    }

    /// Every shape just within the bound parses and evaluates on a thread with the stack that
    /// runs queries ([`QUERY_STACK_KB`]), in the unoptimised build too.
    #[test]
    fn the_deepest_accepted_expressions_evaluate_on_a_small_stack() {
        let n: usize = std::env::var("WF_DEPTH_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(MAX_DEPTH - 2);
        let shapes = [
            format!("{}up{}", "abs(".repeat(n), ")".repeat(n)),
            format!("{}up{}", "sum(".repeat(n), ")".repeat(n)),
            format!("{}up{}", "(".repeat(n), ")".repeat(n)),
            format!("{}1", "-".repeat(n)),
            vec!["up"; n].join(" + "),
            vec!["up"; n].join(" or "),
            // Subqueries multiply their steps: a few levels, each over its bracket level.
            format!("{}up{}", "max_over_time((".repeat(4), ")[2m:1m])".repeat(4)),
        ];
        // WF_DEPTH_STACK_KB and WF_DEPTH_SHAPE measure one shape at one stack size.
        let stack_kb: usize = std::env::var("WF_DEPTH_STACK_KB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(QUERY_STACK_KB);
        let only: Option<usize> = std::env::var("WF_DEPTH_SHAPE").ok().and_then(|v| v.parse().ok());
        let shapes: Vec<String> = shapes
            .into_iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|o| o == *i))
            .map(|(_, s)| s)
            .collect();
        std::thread::Builder::new()
            .stack_size(stack_kb << 10)
            .spawn(move || {
                let mut store = crate::tsdb::Store::new();
                store.append(&crate::labels::Labels::from_pairs([("__name__", "up")]), 0, 1.0);
                let engine = crate::promql::Engine::default();
                for q in &shapes {
                    assert!(too_deep(q, MAX_DEPTH).is_none(), "{}", &q[..40]);
                    engine
                        .instant_query(&store, q, 60_000)
                        .unwrap_or_else(|e| panic!("{}: {e}", &q[..40]));
                    engine
                        .range_query(&store, q, 0, 120_000, 60_000)
                        .unwrap_or_else(|e| panic!("{}: {e}", &q[..40]));
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn refused_with_a_parse_error_at_its_position() {
        let q = format!("up + {}1", "-".repeat(20_000));
        match crate::promql::parse(&q) {
            Err(crate::promql::Error::Parse { message, line, col }) => {
                assert!(message.contains("limit of 128"), "{message}");
                assert_eq!(line, 1);
                assert!(col > 1, "{col}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hostile_shapes_are_refused_early() {
        let terms = vec!["1"; 5_000].join("+");
        assert!(too_deep(&terms, MAX_DEPTH).is_some());
        let abs = format!("{}1{}", "abs(".repeat(2_000), ")".repeat(2_000));
        assert!(too_deep(&abs, MAX_DEPTH).is_some());
        let ok = format!("{}1{}", "abs(".repeat(MAX_DEPTH - 1), ")".repeat(MAX_DEPTH - 1));
        assert_eq!(too_deep(&ok, MAX_DEPTH), None);
        assert!(too_deep(&format!("{}1", "-".repeat(20_000)), MAX_DEPTH).is_some());
        assert!(too_deep(&format!("{}1", "sum(".repeat(20_000)), MAX_DEPTH).is_some());
        assert!(too_deep(&format!("{}1", "- ".repeat(20_000)), MAX_DEPTH).is_some());
    }
}
