//! Pushes critical GPU events (drain/reboot XIDs, a GPU fallen off the bus) as alerts to an
//! Alertmanager-compatible `POST /api/v2/alerts` endpoint (watchfire's ingest or any Alertmanager),
//! through a bounded queue retried with exponential backoff.
//!
//! The body is Alertmanager's `postableAlerts`: a JSON array of
//! `{"labels":{..},"annotations":{..},"startsAt":..,"endsAt":..,"generatorURL":..}`.
//! Plain `http://` only: in a cluster the probe talks to a Service; put TLS in a mesh or proxy.

use crate::metrics::{BaseLabels, GpuIdent, PushStats};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where and how to push.
#[derive(Clone, Debug)]
pub struct PushConfig {
    pub url: HttpUrl,
    pub bearer_token: Option<String>,
    pub queue_size: usize,
    /// `endsAt - startsAt`: how long a receiver keeps the alert firing without a re-send.
    pub alert_ttl: Duration,
    pub runbook_url: Option<String>,
}

/// A parsed `http://host[:port][/path]` URL.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpUrl {
    /// Host as written (IPv6 in brackets), for the Host header.
    pub authority: String,
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl HttpUrl {
    /// Parses a push URL. A URL with no path (or "/") gets Alertmanager's `/api/v2/alerts`.
    pub fn parse(s: &str) -> Result<HttpUrl, String> {
        let rest = s.strip_prefix("http://").ok_or_else(|| {
            if s.starts_with("https://") {
                format!("{s:?}: https is not supported; use http:// to an in-cluster Service (TLS via a mesh or proxy)")
            } else {
                format!("{s:?}: expected http://host[:port][/path]")
            }
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let path = if path.is_empty() || path == "/" {
            "/api/v2/alerts"
        } else {
            path
        };
        let (host, port) = if let Some(h) = authority.strip_prefix('[') {
            let (h, after) = h
                .split_once(']')
                .ok_or_else(|| format!("{s:?}: unterminated [ in host"))?;
            (h.to_string(), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(format!("{s:?}: no host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p.parse().map_err(|_| format!("{s:?}: bad port {p:?}"))?,
        };
        Ok(HttpUrl {
            authority: authority.to_string(),
            host,
            port,
            path: path.to_string(),
        })
    }
}

/// What happened, for the alert.
#[derive(Clone, Debug)]
pub enum EventKind {
    Xid(u64),
    GpuLost,
}

/// The bounded queue of alert bodies and the thread that delivers them.
pub struct Pusher {
    cfg: PushConfig,
    base: BaseLabels,
    queue: Mutex<Queue>,
    ready: Condvar,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<(u64, String)>,
    next_seq: u64,
    stats: PushStats,
}

const BATCH: usize = 64;
const BACKOFF_START: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

impl Pusher {
    pub fn new(cfg: PushConfig, base: BaseLabels) -> Pusher {
        let stats = PushStats {
            enabled: true,
            ..Default::default()
        };
        Pusher {
            cfg,
            base,
            queue: Mutex::new(Queue {
                stats,
                ..Default::default()
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The counters, for /metrics.
    pub fn stats(&self) -> PushStats {
        let q = self.lock();
        PushStats {
            queued: q.items.len() as u64,
            ..q.stats.clone()
        }
    }

    /// Queues an alert for `ident`; the oldest queued alert goes if the queue is full.
    pub fn push(&self, ident: &GpuIdent, kind: &EventKind, at: SystemTime) {
        let body = alert_json(&self.base, &self.cfg, ident, kind, at);
        let mut q = self.lock();
        while q.items.len() >= self.cfg.queue_size.max(1) {
            q.items.pop_front();
            q.stats.dropped += 1;
        }
        let seq = q.next_seq;
        q.next_seq += 1;
        q.items.push_back((seq, body));
        drop(q);
        self.ready.notify_one();
    }

    /// Delivers queued alerts forever.
    pub fn run(&self) {
        let mut backoff = BACKOFF_START;
        loop {
            let (body, n, last_seq) = {
                let mut q = self.lock();
                while q.items.is_empty() {
                    q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
                }
                let batch: Vec<&str> = q.items.iter().take(BATCH).map(|(_, b)| b.as_str()).collect();
                let last_seq = q.items.get(batch.len() - 1).map_or(0, |(s, _)| *s);
                (format!("[{}]", batch.join(",")), batch.len() as u64, last_seq)
            };
            let result = post(&self.cfg.url, &body, self.cfg.bearer_token.as_deref());
            let mut q = self.lock();
            match result {
                Ok(code) if (200..300).contains(&code) => {
                    q.items.retain(|(s, _)| *s > last_seq);
                    q.stats.sent += n;
                    backoff = BACKOFF_START;
                }
                Ok(code) if (400..500).contains(&code) && code != 408 && code != 429 => {
                    q.items.retain(|(s, _)| *s > last_seq);
                    q.stats.rejected += n;
                    eprintln!(
                        "node-probe: push: {} refused {n} alert(s) with HTTP {code}; dropped",
                        self.url_str()
                    );
                }
                other => {
                    q.stats.failed += 1;
                    let why = match other {
                        Ok(code) => format!("HTTP {code}"),
                        Err(e) => e,
                    };
                    eprintln!("node-probe: push: {}: {why}; retrying in {backoff:?}", self.url_str());
                    drop(q);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    fn url_str(&self) -> String {
        format!("http://{}{}", self.cfg.url.authority, self.cfg.url.path)
    }
}

/// POSTs a JSON body; the HTTP status code, or why there is none.
pub fn post(url: &HttpUrl, body: &str, bearer_token: Option<&str>) -> Result<u16, String> {
    let addrs = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("resolve {}: {e}", url.host))?;
    let mut last_err = format!("{}: no address", url.host);
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_err = format!("connect {addr}: {e}"),
        }
    }
    let mut s = stream.ok_or(last_err)?;
    let io = |e: std::io::Error| e.to_string();
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(io)?;
    s.set_write_timeout(Some(Duration::from_secs(5))).map_err(io)?;
    let _ = s.set_nodelay(true);
    let auth = bearer_token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: node-probe/{}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{auth}Connection: close\r\n\r\n",
        url.path,
        url.authority,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    s.write_all(head.as_bytes()).map_err(io)?;
    s.write_all(body.as_bytes()).map_err(io)?;
    s.flush().map_err(io)?;
    let mut buf = [0u8; 512];
    let mut got = Vec::new();
    while !got.windows(2).any(|w| w == b"\r\n") && got.len() < 4096 {
        let n = s.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&got);
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|_| line.starts_with("HTTP/"))
        .ok_or_else(|| format!("not an HTTP response: {:?}", line.lines().next().unwrap_or("")))?;
    Ok(code)
}

/// One Alertmanager `postableAlert` as JSON.
pub fn alert_json(base: &BaseLabels, cfg: &PushConfig, g: &GpuIdent, kind: &EventKind, at: SystemTime) -> String {
    let gpu = g.index.to_string();
    let mut labels: Vec<(&str, String)> = vec![
        ("alertname", "GPUHardwareFailure".into()),
        ("severity", "page".into()),
        ("layer", "accelerator".into()),
        ("source", "node-probe".into()),
        ("node", base.node.clone()),
        ("gpu", gpu),
        ("uuid", g.uuid.clone()),
        ("model", g.model.clone()),
    ];
    if !base.cluster.is_empty() {
        labels.push(("cluster", base.cluster.clone()));
    }
    let where_ = format!("GPU {} ({}, {}) on node {}", g.index, g.uuid, g.model, base.node);
    let (summary, description) = match kind {
        EventKind::Xid(x) => {
            let (class, meaning) = crate::xid::classify(*x);
            labels.push(("reason", "xid".into()));
            labels.push(("xid", x.to_string()));
            labels.push(("xid_class", class.as_str().into()));
            let action = match class {
                crate::xid::XidClass::Reboot => {
                    "NVIDIA asks for a power cycle of the machine: drain the node and replace it"
                }
                _ => "the GPU needs at least a reset: drain the node and replace it",
            };
            (
                format!("XID {x} on {where_}: {meaning}"),
                format!("{meaning} (XID {x}, class {}); {action}.", class.as_str()),
            )
        }
        EventKind::GpuLost => {
            labels.push(("reason", "gpu_lost".into()));
            (
                format!("{where_} has fallen off the bus"),
                "NVML answers GPU_IS_LOST for this GPU: it is inaccessible until the machine is power-cycled; drain the node and replace it."
                    .to_string(),
            )
        }
    };
    let mut annotations = vec![("summary", summary), ("description", description)];
    if !g.pci_bus_id.is_empty() {
        annotations.push(("pci_bus_id", g.pci_bus_id.clone()));
    }
    if let Some(r) = &cfg.runbook_url {
        annotations.push(("runbook_url", r.clone()));
    }
    let mut out = String::with_capacity(512);
    out.push_str("{\"labels\":");
    json_object(&labels, &mut out);
    out.push_str(",\"annotations\":");
    json_object(&annotations, &mut out);
    out.push_str(",\"startsAt\":\"");
    out.push_str(&rfc3339(at));
    out.push_str("\",\"endsAt\":\"");
    out.push_str(&rfc3339(at + cfg.alert_ttl));
    out.push_str("\",\"generatorURL\":\"\"}");
    out
}

fn json_object(pairs: &[(&str, String)], out: &mut String) {
    out.push('{');
    for (i, (k, v)) in pairs.iter().filter(|(_, v)| !v.is_empty()).enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(k, out);
        out.push(':');
        json_string(v, out);
    }
    out.push('}');
}

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = HttpUrl::parse("http://watchfire.monitoring:9093").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("watchfire.monitoring", 9093, "/api/v2/alerts")
        );
        let u = HttpUrl::parse("http://[::1]:8080/ingest/alerts").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str(), u.authority.as_str()),
            ("::1", 8080, "/ingest/alerts", "[::1]:8080")
        );
        assert_eq!(HttpUrl::parse("http://am/").unwrap().port, 80);
        assert!(HttpUrl::parse("https://am")
            .unwrap_err()
            .contains("https is not supported"));
        assert!(HttpUrl::parse("am:9093").is_err());
        assert!(HttpUrl::parse("http://am:x").is_err());
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(1_709_251_199_123)),
            "2024-02-29T23:59:59.123Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn alert_body_is_alertmanager_json() {
        let base = BaseLabels {
            node: "ip-10-0-0-1".into(),
            cluster: "prod".into(),
        };
        let cfg = PushConfig {
            url: HttpUrl::parse("http://am").unwrap(),
            bearer_token: None,
            queue_size: 4,
            alert_ttl: Duration::from_secs(3600),
            runbook_url: None,
        };
        let g = GpuIdent {
            index: 3,
            uuid: "GPU-x".into(),
            model: "NVIDIA \"H100\"".into(),
            pci_bus_id: String::new(),
        };
        let j = alert_json(&base, &cfg, &g, &EventKind::Xid(79), UNIX_EPOCH);
        assert!(
            j.starts_with("{\"labels\":{\"alertname\":\"GPUHardwareFailure\",\"severity\":\"page\""),
            "{j}"
        );
        assert!(j.contains("\"model\":\"NVIDIA \\\"H100\\\"\""), "{j}");
        assert!(j.contains("\"xid\":\"79\",\"xid_class\":\"reboot\""), "{j}");
        assert!(
            j.contains("\"startsAt\":\"1970-01-01T00:00:00.000Z\",\"endsAt\":\"1970-01-01T01:00:00.000Z\""),
            "{j}"
        );
        assert!(!j.contains("pci_bus_id"), "{j}");
    }

    #[test]
    fn full_queue_drops_oldest() {
        let cfg = PushConfig {
            url: HttpUrl::parse("http://127.0.0.1:1").unwrap(),
            bearer_token: None,
            queue_size: 2,
            alert_ttl: Duration::from_secs(60),
            runbook_url: None,
        };
        let p = Pusher::new(cfg, BaseLabels::default());
        for x in [48, 74, 79] {
            p.push(&GpuIdent::default(), &EventKind::Xid(x), UNIX_EPOCH);
        }
        let s = p.stats();
        assert_eq!((s.queued, s.dropped), (2, 1));
        assert!(p.lock().items[0].1.contains("\"xid\":\"74\""));
    }
}
