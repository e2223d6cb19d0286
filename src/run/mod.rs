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
use crate::source::{Mirror, MirrorSlot, Queryable};
use config::RunConfig;
use scheduler::Setup;

/// Everything a configuration yields.
pub struct Loaded {
    pub setup: Setup,
    pub groups: Vec<Group>,
    pub notify: Option<crate::notify::Config>,
    /// The mirror the rules read through, for the caller to put in its slot once applied.
    pub mirror: Option<Arc<Mirror>>,
    /// Secret files the receivers read that cannot be read now, one line each naming the file:
    /// `run --check` refuses them; `run` says so at start-up and retries deliveries until they
    /// appear (a mounted Secret can arrive late).
    pub missing_secrets: Vec<String>,
}

/// Loads rule files, SLO specs, routes and owners, and builds the sources, for this shard.
/// Any error rejects the whole configuration (nothing is applied).
pub fn load(cfg: &RunConfig, handle: &tokio::runtime::Handle) -> Result<Loaded, String> {
    load_keeping(cfg, handle, &MirrorSlot::default())
}

/// [`load`], keeping the mirror in `slot` across reloads: what the agents wrote to it stays
/// when its configuration does not change. The slot is where the HTTP face writes to it.
pub fn load_keeping(cfg: &RunConfig, handle: &tokio::runtime::Handle, slot: &MirrorSlot) -> Result<Loaded, String> {
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
    let causes = match cfg.cause_paths() {
        Ok(paths) => match crate::cause::CauseRules::load_files(&paths) {
            Ok(rules) => crate::cause::Causes::new(
                rules,
                crate::cause::Settings {
                    team_label: owners
                        .as_ref()
                        .map_or_else(|| "team".to_string(), |o| o.team_label.clone()),
                    external_url: external_url(cfg),
                },
            ),
            Err(e) => {
                errors.push(e.to_string());
                crate::cause::Causes::default()
            }
        },
        Err(e) => {
            errors.push(format!("cause_files: {e}"));
            crate::cause::Causes::default()
        }
    };
    // Where the alerts about failing notifications go: receivers that exist, pinned ahead of
    // the tree so that they never share the failing receiver's route.
    let mut notify = notify;
    let mut fallback_receivers = Vec::new();
    let mut missing_secrets = Vec::new();
    if let Some(n) = notify.as_mut() {
        match notification_failure_receivers(cfg, n, owners.as_ref()) {
            Ok(r) => fallback_receivers = r,
            Err(e) => errors.push(e),
        }
        n.pin_receivers(&fallback_receivers);
        missing_secrets = crate::notify::secrets::missing(n);
    }
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
    crate::rules::set_evidence(&mut groups);
    let mut owned = shard::owned(&groups, cfg.shard, cfg.shard_by_file).into_iter();
    groups.retain(|_| owned.next().unwrap_or(false));
    let engine = Engine::new(crate::promql::EngineOptions {
        closed_windows: cfg.promql_v2,
        ..Default::default()
    });
    let mut federated = federated.with_local_names(recorded_here);
    let mirror = mirror_for(cfg, &groups, engine.opts.lookback_ms, slot)?;
    if let Some(m) = &mirror {
        federated = federated.with_mirror(Arc::clone(m))?;
    }
    let source: Arc<dyn Queryable> = Arc::new(federated);
    Ok(Loaded {
        setup: Setup {
            engine,
            source,
            source_name: first.name.clone(),
            owners,
            causes,
            external_labels: cfg.external_labels.clone(),
            external_url: external_url(cfg),
            resend_delay_ms: cfg.resend_delay_ms,
            interval_ms: cfg.evaluation_interval_ms,
            alerts_gc_interval_ms: cfg.alerts_gc_interval_ms,
            fallback_receivers,
        },
        groups,
        notify,
        mirror,
        missing_secrets,
    })
}

/// `notification_failures.receivers` (each must exist), else the default: the default owner's
/// page and notify receivers, the root route's receiver, then every other receiver in file order;
/// receivers without an integration (nothing would arrive) are left out of the default.
fn notification_failure_receivers(
    cfg: &RunConfig,
    notify: &crate::notify::Config,
    owners: Option<&Owners>,
) -> Result<Vec<String>, String> {
    if !cfg.notification_failure_receivers.is_empty() {
        for r in &cfg.notification_failure_receivers {
            if notify.receiver(r).is_none() {
                return Err(format!(
                    "{}: notification_failures: receiver {r:?} is not defined in the routes file",
                    cfg.path.display()
                ));
            }
        }
        return Ok(cfg.notification_failure_receivers.clone());
    }
    let mut order: Vec<String> = Vec::new();
    if let Some(team) = owners.and_then(|o| o.default.as_deref().and_then(|d| o.team(d))) {
        order.extend(team.receivers.page.iter().cloned());
        order.extend(team.receivers.notify.iter().cloned());
    }
    order.push(notify.route.receiver.clone());
    order.extend(notify.receivers.iter().map(|r| r.name.clone()));
    let mut out: Vec<String> = Vec::new();
    for r in order {
        let delivers = notify
            .receiver(&r)
            .is_some_and(|rc| !rc.integrations.is_empty() || !rc.alertmanager_configs.is_empty());
        if delivers && !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}

/// The mirror of the one source with a `mirror:` block: the slot's when its source and
/// configuration are the same, else a new one. It keeps the series of every selector of this
/// shard's rules. The slot itself is set by the caller once the configuration is applied.
fn mirror_for(
    cfg: &RunConfig,
    groups: &[Group],
    lookback_ms: i64,
    slot: &MirrorSlot,
) -> Result<Option<Arc<Mirror>>, String> {
    let mut mirrored = cfg.sources.iter().filter(|s| s.mirror.is_some());
    let Some(sc) = mirrored.next() else {
        return Ok(None);
    };
    if let Some(other) = mirrored.next() {
        return Err(format!(
            "sources {} and {}: only one source can have a mirror (remote writes have one endpoint)",
            sc.name, other.name
        ));
    }
    let mcfg = sc.mirror.clone().unwrap_or_default();
    let mirror = match slot.get() {
        Some(m) if m.source_name() == sc.name && *m.config() == mcfg => m,
        _ => Arc::new(Mirror::new(
            &sc.name,
            mcfg,
            lookback_ms,
            Arc::new(|| SystemClock.now_ms()),
        )),
    };
    let mut sets = Vec::new();
    for r in groups.iter().flat_map(|g| g.rules()) {
        if let Ok(windows) = crate::promql::selector_windows(r.expr(), 0, 0, lookback_ms) {
            sets.extend(windows.into_iter().map(|w| w.matchers));
        }
    }
    mirror.set_selectors(sets);
    Ok(Some(mirror))
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
