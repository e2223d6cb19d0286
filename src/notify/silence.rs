//! Silences (`silence/silence.go`): matchers, a time range, author and comment; pending before
//! `startsAt`, active until `endsAt` (inclusive), expired after. An active silence whose
//! matchers all match an alert mutes it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use crate::labels::{Labels, Matcher};

use super::matchers::{all_match, new_matcher};

/// A silence's state at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SilenceState {
    Pending,
    Active,
    Expired,
}

impl SilenceState {
    pub fn as_str(self) -> &'static str {
        match self {
            SilenceState::Pending => "pending",
            SilenceState::Active => "active",
            SilenceState::Expired => "expired",
        }
    }
}

/// A matcher as the API carries it (`{name, value, isRegex, isEqual}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SilenceMatcher {
    pub name: String,
    pub value: String,
    pub is_regex: bool,
    pub is_equal: bool,
}

impl SilenceMatcher {
    fn op(&self) -> &'static str {
        match (self.is_equal, self.is_regex) {
            (true, false) => "=",
            (false, false) => "!=",
            (true, true) => "=~",
            (false, true) => "!~",
        }
    }

    fn compile(&self) -> Result<Matcher, String> {
        new_matcher(self.op(), &self.name, &self.value)
    }
}

/// A silence.
#[derive(Clone, Debug)]
pub struct Silence {
    pub id: String,
    pub matchers: Vec<SilenceMatcher>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub created_by: String,
    pub comment: String,
    compiled: Vec<Matcher>,
}

impl Silence {
    /// A silence to pass to [`Silences::set`] (an empty `id` gets one assigned).
    pub fn new(
        matchers: Vec<SilenceMatcher>,
        starts_at: DateTime<Utc>,
        ends_at: DateTime<Utc>,
        created_by: &str,
        comment: &str,
    ) -> Self {
        Silence {
            id: String::new(),
            matchers,
            starts_at,
            ends_at,
            updated_at: starts_at,
            created_by: created_by.into(),
            comment: comment.into(),
            compiled: Vec::new(),
        }
    }

    /// `getState`.
    pub fn state(&self, now: DateTime<Utc>) -> SilenceState {
        if now < self.starts_at {
            SilenceState::Pending
        } else if now > self.ends_at {
            SilenceState::Expired
        } else {
            SilenceState::Active
        }
    }

    /// Whether all matchers match the labels (regardless of state).
    pub fn matches(&self, labels: &Labels) -> bool {
        all_match(&self.compiled, |n| labels.get(n))
    }
}

/// Why a silence was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SilenceError {
    #[error("invalid silence: {0}")]
    Invalid(String),
    #[error("silence {0} not found")]
    NotFound(String),
    #[error("silence {0} already expired")]
    AlreadyExpired(String),
}

/// The silences, by id, indexed by matcher: [`Silences::mutes`] looks at the silences one of
/// whose equality matchers an alert's labels hold (and those without one), not at all of them.
#[derive(Clone, Debug, Default)]
pub struct Silences {
    by_id: BTreeMap<String, Silence>,
    next_id: u64,
    /// name → value → the silences anchored on the matcher `name="value"` (each silence on its
    /// first equality matcher with a non-empty value).
    anchored: HashMap<String, HashMap<String, BTreeSet<String>>>,
    /// The silences without such a matcher: looked at for every alert.
    unanchored: BTreeSet<String>,
    /// While recording ([`Silences::begin`]): each change as (id, version before), oldest
    /// first, and the id counter before.
    journal: Option<(Journal, u64)>,
}

/// Changes as (id, the silence before: none if it was created).
type Journal = Vec<(String, Option<Silence>)>;

/// The matcher a silence is indexed by.
fn anchor(s: &Silence) -> Option<(&str, &str)> {
    s.matchers
        .iter()
        .find(|m| m.is_equal && !m.is_regex && !m.value.is_empty())
        .map(|m| (m.name.as_str(), m.value.as_str()))
}

impl Silences {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `s` (replacing the silence of its id), indexed and journaled.
    fn insert(&mut self, s: Silence) {
        // `remove` journals the old version, if any; an insert over nothing is undone by
        // removing it.
        if self.remove(&s.id).is_none() {
            if let Some((journal, _)) = &mut self.journal {
                journal.push((s.id.clone(), None));
            }
        }
        match anchor(&s) {
            Some((n, v)) => {
                self.anchored
                    .entry(n.to_string())
                    .or_default()
                    .entry(v.to_string())
                    .or_default()
                    .insert(s.id.clone());
            }
            None => {
                self.unanchored.insert(s.id.clone());
            }
        }
        self.by_id.insert(s.id.clone(), s);
    }

    /// Takes a silence out, index and all, journaled.
    fn remove(&mut self, id: &str) -> Option<Silence> {
        let s = self.by_id.remove(id)?;
        match anchor(&s) {
            Some((n, v)) => {
                if let Some(values) = self.anchored.get_mut(n) {
                    if let Some(ids) = values.get_mut(v) {
                        ids.remove(id);
                        if ids.is_empty() {
                            values.remove(v);
                        }
                    }
                    if values.is_empty() {
                        self.anchored.remove(n);
                    }
                }
            }
            None => {
                self.unanchored.remove(id);
            }
        }
        if let Some((journal, _)) = &mut self.journal {
            journal.push((id.to_string(), Some(s.clone())));
        }
        Some(s)
    }

    /// Starts recording changes, for [`Silences::commit`] or [`Silences::rollback`].
    pub fn begin(&mut self) {
        self.journal = Some((Vec::new(), self.next_id));
    }

    /// The ids changed since [`Silences::begin`] (created, updated or dropped), each once, in
    /// order.
    pub fn changed(&self) -> Vec<String> {
        let ids: BTreeSet<&String> = self
            .journal
            .iter()
            .flat_map(|(j, _)| j.iter().map(|(id, _)| id))
            .collect();
        ids.into_iter().cloned().collect()
    }

    /// Stops recording, keeping the changes.
    pub fn commit(&mut self) {
        self.journal = None;
    }

    /// Undoes every change since [`Silences::begin`].
    pub fn rollback(&mut self) {
        let Some((journal, next_id)) = self.journal.take() else {
            return;
        };
        for (id, before) in journal.into_iter().rev() {
            self.remove(&id);
            if let Some(s) = before {
                self.insert(s);
            }
        }
        self.next_id = next_id;
    }

    /// Makes the silence `id` here what it is in `other` (present or not): how a copy follows
    /// the changes [`Silences::changed`] named.
    pub fn copy_from(&mut self, other: &Silences, id: &str) {
        self.remove(id);
        if let Some(s) = other.by_id.get(id) {
            self.insert(s.clone());
        }
        self.next_id = self.next_id.max(other.next_id);
    }

    fn validate(s: &Silence) -> Result<Vec<Matcher>, SilenceError> {
        let inv = |m: String| Err(SilenceError::Invalid(m));
        if s.matchers.is_empty() {
            return inv("at least one matcher required".into());
        }
        let mut compiled = Vec::new();
        let mut all_empty = true;
        for (i, m) in s.matchers.iter().enumerate() {
            if !crate::labels::is_valid_label_name(&m.name) {
                return inv(format!("invalid label matcher {i}: invalid label name {:?}", m.name));
            }
            let c = m
                .compile()
                .map_err(|e| SilenceError::Invalid(format!("invalid label matcher {i}: {e}")))?;
            all_empty &= c.matches("");
            compiled.push(c);
        }
        if all_empty {
            return inv("at least one matcher must not match the empty string".into());
        }
        if s.ends_at < s.starts_at {
            return inv("end time must not be before start time".into());
        }
        Ok(compiled)
    }

    /// Creates or updates a silence at `now`; returns its id. Like Alertmanager, a silence that
    /// starts in the past starts now, and changing the matchers or range of an active silence
    /// expires it and creates a new one.
    pub fn set(&mut self, mut s: Silence, now: DateTime<Utc>) -> Result<String, SilenceError> {
        s.compiled = Self::validate(&s)?;
        if s.ends_at < now {
            return Err(SilenceError::Invalid("end time can't be in the past".into()));
        }
        if !s.id.is_empty() {
            let Some(prev) = self.by_id.get(&s.id).cloned() else {
                return Err(SilenceError::NotFound(s.id));
            };
            let same_range_and_matchers = prev.matchers == s.matchers && prev.starts_at == s.starts_at;
            if prev.state(now) == SilenceState::Active && !same_range_and_matchers {
                self.expire(&prev.id, now)?;
                s.id.clear();
            } else if prev.state(now) != SilenceState::Expired {
                s.updated_at = now;
                if s.starts_at < now && prev.state(now) == SilenceState::Pending {
                    s.starts_at = now;
                }
                let id = s.id.clone();
                self.insert(s);
                return Ok(id);
            } else {
                s.id.clear();
            }
        }
        if s.starts_at < now {
            s.starts_at = now;
        }
        s.updated_at = now;
        self.next_id += 1;
        s.id = format!("{:08x}-wf", self.next_id);
        let id = s.id.clone();
        self.insert(s);
        Ok(id)
    }

    /// Expires a silence at `now`: an active one ends now, a pending one never starts. The end
    /// is one millisecond before `now` (Alertmanager's clock has nanoseconds; ours, at
    /// milliseconds, would otherwise keep the silence active for the rest of this millisecond,
    /// since the end is inclusive).
    pub fn expire(&mut self, id: &str, now: DateTime<Utc>) -> Result<(), SilenceError> {
        let mut s = self
            .by_id
            .get(id)
            .cloned()
            .ok_or_else(|| SilenceError::NotFound(id.into()))?;
        let end = now - chrono::Duration::milliseconds(1);
        match s.state(now) {
            SilenceState::Expired => return Err(SilenceError::AlreadyExpired(id.into())),
            SilenceState::Active => {
                s.ends_at = end;
                // Started within this millisecond: keep start <= end.
                s.starts_at = s.starts_at.min(end);
            }
            SilenceState::Pending => {
                s.starts_at = end;
                s.ends_at = end;
            }
        }
        s.updated_at = now;
        self.insert(s);
        Ok(())
    }

    pub fn get(&self, id: &str) -> Option<&Silence> {
        self.by_id.get(id)
    }

    /// All silences, by id.
    pub fn list(&self) -> impl Iterator<Item = &Silence> {
        self.by_id.values()
    }

    /// The ids of the silences active at `now` that match the labels (empty: not silenced).
    pub fn mutes(&self, labels: &Labels, now: DateTime<Utc>) -> Vec<String> {
        let mut candidates: Vec<&String> = self.unanchored.iter().collect();
        if !self.anchored.is_empty() {
            for l in labels.iter() {
                if let Some(ids) = self.anchored.get(&*l.name).and_then(|values| values.get(&*l.value)) {
                    candidates.extend(ids);
                }
            }
        }
        let mut out: Vec<String> = candidates
            .into_iter()
            .filter_map(|id| self.by_id.get(id))
            .filter(|s| s.state(now) == SilenceState::Active && s.matches(labels))
            .map(|s| s.id.clone())
            .collect();
        // In id order, as listed.
        out.sort();
        out
    }

    /// Drops silences expired before `now - retention`.
    pub fn gc(&mut self, now: DateTime<Utc>, retention: chrono::Duration) {
        let old: Vec<String> = self
            .by_id
            .values()
            .filter(|s| s.ends_at + retention <= now)
            .map(|s| s.id.clone())
            .collect();
        for id in old {
            self.remove(&id);
        }
    }

    /// Puts back a silence saved earlier (persisted state), as it was: id, times and all.
    /// Later ids are allocated past the restored ones.
    pub fn restore(&mut self, mut s: Silence) -> Result<(), SilenceError> {
        s.compiled = Self::validate(&s)?;
        if let Some(n) = s.id.strip_suffix("-wf").and_then(|h| u64::from_str_radix(h, 16).ok()) {
            self.next_id = self.next_id.max(n);
        }
        self.insert(s);
        Ok(())
    }

    /// The silences in the order Alertmanager's API lists them: active (soonest end first),
    /// then pending (soonest start first), then expired (latest end first).
    pub fn sorted(&self, now: DateTime<Utc>) -> Vec<&Silence> {
        let mut v: Vec<&Silence> = self.by_id.values().collect();
        let rank = |s: &Silence| match s.state(now) {
            SilenceState::Active => 0,
            SilenceState::Pending => 1,
            SilenceState::Expired => 2,
        };
        v.sort_by(|a, b| {
            rank(a).cmp(&rank(b)).then_with(|| match a.state(now) {
                SilenceState::Active => a.ends_at.cmp(&b.ends_at),
                SilenceState::Pending => a.starts_at.cmp(&b.starts_at),
                SilenceState::Expired => b.ends_at.cmp(&a.ends_at),
            })
        });
        v
    }
}

/// Alertmanager's `GET /api/v2/silences?filter=`: whether a silence's matchers satisfy the
/// filter matchers (`CheckSilenceMatchesFilterLabels`): the silence's matchers are read as a
/// label set (name → value/pattern); an empty filter value on an absent name passes.
pub(crate) fn matches_filter(s: &Silence, filter: &[Matcher]) -> bool {
    let sms: BTreeMap<&str, &str> = s.matchers.iter().map(|m| (m.name.as_str(), m.value.as_str())).collect();
    filter.iter().all(|m| {
        let v = sms.get(m.name.as_str()).copied();
        let negative = matches!(
            m.op,
            crate::labels::MatchOp::NotEqual | crate::labels::MatchOp::NotRegex(_)
        );
        if m.value.is_empty() && (v.is_some() == negative) {
            return true;
        }
        m.matches(v.unwrap_or(""))
    })
}

fn go_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

impl Silence {
    /// The API v2 `gettableSilence` JSON at `now`.
    pub fn to_json(&self, now: DateTime<Utc>) -> serde_json::Value {
        let matchers: Vec<serde_json::Value> = self
            .matchers
            .iter()
            .map(|m| {
                serde_json::json!({
                    "name": m.name,
                    "value": m.value,
                    "isRegex": m.is_regex,
                    "isEqual": m.is_equal,
                })
            })
            .collect();
        serde_json::json!({
            "id": self.id,
            "status": {"state": self.state(now).as_str()},
            "updatedAt": go_time(self.updated_at),
            "matchers": matchers,
            "startsAt": go_time(self.starts_at),
            "endsAt": go_time(self.ends_at),
            "createdBy": self.created_by,
            "comment": self.comment,
        })
    }

    /// Reads an API v2 `postableSilence` (or a saved `gettableSilence`: `updatedAt` is kept
    /// when present). Errors name the field, as Alertmanager's schema validation does.
    pub fn from_json(v: &serde_json::Value) -> Result<Silence, String> {
        let obj = v.as_object().ok_or("silence must be a JSON object")?;
        let string = |k: &str| -> Result<String, String> {
            match obj.get(k) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                None | Some(serde_json::Value::Null) => Err(format!("{k} in body is required")),
                Some(_) => Err(format!("{k} in body must be of type string")),
            }
        };
        let time = |k: &str| -> Result<DateTime<Utc>, String> {
            let s = string(k)?;
            DateTime::parse_from_rfc3339(&s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| format!("{k} in body must be of type date-time: {s:?}: {e}"))
        };
        let id = match obj.get("id") {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(_) => return Err("id in body must be of type string".into()),
        };
        let raw = match obj.get("matchers") {
            Some(serde_json::Value::Array(a)) => a,
            None | Some(serde_json::Value::Null) => return Err("matchers in body is required".into()),
            Some(_) => return Err("matchers in body must be of type array".into()),
        };
        if raw.is_empty() {
            return Err("matchers in body should have at least 1 items".into());
        }
        let mut matchers = Vec::with_capacity(raw.len());
        for (i, m) in raw.iter().enumerate() {
            let m = m
                .as_object()
                .ok_or_else(|| format!("matchers.{i} in body must be of type object"))?;
            let s = |k: &str| -> Result<String, String> {
                m.get(k)
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| format!("matchers.{i}.{k} in body is required"))
            };
            let b = |k: &str, default: Option<bool>| -> Result<bool, String> {
                match (m.get(k), default) {
                    (Some(serde_json::Value::Bool(b)), _) => Ok(*b),
                    (None | Some(serde_json::Value::Null), Some(d)) => Ok(d),
                    (None | Some(serde_json::Value::Null), None) => {
                        Err(format!("matchers.{i}.{k} in body is required"))
                    }
                    _ => Err(format!("matchers.{i}.{k} in body must be of type boolean")),
                }
            };
            matchers.push(SilenceMatcher {
                name: s("name")?,
                value: s("value")?,
                is_regex: b("isRegex", None)?,
                is_equal: b("isEqual", Some(true))?,
            });
        }
        let starts_at = time("startsAt")?;
        let mut s = Silence::new(
            matchers,
            starts_at,
            time("endsAt")?,
            &string("createdBy")?,
            &string("comment")?,
        );
        s.id = id;
        if obj.contains_key("updatedAt") {
            s.updated_at = time("updatedAt")?;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn m(name: &str, value: &str, is_regex: bool, is_equal: bool) -> SilenceMatcher {
        SilenceMatcher {
            name: name.into(),
            value: value.into(),
            is_regex,
            is_equal,
        }
    }

    #[test]
    fn states_and_muting() {
        let now = t("2024-01-01T10:00:00Z");
        let mut s = Silences::new();
        let id = s
            .set(
                Silence::new(
                    vec![m("alertname", "Disk.*", true, true)],
                    t("2024-01-01T11:00:00Z"),
                    t("2024-01-01T12:00:00Z"),
                    "me",
                    "maintenance",
                ),
                now,
            )
            .unwrap();
        let ls = Labels::from_pairs([("alertname", "DiskFull")]);
        assert_eq!(s.get(&id).unwrap().state(now), SilenceState::Pending);
        assert!(s.mutes(&ls, now).is_empty());
        assert_eq!(s.mutes(&ls, t("2024-01-01T11:30:00Z")), vec![id.clone()]);
        assert_eq!(
            s.mutes(&ls, t("2024-01-01T12:00:00Z")),
            vec![id.clone()],
            "end is inclusive"
        );
        assert!(s.mutes(&ls, t("2024-01-01T12:00:01Z")).is_empty());
        assert!(s
            .mutes(&Labels::from_pairs([("alertname", "CPU")]), t("2024-01-01T11:30:00Z"))
            .is_empty());
        // Expiring an active silence ends it now.
        s.expire(&id, t("2024-01-01T11:30:00Z")).unwrap();
        assert!(s.mutes(&ls, t("2024-01-01T11:45:00Z")).is_empty());
        assert_eq!(
            s.expire(&id, t("2024-01-01T11:45:00Z")),
            Err(SilenceError::AlreadyExpired(id))
        );
    }

    /// What `mutes` answers without the index: every silence looked at.
    fn mutes_by_scan(s: &Silences, ls: &Labels, now: DateTime<Utc>) -> Vec<String> {
        s.list()
            .filter(|x| x.state(now) == SilenceState::Active && x.matches(ls))
            .map(|x| x.id.clone())
            .collect()
    }

    #[test]
    fn the_matcher_index_answers_as_a_scan_and_follows_every_change() {
        let now = t("2024-01-01T10:00:00Z");
        let end = t("2024-01-02T10:00:00Z");
        let mut s = Silences::new();
        let mut ids = Vec::new();
        for i in 0..60 {
            let ms = match i % 4 {
                0 => vec![m("alertname", &format!("A{}", i % 7), false, true)],
                1 => vec![
                    m("alertname", "A1", false, true),
                    m("job", &format!("j{}", i % 3), false, true),
                ],
                2 => vec![m("job", "j.*", true, true)],
                _ => vec![m("job", "j1", false, false), m("alertname", "", false, false)],
            };
            ids.push(s.set(Silence::new(ms, now, end, "me", "c"), now).unwrap());
        }
        let label_sets: Vec<Labels> = (0..20)
            .map(|i| Labels::from_pairs([("alertname", format!("A{}", i % 8)), ("job", format!("j{}", i % 4))]))
            .collect();
        let check = |s: &Silences, at: DateTime<Utc>| {
            for ls in &label_sets {
                assert_eq!(s.mutes(ls, at), mutes_by_scan(s, ls, at), "{ls:?}");
            }
        };
        check(&s, now);
        // An update that changes the matchers of an active silence expires it and makes a new one.
        let mut changed = s.get(&ids[0]).unwrap().clone();
        changed.matchers = vec![m("job", "j2", false, true)];
        s.set(changed, now).unwrap();
        s.expire(&ids[1], now).unwrap();
        check(&s, now + chrono::Duration::seconds(1));
        // A journaled change undone leaves the index as it was; one kept names its silences.
        s.begin();
        let new = s
            .set(
                Silence::new(vec![m("alertname", "A3", false, true)], now, end, "me", "c"),
                now,
            )
            .unwrap();
        s.expire(&ids[2], now).unwrap();
        assert_eq!(s.changed(), {
            let mut v = vec![new.clone(), ids[2].clone()];
            v.sort();
            v
        });
        s.rollback();
        assert!(s.get(&new).is_none());
        assert_eq!(s.get(&ids[2]).unwrap().state(now), SilenceState::Active);
        check(&s, now);
        // The id counter is rolled back too: the next silence gets the id the undone one had.
        assert_eq!(
            s.set(Silence::new(vec![m("a", "b", false, true)], now, end, "me", "c"), now)
                .unwrap(),
            new
        );
        // A copy that follows the changed ids matches the original.
        let mut copy = s.clone();
        s.begin();
        s.expire(&ids[3], now).unwrap();
        s.gc(end + chrono::Duration::days(10), chrono::Duration::hours(1));
        for id in s.changed() {
            copy.copy_from(&s, &id);
        }
        s.commit();
        assert_eq!(copy.list().count(), s.list().count());
        assert_eq!(s.list().count(), 0);
        check(&copy, now);
    }

    #[test]
    fn validation() {
        let now = t("2024-01-01T10:00:00Z");
        let mut s = Silences::new();
        let err = |s: &mut Silences, ms: Vec<SilenceMatcher>, a: &str, b: &str| {
            s.set(Silence::new(ms, t(a), t(b), "me", "c"), now)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(&mut s, vec![], "2024-01-01T10:00:00Z", "2024-01-01T11:00:00Z"),
            "invalid silence: at least one matcher required"
        );
        assert_eq!(
            err(
                &mut s,
                vec![m("a", ".*", true, true)],
                "2024-01-01T10:00:00Z",
                "2024-01-01T11:00:00Z"
            ),
            "invalid silence: at least one matcher must not match the empty string"
        );
        assert_eq!(
            err(
                &mut s,
                vec![m("a", "b", false, true)],
                "2024-01-01T11:00:00Z",
                "2024-01-01T10:30:00Z"
            ),
            "invalid silence: end time must not be before start time"
        );
        assert!(err(
            &mut s,
            vec![m("a", "(", true, true)],
            "2024-01-01T10:00:00Z",
            "2024-01-01T11:00:00Z"
        )
        .contains("invalid label matcher 0"));
    }

    #[test]
    fn json_round_trip_restore_and_filter() {
        let now = t("2024-01-01T10:00:00Z");
        let mut s = Silences::new();
        let id = s
            .set(
                Silence::new(
                    vec![m("alertname", "Disk", false, true), m("node", "n.*", true, false)],
                    now,
                    t("2024-01-01T12:00:00Z"),
                    "me",
                    "c",
                ),
                now,
            )
            .unwrap();
        let j = s.get(&id).unwrap().to_json(now);
        assert_eq!(j["status"]["state"], "active");
        assert_eq!(j["matchers"][1]["isEqual"], false);
        assert_eq!(j["startsAt"], "2024-01-01T10:00:00Z");
        let back = Silence::from_json(&j).unwrap();
        assert_eq!(back.id, id);
        assert_eq!(back.matchers, s.get(&id).unwrap().matchers);
        // Restored into a fresh set, new ids do not collide with it.
        let mut r = Silences::new();
        r.restore(back).unwrap();
        let id2 = r
            .set(Silence::new(vec![m("a", "b", false, true)], now, now, "me", "c"), now)
            .unwrap();
        assert_ne!(id2, id);
        // Filters: equality on a matcher's value; an empty value on an absent name passes.
        let f = |txt: &str| crate::notify::matchers::parse_matcher(txt).unwrap();
        let sil = r.get(&id).unwrap();
        assert!(matches_filter(sil, &[f("alertname=Disk")]));
        assert!(!matches_filter(sil, &[f("alertname=CPU")]));
        assert!(matches_filter(sil, &[f("team=\"\"")]));
        assert!(
            matches_filter(sil, &[f("node=~n.*")]),
            "compares the pattern as a value"
        );
        // Missing required fields are named.
        let err = Silence::from_json(&serde_json::json!({"matchers": []})).unwrap_err();
        assert_eq!(err, "matchers in body should have at least 1 items");
        let err = Silence::from_json(&serde_json::json!({
            "matchers": [{"name": "a", "value": "b", "isRegex": false}],
            "startsAt": "2024-01-01T10:00:00Z", "endsAt": "2024-01-01T11:00:00Z", "comment": "c"
        }))
        .unwrap_err();
        assert_eq!(err, "createdBy in body is required");
    }
}
