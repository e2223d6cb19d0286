//! The notification history over HTTP: `GET /api/v1/notifications`, newest first, filtered by
//! `alert` (an alert's name or fingerprint), `receiver`, `since` and `until` (RFC 3339 or unix
//! seconds) and `limit` (1 to 10,000; 1,000 by default). An unknown parameter, a repeated one
//! or a malformed value is a 400. The events name receivers and integration kinds, never their
//! URLs or keys (delivery errors are kept with their URLs cut out).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value as Json};

use super::{error, form_decode, AppState};
use crate::state::{HistoryFilter, HistoryRow};

const DEFAULT_LIMIT: usize = 1_000;
const MAX_LIMIT: usize = 10_000;

pub(super) fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/v1/notifications", get(history))
        .with_state(state)
}

async fn history(State(st): State<AppState>, RawQuery(q): RawQuery) -> Response {
    let f = match parse(q.as_deref()) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    match st.svc.notification_history(&f) {
        Ok(rows) => axum::Json(json!({"status": "success", "data": rows.iter().map(row_json).collect::<Vec<_>>()}))
            .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e),
    }
}

/// One event as the API shows it.
pub(super) fn row_json(r: &HistoryRow) -> Json {
    json!({
        "at": super::go_time(Some(r.at)),
        "fingerprint": r.fingerprint,
        "alertname": r.alertname,
        "status": r.status,
        "groupKey": r.group_key,
        "receiver": r.receiver,
        "integration": r.integration,
        "outcome": r.outcome,
        "detail": r.detail,
    })
}

/// The filter a query string asks for.
pub(super) fn parse(q: Option<&str>) -> Result<HistoryFilter, String> {
    let mut f = HistoryFilter {
        limit: DEFAULT_LIMIT,
        ..HistoryFilter::default()
    };
    let mut seen: Vec<String> = Vec::new();
    for kv in q.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let (k, v) = (form_decode(k), form_decode(v));
        if seen.contains(&k) {
            return Err(format!("parameter {k:?} given twice"));
        }
        seen.push(k.clone());
        match k.as_str() {
            "alert" | "receiver" if v.is_empty() => return Err(format!("empty {k}")),
            "alert" => f.alert = Some(v),
            "receiver" => f.receiver = Some(v),
            "since" => f.since = Some(parse_time(&v)?),
            "until" => f.until = Some(parse_time(&v)?),
            "limit" => {
                f.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| format!("invalid limit {v:?}: a whole number from 1 to {MAX_LIMIT}"))?
            }
            _ => {
                return Err(format!(
                    "unknown parameter {k:?} (known: alert, receiver, since, until, limit)"
                ))
            }
        }
    }
    if let (Some(a), Some(b)) = (f.since, f.until) {
        if a > b {
            return Err("since is after until".into());
        }
    }
    Ok(f)
}

/// RFC 3339, or unix seconds (with decimals); in ms.
fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(x) = s.parse::<f64>() {
        if x.is_finite() && (x * 1000.0).abs() < 9.2e18 {
            return Ok((x * 1000.0).round() as i64);
        }
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("cannot parse {s:?} as a time (RFC 3339 or unix seconds)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_strictly() {
        let f = parse(Some(
            "alert=GPUHot&receiver=team%2Da&since=2024-01-01T00:00:00Z&until=1704067300&limit=5",
        ))
        .unwrap();
        assert_eq!(f.alert.as_deref(), Some("GPUHot"));
        assert_eq!(f.receiver.as_deref(), Some("team-a"));
        assert_eq!(f.since, Some(1_704_067_200_000));
        assert_eq!(f.until, Some(1_704_067_300_000));
        assert_eq!(f.limit, 5);
        assert_eq!(parse(None).unwrap().limit, DEFAULT_LIMIT);
        for bad in [
            "since=yesterday",
            "limit=0",
            "limit=abc",
            "limit=100000",
            "alert=",
            "alerts=x",
            "alert=a&alert=b",
            "since=2024-01-02T00:00:00Z&until=2024-01-01T00:00:00Z",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
