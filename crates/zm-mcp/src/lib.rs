//! # zm-mcp — the MCP surface
//!
//! Tools, resources, prompts and instructions straight from the
//! `zm-contracts` catalogue, over `rmcp`, calling `zm-store`. Both protocol
//! eras (2025-11-25 with `initialize` and sessions; 2026-07-28 stateless
//! with `server/discover`). No SQL and no schema of its own.

pub mod envelope;
pub mod instructions;
pub mod repeated;
pub mod server;

pub use repeated::{
    MarkRepeatedKeys, mark_repeated_argument_key, mark_repeated_argument_key_within,
};
pub use server::{Identity, McpConfig, ZeroMemoryMcp, tools};

use rmcp::ServiceExt;

/// Serve one MCP connection on stdin/stdout until the client hangs up.
pub async fn serve_stdio(server: ZeroMemoryMcp) -> Result<(), String> {
    serve_io(server, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serve one MCP connection of newline-delimited JSON-RPC (the stdio
/// transport) on `read`/`write`, a tool call's repeated argument key
/// marked on the way in ([`repeated`]).
pub async fn serve_io<R, W>(server: ZeroMemoryMcp, read: R, write: W) -> Result<(), String>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    match server.serve((MarkRepeatedKeys::new(read), write)).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        // stdin closed before the first request: a clean exit.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}
