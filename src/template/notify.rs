//! Alertmanager's notification templates: the data a receiver's texts see (`template.Data`:
//! `.Receiver`, `.Status`, `.Alerts` with `.Firing`/`.Resolved`, `.GroupLabels`,
//! `.CommonLabels`, `.CommonAnnotations`, `.ExternalURL`; label maps are `template.KV` with
//! `SortedPairs`, `Names`, `Values`, `Remove`), Alertmanager's function map, and the default
//! named templates (`slack.default.title`, `email.default.subject`, ...), written here to give
//! Alertmanager 0.25's outputs.
//!
//! watchfire adds `.Owner`, `.Cluster`, `.Namespace` and `.Links` (each with `.Kind` and `.URL`)
//! to the data, so a receiver's text can say whose and where without a label lookup.
//!
//! Known differences from Go: a missing field of the data prints `<no value>` instead of failing
//! the template, and `html` texts (email) are not escaped by context as Go's `html/template`
//! does; the default HTML escapes what it prints with `html`.

use std::collections::BTreeMap;
use std::rc::Rc;

use chrono::{DateTime, Utc};

use super::funcs::{MethodDef, Ty};
use super::gotime::GoTime;
use super::value::Value;
use super::TemplateError;

/// Go type names of the slices that have methods.
pub(crate) const PAIR_TYPE: &str = "template.Pair";
pub(crate) const ALERT_TYPE: &str = "template.Alert";

/// One alert as the templates see it (`template.Alert`).
#[derive(Clone, Debug, PartialEq)]
pub struct NotifyAlert {
    pub status: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: DateTime<Utc>,
    /// Go's zero time when the alert has not ended.
    pub ends_at: Option<DateTime<Utc>>,
    pub generator_url: String,
    pub fingerprint: String,
}

/// The data a notification's templates see (`template.Data`, plus watchfire's fields).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NotifyData {
    pub receiver: String,
    pub status: String,
    pub alerts: Vec<NotifyAlert>,
    pub group_labels: BTreeMap<String, String>,
    pub common_labels: BTreeMap<String, String>,
    pub common_annotations: BTreeMap<String, String>,
    pub external_url: String,
    pub owner: String,
    pub cluster: String,
    pub namespace: String,
    /// Diagnostic links: (kind, URL).
    pub links: Vec<(String, String)>,
}

/// Go's zero `time.Time` (0001-01-01 00:00:00 UTC), in Unix seconds.
const GO_ZERO_SECS: i64 = -62_135_596_800;

fn go_time(t: Option<&DateTime<Utc>>) -> Value {
    Value::Time(match t {
        Some(t) => GoTime {
            secs: t.timestamp(),
            nanos: t.timestamp_subsec_nanos(),
        },
        None => GoTime {
            secs: GO_ZERO_SECS,
            nanos: 0,
        },
    })
}

fn any_map(fields: Vec<(&str, Value)>) -> Value {
    Value::AnyMap(Rc::new(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn kv(m: &BTreeMap<String, String>) -> Value {
    Value::StrMap(Rc::new(m.clone()))
}

fn alert_value(a: &NotifyAlert) -> Value {
    any_map(vec![
        ("Status", Value::str(&a.status)),
        ("Labels", kv(&a.labels)),
        ("Annotations", kv(&a.annotations)),
        ("StartsAt", go_time(Some(&a.starts_at))),
        ("EndsAt", go_time(a.ends_at.as_ref())),
        ("GeneratorURL", Value::str(&a.generator_url)),
        ("Fingerprint", Value::str(&a.fingerprint)),
    ])
}

impl NotifyData {
    fn value(&self) -> Value {
        let alerts = self.alerts.iter().map(alert_value).collect();
        let links = self
            .links
            .iter()
            .map(|(k, u)| any_map(vec![("Kind", Value::str(k)), ("URL", Value::str(u))]))
            .collect();
        any_map(vec![
            ("Receiver", Value::str(&self.receiver)),
            ("Status", Value::str(&self.status)),
            ("Alerts", Value::List(Rc::new(alerts), ALERT_TYPE)),
            ("GroupLabels", kv(&self.group_labels)),
            ("CommonLabels", kv(&self.common_labels)),
            ("CommonAnnotations", kv(&self.common_annotations)),
            ("ExternalURL", Value::str(&self.external_url)),
            ("Owner", Value::str(&self.owner)),
            ("Cluster", Value::str(&self.cluster)),
            ("Namespace", Value::str(&self.namespace)),
            ("Links", Value::List(Rc::new(links), "watchfire.Link")),
        ])
    }
}

/// `KV.SortedPairs`: by name, `alertname` first.
fn sorted_pairs(m: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if let Some(i) = out.iter().position(|(k, _)| *k == "alertname") {
        let a = out.remove(i);
        out.insert(0, a);
    }
    out
}

fn strings(v: impl IntoIterator<Item = String>) -> Value {
    Value::List(Rc::new(v.into_iter().map(|s| Value::str(&s)).collect()), "string")
}

fn map_of(v: &Value) -> BTreeMap<String, String> {
    match v {
        Value::StrMap(m) => (**m).clone(),
        _ => BTreeMap::new(),
    }
}

fn pair_field(p: &Value, name: &str) -> String {
    match p {
        Value::AnyMap(m) => match m.get(name) {
            Some(Value::Str(s)) => s.to_string(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

fn list_of(v: &Value) -> Vec<Value> {
    match v {
        Value::List(l, _) => l.to_vec(),
        _ => Vec::new(),
    }
}

fn pairs_value(m: &BTreeMap<String, String>) -> Value {
    Value::List(
        Rc::new(
            sorted_pairs(m)
                .into_iter()
                .map(|(k, v)| any_map(vec![("Name", Value::str(k)), ("Value", Value::str(v))]))
                .collect(),
        ),
        PAIR_TYPE,
    )
}

fn alerts_with(v: &Value, status: &str) -> Value {
    let l = list_of(v)
        .into_iter()
        .filter(|a| pair_field(a, "Status") == status)
        .collect();
    Value::List(Rc::new(l), ALERT_TYPE)
}

pub(crate) static KV_METHODS: &[MethodDef] = &[
    MethodDef {
        name: "SortedPairs",
        params: &[],
        imp: |r, _| Ok(pairs_value(&map_of(r))),
    },
    MethodDef {
        name: "Names",
        params: &[],
        imp: |r, _| {
            Ok(strings(
                sorted_pairs(&map_of(r)).into_iter().map(|(k, _)| k.to_string()),
            ))
        },
    },
    MethodDef {
        name: "Values",
        params: &[],
        imp: |r, _| {
            Ok(strings(
                sorted_pairs(&map_of(r)).into_iter().map(|(_, v)| v.to_string()),
            ))
        },
    },
    MethodDef {
        name: "Remove",
        params: &[Ty::Strings],
        imp: |r, a| {
            let mut m = map_of(r);
            for k in list_of(&a[0]) {
                if let Value::Str(k) = k {
                    m.remove(&*k);
                }
            }
            Ok(Value::StrMap(Rc::new(m)))
        },
    },
];

pub(crate) static PAIRS_METHODS: &[MethodDef] = &[
    MethodDef {
        name: "Names",
        params: &[],
        imp: |r, _| Ok(strings(list_of(r).iter().map(|p| pair_field(p, "Name")))),
    },
    MethodDef {
        name: "Values",
        params: &[],
        imp: |r, _| Ok(strings(list_of(r).iter().map(|p| pair_field(p, "Value")))),
    },
];

pub(crate) static ALERTS_METHODS: &[MethodDef] = &[
    MethodDef {
        name: "Firing",
        params: &[],
        imp: |r, _| Ok(alerts_with(r, "firing")),
    },
    MethodDef {
        name: "Resolved",
        params: &[],
        imp: |r, _| Ok(alerts_with(r, "resolved")),
    },
];

/// The named templates every receiver text can use (Alertmanager 0.25's `default.tmpl`
/// outputs; the email HTML is watchfire's own), followed by the configuration's `templates:`.
pub const DEFAULT_TEMPLATES: &str = include_str!("notify_default.tmpl");

/// Alertmanager's template set for one configuration: the defaults plus the texts of the
/// configuration's template files (later definitions win over the defaults, as in Go).
#[derive(Clone, Debug, Default)]
pub struct NotifyTemplates {
    user: Vec<(String, String)>,
}

impl NotifyTemplates {
    /// The defaults plus the given template files (name, text).
    pub fn new(files: Vec<(String, String)>) -> Self {
        NotifyTemplates { user: files }
    }

    /// The sources of definitions: the defaults, then the user's files.
    fn sources(&self) -> Vec<(&str, &str)> {
        std::iter::once(("default.tmpl", DEFAULT_TEMPLATES))
            .chain(self.user.iter().map(|(n, t)| (n.as_str(), t.as_str())))
            .collect()
    }

    /// Renders one configured text (`notify.TmplText`).
    pub fn render(&self, text: &str, data: &NotifyData) -> Result<String, TemplateError> {
        if !text.contains("{{") {
            return Ok(text.to_string());
        }
        super::render_with(&NotifyRender {
            prefix_sources: &self.sources(),
            text,
            data: data.value(),
        })
    }

    /// Parses a text with the template set without running it (for loading a configuration);
    /// also checks the template files themselves.
    pub fn check(&self, text: &str) -> Result<(), TemplateError> {
        super::check_notify(&self.sources(), text)
    }
}

pub(crate) struct NotifyRender<'a> {
    pub prefix_sources: &'a [(&'a str, &'a str)],
    pub text: &'a str,
    pub data: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kvs(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    fn data() -> NotifyData {
        let t: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let alert = |status: &str, inst: &str| NotifyAlert {
            status: status.into(),
            labels: kvs(&[("alertname", "HighLatency"), ("cluster", "c1"), ("instance", inst)]),
            annotations: kvs(&[("summary", "slow")]),
            starts_at: t,
            ends_at: None,
            generator_url: "http://prom/graph".into(),
            fingerprint: "abc".into(),
        };
        NotifyData {
            receiver: "team pager".into(),
            status: "firing".into(),
            alerts: vec![alert("firing", "a"), alert("resolved", "b")],
            group_labels: kvs(&[("alertname", "HighLatency")]),
            common_labels: kvs(&[("alertname", "HighLatency"), ("cluster", "c1")]),
            common_annotations: kvs(&[("summary", "slow")]),
            external_url: "http://am:9093".into(),
            owner: "ml-serving".into(),
            links: vec![("grafana".into(), "http://g/d".into())],
            ..Default::default()
        }
    }

    fn r(text: &str) -> String {
        NotifyTemplates::default().render(text, &data()).unwrap()
    }

    #[test]
    fn default_named_templates() {
        assert_eq!(
            r(r#"{{ template "slack.default.title" . }}"#),
            "[FIRING:1] HighLatency (c1)"
        );
        assert_eq!(
            r(r#"{{ template "slack.default.fallback" . }}"#),
            "[FIRING:1] HighLatency (c1) | http://am:9093/#/alerts?receiver=team+pager"
        );
        assert_eq!(r(r#"{{ template "slack.default.username" . }}"#), "Alertmanager");
        assert_eq!(
            r(r#"{{ template "__text_alert_list" .Alerts.Firing }}"#),
            "Labels:\n - alertname = HighLatency\n - cluster = c1\n - instance = a\nAnnotations:\n - summary = slow\nSource: http://prom/graph\n"
        );
        assert_eq!(
            r(r#"{{ template "opsgenie.default.description" . }}"#),
            "slow\nAlerts Firing:\nLabels:\n - alertname = HighLatency\n - cluster = c1\n - instance = a\nAnnotations:\n - summary = slow\nSource: http://prom/graph\n\nAlerts Resolved:\nLabels:\n - alertname = HighLatency\n - cluster = c1\n - instance = b\nAnnotations:\n - summary = slow\nSource: http://prom/graph\n"
        );
    }

    #[test]
    fn data_methods_and_functions() {
        assert_eq!(r("{{ .Status | toUpper }} {{ len .Alerts.Resolved }}"), "FIRING 1");
        assert_eq!(r(r#"{{ .CommonLabels.Names | join "," }}"#), "alertname,cluster");
        assert_eq!(
            r(r#"{{ (.CommonLabels.Remove (stringSlice "cluster")).Values | join "," }}"#),
            "HighLatency"
        );
        assert_eq!(r("{{ range .Alerts }}{{ .Labels.instance }}{{ end }}"), "ab");
        assert_eq!(r("{{ (index .Alerts 0).StartsAt }}"), "2024-01-01 00:00:00 +0000 UTC");
        assert_eq!(r("{{ (index .Alerts 0).EndsAt }}"), "0001-01-01 00:00:00 +0000 UTC");
        assert_eq!(
            r("{{ .Owner }} {{ range .Links }}{{ .Kind }}={{ .URL }}{{ end }}"),
            "ml-serving grafana=http://g/d"
        );
        assert_eq!(r("plain"), "plain");
    }

    #[test]
    fn errors_and_function_set() {
        let t = NotifyTemplates::default();
        // Prometheus' functions are not Alertmanager's.
        assert!(t.check("{{ humanize 1 }}").is_err());
        assert!(t.check("{{ .Status | title }}").is_ok());
        assert!(t.check("{{ .Status").is_err());
        assert!(t.render(r#"{{ template "nope" . }}"#, &data()).is_err());
        let user = NotifyTemplates::new(vec![(
            "t.tmpl".into(),
            r#"{{ define "mine" }}{{ .CommonLabels.cluster }}{{ end }}"#.into(),
        )]);
        assert_eq!(user.render(r#"{{ template "mine" . }}"#, &data()).unwrap(), "c1");
    }
}
