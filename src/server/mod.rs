//! The HTTP server (axum):
//!
//! * `GET /api/v1/rules`, `GET /api/v1/alerts`: Prometheus' JSON shapes (Grafana reads them).
//! * `POST /api/v2/alerts`: Alertmanager-compatible ingest (an existing Prometheus, or
//!   node-probe events) into the notification pipeline.
//! * Alertmanager API v2 for silences, so `amtool silence add/query/expire/import` and Grafana
//!   work: `GET|POST /api/v2/silences` (with `filter` matchers), `GET|DELETE
//!   /api/v2/silence/{id}`; plus `GET /api/v2/alerts`, `/api/v2/alerts/groups`,
//!   `/api/v2/receivers` and `/api/v2/status` (what Grafana's Alertmanager data source and
//!   `amtool alert query` / `amtool config show` read). Silences are
//!   saved in SQLite and applied by the notifier. Errors are answered as Alertmanager does:
//!   a JSON string body with status 400 (invalid), 404 (unknown id) or 500.
//! * Prometheus' query API (`query.rs`): `/api/v1/query`, `query_range`, `series`, `labels`,
//!   `label/{name}/values` over the service's source with the rule outputs over it.
//! * `GET /api/v1/notifications`: the notification history (`history.rs`): what each alert's
//!   receivers were sent, and why not.
//! * `GET /metrics`: Prometheus text format: evaluation durations and missed iterations, source
//!   errors, notifications sent and failed, outbox depth.
//! * `GET /-/healthy`, `GET /-/ready`, `POST /-/reload` (applied only when the new
//!   configuration is valid).
//! * `GET /`: the status page (`page.rs`), rendered on the server (no JavaScript): alerts by
//!   state, owner and cluster with their links; rules with health, last error and a chart of
//!   recent values (`GET /chart`); sources; silences, created and expired from the page
//!   (`POST /silences`, `POST /silences/expire`, the bearer token as a form field).
//!
//! Mutating endpoints (`POST`, `DELETE`) need `Authorization: Bearer <token>` unless `http.open: true`;
//! with neither a token nor `open`, they are refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use chrono::SecondsFormat;
use serde_json::{json, Value as Json};

use crate::labels::Labels;
use crate::run::scheduler::{ms_to_time, NotifierAlert, Service};

mod deadline;
mod history;
mod listen;
mod page;
mod query;

pub use listen::{effective_max_connections, serve_with_limits, ConnLimits, MAX_BODY_BYTES};
pub use page::render_status;
pub use query::{router as query_router, QueryApi, QueryLimits, QueryTarget};

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
    /// The query API's bounds (watchfire.yaml's `http.query_*`).
    pub query_limits: QueryLimits,
    /// The mirror remote writes go to (`POST /api/v1/write`), when a source has one.
    pub mirror: crate::source::MirrorSlot,
}

/// The router.
pub fn router(state: AppState) -> Router {
    let svc = Arc::clone(&state.svc);
    let state_limits = state.query_limits.clone();
    // Queries read what the rules read (the current setup's source and the rule outputs), with
    // the engine options of the current setup, so a reload is seen by the next query.
    let view = svc.rules_view();
    let target: QueryTarget = Arc::new(move || {
        let setup = svc
            .setup
            .read()
            .map(|s| Arc::clone(&s))
            .unwrap_or_else(|e| Arc::clone(&e.into_inner()));
        (setup.engine.clone(), Arc::clone(&view))
    });
    let api = QueryApi::new(target, state_limits);
    Router::new()
        .route("/api/v1/rules", get(rules))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v2/alerts", post(post_alerts).get(get_v2_alerts))
        .route("/api/v2/silences", get(get_silences).post(post_silence))
        .route("/api/v2/silence/{id}", get(get_silence).delete(delete_silence))
        .route("/api/v2/alerts/groups", get(get_v2_alert_groups))
        .route("/api/v2/receivers", get(v2_receivers))
        .route("/api/v2/status", get(v2_status))
        .route("/metrics", {
            let api = api.clone();
            get(move |st: State<AppState>| metrics(st, api))
        })
        .route("/api/v1/write", post(remote_write))
        .route("/-/healthy", get(|| async { "Watchfire is Healthy.\n" }))
        .route("/-/ready", get(|| async { "Watchfire is Ready.\n" }))
        .route("/-/reload", post(reload))
        .with_state(state.clone())
        .merge(history::router(state.clone()))
        .merge(page::router(state, api.clone()))
        .merge(query::router(api))
}

/// Serves on `listener` until `shutdown` completes, with the default [`ConnLimits`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_limits(listener, router(state), ConnLimits::default(), shutdown).await
}

/// Serves only the query API over `api` (and `/-/healthy`, `/-/ready`) until `shutdown`
/// completes: `watchfire serve`.
pub async fn serve_query(
    listener: tokio::net::TcpListener,
    api: QueryApi,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/-/healthy", get(|| async { "Watchfire is Healthy.\n" }))
        .route("/-/ready", get(|| async { "Watchfire is Ready.\n" }))
        .merge(query::router(api));
    serve_with_limits(listener, app, ConnLimits::default(), shutdown).await
}

/// `None` when the caller may mutate; otherwise the refusal.
fn refused(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    check_token(state, given).err().map(|(status, msg)| error(status, &msg))
}

/// Whether `given` (a bearer token, from the header or the status page's forms) may mutate:
/// `Err` is the refusal's status and message.
fn check_token(state: &AppState, given: Option<&str>) -> Result<(), (StatusCode, String)> {
    let auth = state.auth.read().map(|a| a.clone()).unwrap_or_default();
    if auth.open {
        return Ok(());
    }
    let Some(token) = auth.token else {
        return Err((
            StatusCode::FORBIDDEN,
            "mutating endpoints are disabled: configure http.bearer_token_file/bearer_token_env, or http.open: true"
                .into(),
        ));
    };
    if given
        .map(str::trim)
        .is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
    {
        Ok(())
    } else {
        Err((StatusCode::UNAUTHORIZED, "missing or wrong bearer token".into()))
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
        axum::Json(json!({"status": "error", "errorType": error_type(status), "error": msg})),
    )
        .into_response()
}

/// The `errorType` of an error answer: Prometheus' names where it has one for the status
/// (`bad_data`, `not_found`, `unavailable`, `internal`); a refused token is no bad data.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        406 => "not_acceptable",
        503 => "unavailable",
        s if s >= 500 => "internal",
        _ => "bad_data",
    }
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
    crate::gofmt::format_f(v)
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

async fn post_alerts(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = refused(&st, &headers) {
        return r;
    }
    // Decoded straight into alerts (no `Value` in between). A usual batch (a few hundred
    // alerts, about a millisecond) is decoded on the async worker, as axum's `Json` extractor
    // would, sparing two thread hand-offs per request; a larger body goes to the blocking pool
    // so that no worker is held long.
    let decoded = if body.len() <= INLINE_DECODE_MAX {
        Ok(crate::notify::alert::decode_postable_alerts(&body).and_then(|a| st.svc.ingest(a)))
    } else {
        let svc = Arc::clone(&st.svc);
        tokio::task::spawn_blocking(move || svc.ingest(crate::notify::alert::decode_postable_alerts(&body)?)).await
    };
    match decoded {
        Ok(Ok(_)) => {
            // Routed and grouped beside the answer (see `Service::ingest`), unless the queue
            // is long: then the sender waits.
            let svc = Arc::clone(&st.svc);
            if st.svc.ingest_backlogged() {
                if tokio::task::spawn_blocking(move || svc.apply_ingested()).await.is_err() {
                    return error(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
                }
            } else if st.svc.claim_apply() {
                tokio::task::spawn_blocking(move || svc.apply_ingested());
            }
            StatusCode::OK.into_response()
        }
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, &e),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// Prometheus' remote write 1.0 (an agent's `remote_write` to this replica): the samples go to
/// the mirror of the source that has one. 204 when stored; 400 for a body that does not
/// decode (the sender drops it, as Prometheus drops any 4xx batch; the mirror then counts its
/// data as lost); 404 when no source has a mirror.
async fn remote_write(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = refused(&st, &headers) {
        return r;
    }
    let Some(mirror) = st.mirror.get() else {
        return error(
            StatusCode::NOT_FOUND,
            "no source has a mirror: remote writes are taken only with a source's mirror: block",
        );
    };
    let stored = tokio::task::spawn_blocking(move || mirror.ingest_body(&body)).await;
    match stored {
        Ok(Ok(_)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, &format!("remote write: {e}")),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// Bodies up to this size are decoded on the async worker (see `post_alerts`).
const INLINE_DECODE_MAX: usize = 512 * 1024;

/// Alertmanager's API v2 answers errors with a bare JSON string.
fn am_error(status: StatusCode, msg: &str) -> Response {
    (status, axum::Json(Json::String(msg.to_string()))).into_response()
}

fn silence_error(e: crate::notify::silence::SilenceError) -> Response {
    use crate::notify::silence::SilenceError as E;
    match e {
        E::Invalid(_) => am_error(StatusCode::BAD_REQUEST, &e.to_string()),
        E::NotFound(_) => am_error(StatusCode::NOT_FOUND, &e.to_string()),
        // Alertmanager answers 500, though the request is at fault and nothing failed: 400, as
        // the status page's form answers.
        E::AlreadyExpired(_) => am_error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// Decodes `application/x-www-form-urlencoded` text (`+` is a space).
fn form_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The values of a repeated query parameter.
fn query_values(q: Option<&str>, key: &str) -> Vec<String> {
    q.unwrap_or("")
        .split('&')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (form_decode(k) == key).then(|| form_decode(v))
        })
        .collect()
}

fn parse_filter(q: Option<&str>) -> Result<Vec<crate::labels::Matcher>, String> {
    query_values(q, "filter")
        .iter()
        .map(|f| crate::notify::matchers::parse_matcher(f).map_err(|e| format!("bad matcher format: {f}: {e}")))
        .collect()
}

async fn get_silences(State(st): State<AppState>, RawQuery(q): RawQuery) -> Response {
    let filter = match parse_filter(q.as_deref()) {
        Ok(f) => f,
        Err(e) => return am_error(StatusCode::BAD_REQUEST, &e),
    };
    let (sil, now) = st.svc.silences();
    let out: Vec<Json> = sil
        .sorted(now)
        .into_iter()
        .filter(|s| crate::notify::silence::matches_filter(s, &filter))
        .map(|s| s.to_json(now))
        .collect();
    axum::Json(Json::Array(out)).into_response()
}

async fn get_silence(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    let (sil, now) = st.svc.silences();
    match sil.get(&id) {
        Some(s) => axum::Json(s.to_json(now)).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn post_silence(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = refused(&st, &headers) {
        return r;
    }
    let v: Json = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return am_error(
                StatusCode::BAD_REQUEST,
                &format!("parsing silence body from \"\" failed: {e}"),
            )
        }
    };
    let s = match crate::notify::silence::Silence::from_json(&v) {
        Ok(s) => s,
        Err(e) => return am_error(StatusCode::BAD_REQUEST, &e),
    };
    let svc = Arc::clone(&st.svc);
    match tokio::task::spawn_blocking(move || svc.silence_set(s)).await {
        Ok(Ok(id)) => axum::Json(json!({"silenceID": id})).into_response(),
        Ok(Err(e)) => silence_error(e),
        Err(_) => am_error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

async fn delete_silence(State(st): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Some(r) = refused(&st, &headers) {
        return r;
    }
    let svc = Arc::clone(&st.svc);
    match tokio::task::spawn_blocking(move || svc.silence_expire(&id)).await {
        Ok(Ok(())) => StatusCode::OK.into_response(),
        Ok(Err(e)) => silence_error(e),
        Err(_) => am_error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// The pipeline's alerts selected by `GET /api/v2/alerts`' query parameters: `filter`
/// matchers, a `receiver` regex, and the `active`, `silenced` and `inhibited` switches (each
/// default true; amtool's `alert query` turns the last two off).
/// `Err` is the message of a 400.
fn selected_alerts(st: &AppState, q: Option<&str>) -> Result<Vec<NotifierAlert>, String> {
    let filter = parse_filter(q)?;
    let receiver = match query_values(q, "receiver").last() {
        Some(r) => Some(
            crate::notify::matchers::go_regex(&format!("^(?:{r})$"))
                .map_err(|e| format!("failed to parse receiver param: {e}"))?,
        ),
        None => None,
    };
    let switch = |k: &str| query_values(q, k).last().is_none_or(|v| v != "false");
    let (active, silenced, inhibited) = (switch("active"), switch("silenced"), switch("inhibited"));
    let now = ms_to_time(st.svc.clock.now_ms());
    Ok(st
        .svc
        .unresolved_notifier_alerts()
        .into_iter()
        .filter(|a| !a.alert.resolved_at(now))
        .filter(|a| {
            let muted = !a.silenced_by.is_empty() || !a.inhibited_by.is_empty();
            (active || muted) && (silenced || a.silenced_by.is_empty()) && (inhibited || a.inhibited_by.is_empty())
        })
        .filter(|a| {
            filter
                .iter()
                .all(|m| m.matches(a.alert.labels.get(&m.name).unwrap_or("")))
        })
        .filter(|a| {
            receiver
                .as_ref()
                .is_none_or(|re| a.routes.iter().any(|(r, _)| re.is_match(r)))
        })
        .collect())
}

/// An alert as API v2 shows it (`gettableAlert`).
fn gettable_alert(a: &NotifierAlert) -> Json {
    let state = if a.silenced_by.is_empty() && a.inhibited_by.is_empty() {
        "active"
    } else {
        "suppressed"
    };
    json!({
        "labels": labels_obj(&a.alert.labels),
        "annotations": a.alert.annotations,
        "startsAt": crate::notify::alert::go_time_json(Some(a.alert.starts_at)),
        "endsAt": crate::notify::alert::go_time_json(a.alert.ends_at),
        "updatedAt": crate::notify::alert::go_time_json(Some(a.alert.updated_at)),
        "generatorURL": a.alert.generator_url,
        "fingerprint": a.alert.fingerprint().to_string(),
        "receivers": a.receivers().iter().map(|r| json!({"name": r})).collect::<Vec<_>>(),
        "status": {"state": state, "silencedBy": a.silenced_by, "inhibitedBy": a.inhibited_by},
    })
}

/// `GET /api/v2/alerts`: the alerts the notification pipeline holds.
async fn get_v2_alerts(State(st): State<AppState>, RawQuery(q): RawQuery) -> Response {
    match selected_alerts(&st, q.as_deref()) {
        Ok(list) => axum::Json(Json::Array(list.iter().map(gettable_alert).collect())).into_response(),
        Err(e) => am_error(StatusCode::BAD_REQUEST, &e),
    }
}

/// `GET /api/v2/alerts/groups`: the alerts by route receiver and group labels (`alertGroup`).
async fn get_v2_alert_groups(State(st): State<AppState>, RawQuery(q): RawQuery) -> Response {
    let list = match selected_alerts(&st, q.as_deref()) {
        Ok(l) => l,
        Err(e) => return am_error(StatusCode::BAD_REQUEST, &e),
    };
    let mut groups: BTreeMap<(String, Labels), Vec<Json>> = BTreeMap::new();
    for a in &list {
        for (receiver, labels) in &a.routes {
            groups
                .entry((receiver.clone(), labels.clone()))
                .or_default()
                .push(gettable_alert(a));
        }
    }
    let out: Vec<Json> = groups
        .into_iter()
        .map(|((receiver, labels), alerts)| {
            json!({"labels": labels_obj(&labels), "receiver": {"name": receiver}, "alerts": alerts})
        })
        .collect();
    axum::Json(Json::Array(out)).into_response()
}

/// `GET /api/v2/receivers`.
async fn v2_receivers(State(st): State<AppState>) -> Response {
    let names: Vec<Json> = st
        .svc
        .receiver_names()
        .into_iter()
        .map(|n| json!({"name": n}))
        .collect();
    axum::Json(Json::Array(names)).into_response()
}

/// `GET /api/v2/status`: what amtool and Grafana read (`alertmanagerStatus`).
/// The version `/api/v2/status` reports: the Alertmanager release whose API and semantics
/// watchfire implements, with watchfire's own version as semver build metadata. amtool compares
/// the major and minor version with its own and warns on every call when they differ.
pub const AM_API_VERSION: &str = concat!("0.25.0+watchfire.", env!("CARGO_PKG_VERSION"));

async fn v2_status(State(st): State<AppState>) -> Response {
    // The routing configuration is not echoed back: it may carry receiver secrets.
    axum::Json(json!({
        "cluster": {"status": "disabled", "peers": []},
        "config": {"original": ""},
        "uptime": go_time(Some(st.svc.started_ms)),
        "versionInfo": {
            "branch": "", "buildDate": "", "buildUser": "", "goVersion": "",
            "revision": "", "version": AM_API_VERSION,
        },
    }))
    .into_response()
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

/// Prometheus' text exposition format, written family by family.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    /// Starts a metric family: its `# HELP` and `# TYPE` lines.
    fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
        self
    }

    /// One sample; label values are escaped.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) -> &mut Self {
        self.0.push_str(name);
        if !labels.is_empty() {
            let pairs: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", esc_label(v)))
                .collect();
            let _ = write!(self.0, "{{{}}}", pairs.join(","));
        }
        let _ = writeln!(self.0, " {value}");
        self
    }
}

/// The mirror's metrics in Prometheus' text format.
pub fn render_mirror_metrics(m: &crate::source::Mirror) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let c = &m.counters;
    let stats = m.stats();
    let src = [("source", m.source_name())];
    let mut x = Exposition::default();
    let counters: [(&str, &str, u64); 6] = [
        (
            "watchfire_mirror_writes_total",
            "Remote-write requests stored.",
            c.writes.load(Relaxed),
        ),
        (
            "watchfire_mirror_writes_refused_total",
            "Remote-write requests refused (their data lost: coverage starts again).",
            c.writes_refused.load(Relaxed),
        ),
        (
            "watchfire_mirror_samples_received_total",
            "Samples received.",
            c.samples.load(Relaxed),
        ),
        (
            "watchfire_mirror_samples_kept_total",
            "Samples kept (of series the shard's rules read).",
            c.samples_kept.load(Relaxed),
        ),
        (
            "watchfire_mirror_refreshes_failed_total",
            "Failed questions to the backend (its senders, a backfill).",
            c.refreshes_failed.load(Relaxed),
        ),
        (
            "watchfire_mirror_backfills_total",
            "Backfills of the mirror from the backend.",
            c.backfills.load(Relaxed),
        ),
    ];
    for (name, help, v) in counters {
        x.family(name, "counter", help).sample(name, &src, v);
    }
    let n = "watchfire_mirror_selects_total";
    x.family(
        n,
        "counter",
        "Selectors answered from the mirror (local) or sent to the backend.",
    )
    .sample(n, &[src[0], ("answer", "local")], c.selects_local.load(Relaxed))
    .sample(n, &[src[0], ("answer", "backend")], c.selects_backend.load(Relaxed));
    let n = "watchfire_mirror_expressions_local_total";
    x.family(
        n,
        "counter",
        "Whole expressions evaluated over the mirror instead of sent to the backend.",
    )
    .sample(n, &src, c.exprs_local.load(Relaxed));
    let n = "watchfire_mirror_series";
    x.family(n, "gauge", "Series the mirror holds.")
        .sample(n, &src, stats.series);
    let n = "watchfire_mirror_senders";
    x.family(
        n,
        "gauge",
        "Senders by whether they wrote within max_silence, and those the backend knows.",
    )
    .sample(n, &[src[0], ("state", "live")], stats.senders_live)
    .sample(n, &[src[0], ("state", "silent")], stats.senders_silent)
    .sample(n, &[src[0], ("state", "backend")], stats.backend_senders);
    x.0
}

/// The self-monitoring metrics in Prometheus' text format.
pub fn render_metrics(svc: &Service) -> String {
    let m = svc.metrics.lock().map(|m| m.clone()).unwrap_or_default();
    let mut x = Exposition::default();
    x.family(
        "watchfire_rule_group_last_duration_seconds",
        "gauge",
        "Duration of the last evaluation of a group.",
    );
    for (k, (last, _, _, _)) in &m.groups {
        x.sample("watchfire_rule_group_last_duration_seconds", &[("rule_group", k)], last);
    }
    x.family(
        "watchfire_rule_group_duration_seconds",
        "summary",
        "Group evaluation durations.",
    );
    for (k, (_, sum, count, _)) in &m.groups {
        x.sample("watchfire_rule_group_duration_seconds_sum", &[("rule_group", k)], sum)
            .sample(
                "watchfire_rule_group_duration_seconds_count",
                &[("rule_group", k)],
                count,
            );
    }
    x.family(
        "watchfire_rule_group_iterations_missed_total",
        "counter",
        "Evaluation slots skipped.",
    );
    for (k, (_, _, _, missed)) in &m.groups {
        x.sample(
            "watchfire_rule_group_iterations_missed_total",
            &[("rule_group", k)],
            missed,
        );
    }
    x.family("watchfire_source_errors_total", "counter", "Failed source queries.");
    for (k, n) in &m.source_errors {
        x.sample("watchfire_source_errors_total", &[("source", k)], n);
    }
    x.family(
        "watchfire_source_query_seconds",
        "summary",
        "Time spent in source queries.",
    );
    for (k, (sum, count)) in &m.source_queries {
        x.sample("watchfire_source_query_seconds_sum", &[("source", k)], sum)
            .sample("watchfire_source_query_seconds_count", &[("source", k)], count);
    }
    x.family(
        "watchfire_source_up",
        "gauge",
        "Whether the last query to the source succeeded.",
    );
    if let Ok(src) = svc.sources.lock() {
        for (k, h) in src.iter() {
            x.sample("watchfire_source_up", &[("source", k)], u8::from(h.up));
        }
    }
    x.family(
        "watchfire_source_requests_total",
        "counter",
        "Requests sent to each source: raw series (select) and whole expressions (pushdown).",
    );
    if let Ok(setup) = svc.setup.read() {
        for (src, kind, n) in setup.source.requests() {
            x.sample(
                "watchfire_source_requests_total",
                &[("source", &src), ("kind", kind)],
                n,
            );
        }
    }
    x.family(
        "watchfire_source_warnings_total",
        "counter",
        "Answers from the source that carried warnings (a backend's limit near, a partial answer).",
    );
    if let Ok(setup) = svc.setup.read() {
        for (src, n) in setup.source.warnings() {
            x.sample("watchfire_source_warnings_total", &[("source", &src)], n);
        }
    }
    x.family(
        "watchfire_rule_evaluation_failures_total",
        "counter",
        "Failed rule evaluations.",
    )
    .sample("watchfire_rule_evaluation_failures_total", &[], m.rule_failures);
    x.family(
        "watchfire_rule_evaluations_held_total",
        "counter",
        "Rule evaluations held after the start until the rules they read had run once.",
    )
    .sample("watchfire_rule_evaluations_held_total", &[], m.rule_evaluations_held);
    x.family(
        "watchfire_notifications_sent_total",
        "counter",
        "Notifications delivered.",
    )
    .sample("watchfire_notifications_sent_total", &[], m.notifications_sent);
    x.family(
        "watchfire_notifications_failed_total",
        "counter",
        "Failed delivery attempts.",
    )
    .sample("watchfire_notifications_failed_total", &[], m.notifications_failed);
    x.family(
        "watchfire_notification_outbox_depth",
        "gauge",
        "Notifications waiting for delivery.",
    )
    .sample("watchfire_notification_outbox_depth", &[], svc.outbox_depth());
    x.family(
        "watchfire_notifications_dead_lettered_total",
        "counter",
        "Notifications given up on and moved to the dead letters.",
    )
    .sample(
        "watchfire_notifications_dead_lettered_total",
        &[],
        m.notifications_dead_lettered,
    );
    x.family(
        "watchfire_state_write_errors_total",
        "counter",
        "Failed writes to the state database (disk full, read-only file system, I/O errors).",
    )
    .sample("watchfire_state_write_errors_total", &[], m.state_write_errors);
    x.family(
        "watchfire_clock_steps_total",
        "counter",
        "Steps of the wall clock noticed (the notification timers moved with them).",
    )
    .sample("watchfire_clock_steps_total", &[], m.clock_steps);
    x.family(
        "watchfire_notification_outbox_unstored",
        "gauge",
        "Notifications waiting for delivery in memory only, because the outbox could not store them.",
    )
    .sample("watchfire_notification_outbox_unstored", &[], m.outbox_unstored);
    x.family(
        "watchfire_dead_letters",
        "gauge",
        "Dead-lettered notifications kept in the state database.",
    )
    .sample("watchfire_dead_letters", &[], svc.dead_letter_count());
    let h = &m.delivery_latency;
    let latency = "watchfire_notification_delivery_latency_seconds";
    x.family(latency, "histogram", "Time from entering the outbox to delivery.");
    let mut cumulative = 0;
    for (b, c) in h.bounds.iter().zip(&h.counts) {
        cumulative += c;
        x.sample(&format!("{latency}_bucket"), &[("le", &b.to_string())], cumulative);
    }
    x.sample(&format!("{latency}_bucket"), &[("le", "+Inf")], h.count)
        .sample(&format!("{latency}_sum"), &[], h.sum)
        .sample(&format!("{latency}_count"), &[], h.count);
    x.0
}

async fn metrics(State(st): State<AppState>, api: QueryApi) -> Response {
    let svc = Arc::clone(&st.svc);
    let mirror = st.mirror.get();
    let body = tokio::task::spawn_blocking(move || {
        let mut text = render_metrics(&svc);
        if let Some(m) = mirror {
            text.push_str(&render_mirror_metrics(&m));
        }
        let (running, max) = api.slots();
        let mut x = Exposition::default();
        x.family(
            "prometheus_engine_queries",
            "gauge",
            "The current number of queries being executed (each holds one of the query API's slots).",
        )
        .sample("prometheus_engine_queries", &[], running)
        .family(
            "prometheus_engine_queries_concurrent_max",
            "gauge",
            "The max number of concurrent queries (http.query_max_concurrency).",
        )
        .sample("prometheus_engine_queries_concurrent_max", &[], max);
        text.push_str(&x.0);
        text
    })
    .await
    .unwrap_or_default();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response()
}
