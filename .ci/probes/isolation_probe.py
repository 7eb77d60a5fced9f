#!/usr/bin/env python3
"""Black-box isolation probe.

Starts `zero-memory serve`, gives user A memories in personal, core and
project scopes, a thread, a conflict and a rule, then acts as user B with
every tool, every REST route, A's resource URIs, thread token, dispute ids
and MCP session id. It passes only if nothing of A's is returned or changed
and every answer for A's ids is indistinguishable from the answer for an id
that never existed.

Then teams: A creates a team and writes team conventions; C is a member
and D was one (D wrote into the team, opened an MCP session, then A
removed D). C must see exactly the team's memories and nothing of A's
personal or project scopes; D must see nothing of the team through every
tool, route, resource URI and its still-open session id — each answer
indistinguishable from one for an id (or a team) that never existed.

usage: isolation_probe.py BINARY [--database-url URL]
"""
import json
import os
import re
import sys
import tempfile
import time

from zmserver import Server

NEVER_MEM = "mem_0000000000000000.0000000000"
NEVER_DISPUTE = "mrq_0000000000000000.0000000000"
NEVER_THREAD = "thr_0000000000000000.0000000000"
# Share and move targets: a two-label `proj.<slug>` is the caller's own
# project (`proj.<caller>.<slug>`), which they may write.
B_TARGET = "proj.b_target"
D_TARGET = "proj.d_target"
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def scrub(value, *ids):
    """The answer with every probed id replaced by a placeholder."""
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    for i in ids:
        if i:
            text = text.replace(i, "<ID>")
    # Request ids and timestamps differ between any two calls.
    text = re.sub(r"req_[0-9a-z]{16}\.[0-9a-z]{10}", "<REQ>", text)
    return text


def settle(srv):
    """Wait until every memory written so far is embedded (hybrid mode):
    a memory the dense leg finds between the two calls of a pair would
    make them differ for a reason that has nothing to do with isolation.
    Lexical mode embeds nothing."""
    if os.environ.get("ZM_RECALL_MODE") == "lexical":
        return
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status, _, text = srv.request("GET", "/metrics")
        if status == 200 and re.search(r"^zm_embedding_queue 0$", text, re.M):
            return
        time.sleep(0.05)
    check(False, "the embedder did not catch up within 120 s")


def same(a, b, what, *ids):
    check(scrub(a, *ids) == scrub(b, *ids), f"{what}: foreign answer differs from never-existing answer:\n  {scrub(a, *ids)}\n  {scrub(b, *ids)}")


def not_found(answer, what):
    """A tool's answer is the `not_found` error (404), not a refusal of
    something else in the call (a 403 on a target scope would answer the
    same for every id, and prove nothing)."""
    status, body = answer
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    check(status == 404 and code == "not_found", f"{what}: expected 404 not_found, got {status} {body}")


def moved_none_not_found(answer, mid, what):
    """`move_memories` into a scope the caller writes answered 200, moved
    nothing and lists `mid` as not found."""
    status, body = answer
    ok = (status == 200 and isinstance(body, dict) and body.get("moved") == []
          and body.get("failed") == [{"memory_id": mid, "code": "not_found", "error": "not found"}])
    check(ok, f"{what}: expected nothing moved and {mid} failed as not found, got {status} {body}")


def share_and_move_probe(srv, token, mid, target, what):
    """`share` and `move_memories` of `mid` into `target`, a scope the
    caller may write (so that the call gets as far as looking the memory
    up): each answers exactly as for an id that never existed, and that
    answer is "not found"."""
    a = srv.tool(token, "share", {"memory_id": mid, "scope": target})
    n = srv.tool(token, "share", {"memory_id": NEVER_MEM, "scope": target})
    same(a, n, f"{what}: share into {target}", mid, NEVER_MEM)
    not_found(a, f"{what}: share into {target}")
    not_found(n, f"share of a never-existing id into {target}")
    a = srv.tool(token, "move_memories", {"memory_ids": [mid], "scope": target})
    n = srv.tool(token, "move_memories", {"memory_ids": [NEVER_MEM], "scope": target})
    same(a, n, f"{what}: move_memories into {target}", mid, NEVER_MEM)
    moved_none_not_found(a, mid, f"{what}: move_memories into {target}")
    moved_none_not_found(n, NEVER_MEM, f"move_memories of a never-existing id into {target}")
    return a, n


def main():
    binary = sys.argv[1]
    db_url = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--database-url" else None
    with tempfile.TemporaryDirectory() as d:
        srv = Server(binary, d, db_url)
        suffix = re.sub(r"[^a-z0-9]", "", d.lower())[-8:]
        a_email, b_email = f"a{suffix}@probe.test", f"b{suffix}@probe.test"
        c_email, d_email = f"c{suffix}@probe.test", f"d{suffix}@probe.test"
        for email in (a_email, b_email, c_email, d_email):
            srv.add_user(email)
        ta, tb = srv.token(a_email), srv.token(b_email)
        tc, td = srv.token(c_email), srv.token(d_email)
        srv.start()
        try:
            run(srv, ta, tb, b_email)
            run_team(srv, ta, tc, td, c_email, d_email, suffix)
        finally:
            srv.stop()
    print(f"isolation probe: {checks - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


def run(srv, ta, tb, b_email):
    # ---- user A's world
    ok = lambda r: (r[0] == 200) or sys.exit(f"setup failed: {r}")
    bc = srv.tool(ta, "build_context", {"topic": "probe project", "briefing": True, "project_hint": "/src/secret-project"})
    ok(bc)
    thread = bc[1]["session"]["thread"]
    project = bc[1]["project_scope"]
    mems = {}
    for key, args in {
        "personal": {"content": "A's personal preference: tabs over spaces in Makefiles.", "kind": "preference", "scope": "personal"},
        "core": {"content": "A's core fact: the VPN endpoint is vpn.a-corp.internal.", "scope": "core"},
        "project": {"content": "A's project decision: the billing service uses event sourcing.", "kind": "decision", "thread": thread, "entities": [{"name": "billing-service", "type": "service"}]},
        "project2": {"content": "A's project decision: the billing service uses CRUD tables.", "kind": "decision", "scope": project},
        "task": {"content": "A's task: rotate the billing database password.", "kind": "task", "scope": project},
    }.items():
        r = srv.tool(ta, "remember", args)
        ok(r)
        mems[key] = r[1]["memory_id"]
    ok(srv.tool(ta, "link", {"src": mems["project"], "dst": mems["project2"], "type": "contradicts"}))
    ch = srv.tool(ta, "challenge", {"memory_id": mems["core"], "reason": "the VPN moved"})
    ok(ch)
    disputes = [ch[1]["dispute_id"]] + [c["dispute_id"] for c in srv.tool(ta, "list_conflicts", {})[1]["conflicts"]]
    ok(srv.tool(ta, "promote_rule", {"memory_id": mems["personal"]}))
    ok(srv.tool(ta, "link", {"src": "billing-service", "dst": "postgres", "type": "depends_on"}))
    ok(srv.tool(ta, "import_memory", {"content": "A's imported note: the release train leaves on Tuesdays.", "kind": "fact", "target": "personal", "source_path": "NOTES.md", "source_hash": "probe-hash-of-a"}))
    a_session = srv.mcp_session(ta)
    before = snapshot(srv, ta)
    secrets = [m for m in mems.values()] + [thread, project] + disputes + ["tabs over spaces", "vpn.a-corp", "event sourcing", "billing"]

    def leaks(answer, sent=()):
        """A's data in an answer, other than the ids B itself sent."""
        text = json.dumps(answer) if not isinstance(answer, str) else answer
        for i in sent:
            text = text.replace(i, "<SENT>")
        return [s for s in secrets if s and s in text]

    # ---- user B, every tool with A's ids vs never-existing ids
    for key, mid in mems.items():
        for tool, extra in [("forget", {}), ("restore_memory", {}), ("close_loop", {}),
                            ("challenge", {"reason": "r"}), ("promote_rule", {})]:
            a = srv.tool(tb, tool, {"memory_id": mid, **extra})
            n = srv.tool(tb, tool, {"memory_id": NEVER_MEM, **extra})
            same(a, n, f"{tool} on A's {key} memory", mid, NEVER_MEM)
            check(not leaks(a, [mid]), f"{tool} leaks {leaks(a, [mid])}")
        # Into a project of B's own (`proj.<slug>` resolves into B's
        # namespace), which B may write: the call reaches A's memory.
        for a in share_and_move_probe(srv, tb, mid, B_TARGET, f"B on A's {key} memory"):
            check(not leaks(a, [mid]), f"share/move of A's {key} leaks {leaks(a, [mid])}")
        a = srv.tool(tb, "link", {"src": mid, "dst": NEVER_MEM, "type": "relates_to"})
        n = srv.tool(tb, "link", {"src": NEVER_MEM.replace("0000.", "0001."), "dst": NEVER_MEM, "type": "relates_to"})
        same(a, n, f"link from A's {key}", mid, NEVER_MEM.replace("0000.", "0001."))
        a = srv.tool(tb, "remember", {"content": "B links to A", "scope": "personal", "links": [{"dst": mid, "type": "supersedes"}]})
        n = srv.tool(tb, "remember", {"content": "B links to A", "scope": "personal", "links": [{"dst": NEVER_MEM, "type": "supersedes"}]})
        same(a, n, f"remember superseding A's {key}", mid, NEVER_MEM)
        # REST and resource reads.
        a = srv.get(f"/api/memories/{mid}", tb)
        n = srv.get(f"/api/memories/{NEVER_MEM}", tb)
        same(a, n, f"GET /api/memories A's {key}", mid, NEVER_MEM)
        sid = srv.mcp_session(tb)
        ra = srv.mcp(tb, {"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": f"zm://memory/{mid}"}}, sid)
        rn = srv.mcp(tb, {"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": f"zm://memory/{NEVER_MEM}"}}, sid)
        same(ra[2], rn[2], f"resources/read A's {key}", mid, NEVER_MEM)
        check(not leaks(ra[2], [mid]), f"resources/read leaks {leaks(ra[2], [mid])}")
    for did in disputes:
        for tool, extra in [("get_conflict", {}), ("resolve_conflict", {"keep_both": True}), ("resolve_conflict", {"retire": True})]:
            a = srv.tool(tb, tool, {"dispute_id": did, **extra})
            n = srv.tool(tb, tool, {"dispute_id": NEVER_DISPUTE, **extra})
            same(a, n, f"{tool} on A's dispute", did, NEVER_DISPUTE)
    # import_memory: A's source_hash means nothing to B (the ledger is per
    # owner): B's import of it is new, as of a hash nobody used.
    a = srv.tool(tb, "import_memory", {"content": "B's own note.", "kind": "fact", "target": "personal", "source_path": "NOTES.md", "source_hash": "probe-hash-of-a"})
    n = srv.tool(tb, "import_memory", {"content": "B's own note.", "kind": "fact", "target": "personal", "source_path": "NOTES.md", "source_hash": "probe-hash-never-used"})
    check(a[0] == 200 and n[0] == 200, f"import_memory answered {a[0]} and {n[0]}")
    check(a[1].get("skipped") is False and n[1].get("skipped") is False,
          f"import_memory with A's source_hash: skipped {a[1].get('skipped')!r}, with a new one {n[1].get('skipped')!r}")
    check(not leaks(a), f"import_memory leaks {leaks(a)}")
    # A's thread token: behaves as no token at all.
    for tool, args in [("remember", {"content": "B writes with A's thread"}), ("recall", {"query": "billing"}), ("build_context", {"topic": "billing"})]:
        settle(srv)
        a = srv.tool(tb, tool, {**args, "thread": thread})
        n = srv.tool(tb, tool, {**args, "thread": NEVER_THREAD})
        same(a, n, f"{tool} with A's thread", thread, NEVER_THREAD)
        check(not leaks(a, [thread]), f"{tool} with A's thread leaks {leaks(a, [thread])}")
    # Reads across everything B can see return nothing of A's.
    for tool, args in [("recall", {"query": "billing VPN tabs event sourcing", "scopes": ["*"]}),
                       ("recall", {"query": "billing", "scopes": [project]}),
                       ("build_context", {"topic": "billing VPN", "scopes": ["*"], "briefing": True}),
                       ("build_context", {"topic": "billing", "project_hint": "/src/secret-project", "briefing": True}),
                       ("entities", {}), ("entities", {"scope": "*"}), ("entities", {"scope": project}),
                       ("list_conflicts", {}), ("list_conflicts", {"status": "resolved"})]:
        r = srv.tool(tb, tool, args)
        check(r[0] == 200, f"{tool} {args} answered {r[0]}")
        check(not leaks(r[1]), f"{tool} {args} leaks {leaks(r[1])}")
    # Exports page: every page of each, in pages of one.
    for args in [{}, {"scopes": ["*"]}, {"scopes": [project]}]:
        r = srv.export_all(tb, args, limit=1)
        check(r[0] == 200, f"export_memories {args} answered {r[0]}")
        check(not leaks(r[1]), f"export_memories {args} leaks {leaks(r[1])}")
    # A's cursor is no position for B: refused on `cursor`, like a made-up one.
    r = srv.tool(ta, "export_memories", {"limit": 1})
    a_cursor = r[1].get("next_cursor") if r[0] == 200 else None
    check(a_cursor is not None, f"A's export of one per page has no next_cursor: {r}")
    if a_cursor:
        for cursor in [a_cursor, "exc_made-up"]:
            r = srv.tool(tb, "export_memories", {"cursor": cursor})
            fields = [f.get("path") for f in r[1].get("error", {}).get("details", {}).get("fields", [])]
            check(r[0] == 400 and fields == ["cursor"], f"B's export with cursor {cursor!r}: {r}")
            check(not leaks(r[1], [cursor]), f"B's export with A's cursor leaks {leaks(r[1], [cursor])}")
    # Writes into A's project scope are refused.
    r = srv.tool(tb, "remember", {"content": "B writes into A's project", "scope": project})
    check(r[0] == 403, f"remember into A's project scope: {r}")
    r = srv.tool(tb, "share", {"memory_id": NEVER_MEM, "scope": project})
    check(r[0] in (403, 404), f"share into A's project scope: {r}")
    r = srv.get("/api/rules", tb)
    check(r[0] == 200 and not leaks(r[1]), f"GET /api/rules leaks {r}")
    # A's MCP session id answers B exactly like an unknown one.
    msg = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    a = srv.mcp(tb, msg, a_session)
    n = srv.mcp(tb, msg, "never-existed-session")
    same([a[0], a[2]], [n[0], n[2]], "A's MCP session id used by B", a_session, "never-existed-session")
    check(a[0] != 200, "B was served on A's session")
    # B's ordinary token cannot delete B's account (account:delete is a
    # scope of its own); a token with it can, and A is untouched.
    r = srv.tool(tb, "delete_account", {})
    check(r[0] == 403, f"delete_account without account:delete {r}")
    r = srv.tool(srv.token(b_email, allow_account_delete=True), "delete_account", {})
    check(r[0] == 200, f"delete_account {r}")
    after = snapshot(srv, ta)
    check(before == after, "A's data changed during B's probe")


def run_team(srv, ta, tc, td, c_email, d_email, suffix):
    before = checks
    must = lambda r, what: r[0] in (200, 201) or sys.exit(f"team setup failed at {what}: {r}")
    slug = f"probe{suffix}"
    scope = f"team.{slug}"
    must(srv.request_json("POST", "/api/teams", ta, {"slug": slug}), "create")
    # A's own world besides the team.
    private = {}
    for key, args in {
        "personal": {"content": "A's private note: the payroll export runs on Fridays.", "scope": "personal"},
        "project": {"content": "A's solo project decision: ledgers are append-only.", "kind": "decision", "project_hint": "/src/a-solo-project"},
    }.items():
        r = srv.tool(ta, "remember", args)
        must(r, key)
        private[key] = r[1]["memory_id"]
    team_mems = {}
    r = srv.tool(ta, "remember", {"content": "Team convention: canary deploys last twenty minutes.", "kind": "convention", "scope": scope})
    must(r, "team memory")
    team_mems["by_a"] = r[1]["memory_id"]
    # C and D join as members do: invited by A, accepted by them.
    for email, token in ((c_email, tc), (d_email, td)):
        r = srv.request_json("POST", f"/api/teams/{slug}/invitations", ta, {"email": email, "role": "writer"})
        must(r, f"invite {email}")
        must(srv.request_json("POST", f"/api/invitations/{r[1]['id']}/accept", token), f"{email} accepts")
    r = srv.tool(td, "remember", {"content": "Team gotcha: the signing keys rotate quarterly.", "kind": "gotcha", "scope": scope})
    must(r, "D's team memory")
    team_mems["by_d"] = r[1]["memory_id"]
    d_session = srv.mcp_session(td)
    teams = srv.get("/api/teams", td)[1]
    d_id = None
    detail = srv.get(f"/api/teams/{slug}", ta)[1]
    for m in detail.get("members", []):
        if m["email"] == d_email:
            d_id = m["user_id"]
    check(d_id is not None and teams.get("teams"), f"D joined the team: {detail} {teams}")
    must(srv.request_json("DELETE", f"/api/teams/{slug}/members/{d_id}", ta), "remove D")

    a_private = list(private.values()) + ["payroll", "append-only"]
    team_secrets = list(team_mems.values()) + ["canary deploys", "signing keys"]

    def found(answer, secrets, sent=()):
        text = json.dumps(answer) if not isinstance(answer, str) else answer
        for i in sent:
            text = text.replace(i, "<SENT>")
        return [s for s in secrets if s and s in text]

    # C, a member: exactly the team's memories, none of A's private ones.
    r = srv.tool(tc, "recall", {"query": "canary deploys signing keys payroll ledgers", "scopes": ["*"], "k": 50})
    got = sorted(m["id"] for m in r[1].get("memories", []))
    check(got == sorted(team_mems.values()), f"C recalls exactly the team's memories: {got} vs {sorted(team_mems.values())}")
    check(all(m.get("team") == slug for m in r[1].get("memories", [])), f"C's hits name the team: {r[1]}")
    for tool, args in [("build_context", {"topic": "deploys payroll ledgers", "scopes": ["*"], "briefing": True}),
                       ("build_context", {"topic": "ledgers", "project_hint": "/src/a-solo-project", "briefing": True}),
                       ("export_memories", {"scopes": ["*"]}), ("entities", {"scope": "*"})]:
        r = srv.tool(tc, tool, args)
        check(r[0] == 200 and not found(r[1], a_private), f"C's {tool} {args} shows A's private data: {found(r[1], a_private)}")
    for key, mid in private.items():
        same(srv.get(f"/api/memories/{mid}", tc), srv.get(f"/api/memories/{NEVER_MEM}", tc), f"C reads A's {key}", mid, NEVER_MEM)
    check(srv.get(f"/api/memories/{team_mems['by_d']}", tc)[0] == 200, "C still reads what D wrote into the team")

    # D, removed: nothing of the team, anywhere (and nothing of it changed).
    settle(srv)
    # The sweep by meaning files its pairs after the queue reads 0: read
    # until two snapshots agree before comparing against one.
    team_before = stable_snapshot(srv, ta)
    for key, mid in team_mems.items():
        for tool, extra in [("forget", {}), ("restore_memory", {}), ("close_loop", {}),
                            ("challenge", {"reason": "r"}), ("promote_rule", {})]:
            a = srv.tool(td, tool, {"memory_id": mid, **extra})
            n = srv.tool(td, tool, {"memory_id": NEVER_MEM, **extra})
            same(a, n, f"removed D: {tool} on the team's {key} memory", mid, NEVER_MEM)
        # Into a project of D's own, which D may write: the call reaches
        # the team's memory (the one D wrote too, handed over on removal).
        for a in share_and_move_probe(srv, td, mid, D_TARGET, f"removed D on the team's {key} memory"):
            check(not found(a, team_secrets, [mid]), f"removed D: share/move of the team's {key} shows {found(a, team_secrets, [mid])}")
        same(srv.get(f"/api/memories/{mid}", td), srv.get(f"/api/memories/{NEVER_MEM}", td), f"removed D: GET the team's {key}", mid, NEVER_MEM)
        ra = srv.mcp(td, {"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": f"zm://memory/{mid}"}}, d_session)
        rn = srv.mcp(td, {"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": f"zm://memory/{NEVER_MEM}"}}, d_session)
        same(ra[2], rn[2], f"removed D: resources/read of the team's {key} in D's open session", mid, NEVER_MEM)
    never_slug = f"never{suffix}"
    for method, path in [("GET", "/api/teams/{}"), ("GET", "/api/teams/{}/audit"), ("GET", "/api/teams/{}/export"), ("DELETE", "/api/teams/{}")]:
        a = srv.request_json(method, path.format(slug), td)
        n = srv.request_json(method, path.format(never_slug), td)
        same(a, n, f"removed D: {method} {path}", slug, never_slug)
    a = srv.tool(td, "remember", {"content": "D writes after removal", "scope": scope})
    n = srv.tool(td, "remember", {"content": "D writes after removal", "scope": f"team.{never_slug}"})
    same(a, n, "removed D: remember into the team scope", scope, f"team.{never_slug}")
    for tool, args in [("recall", {"query": "canary deploys signing keys", "scopes": ["*"]}),
                       ("recall", {"query": "canary deploys signing keys", "scopes": [scope]}),
                       ("build_context", {"topic": "deploys keys", "scopes": ["*"], "briefing": True}),
                       ("build_context", {"topic": "deploys keys", "briefing": True}),
                       ("export_memories", {"scopes": ["*"]}), ("entities", {"scope": "*"}), ("list_conflicts", {})]:
        r = srv.tool(td, tool, args)
        check(r[0] == 200 and not found(r[1], team_secrets + a_private), f"removed D: {tool} {args} shows {found(r[1], team_secrets + a_private)}")
    r = srv.mcp(td, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "canary deploys signing keys", "scopes": ["*"]}}}, d_session)
    check(r[0] == 200 and not found(r[2], team_secrets), f"removed D's open MCP session still reads the team: {found(r[2], team_secrets)}")
    r = srv.get("/api/teams", td)
    check(r[0] == 200 and r[1].get("teams") == [], f"removed D still lists the team: {r}")
    r = srv.get("/api/rules", td)
    check(r[0] == 200 and not found(r[1], team_secrets), f"removed D's rules: {r}")
    check(snapshot(srv, ta) == team_before, "the team's data (as A reads it) changed during removed D's probe")
    print(f"isolation probe, teams part: {checks - before} checks", flush=True)


def stable_snapshot(srv, token):
    """`snapshot`, once two reads in a row agree (at most a minute)."""
    deadline = time.monotonic() + 60
    last = snapshot(srv, token)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = snapshot(srv, token)
        if now == last:
            return now
        last = now
    return last


def snapshot(srv, token):
    out = {}
    for tool, args in [("list_conflicts", {}), ("list_conflicts", {"status": "resolved"}),
                       ("list_conflicts", {"status": "dismissed"}), ("entities", {})]:
        out[f"{tool}{json.dumps(args)}"] = srv.tool(token, tool, args)[1]
    out["export_memories"] = srv.export_all(token)[1]
    out["rules"] = srv.get("/api/rules", token)[1]
    return json.dumps(out, sort_keys=True)


if __name__ == "__main__":
    main()
