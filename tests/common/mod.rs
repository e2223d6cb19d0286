//! Helpers shared by integration tests.
// Each test binary includes this module and uses a subset of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

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

/// The status line of `GET path` on loopback (`HTTP/1.0 200 OK`), or `None` when nothing answers.
pub fn http_status(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines().next().map(str::to_string)
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
}

impl Prometheus {
    pub fn start(data: &std::path::Path, cfg: &std::path::Path, port: u16) -> Prometheus {
        let child = std::process::Command::new("/usr/bin/prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=30d")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            child: Some(child),
            port,
            data: data.to_path_buf(),
            cfg: cfg.to_path_buf(),
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
        *self = Prometheus::start(&self.data, &self.cfg, self.port);
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
