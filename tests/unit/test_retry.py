"""Backoff maths: capped exponential ceiling with equal jitter."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest

from django_dbqueue import Retry
from django_dbqueue.durations import MAX_SECONDS
from django_dbqueue.retry import Backoff


def test_ceiling_grows_as_base_times_factor_to_the_previous_attempts() -> None:
    backoff = Backoff(base=3, factor=2, cap=10_000)

    assert [backoff.ceiling(n) for n in range(1, 6)] == [3, 6, 12, 24, 48]


def test_ceiling_reaches_the_cap_and_stays_there() -> None:
    backoff = Backoff(base=2, factor=3, cap=100)

    assert [backoff.ceiling(n) for n in range(1, 7)] == [2, 6, 18, 54, 100, 100]


def test_ceiling_of_a_huge_attempt_is_the_cap_without_overflow() -> None:
    assert Backoff(base=2, factor=2, cap=3600).ceiling(10_000) == 3600
    assert Backoff(base=1, factor=10, cap=60).ceiling(10_000) == 60


def test_constant_factor_keeps_the_base_delay() -> None:
    assert Backoff(base=5, factor=1, cap=60).ceiling(10_000) == 5


def test_base_above_cap_is_capped_from_the_first_attempt() -> None:
    assert Backoff(base=100, factor=2, cap=30).ceiling(1) == 30


@pytest.mark.parametrize("attempt", [1, 2, 5, 12, 10_000])
def test_delay_is_between_half_the_ceiling_and_the_ceiling(attempt: int) -> None:
    backoff = Backoff(base=2, factor=2, cap=3600)
    ceiling = backoff.ceiling(attempt)
    rng = random.Random(1234)

    delays = [backoff.delay(attempt, rng) for _ in range(2000)]

    assert all(ceiling / 2 <= delay <= ceiling for delay in delays)


def test_delay_is_jittered_and_spreads_over_the_range() -> None:
    backoff = Backoff(base=10, factor=2, cap=3600)
    rng = random.Random(42)

    delays = [backoff.delay(3, rng) for _ in range(2000)]

    assert len(set(delays)) > 1900
    # Uniform over [20, 40]: both halves of the range are used.
    assert min(delays) < 22
    assert max(delays) > 38


def test_delay_is_reproducible_with_a_seeded_rng() -> None:
    backoff = Backoff()

    first = [backoff.delay(4, random.Random(7)) for _ in range(3)]

    assert first == [backoff.delay(4, random.Random(7))] * 3


def test_delay_works_without_an_explicit_rng() -> None:
    delay = Backoff(base=4, factor=2, cap=60).delay(2)

    assert 4 <= delay <= 8


@pytest.mark.parametrize(
    ("base", "factor", "cap"),
    [
        (0, 2, 60),
        (-1, 2, 60),
        (2, 0.5, 60),
        (2, 0, 60),
        (2, 2, 0),
        (2, 2, -5),
        (2, 2, math.inf),
        (2, 2, math.nan),
        (math.nan, 2, 60),
        (2, math.inf, 60),
        (2, 2, MAX_SECONDS * 2),
    ],
)
def test_invalid_parameters_raise_value_error(base: float, factor: float, cap: float) -> None:
    with pytest.raises(ValueError, match="invalid"):
        Backoff(base=base, factor=factor, cap=cap)


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempt_below_one_raises_value_error(attempt: int) -> None:
    backoff = Backoff()

    with pytest.raises(ValueError, match="attempt must be 1 or more"):
        backoff.ceiling(attempt)
    with pytest.raises(ValueError, match="attempt must be 1 or more"):
        backoff.delay(attempt, random.Random(0))


@pytest.mark.parametrize("delay", [0, 1.5, timedelta(minutes=2), None, 1e12])
def test_retry_accepts_a_finite_delay_of_zero_or_more(delay: float | timedelta | None) -> None:
    expected = delay.total_seconds() if isinstance(delay, timedelta) else delay
    assert Retry(delay=delay).delay == expected


@pytest.mark.parametrize("delay", [math.nan, math.inf, -math.inf, -1, timedelta(seconds=-1), True])
def test_retry_refuses_a_delay_that_is_no_finite_duration(delay: object) -> None:
    with pytest.raises(ValueError, match="must be a finite number of seconds"):
        Retry(delay=delay)  # type: ignore[arg-type]  # the point: a wrong type is refused
