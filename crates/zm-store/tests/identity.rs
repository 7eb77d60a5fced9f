//! Identity, on every backend: personal access tokens (creation, scopes,
//! authentication, listing without secrets, revocation — foreign and
//! missing alike) and passwords (verification, case rules, duplicate and
//! invalid accounts).
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use zm_contracts::ErrorCode;
use zm_store::{SCOPE_READ, SCOPE_WRITE, Store, Transport};

backend_tests! {
    /// Text holding U+0000 that reaches the store unchecked is never
    /// `internal`: SQLite finds nothing by it, PostgreSQL (which cannot
    /// store it) answers `validation_failed`. The HTTP layer and tool
    /// inputs refuse it first; this is the net under them.
    async fn a_nul_in_unchecked_text_is_never_internal(store: Store, label: &str) {
        let (u, caller) = user(&store, "nul").await;
        let nul_email = format!("{}\0", u.email);
        match store.verify_password(&nul_email, PASSWORD).await {
            Ok(found) => assert!(found.is_none(), "[{label}] signs nobody in"),
            Err(e) => assert_eq!(e.code, ErrorCode::ValidationFailed, "[{label}] {e:?}"),
        }
        match store.get_team(&caller, "a\0b").await {
            Ok(t) => panic!("[{label}] found a team {t:?}"),
            Err(e) => assert!(
                matches!(e.code, ErrorCode::NotFound | ErrorCode::ValidationFailed),
                "[{label}] {e:?}"
            ),
        }
        if label == "postgres" {
            err(store.verify_password(&nul_email, PASSWORD).await, ErrorCode::ValidationFailed, label, "PostgreSQL refuses the text");
        }
    }

    /// A password longer than `MAX_PASSWORD_BYTES` is refused when set
    /// (and the old one stays); one of exactly that length is set and signs
    /// in.
    async fn a_password_over_the_limit_is_refused_when_set(store: Store, label: &str) {
        use zm_store::identity::MAX_PASSWORD_BYTES;
        let (u, _) = user(&store, "pwlimit").await;
        let longest = "é".repeat(MAX_PASSWORD_BYTES / 2);
        assert_eq!(longest.len(), MAX_PASSWORD_BYTES);
        ok(store.change_password(&u.id, &longest, false).await, label, "the longest password");
        let me = ok(store.verify_password(&u.email, &longest).await, label, "sign in with it");
        assert_eq!(me.map(|m| m.id), Some(u.id.clone()), "[{label}]");
        let over = format!("{longest}x");
        err(store.change_password(&u.id, &over, false).await, ErrorCode::ValidationFailed, label, "one byte over");
        assert!(ok(store.verify_password(&u.email, &longest).await, label, "the old one").is_some(), "[{label}] kept");
    }

    /// What a person confirmed with their password (the dashboard's new
    /// token, its password change) is done only while the account still
    /// has that password and is enabled: an operator's `user passwd
    /// --revoke-tokens` or `user disable` committed after the check is not
    /// outrun by a token it would have revoked, nor overwritten by the old
    /// password's holder.
    async fn a_confirmed_password_binds_what_it_confirms(store: Store, label: &str) {
        let (u, _) = user(&store, "confirmed").await;
        let verified = ok(store.verify_password(&u.email, PASSWORD).await, label, "verify").expect("verifies");
        let token = |store: &Store| {
            let (store, id, cred) = (store.clone(), u.id.clone(), verified.credential);
            async move { store.create_confirmed_token(&id, Some(cred), Some("laptop"), &[zm_store::SCOPE_READ], None).await }
        };
        ok(token(&store).await, label, "a token while nothing changed");
        // Audited as the person's, on the dashboard (not the operator's CLI).
        let audit = ok(store.audit_rows(&u.id, 5).await, label, "audit");
        let created = audit.iter().find(|r| r["command"] == "token.create").expect("audited");
        assert_eq!(created["author_kind"], "human", "[{label}] {created}");
        let (_, new_cred) = ok(store.change_confirmed_password(&u.id, Some(verified.credential), "a brand new passphrase", false).await, label, "a change while nothing changed");
        // The operator's change, after the person's check.
        ok(store.change_password(&u.id, "the operator's passphrase", true).await, label, "operator");
        let refused = token(&store).await.expect_err("a token under a password no longer the account's");
        assert_eq!(refused.code, ErrorCode::Unauthorized, "[{label}] {refused:?}");
        let refused = store.change_confirmed_password(&u.id, Some(new_cred), "the attacker's passphrase", false).await.expect_err("a change under an old password");
        assert_eq!(refused.code, ErrorCode::Unauthorized, "[{label}] {refused:?}");
        assert!(ok(store.verify_password(&u.email, "the operator's passphrase").await, label, "verify").is_some(), "[{label}] the operator's password stands");
        // Disabled after the check: nothing either.
        let now = ok(store.verify_password(&u.email, "the operator's passphrase").await, label, "verify").expect("verifies");
        ok(store.disable_user(&u.id).await, label, "disable");
        let refused = store.create_confirmed_token(&u.id, Some(now.credential), None, &[zm_store::SCOPE_READ], None).await.expect_err("a token of a disabled account");
        assert_eq!(refused.code, ErrorCode::Unauthorized, "[{label}] {refused:?}");
    }

    async fn tokens_and_passwords(store: Store, label: &str) {
        let (u, _) = user(&store, "tok").await;
        let (other, _) = user(&store, "tok-other").await;

        let (info, secret) = ok(
            store
                .create_token(&u.id, Some("laptop"), &[SCOPE_READ, SCOPE_WRITE])
                .await,
            label,
            "create token",
        );
        assert!(
            secret.starts_with("zm_pat_") && secret.len() > 30,
            "[{label}] secret {secret:?}"
        );
        assert_eq!(info.user_id, u.id, "[{label}] token owner");
        let (_, second) = ok(
            store.create_token(&u.id, None, &[SCOPE_READ]).await,
            label,
            "second token",
        );
        assert_ne!(secret, second, "[{label}] secrets are unique");

        let auth =
            ok(store.authenticate(&secret).await, label, "authenticate").expect("valid token");
        assert_eq!(auth.user_id, u.id, "[{label}] authenticates as its user");
        assert_eq!(auth.token_id, info.id, "[{label}] token id");
        assert!(auth.can_write(), "[{label}] write scope");
        let read_only = ok(
            store.authenticate(&second).await,
            label,
            "authenticate read-only",
        )
        .expect("valid");
        assert!(!read_only.can_write(), "[{label}] read-only token");
        assert_eq!(
            ok(
                store.authenticate("zm_pat_not_a_real_token").await,
                label,
                "bogus"
            ),
            None,
            "[{label}] bogus token"
        );
        let mut tampered = secret.clone();
        tampered.push('x');
        assert_eq!(
            ok(store.authenticate(&tampered).await, label, "tampered"),
            None,
            "[{label}] tampered token"
        );

        // The secret is never listed.
        let listed = ok(store.list_tokens(&u.id).await, label, "list");
        assert_eq!(listed.len(), 2, "[{label}] two tokens");
        assert!(
            !format!("{listed:?}").contains(&secret),
            "[{label}] the listing has no secret"
        );
        assert!(
            ok(store.list_tokens(&other.id).await, label, "list other").is_empty(),
            "[{label}] other lists none"
        );

        // Another user cannot revoke it, and it reads as not found.
        let e = err(
            store.revoke_token(&other.id, &info.id, Transport::Cli).await,
            ErrorCode::NotFound,
            label,
            "foreign revoke",
        );
        let ghost = err(
            store
                .revoke_token(&other.id, "tok_0123456789abcdef.0123456789", Transport::Cli)
                .await,
            ErrorCode::NotFound,
            label,
            "ghost revoke",
        );
        assert_eq!(
            e.message, ghost.message,
            "[{label}] foreign and missing look alike"
        );
        assert!(
            ok(store.authenticate(&secret).await, label, "still valid").is_some(),
            "[{label}] still valid"
        );

        ok(store.revoke_token(&u.id, &info.id, Transport::Cli).await, label, "revoke");
        assert_eq!(
            ok(store.authenticate(&secret).await, label, "revoked"),
            None,
            "[{label}] revoked token fails"
        );
        err(
            store.revoke_token(&u.id, &info.id, Transport::Cli).await,
            ErrorCode::NotFound,
            label,
            "revoke twice",
        );
        assert!(
            ok(store.authenticate(&second).await, label, "other token").is_some(),
            "[{label}] the other token lives"
        );

        // Passwords.
        let me = ok(
            store.verify_password(&u.email, PASSWORD).await,
            label,
            "right password",
        );
        assert_eq!(
            me.map(|m| m.id),
            Some(u.id.clone()),
            "[{label}] right password"
        );
        let upper = ok(
            store
                .verify_password(&u.email.to_uppercase(), PASSWORD)
                .await,
            label,
            "email case",
        );
        assert_eq!(
            upper.map(|m| m.id),
            Some(u.id.clone()),
            "[{label}] email is case-insensitive"
        );
        assert_eq!(
            ok(
                store.verify_password(&u.email, "wrong password").await,
                label,
                "wrong"
            ),
            None,
            "[{label}] wrong password"
        );
        assert_eq!(
            ok(
                store
                    .verify_password(&other.email, PASSWORD.to_uppercase().as_str())
                    .await,
                label,
                "wrong"
            ),
            None,
            "[{label}] case matters"
        );
        assert_eq!(
            ok(
                store
                    .verify_password(&format!("{}@nowhere.invalid", unique("nobody")), PASSWORD)
                    .await,
                label,
                "unknown"
            ),
            None,
            "[{label}] unknown user"
        );
        // Duplicate emails are a conflict, bad input a validation failure.
        err(
            store.create_user(&u.email, PASSWORD).await,
            ErrorCode::Conflict,
            label,
            "duplicate email",
        );
        err(
            store.create_user("not-an-email", PASSWORD).await,
            ErrorCode::ValidationFailed,
            label,
            "bad email",
        );
        err(
            store
                .create_user(&format!("{}@x.invalid", unique("short")), "short")
                .await,
            ErrorCode::ValidationFailed,
            label,
            "short password",
        );
    }
}
