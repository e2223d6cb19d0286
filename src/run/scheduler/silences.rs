//! The silences (`/api/v2/silences`): kept here, saved in SQLite before a change is applied,
//! and copied into the notifier on every change, so they outlive a configuration without
//! routes.

use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};

use crate::notify::silence::{SilenceError, Silences};
use crate::notify::Notifier;
use crate::state::StateStore;

/// How long expired silences are kept (Alertmanager's `--data.retention` default).
pub(super) const SILENCE_RETENTION_HOURS: i64 = 120;

/// The current silences. Lock order: this before the notifier (a change updates both, and a
/// reload copies these into the new notifier).
pub(super) struct SilenceBook {
    current: Mutex<Silences>,
}

impl SilenceBook {
    pub(super) fn new(silences: Silences) -> Self {
        SilenceBook {
            current: Mutex::new(silences),
        }
    }

    /// A copy of the silences (none if the lock is poisoned).
    pub(super) fn current(&self) -> Silences {
        self.current.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The silences, held: for readers that also take the notifier.
    pub(super) fn lock(&self) -> Option<MutexGuard<'_, Silences>> {
        self.current.lock().ok()
    }

    /// Applies `f` at `now`, drops silences expired past the retention, saves what changed (one
    /// row a silence) and only then keeps the change, here and in the notifier; a refused or
    /// unsaved change is undone. The work is in proportion to the change, not to all silences.
    pub(super) fn change<T>(
        &self,
        now: DateTime<Utc>,
        state: &Mutex<StateStore>,
        notifier: &Mutex<Option<Notifier>>,
        f: impl FnOnce(&mut Silences, DateTime<Utc>) -> Result<T, SilenceError>,
    ) -> Result<T, SilenceError> {
        let mut current = self
            .current
            .lock()
            .map_err(|_| SilenceError::Invalid("internal error".into()))?;
        current.begin();
        let out = match f(&mut current, now) {
            Ok(out) => out,
            Err(e) => {
                current.rollback();
                return Err(e);
            }
        };
        current.gc(now, chrono::Duration::hours(SILENCE_RETENTION_HOURS));
        let changed = current.changed();
        let mut upserts = Vec::new();
        let mut deletes = Vec::new();
        for id in &changed {
            match current.get(id) {
                Some(s) => upserts.push((id.clone(), s.to_json(now).to_string())),
                None => deletes.push(id.clone()),
            }
        }
        // Saved first: a silence the API acknowledged survives a crash.
        let saved = state
            .lock()
            .map_err(|_| SilenceError::Invalid("internal error".into()))
            .and_then(|mut st| {
                st.save_silence_changes(&upserts, &deletes)
                    .map_err(|e| SilenceError::Invalid(format!("saving silences: {e}")))
            });
        if let Err(e) = saved {
            tracing::error!("{e}");
            current.rollback();
            return Err(e);
        }
        current.commit();
        let mut notifier = notifier
            .lock()
            .map_err(|_| SilenceError::Invalid("internal error".into()))?;
        if let Some(n) = notifier.as_mut() {
            for id in &changed {
                n.silences.copy_from(&current, id);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::silence::{Silence, SilenceMatcher};
    use crate::run::scheduler::clock::ms_to_time;
    use crate::run::scheduler::testing::notify_config;

    #[test]
    fn a_change_is_saved_and_reaches_the_notifier_and_a_refused_one_changes_nothing() {
        let book = SilenceBook::new(Silences::new());
        let state = Mutex::new(StateStore::in_memory().unwrap());
        let now = ms_to_time(0);
        let notifier = Mutex::new(Some(Notifier::new(notify_config(), now)));
        let matcher = SilenceMatcher {
            name: "alertname".into(),
            value: "A".into(),
            is_regex: false,
            is_equal: true,
        };
        let s = Silence::new(vec![matcher], now, now + chrono::Duration::hours(1), "me", "test");
        let id = book.change(now, &state, &notifier, |sil, now| sil.set(s, now)).unwrap();
        assert!(book.current().get(&id).is_some());
        assert_eq!(state.lock().unwrap().load_silences().unwrap().len(), 1);
        assert!(notifier.lock().unwrap().as_ref().unwrap().silences.get(&id).is_some());

        let refused = book.change(now, &state, &notifier, |sil, now| sil.expire("nope", now));
        assert!(matches!(refused, Err(SilenceError::NotFound(_))), "{refused:?}");
        assert_eq!(book.current().list().count(), 1);
        assert_eq!(state.lock().unwrap().load_silences().unwrap().len(), 1);
    }
}
