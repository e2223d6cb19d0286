//! `watchfire.yaml`: the evaluator's configuration.
//!
//! Strict: unknown keys, wrong types and bad values are errors with `file:line:col`. Relative
//! paths are resolved against the directory of the configuration file.
//!
//! ```yaml
//! sources:                      # at least one; see "Federation" below
//!   - name: amp                 # unique, [a-zA-Z0-9_-]+
//!     type: prometheus          # prometheus | cloudwatch | embedded
//!     url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-123  # prometheus only
//!     timeout: 30s              # per request (default 30s)
//!     retries: 2                # extra attempts on 5xx / timeouts / transport errors (default 2)
//!     headers: {X-Scope-OrgID: ml}
//!     sigv4: {region: us-east-1, service: aps}   # optional; service defaults to aps
//!     metrics: ['DCGM_.*', 'kube_.*']   # optional: metric names (anchored regexes) this source owns
//!     query_concurrency: 4      # a group's whole-expression requests in flight (default 4)
//!     query_batch: 16           # a group's vector expressions per request (default 16; 1: one each)
//!     max_in_flight: 32         # requests in flight from the whole replica, every group's (default 32)
//!     query_params:             # optional: form fields added to every query (the backend's own;
//!       max_samples_processed_warning_threshold: '100000000'   # here AMP's sample guards)
//!   - name: cloudwatch
//!     type: cloudwatch          # GetMetricData through the default credential chain (IRSA)
//!     mapping_file: cloudwatch-mapping.yaml   # required: CloudWatch metrics as PromQL series
//!     region: us-west-2         # optional: else the mapping's `region`, else the default chain's
//!     endpoint: http://127.0.0.1:5000   # optional: endpoint override (moto, VPC endpoints)
//!     timeout: 30s              # per call (default 30s)
//!   - name: local
//!     type: embedded            # in-process store (node-probe events, replay data)
//! rule_files: [rules/*.yaml]    # globs
//! slo_files: [slos/*.yaml]      # Sloth/OpenSLO specs, turned into rules at load
//! routes_file: routes.yaml      # Alertmanager configuration (route tree, receivers)
//! owners_file: owners.yaml      # optional: owner stamping
//! cause_files: [causes/*.yaml]  # optional: cause rules (the cause stage, src/cause/)
//! evaluation_interval: 1m       # groups without `interval` (default 1m)
//! query_offset: 0s              # groups without `query_offset` (default 0s)
//! promql_compat: "3"            # "2": Prometheus 2.x's windows and rate extrapolation where
//!                               #   watchfire evaluates itself, to match a 2.x backend (default "3")
//! resend_delay: 1m              # --rules.alert.resend-delay (default 1m)
//! alerts_gc_interval: 30m       # resolved alerts leave the notifier's store (Alertmanager's
//!                               #   --alerts.gc-interval, default 30m)
//! external_labels: {cluster: ml-prod, environment: prod}
//! external_url: https://watchfire.example.com
//! state_dir: /var/lib/watchfire # SQLite database `watchfire.db` lives here
//! http:
//!   listen: 127.0.0.1:9099      # default 127.0.0.1:9099
//!   bearer_token_file: /secrets/token   # or bearer_token_env: WATCHFIRE_TOKEN
//!   open: false                 # true: mutating endpoints without a token (explicit opt-in)
//!   query_timeout: 2m           # the query API (/api/v1/query...): longest query,
//!   query_max_concurrency: 20   #   queries at once (more wait up to their timeout),
//!   query_max_samples: 50000000 #   samples a query may load (Prometheus' defaults)
//!   read_timeout: 10s           # headers, then body, must each arrive within it (slow clients)
//!   idle_timeout: 6m            # a keep-alive connection idle after an answer is closed
//!   max_connections: 16384      # open client connections (also kept below the fd limit)
//! shard: 0/1                    # this replica evaluates the groups whose hash % M == N (groups
//!                               #   reading each other's outputs go together: run/shard.rs)
//! notification_failures:       # where WatchfireNotificationsFailing / ...DeadLettered go:
//!   receivers: [platform-sns]   #   the first of these not failing itself (default: the default
//!                               #   owner's page and notify receivers, the root route's, the rest)
//! shard_by: group               # or `file`: a rule file's groups all go to one shard (a file
//!                               #   per cluster: a shard reads some clusters, and its mirror's
//!                               #   agents send only theirs)
//! ```
//!
//! Federation: each selector is answered by the source that owns its metric name: a
//! `cloudwatch` source owns the names of its mapping file; the embedded store owns the names it
//! holds; a `prometheus` source owns the names its `metrics` regexes match; every other name
//! belongs to the first `prometheus` source. A selector without a metric name goes to every
//! source and the results are merged. When every selector of a rule's expression belongs to one
//! `prometheus` source (and none reads a recording rule evaluated here), the whole expression is
//! sent to that source as one instant query (pushdown). See `src/source/federated.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::labels::Labels;
use crate::source::config::{self as source_config, SourceConfig};
use crate::yaml::v2::{Node, Pos};
use crate::yaml::{FileError, Reader};

/// A shard: this replica evaluates the groups `run::shard` places at `index` of `total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub total: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, total: 1 }
    }
}

impl Shard {
    /// Parses `N/M` with `0 <= N < M`.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let (n, m) = s
            .split_once('/')
            .ok_or_else(|| format!("shard {s:?} must look like N/M, e.g. 0/2"))?;
        let index: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("shard {s:?}: N is not a number"))?;
        let total: u32 = m
            .trim()
            .parse()
            .map_err(|_| format!("shard {s:?}: M is not a number"))?;
        if total == 0 || index >= total {
            return Err(format!("shard {s:?}: need 0 <= N < M"));
        }
        Ok(Shard { index, total })
    }
}

/// HTTP server settings.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpConfig {
    pub listen: String,
    /// The token mutating endpoints require (read from the file or environment at load).
    pub bearer_token: Option<String>,
    /// Mutating endpoints need no token.
    pub open: bool,
    /// The query API's bounds (Prometheus' `--query.timeout`, `--query.max-concurrency`,
    /// `--query.max-samples`, with its defaults).
    pub query_timeout_ms: i64,
    pub query_max_concurrency: usize,
    pub query_max_samples: u64,
    /// A request's headers, and then its body, must each arrive within this (slow clients).
    pub read_timeout_ms: i64,
    /// A keep-alive connection idle this long after an answer is closed.
    pub idle_timeout_ms: i64,
    /// Open client connections at most (kept below the file-descriptor limit too).
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:9099".into(),
            bearer_token: None,
            open: false,
            query_timeout_ms: 120_000,
            query_max_concurrency: 20,
            query_max_samples: 50_000_000,
            read_timeout_ms: 10_000,
            // Above Prometheus' remote-write client's five minutes (the server's default too).
            idle_timeout_ms: 360_000,
            max_connections: 16_384,
        }
    }
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub path: PathBuf,
    pub sources: Vec<SourceConfig>,
    pub rule_files: Vec<String>,
    pub slo_files: Vec<String>,
    pub routes_file: Option<PathBuf>,
    pub owners_file: Option<PathBuf>,
    /// Cause rule globs (the cause stage between rules and notify).
    pub cause_files: Vec<String>,
    pub evaluation_interval_ms: i64,
    pub query_offset_ms: i64,
    /// Local evaluation with Prometheus 2.x's semantics (`promql_compat: "2"`), to answer as a
    /// 2.x backend does.
    pub promql_v2: bool,
    pub resend_delay_ms: i64,
    /// How often resolved alerts are collected from the notifier (`--alerts.gc-interval`).
    pub alerts_gc_interval_ms: i64,
    pub external_labels: Labels,
    pub external_url: String,
    pub state_dir: Option<PathBuf>,
    pub http: HttpConfig,
    pub shard: Shard,
    /// `shard_by: file`: the unit placed on a shard is a rule file, not a group.
    pub shard_by_file: bool,
    /// `notification_failures.receivers`: where `WatchfireNotificationsFailing` and
    /// `WatchfireNotificationsDeadLettered` go, the first of them not failing itself; empty: the
    /// default owner's page and notify receivers, the root route's, then every other receiver.
    pub notification_failure_receivers: Vec<String>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            path: PathBuf::new(),
            sources: Vec::new(),
            rule_files: Vec::new(),
            slo_files: Vec::new(),
            routes_file: None,
            owners_file: None,
            cause_files: Vec::new(),
            evaluation_interval_ms: 60_000,
            query_offset_ms: 0,
            promql_v2: false,
            resend_delay_ms: 60_000,
            alerts_gc_interval_ms: 30 * 60_000,
            external_labels: Labels::empty(),
            external_url: String::new(),
            state_dir: None,
            http: HttpConfig::default(),
            shard: Shard::default(),
            shard_by_file: false,
            notification_failure_receivers: Vec::new(),
        }
    }
}

impl RunConfig {
    /// Expands `rule_files` (files, directories, globs, relative to the config file) to rule
    /// files as every command does ([`crate::rules::paths`]).
    pub fn rule_paths(&self) -> Result<Vec<PathBuf>, String> {
        let e = crate::rules::paths::expand(&self.base_dir(), &self.rule_files);
        match e.bad.first() {
            Some((p, why)) => Err(format!("rule_files: bad pattern {p:?}: {why}")),
            None => Ok(e.files),
        }
    }

    /// Expands `slo_files` globs.
    pub fn slo_paths(&self) -> Result<Vec<PathBuf>, String> {
        expand_globs(&self.base_dir(), &self.slo_files)
    }

    /// Expands `cause_files` globs.
    pub fn cause_paths(&self) -> Result<Vec<PathBuf>, String> {
        expand_globs(&self.base_dir(), &self.cause_files)
    }

    fn base_dir(&self) -> PathBuf {
        self.path.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

fn expand_globs(base: &Path, patterns: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in patterns {
        let full = if Path::new(p).is_absolute() {
            PathBuf::from(p)
        } else {
            base.join(p)
        };
        let s = full.to_string_lossy().into_owned();
        let paths = glob::glob(&s).map_err(|e| format!("bad pattern {p:?}: {e}"))?;
        let mut matched: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
        matched.sort();
        out.extend(matched);
    }
    Ok(out)
}

/// The keys of `http`.
pub const HTTP_KEYS: &[&str] = &[
    "listen",
    "bearer_token_file",
    "bearer_token_env",
    "open",
    "query_timeout",
    "query_max_concurrency",
    "query_max_samples",
    "read_timeout",
    "idle_timeout",
    "max_connections",
];

/// The keys of `notification_failures`.
pub const NOTIFICATION_FAILURES_KEYS: &[&str] = &["receivers"];

/// The top-level keys of watchfire.yaml (docs/reference/watchfire.yaml.md is tested against them).
pub const TOP_KEYS: &[&str] = &[
    "sources",
    "rule_files",
    "slo_files",
    "routes_file",
    "owners_file",
    "cause_files",
    "evaluation_interval",
    "query_offset",
    "promql_compat",
    "resend_delay",
    "alerts_gc_interval",
    "external_labels",
    "external_url",
    "state_dir",
    "http",
    "shard",
    "shard_by",
    "notification_failures",
];

/// Loads and validates a configuration file.
pub fn load_file(path: &Path) -> Result<RunConfig, FileError> {
    let (text, name) = crate::yaml::read_file(path)?;
    let mut cfg = load_str(&text, &name, &|k| std::env::var(k).ok())?;
    cfg.path = path.to_path_buf();
    rebase_paths(&mut cfg, path);
    Ok(cfg)
}

/// Relative file paths in the configuration resolve against the file's directory.
fn rebase_paths(cfg: &mut RunConfig, path: &Path) {
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let rebase = |p: &mut Option<PathBuf>| {
        if let Some(x) = p.as_mut() {
            if x.is_relative() {
                *x = base.join(&*x);
            }
        }
    };
    rebase(&mut cfg.routes_file);
    rebase(&mut cfg.owners_file);
    rebase(&mut cfg.state_dir);
    for s in &mut cfg.sources {
        rebase(&mut s.mapping_file);
    }
}

/// Parses configuration text; `env` looks up environment variables (for `bearer_token_env`).
pub fn load_str(text: &str, file: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<RunConfig, FileError> {
    load_str_with(text, file, env, true)
}

/// Checks a configuration file as rulecheck does in CI: everything `watchfire run --check`
/// checks except the secrets it names (token files and environment variables exist only where
/// watchfire runs). Paths are resolved against the file's directory.
pub fn check_file(path: &Path) -> Result<RunConfig, FileError> {
    let (text, name) = crate::yaml::read_file(path)?;
    let mut cfg = load_str_with(&text, &name, &|_| Some("(set at run time)".into()), false)?;
    cfg.path = path.to_path_buf();
    rebase_paths(&mut cfg, path);
    Ok(cfg)
}

fn load_str_with(
    text: &str,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
    read_secret_files: bool,
) -> Result<RunConfig, FileError> {
    let r = Reader { file };
    let mut cfg = RunConfig {
        path: PathBuf::from(file),
        ..RunConfig::default()
    };
    let Some(root) = r.parse(text)? else {
        return Err(r.err(
            Pos { line: 1, col: 1 },
            "the configuration is empty: at least `sources` is required",
        ));
    };
    let entries = r.map(&root, "the configuration", TOP_KEYS)?;
    let mut saw_sources = None;
    for (key, kpos, v) in entries {
        match key.as_str() {
            "sources" => {
                saw_sources = Some(kpos);
                for s in r.seq(v, "sources")? {
                    let sc = source_config::decode(&r, s)?;
                    if cfg.sources.iter().any(|o| o.name == sc.name) {
                        return Err(r.err(s.pos(), format!("source name {:?} repeated", sc.name)));
                    }
                    cfg.sources.push(sc);
                }
            }
            "rule_files" => cfg.rule_files = r.strings(v, "rule_files")?,
            "slo_files" => cfg.slo_files = r.strings(v, "slo_files")?,
            "routes_file" => cfg.routes_file = Some(PathBuf::from(r.string(v, "routes_file")?)),
            "owners_file" => cfg.owners_file = Some(PathBuf::from(r.string(v, "owners_file")?)),
            "cause_files" => cfg.cause_files = r.strings(v, "cause_files")?,
            "evaluation_interval" => {
                cfg.evaluation_interval_ms = r.duration_ms(v, "evaluation_interval", "30s or 1m")?;
                if cfg.evaluation_interval_ms <= 0 {
                    return Err(r.err(v.pos(), "evaluation_interval must be greater than 0"));
                }
            }
            "query_offset" => cfg.query_offset_ms = r.duration_ms(v, "query_offset", "30s or 1m")?,
            "promql_compat" => {
                cfg.promql_v2 = match r.string(v, "promql_compat")?.as_str() {
                    "2" => true,
                    "3" => false,
                    other => return Err(r.err(v.pos(), format!("promql_compat {other:?} must be \"2\" or \"3\""))),
                }
            }
            "resend_delay" => cfg.resend_delay_ms = r.duration_ms(v, "resend_delay", "30s or 1m")?,
            "alerts_gc_interval" => {
                cfg.alerts_gc_interval_ms = r.duration_ms(v, "alerts_gc_interval", "30m")?;
                if cfg.alerts_gc_interval_ms <= 0 {
                    return Err(r.err(v.pos(), "alerts_gc_interval must be positive".to_string()));
                }
            }
            "external_labels" => {
                let mut pairs = BTreeMap::new();
                for (k, kp, lv) in r.map(v, "external_labels", &[])? {
                    if !crate::labels::is_valid_label_name(&k) {
                        return Err(r.err(kp, format!("external_labels: {k:?} is not a valid label name")));
                    }
                    pairs.insert(k, r.string(lv, "an external label value")?);
                }
                cfg.external_labels = Labels::from_pairs(pairs);
            }
            "external_url" => {
                let u = r.string(v, "external_url")?;
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(r.err(v.pos(), "external_url must start with http:// or https://"));
                }
                cfg.external_url = u.trim_end_matches('/').to_string();
            }
            "state_dir" => cfg.state_dir = Some(PathBuf::from(r.string(v, "state_dir")?)),
            "http" => cfg.http = http(&r, v, env, read_secret_files)?,
            "shard" => cfg.shard = Shard::parse(&r.string(v, "shard")?).map_err(|e| r.err(v.pos(), e))?,
            "notification_failures" => {
                for (_, _, nv) in r.map(v, "notification_failures", NOTIFICATION_FAILURES_KEYS)? {
                    cfg.notification_failure_receivers = r.strings(nv, "notification_failures.receivers")?;
                }
            }
            "shard_by" => {
                cfg.shard_by_file = match r.string(v, "shard_by")?.as_str() {
                    "group" => false,
                    "file" => true,
                    other => return Err(r.err(v.pos(), format!("shard_by {other:?} must be \"group\" or \"file\""))),
                }
            }
            _ => {}
        }
    }
    if saw_sources.is_none() || cfg.sources.is_empty() {
        return Err(r.err(
            saw_sources.unwrap_or(root.pos()),
            "at least one source is required under `sources` (type prometheus, cloudwatch or embedded)",
        ));
    }
    Ok(cfg)
}

fn http(
    r: &Reader<'_>,
    node: &Node,
    env: &dyn Fn(&str) -> Option<String>,
    read_secret_files: bool,
) -> Result<HttpConfig, FileError> {
    let mut h = HttpConfig::default();
    let mut token_pos = None;
    for (k, kp, v) in r.map(node, "http", HTTP_KEYS)? {
        match k.as_str() {
            "listen" => {
                let l = r.string(v, "http listen")?;
                if l.parse::<std::net::SocketAddr>().is_err() {
                    return Err(r.err(v.pos(), format!("listen {l:?} must be host:port, e.g. 0.0.0.0:9099")));
                }
                h.listen = l;
            }
            "bearer_token_file" | "bearer_token_env" => {
                if token_pos.is_some() {
                    return Err(r.err(kp, "give only one of bearer_token_file and bearer_token_env"));
                }
                token_pos = Some(kp);
                let s = r.string(v, &k)?;
                let tok = if k == "bearer_token_file" && !read_secret_files {
                    "(read at run time)".to_string()
                } else if k == "bearer_token_file" {
                    // Relative to the configuration file, as every other path in it.
                    let path = Path::new(r.file).parent().unwrap_or(Path::new("")).join(&s);
                    crate::secret::read_secret_file(&path)
                        .map_err(|e| r.err(v.pos(), format!("bearer_token_file {s:?}: {e}")))?
                } else {
                    env(&s).ok_or_else(|| r.err(v.pos(), format!("environment variable {s} is not set")))?
                };
                let tok = tok.trim().to_string();
                if tok.is_empty() {
                    return Err(r.err(v.pos(), "the bearer token is empty"));
                }
                h.bearer_token = Some(tok);
            }
            "query_timeout" => {
                h.query_timeout_ms = r.duration_ms(v, "query_timeout", "2m")?;
                if h.query_timeout_ms <= 0 {
                    return Err(r.err(v.pos(), "query_timeout must be greater than 0"));
                }
            }
            "query_max_concurrency" => {
                h.query_max_concurrency = r.positive_int(v, "query_max_concurrency")? as usize;
            }
            "query_max_samples" => h.query_max_samples = r.positive_int(v, "query_max_samples")?,
            "read_timeout" => {
                h.read_timeout_ms = r.duration_ms(v, "read_timeout", "10s")?;
                if h.read_timeout_ms <= 0 {
                    return Err(r.err(v.pos(), "read_timeout must be greater than 0"));
                }
            }
            "idle_timeout" => {
                h.idle_timeout_ms = r.duration_ms(v, "idle_timeout", "6m")?;
                if h.idle_timeout_ms <= 0 {
                    return Err(r.err(v.pos(), "idle_timeout must be greater than 0"));
                }
            }
            "max_connections" => h.max_connections = r.positive_int(v, "max_connections")? as usize,
            _ => h.open = r.bool(v, "http open")?,
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::config::SourceKind;

    fn load(s: &str) -> Result<RunConfig, FileError> {
        load_str(s, "w.yaml", &|k| (k == "TOK").then(|| "secret".to_string()))
    }

    #[test]
    fn full_config() {
        let c = load(
            "sources:\n  - name: amp\n    type: prometheus\n    url: https://x/ws/\n    timeout: 5s\n    sigv4: {region: us-east-1}\n  - {name: local, type: embedded}\nrule_files: [r/*.yaml]\nevaluation_interval: 30s\nexternal_labels: {cluster: c1}\nhttp: {listen: '127.0.0.1:1234', bearer_token_env: TOK}\nshard: 1/3\n",
        )
        .unwrap();
        assert_eq!(c.sources.len(), 2);
        assert_eq!(c.sources[0].url, "https://x/ws");
        assert_eq!(c.sources[0].sigv4.as_ref().unwrap().service, "aps");
        assert_eq!(c.evaluation_interval_ms, 30_000);
        assert_eq!(c.http.bearer_token.as_deref(), Some("secret"));
        assert_eq!(c.shard, Shard { index: 1, total: 3 });
    }

    #[test]
    fn a_relative_token_file_is_read_beside_the_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("secrets")).unwrap();
        std::fs::write(dir.path().join("secrets/token"), "s3cret\n").unwrap();
        let path = dir.path().join("watchfire.yaml");
        std::fs::write(
            &path,
            "sources: [{name: a, type: embedded}]\nhttp: {bearer_token_file: secrets/token}\n",
        )
        .unwrap();
        // The test's working directory is the crate's, where no secrets/token is.
        let c = load_file(&path).unwrap();
        assert_eq!(c.http.bearer_token.as_deref(), Some("s3cret"));
        std::fs::remove_file(dir.path().join("secrets/token")).unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(e.contains("bearer_token_file \"secrets/token\""), "{e}");
    }

    #[test]
    fn query_api_limits() {
        let c = load("sources: [{name: a, type: embedded}]\n").unwrap();
        assert_eq!(
            (
                c.http.query_timeout_ms,
                c.http.query_max_concurrency,
                c.http.query_max_samples
            ),
            (120_000, 20, 50_000_000),
            "Prometheus' defaults"
        );
        let c = load(
            "sources: [{name: a, type: embedded}]\nhttp: {query_timeout: 30s, query_max_concurrency: 4, query_max_samples: 1000}\n",
        )
        .unwrap();
        assert_eq!(
            (
                c.http.query_timeout_ms,
                c.http.query_max_concurrency,
                c.http.query_max_samples
            ),
            (30_000, 4, 1000)
        );
        let c = load(
            "sources: [{name: a, type: embedded}]\nhttp: {read_timeout: 3s, idle_timeout: 90s, max_connections: 64}\n",
        )
        .unwrap();
        assert_eq!(
            (c.http.read_timeout_ms, c.http.idle_timeout_ms, c.http.max_connections),
            (3_000, 90_000, 64)
        );
        let d = HttpConfig::default();
        assert_eq!(
            (d.read_timeout_ms, d.idle_timeout_ms, d.max_connections),
            (10_000, 360_000, 16_384)
        );
        for (bad, col, msg) in [
            ("query_timeout: 0s", 8, "greater than 0"),
            ("query_max_concurrency: 0", 8, "at least 1"),
            ("query_max_samples: many", 8, "at least 1"),
            ("read_timeout: 0s", 8, "greater than 0"),
            ("idle_timeout: 0s", 8, "greater than 0"),
            ("max_connections: 0", 8, "at least 1"),
        ] {
            let e = load(&format!("sources: [{{name: a, type: embedded}}]\nhttp: {{{bad}}}\n")).unwrap_err();
            assert_eq!(e.pos.line, 2, "{e}");
            assert!(e.pos.col > col, "{e}");
            assert!(e.message.contains(msg), "{e}");
        }
    }

    #[test]
    fn errors_have_positions() {
        let e = load("sources:\n  - name: a\n    type: prometheus\n    url: http://x\nbogus: 1\n").unwrap_err();
        assert_eq!((e.pos.line, e.pos.col), (5, 1), "{e}");
        assert!(e.message.contains("unknown key"), "{e}");
        let e = load("sources:\n  - name: a\n    type: graphite\n").unwrap_err();
        assert_eq!(e.pos.line, 3, "{e}");
        let e = load("sources: []\n").unwrap_err();
        assert!(e.message.contains("at least one source"), "{e}");
        let e = load("sources:\n  - {name: a, type: embedded}\nshard: 3/3\n").unwrap_err();
        assert_eq!(e.pos.line, 3);
        let e = load("sources:\n  - {name: a, type: embedded}\nshard_by: cluster\n").unwrap_err();
        assert_eq!((e.pos.line, e.pos.col), (3, 11), "{e}");
        assert!(e.message.contains("\"group\" or \"file\""), "{e}");
        assert!(
            load("sources:\n  - {name: a, type: embedded}\nshard_by: file\n")
                .unwrap()
                .shard_by_file
        );
        let e = load("sources:\n  - {name: a, type: prometheus}\n").unwrap_err();
        assert!(e.message.contains("needs a url"), "{e}");
        let e = load("sources:\n  - name: a\n    type: prometheus\n    url: http://x\n    query_concurrency: 0\n")
            .unwrap_err();
        assert_eq!((e.pos.line, e.pos.col), (5, 24), "{e}");
        assert!(
            e.message
                .contains("query_concurrency must be a whole number from 1 to 64"),
            "{e}"
        );
        let e = load("sources:\n  - {name: a, type: embedded, query_concurrency: 2}\n").unwrap_err();
        assert!(e.message.contains("type embedded takes no query_concurrency"), "{e}");
        let c = load("sources:\n  - {name: a, type: prometheus, url: 'http://x', query_concurrency: 16}\n").unwrap();
        assert_eq!(c.sources[0].query_concurrency, 16);
        let c = load("sources:\n  - {name: a, type: prometheus, url: 'http://x'}\n").unwrap();
        assert_eq!(
            c.sources[0].query_concurrency, 4,
            "Prometheus' default for concurrent rule evaluation"
        );
        assert_eq!(c.sources[0].query_batch, 16);
        assert_eq!(c.sources[0].max_in_flight, 32);
        let c = load("sources:\n  - {name: a, type: prometheus, url: 'http://x', max_in_flight: 8}\n").unwrap();
        assert_eq!(c.sources[0].max_in_flight, 8);
        let e = load("sources:\n  - {name: a, type: prometheus, url: 'http://x', max_in_flight: 2000}\n").unwrap_err();
        assert!(
            e.message
                .contains("max_in_flight must be a whole number from 1 to 1024"),
            "{e}"
        );
        let e =
            load("sources:\n  - {name: a, type: cloudwatch, mapping_file: m.yaml, max_in_flight: 2}\n").unwrap_err();
        assert!(e.message.contains("type cloudwatch takes no max_in_flight"), "{e}");
    }

    #[test]
    fn query_params_are_the_backends_own_fields() {
        let c = load(
            "sources:\n  - name: amp\n    type: prometheus\n    url: 'http://x'\n    query_params:\n      max_samples_processed_warning_threshold: 1000000\n      partial_response: 'false'\n",
        )
        .unwrap();
        assert_eq!(
            c.sources[0].query_params,
            vec![
                (
                    "max_samples_processed_warning_threshold".to_string(),
                    "1000000".to_string()
                ),
                ("partial_response".to_string(), "false".to_string())
            ]
        );
        let e = load(
            "sources:\n  - name: amp\n    type: prometheus\n    url: 'http://x'\n    query_params:\n      time: '5'\n",
        )
        .unwrap_err();
        assert!(
            e.message.contains("query parameter \"time\" is set by watchfire"),
            "{e}"
        );
        assert_eq!((e.pos.line, e.pos.col), (6, 7), "{e}");
        let e =
            load("sources:\n  - name: amp\n    type: prometheus\n    url: 'http://x'\n    query_params: {'a b': 1}\n")
                .unwrap_err();
        assert!(e.message.contains("must be [a-zA-Z0-9_.-]+"), "{e}");
        let e = load("sources:\n  - {name: a, type: embedded, query_params: {x: 1}}\n").unwrap_err();
        assert!(e.message.contains("type embedded takes no query_params"), "{e}");
        let e = load("sources:\n  - {name: a, type: prometheus, url: 'http://x', query_batch: 0}\n").unwrap_err();
        assert!(
            e.message.contains("query_batch must be a whole number from 1 to 256"),
            "{e}"
        );
        let e = load("sources:\n  - {name: a, type: embedded, query_batch: 2}\n").unwrap_err();
        assert!(e.message.contains("type embedded takes no query_batch"), "{e}");
        let c = load("sources:\n  - {name: a, type: prometheus, url: 'http://x', query_batch: 1}\n").unwrap();
        assert_eq!(c.sources[0].query_batch, 1);
    }

    #[test]
    fn cloudwatch_sources() {
        let c = load(
            "sources:\n  - {name: amp, type: prometheus, url: 'http://x', metrics: ['DCGM_.*', up]}\n  - name: cw\n    type: cloudwatch\n    mapping_file: m.yaml\n    region: us-west-2\n    endpoint: http://127.0.0.1:5000/\n    timeout: 10s\n",
        )
        .unwrap();
        let cw = &c.sources[1];
        assert_eq!(cw.kind, SourceKind::CloudWatch);
        assert_eq!(cw.mapping_file.as_deref(), Some(Path::new("m.yaml")));
        assert_eq!(
            (cw.region.as_str(), cw.endpoint.as_str()),
            ("us-west-2", "http://127.0.0.1:5000")
        );
        assert_eq!(cw.timeout, std::time::Duration::from_secs(10));
        assert!(c.sources[0].metrics[0].is_match("DCGM_FI_DEV_XID_ERRORS"));
        assert!(!c.sources[0].metrics[1].is_match("upx"), "anchored");
        let cases = [
            (
                "sources:\n  - {name: cw, type: cloudwatch}\n",
                (2, 5),
                "needs a mapping_file",
            ),
            (
                "sources:\n  - name: cw\n    type: cloudwatch\n    mapping_file: m.yaml\n    url: http://x\n",
                (5, 5),
                "type cloudwatch takes no url",
            ),
            (
                "sources:\n  - name: cw\n    type: cloudwatch\n    mapping_file: m.yaml\n    region: US West\n",
                (5, 13),
                "region",
            ),
            (
                "sources:\n  - name: cw\n    type: cloudwatch\n    mapping_file: m.yaml\n    endpoint: localhost:1\n",
                (5, 15),
                "http://",
            ),
            (
                "sources:\n  - name: p\n    type: prometheus\n    url: http://x\n    mapping_file: m.yaml\n",
                (5, 5),
                "type prometheus takes no mapping_file",
            ),
            (
                "sources:\n  - name: p\n    type: prometheus\n    url: http://x\n    metrics: ['(']\n",
                (5, 15),
                "invalid regex",
            ),
            (
                "sources:\n  - name: e\n    type: embedded\n    url: http://x\n",
                (4, 5),
                "takes no url",
            ),
        ];
        for (text, (line, col), want) in cases {
            let e = load(text).unwrap_err();
            assert_eq!((e.pos.line, e.pos.col), (line, col), "{text}: {e}");
            assert!(e.message.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn the_shipped_example_with_its_cloudwatch_source_loads() {
        // deploy/watchfire.yaml carries the CloudWatch source commented out; uncommented, it
        // loads, and its mapping file resolves next to it and loads too.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
        let text = std::fs::read_to_string(dir.join("watchfire.yaml")).unwrap();
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix("  # ") {
                Some(rest) if rest.starts_with("- name: cloudwatch") || rest.starts_with("  ") => {
                    format!("  {rest}\n")
                }
                _ => format!("{l}\n"),
            })
            .collect();
        let path = dir.join("watchfire.yaml");
        let mut c = load_str(&uncommented, &path.display().to_string(), &|_| Some("tok".into())).unwrap();
        c.path = path;
        let cw = c
            .sources
            .iter()
            .find(|s| s.kind == SourceKind::CloudWatch)
            .expect("cloudwatch source");
        let mapping = dir.join(cw.mapping_file.as_ref().unwrap());
        let m = crate::source::cloudwatch::Mapping::load_file(&mapping).unwrap();
        assert!(m.names().any(|n| n == "aws_s3_5xx_errors_sum"));
    }
}
