//! Helpers shared by integration tests.
// Each test binary includes this module and uses a subset of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

pub mod browser;
mod require;
pub use require::*;

/// Reads one HTTP/1.x request from `conn`: its head (request and header lines) and its body
/// (`content-length` bytes). `None` when the connection ends early.
pub fn read_request(conn: &std::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line.trim_end().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// A local webhook receiver: hands the JSON body of every POST it gets on `l` to `keep` and
/// answers 200.
fn receive_json(l: TcpListener, mut keep: impl FnMut(serde_json::Value) + Send + 'static) {
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            if let Some((_, body)) = read_request(&conn) {
                if let Ok(v) = serde_json::from_slice(&body) {
                    keep(v);
                }
            }
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
}

/// A local webhook receiver: records the JSON body of every POST it gets on `l` and answers 200.
pub fn record_json(l: TcpListener) -> Arc<Mutex<Vec<serde_json::Value>>> {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let b2 = Arc::clone(&bodies);
    receive_json(l, move |v| b2.lock().unwrap().push(v));
    bodies
}

/// Webhook bodies with their arrival time (ms since the epoch).
pub type Received = Arc<Mutex<Vec<(i64, serde_json::Value)>>>;

/// [`record_json`], with each body's arrival time.
pub fn record_json_timed(l: TcpListener) -> Received {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let b2 = Arc::clone(&bodies);
    receive_json(l, move |v| {
        b2.lock().unwrap().push((chrono::Utc::now().timestamp_millis(), v))
    });
    bodies
}

/// A moto server (AWS APIs on loopback) on a free port, killed on drop. Needs `moto_server` on PATH
/// (`pip install 'moto[server]'`, which `scripts/test` does); see [`require`] when it is missing.
pub struct Moto {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
}

impl Moto {
    /// `None` only when moto_server is missing and the skip is allowed (see [`require`]).
    pub fn start() -> Option<Moto> {
        let bin = require_tool("moto_server", "pip install 'moto[server]'")?;
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start moto_server");
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "moto_server did not start on {endpoint}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // Credentials and region for the SDK's default chain: moto accepts any.
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_REGION", "us-east-1");
        Some(Moto { child, endpoint })
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Polls `f` every 100 ms until it returns `Some`, for at most `secs` seconds.
pub fn wait_for<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

/// The whole response (head and body) to `GET path` on loopback over HTTP/1.0, or `None` when
/// nothing answers.
pub fn get_raw(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The status line of `GET path` on loopback (`HTTP/1.0 200 OK`), or `None` when nothing answers.
pub fn http_status(port: u16, path: &str) -> Option<String> {
    get_raw(port, path)?.lines().next().map(str::to_string)
}

/// The value of an unlabelled sample `name` on `GET /metrics` on loopback.
pub fn metric(port: u16, name: &str) -> Option<f64> {
    get_raw(port, "/metrics")?
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

/// The JSON body of `GET path` on loopback.
pub fn get_json(port: u16, path: &str) -> Option<serde_json::Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        reqwest::get(format!("http://127.0.0.1:{port}{path}"))
            .await
            .ok()?
            .json()
            .await
            .ok()
    })
}

/// A child process, killed (SIGKILL) on drop.
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `watchfire run --config CONFIG ARGS...` with extra environment variables, output discarded.
pub fn start_watchfire(config: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Proc {
    Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_watchfire"))
            .args(["run", "--config"])
            .arg(config)
            .args(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start watchfire run"),
    )
}

/// Writes `rules`, routes sending `alertname` to a recording webhook (with `send_resolved` when
/// asked; everything else to nowhere) and a watchfire.yaml with a state directory into `root`.
/// Returns the API port and what the webhook records.
pub fn configure_hooked(
    root: &std::path::Path,
    rules: &str,
    alertname: &str,
    send_resolved: bool,
) -> (u16, Arc<Mutex<Vec<serde_json::Value>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = l.local_addr().unwrap().port();
    let bodies = record_json(l);
    let port = free_port();
    std::fs::write(root.join("rules.yaml"), rules).unwrap();
    std::fs::write(
        root.join("routes.yaml"),
        format!(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 4h\n  routes:\n    - matchers: [alertname={alertname}]\n      receiver: hook\n    - receiver: none\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook}/hook\n        send_resolved: {send_resolved}\n  - name: none\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("watchfire.yaml"),
        format!(
            "sources:\n  - {{name: local, type: embedded}}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nresend_delay: 1s\nevaluation_interval: 1s\nstate_dir: state\nhttp: {{listen: '127.0.0.1:{port}', open: true}}\n"
        ),
    )
    .unwrap();
    (port, bodies)
}

/// Whether Debian's prometheus and promtool are installed; missing, see [`require`] (a failure,
/// or with `WATCHFIRE_TEST_OFFLINE=1` a recorded skip and `false`).
pub fn prometheus_present() -> bool {
    require_tool("/usr/bin/prometheus", "apt-get install prometheus").is_some()
        && require_tool("/usr/bin/promtool", "apt-get install prometheus").is_some()
}

/// Backfills OpenMetrics text into a TSDB at `root/tsdb` with `promtool tsdb
/// create-blocks-from openmetrics`; returns the TSDB path.
pub fn backfill(root: &std::path::Path, openmetrics: &str) -> std::path::PathBuf {
    std::fs::write(root.join("data.om"), openmetrics).unwrap();
    let data = root.join("tsdb");
    std::fs::create_dir_all(&data).unwrap();
    let st = std::process::Command::new("/usr/bin/promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(root.join("data.om"))
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("promtool");
    assert!(st.success(), "promtool backfill failed");
    data
}

/// A Prometheus server on loopback, killed on drop; `restart` brings it back on the same port
/// and data (the source-outage tests).
pub struct Prometheus {
    child: Option<std::process::Child>,
    pub port: u16,
    data: std::path::PathBuf,
    cfg: std::path::PathBuf,
    flags: Vec<String>,
}

impl Prometheus {
    pub fn start(data: &std::path::Path, cfg: &std::path::Path, port: u16) -> Prometheus {
        Prometheus::start_with(data, cfg, port, &[])
    }

    /// [`Prometheus::start`] with extra command-line flags (feature flags, the remote-write
    /// receiver).
    pub fn start_with(data: &std::path::Path, cfg: &std::path::Path, port: u16, flags: &[&str]) -> Prometheus {
        let child = std::process::Command::new("/usr/bin/prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=30d")
            .args(flags)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            child: Some(child),
            port,
            data: data.to_path_buf(),
            cfg: cfg.to_path_buf(),
            flags: flags.iter().map(|f| f.to_string()).collect(),
        };
        wait_for(&format!("prometheus ready on port {port}"), 30, || {
            http_status(port, "/-/ready").filter(|s| s.contains("200"))
        });
        p
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        *self = Prometheus::start_with(&self.data, &self.cfg, self.port, &flags);
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The service `watchfire run` builds from the configuration file `config` (sources, rules,
/// routes, owners), on `rt`, with `state` (`None`: the configured `state_dir`) and `clock`.
pub fn service(
    config: &std::path::Path,
    rt: &tokio::runtime::Runtime,
    state: Option<watchfire::state::StateStore>,
    clock: Arc<dyn watchfire::run::Clock>,
) -> watchfire::run::Service {
    let cfg = watchfire::run::config::load_file(config).expect("config");
    let l = watchfire::run::load(&cfg, rt.handle()).expect("load");
    let state = state.unwrap_or_else(|| {
        watchfire::state::StateStore::open_dir(cfg.state_dir.as_ref().expect("state_dir")).expect("state")
    });
    watchfire::run::Service::new(l.setup, l.groups, l.notify, state, clock)
}

/// A multi-threaded runtime with IO and timers, as `watchfire run` uses.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Writes `rules.yaml`, `routes.yaml` and a `watchfire.yaml` with one embedded source, those two
/// files and `state_dir: state` into `root`; returns the configuration file's path.
pub fn embedded_config(root: &std::path::Path, rules: &str, routes: &str) -> std::path::PathBuf {
    std::fs::write(root.join("rules.yaml"), rules).unwrap();
    std::fs::write(root.join("routes.yaml"), routes).unwrap();
    let config = root.join("watchfire.yaml");
    std::fs::write(
        &config,
        "sources:\n  - {name: local, type: embedded}\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\nstate_dir: state\n",
    )
    .unwrap();
    config
}

/// An hour of `gpu_temp{labels}` every 15 s from `base_s` as OpenMetrics text: 50, then 95 in
/// [10m, 30m), then 50 again (the hot-GPU episode the Prometheus tests alert on).
pub fn hot_gpu_openmetrics(labels: &str, base_s: i64) -> String {
    let mut om = String::from("# HELP gpu_temp GPU temperature.\n# TYPE gpu_temp gauge\n");
    for i in 0..=240 {
        let t = base_s + i * 15;
        let v = if (600..1800).contains(&(i * 15)) { 95 } else { 50 };
        om.push_str(&format!("gpu_temp{{{labels}}} {v} {t}\n"));
    }
    om.push_str("# EOF\n");
    om
}

/// `git ARGS` in `dir` with a test identity and no signing; a failure fails the test.
pub fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An SMTP server on loopback (Python's aiosmtpd), killed on drop. Each message it accepts is
/// written to `dir` as JSON: `mail_from`, `rcpt_tos`, `headers` (name, decoded value) and
/// `parts` (content type, decoded body). A recipient `temp-N@...` is refused with 451 for its
/// first N tries and `perm@...` always with 550, for the retry tests. Needs `aiosmtpd`
/// (`python3 -m pip install aiosmtpd`, which `scripts/test` does); see [`require`].
pub struct Smtp {
    child: std::process::Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

const SMTP_SERVER: &str = r#"
import asyncio, email, email.policy, json, os, sys, time
from aiosmtpd.controller import Controller

out, port = sys.argv[1], int(sys.argv[2])
tries = {}

class Handler:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        local = address.split('@')[0]
        if local == 'perm':
            return '550 5.1.1 no such user'
        if local.startswith('temp-'):
            n = tries.get(address, 0)
            tries[address] = n + 1
            if n < int(local[5:]):
                return '451 4.3.0 try again later'
        envelope.rcpt_tos.append(address)
        return '250 OK'

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        parts = []
        for p in msg.walk():
            if p.is_multipart():
                continue
            parts.append([p.get_content_type(), p.get_content()])
        rec = {
            'mail_from': envelope.mail_from,
            'rcpt_tos': envelope.rcpt_tos,
            'headers': [[k, str(v)] for k, v in msg.items()],
            'parts': parts,
        }
        name = os.path.join(out, '%d-%d.json' % (time.time_ns(), os.getpid()))
        with open(name + '.tmp', 'w') as f:
            json.dump(rec, f)
        os.rename(name + '.tmp', name)
        return '250 Message accepted'

kw = {}
if len(sys.argv) > 3:
    # STARTTLS required, then PLAIN/LOGIN auth as USER with PASSWORD.
    import ssl
    from aiosmtpd.smtp import AuthResult
    cert, key, user, password = sys.argv[3:7]
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    def check(server, session, envelope, mechanism, data):
        ok = data.login.decode() == user and data.password.decode() == password
        return AuthResult(success=ok)
    kw = dict(tls_context=ctx, require_starttls=True, auth_required=True, authenticator=check)
c = Controller(Handler(), hostname='127.0.0.1', port=port, **kw)
c.start()
print('ready', flush=True)
while True:
    time.sleep(3600)
"#;

impl Smtp {
    /// `None` only when aiosmtpd is missing and the skip is allowed (see [`require`]).
    pub fn start() -> Option<Smtp> {
        Smtp::start_with(&[])
    }

    /// A server that requires STARTTLS (a self-signed certificate made with openssl) and then
    /// authentication as `user` with `password`.
    pub fn start_tls(user: &str, password: &str) -> Option<Smtp> {
        let openssl = require_tool("openssl", "apt-get install openssl")?;
        let certs = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
        let st = std::process::Command::new(openssl)
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run openssl");
        assert!(st.success(), "openssl req failed");
        let smtp = Smtp::start_with(&[
            cert.display().to_string(),
            key.display().to_string(),
            user.to_string(),
            password.to_string(),
        ]);
        // The server has read its certificate once it listens.
        drop(certs);
        smtp
    }

    fn start_with(extra: &[String]) -> Option<Smtp> {
        let have = std::process::Command::new("python3")
            .args(["-c", "import aiosmtpd"])
            .status()
            .is_ok_and(|s| s.success());
        require(
            have.then_some(()),
            "aiosmtpd (Python)",
            "python3 -m pip install aiosmtpd",
        )?;
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let child = std::process::Command::new("python3")
            .args(["-c", SMTP_SERVER, &dir.path().display().to_string(), &port.to_string()])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start aiosmtpd");
        wait_for("aiosmtpd to listen", 30, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        Some(Smtp { child, port, dir })
    }

    /// The messages received so far, oldest first.
    pub fn messages(&self) -> Vec<serde_json::Value> {
        let mut names: Vec<_> = std::fs::read_dir(self.dir.path())
            .expect("read smtp dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| serde_json::from_str(&std::fs::read_to_string(p).expect("read message")).expect("json"))
            .collect()
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A local HTTP server recording every request (method, path, headers lowercased, body) and
/// answering each with the next of `replies` (status, extra header lines, body; the last one
/// repeats).
pub type Requests = Arc<Mutex<Vec<(String, String, Vec<(String, String)>, Vec<u8>)>>>;

pub fn record_requests(l: TcpListener, replies: Vec<(u16, &'static str, &'static str)>) -> Requests {
    let got: Requests = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&got);
    std::thread::spawn(move || {
        let mut i = 0usize;
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let Some((head, body)) = read_request(&conn) else {
                continue;
            };
            let mut lines = head.lines();
            let first: Vec<String> = lines
                .next()
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect();
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            sink.lock().unwrap().push((
                first.first().cloned().unwrap_or_default(),
                first.get(1).cloned().unwrap_or_default(),
                headers,
                body,
            ));
            let (status, extra, text) = replies.get(i).or(replies.last()).copied().unwrap_or((200, "", ""));
            i += 1;
            let reply = format!(
                "HTTP/1.1 {status} X\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    got
}

/// What a scripted recorder answers: status, extra header lines, body.
pub type Reply = (u16, String, String);

/// [`record_requests`] answering by request: `answer` gets the method, path (with query) and
/// body, and the number of requests before this one. For the APIs a receiver talks to in more
/// than one request (Jira's search, update and transition; WeChat's token).
pub fn record_requests_with(
    l: TcpListener,
    answer: impl Fn(&str, &str, &[u8], usize) -> Reply + Send + 'static,
) -> Requests {
    let got: Requests = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&got);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let Some((head, body)) = read_request(&conn) else {
                continue;
            };
            let mut lines = head.lines();
            let first: Vec<String> = lines
                .next()
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect();
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let (method, path) = (
                first.first().cloned().unwrap_or_default(),
                first.get(1).cloned().unwrap_or_default(),
            );
            let before = {
                let mut g = sink.lock().unwrap();
                g.push((method.clone(), path.clone(), headers, body.clone()));
                g.len() - 1
            };
            let (status, extra, text) = answer(&method, &path, &body, before);
            let reply = format!(
                "HTTP/1.1 {status} X\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    got
}
