//! Thread tokens, on every backend: `build_context` issues and re-asserts
//! them, they route scope-less writes across sessions and pin reads, they
//! are owner-filtered and fail open (a foreign or unknown token routes
//! nothing), a conversation id re-pins with a new token (the environment
//! wins; earlier tokens keep their project), and they expire a day after
//! they were issued.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::ErrorCode;
use zm_contracts::prefixes::Prefix;
use zm_store::Store;

backend_tests! {
    async fn thread_tokens_route_across_sessions_and_expire(store: Store, label: &str) {
        let (_, caller) = user(&store, "thread").await;
        let (_, other) = user(&store, "thread-other").await;
        let first = with_session(&caller, "ses_first_connection");
        let ctx = ok(
            build_context(&store, &first, json!({"topic": "setup", "briefing": true, "project_hint": "https://gitlab.com/team/gamma-api.git"})).await,
            label,
            "briefing",
        );
        let project = ctx.project_scope.clone().expect("pinned");
        assert!(
            project.ends_with(".gamma_api"),
            "[{label}] project {project}"
        );
        let token = ctx.session.thread.clone().expect("thread");
        assert!(token.starts_with("thr_"), "[{label}] token {token}");

        // The same conversation asserts the same thread again.
        let again = ok(
            build_context(
                &store,
                &first,
                json!({"topic": "setup", "project_hint": "https://gitlab.com/team/gamma-api"}),
            )
            .await,
            label,
            "second briefing",
        );
        assert_eq!(
            again.session.thread.as_deref(),
            Some(token.as_str()),
            "[{label}] same thread"
        );

        // The connection keeps the thread it was given (as zm-mcp's
        // connection state does), so its scope-less writes follow it.
        let first = zm_store::Caller {
            thread: Some(token.clone()),
            ..first
        };
        let own = ok(
            remember(
                &store,
                &first,
                json!({"content": "gamma uses axum for HTTP."}),
            )
            .await,
            label,
            "session write",
        );
        assert_eq!(
            Some(own.scope.as_str()),
            Some(project.as_str()),
            "[{label}] transport thread routes"
        );

        // A second connection of the same user passes the token.
        let second = with_session(&caller, "ses_second_connection");
        err(
            remember(
                &store,
                &second,
                json!({"content": "gamma deploys with helm."}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "second connection without the token",
        );
        let out = ok(
            remember(
                &store,
                &second,
                json!({"content": "gamma deploys with helm.", "thread": token}),
            )
            .await,
            label,
            "write with the token",
        );
        assert_eq!(
            Some(out.scope.as_str()),
            Some(project.as_str()),
            "[{label}] the token routes"
        );
        let stored = ok(
            store.get_memory(&caller, &out.memory_id).await,
            label,
            "provenance",
        );
        let source = stored.source.unwrap_or_default();
        assert_eq!(
            source["thread"],
            json!(token),
            "[{label}] provenance thread"
        );
        assert_eq!(
            source["routing"]["via"],
            json!("session"),
            "[{label}] provenance routing"
        );

        // The token pins reads too, and recall echoes it.
        let read = ok(
            recall(&store, &second, json!({"query": "helm", "thread": token})).await,
            label,
            "recall with token",
        );
        assert_eq!(
            read.project_scope.as_deref(),
            Some(project.as_str()),
            "[{label}] token pins reads"
        );
        assert_eq!(
            read.session.thread.as_deref(),
            Some(token.as_str()),
            "[{label}] echoed"
        );

        // Another user's token is ignored (fail-open), so nothing routes.
        let e = err(
            remember(
                &store,
                &other,
                json!({"content": "hijack attempt", "thread": token}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "foreign token",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "foreign token");
        let other_same_session = with_session(&other, "ses_first_connection");
        let e = err(
            remember(
                &store,
                &other_same_session,
                json!({"content": "hijack attempt"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "foreign session id",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "foreign session id");
        let read = ok(
            recall(&store, &other, json!({"query": "helm", "thread": token})).await,
            label,
            "foreign read",
        );
        assert_eq!(
            read.project_scope, None,
            "[{label}] a foreign token pins nothing"
        );
        assert!(read.memories.is_empty(), "[{label}] nothing of the owner");
        assert_eq!(
            read.session.thread,
            None,
            "[{label}] a foreign token is not echoed"
        );
        // An unknown, well-formed token is ignored the same way.
        let e = err(
            remember(
                &store,
                &caller,
                json!({"content": "unknown token", "thread": "thr_0123456789abcdef.0123456789"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "unknown token",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "unknown token");

        // An explicit scope still records the thread in provenance.
        let explicit = ok(
            remember(
                &store,
                &second,
                json!({"content": "gamma has no GraphQL.", "scope": "core", "thread": token}),
            )
            .await,
            label,
            "explicit scope with a token",
        );
        assert_eq!(
            Some(explicit.scope.as_str()),
            Some(caller.core_scope().as_str()),
            "[{label}] explicit scope wins"
        );
        let stored = ok(
            store.get_memory(&caller, &explicit.memory_id).await,
            label,
            "provenance",
        );
        assert_eq!(
            stored.source.unwrap_or_default()["thread"],
            json!(token),
            "[{label}] thread marker with explicit scope"
        );

        // A client conversation id asserts its own thread, and the
        // environment wins: a new pin re-pins the conversation with a new
        // token (tokens are self-contained: the earlier one keeps the
        // project it was issued for until it expires).
        let conv = unique("conv-");
        let c1 = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "x", "project_hint": "/src/delta", "conversation_id": conv}),
            )
            .await,
            label,
            "conversation briefing",
        );
        let conv_token = c1.session.thread.unwrap();
        assert_ne!(
            conv_token, token,
            "[{label}] a conversation has its own thread"
        );
        let again = ok(
            build_context(
                &store,
                &second,
                json!({"topic": "x", "project_hint": "/src/delta", "conversation_id": conv}),
            )
            .await,
            label,
            "conversation briefing from another connection",
        );
        assert_eq!(
            again.session.thread.as_deref(),
            Some(conv_token.as_str()),
            "[{label}] the same conversation and project: the same thread"
        );
        let c2 = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "x", "project_hint": "/src/epsilon", "conversation_id": conv}),
            )
            .await,
            label,
            "conversation re-pinned",
        );
        let repinned = c2.session.thread.unwrap();
        assert_ne!(
            repinned, conv_token,
            "[{label}] a re-pin issues a new token"
        );
        let out = ok(
            remember(
                &store,
                &second,
                json!({"content": "epsilon is written in Go.", "thread": repinned}),
            )
            .await,
            label,
            "write on the re-pinned thread",
        );
        assert_eq!(
            Some(out.scope.clone()), c2.project_scope,
            "[{label}] the thread follows the environment"
        );
        assert!(
            out.scope.as_str().ends_with(".epsilon"),
            "[{label}] epsilon project"
        );
        let stored = ok(
            store.get_memory(&caller, &out.memory_id).await,
            label,
            "conversation provenance",
        );
        let delta = ok(
            remember(
                &store,
                &second,
                json!({"content": "delta is written in Rust.", "thread": conv_token}),
            )
            .await,
            label,
            "write on the first token of the conversation",
        );
        assert!(
            delta.scope.as_str().ends_with(".delta"),
            "[{label}] an earlier token keeps its project"
        );
        let stored_delta = ok(
            store.get_memory(&caller, &delta.memory_id).await,
            label,
            "conversation provenance",
        );
        assert_eq!(
            stored.source.unwrap_or_default()["conversation"],
            stored_delta.source.unwrap_or_default()["conversation"],
            "[{label}] both tokens stamp the same conversation"
        );

        // Expiry: a day without assertion and the token no longer routes.
        store.clock().advance_ms(25 * HOUR_MS);
        let e = err(
            remember(
                &store,
                &second,
                json!({"content": "gamma uses tokio.", "thread": token}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "expired token",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "expired token");
        let e = err(
            remember(&store, &first, json!({"content": "gamma uses tokio."})).await,
            ErrorCode::ValidationFailed,
            label,
            "expired transport thread",
        );
        assert_prefix(
            &e,
            Prefix::ScopeTargetRequired,
            label,
            "expired transport thread",
        );
        let read = ok(
            recall(&store, &second, json!({"query": "helm", "thread": token})).await,
            label,
            "expired read",
        );
        assert_eq!(
            read.project_scope, None,
            "[{label}] an expired token pins nothing"
        );
    }

    /// A briefing pinned by `project_hint` to another project than the
    /// thread it is given hands back a thread of the project it reports
    /// (in the same conversation): echoed, it routes writes there.
    async fn a_briefing_hands_back_a_thread_of_its_own_project(store: Store, label: &str) {
        let (_, caller) = user(&store, "thread-repin").await;
        let alpha = ok(build_context(&store, &caller, json!({"topic": "x", "briefing": true, "project_hint": "/src/alpha-repin"})).await, label, "alpha");
        let t_alpha = alpha.session.thread.clone().expect("a thread");
        let beta = ok(build_context(&store, &caller, json!({"topic": "x", "briefing": true, "project_hint": "/src/beta-repin", "thread": t_alpha})).await, label, "beta");
        let reported = beta.project_scope.clone().expect("pinned");
        assert!(reported.ends_with(".beta_repin"), "[{label}] {reported}");
        let echoed = beta.session.thread.clone().expect("a thread");
        let wrote = ok(remember(&store, &caller, json!({"content": "beta ships on Fridays.", "thread": echoed})).await, label, "echo the thread");
        assert_eq!(wrote.scope.as_str(), reported, "[{label}] the write lands in the briefing's project");
        // A recall given `scopes` reads only them: it reports no project
        // from the thread (nor attaches one), and echoes the thread.
        let read = ok(recall(&store, &caller, json!({"query": "fridays", "scopes": ["core"], "thread": echoed})).await, label, "recall with scopes");
        assert_eq!(read.project_scope, None, "[{label}] nothing pinned");
        assert_eq!(read.session.attached_project, None, "[{label}] nothing attached");
        assert_eq!(read.session.thread.as_deref(), Some(echoed.as_str()), "[{label}] the thread echoed");
    }
}
