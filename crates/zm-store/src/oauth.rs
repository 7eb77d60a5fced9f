//! The state of the OAuth 2.1 authorization server: registered clients,
//! per-user grants, single-use authorization codes, and token families.
//!
//! Tokens are ours and opaque: access tokens (`zm_oat_…`, one hour) and
//! rotating refresh tokens (`zm_ort_…`) live in `access_tokens` (kinds
//! `oauth_access` / `oauth_refresh`), stored as sha256 hashes like personal
//! access tokens, so [`Store::authenticate`] accepts an OAuth access token
//! exactly like a PAT.
//!
//! A *family* groups every token descending from one authorization code.
//! Presenting a refresh token that was already rotated (or a code that was
//! already exchanged) revokes the whole family. Races are closed by row
//! locks: a code exchange updates its grant row, a refresh updates its
//! family row, and a revocation updates the same rows first, so on
//! PostgreSQL the two serialize (SQLite write transactions are serialized
//! anyway).
//!
//! Every method works on the store clock, so tests expire codes and tokens
//! with `store.clock().advance_ms(..)`. Audit rows never carry secrets.

use serde_json::{Value, json};
use sqlx::AnyConnection;
use sqlx::any::AnyRow;
use zm_contracts::{IdKind, ToolError};

use crate::audit::AuditEntry;
use crate::clock::DAY_MS;
use crate::db::DbResult;
use crate::identity::{SCOPE_READ, SCOPE_WRITE, TokenKind, hash_secret, random_secret};
use crate::rows::{FromAnyRow, col, json_col};
use crate::store::{Caller, Store};

/// Prefix of an OAuth access token.
pub const ACCESS_TOKEN_PREFIX: &str = "zm_oat_";
/// Prefix of an OAuth refresh token.
pub const REFRESH_TOKEN_PREFIX: &str = "zm_ort_";
/// Lifetime of an access token: one hour.
pub const ACCESS_TTL_MS: i64 = 3_600_000;
/// Lifetime of one refresh token (each rotation issues a fresh one).
pub const REFRESH_TTL_MS: i64 = 30 * DAY_MS;
/// Lifetime of an authorization code: five minutes.
pub const CODE_TTL_MS: i64 = 300_000;
/// Registrations that never completed an authorization are forgotten after
/// this long (an hour: a real client opens the sign-in page as soon as it
/// has registered).
pub const ABANDONED_CLIENT_MS: i64 = 3_600_000;
/// Most registrations that may wait for their first sign-in at once: past
/// it a registration replaces the oldest waiting one registered over
/// [`EVICTABLE_AFTER_MS`] ago (a real client signs in within minutes of
/// registering; refusing every new one instead would let a few networks
/// registering without pause lock every new client out), and is
/// `rate_limited` when there is none. Registration is anonymous, so what
/// it may store is bounded (with 8 KiB of redirect URIs a client, 80 MiB).
pub const MAX_WAITING_CLIENTS: i64 = 10_000;
/// Most registrations one network (an IPv4 address, an IPv6 /48: what
/// the caller passes) may have waiting for their first sign-in: past it
/// its oldest waiting one registered over [`EVICTABLE_AFTER_MS`] ago makes
/// room, and without one the registration is `rate_limited`. A few
/// networks registering without pause then fill their own share, not
/// [`MAX_WAITING_CLIENTS`]: it takes 200 of them to reach that.
pub const MAX_WAITING_PER_NETWORK: i64 = 50;
/// How old a waiting registration must be to make room for a new one at
/// [`MAX_WAITING_CLIENTS`]: a client whose user is signing in now is never
/// the one forgotten (younger ones all: the registration is refused).
pub const EVICTABLE_AFTER_MS: i64 = 600_000;
/// Every scope an OAuth client may ask for, in canonical order.
pub const OAUTH_SCOPES: &[&str] = &[SCOPE_READ, SCOPE_WRITE];

/// A registered client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OauthClient {
    /// `oac_…`.
    pub id: String,
    pub client_name: Option<String>,
    /// Exactly as registered.
    pub redirect_uris: Vec<String>,
    /// The first user who authorized the client (registration is anonymous).
    pub owner_id: Option<String>,
    pub created_at: i64,
}

/// A client as one user sees it: the client and that user's grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizedClient {
    pub client: OauthClient,
    /// What the client may do for the user: the scopes of its live tokens
    /// and of the user's latest authorization, together (a narrower
    /// sign-in does not narrow the tokens an earlier one issued).
    pub scope: String,
    /// First authorization by this user.
    pub authorized_at: i64,
    pub last_authorized_at: i64,
    /// Last use under this grant: a code exchange, a refresh or a call
    /// with one of its access tokens, whichever came last.
    pub last_used_at: Option<i64>,
    /// Set when the user revoked the client (a fresh sign-in grants again).
    pub revoked_at: Option<i64>,
    /// Unrevoked, unexpired access and refresh tokens of this user and client.
    pub active_tokens: i64,
}

/// What an authorization code is bound to.
#[derive(Debug, Clone, Copy)]
pub struct NewCode<'a> {
    pub client_id: &'a str,
    pub user_id: &'a str,
    /// The password the sign-in verified ([`User::credential`](crate::User::credential)).
    pub credential: crate::identity::Credential,
    pub redirect_uri: &'a str,
    /// The PKCE S256 challenge.
    pub code_challenge: &'a str,
    pub resource: Option<&'a str>,
    /// Canonical scope (see [`parse_scope`]).
    pub scope: &'a str,
}

/// An `authorization_code` grant, as presented at the token endpoint.
#[derive(Debug, Clone, Copy)]
pub struct CodeExchange<'a> {
    pub code: &'a str,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    /// `BASE64URL(SHA256(code_verifier))`, computed by the caller; compared
    /// with the stored challenge.
    pub verifier_challenge: &'a str,
}

/// A freshly issued token pair (the secrets are shown once).
#[derive(Debug, Clone)]
pub struct IssuedTokens {
    pub access_token: String,
    pub refresh_token: String,
    /// Seconds.
    pub expires_in: i64,
    /// The access token's scope.
    pub scope: String,
    pub user_id: String,
    pub client_id: String,
    pub family_id: String,
}

/// The `resource` a token request names (RFC 8707), as the store asks it
/// of a grant: does a grant issued for this resource (as the client spelled
/// it when it asked for authorization) cover the request? Comparing the
/// two as URLs is the caller's (the HTTP layer's, which knows the public
/// URL); the store keeps the resource as it came.
pub type ResourceCheck<'a> = &'a (dyn Fn(&str) -> bool + Send + Sync);

/// Does a grant issued for `granted` cover a token request for `wanted`?
/// RFC 8707 §2.2: a token is issued only for a resource its grant covers.
/// A request that names no resource is for whatever the grant is for; a
/// grant that named one covers that one only, even when the server's
/// public URL has moved since and `wanted` is what it now calls its own.
/// (The HTTP layer writes the server's resource into a grant whose sign-in
/// named none; one without, made before it did, is for the server's one
/// resource, which the caller checked `wanted` to be.)
fn covers(granted: Option<&str>, wanted: Option<ResourceCheck<'_>>) -> bool {
    match (granted, wanted) {
        (Some(granted), Some(same)) => same(granted),
        _ => true,
    }
}

/// The refusal of a token request for a resource its grant does not cover.
fn not_the_granted_resource() -> OauthError {
    OauthError::InvalidTarget(
        "The resource is not the one the authorization was granted for.".into(),
    )
}

/// Why the token endpoint refuses a grant (RFC 6749 §5.2 codes).
#[derive(Debug, Clone)]
pub enum OauthError {
    /// `invalid_grant`: unknown, expired, used, mismatched or revoked.
    InvalidGrant(String),
    /// `invalid_scope`: more than the grant allows.
    InvalidScope(String),
    /// `invalid_target` (RFC 8707 §2): a resource the grant does not cover.
    InvalidTarget(String),
    /// The database is too busy to take the request now (a write waited
    /// its whole turn): nothing was changed, and the client may send the
    /// same request again shortly (answered 503 `temporarily_unavailable`
    /// with `Retry-After`).
    Busy(ToolError),
    /// A store failure (answered as `server_error`).
    Internal(ToolError),
}

impl OauthError {
    /// The RFC 6749 `error` value.
    pub fn code(&self) -> &'static str {
        match self {
            OauthError::InvalidGrant(_) => "invalid_grant",
            OauthError::InvalidScope(_) => "invalid_scope",
            OauthError::InvalidTarget(_) => "invalid_target",
            OauthError::Busy(_) => "temporarily_unavailable",
            OauthError::Internal(_) => "server_error",
        }
    }
    /// The `error_description`.
    pub fn description(&self) -> String {
        match self {
            OauthError::InvalidGrant(d)
            | OauthError::InvalidScope(d)
            | OauthError::InvalidTarget(d) => d.clone(),
            OauthError::Busy(_) => "The server is busy; nothing was changed. Retry shortly.".into(),
            OauthError::Internal(_) => "Internal server error.".into(),
        }
    }
    /// This refusal as the audit log records it: the store's own failure
    /// as what it was (busy, internal), the client's as `client_fault`.
    fn audited(&self, client_fault: fn(String) -> ToolError) -> ToolError {
        match self {
            OauthError::Busy(e) | OauthError::Internal(e) => e.clone(),
            e => client_fault(e.to_string()),
        }
    }
}

impl From<ToolError> for OauthError {
    /// A busy database, and a write that lost to concurrent ones (its
    /// retries spent, or a row it named removed meanwhile: `conflict`,
    /// nothing written), are worth sending again: `Busy`. The rest is
    /// the server's own failure.
    fn from(e: ToolError) -> Self {
        if is_transient(&e) {
            OauthError::Busy(e)
        } else {
            OauthError::Internal(e)
        }
    }
}

/// Is `e` a store failure the same request may not meet again: the
/// database too busy (`rate_limited`), or a write that lost to concurrent
/// ones (`conflict`: its retries spent, or a row it referred to removed
/// meanwhile; nothing was written either way)? The OAuth endpoints never
/// answer `conflict` for a state the client must change.
pub fn is_transient(e: &ToolError) -> bool {
    matches!(
        e.code,
        zm_contracts::ErrorCode::RateLimited | zm_contracts::ErrorCode::Conflict
    )
}

impl std::fmt::Display for OauthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), self.description())
    }
}

/// Scopes a client may ask for that this server does not issue and need
/// not: OpenID Connect's (it is no identity provider) and
/// `offline_access` (every grant comes with a refresh token). They are
/// dropped from a request, not refused (RFC 6749 §3.3 lets the server
/// narrow what it grants), so a client that adds them by habit can still
/// sign in; any other unknown scope is refused.
pub const IGNORED_SCOPES: &[&str] = &["openid", "offline_access", "profile", "email"];

/// The canonical form of a requested scope: known scopes, deduplicated, in
/// canonical order, space-separated. Absent or blank, or only
/// [`IGNORED_SCOPES`], means every scope. `Err` names the first unknown
/// scope.
pub fn parse_scope(raw: Option<&str>) -> Result<String, String> {
    Ok(requested_scope(raw)?.unwrap_or_else(|| OAUTH_SCOPES.join(" ")))
}

/// [`parse_scope`], with `None` where the request names no scope this
/// server issues (absent, blank, or only [`IGNORED_SCOPES`]): what that
/// means is the caller's (every scope on a new grant, the grant's own on
/// a refresh).
pub fn requested_scope(raw: Option<&str>) -> Result<Option<String>, String> {
    let mut want = Vec::new();
    for s in raw
        .unwrap_or("")
        .trim()
        .split(' ')
        .filter(|s| !s.is_empty())
    {
        if IGNORED_SCOPES.contains(&s) {
            continue;
        }
        if !OAUTH_SCOPES.contains(&s) {
            return Err(s.chars().take(64).collect());
        }
        want.push(s);
    }
    if want.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        OAUTH_SCOPES
            .iter()
            .filter(|s| want.contains(s))
            .copied()
            .collect::<Vec<_>>()
            .join(" "),
    ))
}

/// Unpadded base64url.
fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len() * 4 / 3 + 3);
    for chunk in bytes.chunks(3) {
        let b1 = chunk.get(1).copied().unwrap_or(0);
        let b2 = chunk.get(2).copied().unwrap_or(0);
        let n = (u32::from(chunk[0]) << 16) | (u32::from(b1) << 8) | u32::from(b2);
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Equality that does not stop at the first differing byte.
/// Constant-time equality of two secrets (or their digests).
pub(crate) fn ct_eq(a: impl AsRef<[u8]>, b: impl AsRef<[u8]>) -> bool {
    let (a, b) = (a.as_ref(), b.as_ref());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A client row (`id, client_name, redirect_uris, owner_id, created_at`).
impl FromAnyRow for OauthClient {
    fn from_row(r: &AnyRow) -> Result<OauthClient, ToolError> {
        Ok(OauthClient {
            id: col(r, "id")?,
            client_name: col(r, "client_name")?,
            redirect_uris: json_col(r, "redirect_uris")?,
            owner_id: col(r, "owner_id")?,
            created_at: col(r, "created_at")?,
        })
    }
}

/// A client with one user's grant ([`Store::list_oauth_clients`]).
impl FromAnyRow for AuthorizedClient {
    fn from_row(r: &AnyRow) -> Result<AuthorizedClient, ToolError> {
        Ok(AuthorizedClient {
            client: OauthClient::from_row(r)?,
            scope: col(r, "scope")?,
            authorized_at: col(r, "authorized_at")?,
            last_authorized_at: col(r, "last_authorized_at")?,
            last_used_at: [
                col::<Option<i64>>(r, "last_used_at")?,
                col(r, "family_used_at")?,
                col(r, "token_used_at")?,
            ]
            .into_iter()
            .flatten()
            .max(),
            revoked_at: col(r, "revoked_at")?,
            active_tokens: col(r, "active_tokens")?,
        })
    }
}

/// An authorization code as stored (its hash aside).
struct StoredCode {
    client_id: String,
    user_id: String,
    redirect_uri: String,
    code_challenge: String,
    resource: Option<String>,
    scope: String,
}

impl FromAnyRow for StoredCode {
    fn from_row(r: &AnyRow) -> Result<StoredCode, ToolError> {
        Ok(StoredCode {
            client_id: col(r, "client_id")?,
            user_id: col(r, "user_id")?,
            redirect_uri: col(r, "redirect_uri")?,
            code_challenge: col(r, "code_challenge")?,
            resource: col(r, "resource")?,
            scope: col(r, "scope")?,
        })
    }
}

/// A code that could not be consumed: whether it was used, and the family
/// it started.
struct SpentCode {
    used_at: Option<i64>,
    family_id: Option<String>,
    user_id: String,
    client_id: String,
    code_challenge: String,
}

impl FromAnyRow for SpentCode {
    fn from_row(r: &AnyRow) -> Result<SpentCode, ToolError> {
        Ok(SpentCode {
            used_at: col(r, "used_at")?,
            family_id: col(r, "family_id")?,
            user_id: col(r, "user_id")?,
            client_id: col(r, "client_id")?,
            code_challenge: col(r, "code_challenge")?,
        })
    }
}

/// An OAuth token's row (access or refresh: refresh and revocation read
/// it): every one belongs to a client and a family (a NULL there is a
/// corrupt row).
struct TokenRow {
    id: String,
    user_id: String,
    client_id: String,
    family_id: String,
}

impl FromAnyRow for TokenRow {
    fn from_row(r: &AnyRow) -> Result<TokenRow, ToolError> {
        Ok(TokenRow {
            id: col(r, "id")?,
            user_id: col(r, "user_id")?,
            client_id: col(r, "client_id")?,
            family_id: col(r, "family_id")?,
        })
    }
}

/// One token family: whose, through which client.
#[derive(Debug, Clone, Copy)]
struct Family<'a> {
    id: &'a str,
    user_id: &'a str,
    client_id: &'a str,
}

fn rejected_refresh() -> OauthError {
    OauthError::InvalidGrant("Refresh token was rejected.".into())
}

/// Insert one OAuth token of a family (its lifetime and prefix follow from
/// its kind); returns its secret.
async fn insert_token(
    conn: &mut AnyConnection,
    family: Family<'_>,
    kind: TokenKind,
    scope: &str,
    now: i64,
) -> Result<String, ToolError> {
    let secret = format!("{}{}", kind.prefix(), random_secret(40));
    sqlx::query(
        "INSERT INTO access_tokens (id, user_id, kind, name, token_hash, scopes, created_at, expires_at, client_id, family_id) \
         VALUES ($1, $2, $3, NULL, $4, $5, $6, $7, $8, $9)",
    )
    .bind(IdKind::AccessToken.generate())
    .bind(family.user_id)
    .bind(kind.as_str())
    .bind(hash_secret(&secret))
    .bind(scope)
    .bind(now)
    .bind(kind.lifetime_ms().map(|t| now + t))
    .bind(family.client_id)
    .bind(family.id)
    .execute(&mut *conn)
    .await
    .db("insert oauth token")?;
    Ok(secret)
}

/// An access token (the given scope) and a refresh token (the family's
/// scope) for one family.
async fn issue_pair(
    conn: &mut AnyConnection,
    family: Family<'_>,
    access_scope: &str,
    family_scope: &str,
    now: i64,
) -> Result<IssuedTokens, ToolError> {
    let access_token =
        insert_token(conn, family, TokenKind::OauthAccess, access_scope, now).await?;
    let refresh_token =
        insert_token(conn, family, TokenKind::OauthRefresh, family_scope, now).await?;
    // Every grant rotates: without this the rows of one connected app grew
    // by two an hour for as long as it stayed signed in. A token expired
    // for a day is dropped (the user's own, by their index); presented
    // again, it reads as unknown and is rejected, as it was already.
    sqlx::query(
        "DELETE FROM access_tokens WHERE user_id = $1 AND family_id IS NOT NULL AND expires_at < $2",
    )
    .bind(family.user_id)
    .bind(now - DAY_MS)
    .execute(&mut *conn)
    .await
    .db("prune oauth tokens")?;
    Ok(IssuedTokens {
        access_token,
        refresh_token,
        expires_in: ACCESS_TTL_MS / 1000,
        scope: access_scope.to_string(),
        user_id: family.user_id.to_string(),
        client_id: family.client_id.to_string(),
        family_id: family.id.to_string(),
    })
}

/// Revoke a family and every token in it; `true` when this call revoked it
/// (it was live).
async fn revoke_family_in(
    conn: &mut AnyConnection,
    family_id: &str,
    reason: &str,
    now: i64,
) -> Result<bool, ToolError> {
    let done = sqlx::query(
        "UPDATE oauth_families SET revoked_at = $1, revoked_reason = $2 WHERE id = $3 AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(reason)
    .bind(family_id)
    .execute(&mut *conn)
    .await
    .db("revoke family")?;
    sqlx::query(
        "UPDATE access_tokens SET revoked_at = $1 WHERE family_id = $2 AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(family_id)
    .execute(&mut *conn)
    .await
    .db("revoke family tokens")?;
    Ok(done.rows_affected() > 0)
}

/// The refusal of a registration past the cap of clients waiting for a
/// first sign-in: `rate_limited`, marked so that it is told apart from a
/// busy database ([`is_registrations_full`]).
fn registrations_full(message: &str) -> ToolError {
    ToolError::rate_limited(message).with_details(serde_json::json!({"cap": REGISTRATIONS_FULL}))
}

/// The mark of [`registrations_full`] in the error's `details`.
const REGISTRATIONS_FULL: &str = "clients_waiting_for_sign_in";

/// Was a registration refused because too many clients wait for their
/// first sign-in (the client should wait minutes), rather than because
/// the database was busy (a second)?
pub fn is_registrations_full(e: &ToolError) -> bool {
    e.code == zm_contracts::ErrorCode::RateLimited
        && e.details
            .as_ref()
            .and_then(|d| d.get("cap"))
            .and_then(Value::as_str)
            == Some(REGISTRATIONS_FULL)
}

impl Store {
    /// Append an OAuth audit row; `actor` is `None` for anonymous events
    /// (registration, a failed sign-in for an unknown email). Both go the
    /// one way audit rows outside a write go ([`Store::audit`]): on
    /// SQLite neither waits for the writer's turn, so a failed sign-in
    /// answers alike whether or not the email has an account.
    async fn oauth_audit(
        &self,
        actor: Option<&str>,
        command: &str,
        payload: Value,
        outcome: Result<(), &ToolError>,
        request_id: Option<&str>,
    ) {
        let entry = AuditEntry {
            command,
            payload: &payload,
            outcome,
            duration_ms: 0,
        };
        match actor {
            Some(user_id) => {
                let caller = Caller {
                    user_id: user_id.to_string(),
                    request_id: request_id.map(str::to_string),
                    ..Default::default()
                };
                self.audit(&caller, &entry).await;
            }
            None => self.audit_anonymous(&entry, request_id).await,
        }
    }

    /// Make room for one more registration waiting for its first sign-in
    /// from `network` (at [`MAX_WAITING_PER_NETWORK`]), or from anywhere
    /// when `None` (at [`MAX_WAITING_CLIENTS`]): past the cap the oldest
    /// waiting ones registered over [`EVICTABLE_AFTER_MS`] ago (nobody
    /// signed in through them, as the hourly pruning picks) are
    /// forgotten, and without one the registration is `rate_limited`.
    async fn room_for_a_client(&self, network: Option<&str>, now: i64) -> Result<(), ToolError> {
        let cap = network.map_or(MAX_WAITING_CLIENTS, |_| MAX_WAITING_PER_NETWORK);
        let from = |sql: &mut crate::sql::Sql, alias: &str| {
            if let Some(network) = network {
                sql.push(&format!(" AND {alias}registered_from = "))
                    .bind_str(network);
            }
        };
        // Waiting as eviction reads it: a client whose first owner deleted
        // their account (its owner is gone, not never set) still serves
        // the others it has grants for, and takes no waiting place, or it
        // would hold one for good.
        let mut count = crate::sql::Sql::new(
            "SELECT COUNT(*) AS n FROM (SELECT 1 FROM oauth_clients c WHERE c.owner_id IS NULL \
             AND NOT EXISTS (SELECT 1 FROM oauth_grants g WHERE g.client_id = c.id)",
        );
        from(&mut count, "c.");
        count.push(" LIMIT ").bind_i64(cap).push(") w");
        let waiting: i64 = col(
            &count
                .query()
                .fetch_one(&self.pool)
                .await
                .db("count waiting oauth clients")?,
            "n",
        )?;
        if waiting < cap {
            return Ok(());
        }
        let mut evict = crate::sql::Sql::new(
            "DELETE FROM oauth_clients WHERE id IN (SELECT c.id FROM oauth_clients c WHERE c.owner_id IS NULL",
        );
        from(&mut evict, "c.");
        evict
            .push(" AND c.created_at < ")
            .bind_i64(now - EVICTABLE_AFTER_MS)
            .push(
                " AND NOT EXISTS (SELECT 1 FROM oauth_grants g WHERE g.client_id = c.id) \
                 ORDER BY c.created_at, c.id LIMIT ",
            )
            .bind_i64(waiting - cap + 1)
            .push(")");
        let evicted = evict
            .query()
            .execute(&self.pool)
            .await
            .db("evict waiting oauth clients")?
            .rows_affected();
        match (evicted, network) {
            (0, Some(network)) => {
                tracing::warn!(target: "zm_store", network, "oauth registrations refused: too many from one network wait for a sign-in");
                Err(registrations_full(
                    "Too many clients registered from your network are waiting for their first sign-in; try again later.",
                ))
            }
            (0, None) => {
                tracing::warn!(target: "zm_store", waiting, "oauth registrations refused: too many wait for a sign-in");
                Err(registrations_full(
                    "Too many registered clients are waiting for their first sign-in; try again later.",
                ))
            }
            (evicted, None) => {
                tracing::warn!(target: "zm_store", waiting, evicted, "oauth registrations at the cap: the oldest waiting ones were forgotten");
                Ok(())
            }
            (_, Some(_)) => Ok(()),
        }
    }

    /// Register a client (RFC 7591; anonymous). The caller has validated the
    /// redirect URIs; they are stored exactly as given. `network` is where
    /// the request came from (see [`MAX_WAITING_PER_NETWORK`]; `None`
    /// counts only in all).
    pub async fn register_oauth_client(
        &self,
        client_name: Option<&str>,
        redirect_uris: &[String],
        network: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<OauthClient, ToolError> {
        if redirect_uris.is_empty() {
            return Err(ToolError::validation("at least one redirect URI is needed"));
        }
        let id = IdKind::OauthClient.generate();
        let now = self.now();
        let uris = serde_json::to_string(redirect_uris)
            .map_err(|e| crate::db::internal("redirect uris", e))?;
        // Clients nobody ever authorized do not pile up.
        self.prune_unused_oauth_clients(ABANDONED_CLIENT_MS).await?;
        if network.is_some() {
            self.room_for_a_client(network, now).await?;
        }
        self.room_for_a_client(None, now).await?;
        sqlx::query(
            "INSERT INTO oauth_clients (id, client_name, redirect_uris, owner_id, created_at, registered_from) VALUES ($1, $2, $3, NULL, $4, $5)",
        )
        .bind(&id)
        .bind(client_name.map(str::to_string))
        .bind(&uris)
        .bind(now)
        .bind(network.map(str::to_string))
        .execute(&self.pool)
        .await
        .db("register oauth client")?;
        self.oauth_audit(
            None,
            "oauth.register",
            json!({"client_id": id, "redirect_uris": redirect_uris.len(), "client_name": client_name.map(|n| json!({"chars": n.chars().count()}))}),
            Ok(()),
            request_id,
        )
        .await;
        Ok(OauthClient {
            id,
            client_name: client_name.map(str::to_string),
            redirect_uris: redirect_uris.to_vec(),
            owner_id: None,
            created_at: now,
        })
    }

    /// Forget the registrations older than `older_than_ms` (store clock)
    /// that never completed an authorization: no sign-in issued them a code
    /// and no user holds a grant. Returns how many went.
    pub async fn prune_unused_oauth_clients(&self, older_than_ms: i64) -> Result<u64, ToolError> {
        let done = sqlx::query(
            "DELETE FROM oauth_clients WHERE owner_id IS NULL AND created_at < $1 \
             AND NOT EXISTS (SELECT 1 FROM oauth_grants g WHERE g.client_id = oauth_clients.id)",
        )
        .bind(self.now() - older_than_ms)
        .execute(&self.pool)
        .await
        .db("prune oauth clients")?;
        Ok(done.rows_affected())
    }

    /// A registered client by id (`None` when unknown or malformed).
    pub async fn oauth_client(&self, id: &str) -> Result<Option<OauthClient>, ToolError> {
        let Ok(id) = zm_contracts::ids::parse_id(IdKind::OauthClient, id) else {
            return Ok(None);
        };
        let row = sqlx::query(
            "SELECT id, client_name, redirect_uris, owner_id, created_at FROM oauth_clients WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .db("oauth client")?;
        row.as_ref().map(OauthClient::from_row).transpose()
    }

    /// After a successful sign-in: record the user's grant (re-granting a
    /// revoked one), make the user the client's owner if it has none, and
    /// store a single-use code (5 minutes). Returns the code (32 random
    /// bytes, base64url), shown once.
    pub async fn issue_oauth_code(
        &self,
        new: NewCode<'_>,
        request_id: Option<&str>,
    ) -> Result<String, ToolError> {
        crate::service::rerun_on_contention("oauth sign-in", || {
            self.issue_oauth_code_once(new, request_id)
        })
        .await
    }

    async fn issue_oauth_code_once(
        &self,
        new: NewCode<'_>,
        request_id: Option<&str>,
    ) -> Result<String, ToolError> {
        let code = base64url(&rand::random::<[u8; 32]>());
        let now = self.now();
        let mut tx = self.write_tx().await?;
        self.hold_signing_in(&mut tx, new.user_id, new.credential)
            .await?;
        let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM oauth_clients WHERE id = $1")
            .bind(new.client_id)
            .fetch_one(&mut *tx)
            .await
            .db("client exists")?;
        if exists == 0 {
            return Err(ToolError::not_found("OAuth client not found"));
        }
        sqlx::query(
            "INSERT INTO oauth_grants (client_id, user_id, scope, created_at, last_authorized_at) VALUES ($1, $2, $3, $4, $4) \
             ON CONFLICT (client_id, user_id) DO UPDATE SET scope = excluded.scope, last_authorized_at = excluded.last_authorized_at, revoked_at = NULL",
        )
        .bind(new.client_id)
        .bind(new.user_id)
        .bind(new.scope)
        .bind(now)
        .execute(&mut *tx)
        .await
        .db("record grant")?;
        sqlx::query("UPDATE oauth_clients SET owner_id = $1 WHERE id = $2 AND owner_id IS NULL")
            .bind(new.user_id)
            .bind(new.client_id)
            .execute(&mut *tx)
            .await
            .db("client owner")?;
        sqlx::query(
            "INSERT INTO oauth_codes (code_hash, client_id, user_id, redirect_uri, code_challenge, resource, scope, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(hash_secret(&code))
        .bind(new.client_id)
        .bind(new.user_id)
        .bind(new.redirect_uri)
        .bind(new.code_challenge)
        .bind(new.resource.map(str::to_string))
        .bind(new.scope)
        .bind(now)
        .bind(now + CODE_TTL_MS)
        .execute(&mut *tx)
        .await
        .db("store code")?;
        // Codes are kept a day past expiry (replay detection), then dropped.
        sqlx::query("DELETE FROM oauth_codes WHERE expires_at < $1")
            .bind(now - DAY_MS)
            .execute(&mut *tx)
            .await
            .db("prune codes")?;
        tx.commit().await.db("commit code")?;
        self.oauth_audit(
            Some(new.user_id),
            "oauth.login",
            json!({"client_id": new.client_id, "scope": new.scope}),
            Ok(()),
            request_id,
        )
        .await;
        Ok(code)
    }

    /// Audit a failed sign-in on the authorization page. The actor is the
    /// account the email names, when there is one; the password is never
    /// recorded.
    pub async fn audit_oauth_login_failure(
        &self,
        email: &str,
        client_id: &str,
        request_id: Option<&str>,
    ) {
        let actor = self.user_by_email(email).await.ok().flatten().map(|u| u.id);
        let err = ToolError::unauthorized("Invalid email or password.");
        self.oauth_audit(
            actor.as_deref(),
            "oauth.login",
            json!({"client_id": client_id}),
            Err(&err),
            request_id,
        )
        .await;
    }

    /// Record a dashboard sign-in: `signed_in` names the account it signed
    /// in; `None` is a refusal for a wrong email or password, whose actor
    /// is the account the email names, if there is one (as an OAuth
    /// sign-in's is). The password is never recorded. Written on a task of
    /// its own, which closing the store waits for, and waited for here: a
    /// sign-in runs on its request's task, and a client that hangs up as
    /// its attempt is decided does not take the row with it.
    pub async fn audit_web_login(
        &self,
        email: &str,
        signed_in: Option<&str>,
        request_id: Option<&str>,
    ) {
        let store = self.clone();
        let (email, signed_in, request_id) = (
            email.to_string(),
            signed_in.map(str::to_string),
            request_id.map(str::to_string),
        );
        let _ = self
            .audits
            .spawn(async move {
                store
                    .record_web_login(&email, signed_in.as_deref(), request_id.as_deref())
                    .await;
            })
            .await;
    }

    /// [`Store::audit_web_login`]'s row.
    async fn record_web_login(
        &self,
        email: &str,
        signed_in: Option<&str>,
        request_id: Option<&str>,
    ) {
        let err = ToolError::unauthorized("Invalid email or password.");
        let (actor, outcome) = match signed_in {
            Some(user_id) => (Some(user_id.to_string()), Ok(())),
            None => (
                self.user_by_email(email).await.ok().flatten().map(|u| u.id),
                Err(&err),
            ),
        };
        self.oauth_audit(
            actor.as_deref(),
            "web.login",
            json!({}),
            outcome,
            request_id,
        )
        .await;
    }

    /// The `authorization_code` grant: consume the code atomically (it is
    /// spent even when the rest of the check fails), check client, redirect
    /// URI and PKCE, and start a token family. Presenting an already
    /// exchanged code revokes the family it started.
    ///
    /// The token request may name a
    /// resource (`resource`, RFC 8707; `None`: it names none): one the code
    /// was not issued for is `invalid_target` (see [`ResourceCheck`]), and
    /// the code is spent, as by every other refusal once the client and
    /// its PKCE verifier are checked.
    pub async fn exchange_oauth_code(
        &self,
        ex: CodeExchange<'_>,
        resource: Option<ResourceCheck<'_>>,
        request_id: Option<&str>,
    ) -> Result<IssuedTokens, OauthError> {
        let result = crate::service::rerun_on_contention("oauth code exchange", || {
            self.exchange_inner(ex, resource, request_id)
        })
        .await;
        if let Err(e) = &result {
            let err = e.audited(ToolError::validation);
            let actor = sqlx::query_scalar::<_, String>(
                "SELECT user_id FROM oauth_codes WHERE code_hash = $1",
            )
            .bind(hash_secret(ex.code))
            .fetch_optional(&self.pool)
            .await
            .ok()
            .flatten();
            self.oauth_audit(
                actor.as_deref(),
                "oauth.token",
                json!({"grant_type": "authorization_code", "client_id": ex.client_id}),
                Err(&err),
                request_id,
            )
            .await;
        }
        result
    }

    async fn exchange_inner(
        &self,
        ex: CodeExchange<'_>,
        wanted: Option<ResourceCheck<'_>>,
        request_id: Option<&str>,
    ) -> Result<IssuedTokens, OauthError> {
        let code_hash = hash_secret(ex.code);
        let now = self.now();
        let unusable = || {
            OauthError::InvalidGrant(
                "The authorization code is unknown, expired, or already used.".into(),
            )
        };
        let mut tx = self.write_tx().await?;
        let consumed = sqlx::query(
            "UPDATE oauth_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL AND expires_at > $1",
        )
        .bind(now)
        .bind(&code_hash)
        .execute(&mut *tx)
        .await
        .db("consume code")?;
        if consumed.rows_affected() == 0 {
            let row = sqlx::query(
                "SELECT used_at, family_id, user_id, client_id, code_challenge FROM oauth_codes WHERE code_hash = $1",
            )
            .bind(&code_hash)
            .fetch_optional(&mut *tx)
            .await
            .db("read code")?;
            let spent = row.as_ref().map(SpentCode::from_row).transpose()?;
            // A replay by the client the code was issued to, with its PKCE
            // verifier: the code and its secret were taken. Anyone else who
            // saw a used code (a browser's history) gets only the refusal:
            // it must not sign the user's apps out.
            let replayed = spent
                .filter(|c| {
                    c.client_id == ex.client_id && ct_eq(&c.code_challenge, ex.verifier_challenge)
                })
                .and_then(|c| {
                    c.used_at
                        .and(c.family_id)
                        .map(|f| (f, c.user_id, c.client_id))
                });
            if let Some((family, user, client)) = replayed {
                // RFC 6749 §4.1.2: a code used twice revokes what it issued.
                let revoked = revoke_family_in(&mut tx, &family, "code_replay", now).await?;
                tx.commit().await.db("commit code replay")?;
                if revoked {
                    self.oauth_audit(
                        Some(&user),
                        "oauth.family_revoked",
                        json!({"family_id": family, "client_id": client, "reason": "code_replay"}),
                        Ok(()),
                        request_id,
                    )
                    .await;
                }
            }
            return Err(unusable());
        }
        let row = sqlx::query(
            "SELECT client_id, user_id, redirect_uri, code_challenge, resource, scope FROM oauth_codes WHERE code_hash = $1",
        )
        .bind(&code_hash)
        .fetch_one(&mut *tx)
        .await
        .db("read code")?;
        let StoredCode {
            client_id,
            user_id,
            redirect_uri,
            code_challenge: challenge,
            resource,
            scope,
        } = StoredCode::from_row(&row)?;
        let refuse = |msg: &str| OauthError::InvalidGrant(msg.to_string());
        if client_id != ex.client_id || redirect_uri != ex.redirect_uri {
            tx.commit().await.db("commit spent code")?;
            return Err(refuse(
                "The authorization code was issued to a different client or redirect_uri.",
            ));
        }
        if !ct_eq(&challenge, ex.verifier_challenge) {
            tx.commit().await.db("commit spent code")?;
            return Err(refuse("PKCE verification failed."));
        }
        if !covers(resource.as_deref(), wanted) {
            tx.commit().await.db("commit spent code")?;
            return Err(not_the_granted_resource());
        }
        let granted = sqlx::query(
            "UPDATE oauth_grants SET last_used_at = $1 WHERE client_id = $2 AND user_id = $3 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(&client_id)
        .bind(&user_id)
        .execute(&mut *tx)
        .await
        .db("use grant")?;
        if granted.rows_affected() == 0 {
            tx.commit().await.db("commit spent code")?;
            return Err(refuse("The authorization was revoked."));
        }
        if !account_enabled(&mut tx, &user_id).await? {
            tx.commit().await.db("commit spent code")?;
            return Err(refuse("The account is disabled."));
        }
        let family_id = format!("fam_{}", random_secret(32));
        sqlx::query(
            "INSERT INTO oauth_families (id, client_id, user_id, scope, resource, created_at, last_used_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
        )
        .bind(&family_id)
        .bind(&client_id)
        .bind(&user_id)
        .bind(&scope)
        .bind(resource)
        .bind(now)
        .execute(&mut *tx)
        .await
        .db("start family")?;
        let family = Family {
            id: &family_id,
            user_id: &user_id,
            client_id: &client_id,
        };
        let issued = issue_pair(&mut tx, family, &scope, &scope, now).await?;
        sqlx::query("UPDATE oauth_codes SET family_id = $1 WHERE code_hash = $2")
            .bind(&family_id)
            .bind(&code_hash)
            .execute(&mut *tx)
            .await
            .db("code family")?;
        tx.commit().await.db("commit exchange")?;
        self.oauth_audit(
            Some(&user_id),
            "oauth.token",
            json!({"grant_type": "authorization_code", "client_id": client_id, "family_id": family_id, "scope": scope}),
            Ok(()),
            request_id,
        )
        .await;
        Ok(issued)
    }

    /// The `refresh_token` grant: rotate. A refresh token presented a second
    /// time revokes its whole family (every access and refresh token
    /// descending from the same authorization). `client_id` is the client
    /// presenting it (every client is public: its id is its
    /// identification): another client's token is `invalid_grant` and is
    /// neither spent nor taken for a replay. `scope`, when given, must be
    /// within the family's; it narrows the new access token only.
    ///
    /// The request may name a
    /// resource (`resource`, RFC 8707; `None`: it names none): one the
    /// token's family was not issued for is `invalid_target` (see
    /// [`ResourceCheck`]), and spends nothing.
    pub async fn refresh_oauth_token(
        &self,
        refresh_token: &str,
        client_id: &str,
        scope: Option<&str>,
        resource: Option<ResourceCheck<'_>>,
        request_id: Option<&str>,
    ) -> Result<IssuedTokens, OauthError> {
        let hash = hash_secret(refresh_token.trim());
        let result = crate::service::rerun_on_contention("oauth refresh", || {
            self.refresh_inner(&hash, client_id, scope, resource, request_id)
        })
        .await;
        if let Err(e) = &result {
            let row = sqlx::query(
                "SELECT user_id, client_id, family_id FROM access_tokens WHERE token_hash = $1 AND kind = $2",
            )
            .bind(&hash)
            .bind(TokenKind::OauthRefresh.as_str())
            .fetch_optional(&self.pool)
            .await
            .ok()
            .flatten();
            // Best effort, like the query: an unreadable row audits as unknown.
            let known = row.as_ref().and_then(|r| {
                Some((
                    col::<String>(r, "user_id").ok()?,
                    col::<Option<String>>(r, "client_id").ok()?,
                    col::<Option<String>>(r, "family_id").ok()?,
                ))
            });
            let actor = known.as_ref().map(|k| k.0.clone());
            let payload = match &known {
                // Another client's token names both (the holder first).
                Some((_, client, family)) if client.as_deref() != Some(client_id) => json!({
                    "client_id": client,
                    "family_id": family,
                    "presented_client_id": client_id,
                }),
                Some((_, client, family)) => json!({
                    "client_id": client,
                    "family_id": family,
                }),
                None => json!({"client_id": client_id, "known_token": false}),
            };
            let err = e.audited(ToolError::unauthorized);
            self.oauth_audit(
                actor.as_deref(),
                "oauth.refresh",
                payload,
                Err(&err),
                request_id,
            )
            .await;
        }
        result
    }

    async fn refresh_inner(
        &self,
        hash: &str,
        client_id: &str,
        scope: Option<&str>,
        wanted: Option<ResourceCheck<'_>>,
        request_id: Option<&str>,
    ) -> Result<IssuedTokens, OauthError> {
        let now = self.now();
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(
            "SELECT id, user_id, client_id, family_id FROM access_tokens WHERE token_hash = $1 AND kind = $2",
        )
        .bind(hash)
        .bind(TokenKind::OauthRefresh.as_str())
        .fetch_optional(&mut *tx)
        .await
        .db("read refresh token")?;
        let Some(row) = row else {
            return Err(rejected_refresh());
        };
        let TokenRow {
            id: token_id,
            user_id,
            client_id: token_client,
            family_id,
        } = TokenRow::from_row(&row)?;
        if client_id != token_client {
            return Err(OauthError::InvalidGrant(
                "The refresh token was issued to a different client.".into(),
            ));
        }
        // The family row is the lock every rotation and revocation takes.
        let family = sqlx::query(
            "UPDATE oauth_families SET last_used_at = $1 WHERE id = $2 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(&family_id)
        .execute(&mut *tx)
        .await
        .db("lock family")?;
        if family.rows_affected() == 0 || !account_enabled(&mut tx, &user_id).await? {
            return Err(rejected_refresh());
        }
        let (family_scope, family_resource): (String, Option<String>) =
            sqlx::query_as("SELECT scope, resource FROM oauth_families WHERE id = $1")
                .bind(&family_id)
                .fetch_one(&mut *tx)
                .await
                .db("family scope")?;
        if !covers(family_resource.as_deref(), wanted) {
            return Err(not_the_granted_resource());
        }
        let wanted = requested_scope(scope)
            .map_err(|s| OauthError::InvalidScope(format!("Unknown scope {s:?}.")))?;
        let access_scope = match wanted {
            None => family_scope.clone(),
            Some(wanted) => {
                if wanted
                    .split(' ')
                    .any(|s| !family_scope.split(' ').any(|f| f == s))
                {
                    return Err(OauthError::InvalidScope(
                        "The requested scope exceeds the original grant.".into(),
                    ));
                }
                wanted
            }
        };
        let consumed = sqlx::query(
            "UPDATE access_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $1",
        )
        .bind(now)
        .bind(&token_id)
        .execute(&mut *tx)
        .await
        .db("rotate refresh token")?;
        if consumed.rows_affected() == 0 {
            let used: Option<i64> =
                sqlx::query_scalar("SELECT used_at FROM access_tokens WHERE id = $1")
                    .bind(&token_id)
                    .fetch_one(&mut *tx)
                    .await
                    .db("read refresh token")?;
            if used.is_some() {
                // A spent refresh token came back: someone holds a copy.
                let revoked = revoke_family_in(&mut tx, &family_id, "refresh_replay", now).await?;
                tx.commit().await.db("commit family revocation")?;
                if revoked {
                    self.oauth_audit(
                    Some(&user_id),
                    "oauth.family_revoked",
                    json!({"family_id": family_id, "client_id": token_client, "reason": "refresh_replay"}),
                    Ok(()),
                    request_id,
                )
                .await;
                }
            }
            return Err(rejected_refresh());
        }
        let family = Family {
            id: &family_id,
            user_id: &user_id,
            client_id: &token_client,
        };
        let issued = issue_pair(&mut tx, family, &access_scope, &family_scope, now).await?;
        tx.commit().await.db("commit refresh")?;
        self.oauth_audit(
            Some(&user_id),
            "oauth.refresh",
            json!({"client_id": token_client, "family_id": family_id, "scope": access_scope}),
            Ok(()),
            request_id,
        )
        .await;
        Ok(issued)
    }

    /// RFC 7009 revocation by the client that holds the token: a refresh
    /// token ends its whole family (every access and refresh token of that
    /// sign-in, §2.1's SHOULD; a refresh token already rotated names its
    /// family too), an access token only itself. A token that is unknown,
    /// not an OAuth token (a personal access token), expired or already
    /// revoked changes nothing and is no error (§2.2), whoever asks. A live
    /// token issued to another client is `invalid_grant` (audited as a
    /// refusal) and stays as it was. The grant stays: the client may sign
    /// in again without the user revoking it.
    pub async fn revoke_oauth_token(
        &self,
        token: &str,
        client_id: &str,
        request_id: Option<&str>,
    ) -> Result<(), OauthError> {
        crate::service::rerun_on_contention("oauth revocation", || {
            self.revoke_oauth_token_once(token, client_id, request_id)
        })
        .await
    }

    async fn revoke_oauth_token_once(
        &self,
        token: &str,
        client_id: &str,
        request_id: Option<&str>,
    ) -> Result<(), OauthError> {
        let hash = hash_secret(token.trim());
        let now = self.now();
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(
            "SELECT id, kind, user_id, client_id, family_id FROM access_tokens \
             WHERE token_hash = $1 AND kind IN ($2, $3) AND revoked_at IS NULL AND expires_at > $4",
        )
        .bind(&hash)
        .bind(TokenKind::OauthAccess.as_str())
        .bind(TokenKind::OauthRefresh.as_str())
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .db("read token to revoke")?;
        let Some(row) = row else {
            return Ok(());
        };
        let kind: String = col(&row, "kind")?;
        let TokenRow {
            id: token_id,
            user_id,
            client_id: holder,
            family_id,
        } = TokenRow::from_row(&row)?;
        if holder != client_id {
            drop(tx);
            let e = OauthError::InvalidGrant("The token was issued to a different client.".into());
            self.oauth_audit(
                Some(&user_id),
                "oauth.token_revoked",
                json!({"client_id": client_id, "holder_client_id": holder}),
                Err(&ToolError::forbidden(e.description())),
                request_id,
            )
            .await;
            return Err(e);
        }
        let refresh = kind == TokenKind::OauthRefresh.as_str();
        let changed = if refresh {
            // The family row first, as a rotation takes it.
            revoke_family_in(&mut tx, &family_id, "client_revoked_token", now).await?
        } else {
            sqlx::query(
                "UPDATE access_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
            )
            .bind(now)
            .bind(&token_id)
            .execute(&mut *tx)
            .await
            .db("revoke access token")?
            .rows_affected()
                > 0
        };
        tx.commit().await.db("commit token revocation")?;
        if changed {
            let what = if refresh {
                "refresh_token"
            } else {
                "access_token"
            };
            self.oauth_audit(
                Some(&user_id),
                "oauth.token_revoked",
                json!({"client_id": holder, "family_id": family_id, "token_type": what}),
                Ok(()),
                request_id,
            )
            .await;
        }
        Ok(())
    }

    /// The clients a user has authorized (revoked ones included, with
    /// `revoked_at`), oldest first.
    pub async fn list_oauth_clients(
        &self,
        user_id: &str,
    ) -> Result<Vec<AuthorizedClient>, ToolError> {
        let rows = sqlx::query(
            "SELECT c.id, c.client_name, c.redirect_uris, c.owner_id, c.created_at, g.scope, \
                    g.created_at AS authorized_at, g.last_authorized_at, g.last_used_at, g.revoked_at, \
                    (SELECT COUNT(*) FROM access_tokens t WHERE t.client_id = c.id AND t.user_id = g.user_id \
                        AND t.revoked_at IS NULL AND t.used_at IS NULL AND t.expires_at > $2) AS active_tokens, \
                    (SELECT MAX(f.last_used_at) FROM oauth_families f WHERE f.client_id = c.id AND f.user_id = g.user_id) AS family_used_at, \
                    (SELECT MAX(t.last_used_at) FROM access_tokens t WHERE t.client_id = c.id AND t.user_id = g.user_id) AS token_used_at \
             FROM oauth_grants g JOIN oauth_clients c ON c.id = g.client_id \
             WHERE g.user_id = $1 ORDER BY g.created_at, c.id",
        )
        .bind(user_id)
        .bind(self.now())
        .fetch_all(&self.pool)
        .await
        .db("list oauth clients")?;
        let mut clients = AuthorizedClient::from_rows(&rows)?;
        // The scopes live tokens carry: a later, narrower sign-in leaves
        // them as they were, and the list must not say less than they do.
        let live: Vec<(String, String)> = sqlx::query_as(
            "SELECT client_id, scopes FROM access_tokens \
             WHERE user_id = $1 AND client_id IS NOT NULL AND revoked_at IS NULL AND used_at IS NULL AND expires_at > $2",
        )
        .bind(user_id)
        .bind(self.now())
        .fetch_all(&self.pool)
        .await
        .db("list oauth token scopes")?;
        for c in &mut clients {
            let words: Vec<&str> = c
                .scope
                .split(' ')
                .chain(
                    live.iter()
                        .filter(|(client, _)| *client == c.client.id)
                        .flat_map(|(_, scopes)| scopes.split(' ')),
                )
                .collect();
            c.scope = OAUTH_SCOPES
                .iter()
                .filter(|s| words.contains(s))
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
        }
        Ok(clients)
    }

    /// Revoke a client for this user: its grant, every token family and
    /// token it holds for the user, and any code not yet exchanged. A
    /// client the user never authorized (or already revoked) reads as not
    /// found. Signing in again through the client grants afresh.
    pub async fn revoke_oauth_client(
        &self,
        user_id: &str,
        client_id: &str,
    ) -> Result<(), ToolError> {
        crate::service::rerun_on_contention("revoke oauth client", || {
            self.revoke_oauth_client_once(user_id, client_id)
        })
        .await
    }

    /// One attempt at [`Store::revoke_oauth_client`].
    async fn revoke_oauth_client_once(
        &self,
        user_id: &str,
        client_id: &str,
    ) -> Result<(), ToolError> {
        let not_found = || {
            ToolError::not_found(format!(
                "No OAuth client {client_id:?} is authorized for this user."
            ))
        };
        let Ok(client_id) = zm_contracts::ids::parse_id(IdKind::OauthClient, client_id) else {
            return Err(not_found());
        };
        let now = self.now();
        let mut tx = self.write_tx().await?;
        // The codes, families and tokens first, then the grant: the order an
        // exchange takes them in (its code, then the grant), so on
        // PostgreSQL the two wait for each other instead of deadlocking.
        let holder = crate::identity::OauthHolder {
            user_id,
            client_id: Some(&client_id),
        };
        let families =
            crate::identity::revoke_oauth_of(&mut tx, holder, "client_revoked", now).await?;
        let done = sqlx::query(
            "UPDATE oauth_grants SET revoked_at = $1 WHERE client_id = $2 AND user_id = $3 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(&client_id)
        .bind(user_id)
        .execute(&mut *tx)
        .await
        .db("revoke grant")?;
        if done.rows_affected() == 0 {
            // Dropping the transaction undoes the revocations above.
            return Err(not_found());
        }
        // The audit row in the revocation's own transaction, as a token's
        // revocation and a disable write theirs: a revocation is never
        // left unrecorded (one written after the commit could be dropped
        // when audit rows queue up behind a busy writer).
        let payload = json!({"client_id": client_id, "families_revoked": families});
        let entry = AuditEntry {
            command: "oauth.revoke",
            payload: &payload,
            outcome: Ok(()),
            duration_ms: 0,
        };
        let actor = Caller {
            user_id: user_id.to_string(),
            ..Default::default()
        };
        self.audit_in(&mut tx, &actor, &entry).await?;
        tx.commit().await.db("commit client revocation")?;
        Ok(())
    }
}

/// Is the account there and not disabled? (Disabling revokes every
/// family; this refuses one that a sign-in racing the disable started.)
async fn account_enabled(
    conn: &mut sqlx::AnyConnection,
    user_id: &str,
) -> Result<bool, OauthError> {
    let disabled: Option<Option<i64>> =
        sqlx::query_scalar("SELECT disabled_at FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(&mut *conn)
            .await
            .db("account state")?;
    Ok(matches!(disabled, Some(None)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{REDIRECT, code_for, exchange_code};

    /// A new user (a unique email: the PostgreSQL database is shared) and
    /// a client registered for [`REDIRECT`].
    async fn user_and_client(store: &Store, tag: &str) -> (crate::User, String) {
        let email = format!("{tag}-{}@example.com", random_secret(10).to_lowercase());
        let user = store
            .create_user(&email, "a long test password")
            .await
            .unwrap();
        let client = store
            .register_oauth_client(Some("t"), &[REDIRECT.to_string()], None, None)
            .await
            .unwrap()
            .id;
        (user, client)
    }

    #[test]
    fn base64url_matches_rfc_4648_vectors() {
        assert_eq!(base64url(b""), "");
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
        assert_eq!(base64url(b"foob"), "Zm9vYg");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url(&[0u8; 32]).len(), 43);
    }

    #[test]
    fn scopes_are_canonical() {
        assert_eq!(parse_scope(None).unwrap(), "mcp:read mcp:write");
        assert_eq!(parse_scope(Some("  ")).unwrap(), "mcp:read mcp:write");
        assert_eq!(
            parse_scope(Some("mcp:write mcp:read mcp:write")).unwrap(),
            "mcp:read mcp:write"
        );
        assert_eq!(parse_scope(Some("mcp:read")).unwrap(), "mcp:read");
        assert_eq!(parse_scope(Some("mcp:read admin")).unwrap_err(), "admin");
        // OpenID Connect's and `offline_access` are dropped, not refused.
        assert_eq!(
            parse_scope(Some("openid mcp:read offline_access")).unwrap(),
            "mcp:read"
        );
        assert_eq!(
            parse_scope(Some("offline_access")).unwrap(),
            "mcp:read mcp:write"
        );
        assert_eq!(requested_scope(Some("offline_access openid")), Ok(None));
        assert_eq!(requested_scope(Some(" ")), Ok(None));
        assert_eq!(
            requested_scope(Some(" mcp:read\n")),
            Ok(Some("mcp:read".into())),
            "the ends trimmed, as before"
        );
        assert_eq!(
            requested_scope(Some("profile mcp:write")),
            Ok(Some("mcp:write".into()))
        );
        assert_eq!(parse_scope(Some("openid admin")).unwrap_err(), "admin");
    }

    /// A busy database is not a server fault: the token endpoint says so
    /// (`temporarily_unavailable`), and the audit row keeps its code.
    #[test]
    fn a_busy_store_is_temporarily_unavailable() {
        let busy = OauthError::from(ToolError::rate_limited("busy"));
        assert_eq!(busy.code(), "temporarily_unavailable");
        assert_eq!(
            busy.audited(ToolError::validation).code,
            zm_contracts::ErrorCode::RateLimited
        );
        let broken = OauthError::from(ToolError::internal());
        assert_eq!(broken.code(), "server_error");
        let refused = OauthError::InvalidGrant("spent".into());
        assert_eq!(
            refused.audited(ToolError::validation).code,
            zm_contracts::ErrorCode::ValidationFailed
        );
    }

    /// A disabled account's code and refresh token are refused even where
    /// the disable did not revoke them (a sign-in that slipped past it):
    /// the flag is written here alone, without `disable_user`'s revocation.
    #[tokio::test]
    async fn exchange_and_refresh_refuse_a_disabled_account() {
        for (label, _dir, store) in crate::testing::stores().await {
            let (user, client) = user_and_client(&store, "disabled").await;
            let code = |credential| code_for(&store, &client, &user.id, credential);
            let exchange = |code: String| {
                let (store, client) = (&store, &client);
                async move { exchange_code(store, client, &code).await }
            };
            let credential = store
                .user_by_id(&user.id)
                .await
                .unwrap()
                .unwrap()
                .credential;
            let first = exchange(code(credential).await).await.unwrap();
            let pending = code(credential).await;
            sqlx::query("UPDATE users SET disabled_at = $1 WHERE id = $2")
                .bind(store.now())
                .bind(&user.id)
                .execute(&store.pool)
                .await
                .unwrap();
            match exchange(pending).await {
                Err(OauthError::InvalidGrant(d)) => {
                    assert!(d.contains("disabled"), "[{label}] {d}");
                }
                other => panic!("[{label}] a disabled account's code: {other:?}"),
            }
            match store
                .refresh_oauth_token(&first.refresh_token, &first.client_id, None, None, None)
                .await
            {
                Err(OauthError::InvalidGrant(_)) => {}
                other => panic!("[{label}] a disabled account's refresh: {other:?}"),
            }
            // Enabled again, the family the disable did not revoke rotates.
            sqlx::query("UPDATE users SET disabled_at = NULL WHERE id = $1")
                .bind(&user.id)
                .execute(&store.pool)
                .await
                .unwrap();
            assert!(
                store
                    .refresh_oauth_token(&first.refresh_token, &first.client_id, None, None, None)
                    .await
                    .is_ok(),
                "[{label}] the refusal spent nothing"
            );
        }
    }

    /// A connected app that keeps refreshing leaves a bounded number of
    /// token rows (those expired for a day go), and its newest pair works.
    #[tokio::test]
    async fn rotation_does_not_pile_up_token_rows() {
        for (label, _dir, store) in crate::testing::stores().await {
            let (user, client) = user_and_client(&store, "rotate").await;
            let credential = store
                .user_by_id(&user.id)
                .await
                .unwrap()
                .unwrap()
                .credential;
            let code = code_for(&store, &client, &user.id, credential).await;
            let mut pair = exchange_code(&store, &client, &code).await.unwrap();
            let rows = || async {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM access_tokens WHERE user_id = $1",
                )
                .bind(&user.id)
                .fetch_one(&store.pool)
                .await
                .unwrap()
            };
            // Forty days of refreshes every six hours: 322 rows without
            // pruning. Kept: the refresh tokens of the last 31 days (a
            // replayed one still revokes its family while it could have
            // been used) and the access tokens of the last 25 hours.
            for _ in 0..160 {
                store.clock().advance_ms(6 * ACCESS_TTL_MS);
                pair = store
                    .refresh_oauth_token(&pair.refresh_token, &client, None, None, None)
                    .await
                    .unwrap();
            }
            let kept = rows().await;
            assert!(kept <= 31 * 4 + 1 + 5 + 1, "[{label}] {kept} rows");
            assert!(
                store
                    .authenticate(&pair.access_token)
                    .await
                    .unwrap()
                    .is_some(),
                "[{label}]"
            );
        }
    }

    /// A failed sign-in is audited alike whether or not its email names
    /// an account: on SQLite, while a write holds the writer's turn, both
    /// answer at once (an unknown email's row was written on the pool,
    /// waiting on the busy timeout with a pooled connection while a
    /// known one's did not: how long a refusal took told which emails
    /// have accounts), and both rows land once the turn is free.
    #[tokio::test]
    async fn a_failed_sign_in_is_audited_alike_whether_or_not_the_email_has_an_account() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let (user, client) = user_and_client(&store, "known").await;
        let unknown = format!("nobody-{}@example.com", random_secret(10).to_lowercase());
        // (known actors' rows, anonymous rows) of failed sign-ins.
        let counts = || {
            let store = store.clone();
            async move {
                sqlx::query_as::<_, (i64, i64)>(
                    "SELECT COUNT(actor_id), COUNT(*) - COUNT(actor_id) FROM audit_log \
                     WHERE command IN ('oauth.login', 'web.login') AND outcome = 'error'",
                )
                .fetch_one(&store.pool)
                .await
                .unwrap()
            }
        };
        let held = store.write_tx().await.unwrap();
        for email in [user.email.as_str(), unknown.as_str()] {
            tokio::time::timeout(std::time::Duration::from_secs(120), async {
                store.audit_oauth_login_failure(email, &client, None).await;
                store.audit_web_login(email, None, None).await;
            })
            .await
            .expect("answered while the turn is held (a hang guard, not a timing)");
        }
        assert_eq!(counts().await, (0, 0), "not while the turn is held");
        drop(held);
        // The rows wait in tasks of their own: wait for those.
        store.audits.close();
        tokio::time::timeout(std::time::Duration::from_secs(120), store.audits.wait())
            .await
            .expect("the waiting rows are written (a hang guard, not a timing)");
        assert_eq!(
            counts().await,
            (2, 2),
            "both emails' rows (known, unknown), once the turn is free"
        );
    }

    #[test]
    fn ct_eq_compares_whole_strings() {
        assert!(ct_eq("abc", "abc"));
        assert!(!ct_eq("abc", "abd"));
        assert!(!ct_eq("abc", "ab"));
    }
}
