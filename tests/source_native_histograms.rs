//! Native histograms against a real Prometheus 2.42 on loopback (`--enable-feature=
//! native-histograms`). 2.42's OpenMetrics backfill cannot carry native histograms; its
//! remote-write receiver can, so the test writes them (protobuf and snappy framed here):
//! * the Prometheus source reads them back, from raw fetches and from pushed-down expressions
//!   (whole rules and aggregations inside a query), as Prometheus answers;
//! * recording rules over them record histograms that other rules read back;
//! * `watchfire query --format json` and `watchfire serve`'s query API print the same data, loaded
//!   from notation, as Prometheus does.
//!
//! Needs `/usr/bin/prometheus`: missing, the test fails, unless `WATCHFIRE_TEST_OFFLINE=1` makes
//! it a recorded skip.

mod common;

use common::{Proc, Prometheus};
use serde_json::Value as Json;

const M: i64 = 60_000;

// ---------------------------------------------------------------------------------------------
// Remote write by hand: the protobuf of prompb.WriteRequest, snappy's literal-only framing.

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn field_varint(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, 0);
    varint(out, v);
}

fn field_double(out: &mut Vec<u8>, field: u32, v: f64) {
    tag(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn field_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Snappy's block format with every byte in literals (valid, just not compressed).
fn snappy(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    varint(&mut out, data.len() as u64);
    for chunk in data.chunks(65_536) {
        let n = chunk.len() - 1;
        // Tag 61: a literal whose length - 1 follows in two bytes.
        out.push(61 << 2);
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// An integer native histogram sample.
struct Hist {
    t: i64,
    schema: i32,
    zero_threshold: f64,
    zero_count: u64,
    sum: f64,
    /// (offset of the first bucket, counts of consecutive buckets)
    pos: (i32, Vec<u64>),
    neg: (i32, Vec<u64>),
}

impl Hist {
    fn count(&self) -> u64 {
        self.zero_count + self.pos.1.iter().sum::<u64>() + self.neg.1.iter().sum::<u64>()
    }

    fn proto(&self) -> Vec<u8> {
        let mut h = Vec::new();
        field_varint(&mut h, 1, self.count());
        field_double(&mut h, 3, self.sum);
        field_varint(&mut h, 4, zigzag(i64::from(self.schema)));
        field_double(&mut h, 5, self.zero_threshold);
        field_varint(&mut h, 6, self.zero_count);
        for (spans, deltas, (offset, counts)) in [(8, 9, &self.neg), (11, 12, &self.pos)] {
            if counts.is_empty() {
                continue;
            }
            let mut span = Vec::new();
            field_varint(&mut span, 1, zigzag(i64::from(*offset)));
            field_varint(&mut span, 2, counts.len() as u64);
            field_bytes(&mut h, spans, &span);
            let mut packed = Vec::new();
            let mut prev = 0i64;
            for &c in counts {
                varint(&mut packed, zigzag(c as i64 - prev));
                prev = c as i64;
            }
            field_bytes(&mut h, deltas, &packed);
        }
        field_varint(&mut h, 15, self.t as u64);
        h
    }

    /// The same histogram in promqltest notation.
    fn notation(&self) -> String {
        let list = |c: &[u64]| c.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
        let mut parts = vec![
            format!("schema:{}", self.schema),
            format!("sum:{}", self.sum),
            format!("count:{}", self.count()),
        ];
        if self.zero_count != 0 {
            parts.push(format!("z_bucket:{}", self.zero_count));
        }
        if self.zero_threshold != 0.0 {
            parts.push(format!("z_bucket_w:{}", self.zero_threshold));
        }
        if !self.pos.1.is_empty() {
            parts.push(format!("offset:{} buckets:[{}]", self.pos.0, list(&self.pos.1)));
        }
        if !self.neg.1.is_empty() {
            parts.push(format!("n_offset:{} n_buckets:[{}]", self.neg.0, list(&self.neg.1)));
        }
        format!("{{{{{}}}}}", parts.join(" "))
    }
}

/// `lat{job="a"}` (schema 0, a zero bucket, negative buckets) and `lat{job="b"}` (schema 3,
/// a counter reset at 6m), one sample a minute over 10 minutes from `base` (ms).
fn data(base: i64) -> Vec<(&'static str, Vec<Hist>)> {
    let a = (0..=10u64)
        .map(|k| {
            let c = k + 1;
            Hist {
                t: base + k as i64 * M,
                schema: 0,
                zero_threshold: 0.001,
                zero_count: c,
                sum: 5.5 * c as f64,
                pos: (0, vec![c, 2 * c, c]),
                neg: (0, vec![c]),
            }
        })
        .collect();
    let b = (0..=10u64)
        .map(|k| {
            let c = if k < 6 { k + 1 } else { k - 5 };
            Hist {
                t: base + k as i64 * M,
                schema: 3,
                zero_threshold: 0.0,
                zero_count: 0,
                sum: 2.5 * c as f64,
                pos: (-2, vec![c, 0, 3 * c]),
                neg: (0, vec![]),
            }
        })
        .collect();
    vec![("a", a), ("b", b)]
}

fn write_request(series: &[(&str, Vec<Hist>)]) -> Vec<u8> {
    let mut req = Vec::new();
    for (job, hists) in series {
        let mut ts = Vec::new();
        for (n, v) in [("__name__", "lat"), ("job", job)] {
            let mut label = Vec::new();
            field_bytes(&mut label, 1, n.as_bytes());
            field_bytes(&mut label, 2, v.as_bytes());
            field_bytes(&mut ts, 1, &label);
        }
        for h in hists {
            field_bytes(&mut ts, 4, &h.proto());
        }
        field_bytes(&mut req, 1, &ts);
    }
    req
}

fn remote_write(rt: &tokio::runtime::Runtime, port: u16, body: Vec<u8>) {
    let resp = rt
        .block_on(
            reqwest::Client::new()
                .post(format!("http://127.0.0.1:{port}/api/v1/write"))
                .header("content-encoding", "snappy")
                .header("content-type", "application/x-protobuf")
                .header("x-prometheus-remote-write-version", "0.1.0")
                .body(snappy(&body))
                .send(),
        )
        .expect("remote write");
    let status = resp.status().as_u16();
    let text = rt.block_on(resp.text()).unwrap_or_default();
    assert_eq!(status, 204, "remote write refused: {text}");
}

// ---------------------------------------------------------------------------------------------
// Answers in one comparable form.

/// A point: a float, or a histogram's count, sum and buckets (rule, lower, upper, count).
#[derive(Debug, Clone, PartialEq)]
enum Point {
    Float(f64),
    Hist(f64, f64, Vec<(u64, f64, f64, f64)>),
}

fn num(v: &Json) -> f64 {
    match v.as_str().expect("a string number") {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().expect("a number"),
    }
}

fn hist_point(h: &Json) -> Point {
    let buckets = h["buckets"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|b| (b[0].as_u64().unwrap(), num(&b[1]), num(&b[2]), num(&b[3])))
                .collect()
        })
        .unwrap_or_default();
    Point::Hist(num(&h["count"]), num(&h["sum"]), buckets)
}

/// `data.result` of an answer as (metric, [(ms after `base`, point)]), sorted by metric.
fn normalize(data: &Json, base: i64) -> Vec<(String, Vec<(i64, Point)>)> {
    let t = |v: &Json| (v.as_f64().expect("a time") * 1000.0).round() as i64 - base;
    let mut out: Vec<(String, Vec<(i64, Point)>)> = data["result"]
        .as_array()
        .expect("a result list")
        .iter()
        .map(|s| {
            let mut pts = Vec::new();
            if let Some(v) = s.get("value") {
                pts.push((t(&v[0]), Point::Float(num(&v[1]))));
            }
            if let Some(h) = s.get("histogram") {
                pts.push((t(&h[0]), hist_point(&h[1])));
            }
            for v in s.get("values").and_then(Json::as_array).into_iter().flatten() {
                pts.push((t(&v[0]), Point::Float(num(&v[1]))));
            }
            for h in s.get("histograms").and_then(Json::as_array).into_iter().flatten() {
                pts.push((t(&h[0]), hist_point(&h[1])));
            }
            pts.sort_by_key(|p| p.0);
            (s["metric"].to_string(), pts)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A watchfire result in Prometheus' `data` shape (histograms through their own JSON writer).
fn value_json(v: &watchfire::promql::Value) -> Json {
    use watchfire::promql::Value;
    let labels = |l: &watchfire::labels::Labels| {
        Json::Object(
            l.iter()
                .map(|x| (x.name.to_string(), Json::String(x.value.to_string())))
                .collect(),
        )
    };
    let secs = |t: i64| serde_json::json!(t as f64 / 1000.0);
    let float = |f: f64| Json::String(watchfire::gofmt::format_f(f));
    let result: Vec<Json> = match v {
        Value::Vector(samples) => samples
            .iter()
            .map(|s| match &s.h {
                Some(h) => serde_json::json!({"metric": labels(&s.metric), "histogram": [secs(s.t),
                    serde_json::from_str::<Json>(&h.prometheus_json()).unwrap()]}),
                None => serde_json::json!({"metric": labels(&s.metric), "value": [secs(s.t), float(s.v)]}),
            })
            .collect(),
        Value::Matrix(series) => series
            .iter()
            .map(|s| {
                let values: Vec<Json> = s
                    .samples
                    .iter()
                    .map(|(t, v)| serde_json::json!([secs(*t), float(*v)]))
                    .collect();
                let hists: Vec<Json> = s
                    .histograms
                    .iter()
                    .map(|(t, h)| {
                        serde_json::json!([secs(*t), serde_json::from_str::<Json>(&h.prometheus_json()).unwrap()])
                    })
                    .collect();
                serde_json::json!({"metric": labels(&s.metric), "values": values, "histograms": hists})
            })
            .collect(),
        other => panic!("unexpected {other:?}"),
    };
    serde_json::json!({ "result": result })
}

/// How many representable floats lie between `a` and `b` (same sign assumed; 0 when equal).
fn ulps_apart(a: f64, b: f64) -> u64 {
    if a == b {
        return 0;
    }
    if a.is_sign_negative() != b.is_sign_negative() || !a.is_finite() || !b.is_finite() {
        return u64::MAX;
    }
    a.abs().to_bits().abs_diff(b.abs().to_bits())
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Equal answers. `exact`: the same counts and sums to the last bit, and the same bucket bounds
/// within 2 units in the last place: Prometheus takes bounds of schemas above 0 from a table of
/// its own that is not correctly rounded (0.8408964152537144 for 2^(1/4)/2, where watchfire
/// computes 0.8408964152537145), which no formula reproduces.
fn assert_same(what: &str, got: &[(String, Vec<(i64, Point)>)], want: &[(String, Vec<(i64, Point)>)], exact: bool) {
    let msg = || format!("{what}:\n got  {got:?}\n want {want:?}");
    assert!(!want.is_empty(), "{what}: Prometheus answered nothing");
    assert_eq!(got.len(), want.len(), "{}", msg());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "{}", msg());
        assert_eq!(g.1.len(), w.1.len(), "{}", msg());
        for ((gt, gp), (wt, wp)) in g.1.iter().zip(&w.1) {
            assert_eq!(gt, wt, "{}", msg());
            let value = |a: f64, b: f64| if exact { a.to_bits() == b.to_bits() } else { close(a, b) };
            let bound = |a: f64, b: f64| if exact { ulps_apart(a, b) <= 2 } else { close(a, b) };
            let same = match (gp, wp) {
                (Point::Float(a), Point::Float(b)) => value(*a, *b),
                (Point::Hist(gc, gs, gb), Point::Hist(wc, ws, wb)) => {
                    value(*gc, *wc)
                        && value(*gs, *ws)
                        && gb.len() == wb.len()
                        && gb
                            .iter()
                            .zip(wb)
                            .all(|(x, y)| x.0 == y.0 && bound(x.1, y.1) && bound(x.2, y.2) && value(x.3, y.3))
                }
                _ => false,
            };
            assert!(same, "{}", msg());
        }
    }
}

fn enc(s: &str) -> String {
    watchfire::url::query_escape(s)
}

fn prom_query(port: u16, q: &str, t: i64) -> Json {
    let body = common::get_json(
        port,
        &format!("/api/v1/query?query={}&time={}", enc(q), t as f64 / 1000.0),
    )
    .expect("prometheus answer");
    assert_eq!(body["status"], "success", "{q}: {body}");
    body["data"].clone()
}

fn prom_range(port: u16, q: &str, start: i64, end: i64, step_s: i64) -> Json {
    let body = common::get_json(
        port,
        &format!(
            "/api/v1/query_range?query={}&start={}&end={}&step={step_s}",
            enc(q),
            start as f64 / 1000.0,
            end as f64 / 1000.0
        ),
    )
    .expect("prometheus answer");
    assert_eq!(body["status"], "success", "{q}: {body}");
    body["data"].clone()
}

#[test]
fn native_histograms_from_and_as_prometheus() {
    if !common::prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let rt = common::runtime();
    let now_s = chrono::Utc::now().timestamp();
    let base = (now_s - 20 * 60) / 60 * 60 * 1000;
    std::fs::write(root.join("prometheus.yml"), "global:\n  evaluation_interval: 1m\n").unwrap();
    let prom = Prometheus::start_with(
        &root.join("tsdb"),
        &root.join("prometheus.yml"),
        common::free_port(),
        &[
            "--enable-feature=native-histograms",
            "--web.enable-remote-write-receiver",
        ],
    );
    let series = data(base);
    remote_write(&rt, prom.port, write_request(&series));
    // The same data in notation for `watchfire query` and `serve`, from time 0.
    let mut notation = String::from("load 1m\n");
    for (job, hists) in &series {
        let values: Vec<String> = hists.iter().map(Hist::notation).collect();
        notation.push_str(&format!("  lat{{job=\"{job}\"}} {}\n", values.join(" ")));
    }
    std::fs::write(root.join("lat.txt"), &notation).unwrap();

    // watchfire with the Prometheus as its source, and rules over its histograms.
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: lat\n    rules:\n      - record: lat:rate5m\n        expr: rate(lat[4m30s])\n      - record: lat:rate5m:count\n        expr: histogram_count(lat:rate5m)\n      - record: lat:rate5m:sum\n        expr: sum(lat:rate5m)\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        "route:\n  receiver: none\nreceivers:\n  - name: none\n",
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - name: prom\n    type: prometheus\n    url: http://127.0.0.1:{}\n    timeout: 10s\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
            prom.port
        ),
    )
    .unwrap();
    let cfg = watchfire::run::config::load_file(&root.join("watchfire.yaml")).expect("config");
    let loaded = watchfire::run::load(&cfg, rt.handle()).expect("load");
    let source = loaded.setup.source.clone();
    let engine = watchfire::promql::Engine::default();
    let tq = base + 10 * M;

    // Raw fetches through the engine: Prometheus' own histograms, to the last bit.
    let local = |q: &str, t: i64| {
        let src = source.clone();
        let q = q.to_string();
        // The source blocks on the runtime: query from a thread of its own.
        std::thread::spawn(move || watchfire::promql::Engine::default().instant_query(&*src, &q, t))
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"))
            .value
    };
    for q in ["lat", "lat[170s]", "lat{job=\"b\"}[9m30s]"] {
        assert_same(
            &format!("raw {q}"),
            &normalize(&value_json(&local(q, tq)), base),
            &normalize(&prom_query(prom.port, q, tq), base),
            true,
        );
    }
    // Evaluated here over them: the same answers as Prometheus' up to rounding.
    for q in [
        "rate(lat[4m30s])",
        // Not histogram_quantile: Prometheus 3.x (watchfire) interpolates exponential buckets
        // exponentially, 2.42 linearly.
        "histogram_sum(rate(lat[4m30s]))",
        "histogram_count(increase(lat[3m30s]))",
        "histogram_fraction(0, 2, lat)",
        "sum(lat)",
    ] {
        assert_same(
            &format!("local {q}"),
            &normalize(&value_json(&local(q, tq)), base),
            &normalize(&prom_query(prom.port, q, tq), base),
            false,
        );
    }

    // Pushdown: an aggregation inside a query that reads a local recording rule goes to
    // Prometheus; its histograms come back exactly.
    let pushed_before = pushdowns(&*source);
    let q = "sum by (job) (rate(lat[4m30s])) or lat:rate5m:sum";
    assert_same(
        "pushed-down aggregation",
        &normalize(&value_json(&local(q, tq)), base),
        &normalize(&prom_query(prom.port, "sum by (job) (rate(lat[4m30s]))", tq), base),
        true,
    );
    assert!(pushdowns(&*source) > pushed_before, "the aggregation was pushed down");

    // Recording rules: `lat:rate5m` is pushed down whole, the others read it back locally.
    let mut group = loaded.groups.into_iter().next().expect("a group");
    let mut outputs = watchfire::tsdb::Store::new();
    let src = source.clone();
    let (outcome, outputs) = std::thread::spawn(move || {
        let o = group.eval(tq, &watchfire::promql::Engine::default(), &*src, i64::MAX, &mut outputs);
        (o, outputs)
    })
    .join()
    .unwrap();
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    let recorded = |q: &str| normalize(&value_json(&engine.instant_query(&outputs, q, tq).unwrap().value), base);
    let renamed = |data: Json, name: &str| {
        let mut v = normalize(&data, base);
        for s in &mut v {
            let mut m: serde_json::Map<String, Json> = serde_json::from_str(&s.0).unwrap();
            m.insert("__name__".into(), Json::String(name.into()));
            s.0 = Json::Object(m).to_string();
        }
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_same(
        "recorded lat:rate5m",
        &recorded("lat:rate5m"),
        &renamed(prom_query(prom.port, "rate(lat[4m30s])", tq), "lat:rate5m"),
        true,
    );
    assert_same(
        "recorded lat:rate5m:count",
        &recorded("lat:rate5m:count"),
        &renamed(
            prom_query(prom.port, "histogram_count(rate(lat[4m30s]))", tq),
            "lat:rate5m:count",
        ),
        false,
    );
    assert_same(
        "recorded lat:rate5m:sum",
        &recorded("lat:rate5m:sum"),
        &renamed(prom_query(prom.port, "sum(rate(lat[4m30s]))", tq), "lat:rate5m:sum"),
        false,
    );

    // `watchfire query --format json` over the same data in notation prints what Prometheus does.
    let cli = |args: &[&str]| -> Json {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .current_dir(root)
            .arg("query")
            .args(args)
            .args(["--data", "lat.txt", "--format", "json"])
            .output()
            .expect("watchfire query");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    for (q, exact) in [("lat", true), ("lat[110s]", true), ("rate(lat[4m30s])", false)] {
        assert_same(
            &format!("watchfire query {q}"),
            &normalize(&cli(&[q, "--time", "10m"]), 0),
            &normalize(&prom_query(prom.port, q, tq), base),
            exact,
        );
    }
    assert_same(
        "watchfire query range",
        &normalize(
            &cli(&["rate(lat[4m30s])", "--start", "5m", "--end", "10m", "--step", "1m"]),
            0,
        ),
        &normalize(&prom_range(prom.port, "rate(lat[4m30s])", base + 5 * M, tq, 60), base),
        false,
    );

    // The query API of `watchfire serve` (and `run`): the same shape and numbers.
    let port = common::free_port();
    let _serve = Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .current_dir(root)
            .args(["serve", "--data", "lat.txt", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start watchfire serve"),
    );
    common::wait_for("watchfire serve ready", 30, || {
        common::http_status(port, "/-/ready").filter(|s| s.contains("200"))
    });
    let api = |path: String| -> Json {
        let body = common::get_json(port, &path).expect("watchfire answer");
        assert_eq!(body["status"], "success", "{path}: {body}");
        body["data"].clone()
    };
    assert_same(
        "serve instant",
        &normalize(&api(format!("/api/v1/query?query=lat&time={}", 600)), 0),
        &normalize(&prom_query(prom.port, "lat", tq), base),
        true,
    );
    assert_same(
        "serve range",
        &normalize(
            &api(format!(
                "/api/v1/query_range?query={}&start=300&end=600&step=60",
                enc("rate(lat[4m30s])")
            )),
            0,
        ),
        &normalize(&prom_range(prom.port, "rate(lat[4m30s])", base + 5 * M, tq, 60), base),
        false,
    );
    // Schema 0 bounds need no table: that histogram object is Prometheus' own, string for string.
    let raw = |data: &Json| -> String {
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["metric"]["job"] == "a")
            .map(|s| s["histogram"][1].to_string())
            .unwrap_or_default()
    };
    assert_eq!(
        raw(&api("/api/v1/query?query=lat&time=600".into())),
        raw(&prom_query(prom.port, "lat", tq))
    );
}

/// Pushdown requests the source has sent so far.
fn pushdowns(src: &dyn watchfire::promql::Queryable) -> u64 {
    src.requests().iter().filter(|r| r.1 == "pushdown").map(|r| r.2).sum()
}

/// `watchfire replay` over notation data with native histograms: a recording rule keeps their
/// rate, another reduces it to a float, an alert pages when the rate jumps.
#[test]
fn replay_records_and_alerts_over_native_histograms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let h = "{{schema:0 sum:5 count:4 buckets:[1 2 1]}}";
    let big = "{{schema:0 sum:500 count:400 buckets:[100 200 100]}}";
    // Four observations a minute, then 400 a minute from 11m.
    std::fs::write(
        root.join("data.txt"),
        format!("load 1m\n  lat{{job=\"a\"}} {h}+{h}x10 {big}+{big}x10\n"),
    )
    .unwrap();
    std::fs::write(
        root.join("rules.yaml"),
        "groups:\n  - name: lat\n    interval: 1m\n    rules:\n      - record: lat:rate2m\n        expr: rate(lat[2m])\n      - record: lat:rate2m:count\n        expr: histogram_count(lat:rate2m)\n      - alert: Busy\n        expr: lat:rate2m:count > 1\n",
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
    )
    .unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        "route: {receiver: team}\nreceivers:\n  - name: team\n    webhook_configs: [{url: 'http://127.0.0.1:9/'}]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .current_dir(root)
        .args([
            "replay",
            "--config",
            "watchfire.yaml",
            "--data",
            "data.txt",
            "--format",
            "json",
        ])
        .output()
        .expect("run watchfire replay");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let notes: Vec<Json> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(|n| n.get("alerts").is_some())
        .collect();
    assert_eq!(notes.len(), 1, "one page: {stdout}");
    let alert = &notes[0]["alerts"][0];
    assert_eq!(alert["labels"]["alertname"], "Busy");
    assert_eq!(alert["labels"]["job"], "a");
    let started = chrono::DateTime::parse_from_rfc3339(alert["starts_at"].as_str().unwrap())
        .unwrap()
        .timestamp();
    // The rate over 2m jumps with the sample at 11m; one evaluation a minute.
    assert!((11 * 60..13 * 60).contains(&started), "{started}");
}
