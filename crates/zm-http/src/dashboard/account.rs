//! Account: change the password (the current one first; other dashboard
//! sessions and OAuth sign-ins end), export everything as our JSONL,
//! delete the account after typing its email, and the audit log of the
//! account's own changes.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde_json::json;
use zm_contracts::{ToolError, ToolName, ToolOutput};

use super::errors::{self, Failure, field_aria, field_class, field_error};
use super::memories::when;
use super::{Signed, signed_form};
use crate::oauth::limit::NotNow;
use crate::state::AppState;

fn invalid(field: &str, reason: &str, rid: Option<&str>) -> Failure {
    Failure::invalid_field(field, reason, rid)
}

async fn page(
    state: &AppState,
    signed: &Signed,
    notice: Option<&str>,
    failure: Option<&Failure>,
) -> Response {
    let rid = signed.request_id.as_deref();
    // A log that cannot be read is said where it would be: the rest of
    // the page (a password change, an import's summary) stands.
    let audit = state.store.audit_rows(&signed.session.user_id, 50).await;
    if let Err(e) = &audit {
        tracing::warn!(target: "zm_http", error = %e.message, request_id = rid.unwrap_or(""), "the account page's audit log could not be read");
    }
    let reason = |name: &str| failure.and_then(|f| f.field(name));
    let body = html! {
        h1 { "Account" }
        p { "Signed in as " strong { (signed.session.email) } "." }
        @if let Some(n) = notice { div.flash.ok role="status" { (n) } }
        @if let Some(f) = failure { (f.notice(&["current", "new", "again", "confirm", "delete-password", "file", "format", "target"])) }
        h2 { "Change your password" }
        form #password method="post" action=(signed.href("/account/password")) {
            input type="hidden" name="csrf" value=(signed.csrf);
            @for (name, label, auto) in [("current", "Current password", "current-password"), ("new", "New password (at least 8 characters)", "new-password"), ("again", "New password again", "new-password")] {
                @let id = format!("pw-{name}");
                @let err = reason(name);
                @let (aria_invalid, described) = field_aria(&id, err.as_deref());
                div class=(field_class(err.as_deref())) {
                    label for=(id) { (label) }
                    input id=(id) type="password" name=(name) autocomplete=(auto) required aria-invalid=[aria_invalid] aria-describedby=[described];
                    (field_error(&id, err.as_deref()))
                }
            }
            div.field {
                label { input #pw-revoke type="checkbox" name="revoke_tokens" value="yes"; " Also revoke my personal access tokens" }
            }
            button type="submit" { "Change password" }
            p.hint { "Your other dashboard sessions and every OAuth sign-in end. Personal access tokens keep working unless you revoke them here too (do, if someone else may have used your account)." }
        }
        h2 { "Export everything" }
        p { "Every memory you can read, live and forgotten, as JSONL — what " code { "zero-memory import" } " reads back." }
        p { a.button.secondary #export href=(signed.href("/account/export")) download { "Download the export" } }
        h2 { "Import" }
        form #import method="post" action=(signed.href("/account/import")) enctype="multipart/form-data" {
            input type="hidden" name="csrf" value=(signed.csrf);
            @let err = reason("file");
            @let (aria_invalid, described) = field_aria("import-file", err.as_deref());
            div class=(field_class(err.as_deref())) {
                label for="import-file" { "File (JSONL, at most 20 MiB)" }
                input #import-file type="file" name="file" accept=".jsonl,.json,.ndjson,application/x-ndjson" required aria-invalid=[aria_invalid] aria-describedby=[described];
                (field_error("import-file", err.as_deref()))
            }
            @let err = reason("format");
            @let (aria_invalid, described) = field_aria("import-format", err.as_deref());
            div class=(field_class(err.as_deref())) {
                label for="import-format" { "Format" }
                select #import-format name="format" aria-invalid=[aria_invalid] aria-describedby=[described] {
                    option value="zm" { "zero-memory export" }
                    option value="server-memory" { "@modelcontextprotocol/server-memory" }
                }
                (field_error("import-format", err.as_deref()))
            }
            @let err = reason("target");
            @let (aria_invalid, described) = field_aria("import-target", err.as_deref());
            div class=(field_class(err.as_deref())) {
                label for="import-target" { "Into" }
                select #import-target name="target" aria-invalid=[aria_invalid] aria-describedby=[described] {
                    option value="" { "as the file says (personal for server-memory)" }
                    option value="personal" { "personal" }
                    option value="core" { "core" }
                }
                (field_error("import-target", err.as_deref()))
            }
            button.secondary type="submit" { "Import" }
            p.hint { "Importing the same file again adds nothing: each memory is recognised by its source." }
        }
        h2 { "Your recent changes" }
        @match &audit {
            Err(_) => {
                div.flash.error role="alert" #audit-failed {
                    p { "Your recent changes could not be read." }
                    p { "If it keeps happening, report this request id: " code.request-id { (rid.unwrap_or("unknown")) } }
                }
            }
            Ok(audit) if audit.is_empty() => { p.muted { "None yet." } }
            Ok(audit) => {
            table #audit {
                thead { tr { th scope="col" { "When" } th scope="col" { "Command" } th scope="col" { "Outcome" } th scope="col" { "Agent" } th scope="col" { "Request" } } }
                tbody {
                    @for a in audit.iter() {
                        tr {
                            td { (when(a["occurred_at"].as_str().unwrap_or(""))) }
                            td { code { (a["command"].as_str().unwrap_or("")) } }
                            td { (a["outcome"].as_str().unwrap_or("")) @if let Some(c) = a["error_code"].as_str() { " (" (c) ")" } }
                            td { (a["agent_name"].as_str().unwrap_or("")) }
                            td { code { (a["request_id"].as_str().unwrap_or("")) } }
                        }
                    }
                }
            }
            }
        }
        h2 { "Delete your account" }
        form #delete-account method="post" action=(signed.href("/account/delete")) {
            input type="hidden" name="csrf" value=(signed.csrf);
            @let err = reason("confirm");
            @let (aria_invalid, described) = field_aria("confirm-email", err.as_deref());
            div class=(field_class(err.as_deref())) {
                label for="confirm-email" { "Type your email to confirm" }
                input #confirm-email type="text" name="confirm" required autocomplete="off" aria-invalid=[aria_invalid] aria-describedby=(described.map_or_else(|| "confirm-email-hint".to_string(), |e| format!("{e} confirm-email-hint")));
                (field_error("confirm-email", err.as_deref()))
                p.hint #confirm-email-hint { "Erases your account and everything you own, at once and for good. Export first." }
            }
            @let err = reason("delete-password");
            @let (aria_invalid, described) = field_aria("delete-password", err.as_deref());
            div class=(field_class(err.as_deref())) {
                label for="delete-password" { "Your password" }
                input #delete-password type="password" name="password" required autocomplete="current-password" aria-invalid=[aria_invalid] aria-describedby=[described];
                (field_error("delete-password", err.as_deref()))
            }
            button.danger type="submit" { "Delete my account" }
        }
    };
    let status = failure.map_or(StatusCode::OK, Failure::status);
    signed.page(status, "Account", "/account", body)
}

/// `GET /account`.
pub(crate) async fn index(
    State(state): State<AppState>,
    signed: Signed,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let changed = q.as_deref() == Some("changed=1");
    page(
        &state,
        &signed,
        changed.then_some("Your password was changed."),
        None,
    )
    .await
}

/// `POST /account/password`.
pub(crate) async fn password(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to("/account")),
    };
    let (current, new, again) = (
        form.get("current").unwrap_or(""),
        form.get("new").unwrap_or(""),
        form.get("again").unwrap_or(""),
    );
    let (failure, verified) =
        match current_password(&state, &signed, &headers, current, "current").await {
            Err(f) if f.retry_after.is_some() => return signed.error(&f.back_to("/account")),
            Err(f) => (Some(f), None),
            Ok(user) => (None, Some(user)),
        };
    let failure = if failure.is_some() {
        failure
    } else if new != again {
        Some(invalid("again", "does not match the new password", rid))
    } else {
        None
    };
    if let Some(f) = failure {
        return page(&state, &signed, None, Some(&f)).await;
    }
    let Some(mut user) = verified else {
        return signed.see_other("/login");
    };
    let credential = match state
        .store
        .change_confirmed_password(
            &signed.session.user_id,
            Some(user.credential),
            new,
            form.get("revoke_tokens") == Some("yes"),
        )
        .await
    {
        Ok((_, credential)) => credential,
        // The password changed (an operator's `user passwd`) or the account
        // was disabled while the current one was checked: this session
        // ended with the others.
        Err(e) if e.code == zm_contracts::ErrorCode::Unauthorized => {
            return signed.see_other("/login");
        }
        Err(e) => {
            // The store owns the password rules; its refusal marks the field.
            let f = if e.code == zm_contracts::ErrorCode::ValidationFailed {
                invalid("new", &e.message, rid)
            } else {
                Failure::from_tool(e, rid)
            };
            return page(&state, &signed, None, Some(&f)).await;
        }
    };
    // The store ended every session; this one goes on under a fresh secret,
    // proved by the password just set (its tag, not the account's as read
    // again: that could already be another's change).
    user.credential = credential;
    let user_id = &signed.session.user_id;
    match state
        .store
        .web_session_create(user_id, credential, None)
        .await
    {
        Ok((secret, _)) => {
            let mut resp = signed.see_other("/account?changed=1");
            // This browser stays known to the account: its device cookie
            // is signed over the password, so the old one no longer
            // proves anything, and without a new one each later password
            // check here would count under the account's shared back-off
            // (which anyone can fill with wrong guesses).
            let known = state.login_backoff.device_cookie(
                state.store.form_key(),
                &user,
                &user.email,
                &crate::state::CookieScope::of(&state.cfg.public_url, ""),
            );
            for c in std::iter::once(super::session_cookie(&state, &secret)).chain(known) {
                if let Ok(v) = c.parse() {
                    resp.headers_mut().append(header::SET_COOKIE, v);
                }
            }
            resp
        }
        Err(e) => errors::page(&signed.prefix, None, &Failure::from_tool(e, rid)),
    }
}

/// `GET /account/export`: every page of `export_memories`, as JSONL,
/// streamed a page at a time (an account of many memories is never held
/// whole in memory). A failure on the first page is the error page; one
/// on a later page ends the download as failed (the connection is cut,
/// so the browser does not keep a file that silently stops short). Each
/// later page asks again whether the session is live: a sign-out, a
/// password change or `user disable` meanwhile ends the download there,
/// as it ends every other request.
pub(crate) async fn export(State(state): State<AppState>, signed: Signed) -> Response {
    let caller = signed.caller();
    let first = json!({"limit": zm_contracts::EXPORT_PAGE_MAX});
    let page = match export_page(&state, &caller, &first).await {
        Ok(page) => page,
        Err(e) => return signed.error(&signed.fail(e)),
    };
    super::download(
        Body::from_stream(export_pages(
            state,
            caller,
            signed.secret.clone(),
            page,
            zm_contracts::EXPORT_PAGE_MAX,
        ))
        .into_response(),
        "application/x-ndjson",
        "zero-memory-export.jsonl",
    )
}

/// The download's pages (of `limit` memories) from `first` on: each later
/// page is read only once the session of `secret` is seen live again, and
/// a failure (or a session ended) ends the stream with an error.
fn export_pages(
    state: AppState,
    caller: zm_store::Caller,
    secret: String,
    first: (String, Option<String>),
    limit: u32,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures::stream::unfold(ExportStep::Lines(first), move |step| {
        let (state, caller, secret) = (state.clone(), caller.clone(), secret.clone());
        async move {
            // A page's lines go out before the next page is read (and its
            // session checked): nothing is read ahead.
            let step = match step {
                ExportStep::After(cursor) => {
                    next_export_page(&state, &caller, &secret, cursor, limit).await
                }
                step => step,
            };
            match step {
                ExportStep::Done | ExportStep::After(_) => None,
                ExportStep::Failed(e) => Some((Err(e), ExportStep::Done)),
                ExportStep::Lines((lines, cursor)) => Some((
                    Ok(bytes::Bytes::from(lines)),
                    cursor.map_or(ExportStep::Done, ExportStep::After),
                )),
            }
        }
    })
}

/// The page after `cursor`, if the session of `secret` is still live.
async fn next_export_page(
    state: &AppState,
    caller: &zm_store::Caller,
    secret: &str,
    cursor: String,
    limit: u32,
) -> ExportStep {
    match state.store.web_session(secret).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            tracing::warn!(target: "zm_http", "an account export stopped: its session ended");
            return ExportStep::Failed(std::io::Error::other("the session ended"));
        }
        Err(e) => {
            tracing::warn!(target: "zm_http", code = e.code.as_str(), "an account export stopped: its session could not be checked");
            return ExportStep::Failed(std::io::Error::other("the export stopped short"));
        }
    }
    let input = json!({"limit": limit, "cursor": cursor});
    match export_page(state, caller, &input).await {
        Ok(page) => ExportStep::Lines(page),
        Err(e) => {
            tracing::warn!(target: "zm_http", code = e.code.as_str(), "an account export stopped short");
            ExportStep::Failed(std::io::Error::other("the export stopped short"))
        }
    }
}

/// Where a streamed export stands: a page's lines to send (and the cursor
/// of the page after them), the cursor of a page still to read, a failure
/// to end the download with, or done.
enum ExportStep {
    Lines((String, Option<String>)),
    After(String),
    Failed(std::io::Error),
    Done,
}

/// One page of the caller's export: its JSONL lines, and the cursor of
/// the next page when there is one.
async fn export_page(
    state: &AppState,
    caller: &zm_store::Caller,
    input: &serde_json::Value,
) -> Result<(String, Option<String>), ToolError> {
    match state
        .tools
        .call(caller, ToolName::ExportMemories, input)
        .await?
    {
        ToolOutput::ExportMemories(page) => {
            let mut lines = String::new();
            for m in &page.items {
                lines.push_str(&serde_json::to_string(m).map_err(|_| ToolError::internal())?);
                lines.push('\n');
            }
            Ok((lines, page.next_cursor))
        }
        _ => Err(ToolError::internal()),
    }
}

/// Check the signed-in account's current password (form field `field`).
/// Guessing it backs off like signing in (a browser that signed in to the
/// account counted apart, as there): a borrowed session does not turn
/// into unlimited guesses. A back-off is a failure with `retry_after`.
pub(crate) async fn current_password(
    state: &AppState,
    signed: &Signed,
    headers: &HeaderMap,
    password: &str,
    field: &str,
) -> Result<zm_store::User, Failure> {
    let rid = signed.request_id.as_deref();
    let email = &signed.session.email;
    // Counted now, before the password check (a success clears it).
    let device = state
        .login_backoff
        .known_device(
            &state.store,
            state.store.form_key(),
            email,
            headers,
            &crate::state::CookieScope::of(&state.cfg.public_url, ""),
        )
        .await;
    if let Err(refused) = state.login_backoff.attempt(email, device.as_deref()).await {
        let secs = match refused {
            NotNow::BackingOff(secs) => secs,
            NotNow::Uncounted(e) => return Err(Failure::from_tool(e, rid)),
        };
        let mut f = Failure::from_tool(
            ToolError::rate_limited(format!(
                "Too many wrong passwords for this account; retry in {secs} s."
            )),
            rid,
        );
        f.retry_after = Some(secs);
        return Err(f);
    }
    let verified = state
        .store
        .verify_password(email, password)
        .await
        .map_err(|e| Failure::from_tool(e, rid))?;
    let Some(user) = verified else {
        return Err(invalid(field, "not your current password", rid));
    };
    state
        .login_backoff
        .succeeded(email, device.as_deref())
        .await;
    Ok(user)
}

/// `POST /account/delete`: after typing the account's email and password.
pub(crate) async fn delete(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to("/account")),
    };
    if form.get("confirm").map(|c| c.trim().to_lowercase())
        != Some(signed.session.email.to_lowercase())
    {
        return page(
            &state,
            &signed,
            None,
            Some(&invalid("confirm", "type your email exactly", rid)),
        )
        .await;
    }
    // The worst a borrowed session could do: it takes the password too,
    // as changing the password does.
    match current_password(
        &state,
        &signed,
        &headers,
        form.get("password").unwrap_or(""),
        "delete-password",
    )
    .await
    {
        Err(f) if f.retry_after.is_some() => return signed.error(&f.back_to("/account")),
        Err(f) => return page(&state, &signed, None, Some(&f)).await,
        Ok(_) => {}
    }
    match state
        .tools
        .call(&signed.caller(), ToolName::DeleteAccount, &json!({}))
        .await
    {
        Ok(_) => {
            let mut resp = signed.see_other("/login");
            if let Ok(v) = super::clear_session_cookie(&state).parse() {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            resp
        }
        Err(e) => page(&state, &signed, None, Some(&Failure::from_tool(e, rid))).await,
    }
}

/// The largest file the Account page imports.
pub(crate) const IMPORT_LIMIT: usize = 20 * 1024 * 1024;

/// An upload that did not read, said plainly: a file over [`IMPORT_LIMIT`]
/// names the limit; anything else (cut off, stalled, not this form's
/// shape) asks to try again. The parser's own words go to the log, with
/// the request id, never to the page; the page leads back to the form.
fn unreadable_upload(e: &axum::extract::multipart::MultipartError, rid: Option<&str>) -> Failure {
    tracing::info!(target: "zm_http", request_id = rid.unwrap_or(""), status = e.status().as_u16(), error = %e.body_text(), "a dashboard import's upload did not read");
    let message = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        format!(
            "The file is too large: the dashboard imports files of at most {} MiB. Split it into smaller files, or import it with the zero-memory import command.",
            IMPORT_LIMIT / (1024 * 1024)
        )
    } else {
        "The file could not be uploaded: the upload was cut off or did not come from this form. Choose the file and try again.".to_string()
    };
    Failure::invalid(message, rid).back_to("/account")
}

/// `POST /account/import` (multipart): our JSONL or server-memory's, through
/// the same importer as `zero-memory import`.
pub(crate) async fn import(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    mut multipart: axum::extract::Multipart,
) -> Response {
    let rid = signed.request_id.as_deref();
    if !super::same_origin(&state, &headers) {
        return signed.error(&Failure::forbidden(
            "This form was sent from another site.",
            rid,
        ));
    }
    let (mut csrf, mut format, mut target, mut file, mut name) = (
        String::new(),
        String::new(),
        String::new(),
        None,
        String::new(),
    );
    loop {
        match multipart.next_field().await {
            Ok(Some(field)) => {
                let field_name = field.name().unwrap_or("").to_string();
                if field_name == "file" {
                    // The form's token comes first (the page puts it
                    // there): no file is read for a forged or stale form.
                    if !super::csrf_ok(&state, &signed.secret, &csrf) {
                        return signed.error(&Failure::forbidden(
                            "This form expired or did not come from this dashboard. Reload the page and try again.",
                            rid,
                        ));
                    }
                    name = field
                        .file_name()
                        .unwrap_or("upload.jsonl")
                        .chars()
                        .take(200)
                        .collect();
                    match field.bytes().await {
                        Ok(b) => file = Some(b),
                        Err(e) => return signed.error(&unreadable_upload(&e, rid)),
                    }
                } else {
                    let value = field.text().await.unwrap_or_default();
                    match field_name.as_str() {
                        "csrf" => csrf = value,
                        "format" => format = value,
                        "target" => target = value,
                        _ => {}
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return signed.error(&unreadable_upload(&e, rid)),
        }
    }
    if !super::csrf_ok(&state, &signed.secret, &csrf) {
        return signed.error(&Failure::forbidden(
            "This form expired or did not come from this dashboard. Reload the page and try again.",
            rid,
        ));
    }
    let Some(bytes) = file.filter(|b| !b.is_empty()) else {
        return page(
            &state,
            &signed,
            None,
            Some(&invalid("file", "choose a file to import", rid)),
        )
        .await;
    };
    // What the form's selects offer, and nothing else: a value it does
    // not offer (a crafted or stale form) is refused, not read as the
    // default, so a file is never imported as another format than asked.
    let format = match format.as_str() {
        "zm" | "" => zm_store::importer::ImportFormat::Zm,
        "server-memory" => zm_store::importer::ImportFormat::ServerMemory,
        _ => {
            let why = "choose zero-memory export or @modelcontextprotocol/server-memory";
            return page(&state, &signed, None, Some(&invalid("format", why, rid))).await;
        }
    };
    let target = match target.as_str() {
        "core" => Some(zm_store::importer::ImportInto::Core),
        "personal" => Some(zm_store::importer::ImportInto::Personal),
        "" => None,
        _ => {
            let why = "choose as the file says, personal or core";
            return page(&state, &signed, None, Some(&invalid("target", why, rid))).await;
        }
    };
    // The whole file is imported whatever becomes of the request (a
    // proxy's read timeout, a closed tab): on a task of its own, which
    // the store's close waits for, as a REST write is.
    // Read as the CLI reads a file, by the same importer, from the bytes
    // uploaded (not copied): a line that is not UTF-8 is that line's
    // error, a file in UTF-16 is refused saying what to do.
    let import = zm_store::importer::import_reader(
        state.tools.clone(),
        signed.caller(),
        format!("dashboard upload: {name}"),
        format,
        target,
        std::io::Cursor::new(bytes),
    );
    let Some(task) = state.store.spawn_write(import) else {
        let mut f = Failure::from_tool(
            zm_contracts::ToolError::rate_limited(
                "Too many writes are still running on this server; retry shortly.",
            ),
            rid,
        );
        f.retry_after = Some(1);
        return signed.error(&f);
    };
    let summary = match task.await {
        Ok(summary) => summary,
        Err(e) => {
            tracing::error!(target: "zm_http", error = %e, "a dashboard import ended without a summary");
            return signed.error(&Failure::from_tool(
                zm_contracts::ToolError::internal(),
                rid,
            ));
        }
    };
    let notice = import_notice(&name, &summary);
    page(&state, &signed, Some(&notice), None).await
}

/// What an upload's import did, in one line: the counts `zero-memory
/// import` prints (the retired memories it left out too), then the first
/// errors and warnings, so the figures add up to the file.
fn import_notice(name: &str, summary: &zm_store::importer::Summary) -> String {
    let first = |items: &[String]| {
        items
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let mut notice = format!(
        "Imported {name}: {} new, {} already present, {} imported before",
        summary.memories_imported, summary.memories_existing, summary.memories_skipped,
    );
    if summary.invalidated_skipped > 0 {
        notice.push_str(&format!(
            ", {} forgotten, closed or superseded (not imported)",
            summary.invalidated_skipped
        ));
        if summary.copies_retired > 0 {
            notice.push_str(&format!(
                ", of which an earlier import's {} copies were forgotten",
                summary.copies_retired
            ));
        }
    }
    if let Some(what) = summary.failure_text() {
        notice.push_str(&format!("; {what}: {}", first(&summary.errors)));
    }
    let warnings = summary.warnings.len() + summary.warnings_unlisted;
    if warnings > 0 {
        notice.push_str(&format!(
            "; {warnings} warning{}: {}",
            if warnings == 1 { "" } else { "s" },
            first(&summary.warnings)
        ));
    }
    notice.push('.');
    notice
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::json;

    /// The upload's notice counts what the import left out (retired
    /// memories) and names its warnings, as the command's summary does.
    #[test]
    fn an_import_notice_adds_up_to_the_file() {
        let mut summary = zm_store::importer::Summary::default();
        summary.memories_imported = 2;
        summary.memories_skipped = 1;
        assert_eq!(
            super::import_notice("a.jsonl", &summary),
            "Imported a.jsonl: 2 new, 0 already present, 1 imported before."
        );
        summary.invalidated_skipped = 30;
        summary.warnings =
            vec!["line 4: no edge from an entity to itself; kept as a memory".into()];
        let notice = super::import_notice("a.jsonl", &summary);
        assert!(
            notice.contains("30 forgotten, closed or superseded (not imported)")
                && notice.contains("1 warning: line 4: no edge"),
            "{notice}"
        );
    }

    /// A download's next page is read only while its session is live: a
    /// sign-out between two pages ends the stream with an error (it ran on
    /// to the end).
    #[tokio::test]
    async fn a_download_stops_at_the_page_after_its_session_ends() {
        const PAGE: u32 = 3;
        let (_dir, store) = crate::testing::sqlite_store().await;
        let user = store
            .create_user("export-cut@example.com", "a long test password")
            .await
            .unwrap();
        let caller = zm_store::Caller::new(user.id.clone());
        crate::testing::remember_n(&store, &caller, "personal", "Export line", PAGE + 2).await;
        let state = crate::state(
            store.clone(),
            crate::HttpConfig::local("http://127.0.0.1:8787"),
        );
        let mut pages = Vec::new();
        for ends in [false, true] {
            let (secret, session) = store
                .web_session_create(&user.id, user.credential, None)
                .await
                .unwrap();
            let caller = session.caller(None);
            let first = super::export_page(&state, &caller, &json!({"limit": PAGE}))
                .await
                .unwrap();
            let stream = super::export_pages(state.clone(), caller, secret.clone(), first, PAGE);
            futures::pin_mut!(stream);
            let page = stream.next().await.expect("the first page").unwrap();
            assert_eq!(page.iter().filter(|b| **b == b'\n').count(), PAGE as usize);
            if ends {
                store.web_session_end(&secret).await.unwrap();
            }
            let rest: Vec<_> = stream.collect().await;
            pages.push(rest);
        }
        let (live, ended) = (&pages[0], &pages[1]);
        assert!(
            live.len() == 1 && live[0].is_ok(),
            "a live session's download runs to its end: {live:?}"
        );
        assert!(
            ended.len() == 1 && ended[0].is_err(),
            "an ended session's stops: {ended:?}"
        );
    }
}
