//! The `promtool test rules` file format, decoded strictly (unknown keys are errors with
//! `line:col`), plus watchfire's extension test kinds `watchfire_alert_state_test` and
//! `watchfire_notification_test` (with the file-level `watchfire_routes_file` and
//! `watchfire_owners_file`).

use std::collections::BTreeMap;

use crate::duration::Duration;
use crate::rules::file::Spanned;
use crate::yaml::strict::{self as yaml, DecodeError, MapReader, Node, Pos};

/// One unit-test file.
#[derive(Clone, Debug, Default)]
pub(crate) struct TestFile {
    /// Globs, relative to the test file's directory.
    pub rule_files: Vec<Spanned<String>>,
    /// Default 1m.
    pub evaluation_interval: Option<Duration>,
    pub group_eval_order: Vec<Spanned<String>>,
    /// Compare promql_expr_test values allowing a one-ulp difference.
    pub fuzzy_compare: bool,
    pub tests: Vec<TestGroup>,
    /// watchfire extension: the Alertmanager configuration notification tests route through,
    /// relative to the test file.
    pub routes_file: Option<Spanned<String>>,
    /// watchfire extension: the owners file (teams, links, deny-list), relative to the test file.
    pub owners_file: Option<Spanned<String>>,
    /// watchfire extension: cause rule files (globs) the notification tests run the cause stage
    /// with, relative to the test file.
    pub cause_files: Vec<Spanned<String>>,
}

/// One entry of `tests`.
#[derive(Clone, Debug, Default)]
pub(crate) struct TestGroup {
    /// `name`, used by `--run`.
    pub name: String,
    /// Spacing of input samples; default `evaluation_interval`.
    pub interval: Option<Duration>,
    pub input_series: Vec<InputSeries>,
    pub alert_rule_test: Vec<AlertTestCase>,
    pub promql_expr_test: Vec<PromqlTestCase>,
    /// watchfire extension: assertions on alert state (pending, firing, resolved, inactive).
    pub alert_state_test: Vec<StateTestCase>,
    /// watchfire extension: assertions on the notifications receivers got.
    pub notification_test: Vec<NotificationTestCase>,
    pub external_labels: Vec<(String, String)>,
    pub external_url: String,
    /// Unix ms of time zero of the test (`start_timestamp`); default 0.
    pub start_ms: i64,
}

#[derive(Clone, Debug)]
pub(crate) struct InputSeries {
    pub pos: Pos,
    pub series: String,
    pub values: String,
}

#[derive(Clone, Debug)]
pub(crate) struct AlertTestCase {
    pub eval_time: Duration,
    pub alertname: String,
    pub exp_alerts: Vec<ExpAlert>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct ExpAlert {
    pub exp_labels: BTreeMap<String, String>,
    pub exp_annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug)]
pub(crate) struct PromqlTestCase {
    pub expr: String,
    pub eval_time: Duration,
    pub exp_samples: Vec<ExpSample>,
}

#[derive(Clone, Debug)]
pub(crate) struct ExpSample {
    /// Series notation, e.g. `metric{a="b"}` or `{a="b"}`; empty = no labels.
    pub labels: String,
    pub value: f64,
    /// Native histogram notation (not supported by watchfire's engine).
    pub histogram: Option<String>,
}

/// `watchfire_alert_state_test` entry.
#[derive(Clone, Debug)]
pub(crate) struct StateTestCase {
    pub eval_time: Duration,
    pub alertname: String,
    pub exp_states: Vec<ExpState>,
}

/// The states a state test can expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExpectedState {
    Pending,
    Firing,
    /// Resolved and still retained (re-sent to Alertmanager for 15m).
    Resolved,
    /// Neither pending nor firing (absent or resolved).
    Inactive,
}

impl ExpectedState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ExpectedState::Pending => "pending",
            ExpectedState::Firing => "firing",
            ExpectedState::Resolved => "resolved",
            ExpectedState::Inactive => "inactive",
        }
    }
}

/// `watchfire_notification_test` entry: the notifications flushed in the window ending at
/// `eval_time` (see the module documentation of `unittest` for the semantics).
#[derive(Clone, Debug)]
pub(crate) struct NotificationTestCase {
    pub pos: Pos,
    pub eval_time: Duration,
    pub notifications: Vec<ExpNotification>,
}

/// One expected notification; fields left out are not checked.
#[derive(Clone, Debug, Default)]
pub(crate) struct ExpNotification {
    pub pos: Pos,
    pub receiver: String,
    /// Exact.
    pub group_labels: Option<BTreeMap<String, String>>,
    /// `firing` or `resolved`.
    pub status: Option<String>,
    /// The owning team; `""` expects none.
    pub owner: Option<String>,
    /// One entry per alert of the notification (exact count); each a subset of its labels.
    pub alerts: Option<Vec<BTreeMap<String, String>>>,
    /// Exact.
    pub summary: Option<String>,
    /// By kind (`runbook`, `grafana`, ...): a subset of the notification's links.
    pub links: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug)]
pub(crate) struct ExpState {
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
    "watchfire_routes_file",
    "watchfire_owners_file",
    "watchfire_cause_files",
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
    "watchfire_notification_test",
];

/// Decodes a test file; all decoding errors are returned, each with its position.
pub(crate) fn decode(src: &str, ignore_unknown_fields: bool) -> Result<TestFile, Vec<DecodeError>> {
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
        out.routes_file = m
            .string("watchfire_routes_file", self.errs)
            .map(|(s, pos, _)| Spanned::new(s.to_string(), pos));
        out.owners_file = m
            .string("watchfire_owners_file", self.errs)
            .map(|(s, pos, _)| Spanned::new(s.to_string(), pos));
        out.cause_files = self.strings(&m, "watchfire_cause_files");
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
        let mut g = TestGroup { ..TestGroup::default() };
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
                    labels: sm
                        .string("labels", self.errs)
                        .map(|(v, _, _)| v.to_string())
                        .unwrap_or_default(),
                    value: sm.float("value", self.errs).map_or(0.0, |(v, _)| v),
                    histogram: sm.string("histogram", self.errs).map(|(v, _, _)| v.to_string()),
                });
            }
            g.promql_expr_test.push(PromqlTestCase {
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
                    labels: self.string_map(&sm, "labels"),
                    state,
                    active_at: self.duration(&sm, "active_at"),
                    fired_at: self.duration(&sm, "fired_at"),
                    resolved_at: self.duration(&sm, "resolved_at"),
                });
            }
            g.alert_state_test.push(StateTestCase {
                eval_time,
                alertname,
                exp_states,
            });
        }
        for item in m.seq("watchfire_notification_test", self.errs).unwrap_or_default() {
            if let Some(c) = self.notification_case(item) {
                g.notification_test.push(c);
            }
        }
        Some(g)
    }

    fn notification_case(&mut self, item: &Node) -> Option<NotificationTestCase> {
        let a = self.map(item, "watchfire.notificationTestCase", &["eval_time", "notifications"])?;
        if !a.has("eval_time") {
            self.errs.push(DecodeError {
                pos: a.pos,
                message: "watchfire_notification_test: eval_time is required".into(),
            });
        }
        let eval_time = self.duration(&a, "eval_time").unwrap_or_default();
        let mut notifications = Vec::new();
        for e in a.seq("notifications", self.errs).unwrap_or_default() {
            let errs_before = self.errs.len();
            let Some(nm) = self.map(
                e,
                "watchfire.expNotification",
                &[
                    "receiver",
                    "group_labels",
                    "status",
                    "owner",
                    "alerts",
                    "summary",
                    "links",
                ],
            ) else {
                continue;
            };
            let receiver = match nm.string("receiver", self.errs) {
                Some((r, _, _)) if !r.is_empty() => r.to_string(),
                _ => {
                    // Said only when no misspelt key already explains it.
                    if self.errs.len() == errs_before {
                        self.errs.push(DecodeError {
                            pos: nm.pos,
                            message: "receiver is required in an expected notification".into(),
                        });
                    }
                    continue;
                }
            };
            let status = match nm.string("status", self.errs) {
                Some((s @ ("firing" | "resolved"), _, _)) => Some(s.to_string()),
                Some((other, pos, _)) => {
                    self.errs.push(DecodeError {
                        pos,
                        message: format!("status {other:?} is not one of firing, resolved"),
                    });
                    None
                }
                None => None,
            };
            let alerts = match nm.get("alerts") {
                None => None,
                Some(_) => Some(
                    nm.seq("alerts", self.errs)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|al| yaml::string_map(al, self.errs))
                        .map(|pairs| {
                            pairs
                                .into_iter()
                                .map(|(k, v)| {
                                    (
                                        k.value.clone(),
                                        if v.is_null() { String::new() } else { v.value.clone() },
                                    )
                                })
                                .collect()
                        })
                        .collect(),
                ),
            };
            let optional_map = |d: &mut Self, key: &str| nm.has(key).then(|| d.string_map(&nm, key));
            notifications.push(ExpNotification {
                pos: nm.pos,
                receiver,
                group_labels: optional_map(self, "group_labels"),
                status,
                owner: nm.has("owner").then(|| {
                    nm.string("owner", self.errs)
                        .map(|(s, _, _)| s.to_string())
                        .unwrap_or_default()
                }),
                alerts,
                summary: nm.has("summary").then(|| {
                    nm.string("summary", self.errs)
                        .map(|(s, _, _)| s.to_string())
                        .unwrap_or_default()
                }),
                links: optional_map(self, "links"),
            });
        }
        Some(NotificationTestCase {
            pos: a.pos,
            eval_time,
            notifications,
        })
    }
}

/// `start_timestamp`: Unix seconds (integer or decimal) or RFC 3339; returns ms.
pub(crate) fn parse_start_timestamp(s: &str) -> Result<i64, String> {
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
    fn decodes_notification_tests() {
        let src = r#"
rule_files: [r.yaml]
watchfire_routes_file: routes.yaml
watchfire_owners_file: owners.yaml
tests:
  - watchfire_notification_test:
      - eval_time: 2m30s
        notifications:
          - receiver: pager
            group_labels: {cluster: c1}
            status: resolved
            owner: ""
            alerts: [{alertname: A, pod: }]
            summary: s
            links: {runbook: "https://r"}
          - receiver: other
      - eval_time: 3m
        notifications: []
"#;
        let f = decode(src, false).unwrap();
        assert_eq!(f.routes_file.as_ref().unwrap().value, "routes.yaml");
        assert_eq!(f.owners_file.as_ref().unwrap().value, "owners.yaml");
        let c = &f.tests[0].notification_test;
        assert_eq!(c[0].eval_time, Duration::from_ms(150_000));
        let n = &c[0].notifications[0];
        assert_eq!(n.status.as_deref(), Some("resolved"));
        assert_eq!(n.owner.as_deref(), Some(""));
        assert_eq!(n.alerts.as_ref().unwrap()[0]["pod"], "");
        assert_eq!(n.links.as_ref().unwrap()["runbook"], "https://r");
        let m = &c[0].notifications[1];
        assert!(m.group_labels.is_none() && m.alerts.is_none() && m.owner.is_none());
        assert!(c[1].notifications.is_empty());

        let e = decode(
            "tests:\n  - watchfire_notification_test:\n      - notifications: [{receiver: r, status: up}]\n",
            false,
        )
        .unwrap_err();
        let msgs: Vec<String> = e.iter().map(|e| format!("{}: {}", e.pos, e.message)).collect();
        assert!(msgs.iter().any(|m| m.contains("eval_time is required")), "{msgs:?}");
        assert!(
            msgs.iter()
                .any(|m| m.contains("status \"up\" is not one of firing, resolved")),
            "{msgs:?}"
        );
    }

    #[test]
    fn start_timestamps() {
        assert_eq!(parse_start_timestamp("1609459200"), Ok(1_609_459_200_000));
        assert_eq!(parse_start_timestamp("2024-01-01T00:00:00Z"), Ok(1_704_067_200_000));
        assert!(parse_start_timestamp("yesterday").is_err());
    }
}
