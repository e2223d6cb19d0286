//! Test harness: builds fake-nvml, runs node-probe against it, scrapes /metrics, records pushes.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The fake library, built with the same profile and target dir as this test binary:
/// `<target>/<profile>/libfake_nvml.so`. `cargo build` is a no-op when it is fresh.
pub fn fake_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // <target>/<profile>/deps/<test>
        let profile_dir = exe.parent().and_then(Path::parent).expect("profile dir").to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let profile = profile_dir
            .file_name()
            .and_then(|p| p.to_str())
            .unwrap_or("debug")
            .to_string();
        let cargo_profile = if profile == "debug" { "dev".to_string() } else { profile };
        let cargo = std::env::var("CARGO")
            .ok()
            .or(option_env!("CARGO").map(String::from))
            .unwrap_or("cargo".into());
        let out = Command::new(cargo)
            .args(["build", "--quiet", "-p", "fake-nvml", "--profile", &cargo_profile])
            .env("CARGO_TARGET_DIR", &target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo build -p fake-nvml");
        assert!(
            out.status.success(),
            "cargo build -p fake-nvml failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = profile_dir.join("libfake_nvml.so");
        assert!(lib.exists(), "{} not found after building fake-nvml", lib.display());
        lib
    })
    .clone()
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A running node-probe; killed on drop.
pub struct Probe {
    child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Probe {
    /// Starts node-probe on a free port with `scenario` (JSON) for fake-nvml and extra flags.
    pub fn start(scenario: &str, extra: &[&str]) -> Probe {
        Probe::start_with_lib(Some(scenario), &fake_lib(), extra)
    }

    pub fn start_with_lib(scenario: Option<&str>, lib: &Path, extra: &[&str]) -> Probe {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_node-probe"));
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--node",
            "test-node",
            "--cluster",
            "test-cluster",
            "--nvml-lib",
        ])
        .arg(lib)
        .args(extra)
        .env_remove("NODE_PROBE_PUSH_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(sc) = scenario {
            let path = dir.path().join("scenario.json");
            std::fs::write(&path, sc).unwrap();
            cmd.env("FAKE_NVML_SCENARIO", &path);
        } else {
            cmd.env_remove("FAKE_NVML_SCENARIO");
        }
        let mut child = cmd.spawn().expect("spawn node-probe");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("serving http://").nth(1) {
                    let _ = tx.send(rest.split('/').next().unwrap_or("").to_string());
                }
                let mut l = log2.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a.parse().expect("listen address"),
            Err(_) => {
                let _ = child.kill();
                panic!("node-probe did not start; log:\n{}", log.lock().unwrap());
            }
        };
        Probe {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.addr, path)
    }

    pub fn metrics(&self) -> Metrics {
        let (code, body) = self.get("/metrics");
        assert_eq!(code, 200, "{body}");
        Metrics::parse(&body)
    }

    /// Scrapes until `pred` holds, or panics after `timeout`.
    pub fn wait_for(&self, timeout: Duration, what: &str, pred: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = Instant::now() + timeout;
        loop {
            let m = self.metrics();
            if pred(&m) {
                return m;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; last scrape:\n{}\nlog:\n{}",
                    m.text,
                    self.log.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to node-probe");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read response");
    let code = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// A parsed exposition: (name, labels) -> value.
pub struct Metrics {
    pub text: String,
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let (name, rest) = line.split_once('{').expect("labels");
            let (labels, value) = rest.rsplit_once("} ").expect("value");
            let mut map = BTreeMap::new();
            // Label values in these tests hold no '",' sequences.
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once("=\"").expect("label pair");
                map.insert(k.to_string(), v.trim_end_matches('"').to_string());
            }
            let v = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                "NaN" => f64::NAN,
                v => v.parse().expect("number"),
            };
            samples.push((name.to_string(), map, v));
        }
        Metrics {
            text: text.to_string(),
            samples,
        }
    }

    /// The value of the one series `name` whose labels include `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let hits: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map(|s| s.2)
            .collect();
        assert!(hits.len() <= 1, "{name} {labels:?} matches {} series", hits.len());
        hits.first().copied()
    }

    pub fn gpu(&self, name: &str, gpu: &str) -> Option<f64> {
        self.get(name, &[("gpu", gpu)])
    }

    pub fn names(&self) -> std::collections::BTreeSet<String> {
        self.samples.iter().map(|s| s.0.clone()).collect()
    }
}

/// One request the recorder got.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub at_unix_ms: u64,
    pub path: String,
    pub headers: String,
    pub body: String,
}

/// A tiny HTTP server that records every request; the first `fail_first` get a 503.
pub struct Recorder {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Recorded>>>,
}

impl Recorder {
    pub fn start(fail_first: usize) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let got2 = got.clone();
        std::thread::spawn(move || {
            let mut n = 0usize;
            for conn in listener.incoming() {
                let Ok(mut s) = conn else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut data = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let Ok(k) = s.read(&mut buf) else {
                        break (String::new(), String::new());
                    };
                    if k == 0 {
                        break (String::new(), String::new());
                    }
                    data.extend_from_slice(&buf[..k]);
                    let text = String::from_utf8_lossy(&data).to_string();
                    if let Some((h, b)) = text.split_once("\r\n\r\n") {
                        let len = h
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if b.len() >= len {
                            break (h.to_string(), b.to_string());
                        }
                    }
                };
                let at_unix_ms = unix_ms();
                n += 1;
                let code = if n <= fail_first {
                    "503 Service Unavailable"
                } else {
                    "200 OK"
                };
                let _ = write!(s, "HTTP/1.1 {code}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                if n > fail_first {
                    got2.lock().unwrap().push(Recorded {
                        at_unix_ms,
                        path,
                        headers: head,
                        body,
                    });
                }
            }
        });
        Recorder { addr, got }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[Recorded]) -> bool) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.got.lock().unwrap().clone();
            if pred(&got) {
                return got;
            }
            if Instant::now() > deadline {
                panic!("recorder timed out; got {got:#?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
