//! The behavioural annotation check: every tool runs against a scratch
//! store with fixture data; the memory data is compared before and after
//! one call and after a second identical call, and each hint must match
//! what happened:
//!
//! - `readOnlyHint` ⇔ the first call changed no row of any table (the
//!   audit log aside): memory data, scopes, bindings, tokens, everything;
//! - `destructiveHint` ⇔ the first call deleted a row, or invalidated a
//!   memory that is not an open loop (closing a task or question completes
//!   it; it destroys nothing);
//! - `idempotentHint` ⇔ the second identical call changed nothing more.
//!
//! The store's clock moves one second between calls so a tool that stamps
//! time on a repeat (e.g. `promote_rule`) shows it.

use serde_json::{Value, json};
use zm_contracts::catalogue::{Annotations, tool};
use zm_contracts::{ToolName, parse_input};
use zm_store::{Caller, Store, ToolService};

/// What one tool actually did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
}

/// The fixture ids a call can refer to.
pub struct Fixture {
    caller: Caller,
    fact: String,
    fact2: String,
    decision: String,
    convention: String,
    task: String,
    forgotten: String,
    pair_conflict: String,
    project: String,
}

async fn remember(tools: &ToolService, caller: &Caller, v: Value) -> Result<String, String> {
    let input = parse_input(&v).map_err(|e| e.to_string())?;
    Ok(tools
        .run::<tool::Remember>(caller, input)
        .await
        .map_err(|e| e.to_string())?
        .memory_id
        .into_string())
}

async fn fixture(tools: &ToolService) -> Result<Fixture, String> {
    let store = tools.store();
    let user = store
        .create_user("fixture@example.com", "fixture-password")
        .await
        .map_err(|e| e.to_string())?;
    let caller = Caller::new(user.id.clone());
    let project = zm_contracts::scope::project_scope(&user.id, "demo");
    let fact = remember(tools, &caller, json!({"content": "The staging database runs PostgreSQL 15 on port 5433.", "scope": "core"})).await?;
    let fact2 = remember(tools, &caller, json!({"content": "The staging database runs PostgreSQL 16 on port 5433 since the upgrade.", "scope": "core"})).await?;
    let decision = remember(tools, &caller, json!({"content": "We chose axum over actix for the HTTP layer because of tower middleware.", "kind": "decision", "scope": project})).await?;
    let convention = remember(tools, &caller, json!({"content": "Always run cargo fmt before committing.", "kind": "convention", "scope": "personal"})).await?;
    let task = remember(
        tools,
        &caller,
        json!({"content": "Write the migration guide for 2.1.", "kind": "task", "scope": project}),
    )
    .await?;
    let forgotten = remember(
        tools,
        &caller,
        json!({"content": "The build uses make.", "scope": "personal"}),
    )
    .await?;
    let call = |tool: ToolName, args: Value| {
        let caller = caller.clone();
        async move {
            tools
                .call(&caller, tool, &args)
                .await
                .map_err(|e| format!("fixture {tool}: {e}"))
        }
    };
    call(ToolName::Forget, json!({"memory_id": forgotten})).await?;
    call(
        ToolName::Link,
        json!({"src": fact, "dst": fact2, "type": "contradicts"}),
    )
    .await?;
    let conflicts = tools
        .run::<tool::ListConflicts>(&caller, parse_input(&json!({})).map_err(|e| e.to_string())?)
        .await
        .map_err(|e| e.to_string())?;
    let pair_conflict = conflicts
        .conflicts
        .first()
        .map(|c| c.dispute_id.clone())
        .ok_or("the fixture has no conflict")?;
    Ok(Fixture {
        caller,
        fact,
        fact2,
        decision,
        convention,
        task,
        forgotten,
        pair_conflict,
        project,
    })
}

impl Fixture {
    /// The fixture's user.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }
}

/// The representative call for a tool, on the fixture.
fn call_for(tool: ToolName, f: &Fixture) -> Value {
    match tool {
        ToolName::Remember => {
            json!({"content": "Release notes live in docs/CHANGELOG.md.", "kind": "reference", "scope": "core"})
        }
        ToolName::Recall => json!({"query": "staging database", "project_hint": "/work/demo"}),
        ToolName::BuildContext => {
            json!({"topic": "staging database", "briefing": true, "project_hint": "/work/demo"})
        }
        ToolName::Forget => json!({"memory_id": f.fact}),
        ToolName::RestoreMemory => json!({"memory_id": f.forgotten}),
        ToolName::CloseLoop => json!({"memory_id": f.task}),
        ToolName::Share => json!({"memory_id": f.fact, "scope": f.project}),
        ToolName::MoveMemories => json!({"memory_ids": [f.fact, f.convention], "scope": f.project}),
        ToolName::Link => json!({"src": "web-app", "dst": "PostgreSQL", "type": "depends_on"}),
        ToolName::Entities => json!({}),
        ToolName::Challenge => {
            json!({"memory_id": f.decision, "reason": "We moved to a different framework."})
        }
        ToolName::ListConflicts => json!({}),
        ToolName::GetConflict => json!({"dispute_id": f.pair_conflict}),
        ToolName::ResolveConflict => json!({"dispute_id": f.pair_conflict, "winner": f.fact2}),
        ToolName::PromoteRule => json!({"memory_id": f.convention}),
        ToolName::ImportMemory => {
            json!({"content": "Prefer small commits.", "kind": "preference", "target": "personal", "source_path": "CLAUDE.md", "source_hash": "abc123"})
        }
        ToolName::ExportMemories => json!({}),
        ToolName::DeleteAccount => json!({}),
    }
}

/// Run one tool twice on a fresh scratch store and report what it did.
pub async fn observe(tool: ToolName, dir: &std::path::Path) -> Result<Observed, String> {
    observe_with(tool, dir, async |_, _| Ok(())).await
}

/// [`observe`], with `also` run right after each call of the tool, as if
/// it were part of it: how a planted test makes a tool misbehave.
pub async fn observe_with(
    tool: ToolName,
    dir: &std::path::Path,
    also: impl AsyncFn(&ToolService, &Fixture) -> Result<(), String>,
) -> Result<Observed, String> {
    let path = dir.join(format!("{}.db", tool.as_str()));
    let store = Store::open(&zm_store::sqlite_url(&path))
        .await
        .map_err(|e| e.to_string())?;
    let tools = ToolService::new(store.clone());
    let f = fixture(&tools).await?;
    let call = call_for(tool, &f);
    let before = store.fingerprint().await.map_err(|e| e.to_string())?;
    store.clock().advance_ms(1000);
    tools
        .call(&f.caller, tool, &call)
        .await
        .map_err(|e| format!("{tool}: the fixture call failed: {e}"))?;
    also(&tools, &f).await?;
    let once = store.fingerprint().await.map_err(|e| e.to_string())?;
    store.clock().advance_ms(1000);
    // The repeat may legitimately fail (e.g. forget on a forgotten memory);
    // what matters is what it left behind.
    let _ = tools.call(&f.caller, tool, &call).await;
    also(&tools, &f).await?;
    let twice = store.fingerprint().await.map_err(|e| e.to_string())?;
    store.close().await;
    let destroyed = !before.deleted_in(&once).is_empty()
        || before
            .invalidated_in(&once)
            .iter()
            .any(|(_, kind)| kind != "task" && kind != "open-question");
    let changed = before.changed_tables(&once);
    if !changed.is_empty() {
        tracing_note(tool, &changed);
    }
    Ok(Observed {
        read_only: before == once,
        destructive: destroyed,
        idempotent: once == twice,
    })
}

/// Name the tables a call changed (stderr), so a failing check says where.
fn tracing_note(tool: ToolName, changed: &[(String, usize, usize)]) {
    if tool.spec().annotations.read_only_hint {
        for (table, added, removed) in changed {
            eprintln!("  {tool} changed {table}: +{added} -{removed} rows");
        }
    }
}

/// Compare what a tool did with what it declares.
pub fn compare(tool: &str, declared: &Annotations, seen: &Observed) -> Vec<String> {
    let mut errs = Vec::new();
    for (hint, d, s) in [
        ("readOnlyHint", declared.read_only_hint, seen.read_only),
        (
            "destructiveHint",
            declared.destructive_hint,
            seen.destructive,
        ),
        ("idempotentHint", declared.idempotent_hint, seen.idempotent),
    ] {
        if d != s {
            errs.push(format!(
                "tool `{tool}`: declares {hint}: {d}, but the handler behaves as {hint}: {s}"
            ));
        }
    }
    errs
}

/// Observe every catalogue tool (on fresh scratch stores).
pub fn observe_all() -> Result<Vec<(ToolName, Observed)>, String> {
    let dir = std::env::temp_dir().join(format!(
        "zm-annotations-{}-{}",
        std::process::id(),
        zm_contracts::IdKind::Request.generate()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let result = rt.block_on(async {
        let mut out = Vec::new();
        for tool in ToolName::ALL {
            out.push((*tool, observe(*tool, &dir).await?));
        }
        Ok(out)
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The check: every tool's declared hints match its observed behaviour.
pub fn check_behaviour(
    observed: &[(ToolName, Observed)],
    declared: impl Fn(ToolName) -> Annotations,
) -> Result<(), Vec<String>> {
    let errs: Vec<String> = observed
        .iter()
        .flat_map(|(t, o)| compare(t.as_str(), &declared(*t), o))
        .collect();
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}
