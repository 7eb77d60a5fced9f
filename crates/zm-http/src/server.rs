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
    /// Connections served at once; one more is answered 503 and closed.
    pub max_connections: usize,
}

/// What a connection over the cap is told before it is closed: a bare
/// transport-level refusal, like hyper's own answers to unparseable
/// requests (no request has been read, so there is no route to answer).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// Serve `app` on `listener` until `shutdown` resolves; then stop taking
/// connections (the listener is closed), cancel `cancel` (MCP streams) and
/// let in-flight requests finish before returning.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    cancel: CancellationToken,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Every connection task holds a receiver; the sender closes when all
    // of them are gone.
    let (done_tx, done_rx) = watch::channel(());
    let draining = CancellationToken::new();
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
        tokio::spawn(async move {
            connection(stream, peer, app, limits, draining).await;
            drop(permit);
            drop(done);
        });
    }
    drop(listener);
    cancel.cancel();
    draining.cancel();
    drop(done_rx);
    done_tx.closed().await;
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
) {
    // Without TCP_NODELAY a response written in parts (the MCP event
    // stream: headers, then the event) waits on Nagle's algorithm for the
    // client's delayed ACK: ~40 ms per `/mcp` request.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(target: "zm_http", %peer, error = %e, "cannot set TCP_NODELAY");
    }
    let body_timeout = limits.body_timeout;
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let mut req = req.map(|body| Body::new(DeadlineBody::new(body_timeout, body)));
        req.extensions_mut().insert(ConnectInfo(peer));
        app.clone().oneshot(req)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
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
