//! What the dashboard needs of the store besides the tools: sign-in
//! sessions (migration 0009) and browsing — a filtered, paged list of the
//! memories a user can read, with the count of each filter value. Every
//! read goes through the one visibility predicate
//! ([`crate::scopes::push_visible`]); nothing here decides access anew.

use sqlx::any::AnyRow;
use zm_contracts::{IdKind, Memory, MemoryKind, ToolError};

use crate::db::DbResult;
use crate::identity::{hash_secret, random_secret};
use crate::rows::col;
use crate::scopes::push_visible;
use crate::sql::Sql;
use crate::store::{Caller, Grant, Store, Transport};
use crate::usage::WEEK_MS;

/// How many values of one filter the dashboard lists (the most common).
pub const FACET_VALUES: usize = 30;

/// A session unused this long ends.
pub const SESSION_IDLE_MS: i64 = 12 * 60 * 60 * 1000;
/// A session ends this long after sign-in, used or not.
pub const SESSION_MAX_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// How often a session in use records that it was seen.
const SEEN_EVERY_MS: i64 = 60 * 1000;

/// A signed-in dashboard session.
#[derive(Debug, Clone)]
pub struct WebSession {
    /// `wss_…`: names the session in lists, never authenticates.
    pub id: String,
    pub user_id: String,
    pub email: String,
    pub created_at: i64,
    pub expires_at: i64,
}

impl WebSession {
    /// The caller a dashboard request acts as: the signed-in person, who
    /// proved their password, with every grant (erasing the account still
    /// needs its typed confirmation in the page).
    pub fn caller(&self, request_id: Option<String>) -> Caller {
        Caller {
            user_id: self.user_id.clone(),
            grant: Grant::Full,
            transport: Transport::Dashboard,
            agent_name: Some("dashboard".into()),
            request_id,
            ..Caller::default()
        }
    }
}

/// Which memories a list shows, by their state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryStatus {
    /// Not forgotten, superseded or closed.
    #[default]
    Live,
    /// Live tasks and open questions.
    OpenLoop,
    /// Invalidated without a successor (forgotten, or a closed loop).
    Forgotten,
    /// Replaced by a newer memory.
    Superseded,
    /// Every state.
    All,
}

impl MemoryStatus {
    pub const ALL: [MemoryStatus; 5] = [
        MemoryStatus::Live,
        MemoryStatus::OpenLoop,
        MemoryStatus::Forgotten,
        MemoryStatus::Superseded,
        MemoryStatus::All,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryStatus::Live => "live",
            MemoryStatus::OpenLoop => "open_loop",
            MemoryStatus::Forgotten => "forgotten",
            MemoryStatus::Superseded => "superseded",
            MemoryStatus::All => "all",
        }
    }
    pub fn parse(s: &str) -> Option<MemoryStatus> {
        MemoryStatus::ALL.into_iter().find(|m| m.as_str() == s)
    }
    /// The status's predicate over `m`, as `user_id` sees it: a memory
    /// whose successor they cannot read shows as forgotten (its
    /// `superseded_by` is hidden from them), so it counts as one.
    fn push(self, sql: &mut Sql, user_id: &str) {
        let readable_successor = |sql: &mut Sql| {
            sql.push("EXISTS (SELECT 1 FROM memories s WHERE s.id = m.superseded_by AND ");
            crate::scopes::push_visible(sql, "s", user_id);
            sql.push(")");
        };
        match self {
            MemoryStatus::Live => {
                sql.push(" AND m.invalidated_at IS NULL");
            }
            MemoryStatus::OpenLoop => {
                sql.push(" AND m.invalidated_at IS NULL AND m.kind IN ('task', 'open-question')");
            }
            MemoryStatus::Forgotten => {
                sql.push(" AND m.invalidated_at IS NOT NULL AND (m.superseded_by IS NULL OR NOT ");
                readable_successor(sql);
                sql.push(")");
            }
            MemoryStatus::Superseded => {
                sql.push(" AND m.superseded_by IS NOT NULL AND ");
                readable_successor(sql);
            }
            MemoryStatus::All => {}
        }
    }
}

/// A list's filters; `None` is "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryFilter {
    pub scope: Option<String>,
    pub kind: Option<MemoryKind>,
    pub status: MemoryStatus,
    /// The writing agent's name (`""`: none recorded).
    pub agent: Option<String>,
    /// Written at or after (epoch ms).
    pub since: Option<i64>,
    /// Written before (epoch ms).
    pub until: Option<i64>,
}

/// The facet a count belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Facet {
    Scope,
    Kind,
    Status,
    Agent,
}

impl MemoryFilter {
    /// The predicate over `m`, leaving out one facet's own filter (so its
    /// counts show what choosing another value would give).
    fn push(&self, sql: &mut Sql, user_id: &str, except: Option<Facet>) {
        if except != Some(Facet::Scope)
            && let Some(s) = &self.scope
        {
            sql.push(" AND m.scope = ").bind_str(s);
        }
        if except != Some(Facet::Kind)
            && let Some(k) = self.kind
        {
            sql.push(" AND m.kind = ").bind_str(k.as_str());
        }
        if except != Some(Facet::Status) {
            self.status.push(sql, user_id);
        }
        if except != Some(Facet::Agent)
            && let Some(a) = &self.agent
        {
            if a.is_empty() {
                sql.push(" AND m.agent_name IS NULL");
            } else {
                sql.push(" AND m.agent_name = ").bind_str(a);
            }
        }
        if let Some(t) = self.since {
            sql.push(" AND m.created_at >= ").bind_i64(t);
        }
        if let Some(t) = self.until {
            sql.push(" AND m.created_at < ").bind_i64(t);
        }
    }
}

/// One page of a list, newest first.
#[derive(Debug, Clone)]
pub struct MemoryPage {
    pub items: Vec<Memory>,
    /// Where the next page starts (`seq` of the last row), if there is one.
    pub next: Option<i64>,
}

/// How many memories each filter value would show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facets {
    pub scopes: Vec<(String, u64)>,
    pub kinds: Vec<(String, u64)>,
    pub statuses: Vec<(MemoryStatus, u64)>,
    /// `""` stands for "no agent recorded".
    pub agents: Vec<(String, u64)>,
}

fn counts(rows: &[AnyRow]) -> Result<Vec<(String, u64)>, ToolError> {
    rows.iter()
        .map(|r| {
            let v: Option<String> = col(r, "v")?;
            let n: i64 = col(r, "n")?;
            Ok((v.unwrap_or_default(), u64::try_from(n).unwrap_or(0)))
        })
        .collect()
}

/// `(week, value, count)` rows, weeks counted from the epoch, as (the
/// week's first day in epoch ms, value, count).
fn week_counts(rows: &[AnyRow]) -> Result<Vec<(i64, String, u64)>, ToolError> {
    rows.iter()
        .map(|r| {
            let w: i64 = col(r, "w")?;
            let n: i64 = col(r, "n")?;
            Ok((w * WEEK_MS, col(r, "v")?, u64::try_from(n).unwrap_or(0)))
        })
        .collect()
}

impl Store {
    /// Sign in: a new session for `user_id`, who proved `credential` (the
    /// password just verified); returns the cookie secret (shown to the
    /// browser once, stored only hashed) and the session. Refused
    /// (`unauthorized`) when the account no longer has that password or
    /// is disabled: a `user passwd` or `user disable` that committed while
    /// the password was being checked ends this sign-in too (on PostgreSQL
    /// the account's row is held until the session is stored, so one that
    /// comes later deletes it).
    ///
    /// The sign-in is run again when it lost to concurrent writes (a
    /// PostgreSQL deadlock between sign-ins dropping the same ended
    /// sessions, say), up to four attempts, then `conflict`.
    pub async fn web_session_create(
        &self,
        user_id: &str,
        credential: crate::identity::Credential,
        user_agent: Option<&str>,
    ) -> Result<(String, WebSession), ToolError> {
        crate::service::rerun_on_contention("sign-in", || {
            self.web_session_create_once(user_id, credential, user_agent)
        })
        .await
    }

    async fn web_session_create_once(
        &self,
        user_id: &str,
        credential: crate::identity::Credential,
        user_agent: Option<&str>,
    ) -> Result<(String, WebSession), ToolError> {
        let secret = random_secret(43);
        let id = IdKind::WebSession.generate();
        let now = self.now();
        let expires = now + SESSION_MAX_MS;
        let mut tx = self.write_tx().await?;
        let email = self.hold_signing_in(&mut tx, user_id, credential).await?;
        sqlx::query(
            "INSERT INTO web_sessions (id, token_hash, user_id, created_at, last_seen_at, expires_at, user_agent) VALUES ($1, $2, $3, $4, $4, $5, $6)",
        )
        .bind(&id)
        .bind(hash_secret(&secret))
        .bind(user_id)
        .bind(now)
        .bind(expires)
        .bind(user_agent.map(|u| u.chars().take(200).collect::<String>()))
        .execute(&mut *tx)
        .await
        .db("create web session")?;
        // Sessions past their end are dropped here, at a sign-in, rather
        // than kept forever (each holds a user agent).
        sqlx::query("DELETE FROM web_sessions WHERE expires_at <= $1 OR last_seen_at <= $2")
            .bind(now)
            .bind(now - SESSION_IDLE_MS)
            .execute(&mut *tx)
            .await
            .db("drop ended web sessions")?;
        tx.commit().await.db("commit web session")?;
        Ok((
            secret,
            WebSession {
                id,
                user_id: user_id.to_string(),
                email,
                created_at: now,
                expires_at: expires,
            },
        ))
    }

    /// The live session a cookie secret names: unexpired, idle less than
    /// 12 hours, its account enabled. Marks it seen (at most once a minute).
    pub async fn web_session(&self, secret: &str) -> Result<Option<WebSession>, ToolError> {
        let now = self.now();
        let row = sqlx::query(
            "SELECT s.id AS id, s.user_id AS user_id, u.email AS email, s.created_at AS created_at, \
             s.expires_at AS expires_at, s.last_seen_at AS last_seen_at FROM web_sessions s JOIN users u ON u.id = s.user_id \
             WHERE s.token_hash = $1 AND s.expires_at > $2 AND s.last_seen_at > $3 AND u.disabled_at IS NULL",
        )
        .bind(hash_secret(secret))
        .bind(now)
        .bind(now - SESSION_IDLE_MS)
        .fetch_optional(&self.pool)
        .await
        .db("web session")?;
        let Some(r) = row else { return Ok(None) };
        let session = WebSession {
            id: col(&r, "id")?,
            user_id: col(&r, "user_id")?,
            email: col(&r, "email")?,
            created_at: col(&r, "created_at")?,
            expires_at: col(&r, "expires_at")?,
        };
        let seen: i64 = col(&r, "last_seen_at")?;
        if now - seen >= SEEN_EVERY_MS {
            // Best effort: a sighting missed now is written by the next
            // request (the idle limit is hours, the interval a minute).
            self.note(
                "session seen",
                sqlx::query("UPDATE web_sessions SET last_seen_at = $1 WHERE id = $2")
                    .bind(now)
                    .bind(session.id.clone()),
            )
            .await;
        }
        Ok(Some(session))
    }

    /// Sign out: the session ends now.
    pub async fn web_session_end(&self, secret: &str) -> Result<(), ToolError> {
        sqlx::query("DELETE FROM web_sessions WHERE token_hash = $1")
            .bind(hash_secret(secret))
            .execute(&self.pool)
            .await
            .db("end web session")?;
        Ok(())
    }

    /// One page of the memories the caller can read, newest first,
    /// starting below `before` (a `seq`).
    pub async fn browse_memories(
        &self,
        caller: &Caller,
        filter: &MemoryFilter,
        before: Option<i64>,
        limit: u32,
    ) -> Result<MemoryPage, ToolError> {
        let visible = self.visible_to(caller).await?;
        let mut sql = Sql::new(&format!(
            "SELECT {}, m.seq AS page_seq FROM memories m WHERE ",
            crate::search::MEMORY_COLUMNS
        ));
        visible.push(&mut sql, "m");
        filter.push(&mut sql, &caller.user_id, None);
        if let Some(b) = before {
            sql.push(" AND m.seq < ").bind_i64(b);
        }
        sql.push(" ORDER BY m.seq DESC LIMIT ")
            .bind_i64(i64::from(limit) + 1);
        let mut rows = sql.query().fetch_all(&self.pool).await.db("browse")?;
        let more = rows.len() > usize::try_from(limit).unwrap_or(usize::MAX);
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next = match rows.last() {
            Some(last) if more => Some(col::<i64>(last, "page_seq")?),
            _ => None,
        };
        let items = self.memories_served_to(caller, &rows).await?;
        Ok(MemoryPage { items, next })
    }

    /// How many readable memories each value of each filter would show,
    /// the other filters applied: the [`FACET_VALUES`] most common values
    /// of each.
    pub async fn memory_facets(
        &self,
        caller: &Caller,
        filter: &MemoryFilter,
    ) -> Result<Facets, ToolError> {
        let visible = self.visible_to(caller).await?;
        let group = |facet: Facet, column: &str| {
            let mut sql = Sql::new(&format!(
                "SELECT {column} AS v, COUNT(*) AS n FROM memories m WHERE "
            ));
            visible.push(&mut sql, "m");
            filter.push(&mut sql, &caller.user_id, Some(facet));
            // By the grouped column, not its alias: PostgreSQL takes an
            // output alias only bare, not inside an expression. The empty
            // value (no agent) after the named ones on both engines (they
            // sort NULL at opposite ends); the most common values only.
            sql.push(&format!(
                " GROUP BY {column} ORDER BY n DESC, ({column} IS NULL), {} LIMIT ",
                self.backend.bytewise(column)
            ))
            .bind_i64(i64::try_from(FACET_VALUES).unwrap_or(i64::MAX));
            sql
        };
        let scopes = group(Facet::Scope, "m.scope");
        let kinds = group(Facet::Kind, "m.kind");
        let agents = group(Facet::Agent, "m.agent_name");
        let mut out = Facets {
            scopes: counts(
                &scopes
                    .query()
                    .fetch_all(&self.pool)
                    .await
                    .db("facet scope")?,
            )?,
            kinds: counts(&kinds.query().fetch_all(&self.pool).await.db("facet kind")?)?,
            agents: counts(
                &agents
                    .query()
                    .fetch_all(&self.pool)
                    .await
                    .db("facet agent")?,
            )?,
            statuses: Vec::new(),
        };
        for status in MemoryStatus::ALL {
            let mut sql = Sql::new("SELECT COUNT(*) AS n FROM memories m WHERE ");
            visible.push(&mut sql, "m");
            filter.push(&mut sql, &caller.user_id, Some(Facet::Status));
            status.push(&mut sql, &caller.user_id);
            let row = sql.query().fetch_one(&self.pool).await.db("facet status")?;
            out.statuses
                .push((status, u64::try_from(col::<i64>(&row, "n")?).unwrap_or(0)));
        }
        Ok(out)
    }
}

/// How many scopes, and how many agents, the Insight page charts one by
/// one; the rest are summed.
pub const INSIGHT_VALUES: i64 = 20;

/// What the Insight page charts, over the memories a user can read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Insight {
    /// Memories written per week (the week's first day, epoch ms) and
    /// kind, the last `weeks` weeks, oldest first.
    pub weekly: Vec<(i64, String, u64)>,
    /// Memories written per week and scope, the last `weeks` weeks,
    /// oldest first.
    pub weekly_scopes: Vec<(i64, String, u64)>,
    /// Live memories per scope: the [`INSIGHT_VALUES`] scopes holding
    /// most.
    pub by_scope: Vec<(String, u64)>,
    /// Live memories in the scopes past those (0: none).
    pub other_scopes: u64,
    /// Memories per writing agent (`""`: none recorded): the
    /// [`INSIGHT_VALUES`] that wrote most.
    pub by_agent: Vec<(String, u64)>,
    /// Memories written by the agents past those (0: none).
    pub other_agents: u64,
    /// Live open loops by age: under a week, under a month, under a
    /// quarter, older.
    pub open_loop_ages: [u64; 4],
}

impl Store {
    /// The figures of the Insight page.
    pub async fn insight(&self, caller: &Caller, weeks: i64) -> Result<Insight, ToolError> {
        let now = self.now();
        let from = (now / WEEK_MS - weeks + 1) * WEEK_MS;
        let visible = self.visible_to(caller).await?;
        let mut sql = Sql::new("SELECT (m.created_at / ");
        sql.bind_i64(WEEK_MS)
            .push(") AS w, m.kind AS v, COUNT(*) AS n FROM memories m WHERE ");
        visible.push(&mut sql, "m");
        sql.push(" AND m.created_at >= ")
            .bind_i64(from)
            .push(" GROUP BY w, m.kind ORDER BY w, m.kind");
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("insight weekly")?;
        let weekly = week_counts(&rows)?;
        let mut sql = Sql::new("SELECT (m.created_at / ");
        sql.bind_i64(WEEK_MS)
            .push(") AS w, m.scope AS v, COUNT(*) AS n FROM memories m WHERE ");
        visible.push(&mut sql, "m");
        sql.push(" AND m.created_at >= ")
            .bind_i64(from)
            .push(" GROUP BY w, m.scope ORDER BY w, m.scope");
        let weekly_scopes = week_counts(
            &sql.query()
                .fetch_all(&self.pool)
                .await
                .db("insight weekly scopes")?,
        )?;
        // The groups holding most, each row with the count of all groups
        // (a window over the groups, taken before the limit, in the same
        // statement: what the page sums as the rest is of the same read).
        let group = |column: &str, live: bool| {
            let mut sql = Sql::new(&format!(
                "SELECT {column} AS v, COUNT(*) AS n, CAST(SUM(COUNT(*)) OVER () AS BIGINT) AS total FROM memories m WHERE "
            ));
            visible.push(&mut sql, "m");
            if live {
                sql.push(" AND m.invalidated_at IS NULL");
            }
            // None recorded (NULL) last on both backends, then by code point.
            sql.push(&format!(
                " GROUP BY {column} ORDER BY n DESC, ({column} IS NULL), {} LIMIT ",
                self.backend.bytewise(column)
            ))
            .bind_i64(INSIGHT_VALUES);
            sql
        };
        // What the groups shown leave of the total (0 when none are left).
        let rest = |rows: &[AnyRow], shown: &[(String, u64)]| -> Result<u64, ToolError> {
            let Some(first) = rows.first() else {
                return Ok(0);
            };
            let all = u64::try_from(col::<i64>(first, "total")?).unwrap_or(0);
            Ok(all.saturating_sub(shown.iter().map(|(_, n)| n).sum()))
        };
        let scope_rows = group("m.scope", true)
            .query()
            .fetch_all(&self.pool)
            .await
            .db("insight scopes")?;
        let by_scope = counts(&scope_rows)?;
        let other_scopes = rest(&scope_rows, &by_scope)?;
        let agent_rows = group("m.agent_name", false)
            .query()
            .fetch_all(&self.pool)
            .await
            .db("insight agents")?;
        let by_agent = counts(&agent_rows)?;
        let other_agents = rest(&agent_rows, &by_agent)?;
        // Counted in the database, one row whatever the number of loops.
        let mut ages = Sql::new("SELECT ");
        let bounds = [WEEK_MS, 30 * WEEK_MS / 7, 91 * WEEK_MS / 7];
        let mut lower: Option<i64> = None;
        for (i, b) in bounds.iter().enumerate() {
            ages.push("COALESCE(SUM(CASE WHEN m.created_at > ")
                .bind_i64(now - b);
            if let Some(l) = lower {
                ages.push(" AND m.created_at <= ").bind_i64(now - l);
            }
            ages.push(&format!(" THEN 1 ELSE 0 END), 0) AS b{i}, "));
            lower = Some(*b);
        }
        ages.push("COALESCE(SUM(CASE WHEN m.created_at <= ")
            .bind_i64(now - bounds[2])
            .push(" THEN 1 ELSE 0 END), 0) AS b3 FROM memories m WHERE ");
        visible.push(&mut ages, "m");
        ages.push(" AND m.invalidated_at IS NULL AND m.kind IN ('task', 'open-question')");
        let row = ages
            .query()
            .fetch_one(&self.pool)
            .await
            .db("insight loops")?;
        let mut open_loop_ages = [0u64; 4];
        for (i, slot) in open_loop_ages.iter_mut().enumerate() {
            *slot = u64::try_from(col::<i64>(&row, &format!("b{i}"))?).unwrap_or(0);
        }
        Ok(Insight {
            weekly,
            weekly_scopes,
            by_scope,
            other_scopes,
            by_agent,
            other_agents,
            open_loop_ages,
        })
    }
}

/// What hangs on one memory, as its page shows it (only what the caller
/// can read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryContext {
    /// (link type, the other memory's id, `true` when this memory is the
    /// link's source, the other memory's first characters).
    pub links: Vec<(String, String, bool, String)>,
    /// (entity name, entity type).
    pub entities: Vec<(String, String)>,
    /// (dispute id, verdict, status) of the caller's conflicts about it;
    /// the status is `moot` for a pending one a retired memory settled
    /// (`list_conflicts` leaves those out).
    pub conflicts: Vec<(String, String, String)>,
    /// Is it the caller's own? Only its owner edits (supersedes), forgets,
    /// restores or shares it; a teammate's shared memory is read only.
    pub mine: bool,
    /// The team whose steward holds it (a departed member's, shared in the
    /// team's scopes) when the caller is that team's admin: they may
    /// forget, close or restore it for the steward, and nothing else.
    pub for_team: Option<String>,
    /// A team's steward holds it (a departed member left it to the team)
    /// and the caller is not that team's admin: its admins may forget it,
    /// nobody else changes it.
    pub left_to_team: bool,
    /// The caller's own, shared in a project or team scope where their
    /// role is now reader: they change it no more than any other team
    /// content (`may_change_own_in` refuses), so no page offers it.
    pub reader_only: bool,
    /// The caller's own, in a scope they may no longer write to (their
    /// role there is reader, or they have none: they left): a new version
    /// (an edit) is refused, though a private one they still forget,
    /// close and restore.
    pub edit_refused: bool,
}

/// An MCP-over-HTTP session of the user, as the Access page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSessionInfo {
    pub id: String,
    /// The client's name from its `initialize`, when it sent one.
    pub client: Option<String>,
    pub attached_project: Option<String>,
    pub opened_at: i64,
    pub seen_at: i64,
}

impl Store {
    /// Links, entities and conflicts of a memory the caller can read; one
    /// they cannot is `not_found`, as a foreign id always reads.
    pub async fn memory_context(
        &self,
        caller: &Caller,
        memory_id: &str,
    ) -> Result<MemoryContext, ToolError> {
        let mut out = MemoryContext::default();
        // Whose it is, in one read: the caller's own, or a live team's
        // steward's (which the team's admins may change, and the team's
        // other members see as left to the team).
        let mut conn = self.pool.acquire().await.db("acquire")?;
        let mut sql = Sql::new(
            "SELECT m.owner_id AS owner_id, m.scope AS scope, m.visibility AS visibility, \
             CAST(CASE WHEN EXISTS (SELECT 1 FROM teams t WHERE t.steward_id = m.owner_id AND t.deleted_at IS NULL) \
             THEN 1 ELSE 0 END AS BIGINT) AS stewards \
             FROM memories m WHERE m.id = ",
        );
        sql.bind_str(memory_id).push(" AND ");
        push_visible(&mut sql, "m", &caller.user_id);
        let holder = sql
            .query()
            .fetch_optional(&mut *conn)
            .await
            .db("memory holder")?;
        let Some(row) = holder else {
            return Err(ToolError::not_found(format!(
                "Memory {memory_id} not found."
            )));
        };
        let owner: String = col(&row, "owner_id")?;
        out.mine = owner == caller.user_id;
        if out.mine {
            let visibility: zm_contracts::Visibility = crate::rows::enum_col(&row, "visibility")?;
            let scope: String = col(&row, "scope")?;
            // A new version is a write into the scope, which takes the
            // writer role there even for a private memory.
            if !zm_contracts::scope::is_personal(&scope) {
                let role = self.role_in(&mut *conn, &caller.user_id, &scope).await?;
                let writes = role.is_some_and(zm_contracts::TeamRole::can_write);
                out.edit_refused = !writes;
                out.reader_only =
                    !writes && crate::scopes::changing_own_needs_writer(&scope, visibility);
            }
        }
        if !out.mine && crate::rows::flag_col(&row, "stewards")? {
            let visibility: zm_contracts::Visibility = crate::rows::enum_col(&row, "visibility")?;
            if visibility == zm_contracts::Visibility::Shared {
                let scope: String = col(&row, "scope")?;
                out.for_team = self
                    .may_act_for_steward(&mut conn, caller, &owner, &scope)
                    .await?;
            }
            out.left_to_team = out.for_team.is_none();
        }
        drop(conn);
        let mut sql = Sql::new(
            "SELECT l.type AS t, l.src AS src, l.dst AS dst, m.content AS content FROM memory_links l \
             JOIN memories m ON m.id = (CASE WHEN l.src = ",
        );
        sql.bind_str(memory_id)
            .push(" THEN l.dst ELSE l.src END) WHERE (l.src = ")
            .bind_str(memory_id)
            .push(" OR l.dst = ")
            .bind_str(memory_id)
            .push(") AND ");
        push_visible(&mut sql, "m", &caller.user_id);
        sql.push(" ORDER BY l.created_at, l.src, l.dst, l.type LIMIT 50");
        for r in &sql.query().fetch_all(&self.pool).await.db("memory links")? {
            let src: String = col(r, "src")?;
            let dst: String = col(r, "dst")?;
            let content: String = col(r, "content")?;
            let outgoing = src == memory_id;
            out.links.push((
                col(r, "t")?,
                if outgoing { dst } else { src },
                outgoing,
                content.chars().take(120).collect(),
            ));
        }
        // The memory's names as `entities` lists them: the caller's own,
        // and a teammate's while a live memory the caller can read names
        // it (this one, while it stands); a teammate's name goes with the
        // last such note forgotten or closed.
        let mut sql = Sql::new(
            "SELECT e.name AS name, e.type AS t FROM memory_entities me JOIN entities e ON e.id = me.entity_id \
             JOIN memories m ON m.id = me.memory_id WHERE me.memory_id = ",
        );
        sql.bind_str(memory_id)
            .push(" AND (e.owner_id = ")
            .bind_str(&caller.user_id)
            .push(" OR m.invalidated_at IS NULL OR ");
        crate::graph::push_still_named(&mut sql, "e", &caller.user_id);
        sql.push(&format!(
            ") ORDER BY {}, e.id LIMIT 50",
            self.backend.bytewise("e.name")
        ));
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("memory entities")?;
        for r in &rows {
            out.entities.push((col(r, "name")?, col(r, "t")?));
        }
        // Both memories the caller's, as list_conflicts shows them.
        let mut sql = crate::conflicts::owned_conflicts(
            &format!(
                "c.id AS id, c.verdict AS verdict, {} AS status",
                crate::conflicts::shown_status()
            ),
            &caller.user_id,
        );
        sql.push(" AND (c.memory_a = ")
            .bind_str(memory_id)
            .push(" OR c.memory_b = ")
            .bind_str(memory_id)
            .push(") ORDER BY c.created_at DESC, c.id DESC LIMIT 20");
        let rows = sql
            .query()
            .fetch_all(&self.pool)
            .await
            .db("memory conflicts")?;
        for r in &rows {
            out.conflicts
                .push((col(r, "id")?, col(r, "verdict")?, col(r, "status")?));
        }
        Ok(out)
    }

    /// Is this memory the caller's own?
    pub async fn owns_memory(&self, caller: &Caller, memory_id: &str) -> Result<bool, ToolError> {
        let owned: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM memories WHERE id = $1 AND owner_id = $2")
                .bind(memory_id)
                .bind(&caller.user_id)
                .fetch_one(&self.pool)
                .await
                .db("memory owner")?;
        Ok(owned > 0)
    }

    /// The user's open MCP-over-HTTP sessions, most recently used first:
    /// those used within `idle_ms` (an idle one is over, whether or not a
    /// new session's admission has swept its row yet).
    pub async fn mcp_sessions_of(
        &self,
        user_id: &str,
        idle_ms: i64,
    ) -> Result<Vec<McpSessionInfo>, ToolError> {
        let rows = sqlx::query(
            "SELECT id, init_params, attached_project, opened_at, seen_at FROM mcp_sessions WHERE user_id = $1 AND seen_at > $2 \
             ORDER BY seen_at DESC, id LIMIT 100",
        )
        .bind(user_id)
        .bind(self.now().saturating_sub(idle_ms))
        .fetch_all(&self.pool)
        .await
        .db("mcp sessions of")?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let params: Option<String> = col(r, "init_params")?;
            let client = params
                .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
                .and_then(|v| v["clientInfo"]["name"].as_str().map(str::to_string));
            out.push(McpSessionInfo {
                id: col(r, "id")?,
                client,
                attached_project: col(r, "attached_project")?,
                opened_at: col(r, "opened_at")?,
                seen_at: col(r, "seen_at")?,
            });
        }
        Ok(out)
    }

    /// End one of the user's MCP sessions (another user's id changes
    /// nothing and reads as not found).
    pub async fn mcp_session_end_for(&self, user_id: &str, id: &str) -> Result<(), ToolError> {
        let done = sqlx::query("DELETE FROM mcp_sessions WHERE id = $1 AND user_id = $2")
            .bind(id)
            .bind(user_id)
            .execute(&self.pool)
            .await
            .db("end mcp session")?;
        if done.rows_affected() == 0 {
            return Err(ToolError::not_found("No such session."));
        }
        Ok(())
    }
}
