//! Connection-level limits over raw TCP on loopback: a stalled header or
//! body is cut off after its (short, test-configured) timeout, and a
//! connection over the cap is refused. The tests wait for each outcome with
//! a generous patience; none depends on how fast the machine is.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use zm_http::{ConnLimits, HttpConfig};

/// How long to wait for an outcome before failing (never for speed).
const PATIENCE: Duration = Duration::from_secs(60);

struct Server {
    addr: SocketAddr,
    token: String,
    running: common::Running,
    _dir: tempfile::TempDir,
}

async fn start(limits: ConnLimits) -> Server {
    let (dir, store) = common::store().await;
    let a = common::user(&store, "a").await;
    let token = common::token(&store, &a, None, &["mcp:read", "mcp:write"]).await;
    let (listener, addr, base) = common::listen().await;
    let cfg = HttpConfig::local(&base);
    let cancel = CancellationToken::new();
    let state = zm_http::state(store, cfg);
    let refused = state.metrics.connections_refused.clone();
    let app = zm_http::router_with_state(state, cancel.clone());
    Server {
        addr,
        token,
        running: common::serve_counting(listener, app, limits, refused, cancel),
        _dir: dir,
    }
}

impl Server {
    async fn stop(self) {
        self.running.stop().await;
    }
}

fn limits(header: u64, body: u64, max_connections: usize) -> ConnLimits {
    ConnLimits {
        header_timeout: Duration::from_secs(header),
        body_timeout: Duration::from_secs(body),
        write_stall: Duration::from_secs(body),
        max_connections,
    }
}

/// Everything the server sends until it closes the connection (a reset
/// after its answer counts as closing); fails if it never does.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server kept the connection open; it sent {:?}",
        String::from_utf8_lossy(&got)
    );
    String::from_utf8_lossy(&got).into_owned()
}

/// One keep-alive `GET /healthz` on an open connection: its status line.
async fn healthz(stream: &mut TcpStream) -> String {
    get(stream, "/healthz")
        .await
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// One keep-alive `GET` of `path` on an open connection: the whole answer.
async fn get(stream: &mut TcpStream, path: &str) -> String {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let complete = |got: &[u8]| -> bool {
        let text = String::from_utf8_lossy(got);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            return false;
        };
        let len = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        body.len() >= len
    };
    tokio::time::timeout(PATIENCE, async {
        while !complete(&got) {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "closed mid-answer: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("an answer");
    String::from_utf8_lossy(&got).into_owned()
}

/// Does a new connection get `/healthz` answered 200 within the patience,
/// trying again while it is refused (503: no slot free yet)?
async fn served_within_patience(addr: SocketAddr) -> bool {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let mut c = TcpStream::connect(addr).await.unwrap();
            let _ = c
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
                .await;
            if read_until_closed(&mut c).await.starts_with("HTTP/1.1 200") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn a_stalled_header_is_cut_off() {
    let s = start(limits(1, 60, 16)).await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nho")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    read_until_closed(&mut stream).await;
    // The configured second, not hyper's own 30 s (a bound far from both,
    // not a measurement).
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "cut off after {:?}",
        started.elapsed()
    );
    // An idle connection (no byte at all) is closed the same way.
    let mut idle = TcpStream::connect(s.addr).await.unwrap();
    read_until_closed(&mut idle).await;
    // A prompt request is served.
    let mut ok = TcpStream::connect(s.addr).await.unwrap();
    assert_eq!(healthz(&mut ok).await, "HTTP/1.1 200 OK");
    s.stop().await;
}

#[tokio::test]
async fn a_stalled_body_is_cut_off() {
    let s = start(limits(60, 1, 16)).await;
    // REST: the body never completes; the request is refused, the
    // connection closed.
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /api/tools/remember HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"content\": \"abc",
        s.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("stalled past the body timeout"), "{answer}");
    // OAuth: the same.
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    stream
        .write_all(b"POST /oauth/token HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 500\r\n\r\ngrant_type=auth")
        .await
        .unwrap();
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("invalid_request"), "{answer}");
    // MCP: whatever the transport answers, the connection is closed.
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"jsonrpc\": \"2.0\"",
        s.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    read_until_closed(&mut stream).await;
    s.stop().await;
}

/// A client that stops reading its answers cannot hold its connection:
/// once a response write makes no progress for the write-stall time (the
/// body timeout's here), the connection is closed and its slot serves
/// someone else.
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off() {
    let s = start(limits(600, 1, 1)).await;
    // A small receive window, and many pipelined answers it never reads
    // (the contract: about 100 KB each, no token needed).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(s.addr).await.unwrap();
    let request = b"GET /api/contract HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".repeat(400);
    stalled.write_all(&request).await.unwrap();
    // The one slot is freed once the server gives up on the stalled
    // writes: a new connection is then served (503 until then).
    assert!(
        served_within_patience(s.addr).await,
        "a client that reads nothing held the only slot"
    );
    drop(stalled);
    s.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_are_refused() {
    const CAP: usize = 3;
    let s = start(limits(600, 60, CAP)).await;
    // CAP keep-alive connections, each answered once: all are being served.
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        assert_eq!(healthz(&mut c).await, "HTTP/1.1 200 OK");
        held.push(c);
    }
    // One more: told 503 and closed, without sending a byte.
    let mut extra = TcpStream::connect(s.addr).await.unwrap();
    let answer = read_until_closed(&mut extra).await;
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable"),
        "{answer}"
    );
    assert!(answer.contains("retry-after: 1"), "{answer}");
    // The held ones are still served, and /metrics counts the refusal
    // (which no status count holds: no request was read).
    assert_eq!(healthz(&mut held[0]).await, "HTTP/1.1 200 OK");
    let metrics = get(&mut held[1], "/metrics").await;
    assert!(
        metrics.contains("zm_overload_refused_total{what=\"connections\"} 1\n"),
        "{metrics}"
    );
    // Once one closes, its slot is free again.
    drop(held.pop());
    assert!(
        served_within_patience(s.addr).await,
        "a freed slot was never reused"
    );
    drop(held);
    s.stop().await;
}
