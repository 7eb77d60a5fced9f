//! Export cursors (`exc_…`): an opaque keyset position in the export order
//! (`created_at, seq`), signed and bound to the user it was issued to.
//!
//! A cursor is `exc_` + base64url of
//!
//! ```text
//! version (1) · created_at, epoch ms (8) · seq (8) · HMAC-SHA256 tag (12)
//! ```
//!
//! It is only a position: it grants nothing. Each page re-applies the
//! caller's visibility and `scopes`, so a cursor replayed with other scopes
//! reads what those scopes allow after that position and nothing more. The
//! tag (keyed by the database's thread key, bound to the owner) makes a
//! cursor of another user, an altered one or garbage a `validation_failed`
//! on `cursor` rather than an arbitrary position.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use zm_contracts::ToolError;
use zm_contracts::validate::{FieldError, validation_error};

use crate::threads::ThreadKey;

const PREFIX: &str = "exc_";
const VERSION: u8 = 1;
const PURPOSE: &str = "export-cursor";
const BODY_LEN: usize = 17;

/// A position in the export order: the last memory of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExportPosition {
    pub created_at: i64,
    pub seq: i64,
}

/// The cursor for the page after `pos`, for `owner`.
pub(crate) fn encode(key: &ThreadKey, owner: &str, pos: ExportPosition) -> String {
    let mut body = Vec::with_capacity(BODY_LEN + 12);
    body.push(VERSION);
    body.extend_from_slice(&pos.created_at.to_be_bytes());
    body.extend_from_slice(&pos.seq.to_be_bytes());
    let tag = key.purpose_tag(PURPOSE, owner, &body);
    body.extend_from_slice(&tag);
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&body))
}

/// The position a cursor of `owner` names; anything else is
/// `validation_failed` on `cursor`.
pub(crate) fn decode(
    key: &ThreadKey,
    owner: &str,
    cursor: &str,
) -> Result<ExportPosition, ToolError> {
    parse(key, owner, cursor).ok_or_else(|| {
        validation_error(vec![FieldError {
            path: "cursor".into(),
            reason:
                "not a cursor this server issued to you: pass a `next_cursor` from an earlier page"
                    .into(),
        }])
    })
}

fn parse(key: &ThreadKey, owner: &str, cursor: &str) -> Option<ExportPosition> {
    let body = URL_SAFE_NO_PAD.decode(cursor.strip_prefix(PREFIX)?).ok()?;
    if body.len() <= BODY_LEN || body[0] != VERSION {
        return None;
    }
    let (signed, tag) = body.split_at(BODY_LEN);
    if !crate::oauth::ct_eq(tag, key.purpose_tag(PURPOSE, owner, signed)) {
        return None;
    }
    Some(ExportPosition {
        created_at: i64::from_be_bytes(signed[1..9].try_into().ok()?),
        seq: i64::from_be_bytes(signed[9..17].try_into().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ThreadKey {
        ThreadKey::from_hex(&ThreadKey::generate_hex()).expect("a key")
    }

    const POS: ExportPosition = ExportPosition {
        created_at: 1_780_000_000_123,
        seq: 42,
    };

    #[test]
    fn round_trip_is_owner_bound_and_short() {
        let k = key();
        let c = encode(&k, "usr_a", POS);
        assert!(c.starts_with(PREFIX));
        assert!(c.len() <= zm_contracts::MAX_EXPORT_CURSOR, "{c}");
        assert_eq!(decode(&k, "usr_a", &c).ok(), Some(POS));
        assert!(decode(&k, "usr_b", &c).is_err(), "another owner");
        assert!(decode(&key(), "usr_a", &c).is_err(), "another key");
    }

    #[test]
    fn garbage_altered_and_thread_tokens_are_refused_on_the_cursor_field() {
        let k = key();
        let c = encode(&k, "usr_a", POS);
        let mut chars: Vec<char> = c.chars().collect();
        let i = chars.len() / 2;
        chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
        let altered: String = chars.into_iter().collect();
        let thread = crate::threads::issue(
            &k,
            "usr_a",
            crate::threads::Conversation::fresh(),
            "proj.x.y",
            POS.created_at,
        )
        .expect("a thread")
        .token;
        let relabelled = format!("{PREFIX}{}", thread.trim_start_matches("thr_"));
        for bad in [
            altered.as_str(),
            "",
            "exc_",
            "exc_!!",
            "x",
            &thread,
            &relabelled,
        ] {
            let e = decode(&k, "usr_a", bad).expect_err(bad);
            assert_eq!(e.code, zm_contracts::ErrorCode::ValidationFailed, "{bad}");
            let text = serde_json::to_string(&e).unwrap_or_default();
            assert!(text.contains("cursor"), "{bad}: {text}");
        }
    }
}
