//! The `promtool test rules` file format, decoded strictly (unknown keys are errors with
//! `line:col`), plus watchfire's extension test kind `watchfire_alert_state_test`.

use std::collections::BTreeMap;

use crate::rules::duration::Duration;
use crate::rules::file::Spanned;
use crate::rules::yaml::{self, DecodeError, MapReader, Node, Pos};

/// One unit-test file.
#[derive(Clone, Debug, Default)]
pub struct TestFile {
    /// Globs, relative to the test file's directory.
    pub rule_files: Vec<Spanned<String>>,
    /// Default 1m.
    pub evaluation_interval: Option<Duration>,
    pub group_eval_order: Vec<Spanned<String>>,
    /// Compare promql_expr_test values allowing a one-ulp difference.
    pub fuzzy_compare: bool,
    pub tests: Vec<TestGroup>,
}

/// One entry of `tests`.
#[derive(Clone, Debug, Default)]
pub struct TestGroup {
    pub pos: Pos,
    /// `name`, used by `--run`.
    pub name: String,
    /// Spacing of input samples; default `evaluation_interval`.
    pub interval: Option<Duration>,
    pub input_series: Vec<InputSeries>,
    pub alert_rule_test: Vec<AlertTestCase>,
    pub promql_expr_test: Vec<PromqlTestCase>,
    /// watchfire extension: assertions on alert state (pending, firing, resolved, inactive).
    pub alert_state_test: Vec<StateTestCase>,
    pub external_labels: Vec<(String, String)>,
    pub external_url: String,
    /// Unix ms of time zero of the test (`start_timestamp`); default 0.
    pub start_ms: i64,
}

#[derive(Clone, Debug)]
pub struct InputSeries {
    pub pos: Pos,
    pub series: String,
    pub values: String,
}

#[derive(Clone, Debug)]
pub struct AlertTestCase {
    pub pos: Pos,
    pub eval_time: Duration,
    pub alertname: String,
    pub exp_alerts: Vec<ExpAlert>,
}

#[derive(Clone, Debug, Default)]
pub struct ExpAlert {
    pub exp_labels: BTreeMap<String, String>,
    pub exp_annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug)]
pub struct PromqlTestCase {
    pub pos: Pos,
    pub expr: String,
    pub eval_time: Duration,
    pub exp_samples: Vec<ExpSample>,
}

#[derive(Clone, Debug)]
pub struct ExpSample {
    pub pos: Pos,
    /// Series notation, e.g. `metric{a="b"}` or `{a="b"}`; empty = no labels.
    pub labels: String,
    pub value: f64,
    /// Native histogram notation (not supported by watchfire's engine).
    pub histogram: Option<String>,
}

/// `watchfire_alert_state_test` entry.
#[derive(Clone, Debug)]
pub struct StateTestCase {
    pub pos: Pos,
    pub eval_time: Duration,
    pub alertname: String,
    pub exp_states: Vec<ExpState>,
}

/// The states a state test can expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedState {
    Pending,
    Firing,
    /// Resolved and still retained (re-sent to Alertmanager for 15m).
    Resolved,
    /// Neither pending nor firing (absent or resolved).
    Inactive,
}

impl ExpectedState {
    pub fn as_str(self) -> &'static str {
        match self {
            ExpectedState::Pending => "pending",
            ExpectedState::Firing => "firing",
            ExpectedState::Resolved => "resolved",
            ExpectedState::Inactive => "inactive",
        }
    }
}

#[derive(Clone, Debug)]
pub struct ExpState {
    pub pos: Pos,
    /// Alert labels without `alertname` (added automatically).
    pub labels: BTreeMap<String, String>,
    pub state: ExpectedState,
    /// Expected times, relative to the test's time zero.
    pub active_at: Option<Duration>,
    pub fired_at: Option<Duration>,
    pub resolved_at: Option<Duration>,
}

const FILE_FIELDS: &[&str] = &[
    "rule_files",
    "evaluation_interval",
    "group_eval_order",
    "tests",
    "fuzzy_compare",
];
const GROUP_FIELDS: &[&str] = &[
    "interval",
    "input_series",
    "alert_rule_test",
    "promql_expr_test",
    "external_labels",
    "external_url",
    "name",
    "start_timestamp",
    "watchfire_alert_state_test",
];

/// Decodes a test file; all decoding errors are returned, each with its position.
pub fn decode(src: &str, ignore_unknown_fields: bool) -> Result<TestFile, Vec<DecodeError>> {
    let doc = yaml::parse(src).map_err(|e| {
        vec![DecodeError {
            pos: e.pos,
            message: e.message,
        }]
    })?;
    let Some(root) = doc.root else {
        return Ok(TestFile::default());
    };
    let mut errs = Vec::new();
    let mut d = Decoder {
        ignore_unknown_fields,
        errs: &mut errs,
    };
    let file = d.file(&root);
    if errs.is_empty() {
        Ok(file)
    } else {
        errs.sort_by_key(|e| e.pos);
        Err(errs)
    }
}

struct Decoder<'a> {
    ignore_unknown_fields: bool,
    errs: &'a mut Vec<DecodeError>,
}

impl Decoder<'_> {
    fn map<'n>(&mut self, node: &'n Node, type_name: &str, fields: &[&str]) -> Option<MapReader<'n>> {
        MapReader::new(node, type_name, fields, self.ignore_unknown_fields, self.errs)
    }

    fn file(&mut self, root: &Node) -> TestFile {
        let mut out = TestFile::default();
        let Some(m) = self.map(root, "main.unitTestFile", FILE_FIELDS) else {
            return out;
        };
        out.rule_files = self.strings(&m, "rule_files");
        out.evaluation_interval = self.duration(&m, "evaluation_interval");
        out.group_eval_order = self.strings(&m, "group_eval_order");
        out.fuzzy_compare = m.bool("fuzzy_compare", self.errs).is_some_and(|(b, _)| b);
        if let Some(tests) = m.seq("tests", self.errs) {
            for t in tests {
                if let Some(g) = self.group(t) {
                    out.tests.push(g);
                }
            }
        }
        out
    }

    fn strings(&mut self, m: &MapReader<'_>, key: &str) -> Vec<Spanned<String>> {
        let mut out = Vec::new();
        for item in m.seq(key, self.errs).unwrap_or_default() {
            match item {
                Node::Scalar(s) if !s.is_null() => out.push(Spanned::new(s.value.clone(), s.pos)),
                Node::Scalar(_) => {}
                other => self.errs.push(DecodeError {
                    pos: other.pos(),
                    message: format!("cannot unmarshal {} into string", other.kind_name()),
                }),
            }
        }
        out
    }

    fn duration(&mut self, m: &MapReader<'_>, key: &str) -> Option<Duration> {
        let (text, pos, _) = m.string(key, self.errs)?;
        match Duration::parse(text) {
            Ok(d) => Some(d),
            Err(e) => {
                self.errs.push(DecodeError {
                    pos,
                    message: format!("{key}: {e}"),
                });
                None
            }
        }
    }

    fn string_map(&mut self, m: &MapReader<'_>, key: &str) -> BTreeMap<String, String> {
        m.string_map(key, self.errs)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| {
                (
                    k.value.clone(),
                    if v.is_null() { String::new() } else { v.value.clone() },
                )
            })
            .collect()
    }

    fn group(&mut self, node: &Node) -> Option<TestGroup> {
        let m = self.map(node, "main.testGroup", GROUP_FIELDS)?;
        let mut g = TestGroup {
            pos: m.pos,
            ..TestGroup::default()
        };
        g.name = m
            .string("name", self.errs)
            .map(|(s, _, _)| s.to_string())
            .unwrap_or_default();
        g.interval = self.duration(&m, "interval");
        g.external_url = m
            .string("external_url", self.errs)
            .map(|(s, _, _)| s.to_string())
            .unwrap_or_default();
        g.external_labels = self.string_map(&m, "external_labels").into_iter().collect();
        if let Some((text, pos, _)) = m.string("start_timestamp", self.errs) {
            match parse_start_timestamp(text) {
                Ok(ms) => g.start_ms = ms,
                Err(e) => self.errs.push(DecodeError { pos, message: e }),
            }
        }
        for item in m.seq("input_series", self.errs).unwrap_or_default() {
            let Some(s) = self.map(item, "main.series", &["series", "values"]) else {
                continue;
            };
            let series = s
                .string("series", self.errs)
                .map(|(v, _, _)| v.to_string())
                .unwrap_or_default();
            let values = s
                .string("values", self.errs)
                .map(|(v, _, _)| v.to_string())
                .unwrap_or_default();
            g.input_series.push(InputSeries {
                pos: s.pos,
                series,
                values,
            });
        }
        for item in m.seq("alert_rule_test", self.errs).unwrap_or_default() {
            let Some(a) = self.map(item, "main.alertTestCase", &["eval_time", "alertname", "exp_alerts"]) else {
                continue;
            };
            let eval_time = self.duration(&a, "eval_time").unwrap_or_default();
            let alertname = a
                .string("alertname", self.errs)
                .map(|(v, _, _)| v.to_string())
                .unwrap_or_default();
            let mut exp_alerts = Vec::new();
            for e in a.seq("exp_alerts", self.errs).unwrap_or_default() {
                let Some(em) = self.map(e, "main.alert", &["exp_labels", "exp_annotations"]) else {
                    continue;
                };
                exp_alerts.push(ExpAlert {
                    exp_labels: self.string_map(&em, "exp_labels"),
                    exp_annotations: self.string_map(&em, "exp_annotations"),
                });
            }
            g.alert_rule_test.push(AlertTestCase {
                pos: a.pos,
                eval_time,
                alertname,
                exp_alerts,
            });
        }
        for item in m.seq("promql_expr_test", self.errs).unwrap_or_default() {
            let Some(p) = self.map(item, "main.promqlTestCase", &["expr", "eval_time", "exp_samples"]) else {
                continue;
            };
            let expr = p
                .string("expr", self.errs)
                .map(|(v, _, _)| v.to_string())
                .unwrap_or_default();
            let eval_time = self.duration(&p, "eval_time").unwrap_or_default();
            let mut exp_samples = Vec::new();
            for e in p.seq("exp_samples", self.errs).unwrap_or_default() {
                let Some(sm) = self.map(e, "main.sample", &["labels", "value", "histogram"]) else {
                    continue;
                };
                exp_samples.push(ExpSample {
                    pos: sm.pos,
                    labels: sm
                        .string("labels", self.errs)
                        .map(|(v, _, _)| v.to_string())
                        .unwrap_or_default(),
                    value: sm.float("value", self.errs).map_or(0.0, |(v, _)| v),
                    histogram: sm.string("histogram", self.errs).map(|(v, _, _)| v.to_string()),
                });
            }
            g.promql_expr_test.push(PromqlTestCase {
                pos: p.pos,
                expr,
                eval_time,
                exp_samples,
            });
        }
        for item in m.seq("watchfire_alert_state_test", self.errs).unwrap_or_default() {
            let Some(a) = self.map(
                item,
                "watchfire.alertStateTestCase",
                &["eval_time", "alertname", "exp_states"],
            ) else {
                continue;
            };
            let eval_time = self.duration(&a, "eval_time").unwrap_or_default();
            let alertname = a
                .string("alertname", self.errs)
                .map(|(v, _, _)| v.to_string())
                .unwrap_or_default();
            let mut exp_states = Vec::new();
            for e in a.seq("exp_states", self.errs).unwrap_or_default() {
                let Some(sm) = self.map(
                    e,
                    "watchfire.expState",
                    &["labels", "state", "active_at", "fired_at", "resolved_at"],
                ) else {
                    continue;
                };
                let state = match sm.string("state", self.errs) {
                    Some(("pending", _, _)) => ExpectedState::Pending,
                    Some(("firing", _, _)) => ExpectedState::Firing,
                    Some(("resolved", _, _)) => ExpectedState::Resolved,
                    Some(("inactive", _, _)) => ExpectedState::Inactive,
                    Some((other, pos, _)) => {
                        self.errs.push(DecodeError {
                            pos,
                            message: format!("state {other:?} is not one of pending, firing, resolved, inactive"),
                        });
                        continue;
                    }
                    None => {
                        self.errs.push(DecodeError {
                            pos: sm.pos,
                            message: "state is required (pending, firing, resolved or inactive)".into(),
                        });
                        continue;
                    }
                };
                exp_states.push(ExpState {
                    pos: sm.pos,
                    labels: self.string_map(&sm, "labels"),
                    state,
                    active_at: self.duration(&sm, "active_at"),
                    fired_at: self.duration(&sm, "fired_at"),
                    resolved_at: self.duration(&sm, "resolved_at"),
                });
            }
            g.alert_state_test.push(StateTestCase {
                pos: a.pos,
                eval_time,
                alertname,
                exp_states,
            });
        }
        Some(g)
    }
}

/// `start_timestamp`: Unix seconds (integer or decimal) or RFC 3339; returns ms.
pub fn parse_start_timestamp(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 9.0e12 {
            return Ok((secs * 1000.0).round() as i64);
        }
    }
    match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(t) => Ok(t.timestamp_millis()),
        Err(_) => Err(format!(
            "start_timestamp: {s:?} is neither a Unix timestamp nor an RFC 3339 time"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_full_format() {
        let src = r#"
rule_files: [a.yml, 'rules/*.yml']
evaluation_interval: 30s
group_eval_order: [g1, g2]
fuzzy_compare: true
tests:
  - name: t1
    interval: 1m
    start_timestamp: "2024-01-01T00:00:00Z"
    external_labels: {site: eqiad}
    external_url: http://prom
    input_series:
      - series: 'up{job="a"}'
        values: 1 0x3
    alert_rule_test:
      - eval_time: 5m
        alertname: Down
        exp_alerts:
          - exp_labels: {job: a}
            exp_annotations: {summary: x}
      - eval_time: 1m
        alertname: Down
        exp_alerts:
    promql_expr_test:
      - expr: up
        eval_time: 0
        exp_samples:
          - labels: 'up{job="a"}'
            value: 1
          - value: 2.5
    watchfire_alert_state_test:
      - eval_time: 2m
        alertname: Down
        exp_states:
          - labels: {job: a}
            state: pending
            active_at: 1m
"#;
        let f = decode(src, false).unwrap();
        assert_eq!(f.rule_files.len(), 2);
        assert_eq!(f.evaluation_interval, Some(Duration::from_ms(30_000)));
        assert!(f.fuzzy_compare);
        let t = &f.tests[0];
        assert_eq!(t.name, "t1");
        assert_eq!(t.start_ms, 1_704_067_200_000);
        assert_eq!(t.input_series[0].values, "1 0x3");
        assert_eq!(t.alert_rule_test.len(), 2);
        assert!(t.alert_rule_test[1].exp_alerts.is_empty());
        assert_eq!(t.promql_expr_test[0].exp_samples[1].value, 2.5);
        assert_eq!(t.alert_state_test[0].exp_states[0].state, ExpectedState::Pending);
        assert_eq!(
            t.alert_state_test[0].exp_states[0].active_at,
            Some(Duration::from_ms(60_000))
        );
    }

    #[test]
    fn unknown_fields_are_errors() {
        let e = decode("tests:\n  - intervl: 1m\n", false).unwrap_err();
        assert_eq!(e[0].pos, Pos::new(2, 5));
        assert!(
            e[0].message
                .contains("field \"intervl\" not found in type main.testGroup"),
            "{}",
            e[0].message
        );
        assert!(decode("tests:\n  - intervl: 1m\n", true).is_ok());
        let e = decode("tests:\n  - alert_rule_test:\n      - eval_time: 1x\n", false).unwrap_err();
        assert!(e[0].message.contains("unknown unit"), "{}", e[0].message);
    }

    #[test]
    fn start_timestamps() {
        assert_eq!(parse_start_timestamp("1609459200"), Ok(1_609_459_200_000));
        assert_eq!(parse_start_timestamp("2024-01-01T00:00:00Z"), Ok(1_704_067_200_000));
        assert!(parse_start_timestamp("yesterday").is_err());
    }
}
