//! Streaming loader for the text exposition formats with timestamps, as backfilled by
//! `promtool tsdb create-blocks-from openmetrics`.
//!
//! Two dialects differ in the timestamp unit: OpenMetrics writes seconds (possibly fractional)
//! and must end with `# EOF`; the classic Prometheus text format writes integer milliseconds.
//! [`load_openmetrics`] reads OpenMetrics; [`load_text`] takes the unit; [`load_file`] picks it
//! with [`detect_unit`]: a file whose last line is `# EOF` is OpenMetrics, anything else is the
//! Prometheus text format.
//!
//! Every sample needs a timestamp (there is no scrape time to fall back on). Metadata lines
//! (`# HELP`, `# TYPE`, `# UNIT`), other comments and exemplars are skipped. Values follow
//! Prometheus: a NaN value is stored as Prometheus' "normal" NaN, a fractional-second
//! timestamp is truncated to milliseconds (`int64(ts * 1000)`).
//!
//! Speed: lines are read into one reused buffer, and the raw series text (`name{labels}`) is
//! mapped to its series id, so labels are parsed once per series. Consecutive lines usually
//! belong to the same series (the benchmark generator writes each series contiguously, and a
//! histogram's 12 series round-robin per timestamp), hence the check against the previous line
//! before the map lookup.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::labels::{Labels, LabelsBuilder, METRIC_NAME};

use super::error::LoadError;
use super::store::{SeriesId, Store};

/// Prometheus' NaN for a sample value that is NaN (not the staleness marker).
const NORMAL_NAN_BITS: u64 = 0x7ff8_0000_0000_0001;

/// The unit of the timestamps in a text exposition file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimestampUnit {
    /// OpenMetrics: seconds, possibly fractional.
    Seconds,
    /// Prometheus text format: integer milliseconds.
    Millis,
}

/// What a load added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Lines read, including comments.
    pub lines: u64,
    /// Samples appended (a duplicate timestamp replaces and still counts).
    pub samples: u64,
    /// Series the load created in the store.
    pub new_series: usize,
    /// Smallest and largest sample timestamp, in ms.
    pub min_time: Option<i64>,
    pub max_time: Option<i64>,
}

/// Loads a file, choosing the dialect with [`detect_unit`].
/// Writes a store as OpenMetrics text (timestamps in seconds with milliseconds, `# EOF`), series
/// by series, so that [`load_file`] and `promtool tsdb create-blocks-from openmetrics` read it
/// back. Staleness markers have no OpenMetrics form and are left out: a series that ends then
/// stays visible for the lookback delta after its last sample, as any backfilled data does.
/// Native histogram samples are not written.
pub fn write_openmetrics(store: &Store, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut samples = Vec::new();
    for id in 0..store.num_series() as SeriesId {
        let l = store.labels(id);
        samples.clear();
        store.samples(id, i64::MIN, i64::MAX, &mut samples);
        samples.retain(|(_, v)| v.to_bits() != super::notation::STALE_NAN_BITS);
        if samples.is_empty() {
            continue;
        }
        let name = l.metric_name().unwrap_or("");
        let rest: Vec<String> = l
            .iter()
            .filter(|x| &*x.name != METRIC_NAME)
            .map(|x| format!("{}=\"{}\"", x.name, crate::labels::escape_label_value(&x.value)))
            .collect();
        let head = if rest.is_empty() {
            name.to_string()
        } else {
            format!("{name}{{{}}}", rest.join(","))
        };
        for (t, v) in &samples {
            let value = if v.is_infinite() {
                if *v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
            } else {
                v.to_string()
            };
            writeln!(out, "{head} {value} {}.{:03}", t.div_euclid(1000), t.rem_euclid(1000))?;
        }
    }
    writeln!(out, "# EOF")
}

pub fn load_file(store: &mut Store, path: impl AsRef<Path>) -> Result<LoadStats, LoadError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let io = |source| LoadError::Io {
        file: name.clone(),
        source,
    };
    let unit = detect_unit(path)?;
    let f = File::open(path).map_err(io)?;
    load_text(store, BufReader::with_capacity(1 << 20, f), &name, unit)
}

/// [`load_file`] over text already read; `file_name` names it in errors. The unit is chosen as
/// for a file: OpenMetrics seconds if the text ends with `# EOF`, else milliseconds.
pub fn load_str(store: &mut Store, text: &str, file_name: &str) -> Result<LoadStats, LoadError> {
    let unit = if text.as_bytes().trim_ascii_end().ends_with(b"# EOF") {
        TimestampUnit::Seconds
    } else {
        TimestampUnit::Millis
    };
    load_text(store, text.as_bytes(), file_name, unit)
}

/// `Seconds` (OpenMetrics) if the file's last non-blank line is `# EOF`, else `Millis`
/// (Prometheus text format). Reads only the file's tail.
pub(crate) fn detect_unit(path: impl AsRef<Path>) -> Result<TimestampUnit, LoadError> {
    let path = path.as_ref();
    let io = |source| LoadError::Io {
        file: path.display().to_string(),
        source,
    };
    let mut f = File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(256))).map_err(io)?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).map_err(io)?;
    Ok(if tail.trim_ascii_end().ends_with(b"# EOF") {
        TimestampUnit::Seconds
    } else {
        TimestampUnit::Millis
    })
}

/// Loads text exposition data with timestamps in `unit`. With `Seconds` the input must end
/// with `# EOF` (a truncated OpenMetrics file is an error rather than silently short).
pub(crate) fn load_text<R: BufRead>(
    store: &mut Store,
    mut reader: R,
    file_name: &str,
    unit: TimestampUnit,
) -> Result<LoadStats, LoadError> {
    let series_before = store.num_series();
    let mut ld = Loader {
        store,
        unit,
        file: file_name,
        cache: HashMap::default(),
        last_key: Vec::with_capacity(256),
        last_id: None,
        eof_seen: false,
        stats: LoadStats::default(),
    };
    let mut buf: Vec<u8> = Vec::with_capacity(512);
    let mut lineno = 0u64;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(|source| LoadError::Io {
            file: file_name.to_string(),
            source,
        })?;
        if n == 0 {
            break;
        }
        lineno += 1;
        let mut line = buf.as_slice();
        if let [rest @ .., b'\n'] = line {
            line = rest;
        }
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        ld.line(line, lineno)?;
    }
    ld.stats.lines = lineno;
    if unit == TimestampUnit::Seconds && !ld.eof_seen {
        return Err(LoadError::Syntax {
            file: file_name.to_string(),
            line: lineno.max(1),
            col: 1,
            message: "OpenMetrics input must end with \"# EOF\" (is the file truncated?)".into(),
        });
    }
    let mut stats = ld.stats;
    stats.new_series = store.num_series() - series_before;
    Ok(stats)
}

struct Loader<'a> {
    store: &'a mut Store,
    unit: TimestampUnit,
    file: &'a str,
    /// Raw series text to id; different spellings of one series map to the same id.
    cache: HashMap<Box<[u8]>, SeriesId, ahash::RandomState>,
    last_key: Vec<u8>,
    last_id: Option<SeriesId>,
    eof_seen: bool,
    stats: LoadStats,
}

/// A syntax problem at a byte offset of the line.
type LineError = (usize, String);

impl Loader<'_> {
    fn line(&mut self, line: &[u8], lineno: u64) -> Result<(), LoadError> {
        self.parse_line(line).map_err(|(off, message)| LoadError::Syntax {
            file: self.file.to_string(),
            line: lineno,
            col: String::from_utf8_lossy(&line[..off.min(line.len())]).chars().count() + 1,
            message,
        })
    }

    fn parse_line(&mut self, line: &[u8]) -> Result<(), LineError> {
        let start = line.iter().position(|&c| c != b' ' && c != b'\t').unwrap_or(line.len());
        if start == line.len() {
            return Ok(());
        }
        if line[start] == b'#' {
            if line[start..].trim_ascii_end() == b"# EOF" {
                self.eof_seen = true;
            }
            // HELP, TYPE, UNIT and plain comments carry nothing the store keeps.
            return Ok(());
        }
        if self.eof_seen {
            return Err((start, "unexpected data after \"# EOF\"".into()));
        }

        let (key_end, id) = match self.same_series_as_before(&line[start..]) {
            Some(id) => (start + self.last_key.len(), id),
            None => {
                let key_end = series_end(line, start)?;
                let id = self
                    .series_id(&line[start..key_end])
                    .map_err(|(off, msg)| (start + off, msg))?;
                (key_end, id)
            }
        };

        let mut pos = key_end;
        if !matches!(line.get(pos), Some(b' ' | b'\t')) {
            let what = if pos < line.len() {
                "a space after the series"
            } else {
                "a value after the series"
            };
            return Err((pos, format!("expected {what}")));
        }
        pos = skip_blanks(line, pos);
        let (vstart, vend) = (pos, token_end(line, pos));
        if vstart == vend || line[vstart] == b'#' {
            return Err((vstart, "expected a value after the series".into()));
        }
        let value = parse_value(&line[vstart..vend]).ok_or_else(|| {
            (
                vstart,
                format!("invalid value {:?}", String::from_utf8_lossy(&line[vstart..vend])),
            )
        })?;

        pos = skip_blanks(line, vend);
        if pos == line.len() || line[pos] == b'#' {
            return Err((
                pos,
                "missing timestamp: backfilling needs a timestamp on every sample".into(),
            ));
        }
        let (tstart, tend) = (pos, token_end(line, pos));
        let tok = &line[tstart..tend];
        let t = match self.unit {
            TimestampUnit::Seconds => parse_seconds(tok),
            TimestampUnit::Millis => parse_millis(tok),
        }
        .map_err(|msg| (tstart, msg))?;

        pos = skip_blanks(line, tend);
        if pos < line.len() && line[pos] != b'#' {
            return Err((
                pos,
                "unexpected text after the timestamp (an exemplar starts with '#')".into(),
            ));
        }

        self.store.append_id(id, t, value);
        let st = &mut self.stats;
        st.samples += 1;
        st.min_time = Some(st.min_time.map_or(t, |m| m.min(t)));
        st.max_time = Some(st.max_time.map_or(t, |m| m.max(t)));
        Ok(())
    }

    /// The previous line's series if this line starts with its text and a blank: the scan that
    /// finds where the series text ends would stop at the same place, so it can be skipped.
    #[inline]
    fn same_series_as_before(&self, rest: &[u8]) -> Option<SeriesId> {
        let id = self.last_id?;
        let n = self.last_key.len();
        (rest.len() > n && matches!(rest[n], b' ' | b'\t') && rest[..n] == self.last_key[..]).then_some(id)
    }

    /// The series of a raw `name{labels}` text, parsing it only the first time it is seen.
    fn series_id(&mut self, key: &[u8]) -> Result<SeriesId, LineError> {
        let id = match self.cache.get(key) {
            Some(&id) => id,
            None => {
                let labels = parse_series(key)?;
                let id = self.store.get_or_create(&labels);
                self.cache.insert(key.into(), id);
                id
            }
        };
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_id = Some(id);
        Ok(id)
    }
}

#[inline]
fn skip_blanks(line: &[u8], mut i: usize) -> usize {
    while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
        i += 1;
    }
    i
}

#[inline]
fn token_end(line: &[u8], mut i: usize) -> usize {
    while i < line.len() && line[i] != b' ' && line[i] != b'\t' {
        i += 1;
    }
    i
}

/// The end of the series text starting at `i`: a name, then an optional `{...}` skipped with
/// its quoted values (which may contain `}` and escaped quotes).
fn series_end(line: &[u8], mut i: usize) -> Result<usize, LineError> {
    while i < line.len() && is_name_char(line[i]) {
        i += 1;
    }
    if line.get(i) != Some(&b'{') {
        return Ok(i);
    }
    let open = i;
    i += 1;
    while i < line.len() {
        match line[i] {
            b'"' => {
                let qstart = i;
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err((qstart, "unterminated quoted string".into())),
                        Some(b'\\') => i += 2,
                        Some(b'"') => break,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
            }
            b'}' => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err((open, "unclosed '{'".into()))
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// Parses `name`, `name{l="v",...}` or `{"name", l="v"}` (Prometheus 3 quoted names).
/// Errors carry the byte offset within `key`.
fn parse_series(key: &[u8]) -> Result<Labels, LineError> {
    let s = std::str::from_utf8(key).map_err(|e| (e.valid_up_to(), "series is not valid UTF-8".to_string()))?;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && is_name_char(b[i]) {
        i += 1;
    }
    let name = &s[..i];
    if !name.is_empty() && b[0].is_ascii_digit() {
        return Err((0, format!("invalid metric name {name:?}")));
    }
    let mut lb = LabelsBuilder::new(&Labels::empty());
    let mut have_name = !name.is_empty();
    if i == b.len() {
        if !have_name {
            return Err((0, "expected a metric name".into()));
        }
        lb.set(METRIC_NAME, name);
        return Ok(lb.build());
    }
    // series_end guarantees a '{' here and a closing '}' at the end.
    i += 1;
    let mut seen: Vec<String> = Vec::new();
    loop {
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b'}') => break,
            None => return Err((i, "unclosed '{'".into())),
            _ => {}
        }
        let lstart = i;
        let (lname, quoted) = if b[i] == b'"' {
            let (v, len) = unescape_value(s, i)?;
            i += len;
            (v, true)
        } else {
            let st = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if i == st || b[st].is_ascii_digit() {
                return Err((st, "expected a label name".into()));
            }
            (s[st..i].to_string(), false)
        };
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b'=') => {
                i = skip_ws(b, i + 1);
                if b.get(i) != Some(&b'"') {
                    return Err((i, format!("expected '\"' to start the value of label {lname:?}")));
                }
                let (value, len) = unescape_value(s, i)?;
                i += len;
                if lname == METRIC_NAME {
                    if have_name {
                        return Err((lstart, "metric name given twice".into()));
                    }
                    have_name = true;
                } else if seen.contains(&lname) {
                    return Err((lstart, format!("duplicate label name {lname:?}")));
                } else {
                    seen.push(lname.clone());
                }
                lb.set(&lname, &value);
            }
            Some(b',' | b'}') if quoted => {
                if have_name {
                    return Err((lstart, "metric name given twice".into()));
                }
                have_name = true;
                lb.set(METRIC_NAME, &lname);
            }
            _ => return Err((i, "expected '=' after label name".into())),
        }
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {}
            _ => return Err((i, "expected ',' or '}' after a label".into())),
        }
    }
    if !have_name {
        return Err((0, "expected a metric name".into()));
    }
    if !name.is_empty() {
        lb.set(METRIC_NAME, name);
    }
    Ok(lb.build())
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i
}

/// The double-quoted value at `i`, unescaping `\\`, `\"` and `\n` (any other escape is kept
/// verbatim, as Prometheus does). Returns the value and the bytes consumed.
fn unescape_value(s: &str, i: usize) -> Result<(String, usize), LineError> {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut j = i + 1;
    let mut run = j;
    while j < b.len() {
        match b[j] {
            b'"' => {
                out.push_str(&s[run..j]);
                return Ok((out, j + 1 - i));
            }
            b'\\' => {
                out.push_str(&s[run..j]);
                match b.get(j + 1) {
                    Some(b'\\') => out.push('\\'),
                    Some(b'"') => out.push('"'),
                    Some(b'n') => out.push('\n'),
                    Some(_) => {
                        run = j;
                        j += 1;
                        continue;
                    }
                    None => break,
                }
                j += 2;
                run = j;
            }
            _ => j += 1,
        }
    }
    Err((i, "unterminated quoted string".into()))
}

/// A sample value: integers take a fast path (the common counter case), everything else goes
/// through the standard float parser, which accepts `NaN`, `+Inf`, `-Inf` and exponents.
#[inline]
fn parse_value(tok: &[u8]) -> Option<f64> {
    if tok.len() <= 15 && tok.iter().all(u8::is_ascii_digit) {
        return Some(tok.iter().fold(0u64, |a, &d| a * 10 + (d - b'0') as u64) as f64);
    }
    let v: f64 = std::str::from_utf8(tok).ok()?.parse().ok()?;
    Some(if v.is_nan() { f64::from_bits(NORMAL_NAN_BITS) } else { v })
}

/// OpenMetrics seconds to ms, truncating like Prometheus' `int64(ts * 1000)`.
#[inline]
fn parse_seconds(tok: &[u8]) -> Result<i64, String> {
    // Whole seconds below 10^12 are exact either way: skip the float parser.
    if tok.len() <= 12 && !tok.is_empty() && tok.iter().all(u8::is_ascii_digit) {
        return Ok(tok.iter().fold(0i64, |a, &d| a * 10 + (d - b'0') as i64) * 1000);
    }
    let text = String::from_utf8_lossy(tok);
    let ts: f64 = text.parse().map_err(|_| format!("invalid timestamp {text:?}"))?;
    if !ts.is_finite() {
        return Err(format!("invalid timestamp {text:?}"));
    }
    Ok((ts * 1000.0) as i64)
}

/// Prometheus text format: integer milliseconds.
#[inline]
fn parse_millis(tok: &[u8]) -> Result<i64, String> {
    let text = std::str::from_utf8(tok).map_err(|_| "invalid timestamp".to_string())?;
    text.parse::<i64>()
        .map_err(|_| format!("invalid timestamp {text:?} (the Prometheus text format wants integer milliseconds)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Matcher;

    fn load(text: &str, unit: TimestampUnit) -> Result<(Store, LoadStats), LoadError> {
        let mut store = Store::new();
        let stats = load_text(&mut store, text.as_bytes(), "test.om", unit)?;
        Ok((store, stats))
    }

    fn all_samples(store: &Store, ms: &[Matcher]) -> Vec<Vec<(i64, f64)>> {
        store
            .select_ids(ms)
            .into_iter()
            .map(|id| {
                let mut out = Vec::new();
                store.samples(id, i64::MIN, i64::MAX, &mut out);
                out
            })
            .collect()
    }

    const SAMPLE: &str = r#"# HELP http_requests Total HTTP requests handled.
# TYPE http_requests counter
# UNIT http_requests requests
http_requests_total{cluster="c1",namespace="ns",code="200"} 1701523 1735689600
http_requests_total{cluster="c1",namespace="ns",code="200"} 1701929 1735689615 # {trace_id="abc"} 1 1735689614
http_requests_total{cluster="c1",namespace="ns",code="500"} 4 1735689600.5
plain 3.25 1735689600
esc{a="x\"y\\z\nw",b="{}, =}"} NaN 1735689600
esc{a="x\"y\\z\nw",b="{}, =}"} +Inf 1735689615
esc{a="x\"y\\z\nw",b="{}, =}"} -Inf 1735689630
http_requests_total{namespace="ns",cluster="c1",code="200"} 1702262 1735689630
{"my.metric", "dotted.label"="v"} 1e3 1735689600
# EOF
"#;

    #[test]
    fn loads_openmetrics() {
        let (store, stats) = load(SAMPLE, TimestampUnit::Seconds).unwrap();
        assert_eq!(stats.samples, 9);
        assert_eq!(stats.new_series, 5);
        assert_eq!(stats.lines, 13);
        assert_eq!(stats.min_time, Some(1_735_689_600_000));
        assert_eq!(stats.max_time, Some(1_735_689_630_000));
        assert_eq!(store.num_series(), 5);

        let ok = all_samples(&store, &[Matcher::equal("code", "200")]);
        assert_eq!(
            ok,
            [vec![
                (1_735_689_600_000, 1701523.0),
                (1_735_689_615_000, 1701929.0),
                (1_735_689_630_000, 1702262.0)
            ]]
        );
        let frac = all_samples(&store, &[Matcher::equal("code", "500")]);
        assert_eq!(frac, [vec![(1_735_689_600_500, 4.0)]]);

        let esc = all_samples(
            &store,
            &[Matcher::equal("a", "x\"y\\z\nw"), Matcher::equal("b", "{}, =}")],
        );
        assert_eq!(esc.len(), 1);
        assert_eq!(esc[0][0].1.to_bits(), NORMAL_NAN_BITS);
        assert_eq!(esc[0][1].1, f64::INFINITY);
        assert_eq!(esc[0][2].1, f64::NEG_INFINITY);

        let dotted = all_samples(
            &store,
            &[
                Matcher::equal("__name__", "my.metric"),
                Matcher::equal("dotted.label", "v"),
            ],
        );
        assert_eq!(dotted, [vec![(1_735_689_600_000, 1000.0)]]);
        assert_eq!(
            all_samples(&store, &[Matcher::equal("__name__", "plain")]),
            [vec![(1_735_689_600_000, 3.25)]]
        );
    }

    #[test]
    fn loads_prometheus_text_in_millis() {
        let text = "# TYPE up gauge\nup{job=\"a\"} 1 1000\r\nup{job=\"a\"} 0 2000\n\n  up{job=\"b\"}\t1\t-5\n";
        let (store, stats) = load(text, TimestampUnit::Millis).unwrap();
        assert_eq!(stats.samples, 3);
        assert_eq!(
            all_samples(&store, &[Matcher::equal("job", "a")]),
            [vec![(1000, 1.0), (2000, 0.0)]]
        );
        assert_eq!(all_samples(&store, &[Matcher::equal("job", "b")]), [vec![(-5, 1.0)]]);
        let e = load("up 1 1.5\n", TimestampUnit::Millis).unwrap_err().to_string();
        assert!(e.starts_with("test.om:1:6: invalid timestamp"), "{e}");
    }

    fn err(text: &str) -> String {
        match load(text, TimestampUnit::Seconds) {
            Ok(_) => panic!("no error for {text:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn errors_have_positions() {
        assert_eq!(err("a 1 1\nb{x 1 2\n# EOF\n"), "test.om:2:2: unclosed '{'");
        assert_eq!(
            err("a 1 1\nb{x} 1 2\n# EOF\n"),
            "test.om:2:4: expected '=' after label name"
        );
        assert_eq!(
            err("b{x=\"1\" y=\"2\"} 1 2\n# EOF\n"),
            "test.om:1:9: expected ',' or '}' after a label"
        );
        assert_eq!(
            err("up 1\n# EOF\n"),
            "test.om:1:5: missing timestamp: backfilling needs a timestamp on every sample"
        );
        assert_eq!(
            err("up 1 # {a=\"b\"} 1\n# EOF\n"),
            "test.om:1:6: missing timestamp: backfilling needs a timestamp on every sample"
        );
        assert_eq!(err("up abc 1\n# EOF\n"), "test.om:1:4: invalid value \"abc\"");
        assert_eq!(err("up 1 NaN\n# EOF\n"), "test.om:1:6: invalid timestamp \"NaN\"");
        assert_eq!(
            err("up 1 2 3\n# EOF\n"),
            "test.om:1:8: unexpected text after the timestamp (an exemplar starts with '#')"
        );
        assert_eq!(
            err("up{a=\"b\"}1 2\n# EOF\n"),
            "test.om:1:10: expected a space after the series"
        );
        assert_eq!(err("up\n# EOF\n"), "test.om:1:3: expected a value after the series");
        assert_eq!(err("up{a=\"b} 1 2\n# EOF\n"), "test.om:1:6: unterminated quoted string");
        assert_eq!(err("{a=\"b\"} 1 2\n# EOF\n"), "test.om:1:1: expected a metric name");
        assert_eq!(
            err("up{a=\"1\",a=\"2\"} 1 2\n# EOF\n"),
            "test.om:1:10: duplicate label name \"a\""
        );
        assert_eq!(
            err("up 1 2\n# EOF\nup 1 3\n"),
            "test.om:3:1: unexpected data after \"# EOF\""
        );
        assert_eq!(
            err("up 1 2\n"),
            "test.om:1:1: OpenMetrics input must end with \"# EOF\" (is the file truncated?)"
        );
        // Columns count characters, not bytes.
        assert_eq!(
            err("up{a=\"é\",b} 1 2\n# EOF\n"),
            "test.om:1:11: expected '=' after label name"
        );
    }

    #[test]
    fn out_of_order_lines_and_repeats() {
        let text = "m 1 30\nm 2 10\nm 3 20\nm 4 10\n# EOF\n";
        let (store, stats) = load(text, TimestampUnit::Seconds).unwrap();
        assert_eq!(stats.samples, 4);
        assert_eq!(
            all_samples(&store, &[]),
            [vec![(10_000, 4.0), (20_000, 3.0), (30_000, 1.0)]]
        );
    }

    #[test]
    fn load_file_detects_the_dialect() {
        let dir = tempfile::tempdir().unwrap();
        let om = dir.path().join("a.om");
        std::fs::write(&om, "m 1 2\n# EOF\n").unwrap();
        let prom = dir.path().join("a.prom");
        std::fs::write(&prom, "m 1 2\n").unwrap();
        assert_eq!(detect_unit(&om).unwrap(), TimestampUnit::Seconds);
        assert_eq!(detect_unit(&prom).unwrap(), TimestampUnit::Millis);
        let mut store = Store::new();
        load_file(&mut store, &om).unwrap();
        load_file(&mut store, &prom).unwrap();
        assert_eq!(all_samples(&store, &[]), [vec![(2, 1.0), (2000, 1.0)]]);
        let e = load_file(&mut store, dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, LoadError::Io { .. }));
    }

    /// Loads `$WATCHFIRE_OM_FILE` (e.g. from gen_openmetrics.py) and reports load speed,
    /// compression and a 5m-window read over all http_requests_total series:
    /// `WATCHFIRE_OM_FILE=/tmp/x.om cargo test --release --lib load_big_file -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn load_big_file() {
        let Ok(path) = std::env::var("WATCHFIRE_OM_FILE") else {
            eprintln!("WATCHFIRE_OM_FILE not set");
            return;
        };
        let rss = || {
            std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS")).map(str::to_string))
                .unwrap_or_default()
        };
        let t0 = std::time::Instant::now();
        let mut store = Store::new();
        let stats = load_file(&mut store, &path).unwrap();
        let dt = t0.elapsed().as_secs_f64();
        eprintln!(
            "loaded {} samples, {} series in {dt:.1}s ({:.1}M samples/s); {:.3} bytes/sample; {}",
            stats.samples,
            store.num_series(),
            stats.samples as f64 / dt / 1e6,
            store.bytes_per_sample(),
            rss()
        );
        let maxt = stats.max_time.unwrap_or(0);
        let rounds = std::env::var("WATCHFIRE_QUERY_ROUNDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3);
        for _ in 0..rounds {
            let t1 = std::time::Instant::now();
            let ids = store.select_ids(&[Matcher::equal("__name__", "http_requests_total")]);
            let t_sel = t1.elapsed().as_secs_f64() * 1e3;
            let mut out = Vec::new();
            let mut n = 0;
            for &id in &ids {
                out.clear();
                store.samples(id, maxt - 300_000, maxt, &mut out);
                n += out.len();
            }
            eprintln!(
                "select {} series in {t_sel:.1} ms; read {n} samples (5m) in {:.1} ms",
                ids.len(),
                t1.elapsed().as_secs_f64() * 1e3
            );
        }
    }

    #[test]
    fn value_parsing_matches_float_parser() {
        for s in [
            "0",
            "123456789012345",
            "1234567890123456789",
            "1.5",
            "-2",
            "1e3",
            ".5",
            "+Inf",
            "-Inf",
        ] {
            let fast = parse_value(s.as_bytes()).unwrap();
            let slow: f64 = s.parse().unwrap();
            assert_eq!(fast.to_bits(), slow.to_bits(), "{s}");
        }
        assert_eq!(parse_seconds(b"1735689600.001").unwrap(), 1_735_689_600_001);
        assert_eq!(parse_seconds(b"-1.5").unwrap(), -1500);
        assert_eq!(parse_seconds(b"1735689600").unwrap(), 1_735_689_600_000);
    }
}
