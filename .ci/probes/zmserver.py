"""Start and drive a real `zero-memory serve` for the black-box probes.

Standard library only: these probes must not share our code's blind spots.
"""
import http.client
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request


def mcp_messages(text):
    """The JSON-RPC messages of a `/mcp` answer: one JSON body, or the
    `data:` lines of an event stream."""
    if text.strip().startswith("{"):
        return [json.loads(text)]
    msgs = []
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            try:
                msgs.append(json.loads(line[5:].strip()))
            except ValueError:
                pass
    return msgs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, data_dir, database_url=None, extra_env=None, args=(), log_path=None):
        self.binary = binary
        self.data_dir = data_dir
        # Extra `serve` arguments, and where its stdout and stderr go (by
        # default serve.log in the data directory, which must then exist).
        self.args = list(args)
        self.log_path = log_path or os.path.join(data_dir, "serve.log")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ)
        self.env.pop("ZM_DATABASE_URL", None)
        self.env.update({"ZM_DATA_DIR": data_dir, "ZM_LISTEN": f"127.0.0.1:{self.port}", "ZM_LOG": "warn"})
        if database_url:
            self.env["ZM_DATABASE_URL"] = database_url
        self.env.update(extra_env or {})
        self.proc = None

    def cli(self, *args, stdin=None):
        r = subprocess.run([self.binary, *args], env=self.env, input=stdin, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"zero-memory {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r.stdout

    def add_user(self, email, password="probe-password-123"):
        self.cli("user", "add", email, "--password-stdin", stdin=password + "\n")

    def token(self, email, read_only=False, allow_account_delete=False):
        args = ["token", "create", "--user", email]
        if read_only:
            args.append("--read-only")
        if allow_account_delete:
            args.append("--allow-account-delete")
        out = self.cli(*args)
        m = re.search(r"zm_pat_[A-Za-z0-9]+", out)
        if not m:
            raise RuntimeError(f"no token in: {out}")
        return m.group(0)

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "serve", *self.args], env=self.env, stdout=log, stderr=log)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited early with {self.proc.returncode}; see {log.name}")
            try:
                if self.get("/readyz")[0] == 200:
                    # Ours, not another process on a port taken meanwhile:
                    # a serve that could not bind has exited by now.
                    time.sleep(0.2)
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"serve exited with {self.proc.returncode} while another process answered on {self.port}; see {log.name}")
                    return
            except OSError:
                pass
            time.sleep(0.2)
        # Not left running behind the failure.
        self.stop(kill=True)
        raise RuntimeError("serve did not become ready")

    def stop(self, kill=False):
        if self.proc and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(timeout=60)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def cpu_seconds(self):
        """CPU time (user + system, every thread) the server has used."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # utime and stime are fields 14 and 15; the split starts at field 3.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def raw(self, method, path, body=None, headers=None):
        """One request on a fresh connection, redirects NOT followed:
        (status, [(header, value)], text). Status 0 when nothing answered."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.getheaders(), r.read().decode(errors="replace")
        except (OSError, http.client.HTTPException):
            return 0, [], ""
        finally:
            conn.close()

    def request(self, method, path, token=None, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if body is not None:
            req.add_header("content-type", "application/json")
        if token:
            req.add_header("authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, dict(r.headers), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode()
        except (OSError, http.client.HTTPException):
            # No answer at all (the server is down or was killed).
            return 0, {}, ""

    def request_json(self, method, path, token=None, body=None):
        status, _, text = self.request(method, path, token, body)
        return status, parse(text)

    def get(self, path, token=None):
        status, _, text = self.request("GET", path, token)
        return status, parse(text)

    def tool(self, token, name, args):
        status, _, text = self.request("POST", f"/api/tools/{name}", token, args)
        return status, parse(text)

    def export_all(self, token, args=None, limit=None):
        """Every page of `export_memories` (it pages: follow `next_cursor`).
        The first failing status and its body, or 200 and
        {"items": [...], "count": n, "pages": p}."""
        args = dict(args or {})
        if limit is not None:
            args["limit"] = limit
        items, pages = [], 0
        while True:
            status, page = self.tool(token, "export_memories", args)
            if status != 200:
                return status, page
            pages += 1
            items.extend(page["items"])
            if "next_cursor" not in page:
                return 200, {"items": items, "count": len(items), "pages": pages}
            if pages > 10000:
                return 0, {"error": "export_memories never ends"}
            args["cursor"] = page["next_cursor"]

    def mcp(self, token, message, session=None):
        headers = {"accept": "application/json, text/event-stream"}
        if session:
            headers["mcp-session-id"] = session
            headers["mcp-protocol-version"] = "2025-11-25"
        status, hdrs, text = self.request("POST", "/mcp", token, message, headers)
        sid = {k.lower(): v for k, v in hdrs.items()}.get("mcp-session-id")
        return status, sid, mcp_messages(text)

    def mcp_session(self, token):
        status, sid, msgs = self.mcp(token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}})
        assert status == 200 and sid, (status, msgs)
        self.mcp(token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        return sid


def parse(text):
    try:
        return json.loads(text)
    except ValueError:
        return text
