#!/usr/bin/env python3
"""Black-box hardening probe.

Runs a real `zero-memory` binary and checks the limits it promises
(docs/SECURITY.md, docs/REVERSE_PROXY.md, docs/OAUTH.md):

 1. a 12,000-parameter `GET /oauth/authorize` is refused (4xx) for little
    server CPU, and a repeated parameter is refused cleanly;
 2. a slow-header client is cut off after the header timeout while another
    connection is served;
 3. one user opening 1,000 MCP sessions ends only that user's oldest ones;
    another user's session keeps answering;
 4. failed sign-ins behind a trusted proxy are limited whatever the
    client-controlled `X-Forwarded-For` hops say;
 5. `/oauth/authorize` never redirects an error found before a sign-in,
    not even to a registered client_id/redirect_uri pair (registration is
    anonymous); a sign-in does redirect back;
 6. file modes of the data directory, the database, its WAL/SHM, exports and
    the first-start secrets file; a warning for an open data directory;
 7. `stdio` on an empty data directory answers `initialize` and
    `tools/list` and writes at most one stderr line;
 8. the test-only anonymous switch is refused where others can reach the
    server and warns loudly where it is accepted.

One line per check (PASS/FAIL and the figure measured); exit 1 if any
check fails. Standard library only.

usage: hardening_probe.py BINARY
"""
import html
import http.client
import json
import os
import queue
import re
import select
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

from zmserver import Server, free_port, mcp_messages

results = []
PASSWORD = "probe-password-123"
PUBLIC_URL = "https://memory.probe.test"
ATTACKER = "https://attacker.probe.test/cb"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"  # 43 unreserved characters


def report(name, ok, figure, problems=()):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}: {figure}")
    for p in problems:
        print(f"     - {p}")
    sys.stdout.flush()


def run_check(name, fn, *args):
    """Run one check; an exception is a failure of that check, not of the
    probe."""
    try:
        fn(name, *args)
    except Exception as e:  # noqa: BLE001 - report and go on with the next check
        report(name, False, f"error: {type(e).__name__}: {e}")


def header(headers, name):
    return [v for k, v in headers if k.lower() == name.lower()]


def register_client(srv, redirect_uri):
    status, _, text = srv.raw("POST", "/oauth/register", json.dumps(
        {"client_name": "hardening probe", "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none"}),
        {"content-type": "application/json"})
    if status not in (200, 201):
        raise RuntimeError(f"client registration answered {status}: {text[:200]}")
    return json.loads(text)["client_id"]


def parse_json(text):
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def authorize_query(client_id, redirect_uri, **extra):
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
              "code_challenge": CHALLENGE, "code_challenge_method": "S256", "state": "probe-state", **extra}
    return urllib.parse.urlencode(params)


def new_server(d, name, extra_env=None, args=()):
    data = os.path.join(d, name)
    os.makedirs(data, mode=0o700)
    env = {"ZM_FIRST_START_OUTPUT": os.path.join(data, "first-start.txt")}
    env.update(extra_env or {})
    return Server(BINARY, data, extra_env=env, args=args)


def base36(i):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        i, r = divmod(i, 36)
        out = digits[r] + out
        if not i:
            return "k" + out


# ---- 1. parameter flood on GET /oauth/authorize ---------------------------

def check_param_flood(name, d):
    # A generous OAuth rate limit: every request must reach the parameter
    # check (a 429 would be cheaper and prove nothing).
    srv = new_server(d, "flood", {"ZM_OAUTH_RATELIMIT_MAX": "100000"})
    problems = []
    try:
        srv.start()
        client = register_client(srv, "http://127.0.0.1:47001/cb")
        # 12,000 distinct bare names (`k0&k1&…`, about 59 KB): short enough
        # for hyper's 64 KiB URI limit, so the query reaches the OAuth
        # parameter check instead of being refused 414 by the HTTP layer.
        query = "&".join(f"{base36(i)}" for i in range(12_000))
        path = "/oauth/authorize?" + query
        # Ticks are 10 ms: enough rounds that a tick is 0.1 ms per request.
        rounds = 100
        statuses = set()
        # Warm-up (first-request allocations), then measure.
        _, _, text = srv.raw("GET", path)
        if "more than 64 parameters" not in text:
            problems.append(f"the 12,000-parameter query was not refused as too many: {text[:200]!r}")
        before = srv.cpu_seconds()
        for _ in range(rounds):
            status, headers, text = srv.raw("GET", path)
            statuses.add(status)
        used = srv.cpu_seconds() - before
        per_request_ms = used / rounds * 1000
        if statuses != {400}:
            problems.append(f"12,000 parameters answered {sorted(statuses)}, expected 400 invalid_request")
        # The same count with `name=value` pairs is past the URI limit: any
        # 4xx will do, as long as nothing breaks.
        long_status = srv.raw("GET", "/oauth/authorize?" + "&".join(f"p{i}=v" for i in range(12_000)))[0]
        if not 400 <= long_status < 500:
            problems.append(f"12,000 name=value parameters (96 KB) answered {long_status}, expected a 4xx")
        if per_request_ms >= 10:
            problems.append(f"{per_request_ms:.2f} ms of server CPU per request (limit 10 ms)")
        if srv.proc.poll() is not None or srv.get("/healthz")[0] != 200:
            problems.append("the server is not answering after the flood")
        # Repeated parameters: refused with a page, never served or
        # redirected, whether the repeat is the client or its redirect URI.
        dup_cases = {
            "client_id twice": f"{authorize_query(client, 'http://127.0.0.1:47001/cb')}&client_id={client}",
            "redirect_uri twice": f"{authorize_query(client, 'http://127.0.0.1:47001/cb')}&redirect_uri={urllib.parse.quote(ATTACKER)}",
            "state twice": f"{authorize_query(client, 'http://127.0.0.1:47001/cb')}&state=again",
        }
        for what, q in dup_cases.items():
            status, headers, text = srv.raw("GET", "/oauth/authorize?" + q)
            if status != 400 or header(headers, "location") or "repeated" not in text:
                problems.append(f"{what}: answered {status}, Location {header(headers, 'location')}, "
                                f"'repeated' {'in' if 'repeated' in text else 'not in'} the page; expected a 400 page naming the repeat")
        # The same on the sign-in form and the token endpoint.
        form = f"{authorize_query(client, 'http://127.0.0.1:47001/cb')}&email=a%40probe.test&email=b%40probe.test&password=x"
        status, headers, text = srv.raw("POST", "/oauth/authorize", form, {"content-type": "application/x-www-form-urlencoded"})
        if status != 400 or header(headers, "location") or "repeated" not in text:
            problems.append(f"POST /oauth/authorize with email twice: answered {status}, expected a 400 page naming the repeat")
        status, headers, text = srv.raw("POST", "/oauth/token", "grant_type=authorization_code&grant_type=refresh_token&code=x",
                                        {"content-type": "application/x-www-form-urlencoded"})
        err = parse_json(text)
        if status != 400 or err.get("error") != "invalid_request" or "repeated" not in err.get("error_description", ""):
            problems.append(f"POST /oauth/token with grant_type twice: answered {status} {text[:150]!r}, expected 400 invalid_request")
        # The cap is exactly 64 (6 authorization parameters + extras): 64
        # are served, 65 are refused as too many.
        base = authorize_query(client, "http://127.0.0.1:47001/cb")
        for extra, want in [(58, 200), (59, 400)]:
            q = base + "&" + "&".join(f"x{i}=v" for i in range(extra))
            status, headers, text = srv.raw("GET", "/oauth/authorize?" + q)
            if status != want or (want == 400 and "more than 64 parameters" not in text) or header(headers, "location"):
                problems.append(f"{6 + extra} parameters: answered {status}, expected {want}")
        tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
        cpu = (f"{per_request_ms:.2f} ms" if used else f"< {tick_ms / rounds:.2f} ms (not one {tick_ms:.0f} ms tick in all)")
        figure = (f"{cpu} server CPU per 12,000-parameter request ({used * 1000:.0f} ms over {rounds}), "
                  f"status {sorted(statuses)}; 96 KB variant {long_status}; repeats refused (GET, sign-in form, token endpoint)")
    finally:
        srv.stop()
    report(name, not problems, figure, problems)


# ---- 2. slow-header client -------------------------------------------------

def check_slow_header(name, d):
    timeout = 2  # the knob's minimum is 1; 2 lets a byte a second arrive twice
    srv = new_server(d, "slow", args=["--header-timeout-secs", str(timeout)])
    problems = []
    try:
        srv.start()
        request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        start = time.monotonic()
        closed_at = None
        normal = None
        got = b""
        sent = 0
        deadline = start + timeout + 4
        while time.monotonic() < deadline and closed_at is None:
            try:
                sock.send(request[sent:sent + 1])
                sent += 1
            except OSError:
                closed_at = time.monotonic()
                break
            if normal is None and time.monotonic() - start >= 1:
                normal = srv.raw("GET", "/healthz")[0]
            # Wait a second for the server to say or close anything.
            wait_until = time.monotonic() + 1
            while closed_at is None and time.monotonic() < wait_until:
                r, _, _ = select.select([sock], [], [], max(0, wait_until - time.monotonic()))
                if r:
                    try:
                        chunk = sock.recv(4096)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        closed_at = time.monotonic()
                    got += chunk
        sock.close()
        if normal is None:
            normal = srv.raw("GET", "/healthz")[0]
        if closed_at is None:
            problems.append(f"still open after {time.monotonic() - start:.1f} s and {sent} header bytes (timeout {timeout} s)")
            figure = f"not closed within {timeout + 4} s"
        else:
            held = closed_at - start
            figure = f"closed after {held:.1f} s and {sent} header bytes (timeout {timeout} s)"
            if held > timeout + 2:
                problems.append(f"closed after {held:.1f} s, expected within {timeout} s + 2 s slack")
            if got.startswith(b"HTTP/1.1 200"):
                problems.append("the trickled request was served")
        if normal != 200:
            problems.append(f"a normal request on another connection answered {normal}")
        figure += f"; a normal request meanwhile: {normal}"
    finally:
        srv.stop()
    report(name, not problems, figure, problems)


# ---- 3. 1,000 MCP sessions of one user ------------------------------------

class McpClient:
    """MCP over Streamable HTTP on one keep-alive connection."""

    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.token = token

    def post(self, message, session=None):
        headers = {"authorization": f"Bearer {self.token}", "content-type": "application/json",
                   "accept": "application/json, text/event-stream"}
        if session:
            headers["mcp-session-id"] = session
            headers["mcp-protocol-version"] = "2025-11-25"
        for attempt in range(2):
            try:
                self.conn.request("POST", "/mcp", body=json.dumps(message), headers=headers)
                r = self.conn.getresponse()
                text = r.read().decode(errors="replace")
                break
            except (OSError, http.client.HTTPException):
                # The server closed an idle keep-alive connection: retry once.
                self.conn.close()
                if attempt:
                    raise
        return r.status, r.getheader("mcp-session-id"), mcp_messages(text)

    def initialize(self):
        return self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "hardening-probe", "version": "0"}}})

    def tools_list(self, session):
        status, _, msgs = self.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
        tools = [t for m in msgs for t in m.get("result", {}).get("tools", [])]
        return status, len(tools)


def check_sessions(name, d):
    srv = new_server(d, "sessions")
    srv.add_user("a@probe.test")
    srv.add_user("b@probe.test")
    ta, tb = srv.token("a@probe.test"), srv.token("b@probe.test")
    per_user = 20  # the documented default of max_sessions_per_user
    problems = []
    try:
        srv.start()
        b = McpClient(srv.port, tb)
        status, b_sid, _ = b.initialize()
        if status != 200 or not b_sid:
            raise RuntimeError(f"B's initialize answered {status}")
        status, _, _ = b.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, b_sid)
        if status not in (200, 202, 204):
            problems.append(f"B's notifications/initialized answered {status}")
        b_tools = b.tools_list(b_sid)
        if b_tools[0] != 200 or b_tools[1] == 0:
            raise RuntimeError(f"B's session does not answer tools/list before the flood: {b_tools}")
        a = McpClient(srv.port, ta)
        a_sids, refused = [], {}
        start = time.monotonic()
        for _ in range(1000):
            status, sid, _ = a.initialize()
            if status == 200 and sid:
                a_sids.append(sid)
            else:
                refused[status] = refused.get(status, 0) + 1
        took = time.monotonic() - start
        # Documented: A is never refused (A's own oldest session ends), so
        # every initialize opened a session and A keeps the newest 20.
        if refused:
            problems.append(f"A's sessions refused: {refused} (expected each to end A's oldest instead)")
        if len(set(a_sids)) != len(a_sids):
            problems.append("a session id was handed out twice")
        tail = a_sids[-(per_user + 5):]
        alive = [a.tools_list(s)[0] == 200 for s in tail]
        first_alive = a.tools_list(a_sids[0])[0] == 200 if a_sids else True
        if alive != [False] * 5 + [True] * per_user or first_alive:
            problems.append(f"A's live sessions among the last {len(tail)}: {alive.count(True)} "
                            f"(pattern {''.join('1' if x else '0' for x in alive)}), first session alive: {first_alive}; "
                            f"expected exactly the newest {per_user}")
        b_after = b.tools_list(b_sid)
        if b_after[0] != 200 or b_after[1] != b_tools[1]:
            problems.append(f"B's session after the flood answered tools/list with {b_after} (before: {b_tools})")
        figure = (f"A opened {len(a_sids)}/1000 in {took:.1f} s, keeps the newest {alive.count(True)} of the last {len(tail)}; "
                  f"B's tools/list after: status {b_after[0]}, {b_after[1]} tools")
    finally:
        srv.stop()
    report(name, not problems, figure, problems)


# ---- 4. failed sign-ins with a rotating X-Forwarded-For -------------------

def signin_form(srv, client, redirect_uri):
    """GET the sign-in page: (cookie header, hidden form fields)."""
    status, headers, text = srv.raw("GET", "/oauth/authorize?" + authorize_query(client, redirect_uri))
    if status != 200:
        raise RuntimeError(f"the sign-in page answered {status}: {text[:200]}")
    # Behind an https public URL the cookie carries the __Secure- prefix.
    cookies = [c.split(";", 1)[0] for c in header(headers, "set-cookie")
               if c.startswith(("zm_oauth_csrf=", "__Secure-zm_oauth_csrf="))]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', text))
    if not cookies or "csrf" not in fields:
        raise RuntimeError("the sign-in page has no CSRF cookie or token")
    return cookies[0], {k: html.unescape(v) for k, v in fields.items()}


def attempts_until_limited(srv, cookie, fields, emails, proxy_hop):
    """POST wrong passwords, each with another spoofed left-most XFF hop and
    the same proxy-appended right-most one. Returns (attempt number of the
    first 429 or None, its Retry-After, statuses before it)."""
    before = []
    for i, email in enumerate(emails, start=1):
        form = urllib.parse.urlencode({**fields, "email": email, "password": "wrong-password-" + str(i)})
        status, headers, _ = srv.raw("POST", "/oauth/authorize", form, {
            "content-type": "application/x-www-form-urlencoded", "cookie": cookie, "origin": PUBLIC_URL,
            "x-forwarded-for": f"10.1.{i // 250}.{i % 250 + 1}, {proxy_hop}"})
        if status == 429:
            return i, header(headers, "retry-after"), before
        before.append(status)
    return None, [], before


def check_login_flood(name, d):
    srv = new_server(d, "login", {"ZM_PUBLIC_URL": PUBLIC_URL}, args=["--trust-proxy"])
    srv.add_user("victim@probe.test", PASSWORD)
    problems = []
    try:
        srv.start()
        redirect_uri = "http://127.0.0.1:47002/cb"
        client = register_client(srv, redirect_uri)
        cookie, fields = signin_form(srv, client, redirect_uri)
        # One account from rotating addresses: the per-account back-off
        # (5 free failures) and the per-hop limit both apply.
        n1, ra1, before1 = attempts_until_limited(srv, cookie, fields, ["victim@probe.test"] * 100, "203.0.113.7")
        # A new account each time, another proxy hop: only the per-address
        # limit (oauth_ratelimit_max, 30 by default) can stop it, and only
        # if the server counts the right-most hop.
        emails = [f"nobody{i}@probe.test" for i in range(100)]
        n2, ra2, before2 = attempts_until_limited(srv, cookie, fields, emails, "203.0.113.8")
        for label, n, ra, before, most in [("one account", n1, ra1, before1, 6), ("rotating accounts", n2, ra2, before2, 31)]:
            if n is None:
                problems.append(f"{label}: 100 failed sign-ins, never limited (statuses {sorted(set(before))})")
                continue
            if n > most:
                problems.append(f"{label}: first limited at attempt {n}, expected by attempt {most}")
            if not ra or not ra[0].isdigit() or int(ra[0]) < 1:
                problems.append(f"{label}: the 429 has no Retry-After ({ra})")
            if set(before) != {401}:
                problems.append(f"{label}: attempts before the limit answered {sorted(set(before))}, expected 401 (a real password check)")
        # The limit is per proxy-appended hop, not global: a client behind
        # another hop still gets its password checked.
        n3, _, before3 = attempts_until_limited(srv, cookie, fields, ["someone@probe.test"], "203.0.113.9")
        if n3 is not None or before3 != [401]:
            problems.append(f"a client behind another proxy hop was answered {before3 or 429}, expected 401")
        figure = (f"one account limited at attempt {n1} (Retry-After {ra1[0] if ra1 else None}); "
                  f"rotating accounts limited at attempt {n2} (Retry-After {ra2[0] if ra2 else None}); another hop meanwhile {before3 or [429]}")
    finally:
        srv.stop()
    report(name, not problems, figure, problems)


# ---- 5. no redirect before a sign-in ---------------------------------------

def check_no_open_redirect(name, d):
    srv = new_server(d, "redirect", {"ZM_OAUTH_RATELIMIT_MAX": "100000"})
    srv.add_user("owner@probe.test", PASSWORD)
    problems = []
    try:
        srv.start()
        good = "http://127.0.0.1:47003/cb"
        client = register_client(srv, good)
        register_client(srv, "https://other-app.probe.test/cb")  # a pair of someone else's
        # Anyone may register the attacker's URI: a registered pair proves
        # nothing about where it leads.
        evil = register_client(srv, ATTACKER)
        q = authorize_query
        cases = {
            "unknown client_id": q("oac_doesnotexist", ATTACKER),
            "unknown client_id, bad response_type": q("oac_doesnotexist", ATTACKER, response_type="token"),
            "registered client, unregistered redirect_uri": q(client, ATTACKER),
            "registered client, unregistered redirect_uri, bad response_type": q(client, ATTACKER, response_type="token"),
            "registered client, unregistered redirect_uri, bad scope": q(client, ATTACKER, scope="admin"),
            "registered client, another client's redirect_uri": q(client, "https://other-app.probe.test/cb", response_type="token"),
            "registered client, unregistered loopback path": q(client, "http://127.0.0.1:47003/elsewhere", response_type="token"),
            "no client_id": urllib.parse.urlencode({"redirect_uri": ATTACKER, "response_type": "code"}),
            "registered client, no redirect_uri": urllib.parse.urlencode({"client_id": client, "response_type": "token"}),
            "attacker's registered pair, bad response_type": q(evil, ATTACKER, response_type="token"),
            "attacker's registered pair, no code_challenge": q(evil, ATTACKER, code_challenge=""),
            "attacker's registered pair, bad scope": q(evil, ATTACKER, scope="admin"),
            "registered pair, bad response_type": q(client, good, response_type="token"),
        }
        redirected = 0
        for what, query in cases.items():
            for method in ("GET", "POST"):
                if method == "GET":
                    status, headers, text = srv.raw("GET", "/oauth/authorize?" + query)
                else:
                    status, headers, text = srv.raw("POST", "/oauth/authorize", query + "&email=x%40probe.test&password=x",
                                                    {"content-type": "application/x-www-form-urlencoded"})
                loc = header(headers, "location")
                if 300 <= status < 400 or loc or "attacker.probe.test/cb?" in text:
                    redirected += 1
                    problems.append(f"{method} {what}: answered {status}, Location {loc}")
                elif not 400 <= status < 500:
                    problems.append(f"{method} {what}: answered {status}, expected a 4xx page")
        # Control: a sign-in through the registered pair is redirected back
        # with its code (so the assertions above can see a redirect when
        # there is one).
        cookie, fields = signin_form(srv, client, good)
        form = urllib.parse.urlencode({**fields, "email": "owner@probe.test", "password": PASSWORD})
        status, headers, _ = srv.raw("POST", "/oauth/authorize", form, {
            "content-type": "application/x-www-form-urlencoded", "cookie": cookie})
        loc = header(headers, "location")
        control = status == 302 and loc and loc[0].startswith(good + "?") and "code=" in loc[0]
        if not control:
            problems.append(f"control: the sign-in answered {status} Location {loc}, expected 302 back to {good} with a code")
        figure = f"{2 * len(cases)} requests before a sign-in, {redirected} redirected; sign-in control redirected: {bool(control)}"
    finally:
        srv.stop()
    report(name, not problems, figure, problems)


# ---- 6. file modes ---------------------------------------------------------

def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def check_file_modes(name, d):
    data = os.path.join(d, "modes", "data")  # does not exist yet
    os.makedirs(os.path.dirname(data))
    first = os.path.join(d, "modes", "first-start.txt")
    log = os.path.join(d, "modes", "serve.log")
    srv = Server(BINARY, data, args=["--first-start-output", first], log_path=log)
    old_umask = os.umask(0o022)  # a usual umask: files would be 0644 unless made private
    problems = []
    seen = {}
    try:
        try:
            srv.start()
            db = os.path.join(data, "zero-memory.db")
            token = re.search(r"zm_pat_[A-Za-z0-9]+", open(first).read())
            if token:  # a write, so the WAL has content
                srv.tool(token.group(0), "remember", {"content": "hardening probe: a memory for the WAL", "scope": "personal"})
            for label, path, want in [("data dir", data, 0o700), ("database", db, 0o600), ("-wal", db + "-wal", 0o600),
                                      ("-shm", db + "-shm", 0o600), ("--first-start-output", first, 0o600)]:
                if not os.path.exists(path):
                    problems.append(f"{label} {path} does not exist")
                    continue
                seen[label] = oct(mode(path))
                if mode(path) != want:
                    problems.append(f"{label} has mode {oct(mode(path))}, expected {oct(want)}")
        finally:
            srv.stop()
        owner = re.search(r"[\w.+-]+@[\w.-]+", open(first).read())
        email = owner.group(0) if owner else "owner@localhost"
        out = os.path.join(d, "modes", "export.jsonl")
        srv.cli("export", "--user", email, "--out", out)
        seen["export"] = oct(mode(out))
        if mode(out) != 0o600:
            problems.append(f"export --out has mode {oct(mode(out))}, expected 0o600")
        # An existing, group/other-readable export file is made private.
        existing = os.path.join(d, "modes", "existing.jsonl")
        with open(existing, "w") as f:
            f.write("old\n")
        os.chmod(existing, 0o644)
        srv.cli("export", "--user", email, "--out", existing)
        seen["export over a 0644 file"] = oct(mode(existing))
        if mode(existing) != 0o600:
            problems.append(f"export --out over an existing 0644 file left mode {oct(mode(existing))}, expected 0o600")
        # A data directory others can write draws a warning when `serve`
        # starts (a log line at warn naming the directory): they could
        # replace the database.
        os.chmod(data, 0o775)
        logged = len(srv.log())
        try:
            srv.start()
        finally:
            srv.stop()
        new = srv.log()[logged:]
        warned = [l for l in new.splitlines() if "WARN" in l and "delete or replace the database" in l and data in l]
        if not warned:
            problems.append(f"no warning for a 0775 data directory at start; log: {new.strip()[:300]!r}")
        seen["open data dir warning"] = "yes" if warned else "no"
    finally:
        os.umask(old_umask)
    report(name, not problems, ", ".join(f"{k} {v}" for k, v in seen.items()), problems)


# ---- 7. stdio on an empty data directory ----------------------------------

def check_stdio(name, d):
    data = os.path.join(d, "stdio-empty")  # nothing has run here
    # As an MCP client starts it: no ZM_* of CI's (a variable nothing reads
    # is warned about on stderr), the default log level.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZM_")}
    env["ZM_DATA_DIR"] = data
    proc = subprocess.Popen([BINARY, "stdio"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # Readers on threads: stdout lines into a queue, stderr whole.
    lines_out = queue.Queue()
    err_lines = []

    def read_stdout():
        for line in proc.stdout:
            lines_out.put(line)
    threading.Thread(target=read_stdout, daemon=True).start()
    err_reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
    err_reader.start()
    problems = []
    answers = {}
    rc = None
    try:
        def send(msg):
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()

        def answer(want_id, deadline):
            while True:
                try:
                    line = lines_out.get(timeout=max(0.01, deadline - time.monotonic()))
                except queue.Empty:
                    return None
                try:
                    msg = json.loads(line)
                except ValueError:
                    problems.append(f"stdout line is not JSON: {line[:100]!r}")
                    continue
                if msg.get("id") == want_id:
                    return msg

        deadline = time.monotonic() + 30
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "hardening-probe", "version": "0"}}})
        answers["initialize"] = answer(1, deadline)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        answers["tools/list"] = answer(2, deadline)
        proc.stdin.close()
        rc = proc.wait(timeout=30)
        err_reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(err_lines)
    init = answers["initialize"]
    tools = (answers["tools/list"] or {}).get("result", {}).get("tools", [])
    if not init or "result" not in init or "serverInfo" not in init["result"]:
        problems.append(f"initialize answered {json.dumps(init)[:200] if init else 'nothing'}")
    if not tools:
        problems.append(f"tools/list answered {json.dumps(answers['tools/list'])[:200] if answers['tools/list'] else 'nothing'}")
    if rc != 0:
        problems.append(f"exit status {rc} after stdin closed")
    lines = [l for l in err.splitlines() if l.strip()]
    if len(lines) > 1:
        problems.append(f"{len(lines)} stderr lines: {lines[:4]}")
    report(name, not problems, f"initialize ok: {bool(init and 'result' in init)}, {len(tools)} tools, exit {rc}, {len(lines)} stderr line(s)", problems)


# ---- 8. the test-only anonymous switch ------------------------------------

def check_anonymous_switch(name, d):
    data = os.path.join(d, "anon")
    os.makedirs(data, mode=0o700)
    srv = Server(BINARY, data)
    srv.add_user("anon@probe.test")
    problems = []
    figures = []
    refused_cases = [
        ("--public-url", {}, ["--public-url", PUBLIC_URL], "ZM_PUBLIC_URL"),
        ("--trust-proxy", {}, ["--public-url", PUBLIC_URL, "--trust-proxy"], "ZM_TRUST_PROXY"),
        ("--allowed-hosts", {}, ["--allowed-hosts", "memory.internal"], "ZM_ALLOWED_HOSTS"),
        ("ZM_ALLOWED_HOSTS (env)", {"ZM_ALLOWED_HOSTS": "memory.internal"}, [], "ZM_ALLOWED_HOSTS"),
        ("non-loopback listen", {"ZM_LISTEN": f"0.0.0.0:{free_port()}"}, [], "loopback"),
    ]
    for label, env, args, named in refused_cases:
        run_env = {**srv.env, **env}
        cmd = [BINARY, "serve", *args]
        if label.endswith("(env)"):
            run_env["ZM_TEST_ANONYMOUS_USER"] = "anon@probe.test"
        else:
            cmd += ["--test-anonymous-user", "anon@probe.test"]
        try:
            r = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=15)
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired as e:
            rc = None
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        clear = "ZM_TEST_ANONYMOUS_USER" in err and named in err
        figures.append(f"{label}: exit {rc}")
        if rc is None:
            problems.append(f"{label}: serve started (still running after 15 s) instead of refusing")
        elif rc == 0 or not clear:
            problems.append(f"{label}: exit {rc}, message names the switch and {named}: {clear}; stderr {err.strip()[:300]!r}")
    # Accepted on a bare loopback setup, with a loud warning.
    srv.args = ["--test-anonymous-user", "anon@probe.test"]
    try:
        srv.start()
        status, _, msgs = srv.mcp(None, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "p", "version": "0"}}})
    finally:
        srv.stop()
    log = srv.log()
    loud = "WARNING: TEST MODE" in log and "NEVER" in log
    figures.append(f"loopback only: started, warning {'printed' if loud else 'MISSING'}, tokenless /mcp initialize {status}")
    if not loud:
        problems.append(f"accepted without the loud warning; stderr {log.strip()[:300]!r}")
    if status != 200:
        problems.append(f"accepted, but a tokenless /mcp initialize answered {status}")
    report(name, not problems, "; ".join(figures), problems)


def main():
    global BINARY
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    BINARY = os.path.abspath(sys.argv[1])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zm-hardening-") as d:
        run_check("1 oauth parameter flood: server CPU", check_param_flood, d)
        run_check("2 slow-header client cut off", check_slow_header, d)
        run_check("3 1,000 MCP sessions of one user", check_sessions, d)
        run_check("4 failed sign-ins with rotating X-Forwarded-For", check_login_flood, d)
        run_check("5 no redirect before a sign-in", check_no_open_redirect, d)
        run_check("6 file modes", check_file_modes, d)
        run_check("7 stdio on an empty data dir", check_stdio, d)
        run_check("8 test-only anonymous switch", check_anonymous_switch, d)
    failed = results.count(False)
    print(f"hardening probe: {len(results) - failed} passed, {failed} failed ({time.monotonic() - started:.0f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
