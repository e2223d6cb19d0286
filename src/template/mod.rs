//! Alert templates: Go's `text/template` with Prometheus' template functions.
//!
//! Prometheus renders alert labels and annotations with Go's `text/template`, option
//! `missingkey=zero`, and its own function map (`humanize`, `query`, ...). This module
//! re-implements both so that what real rule files use renders byte for byte as Prometheus does,
//! including Go's number formatting and its error messages.
//!
//! * [`Expander`] expands one alert template, with [`ALERT_TEMPLATE_DEFS`] prepended as
//!   Prometheus does, so `$labels`, `$value`, `$externalLabels`, `$externalURL` and `.Labels`,
//!   `.Value`, ... all work.
//! * [`check`] parses a template without running it (for `rulecheck`).
//!
//! Modules: `lexer` and `parse` (Go's `text/template/parse`), `exec` (evaluation), `funcs` (the
//! function map), `value` (dynamic values), `gofmt` (Go's `fmt` verbs; `strconv` is the crate's
//! [`crate::gofmt`]) and `gotime` (Go's `time` formatting).
//!
//! Semantics worth knowing: with `missingkey=zero` a missing key of `$labels` (a
//! `map[string]string`) expands to the empty string, while a missing field of nil data or a
//! missing `args` key prints `<no value>`; `eq`/`lt`/... reject mixed types as Go does
//! (`gt $value 80` is an error, `gt $value 80.0` is not). Output follows current Prometheus
//! (`Value interface{}`, `cases.Title`, `toDuration`/`now`, negative `parseDuration`) and current
//! Go (`{{else with}}`, `range` over an integer). Known differences: Go prints pointers nested in
//! slices as addresses (`{{ query "x" }}`); we print the sample. `sortByLabel` returns a sorted
//! copy instead of sorting its argument in place. Regular expressions run on the `regex` crate
//! with RE2's ASCII Perl classes; rare syntax errors may be worded differently from Go's.

mod exec;
mod funcs;
mod gofmt;
mod gotime;
mod lexer;
mod notify;
mod parse;
mod value;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::rc::Rc;

pub use self::funcs::{Querier, QuerySample};
pub use self::notify::{NotifyAlert, NotifyData, NotifyTemplates, DEFAULT_TEMPLATES};
use self::value::{AlertData, Value};

/// The data an alert template sees (Prometheus' `AlertTemplateData`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateData {
    /// `.Labels` / `$labels`.
    pub labels: BTreeMap<String, String>,
    /// `.ExternalLabels` / `$externalLabels`.
    pub external_labels: BTreeMap<String, String>,
    /// `.ExternalURL` / `$externalURL`; also what `externalURL` and `pathPrefix` return.
    pub external_url: String,
    /// `.Value` / `$value`.
    pub value: f64,
}

/// The definitions Prometheus prepends to every alert label and annotation template.
pub const ALERT_TEMPLATE_DEFS: &str =
    "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}";

/// Whether a template failed to parse or to execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateErrorKind {
    Parse,
    Exec,
}

impl TemplateErrorKind {
    fn verb(self) -> &'static str {
        match self {
            TemplateErrorKind::Parse => "parsing",
            TemplateErrorKind::Exec => "executing",
        }
    }
}

/// A template that failed to parse or execute.
///
/// `Display` gives Prometheus' wording, e.g.
/// `error executing template __alert_X: template: __alert_X:1:117: executing "__alert_X" at <.x>: ...`
/// (positions in `message` count the prepended [`ALERT_TEMPLATE_DEFS`], as Prometheus' do);
/// `offset`, `line` and `column` locate the error in the template text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("error {} template {}: {}", .kind.verb(), .name, .message)]
pub struct TemplateError {
    pub kind: TemplateErrorKind,
    /// The template name (`__alert_<rule name>` for alerting rules).
    pub name: String,
    /// Go's `text/template` error text (`template: NAME:LINE[:COL]: ...`).
    pub message: String,
    /// Byte offset of the error within the template text, when known.
    pub offset: Option<usize>,
    /// 1-based line of `offset` within the template text (1 when unknown).
    pub line: usize,
    /// 1-based column, in characters, of `offset` within its line (1 when unknown).
    pub column: usize,
}

impl TemplateError {
    fn new(kind: TemplateErrorKind, name: &str, message: String, text: &str, offset: Option<usize>) -> Self {
        let offset = offset.map(|o| o.min(text.len()));
        let (mut line, mut column) = (1, 1);
        if let Some(o) = offset {
            let mut o = o;
            while !text.is_char_boundary(o) {
                o -= 1;
            }
            let before = &text[..o];
            line = 1 + before.matches('\n').count();
            let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
            column = 1 + before[line_start..].chars().count();
        }
        TemplateError {
            kind,
            name: name.to_string(),
            message,
            offset,
            line,
            column,
        }
    }

    /// What Prometheus puts in a label or annotation whose template fails.
    pub fn placeholder(&self) -> String {
        format!("<error expanding template: {self}>")
    }
}

/// Expands one alert label or annotation template, as Prometheus' `Expander.Expand` does.
pub struct Expander<'a> {
    /// Template name; Prometheus uses `__alert_<alert name>`.
    pub name: &'a str,
    /// The template text (without [`ALERT_TEMPLATE_DEFS`]; they are prepended here).
    pub text: &'a str,
    pub data: &'a TemplateData,
    /// Runs `query`; without one, `query` fails.
    pub querier: Option<&'a dyn Querier>,
    /// Evaluation time in Unix milliseconds (what `now` returns, in seconds).
    pub time_ms: i64,
}

impl<'a> Expander<'a> {
    pub fn new(
        name: &'a str,
        text: &'a str,
        data: &'a TemplateData,
        querier: Option<&'a dyn Querier>,
        time_ms: i64,
    ) -> Self {
        Expander {
            name,
            text,
            data,
            querier,
            time_ms,
        }
    }

    /// Expands the template. Never panics; a bad template gives an error like Prometheus'.
    pub fn expand(&self) -> Result<String, TemplateError> {
        let data = Value::Alert(Rc::new(AlertData {
            labels: Rc::new(self.data.labels.clone()),
            external_labels: Rc::new(self.data.external_labels.clone()),
            external_url: Rc::from(self.data.external_url.as_str()),
            value: self.data.value,
        }));
        render(
            self.name,
            ALERT_TEMPLATE_DEFS,
            self.text,
            data,
            self.querier,
            self.time_ms,
            &self.data.external_url,
        )
    }
}

/// Parses `prefix + text` and executes it with `data` as dot. Error offsets are relative to
/// `text`.
fn render(
    name: &str,
    prefix: &str,
    text: &str,
    data: Value,
    querier: Option<&dyn Querier>,
    time_ms: i64,
    external_url: &str,
) -> Result<String, TemplateError> {
    let full = format!("{prefix}{text}");
    let user_offset = |pos: usize| pos.checked_sub(prefix.len());
    let trees = parse::parse(name, &full, &funcs::is_defined)
        .map_err(|e| TemplateError::new(TemplateErrorKind::Parse, name, e.message, text, user_offset(e.pos)))?;
    let ctx = funcs::Ctx {
        notify: false,
        querier,
        time_ms,
        external_url,
    };
    exec::execute(&trees, name, &full, data, &ctx).map_err(|e| {
        TemplateError::new(
            TemplateErrorKind::Exec,
            name,
            e.message,
            text,
            e.pos.and_then(user_offset),
        )
    })
}

/// Parses an alert template without executing it (with [`ALERT_TEMPLATE_DEFS`] prepended, as
/// Prometheus' rule file validation does), reporting where a syntax error is. Unknown functions
/// and undefined variables are parse errors, as in Go.
pub fn check(text: &str) -> Result<(), TemplateError> {
    check_named("__alert", text)
}

/// [`check`] with the template name used in messages.
pub fn check_named(name: &str, text: &str) -> Result<(), TemplateError> {
    let full = format!("{ALERT_TEMPLATE_DEFS}{text}");
    parse::parse(name, &full, &funcs::is_defined).map(|_| ()).map_err(|e| {
        TemplateError::new(
            TemplateErrorKind::Parse,
            name,
            e.message,
            text,
            e.pos.checked_sub(ALERT_TEMPLATE_DEFS.len()),
        )
    })
}

/// The name a notification text is parsed and executed under.
const NOTIFY_NAME: &str = "notify";

/// Parses the template set (`prefix`: definitions, each source alone as Go parses each file)
/// and the text, then executes the text with Alertmanager's data and functions.
fn render_with(r: &notify::NotifyRender<'_>) -> Result<String, TemplateError> {
    let trees = notify_trees(r.prefix_sources, r.text)?;
    let ctx = funcs::Ctx {
        notify: true,
        querier: None,
        time_ms: 0,
        external_url: "",
    };
    exec::execute(&trees, NOTIFY_NAME, r.text, r.data.clone(), &ctx)
        .map_err(|e| TemplateError::new(TemplateErrorKind::Exec, NOTIFY_NAME, e.message, r.text, e.pos))
}

/// The definitions of every source, later ones replacing earlier ones (Go's template set),
/// then the text's own.
fn notify_trees(
    sources: &[(&str, &str)],
    text: &str,
) -> Result<std::collections::HashMap<String, parse::Tree>, TemplateError> {
    let mut all = std::collections::HashMap::new();
    for (name, src) in sources.iter().copied().chain(std::iter::once((NOTIFY_NAME, text))) {
        let trees = parse::parse(name, src, &funcs::is_defined_notify)
            .map_err(|e| TemplateError::new(TemplateErrorKind::Parse, name, e.message, src, Some(e.pos)))?;
        for (k, t) in trees {
            // Go keeps a non-empty definition when a later one is empty.
            let keep_old = all
                .get(&k)
                .is_some_and(|old: &parse::Tree| !parse::is_empty_list(&old.root) && parse::is_empty_list(&t.root));
            if !keep_old {
                all.insert(k, t);
            }
        }
    }
    Ok(all)
}

/// Parses a notification text with the given definitions without running it.
fn check_notify(sources: &[(&str, &str)], text: &str) -> Result<(), TemplateError> {
    notify_trees(sources, text).map(|_| ())
}
