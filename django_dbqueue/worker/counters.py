"""Counters and duration histograms of one worker process, for logs and metrics.

Plain Python with no metrics library: ``django_dbqueue.metrics`` turns them
into Prometheus samples when the ``prometheus`` extra is installed.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: The counters, in the order logs print them.
COUNTERS = (
    "claimed",
    "succeeded",
    "retried",
    "dead",
    "cancelled",
    "lease_lost",
    "unrecorded",
    "renew_failures",
)
#: Upper bounds (seconds) for one batched claim: a claim is one short statement.
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Upper bounds (seconds) for one job run, task code and outcome write included.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram at one moment, in Prometheus' shape.

    ``cumulative[i]`` counts observations ``<= buckets[i]``; observations above
    the last bound appear only in ``count`` (the ``+Inf`` bucket).
    """

    buckets: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float
    count: int


class Histogram:
    """Fixed-bucket histogram of durations in seconds. ``observe`` is thread-safe."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        if not buckets or list(buckets) != sorted(set(buckets)):
            raise ValueError(f"buckets must be strictly increasing, not {buckets!r}.")
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)  # the last slot is "above every bound"
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Count one duration; a value equal to a bound falls in that bound's bucket."""
        self.observe_all((seconds,))

    def observe_all(self, durations: Iterable[float]) -> None:
        """Count each duration, under one lock (a batch of jobs finished together)."""
        slots = [(bisect.bisect_left(self.buckets, seconds), seconds) for seconds in durations]
        with self._lock:
            for slot, seconds in slots:
                self._counts[slot] += 1
                self._sum += seconds

    def snapshot(self) -> HistogramSnapshot:
        """Consistent counts, sum and total, taken under the lock."""
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        cumulative: list[int] = []
        running = 0
        for count in counts[:-1]:
            running += count
            cumulative.append(running)
        return HistogramSnapshot(self.buckets, tuple(cumulative), total, sum(counts))


@dataclass
class WorkerCounters:
    """What this process did since it started. Increments and observations are thread-safe.

    ``lease_lost`` counts attempts whose outcome the database refused
    because the lease was gone; ``unrecorded`` counts outcomes that could not
    be written at all (database unreachable until the lease ran out: the
    reaper recovers those jobs); ``renew_failures`` counts leases the
    heartbeat found lost (taken by another worker or the reaper; a job whose
    own outcome was written meanwhile is not counted). ``claim_duration``
    times each successful batched claim; ``run_duration`` times each job from
    start to recorded outcome.
    """

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    lease_lost: int = 0
    unrecorded: int = 0
    renew_failures: int = 0
    claim_duration: Histogram = field(
        default_factory=lambda: Histogram(CLAIM_BUCKETS), repr=False, compare=False
    )
    run_duration: Histogram = field(
        default_factory=lambda: Histogram(RUN_BUCKETS), repr=False, compare=False
    )
    #: The watchdog's latest reading: each watched thread's name and whether it is alive.
    threads_alive: dict[str, bool] = field(default_factory=dict, compare=False)
    #: The watchdog's latest reading: slots stuck in a job past its timeout by over a lease.
    hung_slots: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: int = 1) -> None:
        self.add_all({name: amount})

    def add_all(self, amounts: Mapping[str, int]) -> None:
        """Add each amount to its counter, under one lock (a batch's outcomes at once)."""
        unknown = [name for name in amounts if name not in COUNTERS]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a worker counter; use one of {COUNTERS}.")
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def set_health(self, threads_alive: dict[str, bool], hung_slots: int) -> None:
        """Record the watchdog's reading (``threads_alive`` and ``hung_slots``)."""
        with self._lock:
            self.threads_alive = dict(threads_alive)
            self.hung_slots = hung_slots

    def health(self) -> tuple[dict[str, bool], int]:
        """The watchdog's latest reading: ``(threads_alive, hung_slots)``."""
        with self._lock:
            return dict(self.threads_alive), self.hung_slots

    def snapshot(self) -> dict[str, int]:
        """The counters now, as a plain dict (histograms are read on their own)."""
        with self._lock:
            return {name: getattr(self, name) for name in COUNTERS}
