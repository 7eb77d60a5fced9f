//! Users and access tokens.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rand::Rng;
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use zm_contracts::{IdKind, ToolError};

use crate::db::DbResult;
use crate::rows::{FromAnyRow, col, enum_col, flag_col, stored_enum};
use crate::store::Store;

/// Token scope: read tools only.
pub const SCOPE_READ: &str = "mcp:read";
/// Token scope: every tool.
pub const SCOPE_WRITE: &str = "mcp:write";
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
}

/// A user as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub email: String,
    pub is_owner: bool,
    pub created_at: i64,
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

/// What a valid bearer token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user_id: String,
    pub token_id: String,
    pub scopes: Vec<String>,
}

impl Authenticated {
    /// Does the token carry `mcp:write`?
    pub fn can_write(&self) -> bool {
        self.grant() == crate::Grant::ReadWrite
    }

    /// What the token's scopes allow.
    pub fn grant(&self) -> crate::Grant {
        if self.scopes.iter().any(|s| s == SCOPE_WRITE) {
            crate::Grant::ReadWrite
        } else {
            crate::Grant::ReadOnly
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

fn normalize_email(email: &str) -> Result<String, ToolError> {
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

fn hash_password(password: &str) -> Result<String, ToolError> {
    if password.len() < 8 {
        return Err(ToolError::validation(
            "the password must be at least 8 characters",
        ));
    }
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| crate::db::internal("salt", e))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| crate::db::internal("hash password", e))
}

/// A fixed hash to verify against when the user does not exist, so the
/// failure path costs the same.
static DUMMY_HASH: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let salt = SaltString::encode_b64(b"zero-memory-salt").expect("salt");
    Argon2::default()
        .hash_password(b"not a password", &salt)
        .expect("hash")
        .to_string()
});

fn verify(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// A user row (`id, email, is_owner, created_at`).
impl FromAnyRow for User {
    fn from_row(r: &AnyRow) -> Result<User, ToolError> {
        Ok(User {
            id: col(r, "id")?,
            email: col(r, "email")?,
            is_owner: flag_col(r, "is_owner")?,
            created_at: col(r, "created_at")?,
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

/// A live token's row (`id, user_id, scopes`).
impl FromAnyRow for Authenticated {
    fn from_row(r: &AnyRow) -> Result<Authenticated, ToolError> {
        Ok(Authenticated {
            user_id: col(r, "user_id")?,
            token_id: col(r, "id")?,
            scopes: split_scopes(&col::<String>(r, "scopes")?),
        })
    }
}

impl Store {
    /// Create a user. The first user becomes the owner.
    pub async fn create_user(&self, email: &str, password: &str) -> Result<User, ToolError> {
        let email = normalize_email(email)?;
        let hash = hash_password(password)?;
        let id = IdKind::User.generate();
        let now = self.now();
        let mut tx = self.write_tx().await?;
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
        let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&mut *tx)
            .await
            .db("count users")?;
        let is_owner = i64::from(users == 0);
        sqlx::query("INSERT INTO users (id, email, password_hash, is_owner, created_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(&id)
            .bind(&email)
            .bind(&hash)
            .bind(is_owner)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("insert user")?;
        tx.commit().await.db("commit user")?;
        Ok(User {
            id,
            email,
            is_owner: is_owner == 1,
            created_at: now,
        })
    }

    pub async fn list_users(&self) -> Result<Vec<User>, ToolError> {
        let rows = sqlx::query(
            "SELECT id, email, is_owner, created_at FROM users ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await
        .db("list users")?;
        User::from_rows(&rows)
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>, ToolError> {
        let email = email.trim().to_lowercase();
        let row = sqlx::query("SELECT id, email, is_owner, created_at FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(&self.pool)
            .await
            .db("user by email")?;
        row.as_ref().map(User::from_row).transpose()
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<User>, ToolError> {
        let row = sqlx::query("SELECT id, email, is_owner, created_at FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .db("user by id")?;
        row.as_ref().map(User::from_row).transpose()
    }

    /// The owner account, if one exists.
    pub async fn owner(&self) -> Result<Option<User>, ToolError> {
        let row = sqlx::query("SELECT id, email, is_owner, created_at FROM users WHERE is_owner = 1 ORDER BY created_at LIMIT 1")
            .fetch_optional(&self.pool)
            .await
            .db("owner")?;
        row.as_ref().map(User::from_row).transpose()
    }

    /// Check an email and password. The failure path does the same work
    /// whether or not the user exists.
    pub async fn verify_password(
        &self,
        email: &str,
        password: &str,
    ) -> Result<Option<User>, ToolError> {
        let email = email.trim().to_lowercase();
        let row = sqlx::query(
            "SELECT id, email, is_owner, created_at, password_hash FROM users WHERE email = $1",
        )
        .bind(&email)
        .fetch_optional(&self.pool)
        .await
        .db("verify password")?;
        let (user, hash) = match &row {
            Some(r) => (Some(User::from_row(r)?), col::<String>(r, "password_hash")?),
            None => (None, DUMMY_HASH.clone()),
        };
        let password = password.to_string();
        let ok = tokio::task::spawn_blocking(move || verify(&password, &hash))
            .await
            .unwrap_or(false);
        Ok(if ok { user } else { None })
    }

    pub async fn set_password(&self, user_id: &str, password: &str) -> Result<(), ToolError> {
        let hash = hash_password(password)?;
        let done = sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(hash)
            .bind(user_id)
            .execute(&self.pool)
            .await
            .db("set password")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found("user not found"));
        }
        Ok(())
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
        } = new;
        if scopes.is_empty() || scopes.iter().any(|s| *s != SCOPE_READ && *s != SCOPE_WRITE) {
            return Err(ToolError::validation(
                "token scopes must be mcp:read and/or mcp:write",
            ));
        }
        let mut scopes: Vec<String> = scopes
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        scopes.sort();
        scopes.dedup();
        let secret = format!("{}{}", kind.prefix(), random_secret(40));
        let id = IdKind::AccessToken.generate();
        let now = self.now();
        let expires = ttl_ms.map(|t| now + t);
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
        .execute(&self.pool)
        .await
        .db("create token")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found("user not found"));
        }
        Ok((
            TokenInfo {
                id,
                user_id: user_id.to_string(),
                kind,
                name: name.map(str::to_string),
                scopes,
                created_at: now,
                expires_at: expires,
                last_used_at: None,
                revoked_at: None,
            },
            secret,
        ))
    }

    /// Resolve a bearer token. `None` for unknown, revoked or expired.
    pub async fn authenticate(&self, secret: &str) -> Result<Option<Authenticated>, ToolError> {
        let now = self.now();
        let row = sqlx::query(
            "SELECT id, user_id, scopes FROM access_tokens \
             WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2) \
             AND kind IN ($3, $4) \
             AND (family_id IS NULL OR NOT EXISTS (SELECT 1 FROM oauth_families f WHERE f.id = access_tokens.family_id AND f.revoked_at IS NOT NULL))",
        )
        .bind(hash_secret(secret.trim()))
        .bind(now)
        .bind(TokenKind::Pat.as_str())
        .bind(TokenKind::OauthAccess.as_str())
        .fetch_optional(&self.pool)
        .await
        .db("authenticate")?;
        let Some(row) = row else { return Ok(None) };
        let auth = Authenticated::from_row(&row)?;
        // last-used is best effort; it never fails the request.
        let _ = sqlx::query("UPDATE access_tokens SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(&auth.token_id)
            .execute(&self.pool)
            .await;
        Ok(Some(auth))
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

    /// Revoke one of the user's tokens. Another user's token reads as not found.
    pub async fn revoke_token(&self, user_id: &str, token_id: &str) -> Result<(), ToolError> {
        let done = sqlx::query("UPDATE access_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL")
            .bind(self.now())
            .bind(token_id)
            .bind(user_id)
            .execute(&self.pool)
            .await
            .db("revoke token")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found("token not found"));
        }
        Ok(())
    }
}
