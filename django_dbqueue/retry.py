"""Backoff maths for retries: pure functions, no database."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from django_dbqueue import durations

#: The keys of a ``RETRY`` setting, in ``DBQUEUE`` and in a ``TASKS`` backend's ``OPTIONS``
#: alike: the fields of ``Backoff``, each optional.
RETRY_KEYS = ("base", "factor", "cap")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with equal jitter, capped.

    For the attempt ``n`` that just failed (1-based) the base delay is
    ``d = min(cap, base * factor ** (n - 1))`` seconds and the delay used is
    uniform in ``[d / 2, d]``: retries spread out but never wait longer than
    ``cap``.
    """

    base: float = 2
    factor: float = 2
    cap: float = 3600

    def __post_init__(self) -> None:
        factor_ok = isinstance(self.factor, (int, float)) and 1 <= self.factor < math.inf
        if not (durations.is_seconds(self.base) and durations.is_seconds(self.cap) and factor_ok):
            raise ValueError(
                f"{self!r} is invalid: base and cap must each be {durations.rule()}, and "
                "factor a finite number of 1 or more."
            )

    def ceiling(self, attempt: int) -> float:
        """The un-jittered delay ``d`` after failed attempt ``attempt`` (1-based)."""
        if attempt < 1:
            raise ValueError(f"attempt must be 1 or more, not {attempt}.")
        if self.factor == 1:
            return min(self.cap, self.base)
        # Step up to the cap instead of computing factor ** n, which overflows.
        delay = self.base
        for _ in range(attempt - 1):
            delay *= self.factor
            if delay >= self.cap:
                return self.cap
        return min(self.cap, delay)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A jittered delay in seconds, uniform in ``[d / 2, d]``."""
        ceiling = self.ceiling(attempt)
        return (rng or random).uniform(ceiling / 2, ceiling)


def retry_problem(retry: object) -> str | None:
    """What is wrong with a ``RETRY`` setting (a dict of ``RETRY_KEYS``), or ``None``."""
    if not isinstance(retry, dict) or not set(retry) <= set(RETRY_KEYS):
        return f"it must be a dict with keys among {list(RETRY_KEYS)}"
    try:
        replace(Backoff(), **retry)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None
