"""A clock for code that takes one (``clock=time.monotonic``): the test moves it by hand."""

from __future__ import annotations


class ManualClock:
    """Reads ``now``; a test moves it with ``clock.now += seconds``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
