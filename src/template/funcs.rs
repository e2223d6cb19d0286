//! The function map: Go's builtins (`and`, `or`, `len`, `index`, `printf`, `eq`, ...) and
//! Prometheus' template functions (`query`, `humanize`, `reReplaceAll`, ...), each with its Go
//! signature so argument checking and error messages match Go's.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use regex::Regex;

use super::gofmt::{eval_args, sprint, sprintf, sprintln};
use super::gotime::GoTime;
use super::parse::parse_go_float;
use super::value::{sample_from, truth, IntKind, Kind, Sample, UintKind, Value};
use crate::gofmt::{format_float, format_g, is_print, quote};
use crate::labels::Labels;
use crate::url::{query_escape, split_host_port};

/// One element of a `query` result.
#[derive(Debug, Clone, PartialEq)]
pub struct QuerySample {
    pub labels: Labels,
    pub value: f64,
}

/// Runs PromQL for the `query` template function; implemented by the rule engine, which
/// evaluates at the alert's evaluation time. An error fails the expansion with
/// `error calling query: <message>`.
pub trait Querier {
    fn query(&self, expr: &str) -> Result<Vec<QuerySample>, String>;
}

/// Go parameter types of template functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    /// `interface{}`.
    Any,
    /// `reflect.Value` (builtins that take any value, including "no value").
    RValue,
    String,
    /// `*template.sample`.
    SamplePtr,
    /// `template.queryResult`.
    QueryResult,
    /// `[]string` (Alertmanager's `join`).
    Strings,
}

impl Ty {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Ty::Any => "interface {}",
            Ty::RValue => "reflect.Value",
            Ty::String => "string",
            Ty::SamplePtr => "*template.sample",
            Ty::QueryResult => "template.queryResult",
            Ty::Strings => "[]string",
        }
    }
}

/// What functions can see of the expansion.
pub(crate) struct Ctx<'a> {
    /// Alertmanager's notification templates: `template.KV`, `Pairs` and `Alerts` methods.
    pub notify: bool,
    pub querier: Option<&'a dyn Querier>,
    /// Evaluation time in Unix milliseconds.
    pub time_ms: i64,
    pub external_url: &'a str,
}

type FuncImpl = fn(&Ctx, Vec<Value>) -> Result<Value, String>;
pub(crate) type MethodImpl = fn(&Value, Vec<Value>) -> Result<Value, String>;

pub(crate) struct FuncDef {
    pub name: &'static str,
    pub params: &'static [Ty],
    pub variadic: bool,
    pub builtin: bool,
    imp: FuncImpl,
}

pub(crate) struct MethodDef {
    pub name: &'static str,
    pub params: &'static [Ty],
    pub(crate) imp: MethodImpl,
}

pub(crate) enum Callee {
    Func(&'static FuncDef),
    Method(Value, &'static MethodDef),
}

impl Callee {
    pub(crate) fn signature(&self) -> (&'static [Ty], bool) {
        match self {
            Callee::Func(f) => (f.params, f.variadic),
            Callee::Method(_, m) => (m.params, false),
        }
    }

    pub(crate) fn call(&self, ctx: &Ctx, argv: Vec<Value>) -> Result<Value, String> {
        match self {
            Callee::Func(f) => (f.imp)(ctx, argv),
            Callee::Method(recv, m) => (m.imp)(recv, argv),
        }
    }
}

macro_rules! func {
    ($name:literal, [$($t:ident),*], $variadic:literal, $builtin:literal, $imp:expr) => {
        FuncDef { name: $name, params: &[$(Ty::$t),*], variadic: $variadic, builtin: $builtin, imp: $imp }
    };
}

static FUNCS: &[FuncDef] = &[
    // Prometheus' functions (looked up before Go's builtins, as Go does for a template's FuncMap).
    func!("query", [String], false, false, f_query),
    func!("first", [QueryResult], false, false, f_first),
    func!("label", [String, SamplePtr], false, false, f_label),
    func!("value", [SamplePtr], false, false, f_value),
    func!("strvalue", [SamplePtr], false, false, f_strvalue),
    func!("args", [Any], true, false, f_args),
    func!("reReplaceAll", [String, String, String], false, false, f_re_replace_all),
    func!("safeHtml", [String], false, false, |_, a| Ok(Value::Html(
        string_arg(&a, 0).into()
    ))),
    func!("match", [String, String], false, false, f_match),
    func!("title", [String], false, false, |_, a| Ok(Value::str(&title(
        &string_arg(&a, 0)
    )))),
    func!("toUpper", [String], false, false, |_, a| Ok(Value::str(&to_upper(
        &string_arg(&a, 0)
    )))),
    func!("toLower", [String], false, false, |_, a| Ok(Value::str(&to_lower(
        &string_arg(&a, 0)
    )))),
    func!("graphLink", [String], false, false, |_, a| {
        Ok(Value::str(&format!(
            "/graph?g0.expr={}&g0.tab=0",
            query_escape(&string_arg(&a, 0))
        )))
    }),
    func!("tableLink", [String], false, false, |_, a| {
        Ok(Value::str(&format!(
            "/graph?g0.expr={}&g0.tab=1",
            query_escape(&string_arg(&a, 0))
        )))
    }),
    func!("sortByLabel", [String, QueryResult], false, false, f_sort_by_label),
    func!("stripPort", [String], false, false, |_, a| {
        let hp = string_arg(&a, 0);
        Ok(Value::str(&split_host_port(&hp).map(|(h, _)| h).unwrap_or(hp)))
    }),
    func!("stripDomain", [String], false, false, |_, a| Ok(Value::str(
        &strip_domain(&string_arg(&a, 0))
    ))),
    func!("humanize", [Any], false, false, |_, a| humanize(to_float(&a[0])?)
        .map(|s| Value::str(&s))),
    func!("humanize1024", [Any], false, false, |_, a| Ok(Value::str(
        &humanize1024(to_float(&a[0])?)
    ))),
    func!("humanizeDuration", [Any], false, false, |_, a| Ok(Value::str(
        &humanize_duration(to_float(&a[0])?)
    ))),
    func!("humanizePercentage", [Any], false, false, |_, a| {
        Ok(Value::str(&format!(
            "{}%",
            format_float(to_float(&a[0])? * 100.0, 'g', 4)
        )))
    }),
    func!("humanizeTimestamp", [Any], false, false, |_, a| {
        let v = to_float(&a[0])?;
        if v.is_nan() || v.is_infinite() {
            return Ok(Value::str(&format_float(v, 'g', 4)));
        }
        Ok(Value::str(&float_to_time(v)?.string()))
    }),
    func!("toTime", [Any], false, false, |_, a| {
        let v = to_float(&a[0])?;
        if v.is_nan() || v.is_infinite() {
            return Err("value is NaN or Inf".into());
        }
        Ok(Value::Time(float_to_time(v)?))
    }),
    func!("toDuration", [Any], false, false, |_, a| Ok(Value::Duration(
        (to_float(&a[0])? * 1e9) as i64
    ))),
    func!("now", [], false, false, |ctx, _| Ok(Value::Float(
        ctx.time_ms as f64 / 1000.0
    ))),
    func!("pathPrefix", [], false, false, |ctx, _| Ok(Value::str(url_path(
        ctx.external_url
    )))),
    func!("externalURL", [], false, false, |ctx, _| Ok(Value::str(
        ctx.external_url
    ))),
    func!("parseDuration", [String], false, false, |_, a| {
        // Current Prometheus accepts negative durations here (`model.ParseDurationAllowNegative`).
        let s = string_arg(&a, 0);
        let ns = match s.strip_prefix('-') {
            Some(rest) => -parse_prom_duration(rest)?,
            None => parse_prom_duration(&s)?,
        };
        Ok(Value::Float(ns as f64 / 1e9))
    }),
    func!("urlQueryEscape", [String], false, false, |_, a| Ok(Value::str(
        &query_escape(&string_arg(&a, 0))
    ))),
    // Go's builtins.
    func!("and", [RValue, RValue], true, true, |_, _| Ok(Value::Invalid)),
    func!("or", [RValue, RValue], true, true, |_, _| Ok(Value::Invalid)),
    func!("call", [RValue, RValue], true, true, f_call),
    func!("html", [Any], true, true, |_, a| Ok(Value::str(&html_escape(
        &eval_args(&a)
    )))),
    func!("index", [RValue, RValue], true, true, f_index),
    func!("slice", [RValue, RValue], true, true, f_slice),
    func!("js", [Any], true, true, |_, a| Ok(Value::str(&js_escape(&eval_args(
        &a
    ))))),
    func!("len", [RValue], false, true, f_len),
    func!("not", [RValue], false, true, |_, a| Ok(Value::Bool(!truth(&a[0])))),
    func!("print", [Any], true, true, |_, a| Ok(Value::str(&sprint(&a)))),
    func!("printf", [String, Any], true, true, |_, a| Ok(Value::str(&sprintf(
        &string_arg(&a, 0),
        &a[1..]
    )))),
    func!("println", [Any], true, true, |_, a| Ok(Value::str(&sprintln(&a)))),
    func!("urlquery", [Any], true, true, |_, a| Ok(Value::str(&query_escape(
        &eval_args(&a)
    )))),
    func!("eq", [RValue, RValue], true, true, |_, a| eq(&a[0], &a[1..])
        .map(Value::Bool)),
    func!("ge", [RValue, RValue], false, true, |_, a| lt(&a[0], &a[1])
        .map(|b| Value::Bool(!b))),
    func!("gt", [RValue, RValue], false, true, |_, a| le(&a[0], &a[1])
        .map(|b| Value::Bool(!b))),
    func!("le", [RValue, RValue], false, true, |_, a| le(&a[0], &a[1])
        .map(Value::Bool)),
    func!("lt", [RValue, RValue], false, true, |_, a| lt(&a[0], &a[1])
        .map(Value::Bool)),
    func!("ne", [RValue, RValue], false, true, |_, a| eq(&a[0], &a[1..])
        .map(|b| Value::Bool(!b))),
];

/// Alertmanager's own functions (`template.DefaultFuncs` beside the ones Prometheus shares).
static NOTIFY_FUNCS: &[FuncDef] = &[
    func!("join", [String, Strings], false, false, |_, a| Ok(Value::str(
        &strings_of(&a[1]).join(&string_arg(&a, 0))
    ))),
    func!("stringSlice", [String], true, false, |_, a| Ok(Value::List(
        Rc::new(a.into_iter().collect()),
        "string"
    ))),
];

/// The functions Alertmanager 0.25's notification templates have: Go's builtins and
/// `toUpper`, `toLower`, `title`, `join`, `match`, `safeHtml`, `reReplaceAll`, `stringSlice`.
const NOTIFY_SHARED: &[&str] = &["toUpper", "toLower", "title", "match", "safeHtml", "reReplaceAll"];

pub(crate) fn lookup(name: &str) -> Option<&'static FuncDef> {
    FUNCS.iter().chain(NOTIFY_FUNCS.iter()).find(|f| f.name == name)
}

/// Whether the parser accepts `name` as a function (Prometheus' alert templates).
pub(crate) fn is_defined(name: &str) -> bool {
    FUNCS.iter().any(|f| f.name == name)
}

/// Whether Alertmanager's notification templates have the function `name`.
pub(crate) fn is_defined_notify(name: &str) -> bool {
    FUNCS
        .iter()
        .any(|f| f.name == name && (f.builtin || NOTIFY_SHARED.contains(&name)))
        || NOTIFY_FUNCS.iter().any(|f| f.name == name)
}

fn strings_of(v: &Value) -> Vec<String> {
    match v {
        Value::List(l, _) => l
            .iter()
            .map(|x| match x {
                Value::Str(s) | Value::Html(s) => s.to_string(),
                _ => String::new(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn string_arg(a: &[Value], i: usize) -> String {
    match a.get(i) {
        Some(Value::Str(s)) | Some(Value::Html(s)) => s.to_string(),
        _ => String::new(),
    }
}

const NIL_DEREF: &str = "runtime error: invalid memory address or nil pointer dereference";

// ---- Prometheus: queries ----------------------------------------------------------------------

fn f_query(ctx: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let Some(q) = ctx.querier else {
        return Err("no query engine available to the template".into());
    };
    let samples = q.query(&string_arg(&a, 0))?;
    Ok(Value::QueryResult(Rc::new(
        samples
            .iter()
            .map(|s| Rc::new(sample_from(&s.labels, s.value)))
            .collect(),
    )))
}

fn f_first(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    match &a[0] {
        Value::QueryResult(q) if !q.is_empty() => Ok(Value::Sample(q[0].clone())),
        _ => Err("first() called on vector with no elements".into()),
    }
}

fn sample_arg(v: &Value) -> Result<&Sample, String> {
    match v {
        Value::Sample(s) => Ok(s),
        _ => Err(NIL_DEREF.into()),
    }
}

fn f_label(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let s = sample_arg(&a[1])?;
    Ok(Value::str(
        s.labels.get(&string_arg(&a, 0)).map(String::as_str).unwrap_or(""),
    ))
}

fn f_value(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    Ok(Value::Float(sample_arg(&a[0])?.value))
}

fn f_strvalue(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    Ok(Value::str(
        sample_arg(&a[0])?
            .labels
            .get("__value__")
            .map(String::as_str)
            .unwrap_or(""),
    ))
}

fn f_sort_by_label(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let label = string_arg(&a, 0);
    let Value::QueryResult(q) = &a[1] else {
        return Ok(a[1].clone());
    };
    let mut v: Vec<Rc<Sample>> = q.iter().cloned().collect();
    let key = |s: &Rc<Sample>| s.labels.get(&label).cloned().unwrap_or_default();
    v.sort_by_key(key);
    Ok(Value::QueryResult(Rc::new(v)))
}

fn f_args(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let m: BTreeMap<String, Value> = a.into_iter().enumerate().map(|(i, v)| (format!("arg{i}"), v)).collect();
    Ok(Value::AnyMap(Rc::new(m)))
}

// ---- Prometheus: numbers ------------------------------------------------------------------------

/// Prometheus' `convertToFloat`.
pub(crate) fn to_float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Float(f) => Ok(*f),
        Value::Str(s) => parse_go_float(s).map_err(|e| format!("strconv.ParseFloat: parsing {}: {}", quote(s), e)),
        Value::Int(i, IntKind::Int | IntKind::Int64) => Ok(*i as f64),
        Value::Uint(u, UintKind::Uint | UintKind::Uint64) => Ok(*u as f64),
        Value::Duration(d) => Ok(*d as f64 / 1e9),
        Value::Nil | Value::Invalid => Err("can't convert <nil> to float".into()),
        other => Err(format!("can't convert {} to float", other.type_name())),
    }
}

fn g4(v: f64) -> String {
    format_float(v, 'g', 4)
}

pub(crate) fn humanize(mut v: f64) -> Result<String, String> {
    if v == 0.0 || v.is_nan() || v.is_infinite() {
        return Ok(g4(v));
    }
    if v.abs() >= 1.0 {
        let mut prefix = "";
        for p in ["k", "M", "G", "T", "P", "E", "Z", "Y"] {
            if v.abs() < 1000.0 {
                break;
            }
            prefix = p;
            v /= 1000.0;
        }
        return Ok(format!("{}{}", g4(v), prefix));
    }
    let mut prefix = "";
    for p in ["m", "u", "n", "p", "f", "a", "z", "y"] {
        if v.abs() >= 1.0 {
            break;
        }
        prefix = p;
        v *= 1000.0;
    }
    Ok(format!("{}{}", g4(v), prefix))
}

pub(crate) fn humanize1024(mut v: f64) -> String {
    if v.abs() <= 1.0 || v.is_nan() || v.is_infinite() {
        return g4(v);
    }
    let mut prefix = "";
    for p in ["ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"] {
        if v.abs() < 1024.0 {
            break;
        }
        prefix = p;
        v /= 1024.0;
    }
    format!("{}{}", g4(v), prefix)
}

pub(crate) fn humanize_duration(mut v: f64) -> String {
    if v.is_nan() || v.is_infinite() {
        return g4(v);
    }
    if v == 0.0 {
        return format!("{}s", g4(v));
    }
    if v.abs() >= 1.0 {
        let mut sign = "";
        if v < 0.0 {
            sign = "-";
            v = -v;
        }
        let duration = v as i64;
        let seconds = duration % 60;
        let minutes = (duration / 60) % 60;
        let hours = (duration / 60 / 60) % 24;
        let days = duration / 60 / 60 / 24;
        if days != 0 {
            return format!("{sign}{days}d {hours}h {minutes}m {seconds}s");
        }
        if hours != 0 {
            return format!("{sign}{hours}h {minutes}m {seconds}s");
        }
        if minutes != 0 {
            return format!("{sign}{minutes}m {seconds}s");
        }
        return format!("{sign}{}s", g4(v));
    }
    let mut prefix = "";
    for p in ["m", "u", "n", "p", "f", "a", "z", "y"] {
        if v.abs() >= 1.0 {
            break;
        }
        prefix = p;
        v *= 1000.0;
    }
    format!("{}{}s", g4(v), prefix)
}

/// Prometheus' `floatToTime` (truncated to milliseconds like `model.Time`).
fn float_to_time(v: f64) -> Result<GoTime, String> {
    let ts = v * 1e9;
    if ts > i64::MAX as f64 || ts < i64::MIN as f64 {
        return Err(format!(
            "{} cannot be represented as a nanoseconds timestamp since it overflows int64",
            format_g(v)
        ));
    }
    Ok(GoTime::from_unix_ms((ts as i64) / 1_000_000))
}

/// `model.ParseDuration`, in nanoseconds.
pub(crate) fn parse_prom_duration(s: &str) -> Result<i64, String> {
    match s {
        "0" => return Ok(0),
        "" => return Err("empty duration string".into()),
        _ => {}
    }
    let invalid = || format!("not a valid duration string: {}", quote(s));
    let mut rest = s;
    let mut dur: u64 = 0;
    let mut last_pos = 0;
    while !rest.is_empty() {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(invalid());
        }
        let v: u64 = rest[..n].parse().map_err(|_| invalid())?;
        rest = &rest[n..];
        let u = rest.bytes().take_while(|c| !c.is_ascii_digit()).count();
        if u == 0 {
            return Err(invalid());
        }
        let unit = &rest[..u];
        rest = &rest[u..];
        let (pos, mult): (i32, u64) = match unit {
            "ms" => (7, 1_000_000),
            "s" => (6, 1_000_000_000),
            "m" => (5, 60_000_000_000),
            "h" => (4, 3_600_000_000_000),
            "d" => (3, 86_400_000_000_000),
            "w" => (2, 604_800_000_000_000),
            "y" => (1, 31_536_000_000_000_000),
            _ => return Err(format!("unknown unit {} in duration {}", quote(unit), quote(s))),
        };
        if pos <= last_pos {
            return Err(invalid());
        }
        last_pos = pos;
        if v > (1u64 << 63) / mult {
            return Err("duration out of range".into());
        }
        dur += v * mult;
        if dur > (1u64 << 63) - 1 {
            return Err("duration out of range".into());
        }
    }
    Ok(dur as i64)
}

// ---- Prometheus: strings ------------------------------------------------------------------------

fn strip_domain(hp: &str) -> String {
    let (host, port) = match split_host_port(hp) {
        Ok((h, p)) => (h, p),
        Err(_) => (hp.to_string(), String::new()),
    };
    if host.parse::<std::net::IpAddr>().is_ok() {
        return hp.to_string();
    }
    let host = host.split('.').next().unwrap_or("");
    if !port.is_empty() {
        if host.contains(':') {
            return format!("[{host}]:{port}");
        }
        return format!("{host}:{port}");
    }
    host.to_string()
}

/// The path of a URL (Go's `url.URL.Path`, undecoded).
fn url_path(u: &str) -> &str {
    let rest = match u.find("://") {
        Some(i) => {
            let after = &u[i + 3..];
            match after.find('/') {
                Some(j) => &after[j..],
                None => "",
            }
        }
        None => u,
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    &rest[..end]
}

/// Go's `template.HTMLEscapeString`.
pub(crate) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push('\u{FFFD}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Go's `template.JSEscapeString`.
pub(crate) fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u00{:02X}", c as u32)),
            c if (c as u32) < 0x80 => out.push(c),
            c if is_print(c) => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out
}

/// Go's `strings.ToUpper` (simple per-rune case mapping).
pub(crate) fn to_upper(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut u = c.to_uppercase();
            match (u.next(), u.next()) {
                (Some(x), None) => x,
                _ => c,
            }
        })
        .collect()
}

/// Go's `strings.ToLower` (simple per-rune case mapping).
pub(crate) fn to_lower(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == '\u{130}' {
                return 'i';
            }
            let mut l = c.to_lowercase();
            match (l.next(), l.next()) {
                (Some(x), None) => x,
                _ => c,
            }
        })
        .collect()
}

fn is_cased(c: char) -> bool {
    c.is_lowercase() || c.is_uppercase() || c.to_uppercase().next() != Some(c) || c.to_lowercase().next() != Some(c)
}

/// Word-internal punctuation (Unicode MidLetter / MidNumLet / Single_Quote).
fn is_mid(c: char) -> bool {
    matches!(
        c,
        '\'' | '.'
            | ':'
            | '·'
            | '\u{0387}'
            | '\u{05F4}'
            | '\u{2018}'
            | '\u{2019}'
            | '\u{2024}'
            | '\u{2027}'
            | '\u{FE13}'
            | '\u{FE52}'
            | '\u{FE55}'
            | '\u{FF07}'
            | '\u{FF0E}'
            | '\u{FF1A}'
    )
}

fn title_case(c: char, out: &mut String) {
    match c {
        'ǆ' | 'ǅ' | 'Ǆ' => out.push('ǅ'),
        'ǉ' | 'ǈ' | 'Ǉ' => out.push('ǈ'),
        'ǌ' | 'ǋ' | 'Ǌ' => out.push('ǋ'),
        'ǳ' | 'ǲ' | 'Ǳ' => out.push('ǲ'),
        'ß' => out.push_str("Ss"),
        c => out.extend(c.to_uppercase()),
    }
}

/// `cases.Title(language.AmericanEnglish, cases.NoLower)`: upper-cases the first cased letter
/// of each word and leaves the rest alone.
pub(crate) fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut mid_word = false;
    let mut was_mid = false;
    for c in s.chars() {
        let mid = is_mid(c);
        if was_mid && mid {
            mid_word = false;
        }
        if is_cased(c) {
            if !mid_word {
                title_case(c, &mut out);
                mid_word = true;
            } else {
                out.push(c);
            }
        } else {
            out.push(c);
            let word_char = c == '_' || c.is_alphanumeric() || mid || is_combining(c);
            if !word_char {
                mid_word = false;
            }
        }
        was_mid = mid;
    }
    out
}

fn is_combining(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F | 0x200D)
}

// ---- Prometheus: regular expressions ----------------------------------------------------------

thread_local! {
    static REGEX_CACHE: RefCell<HashMap<String, Result<Regex, String>>> = RefCell::new(HashMap::new());
}

/// Parses a repetition `{n}`, `{n,}` or `{n,m}` at the start of `s`: (byte length, min, max).
fn parse_repeat(s: &str) -> Option<(usize, u64, Option<u64>)> {
    let body = s.strip_prefix('{')?;
    let close = body.find('}')?;
    let inner = &body[..close];
    let (lo, hi) = match inner.split_once(',') {
        Some((lo, hi)) => (lo, Some(hi)),
        None => (inner, None),
    };
    if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let min = lo.parse().unwrap_or(u64::MAX);
    let max = match hi {
        None => Some(min),
        Some("") => None,
        Some(h) if h.bytes().all(|b| b.is_ascii_digit()) => Some(h.parse().unwrap_or(u64::MAX)),
        Some(_) => return None,
    };
    Some((close + 2, min, max))
}

/// Rewrites Go (RE2) syntax for the regex crate: Perl classes are ASCII-only in Go, `\Q...\E`
/// quotes, and a `{` that does not start a repetition is a literal. Also applies RE2's checks the
/// regex crate lacks (nested repetition, repeat counts above 1000), returning Go's error text.
fn go_regex_to_rust(p: &str) -> Result<String, String> {
    let mut out = String::with_capacity(p.len() + 8);
    let mut i = 0;
    let b = p.as_bytes();
    let mut in_class = false;
    let mut class_start = false;
    // Byte offset where the previous repetition operator started, if the last item was one.
    let mut last_repeat: Option<usize> = None;
    while i < p.len() {
        let c = p[i..].chars().next().unwrap_or('\0');
        let clen = c.len_utf8();
        if c == '\\' {
            last_repeat = None;
            let Some(e) = p[i + 1..].chars().next() else {
                out.push('\\');
                break;
            };
            match (in_class, e) {
                (_, 'Q') => {
                    let rest = &p[i + 2..];
                    let (lit, adv) = match rest.find("\\E") {
                        Some(k) => (&rest[..k], k + 2),
                        None => (rest, rest.len()),
                    };
                    out.push_str(&regex::escape(lit));
                    i += 2 + adv;
                    class_start = false;
                    continue;
                }
                (false, 'd') => out.push_str("[0-9]"),
                (false, 'D') => out.push_str("[^0-9]"),
                (false, 'w') => out.push_str("[0-9A-Za-z_]"),
                (false, 'W') => out.push_str("[^0-9A-Za-z_]"),
                (false, 's') => out.push_str("[\\t\\n\\f\\r ]"),
                (false, 'S') => out.push_str("[^\\t\\n\\f\\r ]"),
                (true, 'd') => out.push_str("0-9"),
                (true, 'w') => out.push_str("0-9A-Za-z_"),
                (true, 's') => out.push_str("\\t\\n\\f\\r "),
                _ => {
                    out.push('\\');
                    out.push(e);
                }
            }
            i += 1 + e.len_utf8();
            class_start = false;
            continue;
        }
        if in_class {
            if c == ']' && !class_start {
                in_class = false;
            } else if c == '[' && b.get(i + 1) == Some(&b':') {
                // [:alpha:] inside a class.
                let end = p[i..].find(":]").map(|k| i + k + 2).unwrap_or(p.len());
                out.push_str(&p[i..end]);
                i = end;
                class_start = false;
                continue;
            }
            class_start = class_start && c == '^';
            out.push(c);
            i += clen;
            continue;
        }
        let repeat_len = match c {
            '*' | '+' | '?' => Some(1),
            '{' => match parse_repeat(&p[i..]) {
                Some((len, min, max)) => {
                    if min > 1000 || max.is_some_and(|m| m > 1000 || m < min) {
                        return Err(format!("invalid repeat count: {}", go_regex_quote(&p[i..i + len])));
                    }
                    Some(len)
                }
                None => {
                    out.push_str("\\{");
                    i += 1;
                    last_repeat = None;
                    continue;
                }
            },
            _ => None,
        };
        if let Some(len) = repeat_len {
            let mut end = i + len;
            if b.get(end) == Some(&b'?') {
                end += 1;
            }
            if let Some(start) = last_repeat {
                return Err(format!(
                    "invalid nested repetition operator: {}",
                    go_regex_quote(&p[start..end])
                ));
            }
            out.push_str(&p[i..end]);
            last_repeat = Some(i);
            i = end;
            continue;
        }
        last_repeat = None;
        if c == '[' {
            in_class = true;
            class_start = true;
        }
        out.push(c);
        i += clen;
    }
    Ok(out)
}

/// Go's `regexp/syntax` error text for a regex crate error.
fn go_regex_error(pattern: &str, translated: &str, err: &regex::Error) -> String {
    let msg = err.to_string();
    let lines: Vec<&str> = msg.lines().collect();
    let last = lines
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim())
        .unwrap_or("");
    let last = last.strip_prefix("error: ").unwrap_or(last);
    // The span the regex crate points at (when the pattern fits on one line and was not rewritten).
    let span = (|| {
        if lines.len() < 4 || pattern != translated || pattern.contains('\n') {
            return None;
        }
        let carets = lines[2].strip_prefix("    ")?;
        let start = carets.find('^')?;
        let end = carets.rfind('^')? + 1;
        let chars: Vec<char> = pattern.chars().collect();
        (end <= chars.len()).then(|| {
            (
                chars[..start].iter().collect::<String>().len(),
                chars[start..end].iter().collect::<String>(),
            )
        })
    })();
    let (code, expr) = match last {
        "unclosed group" => ("missing closing )", pattern.to_string()),
        "unopened group" => ("unexpected )", pattern.to_string()),
        "unclosed character class" => match &span {
            Some((start, _)) => ("missing closing ]", pattern[*start..].to_string()),
            None => ("missing closing ]", pattern.to_string()),
        },
        "unrecognized flag" => match &span {
            Some((start, flag)) => {
                let open = pattern[..*start].rfind("(?").unwrap_or(0);
                (
                    "invalid or unsupported Perl syntax",
                    format!("{}{flag}", &pattern[open..*start]),
                )
            }
            None => ("invalid or unsupported Perl syntax", pattern.to_string()),
        },
        "empty capture group name" | "invalid capture group character" | "invalid capture group name" => {
            let open = pattern.find("(?P<").or_else(|| pattern.find("(?<")).unwrap_or(0);
            let close = pattern[open..].find('>').map(|k| open + k + 1).unwrap_or(pattern.len());
            ("invalid named capture", pattern[open..close].to_string())
        }
        "Unicode property not found" | "Unicode property value not found" => (
            "invalid character class range",
            span.map(|s| s.1).unwrap_or_else(|| pattern.to_string()),
        ),
        "repetition operator missing expression" => (
            "missing argument to repetition operator",
            span.map(|s| s.1).unwrap_or_else(|| pattern.to_string()),
        ),
        "unrecognized escape sequence" => (
            "invalid escape sequence",
            span.map(|s| s.1).unwrap_or_else(|| pattern.to_string()),
        ),
        "incomplete escape sequence, reached end of pattern prematurely" => {
            ("trailing backslash at end of expression", String::new())
        }
        l if l.starts_with("invalid character class range") => (
            "invalid character class range",
            span.map(|s| s.1).unwrap_or_else(|| pattern.to_string()),
        ),
        other => (other, pattern.to_string()),
    };
    format!("error parsing regexp: {code}: {}", go_regex_quote(&expr))
}

fn compile(pattern: &str) -> Result<Regex, String> {
    REGEX_CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(r) = cache.get(pattern) {
            return r.clone();
        }
        let r = match go_regex_to_rust(pattern) {
            Ok(translated) => Regex::new(&translated).map_err(|e| go_regex_error(pattern, &translated, &e)),
            Err(code) => Err(format!("error parsing regexp: {code}")),
        };
        if cache.len() > 512 {
            cache.clear();
        }
        cache.insert(pattern.to_string(), r.clone());
        r
    })
}

/// Go's `regexp.quote`.
fn go_regex_quote(s: &str) -> String {
    if !s.contains('`') && s.chars().all(|c| c == '\t' || !c.is_control()) {
        format!("`{s}`")
    } else {
        quote(s)
    }
}

fn f_match(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let re = compile(&string_arg(&a, 0))?;
    Ok(Value::Bool(re.is_match(&string_arg(&a, 1))))
}

fn f_re_replace_all(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let pattern = string_arg(&a, 0);
    let re = compile(&pattern).map_err(|e| format!("regexp: Compile({}): {e}", go_regex_quote(&pattern)))?;
    let repl = string_arg(&a, 1);
    Ok(Value::str(&re.replace_all(&string_arg(&a, 2), repl.as_str())))
}

// ---- Go builtins ------------------------------------------------------------------------------

fn f_call(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let name = string_arg(&a, 0);
    match a.get(1).cloned().unwrap_or(Value::Invalid).indirect_interface() {
        Value::Invalid => Err("call of nil".into()),
        f => Err(format!("non-function {name} of type {}", f.type_name())),
    }
}

/// Type name after pointer indirection.
fn deref_type_name(v: &Value) -> String {
    match v {
        Value::Sample(_) => "template.sample".into(),
        Value::Time(_) => "time.Time".into(),
        Value::Duration(_) => "time.Duration".into(),
        other => other.type_name(),
    }
}

fn f_len(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    match &a[0] {
        Value::Nil => Err("len of nil pointer".into()),
        Value::Invalid => Err("reflect: call of reflect.Value.Type on zero Value".into()),
        v => match v.len() {
            Some(n) => Ok(Value::int(n as i64)),
            None => Err(format!("len of type {}", deref_type_name(v))),
        },
    }
}

fn index_arg(index: &Value, cap: usize) -> Result<usize, String> {
    let x: i64 = match index {
        Value::Int(i, _) => *i,
        Value::Uint(u, _) => *u as i64,
        Value::Invalid => return Err("cannot index slice/array with nil".into()),
        other => return Err(format!("cannot index slice/array with type {}", other.type_name())),
    };
    if x < 0 || x as u64 > cap as u64 {
        return Err(format!("index out of range: {x}"));
    }
    Ok(x as usize)
}

fn map_key(index: &Value) -> Result<String, String> {
    match index {
        Value::Str(s) => Ok(s.to_string()),
        Value::Invalid => Err("value is nil; should be of type string".into()),
        other => Err(format!("value has type {}; should be string", other.type_name())),
    }
}

fn f_index(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let mut item = a[0].clone().indirect_interface();
    if matches!(item, Value::Invalid) {
        return Err("index of untyped nil".into());
    }
    for index in &a[1..] {
        let index = index.clone().indirect_interface();
        if let Value::Iface(v) = &item {
            item = (**v).clone();
        }
        item = match &item {
            Value::Nil => return Err("index of nil pointer".into()),
            Value::Str(s) | Value::Html(s) => {
                let x = index_arg(&index, s.len())?;
                match s.as_bytes().get(x) {
                    Some(b) => Value::Uint(*b as u64, UintKind::Uint8),
                    None => return Err("reflect: string index out of range".into()),
                }
            }
            Value::List(l, _) => {
                let x = index_arg(&index, l.len())?;
                l.get(x).cloned().ok_or("reflect: slice index out of range")?
            }
            Value::QueryResult(q) => {
                let x = index_arg(&index, q.len())?;
                Value::Sample(q.get(x).cloned().ok_or("reflect: slice index out of range")?)
            }
            Value::StrMap(m) => Value::str(m.get(&map_key(&index)?).map(String::as_str).unwrap_or("")),
            Value::AnyMap(m) => m
                .get(&map_key(&index)?)
                .cloned()
                .map(Value::iface)
                .unwrap_or(Value::Nil),
            other => return Err(format!("can't index item of type {}", deref_type_name(other))),
        };
    }
    Ok(item)
}

fn f_slice(_: &Ctx, a: Vec<Value>) -> Result<Value, String> {
    let item = a[0].clone().indirect_interface();
    if matches!(item, Value::Invalid) {
        return Err("slice of untyped nil".into());
    }
    let indexes = &a[1..];
    if indexes.len() > 3 {
        return Err(format!("too many slice indexes: {}", indexes.len()));
    }
    let len = match &item {
        Value::Str(_) | Value::Html(_) => {
            if indexes.len() == 3 {
                return Err("cannot 3-index slice a string".into());
            }
            item.len().unwrap_or(0)
        }
        Value::List(..) | Value::QueryResult(_) => item.len().unwrap_or(0),
        other => return Err(format!("can't slice item of type {}", other.type_name())),
    };
    let mut idx = [0usize, len, len];
    for (i, index) in indexes.iter().enumerate() {
        idx[i] = index_arg(&index.clone().indirect_interface(), len)?;
    }
    if idx[0] > idx[1] {
        return Err(format!("invalid slice index: {} > {}", idx[0], idx[1]));
    }
    if indexes.len() == 3 && idx[1] > idx[2] {
        return Err(format!("invalid slice index: {} > {}", idx[1], idx[2]));
    }
    let (lo, hi) = (idx[0], idx[1]);
    Ok(match item {
        Value::Str(s) => Value::str(&String::from_utf8_lossy(&s.as_bytes()[lo..hi])),
        Value::Html(s) => Value::Html(String::from_utf8_lossy(&s.as_bytes()[lo..hi]).into()),
        Value::List(l, t) => Value::List(Rc::new(l[lo..hi].to_vec()), t),
        Value::QueryResult(q) => Value::QueryResult(Rc::new(q[lo..hi].to_vec())),
        other => other,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BasicKind {
    Invalid,
    Bool,
    Int,
    Uint,
    Float,
    String,
}

fn basic_kind(v: &Value) -> BasicKind {
    match v {
        Value::Bool(_) => BasicKind::Bool,
        Value::Int(..) => BasicKind::Int,
        Value::Uint(..) => BasicKind::Uint,
        Value::Float(_) => BasicKind::Float,
        Value::Str(_) | Value::Html(_) => BasicKind::String,
        _ => BasicKind::Invalid,
    }
}

fn int_of(v: &Value) -> i64 {
    match v {
        Value::Int(i, _) => *i,
        _ => 0,
    }
}

fn uint_of(v: &Value) -> u64 {
    match v {
        Value::Uint(u, _) => *u,
        _ => 0,
    }
}

fn float_of(v: &Value) -> f64 {
    match v {
        Value::Float(f) => *f,
        _ => 0.0,
    }
}

fn str_of(v: &Value) -> &str {
    match v {
        Value::Str(s) | Value::Html(s) => s,
        _ => "",
    }
}

fn is_nil(v: &Value) -> bool {
    matches!(v, Value::Invalid | Value::Nil)
}

fn eq(arg1: &Value, rest: &[Value]) -> Result<bool, String> {
    let arg1 = arg1.clone().indirect_interface();
    if rest.is_empty() {
        return Err("missing argument for comparison".into());
    }
    let k1 = basic_kind(&arg1);
    for arg in rest {
        let arg = arg.clone().indirect_interface();
        let k2 = basic_kind(&arg);
        let truth = if k1 != k2 {
            match (k1, k2) {
                (BasicKind::Int, BasicKind::Uint) => int_of(&arg1) >= 0 && int_of(&arg1) as u64 == uint_of(&arg),
                (BasicKind::Uint, BasicKind::Int) => int_of(&arg) >= 0 && uint_of(&arg1) == int_of(&arg) as u64,
                _ => {
                    if !is_nil(&arg1) && !is_nil(&arg) {
                        return Err(format!(
                            "incompatible types for comparison: {} and {}",
                            arg1.type_name(),
                            arg.type_name()
                        ));
                    }
                    false
                }
            }
        } else {
            match k1 {
                BasicKind::Bool => matches!((&arg1, &arg), (Value::Bool(a), Value::Bool(b)) if a == b),
                BasicKind::Float => float_of(&arg1) == float_of(&arg),
                BasicKind::Int => int_of(&arg1) == int_of(&arg),
                BasicKind::Uint => uint_of(&arg1) == uint_of(&arg),
                BasicKind::String => str_of(&arg1) == str_of(&arg),
                BasicKind::Invalid => {
                    let (ka, kb) = (arg1.kind(), arg.kind());
                    if !(ka == kb || ka == Kind::Invalid || kb == Kind::Invalid) {
                        return Err(format!(
                            "non-comparable types {}: {}, {}: {}",
                            sprintf("%s", std::slice::from_ref(&arg1)),
                            arg1.type_name(),
                            arg.type_name(),
                            sprintf("%v", std::slice::from_ref(&arg))
                        ));
                    }
                    if is_nil(&arg1) || is_nil(&arg) {
                        is_nil(&arg) == is_nil(&arg1)
                    } else {
                        match (&arg1, &arg) {
                            (Value::Sample(a), Value::Sample(b)) => Rc::ptr_eq(a, b),
                            (Value::Time(_), Value::Time(_)) | (Value::Duration(_), Value::Duration(_)) => false,
                            _ => {
                                return Err(format!(
                                    "non-comparable type {}: {}",
                                    sprintf("%s", std::slice::from_ref(&arg)),
                                    arg.type_name()
                                ));
                            }
                        }
                    }
                }
            }
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lt(arg1: &Value, arg2: &Value) -> Result<bool, String> {
    let arg1 = arg1.clone().indirect_interface();
    let arg2 = arg2.clone().indirect_interface();
    let k1 = basic_kind(&arg1);
    let k2 = basic_kind(&arg2);
    if k1 == BasicKind::Invalid || k2 == BasicKind::Invalid {
        return Err("invalid type for comparison".into());
    }
    if k1 != k2 {
        return match (k1, k2) {
            (BasicKind::Int, BasicKind::Uint) => Ok(int_of(&arg1) < 0 || (int_of(&arg1) as u64) < uint_of(&arg2)),
            (BasicKind::Uint, BasicKind::Int) => Ok(int_of(&arg2) >= 0 && uint_of(&arg1) < int_of(&arg2) as u64),
            _ => Err(format!(
                "incompatible types for comparison: {} and {}",
                arg1.type_name(),
                arg2.type_name()
            )),
        };
    }
    match k1 {
        BasicKind::Bool => Err("invalid type for comparison".into()),
        BasicKind::Float => Ok(float_of(&arg1) < float_of(&arg2)),
        BasicKind::Int => Ok(int_of(&arg1) < int_of(&arg2)),
        BasicKind::Uint => Ok(uint_of(&arg1) < uint_of(&arg2)),
        BasicKind::String => Ok(str_of(&arg1) < str_of(&arg2)),
        BasicKind::Invalid => Err("invalid type for comparison".into()),
    }
}

fn le(arg1: &Value, arg2: &Value) -> Result<bool, String> {
    if lt(arg1, arg2)? {
        return Ok(true);
    }
    eq(arg1, std::slice::from_ref(arg2))
}

// ---- methods ------------------------------------------------------------------------------------

macro_rules! method {
    ($name:literal, [$($t:ident),*], $imp:expr) => {
        MethodDef { name: $name, params: &[$(Ty::$t),*], imp: $imp }
    };
}

fn time_of(v: &Value) -> GoTime {
    match v {
        Value::Time(t) => *t,
        _ => GoTime { secs: 0, nanos: 0 },
    }
}

fn dur_of(v: &Value) -> i64 {
    match v {
        Value::Duration(d) => *d,
        _ => 0,
    }
}

static TIME_METHODS: &[MethodDef] = &[
    method!("Format", [String], |r, a| Ok(Value::str(
        &time_of(r).format(&string_arg(&a, 0))
    ))),
    method!("String", [], |r, _| Ok(Value::str(&time_of(r).string()))),
    method!("Unix", [], |r, _| Ok(Value::Int(time_of(r).secs, IntKind::Int64))),
    method!("UnixMilli", [], |r, _| {
        let t = time_of(r);
        Ok(Value::Int(t.secs * 1000 + (t.nanos / 1_000_000) as i64, IntKind::Int64))
    }),
    method!("UnixMicro", [], |r, _| {
        let t = time_of(r);
        Ok(Value::Int(t.secs * 1_000_000 + (t.nanos / 1000) as i64, IntKind::Int64))
    }),
    method!("UnixNano", [], |r, _| Ok(Value::Int(
        time_of(r).unix_nano(),
        IntKind::Int64
    ))),
    method!("Year", [], |r, _| Ok(Value::int(time_of(r).civil().year))),
    method!("Month", [], |r, _| Ok(Value::Int(
        time_of(r).civil().month as i64,
        IntKind::Month
    ))),
    method!("Day", [], |r, _| Ok(Value::int(time_of(r).civil().day as i64))),
    method!("Hour", [], |r, _| Ok(Value::int(time_of(r).civil().hour as i64))),
    method!("Minute", [], |r, _| Ok(Value::int(time_of(r).civil().minute as i64))),
    method!("Second", [], |r, _| Ok(Value::int(time_of(r).civil().second as i64))),
    method!("Nanosecond", [], |r, _| Ok(Value::int(time_of(r).nanos as i64))),
    method!("YearDay", [], |r, _| Ok(Value::int(time_of(r).civil().yday as i64))),
    method!("Weekday", [], |r, _| Ok(Value::Int(
        time_of(r).civil().wday as i64,
        IntKind::Weekday
    ))),
    method!("UTC", [], |r, _| Ok(Value::Time(time_of(r)))),
    method!("Local", [], |r, _| Ok(Value::Time(time_of(r)))),
    method!("IsZero", [], |r, _| {
        let t = time_of(r);
        Ok(Value::Bool(t.secs == -62_135_596_800 && t.nanos == 0))
    }),
];

static DURATION_METHODS: &[MethodDef] = &[
    method!("String", [], |r, _| Ok(Value::str(&super::gotime::duration_string(
        dur_of(r)
    )))),
    method!("Hours", [], |r, _| {
        let d = dur_of(r);
        const H: i64 = 3_600_000_000_000;
        Ok(Value::Float((d / H) as f64 + (d % H) as f64 / 3.6e12))
    }),
    method!("Minutes", [], |r, _| {
        let d = dur_of(r);
        const M: i64 = 60_000_000_000;
        Ok(Value::Float((d / M) as f64 + (d % M) as f64 / 6e10))
    }),
    method!("Seconds", [], |r, _| {
        let d = dur_of(r);
        Ok(Value::Float(
            (d / 1_000_000_000) as f64 + (d % 1_000_000_000) as f64 / 1e9,
        ))
    }),
    method!("Milliseconds", [], |r, _| Ok(Value::Int(
        dur_of(r) / 1_000_000,
        IntKind::Int64
    ))),
    method!("Microseconds", [], |r, _| Ok(Value::Int(
        dur_of(r) / 1_000,
        IntKind::Int64
    ))),
    method!("Nanoseconds", [], |r, _| Ok(Value::Int(dur_of(r), IntKind::Int64))),
    method!("Abs", [], |r, _| Ok(Value::Duration(
        dur_of(r).checked_abs().unwrap_or(i64::MAX)
    ))),
];

static STRINGER_METHODS: &[MethodDef] = &[method!("String", [], |r, _| Ok(Value::str(
    &r.stringer().unwrap_or_default()
)))];

/// Methods Go would find on the receiver's type; `notify`: Alertmanager's template data, where
/// label maps are `template.KV` and alert lists `template.Alerts`.
pub(crate) fn method(recv: &Value, name: &str, notify: bool) -> Option<&'static MethodDef> {
    let table: &'static [MethodDef] = match recv {
        Value::Time(_) => TIME_METHODS,
        Value::Duration(_) => DURATION_METHODS,
        Value::Int(_, IntKind::Month | IntKind::Weekday) => STRINGER_METHODS,
        Value::StrMap(_) if notify => super::notify::KV_METHODS,
        Value::List(_, super::notify::PAIR_TYPE) if notify => super::notify::PAIRS_METHODS,
        Value::List(_, super::notify::ALERT_TYPE) if notify => super::notify::ALERTS_METHODS,
        _ => return None,
    };
    table.iter().find(|m| m.name == name)
}
