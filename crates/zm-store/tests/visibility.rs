//! What a page, a count or an export shows a user who reads few of a
//! store's memories, on every backend: exactly their own and their scopes'
//! shared ones. (On SQLite such a reader's rows are looked up instead of
//! walked, `scopes::Visible`; on PostgreSQL the member scopes are listed.)

mod common;

use std::collections::BTreeSet;

use common::*;
use serde_json::json;
use zm_contracts::catalogue::tool;
use zm_contracts::teams::CreateTeamInput;
use zm_contracts::{ImportMemoryInput, TeamRole, parse_input};
use zm_store::web::MemoryFilter;
use zm_store::{Store, ToolService};

fn import(content: &str, hash: &str) -> ImportMemoryInput {
    parse_input(&json!({
        "content": content,
        "kind": "fact",
        "target": "personal",
        "source_path": "notes/big.md",
        "source_hash": hash,
    }))
    .expect("a valid import")
}

backend_tests! {
    /// 1,200 private memories of one account; another reads 3 of their
    /// own and 2 shared into a team: every view shows them those 5, and
    /// the big account still pages through its own.
    async fn a_small_reader_sees_exactly_their_rows(store: Store, l: &str) {
        let tools = ToolService::new(store.clone());
        let (_, big) = user(&store, "vis-big").await;
        let (us, small) = user(&store, "vis-small").await;
        let tag = unique("v").replace('-', "");
        let inputs = (0..1200)
            .map(|i| import(&format!("Ledger note {i} of the big account ({tag})."), &format!("{tag}-{i}")))
            .collect();
        let imported = tools.run_batch::<tool::ImportMemory>(&big, inputs).await.expect("the batch commits");
        let first_import = imported[0].as_ref().expect("imported").memory_id.clone().expect("an id").as_str().to_string();
        let slug = unique("vis").replace('-', "_");
        ok(store.create_team(&big, input!(CreateTeamInput, &json!({"slug": slug}))).await, l, "team");
        join_team(&store, &big, &slug, &us.email, TeamRole::Reader, l).await;
        let mut expected = BTreeSet::new();
        for i in 0..2 {
            expected.insert(mem(&store, &big, l, json!({"content": format!("Team ledger rule {i} ({tag})."), "kind": "fact", "scope": format!("team.{slug}")})).await);
        }
        for i in 0..3 {
            expected.insert(mem(&store, &small, l, json!({"content": format!("My ledger note {i} ({tag})."), "kind": "fact", "scope": "personal"})).await);
        }
        let filter = MemoryFilter::default();
        let page = ok(store.browse_memories(&small, &filter, None, 50).await, l, "browse");
        let seen: BTreeSet<String> = page.items.iter().map(|m| m.id.as_str().to_string()).collect();
        assert_eq!(seen, expected, "[{l}] the page");
        assert_eq!(page.next, None, "[{l}]");
        let facets = ok(store.memory_facets(&small, &filter).await, l, "facets");
        assert_eq!(facets.kinds.iter().map(|(_, n)| n).sum::<u64>(), 5, "[{l}] {facets:?}");
        assert_eq!(facets.scopes.len(), 2, "[{l}] {facets:?}");
        let insight = ok(store.insight(&small, 12).await, l, "insight");
        assert_eq!(insight.by_scope.iter().map(|(_, n)| n).sum::<u64>(), 5, "[{l}] {insight:?}");
        let export = ok(call(&store, &small, "export_memories", json!({"scopes": ["*"]})).await, l, "export");
        let exported: BTreeSet<String> = export["items"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect();
        assert_eq!(exported, expected, "[{l}] the export");
        // Recall of a word all 1,205 memories hold: the small reader's
        // five (on SQLite their match is narrowed in the full-text index
        // to their owner and scope tokens first, `Visible::fts_tenants`).
        let recalled = |out: zm_contracts::RecallOutput| -> BTreeSet<String> {
            out.memories.iter().map(|m| m.id.as_str().to_string()).collect()
        };
        let out = ok(recall(&store, &small, json!({"query": "ledger", "k": 20})).await, l, "recall");
        assert_eq!(recalled(out), expected, "[{l}] recall");
        // One of the big account's notes moved into the team is shared
        // with the small reader from then on: the index's tokens follow
        // the scope and the sharing (migration 19's update trigger).
        ok(call(&store, &big, "move_memories", json!({"memory_ids": [first_import], "scope": format!("team.{slug}")})).await, l, "move");
        expected.insert(first_import.clone());
        let out = ok(recall(&store, &small, json!({"query": "ledger", "k": 20})).await, l, "recall after the move");
        assert_eq!(recalled(out), expected, "[{l}] recall after the move");
        let out = ok(recall(&store, &small, json!({"query": "big account ledger note", "k": 20})).await, l, "recall of its words");
        assert!(recalled(out).contains(&first_import), "[{l}] the moved note by its own words");
        // A near-duplicate of the small reader's own, in words all 1,200 of
        // the big account's memories hold (the probe's common-words path;
        // on SQLite narrowed to their owner token inside the index).
        let first = ok(remember(&store, &small, json!({"content": format!("Ledger note of the big account ({tag})."), "kind": "fact", "scope": "personal"})).await, l, "remember");
        let again = ok(remember(&store, &small, json!({"content": format!("The big account: ledger note ({tag})!"), "kind": "fact", "scope": "personal"})).await, l, "remember again");
        let similar: Vec<String> = again.similar_existing.unwrap_or_default().iter().map(|s| s.id.as_str().to_string()).collect();
        assert_eq!(similar, [first.memory_id.as_str().to_string()], "[{l}] the probe finds the reader's own and nobody else's");
        assert!(store.integrity_check().await.expect("integrity check"), "[{l}] integrity");
        // The big account pages through its own, newest first.
        let page = ok(store.browse_memories(&big, &filter, None, 50).await, l, "big browse");
        assert_eq!(page.items.len(), 50, "[{l}]");
        assert!(page.next.is_some(), "[{l}]");
        assert!(page.items.iter().all(|m| !expected.contains(m.id.as_str()) || m.scope.starts_with("team.")), "[{l}]");
    }
}
