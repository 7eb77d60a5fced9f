//! The entity graph: `link` and `entities`.

use sqlx::any::AnyRow;
use zm_contracts::ids::{IdKind, parse_any_id};
use zm_contracts::scope::ScopeSpec;
use zm_contracts::{
    ConflictStatus, ConflictVerdict, EntitiesInput, EntitiesOutput, Entity, EntityType, LinkInput,
    LinkKind, LinkOutput, MemoryLinkType, ToolError, validate::field_error,
};

use crate::clock::rfc3339;
use crate::db::DbResult;
use crate::guard;
use crate::memories::{EntityRef, display_name, match_key, nameable};
use crate::rows::{FromAnyRow, col, enum_col, id_col};
use crate::scopes::canonical_path;
use crate::service::Cx;
use crate::sql::Sql;
use crate::store::{Caller, Store};

/// An entity row (`id, name, type, scope, created_at`).
impl FromAnyRow for Entity {
    fn from_row(r: &AnyRow) -> Result<Entity, ToolError> {
        Ok(Entity {
            id: id_col(r, "id")?,
            name: col(r, "name")?,
            entity_type: enum_col(r, "type")?,
            scope: col(r, "scope")?,
            created_at: rfc3339(col(r, "created_at")?),
        })
    }
}

/// Escape a LIKE pattern (`\` is the escape character).
fn like_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// The condition that entity `entity` (an alias) is still named by a live
/// memory `user_id` can read: how a teammate's entity is shown to them
/// (`entities`, a memory's page), so a name from a forgotten note goes
/// with the last such note.
pub(crate) fn push_still_named(sql: &mut Sql, entity: &str, user_id: &str) {
    sql.push(&format!(
        "EXISTS (SELECT 1 FROM memory_entities named_me JOIN memories named_m ON named_m.id = named_me.memory_id \
         WHERE named_me.entity_id = {entity}.id AND named_m.invalidated_at IS NULL AND "
    ));
    crate::scopes::push_visible(sql, "named_m", user_id);
    sql.push(")");
}

impl Store {
    /// Link two memories (by id) or two entities (by name).
    pub(crate) async fn link(
        &self,
        cx: &mut Cx<'_>,
        input: LinkInput,
    ) -> Result<LinkOutput, ToolError> {
        let src = parse_any_id(&input.src).ok();
        let dst = parse_any_id(&input.dst).ok();
        let is_mem =
            |p: &Option<(IdKind, String)>| p.as_ref().is_some_and(|(k, _)| *k == IdKind::Memory);
        match (is_mem(&src), is_mem(&dst)) {
            (true, true) => {
                let (src, dst) = (
                    src.map(|p| p.1).unwrap_or_default(),
                    dst.map(|p| p.1).unwrap_or_default(),
                );
                self.link_memories(cx, &src, &dst, input.link_type).await
            }
            (false, false) if src.is_none() && dst.is_none() => {
                self.link_entities(cx, &input).await
            }
            (false, false) => Err(field_error(
                if src.is_some() { "src" } else { "dst" },
                "only memory ids (mem_…) or entity names can be linked",
            )),
            _ => Err(field_error(
                "dst",
                "src and dst must both be memory ids (mem_…) or both be entity names",
            )),
        }
    }

    async fn link_memories(
        &self,
        cx: &mut Cx<'_>,
        src: &str,
        dst: &str,
        ltype: zm_contracts::LinkType,
    ) -> Result<LinkOutput, ToolError> {
        let caller = cx.caller;
        let Some(mtype) = ltype.as_memory_link() else {
            return Err(field_error(
                "type",
                "between memories use relates_to, supersedes, contradicts or derived_from",
            ));
        };
        if src == dst {
            return Err(field_error("dst", "a memory cannot be linked to itself"));
        }
        let now = self.now();
        let tx = cx.tx().await?;
        for id in [src, dst] {
            if !self.can_read_memory(&mut *tx, caller, id).await? {
                return Err(ToolError::not_found(format!("Memory {id} not found.")));
            }
        }
        // Both ends' teams held first, in one statement in team order, as
        // every change holding several teams takes them (each end's check
        // below takes its own again at no cost): held end by end, a link
        // between memories of two teams took them in memory order, and
        // could deadlock with a change taking them in team order.
        let (first, second) = if src < dst { (src, dst) } else { (dst, src) };
        self.hold_teams_of_memories(&mut *tx, &[first, second], None)
            .await?;
        for id in [first, second] {
            self.may_link_to(&mut *tx, caller, id).await?;
        }
        // Its ends may be others' memories: no row of the caller's keeps
        // an erasure of the account out of the way (see `hold_account`).
        self.hold_account(&mut *tx, &caller.user_id).await?;
        let done = sqlx::query("INSERT INTO memory_links (src, dst, type, owner_id, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (src, dst, type) DO NOTHING")
            .bind(src)
            .bind(dst)
            .bind(mtype.as_str())
            .bind(&caller.user_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .db("link memories")?;
        let created = done.rows_affected() == 1;
        if mtype == MemoryLinkType::Contradicts {
            self.file_contradiction(&mut *tx, caller, (src, dst), created, now)
                .await?;
        }
        Ok(LinkOutput {
            kind: LinkKind::MemoryLink,
            src_id: src.to_string(),
            dst_id: dst.to_string(),
            link_type: ltype,
            created,
        })
    }

    /// File `src contradicts dst` for review when both are the caller's
    /// own memories and no such conflict of the pair is pending: from
    /// `link`, and from `remember`'s `links` (one rule for both ways of
    /// saying it). `created`: whether this call drew the link. A link
    /// already there files too when a teammate drew it (the link is one
    /// row, the teammate's), unless the caller has settled a
    /// contradiction of the pair since.
    pub(crate) async fn file_contradiction(
        &self,
        tx: &mut sqlx::AnyConnection,
        caller: &crate::Caller,
        (src, dst): (&str, &str),
        created: bool,
        now: i64,
    ) -> Result<(), ToolError> {
        if !created {
            let drawn_by: Option<String> = sqlx::query_scalar(
                "SELECT owner_id FROM memory_links WHERE src = $1 AND dst = $2 AND type = $3",
            )
            .bind(src)
            .bind(dst)
            .bind(MemoryLinkType::Contradicts.as_str())
            .fetch_optional(&mut *tx)
            .await
            .db("link's author")?;
            if drawn_by.is_none_or(|by| by == caller.user_id) {
                return Ok(());
            }
            let settled: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM conflicts WHERE owner_id = $1 AND verdict = 'contradiction' AND status <> 'pending' AND \
                 ((memory_a = $2 AND memory_b = $3) OR (memory_a = $3 AND memory_b = $2))",
            )
            .bind(&caller.user_id)
            .bind(src)
            .bind(dst)
            .fetch_one(&mut *tx)
            .await
            .db("pair's conflicts")?;
            if settled > 0 {
                return Ok(());
            }
        }
        // A contradiction between two of the caller's memories goes to
        // review. Their teams held first (PostgreSQL): a removal
        // handing either over waits, or has run and the pair is not
        // the caller's to review.
        self.hold_teams_of_memories(&mut *tx, &[src, dst], Some(&caller.user_id))
            .await?;
        // Both memories held (PostgreSQL, in id order): `A contradicts
        // B` and `B contradicts A` at once take turns here, and the
        // second sees the first one's conflict below.
        let owned = self
            .hold_memories(&mut *tx, &[src, dst], Some(&caller.user_id))
            .await?;
        // One pending conflict a pair: `B contradicts A` after
        // `A contradicts B` files nothing more, and a pair in review as
        // near-duplicates (`unjudged`) is judged a contradiction now.
        let pending = sqlx::query(
            "SELECT id, verdict FROM conflicts WHERE status = 'pending' AND \
             ((memory_a = $1 AND memory_b = $2) OR (memory_a = $2 AND memory_b = $1)) ORDER BY id LIMIT 1",
        )
        .bind(src)
        .bind(dst)
        .fetch_optional(&mut *tx)
        .await
        .db("contradiction pending")?;
        if let Some(row) = &pending
            && owned == 2
            && col::<String>(row, "verdict")? == ConflictVerdict::Unjudged.as_str()
        {
            sqlx::query("UPDATE conflicts SET verdict = $1 WHERE id = $2 AND status = 'pending'")
                .bind(ConflictVerdict::Contradiction.as_str())
                .bind(col::<String>(row, "id")?)
                .execute(&mut *tx)
                .await
                .db("judge the pair a contradiction")?;
        }
        if owned == 2 && pending.is_none() {
            sqlx::query("INSERT INTO conflicts (id, owner_id, memory_a, memory_b, verdict, status, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
                .bind(IdKind::MemoryReview.generate())
                .bind(&caller.user_id)
                .bind(src)
                .bind(dst)
                .bind(ConflictVerdict::Contradiction.as_str())
                .bind(ConflictStatus::Pending.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await
                .db("contradiction conflict")?;
        }
        Ok(())
    }

    async fn link_entities(
        &self,
        cx: &mut Cx<'_>,
        input: &LinkInput,
    ) -> Result<LinkOutput, ToolError> {
        let caller = cx.caller;
        let Some(etype) = input.link_type.as_edge() else {
            return Err(field_error(
                "type",
                "between entities use uses, works_on, prefers, part_of, depends_on, decided, replaces or relates_to",
            ));
        };
        if let Some(hit) = guard::check_fields([
            ("src".to_string(), input.src.as_str()),
            ("dst".to_string(), input.dst.as_str()),
        ]) {
            return Err(guard::rejection(&hit));
        }
        let (sname, dname) = (display_name(&input.src), display_name(&input.dst));
        let (skey, dkey) = (match_key(&sname), match_key(&dname));
        for (path, key) in [("src", &skey), ("dst", &dkey)] {
            if !nameable(key) {
                return Err(field_error(
                    path,
                    "an entity name needs at least one letter or digit",
                ));
            }
        }
        if skey == dkey {
            return Err(field_error("dst", "an entity cannot be linked to itself"));
        }
        let scope = caller.personal_scope();
        let tx = cx.tx().await?;
        let concept = EntityType::Concept;
        let sid = self
            .resolve_entity(
                tx,
                EntityRef {
                    owner: &caller.user_id,
                    scope: &scope,
                    name: &sname,
                    key: &skey,
                    entity_type: concept,
                },
                true,
            )
            .await?;
        let did = self
            .resolve_entity(
                tx,
                EntityRef {
                    owner: &caller.user_id,
                    scope: &scope,
                    name: &dname,
                    key: &dkey,
                    entity_type: concept,
                },
                true,
            )
            .await?;
        let done = sqlx::query("INSERT INTO edges (id, owner_id, src, dst, type, weight, source_memory, created_at) VALUES ($1, $2, $3, $4, $5, NULL, NULL, $6) ON CONFLICT (src, dst, type) DO NOTHING")
            .bind(IdKind::Edge.generate())
            .bind(&caller.user_id)
            .bind(&sid)
            .bind(&did)
            .bind(etype.as_str())
            .bind(self.now())
            .execute(&mut *tx)
            .await
            .db("edge")?;
        Ok(LinkOutput {
            kind: LinkKind::EntityEdge,
            src_id: sid,
            dst_id: did,
            link_type: input.link_type,
            created: done.rows_affected() == 1,
        })
    }

    /// List or search the entities the caller can see: their own, and in
    /// the scopes they are a member of those a live memory they can read
    /// still names (a name from a teammate's forgotten note goes with it).
    pub(crate) async fn entities(
        &self,
        caller: &Caller,
        input: EntitiesInput,
    ) -> Result<EntitiesOutput, ToolError> {
        let mut sql = Sql::new(
            "SELECT e.id, e.name, e.type, e.scope, e.created_at FROM entities e WHERE (e.owner_id = ",
        );
        sql.bind_str(&caller.user_id);
        sql.push(" OR (e.scope IN (");
        crate::teams::push_member_scopes(&mut sql, &caller.user_id);
        sql.push(") AND ");
        push_still_named(&mut sql, "e", &caller.user_id);
        sql.push("))");
        if let Some(scope) = &input.scope {
            match scope.spec() {
                ScopeSpec::All => {}
                other => {
                    let path = other
                        .resolve(&caller.user_id)
                        .map(|p| canonical_path(caller, &p))
                        .unwrap_or_default();
                    sql.push(" AND e.scope = ").bind_str(path);
                }
            }
        }
        if let Some(q) = &input.query {
            // Case-insensitive beyond ASCII (SQLite's LOWER is ASCII only),
            // and blind to spaces, `-` and `_` as entity matching is: the
            // stored match key, searched with the query's own.
            sql.push(" AND (LOWER(e.name) LIKE ")
                .bind_str(format!("%{}%", like_escape(&q.trim().to_lowercase())))
                .push(" ESCAPE '\\'");
            let key = match_key(q);
            if !key.is_empty() {
                sql.push(" OR e.match_key LIKE ")
                    .bind_str(format!("%{}%", like_escape(&key)))
                    .push(" ESCAPE '\\'");
            }
            sql.push(")");
        }
        sql.push(&format!(
            " ORDER BY {}, e.id LIMIT 500",
            self.backend.bytewise("e.name")
        ));
        let rows = sql.query().fetch_all(&self.pool).await.db("entities")?;
        Ok(EntitiesOutput {
            entities: Entity::from_rows(&rows)?,
        })
    }
}
