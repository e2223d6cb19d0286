//! Alerts as Alertmanager holds them (`types.Alert`): labels, annotations, activity range,
//! fingerprint, merge rules, and the alert store (`provider/mem`) that merges re-sent alerts.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use chrono::{DateTime, Datelike, Timelike, Utc};

use crate::labels::Labels;

use super::duration::Duration;

/// An alert's identity: the FNV-1a hash of its sorted labels (`model.Fingerprint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub u64);

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

const FNV_OFFSET: u64 = 14695981039346656037;
const FNV_PRIME: u64 = 1099511628211;
const SEPARATOR: u8 = 0xff;

/// `model.LabelSet.Fingerprint()`.
pub fn fingerprint(labels: &Labels) -> Fingerprint {
    let mut h = FNV_OFFSET;
    let mut add = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    };
    for l in labels.iter() {
        for b in l.name.bytes() {
            add(b);
        }
        add(SEPARATOR);
        for b in l.value.bytes() {
            add(b);
        }
        add(SEPARATOR);
    }
    Fingerprint(h)
}

/// `model.LabelSet.String()`: `{a="1", b="2"}`, entries sorted as strings, values Go-quoted.
pub fn labelset_string(labels: &Labels) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|l| format!("{}={}", l.name, super::yaml::go_quote(&l.value)))
        .collect();
    parts.sort();
    format!("{{{}}}", parts.join(", "))
}

/// An alert.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub labels: Labels,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: DateTime<Utc>,
    /// `None` is Go's zero time: no end known.
    pub ends_at: Option<DateTime<Utc>>,
    pub generator_url: String,
    /// When Alertmanager last received it.
    pub updated_at: DateTime<Utc>,
    /// Whether `ends_at` was set by Alertmanager (`resolve_timeout`), not by the sender.
    pub timeout: bool,
}

impl Alert {
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.labels)
    }

    /// `alertname`, or "".
    pub fn name(&self) -> &str {
        self.labels.get("alertname").unwrap_or("")
    }

    /// `ResolvedAt`: the activity range ended at or before `t`.
    pub fn resolved_at(&self, t: DateTime<Utc>) -> bool {
        matches!(self.ends_at, Some(e) if e <= t)
    }

    /// `types.Alert.Merge`: `o` is the newer report (by `updated_at`).
    pub fn merge(&self, o: &Alert) -> Alert {
        if o.updated_at < self.updated_at {
            return o.merge(self);
        }
        let mut res = o.clone();
        if self.starts_at < o.starts_at {
            res.starts_at = self.starts_at;
        }
        let after = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| match (a, b) {
            (Some(a), Some(b)) => a > b,
            (Some(_), None) => true,
            _ => false,
        };
        // `Resolved()` in Go reads the wall clock; here the newer report's time stands in.
        let now = o.updated_at;
        if o.resolved_at(now) {
            if self.resolved_at(now) && after(self.ends_at, o.ends_at) {
                res.ends_at = self.ends_at;
            }
        } else if after(self.ends_at, o.ends_at) && !self.timeout {
            res.ends_at = self.ends_at;
        }
        res
    }
}

/// `types.AlertSlice` order: by `job`, then `instance` (alerts with the label first), then by
/// label set (`LabelSet.Before`).
pub fn alert_order(a: &Alert, b: &Alert) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    for key in ["job", "instance"] {
        match (a.labels.get(key), b.labels.get(key)) {
            (None, None) => continue,
            (None, Some(_)) => return Ordering::Greater,
            (Some(_), None) => return Ordering::Less,
            (Some(x), Some(y)) if x != y => return x.cmp(y),
            _ => {}
        }
    }
    labelset_before(&a.labels, &b.labels)
}

/// `model.LabelSet.Before` as an ordering.
fn labelset_before(a: &Labels, b: &Labels) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    if a.len() != b.len() {
        return a.len().cmp(&b.len());
    }
    let mut names: Vec<&str> = a.iter().map(|l| &*l.name).chain(b.iter().map(|l| &*l.name)).collect();
    names.sort_unstable();
    for n in names {
        match (a.get(n), b.get(n)) {
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(x), Some(y)) if x != y => return x.cmp(y),
            _ => {}
        }
    }
    Ordering::Equal
}

/// Go's `time.Time` JSON form (RFC 3339 with trimmed nanoseconds); `None` is the zero time.
pub fn go_time_json(t: Option<DateTime<Utc>>) -> String {
    let Some(t) = t else {
        return "0001-01-01T00:00:00Z".into();
    };
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    let nanos = t.nanosecond() % 1_000_000_000;
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// An alert as POSTed to `/api/v2/alerts`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostableAlert {
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub generator_url: String,
}

impl PostableAlert {
    /// What Alertmanager's API stores for it at `now` (api/v2 `postAlertsHandler`): missing
    /// `startsAt` is now (or `endsAt` if only that is given), missing `endsAt` is
    /// `now + resolve_timeout` and marks the alert as timing out; empty label values dropped.
    pub fn into_alert(self, now: DateTime<Utc>, resolve_timeout: Duration) -> Result<Alert, String> {
        let labels = Labels::from_pairs(self.labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let starts_at = match (self.starts_at, self.ends_at) {
            (Some(s), _) => s,
            (None, Some(e)) if e < now => e,
            _ => now,
        };
        let (ends_at, timeout) = match self.ends_at {
            Some(e) => (e, false),
            None => (now + resolve_timeout.as_chrono(), true),
        };
        if labels.is_empty() {
            return Err("at least one label pair required".into());
        }
        if ends_at < starts_at {
            return Err("start time must be before end time".into());
        }
        for l in labels.iter() {
            if !super::matchers::is_valid_label_name(&l.name) {
                return Err(format!("invalid name {}", super::yaml::go_quote(&l.name)));
            }
        }
        Ok(Alert {
            labels,
            annotations: self.annotations.into_iter().filter(|(_, v)| !v.is_empty()).collect(),
            starts_at,
            ends_at: Some(ends_at),
            generator_url: self.generator_url,
            updated_at: now,
            timeout,
        })
    }
}

/// The alert store (`provider/mem`): one alert per fingerprint, re-sent alerts merged when
/// their activity ranges overlap.
#[derive(Clone, Debug, Default)]
pub struct AlertStore {
    alerts: HashMap<Fingerprint, Alert>,
}

impl AlertStore {
    pub fn new() -> Self {
        AlertStore::default()
    }

    /// Stores an alert and returns the stored (possibly merged) version.
    pub fn put(&mut self, mut alert: Alert) -> Alert {
        let fp = alert.fingerprint();
        if let Some(old) = self.alerts.get(&fp) {
            let overlaps = |t: DateTime<Utc>| t > old.starts_at && old.ends_at.is_some_and(|e| t < e);
            if alert.ends_at.is_some_and(overlaps) || overlaps(alert.starts_at) {
                alert = old.merge(&alert);
            }
        }
        self.alerts.insert(fp, alert.clone());
        alert
    }

    pub fn get(&self, fp: Fingerprint) -> Option<&Alert> {
        self.alerts.get(&fp)
    }

    /// All alerts, in fingerprint order.
    pub fn list(&self) -> Vec<&Alert> {
        let mut v: Vec<&Alert> = self.alerts.values().collect();
        v.sort_by_key(|a| a.fingerprint());
        v
    }

    /// Drops alerts resolved at `now` (Alertmanager's periodic GC).
    pub fn gc(&mut self, now: DateTime<Utc>) {
        self.alerts.retain(|_, a| !a.resolved_at(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn fingerprint_matches_prometheus_model() {
        // model.LabelSet{"foo": "bar"}.Fingerprint() == 0x0e5b4da2b0b24f8b? Checked against
        // the FNV-1a definition: empty set is the offset basis.
        assert_eq!(fingerprint(&Labels::empty()).0, FNV_OFFSET);
        let a = fingerprint(&Labels::from_pairs([("a", "1"), ("b", "2")]));
        let b = fingerprint(&Labels::from_pairs([("b", "2"), ("a", "1")]));
        assert_eq!(a, b);
        assert_eq!(a.to_string().len(), 16);
    }

    #[test]
    fn labelset_string_sorts_like_go() {
        let ls = Labels::from_pairs([("alertname", "X"), ("a1", "q\""), ("a", "1")]);
        assert_eq!(labelset_string(&ls), r#"{a1="q\"", a="1", alertname="X"}"#);
        assert_eq!(labelset_string(&Labels::empty()), "{}");
    }

    #[test]
    fn go_time_json_trims() {
        assert_eq!(go_time_json(None), "0001-01-01T00:00:00Z");
        assert_eq!(
            go_time_json(Some(t("2024-06-01T10:00:00.500Z"))),
            "2024-06-01T10:00:00.5Z"
        );
        assert_eq!(go_time_json(Some(t("2024-06-01T10:00:00Z"))), "2024-06-01T10:00:00Z");
    }

    #[test]
    fn api_defaults_and_merge() {
        let now = t("2024-06-01T10:00:00Z");
        let p = PostableAlert {
            labels: vec![("alertname".into(), "X".into()), ("empty".into(), String::new())],
            ..Default::default()
        };
        let a = p.clone().into_alert(now, Duration::from_secs(300)).unwrap();
        assert_eq!(a.starts_at, now);
        assert_eq!(a.ends_at, Some(t("2024-06-01T10:05:00Z")));
        assert!(a.timeout);
        assert_eq!(a.labels.len(), 1);

        let mut store = AlertStore::new();
        store.put(a.clone());
        // Re-sent a minute later: the earlier start is kept, the new timeout end applies.
        let later = t("2024-06-01T10:01:00Z");
        let b = p.clone().into_alert(later, Duration::from_secs(300)).unwrap();
        let m = store.put(b);
        assert_eq!(m.starts_at, now);
        assert_eq!(m.ends_at, Some(t("2024-06-01T10:06:00Z")));
        // Resolved explicitly.
        let r = PostableAlert {
            ends_at: Some(t("2024-06-01T10:02:00Z")),
            ..p
        }
        .into_alert(t("2024-06-01T10:02:00Z"), Duration::from_secs(300))
        .unwrap();
        let m = store.put(r);
        assert!(m.resolved_at(t("2024-06-01T10:02:00Z")));
        assert_eq!(m.starts_at, now);
    }

    #[test]
    fn alert_order_prefers_job_then_instance() {
        let mk = |pairs: &[(&str, &str)]| Alert {
            labels: Labels::from_pairs(pairs.iter().copied()),
            annotations: BTreeMap::new(),
            starts_at: t("2024-01-01T00:00:00Z"),
            ends_at: None,
            generator_url: String::new(),
            updated_at: t("2024-01-01T00:00:00Z"),
            timeout: false,
        };
        let mut v = [
            mk(&[("a", "2")]),
            mk(&[("job", "b")]),
            mk(&[("job", "a")]),
            mk(&[("a", "1")]),
        ];
        v.sort_by(alert_order);
        let names: Vec<String> = v.iter().map(|a| labelset_string(&a.labels)).collect();
        assert_eq!(names, vec![r#"{job="a"}"#, r#"{job="b"}"#, r#"{a="1"}"#, r#"{a="2"}"#]);
    }
}
