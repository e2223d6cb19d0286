//! A front pass over query text for the syntax Prometheus 3.x reads (some of it behind its
//! `promql-duration-expr` feature flag) and promql-parser 0.11 does not: duration expressions in
//! range selectors, subquery ranges and steps, and offsets (`[5m+1m]`, `[1h/2]`,
//! `[29s+1s:20*500ms]`, `offset (1h / 2)`, `offset -step()`, `min_of(a, b)`, `max_of(a, b)`),
//! where `step()` and `range()` stand for the query's step and range.
//!
//! Each construct is evaluated with Prometheus' rules (`promql/durations.go`: arithmetic on
//! float seconds, numbers are seconds, the result cut to whole milliseconds; a range or step must
//! be positive) and replaced by the literal promql-parser reads, so that promql-parser stays the
//! parser of record and its AST is the one the engine evaluates. The `anchored` and `smoothed`
//! range modifiers become a marker matcher on their selector (see `extended`). `step()` and
//! `range()` are both 0 for an instant query, as in Prometheus (as functions outside durations
//! promql-parser reads them, and the engine evaluates them). Text without these constructs is
//! left as it is.

use std::borrow::Cow;
use std::time::Duration;

/// The query a text is parsed for: what `step()` and `range()` in durations stand for. The
/// default is an instant query's (both 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryTimes {
    /// The step of a range query; 0 for an instant query.
    pub step_ms: i64,
    /// `end - start`; 0 for an instant query.
    pub range_ms: i64,
}

impl QueryTimes {
    /// A range query.
    pub fn range(start: i64, end: i64, step: i64) -> Self {
        QueryTimes {
            step_ms: step,
            range_ms: end - start,
        }
    }
}

/// The rewritten text, and how to find an offset of it in the original.
#[derive(Debug)]
pub(crate) struct Rewritten<'a> {
    pub(crate) text: Cow<'a, str>,
    /// (original span, replacement length), in order.
    edits: Vec<(usize, usize, usize)>,
    /// The `anchored` and `smoothed` modifiers read: each keyword is taken out of the text and
    /// its selector marked with [`MODIFIER_MARKER`].
    pub(crate) extended: Vec<Extended>,
    /// Prometheus' evaluation error for a label name that is not UTF-8 (a Go string literal's
    /// `\xc5` is a byte, which promql-parser reads as the character U+00C5).
    pub(crate) bad_label_name: Option<String>,
    /// Whether an `info()` label selector got the marker matcher (see `info::SELECTOR_MARKER`).
    pub(crate) info_marker: bool,
    /// The trim operators `</` and `>/` read (rewritten to comparisons, see [`TrimOp`]).
    pub(crate) trims: Vec<TrimOp>,
    /// Byte offsets (in the original) of the duration expressions read (`[5m+1m]`,
    /// `offset (1h / 2)`): Prometheus reads them only with `promql-duration-expr`.
    pub(crate) durations: Vec<usize>,
}

/// Prometheus' extended range selectors (`promql-extended-range-selectors`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeModifier {
    Anchored,
    Smoothed,
}

impl RangeModifier {
    pub(crate) fn name(self) -> &'static str {
        match self {
            RangeModifier::Anchored => "anchored",
            RangeModifier::Smoothed => "smoothed",
        }
    }

    /// The functions Prometheus allows the modifier's range selectors in, sorted as its
    /// message lists them.
    fn safe_functions(self) -> &'static [&'static str] {
        match self {
            RangeModifier::Anchored => &["changes", "delta", "increase", "rate", "resets"],
            RangeModifier::Smoothed => &["delta", "increase", "rate"],
        }
    }
}

/// An `anchored` or `smoothed` modifier of the query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Extended {
    pub(crate) kind: RangeModifier,
    /// Byte offset of the keyword in the original text.
    pub(crate) offset: usize,
    /// The function its range selector is passed to, when Prometheus refuses the modifier there.
    unsafe_function: Option<String>,
    /// What the modifier stands after.
    pub(crate) target: Modified,
}

/// What a modifier modifies: only selectors take one (Prometheus' `setAnchored`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Modified {
    /// A selector, now carrying the [`MODIFIER_MARKER`] matcher.
    Selector,
    Subquery,
    /// Anything else (a call, a literal, a parenthesis).
    Other,
    /// Another modifier, the same (nothing more to mark) or the other one.
    Modifier {
        same: bool,
    },
}

/// The label matcher the front pass adds to a selector followed by `anchored` or `smoothed`
/// (`foo[1m] anchored` is read as `foo{__watchfire_range_modifier__="anchored"}[1m]`):
/// promql-parser's AST has no place for the modifier, so it travels as a matcher until
/// `extended::take_markers` moves it onto the parsed selector. Were it ever to reach a source,
/// it would select nothing (no series has the label), never too much.
pub(crate) const MODIFIER_MARKER: &str = "__watchfire_range_modifier__";

impl Extended {
    /// Prometheus' parse error for a modifier on something other than a selector.
    pub(crate) fn misplaced(&self) -> Option<String> {
        match self.target {
            Modified::Selector | Modified::Modifier { same: true } => None,
            Modified::Modifier { same: false } => {
                Some("anchored and smoothed modifiers cannot be used together".into())
            }
            Modified::Subquery => Some(format!("{} modifier is not supported for subqueries", self.kind.name())),
            Modified::Other => Some(format!("{} modifier not implemented", self.kind.name())),
        }
    }

    /// Prometheus' evaluation error for a function the modifier cannot be used with.
    pub(crate) fn refusal(&self) -> Option<String> {
        let f = self.unsafe_function.as_ref()?;
        Some(format!(
            "{} modifier can only be used with: {} - not with {f}",
            self.kind.name(),
            self.kind.safe_functions().join(", ")
        ))
    }
}

impl Rewritten<'_> {
    /// The offset in the original text of byte `off` of the rewritten one (a replaced span maps
    /// to where it started).
    pub(crate) fn original_offset(&self, off: usize) -> usize {
        let mut delta: isize = 0;
        for &(start, end, new_len) in &self.edits {
            let new_start = (start as isize + delta) as usize;
            if off < new_start {
                break;
            }
            if off < new_start + new_len {
                return start;
            }
            delta += new_len as isize - (end - start) as isize;
        }
        (off as isize - delta).max(0) as usize
    }
}

/// An error in a construct of the front pass: Prometheus' message, at a byte offset of the
/// original text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreparseError {
    pub(crate) message: String,
    pub(crate) offset: usize,
}

impl PreparseError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        PreparseError {
            message: message.into(),
            offset,
        }
    }
}

/// Rewrites the constructs promql-parser cannot read. A construct that does not parse as
/// Prometheus would read it is left as written, for promql-parser's own error.
pub(crate) fn preparse<'a>(expr: &'a str, times: &QueryTimes) -> Result<Rewritten<'a>, PreparseError> {
    let toks = lex(expr);
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut extended = Vec::new();
    let mut bad_label_name = None;
    let mut info_marker = false;
    let mut trims = Vec::new();
    let mut durations = Vec::new();
    let mut comparisons = 0usize;
    let mut brace_depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        let text = &expr[t.start..t.end];
        if t.kind == Kind::Str && brace_depth == 0 && bad_label_name.is_none() {
            bad_label_name = not_utf8_label_name(expr, &toks, i);
        }
        if t.kind == Kind::Punct {
            match text {
                "{" if brace_depth == 0 && is_info_selector(expr, &toks, i) => {
                    // promql-parser wants a matcher that does not match the empty string;
                    // Prometheus does not ask that of info()'s label selector.
                    let closes = toks.get(i + 1).is_some_and(|n| tok_is(expr, n, "}"));
                    let sep = if closes { "" } else { ", " };
                    edits.push((t.end, t.end, format!("{}=~\".+\"{sep}", super::info::SELECTOR_MARKER)));
                    info_marker = true;
                    brace_depth += 1;
                }
                "{" => brace_depth += 1,
                "}" => brace_depth = brace_depth.saturating_sub(1),
                "==" | "!=" | "<" | ">" | "<=" | ">=" if brace_depth == 0 => {
                    if let Some((trim, edit)) = trim_op(expr, &toks, i, comparisons) {
                        trims.push(trim);
                        edits.push(edit);
                    }
                    comparisons += 1;
                }
                "[" if brace_depth == 0 => {
                    let before = edits.len();
                    i = bracket(expr, &toks, i, times, &mut edits)?;
                    durations.extend(edits[before..].iter().map(|e| e.0));
                    continue;
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        if brace_depth == 0 && matches!(t.kind, Kind::Number(_)) && text.contains('_') {
            // Prometheus 3 reads `1_000` and `0x_ff`; promql-parser does not.
            edits.push((t.start, t.end, text.replace('_', "")));
        }
        if brace_depth > 0 || t.kind != Kind::Ident {
            i += 1;
            continue;
        }
        if text.eq_ignore_ascii_case("offset") && i > 0 && ends_modified(expr, &toks[i - 1]) {
            i = offset(expr, &toks, i, times, &mut edits, &mut durations)?;
            continue;
        }
        let modifier = if text.eq_ignore_ascii_case("anchored") {
            Some(RangeModifier::Anchored)
        } else if text.eq_ignore_ascii_case("smoothed") {
            Some(RangeModifier::Smoothed)
        } else {
            None
        };
        if let Some(kind) = modifier.filter(|_| i > 0 && ends_modified(expr, &toks[i - 1])) {
            let (matrix, function) = modified_context(expr, &toks, i);
            let previous = extended
                .last()
                .filter(|x: &&Extended| x.offset == toks[i - 1].start)
                .map(|x| x.kind);
            let target = match previous.map(|k| k == kind).map(|same| Err(Modified::Modifier { same })) {
                Some(repeated) => repeated,
                None => modified_selector(expr, &toks, i),
            };
            let target = match target {
                Ok(at) => {
                    // The keyword goes; a marker matcher on the selector says what it was.
                    let marker = format!("{MODIFIER_MARKER}=\"{}\"", kind.name());
                    let text = match at {
                        MarkerAt::Name(_) => format!("{{{marker}}}"),
                        MarkerAt::Braces { comma: true, .. } => format!(",{marker}"),
                        MarkerAt::Braces { comma: false, .. } => marker,
                    };
                    let (MarkerAt::Name(pos) | MarkerAt::Braces { pos, .. }) = at;
                    edits.push((pos, pos, text));
                    Modified::Selector
                }
                Err(other) => other,
            };
            extended.push(Extended {
                kind,
                offset: t.start,
                unsafe_function: function.filter(|f| matrix && !kind.safe_functions().contains(&f.as_str())),
                target,
            });
            edits.push((toks[i - 1].end, t.end, String::new()));
        }
        i += 1;
    }
    // Markers are inserted before edits already made further right.
    edits.sort_by_key(|e| (e.0, e.1));
    if edits.is_empty() {
        return Ok(Rewritten {
            text: Cow::Borrowed(expr),
            edits: Vec::new(),
            extended,
            bad_label_name,
            info_marker,
            trims,
            durations,
        });
    }
    let mut out = String::with_capacity(expr.len());
    let mut at = 0;
    let mut spans = Vec::new();
    for (start, end, new) in &edits {
        out.push_str(&expr[at..*start]);
        out.push_str(new);
        spans.push((*start, *end, new.len()));
        at = *end;
    }
    out.push_str(&expr[at..]);
    Ok(Rewritten {
        text: Cow::Owned(out),
        edits: spans,
        extended,
        bad_label_name,
        info_marker,
        trims,
        durations,
    })
}

/// Whether the `{` at `toks[i]` opens a bare label selector as `info()`'s second argument.
fn is_info_selector(expr: &str, toks: &[Tok], i: usize) -> bool {
    if i == 0 || !tok_is(expr, &toks[i - 1], ",") {
        return false;
    }
    matches!(call_argument(expr, toks, i), Some((name, 1)) if name == "info")
}

/// The call (its lowercased name) and the argument index of the token `toks[i]`, when it is
/// inside a call's parentheses.
fn call_argument(expr: &str, toks: &[Tok], i: usize) -> Option<(String, usize)> {
    let (mut depth, mut arg) = (0usize, 0usize);
    let mut j = i;
    let open = loop {
        j = j.checked_sub(1)?;
        match &expr[toks[j].start..toks[j].end] {
            ")" | "]" | "}" => depth += 1,
            "(" | "[" | "{" if depth > 0 => depth -= 1,
            "(" => break j,
            "," if depth == 0 => arg += 1,
            _ => {}
        }
    };
    let mut f = open.checked_sub(1)?;
    // `count_values by (x) ("label", v)`: skip the grouping.
    if tok_is(expr, &toks[f], ")") {
        while f > 0 && !tok_is(expr, &toks[f], "(") {
            f -= 1;
        }
        f = f.checked_sub(2)?;
    }
    Some((expr[toks[f].start..toks[f].end].to_ascii_lowercase(), arg))
}

/// Prometheus' error when the string literal `toks[i]` is a label name to be created
/// (`count_values`' label, `label_replace`'s and `label_join`'s destination) and its bytes, read
/// as Go reads the literal, are not UTF-8.
fn not_utf8_label_name(expr: &str, toks: &[Tok], i: usize) -> Option<String> {
    let bytes = go_literal_bytes(&expr[toks[i].start..toks[i].end]);
    if std::str::from_utf8(&bytes).is_ok() {
        return None;
    }
    let (name, arg) = call_argument(expr, toks, i)?;
    let quoted = go_quote_bytes(&bytes);
    match (name.as_str(), arg) {
        ("count_values", 0) => Some(format!("invalid label name {quoted}")),
        ("label_replace" | "label_join", 1) => Some(format!("invalid destination label name in {name}(): {quoted}")),
        _ => None,
    }
}

/// The bytes of a Go string literal (quotes included in `lit`): `\xHH` and octal escapes are
/// bytes, not characters.
fn go_literal_bytes(lit: &str) -> Vec<u8> {
    let b = lit.as_bytes();
    // Unterminated (the parser refuses it at its position): no closing quote to drop, and the
    // last byte may be inside a character.
    if b.len() < 2 || b[b.len() - 1] != b[0] {
        return b.get(1..).unwrap_or_default().to_vec();
    }
    if b[0] == b'`' {
        return b[1..b.len() - 1].to_vec();
    }
    // Both ends are ASCII quotes: character boundaries.
    let inner = &lit[1..lit.len() - 1];
    let ib = inner.as_bytes();
    let mut out = Vec::with_capacity(ib.len());
    let mut k = 0;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    while k < ib.len() {
        if ib[k] != b'\\' || k + 1 >= ib.len() {
            out.push(ib[k]);
            k += 1;
            continue;
        }
        let c = ib[k + 1];
        let simple = match c {
            b'a' => Some(7),
            b'b' => Some(8),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(11),
            b'\\' | b'\'' | b'"' => Some(c),
            _ => None,
        };
        if let Some(v) = simple {
            out.push(v);
            k += 2;
            continue;
        }
        let digits = match c {
            b'x' => 2,
            b'u' => 4,
            b'U' => 8,
            b'0'..=b'7' => 3,
            _ => 0,
        };
        let (from, to) = if c.is_ascii_digit() {
            (k + 1, k + 4)
        } else {
            (k + 2, k + 2 + digits)
        };
        let value = inner.get(from..to).and_then(|d| {
            if c.is_ascii_digit() {
                u32::from_str_radix(d, 8).ok()
            } else {
                hex(d)
            }
        });
        match (c, value) {
            (b'x' | b'0'..=b'7', Some(v)) if v <= 0xff => out.push(v as u8),
            (b'u' | b'U', Some(v)) => {
                let ch = char::from_u32(v).unwrap_or(char::REPLACEMENT_CHARACTER);
                out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
            }
            // Not an escape Go reads: the parser reports it; keep the text.
            _ => {
                out.extend_from_slice(&ib[k..to.min(ib.len())]);
            }
        }
        k = to.min(ib.len()).max(k + 2);
    }
    out
}

/// Go's `strconv.Quote` of a byte string: bytes that are not UTF-8 as `\xHH`.
fn go_quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        let valid = crate::gofmt::quote(chunk.valid());
        out.push_str(&valid[1..valid.len() - 1]);
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('"');
    out
}

/// A range or subquery selector starting at the `[` at `open`: rewrites the range and the step
/// when they are expressions; returns the index after the closing `]` (or after `[` when the
/// brackets do not hold what Prometheus reads there).
fn bracket(
    expr: &str,
    toks: &[Tok],
    open: usize,
    times: &QueryTimes,
    edits: &mut Vec<(usize, usize, String)>,
) -> Result<usize, PreparseError> {
    let mut p = DurParser::new(expr, toks, open + 1, times);
    let Some(range) = p.positive_part(&[":", "]"])? else {
        return Ok(open + 1);
    };
    let mut pending = vec![range];
    if tok_is(expr, &toks[p.i], ":") {
        p.i += 1;
        if p.i < toks.len() && !tok_is(expr, &toks[p.i], "]") {
            let Some(step) = p.positive_part(&["]"])? else {
                return Ok(open + 1);
            };
            pending.push(step);
        }
    }
    // `positive_part` stops only before a terminator it was given.
    for part in pending.into_iter().flatten() {
        edits.push(part);
    }
    Ok(p.i + 1)
}

/// `offset` at `at`: rewrites its duration when it is an expression (or zero, which
/// promql-parser refuses and Prometheus reads as no offset); returns the index after it.
fn offset(
    expr: &str,
    toks: &[Tok],
    at: usize,
    times: &QueryTimes,
    edits: &mut Vec<(usize, usize, String)>,
    durations: &mut Vec<usize>,
) -> Result<usize, PreparseError> {
    let mut p = DurParser::new(expr, toks, at + 1, times);
    let first = at + 1;
    let Ok(node) = p.offset_expr() else {
        return Ok(at + 1);
    };
    let last = p.i;
    let plain = node.plain;
    let secs = node.eval()?;
    let ms = to_millis(secs, node.start)?;
    let span_end = toks[last - 1].end;
    if ms == 0 {
        edits.push((toks[at - 1].end, span_end, String::new()));
    }
    if !plain {
        durations.push(toks[first].start);
    }
    if ms != 0 && !plain {
        let lit = display_duration(&Duration::from_millis(ms.unsigned_abs()));
        let text = if ms < 0 { format!("-{lit}") } else { lit };
        edits.push((toks[first].start, span_end, text));
    }
    Ok(last)
}

/// Whether a token can end what `offset`, `anchored` and `smoothed` modify: a selector, its
/// range, or its `offset`/`@` modifier (`foo @ 100 offset 1m`).
fn ends_modified(expr: &str, t: &Tok) -> bool {
    ends_operand(expr, t) || matches!(t.kind, Kind::Number(_) | Kind::Duration(_))
}

/// Where a selector takes the marker matcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MarkerAt {
    /// Right after a bare metric name (the marker comes in braces of its own).
    Name(usize),
    /// Before the closing brace; `comma` when a matcher precedes it without one.
    Braces { pos: usize, comma: bool },
}

/// The selector a modifier at `at` stands after, walking back over its `offset` and `@`
/// modifiers and its range; else what the modifier stands after instead.
fn modified_selector(expr: &str, toks: &[Tok], at: usize) -> Result<MarkerAt, Modified> {
    let text = |t: &Tok| &expr[t.start..t.end];
    // Whether the tokens before index `k` (exclusive) end with `offset` or `@`, possibly
    // followed by a sign: then what stands at `k` is that modifier's argument. Returns the
    // index of the `offset`/`@` token.
    let modifier_before = |k: usize| -> Option<usize> {
        let mut k = k.checked_sub(1)?;
        if matches!(text(&toks[k]), "-" | "+") && toks[k].kind == Kind::Punct {
            k = k.checked_sub(1)?;
        }
        let t = &toks[k];
        ((t.kind == Kind::Punct && text(t) == "@") || (t.kind == Kind::Ident && text(t).eq_ignore_ascii_case("offset")))
            .then_some(k)
    };
    let mut j = at;
    while j > 0 {
        j -= 1;
        let t = &toks[j];
        match (t.kind, text(t)) {
            (Kind::Punct, "]") => {
                let open = matching_open(expr, toks, j, "[", "]").ok_or(Modified::Other)?;
                let colon = (open + 1..j).any(|k| tok_is(expr, &toks[k], ":"));
                if colon {
                    return Err(Modified::Subquery);
                }
                j = open;
            }
            (Kind::Punct, ")") => {
                // A modifier's argument (`@ start()`, `offset (1m+1m)`), else the operand.
                let open = matching_open(expr, toks, j, "(", ")").ok_or(Modified::Other)?;
                let named = open > 0
                    && toks[open - 1].kind == Kind::Ident
                    && !text(&toks[open - 1]).eq_ignore_ascii_case("offset");
                let head = if named { open - 1 } else { open };
                j = modifier_before(head).ok_or(Modified::Other)?;
            }
            (Kind::Number(_) | Kind::Duration(_), _) => {
                j = modifier_before(j).ok_or(Modified::Other)?;
            }
            (Kind::Punct, "}") => {
                let prev = j.checked_sub(1).map_or("{", |k| text(&toks[k]));
                return Ok(MarkerAt::Braces {
                    pos: t.start,
                    comma: prev != "{" && prev != ",",
                });
            }
            (Kind::Ident, _) => return Ok(MarkerAt::Name(t.end)),
            _ => return Err(Modified::Other),
        }
    }
    Err(Modified::Other)
}

/// The index of the `open` token matching the `close` token at `at`.
fn matching_open(expr: &str, toks: &[Tok], at: usize, open: &str, close: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = at + 1;
    while j > 0 {
        j -= 1;
        if tok_is(expr, &toks[j], close) {
            depth += 1;
        } else if tok_is(expr, &toks[j], open) {
            depth -= 1;
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

/// Whether the selector a modifier at `at` stands after has a range (a `]` at its level), and
/// the function whose argument it is (the name before the enclosing parenthesis).
fn modified_context(expr: &str, toks: &[Tok], at: usize) -> (bool, Option<String>) {
    let mut depth = 0i32;
    let mut matrix = false;
    // Past a comma the range would be another argument's.
    let mut crossed = false;
    let mut j = at;
    while j > 0 {
        j -= 1;
        let t = &toks[j];
        if t.kind != Kind::Punct {
            continue;
        }
        match &expr[t.start..t.end] {
            ")" | "}" => depth += 1,
            "]" => {
                if depth == 0 && !crossed {
                    matrix = true;
                }
                depth += 1;
            }
            "[" | "{" => depth -= 1,
            "(" if depth == 0 => {
                let name = j
                    .checked_sub(1)
                    .map(|k| &toks[k])
                    .filter(|t| t.kind == Kind::Ident)
                    .map(|t| expr[t.start..t.end].to_ascii_lowercase());
                return (matrix, name);
            }
            "(" => depth -= 1,
            "," if depth == 0 => crossed = true,
            _ => {}
        }
    }
    (matrix, None)
}

/// Whether a token ends an operand, so that a following `offset` is the modifier.
fn ends_operand(expr: &str, t: &Tok) -> bool {
    match t.kind {
        Kind::Ident => !matches!(
            expr[t.start..t.end].to_ascii_lowercase().as_str(),
            "by" | "without" | "on" | "ignoring" | "group_left" | "group_right" | "bool" | "and" | "or" | "unless"
        ),
        Kind::Punct => matches!(&expr[t.start..t.end], "}" | "]" | ")"),
        _ => false,
    }
}

fn is_empty_call(expr: &str, toks: &[Tok], i: usize) -> bool {
    i + 2 < toks.len() && tok_is(expr, &toks[i + 1], "(") && tok_is(expr, &toks[i + 2], ")")
}

fn tok_is(expr: &str, t: &Tok, s: &str) -> bool {
    t.kind == Kind::Punct && &expr[t.start..t.end] == s
}

/// Prometheus' conversion of a duration expression's seconds (`calculateDuration`): finite,
/// within `time.Duration`, cut (not rounded) to whole milliseconds.
fn to_millis(secs: f64, at: usize) -> Result<i64, PreparseError> {
    if secs.is_nan() || secs.is_infinite() {
        return Err(PreparseError::new(at, "duration is NaN or infinite"));
    }
    let bound = (1u64 << 63) as f64 / 1e9;
    if secs > bound || secs < -bound {
        return Err(PreparseError::new(at, "duration is out of range"));
    }
    Ok((secs * 1000.0) as i64)
}

use promql_parser::util::display_duration;

// ---------------------------------------------------------------------------------------------
// The trim operators.

/// A trim operator of the query (Prometheus 3.x: `</` keeps what lies below the right operand,
/// `>/` what lies above it), which promql-parser has no token for. It is read as the comparison
/// `<` / `>` with `bool` (the same precedence and vector matching, and no refusal of two scalar
/// operands); after parsing, [`super::trim::mark`] finds the comparison by `ordinal` and makes
/// it the trim operator again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TrimOp {
    /// `</` (else `>/`).
    pub(crate) upper: bool,
    /// Its place among the query's comparison operators, in text order.
    pub(crate) ordinal: usize,
    /// Byte offset of the operator in the original text.
    pub(crate) offset: usize,
    /// Whether `bool` follows it, which Prometheus refuses on anything but a comparison.
    pub(crate) with_bool: bool,
}

/// The trim operator starting at the `<` or `>` token `at` (the `/` right behind it, as
/// Prometheus' lexer reads it), with the edit that makes it a comparison; `None` for a plain
/// comparison.
fn trim_op(expr: &str, toks: &[Tok], at: usize, ordinal: usize) -> Option<(TrimOp, (usize, usize, String))> {
    let t = &toks[at];
    let slash = toks.get(at + 1).filter(|s| s.start == t.end && tok_is(expr, s, "/"))?;
    let upper = &expr[t.start..t.end] == "<";
    let with_bool = toks
        .get(at + 2)
        .is_some_and(|b| b.kind == Kind::Ident && expr[b.start..b.end].eq_ignore_ascii_case("bool"));
    let sign = if upper { "<" } else { ">" };
    // The spaces keep `a</b` from running into the keyword.
    let replacement = if with_bool {
        sign.to_string()
    } else {
        format!("{sign} bool ")
    };
    let trim = TrimOp {
        upper,
        ordinal,
        offset: t.start,
        with_bool,
    };
    Some((trim, (t.start, slash.end, replacement)))
}

// ---------------------------------------------------------------------------------------------
// Tokens.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Ident,
    /// A number (seconds in a duration context).
    Number(f64),
    /// A duration literal, in seconds.
    Duration(f64),
    /// A number-like word that is neither (`1.5h`, `5x`).
    Bad,
    Str,
    Punct,
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
}

/// Splits query text into tokens, as far as the front pass needs: strings and comments are
/// skipped over whole, numbers and durations are valued.
fn lex(expr: &str) -> Vec<Tok> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'"' || c == b'\'' || c == b'`' {
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == b'\\' && c != b'`' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            out.push(Tok {
                kind: Kind::Str,
                start,
                end: i,
            });
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            i += 1;
            while i < b.len() {
                let d = b[i];
                let exp_sign = (d == b'+' || d == b'-')
                    && matches!(b[i - 1], b'e' | b'E')
                    && !expr[start..i].starts_with("0x")
                    && b[start..i - 1]
                        .iter()
                        .all(|x| x.is_ascii_digit() || *x == b'.' || *x == b'_');
                if d.is_ascii_alphanumeric() || d == b'.' || d == b'_' || exp_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Tok {
                kind: number_kind(&expr[start..i]),
                start,
                end: i,
            });
            continue;
        }
        // (A `:` alone is a subquery's colon; names do not start with one here.)
        if c.is_ascii_alphabetic() || c == b'_' {
            i += 1;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let word = &expr[start..i];
            let kind = match word.to_ascii_lowercase().as_str() {
                "inf" => Kind::Number(f64::INFINITY),
                "nan" => Kind::Number(f64::NAN),
                _ => Kind::Ident,
            };
            out.push(Tok { kind, start, end: i });
            continue;
        }
        let two = expr.get(i..i + 2).unwrap_or("");
        let len = if matches!(two, "==" | "!=" | ">=" | "<=" | "=~" | "!~") {
            2
        } else {
            expr[i..].chars().next().map_or(1, char::len_utf8)
        };
        i += len;
        out.push(Tok {
            kind: Kind::Punct,
            start,
            end: i,
        });
    }
    out
}

/// A number (decimal, hexadecimal, with `_` separators) or a duration (`1h30m`, units in
/// Prometheus' order, each once).
fn number_kind(w: &str) -> Kind {
    if let Some(ms) = duration_ms(w) {
        return Kind::Duration(ms as f64 / 1000.0);
    }
    if !valid_underscores(w) {
        return Kind::Bad;
    }
    let clean = w.replace('_', "");
    if let Some(hex) = clean.strip_prefix("0x").or_else(|| clean.strip_prefix("0X")) {
        return i64::from_str_radix(hex, 16).map_or(Kind::Bad, |v| Kind::Number(v as f64));
    }
    if clean.bytes().any(|c| c.is_ascii_alphabetic() && c != b'e' && c != b'E') {
        return Kind::Bad;
    }
    clean.parse::<f64>().map_or(Kind::Bad, Kind::Number)
}

/// Go's rule for `_` in number literals, as Prometheus' lexer and `strconv` apply it: each one
/// between two digits, or right after a `0x` prefix.
fn valid_underscores(w: &str) -> bool {
    let b = w.as_bytes();
    let hex = w.starts_with("0x") || w.starts_with("0X");
    let digit = |c: u8| if hex { c.is_ascii_hexdigit() } else { c.is_ascii_digit() };
    (0..b.len()).filter(|&i| b[i] == b'_').all(|i| {
        let before = (hex && i == 2) || (i > 0 && digit(b[i - 1]));
        before && b.get(i + 1).is_some_and(|&c| digit(c))
    })
}

fn duration_ms(w: &str) -> Option<u64> {
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ];
    let b = w.as_bytes();
    let mut i = 0;
    let mut next_unit = 0;
    let mut total: u64 = 0;
    let mut any = false;
    while i < b.len() {
        let ds = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == ds {
            return None;
        }
        let n: u64 = w[ds..i].parse().ok()?;
        let us = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &w[us..i];
        let k = UNITS[next_unit..].iter().position(|(u, _)| *u == unit)? + next_unit;
        total = total.checked_add(n.checked_mul(UNITS[k].1)?)?;
        next_unit = k + 1;
        any = true;
    }
    any.then_some(total)
}

// ---------------------------------------------------------------------------------------------
// Duration expressions.

/// A duration expression: its operation and where it starts. `plain` marks one literal
/// (optionally signed), which promql-parser reads as written.
#[derive(Debug)]
struct Node {
    op: Op,
    start: usize,
    plain: bool,
}

#[derive(Debug)]
enum Op {
    /// A number, a duration, or `step()` and `range()` resolved for the query.
    Lit(f64),
    Neg(Box<Node>),
    Bin(char, Box<Node>, Box<Node>, usize),
    Min(Box<Node>, Box<Node>),
    Max(Box<Node>, Box<Node>),
}

impl Node {
    /// `evaluateDurationExpr`: float seconds.
    fn eval(&self) -> Result<f64, PreparseError> {
        Ok(match &self.op {
            Op::Lit(v) => *v,
            Op::Neg(n) => -n.eval()?,
            Op::Min(a, b) => a.eval()?.min(b.eval()?),
            Op::Max(a, b) => a.eval()?.max(b.eval()?),
            Op::Bin(op, a, b, at) => {
                let (l, r) = (a.eval()?, b.eval()?);
                match op {
                    '+' => l + r,
                    '-' => l - r,
                    '*' => l * r,
                    '/' if r == 0.0 => return Err(PreparseError::new(*at, "division by zero")),
                    '/' => l / r,
                    '%' if r == 0.0 => return Err(PreparseError::new(*at, "modulo by zero")),
                    // Go's math.Mod: the sign of the dividend, as Rust's `%`.
                    '%' => l % r,
                    _ => l.powf(r),
                }
            }
        })
    }
}

/// Not Prometheus' reading: the construct is left to promql-parser.
#[derive(Debug)]
struct NoMatch;

struct DurParser<'a> {
    expr: &'a str,
    toks: &'a [Tok],
    i: usize,
    times: &'a QueryTimes,
    /// Nesting so far: deeper than [`MAX_DEPTH`] is left to promql-parser (no stack overflow).
    depth: usize,
}

const MAX_DEPTH: usize = 200;

impl<'a> DurParser<'a> {
    /// A parser reading `toks` from index `i`.
    fn new(expr: &'a str, toks: &'a [Tok], i: usize, times: &'a QueryTimes) -> Self {
        DurParser {
            expr,
            toks,
            i,
            times,
            depth: 0,
        }
    }
}

impl DurParser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }

    fn peek_is(&self, s: &str) -> bool {
        self.peek().is_some_and(|t| tok_is(self.expr, t, s))
    }

    fn word(&self, k: usize) -> Option<String> {
        self.toks
            .get(k)
            .filter(|t| t.kind == Kind::Ident)
            .map(|t| self.expr[t.start..t.end].to_ascii_lowercase())
    }

    /// A range or subquery step up to one of `ends`: `None` when it is not Prometheus' syntax,
    /// `Some(None)` when promql-parser reads it as written, else the edit.
    #[allow(clippy::type_complexity)]
    fn positive_part(&mut self, ends: &[&str]) -> Result<Option<Option<(usize, usize, String)>>, PreparseError> {
        let first = self.i;
        let Ok(node) = self.add() else {
            return Ok(None);
        };
        if !ends.iter().any(|e| self.peek_is(e)) {
            return Ok(None);
        }
        if node.plain && !matches!(self.toks[first].kind, Kind::Punct) {
            return Ok(Some(None));
        }
        let secs = node.eval()?;
        let ms = to_millis(secs, node.start)?;
        if secs <= 0.0 || ms <= 0 {
            return Err(PreparseError::new(node.start, "duration must be greater than 0"));
        }
        let span = (self.toks[first].start, self.toks[self.i - 1].end);
        Ok(Some(Some((
            span.0,
            span.1,
            display_duration(&Duration::from_millis(ms as u64)),
        ))))
    }

    /// `offset_duration_expr`: a literal, `step()`, `range()`, `min_of`/`max_of`, each
    /// optionally signed, ends the offset (`foo offset 5s - 8` subtracts 8 from the selector); a
    /// signed parenthesis too; an unsigned one goes on as a duration expression.
    fn offset_expr(&mut self) -> Result<Node, NoMatch> {
        let start = self.peek().ok_or(NoMatch)?.start;
        let sign = if self.peek_is("-") || self.peek_is("+") {
            let neg = self.peek_is("-");
            self.i += 1;
            Some(neg)
        } else {
            None
        };
        if sign.is_none() && self.peek_is("(") {
            return self.add();
        }
        let mut node = self.atom()?;
        if sign == Some(true) {
            node = Node {
                plain: node.plain,
                op: Op::Neg(Box::new(node)),
                start,
            };
        }
        node.start = start;
        Ok(node)
    }

    /// `+`, `-`: the loosest, left-associative.
    fn add(&mut self) -> Result<Node, NoMatch> {
        self.left_assoc(&["+", "-"], Self::mul)
    }

    /// `*`, `/`, `%`, left-associative.
    fn mul(&mut self) -> Result<Node, NoMatch> {
        self.left_assoc(&["*", "/", "%"], Self::unary)
    }

    /// One left-associative level: operands read by `next`, joined by any of `ops`.
    fn left_assoc(&mut self, ops: &[&str], next: fn(&mut Self) -> Result<Node, NoMatch>) -> Result<Node, NoMatch> {
        let mut l = next(self)?;
        while ops.iter().any(|o| self.peek_is(o)) {
            let at = self.toks[self.i].start;
            let op = self.expr.as_bytes()[at] as char;
            self.i += 1;
            let r = next(self)?;
            l = Node {
                start: l.start,
                plain: false,
                op: Op::Bin(op, Box::new(l), Box::new(r), at),
            };
        }
        Ok(l)
    }

    /// A sign binds looser than `^` (`-2^2` is -4) and tighter than the rest.
    fn unary(&mut self) -> Result<Node, NoMatch> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(NoMatch);
        }
        let node = self.unary_inner();
        self.depth -= 1;
        node
    }

    fn unary_inner(&mut self) -> Result<Node, NoMatch> {
        if self.peek_is("-") || self.peek_is("+") {
            let start = self.toks[self.i].start;
            let neg = self.peek_is("-");
            self.i += 1;
            let inner = self.unary()?;
            let plain = inner.plain && matches!(inner.op, Op::Lit(_));
            return Ok(if neg {
                Node {
                    start,
                    plain,
                    op: Op::Neg(Box::new(inner)),
                }
            } else {
                Node { start, plain, ..inner }
            });
        }
        self.pow()
    }

    /// `^`, right-associative.
    fn pow(&mut self) -> Result<Node, NoMatch> {
        let base = self.atom()?;
        if !self.peek_is("^") {
            return Ok(base);
        }
        let at = self.toks[self.i].start;
        self.i += 1;
        let exp = self.unary()?;
        Ok(Node {
            start: base.start,
            plain: false,
            op: Op::Bin('^', Box::new(base), Box::new(exp), at),
        })
    }

    /// A literal, `step()`, `range()`, `min_of(a, b)`, `max_of(a, b)` or a parenthesis.
    fn atom(&mut self) -> Result<Node, NoMatch> {
        let t = *self.peek().ok_or(NoMatch)?;
        let start = t.start;
        match t.kind {
            Kind::Number(v) | Kind::Duration(v) => {
                self.i += 1;
                return Ok(Node {
                    start,
                    // promql-parser does not read `_` separators.
                    plain: !self.expr[t.start..t.end].contains('_'),
                    op: Op::Lit(v),
                });
            }
            Kind::Punct if tok_is(self.expr, &t, "(") => {
                self.i += 1;
                let mut inner = self.add()?;
                if !self.peek_is(")") {
                    return Err(NoMatch);
                }
                self.i += 1;
                inner.plain = false;
                inner.start = start;
                return Ok(inner);
            }
            Kind::Ident => {}
            _ => return Err(NoMatch),
        }
        let word = self.word(self.i).ok_or(NoMatch)?;
        let node = |op| Node {
            start,
            plain: false,
            op,
        };
        match word.as_str() {
            "step" | "range" => {
                if !is_empty_call(self.expr, self.toks, self.i) {
                    return Err(NoMatch);
                }
                self.i += 3;
                let ms = if word == "step" {
                    self.times.step_ms
                } else {
                    self.times.range_ms
                };
                Ok(node(Op::Lit(ms as f64 / 1000.0)))
            }
            "min_of" | "max_of" => {
                self.i += 1;
                if !self.peek_is("(") {
                    return Err(NoMatch);
                }
                self.i += 1;
                let a = self.add()?;
                if !self.peek_is(",") {
                    return Err(NoMatch);
                }
                self.i += 1;
                let b = self.add()?;
                if !self.peek_is(")") {
                    return Err(NoMatch);
                }
                self.i += 1;
                Ok(node(if word == "min_of" {
                    Op::Min(Box::new(a), Box::new(b))
                } else {
                    Op::Max(Box::new(a), Box::new(b))
                }))
            }
            _ => Err(NoMatch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_that_are_not_utf8() {
        let bad = |q: &str| preparse(q, &QueryTimes::default()).unwrap().bad_label_name;
        assert_eq!(
            bad(r#"count_values("a\xc5z", v)"#).as_deref(),
            Some(r#"invalid label name "a\xc5z""#)
        );
        assert_eq!(
            bad(r#"count_values by (x) ("\xff", v)"#).as_deref(),
            Some(r#"invalid label name "\xff""#)
        );
        assert!(bad(r#"label_replace(m, "\xff", "", "src", "(.*)")"#).is_some());
        assert!(bad(r#"label_join(rate(m[5m]), "a\377", ",", "x")"#).is_some());
        // A valid character, a label value, or a matcher: nothing to refuse here.
        assert!(bad(r#"count_values("a\u00c5z", v)"#).is_none());
        assert!(bad(r#"count_values("a\xc3\x85z", v)"#).is_none());
        assert!(bad(r#"label_replace(m, "dst", "\xff", "src", "(.*)")"#).is_none());
        assert!(bad(r#"m{a="\xff"}"#).is_none());
    }

    fn rw(expr: &str, times: QueryTimes) -> String {
        preparse(expr, &times).unwrap().text.into_owned()
    }

    fn instant(expr: &str) -> String {
        rw(expr, QueryTimes::default())
    }

    #[test]
    fn plain_text_is_untouched() {
        for e in [
            "rate(foo[5m])",
            "foo[1800]",
            "foo offset -5m",
            "sum_over_time(foo[1h:5m] offset 1m)",
            "foo{a=\"[1m+1m]\"} # offset (1+1)",
            "foo @ start()",
            "step() + range() * vector(start())",
            "foo[5m:]",
            "foo offset 5s - 8",
            "foo offset 2 ^ 2",
        ] {
            let r = preparse(e, &QueryTimes::default()).unwrap();
            assert!(matches!(r.text, Cow::Borrowed(_)), "{e} -> {}", r.text);
        }
    }

    #[test]
    fn duration_expressions_fold_to_literals() {
        assert_eq!(instant("changes(http_requests[26m+4m])"), "changes(http_requests[30m])");
        assert_eq!(instant("changes(x[60*30])"), "changes(x[30m])");
        assert_eq!(instant("x[2m*(10+5)]"), "x[30m]");
        assert_eq!(instant("x[24m+((1.5*2m)+2m)]"), "x[29m]");
        assert_eq!(instant("x[-5m+35m]"), "x[30m]");
        assert_eq!(instant("x[1h30m % 1h]"), "x[30m]");
        assert_eq!(instant("x[30m1s-30m1s % 1m]"), "x[30m]");
        assert_eq!(instant("x[29s+1s:((((8 - 2) / 3) * 7s) % 4) + 8000ms]"), "x[30s:10s]");
        assert_eq!(
            instant("x[29s+1s:20*500ms] offset -(20*(((((8 - 2) / 3) * 7s) % 4) + 8000ms))"),
            "x[30s:10s] offset -3m20s"
        );
        assert_eq!(instant("x offset (100 + 2)"), "x offset 1m42s");
        assert_eq!(instant("x @ 100 offset (1m+1m)"), "x @ 100 offset 2m");
        assert_eq!(instant("x offset (-2 ^ 2)"), "x offset -4s");
        assert_eq!(instant("x offset (2 ^ 2)"), "x offset 4s");
        // A sign binds looser than ^, and a signed literal ends the offset.
        assert_eq!(instant("x[0+-2^2+10]"), "x[6s]");
        assert_eq!(instant("x offset -2 * 2"), "x offset -2 * 2");
        // Zero: no offset, as Prometheus reads it (promql-parser refuses `offset 0s`).
        assert_eq!(instant("x offset range()"), "x");
        assert_eq!(instant("x offset 0s + 1"), "x + 1");
        assert_eq!(instant("x offset (1m - 60s) > 0"), "x > 0");
        assert_eq!(instant("x[1.0005]"), "x[1.0005]");
        assert_eq!(instant("x[1.0005 + 0]"), "x[1s]");
        // `_` separators, which promql-parser does not read.
        assert_eq!(
            instant("1_000 + 0x_f_f * .123_4 + x[1_800]"),
            "1000 + 0xff * .1234 + x[30m]"
        );
        assert_eq!(instant("x offset 1_0"), "x offset 10s");
        assert_eq!(instant("1__0 + 1_ + x{a=\"1_0\"}"), "1__0 + 1_ + x{a=\"1_0\"}");
    }

    #[test]
    fn step_and_range_follow_the_query() {
        let r = QueryTimes::range(50_000, 60_000, 5_000);
        assert_eq!(rw("count_over_time(m[step()+1])", r), "count_over_time(m[6s])");
        assert_eq!(rw("count_over_time(m[1+(STep()-5)*2])", r), "count_over_time(m[1s])");
        assert_eq!(rw("m offset STEP()", r), "m offset 5s");
        assert_eq!(rw("m offset step()*0", r), "m offset 5s*0");
        assert_eq!(rw("m offset -step()*2", r), "m offset -5s*2");
        assert_eq!(rw("m offset (-step()*2)", r), "m offset -10s");
        assert_eq!(rw("m offset -min_of(step(), 1s)+8000", r), "m offset -1s+8000");
        assert_eq!(rw("m offset max_of(3s,min_of(step(), 1s))+8000", r), "m offset 3s+8000");
        assert_eq!(rw("m offset -(min_of(step(), 2s)-5)+8000", r), "m offset 3s+8000");
        assert_eq!(rw("m[((max_of(min_of((step()+1),((1h))),1ms)))]", r), "m[6s]");
        assert_eq!(rw("m offset min_of(range(), 8s)", r), "m offset 8s");
        // Label names and metric names that are keywords stay.
        assert_eq!(rw("step{range=\"x\"} offset 1m", r), "step{range=\"x\"} offset 1m");
        assert_eq!(rw("sum by (step) (x)", r), "sum by (step) (x)");
    }

    #[test]
    fn errors_have_prometheus_messages_at_original_offsets() {
        let err = |e: &str| preparse(e, &QueryTimes::default()).unwrap_err();
        assert_eq!(err("foo[5s/0d]"), PreparseError::new(6, "division by zero"));
        assert_eq!(err("foo[5s%0d]"), PreparseError::new(6, "modulo by zero"));
        assert_eq!(err("foo offset (4d/0)"), PreparseError::new(14, "division by zero"));
        assert_eq!(
            err("foo[-2^2]"),
            PreparseError::new(4, "duration must be greater than 0")
        );
        assert_eq!(
            err("foo[step()]"),
            PreparseError::new(4, "duration must be greater than 0")
        );
        assert_eq!(
            err("foo[1m:step()]"),
            PreparseError::new(7, "duration must be greater than 0")
        );
        assert_eq!(
            err("foo offset (9.5e10*1)"),
            PreparseError::new(11, "duration is out of range")
        );
        // Not Prometheus' syntax: left to promql-parser's own error.
        assert_eq!(instant("foo[step]"), "foo[step]");
        assert_eq!(instant("foo[1m+]"), "foo[1m+]");
        let deep = format!("foo[{}1m{}]", "(".repeat(5000), ")".repeat(5000));
        assert_eq!(instant(&deep), deep);
    }

    #[test]
    fn extended_range_selectors_are_read() {
        let r = preparse("increase(foo[1m] anchored) + foo smoothed", &QueryTimes::default()).unwrap();
        assert_eq!(
            r.text,
            "increase(foo{__watchfire_range_modifier__=\"anchored\"}[1m]) + foo{__watchfire_range_modifier__=\"smoothed\"}"
        );
        let kinds: Vec<_> = r.extended.iter().map(|x| (x.kind, x.offset, x.refusal())).collect();
        assert_eq!(
            kinds,
            vec![(RangeModifier::Anchored, 17, None), (RangeModifier::Smoothed, 33, None)]
        );
        let refusal = |e: &str| {
            preparse(e, &QueryTimes::default())
                .unwrap()
                .extended
                .iter()
                .find_map(Extended::refusal)
        };
        assert_eq!(
            refusal("predict_linear(foo[3m] smoothed, 4)").as_deref(),
            Some("smoothed modifier can only be used with: delta, increase, rate - not with predict_linear")
        );
        assert_eq!(
            refusal("quantile_over_time(0.5, foo[3m] offset (1m+1m) anchored)").as_deref(),
            Some("anchored modifier can only be used with: changes, delta, increase, rate, resets - not with quantile_over_time")
        );
        assert_eq!(refusal("resets(foo[3m] anchored)"), None);
        assert_eq!(
            refusal("smoothed(foo[3m] smoothed)")
                .as_deref()
                .map(|m| m.ends_with("not with smoothed")),
            Some(true)
        );
        // The marker joins the selector's matchers, past `offset` and `@` (even as expressions).
        let text = |e: &str| preparse(e, &QueryTimes::default()).unwrap().text.into_owned();
        assert_eq!(
            text("rate(foo{a=\"b\"}[1m] offset (1m+1m) @ start() anchored)"),
            "rate(foo{a=\"b\",__watchfire_range_modifier__=\"anchored\"}[1m] offset 2m @ start())"
        );
        assert_eq!(
            text("{__name__=\"foo\",} @ 10 offset -1m smoothed"),
            "{__name__=\"foo\",__watchfire_range_modifier__=\"smoothed\"} @ 10 offset -1m"
        );
        let target = |e: &str| preparse(e, &QueryTimes::default()).unwrap().extended[0].target;
        assert_eq!(target("foo[5m:1m] anchored"), Modified::Subquery);
        assert_eq!(target("rate(foo[5m]) anchored"), Modified::Other);
        assert_eq!(target("(foo) smoothed"), Modified::Other);
        assert_eq!(target("5 smoothed"), Modified::Other);
        // A metric named like a modifier is a metric.
        let r = preparse("anchored + sum(smoothed)", &QueryTimes::default()).unwrap();
        assert!(r.extended.is_empty() && matches!(r.text, Cow::Borrowed(_)));
    }

    #[test]
    fn trim_operators_become_comparisons_with_bool() {
        let r = preparse(r#"a</b > c{x!="</"} >/ BOOL d <= e"#, &QueryTimes::default()).unwrap();
        assert_eq!(r.text, r#"a< bool b > c{x!="</"} > BOOL d <= e"#);
        let trim = |upper, ordinal, offset, with_bool| TrimOp {
            upper,
            ordinal,
            offset,
            with_bool,
        };
        assert_eq!(r.trims, vec![trim(true, 0, 1, false), trim(false, 2, 18, true)]);
        // Apart, `<` and `/` are a comparison and a division (promql-parser refuses the rest).
        let r = preparse("a < /b", &QueryTimes::default()).unwrap();
        assert!(r.trims.is_empty() && matches!(r.text, Cow::Borrowed(_)));
        // Errors in the rest of the text still point into the original.
        let r = preparse("a </ b + )", &QueryTimes::default()).unwrap();
        assert_eq!(r.original_offset(r.text.find(')').unwrap()), 9);
    }

    #[test]
    fn offsets_map_back_to_the_original() {
        let r = preparse("rate(x[1m+1m]) + (y offset (1h/2)) + z", &QueryTimes::default()).unwrap();
        assert_eq!(r.text, "rate(x[2m]) + (y offset 30m) + z");
        let z = r.text.find('z').unwrap();
        assert_eq!(r.original_offset(z), 37);
        assert_eq!(r.original_offset(7), 7);
        assert_eq!(r.original_offset(r.text.find('+').unwrap()), 15);
    }
}
