//! Silences (`silence/silence.go`): matchers, a time range, author and comment; pending before
//! `startsAt`, active until `endsAt` (inclusive), expired after. An active silence whose
//! matchers all match an alert mutes it.

use std::collections::BTreeMap;

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

/// The silences, by id.
#[derive(Clone, Debug, Default)]
pub struct Silences {
    by_id: BTreeMap<String, Silence>,
    next_id: u64,
}

impl Silences {
    pub fn new() -> Self {
        Self::default()
    }

    fn validate(s: &Silence) -> Result<Vec<Matcher>, SilenceError> {
        let inv = |m: String| Err(SilenceError::Invalid(m));
        if s.matchers.is_empty() {
            return inv("at least one matcher required".into());
        }
        let mut compiled = Vec::new();
        let mut all_empty = true;
        for (i, m) in s.matchers.iter().enumerate() {
            if !super::matchers::is_valid_label_name(&m.name) {
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
                self.by_id.insert(s.id.clone(), s.clone());
                return Ok(s.id);
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
        self.by_id.insert(id.clone(), s);
        Ok(id)
    }

    /// Expires a silence at `now`: an active one ends now, a pending one never starts.
    pub fn expire(&mut self, id: &str, now: DateTime<Utc>) -> Result<(), SilenceError> {
        let s = self
            .by_id
            .get_mut(id)
            .ok_or_else(|| SilenceError::NotFound(id.into()))?;
        match s.state(now) {
            SilenceState::Expired => return Err(SilenceError::AlreadyExpired(id.into())),
            SilenceState::Active => s.ends_at = now,
            SilenceState::Pending => {
                s.starts_at = now;
                s.ends_at = now;
            }
        }
        s.updated_at = now;
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
        self.by_id
            .values()
            .filter(|s| s.state(now) == SilenceState::Active && s.matches(labels))
            .map(|s| s.id.clone())
            .collect()
    }

    /// Drops silences expired before `now - retention`.
    pub fn gc(&mut self, now: DateTime<Utc>, retention: chrono::Duration) {
        self.by_id.retain(|_, s| s.ends_at + retention > now);
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
}
