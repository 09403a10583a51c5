"""The ``--processes`` supervisor's restart policy, with real forked children (no database)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from django_dbqueue.retry import Backoff
from django_dbqueue.worker import processes
from django_dbqueue.worker.processes import RESTART_LIMIT, ProcessSupervisor


@pytest.fixture(autouse=True)
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "RESTART_BACKOFF", Backoff(base=0.01, factor=1, cap=0.01))


def child_that_records(starts: Path, code: int) -> Callable[[int], int]:
    """A child that appends its index to ``starts`` and exits with ``code``."""

    def run_child(index: int) -> int:
        with starts.open("a") as record:
            record.write(f"{index}\n")
        return code

    return run_child


def test_a_process_that_keeps_failing_is_given_up_and_the_supervisor_exits_1(
    tmp_path: Path,
) -> None:
    starts = tmp_path / "starts"

    code = ProcessSupervisor(1, child_that_records(starts, 3)).run()

    assert code == 1
    assert starts.read_text().split() == ["1"] * RESTART_LIMIT


def test_processes_that_exit_0_are_done_and_not_restarted(tmp_path: Path) -> None:
    starts = tmp_path / "starts"

    code = ProcessSupervisor(3, child_that_records(starts, 0)).run()

    assert code == 0
    assert sorted(starts.read_text().split()) == ["1", "2", "3"]


def test_a_child_that_raises_counts_as_a_failure(tmp_path: Path) -> None:
    def crashes(index: int) -> int:
        raise RuntimeError("boom")

    assert ProcessSupervisor(1, crashes).run() == 1
