"""``benchmarks.compare.reports``: processes told to go together, every wait bounded."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from benchmarks import compare, workers

READY_THEN_REPORT = "import sys; print('ready', flush=True); sys.stdin.readline(); print('[1]')"


def started(*scripts: str) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for script in scripts
    ]


def test_processes_that_get_ready_are_told_to_go_and_their_lines_read() -> None:
    processes = started(READY_THEN_REPORT, READY_THEN_REPORT)
    assert compare.reports(processes, "a probe", 30, together=True) == [[1], [1]]


def test_one_that_hangs_before_it_is_ready_fails_the_run_at_the_deadline() -> None:
    processes = started(READY_THEN_REPORT, "import time; time.sleep(60)")
    began = time.monotonic()
    with pytest.raises(workers.WorkerFailed, match=r"a probe was not ready within 0\.5 s"):
        compare.reports(processes, "a probe", 0.5, together=True)
    assert time.monotonic() - began < 30
    assert all(process.returncode is not None for process in processes)


def test_one_that_exits_before_it_is_ready_fails_the_run_saying_so() -> None:
    processes = started(READY_THEN_REPORT, "raise SystemExit(3)")
    with pytest.raises(workers.WorkerFailed, match="a probe exited before it was ready"):
        compare.reports(processes, "a probe", 30, together=True)
    assert all(process.returncode is not None for process in processes)
