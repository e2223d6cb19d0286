//! Owners: who is paged for an alert. An owners file maps cluster / namespace / label matchers to
//! a team, its paging and notify receivers and its escalation; a team label on the alert (for
//! example joined from `kube_namespace_labels`) names the team instead.
//!
//! ```yaml
//! team_label: team            # an alert label that names the team (default `team`)
//! default: platform           # owner when nothing matches (optional)
//! teams:
//!   - name: ml-training
//!     receivers: {page: ml-training-pagerduty, notify: ml-training-sns}
//!     escalation: ["primary on-call", "secondary after 15m", "ML infra manager after 30m"]
//!     contact: "#ml-training"
//!     owns:                   # any entry matches; inside one, every given field must match
//!       - namespace: "training|training-.*"   # anchored regular expressions
//!         cluster: ".*"
//!       - matchers: ['layer="ml-workflow"']   # Alertmanager matchers
//! namespace_teams:            # teams named by namespace labels (optional)
//!   metric: kube_namespace_labels   # default
//!   label: label_team               # default; kube-state-metrics
//!                                   # --metric-labels-allowlist=namespaces=[team]
//! ```
//!
//! The same file carries the notification settings every team shares: `deny_labels` (labels
//! never sent to external receivers) and `links` (diagnostic link templates, see
//! [`super::links`]).
//!
//! Resolution is ordered: the team label when it names a known team, then the team that the
//! alert's namespace names in its labels (`namespace_teams`) when it is a known team, then the
//! first team (in file order) with a matching `owns` entry, then `default`.
//!
//! Namespace labels are data, not configuration: whoever evaluates rules (`run`, `replay`, the
//! notification tests) runs [`Owners::namespace_teams_query`] against its source about once a
//! minute and hands the rows to [`Owners::observe_namespace_teams`]. A failed or empty query
//! keeps what was last seen, so a kube-state-metrics gap does not move an alert to another team.
//!
//! Before routing, [`Owners::stamp`] writes the resolved team into the team label (as
//! Alertmanager's `alert_relabel_configs` would), so an unchanged Alertmanager routing tree can
//! send each team's pages to that team's receiver with `matchers: [team="..."]`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use regex::Regex;

use crate::labels::{Labels, LabelsBuilder, Matcher};

use super::links::NotificationSettings;
use super::matchers::parse_matchers;
use crate::yaml::v2::{Node, Pos};
use crate::yaml::{FileError, Reader};

/// A team's receivers by severity class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TeamReceivers {
    pub page: Option<String>,
    pub notify: Option<String>,
    pub info: Option<String>,
}

/// One `owns` entry: every field given must match.
#[derive(Clone, Debug)]
pub struct OwnsEntry {
    pub cluster: Option<Regex>,
    pub namespace: Option<Regex>,
    pub matchers: Vec<Matcher>,
    pub pos: Pos,
}

impl OwnsEntry {
    fn matches(&self, labels: &Labels) -> bool {
        let get = |n: &str| labels.get(n).unwrap_or("");
        self.cluster.as_ref().is_none_or(|r| r.is_match(get("cluster")))
            && self.namespace.as_ref().is_none_or(|r| r.is_match(get("namespace")))
            && self.matchers.iter().all(|m| m.matches(get(&m.name)))
    }
}

/// A team.
#[derive(Clone, Debug)]
pub struct Team {
    pub name: String,
    pub receivers: TeamReceivers,
    pub escalation: Vec<String>,
    pub contact: Option<String>,
    pub owns: Vec<OwnsEntry>,
    pub pos: Pos,
}

/// How a team was found for an alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The alert's team label named it.
    Label,
    /// An `owns` entry matched.
    Owns,
    /// The alert's namespace is labelled with the team (`namespace_teams`).
    NamespaceLabel,
    /// Nothing matched; the default owner.
    Default,
}

/// Where namespace labels name teams: `max by (cluster, namespace, LABEL) (METRIC{LABEL!=""})`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceTeams {
    pub metric: String,
    pub label: String,
    /// The query, built once.
    query: String,
}

impl NamespaceTeams {
    pub fn new(metric: &str, label: &str) -> NamespaceTeams {
        NamespaceTeams {
            metric: metric.to_string(),
            label: label.to_string(),
            query: format!("max by (cluster, namespace, {label}) ({metric}{{{label}!=\"\"}})"),
        }
    }
}

/// How often namespace labels are read again (ms): they change with deployments, not alerts.
const NAMESPACE_TEAMS_REFRESH_MS: i64 = 60_000;

/// The namespace teams last observed, shared by the clones of one loaded owners file (the
/// evaluator hands its copy around).
#[derive(Clone, Debug, Default)]
struct Observed(Arc<RwLock<ObservedTeams>>);

#[derive(Debug, Default)]
struct ObservedTeams {
    /// (cluster, namespace) -> team; cluster "" where the series has none.
    by_namespace: HashMap<(String, String), String>,
    /// When it was last read (ms); `None` before the first read.
    at_ms: Option<i64>,
}

/// A loaded owners file.
#[derive(Clone, Debug)]
pub struct Owners {
    pub team_label: String,
    pub default: Option<String>,
    pub teams: Vec<Team>,
    /// Links and the label deny-list.
    pub settings: NotificationSettings,
    pub path: Option<String>,
    pub namespace_teams: Option<NamespaceTeams>,
    observed: Observed,
}

impl Default for Owners {
    fn default() -> Self {
        Owners {
            team_label: "team".into(),
            default: None,
            teams: Vec::new(),
            settings: NotificationSettings::default(),
            path: None,
            namespace_teams: None,
            observed: Observed::default(),
        }
    }
}

impl Owners {
    /// Reads an owners file.
    pub fn load_file(path: &Path) -> Result<Owners, FileError> {
        let (text, shown) = crate::yaml::read_file(path)?;
        let mut o = Owners::load_str(&text, &shown)?;
        o.path = Some(shown);
        Ok(o)
    }

    /// Parses owners text; `file` names it in errors.
    pub fn load_str(text: &str, file: &str) -> Result<Owners, FileError> {
        let r = Reader { file };
        let mut out = Owners::default();
        let Some(root) = r.parse(text)? else {
            return Ok(out);
        };
        let mut default_pos = Pos { line: 1, col: 1 };
        let keys = [
            "team_label",
            "default",
            "teams",
            "links",
            "deny_labels",
            "namespace_teams",
        ];
        for (key, kpos, v) in r.map(&root, "the owners file", &keys)? {
            match key.as_str() {
                "team_label" => {
                    out.team_label = r.string(v, "team_label")?;
                    if !crate::labels::is_valid_label_name(&out.team_label) {
                        return Err(r.err(
                            v.pos(),
                            format!("team_label {:?} is not a valid label name", out.team_label),
                        ));
                    }
                }
                "default" => {
                    out.default = Some(r.string(v, "default")?);
                    default_pos = kpos;
                }
                "links" => out.settings.links = NotificationSettings::decode_links(&r, v)?,
                "deny_labels" => out.settings.deny_labels = r.strings(v, "deny_labels")?,
                "namespace_teams" => out.namespace_teams = Some(decode_namespace_teams(&r, v)?),
                _ => {
                    for t in r.seq(v, "teams")? {
                        let team = decode_team(&r, t)?;
                        if out.teams.iter().any(|x| x.name == team.name) {
                            return Err(r.err(team.pos, format!("team {:?} is defined twice", team.name)));
                        }
                        out.teams.push(team);
                    }
                }
            }
        }
        if let Some(d) = &out.default {
            if out.team(d).is_none() {
                return Err(r.err(default_pos, format!("default: no team named {d:?} under teams")));
            }
        }
        Ok(out)
    }

    /// The team named `name`.
    pub fn team(&self, name: &str) -> Option<&Team> {
        self.teams.iter().find(|t| t.name == name)
    }

    /// The owner of an alert with these labels, and how it was found.
    pub fn resolve(&self, labels: &Labels) -> Option<(&Team, Resolution)> {
        if let Some(t) = labels.get(&self.team_label).and_then(|n| self.team(n)) {
            return Some((t, Resolution::Label));
        }
        if let Some(t) = self.namespace_team(labels).and_then(|n| self.team(&n)) {
            return Some((t, Resolution::NamespaceLabel));
        }
        if let Some(t) = self.teams.iter().find(|t| t.owns.iter().any(|o| o.matches(labels))) {
            return Some((t, Resolution::Owns));
        }
        self.default
            .as_deref()
            .and_then(|d| self.team(d))
            .map(|t| (t, Resolution::Default))
    }

    /// What leaves for a receiver: `n` redacted and with its diagnostic links, by this file's
    /// deny-list and link settings ([`super::links::outgoing`]).
    pub fn outgoing(&self, n: &super::Notification) -> super::Notification {
        super::links::outgoing(n, &self.settings, &|labels| {
            self.resolve(labels).map(|(t, _)| t.name.clone())
        })
    }

    /// Stamps an outgoing alert's owner in place (see [`Owners::stamp`]).
    pub fn stamp_alert(&self, alert: &mut crate::alert::Alert) {
        alert.labels = self.stamp(&alert.labels);
    }

    /// The labels with the team label set to the resolved owner (unchanged when the alert
    /// already names a known team or no owner is found).
    pub fn stamp(&self, labels: &Labels) -> Labels {
        match self.resolve(labels) {
            Some((_, Resolution::Label)) | None => labels.clone(),
            Some((t, _)) => {
                let mut b = LabelsBuilder::new(labels);
                b.set(&self.team_label, &t.name);
                b.build()
            }
        }
    }

    /// The query whose rows name each namespace's team, when `namespace_teams` is configured
    /// and the last read is a minute old (or from the future: a replay started again).
    /// The namespace-teams query itself, whenever it is due or not (to fetch its data ahead).
    pub fn namespace_teams_expr(&self) -> Option<&str> {
        self.namespace_teams.as_ref().map(|nt| nt.query.as_str())
    }

    pub fn namespace_teams_query(&self, now_ms: i64) -> Option<&str> {
        let nt = self.namespace_teams.as_ref()?;
        let at = self.observed.0.read().ok()?.at_ms;
        match at {
            Some(t) if now_ms >= t && now_ms - t < NAMESPACE_TEAMS_REFRESH_MS => None,
            _ => Some(nt.query.as_str()),
        }
    }

    /// Records the rows of [`Self::namespace_teams_query`] read at `now_ms`. `None` (the query
    /// failed) and an empty answer keep the teams seen before.
    pub fn observe_namespace_teams<'l>(&self, now_ms: i64, rows: Option<impl IntoIterator<Item = &'l Labels>>) {
        let Some(nt) = &self.namespace_teams else { return };
        let Ok(mut obs) = self.observed.0.write() else { return };
        obs.at_ms = Some(now_ms);
        let mut seen = HashMap::new();
        for l in rows.into_iter().flatten() {
            if let (Some(ns), Some(team)) = (l.get("namespace"), l.get(&nt.label)) {
                if !team.is_empty() {
                    let key = (l.get("cluster").unwrap_or("").to_string(), ns.to_string());
                    seen.insert(key, team.to_string());
                }
            }
        }
        if !seen.is_empty() {
            obs.by_namespace = seen;
        }
    }

    /// Reads the namespace teams when due: `query` runs an instant query at `now_ms` and gives
    /// the labels of its series, or `None` when it failed.
    pub fn refresh_namespace_teams(&self, now_ms: i64, query: impl FnOnce(&str) -> Option<Vec<Labels>>) {
        if let Some(q) = self.namespace_teams_query(now_ms) {
            let q = q.to_string();
            let rows = query(&q);
            self.observe_namespace_teams(now_ms, rows.as_ref());
        }
    }

    /// The team the alert's namespace is labelled with: matched on cluster and namespace, or on
    /// the namespace alone where the alert or the series has no cluster and only one team
    /// claims that namespace name.
    fn namespace_team(&self, labels: &Labels) -> Option<String> {
        self.namespace_teams.as_ref()?;
        let ns = labels.get("namespace").filter(|n| !n.is_empty())?;
        let obs = self.observed.0.read().ok()?;
        let cluster = labels.get("cluster").unwrap_or("");
        if let Some(t) = obs.by_namespace.get(&(cluster.to_string(), ns.to_string())) {
            return Some(t.clone());
        }
        let mut found: Option<&String> = None;
        for ((c, n), t) in &obs.by_namespace {
            if n == ns && (c.is_empty() || cluster.is_empty()) {
                if found.is_some_and(|f| f != t) {
                    return None;
                }
                found = Some(t);
            }
        }
        found.cloned()
    }

    /// Every receiver name the owners file refers to, with the team and role.
    pub fn receiver_refs(&self) -> Vec<(&str, &'static str, &str)> {
        let mut out = Vec::new();
        for t in &self.teams {
            for (role, r) in [
                ("page", &t.receivers.page),
                ("notify", &t.receivers.notify),
                ("info", &t.receivers.info),
            ] {
                if let Some(r) = r {
                    out.push((t.name.as_str(), role, r.as_str()));
                }
            }
        }
        out
    }
}

fn decode_team(r: &Reader<'_>, node: &Node) -> Result<Team, FileError> {
    let mut team = Team {
        name: String::new(),
        receivers: TeamReceivers::default(),
        escalation: Vec::new(),
        contact: None,
        owns: Vec::new(),
        pos: node.pos(),
    };
    for (key, _, v) in r.map(node, "a team", &["name", "receivers", "escalation", "contact", "owns"])? {
        match key.as_str() {
            "name" => team.name = r.string(v, "name")?,
            "receivers" => {
                for (role, _, rv) in r.map(v, "receivers", &["page", "notify", "info"])? {
                    let name = Some(r.string(rv, &format!("receivers.{role}"))?);
                    match role.as_str() {
                        "page" => team.receivers.page = name,
                        "notify" => team.receivers.notify = name,
                        _ => team.receivers.info = name,
                    }
                }
            }
            "escalation" => team.escalation = r.strings(v, "escalation")?,
            "contact" => team.contact = Some(r.string(v, "contact")?),
            _ => {
                for o in r.seq(v, "owns")? {
                    team.owns.push(decode_owns(r, o)?);
                }
            }
        }
    }
    if team.name.is_empty() {
        return Err(r.err(team.pos, "a team needs a name"));
    }
    Ok(team)
}

fn decode_namespace_teams(r: &Reader<'_>, node: &Node) -> Result<NamespaceTeams, FileError> {
    let (mut metric, mut label) = ("kube_namespace_labels".to_string(), "label_team".to_string());
    for (key, _, v) in r.map(node, "namespace_teams", &["metric", "label"])? {
        let value = r.string(v, &key)?;
        if !crate::labels::is_valid_label_name(&value) {
            return Err(r.err(v.pos(), format!("namespace_teams.{key}: {value:?} is not a valid name")));
        }
        if key == "metric" {
            metric = value;
        } else {
            label = value;
        }
    }
    Ok(NamespaceTeams::new(&metric, &label))
}

fn decode_owns(r: &Reader<'_>, node: &Node) -> Result<OwnsEntry, FileError> {
    let mut e = OwnsEntry {
        cluster: None,
        namespace: None,
        matchers: Vec::new(),
        pos: node.pos(),
    };
    for (key, _, v) in r.map(node, "an owns entry", &["cluster", "namespace", "matchers"])? {
        match key.as_str() {
            "cluster" => e.cluster = Some(r.regex(v, "cluster")?),
            "namespace" => e.namespace = Some(r.regex(v, "namespace")?),
            _ => {
                for m in r.strings(v, "matchers")? {
                    let parsed = parse_matchers(&m).map_err(|err| r.err(v.pos(), format!("matchers: {m:?}: {err}")))?;
                    e.matchers.extend(parsed);
                }
            }
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNERS: &str = r#"
team_label: team
default: platform
teams:
  - name: platform
    receivers: {page: platform-pagerduty, notify: platform-sns}
  - name: ml-training
    receivers: {page: training-pagerduty, notify: training-sns}
    escalation: [primary, secondary]
    owns:
      - namespace: "training|training-.*"
  - name: serving
    receivers: {page: serving-pagerduty}
    owns:
      - cluster: "prod-.*"
        matchers: ['namespace=~"serving.*"']
"#;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn resolution_order() {
        let o = Owners::load_str(OWNERS, "owners.yaml").unwrap();
        let (t, how) = o.resolve(&l(&[("namespace", "training-a")])).unwrap();
        assert_eq!((t.name.as_str(), how), ("ml-training", Resolution::Owns));
        let (t, how) = o
            .resolve(&l(&[("namespace", "training"), ("team", "serving")]))
            .unwrap();
        assert_eq!((t.name.as_str(), how), ("serving", Resolution::Label));
        let (t, how) = o.resolve(&l(&[("namespace", "serving"), ("cluster", "dev")])).unwrap();
        assert_eq!((t.name.as_str(), how), ("platform", Resolution::Default));
        let (t, _) = o
            .resolve(&l(&[("namespace", "serving-a"), ("cluster", "prod-1")]))
            .unwrap();
        assert_eq!(t.name, "serving");
        // An unknown team label falls through to the matchers.
        let (t, _) = o.resolve(&l(&[("namespace", "training"), ("team", "nobody")])).unwrap();
        assert_eq!(t.name, "ml-training");
        let stamped = o.stamp(&l(&[("namespace", "training")]));
        assert_eq!(stamped.get("team"), Some("ml-training"));
    }

    #[test]
    fn namespace_labels_name_the_team() {
        let text = format!("{OWNERS}namespace_teams: {{label: label_owner}}\n");
        let o = Owners::load_str(&text, "owners.yaml").unwrap();
        assert_eq!(
            o.namespace_teams_query(0),
            Some("max by (cluster, namespace, label_owner) (kube_namespace_labels{label_owner!=\"\"})")
        );
        let rows = [
            l(&[("cluster", "prod-1"), ("namespace", "llm"), ("label_owner", "serving")]),
            l(&[
                ("cluster", "prod-1"),
                ("namespace", "training"),
                ("label_owner", "serving"),
            ]),
            l(&[("cluster", "prod-1"), ("namespace", "x"), ("label_owner", "nobody")]),
        ];
        o.observe_namespace_teams(0, Some(rows.iter()));
        // Read again only a minute later, or when time goes back (a new replay).
        assert_eq!(o.namespace_teams_query(59_999), None);
        assert!(o.namespace_teams_query(60_000).is_some());
        assert!(o.namespace_teams_query(-1).is_some());
        let how = |pairs: &[(&str, &str)]| o.resolve(&l(pairs)).map(|(t, h)| (t.name.clone(), h));
        assert_eq!(
            how(&[("cluster", "prod-1"), ("namespace", "llm")]),
            Some(("serving".into(), Resolution::NamespaceLabel))
        );
        // The namespace label wins over `owns`; the alert's own team label wins over both.
        assert_eq!(
            how(&[("cluster", "prod-1"), ("namespace", "training")]),
            Some(("serving".into(), Resolution::NamespaceLabel))
        );
        assert_eq!(
            how(&[("cluster", "prod-1"), ("namespace", "training"), ("team", "platform")]),
            Some(("platform".into(), Resolution::Label))
        );
        // Another cluster's namespace of the same name, and unknown teams, fall through.
        assert_eq!(
            how(&[("cluster", "prod-2"), ("namespace", "training")]),
            Some(("ml-training".into(), Resolution::Owns))
        );
        assert_eq!(
            how(&[("cluster", "prod-1"), ("namespace", "x")]),
            Some(("platform".into(), Resolution::Default))
        );
        // Without a cluster label, a namespace name one team claims.
        assert_eq!(
            how(&[("namespace", "llm")]),
            Some(("serving".into(), Resolution::NamespaceLabel))
        );
        // A failed or empty read keeps what was seen.
        o.observe_namespace_teams(60_000, None::<&[Labels]>);
        o.observe_namespace_teams(120_000, Some(&[] as &[Labels]));
        assert_eq!(
            how(&[("cluster", "prod-1"), ("namespace", "llm")]).map(|x| x.0),
            Some("serving".into())
        );
        let e = Owners::load_str("namespace_teams: {label: 'a-b'}\n", "o.yaml").unwrap_err();
        assert!(e.to_string().starts_with("o.yaml:1:26: namespace_teams.label"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = Owners::load_str("teams:\n  - name: a\n    bogus: 1\n", "o.yaml").unwrap_err();
        assert_eq!(e.file, "o.yaml");
        assert_eq!(e.pos.line, 3);
        assert!(e.message.contains("unknown key \"bogus\""), "{e}");
        let e = Owners::load_str("default: x\nteams: []\n", "o.yaml").unwrap_err();
        assert!(e.to_string().starts_with("o.yaml:1:1: default"), "{e}");
        let e = Owners::load_str("teams:\n  - name: a\n    owns: [{namespace: '('}]\n", "o.yaml").unwrap_err();
        assert!(e.message.contains("invalid regex"), "{e}");
        assert!(Owners::load_str("teams: [", "o.yaml").is_err());
    }
}
