//! Jira issues, as Alertmanager 0.35's `notify/jira` keeps them: one issue per alert group,
//! found again by the label `ALERT{<SHA-256 of the group key>}`. Each notification searches
//! (JQL) for the group's open issue, or one resolved within `reopen_duration` when a
//! `reopen_transition` is set; finds one → updates it (`PUT`; summary and description left alone
//! where `enable_update: false`), else opens one (`POST`), never for a group that is already
//! resolved; then moves it with `resolve_transition` once the group resolves, or
//! `reopen_transition` when it fires again on a done issue. Summary cut to 255 characters,
//! description to 32767 (Atlassian Document Format JSON on `/rest/api/3`); `fields` are sent
//! as configured, their strings templates. 429 and 5xx are retried, other statuses are final.
//!
//! Beyond Alertmanager: a transport error is retried too (Alertmanager gives up on it). The
//! whole exchange is what is retried, search included, so a retried create whose first answer
//! was lost finds the issue it made and updates it instead of opening a second one.

use super::super::config::Config;
use super::super::integrations::{IntegrationConfig, Val};
use super::super::notifier::Notification;
use super::pagerduty::{dedup_key, truncate_runes};
use super::{Deliverer, DeliveryError, Request, Texts};
use crate::gofmt::quote as go_quote;
use serde_json::{json, Map, Value};

const MAX_SUMMARY_RUNES: usize = 255;
const MAX_DESCRIPTION_RUNES: usize = 32767;

/// A failed attempt: the error and the wait its answer asked for.
type Failure = (DeliveryError, Option<std::time::Duration>);

/// `url.JoinPath`: one slash between the base and the path.
fn join(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

/// A `summary`/`description` field: its template and whether an update rewrites it.
fn text_field<'a>(ic: &'a IntegrationConfig, name: &str, default: &'a str) -> (Option<&'a str>, bool) {
    match ic.fields.get(name) {
        None => (Some(default), true),
        Some(Val::Struct(f)) => (
            match f.get("template") {
                None => Some(default),
                Some(Val::Str(s)) => Some(s.as_str()),
                Some(_) => None,
            },
            f.bool_or("enable_update", true),
        ),
        Some(_) => (None, true),
    }
}

/// What the configuration renders to for one notification.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub project: String,
    /// The issue's `fields` (standard and custom), for a create.
    pub fields: Map<String, Value>,
    pub summary_updates: bool,
    pub description_updates: bool,
}

/// The group's label: how its issue is found again.
pub fn group_label(n: &Notification) -> String {
    format!("ALERT{{{}}}", dedup_key(&n.group_key))
}

fn api_type(ic: &IntegrationConfig) -> &str {
    match ic.fields.str("api_type") {
        "" => "auto",
        t => t,
    }
}

/// Renders the issue's fields.
pub fn render(
    cfg: &Config,
    ic: &IntegrationConfig,
    n: &Notification,
    external_url: &str,
) -> Result<Rendered, DeliveryError> {
    let f = &ic.fields;
    let mut t = Texts::new(cfg, n, external_url)?;
    let (summary_tmpl, summary_updates) = text_field(ic, "summary", r#"{{ template "jira.default.summary" . }}"#);
    let (description_tmpl, description_updates) =
        text_field(ic, "description", r#"{{ template "jira.default.description" . }}"#);
    let summary = truncate_runes(&t.render(summary_tmpl.unwrap_or("")), MAX_SUMMARY_RUNES);
    let project = t.render(f.str("project"));
    let issue_type = t.render(f.str("issue_type"));
    let custom = match f.get("fields") {
        Some(Val::Tree(tree)) => match tree.render(&mut |s| t.render(s)) {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        _ => Map::new(),
    };
    let description = truncate_runes(&t.render(description_tmpl.unwrap_or("")), MAX_DESCRIPTION_RUNES);
    let mut labels: Vec<String> = f.list("labels").iter().map(|l| t.render(l)).collect();
    labels.push(group_label(n));
    labels.sort();
    let priority = t.field(f, "priority", r#"{{ template "jira.default.priority" . }}"#);
    t.finish("Jira issue")?;
    let mut fields = Map::new();
    fields.insert("summary".into(), summary.into());
    let api_path = f
        .str("api_url")
        .split_once("://")
        .map_or("", |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
    if api_path.trim_end_matches('/').ends_with("/3") {
        let d = description.trim();
        if !d.is_empty() {
            let v: Value = serde_json::from_str(d)
                .map_err(|_| DeliveryError::Config("description template: invalid JSON for API v3".into()))?;
            fields.insert("description".into(), v);
        }
    } else if !description.is_empty() {
        fields.insert("description".into(), description.into());
    }
    fields.insert("issuetype".into(), json!({ "name": issue_type }));
    fields.insert("labels".into(), labels.into());
    if !priority.is_empty() {
        fields.insert("priority".into(), json!({ "name": priority }));
    }
    fields.insert("project".into(), json!({ "key": project }));
    // Custom fields win over the standard ones, as Alertmanager copies them last.
    fields.extend(custom);
    Ok(Rendered {
        project,
        fields,
        summary_updates,
        description_updates,
    })
}

/// The JQL finding the group's issue.
pub fn jql(ic: &IntegrationConfig, project: &str, label: &str, firing: bool) -> String {
    let f = &ic.fields;
    let mut q = String::new();
    let wont_fix = f.str("wont_fix_resolution");
    if !wont_fix.is_empty() {
        // `!=` alone would drop unresolved issues (resolution EMPTY), Alertmanager #4295.
        q.push_str(&format!(
            "(resolution is EMPTY or resolution != {}) and ",
            go_quote(wont_fix)
        ));
    }
    let reopen_minutes =
        crate::duration::parse_alertmanager(f.str("reopen_duration")).map_or(0, |d| d.as_chrono().num_minutes());
    if firing && !f.str("reopen_transition").is_empty() && reopen_minutes > 0 {
        q.push_str(&format!(
            "(resolutiondate is EMPTY OR resolutiondate >= -{reopen_minutes}m) and "
        ));
    } else {
        q.push_str("statusCategory != Done and ");
    }
    q.push_str(&format!(
        "project={} and labels={} order by status ASC,resolutiondate DESC",
        go_quote(project),
        go_quote(label)
    ));
    q
}

/// Where to search: Jira Cloud's `/rest/api/3/search/jql`, Data Center's `/search`.
pub fn search_url(ic: &IntegrationConfig) -> String {
    let base = ic.fields.str("api_url");
    let host = base
        .split_once("://")
        .map_or("", |(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""));
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = host.split(':').next().unwrap_or(host);
    match api_type(ic) {
        "cloud" => join(base, "/search/jql").replacen("/rest/api/2/", "/rest/api/3/", 1),
        "auto" if host.ends_with("atlassian.net") => {
            join(base, "/search/jql").replacen("/rest/api/2/", "/rest/api/3/", 1)
        }
        _ => join(base, "/search"),
    }
}

/// One request to the API: JSON, `Accept-Language: en`, 429 and 5xx retryable.
async fn call(
    d: &Deliverer,
    ic: &IntegrationConfig,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> Result<String, Failure> {
    let bytes = match body {
        Some(b) => serde_json::to_vec(b).map_err(|e| (DeliveryError::Config(e.to_string()), None))?,
        None => Vec::new(),
    };
    d.send_once(&Request {
        method,
        headers: &[("Accept-Language", "en")],
        extra_retry: &[429],
        ..Request::json(ic.fields.http("http_config"), url, &bytes)
    })
    .await
}

fn unreadable(what: &str, e: serde_json::Error) -> Failure {
    (DeliveryError::Config(format!("reading Jira's {what}: {e}")), None)
}

/// One whole exchange: search, create or update, transition.
async fn attempt(d: &Deliverer, ic: &IntegrationConfig, n: &Notification, r: &Rendered) -> Result<(), Failure> {
    let firing = n.status() == "firing";
    let base = ic.fields.str("api_url");
    let search = json!({
        "fields": ["status"],
        "jql": jql(ic, &r.project, &group_label(n), firing),
        "maxResults": 2,
    });
    let found = call(d, ic, reqwest::Method::POST, &search_url(ic), Some(&search)).await?;
    let found: Value = serde_json::from_str(&found).map_err(|e| unreadable("search answer", e))?;
    // The first is the open one, else the most recently resolved (the JQL's order).
    let issue = found["issues"].as_array().and_then(|a| a.first()).cloned();
    let key = issue.as_ref().and_then(|i| i["key"].as_str()).unwrap_or("").to_string();
    let mut fields = r.fields.clone();
    if issue.is_none() || key.is_empty() {
        if !firing {
            // Nothing to resolve: no issue is opened for a resolved group.
            return Ok(());
        }
        call(
            d,
            ic,
            reqwest::Method::POST,
            &join(base, "issue"),
            Some(&json!({ "fields": fields })),
        )
        .await?;
        return Ok(());
    }
    if !r.summary_updates {
        fields.remove("summary");
    }
    if !r.description_updates {
        fields.remove("description");
    }
    call(
        d,
        ic,
        reqwest::Method::PUT,
        &join(base, &format!("issue/{key}")),
        Some(&json!({ "fields": fields })),
    )
    .await?;
    let Some(category) = issue
        .as_ref()
        .and_then(|i| i["fields"]["status"]["statusCategory"]["key"].as_str())
    else {
        return Ok(());
    };
    let transition = match (firing, category == "done") {
        (true, true) => ic.fields.str("reopen_transition"),
        (false, false) => ic.fields.str("resolve_transition"),
        _ => "",
    };
    if transition.is_empty() {
        return Ok(());
    }
    let url = join(base, &format!("issue/{key}/transitions"));
    let list = call(d, ic, reqwest::Method::GET, &url, None).await?;
    let list: Value = serde_json::from_str(&list).map_err(|e| unreadable("transitions", e))?;
    let id = list["transitions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"].as_str() == Some(transition))
        .and_then(|t| t["id"].as_str())
        .ok_or_else(|| {
            (
                DeliveryError::Config(format!("can't find transition {transition} for issue {key}")),
                None,
            )
        })?
        .to_string();
    call(
        d,
        ic,
        reqwest::Method::POST,
        &url,
        Some(&json!({ "transition": { "id": id } })),
    )
    .await?;
    Ok(())
}

pub async fn send(d: &Deliverer, cfg: &Config, ic: &IntegrationConfig, n: &Notification) -> Result<(), DeliveryError> {
    let r = render(cfg, ic, n, &d.ctx.external_url)?;
    d.retrying(ic.fields.str("api_url"), || attempt(d, ic, n, &r)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::load_delivery_str;

    fn jira(extra: &str) -> IntegrationConfig {
        let cfg = load_delivery_str(
            &format!("receivers: [{{name: r, jira_configs: [{{project: P, issue_type: Bug, {extra}}}]}}]\nroute: {{receiver: r}}"),
            "t.yml",
        )
        .unwrap();
        cfg.receivers[0].integrations[0].clone()
    }

    #[test]
    fn search_endpoint_by_api_type() {
        let url = |extra: &str| search_url(&jira(extra));
        assert_eq!(
            url("api_url: 'https://j.example/rest/api/2'"),
            "https://j.example/rest/api/2/search"
        );
        assert_eq!(
            url("api_url: 'https://x.atlassian.net/rest/api/2/'"),
            "https://x.atlassian.net/rest/api/3/search/jql"
        );
        assert_eq!(
            url("api_url: 'https://x.atlassian.net/rest/api/2', api_type: datacenter"),
            "https://x.atlassian.net/rest/api/2/search"
        );
        assert_eq!(
            url("api_url: 'https://j.example/rest/api/2', api_type: cloud"),
            "https://j.example/rest/api/3/search/jql"
        );
    }

    #[test]
    fn jql_by_state() {
        let ic = jira("api_url: 'https://j/rest/api/2', reopen_transition: Reopen, reopen_duration: 2h");
        assert_eq!(
            jql(&ic, "P", "ALERT{x}", true),
            r#"(resolutiondate is EMPTY OR resolutiondate >= -120m) and project="P" and labels="ALERT{x}" order by status ASC,resolutiondate DESC"#
        );
        assert_eq!(
            jql(&ic, "P", "ALERT{x}", false),
            r#"statusCategory != Done and project="P" and labels="ALERT{x}" order by status ASC,resolutiondate DESC"#
        );
    }

    #[test]
    fn summary_as_string_or_struct() {
        let ic = jira("api_url: 'https://j/', summary: 'S {{ .Status }}'");
        assert_eq!(text_field(&ic, "summary", "d"), (Some("S {{ .Status }}"), true));
        let ic = jira("api_url: 'https://j/', summary: {enable_update: false}");
        assert_eq!(text_field(&ic, "summary", "d"), (Some("d"), false));
        assert_eq!(text_field(&ic, "description", "d"), (Some("d"), true));
    }
}
