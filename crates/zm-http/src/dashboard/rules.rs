//! Rules: the rules the person promoted, by layer, each with its delivery
//! status (delivered, over the cap, past the TTL, revoked); pin, unpin and
//! revoke with a reason; a preview of what an agent's briefing and MCP
//! instructions carry; the delivered rules as a `CLAUDE.md`, `AGENTS.md`
//! or `.cursorrules` block. A rule's row cells and its revoke form are
//! drawn here for every page that lists rules (a team's page lists those
//! its departed members left, for its admins to revoke).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use std::collections::HashSet;

use zm_contracts::MemoryId;
use zm_store::rules::{RuleRecord, RuleState};
use zm_store::search::{PINNED_RULES_CAP_PER_LAYER, RULES_CAP_PER_LAYER, RULES_TTL_DAYS};

use super::errors::Failure;
use super::{PagePath, Signed, signed_form};
use crate::state::AppState;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Why a promoted rule is or is not in the briefing, by its id among the
/// ones a briefing delivers ([`Store::delivered_rule_ids`](zm_store::Store::delivered_rule_ids)).
pub(super) fn delivery(r: &RuleRecord, delivered: &HashSet<String>, now: i64) -> &'static str {
    match r.status {
        RuleState::Revoked => "revoked",
        RuleState::Dismissed => "dismissed",
        RuleState::Promoted => {
            if delivered.contains(&r.id) {
                if r.layer == zm_contracts::RuleLayer::Project {
                    "delivered in its project's briefings"
                } else {
                    "delivered"
                }
            } else if !r.pinned
                && r.promoted_at
                    .is_some_and(|t| t < now - RULES_TTL_DAYS * DAY_MS)
            {
                "past the TTL"
            } else {
                // Over its layer's cap, the same text as a rule delivered
                // before it (a briefing carries a text once), or for a
                // scope the viewer's briefings no longer reach.
                "not delivered in your briefings: over the cap, the same text as another rule, or a scope you no longer reach"
            }
        }
    }
}

/// The projects (and teams) rules of the project layer apply to: where a
/// briefing may deliver them.
pub(super) fn project_scopes(records: &[RuleRecord]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.layer == zm_contracts::RuleLayer::Project)
        .filter_map(|r| r.applies_scope.clone())
        .collect()
}

/// A rule as the first cell of its row shows it: its pinned tag, its text
/// (cut after `max_chars` characters, when given, with an ellipsis) and a
/// link to its memory, which holds the whole of it.
pub(super) fn rule_cell(signed: &Signed, r: &RuleRecord, max_chars: Option<usize>) -> Markup {
    let text = match max_chars {
        Some(n) if r.text.chars().count() > n => {
            format!("{}…", r.text.chars().take(n).collect::<String>().trim_end())
        }
        _ => r.text.clone(),
    };
    html! {
        @if r.pinned { span.tag { "pinned" } " " }
        // Isolated: a right-to-left rule does not pull the link into it.
        bdi { (text) } " "
        a href=(signed.href(&format!("/memories/{}", r.memory_id))) { "(memory)" }
    }
}

/// When a rule was promoted and, unpinned, the day it stops being
/// delivered ([`RULES_TTL_DAYS`] later).
pub(super) fn promoted_until(r: &RuleRecord) -> String {
    let day = |ms: i64| {
        zm_store::clock::rfc3339(ms)
            .get(..10)
            .unwrap_or("")
            .to_string()
    };
    match r.promoted_at {
        None => String::new(),
        Some(at) if r.pinned => day(at),
        Some(at) => format!(
            "{} (delivered until {})",
            day(at),
            day(at + RULES_TTL_DAYS * DAY_MS)
        ),
    }
}

/// The form that revokes the promoted rule from memory `memory_id`, with a
/// reason. `back` is the route it returns to afterwards (sent as `next`, a
/// public path, as the sign-in page's is); the Rules page without it.
pub(super) fn revoke_form(signed: &Signed, memory_id: &MemoryId, back: Option<&str>) -> Markup {
    html! {
        form method="post" action=(signed.href(&format!("/rules/{memory_id}/revoke"))) {
            input type="hidden" name="csrf" value=(signed.csrf);
            @if let Some(back) = back {
                input type="hidden" name="next" value=(signed.href(back));
            }
            label.sr-only for=(format!("reason-{memory_id}")) { "Reason for revoking" }
            input id=(format!("reason-{memory_id}")) type="text" name="reason" placeholder="Reason" required maxlength="500";
            button.danger type="submit" aria-label=(format!("Revoke the rule from memory {memory_id}")) { "Revoke" }
        }
    }
}

/// `GET /rules`.
pub(crate) async fn index(State(state): State<AppState>, signed: Signed) -> Response {
    let caller = signed.caller();
    let rid = signed.request_id.as_deref();
    let (records, delivered) = match tokio::try_join!(
        state.store.list_rules(&caller),
        state.store.user_rules(&caller),
    ) {
        Ok(v) => v,
        Err(e) => return signed.error(&Failure::from_tool(e, rid)),
    };
    let delivered_ids = match state
        .store
        .delivered_rule_ids(&caller, &project_scopes(&records))
        .await
    {
        Ok(ids) => ids,
        Err(e) => return signed.error(&Failure::from_tool(e, rid)),
    };
    let now = state.store.clock().now_ms();
    let capped = zm_mcp::instructions::compose(&delivered, true);
    let uncapped = zm_mcp::instructions::compose(&delivered, false);
    let body = html! {
        h1 { "Rules" }
        p.lead { "Standing instructions your agents follow: every briefing carries the delivered ones, pinned first: per layer at most " (PINNED_RULES_CAP_PER_LAYER) " pinned and " (RULES_CAP_PER_LAYER) " unpinned; unpinned rules stop being delivered " (RULES_TTL_DAYS) " days after they were promoted." }
        @for (layer, label) in [(zm_contracts::RuleLayer::User, "Your layer (every session)"), (zm_contracts::RuleLayer::Project, "Project and team layers")] {
            h2 { (label) }
            @let in_layer: Vec<&RuleRecord> = records.iter().filter(|r| r.layer == layer).collect();
            @if in_layer.is_empty() { p.muted { "None." } } @else {
                table.rules {
                    thead { tr { th { "Rule" } th { "Applies to" } th { "Delivery" } th { span.sr-only { "Actions" } } } }
                    tbody {
                        @for r in &in_layer {
                            tr data-memory=(r.memory_id) {
                                td { (rule_cell(&signed, r, None)) }
                                td { (r.applies_scope.clone().unwrap_or_else(|| "all your sessions".into())) }
                                td.delivery { (delivery(r, &delivered_ids, now)) }
                                td {
                                    @if r.status == RuleState::Promoted {
                                        div.actions {
                                            form method="post" action=(signed.href(&format!("/rules/{}/{}", r.memory_id, if r.pinned { "unpin" } else { "pin" }))) {
                                                input type="hidden" name="csrf" value=(signed.csrf);
                                                button.secondary type="submit" aria-label=(format!("{} the rule from memory {}", if r.pinned { "Unpin" } else { "Pin" }, r.memory_id)) { @if r.pinned { "Unpin" } @else { "Pin" } }
                                            }
                                            (revoke_form(&signed, &r.memory_id, None))
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "What an agent receives" }
        h3 { "In its briefing (" code { "build_context" } " with " code { "briefing: true" } ")" }
        @if delivered.is_empty() { p.muted { "No rule is delivered." } } @else {
            ol #briefing-rules { @for r in &delivered { li { @if r.pinned { span.tag { "pinned" } " " } (r.text) } } }
        }
        h3 { "In its MCP instructions at connect" }
        pre.content #instructions { (uncapped.text) }
        p.muted { "Clients that cap their instructions get " (capped.text.chars().count()) " characters: the rules are announced and delivered through the briefing." }
        h3 { "As a file for your repository" }
        p {
            a.button.secondary href=(signed.href("/rules/download?format=claude")) download { "CLAUDE.md block" } " "
            a.button.secondary href=(signed.href("/rules/download?format=agents")) download { "AGENTS.md block" } " "
            a.button.secondary href=(signed.href("/rules/download?format=cursor")) download { ".cursorrules block" }
        }
    };
    signed.page(StatusCode::OK, "Rules", "/rules", body)
}

/// `POST /rules/{memory_id}/{pin|unpin|revoke}`, back to the Rules page,
/// or to the page of ours its form names in `next` (a public path, checked
/// as the sign-in page checks its own: a team's page revokes the rules its
/// departed members left and returns there).
pub(crate) async fn act(
    State(state): State<AppState>,
    signed: Signed,
    PagePath((memory_id, action)): PagePath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to("/rules")),
    };
    let back = form
        .get("next")
        .and_then(|next| super::login::local_route(&signed.prefix, next))
        .unwrap_or("/rules")
        .to_string();
    let caller = signed.caller();
    let done = match action.as_str() {
        "pin" => state.store.pin_rule(&caller, &memory_id, true).await,
        "unpin" => state.store.pin_rule(&caller, &memory_id, false).await,
        // The store decides what a reason must be (1–500 characters).
        "revoke" => {
            state
                .store
                .revoke_rule(&caller, &memory_id, form.get("reason").unwrap_or(""))
                .await
        }
        _ => Err(zm_contracts::ToolError::not_found("No such action.")),
    };
    match done {
        Ok(()) => signed.see_other(&back),
        Err(e) => signed.error(&Failure::from_tool(e, rid).back_to(&back)),
    }
}

#[derive(Deserialize)]
pub(crate) struct Format {
    format: Option<String>,
}

/// `GET /rules/download?format=claude|agents|cursor`: the delivered rules
/// as a block to paste into the file an agent reads.
pub(crate) async fn download(
    State(state): State<AppState>,
    signed: Signed,
    super::PageQuery(q): super::PageQuery<Format>,
) -> Response {
    let rules = match state.store.user_rules(&signed.caller()).await {
        Ok(r) => r,
        Err(e) => {
            return signed.error(&signed.fail(e));
        }
    };
    let (file, heading) = match q.format.as_deref() {
        Some("agents") => ("AGENTS.md", "## Standing rules (from zero-memory)"),
        Some("cursor") => (".cursorrules", "# Standing rules (from zero-memory)"),
        Some("claude" | "") | None => ("CLAUDE.md", "## Standing rules (from zero-memory)"),
        Some(_) => {
            return signed.error(
                &Failure::invalid_field(
                    "format",
                    "choose claude, agents or cursor",
                    signed.request_id.as_deref(),
                )
                .back_to("/rules"),
            );
        }
    };
    let mut text = format!("{heading}\n\n");
    for r in &rules {
        text.push_str(&format!(
            "- {}{}\n",
            if r.pinned { "(pinned) " } else { "" },
            r.text.replace('\n', " ")
        ));
    }
    super::download(text.into_response(), "text/markdown; charset=utf-8", file)
}
