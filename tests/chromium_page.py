"""The real browser the studio's page tests drive: Debian's headless Chromium through
Playwright. Never downloads a browser: without /usr/bin/chromium (``make test`` installs it
where it can) or Playwright, a test module that calls :func:`require` is skipped, saying why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "studio"


def require() -> Any:
    """Playwright's sync API; skips the calling module when the browser or it is missing."""
    if not CHROMIUM.exists():
        pytest.skip("browser tests need Debian's chromium at /usr/bin/chromium "
                    "(apt-get install chromium; `make test` does it as root)",
                    allow_module_level=True)
    return pytest.importorskip("playwright.sync_api", reason="browser tests need playwright "
                               "(pip install -e '.[dev]')")


@contextlib.contextmanager
def open_page(width: int, *, refusals_seen: bool = False) -> Iterator[Any]:
    """A page ``width`` px wide; ``page.problems`` collects page errors and console errors
    (``refusals_seen``: not the failed loads of 4xx answers a test provokes on purpose)."""
    sync_api = require()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": 1000})
        problems: list[str] = []
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("console", lambda m: problems.append(f"console: {m.text}")
                if m.type == "error" and not (refusals_seen and "status of 4" in m.text)
                else None)
        page.problems = problems
        try:
            yield page
        finally:
            browser.close()
