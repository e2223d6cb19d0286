//! Helpers shared by integration tests.

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
