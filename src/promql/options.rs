//! The engine's options (Prometheus' query flags that change results).

/// Engine options.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// How far back an instant selector looks for a sample, in ms (Prometheus: 5m).
    pub lookback_ms: i64,
    /// Default subquery resolution in ms when the subquery gives no step (Prometheus: the
    /// global evaluation interval, 1m by default).
    pub default_subquery_step_ms: i64,
    /// Prometheus 2.x semantics: range, lookback and subquery windows include their left
    /// end (`[t - range, t]`), and `rate`/`increase` limit a counter's extrapolation to its zero
    /// point before the half-interval rule, not after. Prometheus 3.0 made windows left-open
    /// (`(t - range, t]`) and swapped that order, the default here. Rule suites written against
    /// Prometheus 2.x (and promtool 2.x's verdicts) need this, and so does answering as a 2.x
    /// backend would.
    pub closed_windows: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lookback_ms: 5 * 60 * 1000,
            default_subquery_step_ms: 60 * 1000,
            closed_windows: false,
        }
    }
}
