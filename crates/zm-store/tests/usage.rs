//! Recall counts (migration 0010), on every backend: what a recall through
//! the tool service notes is written by `flush_usage`, summed across calls
//! and store clones; only readable live memories are listed; a memory no
//! agent recalled is counted as never recalled.

mod common;

use common::*;
use serde_json::json;
use zm_store::Store;

backend_tests! {
    async fn recalls_are_counted_and_never_recalled_ones_listed(store: Store, l: &str) {
        let (_, a) = user(&store, "use-a").await;
        let (_, b) = user(&store, "use-b").await;
        let hot = mem(&store, &a, l, json!({"content": "The ingest queue is Kafka.", "kind": "fact", "scope": "personal"})).await;
        let cold = mem(&store, &a, l, json!({"content": "The office plant needs water on Fridays.", "kind": "fact", "scope": "personal"})).await;
        let theirs = mem(&store, &b, l, json!({"content": "B's ingest notes: Kafka partitions are 12.", "kind": "fact", "scope": "personal"})).await;
        for _ in 0..3 {
            ok(call(&store, &a, "recall", json!({"query": "ingest queue Kafka"})).await, l, "recall");
        }
        // Another clone of the store (another request's) shares the buffer.
        let clone = store.clone();
        ok(call(&clone, &b, "recall", json!({"query": "ingest Kafka partitions"})).await, l, "recall b");
        ok(store.flush_usage().await, l, "flush");
        let usage = ok(store.usage_figures(&a, 12).await, l, "usage");
        assert_eq!(usage.most.first().map(|(id, _, n)| (id.as_str(), *n)), Some((hot.as_str(), 3)), "[{l}] {usage:?}");
        assert!(!usage.most.iter().any(|(id, _, _)| *id == theirs), "[{l}] B's memory is not A's to see");
        assert!(usage.never >= 1 && usage.never_oldest.iter().any(|(id, _)| *id == cold), "[{l}] {usage:?}");
        // Counts add up across flushes; a forgotten memory is not listed.
        ok(call(&store, &a, "recall", json!({"query": "ingest queue Kafka"})).await, l, "recall again");
        ok(store.flush_usage().await, l, "flush again");
        let usage = ok(store.usage_figures(&a, 12).await, l, "usage");
        assert_eq!(usage.most.first().map(|(_, _, n)| *n), Some(4), "[{l}]");
        ok(call(&store, &a, "forget", json!({"memory_id": hot})).await, l, "forget");
        assert!(ok(store.usage_figures(&a, 12).await, l, "usage").most.is_empty(), "[{l}]");
        let b_usage = ok(store.usage_figures(&b, 12).await, l, "usage b");
        assert_eq!(b_usage.most.first().map(|(id, _, _)| id.as_str()), Some(theirs.as_str()), "[{l}]");
    }

    /// Counts are the caller's own: a teammate's recalls of a memory of
    /// the team's neither raise the writer's count nor take it off the
    /// writer's "never recalled"; erasing the teammate leaves the
    /// writer's counts.
    async fn a_teammates_recalls_are_theirs(store: Store, l: &str) {
        let (_, a) = user(&store, "own-a").await;
        let slug = create_team_of(&store, &a, l, "own-team").await;
        let (_, b) = team_member(&store, &a, l, &slug, "own-b", zm_contracts::TeamRole::Reader).await;
        let team = format!("team.{slug}");
        let shared = mem(&store, &a, l, json!({"content": "Staging deploys go through the blue pipeline.", "kind": "convention", "scope": team})).await;
        let mine = mem(&store, &a, l, json!({"content": "Production deploys need two approvals.", "kind": "convention", "scope": team})).await;
        // Through the tool service's `call`, which notes what a recall
        // returned.
        let recalled = |out: serde_json::Value| -> Vec<String> {
            out["memories"].as_array().expect("memories").iter().map(|m| m["id"].as_str().expect("id").to_string()).collect()
        };
        for _ in 0..5 {
            let hits = recalled(ok(call(&store, &b, "recall", json!({"query": "staging blue pipeline"})).await, l, "recall b"));
            assert_eq!(hits, vec![shared.clone()], "[{l}] B reads the team's memory");
        }
        let hits = recalled(ok(call(&store, &a, "recall", json!({"query": "production approvals"})).await, l, "recall a"));
        assert_eq!(hits, vec![mine.clone()], "[{l}]");
        ok(store.flush_usage().await, l, "flush");
        let usage = ok(store.usage_figures(&a, 12).await, l, "usage a");
        assert_eq!(usage.most.iter().map(|(id, _, n)| (id.as_str(), *n)).collect::<Vec<_>>(), vec![(mine.as_str(), 1)], "[{l}] only A's own recall: {usage:?}");
        assert!(usage.never_oldest.iter().any(|(id, _)| *id == shared), "[{l}] A's agents never recalled it: {usage:?}");
        let usage = ok(store.usage_figures(&b, 12).await, l, "usage b");
        assert_eq!(usage.most.first().map(|(id, _, n)| (id.as_str(), *n)), Some((shared.as_str(), 5)), "[{l}] {usage:?}");
        assert!(!usage.most.iter().any(|(id, _, _)| *id == mine), "[{l}] B never recalled it: {usage:?}");
        // Erasing B (whose counts go with the account's row) leaves A's.
        ok(call(&store, &b, "delete_account", json!({})).await, l, "erase b");
        let usage = ok(store.usage_figures(&a, 12).await, l, "usage a after");
        assert_eq!(usage.most.first().map(|(_, _, n)| *n), Some(1), "[{l}] {usage:?}");
    }

    /// The Insight page's open loops by age: under a week, under 30 days,
    /// under 91 days, older; closed loops and other kinds are not loops.
    async fn open_loops_are_counted_by_age(store: Store, l: &str) {
        const DAY: i64 = 86_400_000;
        let (_, a) = user(&store, "age-a").await;
        let task = |text: &str| json!({"content": text, "kind": "task", "scope": "personal"});
        mem(&store, &a, l, task("Migrate the old billing cron.")).await;
        store.clock().advance_ms(100 * DAY);
        mem(&store, &a, l, task("Rotate the staging certificates.")).await;
        let closed = mem(&store, &a, l, task("Archive the 2019 invoices.")).await;
        ok(call(&store, &a, "close_loop", json!({"memory_id": closed})).await, l, "close");
        store.clock().advance_ms(60 * DAY);
        mem(&store, &a, l, json!({"content": "Which region hosts the replicas?", "kind": "open-question", "scope": "personal"})).await;
        mem(&store, &a, l, json!({"content": "The replicas live in eu-west.", "kind": "fact", "scope": "personal"})).await;
        store.clock().advance_ms(20 * DAY);
        mem(&store, &a, l, task("Renew the domain.")).await;
        store.clock().advance_ms(3 * DAY);
        mem(&store, &a, l, task("Reply to the auditor.")).await;
        // Ages now: 183, 83 and 23 days, 3 days and 0.
        let insight = ok(store.insight(&a, 12).await, l, "insight");
        assert_eq!(insight.open_loop_ages, [2, 1, 1, 1], "[{l}]");
    }

    /// The Insight page charts the scopes and agents holding most one by
    /// one, and sums the rest: no memory is left out of its totals.
    async fn insight_sums_the_agents_past_those_charted(store: Store, l: &str) {
        let (_, a) = user(&store, "many-agents").await;
        let n = usize::try_from(zm_store::web::INSIGHT_VALUES).unwrap() + 2;
        for i in 0..n {
            let mut agent = a.clone();
            agent.agent_name = Some(format!("agent-{i:02}"));
            // The first agent writes twice: it is charted, two of the others are not.
            for copy in 0..if i == 0 { 2 } else { 1 } {
                mem(&store, &agent, l, json!({"content": format!("Agent {i} noted shard {copy} of the rollout."), "kind": "fact", "scope": "personal"})).await;
            }
        }
        let insight = ok(store.insight(&a, 12).await, l, "insight");
        assert_eq!(insight.by_agent.len(), n - 2, "[{l}] {insight:?}");
        assert_eq!(insight.by_agent[0], ("agent-00".to_string(), 2), "[{l}]");
        assert_eq!(insight.other_agents, 2, "[{l}] {insight:?}");
        let charted: u64 = insight.by_agent.iter().map(|(_, n)| n).sum();
        assert_eq!(charted + insight.other_agents, u64::try_from(n + 1).unwrap(), "[{l}]");
        assert_eq!(insight.other_scopes, 0, "[{l}] one scope, charted");
    }

    async fn recall_activity_is_counted_per_agent_and_user(store: Store, l: &str) {
        let (_, a) = user(&store, "act-a").await;
        let (_, b) = user(&store, "act-b").await;
        mem(&store, &a, l, json!({"content": "The ingest queue is Kafka.", "kind": "fact", "scope": "personal"})).await;
        let mut claude = a.clone();
        claude.agent_name = Some("claude-code".into());
        for _ in 0..2 {
            ok(call(&store, &claude, "recall", json!({"query": "ingest queue"})).await, l, "recall");
        }
        ok(call(&store, &a, "recall", json!({"query": "nothing matches this zebra"})).await, l, "recall");
        ok(call(&store, &b, "recall", json!({"query": "ingest queue"})).await, l, "recall b");
        ok(store.flush_usage().await, l, "flush");
        let act = ok(store.usage_figures(&a, 12).await, l, "usage").activity;
        let of = |agent: &str| act.iter().filter(|(_, g, _, _)| g == agent).map(|(_, _, r, h)| (*r, *h)).fold((0, 0), |s, x| (s.0 + x.0, s.1 + x.1));
        assert_eq!(of("claude-code"), (2, 2), "[{l}] {act:?}");
        // No client name: the transport stands for the agent.
        assert_eq!(of("internal"), (1, 0), "[{l}] {act:?}");
        assert_eq!(act.len(), 2, "[{l}] B's recall is not A's activity: {act:?}");
        // Counts add up across flushes.
        ok(call(&store, &claude, "recall", json!({"query": "ingest queue"})).await, l, "recall");
        ok(store.flush_usage().await, l, "flush");
        let act = ok(store.usage_figures(&a, 12).await, l, "usage").activity;
        let claude_total: u64 = act.iter().filter(|(_, g, _, _)| g == "claude-code").map(|(_, _, r, _)| *r).sum();
        assert_eq!(claude_total, 3, "[{l}] {act:?}");
        let b_act = ok(store.usage_figures(&b, 12).await, l, "usage b").activity;
        assert_eq!(b_act.iter().map(|(_, _, r, _)| *r).sum::<u64>(), 1, "[{l}] {b_act:?}");
    }

    /// A client that names itself anew on every call (a session id in its
    /// name) does not grow the Insight page without end: the agents that
    /// recalled most are listed, the rest summed as one row per week, and
    /// no recall is lost from the totals.
    async fn recall_activity_lists_the_busiest_agents_and_sums_the_rest(store: Store, l: &str) {
        let (_, a) = user(&store, "many-a").await;
        mem(&store, &a, l, json!({"content": "The ingest queue is Kafka.", "kind": "fact", "scope": "personal"})).await;
        let agents = zm_store::usage::ACTIVITY_AGENTS + 5;
        for i in 0..agents {
            let mut agent = a.clone();
            agent.agent_name = Some(format!("agent-{i:02}"));
            // agent-00 recalls most, so it is listed whatever the order.
            for _ in 0..if i == 0 { 3 } else { 1 } {
                ok(call(&store, &agent, "recall", json!({"query": "ingest queue"})).await, l, "recall");
            }
        }
        ok(store.flush_usage().await, l, "flush");
        let act = ok(store.usage_figures(&a, 12).await, l, "usage").activity;
        let named: std::collections::BTreeSet<&str> = act.iter().map(|(_, g, _, _)| g.as_str()).filter(|g| *g != zm_store::usage::OTHER_AGENTS).collect();
        assert_eq!(named.len(), zm_store::usage::ACTIVITY_AGENTS, "[{l}] {act:?}");
        assert!(named.contains("agent-00"), "[{l}] the busiest is listed: {act:?}");
        let others: u64 = act.iter().filter(|(_, g, _, _)| g == zm_store::usage::OTHER_AGENTS).map(|(_, _, r, _)| *r).sum();
        assert_eq!(others, 5, "[{l}] {act:?}");
        let total: u64 = act.iter().map(|(_, _, r, _)| *r).sum();
        assert_eq!(total, u64::try_from(agents).unwrap() + 2, "[{l}] every recall counted: {act:?}");
    }
}
