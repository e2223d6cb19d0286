//! Alertmanager's configuration file, read exactly as Alertmanager 0.25 reads it
//! (`config.LoadFile`): the same fields (unknown ones are errors), defaults, inheritance rules
//! and validation messages, each error with the file, line and column it comes from.
//!
//! Beyond Alertmanager, one namespaced key is accepted: `watchfire:` on a route
//! (`maintenance_windows`, `inherit_time_intervals`), on a receiver (`alertmanager_configs`) and
//! on a `slack_configs` entry (`blocks`, Slack's Block Kit).
//! Files without it load the same way in both.

use std::path::{Path, PathBuf};

use crate::labels::Matcher;

use super::integrations::{self, decode_http_config, HttpClientConfig, IntegrationConfig, Val};
use super::maintenance::{decode_route_extensions, RouteExtensions};
use super::matchers::{new_matcher, parse_matchers, sort as sort_matchers};
use super::timeinterval::{decode_named, NamedTimeInterval};
use crate::duration::{parse_alertmanager as parse_duration, Duration};
use crate::gofmt::quote_common_invisibles as go_quote;
use crate::labels::is_valid_label_name;
use crate::url::parse_am_url;
use crate::yaml::v2::{self as yaml, DResult, Decoder, Fail, Issue, Node, Pos};

/// Why a configuration file could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{path}:{pos}: YAML syntax error: {message}")]
    Syntax { path: String, pos: Pos, message: String },
    /// yaml.v2's collected type errors (unknown fields, wrong types, repeated keys).
    #[error("{}", format_issues(path, issues))]
    Unmarshal { path: String, issues: Vec<Issue> },
    /// A validation error (Alertmanager's message), with where it applies when known.
    #[error("{}", match pos { Some(p) => format!("{path}:{p}: {message}"), None => format!("{path}: {message}") })]
    Invalid {
        path: String,
        pos: Option<Pos>,
        message: String,
    },
}

fn format_issues(path: &str, issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{path}:{}: {}", i.pos, i.message))
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The message Alertmanager 0.25 (`amtool check-config`) gives for the same problem.
    pub fn alertmanager_message(&self) -> String {
        match self {
            ConfigError::Io { message, .. } => message.clone(),
            ConfigError::Syntax { pos, message, .. } => format!("yaml: line {}: {message}", pos.line),
            ConfigError::Unmarshal { issues, .. } => {
                let mut s = String::from("yaml: unmarshal errors:");
                for i in issues {
                    s.push_str(&format!("\n  line {}: {}", i.pos.line, i.message));
                }
                s
            }
            ConfigError::Invalid { message, .. } => message.clone(),
        }
    }

    /// Where the problem is, when known.
    pub fn pos(&self) -> Option<Pos> {
        match self {
            ConfigError::Syntax { pos, .. } => Some(*pos),
            ConfigError::Unmarshal { issues, .. } => issues.first().map(|i| i.pos),
            ConfigError::Invalid { pos, .. } => *pos,
            ConfigError::Io { .. } => None,
        }
    }
}

/// The `global:` section, with Alertmanager's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct GlobalConfig {
    pub resolve_timeout: Duration,
    pub http_config: HttpClientConfig,
    pub smtp_from: String,
    pub smtp_hello: String,
    pub smtp_smarthost: String,
    pub smtp_auth_username: String,
    pub smtp_auth_password: String,
    pub smtp_auth_password_file: String,
    pub smtp_auth_secret: String,
    pub smtp_auth_identity: String,
    pub smtp_require_tls: bool,
    pub slack_api_url: Option<String>,
    pub slack_api_url_file: String,
    pub pagerduty_url: Option<String>,
    pub opsgenie_api_url: Option<String>,
    pub opsgenie_api_key: String,
    pub opsgenie_api_key_file: String,
    pub wechat_api_url: Option<String>,
    pub wechat_api_secret: String,
    pub wechat_api_corp_id: String,
    pub victorops_api_url: Option<String>,
    pub victorops_api_key: String,
    pub victorops_api_key_file: String,
    pub telegram_api_url: Option<String>,
    pub webex_api_url: Option<String>,
    // Alertmanager 0.35's, read only for delivery.
    pub jira_api_url: Option<String>,
    pub telegram_bot_token: String,
    pub telegram_bot_token_file: String,
    pub wechat_api_secret_file: String,
    pub rocketchat_api_url: Option<String>,
    pub rocketchat_token: Option<String>,
    pub rocketchat_token_file: String,
    pub rocketchat_token_id: Option<String>,
    pub rocketchat_token_id_file: String,
    pub mattermost_webhook_url: Option<String>,
    pub mattermost_webhook_url_file: String,
}

impl Default for GlobalConfig {
    /// `config.DefaultGlobalConfig()`.
    fn default() -> Self {
        GlobalConfig {
            resolve_timeout: Duration::from_secs(300),
            http_config: HttpClientConfig {
                follow_redirects: true,
                enable_http2: true,
                ..Default::default()
            },
            smtp_from: String::new(),
            smtp_hello: "localhost".into(),
            smtp_smarthost: String::new(),
            smtp_auth_username: String::new(),
            smtp_auth_password: String::new(),
            smtp_auth_password_file: String::new(),
            smtp_auth_secret: String::new(),
            smtp_auth_identity: String::new(),
            smtp_require_tls: true,
            slack_api_url: None,
            slack_api_url_file: String::new(),
            pagerduty_url: Some("https://events.pagerduty.com/v2/enqueue".into()),
            opsgenie_api_url: Some("https://api.opsgenie.com/".into()),
            opsgenie_api_key: String::new(),
            opsgenie_api_key_file: String::new(),
            wechat_api_url: Some("https://qyapi.weixin.qq.com/cgi-bin/".into()),
            wechat_api_secret: String::new(),
            wechat_api_corp_id: String::new(),
            victorops_api_url: Some("https://alert.victorops.com/integrations/generic/20131114/alert/".into()),
            victorops_api_key: String::new(),
            victorops_api_key_file: String::new(),
            telegram_api_url: Some("https://api.telegram.org".into()),
            webex_api_url: Some("https://webexapis.com/v1/messages".into()),
            jira_api_url: None,
            telegram_bot_token: String::new(),
            telegram_bot_token_file: String::new(),
            wechat_api_secret_file: String::new(),
            rocketchat_api_url: Some("https://open.rocket.chat/".into()),
            rocketchat_token: None,
            rocketchat_token_file: String::new(),
            rocketchat_token_id: None,
            rocketchat_token_id_file: String::new(),
            mattermost_webhook_url: None,
            mattermost_webhook_url_file: String::new(),
        }
    }
}

/// A time-interval name used by a route, with where it is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameRef {
    pub name: String,
    pub pos: Pos,
}

/// One node of the route tree as written (`config.Route`).
#[derive(Clone, Debug)]
pub struct RouteConfig {
    pub receiver: String,
    pub receiver_pos: Option<Pos>,
    /// `group_by` labels other than `...`; `None` when there are none, which means "inherit"
    /// (Alertmanager 0.25 treats `group_by: []` the same as an absent `group_by`).
    pub group_by: Option<Vec<String>>,
    /// `group_by: ['...']`.
    pub group_by_all: bool,
    /// Legacy `match:` (label → value), sorted by label.
    pub match_eq: Vec<(String, String)>,
    /// Legacy `match_re:` (label → regex as written), sorted by label.
    pub match_re: Vec<(String, String)>,
    /// `matchers:`, parsed and sorted.
    pub matchers: Vec<Matcher>,
    pub mute_time_intervals: Vec<NameRef>,
    pub active_time_intervals: Vec<NameRef>,
    pub continue_: bool,
    pub routes: Vec<RouteConfig>,
    pub group_wait: Option<Duration>,
    pub group_interval: Option<Duration>,
    pub repeat_interval: Option<Duration>,
    /// The `watchfire:` extension.
    pub watchfire: RouteExtensions,
    pub pos: Pos,
}

impl RouteConfig {
    fn empty(pos: Pos) -> Self {
        RouteConfig {
            receiver: String::new(),
            receiver_pos: None,
            group_by: None,
            group_by_all: false,
            match_eq: Vec::new(),
            match_re: Vec::new(),
            matchers: Vec::new(),
            mute_time_intervals: Vec::new(),
            active_time_intervals: Vec::new(),
            continue_: false,
            routes: Vec::new(),
            group_wait: None,
            group_interval: None,
            repeat_interval: None,
            watchfire: RouteExtensions::default(),
            pos,
        }
    }

    fn has_matchers(&self) -> bool {
        !self.match_eq.is_empty() || !self.match_re.is_empty() || !self.matchers.is_empty()
    }
}

/// An inhibition rule as written (`config.InhibitRule`).
#[derive(Clone, Debug)]
pub struct InhibitRuleConfig {
    pub source_match: Vec<(String, String)>,
    pub source_match_re: Vec<(String, String)>,
    pub source_matchers: Vec<Matcher>,
    pub target_match: Vec<(String, String)>,
    pub target_match_re: Vec<(String, String)>,
    pub target_matchers: Vec<Matcher>,
    pub equal: Vec<String>,
    pub pos: Pos,
}

/// Forwarding to another Alertmanager (`watchfire: {alertmanager_configs: [...]}` on a
/// receiver): alerts are POSTed to `<url>/api/v2/alerts`.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertmanagerForwardConfig {
    pub url: String,
    pub send_resolved: bool,
    pub http_config: HttpClientConfig,
    pub pos: Pos,
}

/// A receiver: a name and its integrations.
#[derive(Clone, Debug)]
pub struct ReceiverConfig {
    pub name: String,
    pub pos: Pos,
    /// Alertmanager integrations in Alertmanager's order (by kind, then as written), with the
    /// global defaults applied (`url`, `http_config`, API URLs and keys).
    pub integrations: Vec<IntegrationConfig>,
    pub alertmanager_configs: Vec<AlertmanagerForwardConfig>,
}

/// A loaded configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub global: GlobalConfig,
    pub route: RouteConfig,
    pub inhibit_rules: Vec<InhibitRuleConfig>,
    pub receivers: Vec<ReceiverConfig>,
    /// Template globs, relative paths resolved against the file's directory.
    pub templates: Vec<String>,
    pub mute_time_intervals: Vec<NamedTimeInterval>,
    pub time_intervals: Vec<NamedTimeInterval>,
    /// The file it was read from, when read from a file.
    pub path: Option<PathBuf>,
}

/// The label the built-in alerts about failing notifications carry to name the receiver they
/// go to (see [`Config::pin_receivers`]).
pub const PINNED_RECEIVER_LABEL: &str = "watchfire_receiver";

impl Config {
    /// Puts one route per receiver at the head of the root's children: an alert whose
    /// [`PINNED_RECEIVER_LABEL`] names one of `receivers` goes to that receiver and nowhere
    /// else (grouped by `alertname`, no `group_wait`). `run` pins the built-in alerts about
    /// failing notifications to a receiver that is not failing, whatever the tree says.
    pub fn pin_receivers(&mut self, receivers: &[String]) {
        let pinned = receivers.iter().map(|r| {
            let mut route = RouteConfig::empty(self.route.pos);
            route.receiver = r.clone();
            route.matchers = vec![Matcher::equal(PINNED_RECEIVER_LABEL, r)];
            route.group_by = Some(vec!["alertname".to_string()]);
            route.group_wait = Some(Duration::ZERO);
            route
        });
        let rest = std::mem::take(&mut self.route.routes);
        self.route.routes = pinned.chain(rest).collect();
    }

    /// The receiver named `name`.
    pub fn receiver(&self, name: &str) -> Option<&ReceiverConfig> {
        self.receivers.iter().find(|r| r.name == name)
    }

    /// The named time interval (from `time_intervals` or `mute_time_intervals`).
    pub fn time_interval(&self, name: &str) -> Option<&NamedTimeInterval> {
        self.time_intervals
            .iter()
            .chain(self.mute_time_intervals.iter())
            .find(|t| t.name == name)
    }
}

/// Reads and validates a configuration file (`config.LoadFile`).
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let shown = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ConfigError::Io {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let mut cfg = load_str(&src, &shown)?;
    resolve_templates(&mut cfg, path);
    cfg.path = Some(path.to_path_buf());
    Ok(cfg)
}

/// Parses and validates configuration text (`config.Load`); `path` names it in errors.
pub fn load_str(src: &str, path: &str) -> Result<Config, ConfigError> {
    load_str_as(src, path, Dialect::Alertmanager)
}

/// How a configuration is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// Exactly as Alertmanager 0.25 reads it (`watchfire routes`, the amtool conformance).
    Alertmanager,
    /// For delivery: also `msteamsv2_configs`, and every receiver must be one watchfire
    /// delivers (see [`load_delivery_str`]).
    Delivery,
}

/// Reads a configuration for delivery (`run`, `run --check`, rulecheck, `replay`, `watchfire
/// test`): Alertmanager's reading plus `msteamsv2_configs`; an integration kind watchfire does not
/// deliver is an error at its key, and every templated text must parse. A configuration that
/// loads is one whose every receiver is delivered.
pub fn load_delivery_file(path: &Path) -> Result<Config, ConfigError> {
    let shown = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ConfigError::Io {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let mut cfg = load_str_as(&src, &shown, Dialect::Delivery)?;
    resolve_templates(&mut cfg, path);
    check_templates(&cfg, &shown)?;
    cfg.path = Some(path.to_path_buf());
    Ok(cfg)
}

/// [`load_delivery_file`] for text (template files are not read).
pub fn load_delivery_str(src: &str, path: &str) -> Result<Config, ConfigError> {
    let cfg = load_str_as(src, path, Dialect::Delivery)?;
    check_templates(&cfg, path)?;
    Ok(cfg)
}

/// The configuration's template files and the default templates, for the receivers.
pub fn notify_templates(cfg: &Config) -> Result<crate::template::NotifyTemplates, String> {
    let mut files = Vec::new();
    for pattern in &cfg.templates {
        let paths = glob::glob(pattern).map_err(|e| format!("templates {pattern:?}: {e}"))?;
        for p in paths {
            let p = p.map_err(|e| e.to_string())?;
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            files.push((p.display().to_string(), text));
        }
    }
    Ok(crate::template::NotifyTemplates::new(files))
}

/// Parses the template files and every templated text of the delivered integrations, so that a
/// broken template is a load error with its position rather than a failed send.
fn check_templates(cfg: &Config, path: &str) -> Result<(), ConfigError> {
    let invalid = |pos: Option<Pos>, message: String| ConfigError::Invalid {
        path: path.into(),
        pos,
        message,
    };
    let tmpl = notify_templates(cfg).map_err(|e| invalid(None, e))?;
    tmpl.check("").map_err(|e| invalid(None, e.to_string()))?;
    for r in &cfg.receivers {
        for ic in &r.integrations {
            // lettre has no CRAM-MD5: a secret that would select it is refused rather than
            // sent as a PLAIN password.
            let secret = !ic.fields.str("auth_secret").is_empty() || !cfg.global.smtp_auth_secret.is_empty();
            if ic.kind == "email_configs" && secret && ic.fields.str("auth_password").is_empty() {
                return Err(invalid(
                    Some(ic.fields.pos("auth_secret").unwrap_or(ic.pos)),
                    format!(
                        "receiver {}: email_configs: auth_secret (CRAM-MD5) is not delivered by watchfire; use auth_password or auth_password_file",
                        go_quote(&r.name)
                    ),
                ));
            }
            for (name, t, at) in ic.fields.texts() {
                // Secrets and URLs are not templates; a `{{` in one is not an error.
                if !is_template_field(ic.kind, &name) {
                    continue;
                }
                tmpl.check(t).map_err(|e| {
                    invalid(
                        Some(at),
                        format!("receiver {}: {}.{name}: {e}", go_quote(&r.name), ic.kind),
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// Whether a string field of an integration holds a template (the others are URLs, secrets, file
/// names and fixed choices, which Alertmanager does not render). Only the fields of the kinds
/// added for Alertmanager 0.35 are told apart; the older kinds' strings are all checked.
fn is_template_field(kind: &str, name: &str) -> bool {
    const NOT_TEMPLATES: &[&str] = &[
        "webhook_url",
        "webhook_url_file",
        "url",
        "url_file",
        "api_url",
        "api_type",
        "alert_source_token",
        "alert_source_token_file",
        "token",
        "token_file",
        "token_id",
        "token_id_file",
        "bot_token_file",
        "chat_id_file",
        "user_key_file",
        "api_secret_file",
        "avatar_url",
        "reopen_transition",
        "resolve_transition",
        "wont_fix_resolution",
        "reopen_duration",
        "timeout",
        "ttl",
        "parse_mode",
    ];
    const LATER: &[&str] = &[
        "discord_configs",
        "telegram_configs",
        "pushover_configs",
        "wechat_configs",
        "incidentio_configs",
        "jira_configs",
        "rocketchat_configs",
        "mattermost_configs",
    ];
    !(LATER.contains(&kind) && NOT_TEMPLATES.contains(&name))
}

fn resolve_templates(cfg: &mut Config, path: &Path) {
    let dir = path.parent().unwrap_or(Path::new(""));
    for t in &mut cfg.templates {
        if !t.is_empty() && !Path::new(t.as_str()).is_absolute() {
            *t = dir.join(t.as_str()).display().to_string();
        }
    }
}

fn load_str_as(src: &str, path: &str, dialect: Dialect) -> Result<Config, ConfigError> {
    let root = yaml::parse(src).map_err(|e| ConfigError::Syntax {
        path: path.into(),
        pos: e.pos,
        message: e.message,
    })?;
    let invalid = |pos: Option<Pos>, message: String| ConfigError::Invalid {
        path: path.into(),
        pos,
        message,
    };
    let Some(root) = root.filter(|r| !r.is_null()) else {
        return Err(invalid(None, "no route provided in config".into()));
    };
    let mut d = Decoder::new();
    let cfg = match decode_config(&mut d, &root, dialect) {
        Ok(c) => c,
        Err(f) => return Err(invalid(Some(f.pos), f.message)),
    };
    if !d.issues.is_empty() {
        return Err(ConfigError::Unmarshal {
            path: path.into(),
            issues: d.issues,
        });
    }
    let Some(cfg) = cfg else {
        return Err(invalid(None, "no route provided in config".into()));
    };
    if cfg.route.continue_ {
        return Err(invalid(
            Some(cfg.route.pos),
            "cannot have continue in root route".into(),
        ));
    }
    Ok(cfg)
}

fn decode_duration(d: &mut Decoder, v: &Node) -> DResult<Option<Duration>> {
    match d.custom_string(v) {
        Some(s) => parse_duration(&s).map(Some).map_err(|e| Fail::new(v.pos(), e)),
        None => Ok(None),
    }
}

fn decode_url_opt(d: &mut Decoder, v: &Node, secret: bool) -> DResult<Option<String>> {
    match d.custom_string(v) {
        Some(s) if secret && s == "<secret>" => Ok(Some(s)),
        Some(s) => {
            parse_am_url(&s).map_err(|e| Fail::new(v.pos(), integrations::redact_url_error(&e, &s)))?;
            Ok(Some(s))
        }
        None => Ok(None),
    }
}

fn decode_host_port(d: &mut Decoder, v: &Node) -> DResult<String> {
    match d.custom_string(v) {
        Some(s) if s.is_empty() => Ok(s),
        Some(s) => {
            integrations::check_host_port(&s, v.pos())?;
            Ok(s)
        }
        None => Ok(String::new()),
    }
}

fn decode_global(d: &mut Decoder, node: &Node, dialect: Dialect) -> DResult<GlobalConfig> {
    let mut g = GlobalConfig::default();
    let mut fields: Vec<&str> = FIELDS.to_vec();
    if dialect == Dialect::Delivery {
        fields.extend(LATER_GLOBAL_FIELDS);
    }
    const LATER_GLOBAL_FIELDS: &[&str] = &[
        "jira_api_url",
        "telegram_bot_token",
        "telegram_bot_token_file",
        "wechat_api_secret_file",
        "rocketchat_api_url",
        "rocketchat_token",
        "rocketchat_token_file",
        "rocketchat_token_id",
        "rocketchat_token_id_file",
        "mattermost_webhook_url",
        "mattermost_webhook_url_file",
    ];
    const FIELDS: &[&str] = &[
        "resolve_timeout",
        "http_config",
        "smtp_from",
        "smtp_hello",
        "smtp_smarthost",
        "smtp_auth_username",
        "smtp_auth_password",
        "smtp_auth_password_file",
        "smtp_auth_secret",
        "smtp_auth_identity",
        "smtp_require_tls",
        "slack_api_url",
        "slack_api_url_file",
        "pagerduty_url",
        "opsgenie_api_url",
        "opsgenie_api_key",
        "opsgenie_api_key_file",
        "wechat_api_url",
        "wechat_api_secret",
        "wechat_api_corp_id",
        "victorops_api_url",
        "victorops_api_key",
        "victorops_api_key_file",
        "telegram_api_url",
        "webex_api_url",
    ];
    d.fields(node, "config.plain", &fields, &mut |d, k, _, v| {
        match k {
            "resolve_timeout" => {
                g.resolve_timeout = if v.is_null() {
                    Duration::ZERO
                } else {
                    decode_duration(d, v)?.unwrap_or_default()
                }
            }
            "http_config" => {
                g.http_config = if v.is_null() {
                    HttpClientConfig::default()
                } else {
                    decode_http_config(d, v)?
                }
            }
            "smtp_from" => g.smtp_from = d.string(v, "string"),
            "smtp_hello" => g.smtp_hello = d.string(v, "string"),
            "smtp_smarthost" => g.smtp_smarthost = decode_host_port(d, v)?,
            "smtp_auth_username" => g.smtp_auth_username = d.string(v, "string"),
            "smtp_auth_password" => g.smtp_auth_password = d.string(v, "config.plain"),
            "smtp_auth_password_file" => g.smtp_auth_password_file = d.string(v, "string"),
            "smtp_auth_secret" => g.smtp_auth_secret = d.string(v, "config.plain"),
            "smtp_auth_identity" => g.smtp_auth_identity = d.string(v, "string"),
            "smtp_require_tls" => g.smtp_require_tls = d.bool(v),
            "slack_api_url" => g.slack_api_url = decode_url_opt(d, v, true)?,
            "slack_api_url_file" => g.slack_api_url_file = d.string(v, "string"),
            "pagerduty_url" => g.pagerduty_url = decode_url_opt(d, v, false)?,
            "opsgenie_api_url" => g.opsgenie_api_url = decode_url_opt(d, v, false)?,
            "opsgenie_api_key" => g.opsgenie_api_key = d.string(v, "config.plain"),
            "opsgenie_api_key_file" => g.opsgenie_api_key_file = d.string(v, "string"),
            "wechat_api_url" => g.wechat_api_url = decode_url_opt(d, v, false)?,
            "wechat_api_secret" => g.wechat_api_secret = d.string(v, "config.plain"),
            "wechat_api_corp_id" => g.wechat_api_corp_id = d.string(v, "string"),
            "victorops_api_url" => g.victorops_api_url = decode_url_opt(d, v, false)?,
            "victorops_api_key" => g.victorops_api_key = d.string(v, "config.plain"),
            "victorops_api_key_file" => g.victorops_api_key_file = d.string(v, "string"),
            "telegram_api_url" => g.telegram_api_url = decode_url_opt(d, v, false)?,
            "webex_api_url" => g.webex_api_url = decode_url_opt(d, v, false)?,
            "jira_api_url" => g.jira_api_url = decode_url_opt(d, v, false)?,
            "telegram_bot_token" => g.telegram_bot_token = d.string(v, "config.plain"),
            "telegram_bot_token_file" => g.telegram_bot_token_file = d.string(v, "string"),
            "wechat_api_secret_file" => g.wechat_api_secret_file = d.string(v, "string"),
            "rocketchat_api_url" => g.rocketchat_api_url = decode_url_opt(d, v, false)?,
            "rocketchat_token" => g.rocketchat_token = (!v.is_null()).then(|| d.string(v, "config.plain")),
            "rocketchat_token_file" => g.rocketchat_token_file = d.string(v, "string"),
            "rocketchat_token_id" => g.rocketchat_token_id = (!v.is_null()).then(|| d.string(v, "config.plain")),
            "rocketchat_token_id_file" => g.rocketchat_token_id_file = d.string(v, "string"),
            "mattermost_webhook_url" => g.mattermost_webhook_url = decode_url_opt(d, v, true)?,
            "mattermost_webhook_url_file" => g.mattermost_webhook_url_file = d.string(v, "string"),
            _ => {}
        }
        Ok(())
    })?;
    Ok(g)
}

/// `MatchRegexps`: label → regex; a null value is an invalid regexp.
fn decode_match_re(d: &mut Decoder, v: &Node) -> DResult<Vec<(String, String)>> {
    let mark = d.mark();
    let entries = d.map_entries(v, "config.plain")?;
    let mut out: Vec<(String, Option<String>, Pos)> = Vec::new();
    for (k, kpos, val) in entries {
        let re = match d.custom_string(val) {
            Some(s) => {
                new_matcher("=~", &k, &s).map_err(|e| Fail::new(val.pos(), e))?;
                Some(s)
            }
            None => None,
        };
        out.push((k, re, kpos));
    }
    if d.failed_since(mark) {
        return Ok(Vec::new());
    }
    let mut res = Vec::new();
    for (k, re, kpos) in out {
        if !is_valid_label_name(&k) {
            return Err(Fail::new(kpos, format!("invalid label name {}", go_quote(&k))));
        }
        match re {
            Some(re) => res.push((k, re)),
            None => return Err(Fail::new(kpos, format!("invalid regexp value for {}", go_quote(&k)))),
        }
    }
    res.sort();
    Ok(res)
}

/// `Matchers`: a list of matcher strings, each possibly holding several matchers.
fn decode_matchers(d: &mut Decoder, v: &Node) -> DResult<Vec<Matcher>> {
    if v.is_null() {
        return Ok(Vec::new());
    }
    let mark = d.mark();
    let items = d.seq(v, "[]string");
    let lines: Vec<(String, Pos)> = items.into_iter().map(|n| (d.string(n, "string"), n.pos())).collect();
    if d.failed_since(mark) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (line, pos) in lines {
        out.extend(parse_matchers(&line).map_err(|e| Fail::new(pos, e))?);
    }
    sort_matchers(&mut out);
    Ok(out)
}

fn decode_match(d: &mut Decoder, v: &Node) -> DResult<Vec<(String, String, Pos)>> {
    let entries = d.map_entries(v, "map[string]string")?;
    Ok(entries
        .into_iter()
        .map(|(k, kpos, val)| (k, d.string(val, "string"), kpos))
        .collect())
}

fn decode_name_refs(d: &mut Decoder, v: &Node) -> Vec<NameRef> {
    let items = d.seq(v, "[]string");
    items
        .into_iter()
        .map(|n| NameRef {
            name: d.string(n, "string"),
            pos: n.pos(),
        })
        .collect()
}

fn decode_route(d: &mut Decoder, node: &Node) -> DResult<Option<RouteConfig>> {
    if node.is_null() {
        return Ok(None);
    }
    let mark = d.mark();
    let mut r = RouteConfig::empty(node.pos());
    let mut match_eq: Vec<(String, String, Pos)> = Vec::new();
    let mut group_by_str: Vec<(String, Pos)> = Vec::new();
    let mut group_by_pos = node.pos();
    let mut group_interval_pos = node.pos();
    let mut repeat_interval_pos = node.pos();
    const FIELDS: &[&str] = &[
        "receiver",
        "group_by",
        "match",
        "match_re",
        "matchers",
        "mute_time_intervals",
        "active_time_intervals",
        "continue",
        "routes",
        "group_wait",
        "group_interval",
        "repeat_interval",
        "watchfire",
    ];
    d.fields(node, "config.plain", FIELDS, &mut |d, k, kpos, v| {
        match k {
            "receiver" => {
                r.receiver = d.string(v, "string");
                r.receiver_pos = Some(v.pos());
            }
            "group_by" => {
                group_by_pos = kpos;
                let items = d.seq(v, "[]string");
                group_by_str = items.into_iter().map(|n| (d.string(n, "string"), n.pos())).collect();
            }
            "match" => match_eq = decode_match(d, v)?,
            "match_re" => r.match_re = decode_match_re(d, v)?,
            "matchers" => r.matchers = decode_matchers(d, v)?,
            "mute_time_intervals" => r.mute_time_intervals = decode_name_refs(d, v),
            "active_time_intervals" => r.active_time_intervals = decode_name_refs(d, v),
            "continue" => r.continue_ = d.bool(v),
            "routes" => {
                r.routes.clear();
                for item in d.seq(v, "[]*config.Route") {
                    match decode_route(d, item)? {
                        Some(child) => r.routes.push(child),
                        None => return Err(Fail::new(item.pos(), "a route in routes must not be empty")),
                    }
                }
            }
            "group_wait" => r.group_wait = decode_duration(d, v)?,
            "group_interval" => {
                group_interval_pos = v.pos();
                r.group_interval = decode_duration(d, v)?
            }
            "repeat_interval" => {
                repeat_interval_pos = v.pos();
                r.repeat_interval = decode_duration(d, v)?
            }
            "watchfire" => r.watchfire = decode_route_extensions(d, v)?,
            _ => {}
        }
        Ok(())
    })?;
    if d.failed_since(mark) {
        return Ok(Some(r));
    }
    for (k, _, kpos) in &match_eq {
        if !is_valid_label_name(k) {
            return Err(Fail::new(*kpos, format!("invalid label name {}", go_quote(k))));
        }
    }
    let mut group_by = Vec::new();
    for (l, pos) in &group_by_str {
        if l == "..." {
            r.group_by_all = true;
        } else {
            if !is_valid_label_name(l) {
                return Err(Fail::new(
                    *pos,
                    format!("invalid label name {} in group_by list", go_quote(l)),
                ));
            }
            group_by.push(l.clone());
        }
    }
    if !group_by.is_empty() && r.group_by_all {
        return Err(Fail::new(
            group_by_pos,
            "cannot have wildcard group_by (`...`) and other other labels at the same time",
        ));
    }
    for (i, l) in group_by.iter().enumerate() {
        if group_by[..i].contains(l) {
            return Err(Fail::new(
                group_by_pos,
                format!("duplicated label {} in group_by", go_quote(l)),
            ));
        }
    }
    r.group_by = if group_by.is_empty() { None } else { Some(group_by) };
    if r.group_interval == Some(Duration::ZERO) {
        return Err(Fail::new(group_interval_pos, "group_interval cannot be zero"));
    }
    if r.repeat_interval == Some(Duration::ZERO) {
        return Err(Fail::new(repeat_interval_pos, "repeat_interval cannot be zero"));
    }
    let mut m: Vec<(String, String)> = match_eq.into_iter().map(|(k, v, _)| (k, v)).collect();
    m.sort();
    r.match_eq = m;
    Ok(Some(r))
}

fn decode_inhibit_rule(d: &mut Decoder, node: &Node) -> DResult<Option<InhibitRuleConfig>> {
    if node.is_null() {
        return Ok(None);
    }
    let mark = d.mark();
    let mut r = InhibitRuleConfig {
        source_match: Vec::new(),
        source_match_re: Vec::new(),
        source_matchers: Vec::new(),
        target_match: Vec::new(),
        target_match_re: Vec::new(),
        target_matchers: Vec::new(),
        equal: Vec::new(),
        pos: node.pos(),
    };
    let mut sm: Vec<(String, String, Pos)> = Vec::new();
    let mut tm: Vec<(String, String, Pos)> = Vec::new();
    const FIELDS: &[&str] = &[
        "source_match",
        "source_match_re",
        "source_matchers",
        "target_match",
        "target_match_re",
        "target_matchers",
        "equal",
    ];
    d.fields(node, "config.plain", FIELDS, &mut |d, k, _, v| {
        match k {
            "source_match" => sm = decode_match(d, v)?,
            "source_match_re" => r.source_match_re = decode_match_re(d, v)?,
            "source_matchers" => r.source_matchers = decode_matchers(d, v)?,
            "target_match" => tm = decode_match(d, v)?,
            "target_match_re" => r.target_match_re = decode_match_re(d, v)?,
            "target_matchers" => r.target_matchers = decode_matchers(d, v)?,
            "equal" => {
                r.equal.clear();
                for item in d.seq(v, "model.LabelNames") {
                    if let Some(s) = d.custom_string(item) {
                        if !is_valid_label_name(&s) {
                            return Err(Fail::new(
                                item.pos(),
                                format!("{} is not a valid label name", go_quote(&s)),
                            ));
                        }
                        r.equal.push(s);
                    } else if item.is_null() {
                        r.equal.push(String::new());
                    }
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    if d.failed_since(mark) {
        return Ok(Some(r));
    }
    for (k, _, pos) in sm.iter().chain(tm.iter()) {
        if !is_valid_label_name(k) {
            return Err(Fail::new(*pos, format!("invalid label name {}", go_quote(k))));
        }
    }
    r.source_match = sm.into_iter().map(|(k, v, _)| (k, v)).collect();
    r.target_match = tm.into_iter().map(|(k, v, _)| (k, v)).collect();
    r.source_match.sort();
    r.target_match.sort();
    Ok(Some(r))
}

fn decode_receiver_extensions(d: &mut Decoder, node: &Node) -> DResult<Vec<AlertmanagerForwardConfig>> {
    let mut out = Vec::new();
    d.fields(
        node,
        "watchfire.ReceiverExtensions",
        &["alertmanager_configs"],
        &mut |d, _, _, v| {
            for item in d.seq(v, "[]watchfire.AlertmanagerConfig") {
                let mark = d.mark();
                let mut c = AlertmanagerForwardConfig {
                    url: String::new(),
                    send_resolved: true,
                    http_config: HttpClientConfig {
                        follow_redirects: true,
                        enable_http2: true,
                        ..Default::default()
                    },
                    pos: item.pos(),
                };
                d.fields(
                    item,
                    "watchfire.AlertmanagerConfig",
                    &["url", "send_resolved", "http_config"],
                    &mut |d, k, _, v| {
                        match k {
                            "url" => c.url = decode_url_opt(d, v, false)?.unwrap_or_default(),
                            "send_resolved" => c.send_resolved = d.bool(v),
                            _ => c.http_config = decode_http_config(d, v)?,
                        }
                        Ok(())
                    },
                )?;
                if !d.failed_since(mark) && c.url.is_empty() {
                    return Err(Fail::new(item.pos(), "missing url in watchfire alertmanager config"));
                }
                out.push(c);
            }
            Ok(())
        },
    )?;
    Ok(out)
}

fn decode_receiver(d: &mut Decoder, node: &Node, dialect: Dialect) -> DResult<Option<ReceiverConfig>> {
    if node.is_null() {
        return Err(Fail::new(node.pos(), "a receiver must not be empty"));
    }
    let mark = d.mark();
    let mut r = ReceiverConfig {
        name: String::new(),
        pos: node.pos(),
        integrations: Vec::new(),
        alertmanager_configs: Vec::new(),
    };
    let kinds: Vec<&'static str> = match dialect {
        Dialect::Alertmanager => integrations::kind_names().collect(),
        Dialect::Delivery => integrations::delivery_kind_names().collect(),
    };
    let mut fields: Vec<&str> = vec!["name"];
    fields.extend(kinds.iter().copied());
    if dialect == Dialect::Delivery {
        fields.push("msteams_configs");
    }
    fields.push("watchfire");
    let mut by_kind: Vec<(usize, IntegrationConfig)> = Vec::new();
    d.fields(node, "config.plain", &fields, &mut |d, k, kpos, v| {
        if k == "name" {
            r.name = d.string(v, "string");
            return Ok(());
        }
        if k == "watchfire" {
            r.alertmanager_configs = decode_receiver_extensions(d, v)?;
            return Ok(());
        }
        if dialect == Dialect::Delivery && !integrations::DELIVERED_KINDS.contains(&k) {
            return Err(Fail::new(
                kpos,
                format!(
                    "{k}: watchfire does not deliver this receiver kind; it delivers {}",
                    integrations::DELIVERED_KINDS.join(", ")
                ),
            ));
        }
        let Some((idx, kind)) = kinds.iter().copied().enumerate().find(|(_, kk)| *kk == k) else {
            return Ok(());
        };
        by_kind.retain(|(i, _)| *i != idx);
        for item in d.seq(v, &format!("[]*config.{}", go_type_of_kind(kind))) {
            if let Some(c) = integrations::decode_integration(d, kind, item, dialect == Dialect::Delivery)? {
                by_kind.push((idx, c));
            }
        }
        Ok(())
    })?;
    // Alertmanager processes integrations by kind, in its struct's order.
    by_kind.sort_by_key(|(i, _)| *i);
    r.integrations = by_kind.into_iter().map(|(_, c)| c).collect();
    if d.failed_since(mark) {
        return Ok(Some(r));
    }
    if r.name.is_empty() {
        return Err(Fail::new(node.pos(), "missing name in receiver"));
    }
    Ok(Some(r))
}

fn go_type_of_kind(kind: &str) -> &'static str {
    match kind {
        "discord_configs" => "DiscordConfig",
        "email_configs" => "EmailConfig",
        "pagerduty_configs" => "PagerdutyConfig",
        "slack_configs" => "SlackConfig",
        "webhook_configs" => "WebhookConfig",
        "opsgenie_configs" => "OpsGenieConfig",
        "wechat_configs" => "WechatConfig",
        "pushover_configs" => "PushoverConfig",
        "victorops_configs" => "VictorOpsConfig",
        "sns_configs" => "SNSConfig",
        "telegram_configs" => "TelegramConfig",
        "webex_configs" => "WebexConfig",
        "msteamsv2_configs" => "MSTeamsV2Config",
        "incidentio_configs" => "incidentio.IncidentioConfig",
        "jira_configs" => "jira.JiraConfig",
        "rocketchat_configs" => "rocketchat.RocketchatConfig",
        "mattermost_configs" => "mattermost.MattermostConfig",
        _ => "Config",
    }
}

/// The whole file: decoding (nested validation aborts at once), then `Config.UnmarshalYAML`'s
/// checks in Alertmanager's order. `Ok(None)` when there is no route at all.
fn decode_config(d: &mut Decoder, root: &Node, dialect: Dialect) -> DResult<Option<Config>> {
    let mark = d.mark();
    let mut global: Option<GlobalConfig> = None;
    let mut route: Option<RouteConfig> = None;
    let mut route_pos = root.pos();
    let mut inhibit_rules = Vec::new();
    let mut receivers: Vec<ReceiverConfig> = Vec::new();
    let mut templates = Vec::new();
    let mut mute = Vec::new();
    let mut times = Vec::new();
    const FIELDS: &[&str] = &[
        "global",
        "route",
        "inhibit_rules",
        "receivers",
        "templates",
        "mute_time_intervals",
        "time_intervals",
    ];
    let is_map = matches!(root, Node::Map(..));
    d.fields(root, "config.plain", FIELDS, &mut |d, k, kpos, v| {
        match k {
            "global" => {
                global = if v.is_null() {
                    None
                } else {
                    Some(decode_global(d, v, dialect)?)
                }
            }
            "route" => {
                route_pos = kpos;
                route = decode_route(d, v)?;
            }
            "inhibit_rules" => {
                inhibit_rules.clear();
                for item in d.seq(v, "[]*config.InhibitRule") {
                    if let Some(r) = decode_inhibit_rule(d, item)? {
                        inhibit_rules.push(r);
                    }
                }
            }
            "receivers" => {
                receivers.clear();
                for item in d.seq(v, "[]*config.Receiver") {
                    if let Some(r) = decode_receiver(d, item, dialect)? {
                        receivers.push(r);
                    }
                }
            }
            "templates" => templates = d.string_list(v, "[]string"),
            "mute_time_intervals" => {
                mute.clear();
                for item in d.seq(v, "[]config.MuteTimeInterval") {
                    if let Some(t) = decode_named(d, item, true)? {
                        mute.push(t);
                    }
                }
            }
            "time_intervals" => {
                times.clear();
                for item in d.seq(v, "[]config.TimeInterval") {
                    if let Some(t) = decode_named(d, item, false)? {
                        times.push(t);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    if d.failed_since(mark) || !is_map {
        return Ok(None);
    }
    let global = global.unwrap_or_default();
    validate(
        dialect,
        global,
        route,
        route_pos,
        inhibit_rules,
        receivers,
        templates,
        mute,
        times,
    )
    .map(Some)
}

#[allow(clippy::too_many_arguments)]
fn validate(
    dialect: Dialect,
    global: GlobalConfig,
    route: Option<RouteConfig>,
    route_pos: Pos,
    inhibit_rules: Vec<InhibitRuleConfig>,
    mut receivers: Vec<ReceiverConfig>,
    templates: Vec<String>,
    mute_time_intervals: Vec<NamedTimeInterval>,
    time_intervals: Vec<NamedTimeInterval>,
) -> DResult<Config> {
    let g = &global;
    if g.slack_api_url.is_some() && !g.slack_api_url_file.is_empty() {
        return Err(Fail::new(
            route_pos,
            "at most one of slack_api_url & slack_api_url_file must be configured",
        ));
    }
    if !g.opsgenie_api_key.is_empty() && !g.opsgenie_api_key_file.is_empty() {
        return Err(Fail::new(
            route_pos,
            "at most one of opsgenie_api_key & opsgenie_api_key_file must be configured",
        ));
    }
    if !g.victorops_api_key.is_empty() && !g.victorops_api_key_file.is_empty() {
        return Err(Fail::new(
            route_pos,
            "at most one of victorops_api_key & victorops_api_key_file must be configured",
        ));
    }
    let later_global = [
        (
            !g.telegram_bot_token.is_empty() && !g.telegram_bot_token_file.is_empty(),
            "at most one of telegram_bot_token & telegram_bot_token_file must be configured",
        ),
        (
            g.rocketchat_token.is_some() && !g.rocketchat_token_file.is_empty(),
            "at most one of rocketchat_token & rocketchat_token_file must be configured",
        ),
        (
            g.rocketchat_token_id.is_some() && !g.rocketchat_token_id_file.is_empty(),
            "at most one of rocketchat_token_id & rocketchat_token_id_file must be configured",
        ),
        (
            !g.wechat_api_secret.is_empty() && !g.wechat_api_secret_file.is_empty(),
            "at most one of wechat_api_secret & wechat_api_secret_file must be configured",
        ),
        (
            g.mattermost_webhook_url.is_some() && !g.mattermost_webhook_url_file.is_empty(),
            "at most one of mattermost_webhook_url & mattermost_webhook_url_file must be configured",
        ),
    ];
    if let Some((_, m)) = later_global.iter().find(|(bad, _)| *bad) {
        return Err(Fail::new(route_pos, *m));
    }
    if !g.smtp_auth_password.is_empty() && !g.smtp_auth_password_file.is_empty() {
        return Err(Fail::new(
            route_pos,
            "at most one of smtp_auth_password & smtp_auth_password_file must be configured",
        ));
    }
    let mut names: Vec<String> = Vec::new();
    for rcv in &mut receivers {
        if names.contains(&rcv.name) {
            return Err(Fail::new(
                rcv.pos,
                format!("notification config name {} is not unique", go_quote(&rcv.name)),
            ));
        }
        for ic in &mut rcv.integrations {
            apply_global_defaults(g, ic, dialect == Dialect::Delivery)?;
        }
        names.push(rcv.name.clone());
    }
    let Some(route) = route else {
        return Err(Fail::new(route_pos, "no routes provided"));
    };
    if route.receiver.is_empty() {
        return Err(Fail::new(route.pos, "root route must specify a default receiver"));
    }
    if route.has_matchers() {
        return Err(Fail::new(route.pos, "root route must not have any matchers"));
    }
    if !route.mute_time_intervals.is_empty() {
        return Err(Fail::new(route.pos, "root route must not have any mute time intervals"));
    }
    if !route.active_time_intervals.is_empty() {
        return Err(Fail::new(
            route.pos,
            "root route must not have any active time intervals",
        ));
    }
    check_receiver(&route, &names)?;
    let mut ti_names: Vec<&str> = Vec::new();
    for mt in &mute_time_intervals {
        if ti_names.contains(&mt.name.as_str()) {
            return Err(Fail::new(
                mt.pos,
                format!("mute time interval {} is not unique", go_quote(&mt.name)),
            ));
        }
        ti_names.push(&mt.name);
    }
    for t in &time_intervals {
        if ti_names.contains(&t.name.as_str()) {
            return Err(Fail::new(
                t.pos,
                format!("time interval {} is not unique", go_quote(&t.name)),
            ));
        }
        ti_names.push(&t.name);
    }
    check_time_intervals(&route, &ti_names)?;
    Ok(Config {
        global,
        route,
        inhibit_rules,
        receivers,
        templates,
        mute_time_intervals,
        time_intervals,
        path: None,
    })
}

/// The per-receiver part of `Config.UnmarshalYAML`: inherit global settings, fail where neither
/// the integration nor `global` sets what it needs.
fn apply_global_defaults(g: &GlobalConfig, ic: &mut IntegrationConfig, later: bool) -> DResult<()> {
    let pos = ic.pos;
    let f = &mut ic.fields;
    let push = |f: &mut integrations::Fields, k: &str, v: Val| f.values.push((k.to_string(), v, pos));
    let fail = |m: &str| Err(Fail::new(pos, m));
    if ic.kind != "email_configs" && !f.is_set("http_config") {
        push(f, "http_config", Val::Http(Box::new(g.http_config.clone())));
    }
    match ic.kind {
        "email_configs" => {
            if f.str("smarthost").is_empty() {
                if g.smtp_smarthost.is_empty() {
                    return fail("no global SMTP smarthost set");
                }
                push(f, "smarthost", Val::Str(g.smtp_smarthost.clone()));
            }
            if f.str("from").is_empty() {
                if g.smtp_from.is_empty() {
                    return fail("no global SMTP from set");
                }
                push(f, "from", Val::Str(g.smtp_from.clone()));
            }
        }
        "slack_configs"
            if !f.is_set("api_url")
                && f.str("api_url_file").is_empty()
                && g.slack_api_url.is_none()
                && g.slack_api_url_file.is_empty() =>
        {
            return fail("no global Slack API URL set either inline or in a file");
        }
        "pagerduty_configs" if !f.is_set("url") => match &g.pagerduty_url {
            Some(u) => push(f, "url", Val::Str(u.clone())),
            None => return fail("no global PagerDuty URL set"),
        },
        "opsgenie_configs" => {
            if !f.is_set("api_url") && g.opsgenie_api_url.is_none() {
                return fail("no global OpsGenie URL set");
            }
            if f.str("api_key").is_empty()
                && f.str("api_key_file").is_empty()
                && g.opsgenie_api_key.is_empty()
                && g.opsgenie_api_key_file.is_empty()
            {
                return fail("no global OpsGenie API Key set either inline or in a file");
            }
        }
        "wechat_configs" => {
            if !f.is_set("api_url") && g.wechat_api_url.is_none() {
                return fail("no global Wechat URL set");
            }
            if later && f.str("api_secret").is_empty() && f.str("api_secret_file").is_empty() {
                if g.wechat_api_secret.is_empty() && g.wechat_api_secret_file.is_empty() {
                    return fail("no global Wechat Api Secret set either inline or in a file");
                }
                push(f, "api_secret", Val::Str(g.wechat_api_secret.clone()));
                push(f, "api_secret_file", Val::Str(g.wechat_api_secret_file.clone()));
            }
            if f.str("api_secret").is_empty() && f.str("api_secret_file").is_empty() && g.wechat_api_secret.is_empty() {
                return fail("no global Wechat ApiSecret set");
            }
            if f.str("corp_id").is_empty() && g.wechat_api_corp_id.is_empty() {
                return fail("no global Wechat CorpID set");
            }
        }
        "victorops_configs" => {
            if !f.is_set("api_url") && g.victorops_api_url.is_none() {
                return fail("no global VictorOps URL set");
            }
            if f.str("api_key").is_empty()
                && f.str("api_key_file").is_empty()
                && g.victorops_api_key.is_empty()
                && g.victorops_api_key_file.is_empty()
            {
                return fail("no global VictorOps API Key set");
            }
        }
        "discord_configs" if !f.is_set("webhook_url") && f.str("webhook_url_file").is_empty() => {
            return fail("no discord webhook URL provided")
        }
        "telegram_configs" if later && f.str("bot_token").is_empty() && f.str("bot_token_file").is_empty() => {
            if g.telegram_bot_token.is_empty() && g.telegram_bot_token_file.is_empty() {
                return fail("missing bot_token or bot_token_file on telegram_config");
            }
            push(f, "bot_token", Val::Str(g.telegram_bot_token.clone()));
            push(f, "bot_token_file", Val::Str(g.telegram_bot_token_file.clone()));
        }
        "jira_configs" if !f.is_set("api_url") => match &g.jira_api_url {
            Some(u) => push(f, "api_url", Val::Str(u.clone())),
            None => return fail("no global Jira Cloud URL set"),
        },
        "rocketchat_configs" => {
            if !f.is_set("api_url") {
                if let Some(u) = &g.rocketchat_api_url {
                    push(f, "api_url", Val::Str(u.clone()));
                }
            }
            for (key, file, gv, gfile, what) in [
                (
                    "token_id",
                    "token_id_file",
                    &g.rocketchat_token_id,
                    &g.rocketchat_token_id_file,
                    "TokenID",
                ),
                (
                    "token",
                    "token_file",
                    &g.rocketchat_token,
                    &g.rocketchat_token_file,
                    "Token",
                ),
            ] {
                if !f.is_set(key) {
                    if let Some(v) = gv {
                        push(f, key, Val::Str(v.clone()));
                    }
                }
                if f.str(file).is_empty() && !gfile.is_empty() {
                    push(f, file, Val::Str(gfile.clone()));
                }
                if !f.is_set(key) && f.str(file).is_empty() {
                    return fail(&format!("no global Rocketchat {what} set either inline or in a file"));
                }
            }
        }
        "mattermost_configs" if !f.is_set("webhook_url") && f.str("webhook_url_file").is_empty() => {
            if g.mattermost_webhook_url.is_none() && g.mattermost_webhook_url_file.is_empty() {
                return fail("missing webhook_url or webhook_url_file on mattermost_config");
            }
            if let Some(u) = &g.mattermost_webhook_url {
                push(f, "webhook_url", Val::Str(u.clone()));
            }
            push(f, "webhook_url_file", Val::Str(g.mattermost_webhook_url_file.clone()));
        }
        "webex_configs" if !f.is_set("api_url") && g.webex_api_url.is_none() => return fail("no global Webex URL set"),
        _ => {}
    }
    Ok(())
}

fn check_receiver(r: &RouteConfig, names: &[String]) -> DResult<()> {
    for child in &r.routes {
        check_receiver(child, names)?;
    }
    if r.receiver.is_empty() {
        return Ok(());
    }
    if !names.contains(&r.receiver) {
        return Err(Fail::new(
            r.receiver_pos.unwrap_or(r.pos),
            format!("undefined receiver {} used in route", go_quote(&r.receiver)),
        ));
    }
    Ok(())
}

fn check_time_intervals(r: &RouteConfig, names: &[&str]) -> DResult<()> {
    for child in &r.routes {
        check_time_intervals(child, names)?;
    }
    for t in r.active_time_intervals.iter().chain(r.mute_time_intervals.iter()) {
        if !names.contains(&t.name.as_str()) {
            return Err(Fail::new(
                t.pos,
                format!("undefined time interval {} used in route", go_quote(&t.name)),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        load_str(src, "t.yml").unwrap_err().alertmanager_message()
    }

    const RCV: &str = "receivers:\n- name: a\n- name: b\n";

    #[test]
    fn minimal_config_loads_with_defaults() {
        let c = load_str("route:\n  receiver: a\nreceivers:\n- name: a\n", "t.yml").unwrap();
        assert_eq!(c.global.resolve_timeout, Duration::from_secs(300));
        assert_eq!(c.route.receiver, "a");
        assert!(c.route.group_by.is_none());
    }

    #[test]
    fn validation_messages_match_alertmanager() {
        assert_eq!(err(""), "no route provided in config");
        assert_eq!(err("receivers: []"), "no routes provided");
        assert_eq!(
            err(&format!("{RCV}route: {{}}")),
            "root route must specify a default receiver"
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a, match: {{x: y}}}}")),
            "root route must not have any matchers"
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a, routes: [{{receiver: c}}]}}")),
            "undefined receiver \"c\" used in route"
        );
        assert_eq!(
            err("receivers: [{name: a}, {name: a}]\nroute: {receiver: a}"),
            "notification config name \"a\" is not unique"
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a, continue: true}}")),
            "cannot have continue in root route"
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a, group_by: [a, a]}}")),
            "duplicated label \"a\" in group_by"
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a, group_by: ['...', a]}}")),
            "cannot have wildcard group_by (`...`) and other other labels at the same time"
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a, group_wait: 1x}}")),
            "not a valid duration string: \"1x\""
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a, group_interval: 0}}")),
            "group_interval cannot be zero"
        );
        assert_eq!(
            err(&format!(
                "{RCV}route: {{receiver: a, routes: [{{mute_time_intervals: [x]}}]}}"
            )),
            "undefined time interval \"x\" used in route"
        );
        assert_eq!(
            err(&format!(
                "{RCV}route: {{receiver: a, routes: [{{matchers: ['a=~(']}}]}}"
            )),
            "error parsing regexp: unclosed group"
        );
        assert_eq!(
            err(&format!("{RCV}route: {{receiver: a}}\nfoo: 1")),
            "yaml: unmarshal errors:\n  line 5: field foo not found in type config.plain"
        );
    }

    #[test]
    fn errors_carry_positions() {
        let e = load_str(
            "receivers:\n- name: a\nroute:\n  receiver: a\n  routes:\n  - receiver: nope\n",
            "f.yml",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "f.yml:6:15: undefined receiver \"nope\" used in route");
    }

    #[test]
    fn group_by_and_matchers() {
        let c = load_str(
            "receivers: [{name: a}]\nroute:\n  receiver: a\n  group_by: ['...']\n  routes:\n  - matchers: ['b=\"2\"', 'a=~\"x|y\"']\n    match: {c: '3'}\n    group_by: []\n",
            "t.yml",
        )
        .unwrap();
        assert!(c.route.group_by_all);
        let child = &c.route.routes[0];
        assert!(child.group_by.is_none(), "group_by: [] inherits in 0.25");
        assert_eq!(child.matchers.len(), 2);
        assert_eq!(child.matchers[0].name, "a");
        assert_eq!(child.match_eq, vec![("c".to_string(), "3".to_string())]);
    }

    #[test]
    fn pagerduty_inherits_global_url() {
        let c = load_str(
            "receivers: [{name: a, pagerduty_configs: [{routing_key: k}]}]\nroute: {receiver: a}",
            "t.yml",
        )
        .unwrap();
        assert_eq!(
            c.receivers[0].integrations[0].fields.str("url"),
            "https://events.pagerduty.com/v2/enqueue"
        );
    }
}
