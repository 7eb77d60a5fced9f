#!/usr/bin/env python3
"""Scale-out probe: two real `zero-memory serve` processes on ONE PostgreSQL
database act as one server (docs/DEPLOYMENT.md).

usage: scale_probe.py BINARY --database-url URL   (a fresh, empty database)

Requests alternate between the two processes:
 1. OAuth: registration on B, the sign-in page from A posted to B, the code
    exchanged on A, the refresh on B, the rotated refresh token replayed on
    B after the rest (refused, and the family's access token with it).
 2. The OAuth rate limit holds for both together: registrations alternating
    between A and B stop at the limit, on both.
 3. One MCP session (2025-11-25): opened on A, its calls alternating; the
    project attached by a call on A is where a scope-less write on B lands;
    another user's request with its id is "unknown" on both; A stopped, B
    still serves it; `DELETE` on B ends it.

Standard library only.
"""
import base64
import hashlib
import html
import json
import os
import re
import secrets
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zmserver import Server  # noqa: E402

RATE_MAX = 8
REDIRECT = "http://127.0.0.1/callback"
REDIRECT_PORT = "http://127.0.0.1:43123/callback"
EMAIL = "owner@scale.test"
PASSWORD = "probe-password-123"


def header(headers, name):
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def cookies(headers):
    return [v.split(";")[0] for k, v in headers if k.lower() == "set-cookie"]


def register(srv):
    status, _, text = srv.raw("POST", "/oauth/register",
                              json.dumps({"client_name": "scale probe", "redirect_uris": [REDIRECT]}),
                              {"content-type": "application/json"})
    return status, (json.loads(text) if status == 201 else text)


def sign_in_page(srv, query):
    status, headers, text = srv.raw("GET", "/oauth/authorize?" + urllib.parse.urlencode(query))
    if status != 200:
        raise RuntimeError(f"sign-in page on {srv.base}: {status}")
    cookie = next(c for c in cookies(headers) if c.startswith("zm_oauth_csrf=") and len(c) > 14)
    fields = [(html.unescape(n), html.unescape(v))
              for n, v in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', text)]
    return fields, cookie


def post_sign_in(srv, page, email, password):
    fields, cookie = page
    body = urllib.parse.urlencode(fields + [("email", email), ("password", password)])
    status, headers, _ = srv.raw("POST", "/oauth/authorize", body,
                                 {"content-type": "application/x-www-form-urlencoded", "cookie": cookie})
    return status, header(headers, "location")


def token(srv, form):
    status, _, text = srv.raw("POST", "/oauth/token", urllib.parse.urlencode(form),
                              {"content-type": "application/x-www-form-urlencoded"})
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def call(srv, tok, sid, name, args):
    status, _, msgs = srv.mcp(tok, {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                                    "params": {"name": name, "arguments": args}}, sid)
    if status != 200 or not msgs or msgs[-1].get("result", {}).get("isError"):
        raise RuntimeError(f"{name} on {srv.base}: {status} {msgs}")
    return msgs[-1]["result"]["structuredContent"]


def main():
    if len(sys.argv) != 4 or sys.argv[2] != "--database-url":
        print(__doc__)
        sys.exit(2)
    binary, url = sys.argv[1], sys.argv[3]
    problems = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            problems.append(what)

    with tempfile.TemporaryDirectory() as da, tempfile.TemporaryDirectory() as db:
        a = Server(binary, da, database_url=url)
        b = Server(binary, db, database_url=url)
        hosts = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
        for s in (a, b):
            s.env.update({"ZM_PUBLIC_URL": a.base, "ZM_ALLOWED_HOSTS": hosts,
                          "ZM_OAUTH_RATELIMIT_MAX": str(RATE_MAX)})
        a.add_user(EMAIL, PASSWORD)
        a.add_user("other@scale.test")
        other = b.token("other@scale.test")
        a.start()
        b.start()
        try:
            # ---- 1. OAuth, alternating ---------------------------------
            st, client = register(b)
            check(st == 201, f"registration on B: {st}")
            verifier = base64.urlsafe_b64encode(secrets.token_bytes(48)).rstrip(b"=").decode()
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            query = {"response_type": "code", "client_id": client["client_id"], "redirect_uri": REDIRECT_PORT,
                     "code_challenge": challenge, "code_challenge_method": "S256", "state": "s"}
            st, location = post_sign_in(b, sign_in_page(a, query), EMAIL, PASSWORD)
            check(st == 302 and location and "code=" in location, f"the form from A posted to B: {st}")
            code = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(location or "").query)).get("code", "")
            st, t = token(a, [("grant_type", "authorization_code"), ("code", code), ("code_verifier", verifier),
                              ("client_id", client["client_id"]), ("redirect_uri", REDIRECT_PORT)])
            check(st == 200, f"B's code exchanged on A: {st}")
            refresh = t.get("refresh_token", "") if isinstance(t, dict) else ""
            st, t2 = token(b, [("grant_type", "refresh_token"), ("refresh_token", refresh),
                               ("client_id", client["client_id"])])
            check(st == 200, f"A's refresh token rotated on B: {st}")
            access = t2.get("access_token", "") if isinstance(t2, dict) else ""

            # ---- 2. One rate limit for both -----------------------------
            # One registration is already counted (step 1, on B).
            statuses = []
            for i in range(RATE_MAX + 3):
                statuses.append(register(a if i % 2 == 0 else b)[0])
            allowed = statuses.count(201)
            check(allowed == RATE_MAX - 1 and statuses[allowed:] == [429] * (len(statuses) - allowed),
                  f"registrations alternating A/B stop at the shared limit of {RATE_MAX}: {statuses}")

            # ---- 3. One MCP session, alternating --------------------------
            # A PAT, so the limit above does not get in the way.
            pat = a.token(EMAIL)
            check(bool(access), "an OAuth access token after the refresh")
            st, sid, msgs = a.mcp(access, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "scale-probe", "version": "0"}}})
            check(st == 200 and sid, f"initialize with the OAuth token on A: {st}")
            st, _, _ = b.mcp(access, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
            check(st == 202, f"B takes the session A opened: {st}")
            st, _, msgs = b.mcp(access, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
            tools = [t for m in msgs for t in m.get("result", {}).get("tools", [])]
            check(st == 200 and len(tools) >= 18, f"tools/list on B: {st}, {len(tools)} tools")
            out = call(a, access, sid, "recall", {"query": "anything", "project_hint": "scale-probe-project"})
            project = (out.get("session") or {}).get("attached_project")
            check(bool(project), f"a pinned recall on A attaches the session: {project}")
            out = call(b, access, sid, "remember", {"content": "A scope-less fact written through B."})
            check(out.get("scope") == project, f"a scope-less remember on B lands in A's attachment: {out.get('scope')}")
            written = out.get("memory_id", "")
            check(written.startswith("mem_"), f"the remember on B names its memory: {out}")
            # Another user's request with the session id: answered on both
            # exactly as one with an id that never existed (request ids aside).
            never = "never-existed-session"
            for s in (a, b):
                msg = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
                st, _, msgs = s.mcp(other, msg, sid)
                nst, _, nmsgs = s.mcp(other, msg, never)
                theirs = re.sub(r"req_[0-9a-z]{16}\.[0-9a-z]{10}", "<REQ>", json.dumps([st, msgs], sort_keys=True).replace(sid, "<ID>"))
                unknown = re.sub(r"req_[0-9a-z]{16}\.[0-9a-z]{10}", "<REQ>", json.dumps([nst, nmsgs], sort_keys=True).replace(never, "<ID>"))
                check(st == 404 and theirs == unknown,
                      f"another user's request with the session id on {s.base} is answered as an unknown id's: {theirs} vs {unknown}")
            a.stop()
            st, _, msgs = b.mcp(access, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, sid)
            check(st == 200, f"A stopped: B still serves the session: {st}")
            st, _, _ = b.request("DELETE", "/mcp", access, None,
                                 {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"})
            check(st == 204, f"DELETE on B: {st}")
            st, _, _ = b.mcp(access, {"jsonrpc": "2.0", "id": 6, "method": "tools/list"}, sid)
            check(st == 404, f"the ended session is unknown: {st}")
            st, body = b.tool(pat, "recall", {"query": "scope-less fact", "scopes": [project or "personal"]})
            hits = [m.get("id") for m in body.get("memories", [])] if isinstance(body, dict) else []
            check(st == 200 and written in hits, f"REST on B with a PAT recalls the memory written through B ({written}): {st} {hits}")
            # The rotated refresh token replayed (on B, A is gone): refused,
            # and its whole family ends — the access token too.
            st, _ = token(b, [("grant_type", "refresh_token"), ("refresh_token", refresh),
                              ("client_id", client["client_id"])])
            check(st == 400, f"the rotated refresh token replayed is refused: {st}")
            st = b.tool(access, "recall", {"query": "anything"})[0]
            check(st == 401, f"the family's access token is refused after the replay: {st}")
        finally:
            for s in (a, b):
                s.stop()
            if problems:
                for s, name in ((a, "A"), (b, "B")):
                    print(f"---- {name}'s log ----")
                    print(s.log()[-4000:])
    if problems:
        print(f"scale probe: {len(problems)} problem(s)")
        sys.exit(1)
    print("scale probe: two instances on one database act as one")


if __name__ == "__main__":
    main()
