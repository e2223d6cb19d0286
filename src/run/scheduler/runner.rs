//! One rule group and its schedule: Prometheus' deterministic slots (a slot that passed while
//! the previous evaluation ran is counted as missed and skipped), its rule outputs, and the
//! alert state a reload carries over.

use crate::rules::{AlertState, Group, GroupRule, Hold};
use crate::tsdb::Store;

use super::clock::STEP_TOLERANCE_MS;
use super::snapshot::{AlertSnapshot, GroupSnapshot, RuleSnapshot};

/// One group and its scheduling state.
pub(super) struct GroupRunner {
    pub(super) group: Group,
    /// `file;name`: the key of its saved state.
    pub(super) key: String,
    pub(super) outputs: Store,
    /// The next slot to evaluate (ms); `None` before the first.
    pub(super) next_ts: Option<i64>,
    /// How far the group's time runs ahead of a wall clock that stepped back (ms); negative:
    /// how far it evaluates after its slots since the clock stepped forward.
    lag_ms: i64,
    /// The wall time of the last [`GroupRunner::due`].
    last_wall_ms: Option<i64>,
    /// The monotonic time of the last [`GroupRunner::due_at`], where the clock has one.
    last_mono_ms: Option<i64>,
    pub(super) iterations: u64,
    pub(super) iterations_missed: u64,
    pub(super) last_duration_s: f64,
    /// The rules held in the last evaluation, and why (see `readiness`).
    pub(super) held: Vec<Option<Hold>>,
    /// The rules that failed on their source in the last evaluation, with the error.
    pub(super) source_failed: Vec<(usize, String)>,
}

impl GroupRunner {
    pub(super) fn new(group: Group) -> Self {
        let key = format!("{};{}", group.file().display(), group.name());
        GroupRunner {
            group,
            key,
            outputs: Store::new(),
            next_ts: None,
            lag_ms: 0,
            last_wall_ms: None,
            last_mono_ms: None,
            iterations: 0,
            iterations_missed: 0,
            last_duration_s: 0.0,
            held: Vec::new(),
            source_failed: Vec::new(),
        }
    }

    /// [`GroupRunner::due_at`] without a monotonic clock.
    #[cfg(test)]
    pub(super) fn due(&mut self, now: i64) -> Result<i64, i64> {
        self.due_at(now, None)
    }

    /// The slot to evaluate at `now`, or the time to wait for: `Ok(ts)` when due (counting
    /// skipped slots as missed), `Err(next)` when not yet.
    ///
    /// Evaluation time never goes back. After the wall clock stepped back, the group keeps its
    /// slots and its time runs ahead of the wall clock by `lag_ms`, which shrinks by a quarter
    /// of the wall time passing (the group evaluates at 3/4 pace) until the two meet. Going back
    /// with the wall clock would read the source as of the step ago (an incident younger than
    /// the step would vanish and resolve), and waiting for the next slot would stall the group
    /// (and the re-sends that keep its alerts valid downstream) for the length of the step.
    ///
    /// The monotonic time `mono` beside the wall time tells a step of the wall clock from time
    /// passing, and each group then keeps its pace through a step, as Prometheus' ticker does:
    /// the groups stay spread over the interval, where a step taken as time passing would make
    /// every group due at the same moment, and that burst of queries is what times a loaded
    /// source out. A step back puts the group ahead by the step itself. A step forward first
    /// closes the gap of a group running ahead (the clock coming back after a step back), so
    /// evaluation time goes on from where it was instead of jumping three quarters of the step
    /// ahead; the rest of it moves the group's slots with the clock by whole intervals (counted
    /// as missed), and `lag_ms` goes negative by what is left (less than an interval): the group
    /// is next evaluated when it would have been, at the slot of the new clock, that much after
    /// the slot. Without a monotonic time, all the wall time passed counts as time passing, and
    /// a step back is measured from the next slot.
    pub(super) fn due_at(&mut self, now: i64, mono: Option<i64>) -> Result<i64, i64> {
        let interval = self.group.interval_ms().max(1);
        if let Some(last) = self.last_wall_ms {
            let passed = now - last;
            match (mono, self.last_mono_ms) {
                (Some(m), Some(lm)) => {
                    let real = (m - lm).max(0);
                    let mut step = passed - real;
                    if step.abs() <= STEP_TOLERANCE_MS {
                        step = 0;
                    }
                    if step < 0 {
                        // Back: the group runs ahead by the step and keeps its pace.
                        tracing::debug!(group = %self.key, "the wall clock went back {} s", -step / 1000);
                        self.lag_ms -= step;
                    }
                    if self.lag_ms > 0 {
                        let closed = self.lag_ms.min(real / 4 + step.max(0));
                        self.lag_ms -= closed;
                        step -= (closed - real / 4).max(0);
                    }
                    if step > 0 && self.lag_ms <= 0 {
                        self.lag_ms -= step;
                        if let Some(next) = self.next_ts.as_mut() {
                            let slots = -self.lag_ms / interval;
                            *next += slots * interval;
                            self.lag_ms += slots * interval;
                            self.iterations_missed += slots as u64;
                        }
                    }
                }
                _ if self.lag_ms > 0 => self.lag_ms = (self.lag_ms - passed.max(0) / 4).max(0),
                _ => {}
            }
        }
        self.last_wall_ms = Some(now);
        self.last_mono_ms = mono;
        let mut t = now.saturating_add(self.lag_ms);
        let next = *self.next_ts.get_or_insert_with(|| {
            let s = self.group.eval_timestamp(t);
            if s == t {
                s
            } else {
                s + interval
            }
        });
        // The next slot is never more than one interval away unless the wall clock stepped back.
        if next - t > interval {
            let step = next - interval - t;
            tracing::warn!(
                group = %self.key,
                "the wall clock went back {} s: the group keeps its slots and catches up at 3/4 pace",
                step / 1000
            );
            self.lag_ms += step;
            t += step;
        }
        if next > t {
            return Err(next - self.lag_ms);
        }
        let missed = (t - next) / interval;
        self.iterations_missed += missed as u64;
        let ts = next + missed * interval;
        self.next_ts = Some(ts + interval);
        Ok(ts)
    }

    /// Carries alert state over from an older version of the group (reload): rules matched by
    /// name, in order.
    pub(super) fn copy_state_from(&mut self, old: &GroupRunner) {
        let mut used = vec![false; old.group.rules().len()];
        for r in self.group.rules_mut() {
            let Some(new) = r.as_alerting_mut() else { continue };
            let found = old
                .group
                .rules()
                .iter()
                .enumerate()
                .find(|(i, o)| !used[*i] && o.as_alerting().is_some_and(|o| o.name() == new.name()));
            if let Some((i, o)) = found {
                used[i] = true;
                if let Some(o) = o.as_alerting() {
                    new.restore_alerts(o.alerts().cloned());
                }
            }
        }
        self.outputs = trim_store(&old.outputs, i64::MIN);
        self.next_ts = old.next_ts;
        self.lag_ms = old.lag_ms;
        self.last_wall_ms = old.last_wall_ms;
        self.last_mono_ms = old.last_mono_ms;
    }

    pub(super) fn snapshot(&self) -> GroupSnapshot {
        let rules = self
            .group
            .rules()
            .iter()
            .map(|r| match r {
                GroupRule::Alerting(a) => RuleSnapshot {
                    alerting: true,
                    name: a.name().to_string(),
                    query: a.expr_text().to_string(),
                    duration_s: a.hold_ms() as f64 / 1000.0,
                    keep_firing_for_s: a.keep_firing_for_ms() as f64 / 1000.0,
                    labels: a.labels().to_vec(),
                    annotations: a.annotations().to_vec(),
                    health: a.health().as_str(),
                    last_error: a.last_error().map(|e| e.to_string()),
                    last_evaluation: a.last_evaluation(),
                    evaluation_time_s: 0.0,
                    state: a.state().unwrap_or(AlertState::Inactive).as_str(),
                    alerts: a
                        .active_alerts()
                        .map(|x| AlertSnapshot {
                            labels: x.labels.clone(),
                            annotations: x.annotations.clone(),
                            state: x.state,
                            active_at: x.active_at,
                            value: x.value,
                        })
                        .collect(),
                },
                GroupRule::Recording(rr) => RuleSnapshot {
                    alerting: false,
                    name: rr.name().to_string(),
                    query: rr.expr_text().to_string(),
                    duration_s: 0.0,
                    keep_firing_for_s: 0.0,
                    labels: rr.labels().to_vec(),
                    annotations: Vec::new(),
                    health: rr.health().as_str(),
                    last_error: rr.last_error().map(|e| e.to_string()),
                    last_evaluation: rr.last_evaluation(),
                    evaluation_time_s: 0.0,
                    state: "",
                    alerts: Vec::new(),
                },
            })
            .collect();
        GroupSnapshot {
            name: self.group.name().to_string(),
            file: self.group.file().display().to_string(),
            interval_s: self.group.interval_ms() as f64 / 1000.0,
            last_evaluation: self.group.last_evaluation(),
            evaluation_time_s: self.last_duration_s,
            rules,
        }
    }
}

/// A copy of `s` with the samples from `mint` on (bounds the history rule outputs keep).
pub(super) fn trim_store(s: &Store, mint: i64) -> Store {
    let mut out = Store::new();
    s.copy_range_into(&mut out, mint, i64::MAX);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::{parse, LoadOptions};
    use std::path::Path;

    fn runner(src: &str) -> GroupRunner {
        let p = parse(src, Path::new("g.yaml"), LoadOptions::default());
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let g = Group::from_file(&p.file, &crate::rules::GroupConfig::default()).unwrap();
        GroupRunner::new(g.into_iter().next().unwrap())
    }

    #[test]
    fn slots_follow_the_group_offset_and_missed_ones_are_counted() {
        let mut r = runner("groups:\n  - name: g\n    interval: 1m\n    rules: []\n");
        let off = r.group.offset_ms();
        let start = 10 * 60_000 + 1;
        // The first slot is the next one at the group's offset.
        let first = match r.due(start) {
            Err(next) => next,
            Ok(ts) => ts,
        };
        assert_eq!(first.rem_euclid(60_000), off);
        assert!(first >= start && first < start + 60_000);
        assert_eq!(r.due(first), Ok(first));
        assert_eq!(r.due(first + 1), Err(first + 60_000));
        // Three and a half intervals late: two slots missed, the latest one evaluated.
        assert_eq!(r.due(first + 3 * 60_000 + 30_000), Ok(first + 3 * 60_000));
        assert_eq!(r.iterations_missed, 2);
        assert_eq!(r.due(first + 3 * 60_000 + 30_001), Err(first + 4 * 60_000));
    }

    #[test]
    fn a_clock_stepped_back_keeps_the_slots_and_catches_up() {
        let mut r = runner("groups:\n  - name: g\n    interval: 1m\n    rules: []\n");
        let start = 100 * 60_000;
        let first = match r.due(start) {
            Err(next) => next,
            Ok(ts) => ts,
        };
        assert_eq!(r.due(first), Ok(first));
        // Ten minutes back: the group waits one interval, not ten, and its next slot is the
        // one after `first` (evaluation time never goes back).
        let back = first + 1_000 - 10 * 60_000;
        assert_eq!(r.due(back), Err(back + 60_000));
        // At 3/4 pace: the slot is due 80 s of wall time later.
        assert!(r.due(back + 60_000).is_err());
        assert_eq!(r.due(back + 80_000), Ok(first + 60_000));
        assert_eq!(r.iterations_missed, 0);
        // The lag shrinks until the group is back on the wall clock.
        let mut wall = back + 80_000;
        let mut last = first + 60_000;
        while r.lag_ms > 0 {
            wall += 1_000;
            if let Ok(ts) = r.due(wall) {
                assert!(ts > last, "evaluation time never goes back");
                last = ts;
            }
        }
        assert!(wall < back + 50 * 60_000, "caught up within four steps' time");
        assert_eq!(r.due(last + 60_000 + 1), Ok(last + 60_000));
    }

    /// Stepped back 5 minutes 50 s after an evaluation: the next one comes 10 s later at 3/4
    /// pace (about 13 s), not 80 s after the step as it would for every group stepped at that
    /// moment, whatever its slot.
    #[test]
    fn a_step_back_keeps_the_pace() {
        let mut r = runner("groups:\n  - name: g\n    interval: 1m\n    rules: []\n");
        let (mut wall, mut mono) = (1_000 * 60_000i64, 0i64);
        let mut last = None;
        while last.is_none_or(|(m, _)| mono - m < 50_000) {
            wall += 1_000;
            mono += 1_000;
            if let Ok(ts) = r.due_at(wall, Some(mono)) {
                last = Some((mono, ts));
            }
        }
        let (stepped, (_, ts0)) = (mono, last.unwrap());
        wall -= 300_000;
        let next = loop {
            wall += 1_000;
            mono += 1_000;
            if let Ok(ts) = r.due_at(wall, Some(mono)) {
                break (mono, ts);
            }
        };
        assert_eq!(next.1, ts0 + 60_000, "the next slot");
        assert!(
            (12_000..=15_000).contains(&(next.0 - stepped)),
            "{} s after the step",
            (next.0 - stepped) / 1000
        );
        assert!(r.lag_ms > 290_000, "ahead by the step: {}", r.lag_ms);
        assert_eq!(r.iterations_missed, 0);
    }

    /// Stepped forward (3 min, then 90 s): the group is evaluated when it would have been, at
    /// the slot of the new clock, the slots in between counted as missed, as Prometheus' ticker
    /// does; not at once, with every other group of the service.
    #[test]
    fn a_step_forward_keeps_the_pace_and_moves_the_slots() {
        let mut r = runner("groups:\n  - name: g\n    interval: 1m\n    rules: []\n");
        let (mut wall, mut mono) = (1_000 * 60_000i64, 0i64);
        let mut evals: Vec<(i64, i64, i64)> = Vec::new();
        /// `secs` seconds passing by both clocks, a look a second: (mono, wall, slot) evaluated.
        fn run(r: &mut GroupRunner, wall: &mut i64, mono: &mut i64, secs: i64, evals: &mut Vec<(i64, i64, i64)>) {
            for _ in 0..secs {
                *wall += 1_000;
                *mono += 1_000;
                if let Ok(ts) = r.due_at(*wall, Some(*mono)) {
                    evals.push((*mono, *wall, ts));
                }
            }
        }
        run(&mut r, &mut wall, &mut mono, 150, &mut evals);
        let (m0, _, ts0) = *evals.last().unwrap();
        wall += 180_000;
        run(&mut r, &mut wall, &mut mono, 130, &mut evals);
        let after: Vec<_> = evals.iter().filter(|e| e.0 > m0).copied().collect();
        assert_eq!(after.len(), 2, "{after:?}");
        assert!(
            (after[0].0 - m0 - 60_000).abs() <= 1_000,
            "one interval later: {after:?}"
        );
        assert_eq!(after[0].2, ts0 + 4 * 60_000, "the slot of the new clock");
        assert_eq!(r.iterations_missed, 3);
        assert_eq!(after[1].2 - after[0].2, 60_000);
        // 90 s: the slot at or before the new wall time, evaluated 30 s after it.
        let (m1, _, ts1) = *evals.last().unwrap();
        wall += 90_000;
        run(&mut r, &mut wall, &mut mono, 130, &mut evals);
        let after: Vec<_> = evals.iter().filter(|e| e.0 > m1).copied().collect();
        assert!(
            (after[0].0 - m1 - 60_000).abs() <= 1_000,
            "one interval later: {after:?}"
        );
        assert_eq!(after[0].2, ts1 + 2 * 60_000);
        assert!((after[0].1 - after[0].2 - 30_000).abs() <= 1_000, "{after:?}");
        assert_eq!(after[1].2 - after[0].2, 60_000);
        assert_eq!(r.iterations_missed, 4);
        // Without a monotonic time the step is time passing: the latest slot, at once.
        let mut plain = runner("groups:\n  - name: g\n    interval: 1m\n    rules: []\n");
        let first = match plain.due(60_000_001) {
            Err(next) => next,
            Ok(ts) => ts,
        };
        assert_eq!(plain.due(first), Ok(first));
        assert_eq!(plain.due(first + 1_000 + 180_000), Ok(first + 180_000));
    }

    /// Stepped back 5 min, then forward 2 min (NTP correcting twice): with a monotonic clock
    /// the step forward closes the gap by 2 min, so evaluation time goes on from where it was;
    /// counted as time passing, it would jump 90 s ahead, and run further ahead of the
    /// sources' data.
    #[test]
    fn a_step_forward_after_a_step_back_continues_evaluation_time() {
        let mut r = runner("groups:\n  - name: g\n    interval: 10s\n    rules: []\n");
        let (mut wall, mut mono) = (1_000 * 60_000i64, 0i64);
        let mut evals = Vec::new();
        let tick = |r: &mut GroupRunner, wall: i64, mono: i64, evals: &mut Vec<(i64, i64)>| {
            if let Ok(ts) = r.due_at(wall, Some(mono)) {
                evals.push((mono, ts));
            }
        };
        for _ in 0..30 {
            wall += 1_000;
            mono += 1_000;
            tick(&mut r, wall, mono, &mut evals);
        }
        wall -= 300_000;
        for _ in 0..20 {
            wall += 1_000;
            mono += 1_000;
            tick(&mut r, wall, mono, &mut evals);
        }
        let before = evals.last().copied().unwrap();
        wall += 120_000;
        for _ in 0..20 {
            wall += 1_000;
            mono += 1_000;
            tick(&mut r, wall, mono, &mut evals);
        }
        let after = evals.iter().find(|(m, _)| *m > before.0).copied().unwrap();
        assert!(
            after.1 - before.1 <= 10_000,
            "the next slot after the step forward, not 90 s ahead: {before:?} then {after:?}"
        );
        assert!(r.lag_ms > 0 && r.lag_ms < 300_000 - 120_000, "{}", r.lag_ms);
        // Without the monotonic time the step counts as time passing (a quarter of it).
        let mut plain = runner("groups:\n  - name: g\n    interval: 10s\n    rules: []\n");
        plain.due(1_000).ok();
        plain.lag_ms = 200_000;
        plain.due(121_000).ok();
        assert_eq!(plain.lag_ms, 170_000);
    }
}
