//! Alert label and annotation templates: the rules' side of `crate::template`.
//!
//! Prometheus names every alert template `__alert_<alertname>`, prepends the `$labels`,
//! `$externalLabels`, `$externalURL` and `$value` definitions, and turns an expansion error into
//! the text `<error expanding template: ...>` without failing the rule.

use std::collections::BTreeMap;

use crate::labels::Labels;
use crate::template::{Expander, Querier, TemplateData, TemplateError};

/// The template data for one alert: the sample's labels (with `__name__` if it has one) and
/// value, and the external labels and URL.
pub(crate) fn alert_data(labels: &Labels, value: f64, external_labels: &Labels, external_url: &str) -> TemplateData {
    TemplateData {
        labels: to_map(labels),
        external_labels: to_map(external_labels),
        external_url: external_url.to_string(),
        value,
    }
}

fn to_map(labels: &Labels) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|l| (l.name.to_string(), l.value.to_string()))
        .collect()
}

/// Checks that an alert template parses, as `promtool check rules` does; the error is Go's
/// message (`template: __alert_X:1: ...`) with the position inside `text`.
pub(crate) fn check(alert_name: &str, text: &str) -> Result<(), TemplateError> {
    if !text.contains("{{") {
        return Ok(());
    }
    crate::template::check_named(&format!("__alert_{alert_name}"), text)
}

/// Expands one template for an alert at `ts_ms`.
pub(crate) fn expand(alert_name: &str, text: &str, data: &TemplateData, querier: &dyn Querier, ts_ms: i64) -> String {
    if !text.contains("{{") {
        return text.to_string();
    }
    let name = format!("__alert_{alert_name}");
    match Expander::new(&name, text, data, Some(querier), ts_ms).expand() {
        Ok(s) => s,
        Err(e) => e.placeholder(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::QuerySample;

    struct OneSeries;

    impl Querier for OneSeries {
        fn query(&self, expr: &str) -> Result<Vec<QuerySample>, String> {
            assert_eq!(expr, "up");
            Ok(vec![QuerySample {
                labels: Labels::from_pairs([("job", "a")]),
                value: 7.0,
            }])
        }
    }

    fn data() -> TemplateData {
        alert_data(
            &Labels::from_pairs([("__name__", "disk_free"), ("instance", "host:9100")]),
            1_234_567.0,
            &Labels::from_pairs([("site", "eqiad")]),
            "http://prom.example",
        )
    }

    #[test]
    fn expands_prometheus_templates() {
        let d = data();
        let e = |t: &str| expand("DiskLow", t, &d, &OneSeries, 60_000);
        assert_eq!(
            e("{{ $labels.instance }} at {{ $externalLabels.site }}"),
            "host:9100 at eqiad"
        );
        assert_eq!(e("{{ $value | humanize }}"), "1.235M");
        assert_eq!(
            e("{{ .Labels.__name__ }} {{ $externalURL }}"),
            "disk_free http://prom.example"
        );
        assert_eq!(e("{{ with query \"up\" }}{{ . | first | value }}{{ end }}"), "7");
        assert_eq!(e("no templates here"), "no templates here");
    }

    #[test]
    fn expansion_errors_become_placeholders() {
        let d = data();
        let out = expand("DiskLow", "{{ humanize \"abc\" }}", &d, &OneSeries, 0);
        assert!(
            out.starts_with(
                "<error expanding template: error executing template __alert_DiskLow: template: __alert_DiskLow:1:"
            ),
            "{out}"
        );
    }

    #[test]
    fn check_reports_the_position_in_the_text() {
        assert!(check("A", "{{ $labels.x }}").is_ok());
        let e = check("A", "ok\n{{ nosuch }}").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("function \"nosuch\" not defined"), "{}", e.message);
    }
}
