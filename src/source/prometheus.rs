//! A Prometheus-compatible HTTP API as a source (Prometheus, Amazon Managed Service for
//! Prometheus, Mimir, Thanos, VictoriaMetrics).
//!
//! * Raw series for local evaluation: [`Queryable::select`] sends the range selector
//!   `{matchers}[range]` as an instant query at `maxt` (`POST /api/v1/query`); the matrix it
//!   returns holds the raw samples of `[mint, maxt]`. Prometheus drops staleness markers from
//!   range-selector results, so a series that stopped stays visible locally for the lookback
//!   window (5m); pushed-down queries ([`PrometheusSource::instant_query`]) are exact.
//! * Pushdown: [`PrometheusSource::instant_query`] runs a whole expression remotely.
//! * Native histograms: the answers' `histogram` / `histograms` (Prometheus' JSON shape) are
//!   read back into the engine's histograms (`tsdb::histogram_json` says what the shape keeps).
//!   A raw fetch answers floats and histograms at once: `select` keeps the histograms for the
//!   `select_histograms` call the engine makes next with the same arguments, so a selector
//!   costs one request.
//! * Per-request timeout; retries with exponential backoff on 5xx, timeouts and transport
//!   errors; 4xx (400 bad query, 422 execution error, AMP's `max_samples_processed` guard) are
//!   final. Every failure is a [`SourceError`], never an empty result.
//! * AMP SigV4 signing (`aws-sigv4`, service `aps`). Credentials: `AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`; or IRSA web identity
//!   (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, exchanged through STS
//!   `AssumeRoleWithWebIdentity` and cached until 5 minutes before expiry). Not covered (the
//!   full `aws-config` chain): shared config/credentials files, SSO, ECS/IMDS instance roles.
//!
//! [`Queryable::select`] is synchronous: it blocks on the tokio runtime handle the source was
//! built with, so call it from a blocking thread (`spawn_blocking`), never an async task.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

tokio::task_local! {
    /// Set while a request is the mirror's own (see [`PrometheusSource::reserved`]).
    static RESERVED: bool;
}
use std::time::{Duration as StdDuration, SystemTime};

use serde::Deserialize;

use super::config::{SigV4Config, SourceConfig};
use super::{HistogramSeriesData, Queryable, SeriesData, SourceError};
use crate::labels::{Labels, Matcher};
use crate::promql::PushedSample;
use crate::tsdb::FloatHistogram;

/// A matrix answer: its float series and its native histogram series.
pub(crate) type MatrixAnswer = (Vec<SeriesData>, Vec<HistogramSeriesData>);

/// How many raw fetches' histograms are kept for the `select_histograms` that follows each.
const KEPT_HISTOGRAM_FETCHES: usize = 64;

/// The histograms of one raw fetch: (matchers as text, mint, maxt) and its series.
type KeptHistograms = ((String, i64, i64), Vec<HistogramSeriesData>);

/// Why a batch of expressions got no answer.
#[derive(Debug)]
pub enum BatchError {
    /// The source answered, but not for each expression (one expression's error, a sample
    /// limit, an answer that does not split by the tag): ask them one at a time.
    Split(SourceError),
    /// The source is down or timing out: each expression of the batch fails with this.
    Failed(SourceError),
}

/// The source answered the query with an error of the query's own (bad data, an execution
/// error, a limit), as opposed to being unreachable, failing or timing out.
pub(crate) fn answered_error(e: &SourceError) -> bool {
    match e {
        SourceError::Limit(_) => true,
        SourceError::Unavailable { message, .. } => message.contains("HTTP 400") || message.contains("HTTP 422"),
    }
}

/// The label a batched query tags each expression's samples with (removed from the answer).
pub(crate) const BATCH_LABEL: &str = "watchfire_batch";

/// A Prometheus-compatible query API.
pub struct PrometheusSource {
    name: String,
    base_url: String,
    client: reqwest::Client,
    timeout: StdDuration,
    retries: u32,
    headers: Vec<(String, String)>,
    sigv4: Option<SigV4Config>,
    creds: Mutex<Option<CachedCreds>>,
    handle: tokio::runtime::Handle,
    /// Initial backoff between retries.
    pub backoff: StdDuration,
    /// Histograms of recent raw fetches, newest last, until `select_histograms` takes them.
    kept: Mutex<VecDeque<KeptHistograms>>,
    /// Most whole expressions of one batch in flight at once (`query_concurrency`).
    query_concurrency: usize,
    /// Most vector expressions in one request (`query_batch`).
    query_batch: usize,
    /// The replica's request slots to this source (`max_in_flight`), shared by every group.
    slots: tokio::sync::Semaphore,
    max_in_flight: usize,
    /// One slot beside them for the mirror's own requests ([`PrometheusSource::reserved`]).
    reserved_slot: tokio::sync::Semaphore,
    /// `&name=value...` of `query_params`, appended to every request's form body.
    extra_form: String,
    /// Successful answers that carried warnings (a backend's limits close to being hit, a
    /// partial answer), and when a warning was last logged.
    warnings: std::sync::atomic::AtomicU64,
    warned_at: Mutex<Option<std::time::Instant>>,
}

/// Warnings are logged at most this often per source (the count says how many came between).
const WARNING_LOG_EVERY: StdDuration = StdDuration::from_secs(60);

#[derive(Clone, Debug)]
struct CachedCreds {
    access_key: String,
    secret_key: String,
    session_token: Option<String>,
    /// Refresh after this time; `None`: never expires (static env credentials).
    refresh_at: Option<SystemTime>,
}

/// How a request carries its parameters: the query API takes a form body (no length limit on
/// the expression), the label values API only a query string.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

#[derive(Deserialize)]
struct ApiResponse {
    status: String,
    /// Decoded by the caller: a query's [`ApiData`], a label's values.
    #[serde(default)]
    data: Option<Box<serde_json::value::RawValue>>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
struct ApiData {
    #[serde(rename = "resultType")]
    result_type: String,
    /// Kept as text and decoded once into its typed shape (no intermediate `Value` tree: large
    /// answers cost half the time).
    result: Box<serde_json::value::RawValue>,
}

#[derive(Deserialize)]
struct ApiSeries {
    metric: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
    #[serde(default)]
    value: Option<(f64, String)>,
    #[serde(default)]
    histograms: Vec<(f64, serde_json::Value)>,
    #[serde(default)]
    histogram: Option<(f64, serde_json::Value)>,
}

impl PrometheusSource {
    /// A source for one configured `type: prometheus` entry; `handle` runs its requests.
    pub fn new(cfg: &SourceConfig, handle: tokio::runtime::Handle) -> Result<Self, SourceError> {
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .build()
            .map_err(|e| SourceError::Unavailable {
                source_name: cfg.name.clone(),
                message: format!("cannot build HTTP client: {e}"),
            })?;
        Ok(PrometheusSource {
            name: cfg.name.clone(),
            base_url: cfg.url.trim_end_matches('/').to_string(),
            client,
            timeout: cfg.timeout,
            retries: cfg.retries,
            headers: cfg.headers.clone(),
            sigv4: cfg.sigv4.clone(),
            creds: Mutex::new(None),
            handle,
            backoff: StdDuration::from_millis(200),
            kept: Mutex::new(VecDeque::new()),
            query_concurrency: cfg.query_concurrency.max(1),
            query_batch: cfg.query_batch.max(1),
            slots: tokio::sync::Semaphore::new(cfg.max_in_flight.max(1)),
            max_in_flight: cfg.max_in_flight.max(1),
            reserved_slot: tokio::sync::Semaphore::new(1),
            extra_form: cfg
                .query_params
                .iter()
                .map(|(k, v)| format!("&{}={}", crate::url::encode(k), crate::url::encode(v)))
                .collect(),
            warnings: std::sync::atomic::AtomicU64::new(0),
            warned_at: Mutex::new(None),
        })
    }

    /// Successful answers so far that carried warnings.
    pub fn warnings(&self) -> u64 {
        self.warnings.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts an answer's warnings and logs them, at most once a [`WARNING_LOG_EVERY`]: a
    /// backend near a limit warns on every query of a heavy rule.
    fn warned(&self, endpoint: &str, warnings: &[String]) {
        if warnings.is_empty() {
            return;
        }
        let n = self.warnings.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let now = std::time::Instant::now();
        let mut at = self.warned_at.lock().unwrap_or_else(|e| e.into_inner());
        if at.is_some_and(|t| now.duration_since(t) < WARNING_LOG_EVERY) {
            tracing::debug!(source = %self.name, endpoint, warnings = ?warnings, "the source answered with warnings");
            return;
        }
        *at = Some(now);
        tracing::warn!(
            source = %self.name,
            endpoint,
            warnings = ?warnings,
            answers_with_warnings = n,
            "the source answered with warnings (logged at most once a minute; watchfire_source_warnings_total counts them)"
        );
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The runtime its requests run on.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Most whole expressions of one batch it is asked at once.
    pub(crate) fn query_concurrency(&self) -> usize {
        self.query_concurrency
    }

    /// Most vector expressions it is asked in one request.
    pub(crate) fn query_batch(&self) -> usize {
        self.query_batch
    }

    /// Uses these credentials for SigV4 instead of the environment (tests, callers with their
    /// own credential source).
    pub fn with_static_credentials(self, access_key: &str, secret_key: &str, session_token: Option<&str>) -> Self {
        if let Ok(mut g) = self.creds.lock() {
            *g = Some(CachedCreds {
                access_key: access_key.to_string(),
                secret_key: secret_key.to_string(),
                session_token: session_token.map(str::to_string),
                refresh_at: None,
            });
        }
        self
    }

    fn unavailable(&self, message: impl Into<String>) -> SourceError {
        SourceError::Unavailable {
            source_name: self.name.clone(),
            message: message.into(),
        }
    }

    /// Runs `expr` remotely at `t` (ms). A vector comes back as its samples (floats or native
    /// histograms), a scalar as one sample with empty labels; other result types are errors.
    pub async fn instant_query(&self, expr: &str, t: i64) -> Result<Vec<PushedSample>, SourceError> {
        let data = self.query(expr, t).await?;
        match data.result_type.as_str() {
            "vector" => self.vector(&data),
            "scalar" => {
                let (_, v): (f64, String) = serde_json::from_str(data.result.get())
                    .map_err(|e| self.unavailable(format!("malformed scalar result: {e}")))?;
                Ok(vec![PushedSample::float(
                    Labels::empty(),
                    parse_value(&v).map_err(|e| self.unavailable(e))?,
                )])
            }
            other => Err(self.unavailable(format!("expected a vector or scalar result, got {other}"))),
        }
    }

    /// Several vector expressions at `t` in one request: each one's samples, in order. The
    /// request is `label_replace((e0), "watchfire_batch", "0", "", "") or ...`, a balanced tree
    /// of `or`: the tag keeps the expressions' samples apart (no two can match), and the
    /// source evaluates them one after another in one query, as its own rule manager would,
    /// instead of one request, one query preparation and one HTTP round trip each. A failure
    /// is the whole request's: [`BatchError::Split`] when the source answered but not for every
    /// expression (one expression's error, a limit, an answer it cannot split), for the
    /// caller to ask them one by one; [`BatchError::Failed`] when it is down or timing out.
    pub async fn instant_query_batch(&self, exprs: &[&str], t: i64) -> Result<Vec<Vec<PushedSample>>, BatchError> {
        fn tree(parts: &[String]) -> String {
            match parts {
                [one] => one.clone(),
                _ => {
                    let (a, b) = parts.split_at(parts.len() / 2);
                    format!("({}) or ({})", tree(a), tree(b))
                }
            }
        }
        if exprs.is_empty() {
            return Ok(Vec::new());
        }
        let tagged: Vec<String> = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| format!("label_replace(({e}), \"{BATCH_LABEL}\", \"{i}\", \"\", \"\")"))
            .collect();
        let data = self.query(&tree(&tagged), t).await.map_err(|e| {
            if answered_error(&e) {
                BatchError::Split(e)
            } else {
                BatchError::Failed(e)
            }
        })?;
        let split = |m: String| BatchError::Split(self.unavailable(m));
        if data.result_type != "vector" {
            return Err(split(format!("a batch answered {}, not a vector", data.result_type)));
        }
        let mut out: Vec<Vec<PushedSample>> = exprs.iter().map(|_| Vec::new()).collect();
        for mut s in self.vector(&data).map_err(BatchError::Split)? {
            let i = s
                .labels
                .get(BATCH_LABEL)
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|i| *i < out.len())
                .ok_or_else(|| split(format!("a batch answered a sample without its {BATCH_LABEL} tag")))?;
            s.labels = s.labels.drop(&[BATCH_LABEL.to_string()], false);
            out[i].push(s);
        }
        Ok(out)
    }

    /// The samples of a vector answer.
    fn vector(&self, data: &ApiData) -> Result<Vec<PushedSample>, SourceError> {
        let series: Vec<ApiSeries> = serde_json::from_str(data.result.get())
            .map_err(|e| self.unavailable(format!("malformed vector result: {e}")))?;
        series
            .into_iter()
            .map(|s| {
                let labels = Labels::from_pairs(s.metric);
                if let Some((_, h)) = s.histogram {
                    return Ok(PushedSample {
                        labels,
                        v: 0.0,
                        h: Some(self.histogram(&h)?),
                    });
                }
                let (_, v) = s
                    .value
                    .ok_or_else(|| self.unavailable("vector sample without a value"))?;
                Ok(PushedSample::float(
                    labels,
                    parse_value(&v).map_err(|e| self.unavailable(e))?,
                ))
            })
            .collect()
    }

    /// [`PrometheusSource::instant_query`] from a blocking thread (never an async task).
    pub fn instant_query_blocking(&self, expr: &str, t: i64) -> Result<Vec<PushedSample>, SourceError> {
        self.handle.block_on(self.instant_query(expr, t))
    }

    /// Runs `f` (blocking) with its requests through one slot of their own, not the
    /// evaluations' `max_in_flight`: the mirror's requests (which senders the backend knows, its
    /// backfills). A backend the rules keep busy must not keep the mirror that would relieve it
    /// from starting, and these requests are few and one at a time.
    pub fn reserved<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.handle.block_on(RESERVED.scope(true, f))
    }

    /// Raw samples of every series matching `matchers` in `[mint, maxt]` (ms): the floats, and
    /// the native histograms.
    pub async fn select_async(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<MatrixAnswer, SourceError> {
        if matchers.is_empty() || matchers.iter().all(Matcher::matches_empty) {
            return Err(SourceError::Limit(
                "a selector needs at least one matcher that does not match the empty string".into(),
            ));
        }
        if maxt < mint {
            return Ok((Vec::new(), Vec::new()));
        }
        let parts: Vec<String> = matchers.iter().map(|m| m.to_string()).collect();
        // One extra millisecond so that `mint` is inside Prometheus 3's left-open windows too.
        let range_ms = maxt.saturating_sub(mint).saturating_add(1);
        let expr = format!("{{{}}}[{range_ms}ms]", parts.join(","));
        let series = self.matrix(self.query(&expr, maxt).await?)?;
        let mut out = Vec::with_capacity(series.len());
        let mut hists = Vec::new();
        for s in series {
            let mut samples = Vec::with_capacity(s.values.len());
            for (ts, v) in s.values {
                let t = (ts * 1000.0).round() as i64;
                if t < mint || t > maxt {
                    continue;
                }
                samples.push((t, parse_value(&v).map_err(|e| self.unavailable(e))?));
            }
            let mut hs = Vec::with_capacity(s.histograms.len());
            for (ts, h) in &s.histograms {
                let t = (ts * 1000.0).round() as i64;
                if t >= mint && t <= maxt {
                    hs.push((t, self.histogram(h)?));
                }
            }
            let labels = Labels::from_pairs(s.metric);
            if !hs.is_empty() {
                hists.push(HistogramSeriesData {
                    labels: labels.clone(),
                    samples: hs,
                });
            }
            if !samples.is_empty() {
                out.push(SeriesData { labels, samples });
            }
        }
        Ok((out, hists))
    }

    /// A histogram of an answer, or the source answering something malformed.
    fn histogram(&self, v: &serde_json::Value) -> Result<Arc<FloatHistogram>, SourceError> {
        crate::tsdb::histogram_json::from_json(v)
            .map(Arc::new)
            .map_err(|e| self.unavailable(format!("malformed native histogram: {e}")))
    }

    /// The key a raw fetch's histograms are kept under.
    fn fetch_key(matchers: &[Matcher], mint: i64, maxt: i64) -> (String, i64, i64) {
        let parts: Vec<String> = matchers.iter().map(|m| m.to_string()).collect();
        (parts.join(","), mint, maxt)
    }

    /// `POST /api/v1/query` with retries; returns the `data` of a successful response.
    async fn query(&self, expr: &str, t: i64) -> Result<ApiData, SourceError> {
        let body = format!("query={}&time={}", crate::url::encode(expr), format_time(t));
        self.api("query", &body).await
    }

    /// The values label `name` has in series with samples in `[start, end]` (ms), as the
    /// source's index holds them (`GET /api/v1/label/<name>/values`): no sample is read, so
    /// it stays cheap on a backend busy with queries. The index answers per block, so a value
    /// may come back whose samples all lie just outside the range.
    pub async fn label_values(&self, name: &str, start: i64, end: i64) -> Result<Vec<String>, SourceError> {
        let params = format!("start={}&end={}", format_time(start), format_time(end));
        let raw = self
            .call(
                Method::Get,
                &format!("label/{}/values", crate::url::encode(name)),
                &params,
            )
            .await?;
        serde_json::from_str(raw.get()).map_err(|e| self.unavailable(format!("malformed label values: {e}")))
    }

    /// `expr` evaluated at `start`, `start + step`, ... up to `end` (ms) in one range query
    /// (`POST /api/v1/query_range`): the same values as an instant query at each of those times,
    /// the floats and the native histograms.
    pub async fn range_query(
        &self,
        expr: &str,
        start: i64,
        end: i64,
        step_ms: i64,
    ) -> Result<MatrixAnswer, SourceError> {
        let body = format!(
            "query={}&start={}&end={}&step={}",
            crate::url::encode(expr),
            format_time(start),
            format_time(end),
            format_time(step_ms.max(1))
        );
        let mut floats = Vec::new();
        let mut hists = Vec::new();
        for s in self.matrix(self.api("query_range", &body).await?)? {
            let labels = Labels::from_pairs(s.metric);
            if !s.histograms.is_empty() {
                let samples = s
                    .histograms
                    .iter()
                    .map(|(ts, h)| Ok(((ts * 1000.0).round() as i64, self.histogram(h)?)))
                    .collect::<Result<Vec<_>, SourceError>>()?;
                hists.push(HistogramSeriesData {
                    labels: labels.clone(),
                    samples,
                });
            }
            if !s.values.is_empty() {
                let samples = s
                    .values
                    .into_iter()
                    .map(|(ts, v)| {
                        Ok((
                            (ts * 1000.0).round() as i64,
                            parse_value(&v).map_err(|e| self.unavailable(e))?,
                        ))
                    })
                    .collect::<Result<Vec<_>, SourceError>>()?;
                floats.push(SeriesData { labels, samples });
            }
        }
        Ok((floats, hists))
    }

    /// The series of a matrix result.
    fn matrix(&self, data: ApiData) -> Result<Vec<ApiSeries>, SourceError> {
        if data.result_type != "matrix" {
            return Err(self.unavailable(format!("expected a matrix result, got {}", data.result_type)));
        }
        serde_json::from_str(data.result.get()).map_err(|e| self.unavailable(format!("malformed matrix result: {e}")))
    }

    /// [`PrometheusSource::range_query`] from a blocking thread (never an async task).
    pub fn range_query_blocking(
        &self,
        expr: &str,
        start: i64,
        end: i64,
        step_ms: i64,
    ) -> Result<MatrixAnswer, SourceError> {
        self.handle.block_on(self.range_query(expr, start, end, step_ms))
    }

    /// `POST /api/v1/{endpoint}` with retries; returns the `data` of a successful response.
    async fn api(&self, endpoint: &str, body: &str) -> Result<ApiData, SourceError> {
        let raw = self.call(Method::Post, endpoint, body).await?;
        serde_json::from_str(raw.get()).map_err(|e| self.unavailable(format!("{endpoint}: malformed data: {e}")))
    }

    /// `/api/v1/{endpoint}` with `params` (a form body, or the query string of a GET), with
    /// retries; returns the `data` of a successful response, still encoded.
    async fn call(
        &self,
        method: Method,
        endpoint: &str,
        params: &str,
    ) -> Result<Box<serde_json::value::RawValue>, SourceError> {
        let url = format!("{}/api/v1/{endpoint}", self.base_url);
        let extended;
        let params = if self.extra_form.is_empty() {
            params
        } else {
            extended = format!("{params}{}", self.extra_form);
            extended.as_str()
        };
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            match self.request_once(method, &url, params).await {
                Ok((d, warnings)) => {
                    self.warned(endpoint, &warnings);
                    return Ok(d);
                }
                Err((e, retryable)) => {
                    if !retryable || attempt > self.retries {
                        return Err(e);
                    }
                    let wait = self.backoff.saturating_mul(2u32.saturating_pow(attempt - 1));
                    tokio::time::sleep(wait.min(StdDuration::from_secs(10))).await;
                }
            }
        }
    }

    /// One request: the error and whether it is worth retrying.
    /// An answer comes with its warnings.
    async fn request_once(
        &self,
        method: Method,
        url: &str,
        params: &str,
    ) -> Result<(Box<serde_json::value::RawValue>, Vec<String>), (SourceError, bool)> {
        let (url, body) = match method {
            Method::Post => (url.to_string(), params),
            Method::Get => (format!("{url}?{params}"), ""),
        };
        let url = url.as_str();
        let mut headers: Vec<(String, String)> = Vec::new();
        if method == Method::Post {
            headers.push((
                "content-type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ));
        }
        headers.extend(self.headers.iter().cloned());
        if let Some(sig) = &self.sigv4 {
            let signed = self
                .sign(sig, method, url, &headers, body.as_bytes())
                .await
                .map_err(|e| (e, false))?;
            headers.extend(signed);
        }
        let mut req = match method {
            Method::Post => self.client.post(url).body(body.to_string()),
            Method::Get => self.client.get(url),
        };
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        // Held until the answer is read. Waiting is bounded by the timeout too: a backend that
        // keeps every slot busy that long is failing, and more requests would only slow it.
        let slots = if RESERVED.try_with(|r| *r).unwrap_or(false) {
            &self.reserved_slot
        } else {
            &self.slots
        };
        let _slot = match tokio::time::timeout(self.timeout, slots.acquire()).await {
            Ok(Ok(slot)) => slot,
            Ok(Err(_)) => return Err((self.unavailable(format!("{url}: the request slots are closed")), false)),
            Err(_) => {
                return Err((
                    self.unavailable(format!(
                        "{url}: no request slot free within {:?} (max_in_flight: {}, all busy: the source is not keeping up)",
                        self.timeout, self.max_in_flight
                    )),
                    false,
                ))
            }
        };
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err((
                    self.unavailable(format!("{url}: timed out after {:?}", self.timeout)),
                    true,
                ))
            }
            Err(e) => return Err((self.unavailable(format!("{url}: {e}")), true)),
        };
        let status = resp.status().as_u16();
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => {
                return Err((self.unavailable(format!("{url}: timed out reading the response")), true))
            }
            Err(e) => return Err((self.unavailable(format!("{url}: reading the response: {e}")), true)),
        };
        let parsed: Option<ApiResponse> = serde_json::from_str(&text).ok();
        if status / 100 == 2 {
            let Some(p) = parsed else {
                return Err((
                    self.unavailable(format!("{url}: HTTP {status} with a body that is not JSON")),
                    false,
                ));
            };
            if p.status != "success" {
                return Err((self.api_error(status, &p), false));
            }
            return match p.data {
                Some(d) => Ok((d, p.warnings)),
                None => Err((self.unavailable(format!("{url}: success without data")), false)),
            };
        }
        let err = match &parsed {
            Some(p) => self.api_error(status, p),
            None => {
                let snippet: String = text.chars().take(300).collect();
                self.unavailable(format!("{url}: HTTP {status}: {}", snippet.trim()))
            }
        };
        Err((err, status / 100 == 5 || status == 429))
    }

    fn api_error(&self, status: u16, p: &ApiResponse) -> SourceError {
        let msg = format!(
            "HTTP {status}: {}: {}",
            p.error_type.as_deref().unwrap_or("error"),
            p.error.as_deref().unwrap_or("no message")
        );
        let lower = msg.to_ascii_lowercase();
        if lower.contains("too many samples") || lower.contains("max_samples") || lower.contains("exceeded") {
            SourceError::Limit(format!("{}: {msg}", self.name))
        } else {
            self.unavailable(msg)
        }
    }

    /// SigV4 headers for a request.
    async fn sign(
        &self,
        sig: &SigV4Config,
        method: Method,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, SourceError> {
        use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
        use aws_sigv4::sign::v4;
        let c = self.credentials(&sig.region).await?;
        let identity =
            aws_credential_types::Credentials::new(c.access_key, c.secret_key, c.session_token, None, "watchfire")
                .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&sig.region)
            .name(&sig.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| self.unavailable(format!("sigv4: {e}")))?
            .into();
        let signable = SignableRequest::new(
            method.as_str(),
            url,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::Bytes(body),
        )
        .map_err(|e| self.unavailable(format!("sigv4: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| self.unavailable(format!("sigv4: {e}")))?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    async fn credentials(&self, region: &str) -> Result<CachedCreds, SourceError> {
        if let Ok(guard) = self.creds.lock() {
            if let Some(c) = guard.as_ref() {
                if c.refresh_at.is_none_or(|r| SystemTime::now() < r) {
                    return Ok(c.clone());
                }
            }
        }
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let fresh = if let (Some(ak), Some(sk)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            CachedCreds {
                access_key: ak,
                secret_key: sk,
                session_token: env("AWS_SESSION_TOKEN"),
                refresh_at: None,
            }
        } else if let (Some(file), Some(role)) = (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN")) {
            self.web_identity(
                region,
                &file,
                &role,
                env("AWS_ROLE_SESSION_NAME"),
                env("AWS_STS_ENDPOINT"),
            )
            .await?
        } else {
            return Err(self.unavailable(
                "sigv4: no AWS credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or IRSA's AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)",
            ));
        };
        if let Ok(mut guard) = self.creds.lock() {
            *guard = Some(fresh.clone());
        }
        Ok(fresh)
    }

    /// STS `AssumeRoleWithWebIdentity` (an unsigned call) with the projected token file.
    async fn web_identity(
        &self,
        region: &str,
        token_file: &str,
        role: &str,
        session: Option<String>,
        endpoint: Option<String>,
    ) -> Result<CachedCreds, SourceError> {
        let token = crate::secret::read_secret_file(token_file)
            .map_err(|e| self.unavailable(format!("web identity token file {token_file}: {e}")))?;
        let endpoint = endpoint.unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
        let body = format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName={}&WebIdentityToken={}&DurationSeconds=3600",
            crate::url::encode(role),
            crate::url::encode(session.as_deref().unwrap_or("watchfire")),
            crate::url::encode(token.trim())
        );
        let resp = self
            .client
            .post(endpoint.trim_end_matches('/').to_string() + "/")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| self.unavailable(format!("sts AssumeRoleWithWebIdentity: {e}")))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| self.unavailable(format!("sts AssumeRoleWithWebIdentity: {e}")))?;
        if status / 100 != 2 {
            let m = xml_field(&text, "Message").unwrap_or_default();
            return Err(self.unavailable(format!("sts AssumeRoleWithWebIdentity: HTTP {status}: {m}")));
        }
        let field = |n: &str| xml_field(&text, n).ok_or_else(|| self.unavailable(format!("sts response without {n}")));
        Ok(CachedCreds {
            access_key: field("AccessKeyId")?,
            secret_key: field("SecretAccessKey")?,
            session_token: Some(field("SessionToken")?),
            // STS tokens last an hour here; refresh well before.
            refresh_at: Some(SystemTime::now() + StdDuration::from_secs(50 * 60)),
        })
    }
}

impl Queryable for PrometheusSource {
    fn warnings(&self) -> Vec<(String, u64)> {
        vec![(self.name.clone(), PrometheusSource::warnings(self))]
    }

    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        // Blocks this (blocking) thread on the runtime the source was built with.
        let (floats, hists) = self.handle.block_on(self.select_async(matchers, mint, maxt))?;
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() >= KEPT_HISTOGRAM_FETCHES {
                kept.pop_front();
            }
            kept.push_back((Self::fetch_key(matchers, mint, maxt), hists));
        }
        Ok(floats)
    }

    /// The histograms of the `select` just made with these arguments (the engine asks right
    /// after it); fetched again only when that answer is no longer kept.
    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        let key = Self::fetch_key(matchers, mint, maxt);
        if let Ok(mut kept) = self.kept.lock() {
            if let Some(i) = kept.iter().rposition(|k| k.0 == key) {
                if let Some((_, h)) = kept.remove(i) {
                    return Ok(h);
                }
            }
        }
        Ok(self.handle.block_on(self.select_async(matchers, mint, maxt))?.1)
    }

    fn has_histograms(&self) -> bool {
        true
    }
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => v
            .parse::<f64>()
            .map_err(|_| format!("sample value {v:?} is not a number")),
    }
}

/// Seconds with millisecond precision, as the API takes them.
fn format_time(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let a = ms.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

fn xml_field(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&close)? + start;
    Some(
        xml[start..end]
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigv4_signs_for_aps() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cfg = SourceConfig {
            name: "amp".into(),
            kind: crate::source::config::SourceKind::Prometheus,
            url: "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1".into(),
            timeout: StdDuration::from_secs(1),
            retries: 0,
            headers: Vec::new(),
            sigv4: Some(SigV4Config {
                region: "us-east-1".into(),
                service: "aps".into(),
            }),
            ..SourceConfig::default()
        };
        let src = PrometheusSource::new(&cfg, rt.handle().clone())
            .unwrap()
            .with_static_credentials("AKID", "SECRET", Some("TOKEN"));
        let sig = cfg.sigv4.clone().unwrap();
        let url = format!("{}/api/v1/query", cfg.url);
        let headers = vec![(
            "content-type".to_string(),
            "application/x-www-form-urlencoded".to_string(),
        )];
        let signed = rt
            .block_on(src.sign(&sig, Method::Post, &url, &headers, b"query=up"))
            .unwrap();
        let get = |n: &str| {
            signed
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        let auth = get("authorization").expect("authorization header");
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"), "{auth}");
        assert!(auth.contains("/us-east-1/aps/aws4_request"), "{auth}");
        assert!(get("x-amz-date").is_some());
        assert_eq!(get("x-amz-security-token").as_deref(), Some("TOKEN"));
    }

    #[test]
    fn encodings() {
        assert_eq!(format_time(1_234), "1.234");
        assert_eq!(format_time(-5), "-0.005");
        assert_eq!(crate::url::encode("up{a=\"b c\"}"), "up%7Ba%3D%22b%20c%22%7D");
        assert_eq!(parse_value("+Inf").unwrap(), f64::INFINITY);
        assert!(parse_value("x").is_err());
        assert_eq!(
            xml_field("<a><AccessKeyId>AK&amp;</AccessKeyId></a>", "AccessKeyId").as_deref(),
            Some("AK&")
        );
    }

    /// A server answering each request with the next scripted (status, body); `None` hangs.
    fn scripted(script: Vec<Option<(u16, &'static str)>>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h2 = hits.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for (i, conn) in l.incoming().enumerate() {
                let Ok(mut c) = conn else { continue };
                h2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf);
                match script.get(i).cloned().flatten() {
                    Some((status, body)) => {
                        let _ = write!(
                            c,
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    None => held.push(c),
                }
            }
        });
        (url, hits)
    }

    fn source(url: &str, retries: u32, rt: &tokio::runtime::Runtime) -> PrometheusSource {
        let cfg = SourceConfig {
            name: "p".into(),
            kind: crate::source::config::SourceKind::Prometheus,
            url: url.into(),
            timeout: StdDuration::from_millis(300),
            retries,
            headers: vec![("X-Scope-OrgID".into(), "ml".into())],
            sigv4: None,
            ..SourceConfig::default()
        };
        let mut s = PrometheusSource::new(&cfg, rt.handle().clone()).unwrap();
        s.backoff = StdDuration::from_millis(10);
        s
    }

    const OK: &str =
        r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"2"]}]}}"#;

    /// A server answering every request with `body`, recording each request's form body.
    fn recording(body: &'static str) -> (String, std::sync::Arc<Mutex<Vec<String>>>) {
        use std::io::{BufRead, Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(c) = conn else { continue };
                let mut r = std::io::BufReader::new(c);
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut form = vec![0u8; len];
                let _ = r.read_exact(&mut form);
                s2.lock().unwrap().push(String::from_utf8_lossy(&form).into_owned());
                let _ = write!(
                    r.get_mut(),
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, seen)
    }

    #[test]
    fn query_params_go_with_every_query_and_warnings_are_counted() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (url, seen) = recording(
            r#"{"status":"success","warnings":["query processed 1200000 samples, over the warning threshold of 1000000"],"data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"2"]}]}}"#,
        );
        let cfg = SourceConfig {
            name: "amp".into(),
            url,
            query_params: vec![
                ("max_samples_processed_warning_threshold".into(), "1000000".into()),
                ("max_samples_processed_error_threshold".into(), "50000000".into()),
            ],
            ..SourceConfig::default()
        };
        let s = PrometheusSource::new(&cfg, rt.handle().clone()).unwrap();
        assert_eq!(s.warnings(), 0);
        let got = rt.block_on(s.instant_query("up", 1_000)).unwrap();
        assert_eq!(got.len(), 1, "an answer with warnings is still the answer");
        rt.block_on(s.range_query("up", 0, 60_000, 15_000)).unwrap_err(); // a vector, not a matrix
        assert_eq!(s.warnings(), 2);
        let forms = seen.lock().unwrap().clone();
        assert_eq!(forms.len(), 2);
        for f in &forms {
            assert!(
                f.ends_with(
                    "&max_samples_processed_warning_threshold=1000000&max_samples_processed_error_threshold=50000000"
                ),
                "{f}"
            );
        }
        assert!(forms[0].starts_with("query=up&time=1.000&"), "{}", forms[0]);
        assert!(
            forms[1].starts_with("query=up&start=0.000&end=60.000&step=15.000&"),
            "{}",
            forms[1]
        );
        assert_eq!(
            source("http://127.0.0.1:9", 0, &rt).extra_form,
            "",
            "no query_params, nothing added"
        );
    }

    #[test]
    fn retries_5xx_then_succeeds() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let busy = r#"{"status":"error","errorType":"unavailable","error":"busy"}"#;
        let (url, hits) = scripted(vec![Some((503, busy)), Some((502, "bad gateway")), Some((200, OK))]);
        let v = rt.block_on(source(&url, 2, &rt).instant_query("x", 1000)).unwrap();
        assert_eq!(v[0].v, 2.0);
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    /// Every group's requests share the replica's slots to the source: however many are asked
    /// at once, at most `max_in_flight` reach it; the rest wait their turn (within the
    /// timeout) and are answered. A backend holding every slot past the timeout fails the
    /// waiting requests without sending them.
    #[test]
    fn requests_in_flight_are_capped_for_the_whole_replica() {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let (now, most, hits) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (n2, m2, h2) = (now.clone(), most.clone(), hits.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let (now, most, hits) = (n2.clone(), m2.clone(), h2.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf);
                    let k = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(k, Ordering::SeqCst);
                    let first = hits.fetch_add(1, Ordering::SeqCst) == 0;
                    // The first request of the second part hangs past the timeout.
                    let hang = first && String::from_utf8_lossy(&buf).contains("hang");
                    std::thread::sleep(StdDuration::from_millis(if hang { 1_500 } else { 100 }));
                    now.fetch_sub(1, Ordering::SeqCst);
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{OK}",
                        OK.len()
                    );
                });
            }
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let capped = |max_in_flight: usize, timeout_ms: u64| {
            let cfg = SourceConfig {
                name: "p".into(),
                url: url.clone(),
                timeout: StdDuration::from_millis(timeout_ms),
                retries: 0,
                max_in_flight,
                ..SourceConfig::default()
            };
            PrometheusSource::new(&cfg, rt.handle().clone()).unwrap()
        };
        let src = capped(3, 5_000);
        let answers = rt.block_on(futures_util::future::join_all(
            (0..12).map(|i| src.instant_query(if i == 0 { "x" } else { "y" }, 1000)),
        ));
        assert!(answers.iter().all(|a| a.is_ok()), "{answers:?}");
        assert_eq!(most.load(Ordering::SeqCst), 3, "at most max_in_flight at the backend");
        assert_eq!(hits.swap(0, Ordering::SeqCst), 12);

        // One slot, held by a request that times out; of the two waiting, the first in line
        // may get the slot as it frees, the second waits out its timeout and is never sent.
        let src = capped(1, 400);
        let answers = rt.block_on(futures_util::future::join_all(
            ["hang", "y", "z"].map(|q| src.instant_query(q, 1000)),
        ));
        let errors: Vec<String> = answers
            .iter()
            .map(|a| a.as_ref().err().map(|e| e.to_string()).unwrap_or_default())
            .collect();
        assert!(errors[0].contains("timed out"), "{errors:?}");
        assert!(
            errors[2].contains("no request slot free within 400ms (max_in_flight: 1, all busy"),
            "{errors:?}"
        );
        assert!(hits.load(Ordering::SeqCst) <= 2, "the last one waiting was not sent");

        // The mirror's own requests have a slot of their own: one reaches the backend while the
        // evaluations' only slot is held, so both are there at once. (After the backend has
        // finished with the request above that its client gave up on.)
        while now.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(StdDuration::from_millis(10));
        }
        hits.store(0, Ordering::SeqCst);
        most.store(0, Ordering::SeqCst);
        let src = Arc::new(capped(1, 5_000));
        let held = {
            let src = Arc::clone(&src);
            rt.spawn(async move { src.instant_query("hang", 1000).await })
        };
        while now.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(StdDuration::from_millis(10));
        }
        let mirrors = src.reserved(src.instant_query("y", 1000));
        assert!(mirrors.is_ok(), "{mirrors:?}");
        assert!(rt.block_on(held).unwrap().is_ok());
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "the reserved request did not wait for the slot"
        );
    }

    /// Prometheus 2.42's answers (`--enable-feature=native-histograms`, recorded from
    /// `tests/source_native_histograms.rs`'s data): schema 0 with a zero bucket and a negative
    /// bucket (job a), schema 3 (job b).
    const HIST_MATRIX: &str = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"lat","job":"a"},"histograms":[[1796229660,{"count":"54","sum":"49.5","buckets":[[1,"-1","-0.5","9"],[3,"-0.001","0.001","9"],[0,"0.5","1","9"],[0,"1","2","18"],[0,"2","4","9"]]}],[1796229720,{"count":"60","sum":"55","buckets":[[1,"-1","-0.5","10"],[3,"-0.001","0.001","10"],[0,"0.5","1","10"],[0,"1","2","20"],[0,"2","4","10"]]}],[1796229780,{"count":"66","sum":"60.5","buckets":[[1,"-1","-0.5","11"],[3,"-0.001","0.001","11"],[0,"0.5","1","11"],[0,"1","2","22"],[0,"2","4","11"]]}]]},{"metric":{"__name__":"lat","job":"b"},"histograms":[[1796229660,{"count":"12","sum":"7.5","buckets":[[0,"0.7711054127039704","0.8408964152537144","3"],[0,"0.9170040432046711","1","9"]]}],[1796229720,{"count":"16","sum":"10","buckets":[[0,"0.7711054127039704","0.8408964152537144","4"],[0,"0.9170040432046711","1","12"]]}],[1796229780,{"count":"20","sum":"12.5","buckets":[[0,"0.7711054127039704","0.8408964152537144","5"],[0,"0.9170040432046711","1","15"]]}]]},{"metric":{"__name__":"lat","job":"c"},"values":[[1796229720,"1"],[1796229780,"2"]]}]}}"#;
    const HIST_VECTOR: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"a"},"histogram":[1796229780,{"count":"0.1","sum":"0.09166666666666666","buckets":[[1,"-1","-0.5","0.016666666666666666"],[3,"-0.001","0.001","0.016666666666666666"],[0,"0.5","1","0.016666666666666666"],[0,"1","2","0.03333333333333333"],[0,"2","4","0.016666666666666666"]]}]},{"metric":{"job":"b"},"histogram":[1796229780,{"count":"0.06666666666666667","sum":"0.041666666666666664","buckets":[[0,"0.7711054127039704","0.8408964152537144","0.016666666666666666"],[0,"0.9170040432046711","1","0.05"]]}]}]}}"#;

    #[test]
    fn native_histograms_are_read_from_answers() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let (url, hits) = scripted(vec![Some((200, HIST_MATRIX)), Some((200, HIST_VECTOR))]);
        let src = source(&url, 0, &rt);
        let m = [Matcher::equal("__name__", "lat")];
        let (mint, maxt) = (1_796_229_660_000, 1_796_229_780_000);
        // One request answers both the floats and the histograms of a selector.
        let (floats, hists) = std::thread::scope(|s| {
            s.spawn(|| {
                (
                    src.select(&m, mint, maxt).unwrap(),
                    src.select_histograms(&m, mint, maxt).unwrap(),
                )
            })
            .join()
            .unwrap()
        });
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(floats.len(), 1);
        assert_eq!(
            floats[0].samples,
            vec![(1_796_229_720_000, 1.0), (1_796_229_780_000, 2.0)]
        );
        assert_eq!(hists.len(), 2);
        assert_eq!(hists[0].labels.get("job"), Some("a"));
        let (t, a) = &hists[0].samples[2];
        assert_eq!(*t, maxt);
        assert_eq!(
            a.test_expression(),
            "{{count:66 sum:60.5 z_bucket:11 z_bucket_w:0.001 buckets:[11 22 11] n_buckets:[11]}}"
        );
        // Schema 3 from bounds alone: bucket -2 is (2^(-3/8), 2^(-2/8)], bucket 0 ends at 1.
        let b = &hists[1].samples[0].1;
        assert_eq!(
            b.test_expression(),
            "{{schema:3 count:12 sum:7.5 offset:-2 buckets:[3 0 9]}}"
        );

        // A pushed-down expression's histograms.
        let v = std::thread::scope(|s| {
            s.spawn(|| src.instant_query_blocking("sum by (job) (rate(lat[4m30s]))", maxt))
                .join()
                .unwrap()
        })
        .unwrap();
        assert_eq!(v.len(), 2);
        let h = v[1].h.as_ref().expect("a histogram");
        assert_eq!(v[1].labels.get("job"), Some("b"));
        assert_eq!(
            (h.schema, h.count, h.sum),
            (3, 0.06666666666666667, 0.041666666666666664)
        );
        assert_eq!(h.positive, vec![(-2, 0.016666666666666666), (0, 0.05)]);
    }

    #[test]
    fn a_malformed_histogram_is_an_error() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let bad = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"histogram":[1,{"count":"x","sum":"1"}]}]}}"#;
        let (url, _) = scripted(vec![Some((200, bad))]);
        match rt.block_on(source(&url, 0, &rt).instant_query("x", 1000)) {
            Err(SourceError::Unavailable { message, .. }) => {
                assert!(message.contains("malformed native histogram"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_carry_the_message_and_4xx_is_final() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let e422 = r#"{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}"#;
        let (url, hits) = scripted(vec![Some((422, e422))]);
        match rt.block_on(source(&url, 3, &rt).instant_query("x", 1000)) {
            Err(SourceError::Limit(m)) => assert!(m.contains("too many samples"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1, "4xx is not retried");
        let e503 = r#"{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}"#;
        let (url, _) = scripted(vec![Some((503, e503)), Some((503, e503))]);
        match rt.block_on(source(&url, 1, &rt).instant_query("x", 1000)) {
            Err(SourceError::Unavailable { message, .. }) => {
                assert!(
                    message.contains("HTTP 503") && message.contains("timed out"),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_hanging_server_times_out_as_an_error() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let (url, hits) = scripted(vec![None, None]);
        let src = source(&url, 1, &rt);
        let started = std::time::Instant::now();
        // Through the synchronous Queryable face, as the engine calls it.
        let r = std::thread::scope(|s| {
            s.spawn(|| src.select(&[Matcher::equal("__name__", "up")], 0, 1000))
                .join()
                .unwrap()
        });
        match r {
            Err(SourceError::Unavailable { message, .. }) => assert!(message.contains("timed out"), "{message}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2, "one retry");
        assert!(started.elapsed() < StdDuration::from_secs(5));
    }
}
