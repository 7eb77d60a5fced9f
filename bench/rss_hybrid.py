#!/usr/bin/env python3
"""Peak resident size of `zero-memory stdio` in hybrid mode over a large store.

Starts the binary on an existing SQLite database (for example the one
`cargo xtask bench --recall-mode hybrid --keep` leaves behind, every memory
embedded), as one of its users, waits until the embedding model is loaded
and every vector is in the in-memory index, runs recalls over MCP, and
prints the process's VmRSS and VmHWM (peak) from /proc.

usage: rss_hybrid.py BINARY SQLITE_FILE EMAIL [--recalls N] [--project-hint HINT]

Also prints the recalls' round-trip times (p50, p99) over stdio. Every
recall reads `scopes: ["*"]`; with --project-hint, the recalls read that
project instead (for the benchmark's database, for example
`git@github.com:acme/billing.git`).

Standard library only. Newline-delimited JSON-RPC on the process's stdin
and stdout, as every MCP stdio client speaks it.
"""
import math
import json
import subprocess
import sys
import time


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main():
    args = sys.argv[1:]
    recalls = 200
    hint = None
    if "--project-hint" in args:
        i = args.index("--project-hint")
        hint = args[i + 1]
        del args[i:i + 2]
    if "--recalls" in args:
        i = args.index("--recalls")
        recalls = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, db, email = args
    proc = subprocess.Popen(
        [binary, "stdio", "--user", email, "--no-project",
         "--database-url", f"sqlite://{db}", "--recall-mode", "hybrid"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    next_id = [0]

    def call(method, params=None, notify=False):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            next_id[0] += 1
            msg["id"] = next_id[0]
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        if notify:
            return None
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"the server closed stdout (exit {proc.poll()})")
            reply = json.loads(line)
            if reply.get("id") == msg["id"]:
                return reply

    try:
        call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "rss-hybrid", "version": "1"}})
        call("notifications/initialized", notify=True)
        started = time.monotonic()
        after_start = status_kib(proc.pid, "VmRSS")
        # The model loads and the index fills in the background: recall until
        # a hit carries a similarity (found or scored by the dense leg) and the
        # resident size stops growing.
        last, steady = 0, 0
        while time.monotonic() - started < 600:
            r = call("tools/call", {"name": "recall", "arguments": {"query": "deploy schedule for the api", "k": 10, "scopes": ["*"]}})
            hits = r.get("result", {}).get("structuredContent", {}).get("memories", [])
            rss = status_kib(proc.pid, "VmRSS")
            dense = any(h.get("similarity") is not None for h in hits)
            steady = steady + 1 if dense and abs(rss - last) < 1024 else 0
            last = rss
            if steady >= 5:
                break
            time.sleep(1)
        ready = time.monotonic() - started
        queries = ["how do we deploy", "database migrations", "who owns billing", "test conventions",
                   "open questions about the cache", "what did we decide about auth", "release checklist",
                   "logging format", "frontend build", "on-call rotation"]
        t = time.monotonic()
        took = []
        for i in range(recalls):
            t1 = time.monotonic()
            where = {"project_hint": hint} if hint else {"scopes": ["*"]}
            call("tools/call", {"name": "recall", "arguments": {"query": f"{queries[i % len(queries)]} {i}", "k": 10, **where}})
            took.append((time.monotonic() - t1) * 1000)
        spent = time.monotonic() - t
        took.sort()
        print(f"after initialize: VmRSS {after_start / 1024:.0f} MiB")
        print(f"model loaded and index filled after {ready:.1f} s")
        # Nearest rank: the ceil(p/100 * n)-th smallest.
        def pct(p: float) -> float:
            return took[min(len(took), max(1, math.ceil(p / 100 * len(took)))) - 1]
        print(f"{recalls} recalls ({'project_hint ' + hint if hint else 'scopes *'}) over stdio in {spent:.1f} s: p50 {pct(50):.2f} ms, "
              f"p99 {pct(99):.2f} ms")
        print(f"VmRSS {status_kib(proc.pid, 'VmRSS') / 1024:.0f} MiB, peak (VmHWM) {status_kib(proc.pid, 'VmHWM') / 1024:.0f} MiB")
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
