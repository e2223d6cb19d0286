//! Helpers shared by integration tests.
// Each test binary includes this module and uses a subset of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// A local webhook receiver: records the JSON body of every POST it gets on `l` and answers 200.
pub fn record_json(l: TcpListener) -> Arc<Mutex<Vec<serde_json::Value>>> {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let b2 = Arc::clone(&bodies);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let Ok(c2) = conn.try_clone() else { continue };
            let mut reader = BufReader::new(c2);
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let l = line.trim_end().to_ascii_lowercase();
                if l.is_empty() {
                    break;
                }
                if let Some(v) = l.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_ok() {
                if let Ok(v) = serde_json::from_slice(&body) {
                    b2.lock().unwrap().push(v);
                }
            }
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    bodies
}

/// A moto server (AWS APIs on loopback) on a free port, killed on drop. Needs `moto_server` on PATH
/// (`pip install 'moto[server]'`, which `.ci/run` does); a missing binary fails the test.
pub struct Moto {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
}

impl Moto {
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("moto_server not found: pip install 'moto[server]'");
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
        Moto { child, endpoint }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
