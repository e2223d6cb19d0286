//! What the peer benchmarks share: child processes that are stopped when dropped, free ports,
//! environment knobs, running a command, a log's tail, and a process's memory from /proc.
// Each benchmark includes this module and uses a subset of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

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
pub mod scale;
