//! Two instances on ONE PostgreSQL database act as one server: the OAuth
//! flow with requests alternating between them (the form rendered by A is
//! posted to B, the code exchanged on A, the token refreshed on B), rate
//! limits and the sign-in back-off that hold across both, and one MCP
//! session whose requests alternate between them (its attached project
//! carried, a foreign user's request still "unknown session", a `DELETE` on
//! one ending it on both), a thread issued on one carried on the other, and
//! the per-user session cap counting the user's sessions on both.
//!
//! Needs `ZM_TEST_DATABASE_URL` (skipped, with a message, without it). Each
//! instance opens its own `Store` (its own pool), as two processes would;
//! every key, email and client address is unique to the run, so reruns and
//! a shared database do not interfere.

mod common;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::mcp_post;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use zm_http::HttpConfig;
use zm_store::Store;

const REDIRECT: &str = "http://127.0.0.1/callback";
const REDIRECT_PORT: &str = "http://127.0.0.1:43123/callback";
/// The OAuth limit per client address and route, on both instances together.
const RATE_MAX: u32 = 6;

fn database_url() -> Option<String> {
    zm_store::test_database_url()
}

/// A random documentation-range IPv6 client address (its own /64): the key
/// of the per-IP limits, unique to this run.
fn client_ip() -> String {
    let r: [u16; 3] = rand::random();
    format!("2001:db8:{:x}:{:x}::{:x}", r[0], r[1], r[2] | 1)
}

fn unique() -> String {
    zm_contracts::IdKind::Request
        .generate()
        .replace(['.', '_'], "-")
}

struct Instance {
    base: String,
    store: Store,
    running: common::Running,
}

/// An instance on `url` whose public URL is the load balancer's (`public`).
async fn instance(url: &str, public: &str, hosts: &[String]) -> Instance {
    let store = Store::open(url).await.expect("open ZM_TEST_DATABASE_URL");
    let (listener, _, base) = common::listen().await;
    let mut cfg = HttpConfig::local(public);
    cfg.allowed_hosts = hosts.to_vec();
    cfg.trust_proxy = true;
    cfg.oauth_rate_max = RATE_MAX;
    cfg.max_sessions_per_user = 2;
    let limits = cfg.conn_limits();
    let cancel = CancellationToken::new();
    let state = zm_http::state(store.clone(), cfg);
    assert!(
        state.limiter.is_shared(),
        "PostgreSQL: limits live in the database"
    );
    let app = zm_http::router_with_state(state, cancel.clone());
    Instance {
        base,
        store,
        running: common::serve(listener, app, limits, cancel),
    }
}

/// A browser-less client behind the proxy, as `ip`.
fn client(ip: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-forwarded-for", ip.parse().unwrap());
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .unwrap()
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The sign-in page of `base`: its hidden fields and the CSRF cookie.
async fn sign_in_page(
    http: &reqwest::Client,
    base: &str,
    query: &[(&str, &str)],
) -> (Vec<(String, String)>, String) {
    let r = http
        .get(format!("{base}/oauth/authorize"))
        .query(query)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").to_string())
        .find(|c| c.starts_with("zm_oauth_csrf=") && c.len() > "zm_oauth_csrf=".len())
        .expect("a CSRF cookie");
    let html = r.text().await.unwrap();
    let fields = html
        .lines()
        .filter_map(|l| l.trim().strip_prefix("<input type=\"hidden\" name=\""))
        .filter_map(|rest| {
            let (name, rest) = rest.split_once('"')?;
            let value = rest.strip_prefix(" value=\"")?.rsplit_once('"')?.0;
            Some((unescape(name), unescape(value)))
        })
        .collect();
    (fields, cookie)
}

/// Post the sign-in form to `base`: status, `Location`, `Retry-After`.
async fn post_sign_in(
    http: &reqwest::Client,
    base: &str,
    page: &(Vec<(String, String)>, String),
    email: &str,
    password: &str,
) -> (u16, Option<String>, Option<String>) {
    let mut form = page.0.clone();
    form.push(("email".into(), email.into()));
    form.push(("password".into(), password.into()));
    let r = http
        .post(format!("{base}/oauth/authorize"))
        .header("cookie", &page.1)
        .form(&form)
        .send()
        .await
        .unwrap();
    let h = |n: &str| r.headers().get(n).map(|v| v.to_str().unwrap().to_string());
    (r.status().as_u16(), h("location"), h("retry-after"))
}

async fn token(http: &reqwest::Client, base: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let r = http
        .post(format!("{base}/oauth/token"))
        .form(form)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// `tools/call` in session `sid` on `base`: the structured content.
async fn call(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    sid: &str,
    tool: &str,
    args: Value,
) -> Value {
    let (status, _, msgs) = mcp_post(
        http,
        base,
        token,
        Some(sid),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}}),
    )
    .await;
    assert_eq!(status, 200, "{tool} on {base}: {msgs:?}");
    let result = &msgs.last().expect("an answer")["result"];
    assert_ne!(result["isError"], true, "{tool} on {base}: {result}");
    result["structuredContent"].clone()
}

#[tokio::test]
async fn two_instances_on_one_postgres_database_act_as_one() {
    let Some(url) = database_url() else {
        eprintln!("skipped: set ZM_TEST_DATABASE_URL to run the two-instance test");
        return;
    };
    // The load balancer's address is A's; both accept both Host values.
    let (la, _, base_a) = common::listen().await;
    let (lb, _, base_b) = common::listen().await;
    let hosts: Vec<String> = [&base_a, &base_b]
        .iter()
        .map(|b| b.trim_start_matches("http://").to_string())
        .collect();
    drop((la, lb));
    let a = instance(&url, &base_a, &hosts).await;
    let b = instance(&url, &base_a, &hosts).await;
    let (a_url, b_url) = (a.base.clone(), b.base.clone());
    assert_eq!(a.store.form_key(), b.store.form_key(), "one CSRF key");

    let tag = unique();
    let email = format!("scale-{tag}@example.com");
    let password = "password-scale-123";
    a.store.create_user(&email, password).await.unwrap();
    let other = b
        .store
        .create_user(&format!("other-{tag}@example.com"), "password-other-123")
        .await
        .unwrap();
    let other_token = b
        .store
        .create_token(&other.id, None, &["mcp:read", "mcp:write"])
        .await
        .unwrap()
        .1;

    // --- OAuth, alternating: register on B, page from A, POST to B, code
    // exchanged on A, refresh on B, the rotated token replayed on A.
    let http = client(&client_ip());
    let r = http
        .post(format!("{b_url}/oauth/register"))
        .json(&json!({"client_name": "scale", "redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let client_id = r.json::<Value>().await.unwrap()["client_id"]
        .as_str()
        .unwrap()
        .to_string();
    let verifier = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 48]>());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    let query = [
        ("response_type", "code"),
        ("client_id", client_id.as_str()),
        ("redirect_uri", REDIRECT_PORT),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", "s1"),
    ];
    let page = sign_in_page(&http, &a_url, &query).await;
    let (status, location, _) = post_sign_in(&http, &b_url, &page, &email, password).await;
    assert_eq!(status, 302, "B accepts the form A rendered");
    let location = url::Url::parse(&location.unwrap()).unwrap();
    let code = location
        .query_pairs()
        .find(|(k, _)| k == "code")
        .unwrap()
        .1
        .into_owned();
    let (st, t) = token(
        &http,
        &a_url,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("code_verifier", &verifier),
            ("client_id", &client_id),
            ("redirect_uri", REDIRECT_PORT),
        ],
    )
    .await;
    assert_eq!(st, 200, "{t}");
    let refresh = t["refresh_token"].as_str().unwrap().to_string();
    let (st, t2) = token(
        &http,
        &b_url,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &client_id),
        ],
    )
    .await;
    assert_eq!(st, 200, "refresh on B: {t2}");
    let access = t2["access_token"].as_str().unwrap().to_string();
    // The rotated refresh token replayed on A: refused (and the family ends).
    let (st, _) = token(
        &http,
        &a_url,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &client_id),
        ],
    )
    .await;
    assert_eq!(st, 400, "a replayed refresh token is refused on A");
    // A form from A with a forged token is refused by B: the key is shared,
    // not absent.
    let mut forged = page.clone();
    let field = forged
        .0
        .iter_mut()
        .find(|(k, _)| k == "csrf")
        .expect("a CSRF field");
    let flipped = if field.1.ends_with('A') { "B" } else { "A" };
    field.1.replace_range(field.1.len() - 1.., flipped);
    let (status, _, _) = post_sign_in(&http, &b_url, &forged, &email, password).await;
    assert_ne!(status, 302, "a forged form token is refused");

    // A fresh pair for MCP (the replay ended the first family).
    let page = sign_in_page(&http, &b_url, &query).await;
    let (status, location, _) = post_sign_in(&http, &a_url, &page, &email, password).await;
    assert_eq!(status, 302);
    let code = url::Url::parse(&location.unwrap())
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "code")
        .unwrap()
        .1
        .into_owned();
    let (st, t) = token(
        &http,
        &b_url,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("code_verifier", &verifier),
            ("client_id", &client_id),
            ("redirect_uri", REDIRECT_PORT),
        ],
    )
    .await;
    assert_eq!(st, 200, "{t}");
    assert_ne!(access, "", "the refreshed access token was issued");
    let access = t["access_token"].as_str().unwrap().to_string();

    // --- The per-IP limit holds across both: RATE_MAX registrations in
    // all, alternating, then 429 on either instance.
    let flood = client(&client_ip());
    let register = |base: String| {
        let flood = flood.clone();
        async move {
            flood
                .post(format!("{base}/oauth/register"))
                .json(&json!({"redirect_uris": [REDIRECT]}))
                .send()
                .await
                .unwrap()
        }
    };
    for i in 0..RATE_MAX {
        let base = if i % 2 == 0 { &a_url } else { &b_url };
        let r = register(base.clone()).await;
        assert_eq!(r.status().as_u16(), 201, "registration {i} on {base}");
    }
    for base in [&a_url, &b_url] {
        let r = register(base.clone()).await;
        assert_eq!(r.status().as_u16(), 429, "over the shared limit on {base}");
        let secs: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&secs), "{secs}");
    }
    // Another client address is not limited.
    let r = client(&client_ip())
        .post(format!("{b_url}/oauth/register"))
        .json(&json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);

    // --- The per-account back-off holds across both: five failures
    // alternating between them, each from its own address, then the
    // account backs off on both.
    let ghost = format!("ghost-{tag}@example.com");
    for i in 0..5 {
        let http = client(&client_ip());
        let base = if i % 2 == 0 { &a_url } else { &b_url };
        let page = sign_in_page(&http, base, &query).await;
        let (status, _, _) = post_sign_in(&http, base, &page, &ghost, "wrong-password").await;
        assert_eq!(status, 401, "failure {i} on {base}");
    }
    for base in [&a_url, &b_url] {
        let http = client(&client_ip());
        let page = sign_in_page(&http, base, &query).await;
        let (status, _, retry) = post_sign_in(&http, base, &page, &ghost, "wrong-password").await;
        assert_eq!(status, 429, "the account backs off on {base}");
        let secs: u64 = retry.unwrap().parse().unwrap();
        assert!((1..=30).contains(&secs), "{secs}");
    }

    // --- One MCP session, its requests alternating between the instances.
    let (status, sid, msgs) = mcp_post(
        &http,
        &a_url,
        &access,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "scale-test", "version": "0"}}}),
    )
    .await;
    assert_eq!(status, 200, "{msgs:?}");
    let sid = sid.expect("a session id");
    let (status, _, _) = mcp_post(
        &http,
        &b_url,
        &access,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202, "B takes the session A opened");
    let (status, _, msgs) = mcp_post(
        &http,
        &b_url,
        &access,
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        msgs[0]["result"]["tools"].as_array().unwrap().len() >= 18,
        "{msgs:?}"
    );
    // A pinned recall on A attaches the session to a project ...
    let hint = format!("scale-project-{tag}");
    let out = call(
        &http,
        &a_url,
        &access,
        &sid,
        "recall",
        json!({"query": "anything", "project_hint": hint}),
    )
    .await;
    let project = out["session"]["attached_project"]
        .as_str()
        .unwrap()
        .to_string();
    // ... which B knows: a scope-less remember lands there (unattached, it
    // would be refused).
    let out = call(
        &http,
        &b_url,
        &access,
        &sid,
        "remember",
        json!({"content": format!("Scope-less fact {tag}.")}),
    )
    .await;
    assert_eq!(out["scope"], project.as_str(), "{out}");
    assert_eq!(out["session"]["attached_project"], project.as_str());
    // Both instances give the calls of one session one transport session.
    let memory = out["memory_id"].as_str().unwrap().to_string();
    let out = call(
        &http,
        &a_url,
        &access,
        &sid,
        "remember",
        json!({"content": format!("Another scope-less fact {tag}.")}),
    )
    .await;
    assert_eq!(out["scope"], project.as_str());
    let provenance = |id: String| {
        let (http, access, a_url) = (http.clone(), access.clone(), a_url.clone());
        async move {
            let r = http
                .get(format!("{a_url}/api/memories/{id}"))
                .bearer_auth(&access)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.json::<Value>().await.unwrap()["source"]["session"].clone()
        }
    };
    let first = provenance(memory).await;
    let second = provenance(out["memory_id"].as_str().unwrap().to_string()).await;
    assert!(
        first.as_str().is_some_and(|s| s.starts_with("ses_")),
        "{first}"
    );
    assert_eq!(first, second, "one transport session on both instances");

    // Another user's request with this session id: unknown, on both.
    for base in [&a_url, &b_url] {
        let (status, _, _) = mcp_post(
            &http,
            base,
            &other_token,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        )
        .await;
        assert_eq!(status, 404, "a foreign session id on {base}");
    }
    // DELETE on B ends it on A too.
    let r = http
        .delete(format!("{b_url}/mcp"))
        .bearer_auth(&access)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let (status, _, _) = mcp_post(
        &http,
        &a_url,
        &access,
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    )
    .await;
    assert_eq!(status, 404, "ended on B, unknown on A");

    // --- A thread issued on one instance is carried on the other, and the
    // per-user cap (2 here) counts the user's sessions on both.
    let open = |base: String| {
        let (http, access) = (http.clone(), access.clone());
        async move {
            let (status, sid, msgs) = mcp_post(
                &http,
                &base,
                &access,
                None,
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "scale-test", "version": "0"}}}),
            )
            .await;
            assert_eq!(status, 200, "{msgs:?}");
            sid.unwrap()
        }
    };
    let works = |base: String, sid: String| {
        let (http, access) = (http.clone(), access.clone());
        async move {
            mcp_post(
                &http,
                &base,
                &access,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
            )
            .await
            .0 == 200
        }
    };
    let s2 = open(b_url.clone()).await;
    let out = call(
        &http,
        &b_url,
        &access,
        &s2,
        "build_context",
        json!({"topic": "scale", "briefing": true, "project_hint": hint}),
    )
    .await;
    let thread = out["session"]["thread"].as_str().unwrap().to_string();
    let out = call(
        &http,
        &a_url,
        &access,
        &s2,
        "remember",
        json!({"content": format!("A fact in the briefing's thread {tag}.")}),
    )
    .await;
    let r = http
        .get(format!(
            "{b_url}/api/memories/{}",
            out["memory_id"].as_str().unwrap()
        ))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    let m: Value = r.json().await.unwrap();
    assert_eq!(
        m["source"]["thread"], thread,
        "the thread B issued is the one A's write carries: {m}"
    );
    let s3 = open(a_url.clone()).await;
    let s4 = open(b_url.clone()).await;
    for base in [&a_url, &b_url] {
        assert!(
            !works(base.clone(), s2.clone()).await,
            "the least recently used session is ended on {base}"
        );
        assert!(works(base.clone(), s3.clone()).await);
        assert!(works(base.clone(), s4.clone()).await);
    }

    a.running.stop().await;
    b.running.stop().await;
}
