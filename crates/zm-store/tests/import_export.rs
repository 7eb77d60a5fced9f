//! `import_memory` and `export_memories`, on every backend: imports are
//! idempotent per user and source hash and pass the guard; an export holds
//! the caller's memories (retired ones too) and nobody else's.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::ErrorCode;
use zm_store::Store;

backend_tests! {
    /// `imported_copy` names the live memory an import created for an
    /// item, and only that: not one the import found already there (an
    /// identical memory the importer wrote), not one forgotten since.
    async fn the_copy_an_import_made_is_told_from_one_it_found(store: Store, l: &str) {
        let (_, a) = user(&store, "imported-copy").await;
        let item = |content: &str, hash: &str| {
            json!({"content": content, "kind": "fact", "target": "personal", "source_path": "feed.jsonl", "source_hash": hash})
        };
        let made = ok(call(&store, &a, "import_memory", item("Billing runs on PostgreSQL 16.", "m1:h")).await, l, "import");
        let copy = store.imported_copy(&a.user_id, "m1:h").await.unwrap();
        assert_eq!(copy.map(|c| c.to_string()), made["memory_id"].as_str().map(str::to_string), "[{l}] the copy it made");
        mem(&store, &a, l, json!({"content": "Invoices are archived for ten years.", "kind": "fact", "scope": "personal"})).await;
        let found = ok(call(&store, &a, "import_memory", item("Invoices are archived for ten years.", "m2:h")).await, l, "import found");
        assert_eq!(found["deduplicated"], json!(true), "[{l}] {found}");
        assert_eq!(store.imported_copy(&a.user_id, "m2:h").await.unwrap(), None, "[{l}] not the importer's own memory");
        let (_, b) = user(&store, "imported-copy-other").await;
        assert_eq!(store.imported_copy(&b.user_id, "m1:h").await.unwrap(), None, "[{l}] another user's ledger");
        ok(call(&store, &a, "forget", json!({"memory_id": made["memory_id"]})).await, l, "forget");
        assert_eq!(store.imported_copy(&a.user_id, "m1:h").await.unwrap(), None, "[{l}] forgotten since");
        // A copy the user made a rule of is theirs to retire.
        let ruled = ok(call(&store, &a, "import_memory", item("Always tag releases.", "m3:h")).await, l, "import");
        assert!(store.imported_copy(&a.user_id, "m3:h").await.unwrap().is_some(), "[{l}] a copy");
        ok(call(&store, &a, "promote_rule", json!({"memory_id": ruled["memory_id"]})).await, l, "promote");
        assert_eq!(store.imported_copy(&a.user_id, "m3:h").await.unwrap(), None, "[{l}] carrying a rule");
        // A copy a later item found already there stands for both.
        ok(call(&store, &a, "import_memory", item("Staging is rebuilt on Sundays.", "m4:h")).await, l, "import");
        let both = ok(call(&store, &a, "import_memory", item("Staging is rebuilt on Sundays.", "m5:h")).await, l, "import the same words");
        assert_eq!(both["deduplicated"], json!(true), "[{l}] {both}");
        assert_eq!(store.imported_copy(&a.user_id, "m4:h").await.unwrap(), None, "[{l}] another item stands on it");
    }

    async fn import_is_idempotent_and_export_is_scoped_to_the_caller(store: Store, l: &str) {
        let (_, a) = user(&store, "io-a").await;
        let (_, b) = user(&store, "io-b").await;
        let args = json!({"content": "Prefer small pull requests.", "kind": "preference", "target": "personal", "source_path": "CLAUDE.md", "source_hash": "h-1", "source_tool": "claude-code"});
        let first = ok(
            call(&store, &a, "import_memory", args.clone()).await,
            l,
            "import",
        );
        assert_eq!(first["skipped"], false, "[{l}]");
        let second = ok(
            call(&store, &a, "import_memory", args.clone()).await,
            l,
            "import again",
        );
        assert_eq!(
            (second["skipped"].as_bool(), &second["memory_id"]),
            (Some(true), &first["memory_id"]),
            "[{l}]"
        );
        // The same hash for another user is that user's own import.
        let theirs = ok(call(&store, &b, "import_memory", args).await, l, "B import");
        assert_eq!(theirs["skipped"], false, "[{l}]");
        err(call(&store, &a, "import_memory", json!({"content": "x", "kind": "fact", "target": "project", "source_path": "p", "source_hash": "h-2"})).await, ErrorCode::ValidationFailed, l, "project without hint");
        let secret = format!("AKIA{}", "ABCDEFGHIJKLMNOP");
        err(call(&store, &a, "import_memory", json!({"content": format!("key {secret}"), "kind": "fact", "target": "core", "source_path": "p", "source_hash": "h-3"})).await, ErrorCode::ValidationFailed, l, "secret");
        let m = mem(
            &store,
            &a,
            l,
            json!({"content": "Obsolete fact.", "scope": "core"}),
        )
        .await;
        ok(
            call(&store, &a, "forget", json!({"memory_id": m})).await,
            l,
            "forget",
        );
        let export = ok(
            call(&store, &a, "export_memories", json!({})).await,
            l,
            "export",
        );
        let ids: Vec<&str> = export["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        assert_eq!(export["count"], 2, "[{l}] {export}");
        assert!(
            ids.contains(&m.as_str()),
            "[{l}] invalidated memories are exported"
        );
        let item = export["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == first["memory_id"])
            .unwrap();
        assert_eq!(item["source"]["kind"], "import", "[{l}]");
        let b_export = ok(
            call(&store, &b, "export_memories", json!({"scopes": ["*"]})).await,
            l,
            "B export",
        );
        assert_eq!(
            b_export["count"], 1,
            "[{l}] B exports only its own: {b_export}"
        );
    }
}

/// Page through `export_memories` with `args` (plus `cursor`) until a page
/// has no `next_cursor`; every page is checked on the way. The ids in
/// order, and how many pages it took.
async fn export_all(
    store: &Store,
    caller: &zm_store::Caller,
    l: &str,
    args: serde_json::Value,
    limit: u64,
) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut page_args = args.clone();
        page_args["limit"] = json!(limit);
        if let Some(c) = &cursor {
            page_args["cursor"] = json!(c);
        }
        let page = ok(
            call(store, caller, "export_memories", page_args).await,
            l,
            "export page",
        );
        pages += 1;
        let items = page["items"].as_array().unwrap();
        assert_eq!(
            page["count"].as_u64(),
            u64::try_from(items.len()).ok(),
            "[{l}] count is the page's: {page}"
        );
        assert!(
            u64::try_from(items.len()).unwrap() <= limit,
            "[{l}] page over the limit: {page}"
        );
        ids.extend(items.iter().map(|i| i["id"].as_str().unwrap().to_string()));
        match page.get("next_cursor") {
            Some(c) => {
                assert!(
                    !items.is_empty(),
                    "[{l}] an empty page with a cursor: {page}"
                );
                cursor = Some(c.as_str().unwrap().to_string());
            }
            None => break,
        }
        assert!(pages < 100, "[{l}] export does not end");
    }
    (ids, pages)
}

/// The field paths a `validation_failed` error names.
fn failed_fields(e: &zm_contracts::ToolError) -> Vec<String> {
    e.details
        .as_ref()
        .and_then(|d| d["fields"].as_array())
        .map(|fs| {
            fs.iter()
                .map(|f| f["path"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

backend_tests! {
    /// An export larger than a page comes back over several pages in
    /// `created_at, seq` order, exactly once each, with other users' memories
    /// nowhere; the last page has no `next_cursor`.
    async fn export_pages_cover_exactly_the_readable_memories_in_order(store: Store, l: &str) {
        let (_, a) = user(&store, "page-a").await;
        let (_, b) = user(&store, "page-b").await;
        let (_, c) = user(&store, "page-c").await;
        let project = project_of(&store, &a, l, "/src/paged-export").await;
        store
            .add_scope_member(&a.user_id, &project, &b.user_id, zm_store::Role::Reader)
            .await
            .unwrap();
        // What B can read, in the order it was written, interleaved with
        // what B cannot. (Equal creation instants, ordered by `seq`, are the
        // store's unit test `pages_split_runs_of_equal_creation_instants_by_seq`.)
        let mut readable_by_b = Vec::new();
        let mut a_own = Vec::new();
        let mut c_own = Vec::new();
        for i in 0..4 {
            let id = mem(&store, &b, l, json!({"content": format!("B personal note {i}."), "scope": "personal"})).await;
            readable_by_b.push(id);
            let shared = mem(&store, &a, l, json!({"content": format!("A project decision {i}."), "scope": project, "kind": "decision"})).await;
            ok(call(&store, &a, "share", json!({"memory_id": shared, "scope": project})).await, l, "share");
            readable_by_b.push(shared.clone());
            a_own.push(shared);
            let private = mem(&store, &a, l, json!({"content": format!("A private project note {i}."), "scope": project})).await;
            a_own.push(private);
            let theirs = mem(&store, &c, l, json!({"content": format!("C core fact {i}."), "scope": "core"})).await;
            c_own.push(theirs);
            let core = mem(&store, &b, l, json!({"content": format!("B core fact {i}."), "scope": "core"})).await;
            readable_by_b.push(core);
            if i % 2 == 1 {
                store.clock().advance_ms(1_000);
            }
        }
        // An invalidated memory is exported too.
        ok(call(&store, &b, "forget", json!({"memory_id": readable_by_b[0]})).await, l, "forget");
        assert_eq!(readable_by_b.len(), 12);

        for limit in [1, 5, 6, 12] {
            let (ids, pages) = export_all(&store, &b, l, json!({}), limit).await;
            assert_eq!(ids, readable_by_b, "[{l}] limit {limit}: every readable memory once, in order");
            let expected_pages = readable_by_b.len().div_ceil(usize::try_from(limit).unwrap());
            assert_eq!(pages, expected_pages, "[{l}] limit {limit}: pages");
        }
        // The default page holds them all, with no cursor.
        let whole = ok(call(&store, &b, "export_memories", json!({})).await, l, "default page");
        assert_eq!(whole["count"], 12, "[{l}] {whole}");
        assert!(whole.get("next_cursor").is_none(), "[{l}] {whole}");

        // Nobody else's memories appear, and scopes filter every page.
        let (a_ids, _) = export_all(&store, &a, l, json!({}), 2).await;
        assert_eq!(a_ids, a_own, "[{l}] A reads its own project memories, not B's or C's");
        let (c_ids, _) = export_all(&store, &c, l, json!({"scopes": ["*"]}), 3).await;
        assert_eq!(c_ids, c_own, "[{l}] C reads only its own");
        let (b_project, _) = export_all(&store, &b, l, json!({"scopes": [project]}), 1).await;
        let shared_only: Vec<String> = a_own.iter().step_by(2).cloned().collect();
        assert_eq!(b_project, shared_only, "[{l}] B reads only what A shared");
    }

    /// A page ends early once its text passes the page's budget of
    /// characters (content and provenance), after the memory that passes
    /// it; one memory larger than the budget is a page of its own; the
    /// pages together still hold every memory once, in order.
    async fn export_pages_end_at_their_budget_of_text(store: Store, l: &str) {
        let store = store.with_limits(zm_store::Limits {
            export_page_chars: 10_000,
            ..zm_store::Limits::default()
        });
        let (_, a) = user(&store, "page-chars").await;
        let text = |i: usize, chars: usize| {
            let mut t = format!("Budget note {i}:");
            let mut w = 0;
            while t.len() < chars {
                t.push_str(&format!(" w{i}x{w}"));
                w += 1;
            }
            t
        };
        let mut written = Vec::new();
        for (i, chars) in [4_000, 4_000, 4_000, 12_000, 4_000, 4_000].into_iter().enumerate() {
            written.push(mem(&store, &a, l, json!({"content": text(i, chars), "scope": "core"})).await);
            store.clock().advance_ms(10);
        }
        let mut sizes = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut args = json!({"limit": 1000});
            if let Some(c) = &cursor {
                args["cursor"] = json!(c);
            }
            let page = ok(call(&store, &a, "export_memories", args).await, l, "page");
            sizes.push(page["count"].as_u64().unwrap());
            match page.get("next_cursor") {
                Some(c) => cursor = Some(c.as_str().unwrap().to_string()),
                None => break,
            }
            assert!(sizes.len() < 10, "[{l}] the export does not end");
        }
        // 4k + 4k stays under 10k, the third passes it; the 12k memory
        // passes it alone; then the last two.
        assert_eq!(sizes, [3, 1, 2], "[{l}] pages");
        let (ids, _) = export_all(&store, &a, l, json!({}), 1000).await;
        assert_eq!(ids, written, "[{l}] every memory once, in order");
    }

    /// A cursor is a position only: replayed with other scopes it reads what
    /// those scopes allow after it; another user's, an altered or a made-up
    /// cursor is `validation_failed` on `cursor`.
    async fn export_cursors_are_positions_bound_to_their_user(store: Store, l: &str) {
        let (_, a) = user(&store, "cur-a").await;
        let (_, b) = user(&store, "cur-b").await;
        let project = project_of(&store, &a, l, "/src/cursor-export").await;
        store
            .add_scope_member(&a.user_id, &project, &b.user_id, zm_store::Role::Reader)
            .await
            .unwrap();
        let mut order = Vec::new();
        for i in 0..3 {
            let personal = mem(&store, &b, l, json!({"content": format!("B personal {i}."), "scope": "personal"})).await;
            let shared = mem(&store, &a, l, json!({"content": format!("A shared {i}."), "scope": project})).await;
            ok(call(&store, &a, "share", json!({"memory_id": shared, "scope": project})).await, l, "share");
            let private = mem(&store, &a, l, json!({"content": format!("A private {i}."), "scope": project})).await;
            order.push((personal, shared, private));
            store.clock().advance_ms(10);
        }
        let first = ok(call(&store, &b, "export_memories", json!({"limit": 2})).await, l, "first page");
        let ids: Vec<&str> = first["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
        assert_eq!(ids, [order[0].0.as_str(), order[0].1.as_str()], "[{l}] {first}");
        let cursor = first["next_cursor"].as_str().expect("a next page").to_string();

        // The same cursor with narrower scopes: only those scopes, after it.
        let personal = ok(call(&store, &b, "export_memories", json!({"cursor": cursor, "scopes": ["personal"]})).await, l, "personal after");
        let ids: Vec<&str> = personal["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
        assert_eq!(ids, [order[1].0.as_str(), order[2].0.as_str()], "[{l}] {personal}");
        let shared = ok(call(&store, &b, "export_memories", json!({"cursor": cursor, "scopes": [project]})).await, l, "project after");
        let ids: Vec<&str> = shared["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
        assert_eq!(ids, [order[1].1.as_str(), order[2].1.as_str()], "[{l}] A's private memories never: {shared}");
        assert!(shared.get("next_cursor").is_none(), "[{l}] {shared}");
        // Everything B reads after the position, and nothing it cannot.
        let rest = ok(call(&store, &b, "export_memories", json!({"cursor": cursor, "scopes": ["*"]})).await, l, "rest");
        assert_eq!(rest["count"], 4, "[{l}] {rest}");

        // Refused cursors: another user's, altered, made up, too long.
        let mut altered: Vec<char> = cursor.chars().collect();
        let i = altered.len() - 3;
        altered[i] = if altered[i] == 'A' { 'B' } else { 'A' };
        let altered: String = altered.into_iter().collect();
        let thread = "thr_AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        for (who, bad, what) in [
            (&a, cursor.clone(), "B's cursor used by A"),
            (&b, altered, "altered"),
            (&b, "exc_not-a-cursor".to_string(), "made up"),
            (&b, thread.to_string(), "a thread token"),
            (&b, format!("exc_{}", "A".repeat(200)), "too long"),
        ] {
            let e = err(call(&store, who, "export_memories", json!({"cursor": bad})).await, ErrorCode::ValidationFailed, l, what);
            assert_eq!(failed_fields(&e), ["cursor"], "[{l}] {what}: {e:?}");
        }
        for limit in [0, 1001] {
            let e = err(call(&store, &b, "export_memories", json!({"limit": limit})).await, ErrorCode::ValidationFailed, l, "limit");
            assert_eq!(failed_fields(&e), ["limit"], "[{l}] limit {limit}: {e:?}");
        }
    }
}

/// An export imported with `import --format zm`, as the CLI does.
async fn import_zm(
    store: &Store,
    caller: &zm_store::Caller,
    lines: &[serde_json::Value],
) -> zm_store::importer::Summary {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    zm_store::importer::import_text(
        tools(store),
        caller.clone(),
        "export.jsonl".into(),
        zm_store::importer::ImportFormat::Zm,
        None,
        &text,
    )
    .await
}

backend_tests! {
    /// An export restored on the server it came from: the importer's own
    /// memories, unchanged, are there already; a teammate's shared memory
    /// becomes the importer's copy (kept when they leave the team), and a
    /// line edited since the export a memory of its own.
    async fn a_restore_where_it_was_taken_copies_what_is_not_the_importers(store: Store, l: &str) {
        let (_, alice) = user(&store, "restore-a").await;
        let slug = create_team_of(&store, &alice, l, "restore").await;
        let (_, bob) = team_member(&store, &alice, l, &slug, "restore-b", zm_contracts::TeamRole::Writer).await;
        let tag = unique("rs").replace('-', "");
        mem(&store, &alice, l, json!({"content": format!("Alice keeps the release notes ({tag})."), "kind": "fact", "scope": "personal"})).await;
        mem(&store, &alice, l, json!({"content": format!("Deploys need a green canary ({tag})."), "kind": "convention", "scope": "personal"})).await;
        mem(&store, &bob, l, json!({"content": format!("The team rotates on-call weekly ({tag})."), "kind": "convention", "scope": format!("team.{slug}")})).await;
        let page = ok(call(&store, &alice, "export_memories", json!({"limit": 100})).await, l, "export");
        let mut lines: Vec<serde_json::Value> = page["items"].as_array().unwrap().clone();
        assert_eq!(lines.len(), 3, "[{l}] {page}");
        let edited = lines.iter_mut().find(|m| m["content"].as_str().unwrap().starts_with("Deploys")).unwrap();
        edited["content"] = json!(format!("Deploys need a green canary for an hour ({tag})."));
        let summary = import_zm(&store, &alice, &lines).await;
        assert!(summary.errors.is_empty(), "[{l}] {summary:?}");
        assert_eq!((summary.memories_existing, summary.memories_imported), (1, 2), "[{l}] {summary:?}");
        let found = recall_ids(&store, &alice, l, json!({"query": "on-call weekly", "scopes": ["personal"]})).await;
        assert_eq!(found.len(), 1, "[{l}] Alice's own copy of Bob's memory: {found:?}");
        let again = import_zm(&store, &alice, &lines).await;
        assert_eq!(again.memories_imported, 0, "[{l}] a second run adds nothing: {again:?}");
        // Kept once Alice no longer reads the team: the copy is hers.
        ok(store.delete_team(&alice, &slug).await, l, "the team ends");
        let kept = recall_ids(&store, &alice, l, json!({"query": "on-call weekly"})).await;
        assert_eq!(kept, found, "[{l}] Alice's copy outlives the team");
    }

    /// The agent that wrote a memory survives an export of an import: an
    /// imported memory keeps it as `source_tool`, and so does its import.
    async fn the_writing_agent_survives_an_import_of_an_import(store: Store, l: &str) {
        let (_, a) = user(&store, "agent-a").await;
        let (_, b) = user(&store, "agent-b").await;
        let (_, c) = user(&store, "agent-c").await;
        let mut writer = a.clone();
        writer.agent_name = Some("claude-code".into());
        mem(&store, &writer, l, json!({"content": "The staging database resets nightly.", "kind": "fact", "scope": "personal"})).await;
        let mut lines = ok(call(&store, &a, "export_memories", json!({})).await, l, "A's export")["items"].as_array().unwrap().clone();
        for to in [&b, &c] {
            let summary = import_zm(&store, to, &lines).await;
            assert_eq!(summary.memories_imported, 1, "[{l}] {summary:?}");
            lines = ok(call(&store, to, "export_memories", json!({})).await, l, "export")["items"].as_array().unwrap().clone();
            assert_eq!(lines[0]["source"]["source_tool"], "claude-code", "[{l}] {}", lines[0]);
        }
    }
}
