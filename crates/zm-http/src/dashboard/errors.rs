//! How the dashboard shows a failure: from its error code, never from its
//! message text. `validation_failed` marks the offending fields (a form
//! re-renders with them inline; elsewhere they are listed),
//! `unauthorized` sends to sign-in and back, `forbidden` says which
//! permission is missing, `not_found` is a 404 page, `conflict` offers to
//! reload, `rate_limited` says when to retry (and sends `Retry-After`),
//! `internal` shows the request id to report. A content-guard refusal
//! shows the masked sample the store gives, never the secret.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use maud::{Markup, html};
use zm_contracts::{ErrorCode, ToolError};
use zm_store::web::WebSession;

use super::layout;
use crate::state::PathPrefix;

/// A failure on its way to the page.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) error: ToolError,
    pub(crate) request_id: Option<String>,
    pub(crate) retry_after: Option<u64>,
    /// Where "reload" and "sign in again" lead back to: a route
    /// (`/memories/x`), made public (under the path prefix) on the page.
    pub(crate) back: Option<String>,
}

impl Failure {
    pub(crate) fn from_tool(error: ToolError, request_id: Option<&str>) -> Self {
        Failure {
            error,
            request_id: request_id.map(str::to_string),
            retry_after: None,
            back: None,
        }
    }
    pub(crate) fn forbidden(message: &str, request_id: Option<&str>) -> Self {
        Self::from_tool(ToolError::forbidden(message), request_id)
    }
    pub(crate) fn invalid(message: impl Into<String>, request_id: Option<&str>) -> Self {
        Self::from_tool(ToolError::validation(message.into()), request_id)
    }
    /// A `validation_failed` naming one form field and why, built as the
    /// contract builds every field error.
    pub(crate) fn invalid_field(field: &str, reason: &str, request_id: Option<&str>) -> Self {
        Self::from_tool(
            zm_contracts::validate::field_error(field, reason),
            request_id,
        )
    }
    /// The wait a `rate_limited` failure names, on its page and in its
    /// `Retry-After`: its own, else REST's default (a second).
    pub(crate) fn retry_secs(&self) -> u64 {
        self.retry_after
            .unwrap_or(crate::error::RETRY_AFTER_DEFAULT_SECS)
    }
    /// The HTTP status of a page that shows this failure.
    pub(crate) fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.error.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
    pub(crate) fn back_to(mut self, path: &str) -> Self {
        self.back = Some(path.to_string());
        self
    }

    /// The offending fields of a `validation_failed`: (path, reason).
    pub(crate) fn fields(&self) -> Vec<(String, String)> {
        self.error
            .details
            .as_ref()
            .and_then(|d| d.get("fields"))
            .and_then(|f| f.as_array())
            .map(|a| {
                a.iter()
                    .map(|f| {
                        (
                            f["path"].as_str().unwrap_or("").to_string(),
                            f["reason"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The reason given for one field, if it is among the offending ones.
    pub(crate) fn field(&self, name: &str) -> Option<String> {
        self.fields()
            .into_iter()
            .find(|(p, _)| names_field(p, name))
            .map(|(_, r)| r)
    }

    /// The content guard's masked sample, if this is its refusal (told by
    /// the contract's stable prefix, never by the message text).
    fn masked(&self) -> Vec<String> {
        if !self
            .error
            .has_prefix(zm_contracts::prefixes::Prefix::SecretContentRejected)
        {
            return Vec::new();
        }
        self.error
            .details
            .as_ref()
            .and_then(|d| d.get("masked"))
            .and_then(|v| v.as_str())
            .map(|s| vec![s.to_string()])
            .unwrap_or_default()
    }

    /// The notice a form shows above its fields. `marked` names the
    /// fields the form marks inline; the reasons of any other offending
    /// field are listed here, so no reason goes unsaid.
    pub(crate) fn notice(&self, marked: &[&str]) -> Markup {
        let masked = self.masked();
        let fields = self.fields();
        let unmarked: Vec<&(String, String)> = fields
            .iter()
            .filter(|(path, _)| !marked.iter().any(|m| names_field(path, m)))
            .collect();
        let line =
            if self.error.code == ErrorCode::ValidationFailed && unmarked.len() == fields.len() {
                // Nothing is marked below: the summary must not point there.
                "Some of what was sent is not valid."
            } else {
                summary(self.error.code)
            };
        html! {
            div.flash.error role="alert" data-error-code=(self.error.code.as_str()) {
                p { (line) }
                @match self.error.code {
                    ErrorCode::ValidationFailed => {
                        @if fields.is_empty() { p { (self.error.message) } }
                        @else if !unmarked.is_empty() {
                            ul { @for (path, reason) in &unmarked { li { code { (path) } ": " (reason) } } }
                        }
                    }
                    // The store's own words: which permission, what changed,
                    // what was not found (never more than REST would say).
                    ErrorCode::Forbidden | ErrorCode::Conflict | ErrorCode::NotFound => {
                        p.reason { (self.error.message) }
                    }
                    ErrorCode::RateLimited => {
                        p.retry { (wait_text(self.retry_secs())) }
                    }
                    ErrorCode::Internal | ErrorCode::Unauthorized => {
                        p { "If it keeps happening, report this request id: " code.request-id { (self.request_id.as_deref().unwrap_or("unknown")) } }
                    }
                }
                @if !masked.is_empty() {
                    p { "What was found (masked): " @for m in &masked { code { (m) } " " } }
                }
            }
        }
    }
}

/// A form on a page that the store refused: the page again, with the
/// reason beside that form and what was typed kept in its fields.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) failure: Failure,
    /// Which of the page's forms was sent (`share`, `invite`, …).
    pub(crate) form: &'static str,
    /// What its text fields held, by field name.
    pub(crate) typed: Vec<(&'static str, String)>,
}

impl Refused {
    /// Can the page show this failure beside its forms? Only what the
    /// person acts on from there: a value to change, a permission they
    /// lack, a change made meanwhile (the page shown is the new state).
    /// Anything else has its own page: sign-in, not found, the wait, the
    /// request id.
    pub(crate) fn shows_inline(f: &Failure) -> bool {
        matches!(
            f.error.code,
            ErrorCode::ValidationFailed | ErrorCode::Forbidden | ErrorCode::Conflict
        )
    }

    /// The refusal, if it was of `form`.
    pub(crate) fn of<'a>(refused: Option<&'a Refused>, form: &str) -> Option<&'a Refused> {
        refused.filter(|r| r.form == form)
    }

    /// What was typed into `field` of `form`, if that form was refused.
    pub(crate) fn value<'a>(
        refused: Option<&'a Refused>,
        form: &str,
        field: &str,
    ) -> Option<&'a str> {
        Self::of(refused, form).and_then(|r| {
            r.typed
                .iter()
                .find(|(name, _)| *name == field)
                .map(|(_, v)| v.as_str())
        })
    }

    /// Why `field` of `form` was refused, if it was.
    pub(crate) fn reason(refused: Option<&Refused>, form: &str, field: &str) -> Option<String> {
        Self::of(refused, form).and_then(|r| r.failure.field(field))
    }

    /// The notice of a refusal, in one place on its page that is always
    /// shown (a stale page's form may be one the page no longer has);
    /// `marked` names the fields the page's forms mark inline.
    pub(crate) fn notice(refused: Option<&Refused>, marked: &[&str]) -> Markup {
        html! {
            @if let Some(r) = refused {
                div #refused data-form=(r.form) { (r.failure.notice(marked)) }
            }
        }
    }
}

/// A refused field is marked by three things: its wrapper's class (this),
/// its input's `aria-invalid` and `aria-describedby` (`field_aria`), and
/// the reason below the input (`field_error`), for the input `id`.
pub(crate) fn field_class(reason: Option<&str>) -> &'static str {
    if reason.is_some() {
        "field invalid"
    } else {
        "field"
    }
}

/// `aria-invalid` and `aria-describedby` of input `id`, when refused.
pub(crate) fn field_aria(id: &str, reason: Option<&str>) -> (Option<&'static str>, Option<String>) {
    reason.map_or((None, None), |_| {
        (Some("true"), Some(format!("{id}-error")))
    })
}

/// The reason below a refused input `id`.
pub(crate) fn field_error(id: &str, reason: Option<&str>) -> Markup {
    html! {
        @if let Some(r) = reason { p.error id=(format!("{id}-error")) { (r) } }
    }
}

/// Does an offending field's `path` name the form field `name` (itself,
/// or a part of it)?
fn names_field(path: &str, name: &str) -> bool {
    path == name
        || path
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// One line naming what kind of failure this is.
fn summary(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::ValidationFailed => "Some of what was sent is not valid; see the marked fields.",
        ErrorCode::Unauthorized => "You are signed out.",
        ErrorCode::Forbidden => "You do not have permission to do this.",
        ErrorCode::NotFound => "Not found.",
        ErrorCode::Conflict => "This changed since the page was shown.",
        ErrorCode::RateLimited => "Too many requests.",
        ErrorCode::Internal => "Something went wrong on the server.",
    }
}

/// The page of a failure that has no form to return to; its links are
/// under the public URL's path `prefix`.
pub(crate) fn page(prefix: &PathPrefix, session: Option<&WebSession>, f: &Failure) -> Response {
    let code = f.error.code;
    if code == ErrorCode::Unauthorized {
        let back = f.back.as_deref().unwrap_or("/");
        return super::see_other(prefix, &super::login_then(prefix, back));
    }
    let status = f.status();
    let title = match code {
        ErrorCode::ValidationFailed => "Not valid",
        ErrorCode::Forbidden => "Not allowed",
        ErrorCode::NotFound => "Not found",
        ErrorCode::Conflict => "Changed meanwhile",
        ErrorCode::RateLimited => "Slow down",
        ErrorCode::Internal | ErrorCode::Unauthorized => "Server error",
    };
    let masked = f.masked();
    let body = html! {
        h1 { (title) }
        div.flash.error role="alert" data-error-code=(code.as_str()) {
            p { (summary(code)) }
            @match code {
                ErrorCode::ValidationFailed => {
                    @let fields = f.fields();
                    @if fields.is_empty() { p { (f.error.message) } }
                    @else {
                        ul { @for (path, reason) in &fields { li { code { (path) } ": " (reason) } } }
                    }
                    @if !masked.is_empty() {
                        p { "What was found (masked): " @for m in &masked { code { (m) } " " } }
                    }
                }
                ErrorCode::Forbidden => { p.missing { (f.error.message) } }
                ErrorCode::NotFound => {
                    p { "It does not exist, or it is not yours to see." }
                    p.reason { (f.error.message) }
                }
                ErrorCode::Conflict => {
                    p { (f.error.message) }
                    p { a.button href=(prefix.join(f.back.as_deref().unwrap_or("/"))) { "Reload" } }
                }
                ErrorCode::RateLimited => {
                    p.retry { (wait_text(f.retry_secs())) }
                }
                ErrorCode::Internal | ErrorCode::Unauthorized => {
                    p { "If it keeps happening, report this request id: " code.request-id { (f.request_id.as_deref().unwrap_or("unknown")) } }
                }
            }
        }
        // Back to the page the action came from (its form, to try again),
        // when it is known; the conflict's "Reload" above already leads
        // there.
        @if let Some(back) = f.back.as_deref().filter(|b| *b != "/" && code != ErrorCode::Conflict) {
            p { a.button #go-back href=(prefix.join(back)) { "Back" } }
        }
        p { a href=(prefix.join("/")) { "Back to your memories" } }
    };
    let mut resp = super::html(status, layout::page(prefix, title, session, None, body));
    if code == ErrorCode::RateLimited {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(f.retry_secs()));
    }
    resp
}

/// "Try again in …" for a wait of `secs`.
fn wait_text(secs: u64) -> String {
    if secs == 1 {
        "Try again in a second.".to_string()
    } else {
        format!("Try again in {secs} seconds.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(resp: Response) -> (u16, String, Option<String>) {
        let status = resp.status().as_u16();
        let retry = resp
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = futures::executor::block_on(axum::body::to_bytes(resp.into_body(), usize::MAX))
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap(), retry)
    }

    /// A failure that knows the page it came from leads back to it.
    #[test]
    fn a_failure_leads_back_to_its_page() {
        let f = Failure::invalid("scope: not a scope", None).back_to("/memories/mem_x");
        let (status, html, _) = body(page(&PathPrefix::default(), None, &f));
        assert_eq!(status, 400);
        assert!(
            html.contains("id=\"go-back\" href=\"/memories/mem_x\""),
            "{html}"
        );
        let (_, html, _) = body(page(
            &PathPrefix::default(),
            None,
            &Failure::invalid("x", None),
        ));
        assert!(!html.contains("go-back"), "{html}");
    }

    /// A form's notice lists the reasons of the fields the form does not
    /// mark inline, and points to the marked ones only when there are any.
    #[test]
    fn a_notice_says_what_the_form_does_not_mark() {
        let f = Failure::from_tool(
            ToolError::validation("file: choose a file").with_details(serde_json::json!({
                "fields": [{"path": "file", "reason": "choose a file to import"}]
            })),
            None,
        );
        let unmarked = f.notice(&["password"]).into_string();
        assert!(unmarked.contains("choose a file to import"), "{unmarked}");
        assert!(!unmarked.contains("see the marked fields"), "{unmarked}");
        let marked = f.notice(&["file"]).into_string();
        assert!(!marked.contains("choose a file to import"), "{marked}");
        assert!(marked.contains("see the marked fields"), "{marked}");
    }

    #[test]
    fn each_code_has_its_own_treatment() {
        let rid = Some("req_0000000000000000.0000000000");
        let (status, html, _) = body(page(
            &PathPrefix::default(),
            None,
            &Failure::from_tool(ToolError::internal(), rid),
        ));
        assert_eq!(status, 500);
        assert!(
            html.contains("req_0000000000000000.0000000000"),
            "internal shows the request id"
        );
        let mut limited = Failure::from_tool(ToolError::rate_limited("slow down"), rid);
        limited.retry_after = Some(42);
        let (status, html, retry) = body(page(&PathPrefix::default(), None, &limited));
        assert_eq!((status, retry.as_deref()), (429, Some("42")));
        assert!(html.contains("Try again in 42 seconds"));
        // One that set no wait (the store's writer turn) says REST's.
        let busy = Failure::from_tool(ToolError::rate_limited("busy"), rid);
        let (status, html, retry) = body(page(&PathPrefix::default(), None, &busy));
        assert_eq!((status, retry.as_deref()), (429, Some("1")));
        assert!(html.contains("Try again in a second."), "{html}");
        let (status, _, _) = body(page(
            &PathPrefix::default(),
            None,
            &Failure::from_tool(ToolError::unauthorized("x"), rid).back_to("/rules"),
        ));
        assert_eq!(status, 303, "unauthorized sends to sign-in and back");
        let (status, html, _) = body(page(
            &PathPrefix::default(),
            None,
            &Failure::from_tool(ToolError::conflict("it moved"), rid).back_to("/memories/x"),
        ));
        assert_eq!(status, 409);
        assert!(html.contains("href=\"/memories/x\"") && html.contains("Reload"));
        let (status, html, _) = body(page(
            &PathPrefix::default(),
            None,
            &Failure::forbidden("Only the team's admins can do this.", rid),
        ));
        assert_eq!(status, 403);
        assert!(
            html.contains("Only the team&#39;s admins can do this.")
                || html.contains("Only the team's admins can do this.")
        );
        let secret = zm_contracts::ToolError::validation(
            zm_contracts::prefixes::Prefix::SecretContentRejected.message("field `content` appears to contain a secret"),
        )
        .with_details(serde_json::json!({"field": "content", "detector": "aws-access-key", "masked": "AKIA…"}));
        let (status, html, _) = body(page(
            &PathPrefix::default(),
            None,
            &Failure::from_tool(secret, rid),
        ));
        assert_eq!(status, 400);
        assert!(html.contains("AKIA…"), "the masked sample is shown");
    }

    #[test]
    fn behind_a_prefix_every_link_and_redirect_is_under_it() {
        let zm = PathPrefix::of("https://host.example/zm");
        let rid = Some("req_0000000000000000.0000000000");
        let resp = page(
            &zm,
            None,
            &Failure::from_tool(ToolError::unauthorized("x"), rid).back_to("/rules"),
        );
        assert_eq!(
            resp.headers()[header::LOCATION],
            "/zm/login?next=%2Fzm%2Frules"
        );
        let (_, html, _) = body(page(
            &zm,
            None,
            &Failure::from_tool(ToolError::conflict("it moved"), rid).back_to("/memories/x"),
        ));
        for url in [
            "href=\"/zm/memories/x\"".to_string(),
            "href=\"/zm/\"".to_string(),
            format!("href=\"/zm{}\"", super::super::CSS.href()),
            format!("src=\"/zm{}\"", super::super::JS.href()),
        ] {
            assert!(html.contains(url.as_str()), "{url} in {html}");
        }
    }
}
