//! The evaluator service (`watchfire run`): its configuration ([`config`]), the group
//! scheduler with the failure policy and built-in alerts ([`scheduler`]), and [`load`], which
//! turns a configuration into what the scheduler runs (used at startup and on every reload).

pub mod config;
pub(crate) mod scheduler;
mod shard;
pub use scheduler::{Clock, Service, SimClock, SystemClock};

use std::path::Path;
use std::sync::Arc;

use crate::notify::owners::Owners;
use crate::promql::Engine;
use crate::rules::file::{self, LoadOptions};
use crate::rules::{Group, GroupConfig};
use crate::source::federated::Federated;
use crate::source::Queryable;
use config::RunConfig;
use scheduler::Setup;

/// Everything a configuration yields.
pub struct Loaded {
    pub setup: Setup,
    pub groups: Vec<Group>,
    pub notify: Option<crate::notify::Config>,
}

/// Loads rule files, SLO specs, routes and owners, and builds the sources, for this shard.
/// Any error rejects the whole configuration (nothing is applied).
pub fn load(cfg: &RunConfig, handle: &tokio::runtime::Handle) -> Result<Loaded, String> {
    let first = cfg.sources.first().ok_or("no sources configured")?;
    let federated = Federated::from_configs(&cfg.sources, handle)?;
    let gcfg = GroupConfig {
        default_interval_ms: cfg.evaluation_interval_ms,
        default_query_offset_ms: cfg.query_offset_ms,
        external_labels: cfg.external_labels.clone(),
        external_url: external_url(cfg),
        resend_delay_ms: cfg.resend_delay_ms,
    };
    let mut errors: Vec<String> = Vec::new();
    let mut groups = Vec::new();
    let rule_paths = cfg.rule_paths()?;
    let base = cfg.path.parent().map(Path::to_path_buf).unwrap_or_default();
    for p in &rule_paths {
        // Groups are keyed (saved state, shard hash, slot offset) by their path relative to
        // the configuration file, so the keys do not depend on the working directory.
        let rel = p.strip_prefix(&base).unwrap_or(p);
        match file::load_file(p, LoadOptions::default()) {
            Ok(f) => {
                for g in &f.groups {
                    match Group::new(rel, g, &gcfg) {
                        Ok(g) => groups.push(g),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
            }
            Err(es) => errors.extend(es.into_iter().map(|e| e.to_string())),
        }
    }
    let slo_paths = cfg.slo_paths()?;
    if !slo_paths.is_empty() {
        match crate::slo::load_paths(&slo_paths)
            .and_then(|specs| crate::slo::generate(&specs, &crate::slo::GenerateOptions::default()))
        {
            Ok(text) => {
                let parsed = file::parse(&text, Path::new("slo-generated.yaml"), LoadOptions::default());
                if parsed.errors.is_empty() {
                    // Groups already committed as rules (e.g. rules/slo-generated.yaml) are not
                    // evaluated twice.
                    let existing: std::collections::HashSet<String> =
                        groups.iter().map(|g| g.name().to_string()).collect();
                    let mut generated = parsed.file;
                    generated.groups.retain(|g| !existing.contains(&g.name.value));
                    match Group::from_file(&generated, &gcfg) {
                        Ok(gs) => groups.extend(gs),
                        Err(e) => errors.push(e.to_string()),
                    }
                } else {
                    errors.extend(parsed.errors.into_iter().map(|e| format!("generated SLO rules: {e}")));
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    let notify = match &cfg.routes_file {
        Some(p) => match crate::notify::load_delivery_file(p) {
            Ok(c) => Some(c),
            Err(e) => {
                errors.push(format!("{}: {e}", p.display()));
                None
            }
        },
        None => None,
    };
    let owners = match &cfg.owners_file {
        Some(p) => match Owners::load_file(p) {
            Ok(o) => Some(o),
            Err(e) => {
                errors.push(e.to_string());
                None
            }
        },
        None => None,
    };
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    // Every recording rule of the configuration (other shards' too: their outputs are in no
    // remote source either) is answered locally and never pushed down.
    let recorded_here: Vec<String> = groups
        .iter()
        .flat_map(|g| g.rules().iter())
        .filter(|r| matches!(r, crate::rules::GroupRule::Recording(_)))
        .map(|r| r.name().to_string())
        .collect();
    // Groups that read each other's outputs stay on one shard (see `shard`).
    let mut owned = shard::owned(&groups, cfg.shard).into_iter();
    groups.retain(|_| owned.next().unwrap_or(false));
    let source: Arc<dyn Queryable> = Arc::new(federated.with_local_names(recorded_here));
    Ok(Loaded {
        setup: Setup {
            engine: Engine::default(),
            source,
            source_name: first.name.clone(),
            owners,
            external_labels: cfg.external_labels.clone(),
            external_url: external_url(cfg),
            resend_delay_ms: cfg.resend_delay_ms,
            interval_ms: cfg.evaluation_interval_ms,
        },
        groups,
        notify,
    })
}

/// `external_url`, or what Prometheus defaults to when it is not set: `http://HOST:PORT` of the
/// listen address, with the machine's host name for a wildcard address. Generator URLs and the
/// Grafana links in notifications are built from it.
fn external_url(cfg: &RunConfig) -> String {
    if !cfg.external_url.is_empty() {
        return cfg.external_url.clone();
    }
    let listen = &cfg.http.listen;
    let (host, port) = listen.rsplit_once(':').unwrap_or((listen.as_str(), "9099"));
    let host = match host {
        "" | "0.0.0.0" | "[::]" | "::" => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into()),
        h => h.to_string(),
    };
    format!("http://{host}:{port}")
}
