//! Amazon CloudWatch as a source: GetMetricData results as PromQL series.
//!
//! The mapping file ([`Mapping`], `mapping.rs`) names the CloudWatch metric behind each PromQL
//! series name and how its dimensions become labels.
//!
//! How [`Queryable::select`] answers a selector:
//!
//! * Entries whose name, static labels and mapped labels can satisfy the matchers are chosen;
//!   their dimension combinations come from `dimension_values` (pruned by the matchers), or, for
//!   `dimension_sets`, from ListMetrics (filtered by the fixed dimensions and the equality
//!   matchers, paginated, cached for `discovery_ttl`) unless equality matchers pin every
//!   dimension of the set.
//! * One MetricDataQuery per combination (two for an expression: the hidden metric and the
//!   math), at most 500 per GetMetricData call, NextToken pages followed.
//! * Timestamps: CloudWatch stamps a datapoint with the start of its period; watchfire stamps
//!   it with the period's end (`start + period`), when the aggregate is complete. An alert
//!   evaluated at `t` so never reads a period that had not finished by `t`.
//! * Gaps stay gaps: a period without a datapoint yields no sample, never a zero. So that
//!   PromQL's 5m lookback does not carry the last value across a gap, a staleness marker is
//!   written at the end of the first missing period after a datapoint (when that period lies in
//!   the queried range). Range functions (`max_over_time`, ...) ignore markers, as in
//!   Prometheus. CloudWatch publishes late (typically 1-3 minutes): give groups reading
//!   CloudWatch a `query_offset` covering that delay, or the newest period reads as missing.
//! * `PartialData` after the last page is logged and counted; what came back is kept. A failed
//!   call, a timeout or an `InternalError`/`Forbidden` result is [`SourceError::Unavailable`].
//!
//! [`Queryable::select`] blocks on the tokio runtime handle the source was built with; call it
//! from a blocking thread (`spawn_blocking`), never from an async task.

mod mapping;

pub use mapping::Mapping;
pub(crate) use mapping::{MappedKind, MappedSeries};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration as StdDuration, Instant};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, DimensionFilter, Metric, MetricDataQuery, MetricStat, ScanBy, StatusCode};

use super::{Queryable, SeriesData, SourceError};
use crate::labels::{Labels, MatchOp, Matcher, METRIC_NAME};
use crate::promql::stale_nan;
use mapping::substitute_m;

/// GetMetricData takes at most this many queries per call.
pub(crate) const MAX_QUERIES_PER_CALL: usize = 500;

/// Counters of what the source sent (for tests and `/metrics`).
#[derive(Debug, Default)]
pub struct CloudWatchStats {
    pub get_metric_data_calls: AtomicU64,
    pub list_metrics_calls: AtomicU64,
    pub queries_sent: AtomicU64,
    /// The largest number of queries in one GetMetricData call.
    pub max_queries_in_a_call: AtomicU64,
    /// Results still `PartialData` after the last page.
    pub partial_data: AtomicU64,
}

/// A series to fetch: its labels and the queries that produce it.
struct Planned {
    labels: Labels,
    period_s: i64,
    /// The hidden metric query of an expression entry.
    hidden: Option<MetricDataQuery>,
    /// Builds the returned query with the id given.
    visible: QuerySpec,
}

enum QuerySpec {
    Metric(MetricStat),
    Expression(String),
}

/// ListMetrics answers: (namespace, metric, filters) → (when, dimension lists).
type DiscoveryCache = HashMap<(String, String, Vec<(String, String)>), (Instant, Vec<Vec<(String, String)>>)>;

/// CloudWatch through GetMetricData.
pub struct CloudWatchSource {
    name: String,
    mapping: Mapping,
    target: crate::aws::AwsTarget,
    timeout: StdDuration,
    client: tokio::sync::OnceCell<aws_sdk_cloudwatch::Client>,
    handle: tokio::runtime::Handle,
    discovery: Mutex<DiscoveryCache>,
    pub stats: CloudWatchStats,
}

impl CloudWatchSource {
    /// A source over `mapping`. `region` (when empty, the mapping's, then the default chain's)
    /// and `endpoint` (empty: AWS's own) say where to call; the SDK client is built at the
    /// first query, so construction never blocks.
    pub fn new(
        name: &str,
        mapping: Mapping,
        region: &str,
        endpoint: &str,
        timeout: StdDuration,
        handle: tokio::runtime::Handle,
    ) -> Self {
        let region = if region.is_empty() {
            mapping.region.clone().unwrap_or_default()
        } else {
            region.to_string()
        };
        CloudWatchSource {
            name: name.to_string(),
            mapping,
            target: crate::aws::AwsTarget {
                region,
                endpoint: endpoint.to_string(),
            },
            timeout,
            client: tokio::sync::OnceCell::new(),
            handle,
            discovery: Mutex::new(HashMap::new()),
            stats: CloudWatchStats::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    fn unavailable(&self, message: impl Into<String>) -> SourceError {
        SourceError::Unavailable {
            source_name: self.name.clone(),
            message: message.into(),
        }
    }

    async fn client(&self) -> &aws_sdk_cloudwatch::Client {
        self.client
            .get_or_init(|| async {
                let cfg = crate::aws::sdk_config(&self.target).await;
                aws_sdk_cloudwatch::Client::new(&cfg)
            })
            .await
    }

    /// Series matching `matchers` with their samples (stamped at period end) in `[mint, maxt]`.
    pub async fn select_async(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<SeriesData>, SourceError> {
        if maxt < mint {
            return Ok(Vec::new());
        }
        let plans = self.plan(matchers).await?;
        let mut by_period: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (i, p) in plans.iter().enumerate() {
            by_period.entry(p.period_s).or_default().push(i);
        }
        let mut out = Vec::new();
        for (period_s, idxs) in by_period {
            let p_ms = period_s * 1000;
            // Periods whose end (the sample's stamp) lies in [mint, maxt].
            let first_start =
                (mint - p_ms).div_euclid(p_ms) * p_ms + if (mint - p_ms).rem_euclid(p_ms) == 0 { 0 } else { p_ms };
            let last_start = (maxt - p_ms).div_euclid(p_ms) * p_ms;
            if last_start < first_start {
                continue;
            }
            for batch in batches(&plans, &idxs) {
                let queries = queries_for(&plans, &batch);
                let results = self.get_metric_data(queries, first_start, last_start + p_ms).await?;
                for (n, &i) in batch.iter().enumerate() {
                    let Some(points) = results.get(&format!("q{n}")) else {
                        continue;
                    };
                    let samples = to_samples(points, p_ms, mint, maxt);
                    if samples.iter().any(|s| !crate::promql::is_stale_nan(s.1)) {
                        out.push(SeriesData {
                            labels: plans[i].labels.clone(),
                            samples,
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    /// The series (with their queries) that can satisfy `matchers`.
    async fn plan(&self, matchers: &[Matcher]) -> Result<Vec<Planned>, SourceError> {
        let mut plans: Vec<Planned> = Vec::new();
        let mut seen: BTreeSet<Labels> = BTreeSet::new();
        for e in &self.mapping.series {
            if !entry_may_match(e, matchers) {
                continue;
            }
            let (dim_entry, hidden_of) = match &e.kind {
                MappedKind::Metric { .. } => (e, false),
                MappedKind::Expression { of, .. } => (&self.mapping.series[*of], true),
            };
            for dims in self.combinations(dim_entry, &e.labels, matchers).await? {
                let labels = series_labels(e, &dims);
                if !matchers.iter().all(|m| m.matches(labels.get(&m.name).unwrap_or(""))) {
                    continue;
                }
                if !seen.insert(labels.clone()) {
                    tracing::warn!(
                        "cloudwatch source {}: two CloudWatch metrics map to {labels}; keeping the first (map a dimension that tells them apart)",
                        self.name
                    );
                    continue;
                }
                let stat = metric_stat(dim_entry, &dims);
                plans.push(if hidden_of {
                    let MappedKind::Expression { expression, .. } = &e.kind else {
                        continue;
                    };
                    Planned {
                        labels,
                        period_s: e.period_s,
                        hidden: Some(
                            MetricDataQuery::builder()
                                .metric_stat(metric_stat_with_period(stat, e.period_s))
                                .return_data(false)
                                .build(),
                        ),
                        visible: QuerySpec::Expression(expression.clone()),
                    }
                } else {
                    Planned {
                        labels,
                        period_s: e.period_s,
                        hidden: None,
                        visible: QuerySpec::Metric(metric_stat_with_period(stat, e.period_s)),
                    }
                });
            }
        }
        Ok(plans)
    }

    /// Dimension lists (sorted by name) of `e`'s metric that can satisfy `matchers`, with the
    /// label mapping `labels` (the entry's own, or an expression's over its `of`).
    async fn combinations(
        &self,
        e: &MappedSeries,
        labels: &BTreeMap<String, String>,
        matchers: &[Matcher],
    ) -> Result<Vec<Vec<(String, String)>>, SourceError> {
        let MappedKind::Metric {
            namespace,
            metric,
            dimensions,
            dimension_values,
            dimension_sets,
            ..
        } = &e.kind
        else {
            return Ok(Vec::new());
        };
        // Whether a value of dimension `d` can satisfy the matchers on its label.
        let admits = |d: &str, v: &str| match labels.get(d) {
            Some(l) => matchers.iter().filter(|m| m.name == *l).all(|m| m.matches(v)),
            None => true,
        };
        let equal_value = |d: &str| -> Option<String> {
            let l = labels.get(d)?;
            matchers
                .iter()
                .find(|m| m.name == *l && matches!(m.op, MatchOp::Equal) && !m.value.is_empty())
                .map(|m| m.value.clone())
        };
        if dimensions.iter().any(|(d, v)| !admits(d, v)) {
            return Ok(Vec::new());
        }
        if !dimension_sets.is_empty() {
            let mut out = Vec::new();
            for set in dimension_sets {
                let fixed: BTreeMap<&str, &str> = dimensions.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                let pinned: Vec<(String, String)> = set
                    .iter()
                    .filter_map(|d| match fixed.get(d.as_str()) {
                        Some(v) => Some((d.clone(), v.to_string())),
                        None => equal_value(d).map(|v| (d.clone(), v)),
                    })
                    .collect();
                if pinned.len() == set.len() {
                    out.push(pinned);
                    continue;
                }
                for dims in self.list_metrics(namespace, metric, pinned).await? {
                    let names: BTreeSet<&str> = dims.iter().map(|d| d.0.as_str()).collect();
                    if names.len() == set.len()
                        && set.iter().all(|d| names.contains(d.as_str()))
                        && dims.iter().all(|(d, v)| admits(d, v))
                    {
                        out.push(dims);
                    }
                }
            }
            return Ok(out);
        }
        let mut combos: Vec<Vec<(String, String)>> = vec![dimensions.clone()];
        for (d, vals) in dimension_values {
            let vals: Vec<&String> = vals.iter().filter(|v| admits(d, v)).collect();
            let mut next = Vec::with_capacity(combos.len() * vals.len());
            for c in &combos {
                for v in &vals {
                    let mut c = c.clone();
                    c.push((d.clone(), (*v).clone()));
                    next.push(c);
                }
            }
            combos = next;
        }
        for c in &mut combos {
            c.sort();
        }
        Ok(combos)
    }

    /// ListMetrics (all pages) for a metric with dimension filters, cached for the TTL.
    async fn list_metrics(
        &self,
        namespace: &str,
        metric: &str,
        filters: Vec<(String, String)>,
    ) -> Result<Vec<Vec<(String, String)>>, SourceError> {
        let key = (namespace.to_string(), metric.to_string(), filters);
        if let Ok(c) = self.discovery.lock() {
            if let Some((at, v)) = c.get(&key) {
                if at.elapsed() < self.mapping.discovery_ttl {
                    return Ok(v.clone());
                }
            }
        }
        let client = self.client().await;
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = client.list_metrics().namespace(namespace).metric_name(metric);
            for (n, v) in &key.2 {
                req = req.dimensions(DimensionFilter::builder().name(n).value(v).build());
            }
            if let Some(t) = &token {
                req = req.next_token(t);
            }
            self.stats.list_metrics_calls.fetch_add(1, Ordering::Relaxed);
            let resp = tokio::time::timeout(self.timeout, req.send())
                .await
                .map_err(|_| self.unavailable(format!("ListMetrics timed out after {:?}", self.timeout)))?
                .map_err(|e| {
                    self.unavailable(format!(
                        "ListMetrics {namespace}/{metric}: {}",
                        aws_sdk_cloudwatch::error::DisplayErrorContext(e)
                    ))
                })?;
            for m in resp.metrics() {
                out.push(metric_dims(m));
            }
            token = resp.next_token().filter(|t| !t.is_empty()).map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        out.sort();
        out.dedup();
        if let Ok(mut c) = self.discovery.lock() {
            c.insert(key, (Instant::now(), out.clone()));
        }
        Ok(out)
    }

    /// One GetMetricData request (all pages): per query id, (period start ms, value).
    async fn get_metric_data(
        &self,
        queries: Vec<MetricDataQuery>,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<HashMap<String, Vec<(i64, f64)>>, SourceError> {
        let client = self.client().await;
        let n = queries.len() as u64;
        let mut out: HashMap<String, Vec<(i64, f64)>> = HashMap::new();
        let mut partial: BTreeSet<String> = BTreeSet::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = client
                .get_metric_data()
                .set_metric_data_queries(Some(queries.clone()))
                .start_time(DateTime::from_millis(start_ms))
                .end_time(DateTime::from_millis(end_ms))
                .scan_by(ScanBy::TimestampAscending);
            if let Some(t) = &token {
                req = req.next_token(t);
            }
            self.stats.get_metric_data_calls.fetch_add(1, Ordering::Relaxed);
            self.stats.queries_sent.fetch_add(n, Ordering::Relaxed);
            self.stats.max_queries_in_a_call.fetch_max(n, Ordering::Relaxed);
            let resp = tokio::time::timeout(self.timeout, req.send())
                .await
                .map_err(|_| self.unavailable(format!("GetMetricData timed out after {:?}", self.timeout)))?
                .map_err(|e| {
                    self.unavailable(format!(
                        "GetMetricData: {}",
                        aws_sdk_cloudwatch::error::DisplayErrorContext(e)
                    ))
                })?;
            for m in resp.messages() {
                tracing::info!(
                    "cloudwatch source {}: GetMetricData: {} {}",
                    self.name,
                    m.code().unwrap_or(""),
                    m.value().unwrap_or("")
                );
            }
            for r in resp.metric_data_results() {
                let id = r.id().unwrap_or_default().to_string();
                match r.status_code() {
                    Some(StatusCode::InternalError) | Some(StatusCode::Forbidden) => {
                        let msgs: Vec<String> = r
                            .messages()
                            .iter()
                            .map(|m| format!("{} {}", m.code().unwrap_or(""), m.value().unwrap_or("")))
                            .collect();
                        return Err(self.unavailable(format!(
                            "GetMetricData: query {} is {}: {}",
                            r.label().unwrap_or(&id),
                            r.status_code().map(|s| s.as_str()).unwrap_or(""),
                            msgs.join("; ")
                        )));
                    }
                    Some(StatusCode::PartialData) => {
                        partial.insert(id.clone());
                    }
                    _ => {
                        partial.remove(&id);
                    }
                }
                let points = out.entry(id).or_default();
                for (t, v) in r.timestamps().iter().zip(r.values()) {
                    let Ok(ms) = t.to_millis() else { continue };
                    points.push((ms, *v));
                }
            }
            token = resp.next_token().filter(|t| !t.is_empty()).map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        if !partial.is_empty() {
            // Not an error: what came back is real data; the rest is simply not there.
            self.stats
                .partial_data
                .fetch_add(partial.len() as u64, Ordering::Relaxed);
            tracing::warn!(
                "cloudwatch source {}: {} queries returned PartialData after the last page; keeping what came back",
                self.name,
                partial.len()
            );
        }
        Ok(out)
    }
}

impl Queryable for CloudWatchSource {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        // Blocks this (blocking) thread on the runtime the source was built with.
        self.handle.block_on(self.select_async(matchers, mint, maxt))
    }
}

/// Whether an entry's name and static labels can satisfy the matchers, and matchers on labels
/// the entry never sets accept the empty value.
fn entry_may_match(e: &MappedSeries, matchers: &[Matcher]) -> bool {
    matchers.iter().all(|m| {
        if m.name == METRIC_NAME {
            m.matches(&e.name)
        } else if let Some(v) = e.static_labels.get(&m.name) {
            m.matches(v)
        } else if e.labels.values().any(|l| *l == m.name) {
            true
        } else {
            m.matches_empty()
        }
    })
}

fn series_labels(e: &MappedSeries, dims: &[(String, String)]) -> Labels {
    let mut pairs: BTreeMap<String, String> = e.static_labels.clone();
    for (d, v) in dims {
        if let Some(l) = e.labels.get(d) {
            pairs.insert(l.clone(), v.clone());
        }
    }
    pairs.insert(METRIC_NAME.to_string(), e.name.clone());
    Labels::from_pairs(pairs)
}

fn metric_stat(e: &MappedSeries, dims: &[(String, String)]) -> MetricStat {
    let MappedKind::Metric {
        namespace,
        metric,
        stat,
        ..
    } = &e.kind
    else {
        return MetricStat::builder().build();
    };
    let mut m = Metric::builder().namespace(namespace).metric_name(metric);
    for (n, v) in dims {
        m = m.dimensions(Dimension::builder().name(n).value(v).build());
    }
    MetricStat::builder().metric(m.build()).stat(stat).build()
}

fn metric_stat_with_period(mut s: MetricStat, period_s: i64) -> MetricStat {
    s.period = Some(period_s as i32);
    s
}

fn metric_dims(m: &Metric) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = m
        .dimensions()
        .iter()
        .map(|d| {
            (
                d.name().unwrap_or_default().to_string(),
                d.value().unwrap_or_default().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The MetricDataQueries of one call: the n-th plan's result is `q{n}`, its hidden metric
/// (expressions) `h{n}`.
fn queries_for(plans: &[Planned], batch: &[usize]) -> Vec<MetricDataQuery> {
    let mut queries = Vec::new();
    for (n, &i) in batch.iter().enumerate() {
        let p = &plans[i];
        let id = format!("q{n}");
        if let Some(h) = &p.hidden {
            let mut h = h.clone();
            h.id = Some(format!("h{n}"));
            queries.push(h);
        }
        queries.push(match &p.visible {
            QuerySpec::Metric(ms) => MetricDataQuery::builder()
                .id(id)
                .metric_stat(ms.clone())
                .return_data(true)
                .build(),
            // No Period on metric math: it takes the period of the metric it reads.
            QuerySpec::Expression(e) => MetricDataQuery::builder()
                .id(id)
                .expression(substitute_m(e, &format!("h{n}")))
                .return_data(true)
                .build(),
        });
    }
    queries
}

/// Splits plans into GetMetricData calls of at most [`MAX_QUERIES_PER_CALL`] queries, keeping an
/// expression with its hidden metric.
fn batches(plans: &[Planned], idxs: &[usize]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut cur = Vec::new();
    let mut size = 0;
    for &i in idxs {
        let n = if plans[i].hidden.is_some() { 2 } else { 1 };
        if size + n > MAX_QUERIES_PER_CALL {
            out.push(std::mem::take(&mut cur));
            size = 0;
        }
        cur.push(i);
        size += n;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Datapoints (period start, value) as samples stamped at period end, in `[mint, maxt]`, with a
/// staleness marker at the end of the first missing period after each datapoint.
fn to_samples(points: &[(i64, f64)], p_ms: i64, mint: i64, maxt: i64) -> Vec<(i64, f64)> {
    let mut pts: Vec<(i64, f64)> = points.iter().map(|(t, v)| (t + p_ms, *v)).collect();
    pts.sort_by_key(|p| p.0);
    pts.dedup_by_key(|p| p.0);
    let mut out = Vec::with_capacity(pts.len() + 1);
    for (i, &(t, v)) in pts.iter().enumerate() {
        if t >= mint && t <= maxt {
            out.push((t, v));
        }
        let next_missing = match pts.get(i + 1) {
            Some(&(nt, _)) => nt > t + p_ms,
            None => true,
        };
        let marker = t + p_ms;
        if next_missing && marker >= mint && marker <= maxt {
            out.push((marker, stale_nan()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::mapping::tests::MAPPING;
    use super::*;

    #[test]
    fn gaps_get_a_marker_and_stamps_are_period_ends() {
        let m = 60_000;
        // Periods starting at 0, 1m, 4m: 2m and 3m are missing; 5m is beyond the last point.
        let s = to_samples(&[(0, 1.0), (m, 2.0), (4 * m, 3.0)], m, 0, 10 * m);
        let got: Vec<(i64, Option<f64>)> = s
            .iter()
            .map(|(t, v)| (*t, (!crate::promql::is_stale_nan(*v)).then_some(*v)))
            .collect();
        assert_eq!(
            got,
            vec![
                (m, Some(1.0)),
                (2 * m, Some(2.0)),
                (3 * m, None),
                (5 * m, Some(3.0)),
                (6 * m, None)
            ]
        );
        // A marker past maxt is not written: that period was not asked for.
        let s = to_samples(&[(0, 1.0)], m, 0, m);
        assert_eq!(s, vec![(m, 1.0)]);
    }

    /// A source for [`MAPPING`] whose endpoint refuses connections: for what is planned
    /// before any call.
    fn offline_source() -> (tokio::runtime::Runtime, CloudWatchSource) {
        let mapping = Mapping::load_str(MAPPING, "m.yaml").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let src = CloudWatchSource::new(
            "cw",
            mapping,
            "",
            "http://127.0.0.1:1",
            StdDuration::from_secs(1),
            rt.handle().clone(),
        );
        (rt, src)
    }

    #[test]
    fn expressions_carry_their_hidden_metric() {
        let (rt, src) = offline_source();
        let plans = rt
            .block_on(src.plan(&[Matcher::equal("__name__", "q"), Matcher::equal("node", "n2")]))
            .unwrap();
        // One series per (node, gpu) of a_total: the expression maps only node, so the two gpus
        // collide and the first is kept.
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].labels.to_string(), r#"q{cluster="c1", node="n2"}"#);
        let qs = queries_for(&plans, &[0]);
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0].id(), Some("h0"));
        assert_eq!(qs[0].return_data(), Some(false));
        let ms = qs[0].metric_stat().unwrap();
        assert_eq!((ms.period(), ms.stat()), (Some(60), Some("Sum")));
        let dims: Vec<(&str, &str)> = ms
            .metric()
            .unwrap()
            .dimensions()
            .iter()
            .map(|d| (d.name().unwrap(), d.value().unwrap()))
            .collect();
        assert_eq!(dims, vec![("Fixed", "x"), ("Gpu", "0"), ("Node", "n2")]);
        assert_eq!(qs[1].id(), Some("q0"));
        assert_eq!(qs[1].expression(), Some("SERVICE_QUOTA(h0)"));
        assert_eq!(qs[1].return_data(), Some(true));
        assert_eq!(qs[1].period(), None);
    }

    #[test]
    fn combinations_are_pruned_by_matchers_and_batched() {
        let (rt, src) = offline_source();
        let e = &src.mapping.series[0];
        let ms = vec![
            Matcher::equal("__name__", "a_total"),
            Matcher::regex("node", "n1|n3").unwrap(),
            Matcher::not_equal("gpu", "1"),
        ];
        let c = rt.block_on(src.combinations(e, &e.labels, &ms)).unwrap();
        let labels: Vec<String> = c.iter().map(|d| series_labels(e, d).to_string()).collect();
        assert_eq!(
            labels,
            vec![
                r#"a_total{cluster="c1", gpu="0", node="n1"}"#,
                r#"a_total{cluster="c1", gpu="0", node="n3"}"#
            ]
        );
        assert!(entry_may_match(e, &[Matcher::equal("cluster", "c1")]));
        assert!(!entry_may_match(e, &[Matcher::equal("cluster", "c2")]));
        assert!(!entry_may_match(e, &[Matcher::equal("job", "x")]));
        // Batches keep expression pairs together and stay within 500 queries.
        let plan = |hidden: bool| Planned {
            labels: Labels::empty(),
            period_s: 60,
            hidden: hidden.then(|| MetricDataQuery::builder().build()),
            visible: QuerySpec::Expression("m".into()),
        };
        let plans: Vec<Planned> = (0..600).map(|i| plan(i % 2 == 0)).collect();
        let idxs: Vec<usize> = (0..600).collect();
        let b = batches(&plans, &idxs);
        let sizes: Vec<usize> = b
            .iter()
            .map(|x| x.iter().map(|&i| if plans[i].hidden.is_some() { 2 } else { 1 }).sum())
            .collect();
        assert_eq!(sizes.iter().sum::<usize>(), 900);
        assert!(sizes.iter().all(|s| *s <= MAX_QUERIES_PER_CALL), "{sizes:?}");
    }
}
