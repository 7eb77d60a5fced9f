//! Teams: the administration API's inputs, outputs and routes.
//!
//! A team has a slug, members with a role (`admin`, `writer`, `reader`)
//! and owns the scope `team.<slug>`; its own projects are
//! `team.<slug>.<project>`, and a member's project can be shared with it.
//! These shapes are served over REST (`/api/teams…`, `/api/invitations…`);
//! [`ADMIN_ROUTES`] lists every route once, and the OpenAPI document and the
//! contract snapshot are generated from it.

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ErrorCode;
use crate::ids::{InvitationId, UserId};
use crate::validate::{output_schema_of, schema_of};

/// Pattern of a team slug: a lowercase letter, then 1–39 of `[a-z0-9_]`.
pub const TEAM_SLUG_PATTERN: &str = r"^[a-z][a-z0-9_]{1,39}$";

/// How long a deleted team's memories stay exportable by its admins
/// before they are erased.
pub const TEAM_RETENTION_DAYS: i64 = 30;

/// How long an invitation stays open unless the admin says otherwise.
pub const INVITATION_DEFAULT_DAYS: u32 = 7;

/// The longest an invitation may stay open.
pub const INVITATION_MAX_DAYS: u32 = 30;

crate::enums::wire_enum! {
    /// A member's role in a team: `admin` manages members and may delete
    /// the team; `writer` remembers, shares and moves into the team's
    /// scopes; `reader` recalls only.
    TeamRole {
        Admin = "admin",
        Writer = "writer",
        Reader = "reader",
    }
}

impl TeamRole {
    /// May this role write into the team's scopes?
    pub const fn can_write(self) -> bool {
        matches!(self, TeamRole::Admin | TeamRole::Writer)
    }
    /// Rank for comparisons: reader < writer < admin.
    pub const fn rank(self) -> u8 {
        match self {
            TeamRole::Reader => 0,
            TeamRole::Writer => 1,
            TeamRole::Admin => 2,
        }
    }
}

crate::enums::wire_enum! {
    /// What a team audit event records. The `steward_*` actions are a team
    /// admin's changes to what departed members left to the team's steward
    /// (a rule revoked; a memory forgotten, closed or restored), and
    /// `member_rule_revoked` an admin's revocation of a rule a current
    /// member promoted for the team, each with the memory as the event's
    /// subject.
    TeamAction {
        TeamCreated = "team_created",
        TeamDeleted = "team_deleted",
        MemberAdded = "member_added",
        RoleChanged = "role_changed",
        MemberRemoved = "member_removed",
        InvitationCreated = "invitation_created",
        InvitationAccepted = "invitation_accepted",
        InvitationWithdrawn = "invitation_withdrawn",
        ProjectShared = "project_shared",
        ProjectUnshared = "project_unshared",
        StewardRuleRevoked = "steward_rule_revoked",
        StewardMemoryForgotten = "steward_memory_forgotten",
        StewardMemoryClosed = "steward_memory_closed",
        StewardMemoryRestored = "steward_memory_restored",
        MemberRuleRevoked = "member_rule_revoked",
    }
}

impl TeamAction {
    /// An admin's change to what the team's steward holds.
    pub fn is_for_steward(self) -> bool {
        matches!(
            self,
            TeamAction::StewardRuleRevoked
                | TeamAction::StewardMemoryForgotten
                | TeamAction::StewardMemoryClosed
                | TeamAction::StewardMemoryRestored
        )
    }

    /// Is the event's subject a memory's id? An admin's change to what
    /// the steward holds, or to a member's rule for the team.
    pub fn subject_is_a_memory(self) -> bool {
        self.is_for_steward() || self == TeamAction::MemberRuleRevoked
    }
}

crate::enums::wire_enum! {
    /// Where an invitation stands.
    InvitationStatus {
        Pending = "pending",
        Accepted = "accepted",
        Expired = "expired",
    }
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "garde's custom-validator signature"
)]
fn slug_not_user_label(value: &str, _: &()) -> garde::Result {
    if value.starts_with("usr_") {
        Err(garde::Error::new(
            "must not start with usr_ (that prefix names users' scopes)",
        ))
    } else {
        Ok(())
    }
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "garde's custom-validator signature"
)]
fn looks_like_email(value: &str, _: &()) -> garde::Result {
    let v = value.trim();
    match v.split_once('@') {
        Some((local, domain)) if !local.is_empty() && !domain.is_empty() && !v.contains(' ') => {
            Ok(())
        }
        _ => Err(garde::Error::new("must be an email address")),
    }
}

/// Body of `POST /api/teams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct CreateTeamInput {
    /// The team's slug: its scope is `team.<slug>`. A lowercase letter,
    /// then 1–39 of `[a-z0-9_]`; not `usr_…`.
    #[garde(pattern(r"^[a-z][a-z0-9_]{1,39}$"), custom(slug_not_user_label))]
    pub slug: String,
    /// A display name (defaults to the slug).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = 100))]
    pub name: Option<String>,
}

/// Body of `POST /api/teams/{team}/members`: add an existing user directly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct AddMemberInput {
    /// The user's sign-in email.
    #[garde(length(chars, min = 3, max = 254), custom(looks_like_email))]
    pub email: String,
    #[garde(skip)]
    pub role: TeamRole,
}

/// Body of `PATCH /api/teams/{team}/members/{user_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct SetRoleInput {
    #[garde(skip)]
    pub role: TeamRole,
}

/// Body of `POST /api/teams/{team}/invitations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct InviteInput {
    /// Who may accept: the invitee signs in with this email.
    #[garde(length(chars, min = 3, max = 254), custom(looks_like_email))]
    pub email: String,
    #[garde(skip)]
    pub role: TeamRole,
    /// Days until the invitation expires (default 7, at most 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(range(min = 1, max = INVITATION_MAX_DAYS))]
    pub expires_in_days: Option<u32>,
}

/// Body of `POST /api/teams/{team}/projects`: share one of your projects
/// with the team. Give `scope` or `project_hint`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields)]
pub struct ShareProjectInput {
    /// The project's scope (`proj.…`), which you administer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = 256))]
    pub scope: Option<String>,
    /// Or the project's hint (repository root path, git remote URL or
    /// project name), resolved as `remember` resolves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(length(chars, min = 1, max = 2048))]
    pub project_hint: Option<String>,
}

/// A team as its members see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Team {
    pub slug: String,
    pub name: String,
    /// The team's scope, `team.<slug>`.
    pub scope: String,
    /// Your role in the team.
    pub role: TeamRole,
    /// How many members it has.
    pub members: u32,
    /// RFC 3339.
    pub created_at: String,
}

/// `GET /api/teams`: the teams you are a member of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamList {
    pub teams: Vec<Team>,
}

/// A member of a team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamMember {
    pub user_id: UserId,
    pub email: String,
    pub role: TeamRole,
    /// RFC 3339: when they joined.
    pub added_at: String,
}

/// A scope the team's members reach through the team, besides its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamProject {
    pub scope: String,
    /// True for the team's own projects (`team.<slug>.<project>`), false
    /// for a member's project shared with it.
    pub owned: bool,
    /// Who created or shared it, when known.
    pub added_by: Option<UserId>,
    /// RFC 3339.
    pub added_at: String,
}

/// An invitation to join a team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Invitation {
    /// The invitation's id (`inv_…`): the invitee accepts it with
    /// `POST /api/invitations/{id}/accept`.
    pub id: InvitationId,
    /// The team's slug.
    pub team: String,
    pub email: String,
    pub role: TeamRole,
    pub status: InvitationStatus,
    /// RFC 3339.
    pub expires_at: String,
    /// RFC 3339.
    pub created_at: String,
}

/// `GET /api/invitations`: the open invitations addressed to your email.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InvitationList {
    pub invitations: Vec<Invitation>,
}

/// `GET /api/teams/{team}`: the team, its members and projects; admins
/// also see its invitations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamDetail {
    pub team: Team,
    pub members: Vec<TeamMember>,
    pub projects: Vec<TeamProject>,
    /// Invitations not yet accepted (empty unless you are an admin).
    pub invitations: Vec<Invitation>,
}

/// `DELETE /api/teams/{team}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamDeleted {
    pub slug: String,
    /// How many memories the team's scopes held: readable by nobody from
    /// now on, exportable by the admins of this moment until
    /// `purge_after`, then erased.
    pub memories: u64,
    /// RFC 3339.
    pub deleted_at: String,
    /// RFC 3339.
    pub purge_after: String,
}

/// `DELETE /api/teams/{team}/members/{user_id}`,
/// `DELETE /api/teams/{team}/projects/{scope}` and
/// `DELETE /api/teams/{team}/invitations/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Removed {
    pub removed: bool,
}

/// One entry of a team's audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamEvent {
    /// RFC 3339.
    pub at: String,
    /// Who did it.
    pub actor: Option<UserId>,
    /// The actor's email now (`null` when there is no actor, or their
    /// account was deleted).
    pub actor_email: Option<String>,
    pub action: TeamAction,
    /// The member concerned, when one is.
    pub user_id: Option<UserId>,
    /// That member's email now (`null` when there is no member concerned,
    /// or their account was deleted).
    pub user_email: Option<String>,
    /// The email, scope, invitation or memory concerned, when one is.
    pub subject: Option<String>,
    /// The role given, when one was.
    pub role: Option<TeamRole>,
}

/// The most events `GET /api/teams/{team}/audit` lists: the newest.
pub const TEAM_AUDIT_MAX: usize = 1000;

/// `GET /api/teams/{team}/audit`: newest first, [`TEAM_AUDIT_MAX`] at most.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamAudit {
    pub events: Vec<TeamEvent>,
}

/// `GET /api/teams/{team}/export`: the team's memories, for its admins —
/// also for 30 days after the team was deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TeamExport {
    pub team: String,
    pub items: Vec<crate::shapes::Memory>,
}

/// A schema's name and the function that renders it.
pub type NamedSchema = (&'static str, fn() -> Value);

/// What a route needs of the caller's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteAccess {
    /// Any token (`mcp:read`).
    Read,
    /// A token that may write (`mcp:write`).
    Write,
}

/// One administration route: the single description the router, the
/// OpenAPI document and the contract snapshot share.
#[derive(Debug, Clone, Copy)]
pub struct AdminRoute {
    /// `GET`, `POST`, `PATCH` or `DELETE`.
    pub method: &'static str,
    /// The path with `{param}` placeholders, as axum and OpenAPI write it.
    pub path: &'static str,
    pub operation_id: &'static str,
    pub summary: &'static str,
    pub access: RouteAccess,
    /// The request body's schema name and schema, if it takes one.
    pub input: Option<NamedSchema>,
    /// The response's schema name and schema.
    pub output: NamedSchema,
    /// Status of a success.
    pub status: u16,
    /// The error codes it can answer besides `unauthorized`,
    /// `rate_limited` and `internal`, which every route can.
    pub errors: &'static [ErrorCode],
}

impl AdminRoute {
    /// Every error code the route can answer besides `unauthorized`,
    /// `rate_limited` and `internal`: its own [`AdminRoute::errors`], then
    /// `validation_failed` (an encoded NUL in the address, on every route
    /// behind a token) and, for a change, `forbidden` (a read-only token,
    /// an MCP app's sign-in) and `conflict` (PostgreSQL's contention
    /// outlasting its reruns). What OpenAPI and CONTRACT.md list (the
    /// contract document keeps [`AdminRoute::errors`], its own field).
    pub fn answers(&self) -> Vec<ErrorCode> {
        let mut codes = self.errors.to_vec();
        let mut extra = vec![ValidationFailed];
        if self.access == RouteAccess::Write {
            extra.extend([Forbidden, Conflict]);
        }
        for code in extra {
            if !codes.contains(&code) {
                codes.push(code);
            }
        }
        codes
    }
}

use ErrorCode::{Conflict, Forbidden, NotFound, ValidationFailed};

macro_rules! schema {
    (in $t:ty) => {
        Some((stringify!($t), schema_of::<$t> as fn() -> Value))
    };
    (out $t:ty) => {
        (stringify!($t), output_schema_of::<$t> as fn() -> Value)
    };
}

/// Every team route, once.
pub const ADMIN_ROUTES: &[AdminRoute] = &[
    AdminRoute {
        method: "POST",
        path: "/api/teams",
        operation_id: "create_team",
        summary: "Create a team; you become its admin",
        access: RouteAccess::Write,
        input: schema!(in CreateTeamInput),
        output: schema!(out TeamDetail),
        status: 201,
        errors: &[ValidationFailed, Forbidden, Conflict],
    },
    AdminRoute {
        method: "GET",
        path: "/api/teams",
        operation_id: "list_teams",
        summary: "The teams you are a member of",
        access: RouteAccess::Read,
        input: None,
        output: schema!(out TeamList),
        status: 200,
        errors: &[],
    },
    AdminRoute {
        method: "GET",
        path: "/api/teams/{team}",
        operation_id: "get_team",
        summary: "A team, its members and projects (admins: its invitations)",
        access: RouteAccess::Read,
        input: None,
        output: schema!(out TeamDetail),
        status: 200,
        errors: &[ValidationFailed, NotFound],
    },
    AdminRoute {
        method: "DELETE",
        path: "/api/teams/{team}",
        operation_id: "delete_team",
        summary: "Delete a team (admins): its memories become readable by nobody, exportable by its admins for 30 days, then erased",
        access: RouteAccess::Write,
        input: None,
        output: schema!(out TeamDeleted),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound],
    },
    AdminRoute {
        method: "POST",
        path: "/api/teams/{team}/members",
        operation_id: "add_team_member",
        summary: "Add an existing user to the team, or change their role (an admin who is the server's owner; other admins invite)",
        access: RouteAccess::Write,
        input: schema!(in AddMemberInput),
        output: schema!(out TeamMember),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound, Conflict],
    },
    AdminRoute {
        method: "PATCH",
        path: "/api/teams/{team}/members/{user_id}",
        operation_id: "set_team_role",
        summary: "Change a member's role (admins); takes effect on the next request",
        access: RouteAccess::Write,
        input: schema!(in SetRoleInput),
        output: schema!(out TeamMember),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound, Conflict],
    },
    AdminRoute {
        method: "DELETE",
        path: "/api/teams/{team}/members/{user_id}",
        operation_id: "remove_team_member",
        summary: "Remove a member (admins), or leave the team yourself; takes effect on the next request",
        access: RouteAccess::Write,
        input: None,
        output: schema!(out Removed),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound, Conflict],
    },
    AdminRoute {
        method: "POST",
        path: "/api/teams/{team}/invitations",
        operation_id: "invite_team_member",
        summary: "Invite an email to the team (admins); the invitee accepts once signed in",
        access: RouteAccess::Write,
        input: schema!(in InviteInput),
        output: schema!(out Invitation),
        status: 201,
        errors: &[ValidationFailed, Forbidden, NotFound],
    },
    AdminRoute {
        method: "DELETE",
        path: "/api/teams/{team}/invitations/{id}",
        operation_id: "withdraw_invitation",
        summary: "Withdraw an open invitation (admins); one accepted is a conflict, one expired is withdrawn too (removed: true), one already withdrawn answers removed: false",
        access: RouteAccess::Write,
        input: None,
        output: schema!(out Removed),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound, Conflict],
    },
    AdminRoute {
        method: "GET",
        path: "/api/invitations",
        operation_id: "list_invitations",
        summary: "Open invitations addressed to your email",
        access: RouteAccess::Read,
        input: None,
        output: schema!(out InvitationList),
        status: 200,
        errors: &[],
    },
    AdminRoute {
        method: "POST",
        path: "/api/invitations/{id}/accept",
        operation_id: "accept_invitation",
        summary: "Accept an invitation addressed to your email",
        access: RouteAccess::Write,
        input: None,
        output: schema!(out TeamDetail),
        status: 200,
        errors: &[ValidationFailed, NotFound, Conflict],
    },
    AdminRoute {
        method: "POST",
        path: "/api/teams/{team}/projects",
        operation_id: "share_project_with_team",
        summary: "Share one of your projects with the team (project admin and team writer)",
        access: RouteAccess::Write,
        input: schema!(in ShareProjectInput),
        output: schema!(out TeamProject),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound],
    },
    AdminRoute {
        method: "DELETE",
        path: "/api/teams/{team}/projects/{scope}",
        operation_id: "unshare_project_from_team",
        summary: "Stop sharing a project with the team (its sharer, its admin or a team admin)",
        access: RouteAccess::Write,
        input: None,
        output: schema!(out Removed),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound],
    },
    AdminRoute {
        method: "GET",
        path: "/api/teams/{team}/audit",
        operation_id: "team_audit",
        summary: "The team's membership changes, newest first, the newest 1000 (admins)",
        access: RouteAccess::Read,
        input: None,
        output: schema!(out TeamAudit),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound],
    },
    AdminRoute {
        method: "GET",
        path: "/api/teams/{team}/export",
        operation_id: "export_team",
        summary: "Every memory of the team's scopes (admins; for 30 days after deletion, its admins of that moment)",
        access: RouteAccess::Read,
        input: None,
        output: schema!(out TeamExport),
        status: 200,
        errors: &[ValidationFailed, Forbidden, NotFound],
    },
];

/// The pattern a path parameter of an admin route (`{team}`, `{user_id}`,
/// `{id}`, `{scope}`) must match; `None` for a name no route uses.
pub fn admin_path_pattern(name: &str) -> Option<String> {
    Some(match name {
        "team" => TEAM_SLUG_PATTERN.to_string(),
        "user_id" => crate::IdKind::User.pattern(),
        "id" => crate::IdKind::Invitation.pattern(),
        "scope" => crate::scope::SHAREABLE_PATTERN.to_string(),
        _ => return None,
    })
}

/// What a path parameter of an admin route holds, for a refusal.
fn admin_path_meaning(name: &str) -> &'static str {
    match name {
        "team" => "a team slug: a lowercase letter, then 1 to 39 of [a-z0-9_]",
        "user_id" => "a user id (usr_…)",
        "id" => "an invitation id (inv_…)",
        "scope" => {
            "a project or team scope path: proj.… or team.… with at least two labels of [a-z0-9_]"
        }
        _ => "a value of the advertised pattern",
    }
}

/// The path parameters the admin routes use, each once, from their paths.
fn admin_path_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = ADMIN_ROUTES
        .iter()
        .flat_map(|r| r.path.split('/'))
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

static ADMIN_PATH_PATTERNS: std::sync::LazyLock<Vec<(&'static str, regex::Regex)>> =
    std::sync::LazyLock::new(|| {
        admin_path_names()
            .into_iter()
            .map(|name| {
                let pattern =
                    admin_path_pattern(name).expect("every admin path name has a pattern");
                (
                    name,
                    regex::Regex::new(&pattern).expect("admin path patterns compile"),
                )
            })
            .collect()
    });

/// Check one path parameter of an admin route against the pattern the
/// OpenAPI document advertises for it: a value that cannot name anything
/// is `validation_failed` naming the parameter, not a `not_found`.
pub fn check_admin_path_param(name: &str, value: &str) -> Result<(), crate::ToolError> {
    let Some((_, re)) = ADMIN_PATH_PATTERNS.iter().find(|(n, _)| *n == name) else {
        return Err(crate::ToolError::internal());
    };
    if re.is_match(value) {
        Ok(())
    } else {
        Err(crate::validate::field_error(
            name,
            format!("must be {}", admin_path_meaning(name)),
        ))
    }
}

/// The administration API as the contract document lists it.
pub fn admin_api_document() -> Value {
    let routes: Vec<Value> = ADMIN_ROUTES
        .iter()
        .map(|r| {
            serde_json::json!({
                "method": r.method,
                "path": r.path,
                "operation_id": r.operation_id,
                "summary": r.summary,
                "access": r.access,
                "status": r.status,
                "errors": r.errors.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                "input_schema": r.input.map(|(_, s)| s()),
                "output_schema": (r.output.1)(),
            })
        })
        .collect();
    Value::Array(routes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::parse_input;
    use serde_json::json;

    /// Every path parameter of an admin route has a pattern.
    #[test]
    fn path_parameters_have_patterns() {
        for name in admin_path_names() {
            assert!(
                admin_path_pattern(name).is_some(),
                "{{{name}}} has no pattern"
            );
        }
    }

    #[test]
    fn path_parameters_are_checked_against_their_patterns() {
        for (name, ok, bad) in [
            ("team", "acme", "Acme"),
            ("team", "platform_team", "a"),
            ("scope", "proj.alice.web", "user.alice"),
            ("scope", "team.acme", "proj"),
            ("user_id", "usr_0000000000000000.0000000000", "alice"),
            (
                "id",
                "inv_0000000000000000.0000000000",
                "usr_0000000000000000.0000000000",
            ),
        ] {
            check_admin_path_param(name, ok).expect(ok);
            let e = check_admin_path_param(name, bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::ValidationFailed, "{name}={bad}");
            assert!(e.message.contains(name), "{}", e.message);
        }
        // A name no route uses is the server's mistake, not the caller's.
        assert_eq!(
            check_admin_path_param("nope", "x").unwrap_err().code,
            ErrorCode::Internal
        );
    }

    #[test]
    fn slugs_are_checked() {
        for ok in ["acme", "a1", "platform_team"] {
            parse_input::<CreateTeamInput>(&json!({"slug": ok})).expect(ok);
        }
        for bad in ["A", "a", "1abc", "usr_x", "a-b", "a.b", ""] {
            let e = parse_input::<CreateTeamInput>(&json!({"slug": bad})).unwrap_err();
            assert_eq!(e.code, ErrorCode::ValidationFailed, "{bad}");
        }
    }

    #[test]
    fn roles_and_emails_are_checked() {
        parse_input::<AddMemberInput>(&json!({"email": "b@example.com", "role": "writer"}))
            .expect("valid");
        for bad in [
            json!({"email": "nobody", "role": "writer"}),
            json!({"email": "b@example.com", "role": "owner"}),
            json!({"email": "b@example.com"}),
            json!({"email": "b@example.com", "role": "reader", "extra": 1}),
        ] {
            let e = parse_input::<AddMemberInput>(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::ValidationFailed, "{bad}");
        }
        let e = parse_input::<InviteInput>(
            &json!({"email": "b@example.com", "role": "reader", "expires_in_days": 31}),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationFailed);
    }

    #[test]
    fn every_route_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for r in ADMIN_ROUTES {
            assert!(seen.insert((r.method, r.path)), "{} {}", r.method, r.path);
            assert!(seen.insert(("op", r.operation_id)), "{}", r.operation_id);
            assert_eq!(
                r.input.is_some(),
                matches!(r.method, "POST" | "PATCH") && !r.path.ends_with("/accept"),
                "{} {}",
                r.method,
                r.path
            );
        }
    }

    #[test]
    fn role_rank_orders_roles() {
        assert!(TeamRole::Admin.rank() > TeamRole::Writer.rank());
        assert!(TeamRole::Writer.rank() > TeamRole::Reader.rank());
        assert!(TeamRole::Writer.can_write() && !TeamRole::Reader.can_write());
    }
}
