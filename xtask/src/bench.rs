//! `cargo xtask bench`: store throughput and latency at realistic sizes.
//!
//! `cargo xtask bench` (`bench_suite.rs`, its store suite) re-invokes this
//! binary in release mode (`cargo run --release -p xtask -- bench-run …`)
//! so the figures are those of an optimised build; `bench-run` does the
//! work:
//!
//! * per backend (a fresh temporary SQLite file; PostgreSQL when a URL is
//!   given, which must name an empty database), one user and three
//!   projects bound to project hints;
//! * sizes are measured in ascending order on one store: it is loaded to
//!   exactly N memories, measured, then loading continues to the next size;
//! * loading: the first 2,000 memories go through `remember` (timed: the
//!   throughput of a fresh store), the bulk through `import_memory` in
//!   batches of 500 (the CLI import's path: same content guard and exact
//!   dedup, one transaction per batch, but no near-duplicate probe, which makes a
//!   100k load through `remember` take hours), and the last 500 before N
//!   through `remember` again (timed: the throughput at N). `--bulk
//!   remember` sends every memory through `remember`;
//! * memories are 5 store-clock minutes apart (`--spacing-minutes`), so
//!   100k memories are about a year of history;
//! * at each size: `--queries` `recall`s (k = 10, half pinned to a project
//!   by `project_hint`, half over `scopes: ["*"]`), briefings
//!   (`build_context` with `briefing: true`, three quarters pinned), their
//!   latency percentiles, and the database size. On PostgreSQL the bench
//!   runs `ANALYZE` after loading, as autovacuum would on a normal server.
//!
//! Contents are generated from word lists (decisions, conventions, gotchas,
//! facts about services, libraries and commands, 60–250 characters) with a
//! fixed seed, spread over five scopes: personal, core and three projects.
//! Every write is sequential: one caller, one call at a time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use zm_contracts::catalogue::tool;
use zm_contracts::{BuildContextInput, ImportMemoryInput, RecallInput, RememberInput};
use zm_store::{Caller, OpenOptions, Store, ToolService};

use crate::bench_support::{mib, status_kib, temp_dir, write_figures};
use crate::bench_targets::StoreFigure;

/// The store suite's options (`cargo xtask bench --suite store`, and
/// `bench-run`).
pub(crate) const STORE_OPTIONS: &str =
    "  --sizes     store sizes to measure at, ascending; 10k, 1M and 1_000_000
              are understood (default 10000,100000). Time on 2 cores:
              10k under a minute, 100k a few minutes; 1M (1000000) an
              estimated 10-30 minutes more (the bulk import runs at
              1,500-3,000/s), about 1.7 GiB of disk under $TMPDIR, and
              a resident size that may reach 2 GiB, nearly all of it
              mapped database pages (mmap is capped at 256 MiB per
              connection); progress, with the time left, goes to stderr
  --queries   recall queries per size (default 500); briefings: a fifth
              of that, at least 50
  --postgres  URL of an EMPTY PostgreSQL database (default: the
              ZM_BENCH_DATABASE_URL environment variable; PostgreSQL is
              skipped when neither is given)
  --backends  which to run, comma-separated: sqlite (synchronous=FULL, the
              default setting), sqlite-normal (synchronous=NORMAL, a
              variant), postgres (default: sqlite,postgres)
  --bulk      how the bulk of N is loaded: import (default: import_memory,
              with the first 2,000 memories and the last --remembers-at-n
              before each size written by remember and timed) or remember
              (every memory through remember: slow at large N)
  --remembers-at-n
              remembers timed when the store holds N (default 500)
  --recall-mode
              lexical (default) or hybrid: the bundled model embeds every
              memory once each size is loaded (timed: the background
              embedder's work, done in the foreground), and every recall
              and briefing embeds its query
  --recall-while-embedding
              with --recall-mode hybrid: time --queries recalls while the
              model embeds the backlog (before the figures above, which
              are taken once it is embedded); the embedding time printed
              then includes those recalls
  --spacing-minutes
              store-clock minutes between two loaded memories (default 5:
              100k memories span about a year of history, so the 14-day
              windows of a briefing see about 4,000 of them; 0 puts every
              memory in the last minutes, the worst case for those windows)
  --keep      keep the temporary SQLite files (their paths are printed)";

const BENCH_USAGE: &str = "usage: target/release/xtask bench-run [store options] [--figures PATH]
(normally run by `cargo xtask bench --suite store`)

  --figures   also write the figures as JSON to PATH";

/// `ZM_BENCH_TRACE=sqlx::query=debug`: every SQL statement and its
/// duration on stderr.
fn trace_from_env() {
    if std::env::var_os("ZM_BENCH_TRACE").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("ZM_BENCH_TRACE"))
            .with_writer(std::io::stderr)
            .init();
    }
}

/// The `bench-run` command (normally reached through `bench`).
pub(crate) fn bench_run(args: &[String]) -> ExitCode {
    let opts = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n\n{BENCH_USAGE}\n{STORE_OPTIONS}");
            return ExitCode::from(2);
        }
    };
    trace_from_env();
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: this is a debug build; run `cargo xtask bench` (release) for honest figures"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Clone)]
struct Options {
    sizes: Vec<usize>,
    queries: usize,
    postgres: Option<String>,
    backends: Vec<String>,
    bulk: Bulk,
    spacing_minutes: i64,
    /// `remember`s timed when the store holds N (they complete it to N).
    at_n: usize,
    keep: bool,
    /// Where to write the figures as JSON (`--figures`).
    figures: Option<PathBuf>,
    /// Hybrid recall (`--recall-mode hybrid`): the bundled model embeds
    /// every memory before recall is measured (timed), and each recall
    /// embeds its query.
    hybrid: bool,
    /// `--recall-while-embedding`: recalls timed while the backlog is
    /// embedded beside them, the embedder's threads competing for the
    /// cores as the server's background embedder does.
    while_embedding: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            sizes: vec![10_000, 100_000],
            queries: 500,
            postgres: std::env::var("ZM_BENCH_DATABASE_URL")
                .ok()
                .filter(|u| !u.trim().is_empty()),
            backends: vec!["sqlite".into(), "postgres".into()],
            bulk: Bulk::Import,
            spacing_minutes: 5,
            at_n: 500,
            keep: false,
            figures: None,
            hybrid: false,
            while_embedding: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match a.as_str() {
                "--sizes" => {
                    let v = value("--sizes")?;
                    o.sizes = v
                        .split(',')
                        .map(parse_size)
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("--sizes: not a list of numbers: {v:?}"))?;
                    o.sizes.sort_unstable();
                    o.sizes.dedup();
                    if o.sizes.first() == Some(&0) || o.sizes.is_empty() {
                        return Err("--sizes must be positive".into());
                    }
                }
                "--queries" => {
                    let v = value("--queries")?;
                    o.queries = v
                        .parse()
                        .map_err(|_| format!("--queries: not a number: {v:?}"))?;
                }
                "--postgres" => o.postgres = Some(value("--postgres")?),
                "--backends" => {
                    let v = value("--backends")?;
                    o.backends = v.split(',').map(|s| s.trim().to_string()).collect();
                    for b in &o.backends {
                        if !["sqlite", "sqlite-normal", "postgres"].contains(&b.as_str()) {
                            return Err(format!("--backends: unknown backend {b:?}"));
                        }
                    }
                }
                "--bulk" => {
                    o.bulk = match value("--bulk")?.as_str() {
                        "import" => Bulk::Import,
                        "remember" => Bulk::Remember,
                        other => return Err(format!("--bulk: import or remember, not {other:?}")),
                    }
                }
                "--spacing-minutes" => {
                    let v = value("--spacing-minutes")?;
                    o.spacing_minutes = v
                        .parse()
                        .ok()
                        .filter(|m: &i64| *m >= 0)
                        .ok_or_else(|| format!("--spacing-minutes: not a number: {v:?}"))?;
                }
                "--remembers-at-n" => {
                    let v = value("--remembers-at-n")?;
                    o.at_n =
                        v.parse().ok().filter(|n: &usize| *n > 0).ok_or_else(|| {
                            format!("--remembers-at-n: not a positive number: {v:?}")
                        })?;
                }
                "--keep" => o.keep = true,
                "--recall-mode" => {
                    o.hybrid = match value("--recall-mode")?.as_str() {
                        "hybrid" => true,
                        "lexical" => false,
                        other => {
                            return Err(format!("--recall-mode: hybrid or lexical, not {other:?}"));
                        }
                    }
                }
                "--figures" => o.figures = Some(PathBuf::from(value("--figures")?)),
                "--recall-while-embedding" => o.while_embedding = true,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if o.while_embedding && !o.hybrid {
            return Err("--recall-while-embedding needs --recall-mode hybrid".into());
        }
        Ok(o)
    }
}

/// A store size: `100000`, `100_000`, `100k` or `1M`.
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().replace('_', "");
    let (digits, factor) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1_000),
        b'm' | b'M' => (&s[..s.len() - 1], 1_000_000),
        _ => (s.as_str(), 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(factor)
}

// ------------------------------------------------------------ generation

/// SplitMix64: a small deterministic generator (same data on every run).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("below n, a usize")
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
}

const SERVICES: &[&str] = &[
    "billing-api",
    "auth-service",
    "search-indexer",
    "notification-worker",
    "payments-gateway",
    "user-profile",
    "report-generator",
    "ingest-pipeline",
    "media-transcoder",
    "feature-flags",
    "audit-log",
    "rate-limiter",
    "session-store",
    "email-sender",
    "checkout",
    "inventory-sync",
    "analytics-collector",
    "graphql-gateway",
    "scheduler",
    "webhook-dispatcher",
];

const LIBRARIES: &[&str] = &[
    "tokio",
    "sqlx",
    "serde",
    "axum",
    "reqwest",
    "tracing",
    "clap",
    "rayon",
    "hyper",
    "tonic",
    "prost",
    "diesel",
    "redis-rs",
    "rdkafka",
    "jsonwebtoken",
    "chrono",
    "uuid",
    "tower",
    "opentelemetry",
    "React",
    "Next.js",
    "Vite",
    "Prisma",
    "Jest",
    "Playwright",
    "pytest",
    "SQLAlchemy",
    "Celery",
    "FastAPI",
    "pydantic",
];

const INFRA: &[&str] = &[
    "PostgreSQL",
    "Redis",
    "Kafka",
    "RabbitMQ",
    "S3",
    "Kubernetes",
    "Terraform",
    "Nginx",
    "Cloudflare",
    "GitHub Actions",
    "Grafana",
    "Prometheus",
    "Sentry",
    "Vault",
    "Elasticsearch",
];

const AREAS: &[&str] = &[
    "retries",
    "pagination",
    "connection pooling",
    "schema migrations",
    "rate limiting",
    "error handling",
    "structured logging",
    "caching",
    "background jobs",
    "token refresh",
    "webhook delivery",
    "CSV export",
    "search ranking",
    "timezone handling",
    "currency rounding",
    "idempotency keys",
    "health checks",
    "graceful shutdown",
    "config loading",
    "batch imports",
];

const REASONS: &[&str] = &[
    "it keeps p99 latency under 50 ms",
    "the old client leaked connections under load",
    "the platform team already runs it",
    "it avoids a second network hop",
    "we need exactly-once delivery",
    "the vendor SDK is unmaintained",
    "it roughly halves the cloud bill",
    "on-call asked for simpler rollbacks",
    "it makes local development work offline",
    "the previous approach failed the security review",
];

const PROBLEMS: &[&str] = &[
    "deadlocks under concurrent writes",
    "silently drops messages larger than 1 MB",
    "panics on empty input",
    "leaks file descriptors",
    "returns timestamps in local time",
    "double-counts retries",
    "ignores the TLS setting",
    "blocks the async runtime",
    "times out after 30 seconds",
    "mangles UTF-8 in headers",
    "loses the trace context",
    "caches stale credentials",
];

const CONDITIONS: &[&str] = &[
    "the pool is exhausted",
    "running in CI",
    "the replica lags",
    "a deploy overlaps a migration",
    "the clocks change for DST",
    "the cache is cold",
    "two workers pick the same job",
    "the payload is gzip-compressed",
];

const FIXES: &[&str] = &[
    "pin the previous minor version",
    "set the timeout explicitly",
    "wrap the call in spawn_blocking",
    "use the batch endpoint instead",
    "add an index on (tenant_id, created_at)",
    "retry with jittered backoff",
    "normalise to UTC at the boundary",
    "raise the pool size to 32",
];

const COMMANDS: &[&str] = &[
    "cargo nextest run",
    "make lint",
    "just migrate",
    "npm run typecheck",
    "terraform plan -out plan.tfplan",
    "kubectl rollout restart",
    "pytest -x -q",
    "docker compose up -d db",
    "sqlx migrate run",
    "pnpm build",
];

const PEOPLE: &[&str] = &[
    "Alice", "Bob", "Priya", "Chen", "Marta", "Tomas", "Yuki", "Omar",
];

const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const WEEKDAYS: &[&str] = &["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"];

const STYLES: &[&str] = &[
    "early returns",
    "explicit error types",
    "small functions",
    "table-driven tests",
    "descriptive commit messages",
    "inline comments",
    "named arguments",
    "immutable data",
];

const LANGUAGES: &[&str] = &["Rust", "TypeScript", "Python", "Go", "SQL"];

/// The three projects: (slug, the hint an agent would pass).
pub(crate) const PROJECTS: &[(&str, &str)] = &[
    ("atlas", "/home/dev/src/atlas"),
    ("billing", "git@github.com:acme/billing.git"),
    ("webshop", "https://github.com/acme/webshop"),
];

/// Where a memory goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot {
    Personal,
    Core,
    Project(usize),
}

pub(crate) struct Generated {
    pub(crate) content: String,
    pub(crate) kind: &'static str,
    pub(crate) slot: Slot,
    pub(crate) entities: Option<Vec<String>>,
}

fn ticket(r: &mut Rng) -> String {
    let team = r.pick(&["ENG", "OPS", "PAY", "SEC", "WEB"]);
    format!("{team}-{}", r.range(100, 9999))
}

fn version(r: &mut Rng) -> String {
    format!("{}.{}.{}", r.range(0, 4), r.range(0, 30), r.range(0, 12))
}

pub(crate) fn generate(r: &mut Rng) -> Generated {
    let slot = match r.below(20) {
        0..=2 => Slot::Personal,
        3..=5 => Slot::Core,
        n => Slot::Project(n % PROJECTS.len()),
    };
    let (svc, svc2) = (r.pick(SERVICES), r.pick(SERVICES));
    let (lib, lib2) = (r.pick(LIBRARIES), r.pick(LIBRARIES));
    let (infra, infra2) = (r.pick(INFRA), r.pick(INFRA));
    let area = r.pick(AREAS);
    let mut entities = None;
    let (kind, content) = match slot {
        Slot::Personal => match r.below(3) {
            0 => (
                "preference",
                format!(
                    "I prefer {} over {} in {} code reviews; point it out once, not on every line (agreed in the {svc} review of {}).",
                    r.pick(STYLES),
                    r.pick(STYLES),
                    r.pick(LANGUAGES),
                    ticket(r)
                ),
            ),
            1 => (
                "preference",
                format!(
                    "Prefer small pull requests under {} lines, squash-merged, with the ticket ({}) in the title.",
                    r.range(2, 8) * 100,
                    ticket(r)
                ),
            ),
            _ => (
                "fact",
                format!(
                    "My {} shell alias `{}{}` runs `{}` with the {} profile in {svc} checkouts.",
                    r.pick(LANGUAGES),
                    &r.pick(COMMANDS)[..2],
                    r.range(1, 99),
                    r.pick(COMMANDS),
                    r.pick(&["dev", "ci", "release", "bench"])
                ),
            ),
        },
        Slot::Core => match r.below(3) {
            0 => (
                "gotcha",
                format!(
                    "Gotcha: {lib} {} {} when {}; workaround: {}.",
                    version(r),
                    r.pick(PROBLEMS),
                    r.pick(CONDITIONS),
                    r.pick(FIXES)
                ),
            ),
            1 => (
                "fact",
                format!(
                    "{infra} {} defaults: {area} is off unless configured, and the limit is {} per connection.",
                    version(r),
                    r.range(8, 512)
                ),
            ),
            _ => (
                "reference",
                format!(
                    "Reference for {lib} {area}: https://docs.example.com/{}/{}#{}",
                    lib.to_lowercase(),
                    version(r),
                    area.replace(' ', "-")
                ),
            ),
        },
        Slot::Project(_) => match r.below(9) {
            0 | 1 => {
                if r.below(3) == 0 {
                    entities = Some(vec![svc.to_string(), lib.to_string()]);
                }
                (
                    "decision",
                    format!(
                        "Decided to use {lib} for {area} in {svc} because {} ({}).",
                        r.pick(REASONS),
                        ticket(r)
                    ),
                )
            }
            2 => (
                "decision",
                format!(
                    "We chose {infra} over {infra2} for {svc} {area}; {}. Revisit after {}.",
                    r.pick(REASONS),
                    r.pick(MONTHS)
                ),
            ),
            3 => (
                "convention",
                format!(
                    "Convention in {svc}: run `{}` before pushing; {area} code lives under src/{}/ and never calls {lib} directly.",
                    r.pick(COMMANDS),
                    area.replace(' ', "_")
                ),
            ),
            4 => (
                "gotcha",
                format!(
                    "{svc} {area} {} if {} — {} ({}).",
                    r.pick(PROBLEMS),
                    r.pick(CONDITIONS),
                    r.pick(FIXES),
                    ticket(r)
                ),
            ),
            5 => (
                "fact",
                format!(
                    "{svc} listens on port {} and keeps its {area} state in {infra}; {svc2} is its main caller (p95 about {} ms).",
                    r.range(3000, 9999),
                    r.range(2, 400)
                ),
            ),
            6 => (
                "task",
                format!(
                    "TODO: move {svc} {area} from {lib} to {lib2} before the {} release; {} owns it ({}).",
                    r.pick(MONTHS),
                    r.pick(PEOPLE),
                    ticket(r)
                ),
            ),
            7 => (
                "episode",
                format!(
                    "On {} the {svc} deploy failed because {lib} {}; we rolled back and decided to {}.",
                    r.pick(WEEKDAYS),
                    r.pick(PROBLEMS),
                    r.pick(FIXES)
                ),
            ),
            _ => (
                "open-question",
                format!(
                    "Open question: should {svc} move {area} to {infra} or keep it on {infra2}? {} wants numbers first ({}).",
                    r.pick(PEOPLE),
                    ticket(r)
                ),
            ),
        },
    };
    Generated {
        content,
        kind,
        slot,
        entities,
    }
}

/// A 1–4 word query drawn from the same vocabulary.
pub(crate) fn query(r: &mut Rng) -> String {
    let mut words: Vec<String> = Vec::new();
    for _ in 0..r.range(1, 4) {
        let w = match r.below(6) {
            0 => r.pick(SERVICES).to_string(),
            1 => r.pick(LIBRARIES).to_string(),
            2 => r.pick(INFRA).to_string(),
            3 => r.pick(AREAS).to_string(),
            4 => {
                let p = r.pick(PROBLEMS);
                p.split(' ').next().unwrap_or(p).to_string()
            }
            _ => r
                .pick(&[
                    "timeout",
                    "retry",
                    "deploy",
                    "migration",
                    "latency",
                    "rollback",
                    "port",
                    "index",
                    "release",
                    "owner",
                ])
                .to_string(),
        };
        words.push(w);
    }
    words.truncate(4);
    words.join(" ")
}

// ------------------------------------------------------------ measuring

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted samples.
pub(crate) fn pct(sorted: &[Duration], p: f64) -> Duration {
    nearest_rank(sorted, p).unwrap_or(Duration::ZERO)
}

/// The nearest-rank percentile `p` of sorted samples: the
/// ceil(p/100 × n)-th (`None` for none).
pub(crate) fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a rank between 0 and the sample count"
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn human_bytes(b: u64) -> String {
    let mb = b as f64 / (1024.0 * 1024.0);
    if mb >= 1024.0 {
        format!("{:.2} GiB", mb / 1024.0)
    } else {
        format!("{mb:.1} MiB")
    }
}

/// One row of the result table.
#[derive(Debug, Clone)]
struct Row {
    backend: String,
    /// `sqlite`, `sqlite-normal` or `postgres`.
    backend_key: String,
    size: usize,
    /// `remember`s per second over the first 2,000 (from an empty store).
    first_2k_rate: Option<f64>,
    /// The bulk path and its rate over everything it loaded so far.
    bulk: &'static str,
    bulk_rate: f64,
    /// `remember`s per second, p50 and p99, when the store holds N.
    at_n_rate: f64,
    remember_p50: Duration,
    remember_p99: Duration,
    /// p50, p95, p99, max.
    recall: [Duration; 4],
    /// p50, p95, p99.
    briefing: [Duration; 3],
    bytes: u64,
    size_note: String,
    dedups: usize,
    /// This process's peak resident memory so far (`VmHWM`), KiB.
    peak_rss_kib: Option<u64>,
}

/// Parse a tool input through the real validation entry point.
macro_rules! parse {
    ($ty:ty, $raw:expr) => {{
        let raw: &Value = $raw;
        zm_contracts::parse_input::<$ty>(raw)
            .map_err(|e| format!("input {raw} does not validate: {e}"))
    }};
}

/// How the bulk of N is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bulk {
    /// `remember`, like every other write (near-duplicate probe included).
    Remember,
    /// `import_memory` in batches of [`IMPORT_BATCH`], one transaction
    /// each (the CLI import's path: content guard, exact dedup; no
    /// near-duplicate probe, no entity anchoring).
    Import,
}

/// `remember`s timed from an empty store.
const FIRST: usize = 2_000;

/// Imports per transaction in the bulk load (as the CLI import).
const IMPORT_BATCH: usize = 500;

struct Bench {
    store: Store,
    tools: ToolService,
    writer: Caller,
    reader: Caller,
    briefer: Caller,
    projects: Vec<String>,
    rng: Rng,
    qrng: Rng,
    loaded: usize,
    dedups: usize,
    first_2k: Option<Duration>,
    remember_time: Duration,
    remembered: usize,
    bulk_time: Duration,
    bulk_loaded: usize,
    spacing_ms: i64,
}

impl Bench {
    async fn new(store: Store, label: &str) -> Result<Bench, String> {
        let slug: String = label.chars().filter(char::is_ascii_alphanumeric).collect();
        let email = format!(
            "bench-{slug}-{}@bench.zero-memory.invalid",
            std::process::id()
        );
        let user = store
            .create_user(&email, "benchmark password")
            .await
            .map_err(|e| format!("create the user: {e}"))?;
        Bench::of_user(store, &user.id).await
    }

    /// The benchmark as `user_id` (whose memories a kept database holds).
    async fn of_user(store: Store, user_id: &str) -> Result<Bench, String> {
        let user = Caller::new(user_id.to_string());
        let writer = Caller::new(user.user_id.clone());
        let reader = Caller::new(user.user_id.clone());
        let briefer = Caller {
            session_id: Some("ses_bench".into()),
            ..user
        };
        let mut bench = Bench {
            tools: ToolService::new(store.clone()),
            store,
            writer,
            reader,
            briefer,
            projects: Vec::new(),
            rng: Rng(0x5EED_0F2E_6000),
            qrng: Rng(0x0051_7EAD),
            loaded: 0,
            dedups: 0,
            first_2k: None,
            remember_time: Duration::ZERO,
            remembered: 0,
            bulk_time: Duration::ZERO,
            bulk_loaded: 0,
            spacing_ms: 0,
        };
        // The three projects the hints name (a pinned read resolves them).
        for (slug, hint) in PROJECTS {
            let out = bench
                .tools
                .run::<tool::Recall>(
                    &bench.reader,
                    parse!(
                        RecallInput,
                        &json!({"query": "setup", "project_hint": hint})
                    )?,
                )
                .await
                .map_err(|e| format!("bind project {slug}: {e}"))?;
            let scope = out
                .project_scope
                .ok_or_else(|| format!("hint {hint} pinned no project"))?;
            bench.projects.push(scope);
        }
        Ok(bench)
    }

    /// `remember` one generated memory; its latency, or `None` when an
    /// identical memory absorbed it (not a new row).
    async fn remember_one(&mut self) -> Result<Option<Duration>, String> {
        let g = generate(&mut self.rng);
        let scope = match g.slot {
            Slot::Personal => "personal".to_string(),
            Slot::Core => "core".to_string(),
            Slot::Project(i) => self.projects[i].clone(),
        };
        let mut raw = json!({"content": g.content, "kind": g.kind, "scope": scope});
        if let Some(ents) = &g.entities {
            raw["entities"] = json!(ents.iter().map(|e| json!({"name": e})).collect::<Vec<_>>());
        }
        let input = parse!(RememberInput, &raw)?;
        let t = Instant::now();
        let out = self
            .tools
            .run::<tool::Remember>(&self.writer, input)
            .await
            .map_err(|e| format!("remember: {e}"))?;
        let d = t.elapsed();
        if out.deduplicated == Some(true) {
            self.dedups += 1;
            return Ok(None);
        }
        self.loaded += 1;
        // Memories arrive over time, not all at once.
        self.store.clock().advance_ms(self.spacing_ms);
        Ok(Some(d))
    }

    /// The `import_memory` input of one generated memory.
    fn import_input(&mut self) -> Result<ImportMemoryInput, String> {
        let g = generate(&mut self.rng);
        let mut raw = json!({
            "content": g.content,
            "kind": g.kind,
            "source_path": "bench/generated.md",
            "source_hash": format!("bench-{}", self.rng.next()),
        });
        match g.slot {
            Slot::Personal => raw["target"] = json!("personal"),
            Slot::Core => raw["target"] = json!("core"),
            Slot::Project(i) => {
                raw["target"] = json!("project");
                raw["project_hint"] = json!(PROJECTS[i].1);
            }
        }
        parse!(ImportMemoryInput, &raw)
    }

    /// Import generated memories in batches of [`IMPORT_BATCH`] (one
    /// transaction each, `ToolService::run_batch`) until the store holds
    /// `target`. A batch's memories share its store-clock minute; the clock
    /// moves on by the batch's spacing after it.
    async fn import_to(&mut self, target: usize, label: &str) -> Result<(), String> {
        // Every 10,000 up to 200k, then every 50,000 (1M: 20 lines).
        let step = if target > 200_000 { 50_000 } else { 10_000 };
        let mut window = Instant::now();
        let mut window_from = self.loaded;
        let mut reported = self.loaded / step;
        while self.loaded < target {
            let n = IMPORT_BATCH.min(target - self.loaded);
            let inputs = (0..n)
                .map(|_| self.import_input())
                .collect::<Result<Vec<_>, _>>()?;
            let t = Instant::now();
            let results = self
                .tools
                .run_batch::<tool::ImportMemory>(&self.writer, inputs)
                .await
                .map_err(|e| format!("import batch: {e}"))?;
            self.bulk_time += t.elapsed();
            let mut landed = 0;
            for r in results {
                let out = r.map_err(|e| format!("import_memory: {e}"))?;
                if out.deduplicated == Some(true) || out.skipped {
                    self.dedups += 1;
                } else {
                    landed += 1;
                }
            }
            self.loaded += landed;
            self.bulk_loaded += landed;
            let spacing = self
                .spacing_ms
                .saturating_mul(i64::try_from(landed).unwrap_or(0));
            self.store.clock().advance_ms(spacing);
            if self.loaded / step > reported {
                reported = self.loaded / step;
                let per_s = (self.loaded - window_from) as f64 / window.elapsed().as_secs_f64();
                eprintln!(
                    "[{label}] {} of {target} memories; {per_s:.0} imports/s since the last report; about {:.0} s to go at that rate",
                    self.loaded,
                    (target - self.loaded) as f64 / per_s
                );
                window = Instant::now();
                window_from = self.loaded;
            }
        }
        Ok(())
    }

    /// `remember` until the store holds `target`; the latencies.
    async fn remember_to(&mut self, target: usize, label: &str) -> Result<Vec<Duration>, String> {
        let mut lat = Vec::with_capacity(target.saturating_sub(self.loaded));
        let mut window = Instant::now();
        while self.loaded < target {
            let Some(d) = self.remember_one().await? else {
                continue;
            };
            lat.push(d);
            self.remember_time += d;
            self.remembered += 1;
            if self.remembered == FIRST {
                self.first_2k = Some(self.remember_time);
            }
            if self.loaded.is_multiple_of(10_000) {
                eprintln!(
                    "[{label}] {} memories; last 10,000 at {:.0} writes/s",
                    self.loaded,
                    10_000.0 / window.elapsed().as_secs_f64()
                );
                window = Instant::now();
            }
        }
        Ok(lat)
    }

    async fn measure_recall(&mut self, n: usize) -> Result<Vec<Duration>, String> {
        let mut lat = Vec::with_capacity(n);
        for i in 0..n + 20 {
            let q = query(&mut self.qrng);
            let raw = if i % 2 == 0 {
                let (_, hint) = PROJECTS[self.qrng.below(PROJECTS.len())];
                json!({"query": q, "k": 10, "project_hint": hint})
            } else {
                json!({"query": q, "k": 10, "scopes": ["*"]})
            };
            let input = parse!(RecallInput, &raw)?;
            let t = Instant::now();
            self.tools
                .run::<tool::Recall>(&self.reader, input)
                .await
                .map_err(|e| format!("recall {raw}: {e}"))?;
            if i >= 20 {
                // The first 20 warm the caches.
                lat.push(t.elapsed());
            }
        }
        Ok(lat)
    }

    /// `--recall-while-embedding`: `n` recalls timed while the backlog is
    /// embedded on the same runtime; how many memories were embedded.
    async fn recall_while_embedding(&mut self, n: usize, label: &str) -> Result<usize, String> {
        let store = self.store.clone();
        let embedding = tokio::spawn(async move { crate::quality::embed_all(&store).await });
        // The embedder at work before the first recall.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut lat = self.measure_recall(n).await?;
        let overlapped = !embedding.is_finished();
        let embedded = embedding
            .await
            .map_err(|e| format!("the embedding task: {e}"))??;
        lat.sort_unstable();
        eprintln!(
            "[{label}] {} recalls while the backlog was embedded: p50 {:.2} / p95 {:.2} / p99 {:.2} ms{}",
            lat.len(),
            ms(pct(&lat, 50.0)),
            ms(pct(&lat, 95.0)),
            ms(pct(&lat, 99.0)),
            if overlapped {
                ""
            } else {
                " (the backlog was done before the last recall: use a larger size)"
            }
        );
        Ok(embedded)
    }

    async fn measure_briefing(&mut self, n: usize) -> Result<Vec<Duration>, String> {
        let mut lat = Vec::with_capacity(n);
        for i in 0..n + 5 {
            let topic = query(&mut self.qrng);
            let raw = if i % 4 == 3 {
                json!({"topic": topic, "briefing": true})
            } else {
                let (_, hint) = PROJECTS[self.qrng.below(PROJECTS.len())];
                json!({"topic": topic, "briefing": true, "project_hint": hint})
            };
            let input = parse!(BuildContextInput, &raw)?;
            let t = Instant::now();
            self.tools
                .run::<tool::BuildContext>(&self.briefer, input)
                .await
                .map_err(|e| format!("build_context {raw}: {e}"))?;
            if i >= 5 {
                lat.push(t.elapsed());
            }
        }
        Ok(lat)
    }
}

/// How often the dense leg's search agrees with an exact scan of all of
/// `user_id`'s vectors, over 200 generated queries: the share of the exact
/// first 10 and first 50 among its own first 10 and 50.
pub(crate) async fn dense_agreement(store: &Store, user_id: &str, label: &str) {
    let mut rng = Rng(0x00A6_1EE5);
    let (mut agree, mut of) = ([0usize; 2], [0usize; 2]);
    for _ in 0..200 {
        let q = query(&mut rng);
        for (slot, depth) in [10, 50].into_iter().enumerate() {
            if let Some((a, n)) = store.dense_agreement(user_id, &q, depth).await {
                agree[slot] += a;
                of[slot] += n;
            }
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let share = |i: usize| agree[i] as f64 / of[i].max(1) as f64;
    eprintln!(
        "[{label}] dense search against an exact scan (200 queries): {:.3} of the exact first 10, {:.3} of the first 50",
        share(0),
        share(1)
    );
}

/// A database a `bench --keep` run left, and the user `email` of it; with
/// `hybrid`, the bundled model loaded and every vector read into the index
/// (an error in a build without the model).
async fn open_kept(
    file: &str,
    email: &str,
    hybrid: bool,
) -> Result<(Store, zm_store::User), String> {
    let store = Store::open(&zm_store::sqlite_url(Path::new(file)))
        .await
        .map_err(|e| e.to_string())?;
    let user = store
        .user_by_email(email)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no user {email}"))?;
    if hybrid {
        let encoder = zm_embed::bundled()
            .ok_or("this build has no bundled model")?
            .map_err(|e| e.to_string())?;
        store.set_encoder(encoder);
        let n = store.refresh_vectors().await.map_err(|e| e.to_string())?;
        eprintln!("{n} vectors in the index");
    }
    Ok((store, user))
}

/// `xtask recall-latency SQLITE_FILE EMAIL`: the store suite's recall and
/// briefing measurement (500 recalls, 100 briefings, the same generated
/// queries) on a database a `bench --keep` run left, hybrid (or full text
/// only with `--lexical`), without loading and embedding it again.
pub(crate) fn recall_latency(args: &[String]) -> ExitCode {
    let (args, lexical) = match args {
        [rest @ .., flag] if flag == "--lexical" => (rest, true),
        _ => (args, false),
    };
    let [file, email] = args else {
        eprintln!("usage: xtask recall-latency SQLITE_FILE EMAIL [--lexical]");
        return ExitCode::from(2);
    };
    trace_from_env();
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let run = async {
        let (store, user) = open_kept(file, email, !lexical).await?;
        // The bench wrote its memories on a store clock moved 5 minutes a
        // memory: resume it where the writes stopped.
        if let Some(newest) = store.newest_memory_ms().await.map_err(|e| e.to_string())? {
            store
                .clock()
                .advance_ms((newest - store.clock().now_ms()).max(0));
        }
        let mut bench = Bench::of_user(store, &user.id).await?;
        let before = bench.store.semantic_status();
        let mut recall = bench.measure_recall(500).await?;
        let after = bench.store.semantic_status();
        recall.sort_unstable();
        let mut brief = bench.measure_briefing(100).await?;
        brief.sort_unstable();
        let show = |what: &str, lat: &[Duration]| {
            println!(
                "{what}: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms ({} timed)",
                ms(pct(lat, 50.0)),
                ms(pct(lat, 95.0)),
                ms(pct(lat, 99.0)),
                lat.len()
            );
        };
        show("recall", &recall);
        show("briefing", &brief);
        let n = after.queries.saturating_sub(before.queries);
        if n > 0 {
            #[allow(clippy::cast_precision_loss)]
            let mean =
                after.query_micros.saturating_sub(before.query_micros) as f64 / n as f64 / 1000.0;
            println!("recall's query embedding: {mean:.2} ms on average over {n} queries");
        }
        Ok::<(), String>(())
    };
    match rt.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recall-latency: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `xtask dense-agreement SQLITE_FILE EMAIL`: [`dense_agreement`] on a
/// database a `bench --recall-mode hybrid --keep` run left (every memory
/// embedded by the bundled model), without loading it again.
pub(crate) fn dense_agreement_of(args: &[String]) -> ExitCode {
    let [file, email] = args else {
        eprintln!("usage: xtask dense-agreement SQLITE_FILE EMAIL");
        return ExitCode::from(2);
    };
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let run = async {
        let (store, user) = open_kept(file, email, true).await?;
        dense_agreement(&store, &user.id, file).await;
        Ok::<(), String>(())
    };
    match rt.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dense-agreement: {e}");
            ExitCode::FAILURE
        }
    }
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

async fn run_backend(
    label: &str,
    key: &str,
    store: Store,
    opts: &Options,
    sqlite_file: Option<&Path>,
) -> Result<Vec<Row>, String> {
    let mut bench = Bench::new(store, label).await?;
    bench.spacing_ms = opts.spacing_minutes * 60_000;
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let started = Instant::now();
        let at_n = match opts.bulk {
            Bulk::Import => {
                // From an empty store: the first 2,000 through remember.
                let at_n = opts.at_n.min(size);
                let first = FIRST.min(size - at_n);
                bench.remember_to(first, label).await?;
                bench.import_to(size - at_n, label).await?;
                bench
                    .store
                    .refresh_statistics()
                    .await
                    .map_err(|e| e.to_string())?;
                bench.remember_to(size, label).await?
            }
            Bulk::Remember => {
                let lat = bench.remember_to(size, label).await?;
                lat[lat.len().saturating_sub(opts.at_n)..].to_vec()
            }
        };
        bench
            .store
            .refresh_statistics()
            .await
            .map_err(|e| e.to_string())?;
        let mut sorted_at_n = at_n.clone();
        sorted_at_n.sort_unstable();
        let at_n_total: Duration = at_n.iter().sum();
        if opts.hybrid {
            if bench.store.semantic_status().model.is_none() {
                let encoder = zm_embed::bundled()
                    .ok_or("this build has no bundled model")?
                    .map_err(|e| e.to_string())?;
                bench.store.set_encoder(encoder);
            }
            let t = Instant::now();
            let embedded = if opts.while_embedding {
                bench.recall_while_embedding(opts.queries, label).await?
            } else {
                crate::quality::embed_all(&bench.store).await?
            };
            let secs = t.elapsed().as_secs_f64();
            #[allow(clippy::cast_precision_loss)]
            let rate = embedded as f64 / secs.max(1e-3);
            eprintln!(
                "[{label}] embedded {embedded} memories in {secs:.1} s ({rate:.0}/s, batches of 64); RSS {:.0} MiB",
                crate::bench_support::mib(
                    crate::bench_support::status_kib("self", "VmRSS").unwrap_or(0)
                )
            );
        }
        eprintln!(
            "[{label}] {size} memories after {:.1} s of loading; measuring {} recalls…",
            started.elapsed().as_secs_f64(),
            opts.queries
        );
        let before = bench.store.semantic_status();
        let mut recall = bench.measure_recall(opts.queries).await?;
        recall.sort_unstable();
        if opts.hybrid {
            let after = bench.store.semantic_status();
            let n = after.queries.saturating_sub(before.queries).max(1);
            #[allow(clippy::cast_precision_loss)]
            let mean =
                after.query_micros.saturating_sub(before.query_micros) as f64 / n as f64 / 1000.0;
            eprintln!(
                "[{label}] recall's query embedding: {mean:.2} ms on average over {n} queries"
            );
            dense_agreement(&bench.store, &bench.reader.user_id, label).await;
        }
        let mut brief = bench.measure_briefing(briefings(opts.queries)).await?;
        brief.sort_unstable();
        let (bytes, size_note) = match sqlite_file {
            Some(f) => {
                let wal = f.with_extension("db-wal");
                let (main, wal) = (file_len(f), file_len(&wal));
                (
                    main + wal,
                    format!("file {} + WAL {}", human_bytes(main), human_bytes(wal)),
                )
            }
            None => {
                let b = bench
                    .store
                    .database_size_bytes()
                    .await
                    .map_err(|e| format!("database size: {e}"))?
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0);
                (b, "pg_database_size".to_string())
            }
        };
        let (bulk, bulk_rate) = match opts.bulk {
            Bulk::Import => (
                "import_memory in batches of 500",
                bench.bulk_loaded as f64 / bench.bulk_time.as_secs_f64(),
            ),
            Bulk::Remember => (
                "remember",
                bench.remembered as f64 / bench.remember_time.as_secs_f64(),
            ),
        };
        rows.push(Row {
            backend: label.to_string(),
            backend_key: key.to_string(),
            size,
            first_2k_rate: bench.first_2k.map(|d| FIRST as f64 / d.as_secs_f64()),
            bulk,
            bulk_rate,
            at_n_rate: at_n.len() as f64 / at_n_total.as_secs_f64(),
            remember_p50: pct(&sorted_at_n, 50.0),
            remember_p99: pct(&sorted_at_n, 99.0),
            recall: [
                pct(&recall, 50.0),
                pct(&recall, 95.0),
                pct(&recall, 99.0),
                *recall.last().unwrap_or(&Duration::ZERO),
            ],
            briefing: [pct(&brief, 50.0), pct(&brief, 95.0), pct(&brief, 99.0)],
            bytes,
            size_note,
            dedups: bench.dedups,
            peak_rss_kib: status_kib("self", "VmHWM"),
        });
        print_row(rows.last().expect("just pushed"));
    }
    bench.store.close().await;
    Ok(rows)
}

fn briefings(queries: usize) -> usize {
    (queries / 5).max(50)
}

fn rate(r: Option<f64>) -> String {
    match r {
        Some(r) if r.is_finite() => format!("{r:.0}"),
        _ => "—".to_string(),
    }
}

fn print_row(r: &Row) {
    eprintln!(
        "[{}] N={}: remember {}/s first 2k, {:.0}/s at N (p50 {:.2} ms, p99 {:.2} ms); bulk {} {}/s; recall p50 {:.2} ms p95 {:.2} ms p99 {:.2} ms; briefing p50 {:.2} ms p95 {:.2} ms; size {}; peak RSS {}",
        r.backend,
        r.size,
        rate(r.first_2k_rate),
        r.at_n_rate,
        ms(r.remember_p50),
        ms(r.remember_p99),
        r.bulk,
        rate(Some(r.bulk_rate)),
        ms(r.recall[0]),
        ms(r.recall[1]),
        ms(r.recall[2]),
        ms(r.briefing[0]),
        ms(r.briefing[1]),
        human_bytes(r.bytes),
        r.peak_rss_kib
            .map_or_else(|| "?".to_string(), |k| format!("{:.0} MiB", mib(k)))
    );
}

fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str("| backend | memories | remember/s, first 2k | remember/s at N | remember p50 / p99 at N | bulk load | recall p50 | recall p95 | recall p99 | recall max | briefing p50 | briefing p95 | briefing p99 | database size | benchmark peak RSS |\n");
    s.push_str("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.2} / {:.2} ms | {} {}/s | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {} ({}) | {} |\n",
            r.backend,
            r.size,
            rate(r.first_2k_rate),
            r.at_n_rate,
            ms(r.remember_p50),
            ms(r.remember_p99),
            r.bulk,
            rate(Some(r.bulk_rate)),
            ms(r.recall[0]),
            ms(r.recall[1]),
            ms(r.recall[2]),
            ms(r.recall[3]),
            ms(r.briefing[0]),
            ms(r.briefing[1]),
            ms(r.briefing[2]),
            human_bytes(r.bytes),
            r.size_note,
            r.peak_rss_kib
                .map_or_else(|| "?".to_string(), |k| format!("{:.0} MiB", mib(k)))
        ));
    }
    s
}

async fn run(opts: Options) -> Result<(), String> {
    let started = Instant::now();
    let mut rows = Vec::new();
    for backend in &opts.backends {
        match backend.as_str() {
            "sqlite" | "sqlite-normal" => {
                let dir = temp_dir(&format!("bench-{backend}"))?;
                let file = dir.join("zm.db");
                let mut o = OpenOptions::new(zm_store::sqlite_url(&file));
                let label = if backend == "sqlite" {
                    "sqlite (synchronous=FULL)"
                } else {
                    o.sqlite_synchronous = "NORMAL".into();
                    "sqlite (synchronous=NORMAL)"
                };
                eprintln!("[{label}] {}", file.display());
                let store = Store::open_with(o)
                    .await
                    .map_err(|e| format!("open {}: {e}", file.display()))?;
                let result = run_backend(label, backend, store, &opts, Some(&file)).await;
                if opts.keep {
                    eprintln!("[{label}] kept {}", file.display());
                } else {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                rows.extend(result?);
            }
            "postgres" => {
                let Some(url) = &opts.postgres else {
                    eprintln!(
                        "[postgres] skipped: pass --postgres URL or set ZM_BENCH_DATABASE_URL"
                    );
                    continue;
                };
                let store = Store::open(url)
                    .await
                    .map_err(|e| format!("open the PostgreSQL database: {e}"))?;
                let users = store
                    .list_users()
                    .await
                    .map_err(|e| format!("list users: {e}"))?;
                if !users.is_empty() {
                    return Err(format!(
                        "the PostgreSQL database is not empty ({} users): give the URL of an empty database (e.g. CREATE DATABASE zm_bench_1)",
                        users.len()
                    ));
                }
                rows.extend(run_backend("postgres", "postgres", store, &opts, None).await?);
            }
            other => return Err(format!("unknown backend {other}")),
        }
    }
    println!();
    println!(
        "zero-memory store benchmark — {} build; {} recall queries (k = 10) and {} briefings per size; bulk load via {}; memories {} store-clock minutes apart",
        if cfg!(debug_assertions) {
            "DEBUG"
        } else {
            "release"
        },
        opts.queries,
        briefings(opts.queries),
        match opts.bulk {
            Bulk::Import =>
                "import_memory in batches of 500, one transaction each (the first 2,000 and the last --remembers-at-n before each size via remember)",
            Bulk::Remember => "remember",
        },
        opts.spacing_minutes
    );
    println!();
    print!("{}", table(&rows));
    for r in &rows {
        if r.dedups > 0 {
            println!(
                "\n{} up to {}: {} generated writes were exact duplicates of an earlier one (absorbed by the store, not counted)",
                r.backend, r.size, r.dedups
            );
        }
    }
    println!(
        "\ntotal benchmark time: {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &opts.figures {
        let figures: Vec<StoreFigure> = rows
            .iter()
            .map(|r| StoreFigure {
                backend: r.backend_key.clone(),
                size: r.size,
                recall_p50_ms: ms(r.recall[0]),
                recall_p99_ms: ms(r.recall[2]),
                briefing_p50_ms: ms(r.briefing[0]),
                remember_per_s: Some(r.at_n_rate).filter(|v| v.is_finite()),
                bulk: match opts.bulk {
                    Bulk::Import => "import",
                    Bulk::Remember => "remember",
                }
                .to_string(),
                bulk_per_s: Some(r.bulk_rate).filter(|v| v.is_finite()),
            })
            .collect();
        write_figures(path, &figures)?;
    }
    Ok(())
}

/// `xtask embed-speed [--model DIR]`: the embedding model alone, in this
/// (release) build: one short query at a time, p50 and p99 over 400
/// generated queries, then generated memory contents in batches of 32 (as
/// the background embedder sends them), texts per second.
pub(crate) fn embed_speed(args: &[String]) -> ExitCode {
    let dir = match args {
        [] => None,
        [flag, dir] if flag == "--model" => Some(PathBuf::from(dir)),
        _ => {
            eprintln!("usage: xtask embed-speed [--model DIR]");
            return ExitCode::from(2);
        }
    };
    let loaded = Instant::now();
    let encoder = match zm_embed::load(dir.as_deref()) {
        Some(Ok(e)) => e,
        Some(Err(e)) => {
            eprintln!("embed-speed: {e}");
            return ExitCode::FAILURE;
        }
        None => {
            eprintln!("embed-speed: this build has no model support");
            return ExitCode::FAILURE;
        }
    };
    let load = loaded.elapsed();
    let mut r = Rng(0x5eed_0e3b);
    let queries: Vec<String> = (0..440).map(|_| query(&mut r)).collect();
    let mut times = Vec::with_capacity(400);
    for (i, q) in queries.iter().enumerate() {
        let t = Instant::now();
        if let Err(e) = encoder.embed(&[q.as_str()]) {
            eprintln!("embed-speed: {e}");
            return ExitCode::FAILURE;
        }
        // The first 40 warm the caches and are not counted.
        if i >= 40 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    let contents: Vec<String> = (0..640).map(|_| generate(&mut r).content).collect();
    let t = Instant::now();
    for batch in contents.chunks(32) {
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        if let Err(e) = encoder.embed(&refs) {
            eprintln!("embed-speed: {e}");
            return ExitCode::FAILURE;
        }
    }
    let per_second = contents.len() as f64 / t.elapsed().as_secs_f64();
    println!("model: {}", encoder.model());
    println!("load: {:.0} ms", ms(load));
    println!(
        "one query: p50 {:.2} ms, p99 {:.2} ms ({} queries)",
        ms(pct(&times, 50.0)),
        ms(pct(&times, 99.0)),
        times.len()
    );
    println!("memory contents, batches of 32: {per_second:.0} texts/s");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_contents_are_realistic_lengths() {
        let mut r = Rng(0x5EED_0F2E_6000);
        let mut lens = Vec::new();
        for _ in 0..5_000 {
            let g = generate(&mut r);
            lens.push(g.content.chars().count());
        }
        let (min, max) = (
            *lens.iter().min().expect("some"),
            *lens.iter().max().expect("some"),
        );
        assert!(min >= 50, "shortest content {min}");
        assert!(max <= 260, "longest content {max}");
    }

    #[test]
    fn sizes_take_suffixes() {
        assert_eq!(parse_size("1000000"), Some(1_000_000));
        assert_eq!(parse_size(" 100_000"), Some(100_000));
        assert_eq!(parse_size("10k"), Some(10_000));
        assert_eq!(parse_size("1M"), Some(1_000_000));
        assert_eq!(parse_size("ten"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(pct(&v, 50.0), Duration::from_millis(50));
        assert_eq!(pct(&v, 99.0), Duration::from_millis(99));
        assert_eq!(pct(&v, 100.0), Duration::from_millis(100));
    }
}
