//! The OAuth 2.1 authorization server over real HTTP on loopback, driven by
//! a browser-less client written here: register → authorize (read the
//! sign-in page, post the form) → token → MCP and REST → refresh → replay.

mod common;

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use zm_http::HttpConfig;
use zm_store::Store;

const EMAIL: &str = "a@example.com";
const PASSWORD: &str = "password-a-123";
/// Registered without a port; the loopback rule lets any port through.
const REDIRECT: &str = "http://127.0.0.1/callback";
const REDIRECT_PORT: &str = "http://127.0.0.1:43123/callback";

struct Server {
    base: String,
    store: Store,
    user_id: String,
    running: common::Running,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
    /// The rate limiter's clock: tests move it instead of sleeping.
    clock: zm_http::Clock,
}

async fn start_with(edit: impl FnOnce(&mut HttpConfig)) -> Server {
    let (dir, store) = common::store().await;
    let a = store.create_user(EMAIL, PASSWORD).await.unwrap();
    common::user(&store, "b").await;
    let (listener, _, base) = common::listen().await;
    let mut cfg = HttpConfig::local(&base);
    edit(&mut cfg);
    let limits = cfg.conn_limits();
    let cancel = CancellationToken::new();
    let state = zm_http::state(store.clone(), cfg);
    let clock = state.limiter.clock().clone();
    let app = zm_http::router_with_state(state, cancel.clone());
    Server {
        base,
        store,
        user_id: a.id,
        running: common::serve(listener, app, limits, cancel),
        _dir: dir,
        // A browser-less client: it follows no redirect, it reads them.
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        clock,
    }
}

async fn start() -> Server {
    start_with(|_| {}).await
}

struct Pkce {
    verifier: String,
    challenge: String,
}

fn pkce() -> Pkce {
    let verifier = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 48]>());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    Pkce {
        verifier,
        challenge,
    }
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The hidden fields of the sign-in form.
fn hidden_fields(html: &str) -> Vec<(String, String)> {
    html.lines()
        .filter_map(|l| l.trim().strip_prefix("<input type=\"hidden\" name=\""))
        .filter_map(|rest| {
            let (name, rest) = rest.split_once('"')?;
            let value = rest.strip_prefix(" value=\"")?.rsplit_once('"')?.0;
            Some((unescape(name), unescape(value)))
        })
        .collect()
}

/// The whole `Set-Cookie` line of the CSRF cookie a response sets (a
/// clearing one included).
fn csrf_set_cookie(r: &reqwest::Response) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("zm_oauth_csrf="))
        .map(str::to_string)
}

/// `name=value` of the CSRF cookie a response sets (not a clearing one).
fn set_cookie(r: &reqwest::Response) -> Option<String> {
    csrf_set_cookie(r)
        .map(|v| v.split(';').next().unwrap_or("").to_string())
        .filter(|c| c.len() > "zm_oauth_csrf=".len())
}

fn query_of(location: &str) -> Vec<(String, String)> {
    url::Url::parse(location)
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn param<'a>(q: &'a [(String, String)], k: &str) -> Option<&'a str> {
    q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The security headers every HTML answer carries.
fn assert_html_headers(r: &reqwest::Response) {
    assert!(header(r, "content-type").starts_with("text/html"));
    assert_eq!(header(r, "cache-control"), "no-store");
    assert_eq!(header(r, "x-content-type-options"), "nosniff");
    assert_eq!(header(r, "referrer-policy"), "no-referrer");
    assert!(
        header(r, "content-security-policy").contains("frame-ancestors 'none'"),
        "{}",
        header(r, "content-security-policy")
    );
}

/// A sign-in page, read as a browser would.
struct Page {
    status: u16,
    fields: Vec<(String, String)>,
    cookie: Option<String>,
    html: String,
}

/// The result of posting the sign-in form.
struct Posted {
    status: u16,
    location: Option<String>,
    retry_after: Option<u64>,
    /// The `zm_device` cookie the answer sets (`name=value`), if any.
    device: Option<String>,
    html: String,
}

impl Server {
    async fn register(&self, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/oauth/register", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn client(&self) -> String {
        let (st, v) = self
            .register(json!({"client_name": "Test <client>", "redirect_uris": [REDIRECT]}))
            .await;
        assert_eq!(st, 201, "{v}");
        v["client_id"].as_str().unwrap().to_string()
    }

    async fn authorize_get<Q: serde::Serialize + ?Sized>(&self, query: &Q) -> reqwest::Response {
        self.http
            .get(format!("{}/oauth/authorize", self.base))
            .query(query)
            .send()
            .await
            .unwrap()
    }

    async fn page<Q: serde::Serialize + ?Sized>(&self, query: &Q) -> Page {
        let r = self.authorize_get(query).await;
        let status = r.status().as_u16();
        assert_html_headers(&r);
        assert!(r.headers().get("location").is_none());
        let cookie = set_cookie(&r);
        let html = r.text().await.unwrap();
        Page {
            status,
            fields: hidden_fields(&html),
            cookie,
            html,
        }
    }

    async fn post_form(&self, page: &Page, email: &str, password: &str) -> Posted {
        self.post_form_via(page, email, password, None).await
    }

    /// Post the sign-in form with an `X-Forwarded-For` header.
    async fn post_form_via(
        &self,
        page: &Page,
        email: &str,
        password: &str,
        forwarded_for: Option<&str>,
    ) -> Posted {
        let mut form = page.fields.clone();
        form.push(("email".into(), email.into()));
        form.push(("password".into(), password.into()));
        let mut rb = self
            .http
            .post(format!("{}/oauth/authorize", self.base))
            .form(&form);
        if let Some(c) = &page.cookie {
            rb = rb.header("cookie", c);
        }
        if let Some(xff) = forwarded_for {
            rb = rb.header("x-forwarded-for", xff);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse().unwrap());
        let location = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_string());
        // (The per-IP limit answers a page here too.)
        if location.is_none() {
            assert_html_headers(&r);
        }
        let device = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").to_string())
            .find(|c| c.starts_with("zm_device="));
        Posted {
            status,
            location,
            retry_after,
            device,
            html: r.text().await.unwrap(),
        }
    }

    /// Authorize as the test user; returns the code.
    async fn code(&self, client_id: &str, pkce: &Pkce) -> String {
        self.code_with(client_id, pkce, None).await
    }

    /// Authorize as the test user for `scope` only; returns the code.
    async fn code_for_scope(&self, client_id: &str, pkce: &Pkce, scope: &str) -> String {
        self.code_with(client_id, pkce, Some(scope)).await
    }

    async fn code_with(&self, client_id: &str, pkce: &Pkce, scope: Option<&str>) -> String {
        let scope = scope.map(|scope| ("scope", scope));
        self.code_asking(client_id, pkce, scope.as_slice()).await
    }

    /// Authorize as the test user with `extra` parameters in the request
    /// (a `resource`, a `scope`); returns the code.
    async fn code_asking(&self, client_id: &str, pkce: &Pkce, extra: &[(&str, &str)]) -> String {
        let mut query = vec![
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", REDIRECT_PORT),
            ("code_challenge", pkce.challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", "xyz"),
        ];
        query.extend_from_slice(extra);
        let page = self.page(&query).await;
        assert_eq!(page.status, 200, "{}", page.html);
        let posted = self.post_form(&page, EMAIL, PASSWORD).await;
        assert_eq!(posted.status, 302, "{}", posted.html);
        let q = query_of(posted.location.as_deref().unwrap());
        assert_eq!(param(&q, "state"), Some("xyz"));
        param(&q, "code").unwrap().to_string()
    }

    async fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/oauth/token", self.base))
            .form(form)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_eq!(header(&r, "cache-control"), "no-store");
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn exchange(&self, client_id: &str, code: &str, verifier: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("code_verifier", verifier),
            ("client_id", client_id),
            ("redirect_uri", REDIRECT_PORT),
        ])
        .await
    }

    /// register → authorize → token: an access/refresh pair.
    async fn tokens(&self) -> (String, Value) {
        let client = self.client().await;
        let p = pkce();
        let code = self.code(&client, &p).await;
        let (st, t) = self.exchange(&client, &code, &p.verifier).await;
        assert_eq!(st, 200, "{t}");
        (client, t)
    }

    async fn rest(&self, token: &str, tool: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/api/tools/{tool}", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// One MCP POST: status, session id, JSON-RPC messages.
    async fn mcp(
        &self,
        token: &str,
        session: Option<&str>,
        body: Value,
    ) -> (u16, Option<String>, Vec<Value>) {
        common::mcp_post(&self.http, &self.base, token, session, body).await
    }

    async fn mcp_session(&self, token: &str) -> String {
        let (status, sid, msgs) = self
            .mcp(token, None, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "oauth-test", "version": "0"}}}))
            .await;
        assert_eq!(status, 200, "{msgs:?}");
        let sid = sid.expect("session id");
        let (s, _, _) = self
            .mcp(
                token,
                Some(&sid),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(s, 202);
        sid
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

fn oauth_code(v: &Value) -> &str {
    assert!(
        v["error_description"].is_string(),
        "an RFC 6749 body, not the taxonomy body: {v}"
    );
    v["error"].as_str().unwrap_or("?")
}

#[tokio::test]
async fn register_authorize_token_mcp_refresh_and_replay() {
    let s = start().await;
    // Registration (RFC 7591).
    let (st, reg) = s
        .register(json!({
            "client_name": "Test <client>",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
        }))
        .await;
    assert_eq!(st, 201, "{reg}");
    let client = reg["client_id"].as_str().unwrap().to_string();
    assert!(client.starts_with("oac_"), "{client}");
    assert_eq!(reg["redirect_uris"], json!([REDIRECT]));
    assert_eq!(reg["token_endpoint_auth_method"], "none");
    assert_eq!(reg["response_types"], json!(["code"]));
    assert_eq!(reg["client_name"], "Test <client>");
    assert!(reg["client_id_issued_at"].as_i64().unwrap() > 1_600_000_000);

    // The sign-in page: validated request in hidden fields, a CSRF token and
    // its cookie, the client name escaped.
    let p = pkce();
    let resource = format!("{}/mcp", s.base);
    let page = s
        .page(&[
            ("response_type", "code"),
            ("client_id", &client),
            ("redirect_uri", REDIRECT_PORT),
            ("code_challenge", &p.challenge),
            ("code_challenge_method", "S256"),
            ("state", "state-123"),
            ("resource", &resource),
            ("scope", "mcp:read mcp:write"),
        ])
        .await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(page.html.contains("Test &lt;client&gt;"), "{}", page.html);
    assert!(!page.html.contains("Test <client>"));
    assert!(page.cookie.is_some(), "the CSRF cookie");
    let field = |k: &str| param(&page.fields, k).map(str::to_string);
    assert_eq!(field("client_id").as_deref(), Some(client.as_str()));
    assert_eq!(field("redirect_uri").as_deref(), Some(REDIRECT_PORT));
    assert_eq!(field("resource").as_deref(), Some(resource.as_str()));
    assert!(field("csrf").is_some());

    // The form post: 302 to the redirect URI with code, state and iss.
    let posted = s.post_form(&page, EMAIL, PASSWORD).await;
    assert_eq!(posted.status, 302, "{}", posted.html);
    let location = posted.location.unwrap();
    assert!(
        location.starts_with(&format!("{REDIRECT_PORT}?")),
        "{location}"
    );
    let q = query_of(&location);
    assert_eq!(param(&q, "state"), Some("state-123"));
    assert_eq!(param(&q, "iss"), Some(s.base.as_str()));
    let code = param(&q, "code").unwrap().to_string();
    assert_eq!(code.len(), 43, "32 random bytes, base64url");

    // The token exchange.
    let (st, t) = s
        .token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("code_verifier", &p.verifier),
            ("client_id", &client),
            ("redirect_uri", REDIRECT_PORT),
            ("resource", &resource),
        ])
        .await;
    assert_eq!(st, 200, "{t}");
    assert_eq!(t["token_type"], "Bearer");
    assert_eq!(t["expires_in"], 3600);
    assert_eq!(t["scope"], "mcp:read mcp:write");
    let access = t["access_token"].as_str().unwrap().to_string();
    let refresh = t["refresh_token"].as_str().unwrap().to_string();
    assert!(access.starts_with("zm_oat_") && refresh.starts_with("zm_ort_"));

    // The access token works on /mcp like a personal access token…
    let sid = s.mcp_session(&access).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "remember", "arguments": {"content": "OAuth clients reach the same memory as tokens.", "scope": "core"}}});
    let (st, _, msgs) = s.mcp(&access, Some(&sid), call).await;
    assert_eq!(st, 200);
    let result = &msgs.iter().find(|m| m["id"] == 2).unwrap()["result"];
    assert_ne!(result["isError"], true, "{result}");
    // …and on REST.
    let (st, v) = s
        .rest(
            &access,
            "recall",
            json!({"query": "OAuth clients memory", "scopes": ["*"]}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(v.to_string().contains("OAuth clients reach"), "{v}");

    // Refresh (JSON body this time): a new pair, the old access token still
    // valid until it expires.
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .json(
            &json!({"grant_type": "refresh_token", "refresh_token": refresh, "client_id": client}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "cache-control"), "no-store");
    let t2: Value = r.json().await.unwrap();
    let access2 = t2["access_token"].as_str().unwrap().to_string();
    let refresh2 = t2["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(access2, access);
    assert_ne!(refresh2, refresh);
    let (st, _) = s.rest(&access2, "recall", json!({"query": "x"})).await;
    assert_eq!(st, 200);

    // Replaying the spent refresh token fails and kills the family.
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &client),
        ])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"), "{v}");
    let (st, v) = s.rest(&access2, "recall", json!({"query": "x"})).await;
    assert_eq!(st, 401, "the new access token is dead: {v}");
    let (st, _) = s.rest(&access, "recall", json!({"query": "x"})).await;
    assert_eq!(st, 401, "so is the first one");
    let (st, _, _) = s
        .mcp(
            &access2,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        )
        .await;
    assert_eq!(st, 401, "on /mcp too");
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh2),
            ("client_id", &client),
        ])
        .await;
    assert_eq!(
        (st, oauth_code(&v)),
        (400, "invalid_grant"),
        "the new refresh token too"
    );

    // The client belongs to its first authorizer; the audit has the story
    // and no secret.
    let clients = s.store.list_oauth_clients(&s.user_id).await.unwrap();
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0].client.id, client);
    assert_eq!(
        clients[0].client.owner_id.as_deref(),
        Some(s.user_id.as_str())
    );
    assert_eq!(clients[0].active_tokens, 0);
    let audit = s.store.audit_rows(&s.user_id, 100).await.unwrap();
    let commands: Vec<&str> = audit.iter().filter_map(|r| r["command"].as_str()).collect();
    for c in [
        "oauth.login",
        "oauth.token",
        "oauth.refresh",
        "oauth.family_revoked",
    ] {
        assert!(commands.contains(&c), "{c} in {commands:?}");
    }
    let text = serde_json::to_string(&audit).unwrap();
    for secret in [&access, &refresh, &access2, &refresh2, &code, &p.verifier] {
        assert!(
            !text.contains(secret.as_str()),
            "no secret in the audit log"
        );
    }
    assert!(!text.contains(PASSWORD));
    s.stop().await;
}

#[tokio::test]
async fn token_refusals() {
    let s = start().await;
    let client = s.client().await;

    // Wrong verifier.
    let p = pkce();
    let code = s.code(&client, &p).await;
    let (st, v) = s.exchange(&client, &code, &pkce().verifier).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"), "{v}");
    assert!(v["error_description"].as_str().unwrap().contains("PKCE"));
    // The failed attempt spent the code.
    let (st, v) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"));

    // A reused code: refused, and the tokens it issued are revoked.
    let p = pkce();
    let code = s.code(&client, &p).await;
    let (st, t) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!(st, 200, "{t}");
    let access = t["access_token"].as_str().unwrap();
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 200);
    let (st, v) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"));
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 401);

    // An expired code (the store clock moves six minutes).
    let p = pkce();
    let code = s.code(&client, &p).await;
    s.store.clock().advance_ms(6 * 60 * 1000);
    let (st, v) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"), "{v}");

    // A wrong redirect_uri at the token endpoint.
    let p = pkce();
    let code = s.code(&client, &p).await;
    let (st, v) = s
        .token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("code_verifier", &p.verifier),
            ("client_id", &client),
            ("redirect_uri", "http://127.0.0.1:43123/other"),
        ])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"));
    // Another client presenting the code.
    let other = s.client().await;
    let p = pkce();
    let code = s.code(&client, &p).await;
    let (st, v) = s.exchange(&other, &code, &p.verifier).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"));

    // The rest of the endpoint's refusals, all RFC 6749 bodies.
    let (st, v) = s.token(&[("grant_type", "password")]).await;
    assert_eq!((st, oauth_code(&v)), (400, "unsupported_grant_type"));
    let (st, v) = s.token(&[("code", "x")]).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_request"));
    let (st, v) = s
        .token(&[("grant_type", "authorization_code"), ("code", "x")])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_request"));
    let fake = zm_contracts::IdKind::OauthClient.generate();
    let (st, v) = s.exchange(&fake, "nope", &pkce().verifier).await;
    assert_eq!(
        (st, oauth_code(&v)),
        (400, "invalid_client"),
        "a public client named in the body: 400, as a 401 needs a challenge it could answer"
    );
    let (st, v) = s.exchange(&client, "nope", "too-short").await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_request"));
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", "zm_ort_nope"),
            ("client_id", &client),
        ])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"));
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", "zm_ort_nope"),
            ("client_id", &client),
            ("resource", "https://elsewhere.example/mcp"),
        ])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_target"));
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("grant_type", "refresh_token"),
        ])
        .await;
    assert_eq!(
        (st, oauth_code(&v)),
        (400, "invalid_request"),
        "a repeated parameter"
    );
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .header("content-type", "text/plain")
        .body("grant_type=refresh_token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(oauth_code(&r.json().await.unwrap()), "invalid_request");
    let r = s
        .http
        .get(format!("{}/oauth/token", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(header(&r, "allow"), "POST");
    assert_eq!(oauth_code(&r.json().await.unwrap()), "invalid_request");

    // A narrower scope on refresh, never a wider one.
    let p = pkce();
    let code = s.code_for_scope(&client, &p, "mcp:read").await;
    let (st, t) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!((st, t["scope"].as_str()), (200, Some("mcp:read")));
    let access = t["access_token"].as_str().unwrap();
    let (st, v) = s
        .rest(
            access,
            "remember",
            json!({"content": "x y z", "scope": "core"}),
        )
        .await;
    assert_eq!(st, 403, "a read-only OAuth token cannot write: {v}");
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", t["refresh_token"].as_str().unwrap()),
            ("client_id", &client),
            ("scope", "mcp:read mcp:write"),
        ])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_scope"));

    // OpenID Connect's scopes and `offline_access`, which clients add by
    // habit, are dropped, not refused: on a sign-in, and on a refresh
    // (where the grant's own scope stays).
    let p = pkce();
    let code = s
        .code_for_scope(&client, &p, "openid mcp:read offline_access")
        .await;
    let (st, t) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!((st, t["scope"].as_str()), (200, Some("mcp:read")), "{t}");
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", t["refresh_token"].as_str().unwrap()),
            ("client_id", &client),
            ("scope", "offline_access"),
        ])
        .await;
    assert_eq!((st, v["scope"].as_str()), (200, Some("mcp:read")), "{v}");
    s.stop().await;
}

/// OAuth 2.1 §4.3 (with §2.4, §3.2.1): a public client refreshing names
/// itself, and only the client the token was issued to may use it. Every
/// refusal leaves the token as it was: it still rotates for its client
/// afterwards (a spent token would be `invalid_grant` there, and its
/// family revoked as a replay).
#[tokio::test]
async fn a_refresh_names_its_client_and_a_refusal_spends_nothing() {
    let s = start().await;
    let (client, t) = s.tokens().await;
    let refresh = t["refresh_token"].as_str().unwrap();
    let access = t["access_token"].as_str().unwrap();
    let other = s.client().await;
    let fake = zm_contracts::IdKind::OauthClient.generate();
    let grant = |client_id: Option<&str>| {
        let mut form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh.to_string()),
        ];
        if let Some(c) = client_id {
            form.push(("client_id", c.to_string()));
        }
        form
    };
    let send = |form: Vec<(&'static str, String)>| {
        let (http, url) = (s.http.clone(), format!("{}/oauth/token", s.base));
        async move {
            let r = http.post(url).form(&form).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (st, v) = send(grant(None)).await;
    assert_eq!(
        (st, oauth_code(&v)),
        (400, "invalid_request"),
        "a refresh without client_id: {v}"
    );
    assert!(
        v["error_description"]
            .as_str()
            .unwrap()
            .contains("client_id"),
        "{v}"
    );
    let (st, v) = send(grant(Some(&other))).await;
    assert_eq!(
        (st, oauth_code(&v)),
        (400, "invalid_grant"),
        "another client's refresh token: {v}"
    );
    let (st, v) = send(grant(Some(&fake))).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_client"), "{v}");
    // A secret in the body is refused as in Basic (none is issued), and
    // spends nothing; an empty one is no secret.
    let mut with_secret = grant(Some(&client));
    with_secret.push(("client_secret", "s3cret".to_string()));
    let (st, v) = send(with_secret).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_client"), "{v}");
    assert!(
        v["error_description"]
            .as_str()
            .unwrap()
            .contains("no client secrets"),
        "{v}"
    );
    // A client written for confidential clients names itself with HTTP
    // Basic: an unknown one, or one sending a secret (none is issued),
    // is a 401 with the Basic challenge.
    let basic = |user: &str, password: &str| {
        use base64::Engine;
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {b}")
    };
    for (auth, why) in [
        (basic(&fake, ""), "an unknown client"),
        (basic(&client, "s3cret"), "a secret"),
        ("Basic !!!".to_string(), "not base64"),
    ] {
        let r = s
            .http
            .post(format!("{}/oauth/token", s.base))
            .header("authorization", auth)
            .form(&grant(None))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "{why}");
        assert_eq!(
            header(&r, "www-authenticate"),
            "Basic realm=\"zero-memory\"",
            "{why}"
        );
        assert_eq!(
            oauth_code(&r.json().await.unwrap()),
            "invalid_client",
            "{why}"
        );
    }
    // Basic naming another client than the body: refused, nothing spent.
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .header("authorization", basic(&client, ""))
        .form(&grant(Some(&other)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(oauth_code(&r.json().await.unwrap()), "invalid_request");
    // As JSON too.
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .json(&json!({"grant_type": "refresh_token", "refresh_token": refresh}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(oauth_code(&r.json().await.unwrap()), "invalid_request");

    // Nothing was spent: the first access token still works, and the
    // refresh token rotates once, for its own client.
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 200);
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        // Unpadded, as some clients send it.
        .header(
            "authorization",
            basic(&client, "").trim_end_matches('=').to_string(),
        )
        .form(&grant(None))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "named by Basic, with no secret");
    let t2: Value = r.json().await.unwrap();
    assert!(
        t2["access_token"].is_string(),
        "the refused attempts left the token usable: {t2}"
    );
    let access2 = t2["access_token"].as_str().unwrap();
    assert_eq!(
        s.rest(access2, "recall", json!({"query": "x"})).await.0,
        200
    );
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 200);
    // And only once: now it is spent.
    let (st, v) = send(grant(Some(&client))).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn authorize_refusals() {
    let s = start().await;
    let client = s.client().await;
    let p = pkce();
    let q = |extra: &[(&'static str, &str)]| {
        let mut v: Vec<(String, String)> = vec![
            ("response_type".into(), "code".into()),
            ("client_id".into(), client.clone()),
            ("redirect_uri".into(), REDIRECT_PORT.into()),
            ("code_challenge".into(), p.challenge.clone()),
            ("code_challenge_method".into(), "S256".into()),
            ("state".into(), "s1".into()),
        ];
        for (k, val) in extra {
            v.retain(|(n, _)| n != k);
            if !val.is_empty() {
                v.push((k.to_string(), val.to_string()));
            }
        }
        v
    };

    // Unknown client and unregistered redirect: an HTML page, never a redirect.
    let (st, v) = s
        .register(json!({"redirect_uris": ["https://evil.example/cb"]}))
        .await;
    assert_eq!(st, 201, "{v}");
    let fake = zm_contracts::IdKind::OauthClient.generate();
    for bad in [
        q(&[("client_id", &fake)]),
        q(&[("client_id", "")]),
        q(&[("redirect_uri", "https://evil.example/cb")]),
        q(&[("redirect_uri", "http://localhost:43123/callback")]),
        q(&[("redirect_uri", "")]),
        // Registered, but for another client; and the request has an error
        // too: the client and the URI are no pair, so still no redirect.
        q(&[("redirect_uri", "https://evil.example/cb")]),
        q(&[
            ("redirect_uri", "https://evil.example/cb"),
            ("response_type", "token"),
        ]),
    ] {
        let r = s
            .http
            .get(format!("{}/oauth/authorize", s.base))
            .query(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad:?}");
        assert!(r.headers().get("location").is_none(), "{bad:?}");
        assert_html_headers(&r);
        let html = r.text().await.unwrap();
        assert!(html.contains("Cannot sign in"), "{html}");
    }

    // Other errors are shown too, with their code: nobody has signed in
    // yet, and a registered URI proves nothing (registration is anonymous).
    let resource_with_break = format!("{}/m\ncp", s.base);
    for (extra, want) in [
        (vec![("code_challenge_method", "plain")], "invalid_request"),
        (vec![("code_challenge", "")], "invalid_request"),
        (vec![("code_challenge", "short")], "invalid_request"),
        // Unreserved characters no SHA-256 in base64url gives: a verifier
        // would never match, and the sign-in would be spent for nothing.
        (
            vec![("code_challenge", &*"a".repeat(128))],
            "invalid_request",
        ),
        (
            vec![("code_challenge", &*format!("{}~", "a".repeat(42)))],
            "invalid_request",
        ),
        (
            vec![("response_type", "token")],
            "unsupported_response_type",
        ),
        (vec![("scope", "mcp:read admin")], "invalid_scope"),
        (
            vec![("resource", "https://elsewhere.example/mcp")],
            "invalid_target",
        ),
        // A line break would come back through the sign-in form changed
        // (CR LF), and the client would reject its own sign-in; in a
        // resource the URL parser would drop it before the same form.
        (vec![("state", "a\nb")], "invalid_request"),
        (vec![("state", "a\u{7f}b")], "invalid_request"),
        (vec![("resource", &*resource_with_break)], "invalid_target"),
    ] {
        let r = s
            .http
            .get(format!("{}/oauth/authorize", s.base))
            .query(&q(&extra))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{extra:?}");
        assert!(r.headers().get("location").is_none(), "{extra:?}");
        assert_html_headers(&r);
        let html = r.text().await.unwrap();
        assert!(html.contains("Cannot sign in"), "{html}");
        assert!(
            html.contains(&format!("<code>{want}</code>")),
            "{extra:?}: {html}"
        );
    }

    // Wrong credentials: 401, the page again with the message, no code.
    let page = s.page(&q(&[])).await;
    let posted = s.post_form(&page, EMAIL, "wrong-password").await;
    assert_eq!(posted.status, 401);
    assert!(posted.location.is_none());
    assert!(posted.html.contains("Invalid email or password."));
    assert!(
        posted.html.contains("value=\"a@example.com\""),
        "the email is kept"
    );
    let posted = s.post_form(&page, "nobody@example.com", PASSWORD).await;
    assert_eq!(posted.status, 401);
    assert!(posted.html.contains("Invalid email or password."));
    assert!(
        s.store
            .list_oauth_clients(&s.user_id)
            .await
            .unwrap()
            .is_empty(),
        "no grant, no code"
    );
    let audit = s.store.audit_rows(&s.user_id, 10).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|r| r["command"] == "oauth.login" && r["outcome"] == "error"),
        "{audit:?}"
    );
    assert!(
        !serde_json::to_string(&audit)
            .unwrap()
            .contains("wrong-password")
    );

    // CSRF: no cookie, a token over another request, a foreign Origin.
    let mut no_cookie = Page {
        status: page.status,
        fields: page.fields.clone(),
        cookie: None,
        html: String::new(),
    };
    let posted = s.post_form(&no_cookie, EMAIL, PASSWORD).await;
    assert_eq!(posted.status, 403);
    assert!(posted.location.is_none());
    no_cookie.cookie = page.cookie.clone();
    for f in no_cookie.fields.iter_mut() {
        if f.0 == "state" {
            f.1 = "tampered".into();
        }
    }
    let posted = s.post_form(&no_cookie, EMAIL, PASSWORD).await;
    assert_eq!(posted.status, 403, "the token covers the request");
    // The form comes back over the cookie the browser holds (a new one
    // would void its other open sign-in forms); a browser with none gets
    // one, unless another site made the post.
    let refused = |cookie: Option<String>, site: &'static str| {
        let mut form = no_cookie.fields.clone();
        form.push(("email".into(), EMAIL.into()));
        form.push(("password".into(), PASSWORD.into()));
        let mut rb = s
            .http
            .post(format!("{}/oauth/authorize", s.base))
            .header("sec-fetch-site", site)
            .form(&form);
        if let Some(c) = cookie {
            rb = rb.header("cookie", c);
        }
        async move {
            let r = rb.send().await.unwrap();
            (r.status().as_u16(), set_cookie(&r))
        }
    };
    assert_eq!(
        refused(page.cookie.clone(), "same-origin").await,
        (403, page.cookie.clone())
    );
    let (st, fresh) = refused(None, "same-origin").await;
    assert!(
        st == 403 && fresh.is_some() && fresh != page.cookie,
        "{fresh:?}"
    );
    assert_eq!(refused(None, "cross-site").await, (403, None));
    let mut form = page.fields.clone();
    form.push(("email".into(), EMAIL.into()));
    form.push(("password".into(), PASSWORD.into()));
    let r = s
        .http
        .post(format!("{}/oauth/authorize", s.base))
        .header("cookie", page.cookie.clone().unwrap())
        .header("origin", "https://evil.example")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(r.headers().get("location").is_none());
    // `Origin: null` (what our no-referrer page makes browsers send) passes.
    let r = s
        .http
        .post(format!("{}/oauth/authorize", s.base))
        .header("cookie", page.cookie.clone().unwrap())
        .header("origin", "null")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 302);
    s.stop().await;
}

/// Registration is anonymous and takes any https redirect URI, so a
/// registered pair proves nothing about where the URI leads: an error found
/// before anyone signed in (here, on the page or on a form post that never
/// reaches the password) is a page on this server, never a redirect, or the
/// server would be anyone's redirector (RFC 9700 §4.11.2).
#[tokio::test]
async fn errors_before_sign_in_are_a_page_never_a_redirect() {
    let s = start().await;
    let evil = "https://evil.example/cb";
    let (st, v) = s.register(json!({"redirect_uris": [evil]})).await;
    assert_eq!(st, 201, "{v}");
    let client = v["client_id"].as_str().unwrap().to_string();
    let p = pkce();
    let with = |drop: &str, extra: &[(&str, &str)]| {
        let mut q: Vec<(String, String)> = [
            ("response_type", "code"),
            ("client_id", client.as_str()),
            ("redirect_uri", evil),
            ("code_challenge", p.challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", "s1"),
        ]
        .iter()
        .filter(|(k, _)| *k != drop)
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
        for (k, v) in extra {
            q.retain(|(n, _)| n != k);
            q.push(((*k).to_string(), (*v).to_string()));
        }
        q
    };
    let cases = [
        (
            with("", &[("response_type", "token")]),
            "unsupported_response_type",
        ),
        (with("code_challenge", &[]), "invalid_request"),
        (with("response_type", &[]), "invalid_request"),
        (with("", &[("scope", "admin")]), "invalid_scope"),
        (
            with("", &[("resource", "https://evil.example/mcp")]),
            "invalid_target",
        ),
    ];
    for (query, want) in &cases {
        let r = s.authorize_get(query).await;
        assert_eq!(r.status().as_u16(), 400, "{query:?}");
        assert!(r.headers().get("location").is_none(), "{query:?}");
        assert_html_headers(&r);
        let html = r.text().await.unwrap();
        assert!(html.contains(&format!("<code>{want}</code>")), "{html}");
        assert!(
            !html.contains("href=") && !html.contains("http-equiv"),
            "nothing leads on by itself: {html}"
        );
    }
    // The form post of such a request: the same page, before any password.
    for (query, want) in &cases {
        let mut form = query.clone();
        form.push(("email".into(), EMAIL.into()));
        form.push(("password".into(), PASSWORD.into()));
        let r = s
            .http
            .post(format!("{}/oauth/authorize", s.base))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{query:?}");
        assert!(r.headers().get("location").is_none(), "{query:?}");
        assert_html_headers(&r);
        let html = r.text().await.unwrap();
        assert!(html.contains(&format!("<code>{want}</code>")), "{html}");
    }
    // Markup in a description is text.
    let r = s
        .authorize_get(&with("", &[("scope", "<script>x</script>")]))
        .await;
    let html = r.text().await.unwrap();
    assert!(
        !html.contains("<script>") && html.contains("&lt;script&gt;"),
        "{html}"
    );
    // A good request from the same client is the sign-in form.
    assert_eq!(s.page(&with("", &[])).await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn registration_refusals() {
    let s = start().await;
    for bad in [
        "http://example.com/cb",
        "javascript:alert(1)",
        "data:text/html,hi",
        "file:///tmp/x",
        "https://app.example.com/cb#fragment",
        "https://user:pw@app.example.com/cb",
        "not a uri",
        "http://evil.example/cb",
        "JavaScript:alert(document.cookie)",
        "myapp:/cb",
        "ms-settings:privacy",
    ] {
        let (st, v) = s.register(json!({"redirect_uris": [bad]})).await;
        assert_eq!((st, oauth_code(&v)), (400, "invalid_redirect_uri"), "{bad}");
    }
    let (st, v) = s.register(json!({"redirect_uris": []})).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_redirect_uri"));
    let (st, v) = s.register(json!({"client_name": "x"})).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_redirect_uri"));
    let (st, v) = s
        .register(json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_basic"}))
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_client_metadata"));
    let (st, v) = s
        .register(json!({"redirect_uris": [REDIRECT], "client_name": ""}))
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_client_metadata"));
    // A name that could read as another on the sign-in page: a right-to-left
    // override, a zero-width space, a line separator, a control character.
    for hidden in [
        "Claude \u{202E}edoC",
        "Cur\u{200B}sor",
        "App\u{2028}",
        "App\u{0007}",
    ] {
        let (st, v) = s
            .register(json!({"redirect_uris": [REDIRECT], "client_name": hidden}))
            .await;
        assert_eq!(
            (st, oauth_code(&v)),
            (400, "invalid_client_metadata"),
            "{hidden:?}"
        );
    }
    let (st, v) = s
        .register(json!({"redirect_uris": [REDIRECT], "client_name": "Zed — 日本語 ✓"}))
        .await;
    assert_eq!(st, 201, "an ordinary name of any script: {v}");
    // At most 64 fields, as any OAuth request's parameters.
    let mut many = serde_json::Map::new();
    many.insert("redirect_uris".into(), json!([REDIRECT]));
    for i in 0..63 {
        many.insert(format!("x_extension_{i}"), json!(i));
    }
    let (st, v) = s.register(serde_json::Value::Object(many.clone())).await;
    assert_eq!(st, 201, "64 fields: {v}");
    many.insert("x_extension_63".into(), json!(63));
    let (st, v) = s.register(serde_json::Value::Object(many)).await;
    assert_eq!(
        (st, oauth_code(&v)),
        (400, "invalid_client_metadata"),
        "65 fields: {v}"
    );
    // Redirect URIs hold at most 8 KiB together.
    let long: Vec<String> = (0..5)
        .map(|i| format!("https://app.example/{i}/{}", "p".repeat(2000)))
        .collect();
    let (st, v) = s.register(json!({"redirect_uris": long})).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_redirect_uri"), "{v}");
    let r = s
        .http
        .post(format!("{}/oauth/register", s.base))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(
        oauth_code(&r.json().await.unwrap()),
        "invalid_client_metadata"
    );
    // A field twice: neither value is taken (a parser keeps the last, a
    // filter in front may have read the first).
    let r = s
        .http
        .post(format!("{}/oauth/register", s.base))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"redirect_uris":["{REDIRECT}"],"redirect_uris":["https://evil.example/cb"]}}"#
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(oauth_code(&v), "invalid_client_metadata", "{v}");
    assert!(v.to_string().contains("repeated"), "{v}");
    // So is a token request's parameter, in JSON as in a form.
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .header("content-type", "application/json")
        .body(r#"{"grant_type":"refresh_token","refresh_token":"x","client_id":"oac_a","client_id":"oac_b"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(oauth_code(&v), "invalid_request", "{v}");
    assert!(v.to_string().contains("client_id"), "{v}");
    // The accepted shapes: https, loopback http, private-use schemes.
    let (st, v) = s
        .register(json!({"redirect_uris": [
            "https://app.example.com/cb",
            "http://localhost:8976/callback",
            "http://[::1]/cb",
            "com.example.app:/oauth2redirect",
            "cursor://anysphere.cursor-retrieval/oauth/user-zero-memory/callback",
        ]}))
        .await;
    assert_eq!(st, 201, "{v}");
    assert!(v.get("client_name").is_none());
    s.stop().await;
}

/// The authorized-apps list says what the app can do and when it last
/// did something: a narrower sign-in later does not hide what its live
/// tokens still carry, and a refresh or a call with its token counts as
/// a use (not only the code exchange).
#[tokio::test]
async fn the_apps_list_says_what_live_tokens_carry_and_their_last_use() {
    let s = start().await;
    let (client, t) = s.tokens().await;
    let listed = s.store.list_oauth_clients(&s.user_id).await.unwrap();
    assert_eq!(listed[0].scope, "mcp:read mcp:write");
    let exchanged = listed[0].last_used_at.expect("the exchange is a use");
    // Signed in again, for reading only (the code is never exchanged).
    s.code_for_scope(&client, &pkce(), "mcp:read").await;
    let listed = s.store.list_oauth_clients(&s.user_id).await.unwrap();
    assert_eq!(
        listed[0].scope, "mcp:read mcp:write",
        "the first sign-in's tokens still write"
    );
    // A refresh an hour later is a use.
    s.store.clock().advance_ms(60 * 60 * 1000);
    let (st, t2) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", t["refresh_token"].as_str().unwrap()),
            ("client_id", &client),
        ])
        .await;
    assert_eq!(st, 200, "{t2}");
    let refreshed = s.store.list_oauth_clients(&s.user_id).await.unwrap()[0]
        .last_used_at
        .unwrap();
    assert!(
        refreshed >= exchanged + 60 * 60 * 1000,
        "{refreshed} after {exchanged}"
    );
    // So is a call with its access token, ten minutes after that.
    s.store.clock().advance_ms(10 * 60 * 1000);
    let access = t2["access_token"].as_str().unwrap();
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 200);
    let called = s.store.list_oauth_clients(&s.user_id).await.unwrap()[0]
        .last_used_at
        .unwrap();
    assert!(
        called >= refreshed + 10 * 60 * 1000,
        "{called} after {refreshed}"
    );
    // And a write, ten minutes later: its use is noted on the write's own
    // task (the token was looked up before the write took its place).
    s.store.clock().advance_ms(10 * 60 * 1000);
    let wrote = json!({"content": "The release train leaves on Thursdays.", "scope": "personal"});
    assert_eq!(s.rest(access, "remember", wrote).await.0, 200);
    let written = s.store.list_oauth_clients(&s.user_id).await.unwrap()[0]
        .last_used_at
        .unwrap();
    assert!(
        written >= called + 10 * 60 * 1000,
        "{written} after {called}"
    );
    s.stop().await;
}

#[tokio::test]
async fn revoking_a_client_ends_its_tokens_for_that_user_only() {
    let s = start().await;
    let (client, t) = s.tokens().await;
    let access = t["access_token"].as_str().unwrap();
    let refresh = t["refresh_token"].as_str().unwrap();
    // Another user cannot see or revoke it.
    let b = s
        .store
        .user_by_email("b@example.com")
        .await
        .unwrap()
        .unwrap();
    assert!(s.store.list_oauth_clients(&b.id).await.unwrap().is_empty());
    let e = s
        .store
        .revoke_oauth_client(&b.id, &client)
        .await
        .unwrap_err();
    assert_eq!(e.code, zm_contracts::ErrorCode::NotFound);
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 200);
    // The owner revokes it.
    s.store
        .revoke_oauth_client(&s.user_id, &client)
        .await
        .unwrap();
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 401);
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", &client),
        ])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"));
    let listed = s.store.list_oauth_clients(&s.user_id).await.unwrap();
    assert!(listed[0].revoked_at.is_some());
    let e = s
        .store
        .revoke_oauth_client(&s.user_id, &client)
        .await
        .unwrap_err();
    assert_eq!(e.code, zm_contracts::ErrorCode::NotFound, "already revoked");
    // A fresh sign-in grants again.
    let p = pkce();
    let code = s.code(&client, &p).await;
    let (st, t) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!(st, 200, "{t}");
    let listed = s.store.list_oauth_clients(&s.user_id).await.unwrap();
    assert!(listed[0].revoked_at.is_none());
    s.stop().await;
}

/// `delete_account` with an OAuth token is refused (403) without a
/// step-up challenge: an OAuth sign-in is never granted `account:delete`
/// (it is not in `scopes_supported`), so naming it would send the client
/// to re-authorize for a scope it cannot get. Nothing is erased.
#[tokio::test]
async fn an_oauth_token_is_not_challenged_for_account_delete() {
    let s = start().await;
    let (_, t) = s.tokens().await;
    let access = t["access_token"].as_str().unwrap().to_string();
    // A read-only sign-in lacks mcp:write too: still no challenge, as no
    // re-authorization could grant account:delete.
    let client = s.client().await;
    let p = pkce();
    let code = s.code_for_scope(&client, &p, "mcp:read").await;
    let (st, read_only) = s.exchange(&client, &code, &p.verifier).await;
    assert_eq!((st, read_only["scope"].as_str()), (200, Some("mcp:read")));
    let read_only = read_only["access_token"].as_str().unwrap().to_string();
    for token in [&access, &read_only] {
        let r = s
            .http
            .post(format!("{}/api/tools/delete_account", s.base))
            .bearer_auth(token)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403);
        assert!(
            r.headers().get("www-authenticate").is_none(),
            "{:?}",
            r.headers()
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "forbidden", "{v}");
    }
    assert_eq!(
        s.rest(&access, "recall", json!({"query": "x"})).await.0,
        200,
        "the account stays"
    );
    s.stop().await;
}

/// `POST /oauth/revoke` (RFC 7009), as a client calls it.
#[tokio::test]
async fn a_client_revokes_its_tokens_at_the_revocation_endpoint() {
    let s = start().await;
    let (client, t) = s.tokens().await;
    let access = t["access_token"].as_str().unwrap();
    let refresh = t["refresh_token"].as_str().unwrap();
    let revoke = |form: Vec<(&'static str, String)>| {
        let (http, url) = (s.http.clone(), format!("{}/oauth/revoke", s.base));
        async move {
            let r = http.post(url).form(&form).send().await.unwrap();
            let status = r.status().as_u16();
            assert_eq!(header(&r, "cache-control"), "no-store");
            (status, r.text().await.unwrap())
        }
    };
    let with = |token: &str, client: &str| {
        vec![
            ("token", token.to_string()),
            ("client_id", client.to_string()),
        ]
    };
    // Refusals: nothing revoked by any of them.
    let (st, body) = revoke(vec![("client_id", client.clone())]).await;
    assert_eq!(st, 400, "{body}");
    assert_eq!(
        oauth_code(&serde_json::from_str(&body).unwrap()),
        "invalid_request"
    );
    let (st, body) = revoke(vec![("token", access.to_string())]).await;
    assert_eq!(st, 400, "client_id is required: {body}");
    let (st, body) = revoke(with(access, "oac_unknown")).await;
    assert_eq!(st, 400, "{body}");
    assert_eq!(
        oauth_code(&serde_json::from_str(&body).unwrap()),
        "invalid_client"
    );
    let other = s.client().await;
    let (st, body) = revoke(with(access, &other)).await;
    assert_eq!(st, 400, "another client's token: {body}");
    assert_eq!(
        oauth_code(&serde_json::from_str(&body).unwrap()),
        "invalid_grant"
    );
    let r = s
        .http
        .get(format!("{}/oauth/revoke", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(header(&r, "allow"), "POST");
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 200);

    // The access token, with a hint: that token only.
    let mut form = with(access, &client);
    form.push(("token_type_hint", "access_token".into()));
    assert_eq!(revoke(form).await, (200, String::new()));
    assert_eq!(s.rest(access, "recall", json!({"query": "x"})).await.0, 401);
    let (st, t2) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", &client),
        ])
        .await;
    assert_eq!(st, 200, "the refresh token still works: {t2}");
    let access2 = t2["access_token"].as_str().unwrap();
    let refresh2 = t2["refresh_token"].as_str().unwrap();
    assert_eq!(
        s.rest(access2, "recall", json!({"query": "x"})).await.0,
        200
    );

    // The refresh token, as JSON and with a wrong hint: the whole family.
    let r = s
        .http
        .post(format!("{}/oauth/revoke", s.base))
        .json(&json!({"token": refresh2, "client_id": client, "token_type_hint": "access_token"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        s.rest(access2, "recall", json!({"query": "x"})).await.0,
        401
    );
    let (st, v) = s
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh2),
            ("client_id", &client),
        ])
        .await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"));

    // Unknown and already revoked tokens: 200, as RFC 7009 §2.2 says.
    assert_eq!(revoke(with("zm_oat_never-issued", &client)).await.0, 200);
    assert_eq!(revoke(with(refresh2, &client)).await.0, 200);
    assert_eq!(
        revoke(with(refresh2, &other)).await.0,
        200,
        "a revoked token is no token, whoever asks"
    );
    // The user's grant stands: the client is still listed as authorized.
    let listed = s.store.list_oauth_clients(&s.user_id).await.unwrap();
    assert!(listed.iter().all(|c| c.revoked_at.is_none()), "{listed:?}");
    s.stop().await;
}

#[tokio::test]
async fn the_rate_limit_trips_and_retry_after_is_honest() {
    let s = start_with(|c| {
        c.oauth_rate_max = 3;
        c.oauth_rate_window = Duration::from_secs(60);
    })
    .await;
    let body = json!({"redirect_uris": [REDIRECT]});
    let register = || {
        s.http
            .post(format!("{}/oauth/register", s.base))
            .json(&body)
            .send()
    };
    // Refused registrations count too.
    for _ in 0..3 {
        assert_eq!(s.register(json!({})).await.0, 400);
    }
    let r = register().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let retry: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((59..=60).contains(&retry), "{retry}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"error": "rate_limited", "error_description": "Too many requests. Retry later."})
    );
    // The sign-in page is a browser's: its limit is a page, with the
    // same Retry-After, not the JSON the API endpoints answer.
    let authorize = || s.http.get(format!("{}/oauth/authorize", s.base)).send();
    for _ in 0..3 {
        assert_eq!(authorize().await.unwrap().status().as_u16(), 400);
    }
    let r = authorize().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert!(header(&r, "content-type").starts_with("text/html"), "{r:?}");
    let wait: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((59..=60).contains(&wait), "{wait}");
    assert_html_headers(&r);
    let page = r.text().await.unwrap();
    assert!(page.contains(&format!("Wait {wait} s")), "{page}");
    // Per route: the token endpoint has its own window.
    let (st, v) = s.token(&[("grant_type", "password")]).await;
    assert_eq!((st, oauth_code(&v)), (400, "unsupported_grant_type"));
    // Without a trusted proxy, X-Forwarded-For changes nothing.
    let r = s
        .http
        .post(format!("{}/oauth/register", s.base))
        .header("x-forwarded-for", "203.0.113.7")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    // Half a window later: still refused, and Retry-After has counted down.
    s.clock.advance(Duration::from_secs(30));
    let r = register().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let left: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((1..=retry - 30).contains(&left), "{left} after {retry}");
    // Retry-After seconds later the counter has reset: a whole new budget.
    s.clock.advance(Duration::from_secs(left));
    for _ in 0..3 {
        assert_eq!(register().await.unwrap().status().as_u16(), 201);
    }
    assert_eq!(register().await.unwrap().status().as_u16(), 429);
    s.stop().await;

    // Behind a trusted proxy, the right-most X-Forwarded-For hop (the one
    // our proxy appended) is the client: what the client put before it
    // changes nothing.
    let s = start_with(|c| {
        c.oauth_rate_max = 2;
        c.oauth_rate_window = Duration::from_secs(60);
        c.trust_proxy = true;
    })
    .await;
    let post = |xff: String| {
        s.http
            .post(format!("{}/oauth/register", s.base))
            .header("x-forwarded-for", xff)
            .json(&body)
            .send()
    };
    let via = |spoofed: &str, ip: &str| format!("{spoofed}, {ip}");
    assert_eq!(
        post(via("1.1.1.1", "203.0.113.1"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        201
    );
    assert_eq!(
        post(via("1.1.1.2", "203.0.113.1"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        201
    );
    assert_eq!(
        post(via("1.1.1.3", "203.0.113.1"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        429
    );
    assert_eq!(
        post(via("1.1.1.3", "203.0.113.2"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        201
    );
    // IPv6 clients count by their /64: rotating the low bits buys nothing.
    // Registrations count by the /48 too: another /64 of one allocation
    // buys nothing either; another allocation is another client.
    for (ip, want) in [
        ("2001:db8:1:2::1", 201),
        ("2001:db8:1:2:ffff:ffff:ffff:fffe", 201),
        ("2001:db8:1:2:abcd::9", 429),
        ("2001:db8:1:3::1", 429),
        ("2001:db8:2:3::1", 201),
    ] {
        let got = post(via("203.0.113.1", ip))
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(got, want, "{ip}");
    }
    s.stop().await;
}

#[tokio::test]
async fn metadata_follows_the_public_url() {
    metadata_follows("https://memory.example.com").await;
}

/// Behind a proxy that serves the server under a path (docs/DEPLOYMENT.md,
/// "Under a path prefix"): the issuer, every endpoint, the resource and
/// the challenge's metadata URL carry the path.
#[tokio::test]
async fn metadata_follows_a_public_url_with_a_path() {
    metadata_follows("https://example.com/zm").await;
}

/// The discovery documents, the 401 challenge and the resource check of a
/// server whose public URL is `issuer`.
async fn metadata_follows(issuer: &'static str) {
    let s = start_with(|c| c.public_url = issuer.into()).await;
    let get = |path: &str| {
        let url = format!("{}{path}", s.base);
        let http = s.http.clone();
        async move {
            let r = http.get(url).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let as_meta = get("/.well-known/oauth-authorization-server").await;
    assert_eq!(as_meta["issuer"], issuer);
    assert_eq!(
        as_meta["authorization_endpoint"],
        format!("{issuer}/oauth/authorize")
    );
    assert_eq!(as_meta["token_endpoint"], format!("{issuer}/oauth/token"));
    assert_eq!(
        as_meta["registration_endpoint"],
        format!("{issuer}/oauth/register")
    );
    assert_eq!(
        as_meta["revocation_endpoint"],
        format!("{issuer}/oauth/revoke")
    );
    assert_eq!(
        as_meta["revocation_endpoint_auth_methods_supported"],
        json!(["none"])
    );
    assert_eq!(as_meta["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(
        as_meta["token_endpoint_auth_methods_supported"],
        json!(["none"])
    );
    assert_eq!(as_meta["response_types_supported"], json!(["code"]));
    assert_eq!(
        as_meta["grant_types_supported"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(
        as_meta["authorization_response_iss_parameter_supported"],
        true
    );
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let pr = get(path).await;
        assert_eq!(pr["resource"], format!("{issuer}/mcp"));
        assert_eq!(pr["authorization_servers"], json!([issuer]));
        assert_eq!(pr["scopes_supported"], as_meta["scopes_supported"]);
    }
    // The 401 challenge points at the same document.
    let r = s
        .http
        .post(format!("{}/mcp", s.base))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(header(&r, "www-authenticate").contains(&format!(
        "resource_metadata=\"{issuer}/.well-known/oauth-protected-resource/mcp\""
    )));
    // The resource indicator is checked against the public URL too.
    let client = s.client().await;
    let p = pkce();
    let page = s
        .page(&[
            ("response_type", "code"),
            ("client_id", &client),
            ("redirect_uri", REDIRECT_PORT),
            ("code_challenge", &p.challenge),
            ("code_challenge_method", "S256"),
            ("resource", &format!("{issuer}/mcp")),
        ])
        .await;
    assert_eq!(page.status, 200, "{}", page.html);
    s.stop().await;
}

/// `GET /oauth/authorize` looks the client up and renders a page: it has
/// its own per-IP window, like the POST, with an honest `Retry-After`.
#[tokio::test]
async fn the_authorize_page_is_rate_limited() {
    let s = start_with(|c| {
        c.oauth_rate_max = 3;
        c.oauth_rate_window = Duration::from_secs(60);
    })
    .await;
    let client = s.client().await;
    let p = pkce();
    let query = [
        ("response_type", "code"),
        ("client_id", client.as_str()),
        ("redirect_uri", REDIRECT_PORT),
        ("code_challenge", p.challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    for _ in 0..3 {
        assert_eq!(s.authorize_get(&query).await.status().as_u16(), 200);
    }
    let r = s.authorize_get(&query).await;
    assert_eq!(r.status().as_u16(), 429);
    let retry: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((59..=60).contains(&retry), "{retry}");
    // Malformed queries count too: the limit comes before the query is read.
    let r = s
        .http
        .get(format!("{}/oauth/authorize?a=1&a=2", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    // Showing the page does not use up the sign-in attempts.
    let r = s
        .http
        .post(format!("{}/oauth/authorize", s.base))
        .form(&query)
        .send()
        .await
        .unwrap();
    assert_ne!(r.status().as_u16(), 429);
    s.clock.advance(Duration::from_secs(retry));
    assert_eq!(s.authorize_get(&query).await.status().as_u16(), 200);
    s.stop().await;
}

/// An authorization request with 12,000 parameters is refused by counting
/// them (more than 64 is `invalid_request`), not served; 64 are fine. The
/// token endpoint has the same cap.
#[tokio::test]
async fn more_than_64_parameters_are_refused() {
    let s = start().await;
    let client = s.client().await;
    let p = pkce();
    let valid = [
        ("response_type", "code"),
        ("client_id", client.as_str()),
        ("redirect_uri", REDIRECT_PORT),
        ("code_challenge", p.challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    let encoded = serde_urlencoded::to_string(valid).unwrap();
    // Distinct three-letter names (no repeat to trip over), short enough
    // that 12,000 of them fit in a URI.
    let names = |n: usize| -> String {
        (0..n)
            .map(|i| {
                let l = |k: usize| char::from(b'a' + u8::try_from(k % 26).unwrap());
                format!("{}{}{}=", l(i / 676), l(i / 26), l(i))
            })
            .collect::<Vec<_>>()
            .join("&")
    };
    let get = |query: String| {
        s.http
            .get(format!("{}/oauth/authorize?{query}", s.base))
            .send()
    };
    let r = get(format!("{encoded}&{}", names(64 - valid.len())))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "64 parameters are accepted");
    let r = get(format!("{encoded}&{}", names(65 - valid.len())))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = get(format!("{encoded}&{}", names(12_000))).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_html_headers(&r);
    let html = r.text().await.unwrap();
    assert!(html.contains("more than 64 parameters"), "{html}");

    let mut form: Vec<(String, String)> = vec![("grant_type".into(), "refresh_token".into())];
    form.extend((0..64).map(|i| (format!("x{i}"), "v".into())));
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(oauth_code(&v), "invalid_request");
    assert!(
        v["error_description"]
            .as_str()
            .unwrap()
            .contains("more than 64 parameters"),
        "{v}"
    );
    s.stop().await;
}

/// The sign-in page of a fresh authorization request for `client`.
async fn sign_in_page(s: &Server, client: &str, xff: Option<&str>) -> Page {
    let p = pkce();
    let q = [
        ("response_type", "code"),
        ("client_id", client),
        ("redirect_uri", REDIRECT),
        ("code_challenge", p.challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    let mut rb = s.http.get(format!("{}/oauth/authorize", s.base)).query(&q);
    if let Some(x) = xff {
        rb = rb.header("x-forwarded-for", x);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let cookie = set_cookie(&r);
    let html = r.text().await.unwrap();
    assert_eq!(status, 200, "{html}");
    Page {
        status,
        fields: hidden_fields(&html),
        cookie,
        html,
    }
}

/// An IPv6 client counts by its /48 on the sign-in form and the token
/// endpoint too (eight clients' worth; registration one): moving
/// through the 65,536 /64s of one allocation buys no fresh window;
/// another allocation is another client.
#[tokio::test]
async fn sign_ins_and_token_requests_count_an_ipv6_client_by_its_48() {
    const LIMIT: u32 = 3;
    let s = start_with(|c| {
        c.oauth_rate_max = LIMIT;
        c.oauth_rate_window = Duration::from_secs(60);
        c.trust_proxy = true;
    })
    .await;
    let client = s.client().await;
    let page = sign_in_page(&s, &client, Some("198.51.100.7")).await;
    // A /48 gets eight clients' worth (`CLIENTS_PER_NETWORK`).
    let network = LIMIT * 8;
    for i in 0..=network {
        let ip = format!("2001:db8:0:{i:x}::1");
        let email = format!("guess{i}@example.com");
        let posted = s
            .post_form_via(&page, &email, "wrong-password", Some(&ip))
            .await;
        let want = if i < network { 401 } else { 429 };
        assert_eq!(posted.status, want, "sign-in from {ip}: {}", posted.html);
    }
    let posted = s
        .post_form_via(
            &page,
            "guess@example.com",
            "wrong-password",
            Some("2001:db8:1::1"),
        )
        .await;
    assert_eq!(posted.status, 401, "another /48: {}", posted.html);

    let token = |ip: String| {
        s.http
            .post(format!("{}/oauth/token", s.base))
            .header("x-forwarded-for", ip)
            .form(&[("grant_type", "password")])
            .send()
    };
    for i in 0..=network {
        let ip = format!("2001:db8:0:{i:x}::1");
        let r = token(ip.clone()).await.unwrap();
        let want = if i < network { 400 } else { 429 };
        assert_eq!(r.status().as_u16(), want, "token request from {ip}");
    }
    let r = token("2001:db8:1::1".into()).await.unwrap();
    assert_eq!(r.status().as_u16(), 400, "another /48");
    s.stop().await;
}

#[tokio::test]
async fn failed_sign_ins_are_limited_per_ip_behind_an_appending_proxy() {
    // The proxy appends the address it saw; the client rotates what it puts
    // before it, and a different (non-existent) email each time.
    let s = start_with(|c| {
        c.oauth_rate_max = 10;
        c.oauth_rate_window = Duration::from_secs(60);
        c.trust_proxy = true;
    })
    .await;
    let client = s.client().await;
    let page = sign_in_page(&s, &client, Some("198.51.100.7")).await;
    let mut limited = 0;
    for i in 0..100 {
        let xff = format!("10.{}.{}.1, 198.51.100.7", i / 250, i % 250);
        let email = format!("guess{i}@example.com");
        let posted = s
            .post_form_via(&page, &email, "wrong-password", Some(&xff))
            .await;
        if i < 10 {
            assert_eq!(posted.status, 401, "attempt {i}: {}", posted.html);
        } else {
            assert_eq!(posted.status, 429, "attempt {i}");
            limited += 1;
        }
    }
    assert_eq!(limited, 90);
    s.stop().await;
}

/// Failed sign-ins back off per account whatever the IP, and whether the
/// account exists; the browser that last signed in to it is counted apart.
#[tokio::test]
async fn failed_sign_ins_back_off_per_account_whatever_the_ip() {
    // No per-IP limit at all: only the account's back-off stands.
    let s = start_with(|c| {
        c.oauth_rate_max = 0;
        c.trust_proxy = true;
    })
    .await;
    let client = s.client().await;
    let page = sign_in_page(&s, &client, None).await;
    for email in [EMAIL, "nobody@example.com"] {
        let mut statuses = Vec::new();
        for i in 0..100 {
            let xff = format!(
                "10.0.{}.{}, 203.0.{}.{}",
                i / 250,
                i % 250,
                i / 250,
                i % 250
            );
            let posted = s
                .post_form_via(&page, email, "wrong-password", Some(&xff))
                .await;
            if posted.status == 429 {
                // An honest Retry-After: the first back-off is 30 s.
                let left = posted.retry_after.unwrap();
                assert!((1..=30).contains(&left), "{email} attempt {i}: {left}");
                assert!(posted.html.contains("Too many failed sign-ins"));
            }
            statuses.push(posted.status);
        }
        // Five free failures, then refusals: the same for an existing and
        // a non-existent email, so the limit tells nothing about which exist.
        assert!(
            statuses[..5].iter().all(|&st| st == 401),
            "{email}: {statuses:?}"
        );
        assert!(
            statuses[5..].iter().all(|&st| st == 429),
            "{email}: {statuses:?}"
        );
    }
    // Even the right password waits out the back-off (it is not checked).
    let posted = s.post_form(&page, " A@Example.com", PASSWORD).await;
    assert_eq!(posted.status, 429);
    // Each failure after the back-off doubles it.
    s.clock
        .advance(Duration::from_secs(posted.retry_after.unwrap()));
    assert_eq!(
        s.post_form(&page, EMAIL, "wrong-password").await.status,
        401
    );
    let posted = s.post_form(&page, EMAIL, PASSWORD).await;
    assert_eq!(posted.status, 429);
    let left = posted.retry_after.unwrap();
    assert!((31..=60).contains(&left), "{left}");
    // After the back-off the owner gets in, and the success resets it.
    s.clock.advance(Duration::from_secs(left));
    let page = sign_in_page(&s, &client, None).await;
    let posted = s.post_form(&page, EMAIL, PASSWORD).await;
    assert_eq!(posted.status, 302, "{}", posted.html);
    let device = posted.device.expect("a sign-in makes the browser known");
    let page = sign_in_page(&s, &client, None).await;
    for _ in 0..5 {
        assert_eq!(
            s.post_form(&page, EMAIL, "wrong-password").await.status,
            401
        );
    }
    assert_eq!(s.post_form(&page, EMAIL, PASSWORD).await.status, 429);
    // The browser that signed in is counted apart: whoever failed
    // elsewhere does not lock it out.
    let mut known = sign_in_page(&s, &client, None).await;
    known.cookie = Some(format!("{}; {device}", known.cookie.unwrap_or_default()));
    let posted = s.post_form(&known, EMAIL, PASSWORD).await;
    assert_eq!(posted.status, 302, "{}", posted.html);
    assert_eq!(
        s.post_form(&page, EMAIL, PASSWORD).await.status,
        429,
        "still backing off elsewhere"
    );
    s.stop().await;
}

/// Sign-ins in flight at once get no more than the free attempts: each
/// takes its place in the account's count before its password is checked,
/// so twenty parallel guesses are five wrong passwords and fifteen
/// back-offs, not twenty guesses.
#[tokio::test]
async fn parallel_wrong_passwords_get_only_the_free_attempts() {
    let s = start_with(|c| c.oauth_rate_max = 0).await;
    let client = s.client().await;
    let page = sign_in_page(&s, &client, None).await;
    // A correct password after wrong ones, within the free attempts, signs
    // in: taking a place does not lock the owner out.
    for _ in 0..4 {
        assert_eq!(
            s.post_form(&page, EMAIL, "wrong-password").await.status,
            401
        );
    }
    assert_eq!(s.post_form(&page, EMAIL, PASSWORD).await.status, 302);
    let page = sign_in_page(&s, &client, None).await;
    let s = std::sync::Arc::new(s);
    let page = std::sync::Arc::new(page);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (s, page) = (s.clone(), page.clone());
            tokio::spawn(async move { s.post_form(&page, EMAIL, "wrong-password").await })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        let posted = t.await.unwrap();
        if posted.status == 429 {
            assert!(posted.html.contains("Too many failed sign-ins"));
            assert!(posted.retry_after.is_some_and(|r| (1..=30).contains(&r)));
        }
        statuses.push(posted.status);
    }
    statuses.sort_unstable();
    let wrong = statuses.iter().filter(|&&st| st == 401).count();
    assert_eq!(wrong, 5, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&st| st == 429).count(), 15);
    // And the account backs off now, the right password too.
    assert_eq!(s.post_form(&page, EMAIL, PASSWORD).await.status, 429);
    let Ok(s) = std::sync::Arc::try_unwrap(s) else {
        panic!("the tasks are done");
    };
    s.stop().await;
}

/// Another server on `s`'s database, at a public URL of its own: the
/// same server after its operator moved it.
async fn moved(s: &Server) -> Server {
    let (listener, _, base) = common::listen().await;
    let cfg = HttpConfig::local(&base);
    let limits = cfg.conn_limits();
    let cancel = CancellationToken::new();
    let state = zm_http::state(s.store.clone(), cfg);
    let clock = state.limiter.clock().clone();
    let app = zm_http::router_with_state(state, cancel.clone());
    Server {
        base,
        store: s.store.clone(),
        user_id: s.user_id.clone(),
        running: common::serve(listener, app, limits, cancel),
        _dir: tempfile::tempdir().unwrap(),
        http: s.http.clone(),
        clock,
    }
}

/// A token request to `at`'s token endpoint: its status and its JSON.
fn token_request(
    at: &Server,
    form: Vec<(&'static str, String)>,
) -> impl std::future::Future<Output = (u16, Value)> + use<> {
    let (http, url) = (at.http.clone(), format!("{}/oauth/token", at.base));
    async move {
        let r = http.post(url).form(&form).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap_or(Value::Null))
    }
}

/// RFC 8707 §2.2: a token is issued only for a resource its grant covers.
/// A code, and the refresh tokens of its family, issued for one resource
/// are `invalid_target` for another, even one the server now calls its
/// own (its public URL moved between the sign-in and the token request);
/// the refused refresh spends nothing. A request naming no resource is
/// for whatever the grant is for, a grant that named none is for the
/// server's one resource as it was at the sign-in, and resources compare
/// as URLs.
#[tokio::test]
async fn a_token_is_issued_only_for_the_resource_its_grant_names() {
    let s = start().await;
    let elsewhere = moved(&s).await;
    let ours = format!("{}/mcp", s.base);
    let theirs = format!("{}/mcp", elsewhere.base);
    let client = s.client().await;
    let exchange_at = |at: &Server, code: &str, p: &Pkce, resource: Option<&str>| {
        let mut form = vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code.to_string()),
            ("code_verifier", p.verifier.clone()),
            ("client_id", client.clone()),
            ("redirect_uri", REDIRECT_PORT.to_string()),
        ];
        if let Some(r) = resource {
            form.push(("resource", r.to_string()));
        }
        token_request(at, form)
    };
    let refresh_at = |at: &Server, refresh: &str, resource: Option<&str>| {
        let mut form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh.to_string()),
            ("client_id", client.clone()),
        ];
        if let Some(r) = resource {
            form.push(("resource", r.to_string()));
        }
        token_request(at, form)
    };

    // Issued for our resource, asked for the moved server's: refused, and
    // the code is spent.
    let p = pkce();
    let code = s
        .code_asking(&client, &p, &[("resource", ours.as_str())])
        .await;
    let (st, v) = exchange_at(&elsewhere, &code, &p, Some(theirs.as_str())).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_target"), "{v}");
    let (st, v) = exchange_at(&s, &code, &p, Some(ours.as_str())).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_grant"), "spent: {v}");

    // Asked for no resource: the grant's own. Its refresh tokens are
    // refused for the moved server's resource, spending nothing.
    let p = pkce();
    let code = s
        .code_asking(&client, &p, &[("resource", ours.as_str())])
        .await;
    let (st, t) = exchange_at(&elsewhere, &code, &p, None).await;
    assert_eq!(st, 200, "{t}");
    let refresh = t["refresh_token"].as_str().unwrap().to_string();
    let (st, v) = refresh_at(&elsewhere, &refresh, Some(theirs.as_str())).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_target"), "{v}");
    let (st, v) = refresh_at(&s, &refresh, Some(ours.as_str())).await;
    assert_eq!(st, 200, "the refusal spent nothing: {v}");
    let refresh = v["refresh_token"].as_str().unwrap().to_string();
    let (st, v) = refresh_at(&elsewhere, &refresh, None).await;
    assert_eq!(st, 200, "no resource named: {v}");

    // A grant that named no resource is for our one resource as it was
    // at the sign-in: the moved server's is refused for it, spending
    // nothing; resources compare as URLs.
    let p = pkce();
    let code = s.code(&client, &p).await;
    let (st, t) = exchange_at(&s, &code, &p, Some(ours.as_str())).await;
    assert_eq!(st, 200, "{t}");
    let refresh = t["refresh_token"].as_str().unwrap().to_string();
    let (st, v) = refresh_at(&elsewhere, &refresh, Some(theirs.as_str())).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_target"), "{v}");
    let (st, v) = refresh_at(&s, &refresh, Some(ours.as_str())).await;
    assert_eq!(st, 200, "the refusal spent nothing: {v}");
    let p = pkce();
    let code = s.code(&client, &p).await;
    let (st, v) = exchange_at(&elsewhere, &code, &p, Some(theirs.as_str())).await;
    assert_eq!((st, oauth_code(&v)), (400, "invalid_target"), "{v}");
    let p = pkce();
    let spelled = format!("{ours}/");
    let code = s
        .code_asking(&client, &p, &[("resource", spelled.as_str())])
        .await;
    let (st, t) = exchange_at(&s, &code, &p, Some(ours.as_str())).await;
    assert_eq!(st, 200, "{t}");
    let refresh = t["refresh_token"].as_str().unwrap().to_string();
    let (st, v) = refresh_at(&s, &refresh, Some(ours.as_str())).await;
    assert_eq!(st, 200, "{v}");
    elsewhere.stop().await;
    s.stop().await;
}

/// `ZM_PUBLIC_URL=HTTPS://Memory.Example.com/` is the issuer
/// `https://memory.example.com`, and that URL's `/mcp` is our resource.
#[tokio::test]
async fn an_upper_case_public_url_is_normalised() {
    let s = start_with(|c| {
        c.public_url = HttpConfig::local("HTTPS://Memory.Example.COM:443/").public_url;
    })
    .await;
    let r = s
        .http
        .get(format!("{}/.well-known/oauth-authorization-server", s.base))
        .send()
        .await
        .unwrap();
    let meta: Value = r.json().await.unwrap();
    assert_eq!(meta["issuer"], "https://memory.example.com");
    let client = s.client().await;
    let p = pkce();
    let r = s
        .authorize_get(&[
            ("response_type", "code"),
            ("client_id", &client),
            ("redirect_uri", REDIRECT_PORT),
            ("code_challenge", &p.challenge),
            ("code_challenge_method", "S256"),
            ("resource", "https://memory.example.com/mcp"),
        ])
        .await;
    assert_eq!(r.status().as_u16(), 200, "the resource is ours");
    let cookie = header(&r, "set-cookie");
    assert!(cookie.contains("; Secure"), "{cookie}");
    s.stop().await;
}

#[tokio::test]
async fn unused_registrations_are_pruned_after_a_day() {
    let s = start().await;
    let used = s.client().await;
    let p = pkce();
    let code = s.code(&used, &p).await;
    let (st, v) = s.exchange(&used, &code, &p.verifier).await;
    assert_eq!(st, 200, "{v}");
    // Registered after the sign-in (a password check, slow on a busy
    // machine), and the clock moved with margins of 30 s either way: the
    // store's clock is the wall clock plus what the test added.
    let unused = s.client().await;
    // Not yet a day: nothing goes.
    s.store
        .clock()
        .advance_ms(zm_store::oauth::ABANDONED_CLIENT_MS - 30_000);
    assert_eq!(
        s.store
            .prune_unused_oauth_clients(zm_store::oauth::ABANDONED_CLIENT_MS)
            .await
            .unwrap(),
        0
    );
    let fresh = s.client().await;
    s.store.clock().advance_ms(60_000);
    assert_eq!(
        s.store
            .prune_unused_oauth_clients(zm_store::oauth::ABANDONED_CLIENT_MS)
            .await
            .unwrap(),
        1
    );
    assert!(s.store.oauth_client(&unused).await.unwrap().is_none());
    assert!(s.store.oauth_client(&used).await.unwrap().is_some());
    assert!(s.store.oauth_client(&fresh).await.unwrap().is_some());
    // Registering prunes too: a day later the fresh, unused one is gone.
    s.store
        .clock()
        .advance_ms(zm_store::oauth::ABANDONED_CLIENT_MS);
    s.client().await;
    assert!(s.store.oauth_client(&fresh).await.unwrap().is_none());
    assert!(s.store.oauth_client(&used).await.unwrap().is_some());
    s.stop().await;
}

/// A member removed from a team: their OAuth access token, issued while
/// they were a member, reads nothing of the team on its very next use.
#[tokio::test]
async fn a_removed_members_oauth_token_reads_nothing_of_the_team() {
    let s = start().await;
    let (_, t) = s.tokens().await;
    let access = t["access_token"].as_str().unwrap();
    let b = s
        .store
        .user_by_email("b@example.com")
        .await
        .unwrap()
        .unwrap();
    let admin = zm_store::Caller::new(b.id.clone());
    let input: zm_contracts::teams::CreateTeamInput =
        zm_contracts::parse_input(&json!({"slug": "oauthteam"})).unwrap();
    s.store.create_team(&admin, input).await.unwrap();
    common::join_team(
        &s.store,
        &admin,
        "oauthteam",
        EMAIL,
        zm_contracts::TeamRole::Writer,
    )
    .await;
    let (st, v) = s
        .rest(
            access,
            "remember",
            json!({"content": "Incident reviews happen within 48 hours.", "kind": "convention", "scope": "team.oauthteam"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let recall = json!({"query": "incident reviews", "scopes": ["*"]});
    let (_, v) = s.rest(access, "recall", recall.clone()).await;
    assert_eq!(v["memories"].as_array().map(Vec::len), Some(1), "{v}");
    s.store
        .remove_team_member(&admin, "oauthteam", &s.user_id)
        .await
        .unwrap();
    let (st, v) = s.rest(access, "recall", recall).await;
    assert_eq!(st, 200, "the token still works: {v}");
    assert_eq!(
        v["memories"],
        json!([]),
        "but reads nothing of the team: {v}"
    );
    let (st, v) = s
        .rest(
            access,
            "remember",
            json!({"content": "A late convention.", "kind": "convention", "scope": "team.oauthteam"}),
        )
        .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    s.stop().await;
}

/// As many registrations waiting for their first sign-in as the cap
/// allows, registered at `created_at`, written straight into the test's
/// SQLite file; the raw pool that wrote them.
async fn fill_waiting_registrations(s: &Server, created_at: i64) -> sqlx::AnyPool {
    let url = zm_store::sqlite_url(&s._dir.path().join("t.db"));
    let raw = sqlx::AnyPool::connect(&url).await.expect("a raw pool");
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
         INSERT INTO oauth_clients (id, client_name, redirect_uris, owner_id, created_at) \
         SELECT 'zmc_fill' || i, NULL, '[]', NULL, $2 FROM n",
    )
    .bind(zm_store::oauth::MAX_WAITING_CLIENTS)
    .bind(created_at)
    .execute(&raw)
    .await
    .expect("fill");
    raw
}

/// When the registrations waiting for their first sign-in reach the cap, a
/// registration still succeeds: the oldest waiting one makes room.
#[tokio::test]
async fn a_registration_past_the_waiting_cap_replaces_the_oldest() {
    let s = start().await;
    let raw = fill_waiting_registrations(
        &s,
        s.store.clock().now_ms() - zm_store::oauth::EVICTABLE_AFTER_MS - 1,
    )
    .await;
    let r = s
        .http
        .post(format!("{}/oauth/register", s.base))
        .json(&json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let waiting: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM oauth_clients WHERE owner_id IS NULL")
            .fetch_one(&raw)
            .await
            .unwrap();
    assert_eq!(
        waiting,
        zm_store::oauth::MAX_WAITING_CLIENTS,
        "still the cap"
    );
    s.stop().await;
}

/// With as many registrations waiting as the cap and none old enough to
/// make room, a registration is refused with 429 and a wait of minutes
/// (not the second a busy database asks for).
#[tokio::test]
async fn a_registration_past_a_full_waiting_cap_waits_minutes() {
    let s = start().await;
    fill_waiting_registrations(&s, s.store.clock().now_ms()).await;
    let r = s
        .http
        .post(format!("{}/oauth/register", s.base))
        .json(&json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let wait: u64 = header(&r, "retry-after").parse().unwrap();
    assert!(wait >= 60, "a wait of minutes: {wait}");
    s.stop().await;
}

/// The form's CSRF cookie is sent again with every form rendered, so it
/// lives as long as the form's token: a form loaded late in the cookie's
/// life, or a retry after a wrong password, does not expire early.
#[tokio::test]
async fn every_sign_in_form_sends_its_csrf_cookie_again() {
    let s = start().await;
    let client = s.client().await;
    let p = pkce();
    let query = [
        ("response_type", "code"),
        ("client_id", client.as_str()),
        ("redirect_uri", REDIRECT_PORT),
        ("code_challenge", p.challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    let first = s.page(&query).await;
    let cookie = first
        .cookie
        .clone()
        .expect("the first page sets the cookie");
    let again = s
        .http
        .get(format!("{}/oauth/authorize", s.base))
        .query(&query)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        set_cookie(&again).as_deref(),
        Some(cookie.as_str()),
        "the same cookie, sent again"
    );
    let max_age = csrf_set_cookie(&again).unwrap();
    assert!(max_age.contains("Max-Age="), "{max_age}");
    // The page loaded again: a second form open in the same browser.
    let second_fields = hidden_fields(&again.text().await.unwrap());
    let mut form = first.fields.clone();
    form.push(("email".into(), EMAIL.into()));
    form.push(("password".into(), "not the password".into()));
    let wrong = s
        .http
        .post(format!("{}/oauth/authorize", s.base))
        .form(&form)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    assert_eq!(
        set_cookie(&wrong).as_deref(),
        Some(cookie.as_str()),
        "the retry's form keeps it too"
    );
    // Two forms open in one browser (two apps, or one that opened the
    // page again): signing in on one leaves the other's cookie, so the
    // other signs in too instead of answering "form expired".
    // What the browser holds: the cookie, as each answer leaves it.
    let mut jar = cookie.clone();
    for (tab, fields) in [("first", &first.fields), ("second", &second_fields)] {
        let mut form = fields.clone();
        form.push(("email".into(), EMAIL.into()));
        form.push(("password".into(), PASSWORD.into()));
        let r = s
            .http
            .post(format!("{}/oauth/authorize", s.base))
            .form(&form)
            .header("cookie", &jar)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 302, "the {tab} form signs in");
        let location = header(&r, "location");
        assert!(
            param(&query_of(&location), "code").is_some(),
            "{tab}: {location}"
        );
        if let Some(set) = csrf_set_cookie(&r) {
            jar = set.split(';').next().unwrap_or("").to_string();
        }
    }
    s.stop().await;
}
