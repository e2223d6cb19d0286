//! `watchfire query EXPR --data FILE... [--time T | --start T --end T --step D]
//! [--format text|json] [--lookback D]`

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use watchfire::gofmt::format_f as format_float;
use watchfire::labels::Labels;
use watchfire::promql::{Engine, EngineOptions, Value};
use watchfire::promqltest::format::{format_api_timestamp, format_secs3};
use watchfire::promqltest::parse_duration;
use watchfire::tsdb::Store;
use watchfire::tsdb::{self as notation, SeriesValue};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One line per sample, like Prometheus' console.
    Text,
    /// The `data` object of Prometheus' /api/v1/query(_range) response.
    Json,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The PromQL expression.
    expr: String,
    /// Data files: OpenMetrics/Prometheus text, or promqltest-style notation (a first line
    /// `load <interval>`, then `metric{labels} values` lines; samples start at time 0).
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    data: Vec<PathBuf>,
    /// Evaluation time of an instant query: RFC3339, unix seconds, or a duration after 0 (`10m`).
    /// Defaults to now.
    #[arg(long, value_name = "T", conflicts_with_all = ["start", "end", "step"])]
    time: Option<String>,
    /// Start of a range query (same forms as --time).
    #[arg(long, value_name = "T", requires_all = ["end", "step"])]
    start: Option<String>,
    /// End of a range query (same forms as --time).
    #[arg(long, value_name = "T", requires_all = ["start", "step"])]
    end: Option<String>,
    /// Resolution of a range query: a duration (`30s`, `1m`) or seconds.
    #[arg(long, value_name = "D", requires_all = ["start", "end"])]
    step: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// How far back an instant selector looks for a sample (default 5m).
    #[arg(long, value_name = "D")]
    lookback: Option<String>,
}

pub fn run(args: Args) -> i32 {
    match execute(&args) {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => super::fail(e),
    }
}

fn execute(args: &Args) -> Result<String, String> {
    let mut opts = EngineOptions::default();
    if let Some(l) = &args.lookback {
        let ms = parse_duration(l).map_err(|e| format!("invalid --lookback: {e}"))?;
        if ms <= 0 {
            return Err("invalid --lookback: must be positive".into());
        }
        opts.lookback_ms = ms;
    }
    let engine = Engine::new(opts);

    let mut store = Store::new();
    for path in &args.data {
        load_data(&mut store, path)?;
    }

    let res = match (&args.start, &args.end, &args.step) {
        (Some(s), Some(e), Some(st)) => {
            let start = parse_time(s).map_err(|e| format!("invalid --start: {e}"))?;
            let end = parse_time(e).map_err(|e| format!("invalid --end: {e}"))?;
            let step = parse_duration(st).map_err(|e| format!("invalid --step: {e}"))?;
            if step <= 0 {
                return Err("invalid --step: must be positive".into());
            }
            if end < start {
                return Err("invalid range: --end is before --start".into());
            }
            engine
                .range_query(&store, &args.expr, start, end, step)
                .map_err(|e| e.to_string())?
        }
        (None, None, None) => {
            let t = match &args.time {
                Some(t) => parse_time(t).map_err(|e| format!("invalid --time: {e}"))?,
                None => chrono::Utc::now().timestamp_millis(),
            };
            engine.instant_query(&store, &args.expr, t).map_err(|e| e.to_string())?
        }
        _ => return Err("a range query needs --start, --end and --step".into()),
    };
    for w in &res.warnings {
        eprintln!("warning: {w}");
    }
    for i in &res.infos {
        eprintln!("info: {i}");
    }
    Ok(match args.format {
        Format::Text => render_text(&res.value),
        Format::Json => render_json(&res.value) + "\n",
    })
}

/// RFC3339, unix seconds (possibly fractional, possibly negative), or a duration after 0.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(dt.timestamp_millis());
    }
    let looks_numeric =
        s.bytes().any(|b| b.is_ascii_digit()) && s.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b));
    if looks_numeric {
        if let Ok(secs) = s.parse::<f64>() {
            let ms = (secs * 1000.0).round();
            if ms.is_finite() && ms.abs() < 9.0e15 {
                return Ok(ms as i64);
            }
            return Err(format!("time out of range: {s:?}"));
        }
    }
    parse_duration(s).map_err(|_| format!("{s:?} is not an RFC3339 time, unix seconds or a duration"))
}

/// Whether the file is in the notation format: its first meaningful line is `load <interval>`.
fn is_notation_line(line: &str) -> bool {
    line == "load" || line.starts_with("load ") || line.starts_with("load\t")
}

/// Whether the file's first line that is neither blank nor a comment starts a `load` block.
/// Reads only up to that line: data files can be gigabytes.
pub(crate) fn is_notation(path: &Path) -> Result<bool, String> {
    use std::io::BufRead;
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for line in std::io::BufReader::new(f).split(b'\n') {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        let line = String::from_utf8_lossy(&line);
        let line = line.trim();
        if !line.is_empty() && !line.starts_with('#') {
            return Ok(is_notation_line(line));
        }
    }
    Ok(false)
}

pub(crate) fn load_data(store: &mut Store, path: &Path) -> Result<(), String> {
    if is_notation(path)? {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        return load_notation(store, path, &String::from_utf8_lossy(&bytes));
    }
    let stats = watchfire::tsdb::load_file(store, path).map_err(|e| {
        let msg = e.to_string();
        let name = path.display().to_string();
        if msg.starts_with(&name) {
            msg
        } else {
            format!("{name}: {msg}")
        }
    })?;
    tracing::info!(file = %path.display(), stats = ?stats, "loaded");
    Ok(())
}

/// Loads `load <interval>` blocks of `metric values` lines; each block starts at time 0.
fn load_notation(store: &mut Store, path: &Path, text: &str) -> Result<(), String> {
    let mut interval: Option<i64> = None;
    let mut samples = 0usize;
    let mut budget = notation::PointBudget::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let at = || format!("{}:{}", path.display(), i + 1);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if is_notation_line(line) {
            let d = line["load".len()..].trim();
            let ms = parse_duration(d).map_err(|e| format!("{}: invalid load interval: {e}", at()))?;
            if ms <= 0 {
                return Err(format!("{}: invalid load interval: must be positive", at()));
            }
            interval = Some(ms);
            continue;
        }
        let Some(step) = interval else {
            return Err(format!("{}: expected `load <interval>` before series lines", at()));
        };
        let (labels, values): (Labels, Vec<Option<SeriesValue>>) =
            budget.series_line(line).map_err(|e| format!("{}: {e}", at()))?;
        samples += values.iter().filter(|v| v.is_some()).count();
        notation::load_notation(store, step, 0, &labels, &values);
    }
    tracing::info!(file = %path.display(), samples, "loaded notation data");
    Ok(())
}

fn render_text(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Scalar { t, v } => {
            let _ = writeln!(out, "scalar: {} @[{}]", format_float(*v), format_secs3(*t));
        }
        Value::String { t, s } => {
            let _ = writeln!(out, "string: {s} @[{}]", format_secs3(*t));
        }
        Value::Vector(samples) => {
            for s in samples {
                let v = s.h.as_ref().map_or_else(|| format_float(s.v), |h| h.test_expression());
                let _ = writeln!(out, "{} => {v} @[{}]", s.metric, format_secs3(s.t));
            }
        }
        Value::Matrix(series) => {
            for s in series {
                let _ = writeln!(out, "{} =>", s.metric);
                for (t, v) in &s.samples {
                    let _ = writeln!(out, "{} @[{}]", format_float(*v), format_secs3(*t));
                }
                for (t, h) in &s.histograms {
                    let _ = writeln!(out, "{} @[{}]", h.test_expression(), format_secs3(*t));
                }
            }
        }
    }
    out
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn json_metric(l: &Labels) -> String {
    let fields: Vec<String> = l
        .iter()
        .map(|lb| format!("{}:{}", json_str(&lb.name), json_str(&lb.value)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

fn json_point(t: i64, v: f64) -> String {
    format!("[{},{}]", format_api_timestamp(t), json_str(&format_float(v)))
}

/// `[t,{"count":...}]`: a histogram point as Prometheus writes it, given its JSON.
fn json_histogram_point(t: i64, histogram_json: &str) -> String {
    format!("[{},{histogram_json}]", format_api_timestamp(t))
}

/// The `data` object of Prometheus' query API response.
pub fn render_json(v: &Value) -> String {
    let (kind, result) = match v {
        Value::Scalar { t, v } => ("scalar", json_point(*t, *v)),
        Value::String { t, s } => ("string", format!("[{},{}]", format_api_timestamp(*t), json_str(s))),
        Value::Vector(samples) => {
            let items: Vec<String> = samples
                .iter()
                .map(|s| match &s.h {
                    Some(h) => format!(
                        "{{\"metric\":{},\"histogram\":{}}}",
                        json_metric(&s.metric),
                        json_histogram_point(s.t, &h.prometheus_json())
                    ),
                    None => format!(
                        "{{\"metric\":{},\"value\":{}}}",
                        json_metric(&s.metric),
                        json_point(s.t, s.v)
                    ),
                })
                .collect();
            ("vector", format!("[{}]", items.join(",")))
        }
        Value::Matrix(series) => {
            let items: Vec<String> = series
                .iter()
                .map(|s| {
                    // As Prometheus: `values` for the floats, `histograms` for the histograms.
                    let mut out = format!("{{\"metric\":{}", json_metric(&s.metric));
                    if !s.samples.is_empty() || s.histograms.is_empty() {
                        let pts: Vec<String> = s.samples.iter().map(|(t, v)| json_point(*t, *v)).collect();
                        let _ = write!(out, ",\"values\":[{}]", pts.join(","));
                    }
                    if !s.histograms.is_empty() {
                        let pts: Vec<String> = s
                            .histograms
                            .iter()
                            .map(|(t, h)| json_histogram_point(*t, &h.prometheus_json()))
                            .collect();
                        let _ = write!(out, ",\"histograms\":[{}]", pts.join(","));
                    }
                    out.push('}');
                    out
                })
                .collect();
            ("matrix", format!("[{}]", items.join(",")))
        }
    };
    format!("{{\"resultType\":\"{kind}\",\"result\":{result}}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use watchfire::promql::{Sample, Series};

    #[test]
    fn times() {
        assert_eq!(parse_time("10m"), Ok(600_000));
        assert_eq!(parse_time("1h30m"), Ok(5_400_000));
        assert_eq!(parse_time("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("1700000000.123"), Ok(1_700_000_000_123));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T23:13:20.5+01:00"), Ok(1_700_000_000_500));
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn json_like_prometheus() {
        let v = Value::Vector(vec![Sample {
            h: None,
            metric: Labels::from_pairs([("__name__", "up"), ("job", "a\"b")]),
            t: 1_700_000_000_123,
            v: 1.0,
            drop_name: false,
        }]);
        assert_eq!(
            render_json(&v),
            r#"{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"a\"b"},"value":[1700000000.123,"1"]}]}"#
        );
        let m = Value::Matrix(vec![Series {
            histograms: Vec::new(),
            metric: Labels::empty(),
            samples: vec![(0, f64::NAN), (60_000, f64::INFINITY)],
            drop_name: false,
        }]);
        assert_eq!(
            render_json(&m),
            r#"{"resultType":"matrix","result":[{"metric":{},"values":[[0,"NaN"],[60,"+Inf"]]}]}"#
        );
        assert_eq!(
            render_json(&Value::Scalar { t: 1500, v: -0.25 }),
            r#"{"resultType":"scalar","result":[1.500,"-0.25"]}"#
        );
        assert_eq!(
            render_json(&Value::String { t: 0, s: "x".into() }),
            r#"{"resultType":"string","result":[0,"x"]}"#
        );
        assert_eq!(
            render_json(&Value::Vector(vec![])),
            r#"{"resultType":"vector","result":[]}"#
        );
    }

    #[test]
    fn native_histograms_in_json_like_prometheus() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("lat.txt");
        std::fs::write(
            &data,
            "load 1m\n  lat {{schema:0 sum:5 count:4 buckets:[1 2 1]}}x2\n  up 1 1 1\n",
        )
        .unwrap();
        let query = |expr: &str, time: &str| {
            execute(&Args {
                expr: expr.into(),
                data: vec![data.clone()],
                time: Some(time.into()),
                start: None,
                end: None,
                step: None,
                format: Format::Json,
                lookback: None,
            })
            .unwrap()
        };
        let h = r#"{"count":"4","sum":"5","buckets":[[0,"0.5","1","1"],[0,"1","2","2"],[0,"2","4","1"]]}"#;
        assert_eq!(
            query("lat", "1m"),
            format!(r#"{{"resultType":"vector","result":[{{"metric":{{"__name__":"lat"}},"histogram":[60,{h}]}}]}}"#)
                + "\n"
        );
        assert_eq!(
            query("{__name__=~\"lat|up\"}[90s]", "2m"),
            format!(
                r#"{{"resultType":"matrix","result":[{{"metric":{{"__name__":"lat"}},"histograms":[[60,{h}],[120,{h}]]}},{{"metric":{{"__name__":"up"}},"values":[[60,"1"],[120,"1"]]}}]}}"#
            ) + "\n"
        );
    }

    #[test]
    fn text_like_console() {
        let v = Value::Vector(vec![Sample {
            h: None,
            metric: Labels::from_pairs([("__name__", "up"), ("a", "b")]),
            t: 1_700_000_000_000,
            v: 1.0,
            drop_name: false,
        }]);
        assert_eq!(render_text(&v), "up{a=\"b\"} => 1 @[1700000000.000]\n");
    }

    #[test]
    fn notation_detection() {
        let dir = tempfile::tempdir().unwrap();
        let file = |text: &str| {
            let p = dir.path().join("data");
            std::fs::write(&p, text).unwrap();
            p
        };
        assert!(is_notation(&file("# data\n\nload 1m\n  up 1 2\n")).unwrap());
        assert!(!is_notation(&file("# TYPE up gauge\nup 1\n")).unwrap());
        assert!(!is_notation(&file("")).unwrap());
        assert!(is_notation(&dir.path().join("missing")).is_err());
    }
}
