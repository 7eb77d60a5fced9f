//! Serving the router on a TCP listener: HTTP/1.1 connections with a
//! header-read timeout, a request-body deadline and a cap on concurrent
//! connections, each request carrying the peer address (`ConnectInfo`),
//! and a graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tower_http::timeout::DeadlineBody;

/// What one client connection may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Time allowed for a request's headers to arrive, from the moment the
    /// server waits for them (so it also ends idle keep-alive connections).
    /// Past it the connection is closed.
    pub header_timeout: Duration,
    /// Time allowed for a request's whole body to arrive, from the end of
    /// its headers. Past it reading the body fails (the request is refused)
    /// and the connection is closed.
    pub body_timeout: Duration,
    /// How long writing a response may make no progress (a client that
    /// stopped reading): past it the connection is closed. Long, since the
    /// system wakes a writer only once a third of its send buffer has
    /// drained: a slow reader's progress comes in large steps.
    pub write_stall: Duration,
    /// Connections served at once; one more is answered 503 and closed.
    pub max_connections: usize,
}

/// What a connection over the cap is told before it is closed: a bare
/// transport-level refusal, like hyper's own answers to unparseable
/// requests (no request has been read, so there is no route to answer).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// How long a shutdown waits for the requests in flight to be answered
/// before it ends the MCP sessions regardless.
const ANSWER_GRACE: Duration = Duration::from_secs(30);
/// How long it then waits for the connections to close before it returns
/// anyway (a client that stopped reading holds its connection open).
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// Is `req` a request a shutdown waits to answer? Not MCP's standalone
/// event stream (`GET /mcp`), which lasts as long as its session, nor its
/// resumption (`Last-Event-ID` of the form `index`); a `GET` that resumes
/// a call's stream (`index/request`) may be replaying the call's answer,
/// and is waited for like the call.
fn awaited<B>(req: &hyper::Request<B>) -> bool {
    let standalone_stream = req.method() == hyper::Method::GET
        && req.uri().path() == "/mcp"
        && !req
            .headers()
            .get("last-event-id")
            .is_some_and(|id| id.as_bytes().contains(&b'/'));
    !standalone_stream
}

/// The requests being answered: counted from their arrival (their head
/// read) until their response's body has been sent (or dropped), except
/// MCP's standalone event stream, which lasts as long as its session
/// ([`awaited`]).
#[derive(Debug, Default)]
struct InFlight(std::sync::atomic::AtomicUsize);

impl InFlight {
    fn enter(self: &Arc<Self>) -> Answering {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Answering(self.clone())
    }

    fn is_idle(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst) == 0
    }

    /// Until no request is being answered (checked every 20 ms: this runs
    /// once, at shutdown).
    async fn idle(&self) {
        while !self.is_idle() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One request being answered; dropped with its response's body.
#[derive(Debug)]
struct Answering(Arc<InFlight>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A response body that holds its request's place in [`InFlight`].
struct Counted {
    inner: Body,
    _answering: Answering,
}

impl hyper::body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serve `app` on `listener` until `shutdown` resolves; then stop taking
/// connections (the listener is closed), let the requests in flight be
/// answered — MCP calls included, their sessions still open — and only
/// then cancel `cancel` (the MCP sessions and their event streams), and
/// return once the connections have closed. Each wait is bounded
/// ([`ANSWER_GRACE`], [`CLOSE_GRACE`]), so a stuck client cannot hold the
/// process up. A connection refused at the cap is counted in
/// `refused_total` (the app's [`crate::Metrics::connections_refused`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    refused_total: Arc<std::sync::atomic::AtomicU64>,
    cancel: CancellationToken,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Every connection task holds a receiver; the sender closes when all
    // of them are gone.
    let (done_tx, done_rx) = watch::channel(());
    let draining = CancellationToken::new();
    let in_flight = Arc::new(InFlight::default());
    let mut refused: u64 = 0;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                accept_failed(&e).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if refused == 0 {
                tracing::warn!(target: "zm_http", max_connections = limits.max_connections, "connection cap reached: refusing new connections");
            }
            refused += 1;
            refused_total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            refuse(&stream);
            continue;
        };
        if refused > 0 {
            tracing::info!(target: "zm_http", refused, "accepting connections again");
            refused = 0;
        }
        let app = app.clone();
        let draining = draining.clone();
        let done = done_rx.clone();
        let in_flight = in_flight.clone();
        tokio::spawn(async move {
            connection(stream, peer, app, limits, draining, in_flight).await;
            drop(permit);
            drop(done);
        });
    }
    drop(listener);
    // Idle connections close; busy ones once their request is answered.
    draining.cancel();
    if tokio::time::timeout(ANSWER_GRACE, in_flight.idle())
        .await
        .is_err()
    {
        tracing::warn!(target: "zm_http", grace_s = ANSWER_GRACE.as_secs(), "shutdown: requests still unanswered; ending the MCP sessions");
    }
    // Now the MCP sessions, and with them their event streams.
    cancel.cancel();
    drop(done_rx);
    if tokio::time::timeout(CLOSE_GRACE, done_tx.closed())
        .await
        .is_err()
    {
        tracing::warn!(target: "zm_http", grace_s = CLOSE_GRACE.as_secs(), "shutdown: connections still open; closing anyway");
    }
    Ok(())
}

/// Serve one connection until it ends, or — once `draining` — until its
/// request in flight is answered.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ConnLimits,
    draining: CancellationToken,
    in_flight: Arc<InFlight>,
) {
    // Without TCP_NODELAY a response written in parts (the MCP event
    // stream: headers, then the event) waits on Nagle's algorithm for the
    // client's delayed ACK: ~40 ms per `/mcp` request.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(target: "zm_http", %peer, error = %e, "cannot set TCP_NODELAY");
    }
    let body_timeout = limits.body_timeout;
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let answering = awaited(&req).then(|| in_flight.enter());
        let mut req = req.map(|body| Body::new(DeadlineBody::new(body_timeout, body)));
        req.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        async move {
            let resp = app.oneshot(req).await?;
            Ok::<_, std::convert::Infallible>(match answering {
                Some(answering) => resp.map(|inner| {
                    Body::new(Counted {
                        inner,
                        _answering: answering,
                    })
                }),
                None => resp,
            })
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let stream = WriteDeadline {
        inner: stream,
        limit: limits.write_stall,
        stalled: None,
    };
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(target: "zm_http", %peer, error = %e, "connection ended");
            }
            return;
        }
        () = draining.cancelled() => conn.as_mut().graceful_shutdown(),
    }
    if let Err(e) = conn.await {
        tracing::debug!(target: "zm_http", %peer, error = %e, "connection ended");
    }
}

/// A connection whose writes fail once one has made no progress for
/// `limit`: a client that stops reading (its window full) cannot hold a
/// connection slot, or a shutdown, for ever. An idle connection (an event
/// stream with nothing to send) is not writing, so it is not cut.
struct WriteDeadline {
    inner: TcpStream,
    limit: Duration,
    /// Set when a write first found the socket full; cleared by progress.
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl WriteDeadline {
    fn guard<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        polled: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::future::Future as _;
        use std::task::Poll;
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if stalled.as_mut().poll(cx).is_ready() {
            self.stalled = None;
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took nothing of the response for the write-stall time",
            )));
        }
        Poll::Pending
    }
}

impl tokio::io::AsyncRead for WriteDeadline {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for WriteDeadline {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, polled)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.guard(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, polled)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.inner).poll_shutdown(cx);
        this.guard(cx, polled)
    }
}

/// Tell a connection over the cap to come back later, without waiting on
/// it (a client that does not read gets nothing), and close it.
fn refuse(stream: &TcpStream) {
    let _ = stream.try_write(BUSY);
}

/// Per-connection accept errors are the client's; others (out of file
/// descriptors) are the server's: log and pause instead of spinning.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(target: "zm_http", error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::awaited;

    fn request(method: &str, path: &str, last_event_id: Option<&str>) -> hyper::Request<()> {
        let mut b = hyper::Request::builder().method(method).uri(path);
        if let Some(id) = last_event_id {
            b = b.header("last-event-id", id);
        }
        b.body(()).unwrap()
    }

    /// A shutdown waits for calls and for a call's stream resumed, not for
    /// the session's standalone stream, opened or resumed: a client that
    /// reconnects it (`Last-Event-ID: 0`) would otherwise hold every
    /// shutdown for its whole grace.
    #[test]
    fn a_shutdown_waits_for_calls_not_for_the_standalone_stream() {
        assert!(awaited(&request("POST", "/mcp", None)));
        assert!(awaited(&request("GET", "/api/memories", None)));
        assert!(
            awaited(&request("GET", "/mcp", Some("3/7"))),
            "a call's stream"
        );
        assert!(
            !awaited(&request("GET", "/mcp", None)),
            "the standalone stream"
        );
        assert!(
            !awaited(&request("GET", "/mcp", Some("0"))),
            "the standalone stream resumed"
        );
    }
}
