"""``runworkers --processes N``: real supervisor and worker processes, signalled and killed."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from django_dbqueue import Job, JobState
from tests.e2e.conftest import WorkerProcess, open_gate
from tests.jobs.e2e_tasks import gated, recorded
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

#: A reaped job is due again at once, and claimed soon after.
QUICK_RETRY_SETTINGS = {"RETRY_BASE": 0.1, "RETRY_FACTOR": 1, "RETRY_CAP": 0.1}
FAST_POLL = ("--poll-interval", "0.2")

e2e_db = pytest.mark.django_db(transaction=True)


def children(parent: WorkerProcess) -> set[int]:
    """The pids of the live processes whose parent is ``parent`` (from ``/proc``)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == parent.pid and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def running_on(jobs: list[Job]) -> set[str]:
    """The worker ids of the attempts of ``jobs`` that have started."""
    ids = [job.pk for job in jobs]
    return set(Execution.objects.filter(job_id__in=ids).values_list("worker_id", flat=True))


def states(jobs: list[Job]) -> set[str]:
    return set(Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("state", flat=True))


@e2e_db
def test_processes_burst_drains_every_job_on_suffixed_worker_ids_and_exits_0(
    start_worker: StartWorker,
) -> None:
    jobs = recorded.enqueue_many([((), {}) for _ in range(40)])

    supervisor = start_worker("--processes", "2", "--burst", "--worker-id", "pw")

    assert supervisor.wait() == 0, supervisor.log()
    assert states(jobs) == {JobState.SUCCEEDED}
    assert running_on(jobs) <= {"pw-p1", "pw-p2"}
    assert Execution.objects.count() == 40


@e2e_db
def test_processes_run_n_workers_and_sigterm_drains_them_all_then_exits_0(
    start_worker: StartWorker,
) -> None:
    jobs = [gated.enqueue("both") for _ in range(2)]
    supervisor = start_worker("--processes", "2", "--worker-id", "pw")

    # One slot each (concurrency 1): both jobs running means both processes serve.
    wait_until(lambda: running_on(jobs) == {"pw-p1", "pw-p2"}, what="a job on each process")
    assert len(children(supervisor)) == 2
    supervisor.send(signal.SIGTERM)
    supervisor.wait_for_log("forwarded to the worker processes")
    open_gate("both")

    assert supervisor.wait() == 0, supervisor.log()
    assert states(jobs) == {JobState.SUCCEEDED}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    assert children(supervisor) == set()


@e2e_db
def test_processes_forward_sigusr1_for_status_and_sighup_to_drain(
    start_worker: StartWorker,
) -> None:
    jobs = [gated.enqueue("hup") for _ in range(2)]
    supervisor = start_worker("--processes", "2", "--worker-id", "pw")
    wait_until(lambda: running_on(jobs) == {"pw-p1", "pw-p2"}, what="a job on each process")

    supervisor.send(signal.SIGUSR1)
    for worker_id in ("pw-p1", "pw-p2"):
        supervisor.wait_for_log(f"worker status id={worker_id} state=claiming live_jobs=1")
    assert len(children(supervisor)) == 2  # status only: nobody stopped or restarted

    supervisor.send(signal.SIGHUP)
    for worker_id in ("pw-p1", "pw-p2"):
        supervisor.wait_for_log(f"worker id={worker_id} got SIGHUP: draining")
    open_gate("hup")

    assert supervisor.wait() == 0, supervisor.log()
    assert states(jobs) == {JobState.SUCCEEDED}


@e2e_db
def test_a_sigkilled_process_is_restarted_and_every_job_still_runs(
    start_worker: StartWorker,
) -> None:
    stuck = gated.enqueue("killed")
    supervisor = start_worker("--processes", "2", *FAST_POLL, settings=QUICK_RETRY_SETTINGS)
    first = wait_until(lambda: Execution.objects.filter(job_id=stuck.pk).first(), what="attempt 1")
    before = children(supervisor)
    # The default worker id is host:pid:random, so the attempt names its process.
    victim = int(first.worker_id.split(":")[1])
    assert victim in before

    os.kill(victim, signal.SIGKILL)

    def replaced() -> set[int] | None:
        now = children(supervisor)
        return now if len(now) == 2 and victim not in now else None

    restarted = wait_until(replaced, what="the killed process to be replaced")
    open_gate("killed")
    later = recorded.enqueue_many([((), {}) for _ in range(20)])

    wait_until(lambda: states([stuck, *later]) == {JobState.SUCCEEDED}, 30, "every job to run")
    assert len(restarted - before) == 1
    assert Job.objects.get(pk=stuck.pk).attempts == 2  # its lease expired with the killed one
    supervisor.wait_for_log("restarting in")
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait() == 0, supervisor.log()


@pytest.mark.parametrize("value", ["0", "-2"])
def test_processes_below_one_is_a_command_error(value: str) -> None:
    with pytest.raises(
        CommandError, match=rf"--processes: must be a whole number from 1 to 1024, not {value}"
    ):
        call_command("runworkers", "--burst", "--processes", value)


def test_processes_with_a_metrics_port_is_a_command_error() -> None:
    pytest.importorskip("prometheus_client")
    with pytest.raises(CommandError, match=r"cannot be combined with --processes"):
        call_command("runworkers", "--burst", "--processes", "2", "--metrics-port", "9101")


def test_a_worker_id_too_long_for_its_process_suffix_is_a_command_error() -> None:
    # 253 characters fit the column alone, not with "-p2" after them.
    with pytest.raises(CommandError, match=r"--worker-id must be 1-252 characters") as error:
        call_command("runworkers", "--burst", "--processes", "2", "--worker-id", "w" * 253)

    assert "not 253" in str(error.value)
