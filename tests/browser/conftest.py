"""A real chromium, driven by Playwright, against pytest-django's live server.

Playwright never downloads a browser here: it launches Debian's ``chromium``.
Locally the tests skip when it is not installed; under CI (the ``CI``
environment variable is set) a missing chromium fails the run instead.

While Playwright's sync API is open it keeps an asyncio loop marked as running
in this thread, and Django then hands this thread a second, separate database
connection (its connection storage is per async context once a loop runs), one
the test's teardown never closes. So a browser test writes its rows first,
opens the browser with ``with browser_page() as page:``, and checks the
database only after the block has closed the browser.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Where the browser tests save their screenshots, committed: the admin how-to shows them
#: (docs/howto/dead-letters.md), so the docs show the admin as the tests last saw it.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "_static" / "screenshots"
#: The longest any single browser step (navigation, click, wait) may take.
STEP_TIMEOUT_MS = 15_000

BrowserPage = Callable[[], AbstractContextManager[Page]]


@contextmanager
def open_page() -> Iterator[Page]:
    """A tab in a fresh headless chromium; both are closed when the block ends."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.set_default_timeout(STEP_TIMEOUT_MS)
            context.set_default_navigation_timeout(STEP_TIMEOUT_MS)
            yield context.new_page()
        finally:
            browser.close()


@pytest.fixture
def browser_page() -> BrowserPage:
    """Opens a chromium tab on demand; skips (fails under CI) without chromium."""
    if not CHROMIUM.exists():
        if "CI" in os.environ:
            pytest.fail(f"{CHROMIUM} is missing; CI must install it: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    return open_page


def save_screenshot(name: str, png: bytes) -> Path:
    """Write ``png`` to ``SCREENSHOTS/admin-<name>.png`` and return its path.

    Written to a temporary file first and moved into place, so a reader (or another
    test run saving the same picture at once) never sees half a file.
    """
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"admin-{name}.png"
    with tempfile.NamedTemporaryFile(dir=SCREENSHOTS, suffix=".tmp", delete=False) as file:
        file.write(png)
    os.chmod(file.name, 0o644)  # as git checks files out, not mkstemp's 0600
    os.replace(file.name, path)
    return path
