"""``runworkers`` subprocesses: started, watched, measured (RSS), stopped.

Each worker's stdout and stderr (its job log, one line per job at INFO by
default) go to a file; a worker that fails raises ``WorkerFailed`` with the
end of that log. Whatever still runs when a ``started`` block ends is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchmarks.env import CONN_MAX_AGE_ENV, DATABASE_URL_ENV, DBQUEUE_ENV

ROOT = Path(__file__).resolve().parents[1]

#: How long a worker told to stop may take to drain and exit.
STOP_TIMEOUT = 30.0


class WorkerFailed(RuntimeError):
    """A worker exited with an error or would not stop."""


class WorkerProcess:
    """One ``python -m django runworkers ...`` process."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self.told_to_stop = False
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "django", "runworkers", *args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def memory_kib(self, field: str = "VmRSS") -> int:
        """A memory figure of the process from ``/proc/<pid>/status``, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0])
        raise LookupError(f"no {field} in /proc/{self.pid}/status")

    def stop(self) -> None:
        """SIGTERM: stop claiming, finish running jobs, exit 0."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.told_to_stop = True

    def wait(self, timeout: float) -> bool:
        """Whether the process exited within ``timeout``; a non-zero exit raises.

        A worker that had already stopped (it logged ``worker stopped``) when
        ``stop()`` reached it, and so died of the SIGTERM on its way out, did
        exit cleanly: the signal came too late to be handled, not to be obeyed.
        """
        try:
            code = self.process.wait(max(timeout, 0))
        except subprocess.TimeoutExpired:
            return False
        if code != 0 and not self._stopped_before_the_signal(code):
            raise WorkerFailed(f"worker {self.pid} exited with {code}:\n{self.tail()}")
        return True

    def _stopped_before_the_signal(self, code: int) -> bool:
        return (
            self.told_to_stop
            and code == -signal.SIGTERM
            and "worker stopped" in self.log_path.read_text(errors="replace")
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def environment(
    url: str, conn_max_age: str, dbqueue: dict[str, object] | None = None
) -> dict[str, str]:
    """A worker's environment: the benchmark settings, database, ``CONN_MAX_AGE``, ``DBQUEUE``."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
        DATABASE_URL_ENV: url,
        CONN_MAX_AGE_ENV: conn_max_age,
        DBQUEUE_ENV: json.dumps(dbqueue or {}),
        "PYTHONPATH": path,
    }


@contextmanager
def started(
    count: int, args: Sequence[str], env: dict[str, str], logs: Path
) -> Iterator[list[WorkerProcess]]:
    """``count`` workers started with ``args``, logging to ``logs/worker-<n>.log``."""
    logs.mkdir(parents=True, exist_ok=True)
    workers: list[WorkerProcess] = []
    try:
        for number in range(count):
            workers.append(WorkerProcess(args, env, logs / f"worker-{number}.log"))
        yield workers
    finally:
        for worker in workers:
            worker.kill()


def wait_all(workers: Sequence[WorkerProcess], deadline: float) -> bool:
    """Whether every worker exited by itself before ``deadline`` (``time.monotonic``)."""
    return all(worker.wait(deadline - time.monotonic()) for worker in workers)


def stop_all(workers: Sequence[WorkerProcess]) -> None:
    """SIGTERM every worker and wait for each to drain and exit."""
    for worker in workers:
        worker.stop()
    for worker in workers:
        if not worker.wait(STOP_TIMEOUT):
            raise WorkerFailed(f"worker {worker.pid} still running {STOP_TIMEOUT}s after SIGTERM")
