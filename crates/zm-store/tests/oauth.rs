//! The OAuth store on every backend: single-use codes, rotation, family
//! revocation on replay, client revocation, and the races between them
//! (a sign-in outrun by a password change or a disable included).
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use zm_contracts::ErrorCode;
use zm_store::Store;
use zm_store::oauth::{CodeExchange, IssuedTokens, NewCode, OauthError, ResourceCheck};

const REDIRECT: &str = "http://127.0.0.1:5000/cb";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

async fn client(store: &Store) -> String {
    store
        .register_oauth_client(Some("test"), &[REDIRECT.to_string()], None, None)
        .await
        .unwrap()
        .id
}

async fn code(store: &Store, client: &str, user: &str) -> String {
    let credential = store.user_by_id(user).await.unwrap().unwrap().credential;
    store
        .issue_oauth_code(
            NewCode {
                client_id: client,
                user_id: user,
                credential,
                redirect_uri: REDIRECT,
                code_challenge: CHALLENGE,
                resource: None,
                scope: "mcp:read mcp:write",
            },
            None,
        )
        .await
        .unwrap()
}

async fn exchange(store: &Store, client: &str, code: &str) -> Result<IssuedTokens, OauthError> {
    store
        .exchange_oauth_code(
            CodeExchange {
                code,
                client_id: client,
                redirect_uri: REDIRECT,
                verifier_challenge: CHALLENGE,
            },
            None,
            None,
        )
        .await
}

/// A code for `user` at `client`, its authorization request naming
/// `resource` (or none).
async fn code_naming(store: &Store, client: &str, user: &str, resource: Option<&str>) -> String {
    let credential = store.user_by_id(user).await.unwrap().unwrap().credential;
    let new = NewCode {
        client_id: client,
        user_id: user,
        credential,
        redirect_uri: REDIRECT,
        code_challenge: CHALLENGE,
        resource,
        scope: "mcp:read mcp:write",
    };
    store.issue_oauth_code(new, None).await.unwrap()
}

/// `code` exchanged by a token request naming the resource `wanted`
/// checks a grant's against (`None`: naming none).
async fn exchange_naming(
    store: &Store,
    client: &str,
    code: &str,
    wanted: Option<ResourceCheck<'_>>,
) -> Result<IssuedTokens, OauthError> {
    let ex = CodeExchange {
        code,
        client_id: client,
        redirect_uri: REDIRECT,
        verifier_challenge: CHALLENGE,
    };
    store.exchange_oauth_code(ex, wanted, None).await
}

fn invalid_target<T: std::fmt::Debug>(r: Result<T, OauthError>, label: &str, what: &str) {
    match r {
        Err(OauthError::InvalidTarget(_)) => {}
        other => panic!("[{label}] {what}: expected invalid_target, got {other:?}"),
    }
}

async fn works(store: &Store, token: &str) -> bool {
    store.authenticate(token).await.unwrap().is_some()
}

fn invalid_grant<T: std::fmt::Debug>(r: Result<T, OauthError>, label: &str, what: &str) {
    match r {
        Err(OauthError::InvalidGrant(_)) => {}
        other => panic!("[{label}] {what}: expected invalid_grant, got {other:?}"),
    }
}

async fn futures_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

backend_tests! {
    /// A sign-in checked the password, then the password changed or the
    /// account was disabled before its code was stored: no code, so no
    /// token family outlives the change.
    async fn a_sign_in_outrun_by_a_password_change_or_disable_gets_no_code(store: Store, label: &str) {
        let (u, _) = user(&store, "oauth-race").await;
        let c = client(&store).await;
        let issue = |credential| {
            let (store, c, id) = (&store, c.clone(), u.id.clone());
            async move {
                let new = NewCode {
                    client_id: &c,
                    user_id: &id,
                    credential,
                    redirect_uri: REDIRECT,
                    code_challenge: CHALLENGE,
                    resource: None,
                    scope: "mcp:read mcp:write",
                };
                store.issue_oauth_code(new, None).await
            }
        };
        // What the sign-in verified, then `user passwd`.
        let verified = store.user_by_id(&u.id).await.unwrap().unwrap().credential;
        store.change_password(&u.id, "a brand new password", false).await.unwrap();
        let e = issue(verified).await.expect_err("a stale password issues nothing");
        assert_eq!(e.code, ErrorCode::Unauthorized, "[{label}] {e:?}");
        // Signed in with the new password: a code.
        let now = store.user_by_id(&u.id).await.unwrap().unwrap().credential;
        assert_ne!(now, verified, "[{label}]");
        let fresh = issue(now).await.expect("the current password signs in");
        exchange(&store, &c, &fresh).await.expect("and its code works");
        // Disabled meanwhile: nothing either.
        store.disable_user(&u.id).await.unwrap();
        let e = issue(now).await.expect_err("a disabled account issues nothing");
        assert_eq!(e.code, ErrorCode::Unauthorized, "[{label}] {e:?}");
    }

    async fn codes_are_single_use_bound_and_short_lived(store: Store, label: &str) {
        let (u, _) = user(&store, "oauth-code").await;
        let c = client(&store).await;
        let first = code(&store, &c, &u.id).await;
        assert_eq!(first.len(), 43, "[{label}]");
        let t = exchange(&store, &c, &first).await.unwrap();
        assert!(t.access_token.starts_with("zm_oat_"), "[{label}]");
        assert!(t.refresh_token.starts_with("zm_ort_"), "[{label}]");
        assert_eq!(t.expires_in, 3600, "[{label}]");
        let auth = store.authenticate(&t.access_token).await.unwrap().unwrap();
        assert_eq!(auth.user_id, u.id, "[{label}]");
        assert!(auth.can_write(), "[{label}]");
        // The refresh token is not a bearer token.
        assert!(!works(&store, &t.refresh_token).await, "[{label}]");
        // Someone who saw the used code (a browser's history) but holds
        // neither the client nor its verifier is refused, and signs
        // nobody out.
        let other = client(&store).await;
        invalid_grant(exchange(&store, &other, &first).await, label, "another client");
        let wrong_verifier = store
            .exchange_oauth_code(
                CodeExchange {
                    code: &first,
                    client_id: &c,
                    redirect_uri: REDIRECT,
                    verifier_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cX",
                },
                None,
                None,
            )
            .await;
        invalid_grant(wrong_verifier, label, "a wrong verifier");
        assert!(works(&store, &t.access_token).await, "[{label}] not a replay of the code's own client");
        // A second exchange fails and revokes what the first one issued.
        invalid_grant(exchange(&store, &c, &first).await, label, "reused code");
        assert!(
            !works(&store, &t.access_token).await,
            "[{label}] code replay kills the family"
        );

        // Bound to the PKCE challenge, the client and the redirect URI (and
        // spent by a failed attempt).
        let second = code(&store, &c, &u.id).await;
        let wrong = store
            .exchange_oauth_code(
                CodeExchange {
                    code: &second,
                    client_id: &c,
                    redirect_uri: REDIRECT,
                    verifier_challenge: "x".repeat(43).as_str(),
                },
                None,
                None,
            )
            .await;
        invalid_grant(wrong, label, "wrong verifier");
        invalid_grant(
            exchange(&store, &c, &second).await,
            label,
            "spent by the failure",
        );
        let third = code(&store, &c, &u.id).await;
        let other = client(&store).await;
        invalid_grant(
            exchange(&store, &other, &third).await,
            label,
            "other client",
        );

        // Five minutes.
        let late = code(&store, &c, &u.id).await;
        store.clock().advance_ms(5 * 60 * 1000 + 1);
        invalid_grant(exchange(&store, &c, &late).await, label, "expired code");
        // Access tokens last an hour.
        let fresh = code(&store, &c, &u.id).await;
        let t = exchange(&store, &c, &fresh).await.unwrap();
        assert!(works(&store, &t.access_token).await, "[{label}]");
        store.clock().advance_ms(3_600_000 + 1);
        assert!(
            !works(&store, &t.access_token).await,
            "[{label}] an hour later"
        );
        // The refresh token outlives it.
        let t2 = store
            .refresh_oauth_token(&t.refresh_token, &c, None, None, None)
            .await
            .unwrap();
        assert!(works(&store, &t2.access_token).await, "[{label}]");
    }

    async fn a_replayed_refresh_token_revokes_the_whole_family(store: Store, label: &str) {
        let (u, _) = user(&store, "oauth-family").await;
        let c = client(&store).await;
        let t1 = exchange(&store, &c, &code(&store, &c, &u.id).await)
            .await
            .unwrap();
        // A second, independent authorization of the same client.
        let other = exchange(&store, &c, &code(&store, &c, &u.id).await)
            .await
            .unwrap();
        let t2 = store
            .refresh_oauth_token(&t1.refresh_token, &c, None, None, None)
            .await
            .unwrap();
        assert_eq!(t2.family_id, t1.family_id, "[{label}]");
        let t3 = store
            .refresh_oauth_token(&t2.refresh_token, &c, Some("mcp:read"), None, None)
            .await
            .unwrap();
        assert_eq!(t3.scope, "mcp:read", "[{label}] narrowed");
        let auth = store.authenticate(&t3.access_token).await.unwrap().unwrap();
        assert!(!auth.can_write(), "[{label}]");
        // Narrowing applies to the access token; the family keeps its scope.
        let t4 = store
            .refresh_oauth_token(&t3.refresh_token, &c, Some("mcp:write mcp:read"), None, None)
            .await
            .unwrap();
        assert_eq!(t4.scope, "mcp:read mcp:write", "[{label}]");
        // Replay t1's (spent) refresh token.
        invalid_grant(
            store
                .refresh_oauth_token(&t1.refresh_token, &c, None, None, None)
                .await,
            label,
            "replay",
        );
        for (what, tok) in [
            ("t1 access", &t1.access_token),
            ("t2 access", &t2.access_token),
            ("t3 access", &t3.access_token),
            ("t4 access", &t4.access_token),
        ] {
            assert!(!works(&store, tok).await, "[{label}] {what} revoked");
        }
        invalid_grant(
            store
                .refresh_oauth_token(&t4.refresh_token, &c, None, None, None)
                .await,
            label,
            "the newest refresh token is dead too",
        );
        // The other family is untouched.
        assert!(works(&store, &other.access_token).await, "[{label}]");
        // Another client id cannot use a refresh token.
        let c2 = client(&store).await;
        invalid_grant(
            store
                .refresh_oauth_token(&other.refresh_token, &c2, None, None, None)
                .await,
            label,
            "foreign client",
        );
        // The refusal spent nothing: the token rotates for its own client,
        // and no replay was seen (the family lives on).
        let rotated = store
            .refresh_oauth_token(&other.refresh_token, &c, None, None, None)
            .await
            .expect("another client's attempt left the token as it was");
        assert!(works(&store, &rotated.access_token).await, "[{label}]");
        let audit_row = store
            .audit_rows(&u.id, 50)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r["command"] == "oauth.refresh" && r["payload"]["presented_client_id"] == c2);
        assert!(
            audit_row.is_some_and(|r| r["payload"]["client_id"] == c),
            "[{label}] the refusal's audit row names both clients"
        );
        let audit = store.audit_rows(&u.id, 50).await.unwrap();
        assert!(
            audit.iter().any(|r| r["command"] == "oauth.family_revoked"
                && r["payload"]["reason"] == "refresh_replay"),
            "[{label}] {audit:?}"
        );
    }

    /// RFC 7009: the holder revokes an access token alone, or a refresh
    /// token with its family; another client's revocation is refused and
    /// changes nothing; unknown tokens and personal access tokens are no
    /// error and stay as they were.
    async fn a_client_revokes_its_own_tokens(store: Store, label: &str) {
        let (u, _) = user(&store, "oauth-revoke").await;
        let (_, pat) = store.create_token(&u.id, None, &["mcp:read"]).await.unwrap();
        let c = client(&store).await;
        let t = exchange(&store, &c, &code(&store, &c, &u.id).await).await.unwrap();
        let other = exchange(&store, &c, &code(&store, &c, &u.id).await).await.unwrap();
        let c2 = client(&store).await;

        // Another client: refused, nothing revoked.
        invalid_grant(
            store.revoke_oauth_token(&t.access_token, &c2, None).await,
            label,
            "another client's access token",
        );
        invalid_grant(
            store.revoke_oauth_token(&t.refresh_token, &c2, None).await,
            label,
            "another client's refresh token",
        );
        assert!(works(&store, &t.access_token).await, "[{label}]");

        // An access token alone: the refresh token still rotates.
        store.revoke_oauth_token(&t.access_token, &c, None).await.unwrap();
        assert!(!works(&store, &t.access_token).await, "[{label}] access revoked");
        let t2 = store
            .refresh_oauth_token(&t.refresh_token, &c, None, None, None)
            .await
            .expect("revoking the access token leaves the refresh token");
        assert!(works(&store, &t2.access_token).await, "[{label}]");
        // Twice is no error.
        store.revoke_oauth_token(&t.access_token, &c, None).await.unwrap();

        // A refresh token ends its family, the newest access token too (a
        // millisecond later: the audit rows below come in order).
        store.clock().advance_ms(1);
        store.revoke_oauth_token(&t2.refresh_token, &c, None).await.unwrap();
        assert!(!works(&store, &t2.access_token).await, "[{label}] family revoked");
        invalid_grant(
            store.refresh_oauth_token(&t2.refresh_token, &c, None, None, None).await,
            label,
            "a revoked refresh token",
        );
        // Only that family: the other sign-in goes on.
        assert!(works(&store, &other.access_token).await, "[{label}] other family");
        // A spent refresh token of the family is no error either.
        store.revoke_oauth_token(&t.refresh_token, &c, None).await.unwrap();

        // Unknown tokens and personal access tokens: no error, no change.
        store.revoke_oauth_token("zm_ort_nothing", &c, None).await.unwrap();
        store.revoke_oauth_token(&pat, &c, None).await.unwrap();
        assert!(works(&store, &pat).await, "[{label}] a PAT is not the client's to revoke");

        // The grant stays: the client signs in again without the user.
        let again = exchange(&store, &c, &code(&store, &c, &u.id).await).await;
        assert!(again.is_ok(), "[{label}] {again:?}");
        let audit = store.audit_rows(&u.id, 50).await.unwrap();
        let rows = |refused: bool| -> Vec<serde_json::Value> {
            audit
                .iter()
                .filter(|r| r["command"] == "oauth.token_revoked" && r["error_code"].is_null() != refused)
                .cloned()
                .collect()
        };
        let kinds: Vec<String> = rows(false)
            .iter()
            .map(|r| r["payload"]["token_type"].as_str().unwrap_or("").to_string())
            .collect();
        assert_eq!(
            kinds,
            ["refresh_token", "access_token"],
            "[{label}] one audit row per revocation that changed something, newest first: {audit:?}"
        );
        let refused = rows(true);
        assert_eq!(refused.len(), 2, "[{label}] the two refusals: {audit:?}");
        assert!(
            refused.iter().all(|r| r["payload"]["client_id"] == c2 && r["payload"]["holder_client_id"] == c),
            "[{label}] {refused:?}"
        );
    }

    async fn racing_exchanges_and_refreshes_yield_one_winner(store: Store, label: &str) {
        let (u, _) = user(&store, "oauth-race").await;
        let c = client(&store).await;
        let the_code = code(&store, &c, &u.id).await;
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let (store, c, the_code) = (store.clone(), c.clone(), the_code.clone());
            tasks.push(tokio::spawn(async move {
                exchange(&store, &c, &the_code).await
            }));
        }
        let results: Vec<_> = futures_join(tasks).await;
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert!(wins <= 1, "[{label}] one code, at most one token pair");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, OauthError::InvalidGrant(_)), "[{label}] {e:?}");
            }
        }

        let t = exchange(&store, &c, &code(&store, &c, &u.id).await)
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let (store, r, c) = (store.clone(), t.refresh_token.clone(), c.clone());
            tasks.push(tokio::spawn(async move {
                store.refresh_oauth_token(&r, &c, None, None, None).await
            }));
        }
        let results: Vec<_> = futures_join(tasks).await;
        let issued: Vec<&IssuedTokens> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert!(issued.len() <= 1, "[{label}] one rotation at most");
        // Everyone after the first is a replay: the family is gone, including
        // whatever the winner received.
        for t in issued {
            assert!(!works(&store, &t.access_token).await, "[{label}]");
        }
    }

    async fn clients_are_listed_and_revoked_by_their_users(store: Store, label: &str) {
        let (u, _) = user(&store, "oauth-owner").await;
        let (v, _) = user(&store, "oauth-other").await;
        let c = client(&store).await;
        assert!(store.list_oauth_clients(&u.id).await.unwrap().is_empty());
        let pending = code(&store, &c, &u.id).await;
        let t = exchange(&store, &c, &code(&store, &c, &u.id).await)
            .await
            .unwrap();
        let tv = exchange(&store, &c, &code(&store, &c, &v.id).await)
            .await
            .unwrap();
        let listed = store.list_oauth_clients(&u.id).await.unwrap();
        assert_eq!(listed.len(), 1, "[{label}]");
        assert_eq!(listed[0].client.id, c, "[{label}]");
        assert_eq!(
            listed[0].client.owner_id.as_deref(),
            Some(u.id.as_str()),
            "[{label}] first authorizer owns it"
        );
        assert_eq!(
            listed[0].active_tokens, 2,
            "[{label}] one access, one refresh"
        );
        // v authorized it too but owns nothing; u's revocation leaves v alone.
        let e = store
            .revoke_oauth_client(&u.id, &zm_contracts::IdKind::OauthClient.generate())
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound, "[{label}]");
        store.revoke_oauth_client(&u.id, &c).await.unwrap();
        // Recorded, with the revocation itself.
        let audit = store.audit_rows(&u.id, 10).await.unwrap();
        assert!(
            audit.iter().any(|a| a["command"] == "oauth.revoke" && a["outcome"] == "ok"),
            "[{label}] {audit:?}"
        );
        assert!(!works(&store, &t.access_token).await, "[{label}]");
        invalid_grant(
            store
                .refresh_oauth_token(&t.refresh_token, &c, None, None, None)
                .await,
            label,
            "refresh after revocation",
        );
        invalid_grant(
            exchange(&store, &c, &pending).await,
            label,
            "pending code spent",
        );
        assert!(
            works(&store, &tv.access_token).await,
            "[{label}] another user's tokens live"
        );
        let listed = store.list_oauth_clients(&u.id).await.unwrap();
        assert!(listed[0].revoked_at.is_some(), "[{label}]");
        assert_eq!(listed[0].active_tokens, 0, "[{label}]");
        // Deleting an account takes its grants with it; the client stays for others.
        zm_store::ToolService::new(store.clone())
            .run::<zm_contracts::catalogue::tool::DeleteAccount>(
                &zm_store::Caller::new(v.id.clone()),
                zm_contracts::DeleteAccountInput {},
            )
            .await
            .unwrap();
        assert!(!works(&store, &tv.access_token).await, "[{label}]");
        assert!(store.oauth_client(&c).await.unwrap().is_some(), "[{label}]");
    }

    /// RFC 8707 §2.2: a code, and its family's refresh tokens, serve only
    /// the resource the authorization named. A request naming another is
    /// `invalid_target`: the code is spent (as by every refusal once its
    /// client and verifier are checked), the refresh token is not. A
    /// request naming none is for the grant's resource, and a grant that
    /// named none stands for the server's one resource.
    async fn a_token_request_gets_only_the_resource_its_grant_names(store: Store, label: &str) {
        const OURS: &str = "https://memory.example.com/mcp";
        let (u, _) = user(&store, "oauth-resource").await;
        let c = client(&store).await;
        let ours = |r: &str| r == OURS;
        let elsewhere = |r: &str| r == "https://elsewhere.example/mcp";

        let first = code_naming(&store, &c, &u.id, Some(OURS)).await;
        invalid_target(exchange_naming(&store, &c, &first, Some(&elsewhere)).await, label, "another resource");
        invalid_grant(exchange_naming(&store, &c, &first, Some(&ours)).await, label, "the refusal spent the code");

        let second = code_naming(&store, &c, &u.id, Some(OURS)).await;
        let t = exchange_naming(&store, &c, &second, Some(&ours)).await.expect("its own resource");
        invalid_target(
            store.refresh_oauth_token(&t.refresh_token, &c, None, Some(&elsewhere), None).await,
            label,
            "a refresh for another resource",
        );
        let t = store
            .refresh_oauth_token(&t.refresh_token, &c, None, Some(&ours), None)
            .await
            .expect("the refusal spent nothing");
        store
            .refresh_oauth_token(&t.refresh_token, &c, None, None, None)
            .await
            .expect("a refresh naming no resource");

        let third = code_naming(&store, &c, &u.id, Some(OURS)).await;
        exchange_naming(&store, &c, &third, None).await.expect("naming no resource");
        let fourth = code_naming(&store, &c, &u.id, None).await;
        exchange_naming(&store, &c, &fourth, Some(&ours)).await.expect("a grant naming none: the server's resource");
        assert!(works(&store, &t.access_token).await, "[{label}]");
    }

    /// A password change keeping personal access tokens (`user passwd`
    /// without `--revoke-tokens`) ends what the old password let in: the
    /// dashboard sessions, the OAuth token families and the codes not yet
    /// exchanged; personal access tokens stay. It is audited.
    async fn a_password_change_ends_what_the_old_one_let_in(store: Store, label: &str) {
        let (u, _) = user(&store, "oauth-setpw").await;
        let c = client(&store).await;
        let (session, _) = store
            .web_session_create(&u.id, u.credential, None)
            .await
            .unwrap();
        let t = exchange(&store, &c, &code(&store, &c, &u.id).await)
            .await
            .unwrap();
        let pending = code(&store, &c, &u.id).await;
        let (_, pat) = store
            .create_token(&u.id, None, &[zm_store::SCOPE_READ])
            .await
            .unwrap();
        assert!(store.web_session(&session).await.unwrap().is_some(), "[{label}]");
        assert!(works(&store, &t.access_token).await, "[{label}]");

        store
            .change_password(&u.id, "a brand new passphrase", false)
            .await
            .unwrap();
        assert!(
            store.web_session(&session).await.unwrap().is_none(),
            "[{label}] the dashboard session ended"
        );
        assert!(
            store.authenticate(&t.access_token).await.unwrap().is_none(),
            "[{label}] the access token is revoked"
        );
        invalid_grant(
            store
                .refresh_oauth_token(&t.refresh_token, &c, None, None, None)
                .await,
            label,
            "refresh after the change",
        );
        invalid_grant(
            exchange(&store, &c, &pending).await,
            label,
            "pending code spent",
        );
        assert!(works(&store, &pat).await, "[{label}] personal tokens stay");
        let audit = store.audit_rows(&u.id, 20).await.unwrap();
        assert!(
            audit.iter().any(|r| r["command"] == "user.passwd"),
            "[{label}] audited: {audit:?}"
        );
    }
}

/// Registration is anonymous, so the registrations waiting for their first
/// sign-in are capped: past the cap a registration replaces the oldest
/// waiting one (never one someone signed in through), and the waiting ones
/// are forgotten an hour after registering. SQLite only: filling the
/// shared PostgreSQL test database would crowd out the other tests'
/// registrations.
#[tokio::test]
async fn registrations_waiting_for_a_sign_in_are_capped() {
    use zm_store::oauth::{ABANDONED_CLIENT_MS, EVICTABLE_AFTER_MS, MAX_WAITING_CLIENTS};
    let dir = tempfile::Builder::new()
        .prefix("waiting-")
        .tempdir_in(scratch_root())
        .expect("a temporary directory");
    let url = zm_store::sqlite_url(&dir.path().join("zm.db"));
    let store = Store::open(&url).await.expect("open the store");
    let raw = sqlx::AnyPool::connect(&url).await.expect("a raw pool");
    let now = store.clock().now_ms();
    // All but one of the cap, waiting (no owner), registered a while ago.
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
         INSERT INTO oauth_clients (id, client_name, redirect_uris, owner_id, created_at) \
         SELECT 'zmc_fill' || i, NULL, '[]', NULL, $2 FROM n",
    )
    .bind(MAX_WAITING_CLIENTS - 1)
    .bind(now - EVICTABLE_AFTER_MS - 1)
    .execute(&raw)
    .await
    .expect("fill");
    let last = client(&store).await;
    let count = async || -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM oauth_clients")
            .fetch_one(&raw)
            .await
            .unwrap()
    };
    let newest = store
        .register_oauth_client(
            Some("one past the cap"),
            &[REDIRECT.to_string()],
            None,
            None,
        )
        .await
        .expect("the oldest waiting one makes room");
    assert_eq!(count().await, MAX_WAITING_CLIENTS, "still the cap");
    let oldest: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM oauth_clients WHERE id = 'zmc_fill1'")
            .fetch_one(&raw)
            .await
            .unwrap();
    assert_eq!(oldest, 0, "the oldest went");
    assert!(store.oauth_client(&newest.id).await.unwrap().is_some());
    assert!(
        store.oauth_client(&last).await.unwrap().is_some(),
        "a newer one stays"
    );
    // When every waiting one registered within the last minutes (its user
    // may be signing in now), none makes room: the registration waits.
    sqlx::query("UPDATE oauth_clients SET created_at = $1 WHERE owner_id IS NULL")
        .bind(now)
        .execute(&raw)
        .await
        .unwrap();
    let refused = store
        .register_oauth_client(Some("too soon"), &[REDIRECT.to_string()], None, None)
        .await
        .expect_err("nothing old enough to forget");
    assert_eq!(refused.code, ErrorCode::RateLimited, "{refused:?}");
    // A client someone signed in through no longer waits, and is never
    // the one to make room.
    let (u, _) = user(&store, "cap").await;
    code(&store, &last, &u.id).await;
    client(&store).await;
    assert!(store.oauth_client(&last).await.unwrap().is_some());
    // An hour later the waiting ones are forgotten, the signed-in one kept.
    store.clock().advance_ms(ABANDONED_CLIENT_MS + 1);
    client(&store).await;
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM oauth_clients")
        .fetch_one(&raw)
        .await
        .unwrap();
    assert_eq!(left, 2, "the signed-in client and the newest");
    assert!(store.oauth_client(&last).await.unwrap().is_some());
}

/// One network's registrations waiting for a sign-in are capped apart
/// ([`MAX_WAITING_PER_NETWORK`]): past it, its own oldest one registered
/// over ten minutes ago makes room, and without one its registration is
/// `rate_limited` — while another network registers as before, and what
/// the first filled never reaches the cap in all. SQLite only, as above.
#[tokio::test]
async fn one_networks_waiting_registrations_are_capped_apart() {
    use zm_store::oauth::{EVICTABLE_AFTER_MS, MAX_WAITING_PER_NETWORK};
    let dir = tempfile::Builder::new()
        .prefix("network-")
        .tempdir_in(scratch_root())
        .expect("a temporary directory");
    let url = zm_store::sqlite_url(&dir.path().join("zm.db"));
    let store = Store::open(&url).await.expect("open the store");
    let raw = sqlx::AnyPool::connect(&url).await.expect("a raw pool");
    let register = |network: &'static str| {
        let store = store.clone();
        async move {
            store
                .register_oauth_client(Some("app"), &[REDIRECT.to_string()], Some(network), None)
                .await
        }
    };
    let busy = "203.0.113.7";
    let mut first = None;
    for _ in 0..MAX_WAITING_PER_NETWORK {
        let c = register(busy).await.expect("within the network's share");
        first.get_or_insert(c.id);
    }
    let refused = register(busy)
        .await
        .expect_err("the network's share is full");
    assert_eq!(refused.code, ErrorCode::RateLimited, "{refused:?}");
    register("2001:db8:7::/48")
        .await
        .expect("another network registers");
    // Ten minutes on, the network's oldest waiting one makes room.
    store.clock().advance_ms(EVICTABLE_AFTER_MS + 1);
    register(busy).await.expect("its oldest makes room");
    let first = first.expect("a first registration");
    assert!(
        store.oauth_client(&first).await.unwrap().is_none(),
        "the network's oldest went"
    );
    let from: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM oauth_clients WHERE registered_from = $1")
            .bind(busy)
            .fetch_one(&raw)
            .await
            .unwrap();
    assert_eq!(from, MAX_WAITING_PER_NETWORK, "still the network's share");

    // A client whose first owner deleted their account (its owner set to
    // nobody, by the foreign key) while another still signs in through it
    // waits for nothing: it takes no place in its network's share, which
    // nothing could ever free (eviction keeps a client with grants).
    let third = "198.51.100.9";
    let shared = register(third).await.expect("a first registration").id;
    let (first_owner, _) = user(&store, "first-owner").await;
    let (other, _) = user(&store, "still-using").await;
    code(&store, &shared, &first_owner.id).await;
    code(&store, &shared, &other.id).await;
    sqlx::query("UPDATE oauth_clients SET owner_id = NULL WHERE id = $1")
        .bind(&shared)
        .execute(&raw)
        .await
        .unwrap();
    for i in 0..MAX_WAITING_PER_NETWORK {
        register(third)
            .await
            .unwrap_or_else(|e| panic!("registration {i} within the share: {e:?}"));
    }
    assert!(store.oauth_client(&shared).await.unwrap().is_some());
}
