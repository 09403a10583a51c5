"""CPU seconds of a drain, split: the worker processes and the PostgreSQL backends serving them.

Worker CPU comes from ``getrusage(RUSAGE_CHILDREN)``: exact for every child
the harness has waited for. Backend CPU comes from ``/proc/<pid>/stat`` of
the client backends ``pg_stat_activity`` lists on the benchmark database,
sampled every ``INTERVAL`` by a thread of the harness on a connection of its
own (excluded, like the harness's), so it needs the server on this machine.
A backend that ends between two samples loses at most its last interval.
"""

from __future__ import annotations

import os
import resource
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from benchmarks import database

INTERVAL = 0.02
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")

BACKENDS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend'
  AND pid <> pg_backend_pid() AND pid <> ALL(%(excluded)s)
"""


@dataclass(frozen=True)
class Split:
    """CPU seconds spent by the workers and by the PostgreSQL backends."""

    worker: float
    postgres: float

    def __sub__(self, other: Split) -> Split:
        return Split(self.worker - other.worker, self.postgres - other.postgres)

    @property
    def total(self) -> float:
        """Both sides together: what a job costs the machine."""
        return self.worker + self.postgres

    def per_job_us(self, jobs: int) -> Split:
        """Microseconds per job."""
        return Split(self.worker / jobs * 1e6, self.postgres / jobs * 1e6)


def process_cpu(pid: int) -> tuple[int, float] | None:
    """``(start time, user + system CPU seconds)`` of a live process, or ``None`` once gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces; the fields after it are fixed.
    fields = stat.rpartition(")")[2].split()
    utime, stime, starttime = int(fields[11]), int(fields[12]), int(fields[19])
    return starttime, (utime + stime) / TICKS_PER_SECOND


def children_cpu() -> float:
    """CPU seconds of every child process this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Backends:
    """While open, samples the CPU of the database's client backends (but ``excluded``).

    ``seconds`` is what they spent since the block began: a backend already
    there counts from its first sample, a new one from its start.
    """

    def __init__(self, url: str, excluded: list[int]) -> None:
        self.url = url
        self.excluded = excluded
        self._before: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self._conn = database.connect(url)

    def __enter__(self) -> Backends:
        self._before = self._sample()
        self._last = dict(self._before)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    @property
    def seconds(self) -> float:
        return sum(cpu - self._before.get(key, 0.0) for key, cpu in self._last.items())

    def _sample(self) -> dict[tuple[int, int], float]:
        sample = {}
        for (pid,) in self._conn.execute(BACKENDS, {"excluded": self.excluded}).fetchall():
            found = process_cpu(pid)
            if found is not None:
                sample[(pid, found[0])] = found[1]
        return sample

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(INTERVAL):
            self._last.update(self._sample())
        self._last.update(self._sample())
