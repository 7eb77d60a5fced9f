//! A tool call whose arguments hold a key twice in one object.
//!
//! REST and OAuth refuse such a body (`zm_contracts::validate::
//! repeated_key`): `serde_json` keeps the last value, while whatever read
//! the message before the server may have used the first. rmcp parses MCP
//! messages itself, so the repeat is found here, on the message's text,
//! before rmcp reads it: over HTTP on the POST body, over stdio on each
//! line (`MarkRepeatedKeys`). The message is handed on with the key's
//! path in its `params._meta` ([`REPEATED_KEY_META`]), and the tool call
//! is answered `validation_failed` naming it, as REST names it. A client
//! that sets that key itself only gets its own call refused.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// The `_meta` key carrying the repeated key's path, relative to the
/// call's `arguments`.
pub const REPEATED_KEY_META: &str = "zero-memory/repeated-argument-key";

/// A `tools/call` message whose arguments repeat a key, written again with
/// the key's path in its `params._meta`; `None` for any other message
/// (nothing to change, or not JSON: rmcp says why).
pub fn mark_repeated_argument_key(message: &[u8]) -> Option<Vec<u8>> {
    // The envelope as rmcp reads it: its fields are a struct's, so a field
    // given twice (`params`, `arguments`, `method`) fails its parse too;
    // only the arguments (a map, read last-wins) are walked. A repeat
    // elsewhere (`_meta`, a key rmcp ignores) does not hide one there.
    #[derive(serde::Deserialize)]
    struct Call<'a> {
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        arguments: Option<&'a serde_json::value::RawValue>,
    }
    let call: Call<'_> = serde_json::from_slice(message).ok()?;
    if call.method != "tools/call" {
        return None;
    }
    let arguments = call.params?.arguments?;
    let path = zm_contracts::validate::repeated_key(arguments.get().as_bytes())?;
    let mut v: Value = serde_json::from_slice(message).ok()?;
    let params = v.get_mut("params")?.as_object_mut()?;
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !meta.is_object() {
        // `null` (rmcp reads it as none) or a value rmcp would refuse.
        *meta = Value::Object(serde_json::Map::new());
    }
    meta.as_object_mut()?
        .insert(REPEATED_KEY_META.to_string(), Value::String(path));
    serde_json::to_vec(&v).ok()
}

/// The longest line looked at: rmcp's own limit, past which it drops the
/// line unread. A longer one is handed on as it came, for rmcp to drop.
const LINE_LIMIT: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// A line's leading UTF-8 byte order mark, which rmcp strips before it
/// parses a line (so must the repeated-key check, or the line passes it).
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// [`mark_repeated_argument_key`] for a stdio line: a leading byte order
/// mark is dropped first, as rmcp drops it, and a marked line that would
/// no longer fit rmcp's limit (marking adds the key's path) loses its
/// arguments instead, keeping the mark: the call is still answered
/// `validation_failed` naming the key, never dropped unanswered.
fn mark_line(line: &[u8]) -> Option<Vec<u8>> {
    let line = line.strip_prefix(BOM).unwrap_or(line);
    mark_repeated_argument_key_within(line, LINE_LIMIT)
}

/// [`mark_repeated_argument_key`], for a transport that reads at most
/// `limit` bytes: a marked message that would no longer fit (marking adds
/// the key's path, and writes numbers again, `1e9` as `1000000000.0`)
/// loses its arguments instead, keeping the mark, so the call is still
/// answered `validation_failed` naming the key rather than refused by
/// the transport for its size.
pub fn mark_repeated_argument_key_within(message: &[u8], limit: usize) -> Option<Vec<u8>> {
    let marked = mark_repeated_argument_key(message)?;
    if marked.len() < limit {
        return Some(marked);
    }
    let mut v: Value = serde_json::from_slice(&marked).ok()?;
    v.get_mut("params")?
        .as_object_mut()?
        .insert("arguments".into(), Value::Object(serde_json::Map::new()));
    serde_json::to_vec(&v).ok()
}

/// What a line is, as far as the session's start cares: a request that
/// starts the session (`initialize`, or a 2026-07-28 request carrying its
/// protocol version), a request rmcp answers while it still waits for the
/// start (a `server/discover` or `ping` probe, or a request it refuses
/// for lacking the version), another JSON-RPC object (a notification, a
/// response), or something else (not an object: rmcp judges it).
#[derive(Debug, PartialEq, Eq)]
enum LineKind {
    Request,
    Probe,
    NotRequest,
    Other,
}

/// The `_meta` key of a 2026-07-28 request's protocol version.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

fn line_kind(line: &[u8]) -> LineKind {
    #[derive(serde::Deserialize)]
    struct Probe {
        method: Option<Value>,
        id: Option<serde::de::IgnoredAny>,
        params: Option<Value>,
    }
    let line = line.strip_prefix(BOM).unwrap_or(line);
    match serde_json::from_slice::<Probe>(line) {
        Ok(Probe {
            method: Some(method),
            id: Some(_),
            params,
        }) => {
            let versioned = params
                .as_ref()
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(PROTOCOL_VERSION_META))
                .is_some();
            match method.as_str() {
                Some("initialize") => LineKind::Request,
                Some("server/discover" | "ping") => LineKind::Probe,
                _ if versioned => LineKind::Request,
                _ => LineKind::Probe,
            }
        }
        Ok(_) => LineKind::NotRequest,
        Err(_) => LineKind::Other,
    }
}

/// Newline-delimited JSON-RPC (MCP's stdio transport) read through
/// [`mark_repeated_argument_key`], line by line; every other byte is handed
/// on unchanged.
pub struct MarkRepeatedKeys<R> {
    inner: R,
    /// The line read so far (without its newline).
    line: Vec<u8>,
    /// What is ready to hand on, from `at`.
    out: Vec<u8>,
    at: usize,
    /// A line over [`LINE_LIMIT`] is being handed on as it comes.
    passing: bool,
    /// A request that starts the session has been handed on ([`LineKind`]).
    /// Until then a notification or a response is dropped (rmcp ends a
    /// session whose start sees one, and a notification is answered by
    /// nothing: a client that cancels its `server/discover` probe of the
    /// newer protocol, answered or not, sends one before `initialize`).
    begun: bool,
    eof: bool,
}

impl<R> MarkRepeatedKeys<R> {
    pub fn new(inner: R) -> Self {
        MarkRepeatedKeys {
            inner,
            line: Vec::new(),
            out: Vec::new(),
            at: 0,
            passing: false,
            begun: false,
            eof: false,
        }
    }

    /// A whole line (without its newline) onto `out`, marked if need be;
    /// `false` when it is dropped (a notification or a response before
    /// the first request), its newline too.
    fn finish_line(&mut self) -> bool {
        let line = std::mem::take(&mut self.line);
        if !self.begun {
            match line_kind(&line) {
                LineKind::Request => self.begun = true,
                LineKind::NotRequest => return false,
                LineKind::Probe | LineKind::Other => {}
            }
        }
        match mark_line(&line) {
            Some(marked) => self.out.extend_from_slice(&marked),
            None => self.out.extend_from_slice(&line),
        }
        true
    }

    /// Bytes just read, split into lines.
    fn take_in(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|b| *b == b'\n');
            let (part, rest) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if self.passing {
                self.out.extend_from_slice(part);
            } else {
                self.line.extend_from_slice(part);
                if self.line.len() > LINE_LIMIT {
                    self.passing = true;
                    let line = std::mem::take(&mut self.line);
                    self.out.extend_from_slice(&line);
                }
            }
            if newline.is_some() {
                let kept = if self.passing {
                    self.passing = false;
                    true
                } else {
                    self.finish_line()
                };
                if kept {
                    self.out.push(b'\n');
                }
            }
            bytes = rest;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for MarkRepeatedKeys<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.at);
                buf.put_slice(&this.out[this.at..this.at + n]);
                this.at += n;
                if this.at == this.out.len() {
                    this.out.clear();
                    this.at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                if this.line.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                // The last line, without a newline.
                let _ = this.finish_line();
                continue;
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
            } else {
                let filled = read.filled().to_vec();
                this.take_in(&filled);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    const CALL: &str = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"remember","arguments":{"content":"a","kind":"fact","content":"b"}}}"#;

    #[test]
    fn a_repeated_argument_is_marked_with_its_path() {
        let marked = mark_repeated_argument_key(CALL.as_bytes()).expect("marked");
        let v: Value = serde_json::from_slice(&marked).unwrap();
        assert_eq!(v["params"]["_meta"][REPEATED_KEY_META], "content");
        assert_eq!(v["params"]["name"], "remember");
        let nested = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":{"progressToken":1},"name":"remember","arguments":{"links":[{"dst":"m","type":"x","type":"y"}]}}}"#;
        let v: Value =
            serde_json::from_slice(&mark_repeated_argument_key(nested.as_bytes()).unwrap())
                .unwrap();
        assert_eq!(v["params"]["_meta"][REPEATED_KEY_META], "links[0].type");
        assert_eq!(
            v["params"]["_meta"]["progressToken"], 1,
            "the client's meta kept"
        );
    }

    /// A repeat elsewhere in the message, or a `_meta` that is not an
    /// object, does not hide one in the arguments.
    #[test]
    fn a_repeat_elsewhere_does_not_hide_one_in_the_arguments() {
        for m in [
            r#"{"z":0,"z":1,"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"remember","arguments":{"content":"a","content":"b"}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":{"k":1,"k":2},"name":"remember","arguments":{"content":"a","content":"b"}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":null,"name":"remember","arguments":{"content":"a","content":"b"}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools\/call","params":{"name":"remember","arguments":{"content":"a","content":"b"}}}"#,
        ] {
            let marked = mark_repeated_argument_key(m.as_bytes())
                .unwrap_or_else(|| panic!("not marked: {m}"));
            let v: Value = serde_json::from_slice(&marked).unwrap();
            assert_eq!(v["params"]["_meta"][REPEATED_KEY_META], "content", "{m}");
        }
    }

    #[test]
    fn other_messages_pass_unchanged() {
        for m in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recall","arguments":{"query":"q"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"a":1,"a":2}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"recall","arguments":{}}}"#,
            "not json tools/call",
        ] {
            assert_eq!(mark_repeated_argument_key(m.as_bytes()), None, "{m}");
        }
    }

    /// What `MarkRepeatedKeys` hands on for `input`, written through a
    /// pipe of `pipe` bytes (so lines arrive split across reads).
    async fn through(input: String, pipe: usize) -> Vec<String> {
        let (mut tx, rx) = tokio::io::duplex(pipe);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(input.as_bytes()).await.unwrap();
        });
        let mut out = Vec::new();
        MarkRepeatedKeys::new(rx)
            .read_to_end(&mut out)
            .await
            .unwrap();
        writer.await.unwrap();
        String::from_utf8(out)
            .unwrap()
            .split('\n')
            .map(str::to_string)
            .collect()
    }

    /// Lines split across reads, blank lines, a CR before a newline and a
    /// last line without a newline.
    #[tokio::test]
    async fn lines_are_read_whole_across_reads() {
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        let plain = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let lines = through(format!("{init}\n{CALL}\n{plain}\r\n\n{CALL}"), 7).await;
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert_eq!(lines[0], init);
        assert_eq!(lines[2], format!("{plain}\r"));
        assert_eq!(lines[3], "");
        for marked in [&lines[1], &lines[4]] {
            let v: Value = serde_json::from_str(marked).unwrap();
            assert_eq!(v["params"]["_meta"][REPEATED_KEY_META], "content");
        }
    }

    /// Before the first request, a notification or a response is dropped
    /// (rmcp would end the session on it), also after a probe (a
    /// `server/discover` or a `ping`, handed on); from the first other
    /// request on, every line is handed on.
    #[tokio::test]
    async fn nothing_but_a_request_begins_the_session() {
        let cancelled =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}"#;
        let response = r#"{"jsonrpc":"2.0","id":9,"result":{}}"#;
        let discover = r#"{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{}}"#;
        let ping = r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#;
        // rmcp refuses a request without the 2026-07-28 version before the
        // start, and waits on.
        let early = r#"{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{}}"#;
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        let lines = through(
            format!(
                "{cancelled}\n{response}\n{discover}\n{cancelled}\n{ping}\n{response}\n{early}\n{cancelled}\n{init}\n{cancelled}\n"
            ),
            64,
        )
        .await;
        assert_eq!(
            lines,
            [discover, ping, early, init, cancelled, ""],
            "{lines:?}"
        );
        // A 2026-07-28 request with its version starts the session.
        let stateless = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let lines = through(format!("{stateless}\n{cancelled}\n"), 64).await;
        assert_eq!(lines, [stateless, cancelled, ""], "{lines:?}");
    }

    /// A line led by a byte order mark is checked as rmcp reads it.
    #[tokio::test]
    async fn a_byte_order_mark_hides_no_repeat() {
        let lines = through(format!("\u{feff}{CALL}\n"), 64).await;
        let v: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["params"]["_meta"][REPEATED_KEY_META], "content");
    }

    /// A call near the limit that marking would push past it keeps the
    /// mark and loses its arguments: it is answered, never dropped.
    #[test]
    fn a_marked_line_still_fits_the_limit() {
        let head = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"remember","arguments":{"kind":"fact","content":"b","content":""#;
        let tail = r#""}}}"#;
        let fill = "a".repeat(LINE_LIMIT - 1 - head.len() - tail.len());
        let line = format!("{head}{fill}{tail}");
        assert_eq!(line.len(), LINE_LIMIT - 1, "fits as sent");
        let marked = mark_line(line.as_bytes()).expect("marked");
        assert!(marked.len() < LINE_LIMIT);
        let v: Value = serde_json::from_slice(&marked).unwrap();
        assert_eq!(v["params"]["_meta"][REPEATED_KEY_META], "content");
        assert_eq!(v["params"]["arguments"], serde_json::json!({}));
    }

    /// A line over the limit is handed on as it came, and the next one is
    /// read again.
    #[tokio::test]
    async fn a_line_over_the_limit_passes_untouched() {
        let long = "x".repeat(LINE_LIMIT + 10);
        let lines = through(format!("{long}\n{CALL}\n"), 1 << 16).await;
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].len(), LINE_LIMIT + 10);
        let v: Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(v["params"]["_meta"][REPEATED_KEY_META], "content");
        assert_eq!(lines[2], "");
    }
}
