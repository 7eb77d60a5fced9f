"""Browser-test harness for zero-memory's web pages (.ci/browser).

Drives the Debian ``chromium`` through the Debian ``chromium-driver`` with
Selenium. Paths are always explicit and Selenium Manager is forced offline, so
nothing is ever downloaded at run time.

    from harness import Browser
    with Browser() as b:
        b.get("http://127.0.0.1:8080/")
        b.fill("#q", "hello"); b.submit("button[type=submit]")
        assert not b.console_errors()
        assert not b.serious_violations()
        b.screenshot("/tmp/page.png")

Environment overrides: CHROMIUM (browser binary), CHROMEDRIVER (driver
binary), AXE_JS (path to axe.min.js).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# Selenium Manager must never fetch a browser or a driver.
os.environ.setdefault("SE_OFFLINE", "true")
os.environ.setdefault("SE_AVOID_STATS", "true")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEFAULT_AXE_JS = REPO / ".ci/tmp/axe/node_modules/axe-core/axe.min.js"
DESKTOP = (1280, 900)
MOBILE = (360, 800)

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",  # root in CI: the setuid/user-namespace sandbox is unavailable
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--metrics-recording-only",
    "--no-first-run",
    "--disable-gpu",
    f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
]


class HarnessError(RuntimeError):
    """A setup or page problem, with a message that says what to do."""


def _find_binary(env: str, names: list[str], fallbacks: list[str]) -> str:
    explicit = os.environ.get(env)
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise HarnessError(f"{env}={explicit} is not an executable file")
        return explicit
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    for p in fallbacks:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise HarnessError(
        f"none of {names} found on PATH or at {fallbacks}; run `bash .ci/browser/install.sh` "
        f"(Debian packages chromium and chromium-driver) or set {env}"
    )


def chromium_path() -> str:
    return _find_binary("CHROMIUM", ["chromium"], ["/usr/bin/chromium"])


def chromedriver_path() -> str:
    return _find_binary("CHROMEDRIVER", ["chromedriver"], ["/usr/bin/chromedriver"])


class Browser:
    """One headless Chromium with a throw-away profile. Use as a context manager."""

    def __init__(self, width: int = DESKTOP[0], height: int = DESKTOP[1], page_load_timeout: float = 30):
        self.profile = tempfile.mkdtemp(prefix="zm-chromium-")
        opts = Options()
        opts.binary_location = chromium_path()
        for f in CHROMIUM_FLAGS:
            opts.add_argument(f)
        opts.add_argument(f"--user-data-dir={self.profile}")
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(executable_path=chromedriver_path())
        try:
            self.driver = webdriver.Chrome(service=service, options=opts)
        except WebDriverException as e:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise HarnessError(
                f"could not start chromium ({opts.binary_location}) via chromedriver "
                f"({service.path}): {e.msg or e}"
            ) from e
        self.driver.set_page_load_timeout(page_load_timeout)
        self.set_size(width, height)

    # ---- lifecycle -------------------------------------------------------
    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- navigation and viewport ----------------------------------------
    def get(self, url: str) -> None:
        try:
            self.driver.get(url)
        except TimeoutException as e:
            raise HarnessError(f"page load timed out: {url}") from e

    def set_size(self, width: int, height: int) -> None:
        """Make the *viewport* (window.innerWidth x innerHeight) exactly width x height.

        Under --headless=new the window keeps a (virtual) browser frame: a
        1280x900 window has a 1280x757 viewport. So set the window, measure
        the frame, and grow the window by it."""
        self.driver.set_window_size(width, height)
        w, h = self.viewport_size()
        if (w, h) != (width, height):
            self.driver.set_window_size(width + (width - w), height + (height - h))
            w, h = self.viewport_size()
        if (w, h) != (width, height):
            raise HarnessError(f"viewport is {w}x{h}, wanted {width}x{height}")

    def set_mobile(self) -> None:
        """360x800 viewport (a small phone)."""
        self.set_size(*MOBILE)

    def set_desktop(self) -> None:
        """1280x900 viewport."""
        self.set_size(*DESKTOP)

    def viewport_size(self) -> tuple[int, int]:
        w, h = self.driver.execute_script("return [window.innerWidth, window.innerHeight]")
        return int(w), int(h)

    def viewport_width(self) -> int:
        return self.viewport_size()[0]

    # ---- console ---------------------------------------------------------
    def console_log(self) -> list[dict]:
        """Every browser console entry since the last read (the driver clears its buffer on read)."""
        return self.driver.get_log("browser")

    def console_errors(self) -> list[dict]:
        """SEVERE console entries (uncaught errors, console.error, failed loads)
        since the last call. Nothing is filtered: the caller decides."""
        return [e for e in self.console_log() if e.get("level") == "SEVERE"]

    # ---- screenshots -----------------------------------------------------
    def screenshot(self, path: str | os.PathLike) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if not self.driver.save_screenshot(str(p)):
            raise HarnessError(f"screenshot failed: {p}")
        return p

    # ---- elements --------------------------------------------------------
    def wait_for(self, selector: str, timeout: float = 10):
        """The first element matching the CSS selector once it is visible.

        A page that re-renders may replace the element between finding it
        and asking whether it is displayed; that is "not yet", and the wait
        looks again (Chrome reports it either as a stale element or as an
        inspector error saying the node no longer belongs to the document).
        Any other driver error still fails at once."""

        def visible(driver):
            try:
                el = driver.find_element(By.CSS_SELECTOR, selector)
                return el if el.is_displayed() else False
            except (NoSuchElementException, StaleElementReferenceException):
                return False
            except WebDriverException as e:
                if "does not belong to the document" in (e.msg or ""):
                    return False
                raise

        try:
            return WebDriverWait(self.driver, timeout).until(visible)
        except TimeoutException as e:
            raise HarnessError(
                f"no visible element for {selector!r} within {timeout}s on {self.driver.current_url}"
            ) from e

    def wait_until(self, predicate, timeout: float = 10, what: str = "condition"):
        """Wait (bounded) for predicate(driver) to be truthy; returns its value."""
        try:
            return WebDriverWait(self.driver, timeout).until(predicate)
        except TimeoutException as e:
            raise HarnessError(f"timed out after {timeout}s waiting for {what}") from e

    def fill(self, selector: str, text: str, timeout: float = 10) -> None:
        el = self.wait_for(selector, timeout)
        el.clear()
        el.send_keys(text)

    def click(self, selector: str, timeout: float = 10) -> None:
        self.wait_for(selector, timeout)
        try:
            el = WebDriverWait(self.driver, timeout).until(
                EC.element_to_be_clickable((By.CSS_SELECTOR, selector))
            )
        except TimeoutException as e:
            raise HarnessError(f"{selector!r} never became clickable within {timeout}s") from e
        el.click()

    def submit(self, selector: str, timeout: float = 10) -> None:
        """Click a button that submits a form, then wait until the browser
        has replaced the page with the server's answer.

        Without this, waiting for an element that the old page also has
        (``#memory-content`` after an edit, ``.flash.error`` after a second
        failed sign-in) can return before the new page arrives, and the
        test reads the old page's URL or text."""
        old_page = self.driver.find_element(By.TAG_NAME, "html")
        self.click(selector, timeout)

        def replaced(_driver):
            # Gone is gone, however Chrome words it: a stale element, or an
            # inspector error saying the node left the document (the case
            # Selenium's own staleness_of lets through).
            try:
                old_page.is_enabled()
                return False
            except StaleElementReferenceException:
                return True
            except WebDriverException as e:
                if "does not belong to the document" in (e.msg or ""):
                    return True
                raise

        try:
            WebDriverWait(self.driver, timeout).until(replaced)
        except TimeoutException as e:
            raise HarnessError(
                f"pressing {selector!r} did not load a new page within {timeout}s "
                f"(still on {self.driver.current_url})"
            ) from e

    def text_of(self, selector: str, timeout: float = 10) -> str:
        return self.wait_for(selector, timeout).text

    # ---- accessibility (axe-core) ---------------------------------------
    def axe(self, options: dict | None = None, context=None, timeout: float = 30) -> list[dict]:
        """Run axe-core on the current page; returns its violations list.

        ``options`` is axe.run's options object (e.g. {"runOnly": ["wcag2a", "wcag2aa"]});
        ``context`` is axe.run's context (default: the whole document)."""
        js_path = Path(os.environ.get("AXE_JS") or DEFAULT_AXE_JS)
        if not js_path.is_file():
            raise HarnessError(f"axe-core not found at {js_path}; run `bash .ci/browser/install.sh` or set AXE_JS")
        if not self.driver.execute_script("return typeof window.axe === 'object'"):
            self.driver.execute_script(js_path.read_text(encoding="utf-8"))
            if not self.driver.execute_script("return typeof window.axe === 'object'"):
                raise HarnessError("axe-core did not load (window.axe missing after injection; a CSP may block it)")
        self.driver.set_script_timeout(timeout)
        result = self.driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            axe.run(arguments[0] || document, arguments[1] || {})
              .then(r => done({ok: true, violations: r.violations}))
              .catch(e => done({ok: false, error: String(e && e.stack || e)}));
            """,
            context,
            options or {},
        )
        if not result or not result.get("ok"):
            raise HarnessError(f"axe.run failed: {result and result.get('error')}")
        return result["violations"]

    def serious_violations(self, options: dict | None = None, context=None) -> list[dict]:
        return [v for v in self.axe(options, context) if v.get("impact") in ("serious", "critical")]


def format_violations(violations: list[dict]) -> str:
    """One readable line per violation and node, for logs."""
    lines = []
    for v in violations:
        lines.append(f"[{v.get('impact')}] {v.get('id')}: {v.get('help')} ({v.get('helpUrl')})")
        for n in v.get("nodes", [])[:5]:
            lines.append(f"    {' '.join(n.get('target', []))}: {n.get('failureSummary', '').splitlines()[-1:]}")
    return "\n".join(lines) or "(none)"
