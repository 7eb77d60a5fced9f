#!/usr/bin/env python3
"""Client-side benchmark of `zero-memory stdio` with the official Python MCP SDK.

A benchmark, not a test: it prints figures and never fails on a slow server
(it exits non-zero only when a call errors or the server cannot be driven).
Not part of `.ci/run`.

What it does, over one stdio connection (the SDK spawns the server):

1. spawn -> initialize (the SDK's `Client` context) and `tools/list`: timed;
2. `--memories` memories written one `remember` at a time: generated,
   realistic contents (decisions, conventions, gotchas, facts about services
   and libraries, 60-250 characters, seeded RNG), a mix of scopes: `core`,
   `personal` and three projects through `project_hint`;
3. `--recalls` recalls of 2-4 words: half are a verbatim span of 2-4 words
   from a random stored memory, searched over every visible scope
   (`scopes: ["*"]`; that memory is the target: hit@10 and MRR, next to an
   exact-phrase oracle's, since a span of common words is in many memories),
   half are vocabulary words (half of those pinned to a project);
4. `--pings` `ping` round trips on the same client;
5. the server's peak RSS (VmHWM of the spawned process, from /proc).

Run it (the SDK version CI pins, in a venv):

    python3 -m venv .ci/tmp/venv
    .ci/tmp/venv/bin/pip install -r .ci/requirements-mcp.txt
    cargo build --release -p zm-server
    .ci/tmp/venv/bin/python bench/stdio_bench.py --binary target/release/zero-memory

`--server-memory` runs the same workload against the official
`@modelcontextprotocol/server-memory` (a knowledge-graph server, installed
from npm into .ci/tmp/server-memory): remember -> create_entities (first
memory about a subject) or add_observations, recall -> search_nodes. Its
"hit" is the entity that holds the target observation (coarser than ours).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

from mcp import Client, StdioServerParameters
import mcp_types as types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERVER_MEMORY_PKG = "@modelcontextprotocol/server-memory"
SERVER_MEMORY_VERSION = "2026.8.31"
TIMEOUT_S = 120
# `ping` is deprecated from the 2026-07-28 era on; this benchmark uses it
# (legacy mode) as the transport's floor.
warnings.filterwarnings("ignore", message="ping is removed")
CLIENT_INFO = types.Implementation(name="zm-stdio-bench", version="1.0.0")

# ------------------------------------------------------------------ content

SERVICES = [
    "billing-api", "auth-service", "search-indexer", "notification-worker", "payments-gateway",
    "inventory-sync", "order-router", "ledger-service", "email-relay", "report-builder",
    "image-resizer", "feature-flags", "session-store", "rate-limiter", "audit-trail",
    "catalog-api", "checkout-web", "geo-lookup", "webhook-dispatcher", "metrics-exporter",
]
LIBRARIES = [
    "tokio", "serde", "axum", "sqlx", "reqwest", "pydantic", "fastapi", "sqlalchemy", "celery",
    "django", "react", "vite", "zod", "prisma", "express", "jest", "pytest", "hypothesis",
    "grpc-go", "cobra", "viper", "zap", "kafka-python", "boto3", "numpy", "pandas", "redux",
    "tailwind", "webpack", "opentelemetry",
]
INFRA = [
    "PostgreSQL", "Redis", "Kafka", "RabbitMQ", "S3", "CloudFront", "nginx", "Envoy",
    "Kubernetes", "Terraform", "Vault", "Elasticsearch", "ClickHouse", "SQLite", "Memcached",
]
AREAS = [
    "retries", "pagination", "caching", "authentication", "rate limiting", "logging",
    "schema migrations", "background jobs", "error handling", "feature toggles", "tracing",
    "connection pooling", "idempotency keys", "webhooks", "time zones", "currency rounding",
    "search ranking", "file uploads", "session expiry", "batch exports",
]
REASONS = [
    "it halves p99 latency under load", "the team already knows it well",
    "it has first-class async support", "the old client leaked connections",
    "licensing was simpler", "it cut the image size by 40 MB", "benchmarks showed fewer allocations",
    "it supports streaming responses", "security review flagged the alternative",
    "it keeps the build reproducible",
]
PROBLEMS = [
    "drops messages", "deadlocks", "times out", "double-charges", "leaks file descriptors",
    "returns stale reads", "panics on empty input", "retries forever", "loses the trace id",
    "mis-parses dates", "blocks the event loop", "fills the disk",
]
CONDITIONS = [
    "the pool is exhausted", "a deploy overlaps the nightly job", "the payload exceeds 1 MB",
    "DNS flaps", "clocks drift by more than a second", "two workers claim the same job",
    "the cache is cold", "TLS session resumption is off", "the replica lags",
]
FIXES = [
    "set an explicit timeout", "pin the previous minor version", "add jitter to the backoff",
    "batch writes in groups of 500", "move the work off the request path",
    "add an idempotency key", "raise the pool size to 32", "disable HTTP/2 on that route",
]
COMMANDS = ["make check", "cargo clippy", "npm run lint", "pytest -x", "go vet ./...",
            "terraform plan", "docker compose up", "just fmt", "pre-commit run", "tox -e py311"]
PEOPLE = ["Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
LANGUAGES = ["Rust", "TypeScript", "Python", "Go", "SQL"]
STYLES = ["early returns", "explicit error types", "small functions", "table-driven tests",
          "descriptive commit messages", "named arguments", "immutable data"]
PROJECTS = [
    "/home/dev/src/atlas",
    "git@github.com:acme/billing.git",
    "https://github.com/acme/webshop",
]
EXTRA_WORDS = ["timeout", "retry", "deploy", "migration", "latency", "rollback", "port",
               "index", "release", "owner", "cache", "queue"]


def ticket(r: random.Random) -> str:
    return f"{r.choice(['ENG', 'OPS', 'PAY', 'SEC', 'WEB'])}-{r.randint(100, 9999)}"


def ver(r: random.Random) -> str:
    return f"{r.randint(0, 4)}.{r.randint(0, 30)}.{r.randint(0, 12)}"


def generate(r: random.Random) -> dict[str, Any]:
    """One memory: content (60-250 chars), kind, where it goes, its subject."""
    while True:
        svc, svc2 = r.choice(SERVICES), r.choice(SERVICES)
        lib, lib2 = r.choice(LIBRARIES), r.choice(LIBRARIES)
        infra, infra2 = r.choice(INFRA), r.choice(INFRA)
        area = r.choice(AREAS)
        roll = r.randrange(20)
        if roll < 3:
            where, subject = "personal", "me"
            kind, content = r.choice([
                ("preference", f"I prefer {r.choice(STYLES)} over {r.choice(STYLES)} in {r.choice(LANGUAGES)} reviews; mention it once per pull request ({ticket(r)})."),
                ("preference", f"Keep pull requests under {r.randint(2, 8) * 100} lines and squash-merge them with {ticket(r)} in the title."),
                ("fact", f"My alias `{r.choice(COMMANDS).split()[0][:2]}{r.randint(1, 99)}` runs `{r.choice(COMMANDS)}` with the {r.choice(['dev', 'ci', 'release'])} profile in {svc} checkouts."),
            ])
        elif roll < 6:
            where = "core"
            kind, content, subject = r.choice([
                ("gotcha", f"Gotcha: {lib} {ver(r)} {r.choice(PROBLEMS)} when {r.choice(CONDITIONS)}; workaround: {r.choice(FIXES)}.", lib),
                ("fact", f"{infra} {ver(r)} leaves {area} off unless configured, and allows {r.randint(8, 512)} per connection by default.", infra),
                ("reference", f"Reference for {lib} {area}: https://docs.example.com/{lib}/{ver(r)}#{area.replace(' ', '-')}", lib),
            ])
        else:
            where = r.randrange(len(PROJECTS))
            subject = svc
            kind, content = r.choice([
                ("decision", f"Decided to use {lib} for {area} in {svc} because {r.choice(REASONS)} ({ticket(r)})."),
                ("decision", f"We chose {infra} over {infra2} for {svc} {area}; {r.choice(REASONS)}. Revisit in {r.choice(MONTHS)}."),
                ("convention", f"Convention in {svc}: run `{r.choice(COMMANDS)}` before pushing; {area} code lives under src/{area.replace(' ', '_')}/ and never calls {lib} directly."),
                ("gotcha", f"{svc} {area} {r.choice(PROBLEMS)} if {r.choice(CONDITIONS)}; {r.choice(FIXES)} ({ticket(r)})."),
                ("fact", f"{svc} listens on port {r.randint(3000, 9999)} and keeps its {area} state in {infra}; {svc2} is its main caller (p95 about {r.randint(2, 400)} ms)."),
                ("task", f"TODO: move {svc} {area} from {lib} to {lib2} before the {r.choice(MONTHS)} release; {r.choice(PEOPLE)} owns it ({ticket(r)})."),
                ("episode", f"On {r.choice(['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday'])} the {svc} deploy failed because {lib} {r.choice(PROBLEMS)}; we rolled back and chose to {r.choice(FIXES)}."),
                ("open-question", f"Open question: should {svc} move {area} to {infra} or keep it on {infra2}? {r.choice(PEOPLE)} wants numbers first ({ticket(r)})."),
            ])
        if 60 <= len(content) <= 250:
            return {"content": content, "kind": kind, "where": where, "subject": subject}


def vocab_query(r: random.Random) -> str:
    pools = [SERVICES, LIBRARIES, INFRA, AREAS, EXTRA_WORDS]
    words: list[str] = []
    while len(words) < r.randint(2, 4):
        words.extend(r.choice(r.choice(pools)).split())
    return " ".join(words[:4])


WORD = re.compile(r"^[^\w`]+|[^\w`]+$")
NON_WORD = re.compile(r"[^\w`]+")


def phrase_key(text: str) -> str:
    """Lower case, punctuation runs as one space, padded: for phrase containment."""
    return " " + NON_WORD.sub(" ", text.lower()).strip() + " "


def verbatim_span(r: random.Random, content: str) -> str:
    """2-4 consecutive words of `content`, as written (edge punctuation trimmed)."""
    words = content.split()
    n = min(r.randint(2, 4), len(words))
    start = r.randrange(len(words) - n + 1)
    span = [WORD.sub("", w) for w in words[start:start + n]]
    return " ".join(w for w in span if w) or content[:20]


# ------------------------------------------------------------------ process

def descendants(root: int) -> list[int]:
    """Every live descendant of `root` (from /proc)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        parent[int(d)] = int(fields[1])
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.extend(kids)
        todo.extend(kids)
    return out


def vm_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


# ------------------------------------------------------------------ stats

def pct(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (ms)."""
    if not samples:
        return float("nan")
    s = sorted(samples)
    rank = max(1, -(-len(s) * p // 100))
    return s[int(rank) - 1]


def p50(samples: list[float]) -> float:
    return pct(samples, 50)


# ------------------------------------------------------------------ adapters

class ZeroMemory:
    name = "zero-memory"

    def __init__(self, binary: str, data_dir: str, cwd: str) -> None:
        self.params = StdioServerParameters(
            command=binary,
            args=["--data-dir", data_dir, "--log", "warn", "stdio", "--no-project"],
            cwd=cwd,
        )
        self.binary = binary

    def comm_matches(self, c: str) -> bool:
        return c == os.path.basename(self.binary)[:15]  # /proc/PID/comm keeps 15 characters

    async def remember(self, client: Client, m: dict[str, Any]) -> tuple[str | None, bool, str | None]:
        args: dict[str, Any] = {"content": m["content"], "kind": m["kind"]}
        if isinstance(m["where"], int):
            args["project_hint"] = PROJECTS[m["where"]]
        else:
            args["scope"] = m["where"]
        res = await client.call_tool("remember", args)
        if res.is_error:
            return None, False, first_text(res)
        out = res.structured_content or {}
        return out.get("memory_id"), bool(out.get("deduplicated")), None

    async def recall(self, client: Client, query: str, pin: int | None) -> tuple[list[str], str | None]:
        # Unpinned reads name every visible scope: a `project_hint` write or
        # read attaches the session to that project, and a recall without a
        # pin or `scopes` then reads only that project (plus core, personal).
        args: dict[str, Any] = {"query": query, "k": 10}
        if pin is not None:
            args["project_hint"] = PROJECTS[pin]
        else:
            args["scopes"] = ["*"]
        res = await client.call_tool("recall", args)
        self.last = ("recall", res)
        if res.is_error:
            return [], first_text(res)
        return [h["id"] for h in (res.structured_content or {}).get("memories", [])], None


class ServerMemory:
    """@modelcontextprotocol/server-memory: a memory is an observation of the
    entity it is about; its id is `entity|observation`."""

    name = SERVER_MEMORY_PKG

    def __init__(self, entry: str, data_dir: str, cwd: str) -> None:
        env = dict(os.environ)
        env["MEMORY_FILE_PATH"] = os.path.join(data_dir, "memory.jsonl")
        self.params = StdioServerParameters(command="node", args=[entry], cwd=cwd, env=env)
        self.entities: set[str] = set()

    def comm_matches(self, c: str) -> bool:
        return c == "node"

    @staticmethod
    def entity_of(m: dict[str, Any]) -> str:
        return m["subject"] if not isinstance(m["where"], int) else f"{m['subject']}@{PROJECTS[m['where']]}"

    async def remember(self, client: Client, m: dict[str, Any]) -> tuple[str | None, bool, str | None]:
        name = self.entity_of(m)
        if name not in self.entities:
            res = await client.call_tool("create_entities", {"entities": [
                {"name": name, "entityType": "service" if isinstance(m["where"], int) else m["where"],
                 "observations": [m["content"]]}]})
            self.entities.add(name)
        else:
            res = await client.call_tool("add_observations", {"observations": [
                {"entityName": name, "contents": [m["content"]]}]})
        if res.is_error:
            return None, False, first_text(res)
        return name, False, None

    async def recall(self, client: Client, query: str, pin: int | None) -> tuple[list[str], str | None]:
        res = await client.call_tool("search_nodes", {"query": query})
        self.last = ("search_nodes", res)
        if res.is_error:
            return [], first_text(res)
        data = res.structured_content
        if not isinstance(data, dict):
            data = json.loads(first_text(res) or "{}")
        return [e["name"] for e in data.get("entities", [])][:10], None


def first_text(res: types.CallToolResult) -> str:
    for b in res.content:
        if getattr(b, "type", None) == "text":
            return b.text
    return ""


# ------------------------------------------------------------------ the run

async def run(adapter: Any, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    qrng = random.Random(args.seed + 1)
    me = os.getpid()
    before = set(descendants(me))
    errors: list[str] = []
    t0 = time.perf_counter()
    async with Client(adapter.params, mode=args.mode, client_info=CLIENT_INFO,
                      read_timeout_seconds=TIMEOUT_S) as client:
        t_init = time.perf_counter()
        tools = (await client.list_tools()).tools
        t_list = time.perf_counter()
        server_pids = [p for p in descendants(me) if p not in before and adapter.comm_matches(comm(p))]
        print(f"[{adapter.name}] spawn+initialize {1000 * (t_init - t0):.1f} ms, tools/list "
              f"{1000 * (t_list - t_init):.1f} ms ({len(tools)} tools); server pid(s) {server_pids}",
              file=sys.stderr)
        ping_before = []
        for _ in range(50):
            t = time.perf_counter()
            await client.send_ping()
            ping_before.append(1000 * (time.perf_counter() - t))

        stored: list[tuple[str, str]] = []  # (target id, content)
        rem: list[float] = []
        dedups = 0
        window = time.perf_counter()
        load_start = window
        for i in range(args.memories):
            m = generate(rng)
            t = time.perf_counter()
            mid, dedup, err = await adapter.remember(client, m)
            rem.append(1000 * (time.perf_counter() - t))
            if err is not None:
                errors.append(f"remember: {err[:300]}")
                continue
            dedups += int(dedup)
            stored.append((mid, m["content"]))
            if (i + 1) % 1000 == 0:
                now = time.perf_counter()
                print(f"[{adapter.name}] {i + 1} remembered; last 1000 at {1000 / (now - window):.0f}/s, "
                      f"p50 {p50(rem[-1000:]):.2f} ms", file=sys.stderr)
                window = now
        load_s = time.perf_counter() - load_start

        rec: list[float] = []
        rec_verbatim: list[float] = []
        validate: list[float] = []
        spans: list[dict[str, Any]] = []
        resp_sizes: list[float] = []
        ranks: list[int | None] = []
        for i in range(args.recalls):
            if i % 2 == 0 and stored:
                target, content = stored[qrng.randrange(len(stored))]
                q, pin = verbatim_span(qrng, content), None
            else:
                target, q = None, vocab_query(qrng)
                pin = qrng.randrange(len(PROJECTS)) if qrng.random() < 0.5 else None
            t = time.perf_counter()
            ids, err = await adapter.recall(client, q, pin)
            d = 1000 * (time.perf_counter() - t)
            rec.append(d)
            # What the SDK spends re-checking the result against the tool's
            # outputSchema (call_tool does it once inside the timed call).
            name, res = adapter.last
            if not res.is_error:
                t = time.perf_counter()
                await client.session.validate_tool_result(name, res)
                validate.append(1000 * (time.perf_counter() - t))
                resp_sizes.append(len(res.model_dump_json(by_alias=True, exclude_none=True)))
            if err is not None:
                errors.append(f"recall {q!r}: {err[:300]}")
                continue
            if target is not None:
                rec_verbatim.append(d)
                ranks.append(ids.index(target) + 1 if target in ids[:10] else None)
                spans.append({"query": q, "words": len(q.split()), "rank": ranks[-1], "hits": len(ids), "target": target, "top": ids[:3]})

        pings = []
        for _ in range(args.pings):
            t = time.perf_counter()
            await client.send_ping()
            pings.append(1000 * (time.perf_counter() - t))
        hwm = {p: vm_kib(p, "VmHWM") for p in server_pids}
        rss = {p: vm_kib(p, "VmRSS") for p in server_pids}

    hits = sum(1 for r in ranks if r is not None)
    # How ambiguous each span is: the stored memories that contain it as a
    # phrase. An exact-phrase oracle that breaks ties at random finds the
    # target in its top 10 with probability min(1, 10 / containing).
    keys = [phrase_key(c) for _, c in stored]
    for x in spans:
        q = phrase_key(x["query"])
        x["containing"] = sum(1 for k in keys if q in k)
    oracle = sum(min(1.0, 10 / x["containing"]) for x in spans if x["containing"]) / max(1, len(spans))
    distinct = [x for x in spans if 0 < x["containing"] <= 10]
    return {
        "server": adapter.name,
        "memories": args.memories,
        "recalls": args.recalls,
        "mode": args.mode,
        "spawn_initialize_ms": 1000 * (t_init - t0),
        "tools_list_ms": 1000 * (t_list - t_init),
        "spawn_to_tools_list_ms": 1000 * (t_list - t0),
        "load_s": load_s,
        "remember_per_s": args.memories / load_s if load_s else None,
        "remember_p50": p50(rem),
        "remember_p99": pct(rem, 99),
        "remember_first100_p50": p50(rem[:100]),
        "remember_last100_p50": p50(rem[-100:]),
        "dedups": dedups,
        "recall_p50": p50(rec),
        "recall_p99": pct(rec, 99),
        "recall_verbatim_p50": p50(rec_verbatim),
        "recall_sdk_validate_p50": p50(validate),
        "recall_response_kib_p50": p50(resp_sizes) / 1024,
        "verbatim_queries": len(ranks),
        "hit_at_10": hits / len(ranks) if ranks else None,
        "mrr_at_10": sum(1 / r for r in ranks if r is not None) / len(ranks) if ranks else None,
        "hit_at_10_by_words": {
            n: sum(1 for x in spans if x["words"] == n and x["rank"]) / max(1, sum(1 for x in spans if x["words"] == n))
            for n in (2, 3, 4)
        },
        "oracle_hit_at_10": oracle,
        "distinct_spans": len(distinct),
        "distinct_spans_hit": sum(1 for x in distinct if x["rank"]),
        "verbatim_spans": spans,
        "ping_p50": p50(pings),
        "ping_p50_before_load": p50(ping_before),
        "ping_p99": pct(pings, 99),
        "peak_rss_mib": max((v for v in hwm.values() if v), default=0) / 1024,
        "final_rss_mib": max((v for v in rss.values() if v), default=0) / 1024,
        "server_pids": server_pids,
        "errors": len(errors),
        "error_samples": errors[:5],
    }


def report(r: dict[str, Any]) -> None:
    ping = r["ping_p50"]
    rows = [
        ("spawn -> initialized", f"{r['spawn_initialize_ms']:.1f} ms"),
        ("tools/list", f"{r['tools_list_ms']:.1f} ms"),
        ("spawn -> tools/list answered", f"{r['spawn_to_tools_list_ms']:.1f} ms"),
        (f"load: {r['memories']} sequential remembers", f"{r['load_s']:.1f} s ({r['remember_per_s']:.0f}/s, {r['dedups']} deduplicated)"),
        ("remember p50 / p99", f"{r['remember_p50']:.2f} / {r['remember_p99']:.2f} ms"),
        ("remember p50, first 100 / last 100", f"{r['remember_first100_p50']:.2f} / {r['remember_last100_p50']:.2f} ms"),
        (f"recall p50 / p99 ({r['recalls']} queries)", f"{r['recall_p50']:.2f} / {r['recall_p99']:.2f} ms"),
        (f"hit@10 / MRR@10 ({r['verbatim_queries']} verbatim-span queries)",
         f"{r['hit_at_10']:.3f} / {r['mrr_at_10']:.3f}" if r["hit_at_10"] is not None else "n/a"),
        ("hit@10 by span length: 2 / 3 / 4 words",
         " / ".join(f"{r['hit_at_10_by_words'][n]:.2f}" for n in (2, 3, 4))),
        ("exact-phrase oracle hit@10 (ties broken at random)", f"{r['oracle_hit_at_10']:.3f}"),
        ("spans found in at most 10 memories: hit by the server",
         f"{r['distinct_spans_hit']} of {r['distinct_spans']}"),
        ("ping p50 (after load; before load)", f"{ping:.3f} ms; {r['ping_p50_before_load']:.3f} ms"),
        ("client: SDK outputSchema validation of one recall result, p50", f"{r['recall_sdk_validate_p50']:.2f} ms"),
        ("recall result size p50 (the whole CallToolResult as JSON)", f"{r['recall_response_kib_p50']:.1f} KiB"),
        ("recall p50 / ping p50", f"{r['recall_p50'] / ping:.1f}x"),
        ("recall p99 / ping p50", f"{r['recall_p99'] / ping:.1f}x"),
        ("remember p50 / ping p50", f"{r['remember_p50'] / ping:.1f}x"),
        ("server peak RSS (VmHWM)", f"{r['peak_rss_mib']:.1f} MiB (RSS at the end {r['final_rss_mib']:.1f} MiB)"),
        ("errors", str(r["errors"])),
    ]
    print(f"\n{r['server']} over stdio — {r['memories']} memories, protocol mode {r['mode']}\n")
    print("| figure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    for e in r["error_samples"]:
        print(f"error: {e}", file=sys.stderr)


def install_server_memory() -> str | None:
    prefix = os.path.join(ROOT, ".ci", "tmp", "server-memory")
    entry = os.path.join(prefix, "node_modules", "@modelcontextprotocol", "server-memory", "dist", "index.js")
    if not os.path.exists(entry):
        os.makedirs(prefix, exist_ok=True)
        r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", prefix,
                            f"{SERVER_MEMORY_PKG}@{SERVER_MEMORY_VERSION}"], capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(entry):
            print(f"server-memory: npm could not install {SERVER_MEMORY_PKG}@{SERVER_MEMORY_VERSION}; "
                  f"skipped:\n{r.stderr[-800:]}", file=sys.stderr)
            return None
    return entry


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "zero-memory"))
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--recalls", type=int, default=300)
    ap.add_argument("--pings", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--mode", default="legacy", help="SDK connect mode: legacy (initialize) or 2026-07-28")
    ap.add_argument("--server-memory", action="store_true",
                    help=f"also run the workload against {SERVER_MEMORY_PKG} (npm) for comparison")
    ap.add_argument("--skip-zero-memory", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="zm-stdio-bench-") as tmp:
        cwd = os.path.join(tmp, "cwd")
        os.makedirs(cwd)
        if not args.skip_zero_memory:
            binary = os.path.abspath(args.binary)
            if not os.access(binary, os.X_OK):
                print(f"{binary} is not executable: cargo build --release -p zm-server", file=sys.stderr)
                return 2
            data = os.path.join(tmp, "zm")
            os.makedirs(data, mode=0o700)
            version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
            print(f"[zero-memory] {version}; data dir {data}", file=sys.stderr)
            r = await run(ZeroMemory(binary, data, cwd), args)
            r["version"] = version
            db = os.path.join(data, "zero-memory.db")
            r["db_mib"] = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p)) / 2**20
            results.append(r)
            report(r)
            print(f"| database (file + WAL) | {r['db_mib']:.1f} MiB |")
        if args.server_memory:
            entry = install_server_memory()
            if entry:
                data = os.path.join(tmp, "sm")
                os.makedirs(data)
                r = await run(ServerMemory(entry, data, cwd), args)
                r["version"] = SERVER_MEMORY_VERSION
                results.append(r)
                report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
