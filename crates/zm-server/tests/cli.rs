//! The `zero-memory` binary, end to end: every subcommand run as a child
//! process on a temporary data directory (`serve` on an ephemeral loopback
//! port, stopped once it says it is serving).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The binary with a clean environment: no `ZM_*` variable of the caller
/// leaks in (ZM_DATABASE_URL above all).
fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zero-memory"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ZM_") {
            c.env_remove(k);
        }
    }
    c.env("ZM_LOG", "warn");
    c
}

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.arg("--data-dir").arg(self.data_dir()).args(args);
        c.current_dir(self.dir.path());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn run_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Run, assert success, return stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_success(&out, args);
        String::from_utf8(out.stdout).unwrap()
    }
}

fn assert_success(out: &Output, what: &[&str]) {
    assert!(
        out.status.success(),
        "{what:?} failed with {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(name)
}

#[test]
fn version() {
    let out = bin().arg("--version").output().unwrap();
    assert_success(&out, &["--version"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.trim(),
        format!(
            "zero-memory {} (contract {})",
            env!("CARGO_PKG_VERSION"),
            zm_contracts::CONTRACT_VERSION
        )
    );
}

#[test]
fn help_documents_every_knob() {
    let out = bin().args(["serve", "--help"]).output().unwrap();
    assert_success(&out, &["serve", "--help"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for k in zm_server::config::KNOBS {
        if k.test_only {
            assert!(
                !text.contains(k.flag),
                "--help shows the test-only {}",
                k.flag
            );
            continue;
        }
        assert!(text.contains(k.flag), "--help lacks {}", k.flag);
        assert!(text.contains(k.env), "--help lacks {}", k.env);
    }
}

fn help(args: &[&str]) -> String {
    let mut full = args.to_vec();
    full.push("--help");
    let out = bin().args(&full).output().unwrap();
    assert_success(&out, &full);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn each_command_help_shows_only_the_options_it_uses() {
    let server_only = [
        "--listen",
        "--public-url",
        "--body-limit-bytes",
        "--owner-email",
    ];
    for cmd in [
        &["user", "add"][..],
        &["token", "list"],
        &["migrate"],
        &["export"],
    ] {
        let text = help(cmd);
        for flag in server_only.iter().chain(&["--capped-clients"]) {
            assert!(!text.contains(flag), "{cmd:?} --help shows {flag}:\n{text}");
        }
        // The database and logging options are every command's.
        for flag in [
            "--data-dir",
            "ZM_DATA_DIR",
            "--database-url",
            "--log",
            "--config",
        ] {
            assert!(text.contains(flag), "{cmd:?} --help lacks {flag}:\n{text}");
        }
    }
    let serve = help(&["serve"]);
    for flag in server_only
        .iter()
        .chain(&["--capped-clients", "--data-dir"])
    {
        assert!(serve.contains(flag), "serve --help lacks {flag}:\n{serve}");
    }
    let stdio = help(&["stdio"]);
    assert!(stdio.contains("--capped-clients") && stdio.contains("ZM_CAPPED_CLIENTS"));
    assert!(!stdio.contains("--listen"), "{stdio}");
    let top = help(&[]);
    assert!(!top.contains("--listen"), "{top}");
    assert!(top.contains("--data-dir"), "{top}");
}

/// Run, and kill it if it has not exited within `secs` (a server that
/// should have refused to start).
fn output_within(mut cmd: Command, secs: u64) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {secs} s: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_bad_flag_value_is_a_usage_error_naming_the_flag() {
    let env = Env::new();
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--body-limit-bytes",
                "abc",
            ],
            "--body-limit-bytes",
            "whole number",
        ),
        (
            &["serve", "--listen", "127.0.0.1:0", "--max-sessions", "0"],
            "--max-sessions",
            "out of range",
        ),
        (
            &["config", "check", "--listen", "nowhere"],
            "--listen",
            "IP address",
        ),
        (
            &["config", "check", "--trust-proxy=maybe"],
            "--trust-proxy",
            "boolean",
        ),
    ];
    for (args, flag, why) in cases {
        let out = output_within(env.cmd(args), 20);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(flag) && err.contains(why), "{args:?}: {err}");
    }
    // An option the command does not use: after the command name, and before it.
    for args in [
        &["user", "list", "--listen", "127.0.0.1:9"][..],
        &["--listen", "127.0.0.1:9", "user", "list"],
        &["--capped-clients", "none", "migrate"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let flag = args.iter().find(|a| a.starts_with("--")).unwrap();
        assert!(stderr(&out).contains(flag), "{args:?}: {}", stderr(&out));
    }
}

/// One knob through every layer: default, then file, env and flag on top.
#[test]
fn config_check_reports_the_winning_layer_of_a_knob() {
    let env = Env::new();
    let toml = env.dir.path().join("zm.toml");
    std::fs::write(&toml, "max_sessions = 5\n").unwrap();
    let toml = toml.to_str().unwrap();
    let row = |args: &[&str], var: Option<&str>| {
        let mut cmd = env.cmd(args);
        if let Some(v) = var {
            cmd.env("ZM_MAX_SESSIONS", v);
        }
        let out = cmd.output().unwrap();
        assert_success(&out, args);
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .find(|l| l.starts_with("ZM_MAX_SESSIONS "))
            .unwrap_or_else(|| panic!("no row in\n{text}"))
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(row(&["config", "check"], None), "200 default");
    assert_eq!(
        row(&["--config", toml, "config", "check"], None),
        format!("5 file {toml} (key max_sessions)")
    );
    assert_eq!(
        row(&["--config", toml, "config", "check"], Some("17")),
        "17 env ZM_MAX_SESSIONS"
    );
    assert_eq!(
        row(
            &["--config", toml, "config", "check", "--max-sessions", "3"],
            Some("17")
        ),
        "3 flag --max-sessions"
    );
    // Before the command name too.
    assert_eq!(
        row(
            &["--config", toml, "--max-sessions", "4", "config", "check"],
            Some("17")
        ),
        "4 flag --max-sessions"
    );
    // An empty variable counts as not set: the file wins.
    assert_eq!(
        row(&["--config", toml, "config", "check"], Some("")),
        format!("5 file {toml} (key max_sessions)")
    );
}

#[test]
fn usage_error_exits_2() {
    let out = bin().arg("no-such-command").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A command that reads or changes an existing database refuses a data
/// directory that holds none (a mistyped `--data-dir`, root's home under
/// `sudo`) instead of creating an empty database and reporting on it.
#[test]
fn commands_other_than_serve_migrate_and_user_add_need_an_existing_database() {
    let env = Env::new();
    for args in [
        &["user", "list"][..],
        &["token", "list", "--user", "a@example.com"],
        &["team", "list"],
        &["export", "--user", "a@example.com", "--out", "x.jsonl"],
        &["oauth", "clients", "--user", "a@example.com"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("no database at"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(
            !env.data_dir().join("zero-memory.db").exists(),
            "{args:?} created no database"
        );
    }
    let out = env.run_stdin(
        &["user", "add", "a@example.com", "--password-stdin"],
        "a long password\n",
    );
    assert_success(&out, &["user", "add"]);
    assert!(env.ok(&["user", "list"]).contains("a@example.com"));
}

/// `command` run by `script` on a pseudo-terminal of its own (whose
/// output holds whatever the terminal echoes), without the `ZM_*`
/// variables of the tests' environment; what it writes comes in on the
/// receiver.
#[cfg(target_os = "linux")]
fn on_a_terminal(command: &str) -> (std::process::Child, mpsc::Receiver<Vec<u8>>) {
    use std::io::Read;
    let mut cmd = Command::new("script");
    cmd.args(["-qec", command, "/dev/null"])
        .env("ZM_LOG", "warn");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ZM_") && k != "ZM_LOG" {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs the command on a terminal");
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Read from `rx` into `seen` until it holds `what` (or, for a `what`
/// never written, to the end of the output).
#[cfg(target_os = "linux")]
fn read_until(rx: &mpsc::Receiver<Vec<u8>>, seen: &mut Vec<u8>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(seen).contains(what) {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| {
                panic!("no {what:?} within 60 s: {}", String::from_utf8_lossy(seen))
            });
        match rx.recv_timeout(left) {
            Ok(bytes) => seen.extend(bytes),
            Err(_) => break,
        }
    }
}

/// `user passwd --password-stdin` of a new user, run on a terminal as
/// `shell` says (its `{}` is the command), with `keys` typed once the
/// prompt shows: its exit status and everything the terminal showed.
#[cfg(target_os = "linux")]
fn at_the_password_prompt(shell: &str, keys: &[u8]) -> (std::process::ExitStatus, String) {
    let env = Env::new();
    env.ok(&["user", "add", "a@example.com"]);
    let passwd = format!(
        "{} --data-dir {} user passwd a@example.com --password-stdin",
        env!("CARGO_BIN_EXE_zero-memory"),
        env.data_dir().display()
    );
    let (mut child, rx) = on_a_terminal(&shell.replace("{}", &passwd));
    let mut seen = Vec::new();
    read_until(&rx, &mut seen, "Password: ");
    let stdin = child.stdin.as_mut().unwrap();
    stdin.write_all(keys).unwrap();
    stdin.flush().unwrap();
    let status = child.wait().unwrap();
    // Everything it wrote, to the end (the reader's channel closes).
    read_until(&rx, &mut seen, "\u{0}never");
    (status, String::from_utf8_lossy(&seen).to_string())
}

/// `--password-stdin` typed at a terminal is not shown: echo is off while
/// the line is read. The password is written only once the prompt shows,
/// so echo is already off for it.
#[cfg(target_os = "linux")]
#[test]
fn a_password_typed_at_a_terminal_is_not_echoed() {
    let (status, shown) = at_the_password_prompt("{}", b"typed-at-the-terminal-42\n");
    assert!(status.success(), "{shown}");
    assert!(
        !shown.contains("typed-at-the-terminal-42"),
        "the password was echoed: {shown:?}"
    );
}

/// Ctrl-C at the password's prompt interrupts what the terminal runs in
/// the foreground, as the terminal would: the script that ran the command
/// stops, and so does the shell whose job it was (`set -m`: bash ends
/// when its job was interrupted), neither going on; the latter's exit trap
/// finds the terminal's echo back on (`stty -a` says `echo`, not
/// `-echo`).
#[cfg(target_os = "linux")]
#[test]
fn ctrl_c_at_the_password_prompt_leaves_echo_on() {
    let (_, shown) = at_the_password_prompt(
        "bash -c 'set -m; trap \"echo trapped; stty -a\" EXIT; bash -c \"{}; echo went-on-after\"; echo went-on-next'",
        b"\x03",
    );
    assert!(shown.contains("trapped"), "{shown}");
    assert!(!shown.contains("went-on"), "the scripts went on: {shown}");
    let words: Vec<&str> = shown.split_whitespace().collect();
    assert!(
        words.contains(&"echo") && !words.contains(&"-echo"),
        "echo left off: {shown}"
    );
}

/// A misspelt `ZM_*` variable is named, on `config check` and as a
/// warning on any other command, with the knob it most likely meant.
#[test]
fn an_unknown_zm_variable_is_named() {
    let env = Env::new();
    let out = env
        .cmd(&["config", "check"])
        .env("ZM_PUBLIC_ULR", "https://memory.example.com")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("ZM_PUBLIC_ULR is not a zero-memory setting and is ignored (did you mean ZM_PUBLIC_URL?)"),
        "{text}"
    );
    let out = env.cmd(&["migrate"]).env("ZM_LISTN", "x").output().unwrap();
    assert_success(&out, &["migrate"]);
    assert!(
        stderr(&out).contains("ZM_LISTN is not a zero-memory setting"),
        "{}",
        stderr(&out)
    );
}

/// A model directory that holds the right files but does not load (here,
/// not a model at all) fails `config check`, which loads it.
#[cfg(feature = "embed")]
#[test]
fn config_check_loads_the_model_directory() {
    let env = Env::new();
    let dir = env.dir.path().join("model");
    std::fs::create_dir(&dir).unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::write(dir.join(f), "not a model").unwrap();
    }
    let out = env
        .cmd(&[
            "config",
            "check",
            "--recall-mode",
            "hybrid",
            "--embedding-model",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not load"), "{}", stderr(&out));
}

/// A database that cannot be opened says why, at once: a file that is no
/// database, a PostgreSQL server that refuses the connection (the pool
/// retried both for 30 s and then said only that it timed out).
#[test]
fn a_database_that_cannot_be_opened_says_why() {
    let env = Env::new();
    std::fs::create_dir_all(env.data_dir()).unwrap();
    std::fs::write(
        env.data_dir().join("zero-memory.db"),
        "not a database, just text ".repeat(100),
    )
    .unwrap();
    let out = env.run(&["user", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a database"), "{}", stderr(&out));
    let out = bin()
        .args(["user", "list"])
        .env("ZM_DATABASE_URL", "postgres://zm@127.0.0.1:1/zm")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stderr(&out).to_lowercase();
    assert!(
        text.contains("refused") && !text.contains("timed out"),
        "{text}"
    );
}

/// A secret shown only once that cannot reach stdout (here a full
/// device) is a clear error naming what was done, not a panic.
#[cfg(target_os = "linux")]
#[test]
fn a_secret_stdout_cannot_take_is_a_clear_error() {
    let env = Env::new();
    let out = env.run_stdin(
        &["user", "add", "a@example.com", "--password-stdin"],
        "a long password\n",
    );
    assert_success(&out, &["user", "add"]);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = env
        .cmd(&["token", "create", "--user", "a@example.com"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("the token was created, but its secret could not be written to stdout"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A list's reader that leaves early (`| head`) ends the command quietly
/// and successfully; a list stdout cannot take (a full device) is a
/// failure, not a cut table and exit 0.
#[cfg(target_os = "linux")]
#[test]
fn a_list_ends_quietly_for_a_reader_gone_and_fails_on_a_full_disk() {
    let env = Env::new();
    for i in 0..3 {
        let out = env.run_stdin(
            &[
                "user",
                "add",
                &format!("u{i}@example.com"),
                "--password-stdin",
            ],
            "a long password\n",
        );
        assert_success(&out, &["user", "add"]);
    }
    for args in [&["user", "list"][..], &["config", "check"]] {
        ends_quietly_for_a_reader_gone(&env, args);
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = env.cmd(args).stdout(full).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot write to stdout"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

/// Run `args` with stdout a pipe whose reader has gone before anything is
/// printed: exit 0, no panic.
#[cfg(target_os = "linux")]
fn ends_quietly_for_a_reader_gone(env: &Env, args: &[&str]) {
    let mut child = env
        .cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    assert!(
        !stderr(&out).contains("panicked"),
        "{args:?}: {}",
        stderr(&out)
    );
}

/// `migrate` and `import` whose reader has gone before they print (a
/// closed pipe) end quietly and successfully, as a list does: no panic
/// (exit 101), and the work is done.
#[cfg(target_os = "linux")]
#[test]
fn migrate_and_import_end_quietly_for_a_reader_gone() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let file = fixture("server-memory.jsonl");
    let file = file.to_str().unwrap();
    let import = [
        "import",
        "--user",
        "alice@example.com",
        "--format",
        "server-memory",
        file,
    ];
    let mut with_json = import.to_vec();
    with_json.push("--json");
    for args in [&["migrate"][..], &import[..], &with_json[..]] {
        ends_quietly_for_a_reader_gone(&env, args);
    }
    let again = import_json(&env, &import[1..]);
    assert_eq!(again["memories_imported"], 0, "imported before: {again}");
}

/// A usage error of any kind (here an unexpected argument, `--to`
/// forgotten) quotes a database URL without its password.
#[test]
fn a_usage_error_quotes_a_url_without_its_password() {
    let env = Env::new();
    let out = env.run(&["copy", "postgres://zm:S3cret@db/zm"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("unexpected argument")
            && err.contains("postgres://zm:***@db/zm")
            && !err.contains("S3cret"),
        "{err}"
    );
}

#[test]
fn migrate_creates_the_database() {
    let env = Env::new();
    let text = env.ok(&["migrate"]);
    assert!(text.contains("schema version"), "{text}");
    assert!(env.data_dir().join("zero-memory.db").exists());
    // Idempotent.
    env.ok(&["migrate"]);
}

/// `copy` carries the database into a new one (here a SQLite file, created
/// private): its users and tokens are there; a second copy into it, which
/// now holds data, is refused with exit 1 and leaves it as it was.
#[test]
fn copy_into_a_new_database_and_refuse_a_full_one() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    env.ok(&[
        "token",
        "create",
        "--user",
        "alice@example.com",
        "--name",
        "laptop",
    ]);
    let dest = env.dir.path().join("moved").join("copy.db");
    let url = format!("sqlite://{}", dest.display());
    let out = env.run(&["copy", "--to", &url]);
    assert_success(&out, &["copy"]);
    let report = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(report.lines().any(|l| l == "users\t1"), "{report}");
    assert!(report.lines().any(|l| l == "access_tokens\t1"), "{report}");
    assert!(
        stderr(&out).contains("copied 0 memories of 1 users"),
        "{}",
        stderr(&out)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the copy is private");
    }
    let on_copy = |args: &[&str]| {
        let mut c = bin();
        c.arg("--database-url").arg(&url).args(args);
        c.output().unwrap()
    };
    let tokens = on_copy(&["token", "list", "--user", "alice@example.com"]);
    assert_success(&tokens, &["token list on the copy"]);
    assert!(String::from_utf8_lossy(&tokens.stdout).contains("laptop"));
    let again = env.run(&["copy", "--to", &url]);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already holds data"),
        "{}",
        stderr(&again)
    );
    let bad = env.run(&["copy", "--to", "mysql://root:hunter2@db/zm"]);
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("is not supported") && !stderr(&bad).contains("hunter2"),
        "{}",
        stderr(&bad)
    );
    let users = on_copy(&["user", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&users.stdout).lines().count(),
        2,
        "still one user"
    );
    // A source that is not there (a mistyped data directory) copies
    // nothing and says so, and creates neither database.
    let elsewhere = env.dir.path().join("no-such-dir");
    let fresh = env.dir.path().join("fresh.db");
    let mut c = bin();
    c.arg("--data-dir").arg(&elsewhere).args([
        "copy",
        "--to",
        &format!("sqlite://{}", fresh.display()),
    ]);
    let missing = c.output().unwrap();
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("does not exist"),
        "{}",
        stderr(&missing)
    );
    assert!(
        !elsewhere.join("zero-memory.db").exists() && !fresh.exists(),
        "nothing created"
    );
}

/// A source that cannot be opened (here a file that is no database; one
/// that needs `migrate` alike) is refused before the destination is
/// prepared: no empty destination file is left behind.
#[test]
fn copy_from_a_source_that_cannot_be_opened_creates_no_destination() {
    let env = Env::new();
    std::fs::create_dir_all(env.data_dir()).unwrap();
    std::fs::write(
        env.data_dir().join("zero-memory.db"),
        "not a database, just text ".repeat(100),
    )
    .unwrap();
    let dest = env.dir.path().join("moved").join("copy.db");
    let out = env.run(&["copy", "--to", &format!("sqlite://{}", dest.display())]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a database"), "{}", stderr(&out));
    assert!(!dest.exists(), "no destination file was created");
}

#[test]
fn users_add_list_passwd() {
    let env = Env::new();
    // Generated password: printed once, on stdout alone.
    let pw = env.ok(&["user", "add", "alice@example.com"]);
    let pw = pw.trim();
    assert_eq!(pw.len(), 24, "{pw:?}");
    assert!(pw.chars().all(|c| c.is_ascii_alphanumeric()));
    // Password from stdin: nothing on stdout.
    let out = env.run_stdin(
        &["user", "add", "Bob@Example.com", "--password-stdin"],
        "correct horse battery staple\n",
    );
    assert_success(&out, &["user add bob"]);
    assert!(out.stdout.is_empty());

    let list = env.ok(&["user", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(lines[0].starts_with("ID"));
    // Columns: ID, EMAIL, OWNER (`yes` or blank), STATUS, … — read by
    // position (an id's random letters may spell "yes").
    let cols = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (alice, bob) = (cols(lines[1]), cols(lines[2]));
    assert_eq!(
        (alice[1].as_str(), alice[2].as_str()),
        ("alice@example.com", "yes"),
        "{list}"
    );
    assert_eq!(
        (bob[1].as_str(), bob[2].as_str()),
        ("bob@example.com", "active"),
        "{list}"
    );
    assert!(lines[1].starts_with("usr_"));

    // `user owner` moves the ownership (the owner before is one no
    // longer), says so once done, and is audited; it moves back the same.
    let out = env.run(&["user", "owner", "bob@example.com"]);
    assert_success(&out, &["user owner bob"]);
    assert!(
        stderr(&out).contains("is the owner now"),
        "{}",
        stderr(&out)
    );
    let owners = |list: &str| -> Vec<String> {
        list.lines()
            .skip(1)
            .map(cols)
            .filter(|c| c[2] == "yes")
            .map(|c| c[1].clone())
            .collect()
    };
    assert_eq!(owners(&env.ok(&["user", "list"])), ["bob@example.com"]);
    let again = env.run(&["user", "owner", "bob@example.com"]);
    assert!(
        stderr(&again).contains("already is the owner"),
        "{}",
        stderr(&again)
    );
    env.ok(&["user", "owner", "alice@example.com"]);
    assert_eq!(owners(&env.ok(&["user", "list"])), ["alice@example.com"]);
    let unknown = env.run(&["user", "owner", "nobody@example.com"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));

    // Duplicates and weak passwords are refused.
    let dup = env.run(&["user", "add", "alice@example.com"]);
    assert_eq!(dup.status.code(), Some(1));
    assert!(stderr(&dup).contains("already exists"), "{}", stderr(&dup));
    let weak = env.run_stdin(
        &["user", "add", "carol@example.com", "--password-stdin"],
        "short\n",
    );
    assert_eq!(weak.status.code(), Some(1));
    assert!(stderr(&weak).contains("at least 8"), "{}", stderr(&weak));

    // passwd: a new generated one, or one from stdin.
    let new_pw = env.ok(&["user", "passwd", "alice@example.com"]);
    assert_eq!(new_pw.trim().len(), 24);
    assert_ne!(new_pw.trim(), pw);
    let out = env.run_stdin(
        &["user", "passwd", "bob@example.com", "--password-stdin"],
        "another long password\n",
    );
    assert_success(&out, &["user passwd bob"]);
    let missing = env.run(&["user", "passwd", "nobody@example.com"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("no user"), "{}", stderr(&missing));
}

/// `team delete` makes a team's memories readable by nobody: without
/// `--yes`, and with no terminal to ask, it is refused and the team stays.
#[test]
fn team_delete_needs_yes_without_a_terminal() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    env.ok(&["team", "create", "platform"]);
    let refused = env.run(&["team", "delete", "platform"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--yes"), "{}", stderr(&refused));
    assert!(
        env.ok(&["team", "list"]).contains("platform"),
        "the team stays"
    );
    env.ok(&["team", "delete", "platform", "--yes"]);
    assert!(!env.ok(&["team", "list"]).contains("platform"), "deleted");
    // What the REST routes refuse before any lookup, the CLI refuses the
    // same way: a slug no team can have, an address that is none.
    for (args, field) in [
        (&["team", "show", "Not A Slug!"][..], "team: "),
        (&["team", "delete", "../x", "--yes"][..], "team: "),
        (&["team", "add", "ab@", "--team", "platform"][..], "email: "),
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(field) && !stderr(&out).contains("not found"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn tokens_create_list_revoke() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let secret = env.ok(&[
        "token",
        "create",
        "--user",
        "alice@example.com",
        "--name",
        "laptop",
    ]);
    assert!(secret.trim().starts_with("zm_pat_"), "{secret}");
    assert_eq!(secret.lines().count(), 1);
    let ro = env.ok(&[
        "token",
        "create",
        "--user",
        "alice@example.com",
        "--name",
        "ci",
        "--read-only",
    ]);
    assert!(ro.trim().starts_with("zm_pat_"));

    let list = env.ok(&["token", "list", "--user", "alice@example.com"]);
    let rows: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{list}");
    let laptop = rows.iter().find(|r| r.contains("laptop")).unwrap();
    let ci = rows.iter().find(|r| r.contains("ci")).unwrap();
    assert!(laptop.contains("mcp:read mcp:write") && laptop.contains("active"));
    assert!(ci.contains("mcp:read") && !ci.contains("mcp:write"));
    assert!(!list.contains("zm_pat_"), "list never shows secrets");
    let id = laptop.split_whitespace().next().unwrap().to_string();
    assert!(id.starts_with("tok_"), "{id}");

    let out = env.run(&["token", "revoke", "--user", "alice@example.com", &id]);
    assert_success(&out, &["token revoke"]);
    assert!(
        out.stdout.is_empty(),
        "a note, not a result: stdout stays empty"
    );
    assert!(stderr(&out).contains(&id), "{}", stderr(&out));
    let list = env.ok(&["token", "list", "--user", "alice@example.com"]);
    let laptop = list.lines().find(|r| r.contains("laptop")).unwrap();
    assert!(laptop.contains("revoked"), "{list}");
    // Again: not found, which may mean revoked before (the store cannot
    // tell the two apart); other failures do not say so (a unit test of
    // `revoke_failure` in commands.rs: a database failure cannot be caused
    // from here).
    let again = env.run(&["token", "revoke", "--user", "alice@example.com", &id]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("not found (or it is already revoked)"),
        "{}",
        stderr(&again)
    );
    // Another user's token reads as not found.
    env.ok(&["user", "add", "bob@example.com"]);
    let ci_id = ci.split_whitespace().next().unwrap();
    let foreign = env.run(&["token", "revoke", "--user", "bob@example.com", ci_id]);
    assert_eq!(foreign.status.code(), Some(1));
    assert!(
        stderr(&foreign).contains("not found"),
        "{}",
        stderr(&foreign)
    );
    // Unknown user.
    let unknown = env.run(&["token", "list", "--user", "nobody@example.com"]);
    assert_eq!(unknown.status.code(), Some(1));
}

#[test]
fn config_check_reports_values_and_sources() {
    let env = Env::new();
    let toml = env.dir.path().join("zm.toml");
    std::fs::write(
        &toml,
        "listen = \"127.0.0.1:9999\"\nbody_limit_bytes = 2048\ncapped_clients = [\"claude-code\", \"cursor\"]\n",
    )
    .unwrap();
    let secret_url = "postgres://zm:hunter2secret@db.example:5432/zm";
    // The data directory as a flag (`Env::cmd` passes one) and the
    // database from the environment: the flag would lose silently, so it
    // is refused, naming both and not the password.
    let out = env
        .cmd(&["config", "check"])
        .env("ZM_DATABASE_URL", secret_url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--data-dir")
            && stderr(&out).contains("env ZM_DATABASE_URL")
            && !stderr(&out).contains("hunter2secret"),
        "{}",
        stderr(&out)
    );
    let out = env
        .cmd(&[
            "--config",
            toml.to_str().unwrap(),
            "config",
            "check",
            "--database-url",
            secret_url,
        ])
        .env("ZM_MAX_SESSIONS", "17")
        .output()
        .unwrap();
    assert_success(&out, &["config check"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let row = |knob: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{knob} ")))
            .unwrap_or_else(|| panic!("no {knob} row in\n{text}"))
            .to_string()
    };
    assert!(row("ZM_LISTEN").contains("127.0.0.1:9999") && row("ZM_LISTEN").contains("file"));
    assert!(row("ZM_BODY_LIMIT_BYTES").contains("2048"));
    assert!(row("ZM_CAPPED_CLIENTS").contains("claude-code,cursor"));
    assert!(
        row("ZM_MAX_SESSIONS").contains("17")
            && row("ZM_MAX_SESSIONS").contains("env ZM_MAX_SESSIONS")
    );
    assert!(row("ZM_DATA_DIR").contains("flag --data-dir"));
    assert!(
        row("ZM_SESSION_IDLE_SECS").contains("1800")
            && row("ZM_SESSION_IDLE_SECS").contains("default")
    );
    assert!(row("ZM_DATABASE_URL").contains("***"), "{text}");
    assert!(!text.contains("hunter2secret"), "secrets are redacted");
    assert!(text.contains("configuration is valid"));

    // A flag beats the environment.
    let out = env
        .cmd(&["config", "check", "--max-sessions", "3"])
        .env("ZM_MAX_SESSIONS", "17")
        .output()
        .unwrap();
    assert_success(&out, &["config check --max-sessions"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("ZM_MAX_SESSIONS "))
        .unwrap();
    assert!(
        row.contains(" 3 ") && row.contains("flag --max-sessions"),
        "{row}"
    );
}

#[test]
fn config_check_fails_on_a_bad_value_naming_the_knob() {
    let env = Env::new();
    let out = env
        .cmd(&["config", "check"])
        .env("ZM_LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("ZM_LISTEN") && err.contains("env ZM_LISTEN"),
        "{err}"
    );

    // trust-proxy without an https public URL: resolved, shown, but invalid.
    let out = env
        .cmd(&["config", "check", "--trust-proxy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("ZM_TRUST_PROXY"), "{}", stderr(&out));

    // A rejected database URL is reported without its password.
    let out = env
        .cmd(&["migrate", "--database-url", "postgress://zm:S3cretPw@db/zm"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("database-url") && !stderr(&out).contains("S3cretPw"),
        "{}",
        stderr(&out)
    );
    // A local socket is a host too.
    let out = bin()
        .args(["config", "check"])
        .env(
            "ZM_DATABASE_URL",
            "postgres:///zero_memory?host=/run/postgresql&user=zm",
        )
        .output()
        .unwrap();
    assert_success(&out, &["config check with a socket URL"]);

    // A model directory that is not one (a typo, an empty folder) is an
    // invalid configuration, not a silent fall back to lexical recall.
    let empty = env.dir.path().join("no-model-here");
    std::fs::create_dir_all(&empty).unwrap();
    for bad in [env.dir.path().join("all-mpnet-bse-v2"), empty] {
        let out = env
            .cmd(&["config", "check"])
            .env("ZM_EMBEDDING_MODEL", &bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("ZM_EMBEDDING_MODEL"),
            "{}",
            stderr(&out)
        );
    }

    // Any command refuses an invalid configuration.
    let out = env
        .cmd(&["migrate"])
        .env("ZM_BODY_LIMIT_BYTES", "lots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ZM_BODY_LIMIT_BYTES"),
        "{}",
        stderr(&out)
    );
}

fn import_json(env: &Env, args: &[&str]) -> Value {
    let mut full = vec!["import"];
    full.extend_from_slice(args);
    full.push("--json");
    let text = env.ok(&full);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A later export imported where an earlier one was: a memory retired
/// since on the exporting side has its copy forgotten here (not left live
/// beside its successor's copy), while a memory of the importer's own
/// that the first import only found already there stays as it is.
#[test]
fn a_later_export_retires_what_an_earlier_import_copied() {
    let env = Env::new();
    env.ok(&["user", "add", "bob@example.com"]);
    let line = |id: &str, content: &str, retired: bool| {
        json!({"id": id, "content": content, "kind": "fact", "scope": "user.x", "visibility": "private",
               "author_kind": "agent", "created_at": "2026-01-01T00:00:00.000Z",
               "invalidated_at": if retired { json!("2026-02-01T00:00:00.000Z") } else { json!(null) }})
        .to_string()
    };
    let (old, own, new) = (
        zm_contracts::IdKind::Memory.generate(),
        zm_contracts::IdKind::Memory.generate(),
        zm_contracts::IdKind::Memory.generate(),
    );
    // Bob wrote one of them himself: the first import finds it there.
    let mine = env.dir.path().join("mine.jsonl");
    let mine_id = zm_contracts::IdKind::Memory.generate();
    std::fs::write(
        &mine,
        format!(
            "{}\n",
            line(&mine_id, "Invoices are archived for ten years.", false)
        ),
    )
    .unwrap();
    import_json(&env, &["--user", "bob@example.com", mine.to_str().unwrap()]);
    let file = env.dir.path().join("feed.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n{}\n",
            line(&old, "Billing runs on PostgreSQL 16.", false),
            line(&own, "Invoices are archived for ten years.", false)
        ),
    )
    .unwrap();
    let first = import_json(&env, &["--user", "bob@example.com", file.to_str().unwrap()]);
    assert_eq!(
        (
            first["memories_imported"].clone(),
            first["memories_existing"].clone()
        ),
        (json!(1), json!(1)),
        "{first}"
    );
    std::fs::write(
        &file,
        format!(
            "{}\n{}\n{}\n",
            line(&old, "Billing runs on PostgreSQL 16.", true),
            line(&own, "Invoices are archived for ten years.", true),
            line(&new, "Billing runs on PostgreSQL 17.", false)
        ),
    )
    .unwrap();
    let later = import_json(&env, &["--user", "bob@example.com", file.to_str().unwrap()]);
    assert_eq!(
        (
            later["memories_imported"].clone(),
            later["invalidated_skipped"].clone(),
            later["copies_retired"].clone()
        ),
        (json!(1), json!(2), json!(1)),
        "{later}"
    );
    let live: Vec<String> = env
        .ok(&["export", "--user", "bob@example.com"])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|m| m["invalidated_at"].is_null())
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        live,
        [
            "Invoices are archived for ten years.",
            "Billing runs on PostgreSQL 17."
        ],
        "the stale copy forgotten, Bob's own memory kept"
    );
    // Run again: nothing more to retire.
    let again = import_json(&env, &["--user", "bob@example.com", file.to_str().unwrap()]);
    assert_eq!(again["copies_retired"], 0, "{again}");
    // The item that made a copy another item also stands for, retired:
    // the copy stays, the other item still needs it.
    std::fs::write(
        &mine,
        format!(
            "{}\n",
            line(&mine_id, "Invoices are archived for ten years.", true)
        ),
    )
    .unwrap();
    let shared = import_json(&env, &["--user", "bob@example.com", mine.to_str().unwrap()]);
    assert_eq!(shared["copies_retired"], 0, "{shared}");
    assert!(
        env.ok(&["export", "--user", "bob@example.com"])
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .any(|m| m["content"] == "Invoices are archived for ten years."
                && m["invalidated_at"].is_null()),
        "the copy two items stand for stays live"
    );
}

/// A finished import run again after the operator lowered the text limit
/// still adds nothing and fails nothing: a line already imported is
/// skipped, whatever its length now; a new line over the limit is refused.
#[test]
fn a_lower_text_limit_does_not_fail_a_finished_import() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let long = "a long note ".repeat(300);
    let mem = |content: &str| {
        json!({"id": zm_contracts::IdKind::Memory.generate(), "content": content, "kind": "fact", "scope": "user.x", "visibility": "private", "author_kind": "agent", "created_at": "2026-01-01T00:00:00.000Z"}).to_string()
    };
    let file = env.dir.path().join("long.jsonl");
    std::fs::write(&file, format!("{}\n", mem(&long))).unwrap();
    let path = file.to_str().unwrap();
    let first = import_json(&env, &["--user", "alice@example.com", path]);
    assert_eq!(first["memories_imported"], 1, "{first}");
    let lowered = |args: &[&str]| {
        let mut full = vec!["--max-text-chars", "1024", "import"];
        full.extend_from_slice(args);
        full.push("--json");
        env.run(&full)
    };
    let out = lowered(&["--user", "alice@example.com", path]);
    assert_success(&out, &["import", "again"]);
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (again["memories_skipped"].clone(), again["errors"].clone()),
        (json!(1), json!([])),
        "{again}"
    );
    std::fs::write(&file, format!("{}\n", mem(&format!("{long} and more")))).unwrap();
    let out = lowered(&["--user", "alice@example.com", path]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a new line over the limit: {}",
        stderr(&out)
    );
}

#[test]
fn import_server_memory_then_export_and_reimport() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let file = fixture("server-memory.jsonl");
    let file = file.to_str().unwrap();
    let args = [
        "--user",
        "alice@example.com",
        "--format",
        "server-memory",
        file,
    ];

    let first = import_json(&env, &args);
    assert_eq!(first["lines"], 7, "{first}");
    assert_eq!(first["entities"], 4);
    assert_eq!(first["relations"], 3);
    // 5 observations + 1 entity without observations + 1 relation type
    // that is not ours (works_at).
    assert_eq!(first["memories_imported"], 7, "{first}");
    assert_eq!(first["memories_skipped"], 0);
    assert_eq!(first["edges_created"], 3);
    assert_eq!(first["edges_existing"], 0);
    assert_eq!(first["errors"], json!([]));
    assert_eq!(first["warnings"], json!([]));

    // Idempotent: the second run adds nothing.
    let second = import_json(&env, &args);
    assert_eq!(second["memories_imported"], 0, "{second}");
    assert_eq!(second["memories_existing"], 0);
    assert_eq!(second["memories_skipped"], 7);
    assert_eq!(second["edges_created"], 0);
    assert_eq!(second["edges_existing"], 3);

    // The human summary too.
    let text = env.ok(&[
        "import",
        "--user",
        "alice@example.com",
        "--format",
        "server-memory",
        file,
    ]);
    assert!(text.contains("0 imported"), "{text}");
    assert!(text.contains("3 already existed"), "{text}");

    // Export: one memory per line.
    let out = env.dir.path().join("export.jsonl");
    env.ok(&[
        "export",
        "--user",
        "alice@example.com",
        "--out",
        out.to_str().unwrap(),
    ]);
    let exported = std::fs::read_to_string(&out).unwrap();
    let memories: Vec<zm_contracts::Memory> = exported
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(memories.len(), 7, "{exported}");
    let contents: Vec<&str> = memories.iter().map(|m| m.content.as_str()).collect();
    for expected in [
        "Alice: Prefers tea over coffee",
        "Alice: Works remotely from Lisbon",
        "Acme Corp builds industrial robots",
        "zero-memory: Written in Rust",
        "PostgreSQL is a tool.",
        "Alice works at Acme Corp.",
    ] {
        assert!(
            contents.contains(&expected),
            "{expected:?} not in {contents:?}"
        );
    }
    // All in the personal scope (`user.<label>`, not `….core`).
    assert!(memories.iter().all(|m| m.scope.starts_with("user.")
        && !m.scope.ends_with(".core")
        && m.kind == zm_contracts::MemoryKind::Fact
        && m.invalidated_at.is_none()));
    // Export to stdout is the same.
    let stdout = env.ok(&["export", "--user", "alice@example.com"]);
    assert_eq!(stdout, exported);
    // So is `--out /dev/stdout` (a device is written into, not replaced).
    let dev = env.ok(&[
        "export",
        "--user",
        "alice@example.com",
        "--out",
        "/dev/stdout",
    ]);
    assert_eq!(dev, exported);
    // With stdout a file the shell opened, `--out /dev/stdout` writes
    // through the shell's descriptor: appended after what the file held,
    // two runs in one redirection both kept, the file's mode untouched.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let all = env.dir.path().join("all.jsonl");
        std::fs::write(&all, "# earlier\n").unwrap();
        std::fs::set_permissions(&all, std::fs::Permissions::from_mode(0o644)).unwrap();
        let appended = std::fs::OpenOptions::new().append(true).open(&all).unwrap();
        let args = [
            "export",
            "--user",
            "alice@example.com",
            "--out",
            "/dev/stdout",
        ];
        for _ in 0..2 {
            let out = env
                .cmd(&args)
                .stdout(appended.try_clone().unwrap())
                .output()
                .unwrap();
            assert_success(&out, &args);
        }
        assert_eq!(
            std::fs::read_to_string(&all).unwrap(),
            format!("# earlier\n{exported}{exported}"),
            "both exports after what the file held"
        );
        let mode = std::fs::metadata(&all).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "the shell's file keeps its mode");
    }
    // `--out` through a symbolic link replaces the file it points at, as
    // it would that file named itself (a partial file beside it, renamed
    // over it), and the link stays a link to it; a link to nothing yet
    // creates the file it names. (A failed export through a link is in
    // `a_failed_export_leaves_an_earlier_file_as_it_was`.)
    #[cfg(unix)]
    {
        let backups = env.dir.path().join("backups");
        std::fs::create_dir(&backups).unwrap();
        let target = backups.join("target.jsonl");
        let link = env.dir.path().join("latest.jsonl");
        std::fs::write(&target, "an earlier backup\n").unwrap();
        std::os::unix::fs::symlink("backups/target.jsonl", &link).unwrap();
        let dangling = env.dir.path().join("next.jsonl");
        std::os::unix::fs::symlink("backups/new.jsonl", &dangling).unwrap();
        for (link, target) in [(&link, target), (&dangling, backups.join("new.jsonl"))] {
            env.ok(&[
                "export",
                "--user",
                "alice@example.com",
                "--out",
                link.to_str().unwrap(),
            ]);
            assert!(
                std::fs::symlink_metadata(link)
                    .unwrap()
                    .file_type()
                    .is_symlink(),
                "the link stays a link: {}",
                link.display()
            );
            assert_eq!(std::fs::read_to_string(link).unwrap(), exported);
            assert_eq!(std::fs::read_to_string(&target).unwrap(), exported);
            assert_eq!(mode(&target), 0o600, "{}", target.display());
        }
        let left = partial_files(&backups);
        assert!(left.is_empty(), "{left:?}");
    }
    // Page by page (7 memories: pages of 2, 2, 2, 1, or 3, 3, 1): the same
    // lines, each once, in the same order.
    let paged = env.ok(&["export", "--user", "alice@example.com", "--page-size", "2"]);
    assert_eq!(paged, exported);
    let summary = env.run(&["export", "--user", "alice@example.com", "--page-size", "2"]);
    assert!(
        stderr(&summary).contains("exported 7 memories"),
        "the summary counts every page: {}",
        stderr(&summary)
    );
    let paged_out = env.dir.path().join("paged.jsonl");
    env.ok(&[
        "export",
        "--user",
        "alice@example.com",
        "--page-size",
        "3",
        "--out",
        paged_out.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(&paged_out).unwrap(), exported);
    let left = partial_files(env.dir.path());
    assert!(
        left.is_empty(),
        "the partial file is renamed into place: {left:?}"
    );
    for bad in ["0", "1001"] {
        let refused = env.run(&["export", "--user", "alice@example.com", "--page-size", bad]);
        assert_eq!(refused.status.code(), Some(2), "--page-size {bad}");
    }

    // Our own format: into another account, idempotently.
    env.ok(&["user", "add", "bob@example.com"]);
    let zm_args = ["--user", "bob@example.com", out.to_str().unwrap()];
    let first = import_json(&env, &zm_args);
    assert_eq!(first["format"], "zm");
    assert_eq!(first["memories_imported"], 7, "{first}");
    let second = import_json(&env, &zm_args);
    assert_eq!(second["memories_imported"], 0);
    assert_eq!(second["memories_skipped"], 7);
    let bob = env.ok(&["export", "--user", "bob@example.com"]);
    assert_eq!(bob.lines().count(), 7);
    // Restored where it was taken, into the account it came from: every
    // memory is here already, none is stored twice.
    let own = import_json(
        &env,
        &["--user", "alice@example.com", out.to_str().unwrap()],
    );
    assert_eq!(
        (
            own["memories_imported"].as_u64(),
            own["memories_existing"].as_u64()
        ),
        (Some(0), Some(7)),
        "{own}"
    );
    let alice = env.ok(&["export", "--user", "alice@example.com"]);
    assert_eq!(alice, exported, "alice's memories are as they were");
}

#[test]
fn server_memory_entities_get_their_types_without_duplicates() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let file = fixture("server-memory.jsonl");
    for _ in 0..2 {
        env.ok(&[
            "import",
            "--user",
            "alice@example.com",
            "--format",
            "server-memory",
            file.to_str().unwrap(),
        ]);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = zm_store::sqlite_url(&env.data_dir().join("zero-memory.db"));
        let store = zm_store::Store::open(&url).await.unwrap();
        let user = store
            .user_by_email("alice@example.com")
            .await
            .unwrap()
            .unwrap();
        let caller = zm_store::Caller::new(user.id);
        let out = zm_store::ToolService::new(store.clone())
            .run::<zm_contracts::catalogue::tool::Entities>(
                &caller,
                zm_contracts::EntitiesInput {
                    query: None,
                    scope: None,
                },
            )
            .await
            .unwrap();
        let mut got: Vec<(String, String)> = out
            .entities
            .iter()
            .map(|e| (e.name.clone(), e.entity_type.as_str().to_string()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("Acme Corp".to_string(), "concept".to_string()),
                ("Alice".to_string(), "person".to_string()),
                ("PostgreSQL".to_string(), "tool".to_string()),
                ("zero-memory".to_string(), "project".to_string()),
            ]
        );
        store.close().await;
    });
}

#[test]
fn import_reports_bad_lines_and_exits_1() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let file = env.dir.path().join("bad.jsonl");
    // A token-shaped secret (built here so no scanner mistakes this file
    // for one that holds a secret): the guard refuses it, and the report
    // names the line, never the secret.
    let secret = format!(
        "{}{}",
        "gh".to_owned() + "p_",
        &"a1B2c3D4e5".repeat(4)[..36]
    );
    // Line 4 has three observations, each refused: one line that could
    // not be imported, with three errors.
    std::fs::write(
        &file,
        format!(
            "{{\"type\":\"entity\",\"name\":\"Bob\",\"entityType\":\"person\",\"observations\":[\"likes chess\"]}}\nnot json\n{{\"type\":\"banana\"}}\n\
             {{\"type\":\"entity\",\"name\":\"Deploy\",\"entityType\":\"service\",\"observations\":[\"the deploy token is {secret}\",\"the old deploy token was {secret}\",\"CI reads {secret}\"]}}\n"
        ),
    )
    .unwrap();
    let out = env.run(&[
        "import",
        "--user",
        "alice@example.com",
        "--format",
        "server-memory",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("line 2") && err.contains("line 3"), "{err}");
    assert!(err.contains("line 4") && !err.contains(&secret), "{err}");
    assert_eq!(err.matches("error: line 4:").count(), 3, "{err}");
    assert!(
        err.contains("3 of 4 lines could not be imported"),
        "lines, each once: {err}"
    );
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(summary.contains("1 imported"), "{summary}");
    assert!(summary.contains("failed:    3 lines"), "{summary}");
}

/// A server-memory file imported without `--format server-memory` is
/// refused at its first line, naming the option, instead of failing on
/// every line with a missing `id`; nothing is imported.
#[test]
fn a_server_memory_file_without_its_format_is_refused_naming_it() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let file = fixture("server-memory.jsonl");
    let out = env.run(&[
        "import",
        "--user",
        "alice@example.com",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error: ")).count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("error: line 1: ") && err.contains("`--format server-memory`"),
        "{err}"
    );
    assert!(!err.contains("missing field"), "{err}");
    let export = env.ok(&["export", "--user", "alice@example.com"]);
    assert!(export.is_empty(), "nothing was imported: {export}");
    let imported = import_json(
        &env,
        &[
            "--user",
            "alice@example.com",
            "--format",
            "server-memory",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(imported["memories_imported"], 7, "{imported}");
    assert_eq!(imported["lines_failed"], 0, "{imported}");
}

// ------------------------------------------------------------------ stdio

struct Stdio2 {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    got: HashMap<i64, Value>,
}

impl Stdio2 {
    fn start(env: &Env, extra: &[&str]) -> Stdio2 {
        Stdio2::start_with(env, extra, |_| {})
    }

    /// Start, with a last change to the command (its environment).
    fn start_with(env: &Env, extra: &[&str], tweak: impl FnOnce(&mut Command)) -> Stdio2 {
        let mut args = vec!["stdio"];
        args.extend_from_slice(extra);
        let mut cmd = env.cmd(&args);
        tweak(&mut cmd);
        Stdio2::spawn(cmd)
    }

    /// Start `cmd`, a `stdio` server (perhaps behind a shell).
    fn spawn(mut cmd: Command) -> Stdio2 {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Stdio2 {
            child,
            lines: rx,
            got: HashMap::new(),
        }
    }

    #[allow(clippy::needless_pass_by_value, reason = "called with json!(…)")]
    fn send(&mut self, msg: Value) {
        self.send_text(&msg.to_string());
    }

    /// One line as written (JSON a `Value` cannot hold: a key twice).
    fn send_text(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The response with this id (responses may arrive out of order).
    fn response(&mut self, id: i64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = self.got.remove(&id) {
                return v;
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("no response {id} within 60 s"));
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no response {id}: {e}"));
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}"));
            if let Some(got) = v.get("id").and_then(Value::as_i64) {
                self.got.insert(got, v);
            }
        }
    }

    /// Send `signal` (`-TERM`, `-HUP`), stdin still open, and wait for the
    /// exit status.
    #[cfg(unix)]
    fn signal(self, signal: &str) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(sent.success(), "kill {signal} {pid}");
        self.wait_exit()
    }

    /// Close stdin and wait for the exit status.
    fn finish(mut self) -> (Option<i32>, String) {
        drop(self.child.stdin.take());
        self.wait_exit()
    }

    fn wait_exit(mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                self.child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return (status.code(), err);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("stdio did not exit");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn initialize(s: &mut Stdio2) -> Value {
    s.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "cli-test", "version": "0"},
        }}),
    );
    let init = s.response(1);
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    init
}

#[test]
fn stdio_serves_mcp_and_exits_0_on_eof() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let mut s = Stdio2::start(&env, &[]);
    let init = initialize(&mut s);
    assert_eq!(
        init["result"]["serverInfo"]["name"], "zero-memory",
        "{init}"
    );
    assert_eq!(
        init["result"]["capabilities"]["experimental"]["zero-memory/contract"]["version"],
        zm_contracts::CONTRACT_VERSION
    );
    s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    s.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "remember",
        "arguments": {"content": "The CLI test prefers small commits.", "kind": "preference", "scope": "personal"},
    }}));
    s.send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "remember",
            "arguments": {"content": ""},
        }}),
    );
    // Read in reverse order: responses are matched by id.
    let bad = s.response(4);
    let remembered = s.response(3);
    let tools = s.response(2);

    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 18, "{names:?}");
    assert!(names.contains(&"remember") && names.contains(&"delete_account"));

    let r = &remembered["result"];
    assert_ne!(r["isError"], true, "{remembered}");
    let id = r["structuredContent"]["memory_id"].as_str().unwrap();
    assert!(id.starts_with("mem_"), "{remembered}");
    let scope = r["structuredContent"]["scope"].as_str().unwrap();
    assert!(
        scope.starts_with("user.") && !scope.ends_with(".core"),
        "personal scope: {scope}"
    );
    // The session is attached to the working directory's project.
    assert!(
        r["structuredContent"]["session"]["attached_project"]
            .as_str()
            .is_some_and(|p| p.starts_with("proj.")),
        "{remembered}"
    );

    let b = &bad["result"];
    assert_eq!(b["isError"], true, "{bad}");
    let first: Value = serde_json::from_str(b["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(first["error"]["code"], "validation_failed", "{first}");
    assert!(first["error"]["message"].is_string());

    // An argument given twice is refused by its name, as over REST (it
    // was read as its last value).
    s.send_text(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"remember","arguments":{"content":"Stdio twice, first.","scope":"personal","content":"Stdio twice, second."}}}"#,
    );
    let twice = s.response(5);
    assert_eq!(twice["result"]["isError"], true, "{twice}");
    let e: Value =
        serde_json::from_str(twice["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(e["error"]["code"], "validation_failed", "{e}");
    assert_eq!(e["error"]["details"]["fields"][0]["path"], "content", "{e}");

    let (code, err) = s.finish();
    assert_eq!(code, Some(0), "stderr:\n{err}");

    // The memory is in the database the other commands see; the refused
    // one is not.
    let exported = env.ok(&["export", "--user", "alice@example.com"]);
    assert!(exported.contains(id));
    assert!(!exported.contains("Stdio twice"), "{exported}");
}

#[test]
fn stdio_with_user_and_project() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    env.ok(&["user", "add", "bob@example.com"]);
    let mut s = Stdio2::start(
        &env,
        &[
            "--user",
            "bob@example.com",
            "--project",
            "https://github.com/example/widgets.git",
        ],
    );
    initialize(&mut s);
    s.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "remember",
            "arguments": {"content": "Widgets are built with make.", "kind": "convention"},
        }}),
    );
    let r = s.response(2);
    assert_ne!(r["result"]["isError"], true, "{r}");
    let scope = r["result"]["structuredContent"]["scope"].as_str().unwrap();
    assert!(
        scope.starts_with("proj.") && scope.ends_with(".widgets"),
        "{scope}"
    );
    let (code, err) = s.finish();
    assert_eq!(code, Some(0), "{err}");
    let bob = env.ok(&["export", "--user", "bob@example.com"]);
    assert!(bob.contains("Widgets are built with make."));
    let alice = env.ok(&["export", "--user", "alice@example.com"]);
    assert!(!alice.contains("Widgets"));
}

/// A client that starts the server in a directory removed since (a
/// deleted worktree) is served when `--project` or `--no-project` says
/// what the directory would have: the directory is not read.
#[cfg(unix)]
#[test]
fn stdio_with_a_project_starts_in_a_removed_directory() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    for extra in [
        &["--project", "https://github.com/example/gone.git"][..],
        &["--no-project"][..],
    ] {
        let gone = env.dir.path().join("removed-worktree");
        std::fs::create_dir(&gone).unwrap();
        // The shell enters the directory, removes it, then runs the
        // server there (a directory cannot be removed under a spawn).
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("cd \"$0\" && rmdir \"$0\" && exec \"$@\"")
            .arg(&gone)
            .arg(env!("CARGO_BIN_EXE_zero-memory"))
            .arg("--data-dir")
            .arg(env.data_dir())
            .args(["stdio", "--user", "alice@example.com"])
            .args(extra)
            .env("ZM_LOG", "warn");
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZM_") && k != "ZM_LOG" {
                cmd.env_remove(k);
            }
        }
        let mut s = Stdio2::spawn(cmd);
        initialize(&mut s);
        s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "remember",
            "arguments": {"content": "Served from a removed directory.", "kind": "fact", "scope": "personal"},
        }}));
        let r = s.response(2);
        assert_ne!(r["result"]["isError"], true, "{extra:?}: {r}");
        let (code, err) = s.finish();
        assert_eq!(code, Some(0), "{extra:?}: {err}");
        assert!(!gone.exists(), "the directory was removed");
    }
}

/// A client that stops its stdio server with SIGTERM (stdin still open)
/// gets a clean exit, as at end of input, not a process killed by the
/// signal; so does the terminal it was started from closing (SIGHUP,
/// whose default action would end it on the spot).
#[cfg(unix)]
#[test]
fn stdio_exits_0_on_sigterm_and_sighup() {
    for signal in ["-TERM", "-HUP"] {
        let env = Env::new();
        env.ok(&["user", "add", "alice@example.com"]);
        let mut s = Stdio2::start(&env, &["--user", "alice@example.com"]);
        initialize(&mut s);
        s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "anything"}}}));
        assert!(s.response(2)["result"].is_object());
        let (code, err) = s.signal(signal);
        assert_eq!(code, Some(0), "{signal}: {err}");
    }
}

#[test]
fn stdio_exits_0_when_stdin_closes_at_once() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let s = Stdio2::start(&env, &[]);
    let (code, err) = s.finish();
    assert_eq!(code, Some(0), "{err}");
}

/// The README's client snippets on a fresh machine: `stdio` on a database
/// without any user creates the owner (no password) and serves; the first
/// `serve` on that database then finds the owner instead of creating one.
#[test]
fn stdio_on_a_fresh_machine_creates_the_owner_and_serve_keeps_it() {
    let env = Env::new();
    let mut s = Stdio2::start(&env, &[]);
    initialize(&mut s);
    s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools = s.response(2);
    assert_eq!(
        tools["result"]["tools"].as_array().map(Vec::len),
        Some(18),
        "{tools}"
    );
    s.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "remember",
            "arguments": {"content": "The fresh machine uses tabs for Makefiles.", "kind": "convention"},
        }}),
    );
    let remembered = s.response(3);
    assert_ne!(remembered["result"]["isError"], true, "{remembered}");
    let id = remembered["result"]["structuredContent"]["memory_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "recall",
            "arguments": {"query": "Makefiles tabs"},
        }}),
    );
    let recalled = s.response(4);
    assert_ne!(recalled["result"]["isError"], true, "{recalled}");
    let hits = recalled["result"]["structuredContent"]["memories"]
        .as_array()
        .unwrap();
    assert!(hits.iter().any(|h| h["id"] == id.as_str()), "{recalled}");
    let (code, err) = s.finish();
    assert_eq!(code, Some(0), "{err}");

    let users = env.ok(&["user", "list"]);
    let rows: Vec<&str> = users.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{users}");
    assert!(
        rows[0].contains("owner@localhost") && rows[0].contains("yes"),
        "{users}"
    );
    assert!(rows[0].contains("not set"), "no password: {users}");

    // The first `serve`: no second owner, no secrets, how to set a password.
    let mut serve = Serve::start(&env, &[]);
    assert!(serve.wait_serving(), "serve did not start");
    let (stdout, err) = serve.stop();
    assert!(
        !stdout.contains("first start") && !stdout.contains("zm_pat_"),
        "{stdout}"
    );
    assert!(
        err.contains("zero-memory user passwd owner@localhost"),
        "{err}"
    );
    let users = env.ok(&["user", "list"]);
    assert_eq!(users.lines().count(), 2, "one user still: {users}");

    // Once a password is set, serve stops saying so.
    env.ok(&["user", "passwd", "owner@localhost"]);
    let users = env.ok(&["user", "list"]);
    assert!(!users.contains("not set"), "{users}");
    let mut serve = Serve::start(&env, &[]);
    assert!(serve.wait_serving());
    let (_, err) = serve.stop();
    assert!(!err.contains("user passwd"), "{err}");

    // The memory is the owner's.
    assert!(
        env.ok(&["export", "--user", "owner@localhost"])
            .contains(&id)
    );
    let out = env.run_stdin(&["stdio", "--user", "nobody@example.com"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing but MCP on stdout");
}

/// At the default log level a stdio start and close say at most one line:
/// no migration lines, no MCP library connection dumps — on a fresh
/// database (migrations run, the owner is created) and on a later start.
#[test]
fn stdio_start_and_close_print_at_most_one_line_to_stderr() {
    let env = Env::new();
    for run in ["fresh database", "second start"] {
        let mut s = Stdio2::start_with(&env, &[], |c| {
            c.env_remove("ZM_LOG");
        });
        initialize(&mut s);
        s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        let tools = s.response(2);
        assert!(tools["result"]["tools"].is_array(), "{tools}");
        let (code, err) = s.finish();
        assert_eq!(code, Some(0), "{run}: {err}");
        assert!(
            err.lines().count() <= 1,
            "{run}: stderr says more than one line:\n{err}"
        );
    }
}

/// Spawn `serve` on an ephemeral loopback port.
struct Serve {
    child: std::process::Child,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Serve {
    fn start(env: &Env, extra: &[&str]) -> Serve {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Serve::spawn(env.cmd(&args))
    }

    fn spawn(mut cmd: Command) -> Serve {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Serve {
            child,
            stderr: rx,
            seen: Vec::new(),
        }
    }

    /// Wait for the "serving on" line; `false` if the process ended first.
    fn wait_serving(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("serve said nothing within 60 s: {:?}", self.seen));
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    let serving = line.contains("serving on http://");
                    self.seen.push(line);
                    if serving {
                        return true;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("serve said nothing within 60 s: {:?}", self.seen)
                }
            }
        }
    }

    /// Kill it; its stdout and stderr.
    fn stop(mut self) -> (String, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut out = String::new();
        use std::io::Read;
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.seen.extend(self.stderr.iter());
        (out, self.seen.join("\n"))
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The first start prints the owner's password and token once — to stdout
/// by default, saying that stdout may land in service logs and what the
/// server offers (no dashboard: GET / is not_found).
#[test]
fn serve_first_start_prints_the_secrets_once_and_only_what_exists() {
    let env = Env::new();
    let mut serve = Serve::start(&env, &[]);
    assert!(serve.wait_serving());
    let (stdout, _) = serve.stop();
    assert!(
        stdout.contains("password:") && stdout.contains("zm_pat_"),
        "{stdout}"
    );
    assert!(
        stdout.contains("logs") && stdout.contains("--first-start-output"),
        "{stdout}"
    );
    assert!(
        stdout.contains("/mcp") && stdout.contains("/api/tools/"),
        "{stdout}"
    );
    // The dashboard it names is where the printed password signs in
    // (crates/zm-http/tests/dashboard.rs and the browser test sign in).
    assert!(
        stdout.contains("Dashboard:")
            && stdout.contains("sign in with the email and password above"),
        "{stdout}"
    );
    // Only once.
    let mut serve = Serve::start(&env, &[]);
    assert!(serve.wait_serving());
    let (stdout, _) = serve.stop();
    assert!(!stdout.contains("zm_pat_"), "{stdout}");
}

/// On `--listen 127.0.0.1:0` the URLs the server advertises carry the
/// port it bound (OAuth discovery named port 0).
#[test]
fn serve_on_port_0_advertises_the_port_it_bound() {
    let env = Env::new();
    let mut serve = Serve::start(&env, &[]);
    assert!(serve.wait_serving());
    let banner = serve
        .seen
        .iter()
        .find(|l| l.contains("serving on http://"))
        .unwrap()
        .clone();
    let addr = banner
        .split("serving on http://")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert!(!addr.ends_with(":0"), "{banner}");
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "GET /.well-known/oauth-authorization-server HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
    serve.stop();
    assert!(
        answer.contains(&format!("\"issuer\":\"http://{addr}\"")),
        "{answer}"
    );
}

/// SIGTERM stops `serve` gracefully: it finishes, closes the database and
/// exits 0 (the probes stopped it and never looked). A second signal while
/// it waits on a request in flight (one whose body never comes: the
/// server waits 30 s for it, then 10 s for its connection) stops it at
/// once, with 130.
#[cfg(unix)]
#[test]
fn serve_stops_on_sigterm_and_at_once_on_a_second() {
    let signal = |serve: &Serve| {
        let pid = serve.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    let env = Env::new();
    let mut serve = Serve::start(&env, &["--log", "info"]);
    assert!(serve.wait_serving());
    signal(&serve);
    let status = serve.child.wait().unwrap();
    let log: Vec<String> = serve.stderr.iter().collect();
    assert_eq!(status.code(), Some(0), "{log:?}");
    assert!(log.iter().any(|l| l.contains("stopped")), "{log:?}");

    let token = env.ok(&["token", "create", "--user", "owner@localhost"]);
    let mut serve = Serve::start(&env, &["--log", "info", "--body-timeout-secs", "3600"]);
    assert!(serve.wait_serving());
    let addr = serve
        .seen
        .iter()
        .find_map(|l| l.split("serving on http://").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    // `Expect: 100-continue`: the server answers `100 Continue` once the
    // handler reads the body, so the request is known to be in flight
    // before the first signal (a signal that came first found none and
    // the server stopped at once, exit 0).
    write!(
        stalled,
        "POST /api/tools/recall HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n",
        token.trim()
    )
    .unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("100 Continue") {
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut stalled, &mut buf).expect("the server reads the body");
        assert!(
            n > 0,
            "the connection closed: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    write!(stalled, "{{\"query\":").unwrap();
    signal(&serve);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = serve
            .stderr
            .recv_timeout(left)
            .expect("serve says it is shutting down");
        if line.contains("shutting down") {
            break;
        }
    }
    signal(&serve);
    let status = serve.child.wait().unwrap();
    let log: Vec<String> = serve.stderr.iter().collect();
    assert_eq!(status.code(), Some(130), "{log:?}");
    assert!(log.iter().any(|l| l.contains("second signal")), "{log:?}");
    assert!(!log.iter().any(|l| l.contains("stopped")), "{log:?}");
    drop(stalled);
}

/// `--first-start-output FILE`: the secrets go to a 0600 file, not stdout;
/// the data directory is 0700, the database and its WAL/SHM files 0600.
#[cfg(unix)]
#[test]
fn serve_first_start_output_and_private_files() {
    let env = Env::new();
    let file = env.dir.path().join("first-start.txt");
    let mut serve = Serve::start(&env, &["--first-start-output", file.to_str().unwrap()]);
    assert!(serve.wait_serving());
    let db = env.data_dir().join("zero-memory.db");
    // While it runs: the database is in WAL mode, with its -wal and -shm.
    let wal = env.data_dir().join("zero-memory.db-wal");
    let shm = env.data_dir().join("zero-memory.db-shm");
    assert!(wal.exists() && shm.exists());
    for f in [&db, &wal, &shm] {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    assert_eq!(mode(&env.data_dir()), 0o700);
    let (stdout, err) = serve.stop();
    assert!(
        !stdout.contains("zm_pat_") && !stdout.contains("password"),
        "{stdout}"
    );
    assert!(err.contains(file.to_str().unwrap()), "{err}");
    assert_eq!(mode(&file), 0o600);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("password:") && text.contains("zm_pat_"),
        "{text}"
    );
    assert!(text.contains("owner@localhost"));
}

#[cfg(unix)]
#[test]
fn exports_are_private_and_an_open_data_directory_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    assert_eq!(mode(&env.data_dir()), 0o700);
    assert_eq!(mode(&env.data_dir().join("zero-memory.db")), 0o600);

    let out = env.dir.path().join("alice.jsonl");
    env.ok(&[
        "export",
        "--user",
        "alice@example.com",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(mode(&out), 0o600);
    let exported = std::fs::read_to_string(&out).unwrap();
    // An existing file others may read is never written into: the export
    // goes to a partial file created 0600 and renamed over it, so what the
    // new file holds is private from its first byte. Another name of the
    // old file (a hard link, as others may hold) keeps the old content,
    // and `FILE` ends up 0600 with the export.
    std::fs::write(&out, "an earlier export\n").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    let other_name = env.dir.path().join("alice-shared.jsonl");
    std::fs::hard_link(&out, &other_name).unwrap();
    env.ok(&[
        "export",
        "--user",
        "alice@example.com",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(mode(&out), 0o600);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), exported);
    assert_eq!(
        std::fs::read_to_string(&other_name).unwrap(),
        "an earlier export\n",
        "the old file was not written into"
    );
    assert_eq!(mode(&other_name), 0o644);

    let quiet = env.run(&["user", "list"]);
    assert!(!stderr(&quiet).contains("chmod"), "{}", stderr(&quiet));
    // A directory others may read (as /var/lib) shows them names only.
    std::fs::set_permissions(env.data_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let quiet = env.run(&["user", "list"]);
    let dir = env.data_dir().display().to_string();
    assert!(
        !stderr(&quiet)
            .lines()
            .any(|l| l.contains("WARN") && l.contains(&dir)),
        "{}",
        stderr(&quiet)
    );
    // One they may write: they could replace the database.
    std::fs::set_permissions(env.data_dir(), std::fs::Permissions::from_mode(0o775)).unwrap();
    let warned = env.run(&["user", "list"]);
    assert_success(&warned, &["user", "list"]);
    assert!(
        stderr(&warned).contains(&format!(
            "can delete or replace the database in {}",
            env.data_dir().display()
        )),
        "{}",
        stderr(&warned)
    );
    // A database others may read.
    std::fs::set_permissions(env.data_dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let db = env.data_dir().join("zero-memory.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let warned = env.run(&["user", "list"]);
    assert!(
        stderr(&warned).contains(&format!("chmod 600 {}", db.display())),
        "{}",
        stderr(&warned)
    );
}

/// `cmd` run by `sh` after `script` (a `trap`, a `ulimit` for the process
/// to inherit): the same program, arguments, environment and directory.
#[cfg(target_os = "linux")]
fn after_shell(cmd: &Command, script: &str) -> Command {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!("{script}; exec \"$0\" \"$@\""))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => {
                sh.env(k, v);
            }
            None => {
                sh.env_remove(k);
            }
        }
    }
    if let Some(dir) = cmd.get_current_dir() {
        sh.current_dir(dir);
    }
    sh
}

/// The `*.partial` files in `dir`.
fn partial_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".partial"))
        .collect()
}

/// An export that fails half-way (here the file-size limit of the process,
/// `ulimit -f`, with SIGXFSZ ignored so that a write past it fails with
/// EFBIG: the first page of one memory is written, a later one is not)
/// exits 1, removes its partial file and leaves an earlier `FILE` as it
/// was: a file named itself, and the file a symbolic link points at (the
/// link stays a link to it).
///
/// The same for an interrupted export (Ctrl-C) is not tested: a signal
/// can only be sent at a moment chosen by timing, not at a given page.
#[cfg(target_os = "linux")]
#[test]
fn a_failed_export_leaves_an_earlier_file_as_it_was() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    // Eight memories of about 20 KiB each: an export of about 170 KiB,
    // past the limit below (80 blocks: 40 KiB in 512-byte blocks, as dash
    // counts, or 80 KiB in bash's), and pages of one memory under it.
    let observations: Vec<String> = (0..8)
        .map(|i| {
            format!(
                "Archive shelf {i} holds {}",
                "boxes of signed contracts with their annexes, ".repeat(450)
            )
        })
        .collect();
    let file = env.dir.path().join("archive.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n",
            json!({"type": "entity", "name": "Archive", "entityType": "concept", "observations": observations})
        ),
    )
    .unwrap();
    let imported = import_json(
        &env,
        &[
            "--user",
            "alice@example.com",
            "--format",
            "server-memory",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(imported["memories_imported"], 8, "{imported}");

    let backups = env.dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let plain = env.dir.path().join("alice.jsonl");
    std::fs::write(&plain, "an earlier export\n").unwrap();
    let target = backups.join("target.jsonl");
    std::fs::write(&target, "an earlier backup\n").unwrap();
    let link = env.dir.path().join("latest.jsonl");
    std::os::unix::fs::symlink("backups/target.jsonl", &link).unwrap();
    for (out, earlier, kept) in [
        (&plain, &plain, "an earlier export\n"),
        (&link, &target, "an earlier backup\n"),
    ] {
        let export = env.cmd(&[
            "export",
            "--user",
            "alice@example.com",
            "--page-size",
            "1",
            "--out",
            out.to_str().unwrap(),
        ]);
        let failed = after_shell(&export, "trap '' XFSZ; ulimit -f 80")
            .output()
            .unwrap();
        assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
        assert!(
            stderr(&failed).contains("cannot write the export"),
            "failed while writing a page: {}",
            stderr(&failed)
        );
        assert_eq!(
            std::fs::read_to_string(earlier).unwrap(),
            kept,
            "{} is as it was",
            out.display()
        );
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the link stays a link"
        );
        for dir in [env.dir.path(), backups.as_path()] {
            assert_eq!(
                partial_files(dir),
                Vec::<String>::new(),
                "{}",
                dir.display()
            );
        }
    }
    // Without the limit the same export is written whole, and is larger
    // than the limit was.
    env.ok(&[
        "export",
        "--user",
        "alice@example.com",
        "--page-size",
        "1",
        "--out",
        link.to_str().unwrap(),
    ]);
    let whole = std::fs::read_to_string(&target).unwrap();
    assert_eq!(whole.lines().count(), 8);
    assert!(whole.len() > 80 * 1024, "{}", whole.len());
}

/// With `--log-format json` every line on stderr is one JSON object: the
/// start, the first start's and a missing password's notices, and a
/// command's fatal error — shown even with every log filtered out, as text
/// mode prints them whatever the filter.
#[test]
fn json_logs_put_nothing_but_json_on_stderr() {
    fn serve_json(env: &Env, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["--log-format", "json", "serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut cmd = env.cmd(&args);
        cmd.env("ZM_LOG", "off");
        let mut serve = Serve::spawn(cmd);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !serve
            .seen
            .iter()
            .any(|l| l.contains("zero-memory is serving"))
        {
            let left = deadline
                .checked_duration_since(Instant::now())
                .expect("serve started");
            match serve.stderr.recv_timeout(left) {
                Ok(line) => serve.seen.push(line),
                Err(e) => panic!("{e}: {:?}", serve.seen),
            }
        }
        let (_, err) = serve.stop();
        err.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
    let said = |events: &[Value], words: &[&str]| {
        events.iter().any(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| words.iter().all(|w| m.contains(w)))
        })
    };
    let env = Env::new();
    let file = env.dir.path().join("first-start.txt");
    let events = serve_json(&env, &["--first-start-output", file.to_str().unwrap()]);
    assert!(
        said(&events, &["first start", "first-start.txt"]),
        "{events:?}"
    );
    assert!(said(&events, &["zero-memory is serving"]), "{events:?}");

    // `stdio` made the owner, with no password: serve says how to set one.
    let other = Env::new();
    let made = other.run(&["stdio"]);
    assert_success(&made, &["stdio"]);
    let events = serve_json(&other, &[]);
    assert!(said(&events, &["has no password yet"]), "{events:?}");

    // A fatal error: the port is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let mut cmd = env.cmd(&["--log-format", "json", "serve", "--listen", &port]);
    cmd.env("ZM_LOG", "off");
    let failed = cmd.output().unwrap();
    assert_eq!(failed.status.code(), Some(1));
    let err = stderr(&failed);
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let last = lines
        .last()
        .unwrap_or_else(|| panic!("nothing on stderr: {err}"));
    assert_eq!(last["level"], "ERROR", "{err}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("cannot listen"),
        "{err}"
    );
}

/// The port is bound before anything else: on a new data directory, a
/// taken port fails `serve` before a database is made or a first start's
/// owner (and its secrets) printed.
#[test]
fn a_taken_port_fails_serve_before_its_first_start() {
    let env = Env::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let out = output_within(env.cmd(&["serve", "--listen", &port]), 60);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot listen"), "{}", stderr(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!all.contains("zm_pat_"), "no first start: {all}");
    assert!(
        !env.data_dir().join("zero-memory.db").exists(),
        "no database made"
    );
}

/// The test-only anonymous user: started the way `.ci/conformance/run.sh`
/// does (loopback, no public URL) it works and warns loudly; with a public
/// URL, proxy trust or an allowed host it refuses to start, naming the knob.
#[test]
fn the_test_anonymous_user_warns_and_is_refused_behind_a_proxy() {
    let env = Env::new();
    env.ok(&["user", "add", "conformance@localhost"]);
    // As the CI script writes it: options before the command name.
    let mut cmd = bin();
    cmd.arg("--data-dir").arg(env.data_dir()).args([
        "--listen",
        "127.0.0.1:0",
        "--test-anonymous-user",
        "conformance@localhost",
        "serve",
    ]);
    let mut serve = Serve::spawn(cmd);
    assert!(serve.wait_serving(), "{:?}", serve.seen);
    let (_, warned) = serve.stop();
    assert!(
        warned.contains("TEST MODE") && warned.contains("NEVER use it"),
        "{warned}"
    );

    let cases: [(&[&str], &str); 3] = [
        (
            &["--public-url", "http://memory.example.com"],
            "ZM_PUBLIC_URL",
        ),
        (
            &[
                "--public-url",
                "https://memory.example.com",
                "--trust-proxy",
            ],
            "ZM_TRUST_PROXY",
        ),
        (&["--allowed-hosts", "memory.internal"], "ZM_ALLOWED_HOSTS"),
    ];
    for (extra, knob) in cases {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--test-anonymous-user",
            "conformance@localhost",
        ];
        args.extend_from_slice(extra);
        let out = output_within(env.cmd(&args), 20);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("ZM_TEST_ANONYMOUS_USER") && err.contains(knob),
            "{extra:?}: {err}"
        );
    }
}

/// Credentials lifecycle through the CLI: expiring tokens with their last
/// use, `user passwd --revoke-tokens`, `user disable` / `enable`.
#[test]
fn token_expiry_passwd_revocation_and_disabled_users() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let expiring = env.ok(&[
        "token",
        "create",
        "--user",
        "alice@example.com",
        "--name",
        "ci",
        "--expires",
        "90d",
    ]);
    let expiring = expiring.trim().to_string();
    let forever = env.ok(&[
        "token",
        "create",
        "--user",
        "alice@example.com",
        "--name",
        "laptop",
    ]);
    let forever = forever.trim().to_string();
    let bad = env.run(&[
        "token",
        "create",
        "--user",
        "alice@example.com",
        "--expires",
        "90x",
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("--expires"), "{}", stderr(&bad));

    let store = StoreAt::new(&env);
    assert!(store.authenticates(&expiring), "a fresh token works");
    let list = env.ok(&["token", "list", "--user", "alice@example.com"]);
    assert!(list.lines().next().unwrap().contains("EXPIRES"), "{list}");
    let row = |list: &str, name: &str| -> Vec<String> {
        list.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {list}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // ID NAME SCOPES(2) STATUS CREATED EXPIRES LAST-USED
    let ci = row(&list, "ci");
    let laptop = row(&list, "laptop");
    assert_eq!(ci[4], "active", "{list}");
    assert!(
        ci[6] > ci[5] && ci[6].starts_with("20"),
        "an expiry date: {list}"
    );
    assert!(ci[7].starts_with("20"), "used just now: {list}");
    assert_eq!(laptop[6], "never", "{list}");
    assert_eq!(laptop[7], "never", "{list}");

    // passwd without --revoke-tokens keeps personal tokens; with, revokes them.
    let out = env.run_stdin(
        &["user", "passwd", "alice@example.com", "--password-stdin"],
        "a long new password\n",
    );
    assert_success(&out, &["user passwd"]);
    assert!(store.authenticates(&forever));
    let out = env.run_stdin(
        &[
            "user",
            "passwd",
            "alice@example.com",
            "--password-stdin",
            "--revoke-tokens",
        ],
        "another long password\n",
    );
    assert_success(&out, &["user passwd --revoke-tokens"]);
    assert!(
        stderr(&out).contains("revoked 2 personal access token"),
        "{}",
        stderr(&out)
    );
    assert!(!store.authenticates(&forever) && !store.authenticates(&expiring));
    let list = env.ok(&["token", "list", "--user", "alice@example.com"]);
    assert_eq!(list.matches("revoked").count(), 2, "{list}");

    // disable: every credential refused at once; enable: back.
    let token = env.ok(&["token", "create", "--user", "alice@example.com"]);
    let token = token.trim().to_string();
    assert!(store.authenticates(&token));
    env.ok(&["user", "disable", "alice@example.com"]);
    assert!(!store.authenticates(&token), "a disabled user's token");
    assert!(!store.password_works("alice@example.com", "another long password"));
    assert!(env.ok(&["user", "list"]).contains("disabled"));
    let out = env.run_stdin(&["stdio", "--user", "alice@example.com"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("disabled"), "{}", stderr(&out));
    // No new token for it (a secret that would open nothing), and no
    // memories written as it; its export still works (the operator's copy).
    let before = env.ok(&["token", "list", "--user", "alice@example.com"]);
    // Its tokens read as what they are now: opening nothing.
    assert!(
        before.contains("disabled") && !before.contains("active"),
        "{before}"
    );
    let out = env.run(&["token", "create", "--user", "alice@example.com"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "token create for a disabled account"
    );
    assert!(
        out.stdout.is_empty() && stderr(&out).contains("disabled"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        env.ok(&["token", "list", "--user", "alice@example.com"]),
        before,
        "no token was created"
    );
    let file = fixture("server-memory.jsonl");
    let args = [
        "import",
        "--user",
        "alice@example.com",
        "--format",
        "server-memory",
        file.to_str().unwrap(),
    ];
    let out = env.run(&args);
    assert_eq!(out.status.code(), Some(1), "import as a disabled account");
    assert!(stderr(&out).contains("disabled"), "{}", stderr(&out));
    let export = env.ok(&["export", "--user", "alice@example.com"]);
    assert!(!export.contains("Lisbon"), "nothing was imported: {export}");
    env.ok(&["user", "enable", "alice@example.com"]);
    assert!(store.authenticates(&token));
    assert!(store.password_works("alice@example.com", "another long password"));
}

/// The store of an [`Env`], opened in this process (to check credentials
/// the CLI created, as the HTTP server would).
struct StoreAt {
    rt: tokio::runtime::Runtime,
    url: String,
}

impl StoreAt {
    fn new(env: &Env) -> StoreAt {
        StoreAt {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            url: zm_store::sqlite_url(&env.data_dir().join("zero-memory.db")),
        }
    }

    fn with<T>(&self, f: impl AsyncFnOnce(&zm_store::Store) -> T) -> T {
        self.rt.block_on(async {
            let store = zm_store::Store::open(&self.url).await.unwrap();
            let out = f(&store).await;
            store.close().await;
            out
        })
    }

    fn authenticates(&self, token: &str) -> bool {
        self.with(async |s| s.authenticate(token).await.unwrap().is_some())
    }

    fn password_works(&self, email: &str, password: &str) -> bool {
        self.with(async |s| s.verify_password(email, password).await.unwrap().is_some())
    }
}

#[test]
fn oauth_clients_list_and_revoke() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let list = env.ok(&["oauth", "clients", "--user", "alice@example.com"]);
    assert!(list.starts_with("ID"), "{list}");
    assert_eq!(
        list.lines().count(),
        1,
        "no client is authorized yet: {list}"
    );
    let out = env.run(&[
        "oauth",
        "revoke",
        "--user",
        "alice@example.com",
        "oac_0000000000000000.0000000000",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not_found") || stderr(&out).contains("No OAuth client"),
        "{}",
        stderr(&out)
    );
}

/// `server-memory-real.jsonl` was written by `@modelcontextprotocol/server-memory`
/// 2026.8.31 itself (driven over stdio with create_entities,
/// create_relations and add_observations), not by hand.
#[test]
fn import_a_file_written_by_server_memory_itself() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let file = fixture("server-memory-real.jsonl");
    let args = [
        "--user",
        "alice@example.com",
        "--format",
        "server-memory",
        file.to_str().unwrap(),
    ];
    let first = import_json(&env, &args);
    assert_eq!(
        (
            first["lines"].as_u64(),
            first["entities"].as_u64(),
            first["relations"].as_u64()
        ),
        (Some(7), Some(4), Some(3)),
        "{first}"
    );
    // 6 observations, plus one relation type that is not ours ("works at").
    assert_eq!(first["memories_imported"], 7, "{first}");
    assert_eq!(first["edges_created"], 3, "{first}");
    assert_eq!(first["errors"], json!([]));
    let second = import_json(&env, &args);
    assert_eq!(
        (
            second["memories_imported"].as_u64(),
            second["edges_created"].as_u64()
        ),
        (Some(0), Some(0)),
        "{second}"
    );
    let export = env.ok(&["export", "--user", "alice@example.com"]);
    assert!(export.contains("Headquartered in Lisbon"), "{export}");
    assert!(export.contains("works at"), "{export}");
}

/// `reindex` embeds every live memory once: a second run embeds nothing,
/// `--all` embeds them all again.
#[test]
fn reindex_embeds_each_memory_once_and_all_again_on_request() {
    let env = Env::new();
    env.ok(&["user", "add", "alice@example.com"]);
    let file = fixture("server-memory.jsonl");
    let imported = import_json(
        &env,
        &[
            "--user",
            "alice@example.com",
            "--format",
            "server-memory",
            file.to_str().unwrap(),
        ],
    );
    let n = imported["memories_imported"].as_u64().unwrap();
    assert!(n > 0, "{imported}");
    let first = env.ok(&["reindex"]);
    assert!(
        first.starts_with(&format!("embedded {n} memories")),
        "{first}"
    );
    let second = env.ok(&["reindex"]);
    assert!(second.starts_with("embedded 0 memories"), "{second}");
    let all = env.ok(&["reindex", "--all"]);
    assert!(all.starts_with(&format!("embedded {n} memories")), "{all}");
}
