//! `watchfire run --config watchfire.yaml [--shard N/M]`: the evaluator service.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use clap::Parser;

use watchfire::run::config::{self, RunConfig, Shard};
use watchfire::run::{Service, SystemClock};
use watchfire::server::{self, AppState, Auth, QueryLimits};
use watchfire::source::{Kept, MirrorSlot};
use watchfire::state::StateStore;

#[derive(Parser, Debug)]
pub struct Args {
    /// The configuration file (see `watchfire::run::config` for every key).
    #[arg(long, default_value = "watchfire.yaml")]
    config: PathBuf,
    /// Evaluate only the groups of shard N of M (overrides `shard:` in the file).
    #[arg(long, value_name = "N/M")]
    shard: Option<String>,
    /// Load and validate everything, then exit.
    #[arg(long)]
    check: bool,
    /// With --check: print the `write_relabel_configs` that send this shard's mirror only the
    /// metric names its rules read, for each agent's remote_write to its replicas.
    #[arg(long, requires = "check")]
    mirror_relabel: bool,
}

fn load_config(args: &Args) -> Result<RunConfig, String> {
    let mut cfg = config::load_file(&args.config).map_err(|e| e.to_string())?;
    if let Some(s) = &args.shard {
        cfg.shard = Shard::parse(s).map_err(|e| format!("--shard: {e}"))?;
    }
    Ok(cfg)
}

pub fn run(args: Args) -> i32 {
    let cfg = match load_config(&args) {
        Ok(c) => c,
        Err(e) => return super::fail(e),
    };
    // Queries, rules and templates are evaluated on these threads (see `promql::MAX_DEPTH`).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(watchfire::promql::QUERY_STACK_KB << 10)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return super::fail(format!("cannot start the runtime: {e}")),
    };
    // The mirror outlives reloads that keep its configuration (what the agents wrote stays).
    let mirror = MirrorSlot::default();
    let loaded = match watchfire::run::load_keeping(&cfg, rt.handle(), &mirror) {
        Ok(l) => l,
        Err(e) => return super::fail(e),
    };
    if args.mirror_relabel {
        let Some(m) = &loaded.mirror else {
            return super::fail(format!("{}: no source has a mirror: block", args.config.display()));
        };
        print!(
            "{}",
            mirror_relabel(&args.config, &cfg.shard, m.sender_label(), &m.kept())
        );
        return 0;
    }
    if !loaded.missing_secrets.is_empty() {
        if args.check {
            return super::fail(format!(
                "{}: the receivers need secret files that cannot be read:\n  {}",
                args.config.display(),
                loaded.missing_secrets.join("\n  ")
            ));
        }
        // A mounted Secret can arrive after the pod starts: deliveries that need it are retried
        // with backoff until it does, and WatchfireNotificationsFailing pages elsewhere meanwhile.
        for m in &loaded.missing_secrets {
            tracing::error!("secret file missing (deliveries that need it are retried until it appears): {m}");
        }
    }
    if args.check {
        println!(
            "{}: OK ({} groups for shard {}/{})",
            args.config.display(),
            loaded.groups.len(),
            cfg.shard.index,
            cfg.shard.total
        );
        return 0;
    }
    mirror.set(loaded.mirror.clone());
    let state = match &cfg.state_dir {
        Some(d) => StateStore::open_dir(d),
        None => {
            tracing::warn!("no state_dir: alert state and the outbox live in memory and are lost on restart");
            StateStore::in_memory()
        }
    };
    // A state directory that cannot be opened (a read-only or full volume) does not stop the
    // paging: the state lives in memory, and WatchfireStateFailing pages while it does.
    let (state, state_unusable) = match state {
        Ok(s) => (s, None),
        Err(e) if cfg.state_dir.is_some() => {
            tracing::error!(
                "state directory unusable ({e}): alert state and the outbox live in memory until a restart"
            );
            match StateStore::in_memory() {
                Ok(s) => (s, Some(e.to_string())),
                Err(e2) => return super::fail(e2),
            }
        }
        Err(e) => return super::fail(e),
    };
    let svc = Arc::new(Service::new(
        loaded.setup,
        loaded.groups,
        loaded.notify,
        state,
        Arc::new(SystemClock),
    ));
    if let Some(e) = state_unusable {
        if let Ok(mut m) = svc.metrics.lock() {
            m.state_unusable = Some(format!("opening the state directory: {e}"));
        }
    }
    let auth = Arc::new(RwLock::new(Auth {
        token: cfg.http.bearer_token.clone(),
        open: cfg.http.open,
    }));
    let reload: server::ReloadFn = {
        let svc = Arc::clone(&svc);
        let auth = Arc::clone(&auth);
        let handle = rt.handle().clone();
        let config_path = args.config.clone();
        let shard = args.shard.clone();
        let mirror = mirror.clone();
        Arc::new(move || {
            let a = Args {
                config: config_path.clone(),
                shard: shard.clone(),
                check: false,
                mirror_relabel: false,
            };
            let cfg = load_config(&a)?;
            let l = watchfire::run::load_keeping(&cfg, &handle, &mirror)?;
            for m in &l.missing_secrets {
                tracing::error!("secret file missing (deliveries that need it are retried until it appears): {m}");
            }
            mirror.set(l.mirror.clone());
            svc.reload(l.setup, l.groups, l.notify);
            if let Ok(mut au) = auth.write() {
                *au = Auth {
                    token: cfg.http.bearer_token.clone(),
                    open: cfg.http.open,
                };
            }
            tracing::info!("configuration reloaded from {}", config_path.display());
            Ok(())
        })
    };
    let listen = cfg.http.listen.clone();
    let query_limits = QueryLimits {
        timeout: std::time::Duration::from_millis(cfg.http.query_timeout_ms as u64),
        max_concurrent: cfg.http.query_max_concurrency,
        max_samples: cfg.http.query_max_samples,
    };
    let conn_limits = server::ConnLimits {
        max_connections: cfg.http.max_connections,
        read_timeout: std::time::Duration::from_millis(cfg.http.read_timeout_ms as u64),
        idle_timeout: std::time::Duration::from_millis(cfg.http.idle_timeout_ms as u64),
        max_body_bytes: server::MAX_BODY_BYTES,
    };
    let result: Result<(), String> = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        tracing::info!("listening on {listen}");
        // Group loops: restarted after every reload (a reload bumps the generation).
        let groups_svc = Arc::clone(&svc);
        tokio::spawn(async move {
            loop {
                Arc::clone(&groups_svc).run_groups().await;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        });
        // Outbox delivery.
        let out_svc = Arc::clone(&svc);
        tokio::spawn(async move {
            loop {
                let (ok, failed) = out_svc.deliver_outbox().await;
                // A full batch (64) means more are due: go on at once instead of waiting.
                // Otherwise wait for the next group flush (retries are looked at every second).
                if ok + failed < 64 {
                    out_svc.wait_for_notifier(1000).await;
                }
            }
        });
        // SIGHUP reloads.
        #[cfg(unix)]
        {
            let reload = Arc::clone(&reload);
            if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        let r = Arc::clone(&reload);
                        match tokio::task::spawn_blocking(move || r()).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::error!("reload failed, previous configuration kept: {e}"),
                            Err(e) => tracing::error!("reload failed: {e}"),
                        }
                    }
                });
            }
        }
        let state = AppState {
            svc,
            auth,
            reload,
            query_limits,
            mirror,
        };
        server::serve_with_limits(listener, server::router(state), conn_limits, shutdown_signal())
            .await
            .map_err(|e| format!("HTTP server: {e}"))
    });
    // Blocking work still running (a query past its deadline between two checks, a reload)
    // does not keep the process: dropping the runtime would wait for it.
    rt.shutdown_timeout(RUNTIME_GRACE);
    match result {
        Ok(()) => 0,
        Err(e) => super::fail(e),
    }
}

/// How long the runtime's blocking work may hold the process after the server stopped.
pub(crate) const RUNTIME_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The agents' write relabelling for one shard's replicas: keep the names its mirror keeps.
fn mirror_relabel(config: &std::path::Path, shard: &Shard, label: &str, kept: &Kept) -> String {
    let alt = |names: &BTreeSet<String>| -> String {
        let v: Vec<String> = names.iter().map(|n| regex::escape(n)).collect();
        v.join("|")
    };
    let mut names: BTreeSet<&String> = kept.any_sender.iter().collect();
    names.extend(kept.by_sender.values().flatten());
    let head = format!(
        "# {}, shard {}/{}: the {} metric names its rules read",
        config.display(),
        shard.index,
        shard.total,
        names.len()
    );
    // YAML's single quotes: a quote inside is doubled.
    let quoted = |re: String| re.replace('\'', "''");
    if kept.by_sender.is_empty() {
        return format!(
            "{head}, from every {label}; the mirror answers nothing else\n\
             write_relabel_configs:\n  - source_labels: [__name__]\n    regex: '{}'\n    action: keep\n",
            quoted(alt(&kept.any_sender))
        );
    }
    // Some names are read for some senders only: keep `<sender>;<name>` (the labels joined by
    // relabelling's default separator), so that an agent sends a shard only its own clusters.
    let mut parts = Vec::new();
    if !kept.any_sender.is_empty() {
        parts.push(format!(".*;(?:{})", alt(&kept.any_sender)));
    }
    // Senders reading the same names share one alternative (a file per cluster: one in all).
    let mut by_names: BTreeMap<&BTreeSet<String>, Vec<String>> = BTreeMap::new();
    for (sender, names) in &kept.by_sender {
        by_names.entry(names).or_default().push(regex::escape(sender));
    }
    for (names, senders) in by_names {
        parts.push(format!("(?:{});(?:{})", senders.join("|"), alt(names)));
    }
    format!(
        "{head}: {} of them from every {label}, the others from {} {label} values only; the mirror answers nothing else\n\
         write_relabel_configs:\n  - source_labels: [{label}, __name__]\n    regex: '{}'\n    action: keep\n",
        kept.any_sender.len(),
        kept.by_sender.len(),
        quoted(parts.join("|"))
    )
}
