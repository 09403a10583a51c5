"""Clocks and summaries shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def timed(action: Callable[[], T]) -> tuple[T, float]:
    """What ``action`` returns, and the seconds it took."""
    started = time.perf_counter()
    value = action()
    return value, time.perf_counter() - started


def rate(count: int, action: Callable[[], object]) -> float:
    """``count`` divided by the seconds ``action`` takes (per second)."""
    _, seconds = timed(action)
    return count / seconds


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """``p50``, ``p95`` and ``max`` of ``samples`` (at least two)."""
    return {
        "p50": statistics.median(samples),
        "p95": statistics.quantiles(samples, n=100, method="inclusive")[94],
        "max": max(samples),
    }
