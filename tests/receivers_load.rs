//! Nothing accepted that is not delivered: a routes file with a receiver kind watchfire does not
//! deliver fails `watchfire run --check`, rulecheck and `watchfire replay` at load, naming the
//! file, line and column of the kind and the kinds watchfire delivers; the same file still loads
//! as Alertmanager reads it (`watchfire routes`, the amtool conformance); and every kind watchfire
//! delivers loads.

mod common;

use std::process::Command;

const RULES: &str = "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: vector(1)\n    labels: {severity: notify}\n    annotations: {summary: a}\n";

fn routes(receiver: &str) -> String {
    format!("route:\n  receiver: r\nreceivers:\n- name: r\n{receiver}")
}

const PUSHOVER: &str = "  pushover_configs:\n  - {user_key: u, token: t}\n";

/// The one Alertmanager kind watchfire does not deliver: Office 365 connector cards, which
/// Microsoft retired (`msteamsv2_configs` replaces them).
const MSTEAMS: &str = "  msteams_configs:\n  - {webhook_url: 'https://x/y'}\n";

fn expect_position(out: &std::process::Output, file: &str, line_col: &str) {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "must fail: {text}");
    assert!(
        text.contains(file) && text.contains(line_col),
        "no {file}:{line_col} in: {text}"
    );
    assert!(text.contains("msteams_configs"), "{text}");
    assert!(
        text.contains("slack_configs") && text.contains("email_configs") && text.contains("msteamsv2_configs"),
        "the delivered kinds are named: {text}"
    );
}

#[test]
fn run_check_refuses_undelivered_kind_with_position() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::embedded_config(dir.path(), RULES, &routes(MSTEAMS));
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["run", "--check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    expect_position(&out, "routes.yaml", "5:3");
}

#[test]
fn rulecheck_refuses_undelivered_kind_with_position() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), RULES).unwrap();
    std::fs::write(dir.path().join("routes.yaml"), routes(MSTEAMS)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rulecheck"))
        .current_dir(dir.path())
        .args(["rules.yaml", "--routes", "routes.yaml"])
        .output()
        .unwrap();
    expect_position(&out, "routes.yaml", "5:3");
}

#[test]
fn replay_refuses_undelivered_kind() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::embedded_config(dir.path(), RULES, &routes(MSTEAMS));
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .args(["replay", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    expect_position(&out, "routes.yaml", "5:3");
}

#[test]
fn alertmanager_reading_is_unchanged() {
    // What Alertmanager 0.25 accepts, `watchfire routes` accepts; msteamsv2 is not 0.25's.
    assert!(watchfire::notify::load_str(&routes(PUSHOVER), "r.yaml").is_ok());
    let teams = routes("  msteamsv2_configs: [{webhook_url: 'https://x/y'}]\n");
    assert!(watchfire::notify::load_str(&teams, "r.yaml").is_err());
    assert!(watchfire::notify::load_delivery_str(&teams, "r.yaml").is_ok());
}

#[test]
fn every_delivered_kind_loads_and_later_kinds_are_named() {
    for kind in [
        "  slack_configs: [{api_url: 'https://hooks.slack.com/services/x'}]\n",
        "  email_configs: [{to: a@b, from: c@d, smarthost: 'smtp:587'}]\n",
        "  opsgenie_configs: [{api_key: k}]\n",
        "  msteamsv2_configs: [{webhook_url_file: /etc/x}]\n",
        "  webhook_configs: [{url: 'http://x/y'}]\n",
        "  pagerduty_configs: [{routing_key: k}]\n",
        "  sns_configs: [{topic_arn: 'arn:aws:sns:us-east-1:1:t', sigv4: {region: us-east-1}}]\n",
        PUSHOVER,
        "  discord_configs: [{webhook_url: 'https://discord.com/api/webhooks/1/x'}]\n",
        "  webex_configs: [{room_id: r, http_config: {authorization: {credentials: t}}}]\n",
        "  telegram_configs: [{bot_token: t, chat_id: 1}]\n",
        "  victorops_configs: [{api_key: k, routing_key: r}]\n",
        "  wechat_configs: [{api_secret: s, corp_id: c}]\n",
        "  incidentio_configs: [{url: 'https://api.incident.io/v2/alert_events/http/x', alert_source_token: t}]\n",
        "  jira_configs: [{api_url: 'https://x.atlassian.net/rest/api/2', project: P, issue_type: Bug}]\n",
        "  rocketchat_configs: [{token: t, token_id: i}]\n",
        "  mattermost_configs: [{webhook_url: 'https://m/hooks/x'}]\n",
    ] {
        watchfire::notify::load_delivery_str(&routes(kind), "r.yaml").unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    let e =
        watchfire::notify::load_delivery_str(&routes("  msteams_configs: [{webhook_url: 'https://x'}]\n"), "r.yaml")
            .unwrap_err()
            .to_string();
    assert!(
        e.starts_with("r.yaml:5:3: msteams_configs: watchfire does not deliver"),
        "{e}"
    );
    // A template that cannot parse is a load error at its field, not a failed send.
    let e = watchfire::notify::load_delivery_str(
        &routes("  slack_configs:\n  - api_url: 'https://x/y'\n    title: '{{ .Status'\n"),
        "r.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("r.yaml:7:5: receiver \"r\": slack_configs.title"), "{e}");
    // CRAM-MD5 (auth_secret) is not delivered: refused at its field.
    let e = watchfire::notify::load_delivery_str(
        &routes(
            "  email_configs:\n  - {to: a@b, from: c@d, smarthost: 'smtp:587', auth_username: u, auth_secret: s}\n",
        ),
        "r.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("r.yaml:6:") && e.contains("auth_secret (CRAM-MD5)"),
        "{e}"
    );
}
