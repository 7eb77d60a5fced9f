//! Users and access tokens.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rand::Rng;
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use zm_contracts::{IdKind, ToolError};

use crate::audit::AuditEntry;
use crate::db::{DbResult, InstanceLock};
use crate::rows::{FromAnyRow, col, enum_col, flag_col, stored_enum};
use crate::sql::Sql;
use crate::store::{Caller, Store};

/// Token scope: read tools only.
pub const SCOPE_READ: &str = "mcp:read";
/// Token scope: every tool but `delete_account`.
pub const SCOPE_WRITE: &str = "mcp:write";
/// Token scope: `delete_account` (with `mcp:write`). No token carries it
/// unless it was asked for explicitly.
pub const SCOPE_ACCOUNT_DELETE: &str = "account:delete";
/// Prefix of a personal access token.
pub const PAT_PREFIX: &str = "zm_pat_";

stored_enum! {
    /// What a row of `access_tokens` is.
    pub TokenKind {
        /// A personal access token.
        Pat = "pat",
        /// An OAuth access token (one hour).
        OauthAccess = "oauth_access",
        /// A rotating OAuth refresh token.
        OauthRefresh = "oauth_refresh",
    }
}

impl TokenKind {
    /// The prefix of this kind's secrets.
    pub fn prefix(self) -> &'static str {
        match self {
            TokenKind::Pat => PAT_PREFIX,
            TokenKind::OauthAccess => crate::oauth::ACCESS_TOKEN_PREFIX,
            TokenKind::OauthRefresh => crate::oauth::REFRESH_TOKEN_PREFIX,
        }
    }

    /// How long a token of this kind lives (a personal token: until revoked).
    pub fn lifetime_ms(self) -> Option<i64> {
        match self {
            TokenKind::Pat => None,
            TokenKind::OauthAccess => Some(crate::oauth::ACCESS_TTL_MS),
            TokenKind::OauthRefresh => Some(crate::oauth::REFRESH_TTL_MS),
        }
    }
}

/// A token to create.
#[derive(Debug, Clone, Copy)]
pub struct NewToken<'a> {
    pub user_id: &'a str,
    pub kind: TokenKind,
    pub name: Option<&'a str>,
    /// `mcp:read` and/or `mcp:write`.
    pub scopes: &'a [&'a str],
    /// Lifetime; `None` never expires (see [`TokenKind::lifetime_ms`]).
    pub ttl_ms: Option<i64>,
    /// The password a person just confirmed for it (the dashboard): the
    /// token is made only while the account still has that password and
    /// is enabled, so a `user passwd --revoke-tokens` or `user disable`
    /// committed while the confirmation was being checked is not outrun.
    /// `None` for the CLI, acting as the operator.
    pub confirmed: Option<Credential>,
}

/// A user as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub email: String,
    pub is_owner: bool,
    pub created_at: i64,
    /// Set while the account is disabled: every credential is refused.
    pub disabled_at: Option<i64>,
    /// `false` for an account created without a password (the owner
    /// `zero-memory stdio` creates on a fresh database): no password
    /// verifies until one is set.
    pub has_password: bool,
    /// Which password the account had when this row was read.
    pub credential: Credential,
}

/// A tag of the password hash an account had (16 bytes of its sha256, not
/// the hash). An OAuth sign-in carries the tag of the password it verified,
/// and its code is issued only while the account still has that password
/// and is enabled: a `user passwd` or `user disable` committed while the
/// sign-in was between checking the password and storing the code is not
/// outrun (see [`Store::issue_oauth_code`](crate::Store::issue_oauth_code)).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Credential([u8; 16]);

impl Credential {
    /// The tag itself, to bind something to this password (a MAC's
    /// input: a password change voids it); never shown.
    pub fn tag(&self) -> [u8; 16] {
        self.0
    }

    pub(crate) fn of(password_hash: &str) -> Credential {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(password_hash.as_bytes());
        let mut tag = [0; 16];
        tag.copy_from_slice(&digest[..16]);
        Credential(tag)
    }
}

/// The surface a credential change was made on: what a person confirmed
/// with their password is the dashboard's; the rest the CLI's (the
/// operator's).
fn confirmed_on(confirmed: Option<Credential>) -> crate::Transport {
    match confirmed {
        Some(_) => crate::Transport::Dashboard,
        None => crate::Transport::Cli,
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(..)")
    }
}

impl User {
    /// Is the account disabled?
    pub fn is_disabled(&self) -> bool {
        self.disabled_at.is_some()
    }
}

/// The `password_hash` of an account without a password. An argon2 hash
/// (PHC string) always starts with `$`, so this one never verifies.
const NO_PASSWORD: &str = "!no-password";

/// `SELECT` of the columns a [`User`] row decodes, `FROM users`, then `$rest`.
macro_rules! select_users {
    ($rest:literal) => {
        concat!(
            "SELECT id, email, is_owner, created_at, disabled_at, password_hash FROM users ",
            $rest
        )
    };
}

/// What changing a password (or disabling an account) revoked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Revoked {
    /// OAuth token families (each with its access and refresh tokens).
    pub oauth_families: u64,
    /// Personal access tokens.
    pub personal_tokens: u64,
}

/// A token as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub user_id: String,
    pub kind: TokenKind,
    pub name: Option<String>,
    pub scopes: Vec<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A token row that authenticates now (`$2` the time, `$3`/`$4` the two
/// kinds that authenticate): not revoked nor expired, its account
/// enabled, its OAuth family (if any) not revoked. [`Store::authenticate`]
/// and [`Store::token_in_force`] decide alike.
const TOKEN_IN_FORCE: &str = "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2) \
     AND kind IN ($3, $4) \
     AND NOT EXISTS (SELECT 1 FROM users u WHERE u.id = access_tokens.user_id AND u.disabled_at IS NOT NULL) \
     AND (family_id IS NULL OR NOT EXISTS (SELECT 1 FROM oauth_families f WHERE f.id = access_tokens.family_id AND f.revoked_at IS NOT NULL))";

/// What a valid bearer token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user_id: String,
    pub token_id: String,
    pub scopes: Vec<String>,
    /// A personal access token, or an MCP app's OAuth access token.
    pub kind: TokenKind,
}

impl Authenticated {
    /// Does the token carry `mcp:write`?
    pub fn can_write(&self) -> bool {
        self.grant().can_write()
    }

    /// What the token's scopes allow: `account:delete` counts only with
    /// `mcp:write`.
    pub fn grant(&self) -> crate::Grant {
        let has = |scope: &str| self.scopes.iter().any(|s| s == scope);
        match (has(SCOPE_WRITE), has(SCOPE_ACCOUNT_DELETE)) {
            (true, true) => crate::Grant::Full,
            (true, false) => crate::Grant::ReadWrite,
            (false, _) => crate::Grant::ReadOnly,
        }
    }
}

/// sha256 hex of a secret: what the database keeps.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A random URL-safe secret of `n` characters.
pub fn random_secret(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// An email address as accounts store it (trimmed, lowercase), or why it
/// is not one.
pub fn normalize_email(email: &str) -> Result<String, ToolError> {
    let e = email.trim().to_lowercase();
    let ok = e.len() >= 3 && e.len() <= 320 && e.contains('@') && !e.contains(char::is_whitespace);
    if ok {
        Ok(e)
    } else {
        Err(ToolError::validation(format!(
            "not a valid email address: {email:?}"
        )))
    }
}

/// The longest password a user may set, in bytes of UTF-8. Signing in
/// takes any length a form carries (a password set before this limit still
/// signs in), so no password can be set that a sign-in form then refuses.
pub const MAX_PASSWORD_BYTES: usize = 4096;

fn hash_password(password: &str) -> Result<String, ToolError> {
    // Characters, as the message says: "éééé" is 8 bytes but 4 characters.
    if password.chars().count() < 8 {
        return Err(ToolError::validation(
            "the password must be at least 8 characters",
        ));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(ToolError::validation(format!(
            "the password must be at most {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| crate::db::internal("salt", e))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| crate::db::internal("hash password", e))
}

/// What a sign-in is checked against when the email names no account, or
/// one without a password or disabled, so that the failure path costs what
/// a real check does: an argon2id hash with [`Argon2::default`]'s
/// parameters (a test holds them equal) and a random output no known
/// password gives. A constant rather than computed on first use, so the
/// first failure costs what every later one does and no hash is ever
/// computed on a runtime worker, outside `password_checks`' turns.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$Tfagsqdq82zJ8rOYuMyEEg$rlR94GCXTl/IT9o5hgjLFmUyce/opm8FXusg3OW+qRk";

fn verify(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// A user row, as [`select_users!`] selects it.
impl FromAnyRow for User {
    fn from_row(r: &AnyRow) -> Result<User, ToolError> {
        Ok(User {
            id: col(r, "id")?,
            email: col(r, "email")?,
            is_owner: flag_col(r, "is_owner")?,
            created_at: col(r, "created_at")?,
            disabled_at: col(r, "disabled_at")?,
            has_password: col::<String>(r, "password_hash")? != NO_PASSWORD,
            credential: Credential::of(&col::<String>(r, "password_hash")?),
        })
    }
}

/// A space-separated scope list.
fn split_scopes(stored: &str) -> Vec<String> {
    stored.split(' ').map(str::to_string).collect()
}

/// A token row as listed (never its hash).
impl FromAnyRow for TokenInfo {
    fn from_row(r: &AnyRow) -> Result<TokenInfo, ToolError> {
        Ok(TokenInfo {
            id: col(r, "id")?,
            user_id: col(r, "user_id")?,
            kind: enum_col(r, "kind")?,
            name: col(r, "name")?,
            scopes: split_scopes(&col::<String>(r, "scopes")?),
            created_at: col(r, "created_at")?,
            expires_at: col(r, "expires_at")?,
            last_used_at: col(r, "last_used_at")?,
            revoked_at: col(r, "revoked_at")?,
        })
    }
}

/// A live token's row (`id, user_id, scopes, kind`).
impl FromAnyRow for Authenticated {
    fn from_row(r: &AnyRow) -> Result<Authenticated, ToolError> {
        Ok(Authenticated {
            user_id: col(r, "user_id")?,
            token_id: col(r, "id")?,
            scopes: split_scopes(&col::<String>(r, "scopes")?),
            kind: enum_col(r, "kind")?,
        })
    }
}

/// Whose OAuth access to end: every client of a user, or one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OauthHolder<'a> {
    pub user_id: &'a str,
    /// `None`: every client.
    pub client_id: Option<&'a str>,
}

/// Revoke the live OAuth token families of a holder (a user's every
/// client, or one client), with their tokens, and spend the authorization
/// codes not yet exchanged (a code from a sign-in before the change cannot
/// start a new family). Returns the families revoked.
pub(crate) async fn revoke_oauth_of(
    conn: &mut sqlx::AnyConnection,
    holder: OauthHolder<'_>,
    reason: &str,
    now: i64,
) -> Result<u64, ToolError> {
    // (table, what revoking sets, the filter of rows still live, extra SET)
    let filter = |sql: &mut Sql, live: &str| {
        sql.push(" WHERE user_id = ").bind_str(holder.user_id);
        if let Some(client) = holder.client_id {
            sql.push(" AND client_id = ").bind_str(client);
        }
        sql.push(" AND ").push(live);
    };
    // Codes first: on PostgreSQL an exchange in flight holds its code's
    // row, so this waits for it to commit, and the statements after it
    // then see the family it started and revoke that too.
    let mut codes = Sql::new("UPDATE oauth_codes SET used_at = ");
    codes.bind_i64(now);
    filter(&mut codes, "used_at IS NULL");
    codes.query().execute(&mut *conn).await.db("spend codes")?;
    let mut families = Sql::new("UPDATE oauth_families SET revoked_at = ");
    families
        .bind_i64(now)
        .push(", revoked_reason = ")
        .bind_str(reason);
    filter(&mut families, "revoked_at IS NULL");
    let families = families
        .query()
        .execute(&mut *conn)
        .await
        .db("revoke families")?;
    let mut tokens = Sql::new("UPDATE access_tokens SET revoked_at = ");
    tokens.bind_i64(now);
    filter(&mut tokens, "family_id IS NOT NULL AND revoked_at IS NULL");
    tokens
        .query()
        .execute(&mut *conn)
        .await
        .db("revoke oauth tokens")?;
    Ok(families.rows_affected())
}

/// How many accounts people sign in as: team stewards (rows a deleted
/// team keeps for 30 days) are not counted, so the first person after
/// them is the owner (a database left with only a steward made its next
/// user a non-owner, and the server then had none).
const PEOPLE_COUNT: &str = "SELECT COUNT(*) FROM users WHERE id NOT IN (SELECT steward_id FROM teams WHERE steward_id IS NOT NULL)";

impl Store {
    /// What a sign-in stores (a dashboard session, an OAuth code) is
    /// stored only while the account still has the password the sign-in
    /// verified and is enabled: read here, in the storing transaction,
    /// and on PostgreSQL held (`FOR NO KEY UPDATE`, which leaves foreign-key
    /// checks on the row free) until it commits, so a `user passwd` or
    /// `user disable` either refuses it or comes after and ends it.
    /// Returns the account's email; `unauthorized` otherwise.
    pub(crate) async fn hold_signing_in(
        &self,
        tx: &mut sqlx::AnyConnection,
        user_id: &str,
        credential: Credential,
    ) -> Result<String, ToolError> {
        let mut sql = Sql::new("SELECT email, password_hash, disabled_at FROM users WHERE id = ");
        sql.bind_str(user_id).push(self.backend.hold_rows());
        let row = sql
            .query()
            .fetch_optional(&mut *tx)
            .await
            .db("signing-in account")?;
        match &row {
            Some(r)
                if col::<Option<i64>>(r, "disabled_at")?.is_none()
                    && Credential::of(&col::<String>(r, "password_hash")?) == credential =>
            {
                col(r, "email")
            }
            _ => Err(ToolError::unauthorized(
                "The account's password changed, or the account was disabled, while signing in: sign in again.",
            )),
        }
    }

    /// Create a user. The first user becomes the owner.
    pub async fn create_user(&self, email: &str, password: &str) -> Result<User, ToolError> {
        let email = normalize_email(email)?;
        let hash = hash_password(password)?;
        crate::service::rerun_on_contention("create user", || {
            self.create_user_once(email.clone(), &hash)
        })
        .await
    }

    /// One attempt at [`Store::create_user`], the password already hashed.
    async fn create_user_once(&self, email: String, hash: &str) -> Result<User, ToolError> {
        let id = IdKind::User.generate();
        let now = self.now();
        let mut tx = self.write_tx().await?;
        // One creation at a time across instances (PostgreSQL): two first
        // users at once would both count no user and both become owner.
        crate::db::lock_across_instances(&mut tx, self.backend, InstanceLock::UserCreation)
            .await
            .db("user creation lock")?;
        let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE email = $1")
            .bind(&email)
            .fetch_one(&mut *tx)
            .await
            .db("user exists")?;
        if exists > 0 {
            return Err(ToolError::conflict(format!(
                "a user with email {email} already exists"
            )));
        }
        let users: i64 = sqlx::query_scalar(PEOPLE_COUNT)
            .fetch_one(&mut *tx)
            .await
            .db("count users")?;
        let is_owner = i64::from(users == 0);
        sqlx::query("INSERT INTO users (id, email, password_hash, is_owner, created_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(&id)
            .bind(&email)
            .bind(hash)
            .bind(is_owner)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("insert user")?;
        let payload = serde_json::json!({"is_owner": is_owner == 1, "password": true});
        self.audit_identity(&mut tx, &id, "user.add", &payload, crate::Transport::Cli)
            .await?;
        tx.commit().await.db("commit user")?;
        Ok(User {
            id,
            email,
            is_owner: is_owner == 1,
            created_at: now,
            disabled_at: None,
            has_password: true,
            credential: Credential::of(hash),
        })
    }

    /// On a database without any user, create the owner account without a
    /// password (none verifies until `change_password`): what a local `stdio`
    /// start needs. `None` when a user exists already.
    pub async fn create_local_owner(&self, email: &str) -> Result<Option<User>, ToolError> {
        let email = normalize_email(email)?;
        let id = IdKind::User.generate();
        let now = self.now();
        let mut tx = self.write_tx().await?;
        crate::db::lock_across_instances(&mut tx, self.backend, InstanceLock::UserCreation)
            .await
            .db("user creation lock")?;
        let users: i64 = sqlx::query_scalar(PEOPLE_COUNT)
            .fetch_one(&mut *tx)
            .await
            .db("count users")?;
        if users > 0 {
            return Ok(None);
        }
        // Creations take turns (above); a user made meanwhile by another
        // way in would still be met here by its email.
        let inserted = sqlx::query("INSERT INTO users (id, email, password_hash, is_owner, created_at) VALUES ($1, $2, $3, 1, $4) ON CONFLICT (email) DO NOTHING")
            .bind(&id)
            .bind(&email)
            .bind(NO_PASSWORD)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("insert local owner")?;
        if inserted.rows_affected() == 0 {
            return Ok(None);
        }
        let payload = serde_json::json!({"is_owner": true, "password": false});
        self.audit_identity(&mut tx, &id, "user.add", &payload, crate::Transport::Cli)
            .await?;
        tx.commit().await.db("commit local owner")?;
        Ok(Some(User {
            id,
            email,
            is_owner: true,
            created_at: now,
            disabled_at: None,
            has_password: false,
            credential: Credential::of(NO_PASSWORD),
        }))
    }

    pub async fn list_users(&self) -> Result<Vec<User>, ToolError> {
        // Team stewards are rows nobody signs in as: not users to list.
        let rows = sqlx::query(select_users!(
            "WHERE id NOT IN (SELECT steward_id FROM teams WHERE steward_id IS NOT NULL) ORDER BY created_at, id"
        ))
            .fetch_all(&self.pool)
            .await
            .db("list users")?;
        User::from_rows(&rows)
    }

    /// The account signing in as `email`. A team's steward is no account
    /// (nobody signs in as it, and `user passwd` / `user enable` must not
    /// make one that reads a deleted team's memories): not found.
    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>, ToolError> {
        let email = email.trim().to_lowercase();
        let row = sqlx::query(select_users!(
            "WHERE email = $1 AND id NOT IN (SELECT steward_id FROM teams WHERE steward_id IS NOT NULL)"
        ))
            .bind(email)
            .fetch_optional(&self.pool)
            .await
            .db("user by email")?;
        row.as_ref().map(User::from_row).transpose()
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<User>, ToolError> {
        let row = sqlx::query(select_users!("WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .db("user by id")?;
        row.as_ref().map(User::from_row).transpose()
    }

    /// The owner account, if one exists.
    pub async fn owner(&self) -> Result<Option<User>, ToolError> {
        let row = sqlx::query(select_users!(
            "WHERE is_owner = 1 ORDER BY created_at LIMIT 1"
        ))
        .fetch_optional(&self.pool)
        .await
        .db("owner")?;
        row.as_ref().map(User::from_row).transpose()
    }

    /// Check an email and password. The failure path does the same work
    /// whether or not the user exists, has a password or is disabled; a
    /// disabled account or one without a password never verifies.
    pub async fn verify_password(
        &self,
        email: &str,
        password: &str,
    ) -> Result<Option<User>, ToolError> {
        let email = email.trim().to_lowercase();
        let row = sqlx::query(select_users!("WHERE email = $1"))
            .bind(&email)
            .fetch_optional(&self.pool)
            .await
            .db("verify password")?;
        let (user, hash) = match &row {
            Some(r) => {
                let user = User::from_row(r)?;
                if user.has_password && !user.is_disabled() {
                    (Some(user), col::<String>(r, "password_hash")?)
                } else {
                    (None, DUMMY_HASH.to_string())
                }
            }
            None => (None, DUMMY_HASH.to_string()),
        };
        let password = password.to_string();
        // A turn among the checks running at once. It waits as long as it
        // takes (the connection cap and the per-address limits bound the
        // queue): a refusal here would count against the account's
        // back-off, which counted the attempt before this check, and a
        // flood under other emails would lock real accounts out.
        let turn = std::sync::Arc::clone(&self.password_checks)
            .acquire_owned()
            .await
            .map_err(|e| crate::db::internal("password check turn", e))?;
        let ok = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            verify(&password, &hash)
        })
        .await
        .unwrap_or(false);
        Ok(if ok { user } else { None })
    }

    /// Set a user's password and end what the old one let in: every
    /// dashboard session and every OAuth token family of the user (the
    /// apps sign in again), and, with `revoke_personal_tokens`, every
    /// personal access token. One transaction.
    pub async fn change_password(
        &self,
        user_id: &str,
        password: &str,
        revoke_personal_tokens: bool,
    ) -> Result<Revoked, ToolError> {
        self.change_confirmed_password(user_id, None, password, revoke_personal_tokens)
            .await
            .map(|(revoked, _)| revoked)
    }

    /// [`Store::change_password`] for a person who confirmed their current
    /// password (`confirmed`, the tag of what they verified): refused
    /// `unauthorized` when the password changed or the account was
    /// disabled since (an operator's `user passwd` is not overwritten by a
    /// change checked against the old one). Also returns the new
    /// password's tag, for the session that goes on under it.
    pub async fn change_confirmed_password(
        &self,
        user_id: &str,
        confirmed: Option<Credential>,
        password: &str,
        revoke_personal_tokens: bool,
    ) -> Result<(Revoked, Credential), ToolError> {
        let hash = hash_password(password)?;
        let revoked = crate::service::rerun_on_contention("change password", || {
            self.change_password_once(user_id, &hash, revoke_personal_tokens, confirmed)
        })
        .await?;
        Ok((revoked, Credential::of(&hash)))
    }

    /// One attempt at [`Store::change_password`], the password already
    /// hashed.
    async fn change_password_once(
        &self,
        user_id: &str,
        hash: &str,
        revoke_personal_tokens: bool,
        confirmed: Option<Credential>,
    ) -> Result<Revoked, ToolError> {
        let now = self.now();
        let mut tx = self.write_tx().await?;
        if let Some(credential) = confirmed {
            self.hold_signing_in(&mut tx, user_id, credential).await?;
        }
        let done = sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(hash)
            .bind(user_id)
            .execute(&mut *tx)
            .await
            .db("set password")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found("user not found"));
        }
        sqlx::query("DELETE FROM web_sessions WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *tx)
            .await
            .db("end web sessions")?;
        let holder = OauthHolder {
            user_id,
            client_id: None,
        };
        let oauth_families = revoke_oauth_of(&mut tx, holder, "password_changed", now).await?;
        let personal_tokens = if revoke_personal_tokens {
            sqlx::query(
                "UPDATE access_tokens SET revoked_at = $1 WHERE user_id = $2 AND kind = $3 AND revoked_at IS NULL",
            )
            .bind(now)
            .bind(user_id)
            .bind(TokenKind::Pat.as_str())
            .execute(&mut *tx)
            .await
            .db("revoke personal tokens")?
            .rows_affected()
        } else {
            0
        };
        let revoked = Revoked {
            oauth_families,
            personal_tokens,
        };
        self.audit_account_change(
            &mut tx,
            user_id,
            "user.passwd",
            revoked,
            confirmed_on(confirmed),
        )
        .await?;
        tx.commit().await.db("commit password")?;
        Ok(revoked)
    }

    /// On PostgreSQL, hold the caller's account row (`FOR KEY SHARE`, after
    /// the teams a write holds: the order an erasure takes them in) until
    /// the write commits, for a write that refers to no row of the account
    /// (a link between others' memories, which names the account only as
    /// its owner): an erasure of the account under way on another
    /// instance waits for it and removes the row with the account's
    /// others, or ran first and the write is refused (`conflict`). A
    /// write that inserts a memory holds the row through the memory's
    /// owner key already. SQLite's writes take turns.
    pub(crate) async fn hold_account(
        &self,
        tx: &mut sqlx::AnyConnection,
        user_id: &str,
    ) -> Result<(), ToolError> {
        if self.backend != crate::db::Backend::Postgres {
            return Ok(());
        }
        let held: Option<String> =
            sqlx::query_scalar("SELECT id FROM users WHERE id = $1 FOR KEY SHARE")
                .bind(user_id)
                .fetch_optional(&mut *tx)
                .await
                .db("hold the account")?;
        match held {
            Some(_) => Ok(()),
            None => Err(ToolError::conflict(crate::db::GONE_MEANWHILE)),
        }
    }

    /// Disable an account: from now on every credential of the user is
    /// refused — personal tokens (kept, usable again once enabled), OAuth
    /// tokens (their families are revoked: the apps sign in again after
    /// [`Store::enable_user`]) and the password. `Ok(None)` when it was
    /// already disabled.
    pub async fn disable_user(&self, user_id: &str) -> Result<Option<Revoked>, ToolError> {
        crate::service::rerun_on_contention("disable user", || self.disable_user_once(user_id))
            .await
    }

    /// One attempt at [`Store::disable_user`].
    async fn disable_user_once(&self, user_id: &str) -> Result<Option<Revoked>, ToolError> {
        let now = self.now();
        let mut tx = self.write_tx().await?;
        let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_one(&mut *tx)
            .await
            .db("user exists")?;
        if exists == 0 {
            return Err(ToolError::not_found("user not found"));
        }
        // In turn with changes to the account's teams: an admin leaving
        // beside this counted the account as an enabled admin, and its
        // team would be left with none (see `other_admins`).
        self.hold_teams_of_member(&mut tx, user_id, false).await?;
        let done =
            sqlx::query("UPDATE users SET disabled_at = $1 WHERE id = $2 AND disabled_at IS NULL")
                .bind(now)
                .bind(user_id)
                .execute(&mut *tx)
                .await
                .db("disable user")?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        // Dashboard sessions end too (their lookup also refuses a disabled
        // account, so this only clears the rows).
        sqlx::query("DELETE FROM web_sessions WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *tx)
            .await
            .db("end web sessions")?;
        let holder = OauthHolder {
            user_id,
            client_id: None,
        };
        let revoked = Revoked {
            oauth_families: revoke_oauth_of(&mut tx, holder, "user_disabled", now).await?,
            personal_tokens: 0,
        };
        self.audit_account_change(
            &mut tx,
            user_id,
            "user.disable",
            revoked,
            crate::Transport::Cli,
        )
        .await?;
        tx.commit().await.db("commit disable")?;
        Ok(Some(revoked))
    }

    /// The audit row of an operator's change to an account (`user passwd`,
    /// `user disable`, `user enable`), in the change's transaction: what it
    /// revoked, never a secret.
    async fn audit_account_change(
        &self,
        tx: &mut sqlx::AnyConnection,
        user_id: &str,
        command: &str,
        revoked: Revoked,
        transport: crate::Transport,
    ) -> Result<(), ToolError> {
        let payload = serde_json::json!({
            "oauth_families_revoked": revoked.oauth_families,
            "personal_tokens_revoked": revoked.personal_tokens,
        });
        self.audit_identity(tx, user_id, command, &payload, transport)
            .await
    }

    /// The audit row of a change to an account or its credentials, in the
    /// change's transaction, with `user_id` as its actor (the audit log is
    /// read per account): what changed, never a secret; made on
    /// `transport` (the CLI, or the dashboard for what a person confirmed
    /// with their password there).
    async fn audit_identity(
        &self,
        tx: &mut sqlx::AnyConnection,
        user_id: &str,
        command: &str,
        payload: &serde_json::Value,
        transport: crate::Transport,
    ) -> Result<(), ToolError> {
        let entry = AuditEntry {
            command,
            payload,
            outcome: Ok(()),
            duration_ms: 0,
        };
        let actor = Caller {
            transport,
            ..Caller::new(user_id)
        };
        self.audit_in(tx, &actor, &entry).await
    }

    /// Make `user_id` the server's owner (`zero-memory user owner`): the
    /// person a team may be given accounts directly by, and whom `stdio`
    /// and `team` act as without `--user`/`--as`. The owner before, if
    /// any, is one no longer. `false` when the account already was. An
    /// owner erased their account leaves none; this appoints the next.
    pub async fn make_owner(&self, user_id: &str) -> Result<bool, ToolError> {
        crate::service::rerun_on_contention("make owner", || self.make_owner_once(user_id)).await
    }

    /// One attempt at [`Store::make_owner`].
    async fn make_owner_once(&self, user_id: &str) -> Result<bool, ToolError> {
        let Some(user) = self.user_by_id(user_id).await? else {
            return Err(ToolError::not_found("user not found"));
        };
        if user.is_disabled() {
            return Err(ToolError::conflict(format!(
                "{} is disabled: enable it first (an owner that cannot sign in runs nothing).",
                user.email
            )));
        }
        let mut tx = self.write_tx().await?;
        // One change of owner at a time across instances, as the first
        // user's creation (which makes the first owner).
        crate::db::lock_across_instances(&mut tx, self.backend, InstanceLock::UserCreation)
            .await
            .db("user creation lock")?;
        let before: Option<String> = sqlx::query_scalar(
            "SELECT id FROM users WHERE is_owner = 1 ORDER BY created_at LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await
        .db("owner before")?;
        if before.as_deref() == Some(user_id) {
            return Ok(false);
        }
        sqlx::query("UPDATE users SET is_owner = 0 WHERE is_owner = 1")
            .execute(&mut *tx)
            .await
            .db("owner no longer")?;
        let done =
            sqlx::query("UPDATE users SET is_owner = 1 WHERE id = $1 AND disabled_at IS NULL")
                .bind(user_id)
                .execute(&mut *tx)
                .await
                .db("make owner")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::conflict(
                "The account was disabled or erased meanwhile; nothing changed.",
            ));
        }
        let payload = serde_json::json!({"owner_before": before});
        self.audit_identity(
            &mut tx,
            user_id,
            "user.owner",
            &payload,
            crate::Transport::Cli,
        )
        .await?;
        tx.commit().await.db("commit owner")?;
        Ok(true)
    }

    /// Enable a disabled account; `false` when it was not disabled.
    pub async fn enable_user(&self, user_id: &str) -> Result<bool, ToolError> {
        crate::service::rerun_on_contention("enable user", || self.enable_user_once(user_id)).await
    }

    /// One attempt at [`Store::enable_user`].
    async fn enable_user_once(&self, user_id: &str) -> Result<bool, ToolError> {
        let exists = self.user_by_id(user_id).await?;
        let Some(user) = exists else {
            return Err(ToolError::not_found("user not found"));
        };
        if !user.is_disabled() {
            return Ok(false);
        }
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE users SET disabled_at = NULL WHERE id = $1 AND disabled_at IS NOT NULL",
        )
        .bind(user_id)
        .execute(&mut *tx)
        .await
        .db("enable user")?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        self.audit_account_change(
            &mut tx,
            user_id,
            "user.enable",
            Revoked::default(),
            crate::Transport::Cli,
        )
        .await?;
        tx.commit().await.db("commit enable")?;
        Ok(true)
    }

    /// Create a personal access token; the secret is returned once.
    pub async fn create_token(
        &self,
        user_id: &str,
        name: Option<&str>,
        scopes: &[&str],
    ) -> Result<(TokenInfo, String), ToolError> {
        self.create_token_of_kind(NewToken {
            user_id,
            kind: TokenKind::Pat,
            name,
            scopes,
            ttl_ms: TokenKind::Pat.lifetime_ms(),
            confirmed: None,
        })
        .await
    }

    /// Create a personal access token that expires `ttl_ms` from now
    /// (`None`: never); the secret is returned once.
    pub async fn create_expiring_token(
        &self,
        user_id: &str,
        name: Option<&str>,
        scopes: &[&str],
        ttl_ms: Option<i64>,
    ) -> Result<(TokenInfo, String), ToolError> {
        self.create_confirmed_token(user_id, None, name, scopes, ttl_ms)
            .await
    }

    /// [`Store::create_expiring_token`] for a person who confirmed their
    /// password (`confirmed`, the tag of what they verified): refused
    /// `unauthorized` when the account's password changed or it was
    /// disabled since (see [`NewToken::confirmed`]).
    pub async fn create_confirmed_token(
        &self,
        user_id: &str,
        confirmed: Option<Credential>,
        name: Option<&str>,
        scopes: &[&str],
        ttl_ms: Option<i64>,
    ) -> Result<(TokenInfo, String), ToolError> {
        if ttl_ms.is_some_and(|t| t <= 0) {
            return Err(ToolError::validation("a token's lifetime must be positive"));
        }
        self.create_token_of_kind(NewToken {
            user_id,
            kind: TokenKind::Pat,
            name,
            scopes,
            ttl_ms,
            confirmed,
        })
        .await
    }

    /// Create a token of any kind (personal, OAuth access, OAuth refresh);
    /// the secret (with the kind's prefix) is returned once.
    pub async fn create_token_of_kind(
        &self,
        new: NewToken<'_>,
    ) -> Result<(TokenInfo, String), ToolError> {
        let NewToken {
            user_id,
            kind,
            name,
            scopes,
            ttl_ms,
            confirmed,
        } = new;
        if scopes.is_empty()
            || scopes
                .iter()
                .any(|s| ![SCOPE_READ, SCOPE_WRITE, SCOPE_ACCOUNT_DELETE].contains(s))
        {
            return Err(ToolError::validation(
                "token scopes must be mcp:read, mcp:write and/or account:delete",
            ));
        }
        if scopes.contains(&SCOPE_ACCOUNT_DELETE) && !scopes.contains(&SCOPE_WRITE) {
            return Err(ToolError::validation(
                "the account:delete scope needs mcp:write",
            ));
        }
        let mut scopes: Vec<String> = scopes
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        scopes.sort();
        scopes.dedup();
        crate::service::rerun_on_contention("create token", || {
            self.create_token_once(user_id, kind, name, &scopes, ttl_ms, confirmed)
        })
        .await
    }

    /// One attempt at [`Store::create_token_of_kind`], the scopes checked.
    async fn create_token_once(
        &self,
        user_id: &str,
        kind: TokenKind,
        name: Option<&str>,
        scopes: &[String],
        ttl_ms: Option<i64>,
        confirmed: Option<Credential>,
    ) -> Result<(TokenInfo, String), ToolError> {
        let secret = format!("{}{}", kind.prefix(), random_secret(40));
        let id = IdKind::AccessToken.generate();
        let now = self.now();
        let expires = ttl_ms.map(|t| now.saturating_add(t));
        let mut tx = self.write_tx().await?;
        if let Some(credential) = confirmed {
            self.hold_signing_in(&mut tx, user_id, credential).await?;
        }
        let done = sqlx::query(
            "INSERT INTO access_tokens (id, user_id, kind, name, token_hash, scopes, created_at, expires_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM users WHERE id = $2)",
        )
        .bind(&id)
        .bind(user_id)
        .bind(kind.as_str())
        .bind(name.map(str::to_string))
        .bind(hash_secret(&secret))
        .bind(scopes.join(" "))
        .bind(now)
        .bind(expires)
        .execute(&mut *tx)
        .await
        .db("create token")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found("user not found"));
        }
        // Not its name: free text of the user's, which the audit log would
        // keep after the account is erased.
        let payload = serde_json::json!({
            "token_id": id, "kind": kind.as_str(), "scopes": scopes, "expires_at": expires,
        });
        self.audit_identity(
            &mut tx,
            user_id,
            "token.create",
            &payload,
            confirmed_on(confirmed),
        )
        .await?;
        tx.commit().await.db("commit token")?;
        Ok((
            TokenInfo {
                id,
                user_id: user_id.to_string(),
                kind,
                name: name.map(str::to_string),
                scopes: scopes.to_vec(),
                created_at: now,
                expires_at: expires,
                last_used_at: None,
                revoked_at: None,
            },
            secret,
        ))
    }

    /// Resolve a bearer token. `None` for unknown, revoked or expired, and
    /// for any token of a disabled account.
    pub async fn authenticate(&self, secret: &str) -> Result<Option<Authenticated>, ToolError> {
        let found = self.token_holder(secret).await?;
        if let Some(auth) = &found {
            self.note_token_use(auth).await;
        }
        Ok(found)
    }

    /// What `secret` proves, read only: [`Store::authenticate`] without
    /// the note of its use (for a caller that must know who is asking
    /// before it lets the request queue for anything, and notes the use
    /// afterwards with [`Store::note_token_use`]).
    pub async fn token_holder(&self, secret: &str) -> Result<Option<Authenticated>, ToolError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT id, user_id, scopes, kind FROM access_tokens \
             WHERE token_hash = $1 AND {TOKEN_IN_FORCE}"
        )))
        .bind(hash_secret(secret.trim()))
        .bind(self.now())
        .bind(TokenKind::Pat.as_str())
        .bind(TokenKind::OauthAccess.as_str())
        .fetch_optional(&self.pool)
        .await
        .db("authenticate")?;
        row.map(|row| Authenticated::from_row(&row)).transpose()
    }

    /// Note that `auth`'s token was just used (`last_used_at`). Best
    /// effort: it never fails (nor, on SQLite, waits for its turn behind
    /// this process's writes) the request. It is written at most once a
    /// minute per token, so a busy client does not turn every read into a
    /// write.
    pub async fn note_token_use(&self, auth: &Authenticated) {
        /// How stale `last_used_at` may get before a request rewrites it.
        const LAST_USED_INTERVAL_MS: i64 = 60_000;
        let now = self.now();
        self.note(
            "token last use",
            sqlx::query(
                "UPDATE access_tokens SET last_used_at = $1 \
                 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3)",
            )
            .bind(now)
            .bind(auth.token_id.clone())
            .bind(now - LAST_USED_INTERVAL_MS),
        )
        .await;
    }

    /// Whether the token `token_id` still authenticates, as
    /// [`Store::authenticate`] would decide now (not revoked nor expired,
    /// its account enabled, its OAuth family live): asked again by a
    /// download that outlasts its request.
    pub async fn token_in_force(&self, token_id: &str) -> Result<bool, ToolError> {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM access_tokens WHERE id = $1 AND {TOKEN_IN_FORCE}"
        )))
        .bind(token_id)
        .bind(self.now())
        .bind(TokenKind::Pat.as_str())
        .bind(TokenKind::OauthAccess.as_str())
        .fetch_one(&self.pool)
        .await
        .db("token in force")?;
        Ok(n > 0)
    }

    pub async fn list_tokens(&self, user_id: &str) -> Result<Vec<TokenInfo>, ToolError> {
        let rows = sqlx::query(
            "SELECT id, user_id, kind, name, scopes, created_at, expires_at, last_used_at, revoked_at \
             FROM access_tokens WHERE user_id = $1 AND kind = $2 ORDER BY created_at, id",
        )
        .bind(user_id)
        .bind(TokenKind::Pat.as_str())
        .fetch_all(&self.pool)
        .await
        .db("list tokens")?;
        TokenInfo::from_rows(&rows)
    }

    /// Revoke one of the user's tokens, from `on` (the command line, or the
    /// person on the dashboard: audited as such). Another user's token
    /// reads as not found.
    pub async fn revoke_token(
        &self,
        user_id: &str,
        token_id: &str,
        on: crate::Transport,
    ) -> Result<(), ToolError> {
        crate::service::rerun_on_contention("revoke token", || {
            self.revoke_token_once(user_id, token_id, on)
        })
        .await
    }

    /// One attempt at [`Store::revoke_token`].
    async fn revoke_token_once(
        &self,
        user_id: &str,
        token_id: &str,
        on: crate::Transport,
    ) -> Result<(), ToolError> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query("UPDATE access_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL")
            .bind(self.now())
            .bind(token_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await
            .db("revoke token")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found("token not found"));
        }
        let payload = serde_json::json!({"token_id": token_id});
        self.audit_identity(&mut tx, user_id, "token.revoke", &payload, on)
            .await?;
        tx.commit().await.db("commit token revocation")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::IssuedTokens;
    use crate::testing::{REDIRECT, code_for, exchange_code, sqlite_store as store, stores};
    const PASSWORD: &str = "correct horse battery staple";

    fn email(name: &str) -> String {
        format!("{name}-{}@example.com", random_secret(10).to_lowercase())
    }

    /// A fresh OAuth sign-in of `user`: a new token family.
    async fn oauth_sign_in(store: &Store, user_id: &str) -> IssuedTokens {
        let client = store
            .register_oauth_client(Some("test"), &[REDIRECT.to_string()], None, None)
            .await
            .unwrap()
            .id;
        let credential = store.user_by_id(user_id).await.unwrap().unwrap().credential;
        let code = code_for(store, &client, user_id, credential).await;
        exchange_code(store, &client, &code).await.unwrap()
    }

    async fn works(store: &Store, token: &str) -> bool {
        store.authenticate(token).await.unwrap().is_some()
    }

    async fn refreshes(store: &Store, t: &IssuedTokens) -> bool {
        store
            .refresh_oauth_token(&t.refresh_token, &t.client_id, None, None, None)
            .await
            .is_ok()
    }

    /// The shortest password is counted in characters, not bytes: four
    /// two-byte characters are refused, eight are taken.
    #[test]
    fn the_password_minimum_counts_characters() {
        let short = hash_password("éééé");
        assert_eq!(
            short.map_err(|e| e.code),
            Err(zm_contracts::ErrorCode::ValidationFailed)
        );
        assert!(hash_password("éééééééé").is_ok());
        assert!(hash_password("seven77").is_err());
    }

    /// What a sign-in for an unknown email is checked against costs what a
    /// real check does: the algorithm, version, parameters and output
    /// length of a password set now (argon2's defaults); nothing verifies.
    #[test]
    fn the_dummy_hash_costs_what_a_real_one_does() {
        let real = hash_password(PASSWORD).unwrap();
        let real = PasswordHash::new(&real).unwrap();
        let dummy = PasswordHash::new(DUMMY_HASH).expect("a well-formed hash");
        assert_eq!(dummy.algorithm, real.algorithm);
        assert_eq!(dummy.version, real.version);
        assert_eq!(
            argon2::Params::try_from(&dummy).unwrap(),
            argon2::Params::try_from(&real).unwrap()
        );
        assert_eq!(
            dummy.hash.expect("an output").len(),
            real.hash.expect("an output").len()
        );
        assert!(!verify("not a password", DUMMY_HASH));
        assert!(!verify(PASSWORD, DUMMY_HASH));
    }

    /// A database whose only row is a deleted team's steward (the owner
    /// erased their account after deleting the team) makes its next user
    /// the owner, and `stdio`'s local owner can be created.
    #[tokio::test]
    async fn a_steward_is_nobody_when_the_owner_is_chosen() {
        let (_dir, store) = store().await;
        let first = store.create_user(&email("first"), PASSWORD).await.unwrap();
        assert!(first.is_owner);
        let caller = crate::Caller::new(first.id.clone());
        let input: zm_contracts::teams::CreateTeamInput =
            serde_json::from_value(serde_json::json!({"slug": "gone"})).unwrap();
        store.create_team(&caller, input).await.unwrap();
        store.delete_team(&caller, "gone").await.unwrap();
        crate::ToolService::new(store.clone())
            .call(
                &caller,
                zm_contracts::ToolName::DeleteAccount,
                &serde_json::json!({}),
            )
            .await
            .unwrap();
        let steward_rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(steward_rows, 1, "the steward's row stays");
        // Nobody signs in as it: not found by its address (so `user passwd`
        // and `user enable` cannot make it an account).
        let steward_email: String = sqlx::query_scalar("SELECT email FROM users")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(store.user_by_email(&steward_email).await.unwrap(), None);
        let next = store.create_user(&email("next"), PASSWORD).await.unwrap();
        assert!(next.is_owner, "the next person is the owner");
    }

    /// `make_owner` moves the ownership, once, audited; a disabled account
    /// is refused it.
    #[tokio::test]
    async fn the_owner_can_be_appointed() {
        let (_dir, store) = store().await;
        let first = store.create_user(&email("first"), PASSWORD).await.unwrap();
        let second = store.create_user(&email("second"), PASSWORD).await.unwrap();
        assert!(first.is_owner && !second.is_owner);
        assert!(store.make_owner(&second.id).await.unwrap());
        assert!(!store.make_owner(&second.id).await.unwrap(), "already");
        assert_eq!(
            store.owner().await.unwrap().map(|u| u.id),
            Some(second.id.clone())
        );
        assert!(!store.user_by_id(&first.id).await.unwrap().unwrap().is_owner);
        let audit = store.audit_rows(&second.id, 5).await.unwrap();
        assert!(
            audit.iter().any(|a| a["command"] == "user.owner"),
            "{audit:?}"
        );
        store.disable_user(&first.id).await.unwrap();
        let e = store.make_owner(&first.id).await.unwrap_err();
        assert_eq!(e.code, zm_contracts::ErrorCode::Conflict, "{e:?}");
        assert_eq!(store.owner().await.unwrap().map(|u| u.id), Some(second.id));
    }

    /// A token's last use is bookkeeping: on SQLite, while another write
    /// holds the writer's turn (a long batch), authenticating neither waits
    /// for it nor fails; the last use is written by a later request.
    #[tokio::test]
    async fn a_tokens_last_use_waits_for_no_writer() {
        let (_dir, store) = store().await;
        let user = store
            .create_user("lastuse@example.com", "a long passphrase")
            .await
            .unwrap();
        let (_, secret) = store
            .create_token(&user.id, None, &[SCOPE_READ])
            .await
            .unwrap();
        let held = store.write_tx().await.unwrap();
        let auth = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            store.authenticate(&secret),
        )
        .await
        .expect("authentication waited for the writer")
        .unwrap();
        assert!(auth.is_some());
        drop(held);
        let last = |store: &Store| {
            let (store, id) = (store.clone(), user.id.clone());
            async move { store.list_tokens(&id).await.unwrap()[0].last_used_at }
        };
        assert_eq!(last(&store).await, None, "skipped while the turn was held");
        store
            .authenticate(&secret)
            .await
            .unwrap()
            .expect("authenticates");
        assert!(
            last(&store).await.is_some(),
            "written once the turn is free"
        );
    }

    /// Password checks take turns (one per core): with every turn held, a
    /// check waits (it would take a few milliseconds), and it runs once a
    /// turn is free.
    #[tokio::test]
    async fn password_checks_take_turns() {
        let (_dir, store) = store().await;
        store
            .create_local_owner("owner@localhost")
            .await
            .unwrap()
            .unwrap();
        let owner = store.owner().await.unwrap().unwrap();
        store
            .change_password(&owner.id, PASSWORD, false)
            .await
            .unwrap();
        let all = store.password_checks.available_permits();
        let held = std::sync::Arc::clone(&store.password_checks)
            .acquire_many_owned(u32::try_from(all).unwrap())
            .await
            .unwrap();
        let checking = store.clone();
        let mut check =
            tokio::spawn(
                async move { checking.verify_password("owner@localhost", PASSWORD).await },
            );
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(2), &mut check)
                .await
                .is_err(),
            "a check ran with every turn taken"
        );
        drop(held);
        let verified = check.await.unwrap().unwrap();
        assert_eq!(verified.map(|u| u.id), Some(owner.id));
    }

    #[tokio::test]
    async fn a_local_owner_has_no_usable_password_until_one_is_set() {
        let (_dir, store) = store().await;
        let owner = store
            .create_local_owner("owner@localhost")
            .await
            .unwrap()
            .expect("the database had no user");
        assert!(owner.is_owner && !owner.has_password);
        let listed = store.owner().await.unwrap().unwrap();
        assert_eq!(listed, owner, "read back the same");
        // Only on an empty database.
        assert!(
            store
                .create_local_owner("other@localhost")
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(store.list_users().await.unwrap().len(), 1);
        // The stored marker is no password: neither it nor anything verifies.
        for guess in [NO_PASSWORD, "", "!", "no-password"] {
            assert!(
                store
                    .verify_password("owner@localhost", guess)
                    .await
                    .unwrap()
                    .is_none(),
                "{guess:?}"
            );
        }
        store
            .change_password(&owner.id, PASSWORD, false)
            .await
            .unwrap();
        let user = store
            .verify_password("owner@localhost", PASSWORD)
            .await
            .unwrap()
            .expect("verifies once set");
        assert!(user.has_password);
    }

    #[tokio::test]
    async fn changing_the_password_revokes_oauth_and_optionally_personal_tokens() {
        for (label, _dir, store) in stores().await {
            passwd_revokes(&store, label).await;
        }
    }

    async fn passwd_revokes(store: &Store, label: &str) {
        let store = store.clone();
        let u = store.create_user(&email("a"), PASSWORD).await.unwrap();
        let other = store.create_user(&email("b"), PASSWORD).await.unwrap();
        let (_, pat) = store
            .create_token(&u.id, None, &[SCOPE_READ, SCOPE_WRITE])
            .await
            .unwrap();
        let oauth = oauth_sign_in(&store, &u.id).await;
        let others = oauth_sign_in(&store, &other.id).await;
        assert!(works(&store, &oauth.access_token).await);

        let revoked = store
            .change_password(&u.id, "a new long password", false)
            .await
            .unwrap();
        assert_eq!(
            revoked,
            Revoked {
                oauth_families: 1,
                personal_tokens: 0
            }
        );
        assert!(
            !works(&store, &oauth.access_token).await,
            "[{label}] access"
        );
        assert!(!refreshes(&store, &oauth).await, "[{label}] refresh token");
        assert!(works(&store, &pat).await, "[{label}] personal tokens stay");
        assert!(
            works(&store, &others.access_token).await,
            "[{label}] others'"
        );
        assert!(
            store
                .verify_password(&u.email, PASSWORD)
                .await
                .unwrap()
                .is_none()
        );

        let again = oauth_sign_in(&store, &u.id).await;
        let revoked = store
            .change_password(&u.id, "a third long password", true)
            .await
            .unwrap();
        assert_eq!(
            revoked,
            Revoked {
                oauth_families: 1,
                personal_tokens: 1
            }
        );
        assert!(!works(&store, &again.access_token).await, "[{label}]");
        assert!(!works(&store, &pat).await, "[{label}] --revoke-tokens");
        assert!(works(&store, &others.access_token).await, "[{label}]");
        // Each change left one audit row saying what it revoked.
        let rows = account_audit(&store, &u.id).await;
        assert_eq!(
            rows,
            [
                ("user.passwd".to_string(), 1, 0),
                ("user.passwd".to_string(), 1, 1)
            ],
            "[{label}] audit"
        );
    }

    /// The operator's account changes in a user's audit log (`user passwd`,
    /// `disable`, `enable`; not the account's creation), sorted (rows of
    /// one millisecond have no order): (command, OAuth families revoked,
    /// personal tokens revoked).
    async fn account_audit(store: &Store, user_id: &str) -> Vec<(String, u64, u64)> {
        store
            .audit_rows(user_id, 50)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| {
                r["command"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("user.") && c != "user.add")
            })
            .map(|r| {
                (
                    r["command"].as_str().unwrap().to_string(),
                    r["payload"]["oauth_families_revoked"].as_u64().unwrap(),
                    r["payload"]["personal_tokens_revoked"].as_u64().unwrap(),
                )
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    #[tokio::test]
    async fn a_disabled_user_is_refused_every_credential_until_enabled() {
        for (label, _dir, store) in stores().await {
            disable_refuses(&store, label).await;
        }
    }

    async fn disable_refuses(store: &Store, label: &str) {
        let store = store.clone();
        let u = store.create_user(&email("a"), PASSWORD).await.unwrap();
        let other = store.create_user(&email("b"), PASSWORD).await.unwrap();
        let (_, pat) = store
            .create_token(&u.id, None, &[SCOPE_READ])
            .await
            .unwrap();
        let (_, other_pat) = store
            .create_token(&other.id, None, &[SCOPE_READ])
            .await
            .unwrap();
        let oauth = oauth_sign_in(&store, &u.id).await;

        let revoked = store.disable_user(&u.id).await.unwrap().expect("disabled");
        assert_eq!(revoked.oauth_families, 1, "[{label}]");
        assert!(store.disable_user(&u.id).await.unwrap().is_none(), "twice");
        assert!(
            store
                .user_by_id(&u.id)
                .await
                .unwrap()
                .unwrap()
                .is_disabled()
        );
        assert!(!works(&store, &pat).await, "[{label}] personal token");
        assert!(
            !works(&store, &oauth.access_token).await,
            "[{label}] access"
        );
        assert!(!refreshes(&store, &oauth).await, "[{label}] OAuth refresh");
        assert!(
            store
                .verify_password(&u.email, PASSWORD)
                .await
                .unwrap()
                .is_none(),
            "[{label}] password"
        );
        assert!(works(&store, &other_pat).await, "[{label}] other users");

        assert!(store.enable_user(&u.id).await.unwrap());
        assert!(!store.enable_user(&u.id).await.unwrap(), "twice");
        assert!(works(&store, &pat).await, "[{label}] personal tokens again");
        assert!(
            !works(&store, &oauth.access_token).await,
            "[{label}] OAuth apps sign in again"
        );
        assert!(
            store
                .verify_password(&u.email, PASSWORD)
                .await
                .unwrap()
                .is_some(),
            "[{label}]"
        );
        assert_eq!(
            store.disable_user("usr_nobody").await.unwrap_err().code,
            zm_contracts::ErrorCode::NotFound
        );
        // One audit row per change that happened (the repeats changed nothing).
        assert_eq!(
            account_audit(&store, &u.id).await,
            [
                ("user.disable".to_string(), 1, 0),
                ("user.enable".to_string(), 0, 0)
            ],
            "[{label}] audit"
        );
    }

    #[tokio::test]
    async fn an_expiring_token_is_refused_after_its_lifetime() {
        let (_dir, store) = store().await;
        let u = store.create_user(&email("a"), PASSWORD).await.unwrap();
        let hour = 3_600_000;
        let (info, secret) = store
            .create_expiring_token(&u.id, Some("ci"), &[SCOPE_READ], Some(12 * hour))
            .await
            .unwrap();
        assert_eq!(info.expires_at, Some(info.created_at + 12 * hour));
        assert!(works(&store, &secret).await);
        let listed = &store.list_tokens(&u.id).await.unwrap()[0];
        assert_eq!(listed.expires_at, info.expires_at);
        assert!(listed.last_used_at.is_some(), "last use recorded");
        store.clock().advance_ms(12 * hour);
        assert!(!works(&store, &secret).await, "expired");
        assert!(
            store
                .create_expiring_token(&u.id, None, &[SCOPE_READ], Some(0))
                .await
                .is_err()
        );
    }
}
