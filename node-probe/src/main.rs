//! node-probe: watchfire's NVML daemon for GPU nodes. See README.md.

use clap::Parser;
use node_probe::alert::{HttpUrl, PushConfig, Pusher};
use node_probe::config::Args;
use node_probe::metrics::BaseLabels;
use node_probe::{PollerConfig, Shared};
use std::net::TcpListener;
use std::sync::Arc;

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("node-probe: {e}");
        std::process::exit(2);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

fn run(args: Args) -> Result<(), String> {
    let base = BaseLabels {
        node: args.node.clone().filter(|n| !n.is_empty()).unwrap_or_else(hostname),
        cluster: args.cluster,
    };

    let pusher = match &args.push_url {
        None => None,
        Some(u) => {
            let url = HttpUrl::parse(u).map_err(|e| format!("--push-url: {e}"))?;
            let bearer_token = match &args.push_token_file {
                None => None,
                Some(p) => Some(
                    std::fs::read_to_string(p)
                        .map_err(|e| format!("--push-token-file {}: {e}", p.display()))?
                        .trim()
                        .to_string(),
                ),
            };
            if args.push_queue_size == 0 {
                return Err("--push-queue-size: must be at least 1".into());
            }
            let cfg = PushConfig {
                url,
                bearer_token,
                queue_size: args.push_queue_size,
                alert_ttl: args.alert_ttl,
                runbook_url: args.runbook_url.clone(),
            };
            Some(Arc::new(Pusher::new(cfg, base.clone())))
        }
    };

    let listener = TcpListener::bind(&args.listen).map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    eprintln!(
        "node-probe: serving http://{addr}/metrics (node {:?}, cluster {:?})",
        base.node, base.cluster
    );

    let shared = Arc::new(Shared::new(base, pusher.clone()));
    if let Some(p) = pusher {
        std::thread::Builder::new()
            .name("push".into())
            .spawn(move || p.run())
            .map_err(|e| format!("push thread: {e}"))?;
    }
    let poller = PollerConfig {
        nvml_lib: args.nvml_lib.into_os_string(),
        poll_interval: args.poll_interval,
        nvml_retry_interval: args.nvml_retry_interval,
        xid_events: !args.no_xid_events,
    };
    let sh = shared.clone();
    std::thread::Builder::new()
        .name("poll".into())
        .spawn(move || node_probe::run_poller(poller, sh))
        .map_err(|e| format!("poll thread: {e}"))?;
    node_probe::http::serve(listener, &shared);
    Ok(())
}
