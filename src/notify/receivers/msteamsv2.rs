//! Microsoft Teams workflow webhooks (Power Automate "post to a channel when a webhook request is
//! received"), which replaced the Office 365 connectors: an Adaptive Card in a `message`, as
//! Alertmanager 0.28's `msteamsv2_configs` sends it (title block colored by status, then the
//! text). 5xx is retried, other statuses final, as Alertmanager.
//!
//! Beyond Alertmanager 0.28: 429 is retried after its `Retry-After`; the text is cut so that the
//! card stays under Teams' 28 KB message limit; and a fact set names the owner, cluster and
//! namespace, and an action opens each diagnostic link. Alertmanager's `"weigth"` key (sic) is
//! kept so a workflow written for its cards reads ours.

use super::super::config::Config;
use super::super::integrations::IntegrationConfig;
use super::super::notifier::Notification;
use super::{secret, Deliverer, DeliveryError, Request, Texts};

/// Teams refuses messages above 28 KB; leave room for the card around the text.
pub const MAX_TEXT_BYTES: usize = 24_000;

/// Builds the card.
pub fn message(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<serde_json::Value, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let title = t.field(f, "title", r#"{{ template "msteamsv2.default.title" . }}"#);
    let mut text = t.field(f, "text", r#"{{ template "msteamsv2.default.text" . }}"#);
    if text.len() > MAX_TEXT_BYTES {
        let (cut, _) = super::sns::truncate_utf8(&text, MAX_TEXT_BYTES - 3);
        text = format!("{cut}…");
    }
    t.finish("Teams message")?;
    let color = match n.status() {
        "resolved" => "Good",
        _ => "Attention",
    };
    let mut body = vec![
        serde_json::json!({
            "type": "TextBlock", "text": title, "weigth": "Bolder", "size": "Medium",
            "wrap": true, "style": "heading", "color": color,
        }),
        serde_json::json!({ "type": "TextBlock", "text": text }),
    ];
    let d = &t.data;
    let facts: Vec<serde_json::Value> = [
        ("Owner", &d.owner),
        ("Cluster", &d.cluster),
        ("Namespace", &d.namespace),
    ]
    .iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| serde_json::json!({ "title": k, "value": v }))
    .collect();
    if !facts.is_empty() {
        body.push(serde_json::json!({ "type": "FactSet", "facts": facts }));
    }
    let mut content = serde_json::json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.2",
        "body": body,
        "msteams": { "width": "full" },
    });
    let actions: Vec<serde_json::Value> = d
        .links
        .iter()
        .filter(|(k, _)| k != "kubectl")
        .map(|(k, u)| serde_json::json!({ "type": "Action.OpenUrl", "title": k, "url": u }))
        .collect();
    if !actions.is_empty() {
        content["actions"] = actions.into();
    }
    Ok(serde_json::json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": content,
        }],
    }))
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let msg = message(cfg, ic, n, &d.ctx.external_url)?;
    let body = serde_json::to_vec(&msg).map_err(|e| DeliveryError::Config(e.to_string()))?;
    let f = &ic.fields;
    let url = secret(f.str("webhook_url"), f.str("webhook_url_file"))?;
    d.send(&Request {
        extra_retry: &[429],
        ..Request::json(f.http("http_config"), &url, &body)
    })
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::alert::PostableAlert;
    use crate::notify::config::{load_delivery_str, load_str};
    use crate::notify::notifier::Notifier;
    use chrono::{DateTime, Utc};

    const CFG: &str = "receivers: [{name: teams, msteamsv2_configs: [{webhook_url: 'http://x/wf'}]}]\nroute: {receiver: teams, group_by: [alertname], group_wait: 1s}";

    #[test]
    fn only_the_delivery_loader_reads_msteamsv2() {
        let e = load_str(CFG, "t.yml").unwrap_err();
        assert!(e.to_string().contains("msteamsv2_configs"), "{e}");
        let cfg = load_delivery_str(CFG, "t.yml").unwrap();
        let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let mut nf = Notifier::new(cfg.clone(), t0);
        let p = PostableAlert {
            labels: vec![("alertname".into(), "Down".into()), ("namespace".into(), "ns".into())],
            starts_at: Some(t0),
            generator_url: "http://prom/x".into(),
            ..Default::default()
        };
        nf.put_alerts(
            [p.into_alert(t0, crate::duration::Duration::from_secs(300)).unwrap()],
            t0,
        );
        let n = nf.advance(t0 + chrono::Duration::seconds(1), &mut |_| true).remove(0);
        let v = message(&cfg, &cfg.receivers[0].integrations[0], &n, "http://am").unwrap();
        let c = &v["attachments"][0]["content"];
        assert_eq!(c["body"][0]["text"], "[FIRING:1] Down (ns)");
        assert_eq!(c["body"][0]["color"], "Attention");
        assert_eq!(
            c["body"][1]["text"],
            "\n\n# Alerts Firing:\n\nLabels:\n  - alertname = Down\n  - namespace = ns\n\nAnnotations:\n\nSource: http://prom/x\n\n\n\n\n"
        );
        assert_eq!(c["body"][2]["facts"][0]["value"], "ns");
    }
}
