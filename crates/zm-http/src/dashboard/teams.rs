//! Teams: the person's teams, creating one, and a team's page — members
//! and roles (change, remove), invitations (send; the person's own to
//! accept), shared projects, the audit log, the rules departed members
//! left to the team's steward (for its admins to revoke) — through the
//! same store methods as the REST administration API, so the same roles
//! apply.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::json;
use zm_contracts::teams::{
    AddMemberInput, CreateTeamInput, InviteInput, SetRoleInput, ShareProjectInput, TeamDetail,
};
use zm_contracts::{ErrorCode, InvitationId, TeamRole};
use zm_store::rules::{RuleRecord, RuleState};

use super::errors::{Failure, Refused, field_aria, field_class, field_error};
use super::memories::when;
use super::{Form, PagePath, Signed, rules, signed_form};
use crate::state::AppState;

fn role_select(id: &str, selected: TeamRole) -> Markup {
    html! {
        select id=(id) name="role" {
            @for r in [TeamRole::Reader, TeamRole::Writer, TeamRole::Admin] {
                option value=(r.as_str()) selected[r == selected] { (r.as_str()) }
            }
        }
    }
}

/// `GET /teams`.
pub(crate) async fn index(State(state): State<AppState>, signed: Signed) -> Response {
    teams_page(&state, &signed, None).await
}

/// The Teams page, with the refusal of its create form if there was one
/// (its status then is the refusal's).
async fn teams_page(state: &AppState, signed: &Signed, refused: Option<Refused>) -> Response {
    let refused = refused.as_ref();
    let slug_error = Refused::reason(refused, "new-team", "slug");
    let name_error = Refused::reason(refused, "new-team", "name");
    let (slug_invalid, slug_described) = field_aria("slug", slug_error.as_deref());
    let (name_invalid, name_described) = field_aria("team-name", name_error.as_deref());
    let caller = signed.caller();
    let rid = signed.request_id.as_deref();
    let (teams, invitations) = match tokio::try_join!(
        state.store.list_teams(&caller),
        state.store.list_invitations(&caller)
    ) {
        Ok(v) => v,
        Err(e) => return signed.error(&Failure::from_tool(e, rid)),
    };
    let body = html! {
        h1 { "Teams" }
        (Refused::notice(refused, &["slug", "name"]))
        p.lead { "A team's members share its memories and rules through their agents. " }
        @if !invitations.invitations.is_empty() {
            h2 { "Invitations for you" }
            ul #my-invitations {
                @for i in &invitations.invitations {
                    li {
                        "Team " strong { (i.team) } " as " (i.role.as_str()) " (until " (super::memories::when(&i.expires_at)) ") "
                        form method="post" action=(signed.href(&format!("/teams/invitations/{}/accept", i.id))) {
                            input type="hidden" name="csrf" value=(signed.csrf);
                            button type="submit" { "Accept" }
                        }
                    }
                }
            }
        }
        h2 { "Your teams" }
        @if teams.teams.is_empty() { p #no-teams { "You are in no team." } } @else {
            table #teams {
                thead { tr { th { "Team" } th { "Scope" } th { "Your role" } th { "Members" } } }
                tbody {
                    @for t in &teams.teams {
                        tr { td { a href=(signed.href(&format!("/teams/{}", t.slug))) { (t.name) } } td { code { (t.scope) } } td { (t.role.as_str()) } td { (t.members) } }
                    }
                }
            }
        }
        h2 { "Create a team" }
        form #new-team method="post" action=(signed.href("/teams")) {
            input type="hidden" name="csrf" value=(signed.csrf);
            div class=(field_class(slug_error.as_deref())) {
                label for="slug" { "Slug" }
                input #slug type="text" name="slug" required pattern="[a-z][a-z0-9_]{1,39}" aria-invalid=[slug_invalid] aria-describedby=(slug_described.map_or_else(|| "slug-hint".to_string(), |e| format!("{e} slug-hint"))) value=[Refused::value(refused, "new-team", "slug")];
                (field_error("slug", slug_error.as_deref()))
                p.hint #slug-hint { "Lowercase letters, digits and _; its scope will be team.<slug>." }
            }
            div class=(field_class(name_error.as_deref())) {
                label for="team-name" { "Name" }
                input #team-name type="text" name="name" maxlength="100" aria-invalid=[name_invalid] aria-describedby=[name_described] value=[Refused::value(refused, "new-team", "name")];
                (field_error("team-name", name_error.as_deref()))
            }
            button type="submit" { "Create" }
        }
    };
    let status = refused.map_or(StatusCode::OK, |r| r.failure.status());
    signed.page(status, "Teams", "/teams", body)
}

/// The longest excerpt of a rule's text the team's page shows (its memory
/// holds the rest).
const RULE_EXCERPT_CHARS: usize = 200;

/// What an admin's page adds to every member's.
struct AdminView {
    /// The audit log, or why it could not be read.
    audit: Result<zm_contracts::teams::TeamAudit, zm_contracts::ToolError>,
    /// The promoted rules the team's steward holds: departed members'.
    steward_rules: Vec<RuleRecord>,
    /// The rules current members promoted for the team's scopes.
    member_rules: Vec<RuleRecord>,
    /// The ids of those (both lists) a briefing of the admin's delivers.
    delivered: std::collections::HashSet<String>,
}

/// Someone in the audit log: their email, with their id on hover; the id
/// alone when their account is gone.
fn who(id: Option<&zm_contracts::UserId>, email: Option<&str>) -> Markup {
    html! {
        @match (id, email) {
            (Some(id), Some(email)) => span title=(id) { (email) },
            (Some(id), None) => code { (id) },
            (None, _) => "",
        }
    }
}

/// Which of an admin's two lists of rules a table shows.
struct RuleList {
    /// The table's id; its heading's is `{id}-heading`, the line shown
    /// instead when it is empty `no-{id}`.
    id: &'static str,
    heading: &'static str,
    empty: &'static str,
    hint: &'static str,
}

/// The promoted rules departed members left to the team's steward.
const STEWARD_RULES: RuleList = RuleList {
    id: "steward-rules",
    heading: "Rules left by former members",
    empty: "None: no former member left a promoted rule.",
    hint: "Members who left the team promoted these rules for its scopes. Every member's agents receive them until their 90 days end (Delivery says which still are); as an admin you may revoke them.",
};

/// The rules current members promoted for the team's scopes, which every
/// member's agents receive (an admin's moderation).
const MEMBER_RULES: RuleList = RuleList {
    id: "member-rules",
    heading: "Rules members promoted for the team",
    empty: "None: no member promoted a rule for the team's scopes.",
    hint: "Members promoted these rules for the team or its projects; every member's agents receive them (pinned ones lead every briefing). As an admin you may revoke any of them, with a reason; the team's audit log records it.",
};

/// One of an admin's lists of rules, each rule with a form that revokes
/// it and comes back to this page.
fn rule_list(
    signed: &Signed,
    slug: &str,
    list: &RuleList,
    records: &[RuleRecord],
    delivered: &std::collections::HashSet<String>,
    now: i64,
) -> Markup {
    let back = format!("/teams/{slug}");
    let heading_id = format!("{}-heading", list.id);
    html! {
        h2 id=(heading_id) { (list.heading) }
        @if records.is_empty() {
            p.muted id=(format!("no-{}", list.id)) { (list.empty) }
        } @else {
            p.hint { (list.hint) }
            table.rules id=(list.id) aria-labelledby=(heading_id) {
                thead { tr { th { "Rule" } th { "Applies to" } th { "Promoted" } th { "Delivery" } th { span.sr-only { "Actions" } } } }
                tbody {
                    @for r in records {
                        tr data-memory=(r.memory_id) {
                            td { (rules::rule_cell(signed, r, Some(RULE_EXCERPT_CHARS))) }
                            td { code { (r.applies_scope.as_deref().unwrap_or("")) } }
                            td { (rules::promoted_until(r)) }
                            td.delivery { (rules::delivery(r, delivered, now)) }
                            td { div.actions { (rules::revoke_form(signed, &r.memory_id, Some(&back))) } }
                        }
                    }
                }
            }
        }
    }
}

/// `adds_directly`: the signed-in user may add an existing account directly
/// (`Store::may_add_members_directly`); other admins invite. `admin_view`
/// only for the team's admins.
fn detail_page(
    signed: &Signed,
    d: &TeamDetail,
    admin_view: Option<&AdminView>,
    adds_directly: bool,
    now: i64,
    refused: Option<&Refused>,
) -> Markup {
    let admin = d.team.role == TeamRole::Admin;
    let slug = &d.team.slug;
    let csrf = &signed.csrf;
    let email_error = Refused::reason(refused, "invite", "email");
    let (email_invalid, email_described) = field_aria("invite-email", email_error.as_deref());
    let project_error = Refused::reason(refused, "share-project", "project")
        .or_else(|| Refused::reason(refused, "share-project", "scope"))
        .or_else(|| Refused::reason(refused, "share-project", "project_hint"));
    let (project_invalid, project_described) = field_aria("project", project_error.as_deref());
    let confirm_error = Refused::reason(refused, "delete-team", "confirm");
    // The fields a refused form marks, when that form is on the page;
    // otherwise the notice says their reasons itself.
    let marked: Vec<&str> = match refused.map(|r| r.form) {
        Some("invite") if admin => vec!["email"],
        Some("share-project") if d.team.role.can_write() => {
            vec!["project", "scope", "project_hint"]
        }
        Some("delete-team") if admin => vec!["confirm"],
        _ => Vec::new(),
    };
    let (confirm_invalid, confirm_described) = field_aria("confirm-slug", confirm_error.as_deref());
    html! {
        p { a href=(signed.href("/teams")) { "← Teams" } }
        h1 { (d.team.name) " " code { (d.team.scope) } }
        p { "Your role: " strong #my-role { (d.team.role.as_str()) } }
        (Refused::notice(refused, &marked))
        h2 { "Members" }
        table #members {
            thead { tr { th { "Member" } th { "Role" } th { "Since" } @if admin { th { span.sr-only { "Actions" } } } } }
            tbody {
                @for m in &d.members {
                    tr data-user=(m.user_id) {
                        td { (m.email) }
                        td {
                            @if admin {
                                form.inline method="post" action=(signed.href(&format!("/teams/{slug}/members/{}/role", m.user_id))) {
                                    input type="hidden" name="csrf" value=(csrf);
                                    label.sr-only for=(format!("role-{}", m.user_id)) { "Role of " (m.email) }
                                    (role_select(&format!("role-{}", m.user_id), m.role))
                                    button.secondary type="submit" aria-label=(format!("Change the role of {}", m.email)) { "Change" }
                                }
                            } @else { (m.role.as_str()) }
                        }
                        td { (m.added_at.get(..10).unwrap_or("")) }
                        @if admin {
                            td {
                                form method="post" action=(signed.href(&format!("/teams/{slug}/members/{}/remove", m.user_id))) {
                                    input type="hidden" name="csrf" value=(csrf);
                                    // Removing oneself is leaving: said so.
                                    @if m.user_id.as_str() == signed.session.user_id.as_str() {
                                        button.danger type="submit" aria-label="Leave this team" { "Leave" }
                                    } @else {
                                        button.danger type="submit" aria-label=(format!("Remove {}", m.email)) { "Remove" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if admin {
            h2 { @if adds_directly { "Invite or add" } @else { "Invite" } }
            form #invite method="post" action=(signed.href(&format!("/teams/{slug}/invite"))) {
                input type="hidden" name="csrf" value=(csrf);
                div class=(field_class(email_error.as_deref())) {
                    label for="invite-email" { "Email" }
                    input #invite-email type="email" name="email" required aria-invalid=[email_invalid] aria-describedby=[email_described] value=[Refused::value(refused, "invite", "email")];
                    (field_error("invite-email", email_error.as_deref()))
                }
                // A refused invitation comes back with the role it asked
                // for: a reader's invitation must not become a writer's.
                div.field { label for="invite-role" { "Role" } (role_select("invite-role", Refused::value(refused, "invite", "role").and_then(TeamRole::parse).unwrap_or(TeamRole::Writer))) }
                div.actions {
                    button type="submit" name="how" value="invite" { "Send an invitation" }
                    @if adds_directly {
                        button.secondary type="submit" name="how" value="add" { "Add an existing account now" }
                    }
                }
                @if !adds_directly {
                    p.hint { "They join when they accept: an invitation asks for their consent, because a member's agents receive the team's rules." }
                }
            }
            @if !d.invitations.is_empty() {
                h3 { "Open invitations" }
                ul #invitations {
                    @for i in &d.invitations {
                        li {
                            bdi { (i.email) } " as " (i.role.as_str()) " — " (i.status.as_str()) " until " (super::memories::when(&i.expires_at)) " — " code { (i.id) } " "
                            form.inline method="post" action=(signed.href(&format!("/teams/{slug}/invitations/{}/withdraw", i.id))) {
                                input type="hidden" name="csrf" value=(csrf);
                                button.danger type="submit" aria-label=(format!("Withdraw the invitation of {}", i.email)) { "Withdraw" }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Shared projects" }
        @if d.projects.is_empty() { p.muted { "None yet." } } @else {
            ul #projects { @for p in &d.projects { li { code { (p.scope) } @if p.owned { " (the team's own)" } @else { " (shared by a member)" } } } }
        }
        @if d.team.role.can_write() {
            form #share-project method="post" action=(signed.href(&format!("/teams/{slug}/projects"))) {
                input type="hidden" name="csrf" value=(csrf);
                div class=(field_class(project_error.as_deref())) {
                    label for="project" { "Share one of your projects (its scope or repository)" }
                    input #project type="text" name="project" required placeholder="proj.… or git@github.com:org/repo.git" aria-invalid=[project_invalid] aria-describedby=[project_described] value=[Refused::value(refused, "share-project", "project")];
                    (field_error("project", project_error.as_deref()))
                }
                button.secondary type="submit" { "Share with the team" }
            }
        }
        @if !admin {
            h2 { "Leave" }
            form #leave method="post" action=(signed.href(&format!("/teams/{slug}/members/{}/remove", signed.session.user_id))) {
                input type="hidden" name="csrf" value=(csrf);
                p.hint { "What you shared in its scopes stays with the team, and you no longer read it. An admin can invite you again." }
                button.danger type="submit" { "Leave this team" }
            }
        }
        @if let Some(v) = admin_view {
            (rule_list(signed, slug, &STEWARD_RULES, &v.steward_rules, &v.delivered, now))
            (rule_list(signed, slug, &MEMBER_RULES, &v.member_rules, &v.delivered, now))
        }
        @if let Some(Err(e)) = admin_view.map(|v| &v.audit) {
            // No longer the team's admin since the role was read: no log,
            // as on a member's page. Anything else is said.
            @if !matches!(e.code, ErrorCode::Forbidden | ErrorCode::NotFound) {
                h2 { "Audit log" }
                div.flash.error role="alert" #audit-failed {
                    p { "The audit log could not be read." }
                    p { "If it keeps happening, report this request id: " code.request-id { (signed.request_id.as_deref().unwrap_or("unknown")) } }
                }
            }
        }
        @if let Some(Ok(a)) = admin_view.map(|v| &v.audit) {
            h2 { "Audit log" }
            @if a.events.len() >= zm_contracts::teams::TEAM_AUDIT_MAX {
                p.muted #audit-newest { "The newest " (zm_contracts::teams::TEAM_AUDIT_MAX) " events." }
            }
            table #audit {
                thead { tr { th { "When" } th { "Who" } th { "What" } th { "Whom / what" } th { "Role" } } }
                tbody {
                    @for e in &a.events {
                        tr {
                            td { (when(&e.at)) }
                            td { (who(e.actor.as_ref(), e.actor_email.as_deref())) }
                            td { (e.action.as_str()) }
                            td {
                                @match (&e.user_id, &e.subject) {
                                    (Some(user), _) => (who(Some(user), e.user_email.as_deref())),
                                    // What a departed member left: its page.
                                    (None, Some(memory)) if e.action.subject_is_a_memory() => {
                                        a href=(signed.href(&format!("/memories/{memory}"))) { code { (memory) } }
                                    }
                                    (None, Some(subject)) => (subject),
                                    (None, None) => "",
                                }
                            }
                            td { (e.role.map_or("", TeamRole::as_str)) }
                        }
                    }
                }
            }
        }
        @if admin {
            h2 { "Delete the team" }
            form #delete-team method="post" action=(signed.href(&format!("/teams/{slug}/delete"))) {
                input type="hidden" name="csrf" value=(csrf);
                div class=(field_class(confirm_error.as_deref())) {
                    label for="confirm-slug" { "Type the team's slug to confirm" }
                    input #confirm-slug type="text" name="confirm" required autocomplete="off" aria-invalid=[confirm_invalid] aria-describedby=[confirm_described];
                    (field_error("confirm-slug", confirm_error.as_deref()))
                    p.hint { "Its memories become readable by nobody, exportable by its admins for 30 days, then erased." }
                }
                button.danger type="submit" { "Delete " (slug) }
            }
        }
    }
}

/// `GET /teams/{slug}`.
pub(crate) async fn show(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(slug): PagePath<String>,
) -> Response {
    team_page(&state, &signed, &slug, None).await
}

/// A team's page, with the refusal of one of its forms if there was one
/// (its status then is the refusal's).
async fn team_page(
    state: &AppState,
    signed: &Signed,
    slug: &str,
    refused: Option<Refused>,
) -> Response {
    let caller = signed.caller();
    let rid = signed.request_id.as_deref();
    let d = match state.store.get_team(&caller, slug).await {
        Ok(d) => d,
        Err(e) => return signed.error(&Failure::from_tool(e, rid)),
    };
    let admin_view = if d.team.role == TeamRole::Admin {
        let (audit, kept, members) = tokio::join!(
            state.store.team_audit(&caller, slug),
            state.store.team_steward_rules(&caller, slug),
            state.store.team_member_rules(&caller, slug)
        );
        match kept.and_then(|kept| members.map(|members| (kept, members))) {
            Ok((kept, member_rules)) => {
                let steward_rules: Vec<RuleRecord> = kept
                    .into_iter()
                    .filter(|r| r.status == RuleState::Promoted)
                    .collect();
                let both: Vec<RuleRecord> =
                    steward_rules.iter().chain(&member_rules).cloned().collect();
                let delivered = match state
                    .store
                    .delivered_rule_ids(&caller, &rules::project_scopes(&both))
                    .await
                {
                    Ok(ids) => ids,
                    Err(e) => return signed.error(&Failure::from_tool(e, rid)),
                };
                Some(AdminView {
                    audit,
                    steward_rules,
                    member_rules,
                    delivered,
                })
            }
            // No longer the team's admin since the role was read: the
            // page is a member's.
            Err(e) if matches!(e.code, ErrorCode::Forbidden | ErrorCode::NotFound) => None,
            Err(e) => return signed.error(&Failure::from_tool(e, rid)),
        }
    } else {
        None
    };
    let adds_directly = state
        .store
        .may_add_members_directly(&caller.user_id)
        .await
        .unwrap_or(false);
    let now = state.store.clock().now_ms();
    let refused = refused.as_ref();
    let body = detail_page(signed, &d, admin_view.as_ref(), adds_directly, now, refused);
    let status = refused.map_or(StatusCode::OK, |r| r.failure.status());
    signed.page(status, &d.team.name, "/teams", body)
}

/// Parse a form's values through the contract's validation.
macro_rules! parse {
    ($t:ty, $raw:expr, $rid:expr) => {
        zm_contracts::parse_input::<$t>(&$raw).map_err(|e| Failure::from_tool(e, $rid))
    };
}

async fn form_of(
    state: &AppState,
    signed: &Signed,
    headers: &HeaderMap,
    body: Body,
    back: &str,
) -> Result<Form, Response> {
    signed_form(state, signed, headers, body)
        .await
        .map_err(|f| signed.error(&f.back_to(back)))
}

/// `POST /teams`: create.
pub(crate) async fn create(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let form = match form_of(&state, &signed, &headers, body, "/teams").await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let mut raw = json!({"slug": form.get("slug").unwrap_or("").trim()});
    if let Some(n) = form.get("name").map(str::trim).filter(|n| !n.is_empty()) {
        raw["name"] = json!(n);
    }
    let result = match parse!(CreateTeamInput, raw, rid) {
        Ok(input) => state
            .store
            .create_team(&signed.caller(), input)
            .await
            .map_err(|e| Failure::from_tool(e, rid)),
        Err(f) => Err(f),
    };
    match result {
        Ok(d) => signed.see_other(&format!("/teams/{}", d.team.slug)),
        Err(f) if Refused::shows_inline(&f) => {
            let typed = vec![
                ("slug", form.get("slug").unwrap_or("").to_string()),
                ("name", form.get("name").unwrap_or("").to_string()),
            ];
            let refused = Refused {
                failure: f,
                form: "new-team",
                typed,
            };
            teams_page(&state, &signed, Some(refused)).await
        }
        Err(f) => signed.error(&f.back_to("/teams")),
    }
}

/// `POST /teams/{slug}/{invite|projects|delete}` and
/// `POST /teams/{slug}/members/{user}/{role|remove}`.
pub(crate) async fn act(
    State(state): State<AppState>,
    signed: Signed,
    PagePath((slug, action)): PagePath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let back = format!("/teams/{slug}");
    let form = match form_of(&state, &signed, &headers, body, &back).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let caller = signed.caller();
    let store = &state.store;
    let result: Result<String, Failure> = match action.as_str() {
        "invite" => {
            let raw = json!({"email": form.get("email").unwrap_or("").trim(), "role": form.get("role").unwrap_or("")});
            if form.get("how") == Some("add") {
                match parse!(AddMemberInput, raw, rid) {
                    Ok(i) => store
                        .add_team_member(&caller, &slug, i)
                        .await
                        .map(|_| back.clone())
                        .map_err(|e| Failure::from_tool(e, rid)),
                    Err(f) => Err(f),
                }
            } else {
                match parse!(InviteInput, raw, rid) {
                    Ok(i) => store
                        .invite_team_member(&caller, &slug, i)
                        .await
                        .map(|_| back.clone())
                        .map_err(|e| Failure::from_tool(e, rid)),
                    Err(f) => Err(f),
                }
            }
        }
        "projects" => {
            let project = form.get("project").unwrap_or("").trim();
            let raw = if project.starts_with("proj.") {
                json!({"scope": project})
            } else {
                json!({"project_hint": project})
            };
            match parse!(ShareProjectInput, raw, rid) {
                Ok(i) => store
                    .share_project_with_team(&caller, &slug, i)
                    .await
                    .map(|_| back.clone())
                    .map_err(|e| Failure::from_tool(e, rid)),
                Err(f) => Err(f),
            }
        }
        "delete" => {
            if form.get("confirm").map(str::trim) == Some(slug.as_str()) {
                store
                    .delete_team(&caller, &slug)
                    .await
                    .map(|_| "/teams".to_string())
                    .map_err(|e| Failure::from_tool(e, rid))
            } else {
                Err(Failure::from_tool(
                    zm_contracts::ToolError::validation("confirm: type the team's slug to delete it")
                        .with_details(json!({"fields": [{"path": "confirm", "reason": "type the team's slug to delete it"}]})),
                    rid,
                ))
            }
        }
        _ => Err(Failure::from_tool(
            zm_contracts::ToolError::not_found("No such action."),
            rid,
        )),
    };
    let (name, typed) = match action.as_str() {
        "invite" => (
            "invite",
            vec![
                ("email", form.get("email").unwrap_or("").to_string()),
                ("role", form.get("role").unwrap_or("").to_string()),
            ],
        ),
        "projects" => (
            "share-project",
            vec![("project", form.get("project").unwrap_or("").to_string())],
        ),
        _ => ("delete-team", vec![]),
    };
    refused_or_back(&state, &signed, &slug, result, name, typed).await
}

/// Where a team page's form leads: to `Ok`'s page, or back to the team's
/// page with the refusal beside form `name` (what the page cannot show
/// there gets a page of its own).
async fn refused_or_back(
    state: &AppState,
    signed: &Signed,
    slug: &str,
    result: Result<String, Failure>,
    name: &'static str,
    typed: Vec<(&'static str, String)>,
) -> Response {
    match result {
        Ok(to) => signed.see_other(&to),
        Err(failure) if Refused::shows_inline(&failure) => {
            let refused = Refused {
                failure,
                form: name,
                typed,
            };
            team_page(state, signed, slug, Some(refused)).await
        }
        Err(f) => signed.error(&f.back_to(&format!("/teams/{slug}"))),
    }
}

/// `POST /teams/{slug}/members/{user}/{role|remove}`.
pub(crate) async fn member(
    State(state): State<AppState>,
    signed: Signed,
    PagePath((slug, user, action)): PagePath<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let back = format!("/teams/{slug}");
    let form = match form_of(&state, &signed, &headers, body, &back).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let caller = signed.caller();
    let result = match action.as_str() {
        "role" => match parse!(
            SetRoleInput,
            json!({"role": form.get("role").unwrap_or("")}),
            rid
        ) {
            Ok(i) => state
                .store
                .set_team_role(&caller, &slug, &user, i)
                .await
                .map(|_| back.clone())
                .map_err(|e| Failure::from_tool(e, rid)),
            Err(f) => Err(f),
        },
        "remove" => state
            .store
            .remove_team_member(&caller, &slug, &user)
            .await
            .map(|_| {
                if user == caller.user_id {
                    "/teams".to_string()
                } else {
                    back.clone()
                }
            })
            .map_err(|e| Failure::from_tool(e, rid)),
        _ => Err(Failure::from_tool(
            zm_contracts::ToolError::not_found("No such action."),
            rid,
        )),
    };
    let name = if action == "remove" && user == caller.user_id {
        "leave"
    } else {
        "members"
    };
    refused_or_back(&state, &signed, &slug, result, name, vec![]).await
}

/// `POST /teams/{slug}/invitations/{id}/withdraw` (admins).
pub(crate) async fn withdraw(
    State(state): State<AppState>,
    signed: Signed,
    PagePath((slug, id)): PagePath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    let back = format!("/teams/{slug}");
    if let Err(r) = form_of(&state, &signed, &headers, body, &back).await {
        return r;
    }
    let Ok(id) = InvitationId::parse(&id) else {
        return signed.error(&Failure::from_tool(
            zm_contracts::ToolError::not_found("Invitation not found."),
            rid,
        ));
    };
    let result = state
        .store
        .withdraw_invitation(&signed.caller(), &slug, &id)
        .await
        .map(|_| back)
        .map_err(|e| Failure::from_tool(e, rid));
    refused_or_back(&state, &signed, &slug, result, "invitations", vec![]).await
}

/// `POST /teams/invitations/{id}/accept`.
pub(crate) async fn accept(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(id): PagePath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.as_deref();
    if let Err(r) = form_of(&state, &signed, &headers, body, "/teams").await {
        return r;
    }
    let Ok(id) = InvitationId::parse(&id) else {
        return signed.error(&Failure::from_tool(
            zm_contracts::ToolError::not_found("Invitation not found."),
            rid,
        ));
    };
    match state.store.accept_invitation(&signed.caller(), &id).await {
        Ok(d) => signed.see_other(&format!("/teams/{}", d.team.slug)),
        Err(e) => {
            let failure = Failure::from_tool(e, rid).back_to("/teams");
            if !Refused::shows_inline(&failure) {
                return signed.error(&failure);
            }
            let refused = Refused {
                failure,
                form: "my-invitations",
                typed: vec![],
            };
            teams_page(&state, &signed, Some(refused)).await
        }
    }
}
