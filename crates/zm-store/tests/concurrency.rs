//! Concurrency and crash safety of the store.
//!
//! * Many writers at once — tokio tasks in this process plus a second OS
//!   process (the `zm-store-writer` binary) on the same database — lose no
//!   acknowledged write and duplicate none.
//! * A writer killed with SIGKILL mid-stream leaves a database that opens,
//!   passes `PRAGMA integrity_check`, and holds every write it acknowledged.
//!
//! SQLite always; PostgreSQL too when `ZM_TEST_DATABASE_URL` is set (that
//! database is shared with other tests, so users get unique emails and only
//! the test user's own memories are counted).
//!
//! Nothing here depends on wall-clock speed: there are no timing assertions.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;

use rand::Rng;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use zm_contracts::{ExportMemoriesInput, MemoryId, RememberInput};
use zm_store::{Caller, OpenOptions, Store};

const WRITER: &str = env!("CARGO_BIN_EXE_zm-store-writer");
const PG_ENV: &str = "ZM_TEST_DATABASE_URL";
const PASSWORD: &str = "correct horse battery staple";

/// In-process writer tasks.
const TASKS: usize = 8;
/// Writes per task and writes of the child process: SQLite (a fresh file).
const SQLITE_WRITES: usize = 500;
/// The same on PostgreSQL: half, because that database is shared with every
/// other test run and keeps growing, and each write's near-duplicate probe
/// grows with it.
const PG_WRITES: usize = 250;

fn unique(tag: &str) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let suffix: String = (0..12)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{tag}{suffix}")
}

fn unique_email(tag: &str) -> String {
    format!("{}@test.zero-memory.invalid", unique(&format!("{tag}-")))
}

/// A fresh directory for a SQLite file, inside cargo's scratch directory
/// for integration tests (kept by the caller for the test's duration).
fn scratch_dir() -> tempfile::TempDir {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("zm-store-concurrency");
    std::fs::create_dir_all(&root).expect("create the scratch directory");
    tempfile::Builder::new()
        .prefix("conc-")
        .tempdir_in(root)
        .expect("create a temporary directory")
}

/// The content of in-process write `i` of task `t` (distinct for every
/// `(t, i)` and from every content the child writes).
fn task_content(t: usize, i: usize) -> String {
    const WORDS: &[&str] = &[
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
    ];
    let a = WORDS[(t * 7 + i) % WORDS.len()];
    let b = WORDS[(i * 3 + 1) % WORDS.len()];
    let c = WORDS[(t + i * 5 + 2) % WORDS.len()];
    format!("task{t} write {i}: {a} {b} {c} service note")
}

async fn remember(store: &Store, caller: &Caller, content: &str) -> String {
    let raw = json!({ "content": content, "scope": "personal" });
    let input = zm_contracts::parse_input::<RememberInput>(&raw)
        .unwrap_or_else(|e| panic!("test input {raw} does not validate: {e}"));
    let started = std::time::Instant::now();
    let out = zm_store::ToolService::new(store.clone())
        .run::<zm_contracts::catalogue::tool::Remember>(caller, input)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "remember {content:?} failed after {:.1} s: {e}",
                started.elapsed().as_secs_f64()
            )
        });
    assert_ne!(
        out.deduplicated,
        Some(true),
        "a distinct content was deduplicated: {content:?}"
    );
    out.memory_id.as_str().to_string()
}

/// Every memory in the caller's personal scope: id → content, every page
/// of the export (it pages: `next_cursor` until there is none).
async fn personal_memories(store: &Store, caller: &Caller, label: &str) -> Vec<(String, String)> {
    let mut input =
        zm_contracts::parse_input::<ExportMemoriesInput>(&json!({ "scopes": ["personal"] }))
            .expect("export input validates");
    let service = zm_store::ToolService::new(store.clone());
    let mut all = Vec::new();
    loop {
        let out = service
            .run::<zm_contracts::catalogue::tool::ExportMemories>(caller, input.clone())
            .await
            .unwrap_or_else(|e| panic!("[{label}] export failed: {e}"));
        assert_eq!(
            usize::try_from(out.count).ok(),
            Some(out.items.len()),
            "[{label}] export count"
        );
        all.extend(
            out.items
                .into_iter()
                .map(|m| (m.id.as_str().to_string(), m.content)),
        );
        match out.next_cursor {
            Some(next) => input.cursor = Some(next),
            None => return all,
        }
    }
}

/// Assert that the store holds exactly the acknowledged writes: each id
/// readable with the content it was written with, each content exactly
/// once, and nothing else in the user's personal scope.
async fn assert_exactly_once(
    store: &Store,
    caller: &Caller,
    label: &str,
    expected: &HashMap<String, Option<String>>,
) {
    for (id, content) in expected {
        let m = store
            .get_memory(caller, &MemoryId::parse(id).expect("a memory id"))
            .await
            .unwrap_or_else(|e| panic!("[{label}] acknowledged memory {id} is not readable: {e}"));
        if let Some(content) = content {
            assert_eq!(&m.content, content, "[{label}] content of {id}");
        }
    }
    let stored = personal_memories(store, caller, label).await;
    let mut ids = HashSet::new();
    let mut contents = HashSet::new();
    for (id, content) in &stored {
        assert!(ids.insert(id.clone()), "[{label}] memory {id} listed twice");
        assert!(
            contents.insert(content.clone()),
            "[{label}] content stored twice: {content:?}"
        );
        assert!(
            expected.contains_key(id),
            "[{label}] unexpected memory {id}: {content:?}"
        );
    }
    assert_eq!(
        stored.len(),
        expected.len(),
        "[{label}] stored memories vs acknowledged writes"
    );
}

/// 8 tasks × `writes` writes in this process while the child process writes
/// `writes` more to the same database; every acknowledged write is there
/// exactly once.
async fn concurrent_writers(url: &str, label: &str, writes: usize) {
    let (per_task, child_writes) = (writes, writes);
    let mut opts = OpenOptions::new(url);
    opts.max_connections = u32::try_from(TASKS).unwrap();
    let store = Store::open_with(opts)
        .await
        .unwrap_or_else(|e| panic!("[{label}] open: {e}"));
    let email = unique_email("conc");
    let user = store
        .create_user(&email, PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("[{label}] create user: {e}"));
    let caller = Caller::new(user.id.clone());
    let started = std::time::Instant::now();

    // The second process, reading its acknowledgements as they come.
    let mut child = tokio::process::Command::new(WRITER)
        .args([url, &email, &child_writes.to_string(), "child"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the writer process");
    let stdout = child.stdout.take().expect("child stdout");
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut ids = Vec::new();
        while let Some(line) = lines.next_line().await.expect("read the child's stdout") {
            ids.push(line);
        }
        ids
    });

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        let caller = caller.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(per_task);
            let mut slowest = std::time::Duration::ZERO;
            for i in 0..per_task {
                let content = task_content(t, i);
                let started = std::time::Instant::now();
                let id = remember(&store, &caller, &content).await;
                slowest = slowest.max(started.elapsed());
                out.push((id, content));
            }
            (out, slowest)
        }));
    }
    let mut expected: HashMap<String, Option<String>> = HashMap::new();
    let mut slowest = std::time::Duration::ZERO;
    for task in tasks {
        let (acked, task_slowest) = task.await.expect("a writer task panicked");
        slowest = slowest.max(task_slowest);
        for (id, content) in acked {
            assert!(
                expected.insert(id.clone(), Some(content)).is_none(),
                "[{label}] id {id} acknowledged twice"
            );
        }
    }
    let output = child.wait_with_output().await.expect("wait for the writer");
    let child_ids = reader.await.expect("the stdout reader panicked");
    assert!(
        output.status.success(),
        "[{label}] the writer process failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        child_ids.len(),
        child_writes,
        "[{label}] child acknowledgements"
    );
    for id in child_ids {
        assert!(
            expected.insert(id.clone(), None).is_none(),
            "[{label}] id {id} acknowledged twice"
        );
    }
    assert_eq!(expected.len(), TASKS * per_task + child_writes);
    let written = started.elapsed();

    assert_exactly_once(&store, &caller, label, &expected).await;
    // The child's contents follow its pattern and are all there.
    let stored = personal_memories(&store, &caller, label).await;
    let child_contents = stored
        .iter()
        .filter(|(_, c)| c.starts_with("child write "))
        .count();
    assert_eq!(
        child_contents, child_writes,
        "[{label}] the child's memories"
    );
    assert!(
        store.integrity_check().await.expect("integrity check"),
        "[{label}] integrity check"
    );
    eprintln!(
        "[{label}] {} acknowledged writes ({TASKS} tasks × {per_task} + {child_writes} from a second process) in {:.1} s (slowest in-process write {:.0} ms); verified in {:.1} s",
        expected.len(),
        written.as_secs_f64(),
        slowest.as_secs_f64() * 1000.0,
        (started.elapsed() - written).as_secs_f64()
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_sqlite() {
    let dir = scratch_dir();
    let url = zm_store::sqlite_url(&dir.path().join("zm.db"));
    concurrent_writers(&url, "sqlite", SQLITE_WRITES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_postgres() {
    let Some(url) = zm_store::test_database_url() else {
        eprintln!("{PG_ENV} is not set: skipping the PostgreSQL concurrent-writers test");
        return;
    };
    concurrent_writers(&url, "postgres", PG_WRITES).await;
}

/// Read one complete line (ending in `\n`) from the child; `None` at end of
/// stream or for a partial last line.
fn read_ack(reader: &mut impl std::io::BufRead) -> Option<String> {
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) if line.ends_with('\n') => Some(line.trim_end().to_string()),
        Ok(_) => None,
    }
}

/// SIGKILL a writer mid-stream: the database opens, is consistent, and
/// holds every write the writer acknowledged.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_write_loses_no_acknowledged_write() {
    use std::io::BufReader;
    use std::os::unix::process::ExitStatusExt;

    const KILL_AFTER: usize = 200;
    let dir = scratch_dir();
    let path = dir.path().join("zm.db");
    let url = zm_store::sqlite_url(&path);
    let email = unique_email("kill");

    // The writer creates the database and the user itself; far more writes
    // than it gets to do.
    let mut child = std::process::Command::new(WRITER)
        .args([url.as_str(), email.as_str(), "1000000", "doomed"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the writer process");
    let mut reader = BufReader::new(child.stdout.take().expect("child stdout"));
    let mut acked: Vec<String> = Vec::new();
    while acked.len() < KILL_AFTER {
        match read_ack(&mut reader) {
            Some(id) => acked.push(id),
            None => {
                let status = child.wait().expect("wait for the writer");
                panic!(
                    "the writer stopped after {} acknowledgements ({status})",
                    acked.len()
                );
            }
        }
    }
    child.kill().expect("SIGKILL the writer");
    let status = child.wait().expect("reap the writer");
    assert_eq!(
        status.signal(),
        Some(9),
        "the writer was killed by SIGKILL ({status})"
    );
    // Lines already in the pipe were acknowledged before the kill too.
    while let Some(id) = read_ack(&mut reader) {
        acked.push(id);
    }

    let store = Store::open(&url)
        .await
        .expect("the database opens after the writer was killed");
    assert!(
        store.integrity_check().await.expect("integrity check"),
        "PRAGMA integrity_check after SIGKILL"
    );
    let user = store
        .user_by_email(&email)
        .await
        .expect("user lookup")
        .expect("the writer's user exists");
    let caller = Caller::new(user.id);
    let mut ids = HashSet::new();
    for id in &acked {
        assert!(ids.insert(id.clone()), "id {id} acknowledged twice");
        let m = store
            .get_memory(&caller, &MemoryId::parse(id).expect("a memory id"))
            .await
            .unwrap_or_else(|e| panic!("acknowledged memory {id} lost after SIGKILL: {e}"));
        assert!(m.content.starts_with("doomed write "), "{}", m.content);
    }
    // Sequential writes: at most one write committed whose acknowledgement
    // had not been printed yet when the process died.
    let stored = personal_memories(&store, &caller, "sqlite").await;
    assert!(
        stored.len() == acked.len() || stored.len() == acked.len() + 1,
        "{} memories stored, {} acknowledged",
        stored.len(),
        acked.len()
    );
    let contents: HashSet<&String> = stored.iter().map(|(_, c)| c).collect();
    assert_eq!(contents.len(), stored.len(), "a content was stored twice");
    eprintln!(
        "[sqlite] SIGKILL after {} acknowledged writes: reopened, integrity ok, {} stored",
        acked.len(),
        stored.len()
    );
    store.close().await;
}
