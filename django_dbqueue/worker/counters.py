"""Counters and duration histograms of one worker process, for logs and metrics.

Plain Python with no metrics library: ``django_dbqueue.metrics`` turns them
into Prometheus samples when the ``prometheus`` extra is installed.
"""

from __future__ import annotations

import bisect
import collections
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
    "leases_lost",
)
#: Upper bounds (seconds) for one batched claim: a claim is one short statement.
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Upper bounds (seconds) for one job run, task code and outcome write included.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Upper bounds (seconds) for a job's wait from due (``run_at``) to claimed.
WAIT_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    *(300.0, 900.0, 1800.0, 3600.0, 7200.0),
)
#: Distinct task names one worker labels its per-task histograms with; the jobs of tasks
#: seen after that many share the label ``OTHER_TASKS``, so the series stay bounded.
MAX_TASK_LABELS = 100
#: The task label of the tasks past ``MAX_TASK_LABELS`` (a task name is an import path,
#: never this word).
OTHER_TASKS = "other"


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


class TaskHistograms:
    """One ``Histogram`` per task name: at most ``max_labels`` names, then ``OTHER_TASKS``.

    The first ``max_labels`` distinct tasks observed keep their own histogram
    for the life of the process; every later task's observations go to the
    one labelled ``OTHER_TASKS``. ``observe_all`` is thread-safe.
    """

    def __init__(self, buckets: tuple[float, ...], max_labels: int = MAX_TASK_LABELS) -> None:
        Histogram(buckets)  # refuses bad buckets now, not at the first observation
        self.buckets = buckets
        self.max_labels = max_labels
        self._by_task: dict[str, Histogram] = {}
        self._lock = threading.Lock()

    def observe_all(self, observations: Iterable[tuple[str, float]]) -> None:
        """Count each ``(task, seconds)``; a batch takes each task's histogram once."""
        by_task: dict[str, list[float]] = collections.defaultdict(list)
        for task, seconds in observations:
            by_task[task].append(seconds)
        for task, durations in by_task.items():
            self._histogram(task).observe_all(durations)

    def _histogram(self, task: str) -> Histogram:
        with self._lock:
            histogram = self._by_task.get(task)
            if histogram is None:
                label = task if len(self._by_task) < self.max_labels else OTHER_TASKS
                histogram = self._by_task.get(label) or Histogram(self.buckets)
                self._by_task[label] = histogram
            return histogram

    def snapshot(self) -> dict[str, HistogramSnapshot]:
        """Each task label's histogram now, ``OTHER_TASKS`` included once it was used."""
        with self._lock:
            histograms = dict(self._by_task)
        return {task: histogram.snapshot() for task, histogram in sorted(histograms.items())}


@dataclass
class WorkerCounters:
    """What this process did since it started. Increments and observations are thread-safe.

    ``lease_lost`` counts attempts whose outcome the database refused
    because the lease was gone; ``unrecorded`` counts outcomes that could not
    be written at all (database unreachable until the lease ran out: the
    reaper recovers those jobs); ``leases_lost`` counts leases the
    heartbeat found taken (by another worker or the reaper; a job whose
    own outcome was written meanwhile is not counted). ``claim_duration``
    times each successful batched claim; ``run_duration`` times each job from
    start to recorded outcome, and ``run_duration_by_task`` the same per task;
    ``queue_wait_by_task`` times, per task, each claimed job's wait from its
    ``run_at`` to its claim (both by the database clock).
    """

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    lease_lost: int = 0
    unrecorded: int = 0
    leases_lost: int = 0
    claim_duration: Histogram = field(
        default_factory=lambda: Histogram(CLAIM_BUCKETS), repr=False, compare=False
    )
    run_duration: Histogram = field(
        default_factory=lambda: Histogram(RUN_BUCKETS), repr=False, compare=False
    )
    #: Per task: seconds from a job's ``run_at`` to the claim that started its attempt.
    queue_wait_by_task: TaskHistograms = field(
        default_factory=lambda: TaskHistograms(WAIT_BUCKETS), repr=False, compare=False
    )
    #: Per task: what ``run_duration`` times.
    run_duration_by_task: TaskHistograms = field(
        default_factory=lambda: TaskHistograms(RUN_BUCKETS), repr=False, compare=False
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
