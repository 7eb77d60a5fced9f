//! The review queue: pending conflicts and near-duplicate pairs side by
//! side with a word-level diff, each resolved with the resolutions the
//! contract allows (`resolve_conflict`: a winner, keep both, retire the
//! challenged memory) — through the tool service, like an agent would.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::json;
use zm_contracts::{Conflict, ConflictSide, ToolName, ToolOutput};

use super::errors::Failure;
use super::{PagePath, Signed, signed_form};
use crate::state::AppState;

/// A word-level diff of two texts: the longest common subsequence of their
/// words, each side marked with what it alone holds.
/// The words of one side of a diff, each marked when only that side holds it.
pub(crate) type Marked = Vec<(bool, String)>;

pub(crate) fn word_diff(a: &str, b: &str) -> (Marked, Marked) {
    let (all_a, all_b): (Vec<&str>, Vec<&str>) = (
        a.split_whitespace().collect(),
        b.split_whitespace().collect(),
    );
    // Long texts: compare at most 400 words a side (a memory is short);
    // the words past them are shown unmarked, never cut.
    let (wa, wb) = (
        &all_a[..all_a.len().min(DIFF_WORDS)],
        &all_b[..all_b.len().min(DIFF_WORDS)],
    );
    let (n, m) = (wa.len(), wb.len());
    let mut lcs = vec![vec![0u16; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if wa[i] == wb[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let (mut left, mut right) = (Vec::new(), Vec::new());
    while i < n && j < m {
        if wa[i] == wb[j] {
            left.push((false, wa[i].to_string()));
            right.push((false, wb[j].to_string()));
            i += 1;
            j += 1;
        } else if lcs[i + 1][j] >= lcs[i][j + 1] {
            left.push((true, wa[i].to_string()));
            i += 1;
        } else {
            right.push((true, wb[j].to_string()));
            j += 1;
        }
    }
    left.extend(wa[i..].iter().map(|w| (true, (*w).to_string())));
    right.extend(wb[j..].iter().map(|w| (true, (*w).to_string())));
    left.extend(all_a[n..].iter().map(|w| (false, (*w).to_string())));
    right.extend(all_b[m..].iter().map(|w| (false, (*w).to_string())));
    (left, right)
}

/// How many words of each side a diff compares.
const DIFF_WORDS: usize = 400;

/// The words of one side; what only this side holds is marked (`del` on
/// the left, `ins` on the right), each preceded by a visually hidden
/// "removed:" / "added:" for screen readers, which announce neither element.
fn words(ws: &[(bool, String)], left: bool) -> Markup {
    html! {
        @for (changed, w) in ws {
            @if !*changed { (w) " " }
            @else if left { span.sr-only { "removed: " } del { (w) } " " }
            @else { span.sr-only { "added: " } ins { (w) } " " }
        }
    }
}

fn side(signed: &Signed, s: &ConflictSide, label: &str, body: &Markup) -> Markup {
    html! {
        div.side {
            h3 { (label) " " a href=(signed.href(&format!("/memories/{}", s.id))) { code { (s.id) } } }
            p.muted { (s.kind.as_str()) " · " code { (s.scope) } " · " (s.created_at.get(..10).unwrap_or("")) }
            p.content { (body) }
        }
    }
}

/// The review page at `cursor` (the newest without one), as a route:
/// the cursor is only ever this route's one parameter, encoded.
fn page_at(cursor: Option<&str>) -> String {
    match cursor.filter(|c| !c.is_empty()) {
        Some(c) => format!(
            "/review?{}",
            serde_urlencoded::to_string([("cursor", c)]).unwrap_or_default()
        ),
        None => "/review".to_string(),
    }
}

/// One conflict, its forms carrying the page it is on (`cursor`): the
/// decision comes back there, not to the newest page.
fn conflict_card(signed: &Signed, c: &Conflict, cursor: Option<&str>) -> Markup {
    let action = signed.href(&format!("/review/{}", c.dispute_id));
    // Every form's CSRF token, and the page it comes back to.
    let hidden = html! {
        input type="hidden" name="csrf" value=(signed.csrf);
        @if let Some(page) = cursor { input type="hidden" name="cursor" value=(page); }
    };
    html! {
        li.conflict data-dispute=(c.dispute_id) {
            h2 { (c.verdict.as_str()) " " span.muted { "(" (c.dispute_id) ")" } }
            @if let Some(r) = &c.rationale { p { (r) } }
            @match &c.memory_b {
                Some(b) => {
                    @let (l, r) = word_diff(&c.memory_a.content, &b.content);
                    div.pair {
                        (side(signed, &c.memory_a, "A", &words(&l, true)))
                        (side(signed, b, "B", &words(&r, false)))
                    }
                    div.actions {
                        form method="post" action=(action) {
                            (hidden)
                            input type="hidden" name="winner" value=(c.memory_a.id);
                            button type="submit" { "Keep A (B is superseded)" }
                        }
                        form method="post" action=(action) {
                            (hidden)
                            input type="hidden" name="winner" value=(b.id);
                            button type="submit" { "Keep B (A is superseded)" }
                        }
                        form method="post" action=(action) {
                            (hidden)
                            input type="hidden" name="keep_both" value="true";
                            button.secondary type="submit" { "Keep both" }
                        }
                    }
                }
                None => {
                    (side(signed, &c.memory_a, "Challenged", &html! { (c.memory_a.content) }))
                    div.actions {
                        form method="post" action=(action) {
                            (hidden)
                            input type="hidden" name="keep_both" value="true";
                            button type="submit" { "Uphold it" }
                        }
                        form method="post" action=(action) {
                            (hidden)
                            input type="hidden" name="retire" value="true";
                            button.danger type="submit" { "Retire it" }
                        }
                    }
                }
            }
        }
    }
}

/// How many pending conflicts a page shows (`list_conflicts`' most).
const REVIEW_PAGE: usize = 100;

/// `GET /review`'s query: the page after `cursor` (a `next_cursor`).
#[derive(serde::Deserialize)]
pub(crate) struct ReviewQuery {
    cursor: Option<String>,
}

/// `GET /review`.
pub(crate) async fn index(
    State(state): State<AppState>,
    signed: Signed,
    super::PageQuery(q): super::PageQuery<ReviewQuery>,
) -> Response {
    let rid = signed.request_id.as_deref();
    let mut input = json!({"status": "pending", "limit": REVIEW_PAGE});
    let cursor = q.cursor.filter(|c| !c.is_empty());
    if let Some(c) = &cursor {
        input["cursor"] = json!(c);
    }
    let out = match state
        .tools
        .call(&signed.caller(), ToolName::ListConflicts, &input)
        .await
    {
        Ok(ToolOutput::ListConflicts(o)) => o,
        Ok(_) => {
            return signed.error(&Failure::from_tool(
                zm_contracts::ToolError::internal(),
                rid,
            ));
        }
        Err(e) => return signed.error(&Failure::from_tool(e, rid).back_to("/review")),
    };
    let older = out
        .next_cursor
        .as_deref()
        .map(|c| signed.href(&page_at(Some(c))));
    let body = html! {
        h1 { "Review" }
        p.lead { "Conflicts and near-duplicates your agents found, newest first. What you decide is what an agent's " code { "resolve_conflict" } " would do." }
        @if out.conflicts.is_empty() {
            p #queue-empty { @if cursor.is_some() { "No older conflicts." } @else { "Nothing to review." } }
        } @else {
            ol.conflicts #queue { @for c in &out.conflicts { (conflict_card(&signed, c, cursor.as_deref())) } }
        }
        @if cursor.is_some() || older.is_some() {
            div.pager #queue-pager {
                @if cursor.is_some() { a href=(signed.href("/review")) { "← Newest" } }
                @if let Some(href) = &older { a rel="next" href=(href) { "Older →" } }
            }
        }
    };
    signed.page(StatusCode::OK, "Review", "/review", body)
}

/// `POST /review/{dispute_id}`.
pub(crate) async fn resolve(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(dispute): PagePath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to("/review")),
    };
    // Back to the page the conflict was on: its cursor (opaque, checked
    // by `list_conflicts` when the page is drawn), re-encoded as this
    // route's only parameter.
    let back = page_at(form.get("cursor"));
    let mut input = json!({"dispute_id": dispute});
    if let Some(w) = form.get("winner") {
        input["winner"] = json!(w);
    }
    if form.get("keep_both") == Some("true") {
        input["keep_both"] = json!(true);
    }
    if form.get("retire") == Some("true") {
        input["retire"] = json!(true);
    }
    match state
        .tools
        .call(&signed.caller(), ToolName::ResolveConflict, &input)
        .await
    {
        Ok(_) => signed.see_other(&back),
        Err(e) => signed.error(&signed.fail(e).back_to(&back)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_diff_marks_only_what_differs() {
        let (l, r) = super::word_diff(
            "deploys run on Tuesday at noon",
            "deploys run on Thursday at noon",
        );
        let changed = |v: &[(bool, String)]| {
            v.iter()
                .filter(|(c, _)| *c)
                .map(|(_, w)| w.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(changed(&l), ["Tuesday"]);
        assert_eq!(changed(&r), ["Thursday"]);
        let (l, r) = super::word_diff("", "new text");
        assert!(l.is_empty() && changed(&r) == ["new", "text"]);
    }

    /// A text longer than the diff compares is shown whole: the words past
    /// the compared ones follow, unmarked.
    #[test]
    fn a_long_text_is_shown_whole() {
        let long: Vec<String> = (0..super::DIFF_WORDS + 50)
            .map(|i| format!("w{i}"))
            .collect();
        let (l, r) = super::word_diff(&long.join(" "), "short text");
        let words: Vec<&str> = l.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(words, long.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(l[super::DIFF_WORDS..].iter().all(|(c, _)| !c));
        assert_eq!(r.len(), 2);
    }
}
