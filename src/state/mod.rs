//! Persistent state in SQLite (rusqlite, bundled): the active alerts of every alerting rule,
//! written in one transaction after each group evaluation and restored at startup, and the
//! notification outbox (a notification is stored before it is sent, deleted once delivered,
//! and retried with backoff, also after a restart). A notification that gets a final error, or
//! still fails after [`OUTBOX_MAX_ATTEMPTS`], moves to the `dead_letters` table: kept for
//! inspection and redelivery by hand, and alerted on, never silently dropped.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Value as Json};

use crate::labels::Labels;
use crate::notify::nflog::{Reason, ReceiverKey};
use crate::notify::notifier::{Notification, Target};
use crate::rules::{Alert, AlertState};

/// State store errors.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("state database: cannot create {path}: {message}")]
    Dir { path: String, message: String },
    #[error("state database: corrupt row: {0}")]
    Corrupt(String),
}

/// The alerts of one rule, as saved: the rule is identified by its index and name in the group.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleAlerts {
    pub rule_index: usize,
    pub rule_name: String,
    pub alerts: Vec<Alert>,
}

/// A notification waiting in the outbox.
#[derive(Clone, Debug)]
pub struct OutboxEntry {
    pub id: i64,
    pub notification: Notification,
    pub attempts: u32,
    /// Not before this time (ms).
    pub next_attempt_at: i64,
    pub last_error: Option<String>,
    /// When it entered the outbox (ms).
    pub created_at: i64,
}

/// A notification that could not be delivered.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadLetter {
    /// Its outbox id.
    pub id: i64,
    /// When it entered the outbox and when it was given up on (ms).
    pub created_at: i64,
    pub failed_at: i64,
    pub receiver: String,
    pub group_key: String,
    /// The notification as the outbox stored it (JSON).
    pub payload: String,
    pub attempts: u32,
    pub last_error: String,
}

/// Delivery attempts of one notification before it is dead-lettered: with the outbox backoff
/// (1s doubling to 5 minutes) about an hour of a receiver failing.
pub const OUTBOX_MAX_ATTEMPTS: u32 = 20;
/// Dead letters this recent keep `WatchfireNotificationsDeadLettered` firing.
pub const DEAD_LETTER_ALERT_MS: i64 = 24 * 3_600_000;
/// Dead letters are kept this long.
pub const DEAD_LETTER_RETENTION_MS: i64 = 30 * 24 * 3_600_000;

/// The SQLite store.
pub struct StateStore {
    conn: Connection,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS alerts (
    group_key TEXT NOT NULL,
    rule_index INTEGER NOT NULL,
    rule_name TEXT NOT NULL,
    labels TEXT NOT NULL,
    state TEXT NOT NULL,
    value REAL,
    annotations TEXT NOT NULL,
    active_at INTEGER NOT NULL,
    fired_at INTEGER,
    resolved_at INTEGER,
    last_sent_at INTEGER,
    valid_until INTEGER,
    keep_firing_since INTEGER,
    PRIMARY KEY (group_key, rule_index, labels)
);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at INTEGER NOT NULL,
    payload TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error TEXT
);
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY,
    created_at INTEGER NOT NULL,
    failed_at INTEGER NOT NULL,
    receiver TEXT NOT NULL,
    group_key TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_failed_at ON dead_letters (failed_at);
CREATE TABLE IF NOT EXISTS nflog (
    group_key TEXT NOT NULL,
    receiver TEXT NOT NULL,
    integration TEXT NOT NULL,
    idx INTEGER NOT NULL,
    firing TEXT NOT NULL,
    resolved TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (group_key, receiver, integration, idx)
);
CREATE TABLE IF NOT EXISTS silences (
    id TEXT PRIMARY KEY,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS output_series (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    labels TEXT NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS output_series_name ON output_series (name);
CREATE TABLE IF NOT EXISTS output_blocks (
    series INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    samples BLOB NOT NULL,
    PRIMARY KEY (series, kind, start)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS notification_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    alertname TEXT NOT NULL,
    status TEXT NOT NULL,
    group_key TEXT NOT NULL,
    receiver TEXT NOT NULL,
    integration TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS notification_history_at ON notification_history (at);
CREATE INDEX IF NOT EXISTS notification_history_alert ON notification_history (alertname, at);
CREATE INDEX IF NOT EXISTS notification_history_fp ON notification_history (fingerprint, at);
";

/// A block of samples of one rule output series kept across restarts (see
/// [`StateStore::save_output_blocks`]); the caller encodes the samples.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputBlock {
    pub labels: Labels,
    /// The caller's encoding of the samples (floats, native histograms).
    pub kind: u8,
    /// The first and last sample's time (ms).
    pub start: i64,
    pub end: i64,
    pub samples: Vec<u8>,
}

/// A saved notification-log entry (what was last notified for a group and integration).
#[derive(Clone, Debug, PartialEq)]
pub struct NflogRow {
    pub group_key: String,
    pub key: ReceiverKey,
    pub firing: std::collections::BTreeSet<u64>,
    pub resolved: std::collections::BTreeSet<u64>,
    pub at: DateTime<Utc>,
}

/// One event of the notification history, as stored.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HistoryRow {
    pub id: i64,
    /// When (ms).
    pub at: i64,
    pub fingerprint: String,
    pub alertname: String,
    pub status: String,
    pub group_key: String,
    pub receiver: String,
    pub integration: String,
    pub outcome: String,
    pub detail: String,
}

/// Which history events to list: all given conditions hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistoryFilter {
    /// An alert's name or fingerprint (16 hex digits).
    pub alert: Option<String>,
    pub receiver: Option<String>,
    /// From, until (ms, inclusive).
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// At most this many, newest first.
    pub limit: usize,
}

/// The notification history is kept this long ...
pub const HISTORY_RETENTION_MS: i64 = 7 * 24 * 3_600_000;
/// ... and to at most this many events (the oldest go first).
pub const HISTORY_MAX_ROWS: i64 = 200_000;

/// Pages written to the WAL before SQLite copies them into the database (its default: 1,000).
const WAL_CHECKPOINT_PAGES: u32 = 256;
/// The size the WAL file is cut back to after a checkpoint.
const WAL_LIMIT_BYTES: u64 = 1 << 20;

impl StateStore {
    /// Opens (creating) `watchfire.db` in `dir`.
    pub fn open_dir(dir: &Path) -> Result<Self, StateError> {
        std::fs::create_dir_all(dir).map_err(|e| StateError::Dir {
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
        Self::open(&dir.join("watchfire.db"))
    }

    pub fn open(path: &Path) -> Result<Self, StateError> {
        let conn = Connection::open(path)?;
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;")?;
        // SQLite checkpoints the WAL every 1,000 pages (4 MiB) and never shrinks the file: the
        // state directory held a 4.4 MiB WAL beside a 3.5 MiB database. Checkpointed at a
        // quarter of that and cut back after each, the WAL stays near 1 MiB.
        conn.execute_batch(&format!(
            "PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}; PRAGMA journal_size_limit={WAL_LIMIT_BYTES};"
        ))?;
        conn.execute_batch(SCHEMA)?;
        Ok(StateStore { conn })
    }

    /// An in-memory store (tests, `--no-state`).
    pub fn in_memory() -> Result<Self, StateError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA)?;
        Ok(StateStore { conn })
    }

    /// Starts a transaction that many small writes then share (a flush of many groups, a
    /// round of deliveries): one commit instead of one per row. Writes inside it use
    /// savepoints, never transactions of their own.
    pub fn begin(&mut self) -> Result<(), StateError> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(())
    }

    /// Commits what [`StateStore::begin`] started; on failure the transaction is rolled
    /// back, so the caller knows none of its writes are stored.
    pub fn commit(&mut self) -> Result<(), StateError> {
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            if !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Makes every later write fail as on a read-only file system (or lets them through again):
    /// for the tests of what the service does when its state directory refuses writes.
    #[cfg(test)]
    pub(crate) fn refuse_writes(&self, refuse: bool) {
        self.conn
            .execute_batch(&format!("PRAGMA query_only = {}", u8::from(refuse)))
            .unwrap();
    }

    /// Abandons what [`StateStore::begin`] started, if anything is still open.
    pub fn rollback(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// Replaces the saved alerts of a group in one transaction.
    pub fn save_group(&mut self, group_key: &str, rules: &[RuleAlerts]) -> Result<(), StateError> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM alerts WHERE group_key = ?1", params![group_key])?;
        {
            let mut stmt = tx.prepare(
                "INSERT OR REPLACE INTO alerts (group_key, rule_index, rule_name, labels, state, value, annotations,
                 active_at, fired_at, resolved_at, last_sent_at, valid_until, keep_firing_since)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?;
            for r in rules {
                for a in &r.alerts {
                    let value = if a.value.is_finite() { Some(a.value) } else { None };
                    stmt.execute(params![
                        group_key,
                        r.rule_index as i64,
                        r.rule_name,
                        labels_json(&a.labels).to_string(),
                        a.state.as_str(),
                        value,
                        serde_json::to_string(&a.annotations).unwrap_or_else(|_| "{}".into()),
                        a.active_at,
                        a.fired_at,
                        a.resolved_at,
                        a.last_sent_at,
                        a.valid_until,
                        a.keep_firing_since,
                    ])?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The saved alerts of a group, by rule.
    pub fn load_group(&self, group_key: &str) -> Result<Vec<RuleAlerts>, StateError> {
        let mut stmt = self.conn.prepare(
            "SELECT rule_index, rule_name, labels, state, value, annotations, active_at, fired_at, resolved_at,
             last_sent_at, valid_until, keep_firing_since FROM alerts WHERE group_key = ?1 ORDER BY rule_index",
        )?;
        let rows = stmt.query_map(params![group_key], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<f64>>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, Option<i64>>(7)?,
                r.get::<_, Option<i64>>(8)?,
                r.get::<_, Option<i64>>(9)?,
                r.get::<_, Option<i64>>(10)?,
                r.get::<_, Option<i64>>(11)?,
            ))
        })?;
        let mut by_rule: BTreeMap<(usize, String), Vec<Alert>> = BTreeMap::new();
        for row in rows {
            let (
                idx,
                name,
                labels,
                state,
                value,
                ann,
                active_at,
                fired_at,
                resolved_at,
                last_sent_at,
                valid_until,
                kfs,
            ) = row?;
            let labels = labels_from_json(&labels)?;
            let state = match state.as_str() {
                "pending" => AlertState::Pending,
                "firing" => AlertState::Firing,
                "inactive" => AlertState::Inactive,
                other => return Err(StateError::Corrupt(format!("alert state {other:?}"))),
            };
            let annotations: BTreeMap<String, String> =
                serde_json::from_str(&ann).map_err(|e| StateError::Corrupt(format!("annotations: {e}")))?;
            by_rule.entry((idx.max(0) as usize, name)).or_default().push(Alert {
                state,
                labels,
                annotations,
                value: value.unwrap_or(f64::NAN),
                active_at,
                fired_at,
                resolved_at,
                last_sent_at,
                valid_until,
                keep_firing_since: kfs,
            });
        }
        Ok(by_rule
            .into_iter()
            .map(|((rule_index, rule_name), alerts)| RuleAlerts {
                rule_index,
                rule_name,
                alerts,
            })
            .collect())
    }

    /// Stores a notification before it is sent; returns its id.
    pub fn outbox_push(&mut self, n: &Notification, now_ms: i64) -> Result<i64, StateError> {
        // Cached statements: a flush of many groups pushes and logs one row each.
        self.conn
            .prepare_cached(
                "INSERT INTO outbox (created_at, payload, attempts, next_attempt_at) VALUES (?1, ?2, 0, ?1)",
            )?
            .execute(params![now_ms, notification_json(n).to_string()])?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Entries due at `now_ms`, oldest first.
    pub fn outbox_due(&self, now_ms: i64, limit: usize) -> Result<Vec<OutboxEntry>, StateError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, payload, attempts, next_attempt_at, last_error, created_at FROM outbox
             WHERE next_attempt_at <= ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![now_ms, limit as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, payload, attempts, next, last_error, created_at) = row?;
            let v: Json = serde_json::from_str(&payload).map_err(|e| StateError::Corrupt(format!("outbox: {e}")))?;
            out.push(OutboxEntry {
                id,
                notification: notification_from_json(&v)?,
                attempts: attempts.clamp(0, i64::from(u32::MAX)) as u32,
                next_attempt_at: next,
                last_error,
                created_at,
            });
        }
        Ok(out)
    }

    /// Delivered: removes the entry.
    pub fn outbox_done(&mut self, id: i64) -> Result<(), StateError> {
        self.conn
            .prepare_cached("DELETE FROM outbox WHERE id = ?1")?
            .execute(params![id])?;
        Ok(())
    }

    /// Failed: counts the attempt and schedules the next one.
    pub fn outbox_retry(&mut self, id: i64, next_attempt_at: i64, error: &str) -> Result<(), StateError> {
        self.conn.execute(
            "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?2, last_error = ?3 WHERE id = ?1",
            params![id, next_attempt_at, error],
        )?;
        Ok(())
    }

    /// Keeps blocks of rule output samples (the history later evaluations read over their
    /// windows, see `run::scheduler::history`), in one transaction. A block is known by its
    /// series, kind and start: saving it again replaces it (a block grows as samples come).
    pub fn save_output_blocks(&mut self, blocks: &[OutputBlock]) -> Result<(), StateError> {
        if blocks.is_empty() {
            return Ok(());
        }
        let tx = self.conn.savepoint()?;
        {
            let mut series = tx.prepare_cached("INSERT OR IGNORE INTO output_series (name, labels) VALUES (?1, ?2)")?;
            let mut id = tx.prepare_cached("SELECT id FROM output_series WHERE labels = ?1")?;
            let mut put = tx.prepare_cached(
                "INSERT OR REPLACE INTO output_blocks (series, kind, start, end, samples) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for b in blocks {
                let labels = labels_json(&b.labels).to_string();
                series.execute(params![b.labels.get("__name__").unwrap_or(""), labels])?;
                let sid: i64 = id.query_row(params![labels], |x| x.get(0))?;
                put.execute(params![sid, b.kind, b.start, b.end, b.samples])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The kept blocks of output `name` that end at or after `since` (ms), by series, kind and
    /// start.
    pub fn load_output_blocks(&self, name: &str, since: i64) -> Result<Vec<OutputBlock>, StateError> {
        let mut stmt = self.conn.prepare(
            "SELECT s.labels, b.kind, b.start, b.end, b.samples FROM output_blocks b JOIN output_series s ON s.id = b.series
             WHERE s.name = ?1 AND b.end >= ?2 ORDER BY b.series, b.kind, b.start",
        )?;
        let rows = stmt.query_map(params![name, since], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, u8>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Vec<u8>>(4)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (labels, kind, start, end, samples) = row?;
            out.push(OutputBlock {
                labels: labels_from_json(&labels)?,
                kind,
                start,
                end,
                samples,
            });
        }
        Ok(out)
    }

    /// Drops the kept outputs no longer needed: of each name in `keep`, the blocks that end
    /// before its time (ms); of every other name, all. Returns the blocks dropped.
    pub fn prune_outputs(&mut self, keep: &[(String, i64)]) -> Result<usize, StateError> {
        let tx = self.conn.savepoint()?;
        let mut dropped = 0;
        {
            let names: Vec<String> = {
                let mut stmt = tx.prepare("SELECT DISTINCT name FROM output_series")?;
                let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
                names.collect::<Result<_, _>>()?
            };
            for name in names {
                let before = keep.iter().find(|(n, _)| *n == name).map_or(i64::MAX, |(_, t)| *t);
                dropped += tx.execute(
                    "DELETE FROM output_blocks WHERE end < ?2 AND series IN (SELECT id FROM output_series WHERE name = ?1)",
                    params![name, before],
                )?;
                // Series with no block left go too (a pod, a node gone).
                tx.execute(
                    "DELETE FROM output_series WHERE name = ?1
                     AND NOT EXISTS (SELECT 1 FROM output_blocks b WHERE b.series = output_series.id)",
                    params![name],
                )?;
            }
        }
        tx.commit()?;
        Ok(dropped)
    }

    /// The wall clock stepped by `d` ms at `from`: the retries waiting past `from` move with
    /// it, so a step keeps their backoff instead of adding to it (back) or cutting it (forward).
    /// Returns how many moved.
    pub fn outbox_clock_stepped(&mut self, from: i64, d: i64) -> Result<usize, StateError> {
        Ok(self.conn.execute(
            "UPDATE outbox SET next_attempt_at = next_attempt_at + ?2 WHERE next_attempt_at > ?1",
            params![from, d],
        )?)
    }

    /// Gives up on an outbox entry: moves it, with this last attempt counted, to the dead
    /// letters in one transaction. Returns whether the entry was there.
    pub fn outbox_dead_letter(&mut self, id: i64, failed_at: i64, error: &str) -> Result<bool, StateError> {
        // A savepoint: this may run inside a caller's transaction (see `begin`).
        let tx = self.conn.savepoint()?;
        let row: Option<(i64, String, i64)> = tx
            .query_row(
                "SELECT created_at, payload, attempts FROM outbox WHERE id = ?1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let Some((created_at, payload, attempts)) = row else {
            return Ok(false);
        };
        // Receiver and group key as columns, for queries without parsing the payload; a payload
        // that does not parse is still kept.
        let v: Json = serde_json::from_str(&payload).unwrap_or(Json::Null);
        let field = |k: &str| v.get(k).and_then(Json::as_str).unwrap_or("").to_string();
        tx.execute(
            "INSERT OR REPLACE INTO dead_letters (id, created_at, failed_at, receiver, group_key, payload, attempts, last_error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                id,
                created_at,
                failed_at,
                field("receiver"),
                field("group_key"),
                payload,
                attempts + 1,
                error
            ],
        )?;
        tx.execute("DELETE FROM outbox WHERE id = ?1", params![id])?;
        tx.commit()?;
        Ok(true)
    }

    /// Dead letters that failed at or after `since_ms`, newest first.
    pub fn dead_letters_since(&self, since_ms: i64) -> Result<Vec<DeadLetter>, StateError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, created_at, failed_at, receiver, group_key, payload, attempts, last_error FROM dead_letters
             WHERE failed_at >= ?1 ORDER BY failed_at DESC, id DESC",
        )?;
        let rows = stmt.query_map(params![since_ms], |r| {
            Ok(DeadLetter {
                id: r.get(0)?,
                created_at: r.get(1)?,
                failed_at: r.get(2)?,
                receiver: r.get(3)?,
                group_key: r.get(4)?,
                payload: r.get(5)?,
                attempts: r.get::<_, i64>(6)?.clamp(0, i64::from(u32::MAX)) as u32,
                last_error: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// How many dead letters are kept.
    pub fn dead_letter_count(&self) -> Result<u64, StateError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM dead_letters", [], |r| r.get(0))?;
        Ok(n.max(0) as u64)
    }

    /// Drops dead letters that failed before `before_ms`; returns how many.
    pub fn dead_letters_prune(&mut self, before_ms: i64) -> Result<usize, StateError> {
        Ok(self
            .conn
            .execute("DELETE FROM dead_letters WHERE failed_at < ?1", params![before_ms])?)
    }

    /// The notification a dead letter holds.
    pub fn dead_letter_notification(d: &DeadLetter) -> Result<Notification, StateError> {
        let v: Json = serde_json::from_str(&d.payload).map_err(|e| StateError::Corrupt(format!("dead letter: {e}")))?;
        notification_from_json(&v)
    }

    /// Records what a notification told its receiver, so a restarted process does not notify
    /// the same alerts again (the in-memory notification log is rebuilt from this).
    pub fn nflog_put(&mut self, n: &Notification) -> Result<(), StateError> {
        let firing: Vec<u64> = n
            .alerts
            .iter()
            .filter(|a| !a.resolved_at(n.at))
            .map(|a| a.fingerprint().0)
            .collect();
        let resolved: Vec<u64> = n
            .alerts
            .iter()
            .filter(|a| a.resolved_at(n.at))
            .map(|a| a.fingerprint().0)
            .collect();
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO nflog (group_key, receiver, integration, idx, firing, resolved, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                n.group_key,
                n.target.key.group_name,
                n.target.key.integration,
                n.target.key.idx as i64,
                json!(firing.iter().map(|f| f.to_string()).collect::<Vec<_>>()).to_string(),
                json!(resolved.iter().map(|f| f.to_string()).collect::<Vec<_>>()).to_string(),
                time_ms(n.at),
            ])?;
        Ok(())
    }

    /// Records a notification-log entry as the notifier holds it (what the integration was told
    /// fires, and resolved).
    pub fn nflog_put_entry(
        &mut self,
        group_key: &str,
        key: &ReceiverKey,
        firing: &std::collections::BTreeSet<u64>,
        resolved: &std::collections::BTreeSet<u64>,
        at: DateTime<Utc>,
    ) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO nflog (group_key, receiver, integration, idx, firing, resolved, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                group_key,
                key.group_name,
                key.integration,
                key.idx as i64,
                json!(firing.iter().map(|f| f.to_string()).collect::<Vec<_>>()).to_string(),
                json!(resolved.iter().map(|f| f.to_string()).collect::<Vec<_>>()).to_string(),
                time_ms(at),
            ])?;
        Ok(())
    }

    /// Appends events to the notification history.
    pub fn history_put(&mut self, events: &[crate::notify::HistoryEvent]) -> Result<(), StateError> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO notification_history (at, fingerprint, alertname, status, group_key, receiver, integration, outcome, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        for e in events {
            stmt.execute(params![
                time_ms(e.at),
                e.fingerprint.to_string(),
                e.alertname,
                e.status,
                e.group_key,
                e.receiver,
                e.integration,
                e.outcome.as_str(),
                e.detail,
            ])?;
        }
        Ok(())
    }

    /// The history events `f` selects, newest first.
    pub fn history(&self, f: &HistoryFilter) -> Result<Vec<HistoryRow>, StateError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, at, fingerprint, alertname, status, group_key, receiver, integration, outcome, detail
             FROM notification_history
             WHERE (?1 IS NULL OR alertname = ?1 OR fingerprint = ?1)
               AND (?2 IS NULL OR receiver = ?2)
               AND (?3 IS NULL OR at >= ?3)
               AND (?4 IS NULL OR at <= ?4)
             ORDER BY at DESC, id DESC LIMIT ?5",
        )?;
        let rows = stmt.query_map(
            params![
                f.alert,
                f.receiver,
                f.since,
                f.until,
                f.limit.min(i64::MAX as usize) as i64
            ],
            |r| {
                Ok(HistoryRow {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    fingerprint: r.get(2)?,
                    alertname: r.get(3)?,
                    status: r.get(4)?,
                    group_key: r.get(5)?,
                    receiver: r.get(6)?,
                    integration: r.get(7)?,
                    outcome: r.get(8)?,
                    detail: r.get(9)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Drops history events older than `before_ms`, and the oldest past `max_rows`.
    pub fn history_prune(&mut self, before_ms: i64, max_rows: i64) -> Result<usize, StateError> {
        let old = self
            .conn
            .execute("DELETE FROM notification_history WHERE at < ?1", params![before_ms])?;
        let over = self.conn.execute(
            "DELETE FROM notification_history WHERE id <= (SELECT id FROM notification_history ORDER BY id DESC LIMIT 1 OFFSET ?1)",
            params![max_rows],
        )?;
        Ok(old + over)
    }

    /// Every saved notification-log entry newer than `since_ms`.
    pub fn nflog_all(&self, since_ms: i64) -> Result<Vec<NflogRow>, StateError> {
        let mut stmt = self
            .conn
            .prepare("SELECT group_key, receiver, integration, idx, firing, resolved, at FROM nflog WHERE at >= ?1")?;
        let rows = stmt.query_map(params![since_ms], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, i64>(6)?,
            ))
        })?;
        let set = |s: &str| -> Result<std::collections::BTreeSet<u64>, StateError> {
            let v: Vec<String> = serde_json::from_str(s).map_err(|e| StateError::Corrupt(format!("nflog: {e}")))?;
            v.iter()
                .map(|x| x.parse::<u64>().map_err(|e| StateError::Corrupt(format!("nflog: {e}"))))
                .collect()
        };
        let mut out = Vec::new();
        for row in rows {
            let (group_key, receiver, integration, idx, firing, resolved, at) = row?;
            out.push(NflogRow {
                group_key,
                key: ReceiverKey {
                    group_name: receiver,
                    integration,
                    idx: idx.max(0) as usize,
                },
                firing: set(&firing)?,
                resolved: set(&resolved)?,
                at: ms_time(&json!(at))?,
            });
        }
        Ok(out)
    }

    /// How many notifications wait.
    /// Replaces the saved silences (id, API JSON) in one transaction.
    pub fn save_silences(&mut self, rows: &[(String, String)]) -> Result<(), StateError> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM silences", [])?;
        for (id, payload) in rows {
            tx.execute(
                "INSERT INTO silences (id, payload) VALUES (?1, ?2)",
                params![id, payload],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Saves the silences that changed (id, API JSON) and forgets those dropped, in one
    /// transaction: a new silence is one row, whatever the number of others.
    pub fn save_silence_changes(&mut self, upserts: &[(String, String)], deletes: &[String]) -> Result<(), StateError> {
        let tx = self.conn.transaction()?;
        for (id, payload) in upserts {
            tx.execute(
                "INSERT OR REPLACE INTO silences (id, payload) VALUES (?1, ?2)",
                params![id, payload],
            )?;
        }
        for id in deletes {
            tx.execute("DELETE FROM silences WHERE id = ?1", params![id])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The saved silences' API JSON.
    pub fn load_silences(&self) -> Result<Vec<String>, StateError> {
        let mut stmt = self.conn.prepare("SELECT payload FROM silences ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn outbox_depth(&self) -> Result<u64, StateError> {
        let n: Option<i64> = self
            .conn
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .optional()?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }
}

/// Outbox backoff: 1s, 2s, 4s, ... capped at 5 minutes (ms).
pub fn outbox_backoff_ms(attempts: u32) -> i64 {
    let f = 1i64 << attempts.min(9);
    (1000 * f).min(300_000)
}

fn labels_json(l: &Labels) -> Json {
    let m: serde_json::Map<String, Json> = l
        .iter()
        .map(|x| (x.name.to_string(), Json::String(x.value.to_string())))
        .collect();
    Json::Object(m)
}

fn labels_from_json_value(v: &Json) -> Result<Labels, StateError> {
    let Json::Object(m) = v else {
        return Err(StateError::Corrupt("labels are not an object".into()));
    };
    let mut pairs = Vec::with_capacity(m.len());
    for (k, v) in m {
        let s = v
            .as_str()
            .ok_or_else(|| StateError::Corrupt("label value is not a string".into()))?;
        pairs.push((k.as_str(), s));
    }
    Ok(Labels::from_pairs(pairs))
}

fn labels_from_json(s: &str) -> Result<Labels, StateError> {
    let v: Json = serde_json::from_str(s).map_err(|e| StateError::Corrupt(format!("labels: {e}")))?;
    labels_from_json_value(&v)
}

fn time_ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn ms_time(v: &Json) -> Result<DateTime<Utc>, StateError> {
    let ms = v
        .as_i64()
        .ok_or_else(|| StateError::Corrupt("time is not a number".into()))?;
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StateError::Corrupt(format!("time {ms} out of range")))
}

fn reason_str(r: &Reason) -> &'static str {
    match r {
        Reason::FirstNotification => "first",
        Reason::NewAlertsInGroup => "new_alerts",
        Reason::AllAlertsResolved => "all_resolved",
        Reason::NewResolvedAlerts => "new_resolved",
        Reason::RepeatIntervalElapsed => "repeat",
    }
}

fn reason_from(s: &str) -> Reason {
    match s {
        "new_alerts" => Reason::NewAlertsInGroup,
        "all_resolved" => Reason::AllAlertsResolved,
        "new_resolved" => Reason::NewResolvedAlerts,
        "repeat" => Reason::RepeatIntervalElapsed,
        _ => Reason::FirstNotification,
    }
}

fn notification_json(n: &Notification) -> Json {
    let alerts: Vec<Json> = n
        .alerts
        .iter()
        .map(|a| {
            json!({
                "labels": labels_json(&a.labels),
                "annotations": a.annotations,
                "starts_at": time_ms(a.starts_at),
                "ends_at": a.ends_at.map(time_ms),
                "generator_url": a.generator_url,
                "updated_at": time_ms(a.updated_at),
                "timeout": a.timeout,
            })
        })
        .collect();
    json!({
        "group_key": n.group_key,
        "receiver": n.receiver,
        "target": {
            "group_name": n.target.key.group_name,
            "integration": n.target.key.integration,
            "idx": n.target.key.idx,
            "index": n.target.index,
            "forward": n.target.forward,
            "send_resolved": n.target.send_resolved,
        },
        "group_labels": labels_json(&n.group_labels),
        "alerts": alerts,
        "reason": reason_str(&n.reason),
        "at": time_ms(n.at),
        "links": n.links.iter().map(|l| json!({"kind": l.kind, "url": l.url})).collect::<Vec<_>>(),
    })
}

fn notification_from_json(v: &Json) -> Result<Notification, StateError> {
    let s = |v: &Json, k: &str| -> Result<String, StateError> {
        v.get(k)
            .and_then(Json::as_str)
            .map(str::to_string)
            .ok_or_else(|| StateError::Corrupt(format!("outbox: missing {k}")))
    };
    let u = |v: &Json, k: &str| v.get(k).and_then(Json::as_u64).unwrap_or(0) as usize;
    let b = |v: &Json, k: &str| v.get(k).and_then(Json::as_bool).unwrap_or(false);
    let t = v
        .get("target")
        .ok_or_else(|| StateError::Corrupt("outbox: missing target".into()))?;
    let mut alerts = Vec::new();
    for a in v.get("alerts").and_then(Json::as_array).into_iter().flatten() {
        let annotations: BTreeMap<String, String> = a
            .get("annotations")
            .cloned()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| StateError::Corrupt(format!("outbox annotations: {e}")))?
            .unwrap_or_default();
        alerts.push(crate::notify::Alert {
            labels: labels_from_json_value(a.get("labels").unwrap_or(&Json::Null))?,
            annotations,
            starts_at: ms_time(a.get("starts_at").unwrap_or(&Json::Null))?,
            ends_at: match a.get("ends_at") {
                Some(Json::Null) | None => None,
                Some(x) => Some(ms_time(x)?),
            },
            generator_url: s(a, "generator_url").unwrap_or_default(),
            updated_at: ms_time(a.get("updated_at").unwrap_or(&Json::Null))?,
            timeout: b(a, "timeout"),
        });
    }
    Ok(Notification {
        group_key: s(v, "group_key")?,
        receiver: s(v, "receiver")?,
        target: Target {
            key: ReceiverKey {
                group_name: s(t, "group_name")?,
                integration: s(t, "integration")?,
                idx: u(t, "idx"),
            },
            index: u(t, "index"),
            forward: b(t, "forward"),
            send_resolved: b(t, "send_resolved"),
        },
        group_labels: labels_from_json_value(v.get("group_labels").unwrap_or(&Json::Null))?,
        alerts,
        reason: reason_from(&s(v, "reason")?),
        at: ms_time(v.get("at").unwrap_or(&Json::Null))?,
        links: v
            .get("links")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| {
                Some(crate::notify::links::Link {
                    kind: crate::notify::links::Link::kind_from(l.get("kind")?.as_str()?)?,
                    url: l.get("url")?.as_str()?.to_string(),
                })
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(state: AlertState, active_at: i64) -> Alert {
        Alert {
            state,
            labels: Labels::from_pairs([("alertname", "A"), ("gpu", "0")]),
            annotations: BTreeMap::from([("summary".to_string(), "s".to_string())]),
            value: 1.5,
            active_at,
            fired_at: Some(active_at + 60_000),
            resolved_at: None,
            last_sent_at: Some(active_at + 60_000),
            valid_until: Some(active_at + 300_000),
            keep_firing_since: None,
        }
    }

    #[test]
    fn output_blocks_round_trip_and_prune() {
        let mut st = StateStore::in_memory().unwrap();
        let x = Labels::from_pairs([("__name__", "x:rec"), ("a", "1")]);
        let y = Labels::from_pairs([("__name__", "y:rec")]);
        let block = |labels: &Labels, kind: u8, start: i64, end: i64, samples: &[u8]| OutputBlock {
            labels: labels.clone(),
            kind,
            start,
            end,
            samples: samples.to_vec(),
        };
        let x1 = block(&x, 0, 1_000, 2_000, b"ab");
        let x2 = block(&x, 0, 3_000, 4_000, b"cd");
        let xh = block(&x, 1, 1_000, 1_000, b"h");
        let y1 = block(&y, 0, 1_000, 1_000, b"e");
        st.save_output_blocks(&[block(&x, 0, 1_000, 1_000, b"a"), x2.clone(), xh.clone(), y1.clone()])
            .unwrap();
        st.save_output_blocks(std::slice::from_ref(&x1)).unwrap();
        assert_eq!(
            st.load_output_blocks("x:rec", 0).unwrap(),
            vec![x1.clone(), x2.clone(), xh.clone()],
            "a block saved again is replaced"
        );
        assert_eq!(st.load_output_blocks("x:rec", 2_500).unwrap(), vec![x2.clone()]);
        assert_eq!(st.load_output_blocks("y:rec", 0).unwrap(), vec![y1]);
        assert_eq!(
            st.prune_outputs(&[("x:rec".into(), 2_500)]).unwrap(),
            3,
            "x's blocks ending before, all of y"
        );
        assert_eq!(st.load_output_blocks("x:rec", 0).unwrap(), vec![x2]);
        assert!(st.load_output_blocks("y:rec", 0).unwrap().is_empty());
    }

    /// A state directory on a small volume (the faults benchmark's 8 MiB tmpfs filled by
    /// itself): the WAL grew to 4.4 MiB and stayed at that size.
    #[test]
    fn the_wal_stays_near_its_limit_through_many_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = StateStore::open_dir(dir.path()).unwrap();
        let wal = dir.path().join("watchfire.db-wal");
        let samples = vec![7u8; 16 << 10];
        let mut largest = 0;
        // About 40 MiB written in blocks that replace and prune each other, as the rule
        // outputs' history does.
        for round in 0..50i64 {
            let blocks: Vec<OutputBlock> = (0..50)
                .map(|i| OutputBlock {
                    labels: Labels::from_pairs([("__name__", "x:rec"), ("i", &i.to_string())]),
                    kind: 0,
                    start: round * 1_000,
                    end: round * 1_000 + 999,
                    samples: samples.clone(),
                })
                .collect();
            st.save_output_blocks(&blocks).unwrap();
            st.prune_outputs(&[("x:rec".into(), round * 1_000 - 3_000)]).unwrap();
            largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
        let at_end = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        // Past the limit only by what one checkpoint interval (1 MiB) and one transaction
        // (50 blocks of 16 KiB) add.
        assert!(largest <= 3 << 20, "the WAL reached {largest} bytes");
        assert!(at_end <= 3 << 20, "the WAL ended at {at_end} bytes");
        assert_eq!(
            st.load_output_blocks("x:rec", 0).unwrap().len(),
            200,
            "the last 4 rounds kept"
        );
    }

    #[test]
    fn alerts_round_trip_and_replace() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StateStore::open_dir(dir.path()).unwrap();
        let ra = RuleAlerts {
            rule_index: 1,
            rule_name: "A".into(),
            alerts: vec![alert(AlertState::Firing, 1000)],
        };
        s.save_group("f;g", std::slice::from_ref(&ra)).unwrap();
        drop(s);
        let mut s = StateStore::open_dir(dir.path()).unwrap();
        assert_eq!(s.load_group("f;g").unwrap(), vec![ra]);
        s.save_group("f;g", &[]).unwrap();
        assert!(s.load_group("f;g").unwrap().is_empty());
    }

    #[test]
    fn outbox_round_trip() {
        let mut s = StateStore::in_memory().unwrap();
        let at = Utc.timestamp_millis_opt(5000).unwrap();
        let n = Notification {
            group_key: "{}:{alertname=\"A\"}".into(),
            receiver: "pager".into(),
            target: Target {
                key: ReceiverKey {
                    group_name: "pager".into(),
                    integration: "webhook".into(),
                    idx: 0,
                },
                index: 0,
                forward: false,
                send_resolved: true,
            },
            group_labels: Labels::from_pairs([("alertname", "A")]),
            alerts: vec![crate::notify::Alert {
                labels: Labels::from_pairs([("alertname", "A")]),
                annotations: BTreeMap::new(),
                starts_at: at,
                ends_at: None,
                generator_url: "http://x".into(),
                updated_at: at,
                timeout: false,
            }],
            reason: Reason::NewAlertsInGroup,
            at,
            links: vec![crate::notify::links::Link {
                kind: "runbook",
                url: "https://runbooks/A".into(),
            }],
        };
        let id = s.outbox_push(&n, 5000).unwrap();
        assert_eq!(s.outbox_depth().unwrap(), 1);
        let due = s.outbox_due(5000, 10).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].notification.alerts, n.alerts);
        assert_eq!(due[0].notification.target, n.target);
        s.outbox_retry(id, 9000, "boom").unwrap();
        assert!(s.outbox_due(8999, 10).unwrap().is_empty());
        assert_eq!(s.outbox_due(9000, 10).unwrap()[0].attempts, 1);
        s.outbox_done(id).unwrap();
        assert_eq!(s.outbox_depth().unwrap(), 0);

        // Given up: the entry moves to the dead letters with its attempts and last error.
        let id = s.outbox_push(&n, 6000).unwrap();
        s.outbox_retry(id, 7000, "503").unwrap();
        assert!(s.outbox_dead_letter(id, 8000, "unexpected status code 400").unwrap());
        assert!(!s.outbox_dead_letter(id, 8000, "again").unwrap());
        assert_eq!(s.outbox_depth().unwrap(), 0);
        assert_eq!(s.dead_letter_count().unwrap(), 1);
        let dl = s.dead_letters_since(8000).unwrap();
        assert_eq!(dl.len(), 1);
        assert_eq!(
            (dl[0].id, dl[0].created_at, dl[0].failed_at, dl[0].attempts),
            (id, 6000, 8000, 2)
        );
        assert_eq!(dl[0].receiver, "pager");
        assert_eq!(dl[0].group_key, n.group_key);
        assert_eq!(dl[0].last_error, "unexpected status code 400");
        assert_eq!(StateStore::dead_letter_notification(&dl[0]).unwrap().alerts, n.alerts);
        assert!(s.dead_letters_since(8001).unwrap().is_empty());
        assert_eq!(s.dead_letters_prune(8000).unwrap(), 0);
        assert_eq!(s.dead_letters_prune(8001).unwrap(), 1);
        assert_eq!(s.dead_letter_count().unwrap(), 0);
    }
}
