//! The notification history's events: for an alert in a group, what its receiver (or one of
//! the receiver's integrations) was sent, or why not. The pipeline records them as it decides
//! (grouped, queued, deduplicated, inhibited, silenced, muted); the drivers that deliver add
//! the outcome of each attempt (sent, failed and retried, dead-lettered) and keep them.
//!
//! An outcome that repeats unchanged at every flush (an alert deduplicated or silenced for
//! hours) is recorded once, when it starts.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::alert::{Alert, Fingerprint};

/// What happened to an alert's notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It joined a group and waits for the group's flush.
    Grouped,
    /// Handed to the outbox for an integration.
    Queued,
    /// Not sent: the integration was already told and nothing changed.
    Deduplicated,
    /// Not sent: `send_resolved: false`.
    NotSentResolved,
    /// Not sent: inhibited by another alert.
    Inhibited,
    /// Not sent: silenced.
    Silenced,
    /// Not sent: a time interval or maintenance window of the route.
    Muted,
    /// Delivered to the integration.
    Sent,
    /// The integration refused it; retried later.
    Failed,
    /// Given up on: kept as a dead letter.
    DeadLettered,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Grouped => "grouped",
            Outcome::Queued => "queued",
            Outcome::Deduplicated => "deduplicated",
            Outcome::NotSentResolved => "not-sent-resolved",
            Outcome::Inhibited => "inhibited",
            Outcome::Silenced => "silenced",
            Outcome::Muted => "muted",
            Outcome::Sent => "sent",
            Outcome::Failed => "failed",
            Outcome::DeadLettered => "dead-lettered",
        }
    }
}

/// One event of the history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEvent {
    pub at: DateTime<Utc>,
    pub fingerprint: Fingerprint,
    pub alertname: String,
    /// `firing` or `resolved`: the alert's state in this event.
    pub status: &'static str,
    pub group_key: String,
    pub receiver: String,
    /// `webhook[0]`: the integration, empty for what applies to the whole receiver.
    pub integration: String,
    pub outcome: Outcome,
    /// Why, in words: the inhibiting alert, the silence ids, the interval, the error.
    pub detail: String,
}

impl HistoryEvent {
    pub(crate) fn of(
        a: &Alert,
        at: DateTime<Utc>,
        group_key: &str,
        receiver: &str,
        integration: String,
        outcome: Outcome,
        detail: String,
    ) -> Self {
        HistoryEvent {
            at,
            fingerprint: a.fingerprint(),
            alertname: a.name().to_string(),
            status: if a.resolved_at(at) { "resolved" } else { "firing" },
            group_key: group_key.to_string(),
            receiver: receiver.to_string(),
            integration,
            outcome,
            detail,
        }
    }
}

/// A decision's subject: the alert, group key, receiver and integration.
type LastKey = (Fingerprint, String, String, String);

/// The events recorded and not yet taken, with what was last recorded per alert, group and
/// integration (to drop unchanged repeats).
#[derive(Debug, Default)]
pub struct HistoryJournal {
    events: Vec<HistoryEvent>,
    last: HashMap<LastKey, (Outcome, &'static str, String)>,
}

/// Past this many remembered outcomes the memory of repeats starts over (a repeat is then
/// recorded once more), so that alerts come and go without it growing.
const LAST_CAP: usize = 200_000;

impl HistoryJournal {
    /// Records `e` unless it repeats the last outcome of its alert, group and integration.
    pub(crate) fn record(&mut self, e: HistoryEvent) {
        let key = (
            e.fingerprint,
            e.group_key.clone(),
            e.receiver.clone(),
            e.integration.clone(),
        );
        let val = (e.outcome, e.status, e.detail.clone());
        // Sends and failures are each their own fact; decisions are recorded when they change.
        let repeatable = matches!(
            e.outcome,
            Outcome::Sent | Outcome::Failed | Outcome::DeadLettered | Outcome::Queued
        );
        if !repeatable && self.last.get(&key) == Some(&val) {
            return;
        }
        if self.last.len() >= LAST_CAP {
            self.last.clear();
        }
        self.last.insert(key, val);
        self.events.push(e);
    }

    /// Forgets the last outcomes of alerts no longer held (`held` says which are): the store
    /// collected them, so they will not repeat. Outcomes recorded after an alert left the store
    /// (its group flushed it later) go at the next collection.
    pub(crate) fn keep_only(&mut self, held: impl Fn(Fingerprint) -> bool) {
        let before = self.last.len();
        self.last.retain(|k, _| held(k.0));
        if self.last.len() < before / 2 {
            self.last.shrink_to_fit();
        }
    }

    /// How many last outcomes are remembered.
    #[cfg(test)]
    pub(crate) fn remembered(&self) -> usize {
        self.last.len()
    }

    /// The events recorded since the last call.
    pub fn take(&mut self) -> Vec<HistoryEvent> {
        std::mem::take(&mut self.events)
    }
}

/// A delivery error as the history keeps it: every URL replaced by `<url>`, since receiver URLs
/// carry tokens and routing keys.
pub(crate) fn without_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let at = ["http://", "https://"]
            .iter()
            .filter_map(|p| rest.to_ascii_lowercase().find(p))
            .min();
        let Some(i) = at else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i]);
        out.push_str("<url>");
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '>' | ')'))
            .unwrap_or(tail.len());
        rest = &tail[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;

    #[test]
    fn unchanged_decisions_are_recorded_once() {
        let t0: DateTime<Utc> = "2024-01-01T00:00:00Z".parse().unwrap();
        let a = Alert {
            labels: Labels::from_pairs([("alertname", "A")]),
            annotations: Default::default(),
            starts_at: t0,
            ends_at: None,
            generator_url: String::new(),
            updated_at: t0,
            timeout: false,
        };
        let mut j = HistoryJournal::default();
        let ev = |o: Outcome, s: i64| {
            HistoryEvent::of(
                &a,
                t0 + chrono::Duration::seconds(s),
                "g",
                "r",
                String::new(),
                o,
                "x".into(),
            )
        };
        j.record(ev(Outcome::Silenced, 1));
        j.record(ev(Outcome::Silenced, 2));
        j.record(ev(Outcome::Queued, 3));
        j.record(ev(Outcome::Queued, 4));
        j.record(ev(Outcome::Silenced, 5));
        let got: Vec<(Outcome, i64)> = j
            .take()
            .iter()
            .map(|e| (e.outcome, (e.at - t0).num_seconds()))
            .collect();
        assert_eq!(
            got,
            [
                (Outcome::Silenced, 1),
                (Outcome::Queued, 3),
                (Outcome::Queued, 4),
                (Outcome::Silenced, 5)
            ]
        );
        assert!(j.take().is_empty());
        // Once the store collected the alert, its outcomes are forgotten (memory), so the same
        // decision for a new alert with its labels is recorded again.
        j.keep_only(|fp| fp != a.fingerprint());
        assert!(j.last.is_empty());
        j.record(ev(Outcome::Silenced, 6));
        assert_eq!(j.take().len(), 1);
    }

    #[test]
    fn errors_are_kept_without_their_urls() {
        assert_eq!(
            without_urls("Post \"https://events.pagerduty.com/v2/enqueue?key=s3cret\": 503; HTTP://x/y?t=1 failed"),
            "Post \"<url>\": 503; <url> failed"
        );
        assert_eq!(without_urls("no url"), "no url");
    }
}
