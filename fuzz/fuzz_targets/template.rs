//! The Go text/template engine, both faces: an alert annotation expanded as Prometheus does
//! (`template::Expander`, with a `query` function answering two samples), and a receiver text
//! rendered with Alertmanager's default templates (`template::NotifyTemplates`). The first byte
//! picks the face; the rest is the template.
#![no_main]
mod common;

use std::collections::BTreeMap;

use chrono::TimeZone;
use libfuzzer_sys::fuzz_target;
use watchfire::labels::Labels;
use watchfire::template::{Expander, NotifyAlert, NotifyData, NotifyTemplates, Querier, QuerySample, TemplateData};

struct TwoSamples;

impl Querier for TwoSamples {
    fn query(&self, expr: &str) -> Result<Vec<QuerySample>, String> {
        if expr.contains("error") {
            return Err("query failed".into());
        }
        Ok(vec![
            QuerySample {
                labels: Labels::from_pairs([("__name__", "up"), ("instance", "a:9100")]),
                value: 1.0,
            },
            QuerySample {
                labels: Labels::from_pairs([("__name__", "up"), ("instance", "b:9100")]),
                value: f64::NAN,
            },
        ])
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fuzz_target!(|data: &[u8]| {
    common::panic_hook();
    let Some((&face, rest)) = data.split_first() else {
        return;
    };
    let Some(text) = common::text(rest, 16 * 1024) else {
        return;
    };
    if face & 1 == 0 {
        let td = TemplateData {
            labels: map(&[("alertname", "GpuXid"), ("node", "n1"), ("severity", "page")]),
            external_labels: map(&[("cluster", "c1")]),
            external_url: "https://watchfire.example.com/prefix".into(),
            value: 79.5,
        };
        let _ = Expander::new("__alert_Fuzz", text, &td, Some(&TwoSamples), 1_700_000_000_000).expand();
    } else {
        let t = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let alert = NotifyAlert {
            status: "firing".into(),
            labels: map(&[("alertname", "GpuXid"), ("node", "n1")]),
            annotations: map(&[("summary", "xid 79 on n1")]),
            starts_at: t,
            ends_at: None,
            generator_url: "http://x/graph?g0.expr=up".into(),
            fingerprint: "0123456789abcdef".into(),
        };
        let nd = NotifyData {
            receiver: "team-ml".into(),
            status: "firing".into(),
            alerts: vec![
                alert.clone(),
                NotifyAlert {
                    status: "resolved".into(),
                    ends_at: Some(t),
                    ..alert
                },
            ],
            group_labels: map(&[("alertname", "GpuXid")]),
            common_labels: map(&[("alertname", "GpuXid")]),
            common_annotations: map(&[]),
            external_url: "https://watchfire.example.com".into(),
            owner: "ml".into(),
            cluster: "c1".into(),
            namespace: "train".into(),
            links: vec![("runbook".into(), "https://runbooks/x".into())],
        };
        let set = NotifyTemplates::default();
        if set.check(text).is_ok() {
            let _ = set.render(text, &nd);
        }
        // The same text as a template file of the configuration, then a default text over it.
        let with_file = NotifyTemplates::new(vec![("fuzz.tmpl".into(), text.to_string())]);
        let _ = with_file.render("{{ template \"slack.default.text\" . }}", &nd);
    }
});
