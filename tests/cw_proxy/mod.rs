//! CloudWatch's wire protocols, bridged for moto server.
//!
//! aws-sdk-cloudwatch speaks Smithy RPC v2 CBOR (`POST /service/GraniteServiceVersion20100801/
//! operation/{Op}`, CBOR bodies); moto serves CloudWatch over the Query and JSON 1.0 protocols
//! only (getmoto/moto#9195: no CBOR support planned). Both are document protocols over the same
//! shapes, so this loopback proxy re-encodes each request body from CBOR to JSON, forwards it to
//! moto as JSON 1.0 (`X-Amz-Target: GraniteServiceVersion20100801.{Op}`), and re-encodes moto's
//! answer back to CBOR (timestamps as tag 1, `Values` as doubles). moto does all the CloudWatch
//! work; the proxy also records each call (operation, number of MetricDataQueries) as it went
//! over the wire.
// Each test binary includes this module and uses a subset of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Number, Value};

/// The proxy: point the SDK's endpoint at `endpoint`.
pub struct CwProxy {
    pub endpoint: String,
    /// (operation, MetricDataQueries in the request) for every call, in order.
    pub calls: Arc<Mutex<Vec<(String, usize)>>>,
}

impl CwProxy {
    /// Starts a proxy in front of the moto server at `moto` (`http://127.0.0.1:PORT`).
    pub fn start(moto: &str) -> CwProxy {
        let upstream = moto.trim_start_matches("http://").to_string();
        let l = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let endpoint = format!("http://{}", l.local_addr().unwrap());
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c2 = Arc::clone(&calls);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let up = upstream.clone();
                let calls = Arc::clone(&c2);
                std::thread::spawn(move || {
                    let _ = handle(conn, &up, &calls);
                });
            }
        });
        CwProxy { endpoint, calls }
    }

    /// How many calls of `op` went to moto.
    pub fn count(&self, op: &str) -> usize {
        self.calls.lock().unwrap().iter().filter(|c| c.0 == op).count()
    }

    /// MetricDataQueries per GetMetricData call.
    pub fn query_counts(&self) -> Vec<usize> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.0 == "GetMetricData")
            .map(|c| c.1)
            .collect()
    }
}

/// An HTTP message: first line, headers (lower-case names), body.
type Message = (String, Vec<(String, String)>, Vec<u8>);

/// Reads one HTTP request or response head and body.
fn read_message(r: &mut BufReader<TcpStream>) -> std::io::Result<Message> {
    let mut first = String::new();
    r.read_line(&mut first)?;
    let mut headers = Vec::new();
    let mut len: Option<usize> = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            if k == "content-length" {
                len = v.parse().ok();
            }
            headers.push((k, v));
        }
    }
    let mut body = Vec::new();
    match len {
        Some(n) => {
            body.resize(n, 0);
            r.read_exact(&mut body)?;
        }
        None => {
            r.read_to_end(&mut body)?;
        }
    }
    Ok((first.trim_end().to_string(), headers, body))
}

fn handle(conn: TcpStream, upstream: &str, calls: &Mutex<Vec<(String, usize)>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let (line, headers, body) = read_message(&mut reader)?;
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let op = path.rsplit('/').next().unwrap_or("").to_string();
    let json = if body.is_empty() {
        Value::Object(Map::new())
    } else {
        decode(&body, &mut 0)
    };
    let queries = json["MetricDataQueries"].as_array().map_or(0, Vec::len);
    calls.lock().unwrap().push((op.clone(), queries));

    let payload = serde_json::to_vec(&json).unwrap();
    let mut up = TcpStream::connect(upstream)?;
    let mut req = format!(
        "POST / HTTP/1.1\r\nHost: {upstream}\r\nContent-Type: application/x-amz-json-1.0\r\nX-Amz-Target: GraniteServiceVersion20100801.{op}\r\nContent-Length: {}\r\nConnection: close\r\n",
        payload.len()
    );
    for (k, v) in &headers {
        if matches!(k.as_str(), "authorization" | "x-amz-date" | "x-amz-security-token") {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    req.push_str("\r\n");
    up.write_all(req.as_bytes())?;
    up.write_all(&payload)?;
    let mut ur = BufReader::new(up);
    let (status_line, _, ubody) = read_message(&mut ur)?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let answer: Value = serde_json::from_slice(&ubody).unwrap_or_else(|_| Value::Object(Map::new()));
    let mut out = Vec::new();
    encode(&answer, None, &mut out);
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/cbor\r\nsmithy-protocol: rpc-v2-cbor\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        out.len()
    )?;
    conn.write_all(&out)?;
    conn.flush()
}

fn read_uint(b: &[u8], i: &mut usize, info: u8) -> u64 {
    let take = |i: &mut usize, n: usize| {
        let mut v = 0u64;
        for k in 0..n {
            v = (v << 8) | u64::from(b[*i + k]);
        }
        *i += n;
        v
    };
    match info {
        0..=23 => u64::from(info),
        24 => take(i, 1),
        25 => take(i, 2),
        26 => take(i, 4),
        27 => take(i, 8),
        _ => u64::MAX, // indefinite length
    }
}

fn half_to_f64(h: u16) -> f64 {
    let exp = (h >> 10) & 0x1f;
    let mant = f64::from(h & 0x3ff);
    let v = match exp {
        0 => mant * 2f64.powi(-24),
        31 => {
            if mant == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        e => (1.0 + mant / 1024.0) * 2f64.powi(i32::from(e) - 15),
    };
    if h & 0x8000 != 0 {
        -v
    } else {
        v
    }
}

fn num(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// One CBOR data item at `b[*i..]` as JSON (tags dropped: tag 1 becomes its epoch seconds).
fn decode(b: &[u8], i: &mut usize) -> Value {
    let ib = b[*i];
    *i += 1;
    let (major, info) = (ib >> 5, ib & 0x1f);
    match major {
        0 => Value::Number(read_uint(b, i, info).into()),
        1 => Value::Number((-1 - read_uint(b, i, info) as i64).into()),
        2 | 3 => {
            let mut bytes = Vec::new();
            if info == 31 {
                while b[*i] != 0xff {
                    let s = decode(b, i);
                    bytes.extend_from_slice(s.as_str().unwrap_or("").as_bytes());
                }
                *i += 1;
            } else {
                let n = read_uint(b, i, info) as usize;
                bytes.extend_from_slice(&b[*i..*i + n]);
                *i += n;
            }
            Value::String(String::from_utf8_lossy(&bytes).into_owned())
        }
        4 => {
            let mut v = Vec::new();
            if info == 31 {
                while b[*i] != 0xff {
                    v.push(decode(b, i));
                }
                *i += 1;
            } else {
                for _ in 0..read_uint(b, i, info) {
                    v.push(decode(b, i));
                }
            }
            Value::Array(v)
        }
        5 => {
            let mut m = Map::new();
            let mut entry = |i: &mut usize| {
                let k = decode(b, i);
                let v = decode(b, i);
                m.insert(k.as_str().unwrap_or("").to_string(), v);
            };
            if info == 31 {
                while b[*i] != 0xff {
                    entry(i);
                }
                *i += 1;
            } else {
                for _ in 0..read_uint(b, i, info) {
                    entry(i);
                }
            }
            Value::Object(m)
        }
        6 => {
            read_uint(b, i, info);
            decode(b, i)
        }
        _ => match info {
            20 => Value::Bool(false),
            21 => Value::Bool(true),
            25 => num(half_to_f64(read_uint(b, i, 25) as u16)),
            26 => num(f64::from(f32::from_bits(read_uint(b, i, 26) as u32))),
            27 => num(f64::from_bits(read_uint(b, i, 27))),
            _ => Value::Null,
        },
    }
}

fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if n <= 0xff {
        out.extend([m | 24, n as u8]);
    } else if n <= 0xffff {
        out.push(m | 25);
        out.extend((n as u16).to_be_bytes());
    } else if n <= 0xffff_ffff {
        out.push(m | 26);
        out.extend((n as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend(n.to_be_bytes());
    }
}

fn encode_f64(out: &mut Vec<u8>, f: f64) {
    out.push(0xfb);
    out.extend(f.to_bits().to_be_bytes());
}

/// JSON as CBOR; `key` is the member the value belongs to (timestamps and doubles by name).
fn encode(v: &Value, key: Option<&str>, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(0xf6),
        Value::Bool(b) => out.push(if *b { 0xf5 } else { 0xf4 }),
        Value::Number(n) => match key {
            Some("Timestamps") | Some("Timestamp") => {
                out.push(0xc1);
                encode_f64(out, n.as_f64().unwrap_or(0.0));
            }
            Some("Values") | Some("Value") => encode_f64(out, n.as_f64().unwrap_or(0.0)),
            _ => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => head(out, 0, u),
                (None, Some(i)) => head(out, 1, (-1 - i) as u64),
                _ => encode_f64(out, n.as_f64().unwrap_or(0.0)),
            },
        },
        Value::String(s) => {
            head(out, 3, s.len() as u64);
            out.extend(s.as_bytes());
        }
        Value::Array(a) => {
            head(out, 4, a.len() as u64);
            for x in a {
                encode(x, key, out);
            }
        }
        Value::Object(m) => {
            head(out, 5, m.len() as u64);
            for (k, x) in m {
                head(out, 3, k.len() as u64);
                out.extend(k.as_bytes());
                encode(x, Some(k), out);
            }
        }
    }
}

#[test]
fn cbor_round_trip() {
    let v = serde_json::json!({"a": [1, -2, "x", true, null, {"b": 2.5}], "Timestamps": [1700000000], "Values": [1]});
    let mut out = Vec::new();
    encode(&v, None, &mut out);
    let back = decode(&out, &mut 0);
    assert_eq!(back["a"], v["a"]);
    assert_eq!(back["Timestamps"][0].as_f64(), Some(1_700_000_000.0));
    assert_eq!(back["Values"][0].as_f64(), Some(1.0));
    assert_eq!(half_to_f64(0x3c00), 1.0);
    assert_eq!(half_to_f64(0xc000), -2.0);
}
