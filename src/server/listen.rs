//! The accept loop of the HTTP face, with the limits that keep a hostile or broken client from
//! taking the service down: a cap on open connections (the process keeps file descriptors for
//! SQLite, its sources and its receivers), a deadline for each request's headers (slowloris)
//! and for its body, a longer one for an idle keep-alive connection, a cap on body size for
//! every route, and one on the memory all bodies being read take together.

use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{watch, Semaphore};

use super::deadline::{Activity, ConnTimer, Watched};

/// Limits of the HTTP face (watchfire.yaml's `http.read_timeout`, `http.idle_timeout`,
/// `http.max_connections`).
#[derive(Clone, Debug, PartialEq)]
pub struct ConnLimits {
    /// Open connections at most; further ones are closed as soon as they are accepted. Also
    /// capped below the process' file-descriptor limit (see [`effective_max_connections`]).
    pub max_connections: usize,
    /// A request's headers (from its first byte, or from the accept for a connection's first
    /// request), and then its body, must each arrive within this.
    pub read_timeout: Duration,
    /// A keep-alive connection idle this long after an answer is closed. Longer than clients'
    /// own idle timeouts, so that they close first (see [`super::deadline`]).
    pub idle_timeout: Duration,
    /// Request bodies larger than this are refused with 413 on every route.
    pub max_body_bytes: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 16_384,
            read_timeout: Duration::from_secs(10),
            idle_timeout: IDLE_TIMEOUT,
            max_body_bytes: MAX_BODY_BYTES,
        }
    }
}

/// Above Prometheus' remote-write client's five minutes and a load balancer's usual 60 s.
const IDLE_TIMEOUT: Duration = Duration::from_secs(360);

/// The body limit (axum's default for its extractors, kept explicit so every route has it).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// File descriptors kept for everything but HTTP clients: the state database, connections to
/// sources and receivers, rule and template files.
const RESERVED_FDS: u64 = 512;

/// Raises the soft file-descriptor limit to the hard one (as Go's runtime does for Prometheus
/// and Alertmanager), then caps `configured` below it so that accepting clients can never
/// starve the rest of the process of descriptors.
pub fn effective_max_connections(configured: usize) -> usize {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit only read and write the struct passed.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                if lim.rlim_cur < lim.rlim_max {
                    let raised = libc::rlimit {
                        rlim_cur: lim.rlim_max,
                        rlim_max: lim.rlim_max,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                        lim.rlim_cur = lim.rlim_max;
                    }
                }
                let room = lim.rlim_cur.saturating_sub(RESERVED_FDS).max(16);
                return configured.min(usize::try_from(room).unwrap_or(usize::MAX));
            }
        }
    }
    configured
}

/// Serves `app` on `listener` until `shutdown` completes, within `limits`; then waits for the
/// open connections to finish their requests, at most [`SHUTDOWN_GRACE`].
pub async fn serve_with_limits(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max = effective_max_connections(limits.max_connections);
    let bodies = BodyBudget {
        limits: limits.clone(),
        in_flight_kib: Arc::new(Semaphore::new(BUFFERED_BODIES_KIB)),
    };
    let app = app.layer(axum::middleware::from_fn_with_state(bodies, bounded_body));
    let slots = Arc::new(Semaphore::new(max));
    let refused = Arc::new(Refusals::default());
    let refusing = Arc::new(Semaphore::new(REFUSING_AT_ONCE));
    // Dropped at shutdown: every connection then finishes its request and closes.
    let (stop_tx, stop_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was accepted: wait a
                    // moment rather than spin, as axum and Go's net/http do.
                    tracing::debug!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            refused.note(max);
            refuse(stream, &refusing);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone().into_service::<hyper::body::Incoming>());
        let mut stop = stop_rx.clone();
        let (header, idle) = (limits.read_timeout, limits.idle_timeout);
        tokio::spawn(async move {
            let activity = Arc::new(Activity::default());
            let timer = ConnTimer {
                activity: Arc::clone(&activity),
                header,
                idle,
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(timer).header_read_timeout(header);
            let conn = builder.serve_connection(TokioIo::new(Watched::new(stream, activity)), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::trace!("connection from {peer}: {e}");
                    }
                }
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(slot);
        });
    }
    drop(stop_tx);
    // Every connection holds a slot until it ends; one still busy after the grace period (a
    // long query, a slow client) does not hold the process.
    let all = slots.acquire_many(u32::try_from(max).unwrap_or(u32::MAX));
    if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
        tracing::warn!(
            "shutting down with requests still in flight after {}s",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    Ok(())
}

/// How long a shutdown waits for the requests in flight to finish.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Connections over the cap being answered 503 at once; beyond these they are closed unanswered.
const REFUSING_AT_ONCE: usize = 256;

/// Answers a connection over the cap with 503 without reading its request, then closes it once
/// the client has read the answer (closing with its request unread would reset the connection
/// and could lose the answer), within a second.
fn refuse(stream: tokio::net::TcpStream, refusing: &Arc<Semaphore>) {
    let Ok(permit) = Arc::clone(refusing).try_acquire_owned() else {
        return;
    };
    let _ = stream.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 32\r\n\r\ntoo many connections, try later\n",
    );
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        drop(permit);
    });
}

/// Counts connections refused at the cap, logging at most one warning a second.
#[derive(Default)]
struct Refusals {
    last_log_s: AtomicI64,
    since_log: AtomicI64,
}

impl Refusals {
    fn note(&self, max: usize) {
        let n = self.since_log.fetch_add(1, Ordering::Relaxed) + 1;
        let now = chrono::Utc::now().timestamp();
        if self.last_log_s.swap(now, Ordering::Relaxed) != now {
            self.since_log.store(0, Ordering::Relaxed);
            tracing::warn!("{max} HTTP connections open: closed {n} more (http.max_connections)");
        }
    }
}

/// Request bodies buffered at once, in KiB, over all connections: with the per-body limit alone,
/// every connection could hold 2 MiB (32 GiB at the connection cap).
const BUFFERED_BODIES_KIB: usize = 256 * 1024;

/// The body limits and the memory all bodies being read may take.
#[derive(Clone)]
struct BodyBudget {
    limits: ConnLimits,
    in_flight_kib: Arc<Semaphore>,
}

/// Reads a request's body before the handler runs: within the read timeout (408 after it,
/// a slow body holds no handler), up to the size limit (413), for every route, and while
/// the bodies in flight fit in [`BUFFERED_BODIES_KIB`] (503 otherwise; a body of unknown
/// length counts as the size limit until it is read).
async fn bounded_body(
    axum::extract::State(budget): axum::extract::State<BodyBudget>,
    req: Request,
    next: Next,
) -> Result<Response, Infallible> {
    let limits = &budget.limits;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return Ok(too_large(limits.max_body_bytes));
    }
    let may_have_body = match declared {
        Some(n) => n > 0,
        None => req.headers().contains_key(header::TRANSFER_ENCODING),
    };
    let _held = if may_have_body {
        let bytes = declared.unwrap_or(limits.max_body_bytes as u64);
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        match Arc::clone(&budget.in_flight_kib).try_acquire_many_owned(kib) {
            Ok(p) => Some(p),
            Err(_) => {
                return Ok((
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many request bodies in flight, try later\n",
                )
                    .into_response())
            }
        }
    } else {
        None
    };
    let (parts, body) = req.into_parts();
    let read = axum::body::to_bytes(body, limits.max_body_bytes);
    let bytes = match tokio::time::timeout(limits.read_timeout, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) if is_length_limit(&e) => return Ok(too_large(limits.max_body_bytes)),
        Ok(Err(_)) => return Ok((StatusCode::BAD_REQUEST, "could not read the request body\n").into_response()),
        Err(_) => {
            return Ok((StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time\n").into_response())
        }
    };
    Ok(next.run(Request::from_parts(parts, Body::from(bytes))).await)
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

fn too_large(max: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body larger than {max} bytes\n"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_stay_below_the_descriptor_limit() {
        let n = effective_max_connections(usize::MAX);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert!((n as u64) < lim.rlim_cur, "{n} >= {}", lim.rlim_cur);
        assert_eq!(effective_max_connections(3), 3);
    }
}
