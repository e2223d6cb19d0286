//! The configuration of receiver integrations (`webhook_configs`, `pagerduty_configs`, ...),
//! decoded and validated exactly as Alertmanager 0.25 does: the same fields (unknown ones are
//! errors), the same defaults, the same checks and messages.
//!
//! The integrations watchfire delivers to (webhook, PagerDuty) get typed configs; the others are
//! kept as [`OtherIntegration`]: validated, with their decoded fields, so that a config written
//! for Alertmanager loads unchanged and a later receiver can be added without touching the
//! loader. `http_config` follows prometheus/common 0.39 (the version Alertmanager 0.25 ships).

use std::collections::BTreeMap;

use crate::duration::parse_go_ns as parse_go_duration;
use crate::gofmt::quote_common_invisibles as go_quote;
use crate::url::{go_url_parse, parse_am_url, split_host_port};
use crate::yaml::v2::{DResult, Decoder, Fail, Node, Pos};

use super::blocks::decode_extensions as decode_slack_extensions;
pub use super::blocks::Tree;

/// A decoded field value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// Explicitly null: the field's zero value (overrides a default).
    Null,
    Str(String),
    Bool(bool),
    Int(i128),
    Map(Vec<(String, String)>),
    List(Vec<String>),
    Http(Box<HttpClientConfig>),
    Tls(TlsConfig),
    /// A list of small records (PagerDuty links/images, Slack fields/actions, OpsGenie responders).
    Records(Vec<BTreeMap<String, String>>),
    /// Slack Block Kit blocks (`watchfire.blocks`), as written.
    Blocks(Vec<Tree>),
    /// A nested struct (Mattermost's `priority`, Jira's `summary: {template, enable_update}`).
    Struct(Box<Fields>),
    /// A list of nested structs (Mattermost's `attachments` and `fields`, Rocket.Chat's).
    StructList(Vec<Fields>),
    /// Any YAML value, its strings templates (Jira's `fields`).
    Tree(Tree),
}

/// Decoded fields by name, in the order they were written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields {
    pub values: Vec<(String, Val, Pos)>,
}

impl Fields {
    pub fn get(&self, name: &str) -> Option<&Val> {
        self.values.iter().rev().find(|(n, _, _)| n == name).map(|(_, v, _)| v)
    }

    /// The string value of a field, "" when absent or null.
    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            Some(Val::Str(s)) => s,
            _ => "",
        }
    }

    /// Whether a pointer field (a URL, `http_config`) is set (non-null).
    pub fn is_set(&self, name: &str) -> bool {
        !matches!(self.get(name), None | Some(Val::Null))
    }

    pub fn bool_or(&self, name: &str, default: bool) -> bool {
        match self.get(name) {
            Some(Val::Bool(b)) => *b,
            Some(Val::Null) => false,
            _ => default,
        }
    }

    pub fn map(&self, name: &str) -> Vec<(String, String)> {
        match self.get(name) {
            Some(Val::Map(m)) => m.clone(),
            _ => Vec::new(),
        }
    }

    pub fn records(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        match self.get(name) {
            Some(Val::Records(r)) => r.clone(),
            _ => Vec::new(),
        }
    }

    pub fn http(&self, name: &str) -> Option<&HttpClientConfig> {
        match self.get(name) {
            Some(Val::Http(h)) => Some(h),
            _ => None,
        }
    }

    pub fn pos(&self, name: &str) -> Option<Pos> {
        self.values.iter().rev().find(|(n, _, _)| n == name).map(|(_, _, p)| *p)
    }

    pub fn int(&self, name: &str) -> i128 {
        match self.get(name) {
            Some(Val::Int(i)) => *i,
            _ => 0,
        }
    }

    pub fn list(&self, name: &str) -> Vec<String> {
        match self.get(name) {
            Some(Val::List(l)) => l.clone(),
            _ => Vec::new(),
        }
    }

    /// A nested struct's fields (`None` when absent or null).
    pub fn structure(&self, name: &str) -> Option<&Fields> {
        match self.get(name) {
            Some(Val::Struct(f)) => Some(f),
            _ => None,
        }
    }

    pub fn structs(&self, name: &str) -> &[Fields] {
        match self.get(name) {
            Some(Val::StructList(l)) => l,
            _ => &[],
        }
    }

    /// Every string of the fields, nested ones included, with the position of its field: the
    /// texts that are templates.
    pub fn texts(&self) -> Vec<(String, &str, Pos)> {
        let mut out = Vec::new();
        for (name, v, pos) in &self.values {
            match v {
                Val::Str(s) => out.push((name.clone(), s.as_str(), *pos)),
                Val::Map(m) => out.extend(m.iter().map(|(_, v)| (name.clone(), v.as_str(), *pos))),
                Val::List(l) => out.extend(l.iter().map(|v| (name.clone(), v.as_str(), *pos))),
                Val::Records(rs) => out.extend(
                    rs.iter()
                        .flat_map(|r| r.values().map(|v| (name.clone(), v.as_str(), *pos))),
                ),
                Val::Blocks(blocks) => {
                    let mut strs = Vec::new();
                    blocks.iter().for_each(|b| b.strings(&mut strs));
                    out.extend(strs.into_iter().map(|(s, p)| (name.clone(), s, p)));
                }
                Val::Tree(t) => {
                    let mut strs = Vec::new();
                    t.strings(&mut strs);
                    out.extend(strs.into_iter().map(|(s, p)| (name.clone(), s, p)));
                }
                Val::Struct(f) => out.extend(f.texts().into_iter().map(|(n, s, p)| (format!("{name}.{n}"), s, p))),
                Val::StructList(l) => {
                    for (i, f) in l.iter().enumerate() {
                        out.extend(
                            f.texts()
                                .into_iter()
                                .map(|(n, s, p)| (format!("{name}[{i}].{n}"), s, p)),
                        );
                    }
                }
                Val::Null | Val::Bool(_) | Val::Int(_) | Val::Http(_) | Val::Tls(_) => {}
            }
        }
        out
    }
}

/// Field kinds, each decoded like its Go type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum F {
    Str,
    Secret,
    /// `config.URL`: http(s) with a host.
    Url,
    /// `config.SecretURL`: a URL or `<secret>`. Unlike Alertmanager, whose URL parse errors quote
    /// the URL, its errors show `<secret>` in its place.
    SecretUrl,
    /// prometheus/common's `config.URL`: anything `url.Parse` accepts.
    CommonUrl,
    Bool,
    U64,
    I64,
    StrMap,
    StrList,
    Http,
    Tls,
    HostPort,
    GoDuration,
    Sigv4,
    PdImages,
    PdLinks,
    SlackFields,
    SlackActions,
    /// `watchfire:` of a Slack config (Block Kit blocks), watchfire's extension.
    SlackExtensions,
    OgResponders,
    /// A nested struct, decoded strictly with its own fields.
    Struct(&'static [FieldSpec]),
    /// A list of nested structs.
    StructList(&'static [FieldSpec]),
    /// Any YAML value (`map[string]any`), kept as a [`Tree`].
    Any,
    /// Jira's `summary`/`description`: a template string, or `{template, enable_update}`.
    JiraField,
    /// Prometheus' `model.Duration` (`1d`, `30m`).
    PromDuration,
    TlsVersion,
    Header,
    OAuth2,
    BasicAuth,
    Authorization,
}

const HTTP_FIELDS: &[(&str, F)] = &[
    ("basic_auth", F::BasicAuth),
    ("authorization", F::Authorization),
    ("oauth2", F::OAuth2),
    ("bearer_token", F::Secret),
    ("bearer_token_file", F::Str),
    ("proxy_url", F::CommonUrl),
    ("proxy_connect_header", F::Header),
    ("tls_config", F::Tls),
    ("follow_redirects", F::Bool),
    ("enable_http2", F::Bool),
];

const TLS_FIELDS: &[(&str, F)] = &[
    ("ca_file", F::Str),
    ("cert_file", F::Str),
    ("key_file", F::Str),
    ("server_name", F::Str),
    ("insecure_skip_verify", F::Bool),
    ("min_version", F::TlsVersion),
    ("max_version", F::TlsVersion),
];

const OAUTH2_FIELDS: &[(&str, F)] = &[
    ("client_id", F::Str),
    ("client_secret", F::Secret),
    ("client_secret_file", F::Str),
    ("scopes", F::StrList),
    ("token_url", F::Str),
    ("endpoint_params", F::StrMap),
    ("proxy_url", F::CommonUrl),
    ("tls_config", F::Tls),
];

const SIGV4_FIELDS: &[(&str, F)] = &[
    ("region", F::Str),
    ("access_key", F::Str),
    ("secret_key", F::Secret),
    ("profile", F::Str),
    ("role_arn", F::Str),
];

/// The integration kinds Alertmanager 0.25 knows, in its `Receiver` struct's order, with their
/// fields and `send_resolved` defaults.
/// A field: its YAML name and how it decodes.
type FieldSpec = (&'static str, F);

const KINDS: &[(&str, bool, &[FieldSpec])] = &[
    (
        "discord_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("webhook_url", F::SecretUrl),
            ("title", F::Str),
            ("message", F::Str),
        ],
    ),
    (
        "email_configs",
        false,
        &[
            ("send_resolved", F::Bool),
            ("to", F::Str),
            ("from", F::Str),
            ("hello", F::Str),
            ("smarthost", F::HostPort),
            ("auth_username", F::Str),
            ("auth_password", F::Secret),
            ("auth_password_file", F::Str),
            ("auth_secret", F::Secret),
            ("auth_identity", F::Str),
            ("headers", F::StrMap),
            ("html", F::Str),
            ("text", F::Str),
            ("require_tls", F::Bool),
            ("tls_config", F::Tls),
        ],
    ),
    (
        "pagerduty_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("service_key", F::Secret),
            ("service_key_file", F::Str),
            ("routing_key", F::Secret),
            ("routing_key_file", F::Str),
            ("url", F::Url),
            ("client", F::Str),
            ("client_url", F::Str),
            ("description", F::Str),
            ("details", F::StrMap),
            ("images", F::PdImages),
            ("links", F::PdLinks),
            ("source", F::Str),
            ("severity", F::Str),
            ("class", F::Str),
            ("component", F::Str),
            ("group", F::Str),
        ],
    ),
    (
        "slack_configs",
        false,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_url", F::SecretUrl),
            ("api_url_file", F::Str),
            ("channel", F::Str),
            ("username", F::Str),
            ("color", F::Str),
            ("title", F::Str),
            ("title_link", F::Str),
            ("pretext", F::Str),
            ("text", F::Str),
            ("fields", F::SlackFields),
            ("short_fields", F::Bool),
            ("footer", F::Str),
            ("fallback", F::Str),
            ("callback_id", F::Str),
            ("icon_emoji", F::Str),
            ("icon_url", F::Str),
            ("image_url", F::Str),
            ("thumb_url", F::Str),
            ("link_names", F::Bool),
            ("mrkdwn_in", F::StrList),
            ("actions", F::SlackActions),
            ("watchfire", F::SlackExtensions),
        ],
    ),
    (
        "webhook_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("url", F::Url),
            ("max_alerts", F::U64),
        ],
    ),
    (
        "opsgenie_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_key", F::Secret),
            ("api_key_file", F::Str),
            ("api_url", F::Url),
            ("message", F::Str),
            ("description", F::Str),
            ("source", F::Str),
            ("details", F::StrMap),
            ("entity", F::Str),
            ("responders", F::OgResponders),
            ("actions", F::Str),
            ("tags", F::Str),
            ("note", F::Str),
            ("priority", F::Str),
            ("update_alerts", F::Bool),
        ],
    ),
    (
        "wechat_configs",
        false,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_secret", F::Secret),
            ("corp_id", F::Str),
            ("message", F::Str),
            ("api_url", F::Url),
            ("to_user", F::Str),
            ("to_party", F::Str),
            ("to_tag", F::Str),
            ("agent_id", F::Str),
            ("message_type", F::Str),
        ],
    ),
    (
        "pushover_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("user_key", F::Secret),
            ("token", F::Secret),
            ("title", F::Str),
            ("message", F::Str),
            ("url", F::Str),
            ("url_title", F::Str),
            ("sound", F::Str),
            ("priority", F::Str),
            ("retry", F::GoDuration),
            ("expire", F::GoDuration),
            ("html", F::Bool),
        ],
    ),
    (
        "victorops_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_key", F::Secret),
            ("api_key_file", F::Str),
            ("api_url", F::Url),
            ("routing_key", F::Str),
            ("message_type", F::Str),
            ("state_message", F::Str),
            ("entity_display_name", F::Str),
            ("monitoring_tool", F::Str),
            ("custom_fields", F::StrMap),
        ],
    ),
    (
        "sns_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_url", F::Str),
            ("sigv4", F::Sigv4),
            ("topic_arn", F::Str),
            ("phone_number", F::Str),
            ("target_arn", F::Str),
            ("subject", F::Str),
            ("message", F::Str),
            ("attributes", F::StrMap),
        ],
    ),
    (
        "telegram_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_url", F::Url),
            ("bot_token", F::Secret),
            ("chat_id", F::I64),
            ("message", F::Str),
            ("disable_notifications", F::Bool),
            ("parse_mode", F::Str),
        ],
    ),
    (
        "webex_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_url", F::Url),
            ("message", F::Str),
            ("room_id", F::Str),
        ],
    ),
    // Not in Alertmanager 0.25: its 0.28 Teams workflow webhooks. Read only when loading a
    // configuration for delivery (see `WATCHFIRE_KINDS`).
    (
        "msteamsv2_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("webhook_url", F::SecretUrl),
            ("webhook_url_file", F::Str),
            ("title", F::Str),
            ("text", F::Str),
        ],
    ),
    // Alertmanager 0.35's (unreleased main after 0.34) later receivers, read only for delivery.
    (
        "incidentio_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("url", F::Url),
            ("url_file", F::Str),
            ("alert_source_token", F::Secret),
            ("alert_source_token_file", F::Str),
            ("max_alerts", F::U64),
            ("timeout", F::GoDuration),
        ],
    ),
    (
        "jira_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_url", F::Url),
            ("api_type", F::Str),
            ("project", F::Str),
            ("summary", F::JiraField),
            ("description", F::JiraField),
            ("labels", F::StrList),
            ("priority", F::Str),
            ("issue_type", F::Str),
            ("reopen_transition", F::Str),
            ("resolve_transition", F::Str),
            ("wont_fix_resolution", F::Str),
            ("reopen_duration", F::PromDuration),
            ("fields", F::Any),
        ],
    ),
    (
        "rocketchat_configs",
        false,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("api_url", F::Url),
            ("token_id", F::Secret),
            ("token_id_file", F::Str),
            ("token", F::Secret),
            ("token_file", F::Str),
            ("channel", F::Str),
            ("color", F::Str),
            ("title", F::Str),
            ("title_link", F::Str),
            ("text", F::Str),
            ("fields", F::StructList(ROCKETCHAT_FIELD)),
            ("short_fields", F::Bool),
            ("emoji", F::Str),
            ("icon_url", F::Str),
            ("image_url", F::Str),
            ("thumb_url", F::Str),
            ("link_names", F::Bool),
            ("actions", F::StructList(ROCKETCHAT_ACTION)),
        ],
    ),
    (
        "mattermost_configs",
        true,
        &[
            ("send_resolved", F::Bool),
            ("http_config", F::Http),
            ("webhook_url", F::SecretUrl),
            ("webhook_url_file", F::Str),
            ("channel", F::Str),
            ("username", F::Str),
            ("text", F::Str),
            ("fallback", F::Str),
            ("color", F::Str),
            ("pretext", F::Str),
            ("author_name", F::Str),
            ("author_link", F::Str),
            ("author_icon", F::Str),
            ("title", F::Str),
            ("title_link", F::Str),
            ("fields", F::StructList(MATTERMOST_FIELD)),
            ("thumb_url", F::Str),
            ("footer", F::Str),
            ("footer_icon", F::Str),
            ("image_url", F::Str),
            ("icon_url", F::Str),
            ("icon_emoji", F::Str),
            ("attachments", F::StructList(MATTERMOST_ATTACHMENT)),
            ("type", F::Str),
            ("props", F::Struct(&[("card", F::Str)])),
            (
                "priority",
                F::Struct(&[
                    ("priority", F::Str),
                    ("requested_ack", F::Bool),
                    ("persistent_notifications", F::Bool),
                ]),
            ),
        ],
    ),
];

const ROCKETCHAT_FIELD: &[FieldSpec] = &[("short", F::Bool), ("title", F::Str), ("value", F::Str)];

const ROCKETCHAT_ACTION: &[FieldSpec] = &[
    ("type", F::Str),
    ("text", F::Str),
    ("url", F::Str),
    ("image_url", F::Str),
    ("is_webview", F::Bool),
    ("webview_height_ratio", F::Str),
    ("msg", F::Str),
    ("msg_in_chat_window", F::Bool),
    ("msg_processing_type", F::Str),
];

const MATTERMOST_FIELD: &[FieldSpec] = &[("title", F::Str), ("value", F::Str), ("short", F::Bool)];

const MATTERMOST_ATTACHMENT: &[FieldSpec] = &[
    ("fallback", F::Str),
    ("color", F::Str),
    ("pretext", F::Str),
    ("text", F::Str),
    ("author_name", F::Str),
    ("author_link", F::Str),
    ("author_icon", F::Str),
    ("title", F::Str),
    ("title_link", F::Str),
    ("fields", F::StructList(MATTERMOST_FIELD)),
    ("thumb_url", F::Str),
    ("footer", F::Str),
    ("footer_icon", F::Str),
    ("image_url", F::Str),
];

/// Fields Alertmanager added to 0.25's kinds by 0.35, read only for delivery (the
/// Alertmanager 0.25 reading refuses them as it does). Pushover's `api_url` is watchfire's:
/// Alertmanager hard-codes Pushover's URL.
const LATER_FIELDS: &[(&str, &[FieldSpec])] = &[
    (
        "discord_configs",
        &[
            ("webhook_url_file", F::Str),
            ("content", F::Str),
            ("username", F::Str),
            ("avatar_url", F::Str),
        ],
    ),
    (
        "telegram_configs",
        &[
            ("bot_token_file", F::Str),
            ("chat_id_file", F::Str),
            ("message_thread_id", F::I64),
        ],
    ),
    (
        "pushover_configs",
        &[
            ("user_key_file", F::Str),
            ("token_file", F::Str),
            ("device", F::Str),
            ("ttl", F::GoDuration),
            ("monospace", F::Bool),
            ("api_url", F::Url),
        ],
    ),
    ("wechat_configs", &[("api_secret_file", F::Str)]),
];

/// The field name of Slack's Block Kit blocks (`watchfire: {blocks: ...}`) in [`Fields`].
pub const BLOCKS: &str = "watchfire.blocks";

/// Slack fields that only shape the attachment, which blocks replace.
const ATTACHMENT_ONLY: &[&str] = &[
    "title",
    "title_link",
    "pretext",
    "text",
    "fields",
    "short_fields",
    "actions",
    "color",
    "footer",
    "image_url",
    "thumb_url",
    "mrkdwn_in",
    "callback_id",
];

/// Kinds watchfire reads beyond Alertmanager 0.25's (last in [`KINDS`]).
const WATCHFIRE_KINDS: usize = 5;

/// The integration kinds watchfire delivers, in Alertmanager's order.
pub const DELIVERED_KINDS: &[&str] = &[
    "discord_configs",
    "email_configs",
    "incidentio_configs",
    "pagerduty_configs",
    "slack_configs",
    "webhook_configs",
    "opsgenie_configs",
    "wechat_configs",
    "pushover_configs",
    "victorops_configs",
    "sns_configs",
    "telegram_configs",
    "webex_configs",
    "msteamsv2_configs",
    "jira_configs",
    "rocketchat_configs",
    "mattermost_configs",
];

/// Whether `kind` (e.g. `webhook_configs`) is an Alertmanager 0.25 integration kind.
pub fn is_kind(kind: &str) -> bool {
    kind_names().any(|k| k == kind)
}

/// The integration keys of a receiver, in Alertmanager's order.
pub fn kind_names() -> impl Iterator<Item = &'static str> {
    KINDS[..KINDS.len() - WATCHFIRE_KINDS].iter().map(|(k, _, _)| *k)
}

/// [`kind_names`] plus the kinds of later Alertmanager releases (`msteamsv2_configs`,
/// `jira_configs`, ...), read only for delivery.
pub fn delivery_kind_names() -> impl Iterator<Item = &'static str> {
    KINDS.iter().map(|(k, _, _)| *k)
}

fn type_name(f: F) -> &'static str {
    match f {
        F::Str | F::Url | F::SecretUrl | F::CommonUrl | F::HostPort | F::TlsVersion => "string",
        F::Secret | F::Http | F::Tls | F::BasicAuth => "config.plain",
        F::Bool => "bool",
        F::U64 => "uint64",
        F::I64 => "int64",
        F::StrMap => "map[string]string",
        F::StrList => "[]string",
        F::GoDuration => "config.duration",
        F::Sigv4 => "sigv4.plain",
        F::PdImages => "[]config.PagerdutyImage",
        F::PdLinks => "[]config.PagerdutyLink",
        F::SlackFields => "[]*config.SlackField",
        F::SlackActions => "[]*config.SlackAction",
        F::SlackExtensions => "watchfire.SlackExtensions",
        F::OgResponders => "[]config.OpsGenieConfigResponder",
        F::Struct(_) | F::JiraField => "config.plain",
        F::StructList(_) => "[]*config.plain",
        F::Any => "map[string]interface {}",
        F::PromDuration => "model.Duration",
        F::Header => "config.Header",
        F::OAuth2 => "config.OAuth2",
        F::Authorization => "config.Authorization",
    }
}

/// prometheus/common's `HTTPClientConfig` (0.39).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HttpClientConfig {
    pub basic_auth: Option<BasicAuth>,
    pub authorization: Option<Authorization>,
    /// OAuth2 settings, kept as decoded (watchfire does not fetch OAuth2 tokens yet).
    pub oauth2: Option<Fields>,
    pub proxy_url: Option<String>,
    pub proxy_connect_header: Vec<(String, Vec<String>)>,
    pub tls_config: TlsConfig,
    pub follow_redirects: bool,
    pub enable_http2: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BasicAuth {
    pub username: String,
    pub password: String,
    pub password_file: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Authorization {
    pub type_: String,
    pub credentials: String,
    pub credentials_file: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
    pub server_name: String,
    pub insecure_skip_verify: bool,
    pub min_version: String,
    pub max_version: String,
}

/// Decodes a struct of `(name, kind)` fields into [`Fields`].
fn decode_fields(d: &mut Decoder, node: &Node, tname: &str, spec: &[(&str, F)], out: &mut Fields) -> DResult<bool> {
    let names: Vec<&str> = spec.iter().map(|(n, _)| *n).collect();
    d.fields(node, tname, &names, &mut |d, k, kpos, v| {
        let Some((_, f)) = spec.iter().find(|(n, _)| *n == k) else {
            return Ok(());
        };
        if let Some(val) = decode_value(d, v, *f)? {
            out.values.push((k.to_string(), val, kpos));
        }
        Ok(())
    })
}

fn decode_value(d: &mut Decoder, v: &Node, f: F) -> DResult<Option<Val>> {
    if v.is_null() {
        return Ok(Some(Val::Null));
    }
    let tn = type_name(f);
    Ok(match f {
        F::Str | F::Secret => Some(Val::Str(d.string(v, tn))),
        F::Bool => Some(Val::Bool(d.bool(v))),
        F::U64 => Some(Val::Int(d.int(v, 0, u64::MAX as i128, tn))),
        F::I64 => Some(Val::Int(d.int(v, i64::MIN as i128, i64::MAX as i128, tn))),
        F::StrMap => Some(Val::Map(d.string_map(v, tn)?)),
        F::StrList => Some(Val::List(d.string_list(v, tn))),
        F::Url => match d.custom_string(v) {
            Some(s) => {
                parse_am_url(&s).map_err(|e| Fail::new(v.pos(), redact_url_error(&e, &s)))?;
                Some(Val::Str(s))
            }
            None => None,
        },
        F::SecretUrl => match d.custom_string(v) {
            Some(s) if s == "<secret>" => Some(Val::Str(s)),
            Some(s) => {
                parse_am_url(&s).map_err(|e| Fail::new(v.pos(), redact_url_error(&e, &s)))?;
                Some(Val::Str(s))
            }
            None => None,
        },
        F::CommonUrl => match d.custom_string(v) {
            Some(s) => {
                go_url_parse(&s).map_err(|e| Fail::new(v.pos(), redact_url_error(&e, &s)))?;
                Some(Val::Str(s))
            }
            None => None,
        },
        F::HostPort => match d.custom_string(v) {
            Some(s) if s.is_empty() => Some(Val::Str(s)),
            Some(s) => {
                check_host_port(&s, v.pos())?;
                Some(Val::Str(s))
            }
            None => None,
        },
        F::TlsVersion => match d.custom_string(v) {
            Some(s) => {
                if !matches!(s.as_str(), "TLS13" | "TLS12" | "TLS11" | "TLS10") {
                    return Err(Fail::new(v.pos(), format!("unknown TLS version: {s}")));
                }
                Some(Val::Str(s))
            }
            None => None,
        },
        F::GoDuration => match v {
            Node::Scalar(s) => {
                parse_go_duration(&s.value).map_err(|e| Fail::new(v.pos(), e))?;
                Some(Val::Str(s.value.clone()))
            }
            _ => {
                d.type_error(v, tn);
                None
            }
        },
        F::PromDuration => match d.custom_string(v) {
            Some(s) => {
                crate::duration::parse_alertmanager(&s).map_err(|e| Fail::new(v.pos(), e))?;
                Some(Val::Str(s))
            }
            None => None,
        },
        F::Struct(spec) => {
            let mut f = Fields::default();
            decode_fields(d, v, tn, spec, &mut f)?;
            Some(Val::Struct(Box::new(f)))
        }
        F::StructList(spec) => {
            let mut out = Vec::new();
            for item in d.seq(v, tn) {
                let mut f = Fields::default();
                decode_fields(d, item, "config.plain", spec, &mut f)?;
                out.push(f);
            }
            Some(Val::StructList(out))
        }
        F::Any => Some(Val::Tree(super::blocks::decode_tree(d, v)?)),
        F::JiraField => match v {
            // A plain string is the template (Alertmanager's backward-compatible form).
            Node::Scalar(_) => {
                let mut f = Fields::default();
                f.values
                    .push(("template".into(), Val::Str(d.string(v, "string")), v.pos()));
                Some(Val::Struct(Box::new(f)))
            }
            _ => {
                let mut f = Fields::default();
                decode_fields(d, v, tn, &[("template", F::Str), ("enable_update", F::Bool)], &mut f)?;
                Some(Val::Struct(Box::new(f)))
            }
        },
        F::Http => Some(Val::Http(Box::new(decode_http_config(d, v)?))),
        F::Tls => Some(Val::Tls(decode_tls(d, v)?)),
        F::BasicAuth | F::Authorization | F::OAuth2 | F::Sigv4 => {
            // Decoded by their parents (they need validation context); reaching here means a
            // spec error.
            let mut fields = Fields::default();
            let spec = match f {
                F::OAuth2 => OAUTH2_FIELDS,
                _ => SIGV4_FIELDS,
            };
            decode_fields(d, v, tn, spec, &mut fields)?;
            Some(Val::Records(vec![flatten(&fields)]))
        }
        F::Header => {
            let mut out = Vec::new();
            for (k, _, val) in d.map_entries(v, tn)? {
                out.push((k, d.string_list(val, "[]config.Secret")));
            }
            Some(Val::Map(out.into_iter().map(|(k, vs)| (k, vs.join(","))).collect()))
        }
        F::PdImages => Some(Val::Records(decode_records(
            d,
            v,
            tn,
            "config.PagerdutyImage",
            &["src", "alt", "href"],
            |_, _| Ok(()),
        )?)),
        F::PdLinks => Some(Val::Records(decode_records(
            d,
            v,
            tn,
            "config.PagerdutyLink",
            &["href", "text"],
            |_, _| Ok(()),
        )?)),
        F::OgResponders => Some(Val::Records(decode_records(
            d,
            v,
            tn,
            "config.OpsGenieConfigResponder",
            &["id", "name", "username", "type"],
            |_, _| Ok(()),
        )?)),
        F::SlackFields => Some(Val::Records(decode_records(
            d,
            v,
            tn,
            "config.plain",
            &["title", "value", "short"],
            |r, pos| {
                if r.get("title").is_none_or(|s| s.is_empty()) {
                    return Err(Fail::new(pos, "missing title in Slack field configuration"));
                }
                if r.get("value").is_none_or(|s| s.is_empty()) {
                    return Err(Fail::new(pos, "missing value in Slack field configuration"));
                }
                Ok(())
            },
        )?)),
        F::SlackActions => Some(Val::Records(decode_slack_actions(d, v, tn)?)),
        // Stored under `watchfire.blocks` by `decode_integration`.
        F::SlackExtensions => decode_slack_extensions(d, v)?.map(|(b, _)| Val::Blocks(b)),
    })
}

fn flatten(f: &Fields) -> BTreeMap<String, String> {
    f.values
        .iter()
        .map(|(k, v, _)| {
            let s = match v {
                Val::Str(s) => s.clone(),
                Val::Bool(b) => b.to_string(),
                Val::Int(i) => i.to_string(),
                Val::List(l) => l.join(","),
                _ => String::new(),
            };
            (k.clone(), s)
        })
        .collect()
}

/// A list of flat records (all string fields, except Slack's `short` bool).
fn decode_records(
    d: &mut Decoder,
    v: &Node,
    list_type: &str,
    item_type: &str,
    names: &[&str],
    validate: impl Fn(&BTreeMap<String, String>, Pos) -> DResult<()>,
) -> DResult<Vec<BTreeMap<String, String>>> {
    let mut out = Vec::new();
    for item in d.seq(v, list_type) {
        let mark = d.mark();
        let mut rec = BTreeMap::new();
        d.fields(item, item_type, names, &mut |d, k, _, val| {
            let s = if k == "short" {
                if val.is_null() {
                    String::new()
                } else {
                    d.bool(val).to_string()
                }
            } else {
                d.string(val, "string")
            };
            rec.insert(k.to_string(), s);
            Ok(())
        })?;
        if item.is_null() || d.failed_since(mark) {
            out.push(rec);
            continue;
        }
        if item_type == "config.plain" {
            validate(&rec, item.pos())?;
        }
        out.push(rec);
    }
    Ok(out)
}

fn decode_slack_actions(d: &mut Decoder, v: &Node, tn: &str) -> DResult<Vec<BTreeMap<String, String>>> {
    let names = ["type", "text", "url", "style", "name", "value", "confirm"];
    let mut out = Vec::new();
    for item in d.seq(v, tn) {
        let mark = d.mark();
        let mut rec = BTreeMap::new();
        d.fields(item, "config.plain", &names, &mut |d, k, _, val| {
            if k == "confirm" {
                let m2 = d.mark();
                let mut conf = BTreeMap::new();
                d.fields(
                    val,
                    "config.plain",
                    &["text", "title", "ok_text", "dismiss_text"],
                    &mut |d, k, _, v| {
                        conf.insert(k.to_string(), d.string(v, "string"));
                        Ok(())
                    },
                )?;
                if !val.is_null() && !d.failed_since(m2) && conf.get("text").is_none_or(|s| s.is_empty()) {
                    return Err(Fail::new(val.pos(), "missing text in Slack confirmation configuration"));
                }
                rec.insert("confirm".to_string(), conf.get("text").cloned().unwrap_or_default());
                // The other confirmation fields, for the Slack receiver (`confirm.title`, ...).
                for (k, v) in conf {
                    if k != "text" {
                        rec.insert(format!("confirm.{k}"), v);
                    }
                }
            } else {
                rec.insert(k.to_string(), d.string(val, "string"));
            }
            Ok(())
        })?;
        if item.is_null() || d.failed_since(mark) {
            out.push(rec);
            continue;
        }
        let get = |k: &str| rec.get(k).map(String::as_str).unwrap_or("");
        if get("type").is_empty() {
            return Err(Fail::new(item.pos(), "missing type in Slack action configuration"));
        }
        if get("text").is_empty() {
            return Err(Fail::new(item.pos(), "missing text in Slack action configuration"));
        }
        if get("url").is_empty() && get("name").is_empty() {
            return Err(Fail::new(
                item.pos(),
                "missing name or url in Slack action configuration",
            ));
        }
        out.push(rec);
    }
    Ok(out)
}

/// `commoncfg.TLSConfig` (no validation at load time in common 0.39).
pub fn decode_tls(d: &mut Decoder, node: &Node) -> DResult<TlsConfig> {
    let mut f = Fields::default();
    decode_fields(d, node, "config.plain", TLS_FIELDS, &mut f)?;
    Ok(TlsConfig {
        ca_file: f.str("ca_file").to_string(),
        cert_file: f.str("cert_file").to_string(),
        key_file: f.str("key_file").to_string(),
        server_name: f.str("server_name").to_string(),
        insecure_skip_verify: f.bool_or("insecure_skip_verify", false),
        min_version: f.str("min_version").to_string(),
        max_version: f.str("max_version").to_string(),
    })
}

/// `commoncfg.HTTPClientConfig`: defaults (follow_redirects, enable_http2), then `Validate()`.
pub fn decode_http_config(d: &mut Decoder, node: &Node) -> DResult<HttpClientConfig> {
    let mark = d.mark();
    let mut c = HttpClientConfig {
        follow_redirects: true,
        enable_http2: true,
        ..Default::default()
    };
    let mut bearer_token = String::new();
    let mut bearer_token_file = String::new();
    let names: Vec<&str> = HTTP_FIELDS.iter().map(|(n, _)| *n).collect();
    d.fields(node, "config.plain", &names, &mut |d, k, _, v| {
        match k {
            "basic_auth" => {
                c.basic_auth = if v.is_null() {
                    None
                } else {
                    let mut f = Fields::default();
                    decode_fields(
                        d,
                        v,
                        "config.plain",
                        &[("username", F::Str), ("password", F::Secret), ("password_file", F::Str)],
                        &mut f,
                    )?;
                    Some(BasicAuth {
                        username: f.str("username").into(),
                        password: f.str("password").into(),
                        password_file: f.str("password_file").into(),
                    })
                }
            }
            "authorization" => {
                c.authorization = if v.is_null() {
                    None
                } else {
                    let mut f = Fields::default();
                    decode_fields(
                        d,
                        v,
                        "config.Authorization",
                        &[
                            ("type", F::Str),
                            ("credentials", F::Secret),
                            ("credentials_file", F::Str),
                        ],
                        &mut f,
                    )?;
                    Some(Authorization {
                        type_: f.str("type").into(),
                        credentials: f.str("credentials").into(),
                        credentials_file: f.str("credentials_file").into(),
                    })
                }
            }
            "oauth2" => {
                c.oauth2 = if v.is_null() {
                    None
                } else {
                    let mut f = Fields::default();
                    decode_fields(d, v, "config.OAuth2", OAUTH2_FIELDS, &mut f)?;
                    Some(f)
                }
            }
            "bearer_token" => bearer_token = d.string(v, "config.plain"),
            "bearer_token_file" => bearer_token_file = d.string(v, "string"),
            "proxy_url" => {
                c.proxy_url = match decode_value(d, v, F::CommonUrl)? {
                    Some(Val::Str(s)) => Some(s),
                    _ => None,
                }
            }
            "proxy_connect_header" => {
                c.proxy_connect_header = Vec::new();
                if !v.is_null() {
                    for (k, _, val) in d.map_entries(v, "config.Header")? {
                        let vals = d.string_list(val, "[]config.Secret");
                        c.proxy_connect_header.push((k, vals));
                    }
                }
            }
            "tls_config" => c.tls_config = decode_tls(d, v)?,
            "follow_redirects" => c.follow_redirects = d.bool(v),
            "enable_http2" => c.enable_http2 = d.bool(v),
            _ => {}
        }
        Ok(())
    })?;
    if node.is_null() || d.failed_since(mark) {
        return Ok(c);
    }
    let fail = |m: &str| Err(Fail::new(node.pos(), m));
    if !bearer_token.is_empty() && !bearer_token_file.is_empty() {
        return fail("at most one of bearer_token & bearer_token_file must be configured");
    }
    if (c.basic_auth.is_some() || c.oauth2.is_some()) && (!bearer_token.is_empty() || !bearer_token_file.is_empty()) {
        return fail("at most one of basic_auth, oauth2, bearer_token & bearer_token_file must be configured");
    }
    if let Some(b) = &c.basic_auth {
        if !b.password.is_empty() && !b.password_file.is_empty() {
            return fail("at most one of basic_auth password & password_file must be configured");
        }
    }
    if let Some(a) = &mut c.authorization {
        if !bearer_token.is_empty() || !bearer_token_file.is_empty() {
            return fail("authorization is not compatible with bearer_token & bearer_token_file");
        }
        if !a.credentials.is_empty() && !a.credentials_file.is_empty() {
            return fail("at most one of authorization credentials & credentials_file must be configured");
        }
        a.type_ = a.type_.trim().to_string();
        if a.type_.is_empty() {
            a.type_ = "Bearer".into();
        }
        if a.type_.eq_ignore_ascii_case("basic") {
            return fail(r#"authorization type cannot be set to "basic", use "basic_auth" instead"#);
        }
        if c.basic_auth.is_some() || c.oauth2.is_some() {
            return fail("at most one of basic_auth, oauth2 & authorization must be configured");
        }
    } else if !bearer_token.is_empty() {
        c.authorization = Some(Authorization {
            type_: "Bearer".into(),
            credentials: bearer_token.clone(),
            credentials_file: String::new(),
        });
    } else if !bearer_token_file.is_empty() {
        c.authorization = Some(Authorization {
            type_: "Bearer".into(),
            credentials: String::new(),
            credentials_file: bearer_token_file.clone(),
        });
    }
    if let Some(o) = &c.oauth2 {
        if c.basic_auth.is_some() {
            return fail("at most one of basic_auth, oauth2 & authorization must be configured");
        }
        if o.str("client_id").is_empty() {
            return fail("oauth2 client_id must be configured");
        }
        if o.str("client_secret").is_empty() && o.str("client_secret_file").is_empty() {
            return fail("either oauth2 client_secret or client_secret_file must be configured");
        }
        if o.str("token_url").is_empty() {
            return fail("oauth2 token_url must be configured");
        }
        if !o.str("client_secret").is_empty() && !o.str("client_secret_file").is_empty() {
            return fail("at most one of oauth2 client_secret & client_secret_file must be configured");
        }
    }
    if !c.proxy_connect_header.is_empty() && c.proxy_url.as_deref().is_none_or(str::is_empty) {
        return fail("if proxy_connect_header is configured proxy_url must also be configured");
    }
    Ok(c)
}

/// One integration's decoded configuration, before global defaults are applied.
#[derive(Clone, Debug, PartialEq)]
pub struct IntegrationConfig {
    /// The YAML key, e.g. `webhook_configs`.
    pub kind: &'static str,
    pub fields: Fields,
    pub pos: Pos,
}

impl IntegrationConfig {
    /// `send_resolved`, with the kind's default.
    pub fn send_resolved(&self) -> bool {
        let default = KINDS
            .iter()
            .find(|(k, _, _)| *k == self.kind)
            .is_none_or(|(_, d, _)| *d);
        self.fields.bool_or("send_resolved", default)
    }
}

/// Decodes one entry of a `*_configs` list and runs the kind's own validation; `later` reads it
/// as Alertmanager 0.35 does (the fields and checks added since 0.25), for delivery.
pub fn decode_integration(
    d: &mut Decoder,
    kind: &'static str,
    node: &Node,
    later: bool,
) -> DResult<Option<IntegrationConfig>> {
    let Some((_, _, spec)) = KINDS.iter().find(|(k, _, _)| *k == kind) else {
        return Ok(None);
    };
    let mut spec: Vec<FieldSpec> = spec.to_vec();
    if later {
        if let Some((_, more)) = LATER_FIELDS.iter().find(|(k, _)| *k == kind) {
            spec.extend_from_slice(more);
        }
    }
    if node.is_null() {
        return Err(Fail::new(
            node.pos(),
            format!("{} entry must not be empty", kind.trim_end_matches('s')),
        ));
    }
    let mark = d.mark();
    let mut fields = Fields::default();
    // sigv4 is decoded here to validate it in place.
    let names: Vec<&str> = spec.iter().map(|(n, _)| *n).collect();
    d.fields(node, "config.plain", &names, &mut |d, k, kpos, v| {
        let Some((_, f)) = spec.iter().find(|(n, _)| *n == k) else {
            return Ok(());
        };
        if *f == F::Sigv4 {
            if v.is_null() {
                return Ok(());
            }
            let m2 = d.mark();
            let mut s = Fields::default();
            decode_fields(d, v, "sigv4.plain", SIGV4_FIELDS, &mut s)?;
            if !d.failed_since(m2) && (s.str("access_key").is_empty() != s.str("secret_key").is_empty()) {
                return Err(Fail::new(
                    v.pos(),
                    "must provide a AWS SigV4 Access key and Secret Key if credentials are specified in the SigV4 config",
                ));
            }
            fields.values.push((k.to_string(), Val::Records(vec![flatten(&s)]), kpos));
            return Ok(());
        }
        if *f == F::SlackExtensions {
            if let Some((blocks, bpos)) = decode_slack_extensions(d, v)? {
                fields.values.push((BLOCKS.to_string(), Val::Blocks(blocks), bpos));
            }
            return Ok(());
        }
        if let Some(val) = decode_value(d, v, *f)? {
            fields.values.push((k.to_string(), val, kpos));
        }
        Ok(())
    })?;
    let cfg = IntegrationConfig {
        kind,
        fields,
        pos: node.pos(),
    };
    if d.failed_since(mark) {
        return Ok(Some(cfg));
    }
    if later {
        validate_later(&cfg)?;
    }
    validate_integration(&cfg, later)?;
    Ok(Some(cfg))
}

/// Alertmanager 0.35's checks of the kinds and fields it added after 0.25 (`UnmarshalYAML` of
/// each config).
fn validate_later(c: &IntegrationConfig) -> DResult<()> {
    let f = &c.fields;
    let fail = |m: &str| Err(Fail::new(c.pos, m));
    let both = |a: &str, b: &str| f.is_set(a) && !f.str(a).is_empty() && !f.str(b).is_empty();
    match c.kind {
        "discord_configs" | "mattermost_configs"
            if f.is_set("webhook_url") && !f.str("webhook_url_file").is_empty() =>
        {
            fail("at most one of webhook_url & webhook_url_file must be configured")
        }
        "discord_configs" if !f.is_set("webhook_url") && f.str("webhook_url_file").is_empty() => {
            fail("one of webhook_url or webhook_url_file must be configured")
        }
        "mattermost_configs" => {
            let mut fields: Vec<&Fields> = f.structs("fields").iter().collect();
            for a in f.structs("attachments") {
                fields.extend(a.structs("fields"));
            }
            for field in fields {
                let pos = field.values.first().map_or(c.pos, |(_, _, p)| *p);
                if field.str("title").is_empty() {
                    return Err(Fail::new(pos, "missing title in Mattermost field configuration"));
                }
                if field.str("value").is_empty() {
                    return Err(Fail::new(pos, "missing value in Mattermost field configuration"));
                }
            }
            Ok(())
        }
        "telegram_configs" => {
            if both("bot_token", "bot_token_file") {
                return fail("at most one of bot_token & bot_token_file must be configured");
            }
            let chat_id = f.int("chat_id") != 0;
            let chat_id_file = !f.str("chat_id_file").is_empty();
            if !chat_id && !chat_id_file {
                return fail("missing chat_id or chat_id_file on telegram_config");
            }
            if chat_id && chat_id_file {
                return fail("at most one of chat_id & chat_id_file must be configured");
            }
            Ok(())
        }
        "pushover_configs" => {
            for (key, file) in [("user_key", "user_key_file"), ("token", "token_file")] {
                if f.str(key).is_empty() && f.str(file).is_empty() {
                    return fail(&format!("one of {key} or {file} must be configured"));
                }
                if both(key, file) {
                    return fail(&format!("at most one of {key} & {file} must be configured"));
                }
            }
            if f.bool_or("html", false) && f.bool_or("monospace", false) {
                return fail("at most one of monospace & html must be configured");
            }
            Ok(())
        }
        "wechat_configs" if both("api_secret", "api_secret_file") => {
            fail("at most one of api_secret & api_secret_file must be configured")
        }
        "incidentio_configs" => {
            let url = f.is_set("url");
            let url_file = !f.str("url_file").is_empty();
            if !url && !url_file {
                return fail("one of url or url_file must be configured");
            }
            if url && url_file {
                return fail("at most one of url & url_file must be configured");
            }
            if both("alert_source_token", "alert_source_token_file") {
                return fail("at most one of alert_source_token & alert_source_token_file must be configured");
            }
            let token = !f.str("alert_source_token").is_empty() || !f.str("alert_source_token_file").is_empty();
            // Only an explicit `http_config` counts (the global one is applied later).
            if let Some(h) = f.http("http_config") {
                if h.authorization.is_some() && token {
                    return fail("cannot specify alert_source_token or alert_source_token_file when using http_config.authorization");
                }
                if h.authorization.is_none() && !token {
                    return fail("at least one of alert_source_token, alert_source_token_file or http_config.authorization must be configured");
                }
            }
            Ok(())
        }
        "jira_configs" => {
            if f.str("project").is_empty() {
                return fail("missing project in jira_config");
            }
            if f.str("issue_type").is_empty() {
                return fail("missing issue_type in jira_config");
            }
            let api_type = match f.get("api_type") {
                Some(Val::Str(s)) => s.as_str(),
                Some(_) => "",
                None => "auto",
            };
            if !matches!(api_type, "auto" | "cloud" | "datacenter") {
                return fail("unknown api_type on jira_config, must be auto, cloud or datacenter");
            }
            Ok(())
        }
        "rocketchat_configs" => {
            if f.is_set("token") && !f.str("token_file").is_empty() {
                return fail("at most one of token & token_file must be configured");
            }
            if f.is_set("token_id") && !f.str("token_id_file").is_empty() {
                return fail("at most one of token_id & token_id_file must be configured");
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn validate_integration(c: &IntegrationConfig, later: bool) -> DResult<()> {
    let f = &c.fields;
    let fail = |m: String| Err(Fail::new(c.pos, m));
    match c.kind {
        // Alertmanager 0.35 reads these with the checks of `validate_later`.
        "pushover_configs" if later => {}
        "email_configs" => {
            if f.str("to").is_empty() {
                return fail("missing to address in email config".into());
            }
            let mut seen: Vec<String> = Vec::new();
            for (h, _) in f.map("headers") {
                let n = canonical_mime_header_key(&h);
                if seen.contains(&n) {
                    return fail(format!("duplicate header {} in email config", go_quote(&n)));
                }
                seen.push(n);
            }
        }
        "pagerduty_configs" => {
            let (rk, rkf, sk, skf) = (
                f.str("routing_key"),
                f.str("routing_key_file"),
                f.str("service_key"),
                f.str("service_key_file"),
            );
            if rk.is_empty() && sk.is_empty() && rkf.is_empty() && skf.is_empty() {
                return fail("missing service or routing key in PagerDuty config".into());
            }
            if !rk.is_empty() && !rkf.is_empty() {
                return fail("at most one of routing_key & routing_key_file must be configured".into());
            }
            if !sk.is_empty() && !skf.is_empty() {
                return fail("at most one of service_key & service_key_file must be configured".into());
            }
        }
        "slack_configs" if f.is_set("api_url") && !f.str("api_url_file").is_empty() => {
            return fail("at most one of api_url & api_url_file must be configured".into());
        }
        "slack_configs" if f.get(BLOCKS).is_some() => {
            // The blocks replace the attachment: a text set for it would silently not be sent.
            if let Some((name, _, pos)) = f.values.iter().find(|(n, _, _)| ATTACHMENT_ONLY.contains(&n.as_str())) {
                return Err(Fail::new(
                    *pos,
                    format!("{name} is not sent when watchfire.blocks is set (the blocks replace the attachment; the fallback text is `fallback`)"),
                ));
            }
        }
        // Alertmanager 0.28's checks.
        "msteamsv2_configs" => {
            if f.is_set("webhook_url") && !f.str("webhook_url_file").is_empty() {
                return fail("at most one of webhook_url & webhook_url_file must be configured".into());
            }
            if !f.is_set("webhook_url") && f.str("webhook_url_file").is_empty() {
                return fail("one of webhook_url or webhook_url_file must be configured".into());
            }
        }
        "webhook_configs" if !f.is_set("url") => return fail("missing URL in webhook config".into()),
        "wechat_configs" => {
            let mt = match f.get("message_type") {
                Some(Val::Str(s)) if !s.is_empty() => s.as_str(),
                _ => "text",
            };
            if mt != "text" && mt != "markdown" {
                return fail(format!(
                    "weChat message type {} does not match valid options ^(text|markdown)$",
                    go_quote(mt)
                ));
            }
        }
        "opsgenie_configs" => {
            if !f.str("api_key").is_empty() && !f.str("api_key_file").is_empty() {
                return fail("at most one of api_key & api_key_file must be configured".into());
            }
            for r in f.records("responders") {
                let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("");
                let shown = format!("{{{} {} {} {}}}", get("id"), get("name"), get("username"), get("type"));
                if get("id").is_empty() && get("username").is_empty() && get("name").is_empty() {
                    return fail(format!(
                        "opsGenieConfig responder {shown} has to have at least one of id, username or name specified"
                    ));
                }
                let t = get("type");
                if !t.contains("{{") {
                    let t = t.to_lowercase();
                    if !matches!(t.as_str(), "team" | "teams" | "user" | "escalation" | "schedule") {
                        return fail(format!(
                            "opsGenieConfig responder {shown} type does not match valid options ^(team|teams|user|escalation|schedule)$"
                        ));
                    }
                }
            }
        }
        "victorops_configs" => {
            if f.str("routing_key").is_empty() {
                return fail("missing Routing key in VictorOps config".into());
            }
            if !f.str("api_key").is_empty() && !f.str("api_key_file").is_empty() {
                return fail("at most one of api_key & api_key_file must be configured".into());
            }
            let reserved = [
                "routing_key",
                "message_type",
                "state_message",
                "entity_display_name",
                "monitoring_tool",
                "entity_id",
                "entity_state",
            ];
            for (k, _) in f.map("custom_fields") {
                if reserved.contains(&k.as_str()) {
                    return fail(format!(
                        "victorOps config contains custom field {k} which cannot be used as it conflicts with the fixed/static fields"
                    ));
                }
            }
        }
        "pushover_configs" => {
            if f.str("user_key").is_empty() {
                return fail("missing user key in Pushover config".into());
            }
            if f.str("token").is_empty() {
                return fail("missing token in Pushover config".into());
            }
        }
        "sns_configs" => {
            // Alertmanager's check, quirk included: `(a == "") != (b == "") != (c == "")`.
            let a = f.str("target_arn").is_empty();
            let b = f.str("topic_arn").is_empty();
            let cc = f.str("phone_number").is_empty();
            if (a != b) != cc {
                return fail("must provide either a Target ARN, Topic ARN, or Phone Number for SNS config".into());
            }
        }
        "telegram_configs" => {
            // Alertmanager 0.35's checks of the token and chat are in `validate_later`.
            if !later && f.str("bot_token").is_empty() {
                return fail("missing bot_token on telegram_config".into());
            }
            if !later && !matches!(f.get("chat_id"), Some(Val::Int(i)) if *i != 0) {
                return fail("missing chat_id on telegram_config".into());
            }
            let pm = match f.get("parse_mode") {
                Some(Val::Str(s)) => s.as_str(),
                Some(Val::Null) => "",
                _ => "HTML",
            };
            if !matches!(pm, "" | "Markdown" | "MarkdownV2" | "HTML") {
                return fail(
                    "unknown parse_mode on telegram_config, must be Markdown, MarkdownV2, HTML or empty string".into(),
                );
            }
        }
        "webex_configs" => {
            if f.str("room_id").is_empty() {
                return fail("missing room_id on webex_config".into());
            }
            if f.http("http_config").and_then(|h| h.authorization.as_ref()).is_none() {
                return fail("missing webex_configs.http_config.authorization".into());
            }
        }
        _ => {}
    }
    Ok(())
}

/// Go's `textproto.CanonicalMIMEHeaderKey`.
fn canonical_mime_header_key(s: &str) -> String {
    if s.bytes().any(|b| !(b.is_ascii_alphanumeric() || b == b'-')) {
        return s.to_string();
    }
    let mut upper = true;
    s.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// Alertmanager's `HostPort` check: `host:port` with a port (an empty string is allowed).
pub(crate) fn check_host_port(s: &str, pos: Pos) -> DResult<()> {
    let (_, port) = split_host_port(s).map_err(|e| Fail::new(pos, e))?;
    if port.is_empty() {
        return Err(Fail::new(pos, format!("address {}: port cannot be empty", go_quote(s))));
    }
    Ok(())
}

/// `message` with the secret `value` in it, as is or Go-quoted (how Go's URL errors show it),
/// shown as Alertmanager masks secrets.
pub(crate) fn redact_secret(message: &str, value: &str) -> String {
    if value.is_empty() {
        return message.to_string();
    }
    let quoted = crate::gofmt::quote(value);
    message.replace(&quoted, "\"<secret>\"").replace(value, "<secret>")
}

/// A URL's parse error with the URL shown as `<secret>`: any URL may carry credentials (user
/// info, a token in its path or query), and the README promises none is printed. The part of
/// the authority a port error quotes may be a piece of a password, so it goes too.
pub(crate) fn redact_url_error(message: &str, url: &str) -> String {
    let out = redact_secret(message, url);
    match (out.find("invalid port "), out.rfind(" after host")) {
        (Some(a), Some(b)) if a < b => format!("{}invalid port{}", &out[..a], &out[b..]),
        _ => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::v2::parse;

    #[test]
    fn url_errors_never_show_the_url() {
        for url in ["ftp://user:pw@h/x", "http://user:p/ss@host/hook", "http://u:tok@[::1/x"] {
            let e = parse_am_url(url).unwrap_err();
            let shown = redact_url_error(&e, url);
            assert!(
                !shown.contains("pw") && !shown.contains("tok") && !shown.contains(":p"),
                "{shown}"
            );
        }
    }

    fn dec(kind: &'static str, y: &str) -> Result<IntegrationConfig, String> {
        let n = parse(y).unwrap().unwrap();
        let mut d = Decoder::new();
        let r = decode_integration(&mut d, kind, &n, false).map_err(|f| f.message)?;
        if let Some(i) = d.issues.first() {
            return Err(i.message.clone());
        }
        Ok(r.unwrap())
    }

    #[test]
    fn webhook_validation() {
        assert!(dec("webhook_configs", "url: http://x/y").is_ok());
        assert_eq!(
            dec("webhook_configs", "send_resolved: true").unwrap_err(),
            "missing URL in webhook config"
        );
        assert_eq!(
            dec("webhook_configs", "url: ftp://x").unwrap_err(),
            "unsupported scheme \"ftp\" for URL"
        );
        assert_eq!(
            dec("webhook_configs", "url: http://").unwrap_err(),
            "missing host for URL"
        );
        assert_eq!(
            dec("webhook_configs", "url: http://x\nfoo: 1").unwrap_err(),
            "field foo not found in type config.plain"
        );
        assert_eq!(
            dec("webhook_configs", "url: http://x\nmax_alerts: -1").unwrap_err(),
            "cannot unmarshal !!int `-1` into uint64"
        );
        let c = dec("webhook_configs", "url: http://x").unwrap();
        assert!(c.send_resolved());
    }

    #[test]
    fn pagerduty_validation() {
        assert_eq!(
            dec("pagerduty_configs", "severity: x").unwrap_err(),
            "missing service or routing key in PagerDuty config"
        );
        assert_eq!(
            dec("pagerduty_configs", "routing_key: a\nrouting_key_file: b").unwrap_err(),
            "at most one of routing_key & routing_key_file must be configured"
        );
        assert!(dec(
            "pagerduty_configs",
            "routing_key: a\nlinks: [{href: 'http://x', text: y}]"
        )
        .is_ok());
    }

    #[test]
    fn http_config_validation() {
        let h = |y: &str| {
            let n = parse(y).unwrap().unwrap();
            let mut d = Decoder::new();
            decode_http_config(&mut d, &n)
                .map_err(|f| f.message)
                .and_then(|c| match d.issues.first() {
                    Some(i) => Err(i.message.clone()),
                    None => Ok(c),
                })
        };
        assert_eq!(
            h("bearer_token: a\nbearer_token_file: b").unwrap_err(),
            "at most one of bearer_token & bearer_token_file must be configured"
        );
        let c = h("bearer_token: a").unwrap();
        assert_eq!(c.authorization.unwrap().credentials, "a");
        assert!(c.follow_redirects);
        assert_eq!(
            h("authorization: {type: Basic}").unwrap_err(),
            "authorization type cannot be set to \"basic\", use \"basic_auth\" instead"
        );
        assert_eq!(
            h("no_proxy: x").unwrap_err(),
            "field no_proxy not found in type config.plain"
        );
    }

    #[test]
    fn other_kinds() {
        assert_eq!(
            dec("telegram_configs", "chat_id: 1").unwrap_err(),
            "missing bot_token on telegram_config"
        );
        assert_eq!(
            dec("telegram_configs", "bot_token: x").unwrap_err(),
            "missing chat_id on telegram_config"
        );
        assert!(dec("telegram_configs", "bot_token: x\nchat_id: 5").is_ok());
        assert_eq!(
            dec("sns_configs", "subject: x").unwrap_err(),
            "must provide either a Target ARN, Topic ARN, or Phone Number for SNS config"
        );
        assert!(dec("sns_configs", "topic_arn: arn:aws:sns:x").is_ok());
        assert_eq!(
            dec("email_configs", "from: a").unwrap_err(),
            "missing to address in email config"
        );
        assert_eq!(
            dec("email_configs", "to: a\nheaders: {subject: a, Subject: b}").unwrap_err(),
            "duplicate header \"Subject\" in email config"
        );
        assert_eq!(
            dec("email_configs", "to: a\nsmarthost: localhost").unwrap_err(),
            "address localhost: missing port in address"
        );
        assert_eq!(
            dec("pushover_configs", "token: a").unwrap_err(),
            "missing user key in Pushover config"
        );
        assert_eq!(
            dec("pushover_configs", "token: a\nuser_key: b\nretry: 1d").unwrap_err(),
            "time: unknown unit \"d\" in duration \"1d\""
        );
        assert_eq!(
            dec("slack_configs", "actions: [{type: button}]").unwrap_err(),
            "missing text in Slack action configuration"
        );
        assert_eq!(
            dec("webex_configs", "room_id: r").unwrap_err(),
            "missing webex_configs.http_config.authorization"
        );
        assert_eq!(
            dec("opsgenie_configs", "responders: [{name: x, type: foo}]").unwrap_err(),
            "opsGenieConfig responder { x  foo} type does not match valid options ^(team|teams|user|escalation|schedule)$"
        );
    }
}
