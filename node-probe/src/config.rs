//! Command-line flags (each also settable from the environment, for the DaemonSet).

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "node-probe",
    version,
    about = "NVML GPU probe for watchfire: /metrics and critical-event push"
)]
pub struct Args {
    /// Address to serve /metrics on.
    #[arg(long, env = "NODE_PROBE_LISTEN", default_value = "0.0.0.0:9842")]
    pub listen: String,

    /// NVML library to load: a file name searched like dlopen does, or a path.
    #[arg(long, env = "NODE_PROBE_NVML_LIB", default_value = "libnvidia-ml.so.1")]
    pub nvml_lib: PathBuf,

    /// How often to read every GPU (XID events are handled as they come, not polled).
    #[arg(long, env = "NODE_PROBE_POLL_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub poll_interval: Duration,

    /// How often to retry loading NVML while it is not available.
    #[arg(long, env = "NODE_PROBE_NVML_RETRY_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub nvml_retry_interval: Duration,

    /// The `node` label; by default this machine's host name.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,

    /// The `cluster` label; left out when empty.
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster: String,

    /// Where to POST critical events: an Alertmanager-compatible /api/v2/alerts URL (watchfire's
    /// ingest or an Alertmanager). A URL without a path gets /api/v2/alerts. http:// only.
    #[arg(long, env = "NODE_PROBE_PUSH_URL")]
    pub push_url: Option<String>,

    /// A file holding a bearer token to send with each push.
    #[arg(long, env = "NODE_PROBE_PUSH_TOKEN_FILE")]
    pub push_token_file: Option<PathBuf>,

    /// Alerts kept for retry while the push URL is unreachable; the oldest go first.
    #[arg(long, env = "NODE_PROBE_PUSH_QUEUE_SIZE", default_value_t = 256)]
    pub push_queue_size: usize,

    /// How long a pushed alert stays firing at the receiver (its endsAt - startsAt).
    #[arg(long, env = "NODE_PROBE_ALERT_TTL", default_value = "1h", value_parser = parse_duration)]
    pub alert_ttl: Duration,

    /// A runbook link added to pushed alerts as the runbook_url annotation.
    #[arg(long, env = "NODE_PROBE_RUNBOOK_URL")]
    pub runbook_url: Option<String>,

    /// Do not watch NVML events for XIDs.
    #[arg(long)]
    pub no_xid_events: bool,
}

/// Parses `500ms`, `5s`, `2m`, `1h`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a duration like 500ms, 5s, 2m, 1h"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !(0.01..=86_400.0 * 7.0).contains(&secs) {
        return Err(format!("{s:?}: must be between 10ms and 7 days"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("x").is_err());
    }
}
