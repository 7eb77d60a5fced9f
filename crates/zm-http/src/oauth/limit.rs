//! The per-client-IP, per-endpoint limit of the OAuth endpoints that do
//! work: the four POSTs and `GET /oauth/authorize` (a database lookup and
//! a page); and the per-account back-off on failed sign-ins
//! ([`LoginBackoff`]), which a browser the account signed in from before
//! does not share ([`LoginBackoff::known_device`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{OauthRejection, OauthState};
use crate::request::ClientIp;
use crate::state::{Clock, CookieScope};

/// Extractor: counts the request against `oauth_rate_max` requests per
/// `oauth_rate_window` for its client IP (see [`ClientIp`]; an IPv6
/// address counts by its /64 and by its /48, see
/// [`RateLimiter::hit_client`](crate::state::RateLimiter::hit_client)) and endpoint
/// (method and route: showing the sign-in page does not use up sign-in
/// attempts); rejects with 429 and `Retry-After`. Refused requests count
/// too, so put it before the parameter extractor.
pub(super) struct Throttled;

impl FromRequestParts<OauthState> for Throttled {
    type Rejection = OauthRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        st: &OauthState,
    ) -> Result<Self, OauthRejection> {
        let cfg = &st.app.cfg;
        if cfg.oauth_rate_max == 0 {
            return Ok(Throttled);
        }
        let Ok(ClientIp(ip)) = ClientIp::from_request_parts(parts, st).await;
        let route = parts.uri.path().rsplit('/').next().unwrap_or("");
        // An IPv6 client counts by its /48 too: registration stores a row
        // for anyone who asks (cycling through the /64s of one /48 would
        // fill the registrations waiting for a sign-in and lock every new
        // client out), and a sign-in or a token request moving through
        // them would get a fresh window at each.
        let clients = if route == "register" {
            1
        } else {
            crate::state::CLIENTS_PER_NETWORK
        };
        let hit = st
            .app
            .limiter
            .hit_client(
                &format!("oauth:{}:{route}", parts.method),
                &ip,
                cfg.oauth_rate_max,
                clients,
                cfg.oauth_rate_window,
            )
            .await;
        match hit {
            Ok(()) => Ok(Throttled),
            Err(secs) => {
                st.app.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
                Err(OauthRejection::RateLimited { retry_after: secs })
            }
        }
    }
}

/// Failed sign-ins an account is allowed before the back-off starts.
pub(super) const FREE_FAILURES: u32 = 5;
/// The first back-off; each further failure doubles it (30 s, 1 min, 2 min
/// … 15 min).
pub(super) const FIRST_BACKOFF: Duration = Duration::from_secs(30);
/// The longest back-off: the owner always gets in after at most this long.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);
/// The cookie that makes a browser known to the account it last signed in
/// to: `<issued ms>.<HMAC>` of the account (its id, its email and its
/// current password's credential tag) and that time under the database's
/// form key, so that only the server makes one, one made for an account
/// names no other, and changing the password (or erasing the account)
/// voids every one made before.
pub(crate) const DEVICE_COOKIE: &str = "zm_device";
/// How long a browser stays known after its last successful sign-in.
pub(crate) const DEVICE_TTL: Duration = Duration::from_secs(180 * 24 * 60 * 60);

/// An account's failures are forgotten this long after the last one.
const FORGET_AFTER: Duration = Duration::from_secs(60 * 60);
/// Accounts tracked at most (per process).
const MAX_ACCOUNTS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    until: Instant,
}

/// Why a sign-in attempt is not made now.
#[derive(Debug, PartialEq)]
pub(crate) enum NotNow {
    /// The account is backing off: retry after this many seconds (at
    /// least 1).
    BackingOff(u64),
    /// The attempt could not be counted (the database is busy, or
    /// failed): it is refused rather than let through uncounted.
    Uncounted(zm_contracts::ToolError),
}

/// Failed sign-ins per account, whatever the client IP: after
/// [`FREE_FAILURES`] failures each further attempt must wait 30 s, 1 min,
/// 2 min … up to [`MAX_BACKOFF`]; a success clears the account. A browser
/// that last signed in to the account ([`Self::known_device`]) is
/// counted apart, with the same back-off: whoever guesses an account's
/// password from elsewhere, however often, never locks its owner's own
/// browser out (a per-account back-off alone is theirs to hold shut with
/// one wrong guess per 15 minutes). An
/// attempt counts as a failure from the moment it is let through
/// ([`LoginBackoff::attempt`]), before its password is checked. Keyed by the
/// normalised email, existing or not, so it says nothing about which emails
/// exist. In memory, at most [`MAX_ACCOUNTS`] accounts: when full, ones
/// idle for [`FORGET_AFTER`] go first, then the longest idle of those not
/// backing off, and only then the back-off that ends first — or, built
/// with [`LoginBackoff::shared`] (PostgreSQL), in the database's
/// `login_failures` (the email hashed), where every instance sees the same
/// count.
#[derive(Debug)]
pub(crate) struct LoginBackoff {
    clock: Clock,
    accounts: Mutex<HashMap<String, Failures>>,
    shared: Option<zm_store::Store>,
}

/// The wait after an account's `count`-th consecutive failure (zero before
/// the back-off starts).
fn backoff_after(count: u32) -> Duration {
    if count < FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (count - FREE_FAILURES).min(16);
    (FIRST_BACKOFF * (1u32 << doublings)).min(MAX_BACKOFF)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The longest email an account can have (the store refuses longer).
const EMAIL_MAX: usize = 320;

/// The key of an account: the email as the sign-in compares it; `None`
/// for what no account can be (longer than any email), which is neither
/// kept nor counted: the per-address limit still counts the attempt.
fn account_key(email: &str) -> Option<String> {
    let key = email.trim().to_lowercase();
    (key.len() <= EMAIL_MAX).then_some(key)
}

/// The key an attempt is counted under: its account's, or, from a browser
/// the account knows, that browser's own with the account.
fn counted_key(email: &str, device: Option<&str>) -> Option<String> {
    let account = account_key(email)?;
    Some(match device {
        Some(d) => format!("{account}\0device:{d}"),
        None => account,
    })
}

/// The MAC of a device cookie for `user` (signing in as `account`, its
/// email's key) issued at `issued_ms`.
fn device_mac(key: &[u8], user: &zm_store::User, account: &str, issued_ms: i64) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(b"zm-device/v1\0");
    mac.update(user.id.as_bytes());
    mac.update(b"\0");
    mac.update(&user.credential.tag());
    mac.update(account.as_bytes());
    mac.update(b"\0");
    mac.update(issued_ms.to_string().as_bytes());
    mac
}

/// The in-memory map's key: the account key hashed (as the shared
/// back-off's rows are), so an entry's size is fixed whatever was typed.
fn map_key(account: &str) -> String {
    zm_store::identity::hash_secret(account)
}

impl LoginBackoff {
    pub(crate) fn new(clock: Clock) -> Self {
        LoginBackoff {
            clock,
            accounts: Mutex::new(HashMap::new()),
            shared: None,
        }
    }

    /// A back-off kept in `store`, shared by every instance on it.
    pub(crate) fn shared(store: zm_store::Store, clock: Clock) -> Self {
        LoginBackoff {
            shared: Some(store),
            ..LoginBackoff::new(clock)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failures>> {
        self.accounts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The browser of this request, when it last signed in to `email`'s
    /// account within [`DEVICE_TTL`], since the account's password last
    /// changed, and kept the cookie the server gave it then
    /// ([`Self::device_cookie`]): an id for it, which [`Self::attempt`] and
    /// [`Self::succeeded`] count apart from the account. `None` for any
    /// other browser, and for a cookie made for another account (or a
    /// disabled one), before the password changed, altered or too old.
    /// The account is read only when the request carries such a cookie.
    pub(crate) async fn known_device(
        &self,
        store: &zm_store::Store,
        key: &[u8],
        email: &str,
        headers: &HeaderMap,
        scope: &CookieScope,
    ) -> Option<String> {
        let account = account_key(email)?;
        let value = scope
            .read(headers, DEVICE_COOKIE)
            .filter(|v| !v.is_empty() && v.len() <= 128)?;
        let (issued, tag) = value.split_once('.')?;
        let issued_ms: i64 = issued.parse().ok()?;
        let age = self.clock.wall_ms().saturating_sub(issued_ms);
        // (A minute ahead: another instance's clock may run a little fast.)
        if !(-60_000..=millis(DEVICE_TTL)).contains(&age) {
            return None;
        }
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        // A database failure makes no browser known: the attempt counts
        // for the account, as any other.
        let user = store.user_by_email(&account).await.ok()??;
        if user.is_disabled() {
            return None;
        }
        device_mac(key, &user, &account, issued_ms)
            .verify_slice(&tag)
            .ok()?;
        Some(URL_SAFE_NO_PAD.encode(tag.get(..16)?))
    }

    /// The `Set-Cookie` that makes this browser known to `user`'s account
    /// (signed in to as `email`) for [`DEVICE_TTL`] or until its password
    /// changes (given at each successful sign-in), under `scope`:
    /// `HttpOnly`, `SameSite=Strict` (the sign-in forms post from the
    /// server's own pages). `None` for an email no account can have.
    pub(crate) fn device_cookie(
        &self,
        key: &[u8],
        user: &zm_store::User,
        email: &str,
        scope: &CookieScope,
    ) -> Option<String> {
        let account = account_key(email)?;
        let issued_ms = self.clock.wall_ms();
        let tag = device_mac(key, user, &account, issued_ms)
            .finalize()
            .into_bytes();
        let value = format!("{issued_ms}.{}", URL_SAFE_NO_PAD.encode(tag));
        Some(scope.set_cookie(DEVICE_COOKIE, &value, DEVICE_TTL.as_secs(), "Strict"))
    }

    /// Take a place for a sign-in attempt, before its password is checked:
    /// `Err(seconds)` while the account is backing off (an honest
    /// `Retry-After`, at least 1; the attempt is refused and not counted).
    /// Otherwise the attempt counts now, as a failure, until
    /// [`succeeded`](Self::succeeded) clears the account; the one that uses
    /// up the [`FREE_FAILURES`] starts the back-off. The check and the count
    /// are one step (under the map's lock, or one database transaction), so
    /// attempts in flight at once get no more than the free attempts
    /// between them: checking first and counting after the (slow) password
    /// check let every one of them through.
    /// An attempt from a browser the account knows (`device`, from
    /// [`Self::known_device`]) is counted under that browser's own key.
    pub(crate) async fn attempt(&self, email: &str, device: Option<&str>) -> Result<(), NotNow> {
        let Some(account) = counted_key(email, device) else {
            return Ok(());
        };
        if let Some(store) = &self.shared {
            // An attempt that could not be counted is not made: a busy
            // database (its writers' turns taken) must not switch the
            // account's back-off off, as the password check would still
            // be answered from a read.
            return match store
                .login_attempt(&account, self.clock.wall_ms(), millis(FORGET_AFTER), |n| {
                    millis(backoff_after(n))
                })
                .await
            {
                Ok(Err(secs)) => Err(NotNow::BackingOff(secs)),
                Ok(Ok(_)) => Ok(()),
                Err(e) => Err(NotNow::Uncounted(e)),
            };
        }
        let now = self.clock.now();
        let key = map_key(&account);
        let mut map = self.lock();
        if let Some(f) = map.get(&key)
            && f.until > now
        {
            let left = f.until - now;
            return Err(NotNow::BackingOff(
                left.as_secs() + u64::from(left.subsec_nanos() > 0),
            ));
        }
        if !map.contains_key(&key) && map.len() >= MAX_ACCOUNTS {
            map.retain(|_, f| now.saturating_duration_since(f.last) < FORGET_AFTER);
            // An account with its free attempts used (backing off, or done
            // waiting but not yet forgotten) is the last to go, and of those
            // the one with the fewest failures: filling the map with
            // throwaway emails must not hand a guessed account its free
            // attempts back.
            if map.len() >= MAX_ACCOUNTS
                && let Some(victim) = map
                    .iter()
                    .min_by_key(|(_, f)| (f.count >= FREE_FAILURES, f.count, f.last))
                    .map(|(k, _)| k.clone())
            {
                map.remove(&victim);
            }
        }
        let f = map.entry(key).or_insert(Failures {
            count: 0,
            last: now,
            until: now,
        });
        if now.saturating_duration_since(f.last) >= FORGET_AFTER {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        if f.count >= FREE_FAILURES {
            f.until = now + backoff_after(f.count);
        }
        Ok(())
    }

    /// A successful sign-in clears the count it was taken under: the
    /// account's, or the known browser's (`device`) — not the account's,
    /// which whoever failed elsewhere built.
    pub(crate) async fn succeeded(&self, email: &str, device: Option<&str>) {
        let Some(account) = counted_key(email, device) else {
            return;
        };
        if let Some(store) = &self.shared {
            let _ = store.login_succeeded(&account).await;
            return;
        }
        self.lock().remove(&map_key(&account));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seconds left, allowing for the real time the test takes.
    async fn left(b: &LoginBackoff, email: &str) -> u64 {
        match b.attempt(email, None).await {
            Err(NotNow::BackingOff(secs)) => secs,
            other => panic!("backing off: {other:?}"),
        }
    }

    /// An email no account can have (longer than 320 characters) is not
    /// kept: attempts with megabytes of throwaway emails cost nothing; a
    /// kept key has a fixed size.
    #[tokio::test]
    async fn an_overlong_email_is_not_kept_and_keys_are_fixed_size() {
        let b = LoginBackoff::new(Clock::default());
        let long = format!("{}@example.com", "a".repeat(100_000));
        for _ in 0..FREE_FAILURES + 2 {
            assert_eq!(b.attempt(&long, None).await, Ok(()));
        }
        assert_eq!(b.len(), 0);
        assert_eq!(
            b.attempt(&format!("{}@example.com", "b".repeat(300)), None)
                .await,
            Ok(())
        );
        assert_eq!(b.len(), 1);
        assert!(b.lock().keys().all(|k| k.len() == 64));
    }

    #[tokio::test]
    async fn backoff_doubles_caps_and_resets() {
        let clock = Clock::default();
        let b = LoginBackoff::new(clock.clone());
        doubles_caps_and_resets(&b, &clock).await;
    }

    /// Twenty attempts at once get the five free ones between them, in
    /// memory and in the database (`ZM_TEST_DATABASE_URL`, where two
    /// instances share the count; skipped without it).
    #[tokio::test]
    async fn attempts_at_once_get_only_the_free_ones() {
        let clock = Clock::default();
        let b = std::sync::Arc::new(LoginBackoff::new(clock.clone()));
        at_once(&[b.clone(), b], "memory").await;
        let Some(url) = zm_store::test_database_url() else {
            eprintln!("skipped the shared half: set ZM_TEST_DATABASE_URL");
            return;
        };
        let store = zm_store::Store::open(&url).await.unwrap();
        let one = std::sync::Arc::new(LoginBackoff::shared(store.clone(), clock.clone()));
        let two = std::sync::Arc::new(LoginBackoff::shared(store, clock));
        at_once(&[one, two], "shared").await;
    }

    /// Twenty attempts of one fresh account at once, spread over `backoffs`.
    async fn at_once(backoffs: &[std::sync::Arc<LoginBackoff>], what: &str) {
        let email = format!("{}@example.com", zm_contracts::IdKind::Request.generate());
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let (b, email) = (backoffs[i % backoffs.len()].clone(), email.clone());
                tokio::spawn(async move { b.attempt(&email, None).await })
            })
            .collect();
        let mut passed = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => passed += 1,
                // (An attempt that waited for another's row reads the
                // clock before the wait: its wait may be a second longer.)
                Err(NotNow::BackingOff(secs)) => {
                    assert!((1..=31).contains(&secs), "{what}: {secs}");
                }
                Err(e) => panic!("{what}: {e:?}"),
            }
        }
        assert_eq!(passed, FREE_FAILURES, "{what}");
    }

    /// The same policy when the back-off lives in the database
    /// (`ZM_TEST_DATABASE_URL`; skipped without it), and two back-offs on
    /// one database (two instances) share an account's count.
    #[tokio::test]
    async fn shared_backoff_doubles_caps_resets_and_is_shared() {
        let Some(url) = zm_store::test_database_url() else {
            eprintln!("skipped: set ZM_TEST_DATABASE_URL to run the shared back-off test");
            return;
        };
        let store = zm_store::Store::open(&url).await.unwrap();
        let clock = Clock::default();
        let b = LoginBackoff::shared(store.clone(), clock.clone());
        doubles_caps_and_resets(&b, &clock).await;
        let other = LoginBackoff::shared(store.clone(), clock.clone());
        let email = format!("{}@example.com", zm_contracts::IdKind::Request.generate());
        for i in 0..FREE_FAILURES {
            let on = if i % 2 == 0 { &b } else { &other };
            assert_eq!(on.attempt(&email, None).await, Ok(()));
        }
        assert!(b.attempt(&email, None).await.is_err());
        assert!(
            other.attempt(&email, None).await.is_err(),
            "the other instance sees it"
        );
        other.succeeded(&email, None).await;
        assert_eq!(b.attempt(&email, None).await, Ok(()));
        a_known_browser_is_counted_apart(&b, &store, &clock).await;
        // An attempt the database cannot count is not made: let through
        // uncounted, a busy database would switch the back-off off.
        store.close().await;
        assert!(
            matches!(b.attempt(&email, None).await, Err(NotNow::Uncounted(_))),
            "an uncounted attempt is refused"
        );
    }

    #[tokio::test]
    async fn a_known_browser_is_counted_apart_in_memory() {
        let (_dir, store) = crate::testing::sqlite_store().await;
        let clock = Clock::default();
        a_known_browser_is_counted_apart(&LoginBackoff::new(clock.clone()), &store, &clock).await;
    }

    /// Whoever guesses an account's password elsewhere does not lock out
    /// the browser that last signed in to it: that browser has its own
    /// count (the same back-off), and its success clears only that. A
    /// cookie made for another account, under another key, for another
    /// time, altered, too old, or made before the password changed makes
    /// no browser known.
    async fn a_known_browser_is_counted_apart(
        b: &LoginBackoff,
        store: &zm_store::Store,
        clock: &Clock,
    ) {
        let key = [7u8; 32];
        let tag = zm_contracts::IdKind::Request.generate().to_lowercase();
        let a = format!("d-{tag}@example.com");
        let password = "correct horse battery staple";
        let user = store.create_user(&a, password).await.unwrap();
        let scope = CookieScope::of("http://127.0.0.1:8787", "");
        let sent = |set: &str| {
            let mut h = HeaderMap::new();
            let pair = set.split(';').next().unwrap_or_default();
            h.insert(axum::http::header::COOKIE, pair.parse().unwrap());
            h
        };
        let set = b.device_cookie(&key, &user, &a, &scope).expect("a cookie");
        assert!(
            set.starts_with("zm_device=")
                && set.contains("HttpOnly")
                && set.contains("SameSite=Strict"),
            "{set}"
        );
        let owner = sent(&set);
        let known = async |email: &str, key: &[u8], h: &HeaderMap| {
            b.known_device(store, key, email, h, &scope).await
        };
        let device = known(&a, &key, &owner).await.expect("the browser is known");
        assert_eq!(
            known(&a.to_uppercase(), &key, &owner).await,
            Some(device.clone()),
            "the account's key"
        );
        for _ in 0..FREE_FAILURES {
            assert_eq!(b.attempt(&a, None).await, Ok(()));
        }
        assert!(
            b.attempt(&a, None).await.is_err(),
            "locked for everyone else"
        );
        assert_eq!(
            b.attempt(&a, Some(&device)).await,
            Ok(()),
            "the owner's browser gets in"
        );
        b.succeeded(&a, Some(&device)).await;
        assert!(
            b.attempt(&a, None).await.is_err(),
            "its success clears only its own count"
        );
        for _ in 0..FREE_FAILURES {
            assert_eq!(b.attempt(&a, Some(&device)).await, Ok(()));
        }
        assert!(
            b.attempt(&a, Some(&device)).await.is_err(),
            "a known browser backs off too"
        );

        let other = format!("e-{tag}@example.com");
        store.create_user(&other, password).await.unwrap();
        assert_eq!(
            known(&other, &key, &owner).await,
            None,
            "made for another account"
        );
        assert_eq!(
            known(&a, &[8u8; 32], &owner).await,
            None,
            "made under another key"
        );
        let pair = set.split(';').next().unwrap_or_default();
        let (issued, mac) = pair
            .trim_start_matches("zm_device=")
            .split_once('.')
            .expect("issued.tag");
        // One character of the MAC changed (its first: all six bits count).
        let flipped = if mac.starts_with('A') { "B" } else { "A" };
        let altered = format!("zm_device={issued}.{flipped}{}", &mac[1..]);
        assert_eq!(known(&a, &key, &sent(&altered)).await, None, "altered");
        let later = format!("zm_device={}.{mac}", issued.parse::<i64>().unwrap() + 1);
        assert_eq!(
            known(&a, &key, &sent(&later)).await,
            None,
            "another issue time"
        );
        assert_eq!(known(&a, &key, &HeaderMap::new()).await, None, "no cookie");
        // A new password voids every cookie made before it.
        store
            .change_password(&user.id, "a brand new passphrase", false)
            .await
            .unwrap();
        assert_eq!(
            known(&a, &key, &owner).await,
            None,
            "made before the password changed"
        );
        let changed = store.user_by_email(&a).await.unwrap().unwrap();
        let renewed = sent(&b.device_cookie(&key, &changed, &a, &scope).unwrap());
        assert!(
            known(&a, &key, &renewed).await.is_some(),
            "a sign-in since makes it known again"
        );
        clock.advance(DEVICE_TTL + Duration::from_secs(60));
        assert_eq!(known(&a, &key, &renewed).await, None, "too old");
    }

    async fn doubles_caps_and_resets(b: &LoginBackoff, clock: &Clock) {
        let tag = zm_contracts::IdKind::Request.generate();
        let a = format!("a-{tag}@example.com");
        let a_upper = format!("A-{tag}@Example.com");
        let a_spaced = format!(" a-{tag}@example.com ");
        let other = format!("b-{tag}@example.com");
        let first = FIRST_BACKOFF.as_secs();
        for _ in 0..FREE_FAILURES - 1 {
            assert_eq!(b.attempt(&a_upper, None).await, Ok(()));
        }
        // The last free attempt passes, and starts the back-off.
        assert_eq!(b.attempt(&a_spaced, None).await, Ok(()));
        let l = left(b, &a).await;
        assert!((first - 1..=first).contains(&l), "{l}");
        clock.advance(Duration::from_secs(first));
        assert_eq!(b.attempt(&a, None).await, Ok(()));
        let l = left(b, &a).await;
        assert!((2 * first - 1..=2 * first).contains(&l), "{l}");
        clock.advance(Duration::from_secs(l));
        assert_eq!(b.attempt(&a, None).await, Ok(()));
        let l = left(b, &a).await;
        assert!((4 * first - 1..=4 * first).contains(&l), "{l}");
        // Capped, however many failures.
        for _ in 0..30 {
            clock.advance(MAX_BACKOFF);
            assert_eq!(b.attempt(&a, None).await, Ok(()));
        }
        let l = left(b, &a).await;
        assert!((MAX_BACKOFF.as_secs() - 1..=MAX_BACKOFF.as_secs()).contains(&l));
        // Other accounts are untouched; after the cap the owner gets in,
        // and signing in clears the count.
        assert_eq!(b.attempt(&other, None).await, Ok(()));
        clock.advance(MAX_BACKOFF);
        assert_eq!(b.attempt(&a, None).await, Ok(()));
        b.succeeded(&a, None).await;
        for _ in 0..FREE_FAILURES {
            assert_eq!(b.attempt(&a, None).await, Ok(()));
        }
        assert!(b.attempt(&a, None).await.is_err());
    }

    #[tokio::test]
    async fn backoff_is_bounded() {
        let b = LoginBackoff::new(Clock::default());
        for i in 0..MAX_ACCOUNTS + 50 {
            assert_eq!(b.attempt(&format!("u{i}@example.com"), None).await, Ok(()));
        }
        assert_eq!(b.len(), MAX_ACCOUNTS);
    }

    /// Filling the map with throwaway emails does not give a guessed
    /// account its free attempts back: an account backing off is kept while
    /// any account that is not can go.
    #[tokio::test]
    async fn eviction_keeps_an_account_that_is_backing_off() {
        let b = LoginBackoff::new(Clock::default());
        let target = "owner@example.com";
        for _ in 0..FREE_FAILURES {
            assert_eq!(b.attempt(target, None).await, Ok(()));
        }
        assert!(b.attempt(target, None).await.is_err(), "backing off");
        for i in 0..MAX_ACCOUNTS + 50 {
            assert_eq!(b.attempt(&format!("u{i}@example.com"), None).await, Ok(()));
        }
        assert_eq!(b.len(), MAX_ACCOUNTS);
        assert!(
            b.attempt(target, None).await.is_err(),
            "still backing off after the map filled up"
        );
        // Its wait over, a new flood still leaves its count: the next
        // failure waits again, longer.
        b.clock.advance(MAX_BACKOFF);
        assert_eq!(
            b.attempt(target, None).await,
            Ok(()),
            "one attempt after the wait"
        );
        for i in 0..MAX_ACCOUNTS + 50 {
            assert_eq!(b.attempt(&format!("v{i}@example.com"), None).await, Ok(()));
        }
        assert!(b.attempt(target, None).await.is_err(), "the count was kept");
    }
}
