//! The alert that rules produce and notify consumes: Alertmanager's `types.Alert` (labels,
//! annotations, activity range), its fingerprint, merge rule and order. It lives on the ground
//! floor so that neither stage imports the other.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

use crate::labels::Labels;

/// An alert's identity: the FNV-1a hash of its sorted labels (`model.Fingerprint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub u64);

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

pub(crate) const FNV_OFFSET: u64 = 14695981039346656037;
pub(crate) const FNV_PRIME: u64 = 1099511628211;
const SEPARATOR: u8 = 0xff;

/// `model.LabelSet.Fingerprint()`.
pub fn fingerprint(labels: &Labels) -> Fingerprint {
    fingerprint_of(labels.iter())
}

/// [`fingerprint`] of labels sorted by name (a subset of a label set, say), without building
/// the set.
pub fn fingerprint_of<'a>(labels: impl Iterator<Item = &'a crate::labels::Label>) -> Fingerprint {
    let mut h = FNV_OFFSET;
    let mut add = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    };
    for l in labels {
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
        .map(|l| format!("{}={}", l.name, crate::gofmt::quote_common_invisibles(&l.value)))
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

    /// The wall clock stepped by `d` at `from` (no time passed): an alert still valid at `from`
    /// keeps the validity it had left, and its receipt moves with it; a resolved one stays
    /// resolved (after a step back, a resolve younger than the step would otherwise read as an
    /// end still to come, and the alert as firing again). Returns whether it moved.
    pub fn move_with_clock(&mut self, from: DateTime<Utc>, d: chrono::Duration) -> bool {
        let Some(e) = self.ends_at else { return false };
        if e <= from && d >= chrono::Duration::zero() {
            // Resolved, and stays so by a clock that went forward.
            return false;
        }
        self.ends_at = Some(e + d);
        self.updated_at += d;
        true
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
