//! What the peer benchmarks share: child processes that are stopped when dropped, free ports,
//! environment knobs, running a command, a log's tail, a process's memory from /proc, a small
//! HTTP client for loopback, and the text exposition format of the peers' /metrics.
// Each benchmark includes this module and uses a subset of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// A child process that is stopped (TERM, then KILL after 10 s) when the guard is dropped.
pub struct ChildGuard {
    pub name: &'static str,
    pub child: Option<Child>,
}

impl ChildGuard {
    pub fn new(name: &'static str, child: Child) -> Self {
        ChildGuard {
            name,
            child: Some(child),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        if c.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if c.try_wait().ok().flatten().is_some() {
                eprintln!("[{}] stopped (pid {})", self.name, c.id());
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        eprintln!("[{}] killed (pid {})", self.name, c.id());
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An environment variable, unless unset or empty.
pub fn env_nonempty(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// A free TCP port on loopback.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs `cmd` to completion; an error unless it exits 0.
pub fn run_cmd(what: &str, cmd: &mut Command) -> Result<Duration> {
    eprintln!("[run] {what}: {cmd:?}");
    let t0 = Instant::now();
    let st = cmd.status().with_context(|| format!("starting {what}"))?;
    if !st.success() {
        bail!("{what} failed: {st}");
    }
    Ok(t0.elapsed())
}

/// The last `n` lines of a file (a log, for error messages).
pub fn tail(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// VmRSS and VmHWM (peak) of a process (a pid, or `self`), MiB.
pub fn rss_mib(pid: impl std::fmt::Display) -> (f64, f64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (get("VmRSS:"), get("VmHWM:"))
}
/// CPU time (user + system, s) the process has used so far, from `/proc/PID/stat`; NaN when gone.
pub fn cpu_seconds(pid: impl std::fmt::Display) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces: fields are counted after its closing paren.
    let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    match (ticks(11), ticks(12)) {
        (Some(u), Some(st)) if hz > 0.0 => (u + st) / hz,
        _ => f64::NAN,
    }
}

/// GET over HTTP/1.0 on loopback: status and body.
pub fn http_get(port: u16, path: &str) -> Result<(u16, Vec<u8>)> {
    http_req(port, "GET", path, None, Duration::from_secs(120))
}

/// POST `body` (JSON) over HTTP/1.0 on loopback.
pub fn http_post(port: u16, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>)> {
    http_req(port, "POST", path, Some(body), Duration::from_secs(60))
}

/// A request over HTTP/1.0 on loopback with a read timeout: status and body (the servers the
/// benchmarks talk to answer HTTP/1.0 without chunking).
pub fn http_req(port: u16, method: &str, path: &str, body: Option<&[u8]>, timeout: Duration) -> Result<(u16, Vec<u8>)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(timeout))?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n")?;
    if let Some(b) = body {
        write!(s, "Content-Type: application/json\r\nContent-Length: {}\r\n", b.len())?;
    }
    s.write_all(b"\r\n")?;
    if let Some(b) = body {
        s.write_all(b)?;
    }
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let at = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("{method} {path}: bad HTTP response"))?;
    let head = String::from_utf8_lossy(&buf[..at]);
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("{method} {path}: bad status line"))?;
    Ok((status, buf[at + 4..].to_vec()))
}

pub fn get_json(port: u16, path: &str) -> Result<serde_json::Value> {
    let (st, body) = http_get(port, path)?;
    if st != 200 {
        bail!("GET {path}: HTTP {st}: {}", String::from_utf8_lossy(&body));
    }
    serde_json::from_slice(&body).with_context(|| format!("GET {path}"))
}

/// One sample of the text exposition format.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the text exposition format (enough for Prometheus', vmalert's and watchfire's /metrics).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(i) = line.find(['{', ' ']) else { continue };
        let (name, mut rest) = (&line[..i], &line[i..]);
        let mut labels = BTreeMap::new();
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            let mut end = r.len();
            loop {
                while chars.peek().is_some_and(|(_, c)| *c == ',' || *c == ' ') {
                    chars.next();
                }
                match chars.peek() {
                    Some((i, '}')) => {
                        end = *i;
                        break;
                    }
                    None => break,
                    _ => {}
                }
                let mut k = String::new();
                for (_, c) in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    k.push(c);
                }
                chars.next();
                let mut v = String::new();
                while let Some((_, c)) = chars.next() {
                    match c {
                        '\\' => match chars.next() {
                            Some((_, 'n')) => v.push('\n'),
                            Some((_, c)) => v.push(c),
                            None => break,
                        },
                        '"' => break,
                        c => v.push(c),
                    }
                }
                labels.insert(k.trim().to_string(), v);
            }
            rest = r.get(end + 1..).unwrap_or("");
        }
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    out
}

/// `GET /metrics` of a process, parsed.
pub fn scrape(port: u16) -> Result<Vec<Sample>> {
    let (st, body) = http_get(port, "/metrics")?;
    if st != 200 {
        bail!("GET /metrics: HTTP {st}");
    }
    Ok(parse_metrics(&String::from_utf8_lossy(&body)))
}

/// Sum of a metric's samples whose labels pass `keep`.
pub fn sum_of(m: &[Sample], name: &str, keep: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
    m.iter()
        .filter(|s| s.name == name && keep(&s.labels))
        .map(|s| s.value)
        .sum()
}

pub mod scale;
