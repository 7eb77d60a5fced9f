//! Teams (migration 0008): members and roles, invitations, shared
//! projects, the team audit log, deletion with a 30-day export window.
//!
//! A team owns the scope `team.<slug>`; its members are that scope's
//! `scope_members` rows, so [`push_member_scopes`] — the one list of the
//! scopes a user reaches — covers team memories, the team's own projects
//! (`team.<slug>.<project>`) and members' projects shared with it. Roles are
//! read from the database on every call: removing a member or lowering a
//! role holds from the next request on, for open MCP sessions and issued
//! tokens alike.
//!
//! Every team has a steward: a users row nobody can sign in as. A member
//! who leaves hands their memories in scopes they no longer reach to the
//! steward (the team's own scopes) or to the project's owner (a shared
//! project); a deleted team hands all its memories to the steward, made
//! private, until they are erased after [`TEAM_RETENTION_DAYS`]. Nobody
//! signs in as a steward: its team's admins act for it where someone must
//! (revoking a rule it holds; forgetting, closing or restoring a memory it
//! holds: `Store::act_for_steward`).

use sqlx::any::AnyRow;
use zm_contracts::teams::{
    AddMemberInput, CreateTeamInput, INVITATION_DEFAULT_DAYS, Invitation, InvitationList,
    InvitationStatus, InviteInput, Removed, SetRoleInput, ShareProjectInput, TEAM_RETENTION_DAYS,
    Team, TeamAction, TeamAudit, TeamDeleted, TeamDetail, TeamEvent, TeamExport, TeamList,
    TeamMember, TeamProject,
};
use zm_contracts::{IdKind, InvitationId, TeamRole, ToolError, UserId, scope};

use crate::clock::rfc3339;
use crate::db::DbResult;
use crate::rows::{FromAnyRow, col, enum_col, flag_col, opt_id_col};
use crate::scopes::Role;
use crate::sql::{Arg, Sql};
use crate::store::{Caller, Store};

/// How many memories a page of a team's export holds (the HTTP route
/// streams the pages, so the export is never held whole in memory).
pub const TEAM_EXPORT_PAGE: u32 = 1000;

/// Where a page of a team's export ends: the next page starts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeamExportPosition {
    created_at: i64,
    seq: i64,
}

/// One page of a team's export ([`Store::export_team_page`]).
#[derive(Debug)]
pub struct TeamExportPage {
    /// The team's slug.
    pub team: String,
    pub items: Vec<zm_contracts::Memory>,
    /// Where the next page starts; `None` on the last.
    pub next: Option<TeamExportPosition>,
}

/// What a team's export holds: a live team's shared memories in its own
/// scopes, or a deleted team's steward's memories.
enum ExportSet {
    Scopes(Vec<String>),
    Steward(String),
}

impl ExportSet {
    /// The condition on `m` of a memory the export holds.
    fn push(&self, sql: &mut Sql) {
        match self {
            ExportSet::Scopes(scopes) => {
                sql.push("m.visibility = 'shared' AND m.scope IN ");
                sql.bind_list(scopes.iter().cloned());
            }
            ExportSet::Steward(steward) => {
                sql.push("m.owner_id = ").bind_str(steward);
            }
        }
    }
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// What an invitation addressed to an erased account says instead of its
/// address (`.invalid` is reserved: no account signs in with it).
pub const ERASED_ADDRESS: &str = "erased-account@address.invalid";

/// The scopes `user_id` reaches as a member, as a subquery: scopes they
/// are a member of, and the scopes their teams grant (the team's own
/// projects and projects shared with it).
pub(crate) fn push_member_scopes(sql: &mut Sql, user_id: &str) {
    sql.push("SELECT scope FROM scope_members WHERE user_id = ")
        .bind_str(user_id)
        .push(" UNION ALL SELECT tp.scope FROM team_projects tp JOIN scope_members tsm ON tsm.scope = tp.team_scope WHERE tsm.user_id = ")
        .bind_str(user_id);
}

/// Memories of a deleted team's steward erased per transaction
/// ([`Store::purge_deleted_teams`]).
pub const PURGE_CHUNK: i64 = 500;

impl Store {
    /// The scopes whose shared memories `user_id` reads now: the
    /// [`push_member_scopes`] list, for a filter applied outside SQL (the
    /// dense leg's index).
    pub(crate) async fn member_scopes(&self, user_id: &str) -> Result<Vec<String>, ToolError> {
        let mut sql = Sql::new("");
        push_member_scopes(&mut sql, user_id);
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("member scopes")?;
        rows.iter().map(|r| col(r, "scope")).collect()
    }
}

/// The error a non-member gets for a team: the same as for a team that
/// does not exist.
fn no_team(slug: &str) -> ToolError {
    ToolError::not_found(format!("Team {slug} not found."))
}

fn not_admin() -> ToolError {
    ToolError::forbidden("Only the team's admins can do this (your role is not admin).")
}

/// A team row.
struct TeamRow {
    id: String,
    slug: String,
    name: String,
    scope: String,
    created_at: i64,
    deleted_at: Option<i64>,
    purge_after: Option<i64>,
    steward_id: Option<String>,
}

impl FromAnyRow for TeamRow {
    fn from_row(r: &AnyRow) -> Result<Self, ToolError> {
        Ok(TeamRow {
            id: col(r, "id")?,
            slug: col(r, "slug")?,
            name: col(r, "name")?,
            scope: col(r, "scope")?,
            created_at: col(r, "created_at")?,
            deleted_at: col(r, "deleted_at")?,
            purge_after: col(r, "purge_after")?,
            steward_id: col(r, "steward_id")?,
        })
    }
}

struct MemberRow {
    user_id: UserId,
    email: String,
    role: Role,
    added_at: i64,
}

impl FromAnyRow for MemberRow {
    fn from_row(r: &AnyRow) -> Result<Self, ToolError> {
        Ok(MemberRow {
            user_id: UserId::from_trusted(col::<String>(r, "user_id")?),
            email: col(r, "email")?,
            role: enum_col(r, "role")?,
            added_at: col(r, "created_at")?,
        })
    }
}

impl MemberRow {
    fn into_member(self) -> TeamMember {
        TeamMember {
            user_id: self.user_id,
            email: self.email,
            role: self.role,
            added_at: rfc3339(self.added_at),
        }
    }
}

struct InvitationRow {
    id: String,
    email: String,
    role: Role,
    created_at: i64,
    expires_at: i64,
    accepted_at: Option<i64>,
}

impl FromAnyRow for InvitationRow {
    fn from_row(r: &AnyRow) -> Result<Self, ToolError> {
        Ok(InvitationRow {
            id: col(r, "id")?,
            email: col(r, "email")?,
            role: enum_col(r, "role")?,
            created_at: col(r, "created_at")?,
            expires_at: col(r, "expires_at")?,
            accepted_at: col(r, "accepted_at")?,
        })
    }
}

impl InvitationRow {
    fn into_invitation(self, team: &str, now: i64) -> Invitation {
        let status = if self.accepted_at.is_some() {
            InvitationStatus::Accepted
        } else if self.expires_at <= now {
            InvitationStatus::Expired
        } else {
            InvitationStatus::Pending
        };
        Invitation {
            id: InvitationId::from_trusted(self.id),
            team: team.to_string(),
            email: self.email,
            role: self.role,
            status,
            expires_at: rfc3339(self.expires_at),
            created_at: rfc3339(self.created_at),
        }
    }
}

/// One audit event to record.
struct Event<'a> {
    action: TeamAction,
    user: Option<&'a str>,
    subject: Option<&'a str>,
    role: Option<Role>,
}

impl Event<'_> {
    fn new(action: TeamAction) -> Self {
        Event {
            action,
            user: None,
            subject: None,
            role: None,
        }
    }
}

/// What a hand-over moves, as a statement template (`{from}`, `{path}`):
/// the giver's shared memories in the scope. Every statement of it, and
/// the revocation of rules delivered elsewhere before it, names them so.
const GOING: &str =
    "SELECT id FROM memories WHERE owner_id = {from} AND scope = {path} AND visibility = 'shared'";

/// Do the same people govern rules delivered in `applies` as in `path`:
/// the same scope, or two scopes of one team (its admins revoke what its
/// steward holds in either)?
pub(crate) fn same_governance(applies: &str, path: &str) -> bool {
    applies == path || team_slug_of(applies).is_some_and(|t| team_slug_of(path) == Some(t))
}

/// The team slug a scope path names, if it is a team's (`team.<slug>` or
/// `team.<slug>.…`) and not a legacy owner-namespaced one.
pub(crate) fn team_slug_of(path: &str) -> Option<&str> {
    let mut labels = path.split('.');
    if labels.next() != Some("team") {
        return None;
    }
    labels
        .next()
        .filter(|l| !l.starts_with(&format!("{}_", IdKind::User.prefix())))
}

/// Who may add an existing account to a team directly, as its admin: only
/// the server's owner, who runs the server for its users. A member gets
/// the team's rules in every briefing and in the instructions their agents
/// read at connect, so anyone else invites and joining takes the member's
/// consent (an invitation they accept).
async fn adds_members_directly<'e, E>(exec: E, user_id: &str) -> Result<bool, ToolError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let owner: Option<i64> = sqlx::query_scalar("SELECT is_owner FROM users WHERE id = $1")
        .bind(user_id)
        .fetch_optional(exec)
        .await
        .db("adds members directly")?;
    Ok(owner == Some(1))
}

/// Where a caller stands towards a team's steward that holds a row
/// ([`Store::act_for_steward`]).
enum StewardStanding {
    /// Not a steward's row of a live team the caller is a member of.
    None,
    /// A member of the steward's team below admin (team slug, role).
    Member(String, Role),
    /// An admin of the steward's team: acts for the steward.
    Admin(StewardTeam),
}

/// The team whose steward an admin acts for ([`Store::act_for_steward`]):
/// what the change names in its audit entry and the team's audit log.
#[derive(Debug, Clone)]
pub(crate) struct StewardTeam {
    pub(crate) id: String,
    pub(crate) slug: String,
}

/// Why a team row is read: to look, or to change the team (its members,
/// roles, grants, invitations, its existence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum For {
    Reading,
    /// On PostgreSQL the row is locked (`FOR NO KEY UPDATE`: the change's
    /// own audit rows check their foreign key on it) until the change
    /// commits, so changes to one team take turns: each reads the members
    /// and roles the one before it left (two admins demoting each other
    /// would otherwise each count two admins and leave none). SQLite's
    /// write transactions already take turns.
    Change,
}

impl Store {
    async fn team_row(
        &self,
        conn: &mut sqlx::AnyConnection,
        slug: &str,
        purpose: For,
    ) -> Result<Option<TeamRow>, ToolError> {
        let mut sql = Sql::new(
            "SELECT id, slug, name, scope, created_at, deleted_at, purge_after, steward_id FROM teams WHERE slug = ",
        );
        sql.bind_str(slug);
        if purpose == For::Change {
            sql.push(self.backend.hold_rows());
        }
        let row = sql.query().fetch_optional(&mut *conn).await.db("team")?;
        row.as_ref().map(TeamRow::from_row).transpose()
    }

    /// A live team and the caller's role in it; a deleted team or one the
    /// caller is not a member of reads as not found.
    ///
    /// For a change, membership is read first without taking turns: only
    /// a member queues behind the team's changes. A non-member is answered
    /// at once, as for a team that does not exist, instead of waiting on
    /// the team's row (which told them the team exists, and let them queue
    /// against it). A member then takes the row and is read again, since a
    /// change that held it meanwhile may have removed them or changed
    /// their role. SQLite's write transactions already take turns, so the
    /// second read there only repeats the first.
    async fn membership(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        slug: &str,
        purpose: For,
    ) -> Result<(TeamRow, Role), ToolError> {
        let read = self
            .membership_as_of(conn, caller, slug, For::Reading)
            .await?;
        if purpose == For::Reading {
            return Ok(read);
        }
        self.membership_as_of(conn, caller, slug, purpose).await
    }

    /// [`Store::membership`]'s one read of the team row (for `purpose`)
    /// and of the caller's role in it.
    async fn membership_as_of(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        slug: &str,
        purpose: For,
    ) -> Result<(TeamRow, Role), ToolError> {
        let Some(team) = self.team_row(conn, slug, purpose).await? else {
            return Err(no_team(slug));
        };
        if team.deleted_at.is_some() {
            return Err(no_team(slug));
        }
        let role = self.direct_role(conn, &caller.user_id, &team.scope).await?;
        match role {
            Some(r) => Ok((team, r)),
            None => Err(no_team(slug)),
        }
    }

    async fn direct_role(
        &self,
        conn: &mut sqlx::AnyConnection,
        user_id: &str,
        scope_path: &str,
    ) -> Result<Option<Role>, ToolError> {
        let role: Option<String> =
            sqlx::query_scalar("SELECT role FROM scope_members WHERE scope = $1 AND user_id = $2")
                .bind(scope_path)
                .bind(user_id)
                .fetch_optional(&mut *conn)
                .await
                .db("member role")?;
        role.map(|r| crate::rows::parse_stored(&r, "role", &format!("{scope_path}/{user_id}")))
            .transpose()
    }

    async fn record(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        team_id: &str,
        event: Event<'_>,
    ) -> Result<(), ToolError> {
        sqlx::query(
            "INSERT INTO team_events (id, team_id, occurred_at, actor_id, action, subject_user_id, subject, role, request_id, seq) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, (SELECT COALESCE(MAX(seq), 0) + 1 FROM team_events WHERE team_id = $2))",
        )
        .bind(IdKind::TeamEvent.generate())
        .bind(team_id)
        .bind(self.now())
        .bind(caller.user_id.clone())
        .bind(event.action.as_str())
        .bind(event.user.map(str::to_string))
        .bind(event.subject.map(str::to_string))
        .bind(event.role.map(|r| r.as_str().to_string()))
        .bind(caller.request_id.clone())
        .execute(&mut *conn)
        .await
        .db("team event")?;
        Ok(())
    }

    async fn team_view(
        &self,
        conn: &mut sqlx::AnyConnection,
        team: &TeamRow,
        role: Role,
    ) -> Result<TeamDetail, ToolError> {
        let rows = sqlx::query(
            "SELECT sm.user_id AS user_id, u.email AS email, sm.role AS role, sm.created_at AS created_at \
             FROM scope_members sm JOIN users u ON u.id = sm.user_id WHERE sm.scope = $1 ORDER BY sm.created_at, sm.user_id",
        )
        .bind(&team.scope)
        .fetch_all(&mut *conn)
        .await
        .db("team members")?;
        let members: Vec<TeamMember> = MemberRow::from_rows(&rows)?
            .into_iter()
            .map(MemberRow::into_member)
            .collect();
        let rows = sqlx::query(
            "SELECT scope, owned, added_by, created_at FROM team_projects WHERE team_scope = $1 ORDER BY created_at, scope",
        )
        .bind(&team.scope)
        .fetch_all(&mut *conn)
        .await
        .db("team projects")?;
        let mut projects = Vec::with_capacity(rows.len());
        for r in &rows {
            projects.push(TeamProject {
                scope: col(r, "scope")?,
                owned: flag_col(r, "owned")?,
                added_by: opt_id_col(r, "added_by")?,
                added_at: rfc3339(col(r, "created_at")?),
            });
        }
        let invitations = if role == Role::Admin {
            // Open invitations only: an expired one can no longer be
            // accepted, so it is left out as a withdrawn one is (it stayed
            // listed for good, as pending until it expired).
            let now = self.now();
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT i.id AS id, i.email AS email, i.role AS role, i.created_at AS created_at, i.expires_at AS expires_at, \
                 i.accepted_at AS accepted_at FROM team_invitations i \
                 WHERE i.team_id = $1 AND {OPEN_INVITATION}$2 ORDER BY i.created_at, i.id",
            )))
            .bind(&team.id)
            .bind(now)
            .fetch_all(&mut *conn)
            .await
            .db("team invitations")?;
            InvitationRow::from_rows(&rows)?
                .into_iter()
                .map(|i| i.into_invitation(&team.slug, now))
                .collect()
        } else {
            Vec::new()
        };
        Ok(TeamDetail {
            team: Team {
                slug: team.slug.clone(),
                name: team.name.clone(),
                scope: team.scope.clone(),
                role,
                members: u32::try_from(members.len()).unwrap_or(u32::MAX),
                created_at: rfc3339(team.created_at),
            },
            members,
            projects,
            invitations,
        })
    }

    /// Create a team: its scope, its steward, the caller its first admin.
    pub async fn create_team(
        &self,
        caller: &Caller,
        input: CreateTeamInput,
    ) -> Result<TeamDetail, ToolError> {
        crate::service::rerun_on_contention("create_team", move || {
            self.create_team_once(caller, input.clone())
        })
        .await
    }

    /// One attempt at [`Store::create_team`], in a transaction of its own.
    async fn create_team_once(
        &self,
        caller: &Caller,
        input: CreateTeamInput,
    ) -> Result<TeamDetail, ToolError> {
        let slug = input.slug;
        let team_scope = format!("team.{slug}");
        scope::validate_path(&team_scope).map_err(|e| ToolError::validation(e.to_string()))?;
        let now = self.now();
        let mut tx = self.write_tx().await?;
        let slug_taken = || {
            ToolError::conflict(format!(
                "A team named {slug} already exists (or was deleted less than {TEAM_RETENTION_DAYS} days ago). Choose another slug."
            ))
        };
        if self.team_row(&mut tx, &slug, For::Reading).await?.is_some() {
            return Err(slug_taken());
        }
        let taken: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scopes WHERE path = $1")
            .bind(&team_scope)
            .fetch_one(&mut *tx)
            .await
            .db("team scope taken")?;
        let scope_taken = || {
            ToolError::conflict(format!(
                "The scope {team_scope} is already in use. Choose another slug."
            ))
        };
        if taken > 0 {
            return Err(scope_taken());
        }
        let team_id = IdKind::Team.generate();
        let steward = IdKind::User.generate();
        sqlx::query("INSERT INTO users (id, email, password_hash, is_owner, created_at, disabled_at) VALUES ($1, $2, $3, 0, $4, $4)")
            .bind(&steward)
            .bind(format!("steward-{}@teams.invalid", team_id.to_lowercase()))
            .bind("!team-steward")
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("team steward")?;
        let name = input
            .name
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| slug.clone());
        // Two creations of one slug at once (PostgreSQL): the second finds
        // the first's row here, and is told so, not an internal error.
        let inserted = sqlx::query("INSERT INTO teams (id, slug, name, scope, created_by, created_at, steward_id) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING")
            .bind(&team_id)
            .bind(&slug)
            .bind(&name)
            .bind(&team_scope)
            .bind(&caller.user_id)
            .bind(now)
            .bind(&steward)
            .execute(&mut *tx)
            .await
            .db("insert team")?;
        if inserted.rows_affected() == 0 {
            return Err(slug_taken());
        }
        let inserted = sqlx::query(
            "INSERT INTO scopes (path, kind, owner_id, created_at) VALUES ($1, 'team', $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(&team_scope)
        .bind(&steward)
        .bind(now)
        .execute(&mut *tx)
        .await
        .db("team scope")?;
        if inserted.rows_affected() == 0 {
            return Err(scope_taken());
        }
        sqlx::query(
            "INSERT INTO scope_members (scope, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&team_scope)
        .bind(&caller.user_id)
        .bind(Role::Admin.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .db("team admin")?;
        let team = self
            .team_row(&mut tx, &slug, For::Reading)
            .await?
            .ok_or_else(ToolError::internal)?;
        let mut created = Event::new(TeamAction::TeamCreated);
        created.user = Some(&caller.user_id);
        created.role = Some(Role::Admin);
        self.record(&mut tx, caller, &team.id, created).await?;
        let view = self.team_view(&mut tx, &team, Role::Admin).await?;
        tx.commit().await.db("commit team")?;
        Ok(view)
    }

    /// The live teams the caller is a member of.
    pub async fn list_teams(&self, caller: &Caller) -> Result<TeamList, ToolError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT t.slug AS slug, t.name AS name, t.scope AS scope, t.created_at AS created_at, sm.role AS role, \
             (SELECT COUNT(*) FROM scope_members c WHERE c.scope = t.scope) AS members \
             FROM teams t JOIN scope_members sm ON sm.scope = t.scope AND sm.user_id = $1 \
             WHERE t.deleted_at IS NULL ORDER BY {}",
            self.backend.bytewise("t.slug")
        )))
        .bind(&caller.user_id)
        .fetch_all(&self.pool)
        .await
        .db("list teams")?;
        let mut teams = Vec::with_capacity(rows.len());
        for r in &rows {
            teams.push(Team {
                slug: col(r, "slug")?,
                name: col(r, "name")?,
                scope: col(r, "scope")?,
                role: enum_col(r, "role")?,
                members: u32::try_from(col::<i64>(r, "members")?).unwrap_or(u32::MAX),
                created_at: rfc3339(col(r, "created_at")?),
            });
        }
        Ok(TeamList { teams })
    }

    /// One team, as a member sees it.
    pub async fn get_team(&self, caller: &Caller, slug: &str) -> Result<TeamDetail, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let (team, role) = self
            .membership(&mut conn, caller, slug, For::Reading)
            .await?;
        self.team_view(&mut conn, &team, role).await
    }

    async fn admin_of(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        slug: &str,
        purpose: For,
    ) -> Result<TeamRow, ToolError> {
        let (team, role) = self.membership(conn, caller, slug, purpose).await?;
        if role != Role::Admin {
            return Err(not_admin());
        }
        Ok(team)
    }

    /// The team whose admin the caller is, when the rule `owner` promoted
    /// for `applies` (a team's scope) is one the caller may revoke as that
    /// team's admin: a current member's rule, which every member's
    /// briefings deliver. `None` when the rule is for no team scope, when
    /// the caller is no member of that team (it reads as missing, as a
    /// foreign rule does), or when the owner is the team's steward (a
    /// departed member's rule: [`Store::act_for_steward`] decides).
    /// `forbidden` for a member below admin. Taken in turn with the team's
    /// changes ([`For::Change`]).
    pub(crate) async fn moderated_rule_team(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        owner_id: &str,
        applies: Option<&str>,
    ) -> Result<Option<StewardTeam>, ToolError> {
        let Some(slug) = applies.and_then(team_slug_of) else {
            return Ok(None);
        };
        let (team, role) = match self.membership(conn, caller, slug, For::Reading).await {
            Ok(found) => found,
            Err(e) if e.code == zm_contracts::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if team.steward_id.as_deref() == Some(owner_id) {
            return Ok(None);
        }
        if role != Role::Admin {
            return Err(ToolError::forbidden(format!(
                "Revoking a rule another member promoted for team {slug} needs the admin role there; yours is {}.",
                role.as_str()
            )));
        }
        let team = self.admin_of(conn, caller, slug, For::Change).await?;
        Ok(Some(StewardTeam {
            id: team.id,
            slug: team.slug,
        }))
    }

    /// The rules the team's current members promoted for its scopes (the
    /// team's own and its projects'), for its admins: what they may revoke
    /// ([`Store::moderated_rule_team`]). A departed member's are the
    /// steward's ([`Store::team_steward_rules`]).
    pub async fn team_member_rules(
        &self,
        caller: &Caller,
        slug: &str,
    ) -> Result<Vec<crate::rules::RuleRecord>, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let team = self.admin_of(&mut conn, caller, slug, For::Reading).await?;
        crate::rules::promoted_for_scope(
            &mut conn,
            &team.scope,
            team.steward_id.as_deref().unwrap_or_default(),
        )
        .await
    }

    /// May the caller act for a team's steward on what it holds in
    /// `scope_path` (revoke a rule handed to it; forget, close or restore
    /// a memory handed to it)? Nobody signs in as a
    /// steward, so the admins of its team act for it there: `owner_id` is
    /// the steward of the live team whose own scope (or team project)
    /// `scope_path` is, and the caller is that team's admin now. Anything
    /// else the caller cannot touch reads as `missing` — another member's
    /// row, another team's steward, a team they are not a member of —
    /// except that a member of the team without the admin role is told
    /// `forbidden`. Taken in turn with the team's changes, like them
    /// ([`For::Change`]): a role change or removal racing it either lands
    /// first and is obeyed, or waits. Returns the team; the change then
    /// goes in its audit log ([`Store::record_for_steward`]).
    pub(crate) async fn act_for_steward(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        owner_id: &str,
        scope_path: &str,
        what: &str,
        missing: impl FnOnce() -> ToolError,
    ) -> Result<StewardTeam, ToolError> {
        // Read first, without taking turns: only a team's admin queues
        // behind its changes (anyone else is answered at once, and a
        // batch of theirs takes no team row for change: two members'
        // batches of forgets, each holding the team for share, would
        // deadlock upgrading it).
        let standing = match self
            .steward_standing(conn, caller, owner_id, scope_path, For::Reading)
            .await?
        {
            StewardStanding::Admin(_) => {
                self.steward_standing(conn, caller, owner_id, scope_path, For::Change)
                    .await?
            }
            other => other,
        };
        match standing {
            StewardStanding::Admin(team) => Ok(team),
            StewardStanding::Member(slug, role) => Err(ToolError::forbidden(format!(
                "{what} needs the admin role in team {slug}; yours is {role}."
            ))),
            StewardStanding::None => Err(missing()),
        }
    }

    /// Record in `team`'s audit log that the caller, its admin, changed
    /// what its steward holds (`action`, on memory `memory_id`), in the
    /// change's transaction: the team's other admins see who did what to
    /// what a departed member left.
    pub(crate) async fn record_for_steward(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        team: &StewardTeam,
        action: TeamAction,
        memory_id: &str,
    ) -> Result<(), ToolError> {
        let event = Event {
            subject: Some(memory_id),
            ..Event::new(action)
        };
        self.record(conn, caller, &team.id, event).await
    }

    /// Would [`Store::act_for_steward`] let the caller act for the owner
    /// of a row in `scope_path`, as of now (read without taking turns with
    /// the team's changes: for showing what the caller may do, never for
    /// deciding it)? The team's slug when it would.
    pub(crate) async fn may_act_for_steward(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        owner_id: &str,
        scope_path: &str,
    ) -> Result<Option<String>, ToolError> {
        Ok(
            match self
                .steward_standing(conn, caller, owner_id, scope_path, For::Reading)
                .await?
            {
                StewardStanding::Admin(team) => Some(team.slug),
                _ => None,
            },
        )
    }

    /// The one answer to "where does the caller stand towards the steward
    /// holding a row in `scope_path`": see [`Store::act_for_steward`].
    async fn steward_standing(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        owner_id: &str,
        scope_path: &str,
        purpose: For,
    ) -> Result<StewardStanding, ToolError> {
        let Some(slug) = team_slug_of(scope_path) else {
            return Ok(StewardStanding::None);
        };
        let Some(team) = self.team_row(conn, slug, purpose).await? else {
            return Ok(StewardStanding::None);
        };
        if team.deleted_at.is_some() || team.steward_id.as_deref() != Some(owner_id) {
            return Ok(StewardStanding::None);
        }
        Ok(
            match self.direct_role(conn, &caller.user_id, &team.scope).await? {
                None => StewardStanding::None,
                Some(Role::Admin) => StewardStanding::Admin(StewardTeam {
                    id: team.id,
                    slug: team.slug,
                }),
                Some(role) => StewardStanding::Member(team.slug, role),
            },
        )
    }

    /// The rules a team's steward holds (those its departed members left
    /// in the team's scopes), for the team's admins, who may revoke them
    /// ([`Store::revoke_rule`]).
    pub async fn team_steward_rules(
        &self,
        caller: &Caller,
        slug: &str,
    ) -> Result<Vec<crate::rules::RuleRecord>, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let team = self.admin_of(&mut conn, caller, slug, For::Reading).await?;
        let steward = team.steward_id.ok_or_else(ToolError::internal)?;
        crate::rules::rules_of(&mut conn, &steward).await
    }

    /// How many admins of the team, `user_id` aside, can act as one: their
    /// account is enabled. A disabled admin signs in nowhere, so a team
    /// left with only such admins is one nobody can run; and the rule
    /// counts the others, so that a disabled admin can still be demoted or
    /// removed while an enabled one remains.
    ///
    /// On PostgreSQL their accounts' rows are held (`FOR SHARE`, after the
    /// team's, the order a disable takes them in) to the change's end: a
    /// `user disable` of one of them under way (it may not have seen this
    /// team: a membership made meanwhile) is waited for and then counted
    /// as disabled, and one that comes after waits for the change.
    async fn other_admins(
        &self,
        conn: &mut sqlx::AnyConnection,
        team_scope: &str,
        user_id: &str,
    ) -> Result<i64, ToolError> {
        let hold = match self.backend {
            crate::db::Backend::Sqlite => "",
            crate::db::Backend::Postgres => " ORDER BY u.id FOR SHARE OF u",
        };
        let admins: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT u.id FROM scope_members sm JOIN users u ON u.id = sm.user_id \
             WHERE sm.scope = $1 AND sm.role = $2 AND sm.user_id <> $3 AND u.disabled_at IS NULL{hold}"
        )))
        .bind(team_scope)
        .bind(Role::Admin.as_str())
        .bind(user_id)
        .fetch_all(&mut *conn)
        .await
        .db("count admins")?;
        Ok(i64::try_from(admins.len()).unwrap_or(i64::MAX))
    }

    async fn put_member(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        team: &TeamRow,
        user_id: &str,
        role: Role,
    ) -> Result<TeamMember, ToolError> {
        let previous = self.direct_role(conn, user_id, &team.scope).await?;
        if previous == Some(role) {
            return self.member(conn, team, user_id).await;
        }
        if previous == Some(Role::Admin)
            && self.other_admins(conn, &team.scope, user_id).await? == 0
        {
            return Err(ToolError::conflict(format!(
                "{user_id} is the last admin of team {} whose account is enabled: make another member admin first.",
                team.slug
            )));
        }
        sqlx::query(
            "INSERT INTO scope_members (scope, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(&team.scope)
        .bind(user_id)
        .bind(role.as_str())
        .bind(self.now())
        .execute(&mut *conn)
        .await
        .db("put member")?;
        let mut event = Event::new(if previous.is_some() {
            TeamAction::RoleChanged
        } else {
            TeamAction::MemberAdded
        });
        event.user = Some(user_id);
        event.role = Some(role);
        self.record(conn, caller, &team.id, event).await?;
        self.member(conn, team, user_id).await
    }

    /// An admin decided this user's membership (added, changed their role,
    /// removed them): invitations to the team still open for their email
    /// are withdrawn, so accepting one later cannot undo the decision.
    async fn withdraw_invitations(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        team: &TeamRow,
        user_id: &str,
    ) -> Result<(), ToolError> {
        let open = self
            .open_invitations(
                conn,
                OpenTo::Address {
                    team: &team.id,
                    user_id,
                },
            )
            .await?;
        self.withdraw_open(conn, caller, &open, user_id).await
    }

    /// Withdraw the open invitations `user_id` issued for the team, when
    /// they stop being its admin (demoted or gone): an admin about to be
    /// removed does not keep a way back in through a second address.
    async fn withdraw_invitations_from(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        team: &TeamRow,
        user_id: &str,
    ) -> Result<(), ToolError> {
        let open = self
            .open_invitations(
                conn,
                OpenTo::SentBy {
                    team: &team.id,
                    user_id,
                },
            )
            .await?;
        self.withdraw_open(conn, caller, &open, user_id).await
    }

    /// The open invitations (not accepted, withdrawn or expired) of live
    /// teams that `which` picks, as [`Store::withdraw_open`] reads them, by
    /// team and then in the order they were sent.
    async fn open_invitations(
        &self,
        conn: &mut sqlx::AnyConnection,
        which: OpenTo<'_>,
    ) -> Result<Vec<AnyRow>, ToolError> {
        let mut sql = Sql::new(
            "SELECT i.id AS id, i.team_id AS team_id, i.email AS email, i.role AS role FROM team_invitations i \
             JOIN teams t ON t.id = i.team_id WHERE t.deleted_at IS NULL AND ",
        );
        sql.push(OPEN_INVITATION);
        sql.bind_i64(self.now());
        let address_of = |sql: &mut Sql, user_id: &str| {
            sql.push("i.email = (SELECT email FROM users WHERE id = ")
                .bind_str(user_id)
                .push(")");
        };
        match which {
            OpenTo::Address { team, user_id } => {
                sql.push(" AND i.team_id = ").bind_str(team).push(" AND ");
                address_of(&mut sql, user_id);
            }
            OpenTo::SentBy { team, user_id } => {
                sql.push(" AND i.team_id = ")
                    .bind_str(team)
                    .push(" AND i.invited_by = ")
                    .bind_str(user_id);
            }
            OpenTo::Account(user_id) => {
                sql.push(" AND (i.invited_by = ")
                    .bind_str(user_id)
                    .push(" OR ");
                address_of(&mut sql, user_id);
                sql.push(")");
            }
        }
        sql.push(" ORDER BY i.team_id, i.created_at, i.id");
        sql.query()
            .fetch_all(&mut *conn)
            .await
            .db("open invitations")
    }

    /// Withdraw the invitations `open` lists (`id`, `team_id`, `email`,
    /// `role`), read by a change to the membership of `because_of`. Each
    /// one still open then goes in its team's audit log as
    /// `invitation_withdrawn`, like an admin's own withdrawal: the caller,
    /// who made the change, as its actor, and the invitation's address and
    /// role. It also names `because_of` as the member concerned (the
    /// invitee the change decided about, or the admin who sent it and is
    /// one no longer, or an account being erased): that says why it went,
    /// and tells it from a withdrawal by hand, which names nobody.
    async fn withdraw_open(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        open: &[AnyRow],
        because_of: &str,
    ) -> Result<(), ToolError> {
        let now = self.now();
        // Each team's log takes its entries in turn with the team's other
        // changes (an entry's `seq` is the log's last plus one): an
        // erasure withdraws invitations to teams it holds no row of, so
        // their rows are held here, in team order as `open` lists them
        // (a team's row already held is held again at no cost).
        let hold = self.backend.hold_rows();
        if !hold.is_empty() {
            let mut teams: Vec<String> = open
                .iter()
                .map(|r| col::<String>(r, "team_id"))
                .collect::<Result<_, _>>()?;
            teams.sort();
            teams.dedup();
            for team in &teams {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT id FROM teams WHERE id = $1{hold}"
                )))
                .bind(team)
                .fetch_optional(&mut *conn)
                .await
                .db("hold team for its log")?;
            }
        }
        for row in open {
            let id: String = col(row, "id")?;
            let withdrawn = sqlx::query(
                "UPDATE team_invitations SET revoked_at = $1 WHERE id = $2 AND accepted_at IS NULL AND revoked_at IS NULL",
            )
            .bind(now)
            .bind(&id)
            .execute(&mut *conn)
            .await
            .db("withdraw invitation")?;
            if withdrawn.rows_affected() == 0 {
                continue;
            }
            let team_id: String = col(row, "team_id")?;
            let email: String = col(row, "email")?;
            let mut event = Event::new(TeamAction::InvitationWithdrawn);
            event.user = Some(because_of);
            event.subject = Some(&email);
            event.role = Some(enum_col(row, "role")?);
            self.record(conn, caller, &team_id, event).await?;
        }
        Ok(())
    }

    async fn member(
        &self,
        conn: &mut sqlx::AnyConnection,
        team: &TeamRow,
        user_id: &str,
    ) -> Result<TeamMember, ToolError> {
        let row = sqlx::query(
            "SELECT sm.user_id AS user_id, u.email AS email, sm.role AS role, sm.created_at AS created_at \
             FROM scope_members sm JOIN users u ON u.id = sm.user_id WHERE sm.scope = $1 AND sm.user_id = $2",
        )
        .bind(&team.scope)
        .bind(user_id)
        .fetch_optional(&mut *conn)
        .await
        .db("member")?;
        match row {
            Some(r) => Ok(MemberRow::from_row(&r)?.into_member()),
            None => Err(ToolError::not_found(format!(
                "No member {user_id} in team {}.",
                team.slug
            ))),
        }
    }

    /// Add an existing user (by email) with a role, or change their role.
    pub async fn add_team_member(
        &self,
        caller: &Caller,
        slug: &str,
        input: AddMemberInput,
    ) -> Result<TeamMember, ToolError> {
        crate::service::rerun_on_contention("add_team_member", move || {
            self.add_team_member_once(caller, slug, input.clone())
        })
        .await
    }

    /// One attempt at [`Store::add_team_member`], in a transaction of its own.
    async fn add_team_member_once(
        &self,
        caller: &Caller,
        slug: &str,
        input: AddMemberInput,
    ) -> Result<TeamMember, ToolError> {
        let email = crate::identity::normalize_email(&input.email)?;
        let mut tx = self.write_tx().await?;
        let team = self.admin_of(&mut tx, caller, slug, For::Change).await?;
        // Refused before the address is looked up: a refusal tells nothing
        // of who has an account.
        if !adds_members_directly(&mut *tx, &caller.user_id).await? {
            return Err(ToolError::forbidden(format!(
                "Only the server's owner adds an account to a team directly. Invite the address instead (POST /api/teams/{slug}/invitations): they join when they accept."
            )));
        }
        let user: Option<String> = sqlx::query_scalar(
            "SELECT id FROM users WHERE email = $1 AND disabled_at IS NULL AND id NOT IN (SELECT steward_id FROM teams WHERE steward_id IS NOT NULL)",
        )
        .bind(&email)
        .fetch_optional(&mut *tx)
        .await
        .db("user by email")?;
        let Some(user) = user else {
            return Err(ToolError::not_found(format!(
                "No active user signs in as {email}. Invite the address instead (POST /api/teams/{slug}/invitations): they accept once they have an account."
            )));
        };
        let member = self
            .put_member(&mut tx, caller, &team, &user, input.role)
            .await?;
        self.withdraw_invitations(&mut tx, caller, &team, &user)
            .await?;
        // Adding an existing member again sets their role, as a role
        // change does: one made no admin withdraws what they invited.
        if input.role != TeamRole::Admin {
            self.withdraw_invitations_from(&mut tx, caller, &team, &user)
                .await?;
        }
        tx.commit().await.db("commit member")?;
        Ok(member)
    }

    /// Whether `user_id`, as a team's admin, may add an existing account
    /// directly ([`adds_members_directly`]); the dashboard offers it only
    /// then.
    pub async fn may_add_members_directly(&self, user_id: &str) -> Result<bool, ToolError> {
        adds_members_directly(&self.pool, user_id).await
    }

    /// Change a member's role.
    pub async fn set_team_role(
        &self,
        caller: &Caller,
        slug: &str,
        user_id: &str,
        input: SetRoleInput,
    ) -> Result<TeamMember, ToolError> {
        crate::service::rerun_on_contention("set_team_role", move || {
            self.set_team_role_once(caller, slug, user_id, input.clone())
        })
        .await
    }

    /// One attempt at [`Store::set_team_role`], in a transaction of its own.
    async fn set_team_role_once(
        &self,
        caller: &Caller,
        slug: &str,
        user_id: &str,
        input: SetRoleInput,
    ) -> Result<TeamMember, ToolError> {
        let mut tx = self.write_tx().await?;
        let team = self.admin_of(&mut tx, caller, slug, For::Change).await?;
        if self
            .direct_role(&mut tx, user_id, &team.scope)
            .await?
            .is_none()
        {
            return Err(ToolError::not_found(format!(
                "No member {user_id} in team {slug}."
            )));
        }
        let member = self
            .put_member(&mut tx, caller, &team, user_id, input.role)
            .await?;
        self.withdraw_invitations(&mut tx, caller, &team, user_id)
            .await?;
        if input.role != TeamRole::Admin {
            self.withdraw_invitations_from(&mut tx, caller, &team, user_id)
                .await?;
        }
        tx.commit().await.db("commit role")?;
        Ok(member)
    }

    /// Remove a member (an admin), or leave (the member themself). What
    /// they wrote into scopes they no longer reach stays with the team.
    pub async fn remove_team_member(
        &self,
        caller: &Caller,
        slug: &str,
        user_id: &str,
    ) -> Result<Removed, ToolError> {
        crate::service::rerun_on_contention("remove_team_member", move || {
            self.remove_team_member_once(caller, slug, user_id)
        })
        .await
    }

    /// One attempt at [`Store::remove_team_member`], in a transaction of its own.
    async fn remove_team_member_once(
        &self,
        caller: &Caller,
        slug: &str,
        user_id: &str,
    ) -> Result<Removed, ToolError> {
        let mut tx = self.write_tx().await?;
        let (team, role) = self.membership(&mut tx, caller, slug, For::Change).await?;
        if user_id != caller.user_id && role != Role::Admin {
            return Err(not_admin());
        }
        self.hold_shared_projects(&mut tx, &team).await?;
        let Some(their_role) = self.direct_role(&mut tx, user_id, &team.scope).await? else {
            return Err(ToolError::not_found(format!(
                "No member {user_id} in team {slug}."
            )));
        };
        if their_role == Role::Admin && self.other_admins(&mut tx, &team.scope, user_id).await? == 0
        {
            return Err(ToolError::conflict(format!(
                "{user_id} is the last admin of team {slug} whose account is enabled: make another member admin, or delete the team."
            )));
        }
        // Projects the leaving member shared stop being shared: the team
        // no longer reads a non-member's project.
        let theirs: Vec<String> = sqlx::query_scalar("SELECT scope FROM team_projects WHERE team_scope = $1 AND owned = 0 AND scope IN (SELECT path FROM scopes WHERE owner_id = $2) ORDER BY scope")
            .bind(&team.scope)
            .bind(user_id)
            .fetch_all(&mut *tx)
            .await
            .db("their shared projects")?;
        sqlx::query("DELETE FROM team_projects WHERE team_scope = $1 AND owned = 0 AND scope IN (SELECT path FROM scopes WHERE owner_id = $2)")
            .bind(&team.scope)
            .bind(user_id)
            .execute(&mut *tx)
            .await
            .db("unshare their projects")?;
        let reached = self.team_scopes(&mut tx, &team).await?;
        sqlx::query("DELETE FROM scope_members WHERE scope = $1 AND user_id = $2")
            .bind(&team.scope)
            .bind(user_id)
            .execute(&mut *tx)
            .await
            .db("remove member")?;
        self.withdraw_invitations(&mut tx, caller, &team, user_id)
            .await?;
        self.withdraw_invitations_from(&mut tx, caller, &team, user_id)
            .await?;
        let steward = team.steward_id.clone().ok_or_else(ToolError::internal)?;
        let mut handed = Vec::new();
        for (path, owned) in reached {
            if self.role_in(&mut *tx, user_id, &path).await?.is_some() {
                continue;
            }
            let heir = if owned {
                steward.clone()
            } else {
                self.scope_owner(&mut tx, &path)
                    .await?
                    .unwrap_or_else(|| steward.clone())
            };
            if heir != user_id {
                self.hand_over(&mut tx, user_id, &heir, &path).await?;
                handed.push(path);
            }
        }
        self.revoke_rules_left_behind(&mut tx, user_id, &handed)
            .await?;
        // Their projects, no longer shared: what the other members wrote
        // there goes to them, as on any unsharing.
        for path in theirs {
            // Recorded as any unsharing is: the other members' memories
            // there go to the leaver.
            let mut event = Event::new(TeamAction::ProjectUnshared);
            event.subject = Some(&path);
            self.record(&mut tx, caller, &team.id, event).await?;
            if self.settle_unshared(&mut tx, &team.scope, &path).await? {
                handed.push(path);
            }
        }
        let mut event = Event::new(TeamAction::MemberRemoved);
        event.user = Some(user_id);
        event.role = Some(their_role);
        self.record(&mut tx, caller, &team.id, event).await?;
        tx.commit().await.db("commit removal")?;
        self.vector_meta_changed_in_scopes(&handed).await;
        Ok(Removed { removed: true })
    }

    /// The team's scope and every scope it grants: `(path, owned by the team)`.
    async fn team_scopes(
        &self,
        conn: &mut sqlx::AnyConnection,
        team: &TeamRow,
    ) -> Result<Vec<(String, bool)>, ToolError> {
        let rows = sqlx::query("SELECT scope, owned FROM team_projects WHERE team_scope = $1")
            .bind(&team.scope)
            .fetch_all(&mut *conn)
            .await
            .db("team scopes")?;
        let mut out = vec![(team.scope.clone(), true)];
        for r in &rows {
            out.push((col(r, "scope")?, flag_col(r, "owned")?));
        }
        Ok(out)
    }

    /// Hold (PostgreSQL, `FOR NO KEY UPDATE`, in path order) the scope
    /// rows of the members' projects `team` is shared with, after the
    /// team's own row: a change of another team sharing one of them (a
    /// removal, an unsharing, a deletion) waits, and then reads the roles
    /// this one left. Each asks whether a member still reaches such a
    /// project through the other team; at once, both saw the other's grant
    /// and neither handed the member's memories over. SQLite's write
    /// transactions take turns already.
    async fn hold_shared_projects(
        &self,
        conn: &mut sqlx::AnyConnection,
        team: &TeamRow,
    ) -> Result<(), ToolError> {
        if self.backend != crate::db::Backend::Postgres {
            return Ok(());
        }
        sqlx::query(
            "SELECT path FROM scopes WHERE path IN \
             (SELECT scope FROM team_projects WHERE team_scope = $1 AND owned = 0) \
             ORDER BY path FOR NO KEY UPDATE",
        )
        .bind(&team.scope)
        .fetch_all(&mut *conn)
        .await
        .db("hold the team's shared projects")?;
        Ok(())
    }

    /// After every hand-over of a departure: a rule `user` promoted for one
    /// of the scopes they left from a memory still theirs (a personal one;
    /// project and team rules on handed-over memories went to the heir
    /// with them, user-layer ones were revoked in `hand_over`) stops
    /// reaching it.
    async fn revoke_rules_left_behind(
        &self,
        conn: &mut sqlx::AnyConnection,
        user: &str,
        left: &[String],
    ) -> Result<(), ToolError> {
        if left.is_empty() {
            return Ok(());
        }
        let mut sql = Sql::new(
            "UPDATE rules SET status = 'revoked', pinned = 0, revoked_reason = 'its author left the scope' WHERE owner_id = ",
        );
        sql.bind_str(user)
            .push(" AND status = 'promoted' AND applies_scope IN ")
            .bind_list(left.iter().cloned());
        sql.query()
            .execute(&mut *conn)
            .await
            .db("revoke the leaver's rules")?;
        Ok(())
    }

    /// Give `from`'s shared memories in `path` (and what hangs on them) to
    /// `to` (see [`GOING`]). A private one stays `from`'s, where it is: it was never the
    /// team's to keep, and the heir must not start reading it.
    async fn hand_over(
        &self,
        conn: &mut sqlx::AnyConnection,
        from: &str,
        to: &str,
        path: &str,
    ) -> Result<(), ToolError> {
        let (from_arg, to_arg, path_arg) = (
            Arg::Str(from.to_string()),
            Arg::Str(to.to_string()),
            Arg::Str(path.to_string()),
        );
        let now = Arg::I64(self.now());
        let values = [
            ("from", &from_arg),
            ("to", &to_arg),
            ("path", &path_arg),
            ("now", &now),
        ];
        self.revoke_rules_set_elsewhere(conn, &values, from, path)
            .await?;
        // The giver's session provenance (their thread, conversation and
        // transport session) does not go to the heir with the memories.
        self.scrub_writer_sessions(conn, Some(from), path).await?;
        for (what, template) in [
            // A user-layer rule is the giver's own instruction (their
            // connect-time instructions and every briefing of theirs): it
            // stays theirs, revoked, and never reaches the heir's.
            (
                "revoke the giver's own rules",
                "UPDATE rules SET status = 'revoked', pinned = 0, revoked_reason = 'its memory was handed over' \
                 WHERE owner_id = {from} AND layer = 'user' AND status = 'promoted' AND memory_id IN (GOING)",
            ),
            // A pending pair split by the hand-over (one memory goes, the
            // other stays) is no one's to settle any more: dismissed, kept
            // both. So is the giver's own challenge of a memory that goes;
            // it stays theirs below (its reason and evidence are the
            // giver's notes, not the team's).
            (
                "dismiss split conflicts",
                "UPDATE conflicts SET status = 'dismissed', resolution = 'keep_both', resolved_by = {from}, resolved_at = {now} \
                 WHERE owner_id = {from} AND status = 'pending' AND ( \
                   (memory_b IS NULL AND memory_a IN (GOING)) \
                   OR (memory_b IS NOT NULL AND (memory_a IN (GOING)) <> (memory_b IN (GOING))))",
            ),
            // A rule in force goes with its memory, but not its pin when
            // the heir is a team's steward: pinning takes the writer role
            // now, which a steward never holds, and nobody could unpin it.
            // A rule no longer in force (revoked, by the giver or just
            // above as set elsewhere; dismissed) stays the giver's, as a
            // user-layer one does: its text and its target are the
            // giver's, never delivered to the heir, and not theirs to read.
            (
                "hand over rules",
                "UPDATE rules SET owner_id = {to}, \
                 pinned = CASE WHEN EXISTS (SELECT 1 FROM teams t WHERE t.steward_id = {to}) THEN 0 ELSE pinned END \
                 WHERE owner_id = {from} AND layer <> 'user' AND status = 'promoted' AND memory_id IN (GOING)",
            ),
            (
                "hand over links",
                "UPDATE memory_links SET owner_id = {to} WHERE owner_id = {from} AND src IN (GOING)",
            ),
            (
                "hand over conflicts",
                "UPDATE conflicts SET owner_id = {to} WHERE owner_id = {from} AND memory_b IS NOT NULL AND memory_a IN (GOING) AND memory_b IN (GOING)",
            ),
            // The entities they named in the scope that a memory going
            // names go with it (the memories' anchors stay), and the edges
            // between them; a name only their private memories use stays
            // theirs.
            (
                "hand over edges",
                "UPDATE edges SET owner_id = {to} WHERE owner_id = {from} AND src IN ( \
                   SELECT e.id FROM entities e WHERE e.scope = {path} AND EXISTS ( \
                     SELECT 1 FROM memory_entities me WHERE me.entity_id = e.id AND me.memory_id IN (GOING)))",
            ),
            (
                "hand over entities",
                "UPDATE entities SET owner_id = {to} WHERE owner_id = {from} AND scope = {path} AND EXISTS ( \
                   SELECT 1 FROM memory_entities me WHERE me.entity_id = entities.id AND me.memory_id IN (GOING))",
            ),
            (
                "hand over memories",
                "UPDATE memories SET owner_id = {to} WHERE owner_id = {from} AND scope = {path} AND visibility = 'shared'",
            ),
        ] {
            Sql::template(&template.replace("GOING", GOING), &values)
                .query()
                .execute(&mut *conn)
                .await
                .db(what)?;
        }
        Ok(())
    }

    /// Delete the writer-session provenance (`WRITER_SESSION_KEYS`) of the
    /// shared memories in `path` (of `owner`, or of anyone) that are about
    /// to change hands. Read and rewritten here, key by key, so that a row
    /// whose provenance does not parse (none is written so; an old or
    /// copied row might) is left as it is rather than failing the
    /// hand-over.
    async fn scrub_writer_sessions(
        &self,
        conn: &mut sqlx::AnyConnection,
        owner: Option<&str>,
        path: &str,
    ) -> Result<(), ToolError> {
        // Only rows that may hold a key (a memory's provenance may carry
        // tens of kilobytes of verbatim text: a team's scope is not read
        // whole into memory for the few that matter).
        let mut sql = Sql::new(
            "SELECT id, source FROM memories WHERE visibility = 'shared' AND source IS NOT NULL \
             AND (source LIKE '%\"thread\"%' OR source LIKE '%\"conversation\"%' OR source LIKE '%\"session\"%') \
             AND scope = ",
        );
        sql.bind_str(path);
        if let Some(owner) = owner {
            sql.push(" AND owner_id = ").bind_str(owner);
        }
        let rows = sql
            .query()
            .fetch_all(&mut *conn)
            .await
            .db("provenance to scrub")?;
        for r in &rows {
            let source: String = col(r, "source")?;
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&source) else {
                continue;
            };
            let holds = value.as_object().is_some_and(|o| {
                crate::memories::WRITER_SESSION_KEYS
                    .iter()
                    .any(|k| o.contains_key(*k))
            });
            if !holds {
                continue;
            }
            let mut scrubbed = Some(value);
            crate::memories::strip_writer_session(&mut scrubbed);
            let text = serde_json::to_string(&scrubbed).map_err(|_| ToolError::internal())?;
            sqlx::query("UPDATE memories SET source = $1 WHERE id = $2")
                .bind(text)
                .bind(col::<String>(r, "id")?)
                .execute(&mut *conn)
                .await
                .db("scrub provenance")?;
        }
        Ok(())
    }

    /// Before a hand-over: revoke the giver's promoted rules on memories
    /// that go whose delivery scope another team, or a project's owner,
    /// governs (a memory in a shared project promoted for a team, one in
    /// `team.a` promoted for `team.b`). The heir did not set them and may
    /// hold no role where they are delivered, and those who do could not
    /// revoke a rule the heir holds: only a rule delivered in the scope
    /// itself, or elsewhere in the same team, goes on being delivered.
    async fn revoke_rules_set_elsewhere(
        &self,
        conn: &mut sqlx::AnyConnection,
        values: &[(&str, &Arg)],
        from: &str,
        path: &str,
    ) -> Result<(), ToolError> {
        let rules = Sql::template(
            &"SELECT memory_id, applies_scope FROM rules WHERE owner_id = {from} AND layer <> 'user' AND status = 'promoted' \
              AND memory_id IN (GOING)"
                .replace("GOING", GOING),
            values,
        )
        .query()
        .fetch_all(&mut *conn)
        .await
        .db("the giver's rules")?;
        let mut elsewhere = Vec::new();
        for row in &rules {
            let applies: Option<String> = col(row, "applies_scope")?;
            if !applies.as_deref().is_some_and(|a| same_governance(a, path)) {
                elsewhere.push(col::<String>(row, "memory_id")?);
            }
        }
        if elsewhere.is_empty() {
            return Ok(());
        }
        let mut sql = Sql::new(
            "UPDATE rules SET status = 'revoked', pinned = 0, revoked_reason = 'its memory was handed over' WHERE owner_id = ",
        );
        sql.bind_str(from)
            .push(" AND status = 'promoted' AND memory_id IN ")
            .bind_list(elsewhere);
        sql.query()
            .execute(&mut *conn)
            .await
            .db("revoke rules set elsewhere")?;
        Ok(())
    }

    /// Invite an email to the team.
    pub async fn invite_team_member(
        &self,
        caller: &Caller,
        slug: &str,
        input: InviteInput,
    ) -> Result<Invitation, ToolError> {
        crate::service::rerun_on_contention("invite_team_member", move || {
            self.invite_team_member_once(caller, slug, input.clone())
        })
        .await
    }

    /// One attempt at [`Store::invite_team_member`], in a transaction of its own.
    async fn invite_team_member_once(
        &self,
        caller: &Caller,
        slug: &str,
        input: InviteInput,
    ) -> Result<Invitation, ToolError> {
        let email = crate::identity::normalize_email(&input.email)?;
        let mut tx = self.write_tx().await?;
        let team = self.admin_of(&mut tx, caller, slug, For::Change).await?;
        let now = self.now();
        let days = i64::from(input.expires_in_days.unwrap_or(INVITATION_DEFAULT_DAYS));
        let id = IdKind::Invitation.generate();
        sqlx::query(
            "INSERT INTO team_invitations (id, team_id, email, role, invited_by, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&id)
        .bind(&team.id)
        .bind(&email)
        .bind(input.role.as_str())
        .bind(&caller.user_id)
        .bind(now)
        .bind(now + days * DAY_MS)
        .execute(&mut *tx)
        .await
        .db("invite")?;
        let mut event = Event::new(TeamAction::InvitationCreated);
        event.subject = Some(&email);
        event.role = Some(input.role);
        self.record(&mut tx, caller, &team.id, event).await?;
        tx.commit().await.db("commit invitation")?;
        Ok(Invitation {
            id: InvitationId::from_trusted(id),
            team: team.slug,
            email,
            role: input.role,
            status: InvitationStatus::Pending,
            expires_at: rfc3339(now + days * DAY_MS),
            created_at: rfc3339(now),
        })
    }

    /// The caller's email, if the account has one.
    async fn email_of(
        &self,
        conn: &mut sqlx::AnyConnection,
        user_id: &str,
    ) -> Result<String, ToolError> {
        let email: Option<String> = sqlx::query_scalar("SELECT email FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(&mut *conn)
            .await
            .db("caller email")?;
        email.ok_or_else(|| ToolError::unauthorized("Your account no longer exists."))
    }

    /// Open invitations addressed to the caller's email.
    pub async fn list_invitations(&self, caller: &Caller) -> Result<InvitationList, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let email = self.email_of(&mut conn, &caller.user_id).await?;
        let now = self.now();
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT i.id AS id, i.email AS email, i.role AS role, i.created_at AS created_at, i.expires_at AS expires_at, \
             i.accepted_at AS accepted_at, t.slug AS slug FROM team_invitations i JOIN teams t ON t.id = i.team_id \
             WHERE i.email = $1 AND {OPEN_INVITATION}$2 AND t.deleted_at IS NULL ORDER BY i.created_at, i.id",
        )))
        .bind(&email)
        .bind(now)
        .fetch_all(&mut *conn)
        .await
        .db("my invitations")?;
        let mut invitations = Vec::with_capacity(rows.len());
        for r in &rows {
            let slug: String = col(r, "slug")?;
            invitations.push(InvitationRow::from_row(r)?.into_invitation(&slug, now));
        }
        Ok(InvitationList { invitations })
    }

    /// Withdraw an invitation of the team that was not accepted (admins):
    /// it can no longer be accepted and is no longer listed. One that
    /// expired is withdrawn too (`removed: true`), so an admin's Withdraw
    /// on a page drawn before it expired does what it says, and the log
    /// records it. `removed: false` when it was already withdrawn; one
    /// accepted is a `conflict` (remove the member instead). Another
    /// team's invitation, or one that never existed, is `not_found`.
    pub async fn withdraw_invitation(
        &self,
        caller: &Caller,
        slug: &str,
        id: &InvitationId,
    ) -> Result<Removed, ToolError> {
        crate::service::rerun_on_contention("withdraw_invitation", move || {
            self.withdraw_invitation_once(caller, slug, id)
        })
        .await
    }

    /// One attempt at [`Store::withdraw_invitation`], in a transaction of its own.
    async fn withdraw_invitation_once(
        &self,
        caller: &Caller,
        slug: &str,
        id: &InvitationId,
    ) -> Result<Removed, ToolError> {
        let mut tx = self.write_tx().await?;
        let team = self.admin_of(&mut tx, caller, slug, For::Change).await?;
        let row = sqlx::query(
            "SELECT email, role, accepted_at, revoked_at, expires_at FROM team_invitations WHERE id = $1 AND team_id = $2",
        )
        .bind(id.as_str())
        .bind(&team.id)
        .fetch_optional(&mut *tx)
        .await
        .db("invitation")?;
        let Some(row) = row else {
            return Err(ToolError::not_found(format!(
                "Invitation {} not found in team {slug}.",
                id.as_str()
            )));
        };
        if col::<Option<i64>>(&row, "accepted_at")?.is_some() {
            return Err(ToolError::conflict(format!(
                "Invitation {} was already accepted; remove the member instead.",
                id.as_str()
            )));
        }
        if col::<Option<i64>>(&row, "revoked_at")?.is_some() {
            return Ok(Removed { removed: false });
        }
        let now = self.now();
        sqlx::query(
            "UPDATE team_invitations SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .db("withdraw invitation")?;
        let email: String = col(&row, "email")?;
        let mut event = Event::new(TeamAction::InvitationWithdrawn);
        event.subject = Some(&email);
        event.role = Some(enum_col(&row, "role")?);
        self.record(&mut tx, caller, &team.id, event).await?;
        tx.commit().await.db("commit withdrawal")?;
        Ok(Removed { removed: true })
    }

    /// Accept an invitation addressed to the caller's email: once.
    pub async fn accept_invitation(
        &self,
        caller: &Caller,
        id: &InvitationId,
    ) -> Result<TeamDetail, ToolError> {
        crate::service::rerun_on_contention("accept_invitation", move || {
            self.accept_invitation_once(caller, id)
        })
        .await
    }

    /// One attempt at [`Store::accept_invitation`], in a transaction of its own.
    async fn accept_invitation_once(
        &self,
        caller: &Caller,
        id: &InvitationId,
    ) -> Result<TeamDetail, ToolError> {
        let mut tx = self.write_tx().await?;
        let email = self.email_of(&mut tx, &caller.user_id).await?;
        let row = sqlx::query(
            "SELECT i.id AS id, i.email AS email, i.role AS role, i.created_at AS created_at, i.expires_at AS expires_at, \
             i.accepted_at AS accepted_at, i.revoked_at AS revoked_at, t.slug AS slug, t.deleted_at AS deleted_at FROM team_invitations i JOIN teams t ON t.id = i.team_id WHERE i.id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .db("invitation")?;
        let missing = || ToolError::not_found(format!("Invitation {} not found.", id.as_str()));
        // Someone else's invitation reads exactly like a missing one.
        let Some(row) = row else {
            return Err(missing());
        };
        let deleted: Option<i64> = col(&row, "deleted_at")?;
        let revoked: Option<i64> = col(&row, "revoked_at")?;
        let slug: String = col(&row, "slug")?;
        let inv = InvitationRow::from_row(&row)?;
        if inv.email != email || deleted.is_some() {
            return Err(missing());
        }
        if inv.accepted_at.is_some() {
            return Err(ToolError::conflict(format!(
                "Invitation {} was already accepted.",
                id.as_str()
            )));
        }
        if revoked.is_some() {
            return Err(ToolError::conflict(format!(
                "Invitation {} was withdrawn (by a team admin, or with a change of membership since it was sent). Ask a team admin for a new one.",
                id.as_str()
            )));
        }
        let now = self.now();
        if inv.expires_at <= now {
            return Err(ToolError::conflict(format!(
                "Invitation {} expired on {}; ask a team admin for a new one.",
                id.as_str(),
                rfc3339(inv.expires_at)
            )));
        }
        // Taken in turn with the team's other changes; what was read above
        // may have changed meanwhile: the team's deletion, the invitation's
        // acceptance or withdrawal.
        let team = self
            .team_row(&mut tx, &slug, For::Change)
            .await?
            .ok_or_else(ToolError::internal)?;
        if team.deleted_at.is_some() {
            return Err(missing());
        }
        // An admin whose account is disabled counts as no admin (not for
        // the team's last admin, not for its changes): what they sent
        // admits nobody while it is, or a departing admin's invitation to
        // a second address of theirs would be a way back in. (Demoted,
        // removed or erased, they would have withdrawn it.)
        let sender_disabled: Option<i64> = sqlx::query_scalar(
            "SELECT u.disabled_at FROM team_invitations i JOIN users u ON u.id = i.invited_by WHERE i.id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .db("invitation sender")?
        .flatten();
        if sender_disabled.is_some() {
            return Err(ToolError::conflict(format!(
                "Invitation {} was sent by an admin whose account is now disabled; ask another team admin for a new one.",
                id.as_str()
            )));
        }
        let accepted = sqlx::query("UPDATE team_invitations SET accepted_at = $1, accepted_by = $2 WHERE id = $3 AND accepted_at IS NULL AND revoked_at IS NULL")
            .bind(now)
            .bind(&caller.user_id)
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .db("accept invitation")?;
        if accepted.rows_affected() == 0 {
            return Err(ToolError::conflict(format!(
                "Invitation {} was accepted or withdrawn meanwhile.",
                id.as_str()
            )));
        }
        let mut accepted = Event::new(TeamAction::InvitationAccepted);
        accepted.user = Some(&caller.user_id);
        accepted.subject = Some(id.as_str());
        accepted.role = Some(inv.role);
        self.record(&mut tx, caller, &team.id, accepted).await?;
        // A member already keeps the higher of the two roles.
        let current = self
            .direct_role(&mut tx, &caller.user_id, &team.scope)
            .await?;
        if current.is_none_or(|c| c.rank() < inv.role.rank()) {
            self.put_member(&mut tx, caller, &team, &caller.user_id, inv.role)
                .await?;
        }
        let role = self
            .direct_role(&mut tx, &caller.user_id, &team.scope)
            .await?
            .ok_or_else(ToolError::internal)?;
        let view = self.team_view(&mut tx, &team, role).await?;
        tx.commit().await.db("commit acceptance")?;
        Ok(view)
    }

    /// Share one of the caller's projects with a team.
    pub async fn share_project_with_team(
        &self,
        caller: &Caller,
        slug: &str,
        input: ShareProjectInput,
    ) -> Result<TeamProject, ToolError> {
        crate::service::rerun_on_contention("share_project_with_team", move || {
            self.share_project_with_team_once(caller, slug, input.clone())
        })
        .await
    }

    /// One attempt at [`Store::share_project_with_team`], in a transaction of its own.
    async fn share_project_with_team_once(
        &self,
        caller: &Caller,
        slug: &str,
        input: ShareProjectInput,
    ) -> Result<TeamProject, ToolError> {
        let mut tx = self.write_tx().await?;
        let (team, role) = self.membership(&mut tx, caller, slug, For::Change).await?;
        if !role.can_write() {
            return Err(ToolError::forbidden(
                "Sharing a project with a team needs the writer or admin role in it.",
            ));
        }
        let path = match (&input.scope, &input.project_hint) {
            (Some(s), None) => crate::scopes::canonical_path(caller, s.trim()),
            (None, Some(h)) => self.hint_for_admin(&mut tx, caller, h).await?,
            _ => {
                return Err(zm_contracts::validate::validation_error(vec![
                    zm_contracts::FieldError {
                        path: "scope".into(),
                        reason: "give exactly one of scope and project_hint".into(),
                    },
                ]));
            }
        };
        if scope::validate_path(&path).is_err() || !path.starts_with("proj.") {
            return Err(zm_contracts::validate::validation_error(vec![
                zm_contracts::FieldError {
                    path: "scope".into(),
                    reason: "a project scope (proj.…) you administer".into(),
                },
            ]));
        }
        if self.direct_role(&mut tx, &caller.user_id, &path).await? != Some(Role::Admin) {
            // A project the caller does not administer reads as missing.
            return Err(ToolError::not_found(format!("Project {path} not found.")));
        }
        // The sharer's writes of new memories wait (PostgreSQL): one
        // already under way, which found the project unshared, commits
        // first and is published below; one after reads it shared.
        self.hold_writes_of(&mut tx, &caller.user_id).await?;
        let now = self.now();
        let added = sqlx::query("INSERT INTO team_projects (team_scope, scope, owned, added_by, created_at) VALUES ($1, $2, 0, $3, $4) ON CONFLICT (team_scope, scope) DO NOTHING")
            .bind(&team.scope)
            .bind(&path)
            .bind(&caller.user_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("share project")?
            .rows_affected()
            > 0;
        // A share publishes the sharer's own memories in the project
        // (others' stay as their authors left them), but those kept
        // private on purpose while a team read it (an import, a new
        // version of one): sharing again, with another team, or after
        // every share ended, does not publish those.
        if added {
            sqlx::query("UPDATE memories SET visibility = 'shared', shared_at = $1, shared_by = $2 WHERE scope = $3 AND owner_id = $2 AND visibility = 'private' AND kept_private = 0")
                .bind(now)
                .bind(&caller.user_id)
                .bind(&path)
                .execute(&mut *tx)
                .await
                .db("share project memories")?;
        }
        if added {
            let mut event = Event::new(TeamAction::ProjectShared);
            event.subject = Some(&path);
            self.record(&mut tx, caller, &team.id, event).await?;
        }
        let row = sqlx::query("SELECT scope, owned, added_by, created_at FROM team_projects WHERE team_scope = $1 AND scope = $2")
            .bind(&team.scope)
            .bind(&path)
            .fetch_one(&mut *tx)
            .await
            .db("shared project")?;
        let out = TeamProject {
            scope: col(&row, "scope")?,
            owned: flag_col(&row, "owned")?,
            added_by: opt_id_col(&row, "added_by")?,
            added_at: rfc3339(col(&row, "created_at")?),
        };
        tx.commit().await.db("commit share")?;
        // The vector index sees the newly shared memories at once.
        self.vector_meta_changed_in_scopes(&[path]).await;
        Ok(out)
    }

    /// Stop sharing a project with a team: its sharer, the project's admin
    /// or a team admin may.
    pub async fn unshare_project_from_team(
        &self,
        caller: &Caller,
        slug: &str,
        path: &str,
    ) -> Result<Removed, ToolError> {
        crate::service::rerun_on_contention("unshare_project_from_team", move || {
            self.unshare_project_from_team_once(caller, slug, path)
        })
        .await
    }

    /// One attempt at [`Store::unshare_project_from_team`], in a transaction of its own.
    async fn unshare_project_from_team_once(
        &self,
        caller: &Caller,
        slug: &str,
        path: &str,
    ) -> Result<Removed, ToolError> {
        // The project is named as a share names it: a short `proj.<slug>`
        // is the caller's own project of that name (anyone else's is
        // named in full).
        let full = crate::scopes::canonical_path(caller, path.trim());
        let path = full.as_str();
        let mut tx = self.write_tx().await?;
        let (team, role) = self.membership(&mut tx, caller, slug, For::Change).await?;
        self.hold_shared_projects(&mut tx, &team).await?;
        let added_by: Option<Option<String>> = sqlx::query_scalar(
            "SELECT added_by FROM team_projects WHERE team_scope = $1 AND scope = $2 AND owned = 0",
        )
        .bind(&team.scope)
        .bind(path)
        .fetch_optional(&mut *tx)
        .await
        .db("shared project")?;
        let Some(added_by) = added_by else {
            return Err(ToolError::not_found(format!(
                "Project {path} is not shared with team {slug}."
            )));
        };
        let project_admin =
            self.direct_role(&mut tx, &caller.user_id, path).await? == Some(Role::Admin);
        if role != Role::Admin && !project_admin && added_by.as_deref() != Some(&caller.user_id) {
            return Err(not_admin());
        }
        sqlx::query("DELETE FROM team_projects WHERE team_scope = $1 AND scope = $2 AND owned = 0")
            .bind(&team.scope)
            .bind(path)
            .execute(&mut *tx)
            .await
            .db("unshare project")?;
        let handed = self.settle_unshared(&mut tx, &team.scope, path).await?;
        let mut event = Event::new(TeamAction::ProjectUnshared);
        event.subject = Some(path);
        self.record(&mut tx, caller, &team.id, event).await?;
        tx.commit().await.db("commit unshare")?;
        if handed {
            self.vector_meta_changed_in_scopes(&[path.to_string()])
                .await;
        }
        Ok(Removed { removed: true })
    }

    /// Who owns scope `path` (a project's owner: the heir of what members
    /// leave behind in it), if it exists.
    async fn scope_owner(
        &self,
        conn: &mut sqlx::AnyConnection,
        path: &str,
    ) -> Result<Option<String>, ToolError> {
        sqlx::query_scalar("SELECT owner_id FROM scopes WHERE path = $1")
            .bind(path)
            .fetch_optional(&mut *conn)
            .await
            .db("scope owner")
    }

    /// After project `path` stopped being shared with the team of
    /// `team_scope`: each member who no longer reaches it (not a member of
    /// the project, nor of another team it is shared with) leaves it as on
    /// a removal. What they shared there goes to the project's owner, and
    /// their rules for it are revoked: a non-member keeps no write power
    /// and no standing instruction in someone else's project. Whether
    /// anything was handed over.
    async fn settle_unshared(
        &self,
        tx: &mut sqlx::AnyConnection,
        team_scope: &str,
        path: &str,
    ) -> Result<bool, ToolError> {
        let Some(owner) = self.scope_owner(tx, path).await? else {
            return Ok(false);
        };
        let mut handed = false;
        let left = [path.to_string()];
        for member in self.stranded(tx, team_scope, path, &owner).await? {
            self.hand_over(tx, &member, &owner, path).await?;
            self.revoke_rules_left_behind(tx, &member, &left).await?;
            handed = true;
        }
        Ok(handed)
    }

    /// The members of `team_scope` (but `except`) with no role left in
    /// project `path` once it is no longer shared with that team.
    async fn stranded(
        &self,
        tx: &mut sqlx::AnyConnection,
        team_scope: &str,
        path: &str,
        except: &str,
    ) -> Result<Vec<String>, ToolError> {
        let members: Vec<String> = sqlx::query_scalar(
            "SELECT user_id FROM scope_members WHERE scope = $1 AND user_id <> $2 ORDER BY user_id",
        )
        .bind(team_scope)
        .bind(except)
        .fetch_all(&mut *tx)
        .await
        .db("team members")?;
        let mut stranded = Vec::new();
        for member in members {
            if self.role_in(&mut *tx, &member, path).await?.is_none() {
                stranded.push(member);
            }
        }
        Ok(stranded)
    }

    /// Before `caller`'s account is erased: the projects it shared with
    /// teams stop being shared, as an unsharing does, except that their
    /// owner, going, takes nothing. What each member who reached such a
    /// project only through a team shared there becomes private to them
    /// (theirs to read, forget or export; nobody else's, not a later heir
    /// of the project's), and their rules for it are revoked: nobody is
    /// left with shared memories they may no longer change, in a project
    /// they no longer belong to, and their rules on those memories are
    /// revoked. The invitations it sent, and those addressed to it, are
    /// withdrawn. Each team's audit log records the unsharing, each open
    /// invitation withdrawn, and the account's departure from every team
    /// it was in. The memories made private.
    pub(crate) async fn release_teams_for_erasure(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
    ) -> Result<Vec<String>, ToolError> {
        let uid = caller.user_id.as_str();
        let shared = sqlx::query(
            "SELECT t.id AS team_id, tp.team_scope AS team_scope, tp.scope AS scope FROM team_projects tp \
             JOIN teams t ON t.scope = tp.team_scope \
             WHERE tp.owned = 0 AND tp.scope IN (SELECT path FROM scopes WHERE owner_id = $1) ORDER BY tp.team_scope, tp.scope",
        )
        .bind(uid)
        .fetch_all(&mut *tx)
        .await
        .db("projects shared with teams")?;
        sqlx::query("DELETE FROM team_projects WHERE owned = 0 AND scope IN (SELECT path FROM scopes WHERE owner_id = $1)")
            .bind(uid)
            .execute(&mut *tx)
            .await
            .db("unshare projects")?;
        let mut private = Vec::new();
        for row in &shared {
            let (team_id, team_scope, path): (String, String, String) = (
                col(row, "team_id")?,
                col(row, "team_scope")?,
                col(row, "scope")?,
            );
            for member in &self.stranded(tx, &team_scope, &path, uid).await? {
                let ids: Vec<String> = sqlx::query_scalar(
                    "SELECT id FROM memories WHERE owner_id = $1 AND scope = $2 AND visibility = 'shared'",
                )
                .bind(member)
                .bind(&path)
                .fetch_all(&mut *tx)
                .await
                .db("their shared memories")?;
                sqlx::query(
                    "UPDATE memories SET visibility = 'private' WHERE owner_id = $1 AND scope = $2 AND visibility = 'shared'",
                )
                .bind(member)
                .bind(&path)
                .execute(&mut *tx)
                .await
                .db("make their memories private")?;
                self.revoke_rules_left_behind(tx, member, std::slice::from_ref(&path))
                    .await?;
                // A rule on one of them is no longer delivered anywhere:
                // nobody else reads the memory it came from.
                if !ids.is_empty() {
                    let mut sql = Sql::new(
                        "UPDATE rules SET status = 'revoked', pinned = 0, revoked_reason = 'its memory was made private' WHERE owner_id = ",
                    );
                    sql.bind_str(member.clone())
                        .push(" AND status = 'promoted' AND layer <> 'user' AND memory_id IN ")
                        .bind_list(ids.iter().cloned());
                    sql.query()
                        .execute(&mut *tx)
                        .await
                        .db("revoke rules of private memories")?;
                }
                private.extend(ids);
            }
            let mut event = Event::new(TeamAction::ProjectUnshared);
            event.subject = Some(&path);
            self.record(tx, caller, &team_id, event).await?;
        }
        // Invitations the account sent, and those addressed to it: none
        // outlives it (a later account of that address did not consent).
        // Those still open in a live team are withdrawn one by one, each
        // in its team's audit log with the account as its actor and the
        // member concerned, as a change of membership records what it
        // withdraws (those addressed to the account lose the address
        // below, as its other invitation events do); the rest (expired,
        // or a deleted team's, which nobody reads the log of) at once.
        let open = self
            .open_invitations(&mut *tx, OpenTo::Account(uid))
            .await?;
        self.withdraw_open(tx, caller, &open, uid).await?;
        sqlx::query(
            "UPDATE team_invitations SET revoked_at = $1 WHERE accepted_at IS NULL AND revoked_at IS NULL \
             AND (invited_by = $2 OR email = (SELECT email FROM users WHERE id = $2))",
        )
        .bind(self.now())
        .bind(uid)
        .execute(&mut *tx)
        .await
        .db("withdraw the account's invitations")?;
        // The account's address leaves the team tables with it: the
        // invitations addressed to it (accepted or not: next to
        // `accepted_by` it would name the erased id everywhere the log
        // shows it) and the invitation events, which name their invitee
        // by address. (Withdrawn just above, none of them is open.)
        let email: Option<String> = sqlx::query_scalar("SELECT email FROM users WHERE id = $1")
            .bind(uid)
            .fetch_optional(&mut *tx)
            .await
            .db("the account's address")?;
        if let Some(email) = email {
            sqlx::query(
                "UPDATE team_invitations SET email = $1 WHERE email = $2 OR accepted_by = $3",
            )
            .bind(ERASED_ADDRESS)
            .bind(&email)
            .bind(uid)
            .execute(&mut *tx)
            .await
            .db("forget the account's address on invitations")?;
            sqlx::query("UPDATE team_events SET subject = NULL WHERE subject = $1")
                .bind(&email)
                .execute(&mut *tx)
                .await
                .db("forget the account's address in team events")?;
        }
        let teams = sqlx::query(
            "SELECT t.id AS team_id, sm.role AS role FROM scope_members sm JOIN teams t ON t.scope = sm.scope \
             WHERE sm.user_id = $1 AND t.deleted_at IS NULL ORDER BY t.id",
        )
        .bind(uid)
        .fetch_all(&mut *tx)
        .await
        .db("the account's teams")?;
        for row in &teams {
            let team_id: String = col(row, "team_id")?;
            let mut event = Event::new(TeamAction::MemberRemoved);
            event.user = Some(uid);
            event.role = Some(enum_col(row, "role")?);
            self.record(tx, caller, &team_id, event).await?;
        }
        Ok(private)
    }

    /// The team's audit log, newest first (admins).
    pub async fn team_audit(&self, caller: &Caller, slug: &str) -> Result<TeamAudit, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let team = self.admin_of(&mut conn, caller, slug, For::Reading).await?;
        let rows = sqlx::query(
            "SELECT e.occurred_at AS occurred_at, e.actor_id AS actor_id, a.email AS actor_email, e.action AS action, \
             e.subject_user_id AS subject_user_id, u.email AS user_email, e.subject AS subject, e.role AS role \
             FROM team_events e LEFT JOIN users a ON a.id = e.actor_id LEFT JOIN users u ON u.id = e.subject_user_id \
             WHERE e.team_id = $1 ORDER BY e.seq DESC, e.id DESC LIMIT $2",
        )
        .bind(&team.id)
        .bind(i64::try_from(zm_contracts::teams::TEAM_AUDIT_MAX).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await
        .db("team audit")?;
        let mut events = Vec::with_capacity(rows.len());
        for r in &rows {
            let role: Option<String> = col(r, "role")?;
            events.push(TeamEvent {
                at: rfc3339(col(r, "occurred_at")?),
                actor: opt_id_col(r, "actor_id")?,
                actor_email: col(r, "actor_email")?,
                action: enum_col(r, "action")?,
                user_id: opt_id_col(r, "subject_user_id")?,
                user_email: col(r, "user_email")?,
                subject: col(r, "subject")?,
                role: role
                    .map(|s| crate::rows::parse_stored(&s, "role", "team_events"))
                    .transpose()?,
            });
        }
        Ok(TeamAudit { events })
    }

    /// Delete a team (admins): memberships and grants end now; its
    /// memories go to the steward, private, exportable by the admins of
    /// this moment until they are erased.
    pub async fn delete_team(&self, caller: &Caller, slug: &str) -> Result<TeamDeleted, ToolError> {
        crate::service::rerun_on_contention("delete_team", move || {
            self.delete_team_once(caller, slug)
        })
        .await
    }

    /// One attempt at [`Store::delete_team`], in a transaction of its own.
    async fn delete_team_once(
        &self,
        caller: &Caller,
        slug: &str,
    ) -> Result<TeamDeleted, ToolError> {
        let mut tx = self.write_tx().await?;
        let team = self.admin_of(&mut tx, caller, slug, For::Change).await?;
        self.hold_shared_projects(&mut tx, &team).await?;
        let steward = team.steward_id.clone().ok_or_else(ToolError::internal)?;
        let now = self.now();
        let purge_after = now + TEAM_RETENTION_DAYS * DAY_MS;
        sqlx::query("INSERT INTO team_export_grants (team_id, user_id) SELECT $1, user_id FROM scope_members WHERE scope = $2 AND role = $3")
            .bind(&team.id)
            .bind(&team.scope)
            .bind(Role::Admin.as_str())
            .execute(&mut *tx)
            .await
            .db("export grants")?;
        let owned: Vec<String> = sqlx::query_scalar(
            "SELECT scope FROM team_projects WHERE team_scope = $1 AND owned = 1",
        )
        .bind(&team.scope)
        .fetch_all(&mut *tx)
        .await
        .db("team projects")?;
        // Its members as they stand, before their memberships end.
        let members: Vec<String> =
            sqlx::query_scalar("SELECT user_id FROM scope_members WHERE scope = $1")
                .bind(&team.scope)
                .fetch_all(&mut *tx)
                .await
                .db("team members")?;
        let shared: Vec<String> = sqlx::query_scalar(
            "SELECT scope FROM team_projects WHERE team_scope = $1 AND owned = 0",
        )
        .bind(&team.scope)
        .fetch_all(&mut *tx)
        .await
        .db("shared projects")?;
        let mut memories = 0u64;
        for path in std::iter::once(&team.scope).chain(owned.iter()) {
            memories += self.retire_scope(&mut tx, &steward, path).await?;
        }
        for (what, sql) in [
            (
                "drop grants",
                "DELETE FROM team_projects WHERE team_scope = $1",
            ),
            ("drop members", "DELETE FROM scope_members WHERE scope = $1"),
        ] {
            sqlx::query(sql)
                .bind(&team.scope)
                .execute(&mut *tx)
                .await
                .db(what)?;
        }
        // What this team's members wrote into projects shared with it goes
        // to each project's owner, unless the writer still reaches the
        // project (a member of it, or through another team): as when one
        // member is removed. Writers who reached it through another team
        // only keep theirs.
        let mut left: std::collections::BTreeMap<&str, Vec<String>> =
            std::collections::BTreeMap::new();
        for path in &shared {
            let Some(owner) = self.scope_owner(&mut tx, path).await? else {
                continue;
            };
            for member in members.iter().filter(|m| **m != owner) {
                if self.role_in(&mut *tx, member, path).await?.is_none() {
                    self.hand_over(&mut tx, member, &owner, path).await?;
                    left.entry(member.as_str()).or_default().push(path.clone());
                }
            }
        }
        // After every hand-over, as for a removal: rules whose source went
        // to an heir went with it, still promoted.
        for (member, paths) in &left {
            self.revoke_rules_left_behind(&mut tx, member, paths)
                .await?;
        }
        sqlx::query(
            "UPDATE teams SET deleted_at = $1, deleted_by = $2, purge_after = $3 WHERE id = $4",
        )
        .bind(now)
        .bind(&caller.user_id)
        .bind(purge_after)
        .bind(&team.id)
        .execute(&mut *tx)
        .await
        .db("mark deleted")?;
        self.record(
            &mut tx,
            caller,
            &team.id,
            Event::new(TeamAction::TeamDeleted),
        )
        .await?;
        tx.commit().await.db("commit team deletion")?;
        let touched: Vec<String> = std::iter::once(team.scope.clone())
            .chain(owned)
            .chain(shared)
            .collect();
        self.vector_meta_changed_in_scopes(&touched).await;
        Ok(TeamDeleted {
            slug: team.slug,
            memories,
            deleted_at: rfc3339(now),
            purge_after: rfc3339(purge_after),
        })
    }

    /// Hand every memory of one scope to the steward, private; drop what
    /// members derived from them (rules, links, conflicts, the scope's entities) and the
    /// bindings that route writes there. Returns how many memories.
    async fn retire_scope(
        &self,
        conn: &mut sqlx::AnyConnection,
        steward: &str,
        path: &str,
    ) -> Result<u64, ToolError> {
        // The team's memories are the shared ones: a private row (an
        // import) stays its owner's, as on a departure.
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM memories WHERE scope = $1 AND visibility = 'shared'",
        )
        .bind(path)
        .fetch_one(&mut *conn)
        .await
        .db("count team memories")?;
        for (what, sql) in [
            (
                "drop rules",
                "DELETE FROM rules WHERE memory_id IN (SELECT id FROM memories WHERE scope = $1 AND visibility = 'shared')",
            ),
            // A member's rule promoted for the scope from a memory of
            // their own stays theirs, revoked, as on their departure
            // (deleting it lost the row and its wording).
            (
                "revoke rules for the scope",
                "UPDATE rules SET status = 'revoked', pinned = 0, revoked_reason = 'its scope was deleted' WHERE applies_scope = $1 AND status = 'promoted'",
            ),
            (
                "drop links",
                "DELETE FROM memory_links WHERE src IN (SELECT id FROM memories WHERE scope = $1 AND visibility = 'shared') OR dst IN (SELECT id FROM memories WHERE scope = $1 AND visibility = 'shared')",
            ),
            (
                "drop conflicts",
                "DELETE FROM conflicts WHERE memory_a IN (SELECT id FROM memories WHERE scope = $1 AND visibility = 'shared') OR memory_b IN (SELECT id FROM memories WHERE scope = $1 AND visibility = 'shared')",
            ),
            // Entities are named per scope: the scope's go with it (their
            // anchors and edges cascade), whoever named them.
            ("drop entities", "DELETE FROM entities WHERE scope = $1"),
            (
                "drop bindings",
                "DELETE FROM project_bindings WHERE scope = $1",
            ),
            (
                "drop scope members",
                "DELETE FROM scope_members WHERE scope = $1",
            ),
        ] {
            sqlx::query(sql)
                .bind(path)
                .execute(&mut *conn)
                .await
                .db(what)?;
        }
        // Nor to the steward, whose admins export them for 30 days.
        self.scrub_writer_sessions(conn, None, path).await?;
        sqlx::query("UPDATE memories SET owner_id = $1, visibility = 'private' WHERE scope = $2 AND visibility = 'shared'")
            .bind(steward)
            .bind(path)
            .execute(&mut *conn)
            .await
            .db("retire memories")?;
        sqlx::query("UPDATE scopes SET owner_id = $1 WHERE path = $2")
            .bind(steward)
            .bind(path)
            .execute(&mut *conn)
            .await
            .db("retire scope")?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Every memory of a team's export at once: the pages of
    /// [`Self::export_team_page`] gathered (the HTTP route streams them
    /// instead).
    pub async fn export_team(&self, caller: &Caller, slug: &str) -> Result<TeamExport, ToolError> {
        let mut page = self
            .export_team_page(caller, slug, None, TEAM_EXPORT_PAGE)
            .await?;
        let mut items = std::mem::take(&mut page.items);
        while let Some(after) = page.next {
            page = self
                .export_team_page(caller, slug, Some(after), TEAM_EXPORT_PAGE)
                .await?;
            items.append(&mut page.items);
        }
        Ok(TeamExport {
            team: page.team,
            items,
        })
    }

    /// One page of a team's export: at most `limit` of its memories, oldest
    /// first, after `after` (the `next` of the page before; `None` for the
    /// first). A live team's export is every memory shared in its own
    /// scopes, for its admins; a deleted team's, for 30 days, what its
    /// steward held, for its admins of that moment. Every page checks the
    /// caller again, so an admin removed mid-export gets no more of it.
    pub async fn export_team_page(
        &self,
        caller: &Caller,
        slug: &str,
        after: Option<TeamExportPosition>,
        limit: u32,
    ) -> Result<TeamExportPage, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let (team, set) = self.team_export_set(&mut conn, caller, slug).await?;
        // The page's keys and sizes first, as `export_memories` reads its
        // pages: the rows are read whole only for the memories the page
        // keeps (at most `limit`, and no more text than the page's budget
        // of characters past the first). A thousand memories at the
        // highest text limit would otherwise be gigabytes in one page.
        let mut sql = Sql::new(
            "SELECT m.seq AS page_seq, m.created_at, CAST(length(m.content) + COALESCE(length(m.source), 0) AS BIGINT) AS chars FROM memories m WHERE ",
        );
        set.push(&mut sql);
        if let Some(a) = after {
            sql.push(" AND (m.created_at > ")
                .bind_i64(a.created_at)
                .push(" OR (m.created_at = ")
                .bind_i64(a.created_at)
                .push(" AND m.seq > ")
                .bind_i64(a.seq)
                .push("))");
        }
        let limit = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
        sql.push(" ORDER BY m.created_at, m.seq LIMIT ")
            .bind_i64(i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1));
        let keys = sql.query().fetch_all(&mut *conn).await.db("team export")?;
        let page = crate::transfer::page_of_keys(&keys, limit, self.limits().export_page_chars)?;
        let next = match page.last() {
            Some(&(created_at, seq)) if keys.len() > page.len() => {
                Some(TeamExportPosition { created_at, seq })
            }
            _ => None,
        };
        // The rows of the page, by their keys, still in the export's set
        // (one that left it since the keys were read is left out, as it
        // would have been a moment later).
        let rows = if page.is_empty() {
            Vec::new()
        } else {
            let mut sql = Sql::new(&format!(
                "SELECT {} FROM memories m WHERE ",
                crate::search::MEMORY_COLUMNS
            ));
            set.push(&mut sql);
            for (i, &(_, seq)) in page.iter().enumerate() {
                sql.push(if i == 0 { " AND m.seq IN (" } else { ", " })
                    .bind_i64(seq);
            }
            sql.push(") ORDER BY m.created_at, m.seq");
            sql.query().fetch_all(&mut *conn).await.db("team export")?
        };
        // Given back before the items look up successors on a connection
        // of their own: holding one while waiting for another, a pool's
        // worth of exports at once would wait on each other until the
        // pool's timeout.
        drop(conn);
        Ok(TeamExportPage {
            team,
            items: self.export_items(caller, &rows, &set).await?,
            next,
        })
    }

    /// The team's slug and what its export holds, for `caller`: a live
    /// team's admins export its own scopes; a deleted team's admins of that
    /// moment (granted at the deletion), the steward's memories until the
    /// purge. Anyone else: the team does not exist.
    async fn team_export_set(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        slug: &str,
    ) -> Result<(String, ExportSet), ToolError> {
        let Some(team) = self.team_row(&mut *conn, slug, For::Reading).await? else {
            return Err(no_team(slug));
        };
        if team.deleted_at.is_some() {
            let granted: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM team_export_grants WHERE team_id = $1 AND user_id = $2",
            )
            .bind(&team.id)
            .bind(&caller.user_id)
            .fetch_one(&mut *conn)
            .await
            .db("export grant")?;
            if granted == 0 || team.purge_after.is_some_and(|p| p <= self.now()) {
                return Err(no_team(slug));
            }
            let steward = team.steward_id.clone().ok_or_else(ToolError::internal)?;
            return Ok((team.slug, ExportSet::Steward(steward)));
        }
        self.admin_of(&mut *conn, caller, slug, For::Reading)
            .await?;
        let scopes = self
            .team_scopes(&mut *conn, &team)
            .await?
            .into_iter()
            .filter(|(_, owned)| *owned)
            .map(|(p, _)| p)
            .collect();
        Ok((team.slug, ExportSet::Scopes(scopes)))
    }

    /// A team export's memories: each names its successor when the export
    /// holds it too (on this page or another) or the admin can read it,
    /// and not otherwise (a member's private rewrite stays theirs).
    async fn export_items(
        &self,
        caller: &Caller,
        rows: &[sqlx::any::AnyRow],
        set: &ExportSet,
    ) -> Result<Vec<zm_contracts::Memory>, ToolError> {
        let named = rows
            .iter()
            .map(|r| {
                Ok(col::<Option<String>>(r, "superseded_by")?
                    .map(zm_contracts::MemoryId::from_trusted))
            })
            .collect::<Result<Vec<_>, ToolError>>()?;
        let mut items = self.memories_served_to(caller, rows).await?;
        // Successors hidden from the admin that the export holds anyway.
        let mut hidden: Vec<&str> = items
            .iter()
            .zip(&named)
            .filter(|(m, s)| m.superseded_by.is_none() && s.is_some())
            .filter_map(|(_, s)| s.as_ref().map(zm_contracts::MemoryId::as_str))
            .collect();
        hidden.sort_unstable();
        hidden.dedup();
        let mut exported = std::collections::HashSet::new();
        for chunk in hidden.chunks(crate::memories::SUCCESSORS_PER_QUERY) {
            let mut sql = Sql::new("SELECT m.id AS id FROM memories m WHERE m.id IN ");
            sql.bind_list(chunk.iter().copied()).push(" AND ");
            set.push(&mut sql);
            for r in sql
                .query()
                .fetch_all(&self.pool)
                .await
                .db("exported successors")?
            {
                exported.insert(col::<String>(&r, "id")?);
            }
        }
        for (m, successor) in items.iter_mut().zip(named) {
            if m.superseded_by.is_none()
                && successor
                    .as_ref()
                    .is_some_and(|s| exported.contains(s.as_str()))
            {
                m.superseded_by = successor;
            }
        }
        Ok(items)
    }

    /// Erase deleted teams whose retention has ended: the steward's
    /// memories and rows, the steward, the team. Returns how many teams.
    /// `serve` runs it a few minutes after start and every hour. A team
    /// whose erasure fails is logged and left for the next run; the teams
    /// after it are erased all the same.
    pub async fn purge_deleted_teams(&self) -> Result<u64, ToolError> {
        let now = self.now();
        let due: Vec<(String, Option<String>)> = {
            let rows = sqlx::query("SELECT id, steward_id FROM teams WHERE deleted_at IS NOT NULL AND purge_after <= $1 ORDER BY id")
                .bind(now)
                .fetch_all(&self.pool)
                .await
                .db("teams due")?;
            let mut v = Vec::with_capacity(rows.len());
            for r in &rows {
                v.push((col(r, "id")?, col(r, "steward_id")?));
            }
            v
        };
        let mut purged = 0;
        for (team_id, steward) in due {
            match self.purge_team(&team_id, steward.as_deref()).await {
                Ok(()) => purged += 1,
                Err(e) => tracing::warn!(
                    target: "zm_store",
                    team = %team_id,
                    error = %e.message,
                    "erasing a deleted team failed; the next run tries it again"
                ),
            }
        }
        Ok(purged)
    }

    /// Erase one deleted team. Its steward's memories go first, a chunk
    /// ([`PURGE_CHUNK`]) per transaction: one transaction for a team of
    /// a hundred thousand held SQLite's only writer (and every write of
    /// the server behind it) for as long as the whole delete took. Nobody
    /// reads those memories any more (the team is gone from every read
    /// set, its export refused past its retention), so a purge cut short
    /// leaves nothing half-visible: the next run goes on where it stopped.
    async fn purge_team(&self, team_id: &str, steward: Option<&str>) -> Result<(), ToolError> {
        if let Some(steward) = steward {
            // Others' memories the team's superseded keep their state but
            // lose the pointer, as at an account's erasure (one scan of
            // the table, not one per chunk).
            let mut tx = self.write_tx().await?;
            sqlx::query(
                "UPDATE memories SET superseded_by = NULL WHERE owner_id <> $1 \
                 AND superseded_by IN (SELECT id FROM memories WHERE owner_id = $1)",
            )
            .bind(steward)
            .execute(&mut *tx)
            .await
            .db("sever supersedes")?;
            tx.commit().await.db("commit sever supersedes")?;
            loop {
                let mut tx = self.write_tx().await?;
                let ids: Vec<String> = sqlx::query_scalar(
                    "SELECT id FROM memories WHERE owner_id = $1 ORDER BY id LIMIT $2",
                )
                .bind(steward)
                .bind(PURGE_CHUNK)
                .fetch_all(&mut *tx)
                .await
                .db("purge chunk")?;
                if ids.is_empty() {
                    break;
                }
                // (Their links, conflicts, rules, vectors and counts go
                // with them: every reference to a memory cascades.)
                let mut sql = Sql::new("DELETE FROM memories WHERE owner_id = ");
                sql.bind_str(steward).push(" AND id IN ").bind_list(ids);
                let gone = sql.query().execute(&mut *tx).await.db("purge memories")?;
                tx.commit().await.db("commit purge chunk")?;
                // (Nothing deleted of what was just read: the final
                // transaction below takes whatever is left.)
                if gone.rows_affected() == 0 {
                    break;
                }
            }
        }
        let mut tx = self.write_tx().await?;
        if let Some(steward) = steward {
            for (what, sql) in [
                (
                    "purge conflicts",
                    "DELETE FROM conflicts WHERE owner_id = $1",
                ),
                (
                    "purge links",
                    "DELETE FROM memory_links WHERE owner_id = $1",
                ),
                ("purge rules", "DELETE FROM rules WHERE owner_id = $1"),
                // Anything written since the chunks ran (nothing should).
                ("purge memories", "DELETE FROM memories WHERE owner_id = $1"),
                ("purge scopes", "DELETE FROM scopes WHERE owner_id = $1"),
                ("purge steward", "DELETE FROM users WHERE id = $1"),
            ] {
                sqlx::query(sql)
                    .bind(steward)
                    .execute(&mut *tx)
                    .await
                    .db(what)?;
            }
        }
        sqlx::query("DELETE FROM teams WHERE id = $1")
            .bind(team_id)
            .execute(&mut *tx)
            .await
            .db("purge team")?;
        tx.commit().await.db("commit purge")?;
        Ok(())
    }

    /// The teams' scopes a user reaches, each with its team's slug: what
    /// a default read set adds and what labels a hit with its team.
    pub(crate) async fn team_scopes_of(
        &self,
        conn: &mut sqlx::AnyConnection,
        user_id: &str,
    ) -> Result<Vec<(String, String)>, ToolError> {
        let rows = sqlx::query(
            "SELECT t.scope AS scope, t.slug AS slug FROM teams t JOIN scope_members sm ON sm.scope = t.scope \
             WHERE sm.user_id = $1 AND t.deleted_at IS NULL \
             UNION ALL SELECT tp.scope AS scope, t.slug AS slug FROM team_projects tp JOIN teams t ON t.scope = tp.team_scope \
             JOIN scope_members sm ON sm.scope = tp.team_scope WHERE sm.user_id = $1 AND t.deleted_at IS NULL",
        )
        .bind(user_id)
        .fetch_all(&mut *conn)
        .await
        .db("team scopes of")?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push((col(r, "scope")?, col(r, "slug")?));
        }
        // In byte order: a project shared with several teams is labelled
        // with the first slug, the same on every backend and every call.
        out.sort();
        Ok(out)
    }

    /// Does a team read this scope: the team's own scope or project, or a
    /// project shared with a team?
    pub(crate) async fn team_reads(
        &self,
        conn: &mut sqlx::AnyConnection,
        path: &str,
    ) -> Result<bool, ToolError> {
        if !scope::is_shareable(path) {
            return Ok(false);
        }
        if let Some(slug) = team_slug_of(path) {
            let live: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM teams WHERE slug = $1 AND deleted_at IS NULL",
            )
            .bind(slug)
            .fetch_one(&mut *conn)
            .await
            .db("team of scope")?;
            return Ok(live > 0);
        }
        let shared: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM team_projects WHERE scope = $1")
            .bind(path)
            .fetch_one(&mut *conn)
            .await
            .db("shared project")?;
        Ok(shared > 0)
    }

    /// On PostgreSQL, hold (`FOR NO KEY UPDATE`, in team-id order, the
    /// order every change of several teams takes) the rows of every team
    /// `user_id` belongs to, until the transaction ends: a change of the
    /// account that bears on those teams (its erasure, disabling it) then
    /// takes turns with their changes. Nothing on SQLite, whose writes
    /// take turns already.
    ///
    /// With `invited`, also the teams of the open invitations the account
    /// sent or was sent (an erasure withdraws those, writing to their
    /// logs), in the same statement, in team order.
    pub(crate) async fn hold_teams_of_member(
        &self,
        conn: &mut sqlx::AnyConnection,
        user_id: &str,
        invited: bool,
    ) -> Result<(), ToolError> {
        if self.backend != crate::db::Backend::Postgres {
            return Ok(());
        }
        let mut sql = Sql::new(
            "SELECT t.id FROM teams t WHERE t.scope IN (SELECT scope FROM scope_members WHERE user_id = ",
        );
        sql.bind_str(user_id).push(")");
        if invited {
            sql.push(
                " OR t.id IN (SELECT i.team_id FROM team_invitations i WHERE i.accepted_at IS NULL AND i.revoked_at IS NULL AND (i.invited_by = ",
            )
            .bind_str(user_id)
            .push(" OR i.email = (SELECT email FROM users WHERE id = ")
            .bind_str(user_id)
            .push(")))");
        }
        sql.push(" ORDER BY t.id FOR NO KEY UPDATE");
        sql.query()
            .fetch_all(&mut *conn)
            .await
            .db("hold the member's teams")?;
        Ok(())
    }

    /// Refuse to erase an account that is the last admin of a live team:
    /// the only one whose account is enabled (a disabled admin runs
    /// nothing, as in [`Store::other_admins`]).
    pub(crate) async fn check_not_last_admin(
        &self,
        conn: &mut sqlx::AnyConnection,
        user_id: &str,
    ) -> Result<(), ToolError> {
        if self.backend == crate::db::Backend::Postgres {
            // In turn with changes to every team they belong to (see
            // [`For::Change`]): a removal running beside the erasure would
            // otherwise hand over rows the erasure is deleting. And to the
            // teams whose open invitations it sent or is sent: withdrawing
            // those writes to their logs. All of them before the account's
            // row, in team order ([`Store::withdraw_open`] takes them
            // again at no cost).
            self.hold_teams_of_member(conn, user_id, true).await?;
            // Then the account's row: a team it is creating or joining
            // meanwhile (its membership row holds this row until it
            // commits) is counted below, not left without an admin when
            // the erasure removes its memberships. After the teams, as a
            // removal's hand-over to the account takes them.
            sqlx::query("SELECT id FROM users WHERE id = $1 FOR UPDATE")
                .bind(user_id)
                .fetch_optional(&mut *conn)
                .await
                .db("hold the account")?;
        }
        let teams: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT t.slug FROM teams t JOIN scope_members sm ON sm.scope = t.scope AND sm.user_id = $1 AND sm.role = $2 \
             WHERE t.deleted_at IS NULL AND NOT EXISTS (SELECT 1 FROM scope_members o JOIN users ou ON ou.id = o.user_id \
             WHERE o.scope = t.scope AND o.role = $2 AND o.user_id <> $1 AND ou.disabled_at IS NULL) \
             ORDER BY {}",
            self.backend.bytewise("t.slug")
        )))
        .bind(user_id)
        .bind(Role::Admin.as_str())
        .fetch_all(&mut *conn)
        .await
        .db("last admin")?;
        if teams.is_empty() {
            return Ok(());
        }
        Err(ToolError::conflict(format!(
            "You are the last admin of team(s) {} whose account is enabled: make another member admin or delete the team(s) first.",
            teams.join(", ")
        )))
    }

    /// A team's own project being written for the first time by one of its
    /// writers: record it as the team's, so every member reaches it.
    /// `None` when `path` is not a live team's project or the caller may
    /// not write it.
    pub(crate) async fn bootstrap_team_project(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        path: &str,
    ) -> Result<Option<()>, ToolError> {
        let Some(slug) = team_slug_of(path) else {
            return Ok(None);
        };
        if path.split('.').count() < 3 {
            return Ok(None);
        }
        // Read, not locked for change: the write already holds the team's
        // row for share (`hold_teams_of`), which keeps team changes out;
        // asking for more would deadlock two first writes at once.
        let Some(team) = self.team_row(conn, slug, For::Reading).await? else {
            return Ok(None);
        };
        if team.deleted_at.is_some() {
            return Ok(None);
        }
        let role = self.direct_role(conn, &caller.user_id, &team.scope).await?;
        if !role.is_some_and(Role::can_write) {
            return Ok(None);
        }
        let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scopes WHERE path = $1")
            .bind(path)
            .fetch_one(&mut *conn)
            .await
            .db("team project exists")?;
        // A scope that exists already is this team's project only if
        // `team_projects` says so (another writer's first write may have
        // made it since the role was read): checked below either way.
        if exists == 0 {
            let now = self.now();
            let steward = team.steward_id.clone().ok_or_else(ToolError::internal)?;
            // Two first writes at once (PostgreSQL) both get here: the second
            // finds the first's rows, and lands in the same project.
            sqlx::query(
                "INSERT INTO scopes (path, kind, owner_id, created_at) VALUES ($1, 'team', $2, $3) ON CONFLICT (path) DO NOTHING",
            )
            .bind(path)
            .bind(&steward)
            .bind(now)
            .execute(&mut *conn)
            .await
            .db("team project scope")?;
            sqlx::query("INSERT INTO team_projects (team_scope, scope, owned, added_by, created_at) VALUES ($1, $2, 1, $3, $4) ON CONFLICT (team_scope, scope) DO NOTHING")
                .bind(&team.scope)
                .bind(path)
                .bind(&caller.user_id)
                .bind(now)
                .execute(&mut *conn)
                .await
                .db("team project")?;
        }
        let ours: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM team_projects WHERE team_scope = $1 AND scope = $2 AND owned = 1",
        )
        .bind(&team.scope)
        .bind(path)
        .fetch_one(&mut *conn)
        .await
        .db("team project made")?;
        Ok((ours > 0).then_some(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_slugs_come_from_team_paths_only() {
        assert_eq!(team_slug_of("team.acme"), Some("acme"));
        assert_eq!(team_slug_of("team.acme.web"), Some("acme"));
        assert_eq!(team_slug_of("team.usr_abc_01.x"), None);
        assert_eq!(team_slug_of("proj.acme.web"), None);
    }
}

/// What makes an invitation (`team_invitations i`) open: not accepted,
/// not withdrawn, and not expired at the time bound right after it. Every
/// list of open invitations and every withdrawal by a change of
/// membership reads it from here.
const OPEN_INVITATION: &str = "i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > ";

/// Which open invitations [`Store::open_invitations`] reads.
#[derive(Clone, Copy)]
enum OpenTo<'a> {
    /// A team's, addressed to this user's email.
    Address { team: &'a str, user_id: &'a str },
    /// A team's, sent by this user.
    SentBy { team: &'a str, user_id: &'a str },
    /// Any live team's, sent by or addressed to this account.
    Account(&'a str),
}
