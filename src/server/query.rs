//! Prometheus' query API (`/api/v1/query`, `query_range`, `series`, `labels`,
//! `label/{name}/values`) in Prometheus' JSON shapes and error types, so Grafana and any
//! Prometheus client can query watchfire. It takes its own state (what to query, and the limits),
//! so `watchfire run` and `watchfire serve` both mount it.
//!
//! Bounded: each request has a timeout (the server's, lowered by `timeout=`), a limit of
//! concurrent evaluations (over it, a request waits up to its timeout, then gets a 503), and a
//! limit of samples, counted both as read from the source and as returned.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value as Json};
use tokio::sync::Semaphore;

use crate::labels::{Labels, Matcher};
use crate::promql::{self, Engine, HistogramSeriesData, Queryable, SeriesData, SourceError, Value};

/// What a query reads, asked per request so a reload of `run` is seen: the engine (its
/// options) and the source.
pub type QueryTarget = Arc<dyn Fn() -> (Engine, Arc<dyn Queryable>) + Send + Sync>;

/// The bounds of the query API.
#[derive(Clone, Debug)]
pub struct QueryLimits {
    /// The longest a request may take (Prometheus' `query.timeout`, 2m); `timeout=` may lower it.
    pub timeout: Duration,
    /// Evaluations running at once (Prometheus' `query.max-concurrency`, 20).
    pub max_concurrent: usize,
    /// Samples a query may read from the source, and points it may return (Prometheus'
    /// `query.max-samples` is 50,000,000 samples in memory at once; the engine does not count
    /// those, so this bounds what it reads and what it answers instead).
    pub max_samples: u64,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            timeout: Duration::from_secs(120),
            max_concurrent: 20,
            max_samples: 50_000_000,
        }
    }
}

/// The handlers' state.
#[derive(Clone)]
pub struct QueryApi {
    target: QueryTarget,
    limits: QueryLimits,
    permits: Arc<Semaphore>,
}

impl QueryApi {
    pub fn new(target: QueryTarget, limits: QueryLimits) -> Self {
        let permits = Arc::new(Semaphore::new(limits.max_concurrent.max(1)));
        QueryApi {
            target,
            limits,
            permits,
        }
    }

    /// The slots held by queries running now (a query keeps its slot until its thread stops),
    /// and how many there are.
    pub fn slots(&self) -> (usize, usize) {
        let max = self.limits.max_concurrent.max(1);
        (max.saturating_sub(self.permits.available_permits()), max)
    }

    /// The query API over one fixed source, with the default engine options.
    pub fn over(source: Arc<dyn Queryable>, limits: QueryLimits) -> Self {
        QueryApi::new(Arc::new(move || (Engine::default(), Arc::clone(&source))), limits)
    }
}

/// The query API's routes, with their state applied (merge it into any router).
pub fn router(api: QueryApi) -> Router {
    Router::new()
        .route("/api/v1/query", get(instant).post(instant))
        .route("/api/v1/query_range", get(range).post(range))
        .route("/api/v1/series", get(series).post(series))
        .route("/api/v1/labels", get(labels).post(labels))
        .route("/api/v1/label/{name}/values", get(label_values))
        .with_state(api)
}

// ---------------------------------------------------------------------------------------------
// Errors, as Prometheus answers them.

#[derive(Debug, PartialEq)]
pub(crate) struct ApiError {
    kind: &'static str,
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_data(message: impl Into<String>) -> Self {
        ApiError {
            kind: "bad_data",
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    fn execution(message: impl Into<String>) -> Self {
        ApiError {
            kind: "execution",
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: message.into(),
        }
    }

    fn timeout(message: impl Into<String>) -> Self {
        ApiError {
            kind: "timeout",
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
        }
    }

    fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            kind: "unavailable",
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
        }
    }

    fn internal(message: impl Into<String>) -> Self {
        ApiError {
            kind: "internal",
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }

    fn param(name: &str, err: impl std::fmt::Display) -> Self {
        ApiError::bad_data(format!("invalid parameter {name:?}: {err}"))
    }
}

impl From<promql::Error> for ApiError {
    fn from(e: promql::Error) -> Self {
        match e {
            promql::Error::Parse { .. } => ApiError::bad_data(e.to_string()),
            promql::Error::Source(SourceError::Unavailable { .. }) => ApiError::unavailable(e.to_string()),
            // The deadline seen by the source wrapper first (before the handler's timer): the
            // same timeout answer.
            promql::Error::Source(SourceError::Limit(m)) if m == DEADLINE_PASSED => {
                ApiError::timeout("query timed out in expression evaluation")
            }
            // The sample limit.
            promql::Error::Source(SourceError::Limit(_)) => ApiError::execution(e.to_string()),
            promql::Error::Eval(_) | promql::Error::Unsupported(_) => ApiError::execution(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(json!({"status": "error", "errorType": self.kind, "error": self.message})),
        )
            .into_response()
    }
}

fn success(data: Json, warnings: Vec<String>, infos: Vec<String>) -> Response {
    let mut body = json!({"status": "success", "data": data});
    if !warnings.is_empty() {
        body["warnings"] = json!(warnings);
    }
    if !infos.is_empty() {
        body["infos"] = json!(infos);
    }
    axum::Json(body).into_response()
}

// ---------------------------------------------------------------------------------------------
// Parameters: the URL query and, for POST, the form body, as Go's `Request.ParseForm` merges
// them (body values first).

struct Params(Vec<(String, String)>);

impl Params {
    fn read(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Result<Params, ApiError> {
        let mut pairs = Vec::new();
        let form = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if form && !body.is_empty() {
            let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_data("form body is not UTF-8"))?;
            pairs.extend(form_pairs(text));
        }
        pairs.extend(form_pairs(query.unwrap_or("")));
        Ok(Params(pairs))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

fn form_pairs(s: &str) -> impl Iterator<Item = (String, String)> + '_ {
    s.split('&').filter(|kv| !kv.is_empty()).map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (super::form_decode(k), super::form_decode(v))
    })
}

/// Prometheus' `parseTime`: unix seconds with decimals, or RFC 3339; in ms.
fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(f) = s.parse::<f64>() {
        if f.is_finite() {
            let ms = (f * 1000.0).round();
            if ms.abs() < 9.2e18 {
                return Ok(ms as i64);
            }
        }
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("cannot parse {s:?} to a valid timestamp"))
}

/// Prometheus' `parseDuration`: float seconds, or a Prometheus duration (`15s`, `1m30s`).
fn parse_duration(s: &str) -> Result<i64, String> {
    if let Ok(f) = s.parse::<f64>() {
        let ms = (f * 1000.0).round();
        if f.is_finite() && ms.abs() < 9.2e18 {
            return Ok(ms as i64);
        }
        return Err(format!("cannot parse {s:?} to a valid duration. It overflows int64"));
    }
    crate::duration::parse_ms(s).map_err(|_| format!("cannot parse {s:?} to a valid duration"))
}

fn time_param(p: &Params, name: &str, default: i64) -> Result<i64, ApiError> {
    match p.get(name) {
        None | Some("") => Ok(default),
        Some(s) => parse_time(s).map_err(|e| ApiError::param(name, format!("Invalid time value for '{name}': {e}"))),
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Prometheus' `MinTime`/`MaxTime` defaults of the metadata endpoints, kept clear of overflow
/// when windows are added to them.
const MIN_TIME: i64 = i64::MIN / 4;
const MAX_TIME: i64 = i64::MAX / 4;

// ---------------------------------------------------------------------------------------------
// Evaluation: bounded in time, concurrency and samples.

impl QueryApi {
    /// The request's timeout: the server's, or the lower `timeout=`.
    fn timeout(&self, p: &Params) -> Result<Duration, ApiError> {
        match p.get("timeout") {
            None | Some("") => Ok(self.limits.timeout),
            Some(s) => {
                let ms = parse_duration(s).map_err(|e| ApiError::param("timeout", e))?;
                if ms <= 0 {
                    return Err(ApiError::param("timeout", "timeout must be positive"));
                }
                Ok(self.limits.timeout.min(Duration::from_millis(ms as u64)))
            }
        }
    }

    /// Runs `f` on a blocking thread (sources block) once a permit is free, within `timeout`.
    /// A query over its timeout, or whose client went away (the request's future dropped), is
    /// answered at once (or not at all); its thread stops at its next read of the source or
    /// subquery step, and keeps its permit until then, so the limit counts what really runs.
    /// Parsing, which reads no source, is linear in the text (`promql::parse_for`).
    async fn evaluate<T: Send + 'static>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&Engine, &dyn Queryable) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let permit = tokio::time::timeout_at(deadline, Arc::clone(&self.permits).acquire_owned())
            .await
            .map_err(|_| ApiError::timeout("query timed out in query queue"))?
            .map_err(|_| ApiError::internal("query queue closed"))?;
        let (engine, source) = (self.target)();
        let max_samples = self.limits.max_samples;
        // Set when this future ends, answered or dropped (a client that disconnects).
        let cancel = Cancel(Arc::new(AtomicBool::new(false)));
        let cancelled = Arc::clone(&cancel.0);
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let bounded = Bounded {
                inner: &*source,
                deadline: deadline.into_std(),
                cancelled,
                samples: AtomicU64::new(0),
                max_samples,
            };
            f(&engine, &bounded)
        });
        let answer = tokio::time::timeout_at(deadline, task).await;
        drop(cancel);
        match answer {
            Err(_) => Err(ApiError::timeout("query timed out in expression evaluation")),
            Ok(Err(e)) => Err(ApiError::internal(format!("query evaluation failed: {e}"))),
            Ok(Ok(r)) => r,
        }
    }
}

impl QueryApi {
    /// The series of `expr` over `[start, end]` at `step`, bounded as any request (the
    /// concurrency limit, the samples limit, and `timeout`): the status page's charts.
    pub(crate) async fn range_series(
        &self,
        expr: String,
        start: i64,
        end: i64,
        step: i64,
        timeout: Duration,
    ) -> Result<Vec<promql::Series>, String> {
        self.evaluate(timeout.min(self.limits.timeout), move |engine, src| {
            let r = engine
                .range_query(src, &expr, start, end, step)
                .map_err(ApiError::from)?;
            // A range query answers a matrix.
            Ok(match r.value {
                Value::Matrix(m) => m,
                _ => Vec::new(),
            })
        })
        .await
        .map_err(|e| e.message)
    }
}

/// The message of [`Bounded`]'s deadline error.
const DEADLINE_PASSED: &str = "query timed out";

/// Tells a query's thread, when dropped, that nobody waits for its answer any more.
struct Cancel(Arc<AtomicBool>);

impl Drop for Cancel {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The source as one query sees it: refused past the query's deadline, and counting the
/// samples read against the limit.
struct Bounded<'a> {
    inner: &'a dyn Queryable,
    deadline: Instant,
    /// The request ended (timed out or its client went away).
    cancelled: Arc<AtomicBool>,
    samples: AtomicU64,
    max_samples: u64,
}

impl Bounded<'_> {
    fn check_deadline(&self) -> Result<(), SourceError> {
        if self.cancelled.load(Ordering::Relaxed) || Instant::now() > self.deadline {
            return Err(SourceError::Limit(DEADLINE_PASSED.into()));
        }
        Ok(())
    }

    fn count(&self, n: usize) -> Result<(), SourceError> {
        let total = self.samples.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if total > self.max_samples {
            return Err(SourceError::Limit(too_many_samples(self.max_samples)));
        }
        Ok(())
    }
}

fn too_many_samples(max: u64) -> String {
    format!("query processing would load too many samples into memory in query execution (over {max})")
}

impl Queryable for Bounded<'_> {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        self.check_deadline()?;
        let out = self.inner.select(matchers, mint, maxt)?;
        self.count(out.iter().map(|s| s.samples.len()).sum())?;
        Ok(out)
    }

    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        self.check_deadline()?;
        let out = self.inner.select_histograms(matchers, mint, maxt)?;
        self.count(out.iter().map(|s| s.samples.len()).sum())?;
        Ok(out)
    }

    fn has_histograms(&self) -> bool {
        self.inner.has_histograms()
    }

    fn may_have_stale_markers(&self) -> bool {
        self.inner.may_have_stale_markers()
    }

    fn pushdown_parts(&self) -> bool {
        self.inner.pushdown_parts()
    }

    fn pushdown(&self, expr: &promql::Expr, t: i64) -> Option<Result<Vec<crate::promql::PushedSample>, SourceError>> {
        if let Err(e) = self.check_deadline() {
            return Some(Err(e));
        }
        let r = self.inner.pushdown(expr, t)?;
        Some(r.and_then(|v| self.count(v.len()).map(|()| v)))
    }

    fn requests(&self) -> Vec<(String, &'static str, u64)> {
        self.inner.requests()
    }

    fn warnings(&self) -> Vec<(String, u64)> {
        self.inner.warnings()
    }

    fn computed(&self, points: usize) -> Result<(), SourceError> {
        self.check_deadline()?;
        self.count(points)
    }
}

// ---------------------------------------------------------------------------------------------
// Handlers.

async fn instant(State(api): State<QueryApi>, RawQuery(q): RawQuery, headers: HeaderMap, body: Bytes) -> Response {
    respond(instant_query(&api, q.as_deref(), &headers, &body).await)
}

async fn instant_query(
    api: &QueryApi,
    q: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let p = Params::read(q, headers, body)?;
    let t = time_param(&p, "time", now_ms())?;
    let timeout = api.timeout(&p)?;
    let expr = p.get("query").unwrap_or("").to_string();
    let max = api.limits.max_samples;
    api.evaluate(timeout, move |engine, src| {
        let r = engine.instant_query(src, &expr, t).map_err(query_error)?;
        query_success(&r.value, &r.warnings, &r.infos, max)
    })
    .await
}

async fn range(State(api): State<QueryApi>, RawQuery(q): RawQuery, headers: HeaderMap, body: Bytes) -> Response {
    respond(range_query(&api, q.as_deref(), &headers, &body).await)
}

async fn range_query(api: &QueryApi, q: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Result<Response, ApiError> {
    let p = Params::read(q, headers, body)?;
    let start = match p.get("start") {
        Some(s) => parse_time(s).map_err(|e| ApiError::param("start", e))?,
        None => return Err(ApiError::param("start", "cannot parse \"\" to a valid timestamp")),
    };
    let end = match p.get("end") {
        Some(s) => parse_time(s).map_err(|e| ApiError::param("end", e))?,
        None => return Err(ApiError::param("end", "cannot parse \"\" to a valid timestamp")),
    };
    if end < start {
        return Err(ApiError::param("end", "end timestamp must not be before start time"));
    }
    let step = match p.get("step") {
        Some(s) => parse_duration(s).map_err(|e| ApiError::param("step", e))?,
        None => return Err(ApiError::param("step", "cannot parse \"\" to a valid duration")),
    };
    if step <= 0 {
        return Err(ApiError::param(
            "step",
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    // Prometheus' bound on the points of one series; it also keeps the step loop short.
    if (end - start) / step > 11_000 {
        return Err(ApiError::bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ));
    }
    let timeout = api.timeout(&p)?;
    let expr = p.get("query").unwrap_or("").to_string();
    let max = api.limits.max_samples;
    api.evaluate(timeout, move |engine, src| {
        let r = engine.range_query(src, &expr, start, end, step).map_err(query_error)?;
        query_success(&r.value, &r.warnings, &r.infos, max)
    })
    .await
}

/// Prometheus names the parameter of a query that does not parse.
fn query_error(e: promql::Error) -> ApiError {
    match e {
        promql::Error::Parse { .. } => ApiError::param("query", e),
        other => ApiError::from(other),
    }
}

/// The label sets of every `match[]` selector's series in [start, end], each once, sorted.
fn matched_series(src: &dyn Queryable, selectors: &[String], start: i64, end: i64) -> Result<Vec<Labels>, ApiError> {
    let mut out = Vec::new();
    for m in selectors {
        let found = promql::selector_series(src, m, start, end).map_err(|e| match e {
            promql::Error::Parse { .. } | promql::Error::Eval(_) => ApiError::param("match[]", e),
            other => ApiError::from(other),
        })?;
        out.extend(found);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The metadata endpoints' common parameters: `match[]`, start, end, and the timeout.
fn metadata_params(api: &QueryApi, p: &Params) -> Result<(Vec<String>, i64, i64, Duration), ApiError> {
    let start = time_param(p, "start", MIN_TIME)?;
    let end = time_param(p, "end", MAX_TIME)?;
    let matchers: Vec<String> = p.all("match[]").into_iter().map(str::to_string).collect();
    Ok((matchers, start, end, api.timeout(p)?))
}

async fn series(State(api): State<QueryApi>, RawQuery(q): RawQuery, headers: HeaderMap, body: Bytes) -> Response {
    let run = async {
        let p = Params::read(q.as_deref(), &headers, &body)?;
        let (matchers, start, end, timeout) = metadata_params(&api, &p)?;
        if matchers.is_empty() {
            return Err(ApiError::bad_data("no match[] parameter provided"));
        }
        let max = api.limits.max_samples;
        api.evaluate(timeout, move |_, src| {
            let found = matched_series(src, &matchers, start, end)?;
            check_points(found.len() as u64, max)?;
            let data: Vec<Json> = found.iter().map(labels_json).collect();
            Ok(success(Json::Array(data), Vec::new(), Vec::new()))
        })
        .await
    };
    respond(run.await)
}

/// Without `match[]`, every series: the selector Prometheus' clients use for "all".
const ALL_SERIES: &str = "{__name__=~\".+\"}";

async fn labels(State(api): State<QueryApi>, RawQuery(q): RawQuery, headers: HeaderMap, body: Bytes) -> Response {
    let run = async {
        let p = Params::read(q.as_deref(), &headers, &body)?;
        let (mut matchers, start, end, timeout) = metadata_params(&api, &p)?;
        if matchers.is_empty() {
            matchers.push(ALL_SERIES.to_string());
        }
        api.evaluate(timeout, move |_, src| {
            let found = matched_series(src, &matchers, start, end)?;
            let mut names: Vec<&str> = found.iter().flat_map(|l| l.iter().map(|x| &*x.name)).collect();
            names.sort_unstable();
            names.dedup();
            Ok(success(json!(names), Vec::new(), Vec::new()))
        })
        .await
    };
    respond(run.await)
}

async fn label_values(
    State(api): State<QueryApi>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let run = async {
        // Prometheus refuses names outside the label charset before reading anything.
        if !crate::labels::is_valid_label_name(&name) {
            return Err(ApiError::bad_data(format!("invalid label name: {name:?}")));
        }
        let p = Params::read(q.as_deref(), &headers, &[])?;
        let (mut matchers, start, end, timeout) = metadata_params(&api, &p)?;
        if matchers.is_empty() {
            matchers.push(ALL_SERIES.to_string());
        }
        api.evaluate(timeout, move |_, src| {
            let found = matched_series(src, &matchers, start, end)?;
            let mut values: Vec<&str> = found.iter().filter_map(|l| l.get(&name)).collect();
            values.sort_unstable();
            values.dedup();
            Ok(success(json!(values), Vec::new(), Vec::new()))
        })
        .await
    };
    respond(run.await)
}

fn respond(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

// ---------------------------------------------------------------------------------------------
// Result shapes.

fn check_points(n: u64, max: u64) -> Result<(), ApiError> {
    if n > max {
        return Err(ApiError::execution(format!(
            "query returned {n} points, over the limit of {max}: narrow the query or its range"
        )));
    }
    Ok(())
}

fn labels_json(l: &Labels) -> Json {
    Json::Object(
        l.iter()
            .map(|x| (x.name.to_string(), Json::String(x.value.to_string())))
            .collect(),
    )
}

/// A query's answer as Prometheus sends it, written straight into the body: building a
/// serde_json tree first (a string per value and timestamp) cost more than evaluating a large
/// range query. Over `max` points is an error, never a truncation.
fn query_success(v: &Value, warnings: &[String], infos: &[String], max: u64) -> Result<Response, ApiError> {
    let mut b: Vec<u8> = Vec::with_capacity(256);
    b.extend_from_slice(b"{\"status\":\"success\",\"data\":");
    write_value(&mut b, v, max)?;
    for (key, list) in [("warnings", warnings), ("infos", infos)] {
        if !list.is_empty() {
            b.extend_from_slice(format!(",\"{key}\":").as_bytes());
            write_json(&mut b, &list);
        }
    }
    b.push(b'}');
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], b).into_response())
}

/// Appends `v` as JSON (serde_json's escaping and float formatting).
fn write_json<T: serde::Serialize + ?Sized>(b: &mut Vec<u8>, v: &T) {
    // Writing into a Vec cannot fail, and these values always serialize.
    let _ = serde_json::to_writer(&mut *b, v);
}

/// A timestamp as Prometheus writes it: unix seconds, decimals only where there are any.
fn write_time(b: &mut Vec<u8>, t: i64) {
    if t % 1000 == 0 {
        b.extend_from_slice((t / 1000).to_string().as_bytes());
    } else {
        write_json(b, &(t as f64 / 1000.0));
    }
}

/// `[t,"v"]`, the value as Go's strconv formats it (no character that needs escaping).
fn write_point(b: &mut Vec<u8>, t: i64, v: f64) {
    b.push(b'[');
    write_time(b, t);
    b.extend_from_slice(b",\"");
    b.extend_from_slice(crate::gofmt::format_f(v).as_bytes());
    b.extend_from_slice(b"\"]");
}

fn write_labels(b: &mut Vec<u8>, l: &Labels) {
    b.push(b'{');
    for (i, x) in l.iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        write_json(b, &*x.name);
        b.push(b':');
        write_json(b, &*x.value);
    }
    b.push(b'}');
}

fn write_value(b: &mut Vec<u8>, v: &Value, max: u64) -> Result<(), ApiError> {
    match v {
        Value::Scalar { t, v } => {
            b.extend_from_slice(b"{\"resultType\":\"scalar\",\"result\":");
            write_point(b, *t, *v);
        }
        Value::String { t, s } => {
            b.extend_from_slice(b"{\"resultType\":\"string\",\"result\":[");
            write_time(b, *t);
            b.push(b',');
            write_json(b, s);
            b.push(b']');
        }
        Value::Vector(samples) => {
            check_points(samples.len() as u64, max)?;
            b.extend_from_slice(b"{\"resultType\":\"vector\",\"result\":[");
            for (i, s) in samples.iter().enumerate() {
                if i > 0 {
                    b.push(b',');
                }
                b.extend_from_slice(b"{\"metric\":");
                write_labels(b, &s.metric);
                match &s.h {
                    Some(h) => {
                        b.extend_from_slice(b",\"histogram\":[");
                        write_time(b, s.t);
                        b.push(b',');
                        b.extend_from_slice(h.prometheus_json().as_bytes());
                        b.push(b']');
                    }
                    None => {
                        b.extend_from_slice(b",\"value\":");
                        write_point(b, s.t, s.v);
                    }
                }
                b.push(b'}');
            }
            b.push(b']');
        }
        Value::Matrix(series) => {
            let points: u64 = series
                .iter()
                .map(|s| (s.samples.len() + s.histograms.len()) as u64)
                .sum();
            check_points(points, max)?;
            b.reserve(points as usize * 24);
            b.extend_from_slice(b"{\"resultType\":\"matrix\",\"result\":[");
            for (i, s) in series.iter().enumerate() {
                if i > 0 {
                    b.push(b',');
                }
                b.extend_from_slice(b"{\"metric\":");
                write_labels(b, &s.metric);
                if !s.samples.is_empty() {
                    b.extend_from_slice(b",\"values\":[");
                    for (j, &(t, v)) in s.samples.iter().enumerate() {
                        if j > 0 {
                            b.push(b',');
                        }
                        write_point(b, t, v);
                    }
                    b.push(b']');
                }
                if !s.histograms.is_empty() {
                    b.extend_from_slice(b",\"histograms\":[");
                    for (j, (t, h)) in s.histograms.iter().enumerate() {
                        if j > 0 {
                            b.push(b',');
                        }
                        b.push(b'[');
                        write_time(b, *t);
                        b.push(b',');
                        b.extend_from_slice(h.prometheus_json().as_bytes());
                        b.push(b']');
                    }
                    b.push(b']');
                }
                b.push(b'}');
            }
            b.push(b']');
        }
    }
    b.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that takes `delay` per read, like a slow remote one.
    struct Slow {
        delay: Duration,
        store: crate::tsdb::Store,
    }

    impl Queryable for Slow {
        fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
            std::thread::sleep(self.delay);
            self.store.select(matchers, mint, maxt)
        }
    }

    fn api(delay_ms: u64, limits: QueryLimits) -> QueryApi {
        let mut store = crate::tsdb::Store::new();
        for i in 0..10 {
            store.append(
                &Labels::from_pairs([("__name__", "up"), ("job", "a")]),
                i * 15_000,
                i as f64,
            );
            store.append(
                &Labels::from_pairs([("__name__", "up"), ("job", "b")]),
                i * 15_000,
                0.1 * i as f64,
            );
        }
        let slow = Slow {
            delay: Duration::from_millis(delay_ms),
            store,
        };
        QueryApi::over(Arc::new(slow), limits)
    }

    async fn query(api: &QueryApi, q: &str) -> (StatusCode, Json) {
        let r = respond(instant_query(api, Some(q), &HeaderMap::new(), &[]).await);
        let status = r.status();
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    fn error(kind: &str, message: &str) -> Json {
        json!({"status": "error", "errorType": kind, "error": message})
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn success_shape_and_float_formatting() {
        let api = api(0, QueryLimits::default());
        let (status, body) = query(&api, "query=up%20%2F%200&time=135.5").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            json!({"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {"job": "a"}, "value": [135.5, "+Inf"]},
                {"metric": {"job": "b"}, "value": [135.5, "+Inf"]},
            ]}})
        );
        let (_, body) = query(&api, "query=up%7Bjob%3D%22b%22%7D%20*%203&time=30").await;
        assert_eq!(body["data"]["result"][0]["value"], json!([30, "0.6000000000000001"]));
        let (_, body) = query(&api, "query=-(0%2F0)&time=30").await;
        assert_eq!(body["data"], json!({"resultType": "scalar", "result": [30, "NaN"]}));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_over_its_timeout_is_a_503() {
        let api = api(500, QueryLimits::default());
        let (status, body) = query(&api, "query=up&time=30&timeout=0.1").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, error("timeout", "query timed out in expression evaluation"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn over_the_concurrency_limit_a_query_waits_then_gets_a_503() {
        let limits = QueryLimits {
            max_concurrent: 1,
            timeout: Duration::from_millis(300),
            ..QueryLimits::default()
        };
        let api = api(1000, limits);
        let first = {
            let api = api.clone();
            tokio::spawn(async move { query(&api, "query=up&time=30").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (status, body) = query(&api, "query=up&time=30").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, error("timeout", "query timed out in query queue"));
        // The first one ran out of time in evaluation, not in the queue.
        let (_, body) = first.await.unwrap();
        assert_eq!(body["error"], "query timed out in expression evaluation");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn limits_and_bad_parameters_are_errors() {
        let limits = QueryLimits {
            max_samples: 5,
            ..QueryLimits::default()
        };
        let api = api(0, limits);
        let (status, body) = query(&api, "query=up%5B5m%5D&time=150").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body["errorType"], "execution");
        assert!(body["error"].as_str().unwrap().contains("too many samples"), "{body}");
        let (status, body) = query(&api, "query=up&time=30&timeout=-1s").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["errorType"], "bad_data");
        let (status, body) = query(&api, "query=sum(&time=30").await;
        assert_eq!(
            (status, &body["errorType"]),
            (StatusCode::BAD_REQUEST, &json!("bad_data"))
        );
        assert!(body["error"]
            .as_str()
            .unwrap()
            .starts_with("invalid parameter \"query\": "));
    }

    /// A query that reads nothing but computes much (a subquery of 3e12 steps over `vector(1)`)
    /// stops at its deadline instead of running on, and growing, after its answer: the one
    /// evaluation slot is free again at once. Its points count against the sample limit too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn computed_points_are_bounded_by_the_deadline_and_the_sample_limit() {
        let limits = QueryLimits {
            max_concurrent: 1,
            timeout: Duration::from_millis(300),
            ..QueryLimits::default()
        };
        let api = api(0, limits);
        let huge = "query=count_over_time(vector(1)%5B100y%3A1ms%5D)&time=30";
        let (status, body) = query(&api, huge).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, body) = query(&api, "query=up&time=30").await;
        assert_eq!(status, StatusCode::OK, "the runaway query still holds its slot: {body}");

        let api = api_with_samples(1000);
        let (status, body) = query(&api, "query=count_over_time(vector(1)%5B1h%3A1s%5D)&time=3600").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body["error"].as_str().unwrap().contains("too many samples"), "{body}");
        let (status, body) = query(&api, "query=count_over_time(vector(1)%5B10m%3A1s%5D)&time=3600").await;
        assert_eq!(
            (status, &body["data"]["result"][0]["value"][1]),
            (StatusCode::OK, &json!("600"))
        );
    }

    fn api_with_samples(max_samples: u64) -> QueryApi {
        api(
            0,
            QueryLimits {
                max_samples,
                ..QueryLimits::default()
            },
        )
    }

    #[test]
    fn native_histograms_in_prometheus_shape() {
        use crate::tsdb::FloatHistogram;
        let h = FloatHistogram {
            schema: 0,
            zero_threshold: 0.001,
            zero_count: 1.0,
            count: 4.0,
            sum: 3.5,
            positive: vec![(1, 2.0), (2, 0.0)],
            negative: vec![(0, 1.0)],
            ..FloatHistogram::default()
        };
        assert_eq!(
            h.prometheus_json(),
            r#"{"count":"4","sum":"3.5","buckets":[[1,"-1","-0.5","1"],[3,"-0.001","0.001","1"],[0,"1","2","2"]]}"#
        );
    }

    #[test]
    fn times_and_durations_as_prometheus_reads_them() {
        assert_eq!(parse_time("1700000000.123"), Ok(1_700_000_000_123));
        assert_eq!(parse_time("2023-11-14T22:13:20.5Z"), Ok(1_700_000_000_500));
        assert!(parse_time("later").is_err());
        assert_eq!(parse_duration("15s"), Ok(15_000));
        assert_eq!(parse_duration("0.25"), Ok(250));
        assert!(parse_duration("fast").is_err());
        let time = |t| {
            let mut b = Vec::new();
            write_time(&mut b, t);
            String::from_utf8(b).unwrap()
        };
        assert_eq!(time(1_700_000_000_000), "1700000000");
        assert_eq!(time(1_700_000_000_123), "1700000000.123");
        assert_eq!(time(-1_500), "-1.5");
    }
}
