//! Users and access tokens.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rand::Rng;
use sha2::{Digest, Sha256};
use sqlx::Row;
use zm_contracts::{IdKind, ToolError};

use crate::db::DbResult;
use crate::store::Store;

/// Token scope: read tools only.
pub const SCOPE_READ: &str = "mcp:read";
/// Token scope: every tool.
pub const SCOPE_WRITE: &str = "mcp:write";
/// Prefix of a personal access token.
pub const PAT_PREFIX: &str = "zm_pat_";

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
    pub kind: String,
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
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

fn row_user(r: &sqlx::any::AnyRow) -> User {
    User {
        id: r.get("id"),
        email: r.get("email"),
        is_owner: r.get::<i64, _>("is_owner") != 0,
        created_at: r.get("created_at"),
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
        Ok(rows.iter().map(row_user).collect())
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>, ToolError> {
        let email = email.trim().to_lowercase();
        let row = sqlx::query("SELECT id, email, is_owner, created_at FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(&self.pool)
            .await
            .db("user by email")?;
        Ok(row.as_ref().map(row_user))
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<User>, ToolError> {
        let row = sqlx::query("SELECT id, email, is_owner, created_at FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .db("user by id")?;
        Ok(row.as_ref().map(row_user))
    }

    /// The owner account, if one exists.
    pub async fn owner(&self) -> Result<Option<User>, ToolError> {
        let row = sqlx::query("SELECT id, email, is_owner, created_at FROM users WHERE is_owner = 1 ORDER BY created_at LIMIT 1")
            .fetch_optional(&self.pool)
            .await
            .db("owner")?;
        Ok(row.as_ref().map(row_user))
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
            Some(r) => (Some(row_user(r)), r.get::<String, _>("password_hash")),
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
        self.create_token_of_kind(user_id, "pat", name, scopes, None, PAT_PREFIX)
            .await
    }

    /// Create a token of any kind (personal, OAuth access, OAuth refresh).
    pub async fn create_token_of_kind(
        &self,
        user_id: &str,
        kind: &str,
        name: Option<&str>,
        scopes: &[&str],
        ttl_ms: Option<i64>,
        prefix: &str,
    ) -> Result<(TokenInfo, String), ToolError> {
        if scopes.is_empty() || scopes.iter().any(|s| *s != SCOPE_READ && *s != SCOPE_WRITE) {
            return Err(ToolError::validation(
                "token scopes must be mcp:read and/or mcp:write",
            ));
        }
        let mut scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        scopes.sort();
        scopes.dedup();
        let secret = format!("{prefix}{}", random_secret(40));
        let id = IdKind::AccessToken.generate();
        let now = self.now();
        let expires = ttl_ms.map(|t| now + t);
        let done = sqlx::query(
            "INSERT INTO access_tokens (id, user_id, kind, name, token_hash, scopes, created_at, expires_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM users WHERE id = $2)",
        )
        .bind(&id)
        .bind(user_id)
        .bind(kind)
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
                kind: kind.to_string(),
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
             AND kind IN ('pat', 'oauth_access') \
             AND (family_id IS NULL OR NOT EXISTS (SELECT 1 FROM oauth_families f WHERE f.id = access_tokens.family_id AND f.revoked_at IS NOT NULL))",
        )
        .bind(hash_secret(secret.trim()))
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .db("authenticate")?;
        let Some(row) = row else { return Ok(None) };
        let id: String = row.get("id");
        // last-used is best effort; it never fails the request.
        let _ = sqlx::query("UPDATE access_tokens SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(&id)
            .execute(&self.pool)
            .await;
        Ok(Some(Authenticated {
            user_id: row.get("user_id"),
            token_id: id,
            scopes: row
                .get::<String, _>("scopes")
                .split(' ')
                .map(str::to_string)
                .collect(),
        }))
    }

    pub async fn list_tokens(&self, user_id: &str) -> Result<Vec<TokenInfo>, ToolError> {
        let rows = sqlx::query(
            "SELECT id, user_id, kind, name, scopes, created_at, expires_at, last_used_at, revoked_at \
             FROM access_tokens WHERE user_id = $1 AND kind = 'pat' ORDER BY created_at, id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await
        .db("list tokens")?;
        Ok(rows
            .iter()
            .map(|r| TokenInfo {
                id: r.get("id"),
                user_id: r.get("user_id"),
                kind: r.get("kind"),
                name: r.get("name"),
                scopes: r
                    .get::<String, _>("scopes")
                    .split(' ')
                    .map(str::to_string)
                    .collect(),
                created_at: r.get("created_at"),
                expires_at: r.get("expires_at"),
                last_used_at: r.get("last_used_at"),
                revoked_at: r.get("revoked_at"),
            })
            .collect())
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
