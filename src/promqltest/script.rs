//! Parser for the promqltest scripting language (Prometheus' `promql/promqltest`).
//!
//! The parser never fails as a whole: a malformed command becomes [`Command::Invalid`] (or a
//! problem recorded on the command it belongs to) and parsing continues with the next block.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use crate::labels::Labels;
use crate::tsdb::notation::{self, SeriesValue};

static PAT_LOAD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^load(?:_(with_nhcb))?\s+(.+?)$").expect("static regex"));
static PAT_EVAL_INSTANT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^eval(?:_(fail|warn|ordered|info))?\s+instant\s+(?:at\s+(.+?))?\s+(.+)$").expect("static regex")
});
static PAT_EVAL_RANGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^eval(?:_(fail|warn|info))?\s+range\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+?)\s+(.+)$")
        .expect("static regex")
});
static PAT_EXPECT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^expect\s+(ordered|fail|warn|no_warn|info|no_info)(?:\s+(regex|msg):(.+))?$").expect("static regex")
});
static PAT_EXPECT_RANGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^expect range vector\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+)$").expect("static regex")
});
/// A line that starts a new command; used to end a block that lacks its blank line.
static PAT_COMMAND_START: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:eval(?:_[a-z]+)?\s+(?:instant|range)\s|load(?:_with_nhcb)?\s+\d+[a-z]\S*$|clear$)")
        .expect("static regex")
});

const RANGE_VECTOR_PREFIX: &str = "expect range vector";
const EXPECT_STRING_PREFIX: &str = "expect string";

/// Why data (and so the queries touching it) cannot be checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum DataLimit {
    /// Native histogram samples (`{{...}}`), including NHCB series made by `load_with_nhcb`.
    NativeHistogram,
}

impl DataLimit {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            DataLimit::NativeHistogram => "native histogram",
        }
    }
}

/// One parsed command with its 1-based line number. Every node keeps its line, as the AST's
/// contract with its tests; the runner reports only evaluations and errors by line.
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) enum Command {
    Load(LoadCmd),
    Clear {
        line: usize,
    },
    Eval(Box<EvalCmd>),
    /// A line that is not a command, or a command that could not be parsed.
    Invalid {
        line: usize,
        text: String,
        message: String,
    },
}

/// A float series to load.
#[derive(Debug, Clone)]
#[allow(dead_code)] // `line`: see [`Command`]
pub(crate) struct LoadSeries {
    pub line: usize,
    pub labels: Labels,
    pub values: Vec<Option<SeriesValue>>,
    /// Start timestamps from the `metric@st` line before it: offsets from each sample's time.
    pub starts: Option<Vec<Option<i64>>>,
}

/// `load <interval>` / `load_with_nhcb <interval>`.
#[derive(Debug, Default)]
#[allow(dead_code)] // `line`: see [`Command`]
pub(crate) struct LoadCmd {
    pub line: usize,
    pub interval_ms: i64,
    pub with_nhcb: bool,
    pub series: Vec<LoadSeries>,
    /// Series that were not loaded, or were loaded only in part, and why.
    pub limited: Vec<(Labels, DataLimit)>,
    /// Lines that could not be parsed: (line, message).
    pub errors: Vec<(usize, String)>,
}

/// How an `expect` line matches an error or annotation message.
#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    Any,
    Msg(String),
    Regex(Regex),
}

impl Matcher {
    pub(crate) fn matches(&self, s: &str) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::Msg(m) => m == s,
            Matcher::Regex(r) => r.is_match(s),
        }
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Matcher::Any => f.write_str("any message"),
            Matcher::Msg(m) => write!(f, "message {m:?}"),
            Matcher::Regex(r) => write!(f, "pattern {:?}", r.as_str()),
        }
    }
}

/// The `expect` lines of an eval command, by type.
#[derive(Debug, Default)]
pub(crate) struct Expects {
    pub ordered: bool,
    pub fail: Vec<Matcher>,
    pub warn: Vec<Matcher>,
    pub no_warn: bool,
    pub info: Vec<Matcher>,
    pub no_info: bool,
}

/// Start, end and step in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeSpec {
    pub start: i64,
    pub end: i64,
    pub step: i64,
}

/// An expected series: its labels and values, and its 1-based position among series lines.
#[derive(Debug, Clone)]
pub(crate) struct ExpectedSeries {
    pub pos: usize,
    pub labels: Labels,
    pub values: Vec<Option<SeriesValue>>,
}

/// `eval instant at T EXPR` or `eval range from A to B step S EXPR` with its expectations.
#[derive(Debug, Default)]
pub(crate) struct EvalCmd {
    pub line: usize,
    pub expr: String,
    /// `Some` for a range query.
    pub range: Option<RangeSpec>,
    /// Evaluation time of an instant query (ms).
    pub at: i64,
    /// Deprecated `eval_fail`, `eval_warn`, `eval_info`, `eval_ordered`.
    pub legacy_fail: bool,
    pub legacy_warn: bool,
    pub legacy_info: bool,
    pub legacy_ordered: bool,
    pub expected_fail_message: Option<String>,
    pub expected_fail_regexp: Option<Regex>,
    pub expects: Expects,
    /// `expect range vector from A to B step S` on an instant query.
    pub range_vector: Option<RangeSpec>,
    /// A bare number line: the query must return this scalar.
    pub expected_scalar: Option<f64>,
    pub expected_series: Vec<ExpectedSeries>,
    /// `expect string "..."`; Prometheus compares string results with "" when absent.
    pub expected_string: String,
    pub exclude_from_range_query: bool,
    /// The expected results contain native histograms.
    pub expects_histograms: bool,
    /// A line of the block that could not be parsed: (line, message).
    pub problem: Option<(usize, String)>,
}

impl EvalCmd {
    pub(crate) fn is_fail(&self) -> bool {
        self.legacy_fail || !self.expects.fail.is_empty()
    }

    pub(crate) fn is_ordered(&self) -> bool {
        self.legacy_ordered || self.expects.ordered
    }
}

/// A parsed script.
#[derive(Debug, Default)]
pub(crate) struct Script {
    pub commands: Vec<Command>,
}

/// Parses Prometheus' duration syntax (`1h30m`, `5m`, `20s500ms`, `0`), returning ms. A plain
/// number (`90`, `1.5`) is also accepted and read as seconds.
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration string".into());
    }
    if s == "0" {
        return Ok(0);
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') && s.bytes().any(|b| b.is_ascii_digit()) {
        let secs: f64 = s.parse().map_err(|_| format!("not a valid duration string: {s:?}"))?;
        let ms = (secs * 1000.0).round();
        if !ms.is_finite() || ms > i64::MAX as f64 / 2.0 {
            return Err(format!("duration out of range: {s:?}"));
        }
        return Ok(ms as i64);
    }
    crate::duration::parse_ms(s).map_err(|e| match e {
        crate::duration::DurationError::OutOfRange => format!("duration out of range: {s:?}"),
        _ => format!("not a valid duration string: {s:?}"),
    })
}

/// Go's `strconv.ParseInt(s, 0, 64)` then `strconv.ParseFloat(s, 64)`, as promqltest uses for a
/// bare scalar line.
pub(crate) fn parse_number(s: &str) -> Option<f64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let int = |digits: &str, radix: u32| -> Option<f64> {
        let digits = digits.replace('_', "");
        if digits.is_empty() {
            return None;
        }
        i64::from_str_radix(&digits, radix)
            .ok()
            .map(|v| if neg { -(v as f64) } else { v as f64 })
    };
    let lower = body.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("0x") {
        if let Some(v) = int(rest, 16) {
            return Some(v);
        }
    } else if let Some(rest) = lower.strip_prefix("0o") {
        return int(rest, 8);
    } else if let Some(rest) = lower.strip_prefix("0b") {
        return int(rest, 2);
    } else if lower.len() > 1 && lower.starts_with('0') && lower.bytes().all(|b| b.is_ascii_digit()) {
        if let Some(v) = int(&lower[1..], 8) {
            return Some(v);
        }
    }
    if body.is_empty() || body.contains('_') {
        return None;
    }
    // Rust's float syntax is close to Go's for the forms used in tests (inf, nan, exponents).
    let ok_chars = lower.bytes().all(|b| b.is_ascii_digit() || b"+-.e".contains(&b))
        || matches!(lower.as_str(), "inf" | "infinity" | "nan");
    if !ok_chars {
        return None;
    }
    s.parse::<f64>().ok()
}

/// Go's `strconv.Unquote` for the forms `expect string` accepts: "...", `...`, '.'.
pub(crate) fn unquote(s: &str) -> Result<String, String> {
    let bad = || "expected string literal not valid - check that the string is correctly quoted".to_string();
    let b = s.as_bytes();
    if b.len() < 2 {
        return Err(bad());
    }
    let (q, last) = (b[0], b[b.len() - 1]);
    if q != last || !matches!(q, b'`' | b'"' | b'\'') {
        return Err(bad());
    }
    let inner = &s[1..s.len() - 1];
    match q {
        b'`' => {
            if inner.contains('`') {
                return Err(bad());
            }
            Ok(inner.replace('\r', ""))
        }
        b'"' | b'\'' => {
            let mut out = String::new();
            let mut chars = inner.chars().peekable();
            while let Some(c) = chars.next() {
                if c == q as char || c == '\n' {
                    return Err(bad());
                }
                if c != '\\' {
                    out.push(c);
                    continue;
                }
                let e = chars.next().ok_or_else(bad)?;
                match e {
                    'a' => out.push('\x07'),
                    'b' => out.push('\x08'),
                    'f' => out.push('\x0c'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'v' => out.push('\x0b'),
                    '\\' => out.push('\\'),
                    '\'' | '"' => out.push(e),
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = (0..n).filter_map(|_| chars.next()).collect();
                        let v = u32::from_str_radix(&hex, 16).map_err(|_| bad())?;
                        if hex.len() != n {
                            return Err(bad());
                        }
                        out.push(char::from_u32(v).ok_or_else(bad)?);
                    }
                    '0'..='7' => {
                        let mut oct = String::from(e);
                        for _ in 0..2 {
                            oct.push(chars.next().ok_or_else(bad)?);
                        }
                        let v = u32::from_str_radix(&oct, 8).map_err(|_| bad())?;
                        out.push(char::from_u32(v).ok_or_else(bad)?);
                    }
                    _ => return Err(bad()),
                }
            }
            if q == b'\'' && out.chars().count() != 1 {
                return Err(bad());
            }
            Ok(out)
        }
        _ => Err(bad()),
    }
}

/// Splits a series line into its metric part and its values part, respecting quotes and braces.
pub(crate) fn split_series_line(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let b = bytes[i];
        if let Some(q) = quote {
            if b == b'\\' {
                i += 2;
                continue;
            }
            if b == q {
                quote = None;
            }
        } else {
            match b {
                b'"' | b'\'' | b'`' if depth > 0 => quote = Some(b),
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        let end = i + 1;
                        return (&line[..end], line[end..].trim());
                    }
                }
                b' ' | b'\t' if depth == 0 => return (&line[..i], line[i..].trim()),
                _ => {}
            }
        }
        i += 1;
    }
    (line, "")
}

/// Whether the runner compares native histogram results (else such cases are skipped).
const HISTOGRAMS_SUPPORTED: bool = true;

fn is_histogram_error(msg: &str) -> bool {
    msg.starts_with("native histogram")
}

/// Parses the comment-free, trimmed lines of a script.
fn get_lines(input: &str) -> Vec<String> {
    input
        .split('\n')
        .map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                String::new()
            } else {
                l.to_string()
            }
        })
        .collect()
}

/// Parses a whole script. Never fails: problems are recorded on the commands.
pub(crate) fn parse(input: &str) -> Script {
    let lines = get_lines(input);
    let mut commands = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = &lines[i];
        if l.is_empty() {
            i += 1;
            continue;
        }
        let first = l.split([' ', '\t']).next().unwrap_or("").to_ascii_lowercase();
        if first == "clear" {
            commands.push(Command::Clear { line: i + 1 });
            i += 1;
        } else if first.starts_with("load") {
            let (next, cmd) = parse_load(&lines, i);
            commands.push(cmd);
            i = next;
        } else if first.starts_with("eval") {
            let (next, cmd) = parse_eval(&lines, i);
            commands.push(cmd);
            i = next;
        } else {
            commands.push(Command::Invalid {
                line: i + 1,
                text: l.clone(),
                message: format!("invalid command {l:?}"),
            });
            i = skip_block(&lines, i + 1);
        }
    }
    Script { commands }
}

/// Index of the first blank line (or command start) at or after `i`.
fn skip_block(lines: &[String], mut i: usize) -> usize {
    while i < lines.len() && !lines[i].is_empty() && !PAT_COMMAND_START.is_match(&lines[i]) {
        i += 1;
    }
    i
}

/// Whether line `i` continues the block that started before it.
fn in_block(lines: &[String], i: usize) -> bool {
    i < lines.len() && !lines[i].is_empty() && !PAT_COMMAND_START.is_match(&lines[i])
}

fn parse_load(lines: &[String], i: usize) -> (usize, Command) {
    let mut budget = notation::PointBudget::default();
    let line = &lines[i];
    let Some(caps) = PAT_LOAD.captures(line) else {
        let next = skip_block(lines, i + 1);
        return (
            next,
            Command::Invalid {
                line: i + 1,
                text: line.clone(),
                message: "invalid load command. (load[_with_nhcb] <step:duration>)".into(),
            },
        );
    };
    let with_nhcb = caps.get(1).is_some();
    let step = caps.get(2).map_or("", |m| m.as_str());
    let interval_ms = match parse_duration(step) {
        Ok(d) => d,
        Err(e) => {
            let next = skip_block(lines, i + 1);
            return (
                next,
                Command::Invalid {
                    line: i + 1,
                    text: line.clone(),
                    message: format!("invalid step definition {step:?}: {e}"),
                },
            );
        }
    };
    let mut cmd = LoadCmd {
        line: i + 1,
        interval_ms,
        with_nhcb,
        ..Default::default()
    };
    // A start-timestamp line waiting for its sample line: (line, labels, offsets).
    let mut pending_st: Option<(usize, Labels, Vec<Option<i64>>)> = None;
    let mut j = i + 1;
    while in_block(lines, j) {
        let def = &lines[j];
        let lineno = j + 1;
        j += 1;
        let (metric, rest) = split_series_line(def);
        // `name@st ...` splits after the `@st`, `name{...}@st ...` before it.
        let st_line = match metric.strip_suffix("@st") {
            Some(m) => Some((m, rest)),
            None => rest
                .strip_prefix("@st")
                .filter(|r| r.is_empty() || r.starts_with(char::is_whitespace))
                .map(|r| (metric, r)),
        };
        if let Some((m, rest)) = st_line {
            // `metric@st <offsets>`: start timestamps of the next line's samples, as offsets
            // from each sample's time (Prometheus' promqltest).
            if let Some((l, ..)) = pending_st.take() {
                cmd.errors.push((l, "@st line has no following sample line".into()));
            }
            let labels = notation::parse_metric(m).map_err(|e| format!("invalid @st line metric {m:?}: {e}"));
            let offsets = notation::parse_start_offsets(rest).map_err(|e| format!("invalid @st sequence: {e}"));
            match (labels, offsets) {
                (Ok(l), Ok(o)) => pending_st = Some((lineno, l, o)),
                (Err(e), _) | (_, Err(e)) => cmd.errors.push((lineno, e)),
            }
            continue;
        }
        match budget.series_line(def) {
            Ok((labels, values)) => {
                if !HISTOGRAMS_SUPPORTED && values.iter().flatten().any(|v| v.as_histogram().is_some()) {
                    cmd.limited.push((labels.clone(), DataLimit::NativeHistogram));
                }
                let mut starts = None;
                if let Some((l, st_labels, offsets)) = pending_st.take() {
                    if st_labels != labels {
                        cmd.errors
                            .push((l, "@st metric does not match the following sample line metric".into()));
                    } else if offsets.len() != values.len() {
                        cmd.errors.push((
                            l,
                            format!(
                                "@st line has {} values but sample line has {}",
                                offsets.len(),
                                values.len()
                            ),
                        ));
                    } else {
                        starts = Some(offsets);
                    }
                }
                // A later line for the same series replaces the earlier one, as in Prometheus.
                let s = LoadSeries {
                    line: lineno,
                    labels: labels.clone(),
                    values,
                    starts,
                };
                match cmd.series.iter_mut().find(|p| p.labels == labels) {
                    Some(prev) => *prev = s,
                    None => cmd.series.push(s),
                }
            }
            Err(e) => {
                pending_st = None;
                if is_histogram_error(&e) || def.contains("{{") {
                    match notation::parse_metric(metric) {
                        Ok(l) => cmd.limited.push((l, DataLimit::NativeHistogram)),
                        Err(e2) => cmd.errors.push((lineno, e2)),
                    }
                } else {
                    cmd.errors.push((lineno, e));
                }
            }
        }
    }
    if let Some((l, ..)) = pending_st {
        cmd.errors.push((l, "@st line has no following sample line".into()));
    }
    if cmd.with_nhcb {
        let derived = super::nhcb::derive(&cmd.series);
        cmd.series.extend(derived);
    }
    (j, Command::Load(cmd))
}

fn parse_eval(lines: &[String], i: usize) -> (usize, Command) {
    let line = &lines[i];
    let invalid = |message: String| Command::Invalid {
        line: i + 1,
        text: line.clone(),
        message,
    };
    let inst = PAT_EVAL_INSTANT.captures(line);
    let rng = PAT_EVAL_RANGE.captures(line);
    let mut cmd = EvalCmd {
        line: i + 1,
        ..Default::default()
    };
    let modifier;
    if let Some(c) = &inst {
        modifier = c.get(1).map(|m| m.as_str().to_string());
        cmd.expr = c.get(3).map_or("", |m| m.as_str()).to_string();
        let at = c.get(2).map_or("", |m| m.as_str());
        match parse_duration(at) {
            Ok(t) => cmd.at = t,
            Err(e) => {
                return (
                    skip_block(lines, i + 1),
                    invalid(format!("invalid timestamp definition {at:?}: {e}")),
                );
            }
        }
    } else if let Some(c) = &rng {
        modifier = c.get(1).map(|m| m.as_str().to_string());
        cmd.expr = c.get(5).map_or("", |m| m.as_str()).to_string();
        let g = |k: usize| c.get(k).map_or("", |m| m.as_str());
        match parse_range(g(2), g(3), g(4)) {
            Ok(r) => cmd.range = Some(r),
            Err(e) => return (skip_block(lines, i + 1), invalid(e)),
        }
    } else {
        return (
            skip_block(lines, i + 1),
            invalid(
                "invalid evaluation command. Must be either 'eval[_fail|_warn|_ordered] instant [at \
                 <offset:duration>] <query>' or 'eval[_fail|_warn] range from <from> to <to> step <step> <query>'"
                    .into(),
            ),
        );
    }
    match modifier.as_deref() {
        Some("fail") => cmd.legacy_fail = true,
        Some("warn") => cmd.legacy_warn = true,
        Some("info") => cmd.legacy_info = true,
        Some("ordered") => cmd.legacy_ordered = true,
        _ => {}
    }

    let mut j = i + 1;
    let mut series_pos = 0;
    while in_block(lines, j) {
        let def = lines[j].as_str();
        let lineno = j + 1;
        j += 1;
        if cmd.problem.is_some() {
            continue; // consume the rest of the block
        }
        if cmd.legacy_fail && def.starts_with("expected_fail_message") {
            cmd.expected_fail_message = Some(def["expected_fail_message".len()..].trim().to_string());
            break;
        }
        if cmd.legacy_fail && def.starts_with("expected_fail_regexp") {
            let pat = def["expected_fail_regexp".len()..].trim();
            match Regex::new(pat) {
                Ok(r) => cmd.expected_fail_regexp = Some(r),
                Err(e) => {
                    cmd.problem = Some((lineno, format!("invalid regexp '{pat}' for expected_fail_regexp: {e}")));
                    continue;
                }
            }
            break;
        }
        if def.starts_with(RANGE_VECTOR_PREFIX) {
            match PAT_EXPECT_RANGE.captures(def) {
                Some(c) => match parse_range(&c[1], &c[2], &c[3]) {
                    Ok(r) => {
                        cmd.range_vector = Some(r);
                        cmd.at = r.end;
                        cmd.exclude_from_range_query = true;
                    }
                    Err(e) => cmd.problem = Some((lineno, e)),
                },
                None => cmd.problem = Some((lineno, format!("invalid range vector definition {def:?}"))),
            }
            continue;
        }
        if def.starts_with(EXPECT_STRING_PREFIX) {
            let rest = def.strip_prefix("expect string ").map(str::trim).unwrap_or("");
            if rest.is_empty() {
                cmd.problem = Some((
                    lineno,
                    "expected string literal not valid - a quoted string literal is required".into(),
                ));
                continue;
            }
            match unquote(rest) {
                Ok(s) => {
                    cmd.expected_string = s;
                    cmd.exclude_from_range_query = true;
                }
                Err(e) => cmd.problem = Some((lineno, e)),
            }
            continue;
        }
        if def.split(' ').next() == Some("expect") {
            if let Err(e) = parse_expect(def, &mut cmd.expects) {
                cmd.problem = Some((lineno, e));
            }
            continue;
        }
        if let Some(v) = parse_number(def) {
            cmd.expected_scalar = Some(v);
            break;
        }
        match notation::parse_series_line(def) {
            Ok((labels, values)) => {
                if !HISTOGRAMS_SUPPORTED && values.iter().flatten().any(|v| v.as_histogram().is_some()) {
                    cmd.expects_histograms = true;
                }
                if values.len() > 1 && cmd.range.is_none() && cmd.range_vector.is_none() {
                    cmd.problem = Some((
                        lineno,
                        "expecting multiple values in instant evaluation not allowed. consider using 'expect \
                         range vector' directive to enable a range vector result for an instant query"
                            .into(),
                    ));
                    continue;
                }
                series_pos += 1;
                let es = ExpectedSeries {
                    pos: series_pos,
                    labels,
                    values,
                };
                if let Some(prev) = cmd.expected_series.iter_mut().find(|s| s.labels == es.labels) {
                    *prev = es;
                } else {
                    cmd.expected_series.push(es);
                }
            }
            Err(e) => {
                if is_histogram_error(&e) || def.contains("{{") {
                    cmd.expects_histograms = true;
                } else {
                    cmd.problem = Some((lineno, e));
                }
            }
        }
    }
    (j, Command::Eval(Box::new(cmd)))
}

fn parse_range(from: &str, to: &str, step: &str) -> Result<RangeSpec, String> {
    let start = parse_duration(from).map_err(|e| format!("invalid start timestamp definition {from:?}: {e}"))?;
    let end = parse_duration(to).map_err(|e| format!("invalid end timestamp definition {to:?}: {e}"))?;
    if end < start {
        return Err(format!(
            "invalid test definition, end timestamp ({to}) is before start timestamp ({from})"
        ));
    }
    let step_ms = parse_duration(step).map_err(|e| format!("invalid step definition {step:?}: {e}"))?;
    Ok(RangeSpec {
        start,
        end,
        step: step_ms,
    })
}

fn parse_expect(def: &str, ex: &mut Expects) -> Result<(), String> {
    let c = PAT_EXPECT.captures(def.trim()).ok_or_else(|| {
        "invalid expect statement, must match `expect <type> <match_type>: <string>` format".to_string()
    })?;
    let mode = &c[1];
    let matcher = match (c.get(2).map(|m| m.as_str()), c.get(3).map(|m| m.as_str().trim())) {
        (Some("msg"), Some(m)) => Matcher::Msg(m.to_string()),
        (Some("regex"), Some(p)) => Matcher::Regex(Regex::new(p).map_err(|_| format!("invalid regex {p} for {mode}"))?),
        _ => Matcher::Any,
    };
    match mode {
        "ordered" => ex.ordered = true,
        "fail" => ex.fail.push(matcher),
        "warn" => ex.warn.push(matcher),
        "no_warn" => ex.no_warn = true,
        "info" => ex.info.push(matcher),
        "no_info" => ex.no_info = true,
        _ => return Err(format!("invalid expected error/annotation type {mode}")),
    }
    if !ex.info.is_empty() && ex.no_info {
        return Err("invalid expect lines, info and no_info cannot be used together".into());
    }
    if !ex.warn.is_empty() && ex.no_warn {
        return Err("invalid expect lines, warn and no_warn cannot be used together".into());
    }
    if ex.fail.len() > 1 {
        return Err("invalid expect lines, multiple expect fail lines are not allowed".into());
    }
    Ok(())
}
