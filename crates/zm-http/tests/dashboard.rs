//! The dashboard over real HTTP on loopback: sign-in (CSRF, back-off,
//! session cookie flags), every page and action, errors by code, and
//! isolation — another user, a team member and a removed member see
//! exactly what they may, and a foreign id reads as not found.
//!
//! Every test runs on both backends: `<test>::sqlite` on a fresh file,
//! `<test>::postgres` on `ZM_TEST_DATABASE_URL` (skipped, saying so,
//! without it). Users and teams get run-unique names, so the PostgreSQL
//! database may be shared.

mod common;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use zm_http::HttpConfig;
use zm_store::{Caller, Store};

struct Server {
    base: String,
    store: Store,
    running: common::Running,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

/// A run-unique lowercase suffix.
fn unique() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..10)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

/// A user `<who>-<unique>@example.com` and the password it signs in with.
async fn person(store: &Store, who: &str) -> (zm_store::User, String, String) {
    let tag = format!("{who}-{}", unique());
    let user = common::user(store, &tag).await;
    let email = user.email.clone();
    (user, email, format!("password-{tag}-123"))
}

/// One `#[tokio::test]` per backend for each listed test.
macro_rules! both_backends {
    ($($name:ident)*) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::start(None).await).await;
            }
            #[tokio::test]
            async fn postgres() {
                match zm_store::test_database_url() {
                    Some(url) => super::$name(super::start(Some(url)).await).await,
                    None => eprintln!("ZM_TEST_DATABASE_URL is not set: skipped {}::postgres", stringify!($name)),
                }
            }
        }
    )*};
}

both_backends! {
    sign_in_browse_search_change_and_sign_out
    disabling_an_account_ends_its_sessions_and_others_see_nothing
    team_members_see_the_team_and_removed_members_do_not
    a_memory_page_shows_its_links_entities_and_conflicts_and_access_ends_mcp_sessions
    the_account_page_imports_a_server_memory_file_once
    the_teams_pages_manage_a_team_end_to_end
    a_teams_admins_revoke_on_its_page_the_rules_departed_members_left
    a_teams_admin_forgets_and_restores_on_its_page_a_memory_a_departed_member_left
    a_password_change_follows_the_stores_rules
    a_new_sign_in_ends_the_old_session_and_ended_ones_are_dropped
    insight_charts_writing_by_scope_and_recalls_by_agent
    deleting_the_account_takes_its_email_and_password
    a_form_that_comes_back_keeps_the_choices_and_says_why
    a_rules_delivery_is_read_by_the_rule_not_its_text
    a_nul_character_is_refused_as_validation_failed_everywhere
    an_address_that_does_not_read_is_the_validation_page
    a_token_takes_the_password_and_a_password_change_may_revoke_tokens
    the_review_page_pages_back_through_older_conflicts
    forms_say_why_and_addresses_that_are_not_pages_answer_as_pages
    an_edit_of_the_longest_text_in_any_script_is_saved
}

async fn start(postgres: Option<String>) -> Server {
    start_with(postgres, |_| {}).await
}

async fn start_with(postgres: Option<String>, edit: impl FnOnce(&mut HttpConfig)) -> Server {
    let (dir, store) = match postgres {
        None => common::store().await,
        Some(url) => (
            tempfile::tempdir().unwrap(),
            Store::open(url.trim())
                .await
                .expect("open ZM_TEST_DATABASE_URL"),
        ),
    };
    let (listener, _, base) = common::listen().await;
    let mut cfg = HttpConfig::local(&base);
    // No per-address sign-in limit unless a test sets one: on PostgreSQL
    // its windows are kept in the database, so every test server's
    // sign-ins from 127.0.0.1 would draw on one budget of 30 a minute.
    cfg.oauth_rate_max = 0;
    edit(&mut cfg);
    let cancel = CancellationToken::new();
    let limits = cfg.conn_limits();
    let app = zm_http::router(store.clone(), cfg, cancel.clone());
    Server {
        base,
        store,
        running: common::serve(listener, app, limits, cancel),
        _dir: dir,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
    }
}

/// What a browser keeps between requests: its cookies.
#[derive(Default, Clone)]
struct Browser {
    cookies: Vec<(String, String)>,
}

struct Page {
    status: u16,
    location: Option<String>,
    set_cookies: Vec<String>,
    csp: Option<String>,
    retry_after: Option<String>,
    body: String,
}

fn field(html: &str, name: &str) -> Option<String> {
    let needle = format!("name=\"{name}\" value=\"");
    let start = html.find(&needle)? + needle.len();
    let end = html[start..].find('"')? + start;
    Some(html[start..end].replace("&amp;", "&"))
}

impl Browser {
    fn header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep(&mut self, set_cookies: &[String]) {
        for c in set_cookies {
            let first = c.split(';').next().unwrap_or("");
            if let Some((k, v)) = first.split_once('=') {
                self.cookies.retain(|(name, _)| name != k);
                if !v.is_empty() && !c.contains("Max-Age=0") {
                    self.cookies.push((k.to_string(), v.to_string()));
                }
            }
        }
    }

    async fn send(
        &mut self,
        s: &Server,
        method: &str,
        path: &str,
        form: Option<&[(&str, &str)]>,
        origin: Option<&str>,
    ) -> Page {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut rb = s.http.request(method, format!("{}{path}", s.base));
        if !self.cookies.is_empty() {
            rb = rb.header("cookie", self.header());
        }
        if let Some(f) = form {
            rb = rb
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", origin.unwrap_or(&s.base))
                .body(serde_urlencoded::to_string(f).unwrap());
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let csp = r
            .headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let set_cookies: Vec<String> = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        let retry_after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.keep(&set_cookies);
        Page {
            status,
            location,
            set_cookies,
            csp,
            retry_after,
            body: r.text().await.unwrap(),
        }
    }

    async fn get(&mut self, s: &Server, path: &str) -> Page {
        self.send(s, "GET", path, None, None).await
    }

    async fn post(&mut self, s: &Server, path: &str, form: &[(&str, &str)]) -> Page {
        self.send(s, "POST", path, Some(form), None).await
    }

    async fn sign_in(&mut self, s: &Server, email: &str, password: &str) -> Page {
        let page = self.get(s, "/login").await;
        let token = field(&page.body, "csrf").expect("a csrf field");
        self.post(
            s,
            "/login",
            &[
                ("csrf", &token),
                ("next", "/"),
                ("email", email),
                ("password", password),
            ],
        )
        .await
    }

    /// The bulk forget of `ids`, confirmed (the answer to "Forget N
    /// memories?").
    async fn bulk_forget(&mut self, s: &Server, csrf: &str, ids: &[&str]) -> Page {
        let mut form = vec![("csrf", csrf), ("action", "forget"), ("confirm", "yes")];
        form.extend(ids.iter().map(|id| ("ids", *id)));
        self.post(s, "/memories/bulk", &form).await
    }

    /// The account deletion form, sent with this confirmation and password.
    async fn delete_account(
        &mut self,
        s: &Server,
        csrf: &str,
        confirm: &str,
        password: &str,
    ) -> Page {
        self.post(
            s,
            "/account/delete",
            &[("csrf", csrf), ("confirm", confirm), ("password", password)],
        )
        .await
    }

    /// The CSRF token of the signed-in session (from any page).
    async fn csrf(&mut self, s: &Server) -> String {
        field(&self.get(s, "/").await.body, "csrf").expect("a signed-in page carries the token")
    }
}

async fn remember(store: &Store, user: &str, content: &str, scope: &str) -> String {
    let out = zm_store::ToolService::new(store.clone())
        .call(
            &Caller::new(user),
            zm_contracts::ToolName::Remember,
            &json!({"content": content, "kind": "fact", "scope": scope}),
        )
        .await
        .unwrap()
        .to_json();
    out["memory_id"].as_str().unwrap().to_string()
}

async fn sign_in_browse_search_change_and_sign_out(s: Server) {
    let (a, a_email, a_password) = person(&s.store, "dash-a").await;
    let m = remember(
        &s.store,
        &a.id,
        "The billing cron runs at 02:00 UTC.",
        "personal",
    )
    .await;
    let mut b = Browser::default();

    // Signed out: every page sends to the sign-in page and back.
    let p = b.get(&s, &format!("/memories/{m}")).await;
    assert_eq!(p.status, 303);
    assert_eq!(
        p.location.as_deref(),
        Some(format!("/login?next=%2Fmemories%2F{m}").as_str())
    );
    let p = b.get(&s, "/login").await;
    assert_eq!(p.status, 200);
    let csp = p.csp.clone().unwrap();
    assert!(
        !csp.contains("unsafe-inline") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(p.set_cookies.iter().any(|c| c.starts_with("zm_login=")
        && c.contains("SameSite=Strict")
        && c.contains("HttpOnly")));

    // A forged sign-in form (no token) and a wrong password are refused.
    let p = b
        .post(
            &s,
            "/login",
            &[
                ("email", "dash-a@example.com"),
                ("password", "password-dash-a-123"),
            ],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    // A sign-in form larger than a sign-in needs is refused unread, at
    // 32 KiB, not at the edit form's size for a memory's text (hundreds
    // of KiB, read before anyone is known).
    let p = b.get(&s, "/login").await;
    let token = field(&p.body, "csrf").expect("a csrf field");
    let huge = "x".repeat(100 * 1024);
    let p = b
        .post(
            &s,
            "/login",
            &[("csrf", &token), ("email", &a_email), ("password", &huge)],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(
        p.body.contains(&format!("larger than {} bytes", 32 * 1024)),
        "{}",
        p.body
    );
    let p = b.sign_in(&s, &a_email, "wrong password").await;
    assert_eq!(p.status, 400);
    assert!(
        p.body.contains("Wrong email or password") || p.body.contains("marked fields"),
        "{}",
        p.body
    );
    let p = b.sign_in(&s, &a_email, &a_password).await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some("/")),
        "{}",
        p.body
    );
    let session = p
        .set_cookies
        .iter()
        .find(|c| c.starts_with("zm_session="))
        .expect("a session cookie");
    assert!(
        session.contains("HttpOnly")
            && session.contains("SameSite=Strict")
            && session.contains("; Path=/;")
            && !session.contains("Secure"),
        "{session}"
    );

    // Browse and search.
    let p = b.get(&s, "/").await;
    assert_eq!(p.status, 200);
    assert!(
        p.body.contains(&m) && p.body.contains("billing cron"),
        "{}",
        p.body
    );
    let p = b.get(&s, "/?q=billing+cron").await;
    assert!(
        p.body.contains(&m) && p.body.contains("score "),
        "{}",
        p.body
    );
    let p = b.get(&s, &format!("/memories/{m}")).await;
    assert!(p.body.contains(&format!("zm://memory/{m}")), "{}", p.body);

    // Changes need the session's CSRF token and our origin.
    let csrf = b.csrf(&s).await;
    let p = b
        .post(&s, &format!("/memories/{m}/forget"), &[("csrf", "forged")])
        .await;
    assert_eq!(p.status, 403);
    let p = b
        .send(
            &s,
            "POST",
            &format!("/memories/{m}/forget"),
            Some(&[("csrf", &csrf)]),
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(p.status, 403);
    // Edit keeps the history: a new memory supersedes the old one.
    let p = b
        .post(
            &s,
            &format!("/memories/{m}/edit"),
            &[
                ("csrf", &csrf),
                ("content", "The billing cron runs at 03:00 UTC."),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let new_page = p.location.unwrap();
    let p = b.get(&s, &format!("/memories/{m}")).await;
    assert!(
        p.body.contains("Superseded by")
            && p.body.contains(new_page.trim_start_matches("/memories/")),
        "{}",
        p.body
    );
    // Saving the old version again (a stale tab) is refused: it would bring
    // the superseded text back beside its successor.
    let p = b
        .post(
            &s,
            &format!("/memories/{m}/edit"),
            &[
                ("csrf", &csrf),
                ("content", "The billing cron runs at 05:00 UTC."),
            ],
        )
        .await;
    assert_eq!(p.status, 409, "{}", p.body);
    assert!(
        p.body.contains("id=\"edit\"") && p.body.contains("The billing cron runs at 05:00 UTC."),
        "the form again, with what was typed: {}",
        p.body
    );
    assert!(
        !p.body.contains("Save as a new version") && p.body.contains("edit its newest version"),
        "no save over the stale version, a way to the newest: {}",
        p.body
    );
    assert!(!b.get(&s, "/?q=05:00").await.body.contains("05:00 UTC"));
    // Line breaks as a browser sends them (CR LF) are the memory's own
    // (LF): the new version saved again unchanged is no change.
    let lines = b
        .post(
            &s,
            &format!("{new_page}/edit"),
            &[
                ("csrf", &csrf),
                (
                    "content",
                    "The billing cron runs at 03:00 UTC.\r\nIt retries twice.",
                ),
            ],
        )
        .await;
    assert_eq!(lines.status, 303, "{}", lines.body);
    let lines_page = lines.location.unwrap();
    let lines_id = lines_page.trim_start_matches("/memories/");
    let stored = s
        .store
        .get_memory(
            &zm_store::Caller::new(a.id.clone()),
            &zm_contracts::MemoryId::parse(lines_id).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.content,
        "The billing cron runs at 03:00 UTC.\nIt retries twice."
    );
    let again = b
        .post(
            &s,
            &format!("{lines_page}/edit"),
            &[
                ("csrf", &csrf),
                (
                    "content",
                    "The billing cron runs at 03:00 UTC.\r\nIt retries twice.",
                ),
            ],
        )
        .await;
    assert_eq!(
        again.location.as_deref(),
        Some(lines_page.as_str()),
        "saved unchanged: the same memory, no new version"
    );
    // A memory an agent stored with CR LF, saved unchanged: no change
    // either (its line breaks are not rewritten by a save).
    let crlf = remember(
        &s.store,
        &a.id,
        "Backups run nightly.\r\nThey are kept a week.",
        "personal",
    )
    .await;
    let same = b
        .post(
            &s,
            &format!("/memories/{crlf}/edit"),
            &[
                ("csrf", &csrf),
                ("content", "Backups run nightly.\r\nThey are kept a week."),
            ],
        )
        .await;
    assert_eq!(
        same.location.as_deref(),
        Some(format!("/memories/{crlf}").as_str()),
        "{}",
        same.body
    );
    let new_page = lines_page;
    // Forget and restore the new one.
    let p = b
        .post(
            &s,
            &format!("{new_page}/forget"),
            &[("csrf", &csrf), ("reason", "wrong time")],
        )
        .await;
    assert_eq!(p.status, 303);
    assert!(b.get(&s, &new_page).await.body.contains("forgotten"));
    assert_eq!(
        b.post(&s, &format!("{new_page}/restore"), &[("csrf", &csrf)])
            .await
            .status,
        303
    );
    assert!(b.get(&s, &new_page).await.body.contains(">live"));
    // The id spelled otherwise than the page spells it (a line break
    // after it, which parses as the id): the change is made and the
    // answer goes back to the memory's own page, not to a `Location` that
    // cannot hold the line break (a plain-text 500).
    let p = b
        .post(&s, &format!("{new_page}%0A/forget"), &[("csrf", &csrf)])
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some(new_page.as_str())),
        "{}",
        p.body
    );
    assert!(b.get(&s, &new_page).await.body.contains("forgotten"));
    let p = b
        .post(&s, &format!("{new_page}%0A/restore"), &[("csrf", &csrf)])
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some(new_page.as_str()))
    );
    assert!(b.get(&s, &new_page).await.body.contains(">live"));

    // A bulk action takes at most 200 memories (a crafted form of more is
    // refused before anything is read).
    let many: Vec<(&str, &str)> = [
        ("csrf", csrf.as_str()),
        ("action", "forget"),
        ("confirm", "yes"),
    ]
    .into_iter()
    .chain(std::iter::repeat_n(
        ("ids", "mem_0000000000000000.0000000000"),
        201,
    ))
    .collect();
    let p = b.post(&s, "/memories/bulk", &many).await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("at most 200"), "{}", p.body);
    // Bulk forget asks first, saying how many.
    let x = remember(&s.store, &a.id, "Staging resets every Monday.", "personal").await;
    let y = remember(&s.store, &a.id, "Use pnpm, not npm.", "personal").await;
    let p = b
        .post(
            &s,
            "/memories/bulk",
            &[
                ("csrf", &csrf),
                ("action", "forget"),
                ("ids", &x),
                ("ids", &y),
            ],
        )
        .await;
    assert_eq!(p.status, 200);
    assert!(p.body.contains("Forget 2 memories?"), "{}", p.body);
    let p = b.bulk_forget(&s, &csrf, &[&x, &y]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = b.get(&s, "/?status=forgotten").await;
    assert!(p.body.contains(&x) && p.body.contains(&y));
    // A bulk move says what it could not move (x is forgotten now).
    let z = remember(
        &s.store,
        &a.id,
        "The search index rebuilds nightly.",
        "personal",
    )
    .await;
    let project = zm_contracts::scope::project_scope(&a.id, "dashmove");
    let p = b
        .post(
            &s,
            "/memories/bulk",
            &[
                ("csrf", &csrf),
                ("action", "move"),
                ("scope", &project),
                ("confirm", "yes"),
                ("ids", &x),
                ("ids", &z),
            ],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("Moved 1 of 2")
            && p.body.contains(&x)
            && !p.body.contains(&format!("{z}</code>")),
        "{}",
        p.body
    );

    // A bulk action comes back to the list it was made in, filters and
    // all: the list hands its address to the form, the confirmation's
    // Cancel leads there, and so does the change once made (a forget to
    // the same list's forgotten memories). A crafted address is only ever
    // the list's own parameters, re-encoded: never another site or page.
    let personal = zm_contracts::scope::personal_scope(&a.id);
    let filtered = format!(
        "/?{}",
        serde_urlencoded::to_string([("scope", personal.as_str()), ("kind", "fact")]).unwrap()
    );
    let w = remember(&s.store, &a.id, "The VPN drops at midnight.", "personal").await;
    let p = b.get(&s, &filtered).await;
    let hidden = format!("name=\"back\" value=\"{}\"", filtered.replace('&', "&amp;"));
    assert!(p.body.contains(&hidden), "{}", p.body);
    let p = b
        .post(
            &s,
            "/memories/bulk",
            &[
                ("csrf", &csrf),
                ("action", "forget"),
                ("back", &filtered),
                ("ids", &w),
            ],
        )
        .await;
    let cancel = format!("href=\"{}\"", filtered.replace('&', "&amp;"));
    assert!(
        p.body.contains(&hidden) && p.body.contains(&cancel),
        "{}",
        p.body
    );
    let p = b
        .post(
            &s,
            "/memories/bulk",
            &[
                ("csrf", &csrf),
                ("action", "forget"),
                ("confirm", "yes"),
                ("back", &format!("{filtered}&before=5&done=x&q=vpn")),
                ("ids", &w),
            ],
        )
        .await;
    assert_eq!(
        (p.status, p.location),
        (
            303,
            Some(format!("{filtered}&status=forgotten&done=forget"))
        )
    );
    for (i, crafted) in [
        "//evil.example/?kind=fact",
        "/memories/x?kind=fact",
        "https://evil.example/",
    ]
    .into_iter()
    .enumerate()
    {
        let v = remember(
            &s.store,
            &a.id,
            &format!("Crafted back address {i} leads home."),
            "personal",
        )
        .await;
        let p = b
            .post(
                &s,
                "/memories/bulk",
                &[
                    ("csrf", &csrf),
                    ("action", "move"),
                    ("scope", &project),
                    ("confirm", "yes"),
                    ("back", crafted),
                    ("ids", &v),
                ],
            )
            .await;
        assert_eq!(
            (p.status, p.location.as_deref()),
            (303, Some("/?done=move")),
            "{crafted}: {}",
            p.body
        );
    }

    // Errors by code: a malformed id and an unknown one are a 404 page.
    let p = b.get(&s, "/memories/mem_0000000000000000.0000000000").await;
    assert_eq!(p.status, 404);
    assert!(
        p.body.contains("data-error-code=\"not_found\""),
        "{}",
        p.body
    );

    // Sign-out ends the session on the server: the old cookie is refused.
    let old = b.clone();
    let p = b.post(&s, "/logout", &[("csrf", &csrf)]).await;
    assert_eq!((p.status, p.location.as_deref()), (303, Some("/login")));
    assert!(
        p.set_cookies.iter().any(|c| c.starts_with("zm_session=;")
            && c.contains("; Path=/;")
            && c.contains("Max-Age=0")),
        "sign-out clears the cookie where it was set: {:?}",
        p.set_cookies
    );
    let mut replay = old;
    assert_eq!(
        replay.get(&s, "/").await.status,
        303,
        "a signed-out cookie no longer works"
    );
    s.running.stop().await;
}

async fn disabling_an_account_ends_its_sessions_and_others_see_nothing(s: Server) {
    let (a, a_email, a_password) = person(&s.store, "iso-a").await;
    let (b_user, b_email, b_password) = person(&s.store, "iso-b").await;
    let secret = remember(
        &s.store,
        &a.id,
        "A's private plan: migrate to Postgres 17.",
        "personal",
    )
    .await;
    // What B must not see, A's own search shows.
    let mut owner = Browser::default();
    assert_eq!(owner.sign_in(&s, &a_email, &a_password).await.status, 303);
    assert!(
        owner
            .get(&s, "/?q=postgres+plan")
            .await
            .body
            .contains("Postgres 17"),
        "A finds their own memory"
    );
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &b_email, &b_password).await.status, 303);
    // Another user's memory answers exactly like one that never existed.
    let theirs = b.get(&s, &format!("/memories/{secret}")).await;
    let never = b.get(&s, "/memories/mem_0000000000000000.0000000000").await;
    assert_eq!(theirs.status, 404);
    assert_eq!(
        theirs.body.replace(&secret, "<ID>"),
        never
            .body
            .replace("mem_0000000000000000.0000000000", "<ID>")
    );
    assert!(
        !b.get(&s, "/?q=postgres+plan")
            .await
            .body
            .contains("Postgres 17")
    );
    assert!(!b.get(&s, "/?status=all").await.body.contains(&secret));
    let csrf = b.csrf(&s).await;
    let p = b
        .post(
            &s,
            &format!("/memories/{secret}/forget"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, 404);
    let never = b
        .post(
            &s,
            "/memories/mem_0000000000000000.0000000000/forget",
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(
        p.body.replace(&secret, "<ID>"),
        never
            .body
            .replace("mem_0000000000000000.0000000000", "<ID>"),
        "a foreign forget answers as one of nothing"
    );
    let kept = s
        .store
        .get_memory(
            &zm_store::Caller::new(a.id.clone()),
            &zm_contracts::MemoryId::parse(&secret).unwrap(),
        )
        .await
        .expect("A's memory");
    assert!(kept.invalidated_at.is_none(), "B's forget retired nothing");
    // Disabling B ends B's session at once.
    s.store.disable_user(&b_user.id).await.unwrap();
    assert_eq!(b.get(&s, "/").await.status, 303);
    s.running.stop().await;
}

async fn team_members_see_the_team_and_removed_members_do_not(s: Server) {
    let (a, _, _) = person(&s.store, "tm-a").await;
    let (c, c_email, c_password) = person(&s.store, "tm-c").await;
    let team = format!("dashteam{}", unique());
    let admin = Caller::new(a.id.clone());
    let input: zm_contracts::teams::CreateTeamInput =
        zm_contracts::parse_input(&json!({"slug": team})).unwrap();
    s.store.create_team(&admin, input).await.unwrap();
    common::join_team(
        &s.store,
        &admin,
        &team,
        &c.email,
        zm_contracts::TeamRole::Writer,
    )
    .await;
    let shared = remember(
        &s.store,
        &a.id,
        "Team rule: deploys freeze on Fridays.",
        &format!("team.{team}"),
    )
    .await;
    let private = remember(
        &s.store,
        &a.id,
        "A's own draft about the freeze.",
        "personal",
    )
    .await;
    let mut browser = Browser::default();
    assert_eq!(browser.sign_in(&s, &c_email, &c_password).await.status, 303);
    let p = browser.get(&s, "/?status=all").await;
    assert!(
        p.body.contains(&shared) && !p.body.contains(&private),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(&format!("team.{team}")),
        "the scope facet lists the team"
    );
    let page = browser.get(&s, &format!("/memories/{shared}")).await;
    assert_eq!(page.status, 200);
    // A teammate's memory is read only here, even for a writer: editing
    // would leave two versions (only its author can supersede it).
    assert!(
        page.body.contains("id=\"not-yours\"") && !page.body.contains("id=\"edit\""),
        "{}",
        page.body
    );
    let csrf = browser.csrf(&s).await;
    let p = browser
        .post(
            &s,
            &format!("/memories/{shared}/edit"),
            &[
                ("csrf", &csrf),
                ("content", "Team rule: deploys freeze on Thursdays."),
            ],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    assert!(
        !browser
            .get(&s, "/?q=thursdays")
            .await
            .body
            .contains("Thursdays"),
        "no second version was written"
    );
    assert_eq!(
        browser
            .get(&s, &format!("/memories/{private}"))
            .await
            .status,
        404
    );
    // C's own team memory, once C is a reader there: no form the store
    // would refuse (it needs the writer role), and the page says why.
    let own = remember(
        &s.store,
        &c.id,
        "C's note: the freeze lifts on Monday.",
        &format!("team.{team}"),
    )
    .await;
    let page = browser.get(&s, &format!("/memories/{own}")).await;
    assert!(page.body.contains("id=\"edit\"") && page.body.contains("id=\"forget\""));
    let reader: zm_contracts::teams::SetRoleInput =
        zm_contracts::parse_input(&json!({"role": "reader"})).unwrap();
    s.store
        .set_team_role(&admin, &team, &c.id, reader)
        .await
        .unwrap();
    let page = browser.get(&s, &format!("/memories/{own}")).await;
    assert!(page.body.contains("id=\"reader-only\""), "{}", page.body);
    for form in ["id=\"edit\"", "id=\"forget\"", "id=\"share\""] {
        assert!(!page.body.contains(form), "{form} offered to a reader");
    }
    s.store
        .remove_team_member(&admin, &team, &c.id)
        .await
        .unwrap();
    assert_eq!(
        browser.get(&s, &format!("/memories/{shared}")).await.status,
        404,
        "removed: at once"
    );
    assert!(!browser.get(&s, "/?status=all").await.body.contains(&shared));
    s.running.stop().await;
}

async fn a_memory_page_shows_its_links_entities_and_conflicts_and_access_ends_mcp_sessions(
    s: Server,
) {
    let (a, a_email, a_password) = person(&s.store, "ctx-a").await;
    let tools = zm_store::ToolService::new(s.store.clone());
    let caller = Caller::new(a.id.clone());
    let call = |tool: zm_contracts::ToolName, args: serde_json::Value| {
        let tools = tools.clone();
        let caller = caller.clone();
        async move { tools.call(&caller, tool, &args).await.unwrap().to_json() }
    };
    let first = call(zm_contracts::ToolName::Remember, json!({"content": "The search service uses OpenSearch.", "kind": "fact", "scope": "personal", "entities": [{"name": "search-service", "type": "service"}]})).await;
    let first = first["memory_id"].as_str().unwrap().to_string();
    let second = call(zm_contracts::ToolName::Remember, json!({"content": "OpenSearch runs three data nodes.", "kind": "fact", "scope": "personal"})).await;
    let second = second["memory_id"].as_str().unwrap().to_string();
    call(
        zm_contracts::ToolName::Link,
        json!({"src": second, "dst": first, "type": "relates_to"}),
    )
    .await;
    let challenged = call(
        zm_contracts::ToolName::Challenge,
        json!({"memory_id": first, "reason": "we may move to Meilisearch"}),
    )
    .await;
    let dispute = challenged["dispute_id"].as_str().unwrap().to_string();
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &a_email, &a_password).await.status, 303);
    let p = b.get(&s, &format!("/memories/{first}")).await;
    assert!(
        p.body.contains(&second) && p.body.contains("relates_to"),
        "the link: {}",
        p.body
    );
    assert!(p.body.contains("search-service"), "the entity");
    assert!(p.body.contains(&dispute), "the conflict");

    // An MCP session over HTTP is listed, and ending it ends it.
    let token = common::token(&s.store, &a, None, &["mcp:read", "mcp:write"]).await;
    let (status, sid, _) = common::mcp_post(&s.http, &s.base, &token, None, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "listed-client", "version": "0"}}})).await;
    assert_eq!(status, 200);
    let sid = sid.unwrap();
    let p = b.get(&s, "/access").await;
    assert!(p.body.contains("listed-client"), "{}", p.body);
    let csrf = field(&p.body, "csrf").unwrap();
    let p = b
        .post(
            &s,
            &format!("/access/sessions/{sid}/end"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, 303);
    let (status, _, _) = common::mcp_post(
        &s.http,
        &s.base,
        &token,
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(status, 404, "the ended session is unknown");
    // Someone else's session id reads as not found.
    let p = b
        .post(
            &s,
            "/access/sessions/ses_0000000000000000.0000000000/end",
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, 404);
    s.running.stop().await;
}

async fn the_review_page_pages_back_through_older_conflicts(s: Server) {
    let (a, a_email, a_password) = person(&s.store, "review-pages").await;
    let tools = zm_store::ToolService::new(s.store.clone());
    let caller = Caller::new(a.id.clone());
    let mut disputes = Vec::new();
    for i in 0..101 {
        // One millisecond apart: the page order is by time, then id.
        s.store.clock().advance_ms(1);
        let m = tools.call(&caller, zm_contracts::ToolName::Remember, &json!({"content": format!("Build agent {i} runs the nightly job."), "kind": "fact", "scope": "personal"})).await.unwrap().to_json();
        let c = tools
            .call(
                &caller,
                zm_contracts::ToolName::Challenge,
                &json!({"memory_id": m["memory_id"], "reason": format!("agent {i} was retired")}),
            )
            .await
            .unwrap()
            .to_json();
        disputes.push(c["dispute_id"].as_str().unwrap().to_string());
    }
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &a_email, &a_password).await.status, 303);
    let first = b.get(&s, "/review").await;
    assert_eq!(first.status, 200);
    let shown = |body: &str| {
        disputes
            .iter()
            .filter(|d| body.contains(d.as_str()))
            .count()
    };
    assert_eq!(shown(&first.body), 100, "a page of 100");
    let older = first
        .body
        .split("rel=\"next\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("an Older link")
        .replace("&amp;", "&");
    assert!(older.contains("cursor=cfc_"), "{older}");
    let second = b.get(&s, &older).await;
    assert_eq!(second.status, 200);
    assert_eq!(shown(&second.body), 1, "the oldest, alone");
    assert!(
        second.body.contains(disputes[0].as_str()),
        "the first filed is the oldest"
    );
    assert!(
        !second.body.contains("rel=\"next\""),
        "no page after the last"
    );
    assert!(second.body.contains("Newest"), "a way back");
    // Deciding on the older page comes back to it, not to the newest.
    let cursor = field(&second.body, "cursor").expect("the page's cursor in its forms");
    let csrf = field(&second.body, "csrf").expect("a csrf field");
    let p = b
        .post(
            &s,
            &format!("/review/{}", disputes[0]),
            &[
                ("csrf", csrf.as_str()),
                ("keep_both", "true"),
                ("cursor", cursor.as_str()),
            ],
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some(older.as_str())),
        "{}",
        p.body
    );
    // A cursor the server did not issue is the validation page.
    let bad = b.get(&s, "/review?cursor=cfc_AAAA").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("cursor"), "{}", bad.body);
    s.running.stop().await;
}

/// Two sign-in tabs both sign in; an inline form failure says the store's
/// reason with the code's status; a form sent after the session ended
/// returns to its page after sign-in; a move to no scope is refused before
/// its confirmation; a form's address opened as a page, and an address
/// nothing answers, are pages to a browser (JSON under `/api`).
async fn forms_say_why_and_addresses_that_are_not_pages_answer_as_pages(s: Server) {
    let (a, email, password) = person(&s.store, "forms-why").await;
    // Two tabs show the sign-in form; the first one's still signs in.
    let mut b = Browser::default();
    let tab1 = b.get(&s, "/login").await;
    let cookie1 = b.header();
    let token1 = field(&tab1.body, "csrf").unwrap();
    b.get(&s, "/login").await;
    assert_eq!(
        b.header(),
        cookie1,
        "the second tab keeps the browser's sign-in cookie"
    );
    let signed = b
        .post(
            &s,
            "/login",
            &[
                ("csrf", &token1),
                ("next", "/"),
                ("email", &email),
                ("password", &password),
            ],
        )
        .await;
    assert_eq!(signed.status, 303, "the first tab's form: {}", signed.body);

    // The last admin of a team cannot delete the account: 409, and why.
    let team = format!("formswhy{}", unique());
    let input: zm_contracts::teams::CreateTeamInput =
        zm_contracts::parse_input(&json!({"slug": team})).unwrap();
    s.store
        .create_team(&Caller::new(a.id.clone()), input)
        .await
        .unwrap();
    let csrf = b.csrf(&s).await;
    let p = b.delete_account(&s, &csrf, &email, &password).await;
    assert_eq!(p.status, 409, "{}", p.body);
    assert!(
        p.body.contains("last admin") && p.body.contains(&team),
        "the store's reason: {}",
        p.body
    );

    // A move into no scope: refused at once, not confirmed first.
    let m = remember(
        &s.store,
        &a.id,
        "The staging database is rebuilt nightly.",
        "personal",
    )
    .await;
    let p = b
        .post(
            &s,
            "/memories/bulk",
            &[
                ("csrf", &csrf),
                ("action", "move"),
                ("scope", ""),
                ("ids", &m),
            ],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(
        !p.body.contains("id=\"confirm\""),
        "no confirmation: {}",
        p.body
    );
    // The selection is kept in a form to correct the scope and send again,
    // the scope marked with its reason.
    assert!(
        p.body.contains("id=\"retry-move\"")
            && p.body.contains(&format!("name=\"ids\" value=\"{m}\""))
            && p.body.contains("aria-describedby=\"retry-scope-error\"")
            && p.body.contains("id=\"retry-scope-error\""),
        "{}",
        p.body
    );

    // A share the store refuses: the memory's page again, the reason
    // beside its forms, the scope typed kept and marked.
    let p = b
        .post(
            &s,
            &format!("/memories/{m}/share"),
            &[("csrf", &csrf), ("scope", "Not A Scope")],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(
        p.body.contains("id=\"refused\" data-form=\"share\"")
            && p.body.contains("id=\"share-scope-error\"")
            && p.body.contains("value=\"Not A Scope\"")
            && p.body.contains("id=\"memory-content\""),
        "{}",
        p.body
    );
    let p = b
        .post(
            &s,
            &format!("/memories/{m}/share"),
            &[("csrf", &csrf), ("scope", "proj.someone_else.secret")],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    assert!(
        p.body.contains("data-error-code=\"forbidden\"")
            && p.body.contains("value=\"proj.someone_else.secret\"")
            && !p.body.contains("share-scope-error"),
        "{}",
        p.body
    );
    // A refusal on a memory that is not the caller's to see is still not
    // found, on a page of its own.
    let p = b
        .post(
            &s,
            "/memories/mem_0000000000000000.0000000000/share",
            &[("csrf", &csrf), ("scope", "personal")],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert!(!p.body.contains("id=\"refused\""), "{}", p.body);

    // A form's address opened as a page.
    let p = b.get(&s, "/access/tokens").await;
    assert_eq!(p.status, 405, "{}", p.body);
    assert!(
        p.csp.is_some()
            && p.body.contains("not a page")
            && p.body.contains("<h1>Not a page</h1>")
            && !p.body.contains("Not found"),
        "{}",
        p.body
    );
    // Nothing at this address: a page to a browser, JSON to the API's clients.
    let page = s
        .http
        .get(format!("{}/no-such-page", s.base))
        .header("accept", "text/html,application/xhtml+xml")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 404);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(page.headers().contains_key("content-security-policy"));
    let api = s
        .http
        .get(format!("{}/api/no-such-route", s.base))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 404);
    let body: serde_json::Value = api.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");

    // The session ends; the edit form sent then comes back after sign-in.
    let cookies = b.header();
    b.post(&s, "/logout", &[("csrf", &csrf)]).await;
    let sent = s
        .http
        .post(format!("{}/memories/{m}/edit", s.base))
        .header("cookie", cookies)
        .header("origin", s.base.clone())
        .header("referer", format!("{}/memories/{m}", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&content=changed"))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 303);
    assert_eq!(
        sent.headers()["location"].to_str().unwrap(),
        format!("/login?next=%2Fmemories%2F{m}"),
    );
    // A page of another origin is not where it returns.
    let elsewhere = s
        .http
        .post(format!("{}/memories/{m}/edit", s.base))
        .header("referer", "https://evil.example/memories/x")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("content=changed")
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.headers()["location"].to_str().unwrap(), "/login");
    s.running.stop().await;
}

async fn the_account_page_imports_a_server_memory_file_once(s: Server) {
    let (_, a_email, a_password) = person(&s.store, "imp-a").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &a_email, &a_password).await.status, 303);
    let csrf = b.csrf(&s).await;
    let file = concat!(
        r#"{"type":"entity","name":"Payments API","entityType":"service","observations":["retries webhooks five times"]}"#,
        "\n"
    );
    let cookies = b.header();
    let upload = |csrf: &str, origin: &str| {
        let boundary = "zmboundary42";
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{csrf}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"format\"\r\n\r\nserver-memory\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"target\"\r\n\r\n\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"memory.jsonl\"\r\nContent-Type: application/x-ndjson\r\n\r\n{file}\r\n\
             --{boundary}--\r\n"
        );
        s.http
            .post(format!("{}/account/import", s.base))
            .header("cookie", cookies.clone())
            .header("origin", origin.to_string())
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
    };
    let r = upload(&csrf, &s.base).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("Imported memory.jsonl: 1 new"), "{text}");
    let again = upload(&csrf, &s.base)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        again.contains("0 new") && again.contains("1 imported before"),
        "{again}"
    );
    // A format the form does not offer is marked on its field, its reason
    // under it.
    let boundary = "zmboundary43";
    let wrong = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{csrf}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"format\"\r\n\r\nxml\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"memory.jsonl\"\r\nContent-Type: application/x-ndjson\r\n\r\n{file}\r\n\
         --{boundary}--\r\n"
    );
    // A hand-made multipart body, sent as the page's form is.
    let multipart = |boundary: &str, body: String| {
        s.http
            .post(format!("{}/account/import", s.base))
            .header("cookie", cookies.clone())
            .header("origin", s.base.clone())
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
    };
    let marked = multipart(boundary, wrong)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let select = marked
        .split("<select id=\"import-format\"")
        .nth(1)
        .and_then(|rest| rest.split('>').next())
        .unwrap_or_default();
    assert!(
        select.contains("aria-invalid=\"true\"") && marked.contains("id=\"import-format-error\""),
        "{marked}"
    );
    assert!(
        b.get(&s, "/?q=webhooks")
            .await
            .body
            .contains("retries webhooks five times")
    );
    // A forged token and another site are refused.
    assert_eq!(
        upload("forged", &s.base)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
    assert_eq!(
        upload(&csrf, "https://evil.example")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
    // A file before the form's token is not read: the page puts the token
    // first, so a body that does not is no form of ours.
    let boundary = "zmboundary43";
    let file_first = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"memory.jsonl\"\r\nContent-Type: application/x-ndjson\r\n\r\n{file}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{csrf}\r\n\
         --{boundary}--\r\n"
    );
    let r = multipart(boundary, file_first).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    // A file with one line that is not UTF-8 imports every other line and
    // names that one, as `zero-memory import` does (the whole file was
    // refused).
    let boundary = "zmboundary44";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{csrf}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"format\"\r\n\r\nserver-memory\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"mixed.jsonl\"\r\nContent-Type: application/x-ndjson\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(
        br#"{"type":"entity","name":"Staging cluster","entityType":"service","observations":["drains on Fridays"]}"#,
    );
    body.extend_from_slice(b"\n{\"type\":\"entity\",\"name\":\"broken \xff byte\",\"entityType\":\"x\",\"observations\":[]}\n");
    body.extend_from_slice(
        br#"{"type":"entity","name":"Audit export","entityType":"job","observations":["runs nightly"]}"#,
    );
    body.extend_from_slice(format!("\n\r\n--{boundary}--\r\n").as_bytes());
    let r = s
        .http
        .post(format!("{}/account/import", s.base))
        .header("cookie", cookies.clone())
        .header("origin", s.base.clone())
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("Imported mixed.jsonl: 2 new") && text.contains("line 2"),
        "{text}"
    );
    assert!(b.get(&s, "/?q=nightly").await.body.contains("runs nightly"));
    s.running.stop().await;
}

/// The first form action in `html` that starts with `prefix`.
fn action_starting(html: &str, prefix: &str) -> Option<String> {
    html.split("action=\"")
        .filter_map(|x| x.split('"').next())
        .find(|a| a.starts_with(prefix))
        .map(str::to_string)
}

/// The team's admin invites `email` as `role` from the team's page.
async fn invite(admin: &mut Browser, s: &Server, slug: &str, csrf: &str, email: &str, role: &str) {
    let p = admin
        .post(
            s,
            &format!("/teams/{slug}/invite"),
            &[
                ("csrf", csrf),
                ("email", email),
                ("role", role),
                ("how", "invite"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
}

async fn the_teams_pages_manage_a_team_end_to_end(s: Server) {
    let (_, a_email, a_password) = person(&s.store, "tp-a").await;
    let (c, c_email, c_password) = person(&s.store, "tp-c").await;
    let slug = format!("pages{}", unique());
    let mut admin = Browser::default();
    assert_eq!(admin.sign_in(&s, &a_email, &a_password).await.status, 303);
    let csrf = admin.csrf(&s).await;
    let p = admin
        .post(
            &s,
            "/teams",
            &[("csrf", &csrf), ("slug", &slug), ("name", "Pages team")],
        )
        .await;
    assert_eq!(
        (p.status, p.location.clone()),
        (303, Some(format!("/teams/{slug}"))),
        "{}",
        p.body
    );
    let p = admin
        .post(&s, "/teams", &[("csrf", &csrf), ("slug", "Not A Slug")])
        .await;
    assert_eq!(p.status, 400, "a bad slug is validation_failed");
    // The Teams page again: the slug marked, what was typed kept.
    assert!(
        p.body.contains("data-error-code=\"validation_failed\"")
            && p.body.contains("id=\"slug-error\"")
            && p.body.contains("value=\"Not A Slug\"")
            && p.body.contains("id=\"new-team\""),
        "{}",
        p.body
    );
    // Invite C; C accepts on the Teams page.
    invite(&mut admin, &s, &slug, &csrf, &c_email, "reader").await;
    // An invitation sent by mistake: the admin withdraws it from the team
    // page, and it is listed no more.
    invite(
        &mut admin,
        &s,
        &slug,
        &csrf,
        "mistyped@example.com",
        "writer",
    )
    .await;
    let page = admin.get(&s, &format!("/teams/{slug}")).await.body;
    let withdraw = page
        .split("<li>")
        .find(|li| li.contains("mistyped@example.com"))
        .and_then(|li| li.split("action=\"").nth(1))
        .and_then(|a| a.split('"').next())
        .filter(|a| a.ends_with("/withdraw"))
        .expect("the admin is offered Withdraw for it")
        .to_string();
    let p = admin.post(&s, &withdraw, &[("csrf", &csrf)]).await;
    assert_eq!(p.location, Some(format!("/teams/{slug}")), "{}", p.body);
    let page = admin.get(&s, &format!("/teams/{slug}")).await.body;
    let open = page.split("id=\"invitations\"").nth(1).unwrap_or("");
    let open = open.split("</ul>").next().unwrap_or("");
    assert!(
        !open.contains("mistyped@example.com") && open.contains(&c_email),
        "withdrawn, no longer listed: {open}"
    );
    let mut member = Browser::default();
    assert_eq!(member.sign_in(&s, &c_email, &c_password).await.status, 303);
    let page = member.get(&s, "/teams").await.body;
    let accept = action_starting(&page, "/teams/invitations/").expect("C sees the invitation");
    let member_csrf = member.csrf(&s).await;
    let p = member.post(&s, &accept, &[("csrf", &member_csrf)]).await;
    assert_eq!(p.location, Some(format!("/teams/{slug}")));
    assert!(
        member
            .get(&s, &format!("/teams/{slug}"))
            .await
            .body
            .contains("reader")
    );
    // A reader cannot manage; the admin can: role, then removal.
    let p = member
        .post(
            &s,
            &format!("/teams/{slug}/members/{}/role", c.id),
            &[("csrf", &member_csrf), ("role", "admin")],
        )
        .await;
    assert_eq!(p.status, 403);
    assert!(
        p.body.contains("id=\"refused\" data-form=\"members\"")
            && p.body.contains("id=\"my-role\""),
        "the team's page again, saying why: {}",
        p.body
    );
    let p = admin
        .post(
            &s,
            &format!("/teams/{slug}/members/{}/role", c.id),
            &[("csrf", &csrf), ("role", "writer")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let audit = admin.get(&s, &format!("/teams/{slug}")).await.body;
    assert!(
        audit.contains("role_changed") && audit.contains("invitation_accepted"),
        "the audit log: {audit}"
    );
    let p = admin
        .post(
            &s,
            &format!("/teams/{slug}/members/{}/remove", c.id),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, 303);
    assert_eq!(
        member.get(&s, &format!("/teams/{slug}")).await.status,
        404,
        "removed: the team reads as missing"
    );
    // Invited again, C leaves from the team's page (a member who is not
    // an admin is offered Leave, not Remove).
    invite(&mut admin, &s, &slug, &csrf, &c_email, "reader").await;
    let page = member.get(&s, "/teams").await.body;
    let accept = action_starting(&page, "/teams/invitations/").expect("C sees the new invitation");
    let p = member.post(&s, &accept, &[("csrf", &member_csrf)]).await;
    assert_eq!(p.location, Some(format!("/teams/{slug}")));
    let page = member.get(&s, &format!("/teams/{slug}")).await.body;
    let leave = page
        .split("id=\"leave\"")
        .nth(1)
        .and_then(|f| f.split("action=\"").nth(1))
        .and_then(|a| a.split('"').next())
        .expect("C is offered Leave")
        .to_string();
    let p = member.post(&s, &leave, &[("csrf", &member_csrf)]).await;
    assert_eq!(p.location.as_deref(), Some("/teams"), "{}", p.body);
    assert_eq!(
        member.get(&s, &format!("/teams/{slug}")).await.status,
        404,
        "left: the team reads as missing"
    );
    assert!(
        !admin
            .get(&s, &format!("/teams/{slug}"))
            .await
            .body
            .contains("id=\"leave\""),
        "an admin is not offered Leave (their own Remove is there)"
    );
    // Deleting needs the slug typed.
    let p = admin
        .post(
            &s,
            &format!("/teams/{slug}/delete"),
            &[("csrf", &csrf), ("confirm", "wrong")],
        )
        .await;
    assert_eq!(p.status, 400);
    assert!(
        p.body.contains("id=\"confirm-slug-error\"") && p.body.contains("id=\"members\""),
        "the team's page again, the confirmation marked: {}",
        p.body
    );
    // An invitation to no address: the address marked and kept.
    let p = admin
        .post(
            &s,
            &format!("/teams/{slug}/invite"),
            &[
                ("csrf", &csrf),
                ("email", "not-an-address"),
                ("role", "reader"),
                ("how", "invite"),
            ],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(
        p.body.contains("id=\"invite-email-error\"") && p.body.contains("value=\"not-an-address\""),
        "{}",
        p.body
    );
    // ... and the role it asked for stays chosen (not the default writer).
    assert!(
        p.body.contains("<option value=\"reader\" selected>"),
        "{}",
        p.body
    );
    let p = admin
        .post(
            &s,
            &format!("/teams/{slug}/delete"),
            &[("csrf", &csrf), ("confirm", &slug)],
        )
        .await;
    assert_eq!(p.location.as_deref(), Some("/teams"));
    assert_eq!(admin.get(&s, &format!("/teams/{slug}")).await.status, 404);
    s.running.stop().await;
}

/// The rule texts of `user`'s briefing over `scope`.
async fn briefing_rules(store: &Store, user: &str, scope: &str) -> Vec<String> {
    let out = zm_store::ToolService::new(store.clone())
        .call(
            &Caller::new(user),
            zm_contracts::ToolName::BuildContext,
            &json!({"topic": "releases and deploys", "briefing": true, "scopes": [scope]}),
        )
        .await
        .unwrap()
        .to_json();
    out["rules"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["text"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The part of a page from the table row of the rule from `memory_id` to
/// the end of that row.
fn rule_row<'a>(html: &'a str, memory_id: &str) -> Option<&'a str> {
    let start = html.find(&format!("<tr data-memory=\"{memory_id}\""))?;
    let end = html[start..].find("</tr>")? + start;
    Some(&html[start..end])
}

async fn a_teams_admins_revoke_on_its_page_the_rules_departed_members_left(s: Server) {
    steward_rules_on_the_team_page(s, "").await;
}

/// Behind a path prefix, the revoke form's action and return-to path are
/// under it, and so is the redirect back to the team's page.
#[tokio::test]
async fn a_departed_members_rule_is_revoked_from_the_team_page_under_a_path_prefix() {
    let s = start_with(None, |c| {
        c.public_url = format!("{}/zm", c.public_url);
    })
    .await;
    steward_rules_on_the_team_page(s, "/zm").await;
}

/// A writer promotes two team rules and is removed: their rules go to the
/// team's steward. The admin's team page lists them (before, it says there
/// are none), each with a revoke form that comes back to the page; a
/// reader's page of the same team shows no such section, and the reader's
/// revoke is refused. Revoking takes the rule off the list, off the
/// steward's rules in force and out of the reader's briefing; a return-to
/// path that is not the dashboard's leads to the Rules page instead.
/// `prefix`: the public URL's path (`""` or `/zm`).
async fn steward_rules_on_the_team_page(s: Server, prefix: &str) {
    let public = |route: &str| format!("{prefix}{route}");
    let (a, a_email, a_password) = person(&s.store, "stw-admin").await;
    let (w, _, _) = person(&s.store, "stw-writer").await;
    let (r, r_email, r_password) = person(&s.store, "stw-reader").await;
    let slug = format!("steward{}", unique());
    let scope = format!("team.{slug}");
    let team_page = format!("/teams/{slug}");
    let admin = Caller::new(a.id.clone());
    let input: zm_contracts::teams::CreateTeamInput =
        zm_contracts::parse_input(&json!({"slug": slug})).unwrap();
    s.store.create_team(&admin, input).await.unwrap();
    for (who, role) in [
        (&w, zm_contracts::TeamRole::Writer),
        (&r, zm_contracts::TeamRole::Reader),
    ] {
        common::join_team(&s.store, &admin, &slug, &who.email, role).await;
    }
    let tools = zm_store::ToolService::new(s.store.clone());
    let writer = Caller::new(w.id.clone());
    let mut rules = Vec::new();
    for text in [
        "Every release needs a changelog entry.",
        "Staging deploys wait for a green canary.",
    ] {
        let out = tools
            .call(
                &writer,
                zm_contracts::ToolName::Remember,
                &json!({"content": text, "kind": "convention", "scope": scope}),
            )
            .await
            .unwrap()
            .to_json();
        let m = out["memory_id"].as_str().unwrap().to_string();
        tools
            .call(
                &writer,
                zm_contracts::ToolName::PromoteRule,
                &json!({"memory_id": m}),
            )
            .await
            .unwrap();
        rules.push((m, text));
    }
    let (first, first_text) = rules[0].clone();
    let (second, second_text) = rules[1].clone();

    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &a_email, &a_password).await.status, 303);
    let csrf = b.csrf(&s).await;
    // While the writer is a member, their rules are listed as members'
    // (an admin may revoke them), none as left by a former member.
    let p = b.get(&s, &team_page).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("Rules left by former members")
            && p.body.contains("id=\"no-steward-rules\"")
            && p.body.contains("id=\"member-rules\""),
        "{}",
        p.body
    );
    for (m, _) in &rules {
        let row = rule_row(&p.body, m).unwrap_or_else(|| panic!("{m} is listed: {}", p.body));
        assert!(
            row.contains(&format!(
                "action=\"{}\"",
                public(&format!("/rules/{m}/revoke"))
            )),
            "{row}"
        );
    }
    // The admin removes the writer on this page.
    let p = b
        .post(
            &s,
            &format!("/teams/{slug}/members/{}/remove", w.id),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some(public(&team_page).as_str())),
        "{}",
        p.body
    );
    let p = b.get(&s, &team_page).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("id=\"steward-rules\"")
            && !p.body.contains("id=\"no-steward-rules\"")
            && p.body.contains("id=\"no-member-rules\""),
        "{}",
        p.body
    );
    for (m, text) in &rules {
        let row = rule_row(&p.body, m).unwrap_or_else(|| panic!("{m} is listed: {}", p.body));
        for want in [
            text.to_string(),
            format!("<code>{scope}</code>"),
            format!("action=\"{}\"", public(&format!("/rules/{m}/revoke"))),
            format!("name=\"csrf\" value=\"{csrf}\""),
            format!("name=\"next\" value=\"{}\"", public(&team_page)),
            "name=\"reason\"".to_string(),
            ">Revoke</button>".to_string(),
            // Every member's briefings in the team carry it, the admin's
            // too: the rule itself is found among them, not its text.
            "delivered in its project".to_string(),
        ] {
            assert!(row.contains(&want), "{want} in {row}");
        }
    }

    // A reader of the same team sees no such section, and may not revoke.
    let mut reader = Browser::default();
    assert_eq!(reader.sign_in(&s, &r_email, &r_password).await.status, 303);
    let p = reader.get(&s, &team_page).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        !p.body.contains("Rules left by former members")
            && !p.body.contains("steward-rules")
            && !p.body.contains("/revoke"),
        "{}",
        p.body
    );
    let reader_csrf = reader.csrf(&s).await;
    let p = reader
        .post(
            &s,
            &format!("/rules/{first}/revoke"),
            &[
                ("csrf", &reader_csrf),
                ("reason", "not mine to keep"),
                ("next", &public(&team_page)),
            ],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    assert!(
        briefing_rules(&s.store, &r.id, &scope)
            .await
            .contains(&first_text.to_string()),
        "the departed writer's rule is still delivered"
    );

    // The admin revokes the first from the page's form: back to the page,
    // which no longer lists it.
    let p = b
        .post(
            &s,
            &format!("/rules/{first}/revoke"),
            &[
                ("csrf", &csrf),
                ("next", &public(&team_page)),
                ("reason", "the changelog is generated now"),
            ],
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some(public(&team_page).as_str())),
        "{}",
        p.body
    );
    let p = b.get(&s, &team_page).await;
    assert!(
        rule_row(&p.body, &first).is_none() && rule_row(&p.body, &second).is_some(),
        "{}",
        p.body
    );
    let state = |records: Vec<zm_store::rules::RuleRecord>, m: &str| {
        records
            .into_iter()
            .find(|r| r.memory_id.as_str() == m)
            .map(|r| r.status)
    };
    let kept = s.store.team_steward_rules(&admin, &slug).await.unwrap();
    assert_eq!(
        state(kept.clone(), &first),
        Some(zm_store::rules::RuleState::Revoked)
    );
    assert_eq!(
        state(kept, &second),
        Some(zm_store::rules::RuleState::Promoted)
    );
    let delivered = briefing_rules(&s.store, &r.id, &scope).await;
    assert!(
        !delivered.contains(&first_text.to_string())
            && delivered.contains(&second_text.to_string()),
        "{delivered:?}"
    );

    // A return-to path outside the dashboard is not followed.
    let p = b
        .post(
            &s,
            &format!("/rules/{second}/revoke"),
            &[
                ("csrf", &csrf),
                ("next", &format!("//evil.example{}", public(&team_page))),
                ("reason", "canaries are automatic"),
            ],
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some(public("/rules").as_str())),
        "{}",
        p.body
    );
    let p = b.get(&s, &team_page).await;
    assert!(
        p.body.contains("id=\"no-steward-rules\"") && !p.body.contains("id=\"steward-rules\""),
        "{}",
        p.body
    );
    s.running.stop().await;
}

/// A writer's team memory (a fact) and open loop (a task) go to the
/// team's steward when the writer is removed. The admin's page of each
/// says so (`#for-team`) and offers Forget (and Close for the loop), never
/// edit or share; forgetting it there offers Restore, which brings it
/// back, and closing the loop closes it. The memory stays the steward's.
/// A reader's page of the same memory is read only, as for a teammate's
/// (`#not-yours`, no Forget), and the reader's forget is refused. The
/// team page's audit log lists each change with a link to the memory.
async fn a_teams_admin_forgets_and_restores_on_its_page_a_memory_a_departed_member_left(s: Server) {
    let (a, a_email, a_password) = person(&s.store, "stm-admin").await;
    let (w, _, _) = person(&s.store, "stm-writer").await;
    let (r, r_email, r_password) = person(&s.store, "stm-reader").await;
    let slug = format!("stewardm{}", unique());
    let scope = format!("team.{slug}");
    let admin = Caller::new(a.id.clone());
    let input: zm_contracts::teams::CreateTeamInput =
        zm_contracts::parse_input(&json!({"slug": slug})).unwrap();
    s.store.create_team(&admin, input).await.unwrap();
    for (who, role) in [
        (&w, zm_contracts::TeamRole::Writer),
        (&r, zm_contracts::TeamRole::Reader),
    ] {
        common::join_team(&s.store, &admin, &slug, &who.email, role).await;
    }
    let fact = remember(
        &s.store,
        &w.id,
        "The staging database is rebuilt nightly.",
        &scope,
    )
    .await;
    let task = zm_store::ToolService::new(s.store.clone())
        .call(
            &Caller::new(w.id.clone()),
            zm_contracts::ToolName::Remember,
            &json!({"content": "Move the staging rebuild to Sundays.", "kind": "task", "scope": scope}),
        )
        .await
        .unwrap()
        .to_json()["memory_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.store
        .remove_team_member(&admin, &slug, &w.id)
        .await
        .unwrap();

    // The reader: read only, told who may change it.
    let mut reader = Browser::default();
    assert_eq!(reader.sign_in(&s, &r_email, &r_password).await.status, 303);
    let p = reader.get(&s, &format!("/memories/{fact}")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("id=\"left-to-team\"")
            && !p.body.contains("id=\"not-yours\"")
            && !p.body.contains("id=\"forget\"")
            && !p.body.contains("id=\"for-team\""),
        "{}",
        p.body
    );
    let csrf = reader.csrf(&s).await;
    let p = reader
        .post(&s, &format!("/memories/{fact}/forget"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, 403, "{}", p.body);

    // The admin: Forget (and Close for the loop), no edit, no share.
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &a_email, &a_password).await.status, 303);
    let page = format!("/memories/{fact}");
    let p = b.get(&s, &page).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("id=\"for-team\"")
            && p.body.contains(&slug)
            && p.body.contains("id=\"forget\"")
            && !p.body.contains("id=\"not-yours\"")
            && !p.body.contains("id=\"edit\"")
            && !p.body.contains("id=\"share\"")
            && !p.body.contains("id=\"close\"")
            && !p.body.contains("id=\"restore\""),
        "{}",
        p.body
    );
    let csrf = b.csrf(&s).await;
    let p = b
        .post(
            &s,
            &format!("{page}/forget"),
            &[("csrf", &csrf), ("reason", "stale")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = b.get(&s, &page).await;
    assert!(
        p.body.contains("forgotten")
            && p.body.contains("id=\"restore\"")
            && !p.body.contains("id=\"forget\""),
        "{}",
        p.body
    );
    assert!(
        !reader.get(&s, "/").await.body.contains(&fact),
        "forgotten for every member"
    );
    let p = b
        .post(&s, &format!("{page}/restore"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = b.get(&s, &page).await;
    assert!(
        p.body.contains(">live") && p.body.contains("id=\"forget\""),
        "{}",
        p.body
    );
    assert!(
        reader.get(&s, "/").await.body.contains(&fact),
        "back for every member"
    );
    // The loop: closed from its page.
    let p = b.get(&s, &format!("/memories/{task}")).await;
    assert!(
        p.body.contains("id=\"close\"") && !p.body.contains("id=\"share\""),
        "{}",
        p.body
    );
    let p = b
        .post(&s, &format!("/memories/{task}/close"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(!reader.get(&s, "/").await.body.contains(&task), "closed");
    // A selection forgets only the admin's own: the departed member's
    // memory is listed as not theirs and stays live for every member.
    let own = remember(&s.store, &a.id, "The admin's own staging note.", &scope).await;
    let p = b.bulk_forget(&s, &csrf, &[&own, &fact]).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("Forgot 1 of 2") && p.body.contains("not yours"),
        "{}",
        p.body
    );
    let listed = reader.get(&s, "/").await.body;
    assert!(
        listed.contains(&fact) && !listed.contains(&own),
        "only the admin's own was forgotten"
    );
    // Still the steward's, not the admin's.
    for m in [&fact, &task] {
        assert!(!s.store.owns_memory(&admin, m).await.unwrap(), "{m}");
    }
    // The team page's audit log names each change, linking the memory.
    let p = b.get(&s, &format!("/teams/{slug}")).await;
    let audit = p.body.split("id=\"audit\"").nth(1).unwrap_or_default();
    for (action, m) in [
        ("steward_memory_forgotten", &fact),
        ("steward_memory_restored", &fact),
        ("steward_memory_closed", &task),
    ] {
        assert!(audit.contains(action), "{action}: {}", p.body);
        assert!(
            audit.contains(&format!("href=\"/memories/{m}\"")),
            "{m} linked: {}",
            p.body
        );
    }
    s.running.stop().await;
}

/// An edit of a memory as long as a memory may be, in a script whose
/// characters take three UTF-8 bytes (nine once the browser
/// percent-encodes them), is saved: the form's limit leaves room for it.
async fn an_edit_of_the_longest_text_in_any_script_is_saved(s: Server) {
    let (user, email, password) = person(&s.store, "long-edit").await;
    let max = s.store.limits().max_text_chars;
    let text = "界".repeat(max - 1);
    let m = remember(&s.store, &user.id, &text, "personal").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let csrf = b.csrf(&s).await;
    let edited = format!("{text}!");
    let p = b
        .post(
            &s,
            &format!("/memories/{m}/edit"),
            &[("csrf", &csrf), ("content", &edited)],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
}

async fn a_password_change_follows_the_stores_rules(s: Server) {
    let (user, email, password) = person(&s.store, "pw-a").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let mut elsewhere = Browser::default();
    assert_eq!(elsewhere.sign_in(&s, &email, &password).await.status, 303);
    let csrf = b.csrf(&s).await;
    let p = b
        .post(
            &s,
            "/account/password",
            &[
                ("csrf", &csrf),
                ("current", &password),
                ("new", "short"),
                ("again", "short"),
            ],
        )
        .await;
    assert_eq!(p.status, 400);
    assert!(
        p.body.contains("id=\"pw-new\"") && p.body.contains("aria-invalid=\"true\""),
        "{}",
        p.body
    );
    let p = b
        .post(
            &s,
            "/account/password",
            &[
                ("csrf", &csrf),
                ("current", &password),
                ("new", "a much longer one"),
                ("again", "a much longer one"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    // This browser stays known to the account under the new password.
    assert!(
        p.set_cookies.iter().any(|c| c.starts_with("zm_device=")
            && c.contains("Max-Age=")
            && !c.contains("Max-Age=0")),
        "a new device cookie: {:?}",
        p.set_cookies
    );
    // The other session ended; this one goes on.
    assert_eq!(elsewhere.get(&s, "/").await.status, 303, "ended");
    assert_eq!(b.get(&s, "/account").await.status, 200, "kept");
    let mut fresh = Browser::default();
    assert_eq!(
        fresh.sign_in(&s, &email, "a much longer one").await.status,
        303
    );
    // A change made outside the dashboard (`zero-memory user passwd`)
    // ends every session too, and a sign-in that checked the old password
    // just before it gets no session.
    let checked = s.store.user_by_id(&user.id).await.unwrap().unwrap();
    s.store
        .change_password(&user.id, "the operator's new one", false)
        .await
        .unwrap();
    let late = s
        .store
        .web_session_create(&user.id, checked.credential, None)
        .await
        .expect_err("a sign-in outrun by the change");
    assert_eq!(late.code, zm_contracts::ErrorCode::Unauthorized);
    assert_eq!(fresh.get(&s, "/").await.status, 303, "ended by the CLI");
    assert_eq!(b.get(&s, "/").await.status, 303, "ended by the CLI");
    // Guessing the current password backs off like signing in: after
    // five wrong guesses even the right one waits.
    let mut guesser = Browser::default();
    assert_eq!(
        guesser
            .sign_in(&s, &email, "the operator's new one")
            .await
            .status,
        303
    );
    let csrf = guesser.csrf(&s).await;
    let form = |current: &'static str| {
        [
            ("csrf", csrf.clone()),
            ("current", current.to_string()),
            ("new", "a guessed new password".to_string()),
            ("again", "a guessed new password".to_string()),
        ]
    };
    for _ in 0..5 {
        let f = form("a wrong guess");
        let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(guesser.post(&s, "/account/password", &f).await.status, 400);
    }
    let f = form("the operator's new one");
    let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = guesser.post(&s, "/account/password", &f).await;
    assert_eq!(p.status, 429, "backed off: {}", p.body);
    s.running.stop().await;
}

/// A sign-in over a session the browser still holds ends that one; a
/// session past its end is dropped at the next sign-in.
async fn a_new_sign_in_ends_the_old_session_and_ended_ones_are_dropped(s: Server) {
    let (user, email, password) = person(&s.store, "ses-a").await;
    // One tab fetched the form; another signed in meanwhile.
    let mut tab = Browser::default();
    let form = tab.get(&s, "/login").await;
    let token = field(&form.body, "csrf").expect("a csrf field");
    let mut other = tab.clone();
    assert_eq!(other.sign_in(&s, &email, &password).await.status, 303);
    // The browser's session cookie is the other tab's now; this tab's form
    // still carries its own sign-in token.
    let session = other
        .cookies
        .iter()
        .find(|(k, _)| k == "zm_session")
        .cloned()
        .expect("a session cookie");
    tab.cookies.retain(|(k, _)| k != "zm_session");
    tab.cookies.push(session);
    let first = other.clone();
    let fields = [
        ("csrf", token.as_str()),
        ("next", "/"),
        ("email", email.as_str()),
        ("password", password.as_str()),
    ];
    assert_eq!(tab.post(&s, "/login", &fields).await.status, 303);
    assert_eq!(tab.get(&s, "/").await.status, 200, "the new session");
    let mut first = first;
    assert_eq!(first.get(&s, "/").await.status, 303, "the old one ended");
    if s.store.backend() == zm_store::Backend::Sqlite {
        // (SQLite only: moving this store's clock 13 hours on would end the
        // sessions of the other tests sharing a PostgreSQL database.)
        let (_, idle) = s
            .store
            .web_session_create(&user.id, user.credential, None)
            .await
            .unwrap();
        s.store.clock().advance_ms(13 * 60 * 60 * 1000);
        let (_, fresh) = s
            .store
            .web_session_create(&user.id, user.credential, None)
            .await
            .unwrap();
        let rows = s.store.fingerprint().await.unwrap().1;
        let sessions = rows.get("web_sessions").cloned().unwrap_or_default();
        assert!(
            !sessions.iter().any(|r| r.contains(&idle.id)),
            "the idle session's row is gone: {sessions:?}"
        );
        assert!(sessions.iter().any(|r| r.contains(&fresh.id)));
    }
    s.running.stop().await;
}

/// Insight: memories written per week by kind and by scope, and the
/// signed-in person's own agents' recalls, by agent: another user's agent
/// never shows.
async fn insight_charts_writing_by_scope_and_recalls_by_agent(s: Server) {
    let (a, a_email, a_password) = person(&s.store, "ins-a").await;
    let (b, _, _) = person(&s.store, "ins-b").await;
    remember(&s.store, &a.id, "The ingest queue is Kafka.", "personal").await;
    remember(&s.store, &a.id, "Deploys go out on Tuesdays.", "core").await;
    let svc = zm_store::ToolService::new(s.store.clone());
    let recall = |user: &str, agent: &str| {
        let mut caller = Caller::new(user);
        caller.agent_name = Some(agent.to_string());
        let svc = svc.clone();
        async move {
            svc.call(
                &caller,
                zm_contracts::ToolName::Recall,
                &json!({"query": "ingest queue Kafka"}),
            )
            .await
            .unwrap();
        }
    };
    let mut br = Browser::default();
    br.sign_in(&s, &a_email, &a_password).await;
    let p = br.get(&s, "/insight").await;
    assert_eq!(p.status, 200);
    assert!(
        p.body.contains("No recall by your agents counted yet"),
        "{}",
        p.body
    );
    for _ in 0..3 {
        recall(&a.id, "cursor-agent").await;
    }
    recall(&a.id, "codex-cli").await;
    recall(&b.id, "someone-elses-agent").await;
    // The page writes the buffered counts itself before it reads them.
    let p = br.get(&s, "/insight").await;
    assert_eq!(p.status, 200);
    let table = &p.body[p
        .body
        .find("id=\"recall-activity\"")
        .expect("the recall table")..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains("<td>cursor-agent</td><td>3</td>"), "{table}");
    assert!(table.contains("<td>codex-cli</td><td>1</td>"), "{table}");
    assert!(
        !p.body.contains("someone-elses-agent"),
        "another user's agent is not shown"
    );
    assert!(
        p.body.contains("id=\"recalls-weekly\""),
        "the weekly recall chart"
    );
    // Writing by scope over time names both scopes, one memory each.
    let chart = &p.body[p
        .body
        .find("id=\"weekly-scopes\"")
        .expect("the scope chart")..];
    let chart = &chart[..chart.find("</table>").unwrap()];
    assert!(
        chart.contains("<title>core: 1</title>") && chart.contains("<title>personal: 1</title>"),
        "{chart}"
    );
    s.running.stop().await;
}

/// While every place for changes running to their end is held, a sign-in
/// and a form sent without a session are still answered (they take no
/// place, so anonymous requests cannot fill them), and a signed-in
/// change is refused for load.
#[tokio::test]
async fn a_sign_in_takes_no_place_among_the_running_changes() {
    let s = start(None).await;
    let (_, email, password) = person(&s.store, "places").await;
    let mut signed = Browser::default();
    assert_eq!(signed.sign_in(&s, &email, &password).await.status, 303);
    let csrf = signed.csrf(&s).await;
    let mut held = Vec::new();
    while let Some(h) = s.store.spawn_write(std::future::pending::<()>()) {
        held.push(h);
    }
    assert_eq!(held.len(), zm_store::store::WRITES_IN_FLIGHT_MAX);
    let mut anonymous = Browser::default();
    let p = anonymous.sign_in(&s, &email, "not the password").await;
    assert_ne!(p.status, 429, "{}", p.body);
    assert!(
        p.body.contains("id=\"login\"") || p.status == 401,
        "{}: {}",
        p.status,
        p.body
    );
    let p = anonymous.sign_in(&s, &email, &password).await;
    assert_eq!(p.status, 303, "signed in at the cap: {}", p.body);
    let p = Browser::default()
        .post(&s, "/memories/bulk", &[("csrf", "x"), ("action", "forget")])
        .await;
    assert_eq!(p.status, 303, "to the sign-in page: {}", p.body);
    let p = signed.bulk_forget(&s, &csrf, &[]).await;
    assert_eq!(p.status, 429, "a signed-in change at the cap: {}", p.body);
    for h in held {
        h.abort();
    }
    s.running.stop().await;
}

/// A signed-in browser draws on its account's request budget
/// (`ZM_TOKEN_RATE_LIMIT`), as the account's tokens do: a script on the
/// dashboard is not a way around the limit.
#[tokio::test]
async fn the_dashboard_draws_on_the_accounts_request_budget() {
    let s = start_with(None, |c| c.token_rate_limit = Some(3)).await;
    let (_, email, password) = person(&s.store, "budget").await;
    let mut b = Browser::default();
    b.sign_in(&s, &email, &password).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(b.get(&s, "/rules").await.status);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(statuses[0], 200, "{statuses:?}");
    s.running.stop().await;
}

/// Deleting the account takes the email typed out and the password: a
/// borrowed session cannot erase it. The right pair erases it at once.
async fn deleting_the_account_takes_its_email_and_password(s: Server) {
    let (user, email, password) = person(&s.store, "erase").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let csrf = b.csrf(&s).await;
    for (confirm, pw, field) in [
        ("someone@else.test", password.as_str(), "confirm-email"),
        (email.as_str(), "not the password", "delete-password"),
    ] {
        let p = b.delete_account(&s, &csrf, confirm, pw).await;
        assert_eq!(p.status, 400, "{}", p.body);
        assert!(
            p.body.contains(&format!("id=\"{field}\"")) && p.body.contains("aria-invalid=\"true\""),
            "{field}: {}",
            p.body
        );
        assert!(
            s.store.user_by_id(&user.id).await.unwrap().is_some(),
            "still there"
        );
    }
    let p = b.delete_account(&s, &csrf, &email, &password).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(
        s.store.user_by_id(&user.id).await.unwrap().is_none(),
        "erased"
    );
    s.running.stop().await;
}

/// Rename a table of the server's SQLite database behind its back (a
/// table a page reads gone, then back).
async fn rename_table(s: &Server, from: &str, to: &str) {
    let url = zm_store::sqlite_url(&s._dir.path().join("t.db"));
    let mut raw = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE {from} RENAME TO {to}"
    )))
    .execute(&mut raw)
    .await
    .unwrap();
}

/// A team's audit log that cannot be read is said on the admin's page
/// (with the request id), not left out as if the log were not there.
#[tokio::test]
async fn a_team_audit_log_that_cannot_be_read_is_said() {
    let s = start(None).await;
    let (a, email, password) = person(&s.store, "audit-gone").await;
    let team = format!("auditgone{}", unique());
    let input: zm_contracts::teams::CreateTeamInput =
        zm_contracts::parse_input(&json!({"slug": team})).unwrap();
    s.store
        .create_team(&Caller::new(a.id.clone()), input)
        .await
        .unwrap();
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let page = b.get(&s, &format!("/teams/{team}")).await;
    assert!(
        page.body.contains("id=\"audit\"") && !page.body.contains("audit-failed"),
        "{}",
        page.body
    );
    // The log's table goes away behind the server's back.
    rename_table(&s, "team_events", "team_events_away").await;
    let page = b.get(&s, &format!("/teams/{team}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("id=\"audit-failed\"") && page.body.contains("request-id"),
        "{}",
        page.body
    );
    rename_table(&s, "team_events_away", "team_events").await;
    s.running.stop().await;
}

/// The account's log of recent changes that cannot be read is said
/// where it would be, and the rest of the page stands (its forms, an
/// import's summary), not an error page in its place.
#[tokio::test]
async fn an_account_audit_log_that_cannot_be_read_is_said() {
    let s = start(None).await;
    let (_, email, password) = person(&s.store, "account-audit-gone").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    rename_table(&s, "audit_log", "audit_log_away").await;
    let page = b.get(&s, "/account").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("id=\"audit-failed\"")
            && page.body.contains("request-id")
            && page.body.contains("id=\"password\"")
            && page.body.contains("id=\"delete-account\""),
        "{}",
        page.body
    );
    rename_table(&s, "audit_log_away", "audit_log").await;
    let page = b.get(&s, "/account").await;
    assert!(
        page.status == 200 && !page.body.contains("audit-failed"),
        "{}",
        page.body
    );
    s.running.stop().await;
}

/// The account's request budget spent: the page says the same wait as
/// its `Retry-After`.
#[tokio::test]
async fn a_spent_account_budget_says_the_wait_it_sends() {
    let (_dir, store) = common::store().await;
    let (listener, _, base) = common::listen().await;
    let mut cfg = HttpConfig::local(&base);
    cfg.token_rate_limit = Some(3);
    let limits = cfg.conn_limits();
    let cancel = CancellationToken::new();
    let state = zm_http::state(store.clone(), cfg);
    let clock = state.limiter.clock().clone();
    let app = zm_http::router_with_state(state, cancel.clone());
    let s = Server {
        base,
        store,
        running: common::serve(listener, app, limits, cancel),
        _dir,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
    };
    let (_, email, password) = person(&s.store, "budget").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let mut limited = None;
    for i in 0..10 {
        if i == 1 {
            // Part of the budget's minute gone: the wait is less than one.
            clock.advance(std::time::Duration::from_secs(17));
        }
        let r = s
            .http
            .get(format!("{}/", s.base))
            .header("cookie", b.header())
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("the budget runs out");
    let wait = r.headers()["retry-after"].to_str().unwrap().to_string();
    let body = r.text().await.unwrap();
    assert!(
        body.contains(&format!("Try again in {wait} seconds")),
        "{wait}: {body}"
    );
    s.running.stop().await;
}

/// Revoking a rule takes a reason the store accepts (1–500 characters):
/// an empty or an over-long one is refused and the rule stays promoted.
#[tokio::test]
async fn revoking_a_rule_takes_a_reason_the_store_accepts() {
    let s = start(None).await;
    let (user, email, password) = person(&s.store, "revoke").await;
    let m = remember(
        &s.store,
        &user.id,
        "Run the linters before every push.",
        "personal",
    )
    .await;
    zm_store::ToolService::new(s.store.clone())
        .call(
            &Caller::new(&user.id),
            zm_contracts::ToolName::PromoteRule,
            &json!({"memory_id": m}),
        )
        .await
        .unwrap();
    let mut b = Browser::default();
    b.sign_in(&s, &email, &password).await;
    let csrf = b.csrf(&s).await;
    let path = format!("/rules/{m}/revoke");
    for bad in ["   ", &"x".repeat(501)] {
        let p = b.post(&s, &path, &[("csrf", &csrf), ("reason", bad)]).await;
        assert_eq!(p.status, 400, "{}", p.body);
    }
    let promoted = |rules: Vec<zm_store::rules::RuleRecord>| {
        rules
            .iter()
            .any(|r| r.memory_id.as_str() == m && r.status == zm_store::rules::RuleState::Promoted)
    };
    assert!(
        promoted(s.store.list_rules(&Caller::new(&user.id)).await.unwrap()),
        "still promoted"
    );
    let p = b
        .post(
            &s,
            &path,
            &[("csrf", &csrf), ("reason", "we stopped linting")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(
        !promoted(s.store.list_rules(&Caller::new(&user.id)).await.unwrap()),
        "revoked"
    );
    s.running.stop().await;
}

/// Sign-ins in flight at once get no more than the five free attempts on
/// either backend (on PostgreSQL the back-off lives in the database): each
/// takes its place in the account's count before its password is checked.
/// A right password after wrong ones, within the free attempts, signs in.
/// A browser that signed in before is counted apart (its `zm_device`
/// cookie, made for that account only) and is not locked out.
mod parallel_sign_ins_get_only_the_free_attempts {
    #[tokio::test]
    async fn sqlite() {
        super::parallel_sign_ins(None).await;
    }
    #[tokio::test]
    async fn postgres() {
        match zm_store::test_database_url() {
            Some(url) => super::parallel_sign_ins(Some(url)).await,
            None => eprintln!(
                "ZM_TEST_DATABASE_URL is not set: skipped parallel_sign_ins_get_only_the_free_attempts::postgres"
            ),
        }
    }
}

async fn parallel_sign_ins(postgres: Option<String>) {
    // No per-IP limit: only the account's back-off stands.
    let s = start_with(postgres, |c| c.oauth_rate_max = 0).await;
    let (_, email, password) = person(&s.store, "parallel").await;
    let mut b = Browser::default();
    for _ in 0..4 {
        assert_eq!(b.sign_in(&s, &email, "a wrong guess").await.status, 400);
    }
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);

    let form = Browser::default().get(&s, "/login").await;
    let token = field(&form.body, "csrf").expect("a csrf field");
    let mut guesser = Browser::default();
    guesser.keep(&form.set_cookies);
    let s = std::sync::Arc::new(s);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (s, mut b, token, email) =
                (s.clone(), guesser.clone(), token.clone(), email.clone());
            tokio::spawn(async move {
                let f = [
                    ("csrf", token.as_str()),
                    ("next", "/"),
                    ("email", email.as_str()),
                    ("password", "a wrong guess"),
                ];
                b.post(&s, "/login", &f).await.status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(
        statuses.iter().filter(|&&st| st == 400).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&st| st == 429).count(),
        15,
        "{statuses:?}"
    );
    assert_eq!(
        Browser::default()
            .sign_in(&s, &email, &password)
            .await
            .status,
        429,
        "backing off now"
    );
    // The browser that signed in before is counted apart: the guesses
    // made elsewhere do not lock it out, and it has its own free attempts.
    assert!(
        b.cookies.iter().any(|(k, _)| k == "zm_device"),
        "a sign-in makes the browser known: {:?}",
        b.cookies
    );
    // (Signed out since: only the device cookie is left.)
    let device: Vec<(String, String)> = b
        .cookies
        .iter()
        .filter(|(k, _)| k == "zm_device")
        .cloned()
        .collect();
    let mut owner = Browser {
        cookies: device.clone(),
    };
    assert_eq!(owner.sign_in(&s, &email, "a wrong guess").await.status, 400);
    assert_eq!(
        owner.sign_in(&s, &email, &password).await.status,
        303,
        "its owner's browser gets in"
    );
    // A known browser's cookie names its own account only.
    let (_, other_email, other_password) = person(&s.store, "parallel-other").await;
    let mut borrowed = Browser { cookies: device };
    for _ in 0..5 {
        assert_eq!(
            borrowed
                .sign_in(&s, &other_email, "a wrong guess")
                .await
                .status,
            400
        );
    }
    let backed_off = Browser::default()
        .sign_in(&s, &other_email, &other_password)
        .await;
    assert_eq!(backed_off.status, 429, "the other account backs off");
    assert!(
        backed_off
            .retry_after
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|secs| secs >= 1),
        "{:?}",
        backed_off.retry_after
    );
    // The sign-in form again, saying when to retry, the address kept.
    assert!(
        backed_off.body.contains("id=\"login\"")
            && backed_off.body.contains("data-error-code=\"rate_limited\"")
            && backed_off
                .body
                .contains(&format!("value=\"{other_email}\"")),
        "{}",
        backed_off.body
    );
    assert_eq!(
        borrowed
            .sign_in(&s, &other_email, &other_password)
            .await
            .status,
        429,
        "not a browser that account knows"
    );
    let Ok(s) = std::sync::Arc::try_unwrap(s) else {
        panic!("the tasks are done");
    };
    s.running.stop().await;
}

/// An upper-case `https` public URL still gives the session cookie
/// `Secure`, and, at the root, the `__Host-` prefix: a cookie a
/// neighbouring subdomain plants under the plain name is not read.
#[tokio::test]
async fn an_upper_case_https_public_url_makes_cookies_secure() {
    let s = start_with(None, |c| {
        c.public_url = "HTTPS://Memory.Example.com".into();
    })
    .await;
    let (_, email, password) = person(&s.store, "secure").await;
    let mut b = Browser::default();
    let p = b.sign_in(&s, &email, &password).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let session = p
        .set_cookies
        .iter()
        .find(|c| c.starts_with("__Host-zm_session="))
        .expect("a session cookie");
    assert!(
        session.contains("; Secure") && session.contains("; Path=/;"),
        "{session}"
    );
    assert_eq!(
        b.get(&s, "/").await.status,
        200,
        "signed in under the prefixed name"
    );
    // A planted plain `zm_session` (another account's live session, say)
    // is not ours: alone it signs nobody in.
    let (_, other_email, other_password) = person(&s.store, "planter").await;
    let mut planter = Browser::default();
    assert_eq!(
        planter
            .sign_in(&s, &other_email, &other_password)
            .await
            .status,
        303
    );
    let theirs = planter
        .cookies
        .iter()
        .find(|(k, _)| k == "__Host-zm_session")
        .map(|(_, v)| v.clone())
        .expect("the planter's session");
    let mut victim = Browser::default();
    victim.cookies.push(("zm_session".into(), theirs));
    let p = victim.get(&s, "/").await;
    assert_eq!(
        p.status, 303,
        "a plain-named cookie signed a browser in: {}",
        p.body
    );
    s.running.stop().await;
}

/// Behind a public URL with a path prefix (`ZM_PUBLIC_URL=https://host/zm`,
/// a proxy serving the dashboard under `/zm`), the dashboard's cookies are
/// scoped to that prefix, like the OAuth form's (`/zm/oauth`), and sign-out
/// clears the session cookie under the same path (a browser keeps a cookie
/// cleared under another path).
#[tokio::test]
async fn cookies_follow_a_path_prefix_of_the_public_url() {
    let s = start_with(None, |c| {
        c.public_url = format!("{}/zm", c.public_url);
    })
    .await;
    let (_, email, password) = person(&s.store, "prefix").await;
    let mut b = Browser::default();
    let with_path = |cookies: &[String], name: &str| -> Vec<String> {
        cookies
            .iter()
            .filter(|c| c.starts_with(&format!("{name}=")))
            .cloned()
            .collect()
    };
    let login = b.get(&s, "/login").await;
    let pre = with_path(&login.set_cookies, "zm_login");
    assert!(
        pre.len() == 1 && pre[0].contains("; Path=/zm;"),
        "the sign-in form's cookie: {pre:?}"
    );
    let p = b.sign_in(&s, &email, &password).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let session = with_path(&p.set_cookies, "zm_session");
    assert!(
        session.len() == 1
            && session[0].contains("; Path=/zm;")
            && session[0].contains("HttpOnly")
            && session[0].contains("SameSite=Strict"),
        "{session:?}"
    );
    let spent = with_path(&p.set_cookies, "zm_login");
    assert!(
        spent.len() == 1 && spent[0].contains("; Path=/zm;") && spent[0].contains("Max-Age=0"),
        "the form's cookie is cleared under its path: {spent:?}"
    );
    let csrf = b.csrf(&s).await;
    let p = b.post(&s, "/logout", &[("csrf", &csrf)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let cleared = with_path(&p.set_cookies, "zm_session");
    assert!(
        cleared.len() == 1
            && cleared[0].starts_with("zm_session=;")
            && cleared[0].contains("; Path=/zm;")
            && cleared[0].contains("Max-Age=0"),
        "sign-out clears the session cookie under /zm: {cleared:?}"
    );
    s.running.stop().await;
}

/// Every URL a page names in an `href`, `src`, `action` or `formaction`
/// attribute (maud writes every attribute double-quoted).
fn page_urls(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href", "src", "action", "formaction"] {
        let needle = format!(" {attr}=\"");
        let mut rest = html;
        while let Some(i) = rest.find(&needle) {
            rest = &rest[i + needle.len()..];
            let end = rest.find('"').unwrap_or(rest.len());
            out.push(rest[..end].replace("&amp;", "&"));
            rest = &rest[end..];
        }
    }
    out
}

/// Sign in and walk the dashboard behind a public URL whose path is
/// `prefix` (`""` or `/zm`), as a proxy that strips the prefix forwards
/// it (routes are fetched at the server's root): every main page, a
/// memory, an error page, a confirmation, the sign-in page, and the
/// redirects of a sign-in, a change, a team's creation and the sign-out.
/// Returns every URL they emit — attributes and `Location`s — with the
/// route that emitted it. Return-to targets are checked on the way.
async fn emitted_urls(s: &Server, prefix: &str) -> Vec<(String, String)> {
    let (user, email, password) = person(&s.store, "prefixed").await;
    let tools = zm_store::ToolService::new(s.store.clone());
    let caller = Caller::new(user.id.clone());
    let call = |tool: zm_contracts::ToolName, args: serde_json::Value| {
        let tools = tools.clone();
        let caller = caller.clone();
        async move { tools.call(&caller, tool, &args).await.unwrap().to_json() }
    };
    let first = remember(
        &s.store,
        &user.id,
        "The search service uses OpenSearch.",
        "personal",
    )
    .await;
    let second = remember(
        &s.store,
        &user.id,
        "OpenSearch runs three data nodes.",
        "personal",
    )
    .await;
    let third = remember(
        &s.store,
        &user.id,
        "The staging cluster is in eu-west-1.",
        "personal",
    )
    .await;
    call(
        zm_contracts::ToolName::Link,
        json!({"src": second, "dst": first, "type": "relates_to"}),
    )
    .await;
    call(
        zm_contracts::ToolName::Challenge,
        json!({"memory_id": first, "reason": "we may move to Meilisearch"}),
    )
    .await;
    call(
        zm_contracts::ToolName::PromoteRule,
        json!({"memory_id": second}),
    )
    .await;
    common::token(&s.store, &user, None, &["mcp:read"]).await;

    let mut urls: Vec<(String, String)> = Vec::new();
    let mut b = Browser::default();
    let public = |route: &str| format!("{prefix}{route}");
    let route_of = |location: &str| {
        location
            .strip_prefix(prefix)
            .filter(|r| r.starts_with('/'))
            .unwrap_or_else(|| panic!("{location} is not under {prefix:?}"))
            .to_string()
    };
    let next_of = |route: &str| {
        format!(
            "{}/login?next={}",
            prefix,
            url::form_urlencoded::byte_serialize(public(route).as_bytes()).collect::<String>()
        )
    };

    // Signed out: sent to the sign-in page, coming back to the public path.
    let asked = format!("/memories/{first}");
    let p = b.get(s, &asked).await;
    assert_eq!(p.status, 303);
    assert_eq!(p.location.as_deref(), Some(next_of(&asked).as_str()));
    let login = route_of(p.location.as_deref().unwrap());
    let p = b.get(s, &login).await;
    assert_eq!(p.status, 200);
    assert_eq!(
        field(&p.body, "next").as_deref(),
        Some(public(&asked).as_str()),
        "the form carries the public return-to path"
    );
    urls.extend(page_urls(&p.body).into_iter().map(|u| (login.clone(), u)));

    // Signing in goes back there.
    let token = field(&p.body, "csrf").unwrap();
    let back = public(&asked);
    let p = b
        .post(
            s,
            "/login",
            &[
                ("csrf", &token),
                ("next", &back),
                ("email", &email),
                ("password", &password),
            ],
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some(back.as_str()))
    );
    urls.push(("POST /login".into(), p.location.unwrap()));
    // Signed in, the sign-in page sends on to a return-to path of ours.
    let p = b
        .get(
            s,
            &format!(
                "/login?next={}",
                url::form_urlencoded::byte_serialize(public("/rules").as_bytes())
                    .collect::<String>()
            ),
        )
        .await;
    assert_eq!(p.location, Some(public("/rules")));
    urls.push(("GET /login".into(), p.location.unwrap()));

    let csrf = b.csrf(s).await;
    // A team, for the Teams pages.
    let slug = format!("prefix{}", unique());
    let p = b
        .post(
            s,
            "/teams",
            &[("csrf", &csrf), ("slug", &slug), ("name", "Prefix team")],
        )
        .await;
    assert_eq!(
        (p.status, p.location.clone()),
        (303, Some(public(&format!("/teams/{slug}")))),
        "{}",
        p.body
    );
    urls.push(("POST /teams".into(), p.location.unwrap()));

    for route in [
        "/".to_string(),
        "/?q=OpenSearch".to_string(),
        "/?status=all&kind=fact".to_string(),
        format!("/memories/{first}"),
        format!("/memories/{second}"),
        "/memories/nope".to_string(),
        "/review".to_string(),
        "/rules".to_string(),
        "/access".to_string(),
        "/connect".to_string(),
        "/teams".to_string(),
        format!("/teams/{slug}"),
        "/insight".to_string(),
        "/account".to_string(),
    ] {
        let p = b.get(s, &route).await;
        assert!(
            [200, 404].contains(&p.status),
            "{route}: {} {}",
            p.status,
            p.body
        );
        assert!(p.location.is_none(), "{route}");
        urls.extend(page_urls(&p.body).into_iter().map(|u| (route.clone(), u)));
    }
    // A bulk action's confirmation, then a change and its redirect.
    let p = b
        .post(
            s,
            "/memories/bulk",
            &[("csrf", &csrf), ("action", "forget"), ("ids", &third)],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    urls.extend(
        page_urls(&p.body)
            .into_iter()
            .map(|u| ("POST /memories/bulk".to_string(), u)),
    );
    let p = b
        .post(s, &format!("/memories/{third}/forget"), &[("csrf", &csrf)])
        .await;
    assert_eq!(
        (p.status, p.location.clone()),
        (303, Some(public(&format!("/memories/{third}"))))
    );
    urls.push(("POST forget".into(), p.location.unwrap()));
    // A form that expired: the error page.
    let p = b
        .post(
            s,
            &format!("/memories/{third}/restore"),
            &[("csrf", "stale")],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    urls.extend(
        page_urls(&p.body)
            .into_iter()
            .map(|u| ("POST restore".to_string(), u)),
    );

    let p = b.post(s, "/logout", &[("csrf", &csrf)]).await;
    assert_eq!(
        (p.status, p.location.clone()),
        (303, Some(public("/login")))
    );
    urls.push(("POST /logout".into(), p.location.unwrap()));
    urls
}

/// The stylesheet and the script are named by their content: a page names
/// each with the digest of what the server serves, that address is cached
/// for a year, and any other (an older build's, or none) is checked again
/// on each use, so an upgrade is never styled by a cached older copy.
#[tokio::test]
async fn assets_are_named_by_their_content() {
    use sha2::Digest;
    let s = start(None).await;
    let login = Browser::default().get(&s, "/login").await;
    for (name, kind) in [("app.css", "text/css"), ("app.js", "text/javascript")] {
        let prefix = format!("/assets/{name}?v=");
        let href = page_urls(&login.body)
            .into_iter()
            .find(|u| u.starts_with(&prefix))
            .unwrap_or_else(|| panic!("{prefix} in {}", login.body));
        let fetch = |path: String| {
            let r = s.http.get(format!("{}{path}", s.base)).send();
            async move {
                let r = r.await.unwrap();
                let header = |n: &str| {
                    r.headers()
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string()
                };
                let (status, cache, ty) = (
                    r.status().as_u16(),
                    header("cache-control"),
                    header("content-type"),
                );
                (status, cache, ty, r.text().await.unwrap())
            }
        };
        let (status, cache, ty, body) = fetch(href.clone()).await;
        assert_eq!(status, 200, "{href}");
        assert!(ty.starts_with(kind), "{href}: {ty}");
        assert_eq!(cache, "public, max-age=31536000, immutable", "{href}");
        let digest: String = sha2::Sha256::digest(body.as_bytes())
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(href, format!("{prefix}{digest}"));
        for other in [
            format!("/assets/{name}"),
            format!("{prefix}0123456789abcdef"),
        ] {
            let (status, cache, _, same) = fetch(other.clone()).await;
            assert_eq!((status, cache.as_str()), (200, "no-cache"), "{other}");
            assert_eq!(same, body, "{other}");
        }
    }
    s.running.stop().await;
}

/// Behind `ZM_PUBLIC_URL=…/zm` (a proxy strips `/zm` and forwards to our
/// root), every URL the dashboard emits — links, form actions, the
/// stylesheet and the script, redirects and the return-to parameter —
/// starts with `/zm/`; return-to targets outside it are not followed.
/// Without a prefix, nothing names `/zm`.
#[tokio::test]
async fn every_dashboard_url_is_under_the_public_urls_path_prefix() {
    let s = start_with(None, |c| {
        c.public_url = format!("{}/zm", c.public_url);
    })
    .await;
    let urls = emitted_urls(&s, "/zm").await;
    let rooted: Vec<&(String, String)> = urls.iter().filter(|(_, u)| u.starts_with('/')).collect();
    assert!(rooted.len() > 100, "the walk saw the pages' URLs: {urls:?}");
    for want in [
        "/zm/assets/app.css?v=",
        "/zm/assets/app.js?v=",
        "/zm/logout",
        "/zm/memories/bulk",
        "/zm/api/openapi.json",
    ] {
        assert!(
            rooted
                .iter()
                .any(|(_, u)| u == want || (want.ends_with("?v=") && u.starts_with(want))),
            "{want} in {rooted:?}"
        );
    }
    let outside: Vec<_> = rooted
        .iter()
        .filter(|(_, u)| !(u == "/zm" || u.starts_with("/zm/")))
        .collect();
    assert!(outside.is_empty(), "URLs outside /zm: {outside:?}");

    // Return-to targets: only a path under the prefix is followed.
    let (_, email, password) = person(&s.store, "prefix-next").await;
    for (next, to) in [
        ("/zm/rules", "/zm/rules"),
        ("/zm", "/zm/"),
        ("/rules", "/zm/"),
        ("/zmx/rules", "/zm/"),
        ("/zm/../other-app", "/zm/"),
        ("/zm/%2e%2e/other-app", "/zm/"),
        ("/zm//evil.example", "/zm/"),
        ("//evil.example/zm/", "/zm/"),
        ("https://evil.example/zm/", "/zm/"),
    ] {
        let mut b = Browser::default();
        let token = field(&b.get(&s, "/login").await.body, "csrf").unwrap();
        let p = b
            .post(
                &s,
                "/login",
                &[
                    ("csrf", &token),
                    ("next", next),
                    ("email", &email),
                    ("password", &password),
                ],
            )
            .await;
        assert_eq!(
            (p.status, p.location.as_deref()),
            (303, Some(to)),
            "next={next}"
        );
    }
    s.running.stop().await;

    let s = start(None).await;
    let urls = emitted_urls(&s, "").await;
    assert!(
        urls.iter()
            .any(|(_, u)| u.starts_with("/assets/app.css?v=")),
        "{urls:?}"
    );
    let named: Vec<_> = urls
        .iter()
        .filter(|(_, u)| u.starts_with("/zm") || u.starts_with("//"))
        .collect();
    assert!(named.is_empty(), "no prefix, yet: {named:?}");
    s.running.stop().await;
}

/// U+0000 in a path, a query or a form is refused as `validation_failed`
/// before anything reads it, on both backends (PostgreSQL cannot store it
/// and answered `internal`; SQLite cut names short at it): the dashboard
/// with its error page, the REST API with its error envelope, OAuth with
/// `invalid_request`.
async fn a_nul_character_is_refused_as_validation_failed_everywhere(s: Server) {
    let (a, email, password) = person(&s.store, "dash-nul").await;
    let mut b = Browser::default();
    // The sign-in form, before anyone is signed in.
    let page = b.get(&s, "/login").await;
    let token = field(&page.body, "csrf").expect("a csrf field");
    let nul_email = format!("{email}\0");
    let refused = b
        .post(
            &s,
            "/login",
            &[
                ("csrf", &token),
                ("next", "/"),
                ("email", &nul_email),
                ("password", &password),
            ],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("NUL character"), "{}", refused.body);
    assert_eq!(
        b.sign_in(&s, &email, &password).await.status,
        303,
        "the same form without it signs in"
    );
    // Paths and queries of signed-in pages.
    for path in [
        "/?scope=%00",
        "/?agent=a%00",
        "/teams/a%00b",
        "/memories/mem_%00",
    ] {
        let page = b.get(&s, path).await;
        assert_eq!(page.status, 400, "{path}: {}", page.body);
        assert!(page.body.contains("NUL character"), "{path}: {}", page.body);
    }
    assert_eq!(b.get(&s, "/?scope=personal").await.status, 200);
    // A signed-in form.
    let csrf = b.csrf(&s).await;
    let form = b
        .post(
            &s,
            "/access/tokens",
            &[("csrf", &csrf), ("name", "laptop\0"), ("expiry", "30")],
        )
        .await;
    assert_eq!(form.status, 400, "{}", form.body);
    // The REST API: the envelope, with the contract's code.
    let bearer = common::token(&s.store, &a, None, &["mcp:read", "mcp:write"]).await;
    for path in [
        "/api/teams/a%00b",
        "/api/memories/mem_%00",
        "/api/rules?scope=%00",
    ] {
        let r = s
            .http
            .get(format!("{}{path}", s.base))
            .bearer_auth(&bearer)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v["error"]["code"],
            json!("validation_failed"),
            "{path}: {v}"
        );
    }
    // OpenAPI says so of every operation behind a token.
    let doc: Value = s
        .http
        .get(format!("{}/api/openapi.json", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            if op.get("security") == Some(&json!([])) {
                continue;
            }
            assert!(
                op["responses"].get("400").is_some(),
                "{method} {path} answers 400 to %00 but does not list it"
            );
        }
    }
    // OAuth's parameters.
    let r = s
        .http
        .get(format!(
            "{}/oauth/authorize?client_id=a%00&response_type=code",
            s.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .form(&[("grant_type", "authorization_code"), ("code", "zm_oac_\0")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], json!("invalid_request"), "{v}");
}

/// A query string that does not read (a `before` that is no number, a
/// repeated `next`) is the dashboard's `validation_failed` page with its
/// headers, not a bare plain-text 400.
async fn an_address_that_does_not_read_is_the_validation_page(s: Server) {
    let (_, email, password) = person(&s.store, "dash-query").await;
    let mut b = Browser::default();
    let login = b.get(&s, "/login?next=/a&next=/b").await;
    assert_eq!(login.status, 400, "{}", login.body);
    assert!(login.csp.is_some(), "the page's headers");
    assert!(login.body.contains("could not be read"), "{}", login.body);
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    for path in [
        "/?before=abc",
        "/?before=-",
        "/rules/download?format=a&format=b",
        // An escape that is not UTF-8 (Latin-1's é): not searched as U+FFFD.
        "/?q=caf%E9",
        // A path parameter that is not UTF-8 once decoded.
        "/memories/%FF",
        "/teams/%FF%FE",
    ] {
        let page = b.get(&s, path).await;
        assert_eq!(page.status, 400, "{path}: {}", page.body);
        assert!(page.csp.is_some(), "{path}: the page's headers");
        assert!(
            page.body.contains("could not be read"),
            "{path}: {}",
            page.body
        );
    }
    assert_eq!(b.get(&s, "/?before=5").await.status, 200);
}

/// The account's download streams every page of `export_memories`: more
/// memories than one page holds all arrive, once each, as JSON lines.
#[tokio::test]
async fn the_account_download_holds_every_page() {
    let s = start(None).await;
    let (user, email, password) = person(&s.store, "dash-export").await;
    let n = zm_contracts::EXPORT_PAGE_MAX as usize + 3;
    for i in 0..n {
        remember(
            &s.store,
            &user.id,
            &format!("Export line number {i} of the account."),
            "personal",
        )
        .await;
    }
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let r = s
        .http
        .get(format!("{}/account/export", s.base))
        .header("cookie", b.header())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    // A download of others' words gets the pages' headers.
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert!(r.headers().contains_key("content-security-policy"));
    let text = r.text().await.unwrap();
    let mut ids = std::collections::HashSet::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        assert!(ids.insert(v["id"].as_str().unwrap().to_string()), "{line}");
    }
    assert_eq!(ids.len(), n, "every memory, once");
    s.running.stop().await;
}

/// A form whose text is not UTF-8 (`%E9`, Latin-1's é) is refused on the
/// validation page, and the memory keeps its text: the form decoder would
/// have stored U+FFFD in its place without a word.
#[tokio::test]
async fn a_form_that_is_not_utf8_changes_nothing() {
    let s = start(None).await;
    let (user, email, password) = person(&s.store, "dash-latin1").await;
    let m = remember(&s.store, &user.id, "The cafe opens at eight.", "personal").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let csrf = b.csrf(&s).await;
    let r = s
        .http
        .post(format!("{}/memories/{m}/edit", s.base))
        .header("cookie", b.header())
        .header("origin", s.base.clone())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&content=The+caf%E9+opens+at+nine."))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let page = r.text().await.unwrap();
    assert!(page.contains("not UTF-8"), "{page}");
    let id = zm_contracts::MemoryId::parse(&m).unwrap();
    let now = s
        .store
        .get_memory(&Caller::new(user.id.clone()), &id)
        .await
        .unwrap();
    assert!(now.invalidated_at.is_none() && now.content == "The cafe opens at eight.");
    s.running.stop().await;
}

/// A dashboard sign-in is audited as an OAuth one is: a wrong password as
/// a refused `web.login` of the account the email names (never the
/// password), a sign-in as a successful one.
#[tokio::test]
async fn sign_ins_are_audited_without_the_password() {
    let s = start(None).await;
    let (user, email, password) = person(&s.store, "dash-audit").await;
    let mut b = Browser::default();
    assert_eq!(
        b.sign_in(&s, &email, "not-the-password-42").await.status,
        400
    );
    let rows = s.store.audit_rows(&user.id, 10).await.unwrap();
    assert!(
        rows.iter()
            .any(|r| r["command"] == "web.login" && r["outcome"] == "error"),
        "{rows:?}"
    );
    assert!(
        !rows
            .iter()
            .any(|r| r["command"] == "web.login" && r["outcome"] == "ok"),
        "{rows:?}"
    );
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let rows = s.store.audit_rows(&user.id, 10).await.unwrap();
    assert!(
        rows.iter()
            .any(|r| r["command"] == "web.login" && r["outcome"] == "ok"),
        "{rows:?}"
    );
    let text = serde_json::to_string(&rows).unwrap();
    assert!(
        !text.contains("not-the-password-42") && !text.contains(&password),
        "{text}"
    );
    s.running.stop().await;
}

/// A form's change whose browser hangs up while it waits for the database
/// still lands once the database frees up, as a REST or MCP write does.
/// (SQLite's write lock is held by another connection; the browser gives
/// up after half a second; the test then waits, with a generous deadline,
/// for the memory to be forgotten.)
#[tokio::test]
async fn a_change_whose_browser_hangs_up_still_lands() {
    let s = start(None).await;
    let (user, email, password) = person(&s.store, "dash-hangup").await;
    let m = remember(
        &s.store,
        &user.id,
        "The staging database restarts on Sundays.",
        "personal",
    )
    .await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let csrf = b.csrf(&s).await;
    let lock = common::hold_write_lock(s._dir.path()).await;
    let sent = common::impatient_client()
        .post(format!("{}/memories/{m}/forget", s.base))
        .header("cookie", b.header())
        .header("origin", s.base.clone())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("csrf", csrf.as_str())]).unwrap())
        .send()
        .await;
    assert!(sent.is_err(), "the change waits on the lock: {sent:?}");
    common::release_write_lock(lock).await;
    let id = zm_contracts::MemoryId::parse(&m).unwrap();
    let caller = Caller::new(user.id.clone());
    common::until_landed("the change", || async {
        let now = s.store.get_memory(&caller, &id).await.unwrap();
        now.invalidated_at.is_some()
    })
    .await;
    s.running.stop().await;
}

/// A value no page offers — a list filter of an unknown kind or status, a
/// date that is not a date, a rules block of an unknown format, an import
/// of an unknown format or target — is refused on the validation page,
/// naming it; the list never claims a filter it did not apply, and
/// nothing is imported.
#[tokio::test]
async fn a_value_the_page_never_offers_is_refused() {
    let s = start(None).await;
    let (user, email, password) = person(&s.store, "dash-offer").await;
    remember(
        &s.store,
        &user.id,
        "The nightly backup runs at two.",
        "personal",
    )
    .await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    for (path, field) in [
        ("/?kind=recipe", "kind"),
        ("/?q=backup&kind=recipe", "kind"),
        ("/?status=archived", "status"),
        ("/?since=yesterday", "since"),
        ("/?until=2026-13-40", "until"),
        ("/rules/download?format=vim", "format"),
    ] {
        let page = b.get(&s, path).await;
        assert_eq!(page.status, 400, "{path}: {}", page.body);
        assert!(page.body.contains(field), "{path}: {}", page.body);
        assert!(
            !page.body.contains("nightly backup"),
            "{path}: listed anyway"
        );
    }
    let long_agent = format!("/?agent={}", "a".repeat(101));
    let page = b.get(&s, &long_agent).await;
    assert_eq!(page.status, 400, "an agent name past 100 characters");
    // 100 characters of three bytes each: an agent name the store keeps.
    let wide_agent = format!("/?agent={}", "%E7%94%9F".repeat(100));
    for (path, listed) in [
        (wide_agent.as_str(), false),
        ("/?kind=fact", true),
        ("/?kind=task", false),
        ("/?kind=&status=&since=&until=", true),
        ("/?status=all&since=2020-01-01", true),
        ("/?until=2020-01-01", false),
    ] {
        let page = b.get(&s, path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(page.body.contains("nightly backup"), listed, "{path}");
    }
    assert_eq!(b.get(&s, "/rules/download?format=agents").await.status, 200);

    let csrf = b.csrf(&s).await;
    let file = r#"{"type":"entity","name":"Backups","entityType":"job","observations":["restores are tested monthly"]}"#;
    // (Each field's own reason: the page names both fields anyway.)
    for (format, target, field) in [
        (
            "vim",
            "",
            "choose zero-memory export or @modelcontextprotocol/server-memory",
        ),
        (
            "server-memory",
            "shared",
            "choose as the file says, personal or core",
        ),
    ] {
        let boundary = "zmboundary44";
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{csrf}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"format\"\r\n\r\n{format}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"target\"\r\n\r\n{target}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"memory.jsonl\"\r\nContent-Type: application/x-ndjson\r\n\r\n{file}\n\r\n\
             --{boundary}--\r\n"
        );
        let r = s
            .http
            .post(format!("{}/account/import", s.base))
            .header("cookie", b.header())
            .header("origin", s.base.clone())
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{format}/{target}");
        let text = r.text().await.unwrap();
        assert!(text.contains(field), "{format}/{target}: {text}");
    }
    assert!(
        !b.get(&s, "/?q=restores")
            .await
            .body
            .contains("tested monthly"),
        "a refused import imported nothing"
    );
    s.running.stop().await;
}

/// A personal access token outlives the session that made it, so making
/// one takes the account's password (a borrowed session does not become
/// lasting access); and a password change may revoke every personal token
/// too, when asked.
async fn a_token_takes_the_password_and_a_password_change_may_revoke_tokens(s: Server) {
    let (user, email, password) = person(&s.store, "tok-pw").await;
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let csrf = b.csrf(&s).await;
    let access = b.get(&s, "/access").await;
    assert!(
        access.body.contains("id=\"token-password\""),
        "the form asks for it"
    );
    for (given, what) in [
        (None, "no password"),
        (Some("a wrong guess"), "a wrong password"),
    ] {
        let mut form = vec![
            ("csrf", csrf.as_str()),
            ("name", "laptop"),
            ("access", "write"),
            ("expiry", "never"),
        ];
        if let Some(p) = given {
            form.push(("password", p));
        }
        let page = b.post(&s, "/access/tokens", &form).await;
        assert_eq!(page.status, 400, "{what}: {}", page.body);
        assert!(!page.body.contains("zm_pat_"), "{what}: no token made");
        assert!(
            page.body.contains("id=\"token-password\"")
                && page.body.contains("aria-invalid=\"true\""),
            "{what}: the field is marked"
        );
    }
    assert!(
        s.store.list_tokens(&user.id).await.unwrap().is_empty(),
        "no token was made"
    );
    let made = b
        .post(
            &s,
            "/access/tokens",
            &[
                ("csrf", &csrf),
                ("name", "laptop"),
                ("access", "write"),
                ("expiry", "never"),
                ("password", &password),
            ],
        )
        .await;
    assert_eq!(made.status, 200, "{}", made.body);
    assert!(made.body.contains("zm_pat_"), "the secret is shown once");
    // A password change keeps personal tokens unless asked to revoke them.
    let kept = common::token(&s.store, &user, None, &["mcp:read"]).await;
    let change = |current: String, new: &'static str, revoke: bool| {
        let mut form = vec![
            ("csrf", csrf.clone()),
            ("current", current),
            ("new", new.to_string()),
            ("again", new.to_string()),
        ];
        if revoke {
            form.push(("revoke_tokens", "yes".to_string()));
        }
        form
    };
    let f = change(password.clone(), "the second password", false);
    let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(b.post(&s, "/account/password", &f).await.status, 303);
    assert!(
        s.store.authenticate(&kept).await.unwrap().is_some(),
        "kept without the box"
    );
    let csrf = b.csrf(&s).await;
    let f = change(
        "the second password".to_string(),
        "the third password",
        true,
    );
    let f: Vec<(&str, &str)> = f
        .iter()
        .map(|(k, v)| {
            if *k == "csrf" {
                (*k, csrf.as_str())
            } else {
                (*k, v.as_str())
            }
        })
        .collect();
    assert_eq!(b.post(&s, "/account/password", &f).await.status, 303);
    assert!(
        s.store.authenticate(&kept).await.unwrap().is_none(),
        "revoked with the box"
    );
    assert!(
        s.store
            .list_tokens(&user.id)
            .await
            .unwrap()
            .iter()
            .all(|t| t.revoked_at.is_some()),
        "every personal token"
    );
}

/// A form that comes back with an error keeps what was chosen (a token's
/// access and lifetime, never widened by a retyped password) and says
/// why; a value the form does not offer is refused; filters ride along
/// the date form and the links of a "(none)" agent; a search offers only
/// the filters it applies.
async fn a_form_that_comes_back_keeps_the_choices_and_says_why(s: Server) {
    let (user, email, password) = person(&s.store, "keep").await;
    let mut b = Browser::default();
    let wrong = b.sign_in(&s, &email, "not the password").await;
    assert_eq!(wrong.status, 400);
    assert!(
        wrong.body.contains("wrong email or password"),
        "the sign-in says why: {}",
        wrong.body
    );
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let csrf = b.csrf(&s).await;
    let again = b
        .post(
            &s,
            "/access/tokens",
            &[
                ("csrf", &csrf),
                ("name", "ci box"),
                ("access", "read"),
                ("expiry", "365"),
                ("password", "a wrong guess"),
            ],
        )
        .await;
    assert_eq!(again.status, 400, "{}", again.body);
    for kept in [
        "value=\"ci box\"",
        "value=\"read\" selected",
        "value=\"365\" selected",
    ] {
        assert!(again.body.contains(kept), "kept {kept}");
    }
    assert!(!again.body.contains("value=\"write\" selected"));
    for (field, value) in [
        ("access", "admin"),
        ("access", ""),
        ("expiry", "0"),
        ("expiry", "7"),
        ("expiry", "forever"),
        ("expiry", ""),
    ] {
        let mut form = vec![
            ("csrf", csrf.as_str()),
            ("name", "tampered"),
            ("access", "read"),
            ("expiry", "30"),
            ("password", password.as_str()),
        ];
        form.retain(|(k, _)| *k != field);
        form.push((field, value));
        let page = b.post(&s, "/access/tokens", &form).await;
        assert_eq!(page.status, 400, "{field}={value}");
        assert!(!page.body.contains("zm_pat_"), "{field}={value}: no token");
    }
    assert!(s.store.list_tokens(&user.id).await.unwrap().is_empty());
    remember(
        &s.store,
        &user.id,
        "The release train leaves on Fridays.",
        "personal",
    )
    .await;
    // A "(none)" agent filter stays on every facet link.
    let none = b.get(&s, "/?agent=&kind=fact").await;
    assert_eq!(none.status, 200);
    assert!(
        none.body.contains("agent=&amp;"),
        "the empty agent rides along: {}",
        none.body
    );
    // The date form carries every other filter.
    let dated = b.get(&s, "/?kind=fact&status=all").await;
    let form = &dated.body[dated.body.find("class=\"dates\"").unwrap()..];
    let form = &form[..form.find("</form>").unwrap()];
    for hidden in [
        "name=\"kind\" value=\"fact\"",
        "name=\"status\" value=\"all\"",
    ] {
        assert!(
            form.contains(hidden),
            "the date form keeps {hidden}: {form}"
        );
    }
    // A search offers no filter it would not apply.
    let search = b.get(&s, "/?q=release&status=forgotten").await;
    assert_eq!(search.status, 200);
    assert!(search.body.contains("id=\"search-filters\""));
    assert!(!search.body.contains("Apply dates"));
}

/// Two rules of one text: a briefing carries the text once, so the Rules
/// page says one is delivered and the other is not (it said both were,
/// matching by text).
async fn a_rules_delivery_is_read_by_the_rule_not_its_text(s: Server) {
    let (user, email, password) = person(&s.store, "twin-rules").await;
    let tools = zm_store::ToolService::new(s.store.clone());
    let caller = Caller::new(user.id.clone());
    let mut ids = Vec::new();
    for text in [
        "Lint before every commit.",
        "Run the linter before each commit.",
    ] {
        let id = remember(&s.store, &user.id, text, "personal").await;
        tools
            .call(
                &caller,
                zm_contracts::ToolName::PromoteRule,
                &json!({"memory_id": id, "rule_text": "Always run the linter."}),
            )
            .await
            .unwrap();
        ids.push(id);
    }
    let mut b = Browser::default();
    assert_eq!(b.sign_in(&s, &email, &password).await.status, 303);
    let page = b.get(&s, "/rules").await;
    assert_eq!(page.status, 200);
    let states: Vec<String> = ids
        .iter()
        .map(|id| {
            let row = rule_row(&page.body, id).unwrap_or_else(|| panic!("{id}: {}", page.body));
            let cell = &row[row.find("class=\"delivery\"").unwrap()..];
            cell[cell.find('>').unwrap() + 1..cell.find("</td>").unwrap()].to_string()
        })
        .collect();
    let mut sorted = states.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "delivered",
            "not delivered in your briefings: over the cap, the same text as another rule, or a scope you no longer reach"
        ],
        "{states:?}"
    );
}
