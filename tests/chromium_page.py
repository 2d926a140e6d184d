"""The real browser the studio's page tests drive: Debian's headless Chromium through
Playwright. Never downloads a browser: without /usr/bin/chromium (``make test`` installs it
where it can) or Playwright, a test module that calls :func:`require` is skipped, saying why.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
T = TypeVar("T")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "studio"


def require() -> Any:
    """Playwright's sync API; skips the calling module when the browser or it is missing."""
    if not CHROMIUM.exists():
        pytest.skip("browser tests need Debian's chromium at /usr/bin/chromium "
                    "(apt-get install chromium; `make test` does it as root)",
                    allow_module_level=True)
    return pytest.importorskip("playwright.sync_api", reason="browser tests need playwright "
                               "(pip install -e '.[dev]')")


#: The browser of this test module, launched on first use (see :func:`close_browser`).
_browser: list[Any] = []  # [playwright, browser] while one is open


def _shared_browser() -> Any:
    """One Chromium per test module (a launch costs ~1.5 s of CPU, a fresh context ~0.25):
    each page gets a context of its own, so no cookie, storage or cache crosses tests."""
    if not _browser:
        sync_api = require()
        playwright = sync_api.sync_playwright().start()
        try:
            _browser.extend([playwright, playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=ARGS)])
        except BaseException:
            playwright.stop()
            raise
    return _browser[1]


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)`` in a thread of its own: in a module that opened a page,
    Playwright's sync API marks its event loop as running in the test's thread until the
    module ends, and ``asyncio.run`` there would refuse."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def close_browser() -> None:
    """Close this module's browser, if it launched one (tests/conftest.py, after each
    module: Playwright's sync API must not outlive the module that used it)."""
    if _browser:
        playwright, browser = _browser
        _browser.clear()
        try:
            browser.close()
        finally:
            playwright.stop()


@contextlib.contextmanager
def open_page(width: int, *, refusals_seen: bool = False) -> Iterator[Any]:
    """A page ``width`` px wide, in a context of its own; ``page.problems`` collects page
    errors and console errors (``refusals_seen``: not the failed loads of 4xx answers a
    test provokes on purpose)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = _shared_browser().new_context(viewport={"width": width, "height": 1000})
    try:
        page = context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("console", lambda m: problems.append(f"console: {m.text}")
                if m.type == "error" and not (refusals_seen and "status of 4" in m.text)
                else None)
        page.problems = problems
        yield page
    finally:
        context.close()
