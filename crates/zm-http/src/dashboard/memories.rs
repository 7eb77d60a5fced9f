//! Memories: the ranked search box (`recall`, the same results and order
//! an agent gets, score shown), the browsable list with a count for every
//! filter value, a memory's page, and the changes a person makes — edit
//! (a new memory that supersedes the old one, so history is kept),
//! forget / restore, close a loop, share / move, and select many → forget,
//! move or export after a confirmation that says how many.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};
use zm_contracts::{Memory, MemoryId, MemoryKind, ToolName, ToolOutput};
use zm_store::web::{MemoryFilter, MemoryStatus};

use super::errors::{Failure, Refused, field_aria, field_class, field_error};
use super::{PagePath, Signed, signed_form};
use crate::state::AppState;

/// Rows per page of the list and the search.
const PAGE: u32 = 50;
/// The most memories one bulk action takes (as many as `move_memories`
/// takes in one call; a page shows `PAGE`): a crafted form of thousands
/// of ids would hold one write transaction for all of them.
const BULK_MAX: usize = 200;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    q: Option<String>,
    scope: Option<String>,
    kind: Option<String>,
    status: Option<String>,
    agent: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<i64>,
    done: Option<String>,
}

/// `YYYY-MM-DD` → epoch ms at 00:00 UTC.
fn day_ms(s: &str) -> Option<i64> {
    chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc().timestamp_millis())
}

impl ListQuery {
    /// The filter these parameters ask for. A value the page never offers
    /// (an unknown kind or status, a date that is not `YYYY-MM-DD`, an
    /// agent name past 200 characters: a hand-edited or stale address) is
    /// `validation_failed` naming each such parameter, not silently
    /// dropped, so a list never claims a filter it did not apply.
    fn filter(&self) -> Result<MemoryFilter, zm_contracts::ToolError> {
        let nonempty = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let mut errors = Vec::new();
        let mut refuse = |field: &str, reason: &str| {
            errors.push(zm_contracts::FieldError {
                path: field.to_string(),
                reason: reason.to_string(),
            });
        };
        let kind = nonempty(&self.kind).and_then(|k| {
            let parsed = MemoryKind::parse(&k);
            if parsed.is_none() {
                refuse("kind", "not a memory kind");
            }
            parsed
        });
        let status = match nonempty(&self.status) {
            None => MemoryStatus::default(),
            Some(st) => MemoryStatus::parse(&st).unwrap_or_else(|| {
                refuse("status", "not a status this list offers");
                MemoryStatus::default()
            }),
        };
        let mut date = |field: &str, v: &Option<String>| {
            nonempty(v).and_then(|d| {
                let ms = day_ms(&d);
                if ms.is_none() {
                    refuse(field, "not a date (YYYY-MM-DD)");
                }
                ms
            })
        };
        let since = date("since", &self.since);
        let until = date("until", &self.until).map(|t| t + 24 * 60 * 60 * 1000);
        // Counted in characters, as the store keeps agent names: a name
        // of 70 CJK characters (210 bytes) is one the list offers.
        if self
            .agent
            .as_deref()
            .is_some_and(|a| a.chars().count() > zm_store::AGENT_NAME_MAX)
        {
            refuse(
                "agent",
                &format!(
                    "longer than an agent name ({} characters)",
                    zm_store::AGENT_NAME_MAX
                ),
            );
        }
        if !errors.is_empty() {
            return Err(zm_contracts::validate::validation_error(errors));
        }
        Ok(MemoryFilter {
            scope: nonempty(&self.scope),
            kind,
            status,
            agent: self.agent.clone(),
            since,
            until,
        })
    }

    /// This query with one parameter set (or removed), as a link.
    fn with(&self, key: &str, value: Option<&str>) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        // An empty agent is a filter of its own ("(none)": memories no
        // agent wrote), kept like any other; elsewhere empty is unset.
        let keep =
            |k: &str, v: &Option<String>, pairs: &mut Vec<(&str, String)>, name: &'static str| {
                if k != name
                    && let Some(v) = v.as_deref().filter(|v| !v.is_empty() || name == "agent")
                {
                    pairs.push((name, v.to_string()));
                }
            };
        keep(key, &self.q, &mut pairs, "q");
        keep(key, &self.scope, &mut pairs, "scope");
        keep(key, &self.kind, &mut pairs, "kind");
        keep(key, &self.status, &mut pairs, "status");
        keep(key, &self.agent, &mut pairs, "agent");
        keep(key, &self.since, &mut pairs, "since");
        keep(key, &self.until, &mut pairs, "until");
        if let Some(v) = value {
            pairs.push((
                match key {
                    "q" => "q",
                    "scope" => "scope",
                    "kind" => "kind",
                    "status" => "status",
                    "agent" => "agent",
                    "before" => "before",
                    "done" => "done",
                    _ => "x",
                },
                v.to_string(),
            ));
        }
        let qs = serde_urlencoded::to_string(&pairs).unwrap_or_default();
        if qs.is_empty() {
            "/".to_string()
        } else {
            format!("/?{qs}")
        }
    }
}

impl ListQuery {
    /// The list a bulk form was sent from, read back from its `back`
    /// field: the list's own parameters, re-encoded, so a crafted value
    /// never leads off the dashboard; anything that is not a list
    /// address is the unfiltered list.
    fn from_back(back: Option<&str>) -> ListQuery {
        let qs = match back.and_then(|b| b.strip_prefix('/')) {
            Some("") => "",
            Some(rest) => match rest.strip_prefix('?') {
                Some(qs) => qs,
                None => return ListQuery::default(),
            },
            None => return ListQuery::default(),
        };
        let mut q: ListQuery = serde_urlencoded::from_str(qs).unwrap_or_default();
        q.before = None;
        q.done = None;
        q
    }

    /// The list with these filters (no page position, no notice).
    fn list(&self) -> String {
        self.with("done", None)
    }
}

/// A scope as the person reads it: their own layers by name, a project
/// by its slug (`project api`; another's, shared with them through a
/// team, `api (shared project)`), not by the owner's 31-character label
/// that comes first in its path and tells none of them apart.
pub(crate) fn scope_label(scope: &str, user_id: &str) -> String {
    if scope == zm_contracts::scope::personal_scope(user_id) {
        return "personal".into();
    }
    if scope == zm_contracts::scope::core_scope(user_id) {
        return "core".into();
    }
    if let Some(rest) = scope.strip_prefix("proj.")
        && let Some((owner, slug)) = rest.split_once('.')
        && !slug.is_empty()
    {
        return if owner == zm_contracts::scope::label_for(user_id) {
            format!("project {slug}")
        } else {
            format!("{slug} (shared project)")
        };
    }
    scope.to_string()
}

/// A short, human line for a time (`2025-01-31 14:05 UTC`): a memory's,
/// an audit row's (the team's and the account's logs). The server knows
/// no reader's time zone: it says which one it shows.
pub(crate) fn when(rfc3339: &str) -> String {
    format!(
        "{} UTC",
        rfc3339.get(..16).unwrap_or(rfc3339).replace('T', " ")
    )
}

fn state_of(m: &Memory) -> &'static str {
    match (&m.invalidated_at, &m.superseded_by) {
        (None, _) => "live",
        (Some(_), Some(_)) => "superseded",
        (Some(_), None) => "forgotten",
    }
}

fn call_failure(e: zm_contracts::ToolError, signed: &Signed) -> Failure {
    signed.fail(e)
}

/// `GET /`: search (with `q`) or browse.
pub(crate) async fn index(
    State(state): State<AppState>,
    signed: Signed,
    super::PageQuery(q): super::PageQuery<ListQuery>,
) -> Response {
    let caller = signed.caller();
    let filter = match q.filter() {
        Ok(f) => f,
        Err(e) => return signed.error(&call_failure(e, &signed).back_to("/")),
    };
    let query = q.q.as_deref().map_or("", str::trim).to_string();
    let facets = match state.store.memory_facets(&caller, &filter).await {
        Ok(f) => f,
        Err(e) => return signed.error(&call_failure(e, &signed)),
    };
    // (id, content, kind, scope, created_at, state, score, team)
    let mut rows: Vec<Row> = Vec::new();
    let mut next = None;
    let mut failure = None;
    if query.is_empty() {
        match state
            .store
            .browse_memories(&caller, &filter, q.before, PAGE)
            .await
        {
            Ok(page) => {
                next = page.next;
                rows = page.items.iter().map(Row::from_memory).collect();
            }
            Err(e) => return signed.error(&call_failure(e, &signed)),
        }
    } else {
        let mut input = json!({"query": query, "k": PAGE});
        input["scopes"] = json!([filter.scope.clone().unwrap_or_else(|| "*".into())]);
        if let Some(k) = filter.kind {
            input["kinds"] = json!([k.as_str()]);
        }
        match state.tools.call(&caller, ToolName::Recall, &input).await {
            Ok(ToolOutput::Recall(out)) => {
                rows = out
                    .memories
                    .iter()
                    .map(|h| Row {
                        id: h.id.to_string(),
                        content: h.content.clone(),
                        kind: h.kind.as_str().to_string(),
                        scope: h.scope.clone(),
                        created_at: h.created_at.clone(),
                        state: "live",
                        score: Some(h.score),
                        team: h.team.clone(),
                        agent: None,
                    })
                    .collect();
            }
            Ok(_) => {}
            Err(e) => failure = Some(call_failure(e, &signed).back_to("/")),
        }
    }
    let done = q.done.as_deref().map(|d| match d {
        "forget" => "Forgotten.",
        "move" => "Moved.",
        _ => "Done.",
    });
    let body = html! {
        h1 { "Memories" }
        @if let Some(d) = done { div.flash.ok role="status" { (d) } }
        div.layout {
            aside.filters aria-label="Filters" {
                (facet_list(&signed, "Scope", "scope", filter.scope.as_deref(), &facets.scopes, &q))
                (facet_list(&signed, "Kind", "kind", filter.kind.map(MemoryKind::as_str), &facets.kinds, &q))
                @if query.is_empty() {
                    h2 { "Status" }
                    ul {
                        @for (status, n) in &facets.statuses {
                            li class=(if *status == filter.status { "on" } else { "" }) {
                                a href=(signed.href(&q.with("status", Some(status.as_str())))) { (status_label(*status)) }
                                span.count { (n) }
                            }
                        }
                    }
                    (facet_list(&signed, "Agent", "agent", filter.agent.as_deref(), &facets.agents, &q))
                    h2 { "Date" }
                    // Every other filter rides along.
                    form.dates method="get" action=(signed.href("/")) {
                        @if let Some(v) = &filter.scope { input type="hidden" name="scope" value=(v); }
                        @if let Some(v) = filter.kind { input type="hidden" name="kind" value=(v.as_str()); }
                        @if let Some(v) = q.status.as_deref().filter(|v| !v.is_empty()) { input type="hidden" name="status" value=(v); }
                        @if let Some(v) = &filter.agent { input type="hidden" name="agent" value=(v); }
                        div.field { label for="since" { "From" } input #since type="date" name="since" value=(q.since.clone().unwrap_or_default()); }
                        div.field { label for="until" { "To" } input #until type="date" name="until" value=(q.until.clone().unwrap_or_default()); }
                        button.secondary type="submit" { "Apply dates" }
                    }
                } @else {
                    // Recall ranks live memories by scope and kind only:
                    // no status, agent or date filter is offered that the
                    // search would not apply.
                    p.muted #search-filters { "A search ranks live memories, as your agents recall them: only scope and kind narrow it. " a href=(signed.href(&q.with("q", None))) { "Browse" } " to filter by status, agent or date." }
                }
            }
            section aria-label="Results" {
                form.search role="search" method="get" action=(signed.href("/")) {
                    label.sr-only for="q" { "Search your memories" }
                    input #q type="search" name="q" placeholder="Search, as your agents recall" value=(query);
                    @if let Some(v) = &filter.scope { input type="hidden" name="scope" value=(v); }
                    @if let Some(v) = filter.kind { input type="hidden" name="kind" value=(v.as_str()); }
                    button type="submit" { "Search" }
                }
                @if let Some(f) = &failure { (f.notice(&[])) }
                @if !query.is_empty() {
                    p.muted { (rows.len()) " ranked by recall, as an agent gets them (live memories only). " a href=(signed.href(&q.with("q", None))) { "Clear the search" } }
                }
                @if rows.is_empty() {
                    p #empty { "No memories match." }
                } @else {
                    form #bulk method="post" action=(signed.href("/memories/bulk")) {
                        input type="hidden" name="csrf" value=(signed.csrf);
                        // The list to come back to, filters and all.
                        input type="hidden" name="back" value=(q.list());
                        div.bulk {
                            label { input type="checkbox" data-select-all; " Select all" }
                            label for="bulk-action" { "With the selected:" }
                            select #bulk-action name="action" {
                                option value="forget" { "Forget" }
                                option value="move" { "Move to scope…" }
                                option value="export" { "Export (JSONL)" }
                            }
                            label.sr-only for="bulk-scope" { "Target scope for a move" }
                            input #bulk-scope type="text" name="scope" placeholder="proj.… or team.… (for a move)";
                            button.secondary type="submit" { "Continue" }
                        }
                        ol.memories #results {
                            @for r in &rows { (r.item(&signed)) }
                        }
                    }
                }
                @if let Some(n) = next {
                    div.pager { a rel="next" href=(signed.href(&q.with("before", Some(&n.to_string())))) { "Older →" } }
                }
            }
        }
    };
    signed.page(StatusCode::OK, "Memories", "/", body)
}

fn status_label(s: MemoryStatus) -> &'static str {
    match s {
        MemoryStatus::Live => "Live",
        MemoryStatus::OpenLoop => "Open loops",
        MemoryStatus::Forgotten => "Forgotten",
        MemoryStatus::Superseded => "Superseded",
        MemoryStatus::All => "All",
    }
}

fn facet_list(
    signed: &Signed,
    title: &str,
    key: &str,
    chosen: Option<&str>,
    values: &[(String, u64)],
    q: &ListQuery,
) -> Markup {
    let user_id = signed.session.user_id.as_str();
    html! {
        h2 { (title) }
        ul {
            li class=(if chosen.is_none() { "on" } else { "" }) {
                a href=(signed.href(&q.with(key, None))) { "Any" }
            }
            @for (v, n) in values {
                li class=(if chosen == Some(v.as_str()) { "on" } else { "" }) {
                    a href=(signed.href(&q.with(key, Some(v)))) {
                        @if v.is_empty() { "(none)" } @else if key == "scope" { (scope_label(v, user_id)) } @else { (v) }
                    }
                    span.count { (n) }
                }
            }
        }
    }
}

/// One line of the list.
struct Row {
    id: String,
    content: String,
    kind: String,
    scope: String,
    created_at: String,
    state: &'static str,
    score: Option<f64>,
    team: Option<String>,
    agent: Option<String>,
}

impl Row {
    fn from_memory(m: &Memory) -> Row {
        let content: String = m.content.chars().take(400).collect();
        Row {
            id: m.id.to_string(),
            content,
            kind: m.kind.as_str().to_string(),
            scope: m.scope.clone(),
            created_at: m.created_at.clone(),
            state: state_of(m),
            score: None,
            team: None,
            agent: m.agent_name.clone(),
        }
    }

    fn item(&self, signed: &Signed) -> Markup {
        let user_id = signed.session.user_id.as_str();
        let check = format!("pick-{}", self.id);
        html! {
            li.memory data-id=(self.id) {
                input id=(check) type="checkbox" name="ids" value=(self.id) aria-label=(format!("Select {}", self.id));
                a.memory-link.text href=(signed.href(&format!("/memories/{}", self.id))) { (self.content) }
                div.meta {
                    span.tag { (self.kind) }
                    span.scope { (scope_label(&self.scope, user_id)) }
                    @if let Some(t) = &self.team { span.tag.team { "team " (t) } }
                    @if self.state != "live" { span class=(format!("tag state-{}", self.state)) { (self.state) } }
                    @if let Some(a) = &self.agent { span { "by " (a) } }
                    time datetime=(self.created_at) { (when(&self.created_at)) }
                    @if let Some(s) = self.score { span.score { "score " (format!("{s:.3}")) } }
                }
            }
        }
    }
}

/// `GET /memories/{id}`.
pub(crate) async fn show(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(id): PagePath<String>,
) -> Response {
    memory_page(&state, &signed, &id, None).await
}

/// The page of memory `id`, with the refusal of a change if there was one
/// (its status then is the refusal's).
async fn memory_page(
    state: &AppState,
    signed: &Signed,
    id: &str,
    refused: Option<Refused>,
) -> Response {
    let caller = signed.caller();
    let not_found = || {
        Failure::from_tool(
            zm_contracts::ToolError::not_found(format!("Memory {id} not found.")),
            signed.request_id.as_deref(),
        )
    };
    let Ok(mid) = MemoryId::parse(id) else {
        return signed.error(&not_found());
    };
    let m = match state.store.get_memory(&caller, &mid).await {
        Ok(m) => m,
        Err(e) => return signed.error(&call_failure(e, signed)),
    };
    // The chain of successors, as far as the caller can read it.
    let mut chain: Vec<Memory> = Vec::new();
    let mut next = m.superseded_by.clone();
    while let Some(n) = next.take() {
        if chain.len() >= 20 {
            break;
        }
        match state.store.get_memory(&caller, &n).await {
            Ok(s) => {
                next = s.superseded_by.clone();
                chain.push(s);
            }
            Err(_) => break,
        }
    }
    let context = match state.store.memory_context(&caller, mid.as_str()).await {
        Ok(c) => c,
        Err(e) => return signed.error(&call_failure(e, signed)),
    };
    let refused = refused.as_ref();
    let share_error = Refused::reason(refused, "share", "scope");
    let (share_invalid, share_described) = field_aria("share-scope", share_error.as_deref());
    let is_loop = matches!(m.kind, MemoryKind::Task | MemoryKind::OpenQuestion);
    let live = m.invalidated_at.is_none();
    let mine = context.mine;
    // A memory a departed member left to a team's steward: the team's
    // admins forget, close or restore it for the steward (the store
    // decides that again on the call), nothing else.
    let for_team = context.for_team.as_deref();
    // A reader now in the scope where their memory is shared changes it
    // no more than other team content: no form the store would refuse.
    let reader_only = context.reader_only;
    let changes = (mine && !reader_only) || for_team.is_some();
    // The share form is on the page (its field marks a refused scope);
    // otherwise the notice says the reason itself.
    let shares = changes && live && mine;
    let body = html! {
        p { a href=(signed.href("/")) { "← Memories" } }
        h1 { "Memory " code { (m.id) } }
        div.content #memory-content { (m.content) }
        dl.facts {
            dt { "Kind" } dd { (m.kind.as_str()) }
            dt { "Scope" } dd { (scope_label(&m.scope, &caller.user_id)) @if scope_label(&m.scope, &caller.user_id) != m.scope { " " code.muted { (m.scope) } } }
            dt { "Visibility" } dd { (m.visibility.as_str()) }
            dt { "State" } dd #state { (state_of(&m)) @if let Some(t) = &m.invalidated_at { " since " (when(t)) } }
            dt { "Written" } dd { (when(&m.created_at)) " by " (m.author_kind.as_str()) @if let Some(a) = &m.agent_name { " (" (a) ")" } }
            dt { "URI" } dd { code #uri { "zm://memory/" (m.id) } }
            @if let Some(s) = &m.superseded_by {
                dt { "Superseded by" } dd { a href=(signed.href(&format!("/memories/{s}"))) { code { (s) } } }
            }
        }
        @if !chain.is_empty() {
            h2 { "Newer versions" }
            ol #chain { @for c in &chain { li { a href=(signed.href(&format!("/memories/{}", c.id))) { code { (c.id) } } " — " (c.content.chars().take(120).collect::<String>()) } } }
        }
        @if !context.links.is_empty() {
            h2 { "Links" }
            ul #links {
                @for (kind, other, outgoing, preview) in &context.links {
                    li {
                        @if *outgoing { "this " (kind) " " } @else { (kind) " this: " }
                        a href=(signed.href(&format!("/memories/{other}"))) { code { (other) } }
                        " — " (preview)
                    }
                }
            }
        }
        @if !context.entities.is_empty() {
            h2 { "Entities" }
            p #entities { @for (name, kind) in &context.entities { span.tag { (name) " · " (kind) } " " } }
        }
        @if !context.conflicts.is_empty() {
            h2 { "Conflicts" }
            ul #conflicts {
                @for (id, verdict, status) in &context.conflicts {
                    li {
                        code { (id) } " — " (verdict) ", "
                        @if status == "moot" { "pending but moot: one of its memories is retired, so it is not up for review (restoring the memory brings it back)" } @else { (status) }
                        @if status == "pending" { " — " a href=(signed.href("/review")) { "review it" } }
                    }
                }
            }
        }
        @if let Some(src) = &m.source {
            h2 { "Provenance" }
            pre.content { (serde_json::to_string_pretty(src).unwrap_or_default()) }
        }
        h2 #change { "Change it" }
        (Refused::notice(refused, if shares { &["scope"] } else { &[] }))
        @if let Some(team) = for_team {
            p #for-team.hint { "A former member of team " (team) " left this memory to the team. As the team's admin you may forget it, close it if it is an open loop, and restore it; nobody edits, shares or moves it." }
        } @else if context.left_to_team {
            p #left-to-team.hint { "A former member left this memory to the team: its admins may forget it; nobody edits, shares or moves it. To dispute it, ask your agent to challenge it." }
        } @else if mine && reader_only {
            p #reader-only.hint { "You wrote this memory, and its scope's members read it; your role there is reader now, so only a writer or admin of " code { (m.scope) } " changes it." }
        } @else if !mine {
            p #not-yours.hint { "A teammate wrote this memory: only its author edits, forgets or shares it. To dispute it, ask your agent to challenge it." }
        } @else if live && context.edit_refused {
            p #edit-refused.hint { "You no longer write in " code { (m.scope) } " (your role there is reader, or you left it): a new version would be a write there, so only a writer or admin of it saves one. You may still forget this memory." }
        }
        @if live && mine && !reader_only && !context.edit_refused {
            form #edit method="post" action=(signed.href(&format!("/memories/{}/edit", m.id))) {
                input type="hidden" name="csrf" value=(signed.csrf);
                div.field {
                    label for="content" { "New text" }
                    textarea #content name="content" required { (m.content) }
                    p.hint { "Saving writes a new memory that supersedes this one: the history is kept." }
                }
                button type="submit" { "Save as a new version" }
            }
        }
        div.actions {
            @if changes && live {
                form #forget method="post" action=(signed.href(&format!("/memories/{}/forget", m.id))) {
                    input type="hidden" name="csrf" value=(signed.csrf);
                    div.field { label for="reason" { "Reason (optional)" } input #reason type="text" name="reason" value=[Refused::value(refused, "forget", "reason")]; }
                    button.danger type="submit" { "Forget" }
                }
                @if is_loop {
                    form #close method="post" action=(signed.href(&format!("/memories/{}/close", m.id))) {
                        input type="hidden" name="csrf" value=(signed.csrf);
                        button type="submit" { "Close the loop" }
                    }
                }
                @if mine {
                    form #share method="post" action=(signed.href(&format!("/memories/{}/share", m.id))) {
                        input type="hidden" name="csrf" value=(signed.csrf);
                        div class=(field_class(share_error.as_deref())) {
                            label for="share-scope" { "Share into scope" }
                            input #share-scope type="text" name="scope" placeholder="proj.… or team.…" required aria-invalid=[share_invalid] aria-describedby=[share_described] value=[Refused::value(refused, "share", "scope")];
                            (field_error("share-scope", share_error.as_deref()))
                        }
                        button.secondary type="submit" { "Share" }
                    }
                }
            } @else if changes && m.superseded_by.is_none() {
                form #restore method="post" action=(signed.href(&format!("/memories/{}/restore", m.id))) {
                    input type="hidden" name="csrf" value=(signed.csrf);
                    button type="submit" { "Restore" }
                }
            }
        }
    };
    let status = refused.map_or(StatusCode::OK, |r| r.failure.status());
    signed.page(status, "Memory", "/", body)
}

/// `POST /memories/{id}/{forget|restore|close|share}`.
pub(crate) async fn act(
    State(state): State<AppState>,
    signed: Signed,
    PagePath((id, action)): PagePath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Back to the memory's page by its id as parsed (trimmed, lowercased):
    // the path's own spelling may not be a header's (a line break).
    let Ok(mid) = MemoryId::parse(&id) else {
        return signed.error(&Failure::from_tool(
            zm_contracts::ToolError::not_found(format!("Memory {id} not found.")),
            signed.request_id.as_deref(),
        ));
    };
    let id = mid.to_string();
    let back = format!("/memories/{id}");
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to(&back)),
    };
    let (tool, input, name, typed): (_, _, _, Vec<(&'static str, String)>) = match action.as_str() {
        "forget" => {
            let reason = form.get("reason").unwrap_or("");
            let mut v = json!({"memory_id": id});
            if !reason.trim().is_empty() {
                v["reason"] = json!(reason.trim());
            }
            (
                ToolName::Forget,
                v,
                "forget",
                vec![("reason", reason.to_string())],
            )
        }
        "restore" => (
            ToolName::RestoreMemory,
            json!({"memory_id": id}),
            "restore",
            vec![],
        ),
        "close" => (
            ToolName::CloseLoop,
            json!({"memory_id": id}),
            "close",
            vec![],
        ),
        "share" => {
            let scope = form.get("scope").unwrap_or("");
            let v = json!({"memory_id": id, "scope": scope.trim()});
            (
                ToolName::Share,
                v,
                "share",
                vec![("scope", scope.to_string())],
            )
        }
        _ => {
            return signed.error(&Failure::from_tool(
                zm_contracts::ToolError::not_found("No such action."),
                signed.request_id.as_deref(),
            ));
        }
    };
    match state.tools.call(&signed.caller(), tool, &input).await {
        Ok(_) => signed.see_other(&back),
        Err(e) => {
            let failure = call_failure(e, &signed).back_to(&back);
            if !Refused::shows_inline(&failure) {
                return signed.error(&failure);
            }
            // The page again, the reason beside its forms, what was typed
            // kept (a page the memory is gone from says not found).
            let refused = Refused {
                failure,
                form: name,
                typed,
            };
            memory_page(&state, &signed, &id, Some(refused)).await
        }
    }
}

/// `POST /memories/{id}/edit`: a new memory in the same scope and kind
/// that supersedes this one.
pub(crate) async fn edit(
    State(state): State<AppState>,
    signed: Signed,
    PagePath(id): PagePath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // By the id as parsed, as `act` goes back.
    let Ok(mid) = MemoryId::parse(&id) else {
        return signed.error(&Failure::from_tool(
            zm_contracts::ToolError::not_found(format!("Memory {id} not found.")),
            signed.request_id.as_deref(),
        ));
    };
    let id = mid.to_string();
    let back = format!("/memories/{id}");
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to(&back)),
    };
    let caller = signed.caller();
    let old = match state.store.get_memory(&caller, &mid).await {
        Ok(m) => m,
        Err(e) => return signed.error(&call_failure(e, &signed)),
    };
    // Only its author supersedes a memory (remember retires only what the
    // caller owns). Whether it is still live is the edit's own check, in
    // its transaction (`ToolService::edit`).
    let refusal = match state.store.owns_memory(&caller, mid.as_str()).await {
        Err(e) => Some(e),
        Ok(false) => Some(zm_contracts::ToolError::forbidden(
            "A teammate wrote this memory: only its author can edit it.",
        )),
        Ok(true) => None,
    };
    if let Some(e) = refusal {
        return signed.error(&call_failure(e, &signed).back_to(&back));
    }
    // A browser sends a text area's line breaks as CR LF (HTML's form
    // encoding); agents write LF. Kept as sent, an edit saved unchanged was
    // a new version, and the same words an agent remembers another memory.
    // Text that differs from the memory's only in its line breaks (one
    // stored with CR LF) is the memory's, unchanged.
    let sent = form.get("content").unwrap_or("").replace("\r\n", "\n");
    let content = if sent == old.content.replace("\r\n", "\n") {
        old.content.clone()
    } else {
        sent
    };
    let input = json!({
        "content": content,
        "kind": old.kind.as_str(),
        "scope": old.scope,
        "links": [{"dst": old.id.to_string(), "type": "supersedes"}],
    });
    // The store retires the old version in the write's own transaction,
    // or writes nothing: two tabs editing one version never leave two.
    match state.tools.edit(&caller, &input, &mid).await {
        Ok(out) => signed.see_other(&format!("/memories/{}", out.memory_id)),
        Err(e) => {
            let f = call_failure(e, &signed).back_to(&back);
            let invalid = f.error.code == zm_contracts::ErrorCode::ValidationFailed;
            // The form again, the text kept: for text that is refused (the
            // field marked), and for a version changed meanwhile (another
            // tab's edit, an agent's): what was typed is not lost.
            // A conflict over a memory still live (moved or changed
            // meanwhile) is one a save of the form may clear; over one
            // superseded or forgotten meanwhile, no save of it can.
            let still_live = !invalid
                && state
                    .store
                    .get_memory(&caller, &mid)
                    .await
                    .is_ok_and(|m| m.invalidated_at.is_none());
            if invalid || f.error.code == zm_contracts::ErrorCode::Conflict {
                let reason = f.field("content").or_else(|| f.field("links"));
                let page = html! {
                    p { a href=(signed.href(&back)) { "← Back to the memory" } }
                    h1 { "Edit memory " code { (id) } }
                    (f.notice(&["content", "links"]))
                    form #edit method="post" action=(signed.href(&format!("/memories/{id}/edit"))) {
                        input type="hidden" name="csrf" value=(signed.csrf);
                        @if still_live {
                            div.field {
                                label for="content" { "New text" }
                                textarea #content name="content" required { (content) }
                            }
                            button type="submit" { "Save as a new version" }
                        } @else if invalid {
                            div.field.invalid {
                                label for="content" { "New text" }
                                textarea #content name="content" required aria-invalid="true" aria-describedby="content-error" { (content) }
                                p.error #content-error { (reason.unwrap_or_else(|| f.error.message.clone())) }
                            }
                            button type="submit" { "Save as a new version" }
                        } @else {
                            // This version can no longer be saved over (a
                            // newer one, or none): the text to copy, and
                            // the way to the memory's page, which links
                            // its newest version.
                            div.field {
                                label for="content" { "Your text (not saved)" }
                                textarea #content name="content" readonly { (content) }
                            }
                            p { a href=(signed.href(&back)) { "Open the memory to edit its newest version" } }
                        }
                    }
                };
                let status = if invalid {
                    StatusCode::BAD_REQUEST
                } else {
                    StatusCode::CONFLICT
                };
                return signed.page(status, "Edit memory", "/", page);
            }
            signed.error(&f)
        }
    }
}

/// `POST /memories/bulk`: a confirmation that says how many, then the
/// change (forget or move, one tool call per memory / one move call), or
/// the export of the selected memories as JSONL.
pub(crate) async fn bulk(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let form = match signed_form(&state, &signed, &headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to("/")),
    };
    let ids: Vec<String> = form.all("ids").into_iter().map(str::to_string).collect();
    let action = form.get("action").unwrap_or("");
    let scope = form.get("scope").unwrap_or("").trim().to_string();
    // The list the selection was made in: every way out of a bulk action
    // leads back to it, filters and all.
    let back = ListQuery::from_back(form.get("back"));
    let list = back.list();
    if ids.is_empty() {
        return signed.error(
            &Failure::from_tool(
                zm_contracts::ToolError::validation("Select at least one memory.").with_details(
                    json!({"fields": [{"path": "ids", "reason": "select at least one memory"}]}),
                ),
                signed.request_id.as_deref(),
            )
            .back_to(&list),
        );
    }
    if ids.len() > BULK_MAX {
        return signed.error(
            &Failure::from_tool(
                zm_contracts::ToolError::validation(format!(
                    "Select at most {BULK_MAX} memories at once."
                ))
                .with_details(
                    json!({"fields": [{"path": "ids", "reason": format!("at most {BULK_MAX}")}]}),
                ),
                signed.request_id.as_deref(),
            )
            .back_to(&list),
        );
    }
    let caller = signed.caller();
    if action == "export" {
        // A selected memory gone since the page was drawn (or never one)
        // is left out; a read that failed fails the download, rather than
        // a file that looks whole and is not.
        let mut lines = String::new();
        for id in &ids {
            let Ok(mid) = MemoryId::parse(id) else {
                continue;
            };
            match state.store.get_memory(&caller, &mid).await {
                Ok(m) => {
                    lines.push_str(&serde_json::to_string(&m).unwrap_or_default());
                    lines.push('\n');
                }
                Err(e) if e.code == zm_contracts::ErrorCode::NotFound => {}
                Err(e) => return signed.error(&call_failure(e, &signed)),
            }
        }
        return super::download(
            lines.into_response(),
            "application/x-ndjson",
            "zero-memory-selection.jsonl",
        );
    }
    if !matches!(action, "forget" | "move") {
        return signed.error(
            &Failure::invalid(
                "Choose forget, move or export.",
                signed.request_id.as_deref(),
            )
            .back_to(&list),
        );
    }
    if action == "move"
        && let Err(e) = zm_contracts::validate::parse_input::<zm_contracts::MoveMemoriesInput>(
            &json!({"memory_ids": ids, "scope": scope}),
        )
    {
        // No confirmation of a move that cannot be made: say why first,
        // with the selection kept and the scope typed marked, to correct
        // and send again.
        let failure = call_failure(e, &signed);
        let Some(reason) = failure.field("scope") else {
            return signed.error(&failure.back_to(&list));
        };
        let (aria_invalid, described) = field_aria("retry-scope", Some(&reason));
        let page = html! {
            h1 { "Move " (ids.len()) " memor" (if ids.len() == 1 { "y" } else { "ies" }) }
            (failure.notice(&["scope"]))
            form #retry-move method="post" action=(signed.href("/memories/bulk")) {
                input type="hidden" name="csrf" value=(signed.csrf);
                input type="hidden" name="action" value="move";
                input type="hidden" name="back" value=(list);
                @for id in &ids { input type="hidden" name="ids" value=(id); }
                div class=(field_class(Some(&reason))) {
                    label for="retry-scope" { "Move to scope" }
                    input #retry-scope type="text" name="scope" value=(scope) required aria-invalid=[aria_invalid] aria-describedby=[described];
                    (field_error("retry-scope", Some(&reason)))
                }
                div.actions {
                    button type="submit" { "Move" }
                    a.button.secondary href=(signed.href(&list)) { "Cancel" }
                }
            }
        };
        return signed.page(StatusCode::BAD_REQUEST, "Not valid", "/", page);
    }
    if form.get("confirm") != Some("yes") {
        let what = if action == "forget" {
            format!(
                "Forget {} memor{}?",
                ids.len(),
                if ids.len() == 1 { "y" } else { "ies" }
            )
        } else {
            format!(
                "Move {} memor{} to {scope}?",
                ids.len(),
                if ids.len() == 1 { "y" } else { "ies" }
            )
        };
        let page = html! {
            h1 { "Confirm" }
            p #confirm-question { (what) }
            @if action == "forget" { p.muted { "Forgotten memories can be restored from their page." } }
            form #confirm method="post" action=(signed.href("/memories/bulk")) {
                input type="hidden" name="csrf" value=(signed.csrf);
                input type="hidden" name="action" value=(action);
                input type="hidden" name="scope" value=(scope);
                input type="hidden" name="confirm" value="yes";
                input type="hidden" name="back" value=(list);
                @for id in &ids { input type="hidden" name="ids" value=(id); }
                div.actions {
                    button.danger type="submit" { "Yes, " (action) " " (ids.len()) }
                    a.button.secondary href=(signed.href(&list)) { "Cancel" }
                }
            }
        };
        return signed.page(StatusCode::OK, "Confirm", "/", page);
    }
    if action == "move" {
        let input: Value = json!({"memory_ids": ids, "scope": scope});
        return match state
            .tools
            .call(&caller, ToolName::MoveMemories, &input)
            .await
        {
            Ok(ToolOutput::MoveMemories(out)) if !out.failed.is_empty() => {
                // What could not move is listed with its reason, as a bulk
                // forget lists what it could not forget.
                let page = html! {
                    h1 { "Moved, with exceptions" }
                    p { "Moved " (out.moved.len()) " of " (out.moved.len() + out.failed.len()) " into " code { (out.scope) } "." }
                    div.flash.warn role="status" {
                        p { "These were not moved:" }
                        ul { @for f in &out.failed { li { a href=(signed.href(&format!("/memories/{}", f.memory_id))) { code { (f.memory_id) } } ": " (f.error) } } }
                    }
                    p { a href=(signed.href(&list)) { "Back to your memories" } }
                };
                signed.page(StatusCode::OK, "Moved", "/", page)
            }
            Ok(_) => signed.see_other(&back.with("done", Some("move"))),
            Err(e) => signed.error(&call_failure(e, &signed).back_to(&list)),
        };
    }
    // One transaction, each memory in its own savepoint: what can be
    // forgotten is, and the rest is listed with its reason. Only the
    // caller's own: a team's admin forgets a departed member's memory
    // from its page, one at a time, never swept up in a selection. In id
    // order, the order rows are held in: two selections overlapping in
    // another order would deadlock on an earlier item's rows, which
    // re-running the later item alone cannot undo.
    let mut ids = ids;
    ids.sort_unstable();
    ids.dedup();
    let mut inputs = Vec::with_capacity(ids.len());
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut own_ids = Vec::with_capacity(ids.len());
    for id in &ids {
        match state.store.owns_memory(&caller, id).await {
            Ok(true) => {}
            Ok(false) => {
                failed.push((
                    id.clone(),
                    "not yours: a selection forgets only your own memories (a team's admin forgets a departed member's memory from its page)".to_string(),
                ));
                continue;
            }
            Err(e) => return signed.error(&call_failure(e, &signed).back_to(&list)),
        }
        match zm_contracts::parse_input::<zm_contracts::ForgetInput>(&json!({"memory_id": id})) {
            Ok(i) => {
                inputs.push(i);
                own_ids.push(id.clone());
            }
            Err(e) => {
                return signed.error(&call_failure(e, &signed).back_to(&list));
            }
        }
    }
    let results = match state
        .tools
        .run_batch::<zm_contracts::catalogue::tool::Forget>(&caller, inputs)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            return signed.error(&call_failure(e, &signed).back_to(&list));
        }
    };
    failed.extend(
        own_ids
            .iter()
            .zip(&results)
            .filter_map(|(id, r)| r.as_ref().err().map(|e| (id.clone(), e.message.clone()))),
    );
    if failed.is_empty() {
        // The forgotten memories of the same list (a search shows only
        // live ones, so it is left for browsing).
        let forgotten = ListQuery {
            q: None,
            status: Some("forgotten".into()),
            ..back
        };
        return signed.see_other(&forgotten.with("done", Some("forget")));
    }
    let page = html! {
        h1 { "Forgotten, with exceptions" }
        p { "Forgot " (ids.len() - failed.len()) " of " (ids.len()) "." }
        div.flash.warn role="status" {
            p { "These were not forgotten:" }
            ul { @for (id, why) in &failed { li { a href=(signed.href(&format!("/memories/{id}"))) { code { (id) } } ": " (why) } } }
        }
        p { a href=(signed.href(&list)) { "Back to your memories" } }
    };
    signed.page(StatusCode::OK, "Forgotten", "/", page)
}

#[cfg(test)]
mod tests {
    use super::scope_label;

    /// A scope reads by what tells it apart: the person's own layers by
    /// name, a project by its slug (whose, when not theirs), anything
    /// else as its path.
    #[test]
    fn scopes_read_by_what_tells_them_apart() {
        let me = "usr_abc.01m99";
        let mine = zm_contracts::scope::project_scope(me, "api");
        let theirs = zm_contracts::scope::project_scope("usr_xyz.01m98", "api");
        let cases = [
            (zm_contracts::scope::personal_scope(me), "personal"),
            (zm_contracts::scope::core_scope(me), "core"),
            (mine, "project api"),
            (theirs, "api (shared project)"),
            ("team.platform".to_string(), "team.platform"),
            (
                zm_contracts::scope::personal_scope("usr_xyz.01m98"),
                "user.usr_xyz_01m98",
            ),
        ];
        for (scope, label) in cases {
            assert_eq!(scope_label(&scope, me), label, "{scope}");
        }
    }
}
