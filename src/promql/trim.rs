//! The trim operators `</` and `>/` (Prometheus 3.x) in promql-parser's AST: the front pass
//! reads them as comparisons ([`super::preparse::TrimOp`]), [`mark`] turns those comparisons
//! back into trim operators with token ids of their own, and [`expr_text`] prints an AST
//! holding them. The arithmetic is `FloatHistogram::trim`; evaluation is in `binary`.

use promql_parser::parser::token::{TokenId, TokenType};
use promql_parser::parser::{BinModifier, BinaryExpr, Expr};

use super::preparse::TrimOp;

/// Token ids for the trim operators, outside promql-parser's range. promql-parser prints them
/// as `unknown token`, which [`expr_text`] replaces.
pub(crate) const T_TRIM_UPPER: TokenId = 0x7f01;
pub(crate) const T_TRIM_LOWER: TokenId = 0x7f02;

/// Whether the operator is `</` or `>/`.
pub(crate) fn is_trim_operator(op: &TokenType) -> bool {
    matches!(op.id(), T_TRIM_UPPER | T_TRIM_LOWER)
}

/// What promql-parser prints for a token id it does not know.
const UNKNOWN_TOKEN: &str = "unknown token";

/// A trim operator whose comparison was not found in the AST (cannot happen for an AST
/// promql-parser made of the rewritten text), or one written with `bool`: Prometheus' parse
/// error and the operator's byte offset in the original text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MarkError {
    pub(crate) message: &'static str,
    pub(crate) offset: usize,
}

/// Makes the comparisons the front pass read for `trims` the trim operators again.
pub(crate) fn mark(ast: &mut Expr, trims: &[TrimOp]) -> Result<(), MarkError> {
    if trims.is_empty() {
        return Ok(());
    }
    let mut seen = 0usize;
    let mut next = trims.iter().peekable();
    in_text_order(ast, &mut |b: &mut BinaryExpr| {
        if !b.op.is_comparison_operator() {
            return;
        }
        if let Some(trim) = next.next_if(|t| t.ordinal == seen) {
            b.op = TokenType::new(if trim.upper { T_TRIM_UPPER } else { T_TRIM_LOWER });
            if let Some(m) = &mut b.modifier {
                m.return_bool = false;
            }
            // As promql-parser leaves an operator without modifiers.
            if b.modifier.as_ref() == Some(&BinModifier::default()) {
                b.modifier = None;
            }
        }
        seen += 1;
    });
    if let Some(lost) = next.next() {
        return Err(MarkError {
            message: "trim operator not found in the parsed expression",
            offset: lost.offset,
        });
    }
    match trims.iter().find(|t| t.with_bool) {
        Some(t) => Err(MarkError {
            message: "bool modifier can only be used on comparison operators",
            offset: t.offset,
        }),
        None => Ok(()),
    }
}

/// Calls `f` on every binary expression, in the order their operators appear in the text (and
/// in promql-parser's printing).
fn in_text_order(e: &mut Expr, f: &mut dyn FnMut(&mut BinaryExpr)) {
    match e {
        Expr::Binary(b) => {
            in_text_order(&mut b.lhs, f);
            f(b);
            in_text_order(&mut b.rhs, f);
        }
        Expr::Aggregate(a) => {
            if let Some(p) = &mut a.param {
                in_text_order(p, f);
            }
            in_text_order(&mut a.expr, f);
        }
        Expr::Unary(u) => in_text_order(&mut u.expr, f),
        Expr::Paren(p) => in_text_order(&mut p.expr, f),
        Expr::Subquery(s) => in_text_order(&mut s.expr, f),
        Expr::Call(c) => {
            for a in &mut c.args.args {
                in_text_order(a, f);
            }
        }
        Expr::VectorSelector(_)
        | Expr::MatrixSelector(_)
        | Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::Extension(_) => {}
    }
}

/// The text of an expression, as promql-parser prints it, with the trim operators written as
/// Prometheus reads them.
pub fn expr_text(e: &Expr) -> String {
    let printed = e.to_string();
    if !printed.contains(UNKNOWN_TOKEN) {
        return printed;
    }
    let mut ops = Vec::new();
    let mut copy = e.clone();
    in_text_order(&mut copy, &mut |b| {
        if is_trim_operator(&b.op) {
            ops.push(if b.op.id() == T_TRIM_UPPER { "</" } else { ">/" });
        }
    });
    replace_unknown_tokens(&printed, &ops)
}

/// Replaces, in order, each ` unknown token` outside string literals by the next of `ops`. Two
/// words in a row outside strings occur in printed PromQL only around keywords, neither of
/// which these are: what is found is an operator.
fn replace_unknown_tokens(printed: &str, ops: &[&str]) -> String {
    let mut out = String::with_capacity(printed.len());
    let mut ops = ops.iter();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut i = 0;
    while i < printed.len() {
        let rest = &printed[i..];
        let c = rest.chars().next().unwrap_or_default();
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' && q != '`' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
        } else if matches!(c, '"' | '\'' | '`') {
            quote = Some(c);
        } else if rest.starts_with(UNKNOWN_TOKEN) && out.ends_with(' ') {
            if let Some(op) = ops.next() {
                out.push_str(op);
                i += UNKNOWN_TOKEN.len();
                continue;
            }
        }
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::{parse, Error};

    fn op_of(e: &Expr) -> (TokenId, Option<BinModifier>) {
        match e {
            Expr::Binary(b) => (b.op.id(), b.modifier.clone()),
            Expr::Paren(p) => op_of(&p.expr),
            other => panic!("not a binary expression: {other:?}"),
        }
    }

    #[test]
    fn trim_operators_parse_with_comparison_precedence() {
        let e = parse("h </ 5").unwrap();
        assert_eq!(op_of(&e), (T_TRIM_UPPER, None));
        let e = parse("h>/5").unwrap();
        assert_eq!(op_of(&e).0, T_TRIM_LOWER);
        // As tight as a comparison: looser than +, tighter than `and`.
        let Expr::Binary(b) = parse("h + h </ 1 + 2").unwrap() else {
            panic!()
        };
        assert_eq!(b.op.id(), T_TRIM_UPPER);
        assert!(matches!(*b.lhs, Expr::Binary(_)) && matches!(*b.rhs, Expr::Binary(_)));
        let Expr::Binary(b) = parse("h </ 1 and h >/ 2").unwrap() else {
            panic!()
        };
        assert_eq!(op_of(&b.lhs).0, T_TRIM_UPPER);
        assert_eq!(op_of(&b.rhs).0, T_TRIM_LOWER);
        // Left-associative with the comparisons; each finds its own operator.
        let Expr::Binary(b) = parse("h > 1 </ 2 == 3 >/ 4").unwrap() else {
            panic!()
        };
        assert_eq!(b.op.id(), T_TRIM_LOWER);
        let Expr::Binary(l) = &*b.lhs else { panic!() };
        assert_eq!(l.op.to_string(), "==");
        let Expr::Binary(ll) = &*l.lhs else { panic!() };
        assert_eq!(ll.op.id(), T_TRIM_UPPER);
        // Vector matching is kept; `bool` added by the front pass is not.
        let (op, m) = op_of(&parse("h >/ on (a) group_left (b) f").unwrap());
        let m = m.unwrap();
        assert_eq!(op, T_TRIM_LOWER);
        assert!(!m.return_bool && m.matching.is_some());
        // Two scalars parse (Prometheus refuses them when evaluating).
        assert_eq!(op_of(&parse("1 </ 2").unwrap()).0, T_TRIM_UPPER);
        // Comparisons around it, inside braces or strings, do not shift which one is trimmed.
        let e = parse(r#"sum(x{a!="<"} != 1) </ count(y == bool 2) >= label_replace(z, "a", "</", "b", "c")"#).unwrap();
        let text = expr_text(&e);
        assert_eq!(
            text,
            r#"sum(x{a!="<"} != 1) </ count(y == bool 2) >= label_replace(z, "a", "</", "b", "c")"#
        );
    }

    #[test]
    fn trim_operator_errors_point_at_the_operator() {
        let err = |q: &str| match parse(q) {
            Err(Error::Parse { message, line, col }) => (message, line, col),
            other => panic!("{q}: {other:?}"),
        };
        assert_eq!(
            err("foo </ bool 5"),
            (
                "bool modifier can only be used on comparison operators".to_string(),
                1,
                5
            )
        );
        assert_eq!(
            err("foo + (x\n  >/ BOOL on(a) y)"),
            (
                "bool modifier can only be used on comparison operators".to_string(),
                2,
                3
            )
        );
        // promql-parser's own errors stay theirs, where they are for a comparison.
        let (message, line, col) = err("foo[5m] </ 2");
        assert_eq!(
            message,
            "binary expression must contain only scalar and instant vector types"
        );
        let (_, cline, ccol) = err("foo[5m] <  2");
        assert_eq!((line, col), (cline, ccol));
        assert!(matches!(parse("foo </"), Err(Error::Parse { .. })));
        assert!(matches!(parse("foo </ bar baz"), Err(Error::Parse { .. })));
        // A `/` apart from `<` is a division after a comparison, a syntax error.
        assert!(matches!(parse("foo < / 2"), Err(Error::Parse { .. })));
    }

    #[test]
    fn printing_round_trips() {
        for q in [
            "h </ 5",
            "histogram_count(h >/ -Inf) / sum(h2 </ on (a) f)",
            r#"topk(2, h{a="unknown token"} </ 1) >/ 2"#,
            "-(h </ 2) </ 3",
        ] {
            let e = parse(q).unwrap();
            let text = expr_text(&e);
            // Only the label value keeps the words.
            assert_eq!(
                text.matches(UNKNOWN_TOKEN).count(),
                q.matches(UNKNOWN_TOKEN).count(),
                "{text}"
            );
            let back = parse(&text).unwrap_or_else(|err| panic!("{text}: {err}"));
            assert_eq!(back, e, "{q} printed as {text}");
            assert!(text.contains("</") || text.contains(">/"));
        }
        let e = parse(r#"h{a="unknown token"} < 1"#).unwrap();
        assert_eq!(expr_text(&e), e.to_string());
    }
}
