//! Alerts received over the Alertmanager API (`POST /api/v2/alerts`, node-probe events
//! included): validated, stamped and fingerprinted, then queued until they enter the notifier.
//!
//! A POST is answered once its batch is queued, as Alertmanager answers once alerts are in its
//! store and dispatches them from there: routing and grouping then run beside the next
//! request's decoding instead of holding it up. The queue is applied by a blocking task after
//! each POST, and by anyone who takes the notifier ([`super::Service`]'s `hub`), so every read
//! after a POST (API, status page, flushes) sees its alerts.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::duration::Duration;
use crate::notify::alert::{Fingerprint, IntoAlert};
use crate::notify::owners::Owners;

use super::clock::ms_to_time;

/// Past this many queued alerts a POST waits for the queue to be applied before it is
/// answered, so a sender faster than routing is slowed down instead of growing the queue.
const MAX_QUEUED_ALERTS: usize = 100_000;

/// A batch of received alerts and when it arrived (ms).
pub(super) type Batch = (Vec<(Fingerprint, crate::notify::Alert)>, i64);

/// The alerts accepted and not yet in the notifier, in arrival order.
#[derive(Default)]
pub(super) struct IngestQueue {
    queue: Mutex<Queue>,
    /// Whether a task to apply the queue is already on its way (one is enough: it applies
    /// everything queued until it runs).
    apply_scheduled: AtomicBool,
}

#[derive(Default)]
struct Queue {
    batches: VecDeque<Batch>,
    alerts: usize,
}

impl IngestQueue {
    /// Validates `alerts` received at `now` and queues them; refused without routes
    /// (`resolve_timeout` is `None` then). Owners stamp their labels here, outside the
    /// notifier's lock, so concurrent POSTs only serialize on routing and grouping.
    pub(super) fn push<A: IntoAlert>(
        &self,
        alerts: Vec<A>,
        now: i64,
        resolve_timeout: Option<Duration>,
        owners: Option<&Owners>,
    ) -> Result<usize, String> {
        let Some(timeout) = resolve_timeout else {
            return Err("no routes_file configured: watchfire cannot route received alerts".to_string());
        };
        let mut out = Vec::with_capacity(alerts.len());
        for (i, p) in alerts.into_iter().enumerate() {
            let mut a = p
                .into_alert(ms_to_time(now), timeout)
                .map_err(|e| format!("alert {i}: {e}"))?;
            if let Some(o) = owners {
                a.labels = o.stamp(&a.labels);
            }
            // Fingerprinted here too, outside the lock.
            out.push((a.fingerprint(), a));
        }
        let count = out.len();
        let mut q = self.queue.lock().map_err(|_| "internal error".to_string())?;
        q.batches.push_back((out, now));
        q.alerts += count;
        Ok(count)
    }

    /// Whether so many alerts wait that a sender should wait for them to be applied before it
    /// is answered.
    pub(super) fn backlogged(&self) -> bool {
        self.queue.lock().is_ok_and(|q| q.alerts > MAX_QUEUED_ALERTS)
    }

    /// Whether the caller should start a task applying the queue: false while one is already
    /// waiting to run, so a burst of POSTs does not pile up blocked threads.
    pub(super) fn claim_apply(&self) -> bool {
        !self.apply_scheduled.swap(true, Ordering::SeqCst)
    }

    /// Called by the applying task before it applies: a batch queued from then on either is
    /// applied by it or claims a task of its own.
    pub(super) fn release_apply(&self) {
        self.apply_scheduled.store(false, Ordering::SeqCst);
    }

    /// The oldest batch. Taken only while the notifier is held, so batches enter it in
    /// arrival order.
    pub(super) fn pop(&self) -> Option<Batch> {
        let mut q = self.queue.lock().ok()?;
        let b = q.batches.pop_front()?;
        q.alerts -= b.0.len();
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ms_to_time;
    use super::super::testing::{api_alert_names, received, receiving_service};

    #[test]
    fn accepted_alerts_are_seen_by_every_reader_at_once() {
        let svc = receiving_service(true);
        // Queued, not yet applied by a background task: a reader applies it first.
        assert_eq!(svc.ingest(vec![received("A"), received("B")]), Ok(2));
        assert_eq!(api_alert_names(&svc), ["A", "B"]);
        // Batches enter in arrival order: a later version of an alert replaces an earlier one.
        let mut resolved = received("A");
        resolved.ends_at = Some(ms_to_time(-1));
        svc.ingest(vec![received("C")]).unwrap();
        svc.ingest(vec![resolved]).unwrap();
        svc.apply_ingested();
        let alerts = svc.notifier_alerts();
        assert_eq!(alerts.len(), 3);
        let a = alerts.iter().find(|a| a.alert.name() == "A").unwrap();
        assert!(a.alert.resolved_at(ms_to_time(0)), "{:?}", a.alert);
        assert!(!svc.ingest_backlogged());
    }

    #[test]
    fn ingest_without_routes_is_refused() {
        let svc = receiving_service(false);
        let err = svc.ingest(vec![received("A")]).unwrap_err();
        assert!(err.contains("no routes_file configured"), "{err}");
    }
}
