//! `cargo xtask bench-http`: concurrent HTTP load against a real `serve`.
//!
//! A benchmark, not a test: it prints figures and fails only when the run
//! itself is broken (a request errors, an acknowledged write is missing).
//!
//! `cargo xtask bench --suite http` (or its older name `cargo xtask
//! bench-http`) builds the release server and this load generator, then
//! runs `bench-http-run`, which
//!
//! * starts `zero-memory serve` on a fresh temporary data directory and a
//!   free loopback port (a user and a token made with the CLI; session caps
//!   raised so every client gets its MCP session; no token rate limit);
//! * preloads `--memories` generated memories through `import_memory` over
//!   REST (the same generator as `cargo xtask bench`, three projects);
//! * per surface (REST `/api/tools/{name}`, then MCP over Streamable HTTP
//!   `/mcp`, one session per client): `--clients` closed-loop clients for
//!   `--warmup` + `--duration` seconds, `--recall-pct` % `recall` (half
//!   pinned to a project, half over `scopes: ["*"]`) and the rest
//!   `remember`; only calls started after the warm-up are counted;
//! * restarts the server (SIGTERM, then `serve` again) and checks that every
//!   acknowledged `remember` (warm-up included) is there
//!   (`GET /api/memories/{id}`);
//! * prints throughput, p50/p99 per operation, errors (with their bodies),
//!   the server's CPU time and peak RSS.
//!
//! The load generator runs on the same machine as the server and competes
//! with it for the same cores.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bench::{PROJECTS, Rng, Slot, generate, ms, pct, query};
use crate::bench_support::{mib, release_dir, status_kib, temp_dir, write_figures};
use crate::bench_targets::HttpFigure;

/// The HTTP suite's options (`cargo xtask bench --suite http`, and
/// `bench-http-run`).
pub(crate) const HTTP_OPTIONS: &str =
    "  --memories    memories preloaded through import_memory (default 10000)
  --clients     concurrent closed-loop clients (default 64)
  --duration    measured seconds per surface (default 20)
  --warmup      seconds run before measuring, per surface (default 5)
  --recall-pct  share of recalls, the rest are remembers (default 90)
  --surfaces    rest, mcp or both (default rest,mcp)
  --binary      the zero-memory binary (default: target/release/zero-memory,
                built by `cargo xtask bench` unless --binary is given)
  --keep        keep the temporary data directory (its path is printed)";

const USAGE: &str = "usage: target/release/xtask bench-http-run [HTTP options] [--figures PATH]
(normally run by `cargo xtask bench --suite http`)

  --figures     also write the figures as JSON to PATH";

const EMAIL: &str = "bench-http@bench.zero-memory.invalid";
const PROTOCOL: &str = "2025-11-25";
/// Error bodies printed per surface; the rest are only counted.
const SHOWN_ERRORS: usize = 10;

#[derive(Debug, Clone)]
struct Options {
    memories: usize,
    clients: usize,
    duration: Duration,
    warmup: Duration,
    recall_pct: usize,
    surfaces: Vec<Surface>,
    binary: Option<PathBuf>,
    keep: bool,
    figures: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    Rest,
    Mcp,
}

impl Surface {
    fn label(self) -> &'static str {
        match self {
            Surface::Rest => "REST /api/tools",
            Surface::Mcp => "MCP /mcp (Streamable HTTP)",
        }
    }
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            memories: 10_000,
            clients: 64,
            duration: Duration::from_secs(20),
            warmup: Duration::from_secs(5),
            recall_pct: 90,
            surfaces: vec![Surface::Rest, Surface::Mcp],
            binary: None,
            keep: false,
            figures: None,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
            let number = |v: &str| {
                v.parse::<usize>()
                    .map_err(|e| format!("{a}: {v:?} is not a number ({e})"))
            };
            match a.as_str() {
                "--memories" => o.memories = number(value()?)?,
                "--clients" => o.clients = number(value()?)?.max(1),
                "--duration" => {
                    o.duration = Duration::from_secs(
                        number(value()?)?
                            .try_into()
                            .map_err(|e| format!("{a}: {e}"))?,
                    );
                }
                "--warmup" => {
                    o.warmup = Duration::from_secs(
                        number(value()?)?
                            .try_into()
                            .map_err(|e| format!("{a}: {e}"))?,
                    );
                }
                "--recall-pct" => o.recall_pct = number(value()?)?.min(100),
                "--surfaces" => {
                    o.surfaces = value()?
                        .split(',')
                        .map(|s| match s.trim() {
                            "rest" => Ok(Surface::Rest),
                            "mcp" => Ok(Surface::Mcp),
                            other => Err(format!("unknown surface {other:?}")),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--binary" => o.binary = Some(PathBuf::from(value()?)),
                "--keep" => o.keep = true,
                "--figures" => o.figures = Some(PathBuf::from(value()?)),
                other => return Err(format!("unknown option {other}")),
            }
        }
        Ok(o)
    }
}

/// The `bench-http-run` command (normally reached through `cargo xtask
/// bench --suite http`).
pub(crate) fn bench_http_run(args: &[String]) -> ExitCode {
    let opts = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n\n{USAGE}\n{HTTP_OPTIONS}");
            return ExitCode::from(2);
        }
    };
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: the load generator is a debug build; run `cargo xtask bench --suite http` (release)"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(&opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-http: {e}");
            ExitCode::FAILURE
        }
    }
}

// ------------------------------------------------------------ the server

struct Server {
    binary: PathBuf,
    data_dir: PathBuf,
    port: u16,
    base: String,
    child: Option<Child>,
}

impl Server {
    fn new(binary: PathBuf, data_dir: PathBuf) -> Result<Server, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| std::net::TcpListener::local_addr(&l))
            .map_err(|e| format!("find a free port: {e}"))?
            .port();
        Ok(Server {
            binary,
            data_dir,
            port,
            base: format!("http://127.0.0.1:{port}"),
            child: None,
        })
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.binary);
        c.env_remove("ZM_DATABASE_URL")
            .env_remove("ZM_CONFIG")
            .env("ZM_DATA_DIR", &self.data_dir)
            .env("ZM_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("ZM_LOG", "warn")
            // Every client gets its MCP session (the defaults are 200 and
            // 20 per user: the 21st session of one user would end the first).
            .env("ZM_MAX_SESSIONS", "100000")
            .env("ZM_MAX_SESSIONS_PER_USER", "100000")
            .env("ZM_TOKEN_RATE_LIMIT", "0");
        c
    }

    fn cli(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        use std::io::Write;
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("run {}: {e}", self.binary.display()))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())
                .map_err(|e| format!("write to zero-memory {args:?}: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("zero-memory {args:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "zero-memory {args:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn start(&mut self, http: &reqwest::Client) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.join("serve.log"))
            .map_err(|e| format!("open serve.log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("serve.log: {e}"))?;
        let child = self
            .command()
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("start serve: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Err(format!(
                    "serve exited early ({status}); see {}",
                    self.data_dir.join("serve.log").display()
                ));
            }
            if let Ok(r) = http.get(format!("{}/readyz", self.base)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("serve did not become ready in 60 s".into())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM (graceful shutdown), then wait.
    fn stop(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err("serve did not stop within 60 s of SIGTERM (killed)".into())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3, utime 14, stime 15 (1-based).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(100);
    #[allow(clippy::cast_precision_loss, reason = "CPU ticks, far below 2^52")]
    let ticks = ticks as f64;
    Some(ticks / f64::from(hz))
}

// ------------------------------------------------------------ clients

/// What one client measured.
#[derive(Default)]
struct Tally {
    recall: Vec<Duration>,
    remember: Vec<Duration>,
    /// Every acknowledged remember's memory id (warm-up included).
    acknowledged: Vec<String>,
    errors: usize,
    error_bodies: Vec<String>,
}

impl Tally {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.error_bodies.len() < SHOWN_ERRORS {
            self.error_bodies.push(what);
        }
    }
}

/// One client's connection to a surface.
struct Conn {
    http: reqwest::Client,
    base: String,
    token: String,
    surface: Surface,
    session: Option<String>,
    next_id: u64,
}

impl Conn {
    async fn open(base: &str, token: &str, surface: Surface) -> Result<Conn, String> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(4)
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        let mut c = Conn {
            http,
            base: base.to_string(),
            token: token.to_string(),
            surface,
            session: None,
            next_id: 1,
        };
        if surface == Surface::Mcp {
            let (status, headers, body) = c
                .mcp_post(&json!({
                    "jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                               "clientInfo": {"name": "zm-bench-http", "version": "1"}}
                }))
                .await?;
            let sid = headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let Some(sid) = sid.filter(|_| status.is_success()) else {
                return Err(format!("initialize: {status} {body}"));
            };
            c.session = Some(sid);
            let (status, _, body) = c
                .mcp_post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await?;
            if !status.is_success() {
                return Err(format!("notifications/initialized: {status} {body}"));
            }
        }
        Ok(c)
    }

    async fn mcp_post(
        &self,
        message: &Value,
    ) -> Result<(reqwest::StatusCode, reqwest::header::HeaderMap, String), String> {
        let mut req = self
            .http
            .post(format!("{}/mcp", self.base))
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .json(message);
        if let Some(sid) = &self.session {
            req = req
                .header("mcp-session-id", sid)
                .header("mcp-protocol-version", PROTOCOL);
        }
        let resp = req.send().await.map_err(|e| format!("POST /mcp: {e}"))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .text()
            .await
            .map_err(|e| format!("POST /mcp body: {e}"))?;
        Ok((status, headers, body))
    }

    /// Call a tool; its structured output, or the error as text.
    async fn call(&mut self, tool: &str, args: Value) -> Result<Value, String> {
        match self.surface {
            Surface::Rest => {
                let resp = self
                    .http
                    .post(format!("{}/api/tools/{tool}", self.base))
                    .bearer_auth(&self.token)
                    .json(&args)
                    .send()
                    .await
                    .map_err(|e| format!("{tool}: {e}"))?;
                let status = resp.status();
                let body = resp.text().await.map_err(|e| format!("{tool}: {e}"))?;
                if !status.is_success() {
                    return Err(format!("{tool}: {status} {body}"));
                }
                serde_json::from_str(&body).map_err(|e| format!("{tool}: {e}: {body}"))
            }
            Surface::Mcp => {
                let id = self.next_id;
                self.next_id += 1;
                let (status, _, body) = self
                    .mcp_post(&json!({
                        "jsonrpc": "2.0", "id": id, "method": "tools/call",
                        "params": {"name": tool, "arguments": args}
                    }))
                    .await?;
                if !status.is_success() {
                    return Err(format!("{tool}: {status} {body}"));
                }
                let msg = jsonrpc_response(&body, id)
                    .ok_or_else(|| format!("{tool}: no response with id {id} in {body}"))?;
                if msg.get("error").is_some() {
                    return Err(format!("{tool}: {msg}"));
                }
                let result = &msg["result"];
                if result["isError"] == json!(true) {
                    return Err(format!("{tool}: isError {}", result["content"]));
                }
                Ok(result["structuredContent"].clone())
            }
        }
    }

    async fn close(self) {
        if let Some(sid) = &self.session {
            let _ = self
                .http
                .delete(format!("{}/mcp", self.base))
                .bearer_auth(&self.token)
                .header("mcp-session-id", sid)
                .header("mcp-protocol-version", PROTOCOL)
                .send()
                .await;
        }
    }
}

/// The JSON-RPC response with `id` in a JSON or `text/event-stream` body.
fn jsonrpc_response(body: &str, id: u64) -> Option<Value> {
    let candidates: Vec<Value> = if body.trim_start().starts_with('{') {
        serde_json::from_str(body).ok().into_iter().collect()
    } else {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    };
    candidates.into_iter().find(|m| m["id"] == json!(id))
}

/// One closed-loop client: calls until `end`, counting those started after
/// `measure_from`.
async fn client_loop(
    mut conn: Conn,
    seed: u64,
    recall_pct: usize,
    measure_from: Instant,
    end: Instant,
) -> Tally {
    let mut rng = Rng(seed);
    let mut t = Tally::default();
    while Instant::now() < end {
        let recall = rng.below(100) < recall_pct;
        let (tool, args) = if recall {
            let mut args = json!({"query": query(&mut rng), "k": 10});
            // Unpinned reads name every visible scope: over /mcp a
            // `project_hint` remember attaches the session to that project,
            // and a bare recall would then read only that project.
            if rng.below(2) == 0 {
                args["project_hint"] = json!(PROJECTS[rng.below(PROJECTS.len())].1);
            } else {
                args["scopes"] = json!(["*"]);
            }
            ("recall", args)
        } else {
            let g = generate(&mut rng);
            let mut args = json!({"content": g.content, "kind": g.kind});
            match g.slot {
                Slot::Personal => args["scope"] = json!("personal"),
                Slot::Core => args["scope"] = json!("core"),
                Slot::Project(i) => args["project_hint"] = json!(PROJECTS[i].1),
            }
            ("remember", args)
        };
        let started = Instant::now();
        let out = conn.call(tool, args).await;
        let took = started.elapsed();
        let counted = started >= measure_from;
        match out {
            Ok(v) if recall => {
                if v.get("memories").is_none_or(|m| !m.is_array()) {
                    t.error(format!("recall: no memories in {v}"));
                } else if counted {
                    t.recall.push(took);
                }
            }
            Ok(v) => match v.get("memory_id").and_then(Value::as_str) {
                Some(id) => {
                    t.acknowledged.push(id.to_string());
                    if counted {
                        t.remember.push(took);
                    }
                }
                None => t.error(format!("remember: no memory_id in {v}")),
            },
            Err(e) => t.error(e),
        }
    }
    conn.close().await;
    t
}

// ------------------------------------------------------------ the run

struct SurfaceResult {
    surface: Surface,
    measured: Duration,
    recall: Vec<Duration>,
    remember: Vec<Duration>,
    acknowledged: Vec<String>,
    errors: usize,
    server_cpu_s: Option<f64>,
    loadgen_cpu_s: Option<f64>,
}

async fn preload(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    n: usize,
) -> Result<(Duration, usize), String> {
    let workers = 8;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (http, base, token) = (http.clone(), base.to_string(), token.to_string());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x5EED_0F2E_6000 + u64::try_from(w).unwrap_or(0));
            let mut i = w;
            let mut absorbed = 0;
            while i < n {
                let g = generate(&mut rng);
                let mut args = json!({
                    "content": g.content, "kind": g.kind,
                    "source_path": "bench/http-preload.md",
                    "source_hash": format!("bench-http-{i}"),
                });
                match g.slot {
                    Slot::Personal => args["target"] = json!("personal"),
                    Slot::Core => args["target"] = json!("core"),
                    Slot::Project(p) => {
                        args["target"] = json!("project");
                        args["project_hint"] = json!(PROJECTS[p].1);
                    }
                }
                let resp = http
                    .post(format!("{base}/api/tools/import_memory"))
                    .bearer_auth(&token)
                    .json(&args)
                    .send()
                    .await
                    .map_err(|e| format!("import_memory: {e}"))?;
                let status = resp.status();
                let body = resp.text().await.unwrap_or_default();
                if !status.is_success() {
                    return Err(format!("import_memory: {status} {body}"));
                }
                let out: Value = serde_json::from_str(&body)
                    .map_err(|e| format!("import_memory: {e}: {body}"))?;
                if out["deduplicated"] == json!(true) || out["skipped"] == json!(true) {
                    absorbed += 1;
                }
                i += workers;
            }
            Ok::<usize, String>(absorbed)
        }));
    }
    let mut absorbed = 0;
    for t in tasks {
        absorbed += t.await.map_err(|e| format!("preload task: {e}"))??;
    }
    Ok((started.elapsed(), absorbed))
}

async fn run_surface(
    surface: Surface,
    base: &str,
    token: &str,
    opts: &Options,
    server_pid: &str,
) -> Result<SurfaceResult, String> {
    let mut conns = Vec::with_capacity(opts.clients);
    for _ in 0..opts.clients {
        conns.push(Conn::open(base, token, surface).await?);
    }
    eprintln!(
        "[{}] {} clients connected; {} s warm-up, {} s measured",
        surface.label(),
        opts.clients,
        opts.warmup.as_secs(),
        opts.duration.as_secs()
    );
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let end = measure_from + opts.duration;
    let seed_base: u64 = if surface == Surface::Rest {
        1_000
    } else {
        2_000
    };
    let mut tasks = Vec::with_capacity(opts.clients);
    for (i, conn) in conns.into_iter().enumerate() {
        let seed = seed_base + u64::try_from(i).unwrap_or(0);
        tasks.push(tokio::spawn(client_loop(
            conn,
            seed,
            opts.recall_pct,
            measure_from,
            end,
        )));
    }
    // CPU time over the measured window only.
    tokio::time::sleep_until(tokio::time::Instant::from_std(measure_from)).await;
    let (srv0, gen0) = (cpu_seconds(server_pid), cpu_seconds("self"));
    tokio::time::sleep_until(tokio::time::Instant::from_std(end)).await;
    let (srv1, gen1) = (cpu_seconds(server_pid), cpu_seconds("self"));
    let mut r = SurfaceResult {
        surface,
        measured: opts.duration,
        recall: Vec::new(),
        remember: Vec::new(),
        acknowledged: Vec::new(),
        errors: 0,
        server_cpu_s: srv0.zip(srv1).map(|(a, b)| b - a),
        loadgen_cpu_s: gen0.zip(gen1).map(|(a, b)| b - a),
    };
    let mut shown = 0;
    for t in tasks {
        let t = t.await.map_err(|e| format!("client task: {e}"))?;
        r.recall.extend(t.recall);
        r.remember.extend(t.remember);
        r.acknowledged.extend(t.acknowledged);
        r.errors += t.errors;
        for e in t.error_bodies {
            if shown < SHOWN_ERRORS {
                eprintln!("[{}] error: {e}", surface.label());
                shown += 1;
            }
        }
    }
    r.recall.sort();
    r.remember.sort();
    Ok(r)
}

/// Every id that `GET /api/memories/{id}` does not return (200).
async fn missing(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    ids: Vec<String>,
) -> Result<Vec<String>, String> {
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (http, base, token) = (http.clone(), base.to_string(), token.to_string());
        let (ids, next) = (ids.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut gone = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = ids.get(i) else { break };
                let resp = http
                    .get(format!("{base}/api/memories/{id}"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .map_err(|e| format!("GET /api/memories/{id}: {e}"))?;
                if resp.status() != reqwest::StatusCode::OK {
                    let status = resp.status();
                    let body = resp.text().await.unwrap_or_default();
                    gone.push(format!("{id}: {status} {body}"));
                }
            }
            Ok::<Vec<String>, String>(gone)
        }));
    }
    let mut gone = Vec::new();
    for t in tasks {
        gone.extend(t.await.map_err(|e| format!("verify task: {e}"))??);
    }
    Ok(gone)
}

fn rate(n: usize, d: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss, reason = "a call count")]
    let n = n as f64;
    n / d.as_secs_f64()
}

async fn run(opts: &Options) -> Result<(), String> {
    let binary = opts
        .binary
        .clone()
        .unwrap_or_else(|| release_dir().join("zero-memory"));
    let binary = std::fs::canonicalize(&binary).map_err(|e| {
        format!(
            "{}: {e} (cargo build --release -p zm-server)",
            binary.display()
        )
    })?;
    let dir = temp_dir("bench-http")?;
    eprintln!("data directory {}", dir.display());
    let result = run_in(opts, binary, &dir).await;
    if opts.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run_in(opts: &Options, binary: PathBuf, dir: &Path) -> Result<(), String> {
    let mut server = Server::new(binary, dir.to_path_buf())?;
    let version = server.cli(&["--version"], None)?;
    server.cli(
        &["user", "add", EMAIL, "--password-stdin"],
        Some("bench-http-password\n"),
    )?;
    let out = server.cli(&["token", "create", "--user", EMAIL], None)?;
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("zm_pat_"))
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
        .ok_or_else(|| format!("no token in: {out}"))?
        .to_string();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| format!("http client: {e}"))?;
    server.start(&http).await?;
    let pid = server.pid().map_or_else(String::new, |p| format!("{p}"));
    eprintln!(
        "serve started (pid {pid}) at {}; preloading {} memories through import_memory…",
        server.base, opts.memories
    );
    let (took, absorbed) = preload(&http, &server.base, &token, opts.memories).await?;
    eprintln!(
        "preloaded {} imports in {:.1} s ({:.0}/s, 8 concurrent clients); {absorbed} were exact duplicates (absorbed)",
        opts.memories,
        took.as_secs_f64(),
        rate(opts.memories, took)
    );
    let mut results = Vec::new();
    for &surface in &opts.surfaces {
        results.push(run_surface(surface, &server.base, &token, opts, &pid).await?);
    }
    let peak_kib = status_kib(&pid, "VmHWM");
    // Restart, then look every acknowledged write up.
    server.stop()?;
    server.start(&http).await?;
    let mut lost = Vec::new();
    let mut acknowledged = 0;
    for r in &results {
        let ids: Vec<String> = r
            .acknowledged
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        acknowledged += ids.len();
        let gone = missing(&http, &server.base, &token, ids).await?;
        lost.push(gone);
    }
    server.stop()?;

    println!();
    println!(
        "zero-memory HTTP load — {}; {} memories preloaded; {} clients, closed loop, {}% recall (k = 10; half pinned by project_hint, half over scopes [*]) / {}% remember; {} s warm-up + {} s measured per surface; server and load generator on the same machine ({} CPUs)",
        version.trim(),
        opts.memories,
        opts.clients,
        opts.recall_pct,
        100 - opts.recall_pct,
        opts.warmup.as_secs(),
        opts.duration.as_secs(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    println!();
    println!(
        "| surface | recalls/s | remembers/s | recall p50 / p99 | remember p50 / p99 | errors | acknowledged writes (whole run) | missing after restart | server CPU | load generator CPU |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (r, gone) in results.iter().zip(&lost) {
        let cpu = |c: Option<f64>| {
            c.map_or_else(
                || "?".to_string(),
                |s| format!("{:.0}%", 100.0 * s / r.measured.as_secs_f64()),
            )
        };
        println!(
            "| {} | {:.0} | {:.0} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {} | {} | {} | {} | {} |",
            r.surface.label(),
            rate(r.recall.len(), r.measured),
            rate(r.remember.len(), r.measured),
            ms(pct(&r.recall, 50.0)),
            ms(pct(&r.recall, 99.0)),
            ms(pct(&r.remember, 50.0)),
            ms(pct(&r.remember, 99.0)),
            r.errors,
            r.acknowledged.len(),
            gone.len(),
            cpu(r.server_cpu_s),
            cpu(r.loadgen_cpu_s),
        );
    }
    println!();
    println!(
        "server peak RSS (VmHWM): {}",
        peak_kib.map_or_else(|| "?".to_string(), |k| format!("{:.1} MiB", mib(k)))
    );
    println!("CPU: 100% = one core busy for the whole measured window.");
    if let Some(path) = &opts.figures {
        let figures: Vec<HttpFigure> = results
            .iter()
            .zip(&lost)
            .map(|(r, gone)| HttpFigure {
                surface: r.surface.label().to_string(),
                clients: opts.clients,
                memories: opts.memories,
                recalls_per_s: rate(r.recall.len(), r.measured),
                recall_p50_ms: ms(pct(&r.recall, 50.0)),
                recall_p99_ms: ms(pct(&r.recall, 99.0)),
                errors: r.errors,
                acknowledged: r.acknowledged.len(),
                lost: gone.len(),
            })
            .collect();
        write_figures(path, &figures)?;
    }
    let errors: usize = results.iter().map(|r| r.errors).sum();
    let lost_total: usize = lost.iter().map(Vec::len).sum();
    for g in lost.iter().flatten().take(SHOWN_ERRORS) {
        eprintln!("lost: {g}");
    }
    if errors > 0 || lost_total > 0 {
        return Err(format!(
            "{errors} errors, {lost_total} of {acknowledged} acknowledged writes missing"
        ));
    }
    println!("every acknowledged write ({acknowledged}) was found after a restart; 0 errors");
    Ok(())
}
