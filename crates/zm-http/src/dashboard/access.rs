//! Access: personal access tokens (create with scopes and an expiry, the
//! secret shown once; last use; revoke), the OAuth clients the person
//! authorized (last use; revoke), and the Connect page — copy-paste set-up
//! for Claude Code, Cursor, Codex and any MCP client, over stdio and HTTP,
//! filled in with this server's URL.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::{Markup, html};
use zm_store::clock::rfc3339;
use zm_store::{SCOPE_READ, SCOPE_WRITE};

use super::errors::{Failure, field_aria, field_class, field_error};
use super::{PagePath, Signed, change_then_back, signed_form};
use crate::state::AppState;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// A time as [`super::memories::when`] shows one (in UTC, said), or
/// `none`.
fn when(ms: Option<i64>, none: &str) -> String {
    ms.map_or_else(|| none.to_string(), |t| super::memories::when(&rfc3339(t)))
}

/// The new-token form's choices of expiry: (value, label).
const EXPIRIES: [(&str, &str); 4] = [
    ("30", "in 30 days"),
    ("90", "in 90 days"),
    ("365", "in a year"),
    ("never", "never"),
];

/// What the new-token form was filled in with: a form that comes back
/// with an error keeps it (never the password), so retyping the password
/// does not quietly widen the access or the lifetime chosen.
struct TokenDraft {
    name: String,
    read_only: bool,
    expiry: String,
}

impl Default for TokenDraft {
    fn default() -> Self {
        TokenDraft {
            name: String::new(),
            read_only: false,
            expiry: "90".into(),
        }
    }
}

fn token_form(signed: &Signed, draft: &TokenDraft, failure: Option<&Failure>) -> Markup {
    let name_error = failure.and_then(|f| f.field("name"));
    let access_error = failure.and_then(|f| f.field("access"));
    let expiry_error = failure.and_then(|f| f.field("expiry"));
    let password_error = failure.and_then(|f| f.field("password"));
    let (name_invalid, name_described) = field_aria("token-name", name_error.as_deref());
    let (access_invalid, access_described) = field_aria("token-access", access_error.as_deref());
    let (expiry_invalid, expiry_described) = field_aria("token-expiry", expiry_error.as_deref());
    let (password_invalid, password_described) =
        field_aria("token-password", password_error.as_deref());
    html! {
        form #new-token method="post" action=(signed.href("/access/tokens")) {
            input type="hidden" name="csrf" value=(signed.csrf);
            @if let Some(f) = failure { (f.notice(&["name", "access", "expiry", "password"])) }
            div class=(field_class(name_error.as_deref())) {
                label for="token-name" { "Name" }
                input #token-name type="text" name="name" maxlength="100" required placeholder="laptop, CI, …"
                    value=(draft.name) aria-invalid=[name_invalid] aria-describedby=[name_described];
                (field_error("token-name", name_error.as_deref()))
            }
            div class=(field_class(access_error.as_deref())) {
                label for="token-access" { "Access" }
                select #token-access name="access" aria-invalid=[access_invalid] aria-describedby=[access_described] {
                    option value="write" selected[!draft.read_only] { "Read and write (mcp:read mcp:write)" }
                    option value="read" selected[draft.read_only] { "Read only (mcp:read)" }
                }
                (field_error("token-access", access_error.as_deref()))
            }
            div class=(field_class(expiry_error.as_deref())) {
                label for="token-expiry" { "Expires" }
                select #token-expiry name="expiry" aria-invalid=[expiry_invalid] aria-describedby=[expiry_described] {
                    @for (value, label) in EXPIRIES {
                        option value=(value) selected[draft.expiry == value] { (label) }
                    }
                }
                (field_error("token-expiry", expiry_error.as_deref()))
            }
            // A token outlives the session that made it: whoever holds a
            // borrowed session must not be able to keep access that way.
            div class=(field_class(password_error.as_deref())) {
                label for="token-password" { "Your password (to confirm)" }
                input #token-password type="password" name="password" required autocomplete="current-password"
                    aria-invalid=[password_invalid] aria-describedby=[password_described];
                (field_error("token-password", password_error.as_deref()))
            }
            button type="submit" { "Create token" }
        }
    }
}

/// A new token's secret, shown once.
fn created_notice(name: &str, secret: &str) -> Markup {
    html! {
        div.flash.ok role="status" #token-created {
            p { "Token " strong { (name) } " created. Copy it now: it is shown only this once." }
            p { code #token-secret { (secret) } " " button.secondary type="button" data-copy="#token-secret" hidden { "Copy" } }
        }
    }
}

async fn page_body(
    state: &AppState,
    signed: &Signed,
    created: Option<(&str, &str)>,
    draft: &TokenDraft,
    failure: Option<&Failure>,
) -> Result<Markup, Failure> {
    let user = &signed.session.user_id;
    let rid = signed.request_id.as_deref();
    let tokens = state
        .store
        .list_tokens(user)
        .await
        .map_err(|e| Failure::from_tool(e, rid))?;
    let clients = state
        .store
        .list_oauth_clients(user)
        .await
        .map_err(|e| Failure::from_tool(e, rid))?;
    let sessions = state
        .store
        .mcp_sessions_of(
            user,
            i64::try_from(state.cfg.session_idle.as_millis()).unwrap_or(i64::MAX),
        )
        .await
        .map_err(|e| Failure::from_tool(e, rid))?;
    let now = state.store.clock().now_ms();
    Ok(html! {
        h1 { "Access" }
        @if let Some((name, secret)) = created { (created_notice(name, secret)) }
        h2 { "Personal access tokens" }
        p.muted { "For MCP clients and scripts that send " code { "Authorization: Bearer …" } ". A token acts as you, with the access it was given." }
        @if tokens.is_empty() { p #no-tokens { "No tokens yet." } } @else {
            table #tokens {
                thead { tr { th { "Name" } th { "Access" } th { "Created" } th { "Expires" } th { "Last used" } th { "Status" } th { span.sr-only { "Actions" } } } }
                tbody {
                    @for t in &tokens {
                        @let status = if t.revoked_at.is_some() { "revoked" } else if t.expires_at.is_some_and(|e| e <= now) { "expired" } else { "active" };
                        tr data-token=(t.id) {
                            td { (t.name.clone().unwrap_or_default()) }
                            td { (t.scopes.join(" ")) }
                            td { (when(Some(t.created_at), "")) }
                            td { (when(t.expires_at, "never")) }
                            td { (when(t.last_used_at, "never")) }
                            td.status { (status) }
                            td {
                                @if status == "active" {
                                    form method="post" action=(signed.href(&format!("/access/tokens/{}/revoke", t.id))) {
                                        input type="hidden" name="csrf" value=(signed.csrf);
                                        button.secondary type="submit" aria-label=(format!("Revoke {}", t.name.clone().unwrap_or_else(|| t.id.clone()))) { "Revoke" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "New token" }
        (token_form(signed, draft, failure))
        h2 { "Authorized apps (OAuth)" }
        @if clients.is_empty() { p { "No app has signed in with OAuth." } } @else {
            table #oauth-clients {
                thead { tr { th { "App" } th { "Access" } th { "Authorized" } th { "Last used" } th { "Status" } th { span.sr-only { "Actions" } } } }
                tbody {
                    @for c in &clients {
                        tr {
                            td { (c.client.client_name.clone().unwrap_or_else(|| c.client.id.clone())) }
                            td { (c.scope) }
                            td { (when(Some(c.authorized_at), "")) }
                            td { (when(c.last_used_at, "never")) }
                            td { @if c.revoked_at.is_some() { "revoked" } @else { "active" } }
                            td {
                                @if c.revoked_at.is_none() {
                                    form method="post" action=(signed.href(&format!("/access/oauth/{}/revoke", c.client.id))) {
                                        input type="hidden" name="csrf" value=(signed.csrf);
                                        button.secondary type="submit" aria-label=(format!("Revoke {}", c.client.client_name.clone().unwrap_or_else(|| c.client.id.clone()))) { "Revoke" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Open MCP sessions (HTTP)" }
        @if sessions.is_empty() { p #no-sessions { "No MCP client is connected over HTTP." } } @else {
            table #mcp-sessions {
                thead { tr { th { "Client" } th { "Attached project" } th { "Opened" } th { "Last seen" } th { span.sr-only { "Actions" } } } }
                tbody {
                    @for x in &sessions {
                        tr {
                            td { (x.client.clone().unwrap_or_else(|| "(unnamed)".into())) }
                            td { (x.attached_project.clone().unwrap_or_default()) }
                            td { (when(Some(x.opened_at), "")) }
                            td { (when(Some(x.seen_at), "")) }
                            td {
                                form method="post" action=(signed.href(&format!("/access/sessions/{}/end", x.id))) {
                                    input type="hidden" name="csrf" value=(signed.csrf);
                                    button.secondary type="submit" aria-label=(format!("End the session of {}, opened {}", x.client.clone().unwrap_or_else(|| "(unnamed)".into()), when(Some(x.opened_at), ""))) { "End" }
                                }
                            }
                        }
                    }
                }
            }
        }
        p { "To connect a new client, see " a href=(signed.href("/connect")) { "Connect" } "." }
    })
}

/// `GET /access`.
pub(crate) async fn index(State(state): State<AppState>, signed: Signed) -> Response {
    match page_body(&state, &signed, None, &TokenDraft::default(), None).await {
        Ok(body) => signed.page(StatusCode::OK, "Access", "/access", body),
        Err(f) => signed.error(&f),
    }
}

/// `POST /access/tokens`: the secret is shown on the answer, once.
pub(crate) async fn create_token(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to("/access")),
    };
    let draft = TokenDraft {
        name: form.get("name").unwrap_or("").trim().to_string(),
        read_only: form.get("access") == Some("read"),
        expiry: form.get("expiry").unwrap_or("").to_string(),
    };
    let invalid = |field: &str, reason: &str| Failure::invalid_field(field, reason, rid);
    let name = draft.name.clone();
    // Only what the form offers: a value it does not offer (or none) is
    // refused, never read as the widest access or a lifetime of its own.
    let ttl = match draft.expiry.as_str() {
        "never" => Ok(None),
        d if EXPIRIES.iter().any(|(v, _)| *v == d) => d
            .parse::<i64>()
            .map(|days| Some(days * DAY_MS))
            .map_err(|_| invalid("expiry", "choose one of the offered lifetimes")),
        _ => Err(invalid("expiry", "choose one of the offered lifetimes")),
    };
    let failure = if name.is_empty() {
        Some(invalid("name", "give the token a name"))
    } else if name.chars().count() > 100 {
        Some(invalid("name", "at most 100 characters"))
    } else if !matches!(form.get("access"), Some("read" | "write")) {
        Some(invalid("access", "choose read and write, or read only"))
    } else {
        ttl.as_ref().err().cloned()
    };
    // The account's password too: a token outlives the session, so a
    // borrowed session does not turn into lasting access (checked like a
    // password change, with the sign-in back-off).
    let (failure, confirmed) = match failure {
        Some(f) => (Some(f), None),
        None => match super::account::current_password(
            &state,
            &signed,
            &headers,
            form.get("password").unwrap_or(""),
            "password",
        )
        .await
        {
            Ok(user) => (None, Some(user.credential)),
            Err(f) => (Some(f), None),
        },
    };
    if let Some(f) = failure {
        if f.retry_after.is_some() {
            return signed.error(&f.back_to("/access"));
        }
        return match page_body(&state, &signed, None, &draft, Some(&f)).await {
            Ok(body) => signed.page(f.status(), "Access", "/access", body),
            Err(f) => signed.error(&f),
        };
    }
    let scopes: &[&str] = if draft.read_only {
        &[SCOPE_READ]
    } else {
        &[SCOPE_READ, SCOPE_WRITE]
    };
    let ttl = ttl.ok().flatten();
    // Made only while the account still has the password just confirmed.
    let (_, secret) = match state
        .store
        .create_confirmed_token(&signed.session.user_id, confirmed, Some(&name), scopes, ttl)
        .await
    {
        Ok(t) => t,
        Err(e) if e.code == zm_contracts::ErrorCode::Unauthorized => {
            return signed.see_other("/login");
        }
        Err(e) => return signed.error(&Failure::from_tool(e, rid)),
    };
    match page_body(
        &state,
        &signed,
        Some((&name, &secret)),
        &TokenDraft::default(),
        None,
    )
    .await
    {
        Ok(body) => signed.page(StatusCode::OK, "Access", "/access", body),
        // The token exists: its secret is shown whatever else failed to
        // load (an error page instead would leave a live token nobody
        // holds, and a retry would make a second).
        Err(f) => {
            tracing::warn!(target: "zm_http", error = %f.error.message, "access page: lists unavailable after a token was created");
            let body = html! {
                h1 { "Access" }
                (created_notice(&name, &secret))
                p #lists-unavailable { "The rest of this page could not be loaded. Copy the token, then reload the page (request id " code { (rid.unwrap_or("unknown")) } ")." }
            };
            signed.page(StatusCode::OK, "Access", "/access", body)
        }
    }
}

/// `POST /access/tokens/{id}/revoke`.
pub(crate) async fn revoke_token(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(id): PagePath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let user = signed.session.user_id.clone();
    change_then_back(&state, &signed, &headers, body, "/access", async |_| {
        state
            .store
            .revoke_token(&user, &id, zm_store::Transport::Dashboard)
            .await
    })
    .await
}

/// `POST /access/oauth/{id}/revoke`.
pub(crate) async fn revoke_client(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(id): PagePath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let user = signed.session.user_id.clone();
    change_then_back(&state, &signed, &headers, body, "/access", async |_| {
        state.store.revoke_oauth_client(&user, &id).await
    })
    .await
}

fn snippet(id: &str, text: &str) -> Markup {
    html! {
        div.snippet {
            pre { code id=(id) { (text) } }
            button.secondary type="button" data-copy=(format!("#{id}")) hidden { "Copy" }
        }
    }
}

/// `GET /connect`: set-up for every client, with this server's URL.
pub(crate) async fn connect(State(state): State<AppState>, signed: Signed) -> Response {
    let base = state.cfg.public_url.trim_end_matches('/');
    let mcp = format!("{base}/mcp");
    let body = html! {
        h1 { "Connect an agent" }
        p.lead { "Each agent connects with its own credentials. Over HTTP, clients that speak OAuth sign in with your email and password; others take a token from " a href=(signed.href("/access")) { "Access" } "." }
        h2 { "Claude Code" }
        h3 { "Over HTTP (OAuth)" }
        (snippet("cc-http", &format!("claude mcp add --transport http zero-memory {mcp}")))
        h3 { "Over HTTP with a token" }
        (snippet("cc-token", &format!("claude mcp add --transport http zero-memory {mcp} --header \"Authorization: Bearer <your token>\"")))
        h3 { "Over stdio, on the server's machine" }
        (snippet("cc-stdio", "claude mcp add zero-memory -- zero-memory stdio"))
        h2 { "Cursor" }
        p { "In " code { ".cursor/mcp.json" } " (or the global " code { "~/.cursor/mcp.json" } "):" }
        (snippet("cursor", &format!("{{\n  \"mcpServers\": {{\n    \"zero-memory\": {{\n      \"url\": \"{mcp}\",\n      \"headers\": {{ \"Authorization\": \"Bearer <your token>\" }}\n    }}\n  }}\n}}")))
        h2 { "Codex" }
        p { "In " code { "~/.codex/config.toml" } ":" }
        (snippet("codex", &format!("[mcp_servers.zero-memory]\nurl = \"{mcp}\"\nbearer_token_env_var = \"ZERO_MEMORY_TOKEN\"")))
        h2 { "Any MCP client" }
        dl.facts {
            dt { "Streamable HTTP" } dd { code #mcp-url { (mcp) } }
            dt { "OAuth 2.1 metadata" } dd { code { (base) "/.well-known/oauth-authorization-server" } }
            dt { "stdio" } dd { code { "zero-memory stdio" } " (on the machine that holds the database)" }
            dt { "REST" } dd { code { (base) "/api/tools/<tool>" } " — " a href=(signed.href("/api/openapi.json")) { "OpenAPI" } }
        }
    };
    signed.page(StatusCode::OK, "Connect", "/connect", body)
}

/// `POST /access/sessions/{id}/end`: the client's next request finds no
/// session (it starts a new one, signing in again if its token is gone).
pub(crate) async fn end_session(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(id): PagePath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let user = signed.session.user_id.clone();
    change_then_back(&state, &signed, &headers, body, "/access", async |_| {
        state.store.mcp_session_end_for(&user, &id).await
    })
    .await
}
