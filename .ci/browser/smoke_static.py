"""Proves the browser harness (.ci/browser/harness.py) against static pages.

Serves a few tiny pages from Python's http.server on 127.0.0.1 (a free port)
and drives them with headless Chromium: load, fill, click, console errors,
axe-core, screenshots at desktop and mobile widths, and negative checks (a JS
error must be seen; an inaccessible page must be flagged by axe).

Run: .ci/tmp/browser-venv/bin/python .ci/browser/smoke_static.py [--keep-screenshots DIR]
Exits non-zero on any failure; closes with `browser smoke: N passed, M failed`.
"""

from __future__ import annotations

import functools
import http.server
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Browser, HarnessError, format_violations  # noqa: E402

# `<link rel=icon href="data:,">` stops Chromium asking for /favicon.ico, whose
# 404 would otherwise be a SEVERE console entry on every page.
GOOD_HTML = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>zero-memory smoke page</title>
  <link rel="icon" href="data:,">
  <style>
    body { font-family: sans-serif; margin: 2rem; color: #111; background: #fff; }
    label { display: block; margin-bottom: .25rem; }
    input { font-size: 1rem; padding: .3rem; width: 100%; max-width: 24rem; box-sizing: border-box; }
    button { margin-top: .5rem; font-size: 1rem; padding: .3rem 1rem; }
  </style>
  <script src="app.js" defer></script>
</head>
<body>
  <main>
    <h1>Memory search — ÄÖÜ ß é 日本語 한국어 🧠</h1>
    <form id="search" action="#" onsubmit="return false">
      <label for="q">Search memories</label>
      <input id="q" name="q" type="text" autocomplete="off">
      <button id="go" type="submit">Search</button>
    </form>
    <p id="out" aria-live="polite">No search yet.</p>
  </main>
</body>
</html>
"""

# Logs nothing: the console must stay clean.
GOOD_JS = """document.addEventListener('DOMContentLoaded', function () {
  document.getElementById('search').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var q = document.getElementById('q').value;
    document.getElementById('out').textContent = 'You searched for: ' + q;
  });
});
"""

ERROR_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>error page</title><link rel="icon" href="data:,"></head>
<body><main><h1>error page</h1><p id="p">x</p>
<script>window.thisFunctionDoesNotExist_zm();</script></main></body></html>
"""

BAD_A11Y_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"></head>
<body><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
<input id="nolabel" type="text">
<p style="color:#eee;background:#fff">low contrast text</p></body></html>
"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep CI output short
        pass


def serve(root: Path):
    handler = functools.partial(QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def main() -> int:
    keep = None
    if len(sys.argv) == 3 and sys.argv[1] == "--keep-screenshots":
        keep = Path(sys.argv[2])
    root = Path(tempfile.mkdtemp(prefix="zm-smoke-site-"))
    (root / "index.html").write_text(GOOD_HTML, encoding="utf-8")
    (root / "app.js").write_text(GOOD_JS, encoding="utf-8")
    (root / "error.html").write_text(ERROR_HTML, encoding="utf-8")
    (root / "bad-a11y.html").write_text(BAD_A11Y_HTML, encoding="utf-8")
    shots = keep or Path(tempfile.mkdtemp(prefix="zm-smoke-shots-"))
    httpd, base = serve(root)

    passed, failed = [], []

    def check(name, fn):
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            failed.append(name)
            print(f"FAIL {name} ({time.monotonic() - t0:.2f}s): {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
        else:
            passed.append(name)
            print(f"ok   {name} ({time.monotonic() - t0:.2f}s)")

    t0 = time.monotonic()
    try:
        b = Browser()
    except HarnessError as e:
        print(f"FAIL start browser: {e}")
        print("browser smoke: 0 passed, 1 failed")
        return 1
    print(f"ok   start browser ({time.monotonic() - t0:.2f}s): "
          f"{b.driver.capabilities.get('browserVersion')}, chromedriver "
          f"{b.driver.capabilities.get('chrome', {}).get('chromedriverVersion', '?').split(' ')[0]}")

    try:
        def load():
            b.get(base + "/")
            assert b.driver.title == "zero-memory smoke page", b.driver.title
            assert b.text_of("#out") == "No search yet."

        def fill_click():
            b.fill("#q", "rust memory")
            b.click("#go")
            b.wait_until(lambda d: "rust memory" in d.find_element("css selector", "#out").text,
                         timeout=5, what="#out to show the query")
            assert b.text_of("#out") == "You searched for: rust memory", b.text_of("#out")

        def console_clean():
            errs = b.console_errors()
            assert errs == [], f"unexpected console errors: {errs}"

        def axe_clean():
            v = b.axe()
            print("     axe violations on the good page:\n     " + format_violations(v).replace("\n", "\n     "))
            serious = [x for x in v if x.get("impact") in ("serious", "critical")]
            assert not serious, format_violations(serious)

        def screenshot_desktop():
            b.set_desktop()
            assert b.viewport_size() == (1280, 900), b.viewport_size()
            p = b.screenshot(shots / "desktop.png")
            assert p.stat().st_size > 1000, p.stat().st_size
            print(f"     {p}")

        def screenshot_mobile():
            b.set_mobile()
            assert b.viewport_size() == (360, 800), b.viewport_size()
            p = b.screenshot(shots / "mobile.png")
            assert p.stat().st_size > 1000
            print(f"     {p}")
            b.set_desktop()

        def js_error_seen():
            b.console_errors()  # drain
            b.get(base + "/error.html")
            b.wait_for("#p")
            errs = b.wait_until(lambda d: b.console_errors() or False, timeout=5, what="a SEVERE console entry")
            assert any("thisFunctionDoesNotExist_zm" in e["message"] for e in errs), errs
            print(f"     seen: {errs[0]['message'][:120]}")

        def missing_resource_seen():
            b.get(base + "/no-such-page.html")
            errs = b.wait_until(lambda d: b.console_errors() or False, timeout=5, what="a 404 console entry")
            assert any("404" in e["message"] for e in errs), errs

        def axe_flags_bad_page():
            b.get(base + "/bad-a11y.html")
            ids = {v["id"] for v in b.serious_violations()}
            for want in ("image-alt", "label", "color-contrast"):
                assert want in ids, f"axe did not flag {want}: {sorted(ids)}"
            print(f"     flagged: {sorted(ids)}")

        def wait_for_times_out():
            t = time.monotonic()
            try:
                b.wait_for("#does-not-exist", timeout=1)
            except HarnessError as e:
                assert "does-not-exist" in str(e)
            else:
                raise AssertionError("wait_for did not raise")
            assert time.monotonic() - t < 5

        for name, fn in [
            ("load page", load),
            ("fill and click", fill_click),
            ("console clean on good page", console_clean),
            ("axe: no serious/critical violations on good page", axe_clean),
            ("screenshot 1280x900", screenshot_desktop),
            ("screenshot at 360px (set_mobile)", screenshot_mobile),
            ("JS error shows up in console_errors", js_error_seen),
            ("404 shows up in console_errors", missing_resource_seen),
            ("axe flags an inaccessible page", axe_flags_bad_page),
            ("wait_for times out with a clear error", wait_for_times_out),
        ]:
            check(name, fn)
    finally:
        b.close()
        httpd.shutdown()

    print(f"screenshots in {shots}")
    print(f"browser smoke: {len(passed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
