//! Limits on the listeners of both APIs: how many connections may be open, how long a new
//! connection may take to send its first bytes (and an HTTP request its headers), and how long
//! a connection may stay silent.
//!
//! Without them, idle connections pile up until the process runs out of file descriptors, and
//! then nothing, `/health` included, can connect. `serve_http` keeps at most
//! `connections_max` open: a new connection beyond it makes the oldest one close gracefully (at
//! once when it is idle, after its request otherwise), so an operator's `/health` always gets
//! in. `capped_incoming` (gRPC) closes connections beyond the cap at once: the AppView holds one
//! long-lived connection, and an RPC in flight must not be cut. Both close a connection that
//! has read and written nothing for `idle_timeout` (`TimedIo`); gRPC pings its clients
//! (HTTP/2 PING) often enough that a live one never looks silent.
//!
//! A gRPC connection also batches its writes (`Writes::Batched`): one HTTP/2 connection
//! carries every RPC of an AppView, and each finished response would otherwise cost its own
//! system call, which on loopback was over a third of the server's CPU for a cheap RPC.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use futures_util::Stream;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tracing::{debug, warn};

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections open at once, at most.
    pub connections_max: usize,
    /// How long a new connection may take to send its first bytes, and an HTTP request its
    /// headers.
    pub header_timeout: Duration,
    /// How long a connection may read nothing before it is closed.
    pub idle_timeout: Duration,
}

impl Default for ListenerLimits {
    fn default() -> ListenerLimits {
        ListenerLimits {
            connections_max: 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// How long the accept loop waits after a failed accept (out of file descriptors, most
/// likely), so that it does not spin while connections close.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// How a connection's writes reach its socket.
#[derive(Clone, Copy, Debug)]
enum Writes {
    /// Each write at once: an HTTP/1.1 connection has one response in flight.
    Direct,
    /// Each write put off by one turn of the scheduler, so that the responses other tasks
    /// finish in that turn join it in one system call. The turn is a yield (the task wakes
    /// itself and goes to the back of the run queue), so a lone response waits only for the
    /// tasks already runnable, never for a timer.
    Batched {
        /// Whether the pending write has had its turn: the next attempt writes.
        put_off: bool,
    },
}

/// A connection's stream, closed with `TimedOut` when nothing is read or written on it for too
/// long (the first deadline is the header timeout), and holding its slot under the listener's
/// cap until dropped.
pub struct TimedIo<T> {
    inner: T,
    idle_timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    /// Whether the client has sent anything: until then the deadline is the header timeout,
    /// which what the server sends first (HTTP/2 settings) must not extend.
    heard: bool,
    writes: Writes,
    _slot: OwnedSemaphorePermit,
}

impl<T> TimedIo<T> {
    fn new(
        inner: T,
        limits: &ListenerLimits,
        slot: OwnedSemaphorePermit,
        writes: Writes,
    ) -> TimedIo<T> {
        TimedIo {
            inner,
            idle_timeout: limits.idle_timeout,
            deadline: Box::pin(tokio::time::sleep(limits.header_timeout)),
            heard: false,
            writes,
            _slot: slot,
        }
    }

    /// Whether this write attempt yields its turn instead (see [`Writes::Batched`]).
    fn put_off(&mut self, cx: &mut Context<'_>) -> bool {
        let Writes::Batched { put_off } = &mut self.writes else {
            return false;
        };
        *put_off = !*put_off;
        if *put_off {
            cx.waker().wake_by_ref();
        }
        *put_off
    }
}

impl<T: AsyncWrite + Unpin> TimedIo<T> {
    /// Runs `write` on the inner stream, unless it is put off; bytes written are not silence,
    /// so a long response is never cut.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if self.put_off(cx) {
            return Poll::Pending;
        }
        let res = write(Pin::new(&mut self.inner), cx);
        if self.heard && matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            let next = Instant::now() + self.idle_timeout;
            self.deadline.as_mut().reset(next);
        }
        res
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let filled = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(res) => {
                if buf.filled().len() > filled {
                    self.heard = true;
                    let next = Instant::now() + self.idle_timeout;
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(res)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection was silent for too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |inner, cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for TimedIo<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts the next connection, retrying after failures (a full file descriptor table).
async fn accept(listener: &TcpListener, what: &'static str) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return stream,
            Err(err) => {
                warn!(listener = what, error = %err, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Serves `router` over HTTP/1.1 and h2c on `listener` with `limits`, until `shutdown`
/// resolves; then lets open requests finish.
pub async fn serve_http(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    assert!(limits.connections_max > 0);
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    // Each open connection's eviction signal, oldest first; a closed one's is gone.
    let mut open: VecDeque<Weak<Notify>> = VecDeque::new();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            stream = accept(&listener, "http") => stream,
            () = &mut shutdown => break,
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                evict_oldest(&mut open);
                let waited =
                    tokio::time::timeout(limits.header_timeout, slots.clone().acquire_owned());
                match waited.await {
                    Ok(Ok(slot)) => slot,
                    _ => {
                        metrics::counter!("starling_api_connections_refused_total", "listener" => "http").increment(1);
                        continue;
                    }
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let evict = Arc::new(Notify::new());
        open.retain(|weak| weak.strong_count() > 0);
        open.push_back(Arc::downgrade(&evict));
        let io = TokioIo::new(TimedIo::new(stream, &limits, slot, Writes::Direct));
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            tokio::pin!(connection);
            let res = tokio::select! {
                res = connection.as_mut() => res,
                () = evict.notified() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
                // The flag only ever turns true, and it is sent after the last clone is made.
                _ = stop.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(err) = res {
                debug!(error = %err, "http connection ended");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it has closed: all slots back means all closed.
    let n_slots = u32::try_from(limits.connections_max).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(n_slots).await;
    Ok(())
}

/// Makes the oldest open connection close gracefully.
fn evict_oldest(open: &mut VecDeque<Weak<Notify>>) {
    while let Some(weak) = open.pop_front() {
        if let Some(evict) = weak.upgrade() {
            evict.notify_one();
            metrics::counter!("starling_api_connections_evicted_total", "listener" => "http")
                .increment(1);
            return;
        }
    }
}

/// The connections of `listener`, each under `limits`; those beyond the cap are closed at once.
pub fn capped_incoming(
    listener: TcpListener,
    limits: ListenerLimits,
) -> impl Stream<Item = io::Result<TimedIo<TcpStream>>> {
    assert!(limits.connections_max > 0);
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    futures_util::stream::unfold((listener, slots), move |(listener, slots)| async move {
        loop {
            let stream = accept(&listener, "grpc").await;
            match slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    // RPCs are small request-response pairs: Nagle's delay would only add latency.
                    let _ = stream.set_nodelay(true);
                    let io =
                        TimedIo::new(stream, &limits, slot, Writes::Batched { put_off: false });
                    return Some((Ok(io), (listener, slots)));
                }
                Err(_) => {
                    metrics::counter!("starling_api_connections_refused_total", "listener" => "grpc").increment(1);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;

    /// Counts how often the task was woken.
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn io(writes: Writes) -> TimedIo<Vec<u8>> {
        let slot = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        TimedIo::new(Vec::new(), &ListenerLimits::default(), slot, writes)
    }

    /// Writes `bytes` once through `io`, returning whether it was written and the wakes so far.
    fn write(io: &mut TimedIo<Vec<u8>>, wakes: &Arc<Wakes>, bytes: &[u8]) -> (bool, usize) {
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let written = match Pin::new(io).poll_write(&mut cx, bytes) {
            Poll::Ready(res) => {
                assert_eq!(res.unwrap(), bytes.len());
                true
            }
            Poll::Pending => false,
        };
        (written, wakes.0.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_batched_write_yields_one_turn_then_writes() {
        let mut io = io(Writes::Batched { put_off: false });
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        assert_eq!(write(&mut io, &wakes, b"ab"), (false, 1));
        assert!(io.inner.is_empty(), "a put-off write wrote");
        assert_eq!(write(&mut io, &wakes, b"ab"), (true, 1));
        assert_eq!(write(&mut io, &wakes, b"cd"), (false, 2));
        assert_eq!(write(&mut io, &wakes, b"cd"), (true, 2));
        assert_eq!(io.inner, b"abcd");
    }

    #[tokio::test]
    async fn a_direct_write_is_written_at_once() {
        let mut io = io(Writes::Direct);
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        assert_eq!(write(&mut io, &wakes, b"ab"), (true, 0));
        assert_eq!(write(&mut io, &wakes, b"cd"), (true, 0));
        assert_eq!(io.inner, b"abcd");
    }
}
