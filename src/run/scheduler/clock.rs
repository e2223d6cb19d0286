//! Where the scheduler's time comes from: the wall clock for `watchfire run`, a clock that
//! moves only when told to for tests, which drive [`super::Service::run_due`] step by step.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

/// Where time comes from (ms since the epoch).
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;

    /// A clock that no one steps (ms from any origin), to tell steps of [`Clock::now_ms`]
    /// from time passing; `None` where `now_ms` only moves when told to.
    fn monotonic_ms(&self) -> Option<i64> {
        None
    }
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        Utc::now().timestamp_millis()
    }

    fn monotonic_ms(&self) -> Option<i64> {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let origin = ORIGIN.get_or_init(std::time::Instant::now);
        Some(origin.elapsed().as_millis().min(i64::MAX as u128) as i64)
    }
}

/// Steps of the wall clock smaller than this are left alone (NTP slews those, and reading the
/// two clocks is not one instant).
pub(super) const STEP_TOLERANCE_MS: i64 = 1_000;

/// The wall and monotonic times read together.
#[derive(Clone, Copy, Debug)]
struct Mark {
    wall: i64,
    mono: i64,
}

impl Mark {
    /// Now; `None` where the clock has no monotonic time.
    fn now(clock: &dyn Clock) -> Option<Mark> {
        let mono = clock.monotonic_ms()?;
        Some(Mark {
            wall: clock.now_ms(),
            mono,
        })
    }

    /// `Some((from, to))` when the wall clock stepped between this mark and `later`: `from` is
    /// where it would be had it followed the monotonic clock, `to` where it is.
    fn step_to(&self, later: Mark) -> Option<(i64, i64)> {
        let expected = self.wall.saturating_add(later.mono - self.mono);
        (later.wall.saturating_sub(expected).abs() > STEP_TOLERANCE_MS).then_some((expected, later.wall))
    }
}

/// Notices steps of the wall clock: the wall time moving otherwise than the monotonic clock.
#[derive(Debug, Default)]
pub(crate) struct StepWatch {
    /// The last look.
    last: std::sync::Mutex<Option<Mark>>,
}

impl StepWatch {
    /// The wall time now, and [`Mark::step_to`] since the last call: one reading of the clock,
    /// so a step between two readings cannot slip between the step and the time it is applied at.
    pub(crate) fn observe(&self, clock: &dyn Clock) -> (i64, Option<(i64, i64)>) {
        let Some(now) = Mark::now(clock) else {
            return (clock.now_ms(), None);
        };
        let step = match self.last.lock() {
            Ok(mut last) => last.replace(now).and_then(|l| l.step_to(now)),
            Err(_) => None,
        };
        (now.wall, step)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct SimClock(AtomicI64);

impl SimClock {
    pub fn new(t: i64) -> Self {
        SimClock(AtomicI64::new(t))
    }
    pub fn set(&self, t: i64) {
        self.0.store(t, Ordering::SeqCst);
    }
    pub fn advance(&self, d: i64) {
        self.0.fetch_add(d, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Converts ms to a UTC time (the epoch for out-of-range values).
pub(crate) fn ms_to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testing::Stepping;

    #[test]
    fn steps_of_the_wall_clock_are_told_from_time_passing() {
        let c = Stepping::default();
        c.wall.set(1_000_000);
        let w = StepWatch::default();
        assert_eq!(
            w.observe(&c),
            (1_000_000, None),
            "the first look has nothing to compare with"
        );
        c.wall.advance(60_000);
        c.mono.advance(60_000);
        assert_eq!(w.observe(&c), (1_060_000, None), "a minute passed");
        c.wall.advance(500);
        assert_eq!(w.observe(&c), (1_060_500, None), "under the tolerance");
        c.wall.set(1_000_000);
        assert_eq!(
            w.observe(&c),
            (1_000_000, Some((1_060_500, 1_000_000))),
            "stepped back, and the time it was seen at"
        );
        c.wall.advance(3_600_000);
        c.mono.advance(10);
        assert_eq!(
            w.observe(&c),
            (4_600_000, Some((1_000_010, 4_600_000))),
            "stepped forward"
        );
        assert_eq!(
            StepWatch::default().observe(&SimClock::new(5)),
            (5, None),
            "no monotonic clock: no step, the wall time"
        );
    }

    #[test]
    fn sim_clock_moves_only_when_told() {
        let c = SimClock::new(5);
        c.advance(10);
        assert_eq!(c.now_ms(), 15);
        c.set(1);
        assert_eq!(c.now_ms(), 1);
    }
}
