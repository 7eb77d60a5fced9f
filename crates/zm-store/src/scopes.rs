//! Scopes: who may read and write where, project hints, read sets and
//! thread tokens.

use zm_contracts::scope::{self, ScopeSpec};
use zm_contracts::{IdKind, ToolError, prefixes::Prefix};

use crate::db::DbResult;
use crate::hint;
use crate::rows::parse_stored;
use crate::sql::Sql;
use crate::store::{Caller, Store};
use crate::threads::{self, Conversation, Thread};

/// The role a member holds in a project or team scope
/// (`scope_members.role`): the contract's [`zm_contracts::TeamRole`].
pub use zm_contracts::TeamRole as Role;

/// The scopes a read covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadSet {
    /// Everything the caller can see.
    All,
    /// These scopes (still filtered by visibility).
    Scopes(Vec<String>),
}

/// The visibility predicate for memories aliased `m`: the caller's own, or
/// shared into a scope the caller is a member of. A filter only, for a
/// query driven by ids or links: the subquery, and the columns written as
/// expressions (`m.owner_id || ''`), which no index can serve, so that
/// neither planner drives such a lookup through an index of everyone's
/// memories (SQLite answered recall's lookup of a hundred ids with a
/// `MULTI-INDEX OR` over the owner's index and the shared one: 66 ms
/// instead of 0.5 at 200,000 memories). A query the visibility drives, and
/// a full-text leg, take [`Visible`].
/// Does changing one's own memory in `path` with `visibility` take the
/// writer role there? Only a shared one in a project or team scope, which
/// its members read ([`Store::may_change_own_in`] decides by it; the
/// dashboard offers no change it would refuse).
pub(crate) fn changing_own_needs_writer(path: &str, visibility: zm_contracts::Visibility) -> bool {
    visibility == zm_contracts::Visibility::Shared && scope::is_shareable(path)
}

pub(crate) fn push_visible(sql: &mut Sql, alias: &str, user_id: &str) {
    sql.push(&format!("(({alias}.owner_id || '') = "))
        .bind_str(user_id)
        .push(&format!(
            " OR ({alias}.visibility = 'shared' AND ({alias}.scope || '') IN ("
        ));
    crate::teams::push_member_scopes(sql, user_id);
    sql.push(")))");
}

/// The visibility predicate of one caller, for a query that the visibility
/// itself drives (a page, a count, a chart of what they read, a briefing's
/// open loops) or a full-text leg (a common word matches every user's
/// rows). Both indexes it needs exist (the owner's, and the shared
/// memories' by scope: migration 18); how a planner can use them differs:
/// - PostgreSQL: the member scopes listed, `owner = me OR (shared AND
///   scope IN (list))`: its planner weighs the two indexes by their
///   statistics for this very user (`BitmapOr`) or walks.
/// - SQLite keeps no per-value statistics, so the store decides from the
///   per-user counts `storage_usage` keeps: a caller who reads at most an
///   eighth of all memories gets their rows looked up (`m.seq IN` their
///   own ∪ their scopes' shared, each by its index); anyone else the
///   filter ([`push_visible`]), which the walk newest first serves best.
///   A full-text leg is driven by the match and filtered; a small
///   reader's match is first narrowed inside the index to their owner
///   and scope tokens ([`Visible::fts_tenants`], migration 19).
#[derive(Debug, Clone)]
pub(crate) struct Visible {
    user_id: String,
    form: VisibleForm,
}

#[derive(Debug, Clone)]
enum VisibleForm {
    /// [`push_visible`].
    Filter,
    /// PostgreSQL: the member scopes listed.
    Listed(Vec<String>),
    /// SQLite, a small reader: their rows looked up by `seq`.
    LookedUp(Vec<String>),
    /// SQLite, a small reader's full-text leg: [`push_visible`], and the
    /// match narrowed in the index to their owner and scopes' tokens
    /// ([`Visible::fts_tenants`]).
    Tenants(Vec<String>),
}

impl Visible {
    pub(crate) fn push(&self, sql: &mut Sql, alias: &str) {
        match &self.form {
            VisibleForm::Filter | VisibleForm::Tenants(_) => {
                push_visible(sql, alias, &self.user_id);
            }
            VisibleForm::Listed(scopes) => {
                sql.push(&format!("({alias}.owner_id = "))
                    .bind_str(&self.user_id)
                    .push(&format!(
                        " OR ({alias}.visibility = 'shared' AND {alias}.scope IN "
                    ))
                    .bind_list(scopes.iter().cloned())
                    .push("))");
            }
            VisibleForm::LookedUp(scopes) => {
                sql.push(&format!(
                    "{alias}.seq IN (SELECT seq FROM memories WHERE owner_id = "
                ))
                .bind_str(&self.user_id)
                .push(
                    " UNION ALL SELECT seq FROM memories WHERE visibility = 'shared' AND scope IN ",
                )
                .bind_list(scopes.iter().cloned())
                .push(")");
            }
        }
    }

    /// SQLite: the `fts_tenant` column filter of a small reader's
    /// full-text match (`fts_tenant : ("o…" OR "s…" …)`: their own memories
    /// and the shared ones of their scopes, as migration 19 writes the
    /// tokens), so the index intersects before any row is read; `None`
    /// for everyone else, whom the walk newest first serves (the owner
    /// token of a user holding most of the file is as long as the match).
    /// A prefilter only: [`Visible::push`] still decides.
    pub(crate) fn fts_tenants(&self) -> Option<String> {
        let VisibleForm::Tenants(scopes) = &self.form else {
            return None;
        };
        let mut tokens = vec![fts_tenant_token('o', &self.user_id)];
        tokens.extend(scopes.iter().map(|s| fts_tenant_token('s', s)));
        Some(format!("fts_tenant : ({})", tokens.join(" OR ")))
    }
}

/// One token of the `fts_tenant` column, quoted for `MATCH`: `tag` and
/// the value's bytes in hex, as migration 19's `hex()` writes it (the
/// tokenizer folds the case). Hex digits only: no quote or operator.
fn fts_tenant_token(tag: char, value: &str) -> String {
    format!("\"{tag}{}\"", hex::encode_upper(value.as_bytes()))
}

/// A SQLite caller reads "few" memories when they are at most this share
/// (1 / N) of all of them: looking their rows up then beats walking.
const FEW_OF: i64 = 8;

/// SQLite: `(own, bound)` when `user_id` owns at most `bound` = 1 /
/// [`FEW_OF`] of all memories (by `storage_usage`) in a store of at least
/// 1,000; `None` otherwise.
async fn owns_few(
    conn: &mut sqlx::AnyConnection,
    user_id: &str,
) -> Result<Option<(i64, i64)>, ToolError> {
    let row = sqlx::query(
        "SELECT COALESCE((SELECT memories FROM storage_usage WHERE user_id = $1), 0) AS own, \
                COALESCE((SELECT SUM(memories) FROM storage_usage), 0) AS total",
    )
    .bind(user_id)
    .fetch_one(&mut *conn)
    .await
    .db("read counts")?;
    let own: i64 = crate::rows::col(&row, "own")?;
    let total: i64 = crate::rows::col(&row, "total")?;
    let bound = total / FEW_OF;
    Ok((total >= 1_000 && own <= bound).then_some((own, bound)))
}

impl Store {
    /// SQLite: the `fts_tenant` filter of `owner`'s own memories when they
    /// own few of the file ([`owns_few`]), for a probe of their own
    /// memories (the near-duplicate check at `remember`): the index
    /// intersects the match with their postings before any row is read.
    /// `None` for a user who owns much of it, and on PostgreSQL (whose
    /// probe reads only the owner's postings already).
    pub(crate) async fn own_fts_tenant(
        &self,
        conn: &mut sqlx::AnyConnection,
        owner: &str,
    ) -> Result<Option<String>, ToolError> {
        if self.backend != crate::db::Backend::Sqlite || owns_few(conn, owner).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(format!(
            "fts_tenant : ({})",
            fts_tenant_token('o', owner)
        )))
    }

    /// What `caller` reads, for a query the visibility drives
    /// ([`Visible`]): read now, as of this moment (on PostgreSQL one query;
    /// on SQLite one to three, all by index).
    pub(crate) async fn visible_to(&self, caller: &Caller) -> Result<Visible, ToolError> {
        self.visible(caller, VisibleForm::LookedUp).await
    }

    /// What a full-text leg filters by: the same rule, listed on
    /// PostgreSQL; on SQLite the match drives, filtered, and narrowed in
    /// the index to a small reader's tokens ([`Visible::fts_tenants`]).
    pub(crate) async fn visible_in_match(&self, caller: &Caller) -> Result<Visible, ToolError> {
        self.visible(caller, VisibleForm::Tenants).await
    }

    /// [`Visible`] for `caller`: the member scopes listed on PostgreSQL; on
    /// SQLite `few` of them for a small reader, else the filter.
    async fn visible(
        &self,
        caller: &Caller,
        few: fn(Vec<String>) -> VisibleForm,
    ) -> Result<Visible, ToolError> {
        let user_id = caller.user_id.clone();
        let form = match self.backend {
            crate::db::Backend::Postgres => {
                VisibleForm::Listed(self.member_scopes(&user_id).await?)
            }
            crate::db::Backend::Sqlite => match self.few_readers_scopes(&user_id).await? {
                Some(scopes) => few(scopes),
                None => VisibleForm::Filter,
            },
        };
        Ok(Visible { user_id, form })
    }

    /// SQLite: the member scopes of `user_id` when they read at most 1 /
    /// [`FEW_OF`] of all memories (their own by `storage_usage`, their
    /// scopes' shared ones counted by index up to that bound); `None`
    /// otherwise — decided from the counts first, so a user holding much
    /// of the file costs one small query. A store under 1,000 memories
    /// never has a small reader: walking it is cheap.
    async fn few_readers_scopes(&self, user_id: &str) -> Result<Option<Vec<String>>, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let Some((own, bound)) = owns_few(&mut conn, user_id).await? else {
            return Ok(None);
        };
        drop(conn);
        let scopes = self.member_scopes(user_id).await?;
        if scopes.is_empty() {
            return Ok(Some(scopes));
        }
        let mut sql = Sql::new(
            "SELECT COUNT(*) AS n FROM (SELECT 1 FROM memories WHERE visibility = 'shared' AND scope IN ",
        );
        sql.bind_list(scopes.iter().cloned())
            .push(" LIMIT ")
            .bind_i64(bound - own + 1)
            .push(")");
        let row = sql.query().fetch_one(&self.pool).await.db("shared count")?;
        let shared: i64 = crate::rows::col(&row, "n")?;
        Ok((own + shared <= bound).then_some(scopes))
    }
}

/// A hint resolved for the caller; `unbound` holds the key when no binding
/// records it yet.
struct ResolvedHint {
    scope: String,
    unbound: Option<hint::ProjectKey>,
}

/// The read-set predicate for memories aliased `m`.
pub(crate) fn push_read_set(sql: &mut Sql, alias: &str, set: &ReadSet) {
    push_scope_in(sql, &format!("{alias}.scope"), set);
}

/// The read-set predicate as a filter only, for a query that looks
/// memories up by id: `(m.scope || '') IN (…)` is the same test, but no
/// index on `scope` can serve it, so SQLite keeps driving by the ids.
/// (With the plain predicate it drove by `memories_live_scope` and read a
/// whole project to keep 200 ids: 66 ms instead of 0.5 at 100k memories.)
pub(crate) fn push_read_set_filter(sql: &mut Sql, alias: &str, set: &ReadSet) {
    push_scope_in(sql, &format!("({alias}.scope || '')"), set);
}

/// `scope IN (the read set)`, or true for every scope.
fn push_scope_in(sql: &mut Sql, scope: &str, set: &ReadSet) {
    match set {
        ReadSet::All => {
            sql.push("1 = 1");
        }
        ReadSet::Scopes(scopes) => {
            sql.push(&format!("{scope} IN "));
            sql.bind_list(scopes.iter().cloned());
        }
    }
}

/// Canonicalise a legacy `proj.<slug>` path to the caller's namespace.
/// (`team.<slug>` is the team's own scope and stays as it is.)
pub fn canonical_path(caller: &Caller, path: &str) -> String {
    let labels: Vec<&str> = path.split('.').collect();
    if labels.len() == 2 && labels[0] == "proj" {
        format!(
            "{}.{}.{}",
            labels[0],
            scope::label_for(&caller.user_id),
            labels[1]
        )
    } else {
        path.to_string()
    }
}

impl Store {
    /// The caller's role in a shareable scope, if any: the higher of a
    /// direct membership and what a team grants — a team's own project
    /// its members' team role, a project shared with a team at most
    /// `writer` (a team admin does not administer a member's project).
    pub(crate) async fn role_in<'e, E>(
        &self,
        exec: E,
        user_id: &str,
        path: &str,
    ) -> Result<Option<Role>, ToolError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT role, 2 AS via FROM scope_members WHERE scope = $1 AND user_id = $2 \
             UNION ALL SELECT tsm.role, tp.owned FROM team_projects tp JOIN scope_members tsm ON tsm.scope = tp.team_scope \
             WHERE tp.scope = $1 AND tsm.user_id = $2",
        )
        .bind(path)
        .bind(user_id)
        .fetch_all(exec)
        .await
        .db("scope role")?;
        let mut best: Option<Role> = None;
        for (raw, via) in rows {
            // An unknown stored role is a corrupt row, never "no access".
            let mut role: Role = parse_stored(&raw, "role", &format!("{path}/{user_id}"))?;
            if via == 0 && role == Role::Admin {
                role = Role::Writer;
            }
            if best.is_none_or(|b| b.rank() < role.rank()) {
                best = Some(role);
            }
        }
        Ok(best)
    }

    /// Make sure a shareable scope exists, creating it with `owner` as admin.
    pub(crate) async fn bootstrap_scope(
        &self,
        tx: &mut sqlx::AnyConnection,
        owner: &str,
        path: &str,
    ) -> Result<(), ToolError> {
        let kind = if path.starts_with("team.") {
            "team"
        } else {
            "project"
        };
        let now = self.now();
        sqlx::query("INSERT INTO scopes (path, kind, owner_id, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (path) DO NOTHING")
            .bind(path)
            .bind(kind)
            .bind(owner)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("bootstrap scope")?;
        let scope_owner: String = sqlx::query_scalar("SELECT owner_id FROM scopes WHERE path = $1")
            .bind(path)
            .fetch_one(&mut *tx)
            .await
            .db("scope owner")?;
        if scope_owner == owner {
            sqlx::query("INSERT INTO scope_members (scope, user_id, role, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (scope, user_id) DO NOTHING")
                .bind(path)
                .bind(owner)
                .bind(Role::Admin.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await
                .db("bootstrap member")?;
        }
        Ok(())
    }

    /// On PostgreSQL, hold the rows of the teams that decide who writes
    /// each of `paths` (their own teams, the teams they are shared with)
    /// until the write commits (`FOR SHARE`): a team change (`FOR NO KEY
    /// UPDATE`, see `teams.rs`) waits for writes that already passed the
    /// role check and then hands their memories over too, and a write that
    /// comes after it reads the roles it left. Without it a member's write
    /// committed just after their removal's hand-over stayed theirs.
    /// Several paths are held in one statement, in team-id order, the order
    /// a change of several teams (`delete_account`) takes them in: held one
    /// path at a time, two teams could be taken in the opposite order and
    /// deadlock. SQLite's write transactions take turns already.
    pub(crate) async fn hold_teams_of(
        &self,
        tx: &mut sqlx::AnyConnection,
        paths: &[&str],
    ) -> Result<(), ToolError> {
        if self.backend != crate::db::Backend::Postgres || paths.is_empty() {
            return Ok(());
        }
        let own_teams = paths
            .iter()
            .filter_map(|p| crate::teams::team_slug_of(p).map(|slug| format!("team.{slug}")));
        let mut sql = Sql::new("SELECT t.id FROM teams t WHERE t.scope IN ");
        sql.bind_list(own_teams)
            .push(" OR t.scope IN (SELECT team_scope FROM team_projects WHERE scope IN ")
            .bind_list(paths.iter().copied())
            .push(") ORDER BY t.id FOR SHARE");
        sql.query()
            .fetch_all(&mut *tx)
            .await
            .db("hold the scopes' teams")?;
        Ok(())
    }

    /// May the caller change (forget, close, restore, move away, share
    /// elsewhere) their own memory in `scope` with `visibility`? A private
    /// memory, or one outside project and team scopes, is theirs alone:
    /// yes. A shared one in a project or team scope is what the members
    /// read: it takes the writer or admin role there now, as writing it
    /// did (a writer demoted to reader changes no team content). Holds the
    /// scope's teams first (`hold_teams_of`), like a write into it.
    pub(crate) async fn may_change_own_in(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        path: &str,
        visibility: zm_contracts::Visibility,
    ) -> Result<(), ToolError> {
        if !changing_own_needs_writer(path, visibility) {
            return Ok(());
        }
        self.hold_teams_of(tx, &[path]).await?;
        match self.role_in(&mut *tx, &caller.user_id, path).await? {
            Some(role) if role.can_write() => Ok(()),
            role => Err(ToolError::forbidden(format!(
                "Changing a memory the members of {path} read needs the writer or admin role there; yours is {}.",
                role.map_or("none", Role::as_str)
            ))),
        }
    }

    /// Resolve a write target path for the caller, creating the caller's own
    /// project/team scope on first use. Refuses what the caller cannot write.
    pub(crate) async fn writable_path(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        path: &str,
    ) -> Result<String, ToolError> {
        let path = canonical_path(caller, path);
        let own_label = scope::label_for(&caller.user_id);
        if scope::is_personal(&path) {
            let personal = caller.personal_scope();
            if path == personal || path.starts_with(&format!("{personal}.")) {
                return Ok(path);
            }
            return Err(ToolError::forbidden("You do not have access to this scope"));
        }
        self.hold_teams_of(tx, &[&path]).await?;
        match self.role_in(&mut *tx, &caller.user_id, &path).await? {
            Some(Role::Writer | Role::Admin) => return Ok(path),
            Some(Role::Reader) => {
                return Err(ToolError::forbidden("You do not have access to this scope"));
            }
            None => {}
        }
        if self
            .bootstrap_team_project(tx, caller, &path)
            .await?
            .is_some()
        {
            return Ok(path);
        }
        let labels: Vec<&str> = path.split('.').collect();
        let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scopes WHERE path = $1")
            .bind(&path)
            .fetch_one(&mut *tx)
            .await
            .db("scope exists")?;
        if exists == 0 && labels.len() >= 3 && labels[1] == own_label {
            self.bootstrap_scope(tx, &caller.user_id, &path).await?;
            return Ok(path);
        }
        Err(ToolError::forbidden("You do not have access to this scope"))
    }

    /// Grant a user a role in a shareable scope (created if missing, owned by `granted_by`).
    pub async fn add_scope_member(
        &self,
        granted_by: &str,
        path: &str,
        user_id: &str,
        role: Role,
    ) -> Result<(), ToolError> {
        scope::validate_path(path).map_err(|e| ToolError::validation(e.to_string()))?;
        if !scope::is_shareable(path) {
            return Err(ToolError::validation(
                "only project and team scopes have members",
            ));
        }
        crate::service::rerun_on_contention("add scope member", || {
            self.add_scope_member_once(granted_by, path, user_id, role)
        })
        .await
    }

    /// One attempt at [`Store::add_scope_member`], the path checked.
    async fn add_scope_member_once(
        &self,
        granted_by: &str,
        path: &str,
        user_id: &str,
        role: Role,
    ) -> Result<(), ToolError> {
        let mut tx = self.write_tx().await?;
        // A missing project is made for its grantor only in their own
        // namespace (`proj.<grantor>.…`); anywhere else, and once it
        // exists (made meanwhile by another call too), the grantor must
        // administer it.
        if path.starts_with(&format!("proj.{}.", scope::label_for(granted_by))) {
            self.bootstrap_scope(&mut tx, granted_by, path).await?;
        }
        if self.role_in(&mut *tx, granted_by, path).await? != Some(Role::Admin) {
            return Err(ToolError::forbidden("You do not have access to this scope"));
        }
        sqlx::query(
            "INSERT INTO scope_members (scope, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(path)
        .bind(user_id)
        .bind(role.as_str())
        .bind(self.now())
        .execute(&mut *tx)
        .await
        .db("add member")?;
        tx.commit().await.db("commit member")?;
        Ok(())
    }

    /// What a project hint names for the caller, recording nothing (reads
    /// use this): the caller's binding for it, else the caller's own
    /// `proj.<caller>.<slug>` — whether or not that project exists yet. `None`
    /// when the hint names no project.
    pub async fn resolve_hint(
        &self,
        caller: &Caller,
        raw: &str,
    ) -> Result<Option<String>, ToolError> {
        let mut conn = self.pool.acquire().await.db("acquire")?;
        Ok(self
            .lookup_hint(&mut conn, caller, raw)
            .await?
            .map(|h| h.scope))
    }

    async fn lookup_hint(
        &self,
        conn: &mut sqlx::AnyConnection,
        caller: &Caller,
        raw: &str,
    ) -> Result<Option<ResolvedHint>, ToolError> {
        let Ok(key) = hint::normalize_project_hint(raw) else {
            return Ok(None);
        };
        let bound: Option<String> = sqlx::query_scalar(
            "SELECT scope FROM project_bindings WHERE owner_id = $1 AND kind = $2 AND key = $3",
        )
        .bind(&caller.user_id)
        .bind(key.kind.as_str())
        .bind(&key.key)
        .fetch_optional(&mut *conn)
        .await
        .db("binding lookup")?;
        if let Some(scope) = bound {
            return Ok(Some(ResolvedHint {
                scope,
                unbound: None,
            }));
        }
        let path = scope::project_scope(&caller.user_id, &key.slug);
        let valid = scope::validate_path(&path).is_ok();
        // Their own project of that name wins over a teammate's shared one
        // (an agent attached through the hint, writing without naming it,
        // records no binding: a teammate sharing the same repository would
        // otherwise take over the caller's next session, and publish what
        // it writes to the team), unless a hint of the same kind (another
        // remote, another path) is bound to it: that one is another
        // repository of the same name. One bound through the other kind
        // (the checkout's path, where this is its remote) may well be this
        // repository: it stays private rather than be published.
        if valid {
            let own: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM scopes s WHERE s.path = $1 AND s.owner_id = $2 \
                     AND NOT EXISTS (SELECT 1 FROM project_bindings b WHERE b.scope = s.path AND b.owner_id = $2 AND b.kind = $3)")
                    .bind(&path)
                    .bind(&caller.user_id)
                    .bind(key.kind.as_str())
                    .fetch_one(&mut *conn)
                    .await
                    .db("own project lookup")?;
            if own > 0 {
                return Ok(Some(ResolvedHint {
                    scope: path,
                    unbound: Some(key),
                }));
            }
        }
        // Without a binding or a project of their own, a member working in
        // a repository a teammate shared with their team lands in that
        // shared project.
        let shared: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT pb.scope FROM project_bindings pb JOIN team_projects tp ON tp.scope = pb.scope \
             JOIN scope_members sm ON sm.scope = tp.team_scope \
             WHERE sm.user_id = $1 AND pb.kind = $2 AND pb.key = $3 ORDER BY tp.created_at, {} LIMIT 1",
            self.backend.bytewise("pb.scope")
        )))
        .bind(&caller.user_id)
        .bind(key.kind.as_str())
        .bind(&key.key)
        .fetch_optional(&mut *conn)
        .await
        .db("shared binding lookup")?;
        if let Some(scope) = shared {
            return Ok(Some(ResolvedHint {
                scope,
                unbound: None,
            }));
        }
        if !valid {
            return Ok(None);
        }
        Ok(Some(ResolvedHint {
            scope: path,
            unbound: Some(key),
        }))
    }

    /// Resolve a project hint for a write, inside its transaction: the
    /// first write through a hint creates the project scope (the caller
    /// its admin) and records the binding.
    pub(crate) async fn bind_hint(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        raw: &str,
    ) -> Result<Option<String>, ToolError> {
        let Some(resolved) = self.lookup_hint(tx, caller, raw).await? else {
            return Ok(None);
        };
        let Some(key) = resolved.unbound else {
            // A bound project (the caller's own, or a teammate's shared
            // with their team) takes the write only under the caller's
            // role there, as the same path named explicitly would: a
            // team's reader writes nothing into it through a hint either.
            return self
                .writable_path(tx, caller, &resolved.scope)
                .await
                .map(Some);
        };
        self.bootstrap_scope(tx, &caller.user_id, &resolved.scope)
            .await?;
        sqlx::query(
            "INSERT INTO project_bindings (id, owner_id, kind, key, scope, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (owner_id, kind, key) DO NOTHING",
        )
        .bind(IdKind::ProjectBinding.generate())
        .bind(&caller.user_id)
        .bind(key.kind.as_str())
        .bind(&key.key)
        .bind(&resolved.scope)
        .bind(self.now())
        .execute(&mut *tx)
        .await
        .db("record binding")?;
        Ok(Some(resolved.scope))
    }

    /// The project a write names through its hint, or the refusal: its
    /// message starts with the stable `project_hint_unresolvable:` prefix
    /// and its details name the field.
    pub(crate) async fn hint_for_write(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        raw: &str,
    ) -> Result<String, ToolError> {
        match self.bind_hint(tx, caller, raw).await? {
            Some(s) if scope::is_shareable(&s) => Ok(s),
            _ => Err(ToolError::validation(Prefix::ProjectHintUnresolvable.message(format!(
                "project_hint {raw:?} does not resolve to a project. Pass the repository root path, its git remote URL, or the project name the briefing announced — or use scope \"core\" / \"personal\" for facts that hold outside any project."
            )))
            .with_details(serde_json::json!({"fields": [{"path": "project_hint", "reason": "does not resolve to a project"}]}))),
        }
    }

    /// The project a hint names for an operation its own admin check
    /// decides (sharing it with a team): an unbound hint creates the
    /// caller's project as [`hint_for_write`](Self::hint_for_write) does; a
    /// bound one is returned as it is, without the write's role check and
    /// its hold on the teams the project is shared with (the caller already
    /// holds one team's row for change: taking others here could deadlock
    /// two such shares).
    pub(crate) async fn hint_for_admin(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &Caller,
        raw: &str,
    ) -> Result<String, ToolError> {
        match self.lookup_hint(tx, caller, raw).await? {
            Some(r) if r.unbound.is_none() && scope::is_shareable(&r.scope) => Ok(r.scope),
            _ => self.hint_for_write(tx, caller, raw).await,
        }
    }

    /// The live thread a call carries: the token it echoes, else the one
    /// its connection last received. Anything else reads as none.
    pub(crate) fn thread_of(&self, caller: &Caller, echoed: Option<&str>) -> Option<Thread> {
        let now = self.now();
        let verify = |t: &str| threads::verify(&self.thread_key, &caller.user_id, t, now);
        echoed
            .and_then(verify)
            .or_else(|| caller.thread.as_deref().and_then(verify))
    }

    /// The thread a call carries and the project its session is attached
    /// to, each only while the caller still reaches its project (they may
    /// have left its team, or it was unshared): a dead pin routes no write
    /// and pins no read, and the thread is not handed back.
    pub(crate) async fn live_pins<'c>(
        &self,
        caller: &'c Caller,
        echoed: Option<&str>,
    ) -> Result<(Option<Thread>, Option<&'c str>), ToolError> {
        let thread = match self.thread_of(caller, echoed) {
            Some(t) if self.still_reaches(caller, &t.scope).await? => Some(t),
            _ => None,
        };
        let attached = match caller.attached_project.as_deref() {
            Some(p) if self.still_reaches(caller, p).await? => Some(p),
            _ => None,
        };
        Ok((thread, attached))
    }

    /// Does the caller still reach `path`, a project a thread or a session
    /// was pinned to? Their own projects always (one not written yet has no
    /// row); any other shareable scope while they hold a role there.
    pub(crate) async fn still_reaches(
        &self,
        caller: &Caller,
        path: &str,
    ) -> Result<bool, ToolError> {
        if !scope::is_shareable(path)
            || path.starts_with(&scope::project_scope(&caller.user_id, ""))
        {
            return Ok(true);
        }
        Ok(self
            .role_in(&self.pool, &caller.user_id, path)
            .await?
            .is_some())
    }

    /// Assert a thread for a pinned project (`build_context` only), as a
    /// fresh token — nothing is written. The token is always pinned to the
    /// briefing's project, which a live thread's names unless the call
    /// named another (`project_hint`): a briefing never hands back a thread
    /// for a project other than the one it reports. The conversation is
    /// the client's conversation id when given, else the live thread's,
    /// else the transport session's (or a fresh one).
    pub(crate) fn assert_thread(
        &self,
        caller: &Caller,
        live: Option<&Thread>,
        conversation_id: Option<&str>,
        pinned: &str,
    ) -> Option<Thread> {
        let conversation = match (conversation_id, live) {
            (Some(c), _) => Conversation::client(c),
            (None, Some(t)) => t.conversation,
            (None, None) => caller
                .session_id
                .as_deref()
                .map_or_else(Conversation::fresh, Conversation::transport),
        };
        threads::issue(
            &self.thread_key,
            &caller.user_id,
            conversation,
            pinned,
            self.now(),
        )
    }
}

/// Resolve explicit read scopes: shorthands, legacy paths, `*`.
pub(crate) fn explicit_read_set(caller: &Caller, scopes: &[zm_contracts::ReadScope]) -> ReadSet {
    let mut out = Vec::new();
    for s in scopes {
        match s.spec() {
            ScopeSpec::All => return ReadSet::All,
            other => {
                if let Some(p) = other.resolve(&caller.user_id) {
                    let p = canonical_path(caller, &p);
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
            }
        }
    }
    ReadSet::Scopes(out)
}

/// The pinned read set: the project, then personal and core.
pub(crate) fn pinned_read_set(caller: &Caller, pin: &str) -> ReadSet {
    let mut v = vec![pin.to_string()];
    for s in [caller.personal_scope(), caller.core_scope()] {
        if !v.contains(&s) {
            v.push(s);
        }
    }
    ReadSet::Scopes(v)
}
