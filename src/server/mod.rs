//! The HTTP server (axum):
//!
//! * `GET /api/v1/rules`, `GET /api/v1/alerts`: Prometheus' JSON shapes (Grafana reads them).
//! * `POST /api/v2/alerts`: Alertmanager-compatible ingest (an existing Prometheus, or
//!   node-probe events) into the notification pipeline.
//! * `GET /metrics`: Prometheus text format: evaluation durations and missed iterations, source
//!   errors, notifications sent and failed, outbox depth.
//! * `GET /-/healthy`, `GET /-/ready`, `POST /-/reload` (applied only when the new
//!   configuration is valid).
//! * `GET /`: a minimal status page (rules with health and last error, firing alerts).
//!
//! Mutating endpoints (`POST`) need `Authorization: Bearer <token>` unless `http.open: true`;
//! with neither a token nor `open`, they are refused.

use std::fmt::Write as _;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use chrono::SecondsFormat;
use serde_json::{json, Value as Json};

use crate::labels::Labels;
use crate::run::scheduler::{ms_to_time, Service};

/// Who may call mutating endpoints.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    pub token: Option<String>,
    pub open: bool,
}

/// Reloads the configuration; `Err` carries the validation error (nothing applied).
pub type ReloadFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub svc: Arc<Service>,
    pub auth: Arc<RwLock<Auth>>,
    pub reload: ReloadFn,
}

/// The router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/api/v1/rules", get(rules))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v2/alerts", post(post_alerts))
        .route("/metrics", get(metrics))
        .route("/-/healthy", get(|| async { "Watchfire is Healthy.\n" }))
        .route("/-/ready", get(|| async { "Watchfire is Ready.\n" }))
        .route("/-/reload", post(reload))
        .with_state(state)
}

/// Serves on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// `None` when the caller may mutate; otherwise the refusal.
fn refused(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let auth = state.auth.read().map(|a| a.clone()).unwrap_or_default();
    if auth.open {
        return None;
    }
    let Some(token) = auth.token else {
        return Some(error(
            StatusCode::FORBIDDEN,
            "mutating endpoints are disabled: configure http.bearer_token_file/bearer_token_env, or http.open: true",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        None
    } else {
        Some(error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token"))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn error(status: StatusCode, msg: &str) -> Response {
    (
        status,
        axum::Json(json!({"status": "error", "errorType": "bad_data", "error": msg})),
    )
        .into_response()
}

fn go_time(ms: Option<i64>) -> String {
    match ms {
        Some(t) => ms_to_time(t).to_rfc3339_opts(SecondsFormat::AutoSi, true),
        None => "0001-01-01T00:00:00Z".to_string(),
    }
}

fn labels_obj(l: &Labels) -> Json {
    Json::Object(
        l.iter()
            .map(|x| (x.name.to_string(), Json::String(x.value.to_string())))
            .collect(),
    )
}

fn pairs_obj(p: &[(String, String)]) -> Json {
    Json::Object(p.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect())
}

fn value_str(v: f64) -> String {
    crate::promqltest::format::format_float(v)
}

async fn rules(State(st): State<AppState>) -> Response {
    let snaps = st.svc.snapshots.read().map(|s| s.clone()).unwrap_or_default();
    let groups: Vec<Json> = snaps
        .values()
        .map(|g| {
            let rules: Vec<Json> = g
                .rules
                .iter()
                .map(|r| {
                    let mut o = json!({
                        "name": r.name,
                        "query": r.query,
                        "labels": pairs_obj(&r.labels),
                        "health": r.health,
                        "evaluationTime": r.evaluation_time_s,
                        "lastEvaluation": go_time(r.last_evaluation),
                        "type": if r.alerting { "alerting" } else { "recording" },
                    });
                    if let Some(e) = &r.last_error {
                        o["lastError"] = json!(e);
                    }
                    if r.alerting {
                        o["state"] = json!(r.state);
                        o["duration"] = json!(r.duration_s);
                        o["keepFiringFor"] = json!(r.keep_firing_for_s);
                        o["annotations"] = pairs_obj(&r.annotations);
                        o["alerts"] = Json::Array(
                            r.alerts
                                .iter()
                                .map(|a| {
                                    json!({
                                        "labels": labels_obj(&a.labels),
                                        "annotations": a.annotations,
                                        "state": a.state.as_str(),
                                        "activeAt": go_time(Some(a.active_at)),
                                        "value": value_str(a.value),
                                    })
                                })
                                .collect(),
                        );
                    }
                    o
                })
                .collect();
            json!({
                "name": g.name,
                "file": g.file,
                "interval": g.interval_s,
                "evaluationTime": g.evaluation_time_s,
                "lastEvaluation": go_time(g.last_evaluation),
                "rules": rules,
            })
        })
        .collect();
    axum::Json(json!({"status": "success", "data": {"groups": groups}})).into_response()
}

fn all_alerts(st: &AppState) -> Vec<Json> {
    let snaps = st.svc.snapshots.read().map(|s| s.clone()).unwrap_or_default();
    let mut out: Vec<Json> = snaps
        .values()
        .flat_map(|g| g.rules.iter())
        .flat_map(|r| r.alerts.iter())
        .map(|a| {
            json!({
                "labels": labels_obj(&a.labels),
                "annotations": a.annotations,
                "state": a.state.as_str(),
                "activeAt": go_time(Some(a.active_at)),
                "value": value_str(a.value),
            })
        })
        .collect();
    for (labels, ann, start) in st.svc.builtin_alerts() {
        out.push(json!({
            "labels": labels_obj(&labels),
            "annotations": ann,
            "state": "firing",
            "activeAt": go_time(Some(start)),
            "value": "1e+00",
        }));
    }
    out
}

async fn alerts(State(st): State<AppState>) -> Response {
    axum::Json(json!({"status": "success", "data": {"alerts": all_alerts(&st)}})).into_response()
}

fn parse_postable(v: &Json) -> Result<crate::notify::PostableAlert, String> {
    let obj = v.as_object().ok_or("each alert must be an object")?;
    let strings = |k: &str| -> Result<Vec<(String, String)>, String> {
        match obj.get(k) {
            None | Some(Json::Null) => Ok(Vec::new()),
            Some(Json::Object(m)) => m
                .iter()
                .map(|(n, v)| {
                    v.as_str()
                        .map(|s| (n.clone(), s.to_string()))
                        .ok_or_else(|| format!("{k}.{n} must be a string"))
                })
                .collect(),
            Some(_) => Err(format!("{k} must be an object")),
        }
    };
    let time = |k: &str| -> Result<Option<chrono::DateTime<chrono::Utc>>, String> {
        match obj.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(s)) if s.is_empty() || s.starts_with("0001-01-01") => Ok(None),
            Some(Json::String(s)) => chrono::DateTime::parse_from_rfc3339(s)
                .map(|t| Some(t.with_timezone(&chrono::Utc)))
                .map_err(|e| format!("{k}: {e}")),
            Some(_) => Err(format!("{k} must be an RFC 3339 string")),
        }
    };
    Ok(crate::notify::PostableAlert {
        labels: strings("labels")?,
        annotations: strings("annotations")?,
        starts_at: time("startsAt")?,
        ends_at: time("endsAt")?,
        generator_url: obj
            .get("generatorURL")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
    })
}

async fn post_alerts(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = refused(&st, &headers) {
        return r;
    }
    let v: Json = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body is not JSON: {e}")),
    };
    let Some(items) = v.as_array() else {
        return error(StatusCode::BAD_REQUEST, "body must be a JSON array of alerts");
    };
    let mut parsed = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        match parse_postable(it) {
            Ok(p) => parsed.push(p),
            Err(e) => return error(StatusCode::BAD_REQUEST, &format!("alert {i}: {e}")),
        }
    }
    let svc = Arc::clone(&st.svc);
    match tokio::task::spawn_blocking(move || svc.ingest(parsed)).await {
        Ok(Ok(_)) => StatusCode::OK.into_response(),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, &e),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

async fn reload(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&st, &headers) {
        return r;
    }
    let f = Arc::clone(&st.reload);
    match tokio::task::spawn_blocking(move || f()).await {
        Ok(Ok(())) => (StatusCode::OK, "configuration reloaded\n").into_response(),
        Ok(Err(e)) => (
            StatusCode::BAD_REQUEST,
            format!("reload failed, previous configuration kept: {e}\n"),
        )
            .into_response(),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

fn esc_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n").replace('"', "\\\"")
}

/// The self-monitoring metrics in Prometheus' text format.
pub fn render_metrics(svc: &Service) -> String {
    let m = svc.metrics.lock().map(|m| m.clone()).unwrap_or_default();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP watchfire_rule_group_last_duration_seconds Duration of the last evaluation of a group."
    );
    let _ = writeln!(s, "# TYPE watchfire_rule_group_last_duration_seconds gauge");
    for (k, (last, _, _, _)) in &m.groups {
        let _ = writeln!(
            s,
            "watchfire_rule_group_last_duration_seconds{{rule_group=\"{}\"}} {last}",
            esc_label(k)
        );
    }
    let _ = writeln!(
        s,
        "# HELP watchfire_rule_group_duration_seconds Group evaluation durations."
    );
    let _ = writeln!(s, "# TYPE watchfire_rule_group_duration_seconds summary");
    for (k, (_, sum, count, _)) in &m.groups {
        let _ = writeln!(
            s,
            "watchfire_rule_group_duration_seconds_sum{{rule_group=\"{}\"}} {sum}",
            esc_label(k)
        );
        let _ = writeln!(
            s,
            "watchfire_rule_group_duration_seconds_count{{rule_group=\"{}\"}} {count}",
            esc_label(k)
        );
    }
    let _ = writeln!(
        s,
        "# HELP watchfire_rule_group_iterations_missed_total Evaluation slots skipped."
    );
    let _ = writeln!(s, "# TYPE watchfire_rule_group_iterations_missed_total counter");
    for (k, (_, _, _, missed)) in &m.groups {
        let _ = writeln!(
            s,
            "watchfire_rule_group_iterations_missed_total{{rule_group=\"{}\"}} {missed}",
            esc_label(k)
        );
    }
    let _ = writeln!(s, "# HELP watchfire_source_errors_total Failed source queries.");
    let _ = writeln!(s, "# TYPE watchfire_source_errors_total counter");
    for (k, n) in &m.source_errors {
        let _ = writeln!(s, "watchfire_source_errors_total{{source=\"{}\"}} {n}", esc_label(k));
    }
    let _ = writeln!(s, "# HELP watchfire_source_query_seconds Time spent in source queries.");
    let _ = writeln!(s, "# TYPE watchfire_source_query_seconds summary");
    for (k, (sum, count)) in &m.source_queries {
        let _ = writeln!(
            s,
            "watchfire_source_query_seconds_sum{{source=\"{}\"}} {sum}",
            esc_label(k)
        );
        let _ = writeln!(
            s,
            "watchfire_source_query_seconds_count{{source=\"{}\"}} {count}",
            esc_label(k)
        );
    }
    let _ = writeln!(
        s,
        "# HELP watchfire_source_up Whether the last query to the source succeeded."
    );
    let _ = writeln!(s, "# TYPE watchfire_source_up gauge");
    if let Ok(src) = svc.sources.lock() {
        for (k, h) in src.iter() {
            let _ = writeln!(
                s,
                "watchfire_source_up{{source=\"{}\"}} {}",
                esc_label(k),
                u8::from(h.up)
            );
        }
    }
    let _ = writeln!(
        s,
        "# HELP watchfire_rule_evaluation_failures_total Failed rule evaluations."
    );
    let _ = writeln!(s, "# TYPE watchfire_rule_evaluation_failures_total counter");
    let _ = writeln!(s, "watchfire_rule_evaluation_failures_total {}", m.rule_failures);
    let _ = writeln!(s, "# HELP watchfire_notifications_sent_total Notifications delivered.");
    let _ = writeln!(s, "# TYPE watchfire_notifications_sent_total counter");
    let _ = writeln!(s, "watchfire_notifications_sent_total {}", m.notifications_sent);
    let _ = writeln!(
        s,
        "# HELP watchfire_notifications_failed_total Failed delivery attempts."
    );
    let _ = writeln!(s, "# TYPE watchfire_notifications_failed_total counter");
    let _ = writeln!(s, "watchfire_notifications_failed_total {}", m.notifications_failed);
    let _ = writeln!(
        s,
        "# HELP watchfire_notification_outbox_depth Notifications waiting for delivery."
    );
    let _ = writeln!(s, "# TYPE watchfire_notification_outbox_depth gauge");
    let _ = writeln!(s, "watchfire_notification_outbox_depth {}", svc.outbox_depth());
    s
}

async fn metrics(State(st): State<AppState>) -> Response {
    let svc = Arc::clone(&st.svc);
    let body = tokio::task::spawn_blocking(move || render_metrics(&svc))
        .await
        .unwrap_or_default();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response()
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The status page: rules with health and last error, and firing alerts.
pub fn render_status(svc: &Service) -> String {
    let snaps = svc.snapshots.read().map(|s| s.clone()).unwrap_or_default();
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>watchfire</title><style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.err{color:#b00}.ok{color:#070}</style></head><body><h1>watchfire</h1>",
    );
    s.push_str("<h2 id=\"alerts\">Firing alerts</h2><table><tr><th>alert</th><th>labels</th><th>since</th><th>summary</th></tr>");
    let mut rows = Vec::new();
    for g in snaps.values() {
        for r in &g.rules {
            for a in r.alerts.iter().filter(|a| a.state == crate::rules::AlertState::Firing) {
                rows.push((a.labels.clone(), a.annotations.clone(), a.active_at));
            }
        }
    }
    rows.extend(svc.builtin_alerts());
    for (labels, ann, since) in rows {
        let _ = write!(
            s,
            "<tr class=\"alert\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            html_escape(labels.get("alertname").unwrap_or("")),
            html_escape(&labels.to_string()),
            go_time(Some(since)),
            html_escape(ann.get("summary").map(String::as_str).unwrap_or(""))
        );
    }
    s.push_str("</table><h2 id=\"rules\">Rules</h2><table><tr><th>group</th><th>rule</th><th>health</th><th>last error</th></tr>");
    for g in snaps.values() {
        for r in &g.rules {
            let _ = write!(
                s,
                "<tr class=\"rule\"><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                html_escape(&g.name),
                html_escape(&r.name),
                if r.health == "err" { "err" } else { "ok" },
                r.health,
                html_escape(r.last_error.as_deref().unwrap_or(""))
            );
        }
    }
    s.push_str("</table></body></html>\n");
    s
}

async fn status_page(State(st): State<AppState>) -> Html<String> {
    Html(render_status(&st.svc))
}
