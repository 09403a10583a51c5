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
