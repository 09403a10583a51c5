"""Durations in seconds: finite, never negative, and capped at ``MAX_DELAY``.

Every delay, lease, timeout, interval and seconds setting is checked here,
so ``inf``, NaN and values no timestamp can hold are refused where they enter
(a system check, a ``CommandError``, ``InvalidJob`` or ``ValueError``) instead
of failing later in a worker thread.
"""

from __future__ import annotations

import math
from datetime import timedelta

#: The longest delay, lease, interval or seconds setting accepted: far enough for
#: any schedule, short of the timestamp types' limits.
MAX_DELAY = timedelta(days=100 * 365)
MAX_SECONDS = MAX_DELAY.total_seconds()


def is_seconds(value: object, *, zero: bool = False) -> bool:
    """Whether ``value`` is a number of seconds above 0 (from 0 with ``zero``) up to the cap."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if not math.isfinite(value) or value > MAX_SECONDS:
        return False
    return value >= 0 if zero else value > 0


def rule(*, zero: bool = False) -> str:
    """The rule ``is_seconds`` checks, as an error message states it."""
    low = "0" if zero else "above 0"
    return f"a number of seconds from {low} to {MAX_SECONDS:.0f} ({MAX_DELAY.days} days)"


def capped(seconds: float) -> float:
    """``seconds`` (finite, 0 or more) cut to ``MAX_SECONDS``."""
    return min(seconds, MAX_SECONDS)
