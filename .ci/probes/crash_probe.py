#!/usr/bin/env python3
"""Crash probe: `kill -9` of `zero-memory serve` during a stream of
acknowledged writes, restart, and check every acknowledged write is there
and the database is consistent.

usage: crash_probe.py BINARY [--database-url URL]
"""
import os
import sqlite3
import sys
import tempfile
import threading
import time

from zmserver import Server


def main():
    binary = sys.argv[1]
    db_url = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--database-url" else None
    label = "postgres" if db_url else "sqlite"
    failures = []
    with tempfile.TemporaryDirectory() as d:
        srv = Server(binary, d, db_url)
        email = f"crash{os.getpid()}{int(time.time())}@probe.test"
        srv.add_user(email)
        token = srv.token(email)
        srv.start()
        acked = []
        lock = threading.Lock()
        stop = threading.Event()

        def writer(n):
            i = 0
            while not stop.is_set():
                i += 1
                status, body = srv.tool(token, "remember", {"content": f"crash probe writer {n} write {i}: keep every acknowledged write", "scope": "personal"})
                if status == 200:
                    with lock:
                        acked.append(body["memory_id"])
                elif stop.is_set():
                    return
        threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(4)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while time.time() < deadline:
            with lock:
                if len(acked) >= 150:
                    break
            time.sleep(0.01)
        srv.stop(kill=True)  # SIGKILL mid-stream
        stop.set()
        for t in threads:
            t.join(timeout=30)
        with lock:
            acked = list(acked)
        if len(acked) < 50:
            failures.append(f"only {len(acked)} writes were acknowledged before the kill")
        # The database opens, migrates and is consistent.
        srv.cli("migrate")
        if not db_url:
            con = sqlite3.connect(os.path.join(d, "zero-memory.db"))
            result = con.execute("PRAGMA integrity_check").fetchone()[0]
            if result != "ok":
                failures.append(f"integrity_check: {result}")
            try:
                # rank 1: checked against memories (words, owner and scope tokens).
                con.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES('integrity-check', 1)")
            except sqlite3.DatabaseError as e:
                failures.append(f"full-text index is inconsistent: {e}")
            con.close()
        srv.start()
        try:
            missing = [m for m in acked if srv.get(f"/api/memories/{m}", token)[0] != 200]
            if missing:
                failures.append(f"{len(missing)} acknowledged writes are missing, e.g. {missing[:3]}")
            # Small pages, so the export crosses several cursors.
            status, exp = srv.export_all(token, limit=40)
            if status != 200:
                failures.append(f"export_memories answered {status}: {exp}")
            else:
                ids = [i["id"] for i in exp["items"]]
                if len(ids) != len(set(ids)):
                    failures.append("an export lists a memory twice")
                lost = set(acked) - set(ids)
                if lost:
                    failures.append(f"{len(lost)} acknowledged writes are missing from the export")
        finally:
            srv.stop()
    for f in failures:
        print("FAIL:", f)
    print(f"crash probe ({label}): {len(acked)} acknowledged writes checked; {0 if failures else 1} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
