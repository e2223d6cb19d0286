//! The deadline hyper's `header_read_timeout` waits for, told apart by what the connection is
//! doing. hyper starts that timer as soon as it waits for a request's head, so on its own it
//! closes a keep-alive connection that has been idle for the header timeout. Clients keep idle
//! connections far longer (Prometheus' remote-write client five minutes, Go's transport 90 s),
//! and a server that closes first races the client's next request on that connection: the
//! client writes it into a closed socket and gets EOF or a broken pipe, and a POST is not
//! retried. So, as Go's net/http does: a connection's first request and any request whose first
//! byte has arrived get the header timeout; a connection idle after an answer gets the longer
//! idle timeout.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What one connection has done, shared by its stream and its timer.
#[derive(Default)]
pub(super) struct Activity {
    /// An answer has been written: waiting for another request is keep-alive idling.
    answered: AtomicBool,
    /// When the first byte read since the timer was last armed arrived.
    first_byte: Mutex<Option<Instant>>,
}

impl Activity {
    fn arm(&self) {
        *self.first_byte.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Notes a write's outcome, passed through: bytes written are (part of) an answer.
    fn wrote(&self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.answered.store(true, Ordering::Relaxed);
        }
        r
    }

    fn read_some(&self) {
        let mut first = self.first_byte.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert_with(Instant::now);
    }

    /// When a head armed at `armed` must have arrived by.
    fn deadline(&self, armed: Instant, header: Duration, idle: Duration) -> Instant {
        if !self.answered.load(Ordering::Relaxed) {
            return armed + header;
        }
        match *self.first_byte.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(t) => t.max(armed) + header,
            None => armed + idle,
        }
    }
}

/// The TCP stream of a connection, noting reads and writes in its [`Activity`].
pub(super) struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub(super) fn new(inner: S, activity: Arc<Activity>) -> Self {
        Watched { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read_some();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.activity.wrote(Pin::new(&mut this.inner).poll_write(cx, data))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.activity
            .wrote(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// hyper's timer for one connection: the header deadline it arms becomes the connection's
/// [`Activity::deadline`]. hyper's HTTP/1 server uses its timer for that deadline only.
pub(super) struct ConnTimer {
    pub(super) activity: Arc<Activity>,
    pub(super) header: Duration,
    pub(super) idle: Duration,
}

impl hyper::rt::Timer for ConnTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Plain(Box::pin(tokio::time::sleep(duration))))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        // hyper arms the header deadline as `now + header`; anything else is a plain sleep.
        let armed = deadline.checked_sub(self.header).unwrap_or(deadline);
        self.activity.arm();
        let at = self.activity.deadline(armed, self.header, self.idle);
        Box::pin(HeadDeadline {
            activity: Arc::clone(&self.activity),
            armed,
            header: self.header,
            idle: self.idle,
            sleep: Box::pin(tokio::time::sleep_until(at.into())),
        })
    }
}

struct Plain(Pin<Box<tokio::time::Sleep>>);

impl Future for Plain {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().0.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for Plain {}

/// Waits until the connection's deadline, which moves from the idle one to the header one
/// when a byte arrives (hyper polls it again whenever the connection wakes).
struct HeadDeadline {
    activity: Arc<Activity>,
    armed: Instant,
    header: Duration,
    idle: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Future for HeadDeadline {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let at = tokio::time::Instant::from(this.activity.deadline(this.armed, this.header, this.idle));
        if this.sleep.deadline() != at {
            this.sleep.as_mut().reset(at);
        }
        this.sleep.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HeadDeadline {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_request_and_a_started_head_get_the_header_timeout_an_idle_keep_alive_the_idle_one() {
        let (h, i) = (Duration::from_secs(10), Duration::from_secs(360));
        let a = Activity::default();
        let armed = Instant::now();
        // A fresh connection that sends nothing is cut at the header timeout.
        assert_eq!(a.deadline(armed, h, i), armed + h);
        a.answered.store(true, Ordering::Relaxed);
        a.arm();
        assert_eq!(a.deadline(armed, h, i), armed + i);
        // Once the next head starts arriving, it has the header timeout from its first byte.
        a.read_some();
        let first = a.first_byte.lock().unwrap().unwrap();
        assert_eq!(a.deadline(armed, h, i), first.max(armed) + h);
        // Later bytes don't move it (a byte at a time is slowloris).
        a.read_some();
        assert_eq!(a.first_byte.lock().unwrap().unwrap(), first);
        a.arm();
        assert_eq!(a.deadline(armed, h, i), armed + i);
    }
}
