"""The dashboard, end to end, in a real browser.

Starts `zero-memory serve` on a fresh data directory the way the README does
(the first start creates the owner and writes its password and token to a
0600 file), then drives headless Chromium (Debian's chromium and
chromium-driver, through .ci/browser/harness.py) through what a person does:

  sign in with the printed credentials; an agent's `remember` over MCP
  appears in the list; search finds it; edit keeps the history (and a
  stale edit keeps what was typed); bulk forget
  with a confirmation; a teammate's memory (no edit) and a bulk move that
  cannot take it along; a departed teammate's rule revoked from the team's
  page and their memory forgotten and restored by the admin; the OAuth
  error page; each error code's treatment; sign out ends
  the session.

On every page: zero JavaScript console errors and no serious or critical
axe-core violation, at desktop width and at 360 px; the Account page (a
danger button) once more in the dark scheme, emulated over the DevTools
protocol. Screenshots of the main pages go to --screenshots DIR
(docs/screenshots in the repository).

usage: dashboard_flows.py BINARY [--database-url URL] [--screenshots DIR]
Closes with `dashboard browser flows: N passed, M failed`.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "probes"))
from harness import Browser, format_violations  # noqa: E402
from zmserver import Server  # noqa: E402

passed = 0
failures: list[str] = []


def check(cond: bool, what: str) -> None:
    global passed
    if cond:
        passed += 1
    else:
        failures.append(what)
        print("FAIL:", what, flush=True)


def first_start_secrets(path: Path) -> tuple[str, str, str]:
    text = path.read_text()
    email = re.search(r"email:\s+(\S+)", text).group(1)
    password = re.search(r"password:\s+(\S+)", text).group(1)
    token = re.search(r"(zm_pat_[A-Za-z0-9]+)", text).group(1)
    return email, password, token


def console_is_clean(b: Browser, what: str, status: int | None = None) -> None:
    """No console error since the last read. An error page is served with
    its code's status, which Chromium logs as the document's network
    failure: that one entry (this URL, that status) is expected; any other
    entry fails."""
    errors = b.console_errors()
    if status is not None:
        url = b.driver.current_url
        errors = [e for e in errors
                  if not (e.get("source") == "network" and url in e.get("message", "")
                          and f"status of {status}" in e.get("message", ""))]
    check(not errors, f"{what}: console errors {errors}")


def page_is_clean(b: Browser, what: str, mobile_too: bool = True, status: int | None = None) -> None:
    """No console error (`console_is_clean`), no serious axe violation, at
    both widths."""
    console_is_clean(b, what, status)
    bad = b.serious_violations()
    check(not bad, f"{what}: accessibility\n{format_violations(bad)}")
    if mobile_too:
        b.set_mobile()
        width = b.driver.execute_script("return document.documentElement.scrollWidth")
        wide = b.driver.execute_script(
            "return Array.from(document.querySelectorAll('body *'))"
            ".filter(e => e.getBoundingClientRect().right > 361)"
            ".slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)")
        check(width <= 360, f"{what}: wider than 360 px on a phone ({width} px): {wide}")
        bad = b.serious_violations()
        check(not bad, f"{what} at 360 px: accessibility\n{format_violations(bad)}")
        b.set_desktop()


def shoot(b: Browser, shots: Path | None, name: str) -> None:
    if shots:
        b.screenshot(shots / f"{name}.png")


def shoot_phone(b: Browser, shots: Path | None, name: str, selector: str | None = None) -> None:
    """The page at 360 px (scrolled to `selector`, when given), as `name`."""
    if shots:
        b.set_mobile()
        if selector:
            b.driver.execute_script("document.querySelector(arguments[0]).scrollIntoView()", selector)
        shoot(b, shots, name)
        b.set_desktop()


def mcp_remember(srv: Server, token: str, content: str) -> str:
    sid = srv.mcp_session(token)
    status, _, msgs = srv.mcp(
        token,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "remember", "arguments": {"content": content, "kind": "decision", "scope": "personal"}}},
        sid,
    )
    result = msgs[-1]["result"]
    assert status == 200 and not result.get("isError"), msgs
    return result["structuredContent"]["memory_id"]


def run_sql(srv: Server, sql: str) -> None:
    """Change the server's database behind its back (to make a real fault)."""
    url = srv.env.get("ZM_DATABASE_URL")
    if url:
        subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, capture_output=True, timeout=60)
    else:
        con = sqlite3.connect(Path(srv.data_dir) / "zero-memory.db", timeout=30)
        con.execute(sql)
        con.commit()
        con.close()


def flows(srv: Server, b: Browser, email: str, password: str, token: str, shots: Path | None) -> None:
    base = srv.base
    # Signed out: the dashboard sends to the sign-in page.
    b.get(base + "/")
    b.wait_for("form#login")
    check("/login" in b.driver.current_url, f"signed out, / went to {b.driver.current_url}")
    page_is_clean(b, "sign-in page")
    shoot(b, shots, "sign-in")
    # A wrong password is marked inline.
    b.fill("#email", email)
    b.fill("#password", "not the password")
    b.submit("form#login button[type=submit]")
    b.wait_for(".flash.error")
    check("/login" in b.driver.current_url, "a wrong password stays on the sign-in page")
    page_is_clean(b, "sign-in with an error", status=400)
    # The printed credentials sign in.
    b.fill("#email", email)
    b.fill("#password", password)
    b.submit("form#login button[type=submit]")
    b.wait_for("nav.main")
    check(b.driver.current_url.rstrip("/") == base, f"signed in to {b.driver.current_url}")

    # An agent remembers over MCP; the memory appears in the list.
    memory = mcp_remember(srv, token, "We chose PostgreSQL over MongoDB for the billing ledger because of transactions.")
    b.get(base + "/")
    b.wait_for("ol#results")
    check(memory in b.driver.page_source, "the agent's memory is listed")
    page_is_clean(b, "memories list")
    shoot(b, shots, "memories")

    # Search finds it, ranked by recall, with its score.
    b.fill("#q", "billing ledger")
    b.submit("form.search button[type=submit]")
    b.wait_for("ol#results .score")
    check(memory in b.driver.page_source, "search finds the memory")
    page_is_clean(b, "search results")
    shoot(b, shots, "search")

    # Its page; edit keeps the history.
    b.get(f"{base}/memories/{memory}")
    b.wait_for("#memory-content")
    page_is_clean(b, "memory page")
    shoot(b, shots, "memory")
    area = b.wait_for("#content")
    area.clear()
    area.send_keys("We chose PostgreSQL over MongoDB for the billing ledger: transactions and joins.")
    b.submit("form#edit button[type=submit]")
    b.wait_for("#memory-content")
    new_id = b.driver.current_url.rsplit("/", 1)[-1]
    check(new_id != memory and new_id.startswith("mem_"), f"edit made a new memory ({new_id})")
    b.get(f"{base}/memories/{memory}")
    b.wait_for("#state")
    check("superseded" in b.text_of("#state"), "the old version is superseded")
    check(new_id in b.driver.page_source, "the old version links to the new one")

    # Bulk forget: select two, confirm, both forgotten.
    others = [mcp_remember(srv, token, f"Temporary note {i} about the staging cluster.") for i in range(2)]
    b.get(base + "/")
    b.wait_for("ol#results")
    for mid in others:
        b.click(f"input[name=ids][value='{mid}']")
    b.driver.find_element("css selector", "#bulk-action").send_keys("Forget")
    b.submit("form#bulk .bulk button[type=submit]")
    b.wait_for("#confirm-question")
    check("Forget 2 memories?" in b.text_of("#confirm-question"), "the confirmation says how many")
    page_is_clean(b, "bulk confirmation")
    b.submit("form#confirm button.danger")
    b.wait_for("ol#results")
    for mid in others:
        b.get(f"{base}/memories/{mid}")
        b.wait_for("#state")
        check("forgotten" in b.text_of("#state"), f"{mid} is forgotten ({b.text_of('#state')})")

    # Error treatments, by code.
    b.get(f"{base}/memories/mem_0000000000000000.0000000000")
    b.wait_for("[data-error-code=not_found]")
    check(b.driver.title.startswith("Not found"), "not_found: a 404 page")
    page_is_clean(b, "not found page", status=404)
    shoot(b, shots, "error-not-found")
    b.get(f"{base}/memories/{new_id}")
    b.fill("#share-scope", "proj.someone_else.secret")
    b.submit("form#share button[type=submit]")
    b.wait_for("#refused[data-form=share] [data-error-code=forbidden]")
    check(b.text_of("#refused .reason") != "", "forbidden: the memory's page says what is missing")
    check(b.driver.find_element("css selector", "#share-scope").get_attribute("value") == "proj.someone_else.secret",
          "forbidden: the scope typed is kept in its field")
    page_is_clean(b, "forbidden share", status=403)
    b.fill("#share-scope", "no scope at all")
    b.submit("form#share button[type=submit]")
    b.wait_for("#share-scope-error")
    check(b.driver.find_element("css selector", "#share-scope").get_attribute("aria-invalid") == "true",
          "validation_failed: the share field is marked inline")
    page_is_clean(b, "invalid share", status=400)
    b.driver.execute_script("document.getElementById('change').scrollIntoView()")
    shoot(b, shots, "memory-refused")
    b.get(f"{base}/memories/{new_id}")
    area = b.wait_for("#content")
    area.clear()
    area.send_keys(" ")
    b.driver.execute_script("document.getElementById('content').removeAttribute('required')")
    b.submit("form#edit button[type=submit]")
    b.wait_for(".field.invalid")
    check(b.driver.find_element("css selector", "#content").get_attribute("aria-invalid") == "true",
          "validation_failed: the field is marked inline")
    page_is_clean(b, "validation page", status=400)

    # A stale edit: an agent writes a newer version while the page is
    # open; the save is refused (conflict) and what was typed is shown to
    # copy, with no save over the stale version.
    stale = mcp_remember(srv, token, "The nightly report is mailed at 06:00.")
    b.get(f"{base}/memories/{stale}")
    area = b.wait_for("#content")
    status, body = srv.tool(token, "remember", {
        "content": "The nightly report is mailed at 07:00.", "kind": "decision", "scope": "personal",
        "links": [{"dst": stale, "type": "supersedes"}]})
    check(status == 200, f"a newer version over REST: {status} {body}")
    area.clear()
    area.send_keys("The nightly report is mailed at 08:00.")
    b.submit("form#edit button[type=submit]")
    b.wait_for("[data-error-code=conflict]")
    kept = b.driver.find_element("css selector", "#content")
    check(kept.get_attribute("readonly") is not None and "08:00" in kept.get_attribute("value"),
          "conflict: the typed text is shown, read only")
    check(not b.driver.find_elements("css selector", "form#edit button[type=submit]"),
          "conflict: no save over the stale version")
    page_is_clean(b, "stale edit", status=409)
    shoot(b, shots, "edit-conflict")
    shoot_phone(b, shots, "edit-conflict-360")

    # Resolve a conflict: an agent challenges a memory; the person upholds it.
    status, body = srv.tool(token, "challenge", {"memory_id": new_id, "reason": "the ledger may move to CockroachDB"})
    check(status == 200, f"challenge over REST: {status} {body}")
    dispute = body.get("dispute_id", "") if isinstance(body, dict) else ""
    b.get(base + "/review")
    card = f"ol#queue li.conflict[data-dispute='{dispute}']"
    b.wait_for(card)
    page_is_clean(b, "review queue")
    shoot(b, shots, "review")
    # "Uphold it": the form that keeps the challenged memory (keep_both),
    # not "Retire it".
    uphold = f"{card} form:has(input[name=keep_both][value=true]) button[type=submit]"
    check(b.text_of(uphold) == "Uphold it", f"the uphold button: {b.text_of(uphold)!r}")
    b.submit(uphold)
    b.wait_for("#queue-empty")
    status, body = srv.tool(token, "get_conflict", {"dispute_id": dispute})
    conflict = body.get("conflict", {}) if isinstance(body, dict) else {}
    check(status == 200 and conflict.get("status") == "dismissed",
          f"the challenge is settled as upheld (dismissed, not resolved by retiring): {status} {body}")
    status, body = srv.get(f"/api/memories/{new_id}", token)
    check(status == 200 and body.get("invalidated_at") is None and body.get("superseded_by") is None,
          f"the upheld memory is still live: {status} {body}")
    status, body = srv.tool(token, "list_conflicts", {})
    pending = [c.get("dispute_id") for c in body.get("conflicts", [])] if isinstance(body, dict) else None
    check(status == 200 and pending == [], f"the review queue is empty over REST too: {status} {pending}")

    # Pin, then revoke, a rule an agent promoted.
    status, body = srv.tool(token, "promote_rule", {"memory_id": new_id, "rule_text": "Use PostgreSQL for anything with money in it."})
    check(status == 200, f"promote_rule over REST: {status} {body}")
    b.get(base + "/rules")
    b.wait_for(f"tr[data-memory='{new_id}']")
    b.submit(f"tr[data-memory='{new_id}'] form[action$='/pin'] button")
    b.wait_for(f"tr[data-memory='{new_id}'] .tag")
    check("pinned" in b.text_of(f"tr[data-memory='{new_id}']"), "the rule is pinned")
    check("Use PostgreSQL for anything" in b.text_of("#briefing-rules"), "the briefing preview carries it")
    page_is_clean(b, "rules page")
    shoot(b, shots, "rules")
    b.fill(f"#reason-{new_id}".replace(".", "\\."), "we are moving billing")
    b.submit(f"tr[data-memory='{new_id}'] form[action$='/revoke'] button")
    b.wait_for(f"tr[data-memory='{new_id}'] td.delivery")
    check(b.text_of(f"tr[data-memory='{new_id}'] td.delivery") == "revoked", "the rule is revoked")

    # Create a token, then use it over REST.
    b.get(base + "/access")
    b.wait_for("form#new-token")
    b.fill("#token-name", "browser test")
    b.fill("#token-password", password)
    b.submit("form#new-token button[type=submit]")
    b.wait_for("#token-secret")
    secret = b.text_of("#token-secret")
    status, body = srv.tool(secret, "recall", {"query": "billing ledger"})
    check(status == 200 and any(m["id"] == new_id for m in body.get("memories", [])), f"the new token works over REST: {status}")
    page_is_clean(b, "access page")
    shoot(b, shots, "access")
    # On a phone the tokens table's rows are cards: each cell says which
    # column it is.
    labels = b.driver.execute_script(
        "return Array.from(document.querySelectorAll('#tokens tbody tr:first-child td')).map(td => td.getAttribute('data-label'))")
    check(labels[:6] == ["Name", "Access", "Created", "Expires", "Last used", "Status"] and not labels[6],
          f"the tokens table's cells carry their column's heading: {labels}")
    # The new-token form (with its password field) on a phone.
    shoot_phone(b, shots, "access-360", "form#new-token")

    # The other sections render cleanly too.
    for path, name in [("/connect", "connect"), ("/teams", "teams"), ("/insight", "insight"), ("/account", "account")]:
        b.get(base + path)
        b.wait_for("main h1")
        page_is_clean(b, f"{name} page")
        shoot(b, shots, name)
        if name == "account":
            # The password form with its new box, on a phone.
            shoot_phone(b, shots, "account-360")
        if name == "insight":
            # The searches above were recalls too, made from the dashboard.
            rows = [r.text for r in b.driver.find_elements("css selector", "table#recall-activity tbody tr")]
            check(any(r.startswith("dashboard ") for r in rows), f"insight: recall activity by agent ({rows})")
            # Its tables on a phone: checked above (no overflow, no
            # violation); the picture is for a person to look at.
            shoot_phone(b, shots, "insight-360")
    # Dark scheme (emulated over the DevTools protocol, as a system set to
    # dark would ask): the Account page, whose "Delete my account" is a
    # danger button, passes axe (its colour contrast) at both widths too.
    b.driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                             {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        b.get(base + "/account")
        b.wait_for("form#delete-account button.danger")
        check(b.driver.execute_script("return matchMedia('(prefers-color-scheme: dark)').matches"),
              "dark scheme: the page sees prefers-color-scheme: dark")
        colour = b.driver.execute_script(
            "return getComputedStyle(document.querySelector('form#delete-account button.danger')).color")
        check(colour == "rgb(27, 29, 33)", f"dark scheme: a danger button's text is dark ({colour})")
        page_is_clean(b, "account page, dark scheme")
    finally:
        b.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "", "features": []})
    # Import a server-memory file from the Account page; search finds it.
    upload = Path(tempfile.mkdtemp()) / "memory.jsonl"
    upload.write_text(json.dumps({"type": "entity", "name": "Payments API", "entityType": "service",
                                  "observations": ["retries webhooks five times"]}) + "\n")
    b.get(base + "/account")
    b.wait_for("#import-file").send_keys(str(upload))
    b.driver.find_element("css selector", "#import-format").send_keys("@modelcontextprotocol")
    b.submit("form#import button[type=submit]")
    b.wait_for(".flash.ok")
    check("1 new" in b.text_of(".flash.ok"), f"the import says what it did: {b.text_of('.flash.ok')}")
    b.get(base + "/?q=webhooks")
    b.wait_for("ol#results")
    check("retries webhooks five times" in b.driver.page_source, "the imported memory is found")

    # A team of one's own, created in the browser.
    b.get(base + "/teams")
    b.fill("#slug", "browsers")
    b.submit("form#new-team button[type=submit]")
    b.wait_for("#members")
    check(b.text_of("#my-role") == "admin", "the creator is the team's admin")
    page_is_clean(b, "team page")
    shoot(b, shots, "team")
    # A refused team form comes back on the team's page, the field marked
    # and what was typed kept, at both widths. (The field's type is made
    # text, so that the browser's own check lets the address through.)
    b.driver.execute_script("document.getElementById('invite-email').type = 'text'")
    b.fill("#invite-email", "nobody-at-all")
    b.submit("form#invite button[type=submit]")
    b.wait_for("#invite-email-error")
    check(b.driver.find_element("css selector", "#invite-email").get_attribute("aria-invalid") == "true",
          "a refused invitation: the address field is marked")
    check(b.driver.find_element("css selector", "#invite-email").get_attribute("value") == "nobody-at-all",
          "a refused invitation: the address typed is kept")
    page_is_clean(b, "refused invitation", status=400)
    shoot_phone(b, shots, "team-refused-360", "#invite")
    b.set_desktop()

    # An open invitation: the team's admin withdraws it from the page.
    status, body = srv.request_json("POST", "/api/teams/browsers/invitations", token,
                                    {"email": "later@example.com", "role": "reader"})
    check(status == 201, f"an invitation is sent: {status} {body}")
    b.get(base + "/teams/browsers")
    b.wait_for("ul#invitations form[action$='/withdraw'] button")
    page_is_clean(b, "team page with an open invitation")
    shoot(b, shots, "team-invitations")
    shoot_phone(b, shots, "team-invitations-360", "#invitations")
    b.submit("ul#invitations form[action$='/withdraw'] button")
    b.wait_for("#members")
    check(not b.driver.find_elements("css selector", "ul#invitations"),
          "the withdrawn invitation is listed no more")

    # A teammate's memory: the page says whose it is and offers no edit,
    # and a bulk move that takes it along lists it as not moved.
    srv.add_user("mate@example.com")
    mate = srv.token("mate@example.com")
    status, body = srv.request_json("POST", "/api/teams/browsers/members", token,
                                    {"email": "mate@example.com", "role": "writer"})
    check(status in (200, 201), f"the mate is added to the team: {status} {body}")
    status, body = srv.tool(mate, "remember", {"content": "Team convention: staging deploys wait for a green canary.",
                                               "kind": "convention", "scope": "team.browsers"})
    check(status == 200, f"the mate remembers into the team: {status} {body}")
    theirs = body.get("memory_id", "")
    # The mate's own team, which the owner joins as a reader and leaves
    # from its page.
    status, body = srv.request_json("POST", "/api/teams", mate, {"slug": "mates"})
    check(status == 201, f"the mate creates a team: {status} {body}")
    status, body = srv.request_json("POST", "/api/teams/mates/invitations", mate,
                                    {"email": email, "role": "reader"})
    check(status == 201, f"the mate invites the owner: {status} {body}")
    status, body = srv.request_json("POST", f"/api/invitations/{body.get('id', '')}/accept", token)
    check(status == 200, f"the owner accepts: {status} {body}")
    b.get(base + "/teams/mates")
    b.wait_for("form#leave button")
    check(b.text_of("#my-role") == "reader", "the owner is the mate team's reader")
    page_is_clean(b, "a reader's team page")
    shoot(b, shots, "team-member")
    shoot_phone(b, shots, "team-member-360", "#leave")
    b.submit("form#leave button")
    b.wait_for("main h1")
    check(b.driver.current_url.endswith("/teams"), f"leaving returns to the teams: {b.driver.current_url}")
    check("mates" not in b.text_of("main"), "the team left is listed no more")
    status, body = srv.tool(token, "remember", {"content": "Team decision: canary traffic is five percent.",
                                                "kind": "decision", "scope": "team.browsers"})
    check(status == 200, f"the owner remembers into the team: {status} {body}")
    ours = body.get("memory_id", "")
    b.get(f"{base}/memories/{theirs}")
    b.wait_for("#not-yours")
    check(not b.driver.find_elements("css selector", "form#edit"), "a teammate's memory offers no edit")
    page_is_clean(b, "a teammate's memory page")
    shoot(b, shots, "memory-teammate")
    b.get(base + "/?scope=team.browsers")
    b.wait_for("ol#results")
    for mid in (theirs, ours):
        b.click(f"input[name=ids][value='{mid}']")
    b.driver.find_element("css selector", "#bulk-action").send_keys("Move")
    # A scope mistyped: the selection is kept, the scope marked, to
    # correct and send again.
    b.fill("#bulk-scope", "Team Browsers")
    b.submit("form#bulk .bulk button[type=submit]")
    b.wait_for("form#retry-move")
    check(b.driver.find_element("css selector", "#retry-scope").get_attribute("aria-invalid") == "true",
          "a mistyped move scope is marked on the form that keeps the selection")
    check(len(b.driver.find_elements("css selector", "form#retry-move input[name=ids]")) == 2,
          "the selection is kept for the corrected move")
    page_is_clean(b, "a move's scope to correct", status=400)
    b.fill("#retry-scope", "team.browsers.web")
    b.submit("form#retry-move button[type=submit]")
    b.wait_for("#confirm-question")
    b.submit("form#confirm button.danger")
    b.wait_for("main h1")
    check(b.text_of("main h1") == "Moved, with exceptions", f"a partial move says so: {b.text_of('main h1')}")
    check(theirs in b.text_of(".flash.warn") and ours not in b.text_of(".flash.warn"),
          "only the teammate's memory is listed as not moved")
    page_is_clean(b, "moved with exceptions")
    shoot(b, shots, "moved-with-exceptions")

    # A rule the mate promoted for the team outlives their removal: the
    # team's page lists it to its admin, who revokes it there.
    status, body = srv.tool(mate, "promote_rule", {"memory_id": theirs,
                                                   "rule_text": "Deploy to staging only after a green canary."})
    check(status == 200, f"the mate promotes a team rule: {status} {body}")
    b.get(base + "/teams/browsers")
    b.wait_for("#no-steward-rules")
    # While the mate is a member, the admin finds the rule among the
    # members' rules, with a revoke form of its own.
    b.wait_for(f"#member-rules tr[data-memory='{theirs}']")
    check("Deploy to staging only after a green canary." in b.text_of("#member-rules"),
          "the mate's team rule is listed to the admin as a member's")
    check(len(b.driver.find_elements("css selector", f"#member-rules tr[data-memory='{theirs}'] form[action$='/revoke']")) == 1,
          "with a revoke form")
    page_is_clean(b, "team page with a member's rule")
    b.driver.execute_script("document.getElementById('member-rules-heading').scrollIntoView()")
    shoot(b, shots, "team-member-rules")
    shoot_phone(b, shots, "team-member-rules-360", "#member-rules-heading")
    rows = [r for r in b.driver.find_elements("css selector", "table#members tbody tr")
            if "mate@example.com" in r.text]
    check(len(rows) == 1, "the mate is listed on the team's page")
    mate_id = rows[0].get_attribute("data-user") if rows else ""
    b.submit(f"tr[data-user='{mate_id}'] form[action$='/remove'] button")
    b.wait_for(f"#steward-rules tr[data-memory='{theirs}']")
    check("Deploy to staging only after a green canary." in b.text_of("#steward-rules"),
          "the departed mate's rule is listed to the admin")
    page_is_clean(b, "team page with a departed member's rule")
    b.driver.execute_script("document.getElementById('steward-rules-heading').scrollIntoView()")
    shoot(b, shots, "team-steward-rules")
    b.fill(f"#reason-{theirs}".replace(".", "\\."), "the canary rule moved to the runbook")
    b.submit(f"#steward-rules tr[data-memory='{theirs}'] form[action$='/revoke'] button")
    b.wait_for("#no-steward-rules")
    check(b.driver.current_url.endswith("/teams/browsers"), f"the revoke returns to the team: {b.driver.current_url}")
    # The memory the mate left is the team's to clean up: its admin may
    # forget it (and restore it), not edit it.
    b.get(f"{base}/memories/{theirs}")
    b.wait_for("#for-team")
    check(not b.driver.find_elements("css selector", "form#edit"), "a departed member's memory offers no edit")
    page_is_clean(b, "a departed member's memory page")
    shoot(b, shots, "memory-steward")
    b.submit("form#forget button[type=submit]")
    b.wait_for("form#restore")
    status, body = srv.get(f"/api/memories/{theirs}", token)
    check(status == 200 and body.get("invalidated_at") is not None,
          f"the admin forgot the departed member's memory: {status} {body}")
    check("forgotten" in b.text_of("#state"), f"the page says it is forgotten: {b.text_of('#state')!r}")
    b.submit("form#restore button[type=submit]")
    b.wait_for("form#forget")
    status, body = srv.get(f"/api/memories/{theirs}", token)
    check(status == 200 and body.get("invalidated_at") is None and body.get("scope") == "team.browsers",
          f"the admin restored the departed member's memory, where it was: {status} {body}")
    check("forgotten" not in b.text_of("#state"), f"the page says it is live again: {b.text_of('#state')!r}")
    # What the admin did for the steward is in the team's audit log, each
    # row linking the memory it touched.
    b.get(base + "/teams/browsers")
    b.wait_for("table#audit")
    audit = b.driver.find_elements("css selector", "table#audit tbody tr")
    steward = [r.find_elements("css selector", "td")[2].text for r in audit
               if r.find_elements("css selector", f"a[href*='/memories/{theirs}']")]
    check(steward[:3] == ["steward_memory_restored", "steward_memory_forgotten", "steward_rule_revoked"],
          f"the audit log lists the admin's steward acts newest first, linking the memory: {steward}")
    removed = [[c.text for c in r.find_elements("css selector", "td")] for r in audit
               if r.find_elements("css selector", "td")[2].text == "member_removed"]
    check(len(removed) == 1 and removed[0][3] == "mate@example.com" and removed[0][1] != "",
          f"the audit log names the member removed by their email: {removed}")
    page_is_clean(b, "team page with the steward's audit rows")
    b.driver.execute_script("document.getElementById('audit').scrollIntoView()")
    shoot(b, shots, "team-audit")
    shoot_phone(b, shots, "team-audit-360", "#audit")

    # OAuth: a request the server cannot serve is a page of its own (no
    # redirect to the client), readable on a phone.
    b.get(base + "/oauth/authorize?response_type=code")
    b.wait_for("main h1")
    check(b.text_of("main h1") == "Cannot sign in", f"an OAuth request error: {b.text_of('main h1')}")
    page_is_clean(b, "OAuth error page", status=400)
    shoot(b, shots, "oauth-error")

    # conflict: a memory that changed since the page was shown.
    b.get(f"{base}/memories/{others[0]}")
    b.wait_for("#memory-content")
    status, _ = srv.tool(token, "restore_memory", {"memory_id": others[0]})
    check(status == 200, "restored behind the page's back")
    # The page still offers Restore; pressing it now meets a live memory.
    check(b.driver.find_elements("css selector", "form#restore button") != [], "the stale page offers Restore")
    b.submit("form#restore button")
    b.wait_for("#refused [data-error-code]")
    code = b.driver.find_element("css selector", "#refused [data-error-code]").get_attribute("data-error-code")
    check(code == "conflict", f"a stale restore is a conflict, said on the memory's page ({code})")
    check(b.driver.find_elements("css selector", "form#forget") != [] and b.driver.find_elements("css selector", "form#restore") == [],
          "conflict: the page shown is the memory as it is now (live: Forget, no Restore)")
    page_is_clean(b, "conflict on a memory's page", status=409)

    # internal: a real fault under the server (a table the Insight page
    # reads is gone), shown with the request id to report; then put back.
    run_sql(srv, "ALTER TABLE memory_usage RENAME TO memory_usage_parked")
    try:
        b.get(base + "/insight")
        b.wait_for("[data-error-code]")
        code = b.driver.find_element("css selector", "[data-error-code]").get_attribute("data-error-code")
        check(code == "internal", f"a database fault is an internal error page ({code})")
        rid = b.text_of("code.request-id")
        check(re.fullmatch(r"req_[0-9A-Za-z._-]+", rid) is not None, f"internal: the page shows the request id ({rid})")
        check("memory_usage" not in b.driver.page_source and "SELECT" not in b.driver.page_source,
              "internal: no SQL reaches the page")
        page_is_clean(b, "internal error page", status=500)
        shoot(b, shots, "error-internal")
    finally:
        run_sql(srv, "ALTER TABLE memory_usage_parked RENAME TO memory_usage")
    b.get(base + "/insight")
    b.wait_for("#never-recalled")
    check(not b.driver.find_elements("css selector", "[data-error-code]") and b.text_of("main h1") == "Insight",
          f"the Insight page is back once the table is: {b.text_of('main h1')!r}")
    page_is_clean(b, "Insight page, restored")

    # Sign out ends the session: the old cookie no longer opens a page.
    cookie = b.driver.get_cookie("zm_session")
    check(cookie is not None and cookie.get("httpOnly") and cookie.get("sameSite") == "Strict",
          f"the session cookie is HttpOnly and SameSite=Strict: {cookie}")
    b.get(base + "/")
    b.wait_for("ol#results")
    page_is_clean(b, "memories list before sign-out")
    b.submit("form#logout button[type=submit]")
    b.wait_for("form#login")
    page_is_clean(b, "sign-in page after sign-out")
    status, _, _ = srv.raw("GET", "/", headers={"cookie": f"zm_session={cookie['value']}"})
    check(status == 303, f"a signed-out session's cookie is refused (status {status})")
    # The browser stays known to the account it signed in to (its own
    # count of failed sign-ins): a cookie that is no session.
    device = b.driver.get_cookie("zm_device")
    check(device is not None and device.get("httpOnly") and device.get("sameSite") == "Strict",
          f"the known-browser cookie outlives sign-out, HttpOnly and SameSite=Strict: {device}")

    # rate_limited: failed sign-ins back off per account, and the page says when to retry.
    for attempt in range(6):
        b.get(base + "/login")
        b.fill("#email", "nobody-here@example.com")
        b.fill("#password", "wrong password")
        b.submit("form#login button[type=submit]")
        b.wait_for(".flash.error")
        if attempt < 5:
            # Each refusal's page logs its own status and nothing else (the
            # last one is checked in full below).
            limited = b.driver.find_elements("css selector", "[data-error-code=rate_limited]") != []
            console_is_clean(b, f"failed sign-in {attempt + 1}", status=429 if limited else 400)
    check(b.driver.find_elements("css selector", "[data-error-code=rate_limited] .retry") != [],
          "rate_limited: the page says when to retry")
    page_is_clean(b, "rate limited page", status=429)


def main() -> None:
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    binary = args[0]
    db_url = args[args.index("--database-url") + 1] if "--database-url" in args else None
    shots = Path(args[args.index("--screenshots") + 1]) if "--screenshots" in args else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        secrets_file = Path(d) / "first-start.txt"
        srv = Server(binary, d, db_url, args=["--first-start-output", str(secrets_file)])
        srv.start()
        try:
            email, password, token = first_start_secrets(secrets_file)
            with Browser() as b:
                try:
                    flows(srv, b, email, password, token, shots)
                except Exception:  # a broken flow is a failure, with its trace
                    failures.append(traceback.format_exc())
                    print(traceback.format_exc(), flush=True)
        finally:
            srv.stop()
            if failures:
                print(srv.log()[-4000:])
    print(f"dashboard browser flows: {passed} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
