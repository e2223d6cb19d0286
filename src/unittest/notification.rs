//! `watchfire_notification_test`: the notification pipeline of `watchfire run` (owner stamping,
//! routing, grouping and timers, inhibition, time intervals, the notification log, links and the
//! label deny-list) driven in the test's simulated time, with every receiver replaced by an
//! in-memory recorder. The semantics are documented in the `unittest` module.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};

use crate::duration::Duration;
use crate::labels::Labels;
use crate::notify::links::Link;
use crate::notify::owners::Owners;
use crate::notify::{self, Notification, Notifier};
use crate::rules::alerting::Alert as RuleAlert;
use crate::rules::Group;

use super::format::{ExpNotification, NotificationTestCase, TestFile};
use super::go_labels_string;
use crate::gofmt::quote_controls_only;

/// The routes and owners of one test file, loaded once.
#[derive(Clone, Debug)]
pub(crate) struct NotifySetup {
    pub routes: notify::Config,
    pub owners: Owners,
    /// The cause stage between the rules and the notifier (`watchfire_cause_files`).
    pub causes: crate::cause::Causes,
}

/// Loads `watchfire_routes_file` and `watchfire_owners_file` (relative to the test file's
/// directory). `Ok(None)` when the file names no routes file. Errors name file:line:col.
pub(crate) fn load_setup(path: &Path, tf: &TestFile) -> Result<Option<NotifySetup>, Vec<String>> {
    let base = path.parent().unwrap_or(Path::new(""));
    let join = |p: &str| {
        if Path::new(p).is_absolute() {
            Path::new(p).to_path_buf()
        } else {
            base.join(p)
        }
    };
    let Some(routes_file) = &tf.routes_file else {
        if let Some(owners) = &tf.owners_file {
            return Err(vec![format!(
                "{}:{}: watchfire_owners_file is set but watchfire_routes_file is not: notification tests need an Alertmanager configuration",
                path.display(),
                owners.pos
            )]);
        }
        return Ok(None);
    };
    let mut errors = Vec::new();
    let routes_path = join(&routes_file.value);
    let routes = match notify::load_delivery_file(&routes_path) {
        Ok(c) => Some(c),
        Err(notify::ConfigError::Io { message, .. }) => {
            errors.push(format!(
                "{}:{}: watchfire_routes_file {}: {message}",
                path.display(),
                routes_file.pos,
                quote_controls_only(&routes_file.value)
            ));
            None
        }
        Err(e) => {
            errors.push(e.to_string());
            None
        }
    };
    let owners = match &tf.owners_file {
        None => Owners::default(),
        Some(o) => {
            let p = join(&o.value);
            if !p.is_file() {
                errors.push(format!(
                    "{}:{}: watchfire_owners_file {}: no such file",
                    path.display(),
                    o.pos,
                    quote_controls_only(&o.value)
                ));
                Owners::default()
            } else {
                match Owners::load_file(&p) {
                    Ok(o) => o,
                    Err(e) => {
                        errors.push(e.to_string());
                        Owners::default()
                    }
                }
            }
        }
    };
    if let Some(cfg) = &routes {
        for (team, role, recv) in owners.receiver_refs() {
            if cfg.receiver(recv).is_none() {
                errors.push(format!(
                    "{}: team {team:?} names {role} receiver {recv:?}, which {} does not define",
                    owners.path.as_deref().unwrap_or("the owners file"),
                    routes_path.display()
                ));
            }
        }
    }
    let mut cause_paths = Vec::new();
    for c in &tf.cause_files {
        let pattern = join(&c.value).display().to_string();
        match glob::glob(&pattern) {
            Ok(found) => {
                let mut found: Vec<_> = found.filter_map(Result::ok).collect();
                if found.is_empty() {
                    errors.push(format!(
                        "{}:{}: watchfire_cause_files {}: no such file",
                        path.display(),
                        c.pos,
                        quote_controls_only(&c.value)
                    ));
                }
                found.sort();
                cause_paths.extend(found);
            }
            Err(e) => errors.push(format!(
                "{}:{}: watchfire_cause_files: bad pattern: {e}",
                path.display(),
                c.pos
            )),
        }
    }
    let causes = match crate::cause::CauseRules::load_files(&cause_paths) {
        Ok(rules) => crate::cause::Causes::new(
            rules,
            crate::cause::Settings {
                team_label: owners.team_label.clone(),
                external_url: String::new(),
            },
        ),
        Err(e) => {
            errors.push(e.to_string());
            crate::cause::Causes::default()
        }
    };
    match routes {
        Some(routes) if errors.is_empty() => Ok(Some(NotifySetup { routes, owners, causes })),
        _ => Err(errors),
    }
}

/// One notification as the recorder got it: a receiver's flush of one alert group, all its
/// integrations together.
#[derive(Clone, Debug)]
struct Got {
    /// Relative to the test's time zero.
    at_ms: i64,
    receiver: String,
    integrations: Vec<String>,
    group_labels: Labels,
    status: &'static str,
    owner: Option<String>,
    /// Labels as sent (deny-listed labels removed).
    alerts: Vec<Labels>,
    summary: Option<String>,
    links: Vec<Link>,
}

/// The pipeline of one test group in simulated time.
pub(crate) struct Sim<'a> {
    setup: &'a NotifySetup,
    notifier: Notifier,
    causes: crate::cause::Causes,
    external_labels: Labels,
    external_url: String,
    mint: i64,
    got: Vec<Got>,
}

fn ms_to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

impl<'a> Sim<'a> {
    pub(crate) fn new(setup: &'a NotifySetup, external_labels: Labels, external_url: &str, mint: i64) -> Self {
        Sim {
            setup,
            notifier: Notifier::new(setup.routes.clone(), ms_to_time(mint)),
            causes: setup.causes.fresh(),
            external_labels,
            external_url: external_url.to_string(),
            mint,
            got: Vec::new(),
        }
    }

    /// Runs every notification timer due up to `now_ms` (absolute), each at its own instant,
    /// recording what the receivers get.
    pub(crate) fn advance(&mut self, now_ms: i64) {
        let now = ms_to_time(now_ms);
        if self.notifier.next_timer() > now {
            return;
        }
        // The recorder accepts everything, so the notification log records each as sent.
        let notes = self.notifier.advance(now, &mut |_| true);
        for (note, integrations) in notify::flushes(&notes) {
            let g = self.record(note, integrations);
            self.got.push(g);
        }
    }

    /// The cause stage, for reading the topology before [`Sim::put`].
    pub(crate) fn causes(&self) -> &crate::cause::Causes {
        &self.causes
    }

    /// The owners file, for reading namespace teams before [`Sim::put`].
    pub(crate) fn owners(&self) -> &Owners {
        &self.setup.owners
    }

    /// Hands the alerts an evaluation of `group` at `now_ms` made due to the pipeline, as
    /// Prometheus' notifier sends them (external labels added where unset, the generator URL
    /// of the rule that fired), with the owner stamped, then runs what is due at once (a
    /// `group_wait: 0s` flush happens at `now_ms`).
    pub(crate) fn put(&mut self, group: &Group, sent: &[(usize, Vec<RuleAlert>)], now_ms: i64) {
        let now = ms_to_time(now_ms);
        self.causes
            .observe_pending(group.pending_alert_labels(), &self.external_labels, now_ms);
        let mut alerts = Vec::new();
        for (ri, list) in sent {
            let rule = group.rules()[*ri].as_alerting();
            let expr = rule.map(|r| r.expr_text());
            for a in list {
                let mut alert = self.to_notify_alert(a, expr, now);
                if let Some(q) = rule.and_then(|r| r.evidence_query(&alert.labels)) {
                    alert.annotations.insert("watchfire_evidence".into(), q);
                }
                alerts.push(alert);
            }
        }
        if !alerts.is_empty() {
            let alerts = self.causes.process(alerts, now);
            self.notifier.put_alerts(alerts, now);
        }
        self.advance(now_ms);
    }

    fn to_notify_alert(&self, a: &RuleAlert, expr: Option<&str>, now: DateTime<Utc>) -> notify::Alert {
        let mut alert = a.outgoing(&self.external_labels, &self.external_url, expr, now);
        self.setup.owners.stamp_alert(&mut alert);
        alert
    }

    /// What a receiver gets, exactly as `watchfire run` hands it over
    /// ([`notify::owners::Owners::outgoing`]: deny-listed labels removed, links rendered), plus the owner
    /// and summary of the first firing alert (else the first alert).
    fn record(&self, n: &Notification, integrations: Vec<String>) -> Got {
        let at = n.at;
        let lead = n.alerts.iter().find(|a| !a.resolved_at(at)).or(n.alerts.first());
        let lead_labels = lead.map_or_else(|| n.group_labels.clone(), |a| a.labels.clone());
        let owner = self.setup.owners.resolve(&lead_labels).map(|(t, _)| t.name.clone());
        let sent = self.setup.owners.outgoing(n);
        Got {
            at_ms: at.timestamp_millis() - self.mint,
            receiver: n.receiver.clone(),
            integrations,
            group_labels: sent.group_labels,
            status: n.status(),
            owner,
            alerts: sent.alerts.into_iter().map(|a| a.labels).collect(),
            summary: lead.and_then(|a| a.annotations.get("summary").cloned()),
            links: sent.links,
        }
    }

    /// Checks a case against the notifications recorded in `(after, T]` (times relative to
    /// time zero; `after` `None` = from the start). The notifier must have been advanced to T.
    pub(crate) fn check(&self, c: &NotificationTestCase, after: Option<i64>, group_name: &str) -> Result<(), String> {
        let t = c.eval_time.ms();
        let got: Vec<&Got> = self
            .got
            .iter()
            .filter(|g| g.at_ms <= t && after.is_none_or(|a| g.at_ms > a))
            .collect();
        let exp = &c.notifications;
        // Every expected notification pairs with a distinct one got, and nothing else was got
        // (a bipartite matching: the expectations may be partial, so the first fit is not
        // always the right one).
        let fits: Vec<Vec<usize>> = exp
            .iter()
            .map(|e| (0..got.len()).filter(|&j| mismatch(e, got[j]).is_none()).collect())
            .collect();
        let pairing = max_matching(&fits, got.len());
        let unmatched_exp: Vec<usize> = (0..exp.len()).filter(|&i| pairing[i].is_none()).collect();
        let matched_got: Vec<bool> = {
            let mut m = vec![false; got.len()];
            for j in pairing.iter().flatten() {
                m[*j] = true;
            }
            m
        };
        let unexpected: Vec<usize> = (0..got.len()).filter(|&j| !matched_got[j]).collect();
        if unmatched_exp.is_empty() && unexpected.is_empty() {
            return Ok(());
        }
        let window = match after {
            None => format!("up to {}", c.eval_time),
            Some(a) => format!("after {} up to {}", Duration::from_ms(a), c.eval_time),
        };
        let mut s = String::new();
        if !group_name.is_empty() {
            s.push_str(&format!("    name: {group_name},\n"));
        }
        s.push_str(&format!(
            "    time: {}, watchfire_notification_test: notifications sent {window}\n",
            c.eval_time
        ));
        for &i in &unmatched_exp {
            let e = &exp[i];
            // The closest candidate: the same receiver, else anything; say what differs.
            let why = got
                .iter()
                .enumerate()
                .filter(|(j, g)| !matched_got[*j] && g.receiver == e.receiver)
                .filter_map(|(j, g)| mismatch(e, g).map(|m| format!("got[{j}] {m}")))
                .next()
                .unwrap_or_else(|| format!("no notification to {}", e.receiver));
            s.push_str(&format!("        missing exp[{i}] (at {}): {why}\n", e.pos));
        }
        for &j in &unexpected {
            s.push_str(&format!("        unexpected got[{j}]\n"));
        }
        s.push_str("        exp:");
        s.push_str(&list_string(exp.iter().map(exp_string).collect()));
        s.push_str("\n        got:");
        s.push_str(&list_string(got.iter().map(|g| got_string(g)).collect()));
        Err(s)
    }
}

/// Why `g` does not fit `e`, or `None` when it does.
fn mismatch(e: &ExpNotification, g: &Got) -> Option<String> {
    if e.receiver != g.receiver {
        return Some(format!(
            "receiver: exp {}, got {}",
            quote_controls_only(&e.receiver),
            quote_controls_only(&g.receiver)
        ));
    }
    if let Some(gl) = &e.group_labels {
        let exp = Labels::from_pairs(gl.iter());
        if exp != g.group_labels {
            return Some(format!(
                "group_labels: exp {}, got {}",
                labels_string(&exp),
                labels_string(&g.group_labels)
            ));
        }
    }
    if let Some(st) = &e.status {
        if st != g.status {
            return Some(format!("status: exp {st}, got {}", g.status));
        }
    }
    if let Some(o) = &e.owner {
        let got = g.owner.as_deref().unwrap_or("");
        if o != got {
            return Some(format!(
                "owner: exp {}, got {}",
                quote_controls_only(o),
                quote_controls_only(got)
            ));
        }
    }
    if let Some(s) = &e.summary {
        let got = g.summary.as_deref().unwrap_or("");
        if s != got {
            return Some(format!(
                "summary: exp {}, got {}",
                quote_controls_only(s),
                quote_controls_only(got)
            ));
        }
    }
    if let Some(links) = &e.links {
        for (kind, url) in links {
            let got = g.links.iter().find(|l| l.kind == kind.as_str()).map(|l| l.url.as_str());
            if got != Some(url.as_str()) {
                return Some(format!(
                    "links.{kind}: exp {}, got {}",
                    quote_controls_only(url),
                    got.map_or("none".to_string(), quote_controls_only)
                ));
            }
        }
    }
    if let Some(alerts) = &e.alerts {
        if alerts.len() != g.alerts.len() {
            return Some(format!("alerts: exp {}, got {}", alerts.len(), g.alerts.len()));
        }
        let fits: Vec<Vec<usize>> = alerts
            .iter()
            .map(|want| {
                (0..g.alerts.len())
                    .filter(|&j| want.iter().all(|(k, v)| g.alerts[j].get(k).unwrap_or("") == v.as_str()))
                    .collect()
            })
            .collect();
        let pairing = max_matching(&fits, g.alerts.len());
        if let Some(i) = pairing.iter().position(Option::is_none) {
            let want: Vec<(String, String)> = alerts[i].iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            return Some(format!("alerts: no alert has the labels {}", go_labels_string(&want)));
        }
    }
    None
}

/// Kuhn's augmenting paths: for each left node, its right partner (if any) in a maximum
/// matching. The lists are short (notifications of one window, alerts of one notification).
fn max_matching(fits: &[Vec<usize>], n_right: usize) -> Vec<Option<usize>> {
    fn augment(i: usize, fits: &[Vec<usize>], seen: &mut [bool], owner: &mut [Option<usize>]) -> bool {
        for &j in &fits[i] {
            if seen[j] {
                continue;
            }
            seen[j] = true;
            if owner[j].is_none_or(|k| augment(k, fits, seen, owner)) {
                owner[j] = Some(i);
                return true;
            }
        }
        false
    }
    let mut owner: Vec<Option<usize>> = vec![None; n_right];
    for i in 0..fits.len() {
        let mut seen = vec![false; n_right];
        augment(i, fits, &mut seen, &mut owner);
    }
    let mut out = vec![None; fits.len()];
    for (j, o) in owner.iter().enumerate() {
        if let Some(i) = o {
            out[*i] = Some(j);
        }
    }
    out
}

fn labels_string(l: &Labels) -> String {
    let pairs: Vec<(String, String)> = l.iter().map(|x| (x.name.to_string(), x.value.to_string())).collect();
    go_labels_string(&pairs)
}

fn map_string(m: &BTreeMap<String, String>) -> String {
    let pairs: Vec<(String, String)> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    go_labels_string(&pairs)
}

fn exp_string(e: &ExpNotification) -> String {
    let mut s = format!("receiver: {}", e.receiver);
    if let Some(g) = &e.group_labels {
        s.push_str(&format!(", group_labels: {}", map_string(g)));
    }
    if let Some(st) = &e.status {
        s.push_str(&format!(", status: {st}"));
    }
    if let Some(o) = &e.owner {
        s.push_str(&format!(", owner: {o}"));
    }
    if let Some(a) = &e.alerts {
        let list: Vec<String> = a.iter().map(map_string).collect();
        s.push_str(&format!("\nalerts: [{}]", list.join(", ")));
    }
    if let Some(sum) = &e.summary {
        s.push_str(&format!("\nsummary: {}", quote_controls_only(sum)));
    }
    if let Some(l) = &e.links {
        s.push_str(&format!("\nlinks: {}", map_string(l)));
    }
    s
}

fn got_string(g: &Got) -> String {
    let mut s = format!(
        "receiver: {}, group_labels: {}, status: {}, owner: {}, at: {}, via: {}",
        g.receiver,
        labels_string(&g.group_labels),
        g.status,
        g.owner.as_deref().unwrap_or("-"),
        Duration::from_ms(g.at_ms),
        g.integrations.join(",")
    );
    let list: Vec<String> = g.alerts.iter().map(labels_string).collect();
    s.push_str(&format!("\nalerts: [{}]", list.join(", ")));
    if let Some(sum) = &g.summary {
        s.push_str(&format!("\nsummary: {}", quote_controls_only(sum)));
    }
    if !g.links.is_empty() {
        let pairs: Vec<(String, String)> = g.links.iter().map(|l| (l.kind.to_string(), l.url.clone())).collect();
        s.push_str(&format!("\nlinks: {}", go_labels_string(&pairs)));
    }
    s
}

/// promtool's list layout: `[`, `0:` entries indented, `]`; `[]` when empty.
fn list_string(items: Vec<String>) -> String {
    if items.is_empty() {
        return "[]".into();
    }
    let mut s = String::from("[");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("\n            {i}:"));
        for (k, line) in it.split('\n').enumerate() {
            if k > 0 {
                s.push_str("\n              ");
            }
            s.push_str(line);
        }
    }
    s.push_str("\n        ]");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_finds_a_perfect_pairing_where_first_fit_fails() {
        // exp 0 fits got 0 and 1, exp 1 fits only got 0: first fit would strand exp 1.
        let fits = vec![vec![0, 1], vec![0]];
        assert_eq!(max_matching(&fits, 2), vec![Some(1), Some(0)]);
        assert_eq!(max_matching(&[vec![0], vec![0]], 1), vec![Some(0), None]);
    }

    #[test]
    fn mismatch_names_the_first_differing_field() {
        let g = Got {
            at_ms: 60_000,
            receiver: "r".into(),
            integrations: vec!["webhook".into()],
            group_labels: Labels::from_pairs([("alertname", "A")]),
            status: "firing",
            owner: Some("team-a".into()),
            alerts: vec![
                Labels::from_pairs([("alertname", "A"), ("i", "1")]),
                Labels::from_pairs([("alertname", "A"), ("i", "2")]),
            ],
            summary: Some("s".into()),
            links: vec![Link {
                kind: "runbook",
                url: "https://r/A".into(),
            }],
        };
        let mut e = ExpNotification {
            receiver: "r".into(),
            ..ExpNotification::default()
        };
        assert_eq!(mismatch(&e, &g), None);
        e.alerts = Some(vec![
            BTreeMap::from([("i".to_string(), "2".to_string())]),
            BTreeMap::from([("alertname".to_string(), "A".to_string())]),
        ]);
        assert_eq!(mismatch(&e, &g), None, "subset match per alert, any order");
        e.links = Some(BTreeMap::from([("runbook".to_string(), "https://r/B".to_string())]));
        assert_eq!(
            mismatch(&e, &g).as_deref(),
            Some(r#"links.runbook: exp "https://r/B", got "https://r/A""#)
        );
        e.links = None;
        e.owner = Some("team-b".into());
        assert_eq!(
            mismatch(&e, &g).as_deref(),
            Some(r#"owner: exp "team-b", got "team-a""#)
        );
    }
}
