//! The first start of `serve`: on a database without any user, create the
//! owner account and a personal access token, and say once how to use them
//! (on stdout, or in a `0600` file with `--first-start-output`). On a
//! database whose owner `zero-memory stdio` created (no password), say how
//! to set one instead of creating another owner.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, anyhow};
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
        .map_err(|e| {
            anyhow!(
                "cannot create the owner's access token: {e}; the owner account {} exists: set its password with `zero-memory user passwd {}` and create a token with `zero-memory token create --user {}`",
                user.email,
                user.email,
                user.email
            )
        })?;
    tracing::info!(user = %user.email, token = %info.id, "first start: created the owner account and an access token");
    Ok(Some(FirstStart {
        email: user.email,
        password,
        token_id: info.id,
        token,
    }))
}

/// The `zero-memory stdio` command line that opens the same database:
/// the config file, if any, and what a flag or the environment set beside
/// it (a client starting the command has neither).
fn stdio_command(cfg: &Config) -> String {
    let mut cmd = String::from("zero-memory");
    if let Some(f) = &cfg.config_file {
        cmd.push_str(&format!(
            " --config {}",
            shell_quote(&f.display().to_string())
        ));
    }
    let source = |key| cfg.sources.get(key).copied().unwrap_or(Source::Default);
    let beside_the_file = |s| matches!(s, Source::Flag | Source::Env);
    let db = source("database_url");
    if db == Source::Default && beside_the_file(source("data_dir")) {
        cmd.push_str(&format!(
            " --data-dir {}",
            shell_quote(&cfg.data_dir.display().to_string())
        ));
    }
    // Another model than the one `serve` embeds with would have the two
    // re-embed each other's memories without end.
    if beside_the_file(source("embedding_model"))
        && let Some(model) = &cfg.embedding_model
    {
        cmd.push_str(&format!(
            " --embedding-model {}",
            shell_quote(&model.display().to_string())
        ));
    }
    cmd.push_str(" stdio");
    if beside_the_file(db) {
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

/// What `serve` does about the owner once its port is bound, before it
/// answers on it: on a database
/// without any user, create the owner and its token and show the secrets
/// once — in `--first-start-output` (created `0600`) when set, else on
/// stdout; when the owner has no password yet (`stdio` created it), say
/// on stderr how to set one.
pub async fn on_serve_start(store: &Store, cfg: &Config) -> anyhow::Result<()> {
    let users = store
        .list_users()
        .await
        .map_err(|e| anyhow!("cannot list users: {e}"))?;
    if users.is_empty() {
        return match &cfg.first_start_output {
            Some(path) => first_start_to_file(store, cfg, path).await,
            None => {
                if let Some(first) = first_start(store, cfg).await? {
                    print_first_start(&first, cfg, None, &mut std::io::stdout().lock())
                        .with_context(|| {
                            format!(
                                "cannot write the first-start secrets to stdout; set a new password with `zero-memory user passwd {}` and create a token with `zero-memory token create --user {}`",
                                first.email, first.email
                            )
                        })?;
                }
                Ok(())
            }
        };
    }
    if let Some(owner) = users.iter().find(|u| u.is_owner && !u.has_password) {
        crate::commands::tell_operator(cfg, &no_password_notice(&owner.email));
    }
    Ok(())
}

/// The first start with `--first-start-output`: the file is created new
/// (mode `0600`, `O_EXCL`: a file or a symbolic link already there is
/// refused, never written through) before the owner, so the secrets
/// always have somewhere to go.
async fn first_start_to_file(store: &Store, cfg: &Config, path: &Path) -> anyhow::Result<()> {
    let mut file = crate::files::create_new_private_file(path).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "it already exists (a file or link left there: move it away, or name a new file)"
                .to_string()
        } else {
            e.to_string()
        };
        anyhow!(
            "--first-start-output: cannot create {}: {why}; nothing was created in the database",
            path.display()
        )
    })?;
    let first = match first_start(store, cfg).await {
        Ok(Some(first)) => first,
        // Another process created the owner meanwhile (nothing to write),
        // or the owner could not be created: the empty file goes.
        other => {
            drop(file);
            let _ = std::fs::remove_file(path);
            return other.map(|_| ());
        }
    };
    print_first_start(&first, cfg, Some(path), &mut file).with_context(|| {
        format!(
            "cannot write the first-start secrets to {}; set a new password with `zero-memory user passwd {}` and create a token with `zero-memory token create --user {}`",
            path.display(),
            first.email,
            first.email
        )
    })?;
    file.sync_all()?;
    crate::commands::tell_operator(
        cfg,
        &format!(
            "zero-memory: first start: created the owner account {} and a personal access token; its password and the token are in {} (mode 0600). Read it, then delete it.",
            first.email,
            path.display()
        ),
    );
    Ok(())
}

/// What `serve` says, at every start, while the owner has no password.
pub fn no_password_notice(email: &str) -> String {
    format!(
        "zero-memory: the owner account {email} has no password yet (`zero-memory stdio` created it; stdio needs none). \
To sign in on the OAuth consent page when an MCP app connects over HTTP, set one: zero-memory user passwd {email}. \
For a bearer token: zero-memory token create --user {email}"
    )
}

/// Print, once, how to log in and connect. `file`: where the text goes,
/// when not stdout.
pub fn print_first_start(
    first: &FirstStart,
    cfg: &Config,
    file: Option<&Path>,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let base = cfg.public_base_url();
    let mcp = cfg.mcp_url();
    let where_note = match file {
        Some(p) => format!(
            "This file ({}) was created with mode 0600; delete it once the secrets are somewhere safe.",
            p.display()
        ),
        None => {
            "This went to stdout: for a service (systemd, docker) stdout usually lands in its\n\
logs, and then the secrets below are in those logs. If so, change them\n\
(zero-memory user passwd EMAIL --revoke-tokens), and start services with\n\
--first-start-output FILE (ZM_FIRST_START_OUTPUT) to get a 0600 file instead."
                .replace("EMAIL", &first.email)
        }
    };
    let text = format!(
        "\
zero-memory: first start. Created the owner account and a personal access token.
These secrets are shown ONLY NOW; keep them somewhere safe.
{where_note}

  Owner account (it signs in on the OAuth consent page when an MCP app connects with OAuth):
    email:     {email}
    password:  {password}
    (change it with: zero-memory user passwd {email})

  Personal access token (mcp:read mcp:write, id {token_id}):
    {token}

  This server ({base}) offers:
    Dashboard:              {base}/  (sign in with the email and password above)
    MCP (Streamable HTTP):  {mcp}
    REST API:               {base}/api/tools/<tool>  (OpenAPI: {base}/api/openapi.json)
    OAuth 2.1 for MCP apps: {base}/.well-known/oauth-authorization-server
  MCP and REST take the token as  Authorization: Bearer <token>.

  Connect an MCP client over HTTP, e.g. Claude Code:
      claude mcp add --transport http zero-memory {mcp} --header \"Authorization: Bearer {token}\"

  Call a tool over REST:
      curl -H \"Authorization: Bearer {token}\" -H 'Content-Type: application/json' \\
           -d '{{\"query\": \"conventions\"}}' {base}/api/tools/recall

  Or over stdio, on this machine (no token needed):
    {stdio}

  More tokens: zero-memory token create --user {email} [--expires 90d]
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
        print_first_start(&first, &cfg, None, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("http://127.0.0.1:8787/mcp"));
        assert!(text.contains(&format!("Authorization: Bearer {}", first.token)));
        assert!(text.contains(&first.password));
        assert!(text.contains("--data-dir"), "{text}");
        assert!(text.contains(" stdio"));
        // True about what exists: the dashboard, MCP, REST, OAuth — and
        // about where stdout goes.
        assert!(
            text.contains("Dashboard:              http://127.0.0.1:8787/  (sign in with the email and password above)"),
            "{text}"
        );
        assert!(text.contains("http://127.0.0.1:8787/api/tools/"), "{text}");
        assert!(text.contains("http://127.0.0.1:8787/api/openapi.json"));
        assert!(text.contains("logs") && text.contains("--first-start-output"));

        let mut out = Vec::new();
        print_first_start(&first, &cfg, Some(Path::new("/run/zm/first")), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("/run/zm/first") && text.contains("0600"),
            "{text}"
        );
    }

    /// The printed `stdio` command opens the same database: a data
    /// directory given by a flag or the environment is named even beside a
    /// config file (which says nothing of it), one the file gives is not;
    /// a database URL from the environment is pointed at.
    #[test]
    fn the_stdio_command_names_what_the_config_file_does_not() {
        let mut cfg = Config::defaults_in("/srv/zm");
        cfg.config_file = Some("/etc/zm.toml".into());
        let cmd = stdio_command(&cfg);
        assert_eq!(
            cmd,
            "zero-memory --config /etc/zm.toml --data-dir /srv/zm stdio"
        );
        cfg.sources.insert("data_dir", Source::File);
        assert_eq!(
            stdio_command(&cfg),
            "zero-memory --config /etc/zm.toml stdio"
        );
        cfg.sources.insert("database_url", Source::Env);
        assert_eq!(
            stdio_command(&cfg),
            "zero-memory --config /etc/zm.toml stdio   (with the same ZM_DATABASE_URL)"
        );
        cfg.sources.insert("database_url", Source::File);
        assert_eq!(
            stdio_command(&cfg),
            "zero-memory --config /etc/zm.toml stdio"
        );
        // A model named by a flag or the environment is named too (one
        // the file names is read from it).
        cfg.embedding_model = Some("/srv/models/all-mpnet-base-v2".into());
        cfg.sources.insert("embedding_model", Source::Flag);
        assert_eq!(
            stdio_command(&cfg),
            "zero-memory --config /etc/zm.toml --embedding-model /srv/models/all-mpnet-base-v2 stdio"
        );
        cfg.sources.insert("embedding_model", Source::File);
        assert_eq!(
            stdio_command(&cfg),
            "zero-memory --config /etc/zm.toml stdio"
        );
    }

    /// `--first-start-output` names a file to create: one already there
    /// (or a symbolic link planted there) is refused and left as it was,
    /// and no owner is created, so no secret exists that went nowhere. A
    /// new file gets the secrets.
    #[tokio::test]
    async fn an_existing_first_start_output_is_refused_and_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::defaults_in(dir.path().join("data"));
        let store = Store::open_with(cfg.open_options()).await.unwrap();
        let existing = dir.path().join("first-start.txt");
        std::fs::write(&existing, "keep me").unwrap();
        let mut refused = vec![existing.clone()];
        #[cfg(unix)]
        {
            let link = dir.path().join("link.txt");
            std::os::unix::fs::symlink(&existing, &link).unwrap();
            refused.push(link);
            let dangling = dir.path().join("dangling.txt");
            std::os::unix::fs::symlink(dir.path().join("nowhere.txt"), &dangling).unwrap();
            refused.push(dangling);
        }
        for path in refused {
            cfg.first_start_output = Some(path.clone());
            let e = on_serve_start(&store, &cfg)
                .await
                .expect_err("refused")
                .to_string();
            assert!(
                e.contains("already exists") && e.contains(&path.display().to_string()),
                "{e}"
            );
            assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
            assert!(!dir.path().join("nowhere.txt").exists(), "not followed");
            assert!(store.list_users().await.unwrap().is_empty(), "no owner");
        }
        let new = dir.path().join("new.txt");
        cfg.first_start_output = Some(new.clone());
        on_serve_start(&store, &cfg).await.unwrap();
        let text = std::fs::read_to_string(&new).unwrap();
        assert!(
            text.contains("password:") && text.contains("zm_pat_"),
            "{text}"
        );
        assert_eq!(store.list_users().await.unwrap().len(), 1);
    }
}
