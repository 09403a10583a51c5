"""The test suite's one bounded wait: poll a condition until it holds, fail at a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

#: The longest any wait may take before the test fails, in seconds.
WAIT = 60.0


def wait_until(
    condition: Callable[[], Any], timeout: float = WAIT, what: str = "", every: float = 0.05
) -> Any:
    """Poll ``condition`` every ``every`` seconds until it is truthy and return its value.

    Fails the test (naming ``what``) once ``timeout`` seconds pass without it.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(every)
