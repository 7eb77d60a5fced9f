//! Page cursors: an opaque keyset position, signed and bound to the user
//! it was issued to.
//!
//! - `exc_…`, `export_memories`: the export order (`created_at, seq`);
//! - `cfc_…`, `list_conflicts`: newest first (`created_at, id`).
//!
//! A cursor is its prefix + base64url of
//!
//! ```text
//! version (1) · position · HMAC-SHA256 tag (12)
//! ```
//!
//! (export: created_at, epoch ms (8) · seq (8); conflicts: created_at,
//! epoch ms (8) · the dispute id's bytes). The tag is keyed by the
//! database's thread key and bound to the owner and to the cursor's kind.
//!
//! A cursor is only a position: it grants nothing. Each page re-applies
//! the caller's visibility and filters, so a cursor replayed with other
//! scopes or another status reads what those allow after that position
//! and nothing more. A cursor of another user or another kind, an altered
//! one or garbage is a `validation_failed` on `cursor` rather than an
//! arbitrary position.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use zm_contracts::ToolError;
use zm_contracts::validate::field_error;

use crate::threads::{TAG_LEN, ThreadKey};

const VERSION: u8 = 1;

/// One kind of cursor: what it starts with and what its tag is bound to.
struct Kind {
    prefix: &'static str,
    purpose: &'static str,
}

const EXPORT: Kind = Kind {
    prefix: "exc_",
    purpose: "export-cursor",
};
const CONFLICTS: Kind = Kind {
    prefix: "cfc_",
    purpose: "conflicts-cursor",
};

/// A position in the export order: the last memory of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExportPosition {
    pub created_at: i64,
    pub seq: i64,
}

/// A position in `list_conflicts`' order: the last conflict of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConflictPosition {
    pub created_at: i64,
    pub id: String,
}

/// The cursor for the export page after `pos`, for `owner`.
pub(crate) fn encode(key: &ThreadKey, owner: &str, pos: ExportPosition) -> String {
    let mut at = pos.created_at.to_be_bytes().to_vec();
    at.extend_from_slice(&pos.seq.to_be_bytes());
    seal(key, &EXPORT, owner, &at)
}

/// The export position a cursor of `owner` names; anything else is
/// `validation_failed` on `cursor`.
pub(crate) fn decode(
    key: &ThreadKey,
    owner: &str,
    cursor: &str,
) -> Result<ExportPosition, ToolError> {
    open(key, &EXPORT, owner, cursor)
        .and_then(|at| {
            let (created, seq) = (at.get(..8)?, at.get(8..)?);
            Some(ExportPosition {
                created_at: i64::from_be_bytes(created.try_into().ok()?),
                seq: i64::from_be_bytes(seq.try_into().ok()?),
            })
        })
        .ok_or_else(refused)
}

/// The cursor for the `list_conflicts` page after `pos`, for `owner`.
pub(crate) fn encode_conflicts(key: &ThreadKey, owner: &str, pos: &ConflictPosition) -> String {
    let mut at = pos.created_at.to_be_bytes().to_vec();
    at.extend_from_slice(pos.id.as_bytes());
    seal(key, &CONFLICTS, owner, &at)
}

/// The `list_conflicts` position a cursor of `owner` names; anything else
/// is `validation_failed` on `cursor`.
pub(crate) fn decode_conflicts(
    key: &ThreadKey,
    owner: &str,
    cursor: &str,
) -> Result<ConflictPosition, ToolError> {
    open(key, &CONFLICTS, owner, cursor)
        .and_then(|at| {
            let (created, id) = (at.get(..8)?, at.get(8..)?);
            Some(ConflictPosition {
                created_at: i64::from_be_bytes(created.try_into().ok()?),
                id: String::from_utf8(id.to_vec()).ok()?,
            })
        })
        .ok_or_else(refused)
}

fn seal(key: &ThreadKey, kind: &Kind, owner: &str, at: &[u8]) -> String {
    let mut body = Vec::with_capacity(1 + at.len() + TAG_LEN);
    body.push(VERSION);
    body.extend_from_slice(at);
    let tag = key.purpose_tag(kind.purpose, owner, &body);
    body.extend_from_slice(&tag);
    format!("{}{}", kind.prefix, URL_SAFE_NO_PAD.encode(&body))
}

/// The position bytes of a genuine cursor of `kind` for `owner`.
fn open(key: &ThreadKey, kind: &Kind, owner: &str, cursor: &str) -> Option<Vec<u8>> {
    let body = URL_SAFE_NO_PAD
        .decode(cursor.strip_prefix(kind.prefix)?)
        .ok()?;
    if body.len() <= 1 + TAG_LEN || body[0] != VERSION {
        return None;
    }
    let (signed, tag) = body.split_at(body.len() - TAG_LEN);
    if !crate::oauth::ct_eq(tag, key.purpose_tag(kind.purpose, owner, signed)) {
        return None;
    }
    Some(signed[1..].to_vec())
}

fn refused() -> ToolError {
    field_error(
        "cursor",
        "not a cursor this server issued to you: pass a `next_cursor` from an earlier page",
    )
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
        assert!(c.starts_with(EXPORT.prefix));
        assert!(c.len() <= zm_contracts::MAX_PAGE_CURSOR, "{c}");
        assert_eq!(decode(&k, "usr_a", &c).ok(), Some(POS));
        assert!(decode(&k, "usr_b", &c).is_err(), "another owner");
        assert!(decode(&key(), "usr_a", &c).is_err(), "another key");
    }

    #[test]
    fn conflict_cursors_round_trip_and_are_not_export_cursors() {
        let k = key();
        let pos = ConflictPosition {
            created_at: POS.created_at,
            id: "dsp_0123456789abcdef0123456789".into(),
        };
        let c = encode_conflicts(&k, "usr_a", &pos);
        assert!(c.starts_with("cfc_"));
        assert!(c.len() <= zm_contracts::MAX_PAGE_CURSOR, "{c}");
        assert_eq!(decode_conflicts(&k, "usr_a", &c).ok(), Some(pos.clone()));
        assert!(decode_conflicts(&k, "usr_b", &c).is_err(), "another owner");
        // The same bytes under the other kind's prefix: the tag is bound
        // to the kind, so neither reads the other's.
        let export = encode(&k, "usr_a", POS);
        let as_conflicts = format!("cfc_{}", export.trim_start_matches("exc_"));
        assert!(decode_conflicts(&k, "usr_a", &as_conflicts).is_err());
        let as_export = format!("exc_{}", c.trim_start_matches("cfc_"));
        assert!(decode(&k, "usr_a", &as_export).is_err());
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
        let relabelled = format!("{}{}", EXPORT.prefix, thread.trim_start_matches("thr_"));
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
