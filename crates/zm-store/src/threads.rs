//! Thread tokens (`thr_…`): the project a conversation works in, carried by
//! the agent across reconnects — without a row in the database.
//!
//! A token is self-contained and signed: `thr_` + base64url of
//!
//! ```text
//! version (1) · expires, unix seconds (4) · conversation digest (8) ·
//! scope form (1) · scope bytes · HMAC-SHA256 tag (12)
//! ```
//!
//! The tag covers the owner's user id and every byte before it, keyed by a
//! secret the database holds (created with the schema), so any process on
//! the same database verifies it and nobody can mint one. That gives the
//! contract's behaviour with no write in `build_context`:
//!
//! - **24 h**: the expiry is in the token; every assertion issues a fresh
//!   one (rounded up to the next whole hour, so repeated assertions within
//!   an hour return the same token).
//! - **owner-bound**: the tag covers the owner; another user's token, an
//!   expired, altered or unknown one reads as no token at all (**fail-open**:
//!   a thread is a selector, never a credential).
//! - **carried across reconnects**: nothing lives in a connection.
//!
//! A conversation keeps its first project while a token of it is echoed
//! (first attach wins); a client `conversation_id` re-pins it (the
//! environment wins) by issuing a new token — earlier tokens keep the
//! project they were issued for until they expire.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use zm_contracts::scope;

use crate::clock::DAY_MS;

/// A token lives this long after it is issued (at least; see the module docs).
pub const THREAD_TTL_MS: i64 = DAY_MS;
const HOUR_MS: i64 = 3_600_000;
const VERSION: u8 = 1;
pub(crate) const TAG_LEN: usize = 12;
/// The contract's longest `thread` input.
const MAX_TOKEN_CHARS: usize = zm_contracts::MAX_THREAD_TOKEN;
// A token pinned to the longest scope fits: `thr_`, then the base64 of
// 14 bytes, the scope, and the tag.
const _: () = assert!(
    PREFIX.len() + (14 + scope::MAX_SCOPE_LEN + TAG_LEN).div_ceil(3) * 4 <= MAX_TOKEN_CHARS
);
const PREFIX: &str = "thr_";

/// The key that signs thread tokens.
#[derive(Clone)]
pub struct ThreadKey([u8; 32]);

impl std::fmt::Debug for ThreadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ThreadKey(…)")
    }
}

impl ThreadKey {
    /// A key from its stored hex form.
    pub fn from_hex(hex_key: &str) -> Option<ThreadKey> {
        let bytes = hex::decode(hex_key.trim()).ok()?;
        Some(ThreadKey(bytes.try_into().ok()?))
    }

    /// A fresh random key, in hex (what the database stores).
    pub fn generate_hex() -> String {
        hex::encode(rand::random::<[u8; 32]>())
    }

    fn tag(&self, owner: &str, body: &[u8]) -> [u8; TAG_LEN] {
        self.mac(&[owner.as_bytes(), body])
    }

    /// A tag for another kind of signed, owner-bound value (an export
    /// cursor). `purpose` separates it from thread tags, which begin with
    /// the owner's id (`usr_…`), so a tag of one kind never verifies as the
    /// other.
    pub(crate) fn purpose_tag(&self, purpose: &str, owner: &str, body: &[u8]) -> [u8; TAG_LEN] {
        self.mac(&[purpose.as_bytes(), owner.as_bytes(), body])
    }

    /// The truncated HMAC-SHA256 of `parts`, each but the last followed by
    /// a 0 byte.
    fn mac(&self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC accepts a key of any length");
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                mac.update(&[0]);
            }
            mac.update(part);
        }
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(&full[..TAG_LEN]);
        out
    }
}

/// Which conversation a thread belongs to: a digest of the client's
/// conversation id, of the transport session, or random for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conversation([u8; 8]);

impl Conversation {
    fn digest(tag: &str, id: &str) -> Conversation {
        let d = Sha256::digest(format!("{tag}:{id}").as_bytes());
        let mut out = [0u8; 8];
        out.copy_from_slice(&d[..8]);
        Conversation(out)
    }
    /// The conversation a client names with `conversation_id`.
    pub fn client(id: &str) -> Conversation {
        Conversation::digest("client", id)
    }
    /// The conversation of one transport session.
    pub fn transport(session_id: &str) -> Conversation {
        Conversation::digest("transport", session_id)
    }
    /// A conversation nobody named.
    pub fn fresh() -> Conversation {
        Conversation(rand::random())
    }
    /// The digest as stamped in provenance (`source.conversation`).
    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

/// A verified thread: its conversation, project and expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// The token as the agent echoes it.
    pub token: String,
    pub conversation: Conversation,
    /// The project scope it pins.
    pub scope: String,
    /// Epoch milliseconds.
    pub expires_at: i64,
}

/// Issue a token for `owner`'s `conversation` pinned to `scope`, valid
/// for at least [`THREAD_TTL_MS`] from `now`. `None` only when the scope
/// is longer than a scope may be (the token would not fit the contract's
/// `thread`; the call then simply carries no thread: fail-open).
pub fn issue(
    key: &ThreadKey,
    owner: &str,
    conversation: Conversation,
    scope_path: &str,
    now: i64,
) -> Option<Thread> {
    let expires_ms = (now + THREAD_TTL_MS).div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS;
    let expires = u32::try_from(expires_ms / 1000).ok()?;
    let own_prefix = scope::project_scope(owner, "");
    let (form, scope_bytes) = match scope_path.strip_prefix(&own_prefix) {
        Some(rest) => (0u8, rest.as_bytes()),
        None => (1u8, scope_path.as_bytes()),
    };
    let mut body = Vec::with_capacity(14 + scope_bytes.len() + TAG_LEN);
    body.push(VERSION);
    body.extend_from_slice(&expires.to_be_bytes());
    body.extend_from_slice(&conversation.0);
    body.push(form);
    body.extend_from_slice(scope_bytes);
    let tag = key.tag(owner, &body);
    body.extend_from_slice(&tag);
    let token = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&body));
    if token.len() > MAX_TOKEN_CHARS {
        tracing::warn!(target: "zm_store", scope_len = scope_path.len(), "scope too long for a thread token; none issued");
        return None;
    }
    Some(Thread {
        token,
        conversation,
        scope: scope_path.to_string(),
        expires_at: i64::from(expires) * 1000,
    })
}

/// Verify a token for `owner` at `now`: `None` for anything that is not a
/// live token of this owner (fail-open).
pub fn verify(key: &ThreadKey, owner: &str, token: &str, now: i64) -> Option<Thread> {
    let token = token.trim();
    let body = URL_SAFE_NO_PAD.decode(token.strip_prefix(PREFIX)?).ok()?;
    if body.len() < 14 + TAG_LEN || body[0] != VERSION {
        return None;
    }
    let (signed, tag) = body.split_at(body.len() - TAG_LEN);
    let expected = key.tag(owner, signed);
    if !crate::oauth::ct_eq(tag, expected) {
        return None;
    }
    let expires = i64::from(u32::from_be_bytes(signed[1..5].try_into().ok()?)) * 1000;
    if expires <= now {
        return None;
    }
    let mut conversation = [0u8; 8];
    conversation.copy_from_slice(&signed[5..13]);
    let rest = std::str::from_utf8(&signed[14..]).ok()?;
    let scope_path = match signed[13] {
        0 => scope::project_scope(owner, rest),
        1 => rest.to_string(),
        _ => return None,
    };
    Some(Thread {
        token: token.to_string(),
        conversation: Conversation(conversation),
        scope: scope_path,
        expires_at: expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_780_000_000_000;

    fn key() -> ThreadKey {
        ThreadKey::from_hex(&ThreadKey::generate_hex()).expect("a key")
    }

    #[test]
    fn round_trip_and_owner_binding() {
        let k = key();
        let scope = scope::project_scope("usr_a", "gamma_api");
        let t = issue(&k, "usr_a", Conversation::client("c1"), &scope, NOW).expect("issued");
        assert!(t.token.starts_with("thr_") && t.token.len() <= MAX_TOKEN_CHARS);
        let back = verify(&k, "usr_a", &t.token, NOW).expect("verifies");
        assert_eq!(back, t);
        assert!(
            verify(&k, "usr_b", &t.token, NOW).is_none(),
            "another owner"
        );
        assert!(
            verify(&key(), "usr_a", &t.token, NOW).is_none(),
            "another key"
        );
        // A foreign scope is carried verbatim.
        let other = issue(&k, "usr_a", Conversation::fresh(), "team.x.y", NOW).expect("issued");
        assert_eq!(
            verify(&k, "usr_a", &other.token, NOW).unwrap().scope,
            "team.x.y"
        );
    }

    #[test]
    fn expiry_is_a_day_rounded_up_to_the_hour() {
        let k = key();
        let t = issue(&k, "usr_a", Conversation::fresh(), "proj.usr_a.x", NOW).unwrap();
        assert!(t.expires_at >= NOW + THREAD_TTL_MS);
        assert!(t.expires_at <= NOW + THREAD_TTL_MS + HOUR_MS);
        assert!(verify(&k, "usr_a", &t.token, t.expires_at - 1).is_some());
        assert!(verify(&k, "usr_a", &t.token, t.expires_at).is_none());
        // Within the same hour, the same conversation gets the same token.
        let again = issue(&k, "usr_a", t.conversation, "proj.usr_a.x", NOW + 1).unwrap();
        assert_eq!(again.token, t.token);
    }

    #[test]
    fn tampering_and_garbage_read_as_no_token() {
        let k = key();
        let t = issue(&k, "usr_a", Conversation::fresh(), "proj.usr_a.x", NOW).unwrap();
        let mut chars: Vec<char> = t.token.chars().collect();
        let i = chars.len() / 2;
        chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
        let altered: String = chars.into_iter().collect();
        assert!(verify(&k, "usr_a", &altered, NOW).is_none());
        for junk in [
            "",
            "thr_",
            "thr_!!",
            "thr_0000000000000000.0000000000",
            "mem_abc",
        ] {
            assert!(verify(&k, "usr_a", junk, NOW).is_none(), "{junk}");
        }
    }

    #[test]
    fn a_token_fits_any_scope_and_a_longer_path_gets_none() {
        let k = key();
        let owner = "usr_0123456789abcdef.0123456789";
        let long_slug = "a".repeat(crate::hint::MAX_SLUG_LEN);
        let own = scope::project_scope(owner, &long_slug);
        assert!(issue(&k, owner, Conversation::fresh(), &own, NOW).is_some());
        // A teammate's project with a long slug (128 characters held 67
        // bytes of a foreign scope), and the longest scope there is.
        let teammate = format!("proj.{}.{}", "b".repeat(31), "c".repeat(40));
        let longest = format!("team.{}", "d".repeat(scope::MAX_SCOPE_LEN - 5));
        for foreign in [teammate, longest] {
            let t = issue(&k, owner, Conversation::fresh(), &foreign, NOW).expect("issued");
            assert!(t.token.len() <= MAX_TOKEN_CHARS, "{}", t.token.len());
            assert_eq!(
                verify(&k, owner, &t.token, NOW).expect("verifies").scope,
                foreign
            );
        }
        let too_long = format!("team.{}", "d".repeat(scope::MAX_SCOPE_LEN));
        assert!(issue(&k, owner, Conversation::fresh(), &too_long, NOW).is_none());
    }
}
