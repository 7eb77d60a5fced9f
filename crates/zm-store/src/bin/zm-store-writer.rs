//! A stress writer: a second OS process hammering the same store.
//!
//! `zm-store-writer <database-url> <user-email> <count> <tag>` opens the
//! store, finds or creates the user, then performs `count` sequential
//! `remember`s into the user's personal scope. Each acknowledged memory id
//! is printed on its own line (and flushed) only after the call returned
//! `Ok`, so every id on stdout is a write the store acknowledged. Used by
//! the concurrency and crash tests of this crate.
//!
//! Exit status: 0 when every write was acknowledged; 1 on any error (the
//! error goes to stderr).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use zm_contracts::RememberInput;
use zm_contracts::catalogue::tool;
use zm_store::{Caller, Store, ToolService};

const USAGE: &str = "usage: zm-store-writer <database-url> <user-email> <count> <tag>";

/// The password a user created by this tool gets.
const PASSWORD: &str = "zm-store-writer password";

/// Words the contents are drawn from, so that full-text and similarity work
/// on something that looks like text.
const WORDS: &[&str] = &[
    "postgres",
    "index",
    "migration",
    "deploy",
    "cache",
    "queue",
    "retry",
    "timeout",
    "schema",
    "token",
    "session",
    "latency",
    "rollback",
    "replica",
    "vacuum",
    "backup",
    "release",
    "branch",
    "review",
    "config",
    "secret",
    "rotation",
    "worker",
    "cron",
    "webhook",
    "payload",
    "parser",
    "tracing",
    "metrics",
    "alert",
    "budget",
    "shard",
];

/// `<tag> write <i>: <a few words chosen from i>`; distinct for every `i`.
fn content(tag: &str, i: u64) -> String {
    let n = WORDS.len() as u64;
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D;
    let mut words = Vec::with_capacity(6);
    for _ in 0..(3 + i % 4) {
        words.push(WORDS[usize::try_from(x % n).expect("below n, a usize")]);
        x = x.rotate_left(17).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ (x >> 29);
    }
    format!("{tag} write {i}: {}", words.join(" "))
}

/// Find the user, or create it. Two processes may race to create the same
/// user: the loser's create fails (a conflict, or a unique-constraint error
/// on PostgreSQL), so after a failed create the lookup is retried.
async fn find_or_create_user(store: &Store, email: &str) -> Result<String, String> {
    let mut last_err = String::new();
    for attempt in 0..20u64 {
        let lookup = match store.user_by_email(email).await {
            Ok(Some(u)) => return Ok(u.id),
            Ok(None) => String::new(),
            Err(e) => format!("user lookup: {e}; "),
        };
        match store.create_user(email, PASSWORD).await {
            Ok(u) => return Ok(u.id),
            Err(e) => last_err = format!("{lookup}create user: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20 * (attempt + 1))).await;
    }
    Err(format!(
        "could not find or create the user {email}: {last_err}"
    ))
}

async fn run(args: &[String]) -> Result<(), String> {
    let [url, email, count, tag] = args else {
        return Err(USAGE.to_string());
    };
    let count: u64 = count
        .parse()
        .map_err(|_| format!("count must be a non-negative integer, got {count:?}\n{USAGE}"))?;
    let store = Store::open(url)
        .await
        .map_err(|e| format!("cannot open the store: {e}"))?;
    let user_id = find_or_create_user(&store, email).await?;
    let caller = Caller::new(user_id);
    let tools = ToolService::new(store.clone());
    let stdout = std::io::stdout();
    for i in 0..count {
        let raw = json!({ "content": content(tag, i), "scope": "personal" });
        let input = zm_contracts::parse_input::<RememberInput>(&raw)
            .map_err(|e| format!("write {i}: invalid input: {e}"))?;
        let out = tools
            .run::<tool::Remember>(&caller, input)
            .await
            .map_err(|e| format!("write {i}: remember failed: {e}"))?;
        // Acknowledged: only now does the id reach stdout.
        let mut lock = stdout.lock();
        writeln!(lock, "{}", out.memory_id.as_str())
            .and_then(|()| lock.flush())
            .map_err(|e| format!("write {i}: cannot write to stdout: {e}"))?;
    }
    store.close().await;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zm-store-writer: {e}");
            ExitCode::FAILURE
        }
    }
}
