//! The first start of `serve`: on a database without any user, create the
//! owner account and a personal access token, and say once how to use them.

use std::io::Write;

use anyhow::anyhow;
use zm_contracts::ErrorCode;
use zm_store::identity::random_secret;
use zm_store::{SCOPE_READ, SCOPE_WRITE, Store};

use crate::config::{Config, Source};

/// What the first start created (the secrets exist only here).
#[derive(Debug, Clone)]
pub struct FirstStart {
    pub email: String,
    pub password: String,
    pub token_id: String,
    pub token: String,
}

/// Create the owner account and its token when the database has no user.
/// `None` when a user exists already (or another process created the owner
/// at the same moment).
pub async fn first_start(store: &Store, cfg: &Config) -> anyhow::Result<Option<FirstStart>> {
    let users = store
        .list_users()
        .await
        .map_err(|e| anyhow!("cannot list users: {e}"))?;
    if !users.is_empty() {
        return Ok(None);
    }
    let password = random_secret(24);
    let user = match store.create_user(&cfg.owner_email, &password).await {
        Ok(u) => u,
        // Another process created it between our look and our write.
        Err(e) if e.code == ErrorCode::Conflict => return Ok(None),
        // (On PostgreSQL that race surfaces as a unique violation, which
        // the store reports as `internal`: look again before failing.)
        Err(_) if store.list_users().await.is_ok_and(|u| !u.is_empty()) => return Ok(None),
        Err(e) => {
            return Err(anyhow!(
                "cannot create the owner account {:?}: {}",
                cfg.owner_email,
                crate::commands::describe(&e)
            ));
        }
    };
    let (info, token) = store
        .create_token(&user.id, Some("first start"), &[SCOPE_READ, SCOPE_WRITE])
        .await
        .map_err(|e| anyhow!("cannot create the owner's access token: {e}"))?;
    tracing::info!(user = %user.email, token = %info.id, "first start: created the owner account and an access token");
    Ok(Some(FirstStart {
        email: user.email,
        password,
        token_id: info.id,
        token,
    }))
}

/// The `zero-memory stdio` command line that opens the same database.
fn stdio_command(cfg: &Config) -> String {
    let mut cmd = String::from("zero-memory");
    if let Some(f) = &cfg.config_file {
        cmd.push_str(&format!(
            " --config {}",
            shell_quote(&f.display().to_string())
        ));
    }
    let db_default = cfg
        .sources
        .get("database_url")
        .copied()
        .unwrap_or(Source::Default)
        == Source::Default;
    let dir_default = cfg
        .sources
        .get("data_dir")
        .copied()
        .unwrap_or(Source::Default)
        == Source::Default;
    if db_default && !dir_default && cfg.config_file.is_none() {
        cmd.push_str(&format!(
            " --data-dir {}",
            shell_quote(&cfg.data_dir.display().to_string())
        ));
    }
    cmd.push_str(" stdio");
    if !db_default && cfg.config_file.is_none() {
        cmd.push_str("   (with the same ZM_DATABASE_URL)");
    }
    cmd
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-:@%+=,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Print, once, how to log in and connect.
pub fn print_first_start(
    first: &FirstStart,
    cfg: &Config,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mcp = cfg.mcp_url();
    let text = format!(
        "\
zero-memory: first start. Created the owner account and a personal access token.
These secrets are shown ONLY NOW; keep them somewhere safe.

  Log in (dashboard, OAuth consent page):
    email:     {email}
    password:  {password}
    (change it with: zero-memory user passwd {email})

  Personal access token (mcp:read mcp:write, id {token_id}):
    {token}

  Connect an MCP client over HTTP:
    URL:     {mcp}
    header:  Authorization: Bearer {token}
    e.g. Claude Code:
      claude mcp add --transport http zero-memory {mcp} --header \"Authorization: Bearer {token}\"

  Or over stdio, on this machine (no token needed):
    {stdio}

  More tokens: zero-memory token create --user {email}
",
        email = first.email,
        password = first.password,
        token_id = first.token_id,
        token = first.token,
        stdio = stdio_command(cfg),
    );
    out.write_all(text.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn creates_the_owner_once_and_prints_how_to_connect() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::defaults_in(dir.path());
        let store = Store::open_with(cfg.open_options()).await.unwrap();
        let first = first_start(&store, &cfg).await.unwrap().expect("created");
        assert_eq!(first.email, "owner@localhost");
        assert!(first.token.starts_with("zm_pat_"));
        let auth = store.authenticate(&first.token).await.unwrap().unwrap();
        assert!(auth.can_write());
        assert!(
            store
                .verify_password("owner@localhost", &first.password)
                .await
                .unwrap()
                .is_some_and(|u| u.is_owner)
        );
        assert!(
            first_start(&store, &cfg).await.unwrap().is_none(),
            "only once"
        );

        let mut out = Vec::new();
        print_first_start(&first, &cfg, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("http://127.0.0.1:8787/mcp"));
        assert!(text.contains(&format!("Authorization: Bearer {}", first.token)));
        assert!(text.contains(&first.password));
        assert!(text.contains("--data-dir"), "{text}");
        assert!(text.contains(" stdio"));
    }
}
