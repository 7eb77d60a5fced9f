"""How fast and how heavy the dashboard's pages are at N memories.

Starts `zero-memory serve` (the release binary) on a fresh data directory,
imports N generated memories with `zero-memory import`, signs in over HTTP
like a browser (the sign-in form, its CSRF cookie, the session cookie), then
fetches every main page R times and reports, per page, the time to first
byte (p50 / p95, measured on loopback from the request's start to the first
byte of the answer) and the bytes transferred (the HTML; the stylesheet
and the script are cached once fetched and reported separately).

With --others N, another account first imports N memories of its own (in
batches of --memories-sized files): the signed-in user's pages then show
what a user of a shared server sees, whose own memories are few among many
of other people's. --database-url runs it on that (empty) database, e.g.
PostgreSQL, instead of the data directory's SQLite file.

usage: dashboard_bench.py BINARY [--memories 10000] [--others 0]
       [--database-url URL] [--rounds 50] [--json FILE]
"""

from __future__ import annotations

import math
import http.client
import json
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / ".ci" / "probes"))
from zmserver import Server  # noqa: E402

WORDS = ("billing ledger postgres search cache deploy staging canary webhook retry token oauth queue "
         "worker cron backup schema migration index latency budget alert rollback release review").split()
KINDS = ["fact", "decision", "convention", "gotcha", "reference", "task", "open-question", "episode", "preference"]


def generate(n: int, path: Path, seed: int = 13, first: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w") as f:
        for i in range(first, first + n):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24)))
            f.write(json.dumps({
                "id": f"mem_{i:016d}.0000000000",
                "content": f"Note {i}: {words}.",
                "content_original": None, "content_lang": None,
                "kind": rng.choice(KINDS),
                "scope": "personal" if i % 3 else "core",
                "visibility": "private", "author_kind": "agent",
                "agent_name": rng.choice(["claude-code", "cursor", "codex", None]),
                "source": None, "superseded_by": None, "invalidated_at": None,
                "created_at": "2026-11-01T00:00:00.000Z",
            }) + "\n")


def fetch(port: int, path: str, cookie: str) -> tuple[float, int, int]:
    """(seconds to the first byte, bytes of the body, status)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    started = time.perf_counter()
    conn.request("GET", path, headers={"cookie": cookie, "accept-encoding": "identity"})
    resp = conn.getresponse()
    first = time.perf_counter() - started
    body = resp.read()
    conn.close()
    return first, len(body), resp.status


def sign_in(srv: Server, email: str, password: str) -> str:
    status, headers, text = srv.raw("GET", "/login")
    login_cookie = next(v.split(";")[0] for k, v in headers if k.lower() == "set-cookie" and v.startswith("zm_login="))
    token = re.search(r'name="csrf" value="([^"]+)"', text).group(1)
    body = urllib.parse.urlencode({"csrf": token, "next": "/", "email": email, "password": password})
    status, headers, _ = srv.raw("POST", "/login", body=body, headers={
        "content-type": "application/x-www-form-urlencoded", "cookie": login_cookie, "origin": srv.base})
    assert status == 303, status
    return next(v.split(";")[0] for k, v in headers if k.lower() == "set-cookie" and v.startswith("zm_session="))


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile: the ceil(p/100 * n)-th smallest."""
    s = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(s)))
    return s[min(len(s), rank) - 1]


def main() -> None:
    args = sys.argv[1:]
    binary = args[0]
    n = int(args[args.index("--memories") + 1]) if "--memories" in args else 10000
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 50
    out_json = args[args.index("--json") + 1] if "--json" in args else None
    others = int(args[args.index("--others") + 1]) if "--others" in args else 0
    database_url = args[args.index("--database-url") + 1] if "--database-url" in args else None
    with tempfile.TemporaryDirectory() as d:
        srv = Server(binary, d, database_url=database_url)
        email, password = "bench@example.com", "bench-password-123"
        srv.add_user(email, password)
        if others:
            srv.add_user("others@example.com", password)
            t0 = time.perf_counter()
            batch = 50000
            for first in range(0, others, batch):
                part = Path(d) / "others.jsonl"
                generate(min(batch, others - first), part, seed=first + 1, first=10**9 + first)
                srv.cli("import", "--user", "others@example.com", str(part))
            print(f"imported another account's {others} memories in {time.perf_counter() - t0:.1f} s", flush=True)
        data = Path(d) / "bench.jsonl"
        generate(n, data)
        t0 = time.perf_counter()
        srv.cli("import", "--user", email, str(data))
        print(f"imported {n} memories in {time.perf_counter() - t0:.1f} s", flush=True)
        srv.start()
        try:
            cookie = sign_in(srv, email, password)
            first_id = re.search(r'/memories/(mem_[^"]+)"', fetch_text(srv.port, "/", cookie)).group(1)
            pages = {
                "memories (browse)": "/",
                "memories, filtered": "/?kind=decision&status=all",
                "search": "/?q=billing+ledger",
                "memory": f"/memories/{first_id}",
                "review": "/review",
                "rules": "/rules",
                "access": "/access",
                "connect": "/connect",
                "teams": "/teams",
                "insight": "/insight",
                "account": "/account",
                "assets/app.css": "/assets/app.css",
                "assets/app.js": "/assets/app.js",
            }
            rows = []
            for name, path in pages.items():
                fetch(srv.port, path, cookie)  # warm
                times, sizes = [], []
                for _ in range(rounds):
                    t, size, status = fetch(srv.port, path, cookie)
                    assert status == 200, (path, status)
                    times.append(t * 1000)
                    sizes.append(size)
                rows.append({"page": name, "path": path, "ttfb_p50_ms": round(pct(times, 50), 2),
                             "ttfb_p95_ms": round(pct(times, 95), 2), "bytes": max(sizes)})
        finally:
            srv.stop()
    where = f", another account's {others:,} besides" if others else ""
    print(f"\n| page ({n} memories{where}, {rounds} fetches each) | first byte p50 | p95 | bytes |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['page']} | {r['ttfb_p50_ms']} ms | {r['ttfb_p95_ms']} ms | {r['bytes']:,} |")
    if out_json:
        Path(out_json).write_text(json.dumps(rows, indent=2))


def fetch_text(port: int, path: str, cookie: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path, headers={"cookie": cookie})
    text = conn.getresponse().read().decode()
    conn.close()
    return text


if __name__ == "__main__":
    main()
