//! The HTTP face: `/metrics` (Prometheus text 0.0.4), `/healthz`, and an index page.
//!
//! A deliberately small server on `std::net`: one connection at a time, `Connection: close`,
//! short timeouts so a stalled client cannot hold a scrape up for long.

use crate::Shared;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// Serves forever.
pub fn serve(listener: TcpListener, shared: &Shared) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let _ = catch_unwind(AssertUnwindSafe(|| handle(stream, shared)));
            }
            Err(e) => {
                eprintln!("node-probe: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

const INDEX: &str = "<html><head><title>node-probe</title></head><body><h1>node-probe</h1>\
<p><a href=\"/metrics\">/metrics</a> &middot; <a href=\"/healthz\">/healthz</a></p></body></html>\n";

fn handle(mut s: TcpStream, shared: &Shared) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = [0u8; 1024];
    let mut head = Vec::with_capacity(512);
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > 8192 {
            return respond(&mut s, 431, "text/plain", "request header too large\n", false);
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut first = text.lines().next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("");
    let target = first.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(&mut s, 405, "text/plain", "only GET and HEAD\n", false);
    }
    match path {
        "/metrics" => {
            let body = shared.render();
            respond(
                &mut s,
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
                head_only,
            )
        }
        "/healthz" | "/-/healthy" => respond(&mut s, 200, "text/plain", "ok\n", head_only),
        "/" => respond(&mut s, 200, "text/html", INDEX, head_only),
        _ => respond(&mut s, 404, "text/plain", "not found\n", head_only),
    }
}

fn respond(s: &mut TcpStream, code: u16, ctype: &str, body: &str, head_only: bool) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if code == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(body);
    }
    s.write_all(out.as_bytes())?;
    s.flush()
}
