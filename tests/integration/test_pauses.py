"""Paused queues against a real database: the claim takes none of their jobs, on every
vendor's claim path; a timed pause ends by itself; resume and the reaper end them; the
commands refuse bad input before writing anything."""

from __future__ import annotations

import math
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from django_dbqueue import leases, pauses, reaper
from django_dbqueue.models import Job, QueuePause
from tests.integration.test_leases import WAIT, run_in_thread, statement_running_elsewhere
from tests.jobs import tasks
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db


def enqueue_into(*queues: str, each: int = 2) -> None:
    for queue in queues:
        for _ in range(each):
            tasks.noop.using(queue=queue).enqueue()


def claimed_queues(queues: list[str] | None = None, limit: int = 100) -> list[str]:
    return sorted(lease.queue for lease in leases.claim(queues, "w1", limit))


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().strip()


def make_past(queue: str) -> None:
    """End ``queue``'s timed pause now, as if its time had passed."""
    QueuePause.objects.filter(queue=queue).update(until=timezone.now() - timedelta(seconds=1))


class TestTheClaim:
    def test_takes_no_job_of_a_paused_queue_and_every_job_of_the_others(self) -> None:
        enqueue_into("a", "b", "c")
        pauses.pause(["a"])
        assert claimed_queues() == ["b", "b", "c", "c"]
        assert Job.objects.filter(queue="a", state="ready").count() == 2

    def test_a_worker_of_the_paused_queue_alone_claims_nothing(self) -> None:
        # One queue: the shape PostgreSQL would claim on its plain path.
        enqueue_into("a")
        pauses.pause(["a"])
        assert claimed_queues(["a"]) == []
        assert claimed_queues(["a", "b"]) == []

    def test_with_serial_keys_in_play_the_paused_queue_is_left_out_too(self) -> None:
        tasks.noop.using(queue="a", serial_key="k1").enqueue()
        tasks.noop.using(queue="b", serial_key="k2").enqueue()
        pauses.pause(["a"])
        assert claimed_queues() == ["b"]

    def test_a_pause_whose_time_is_up_holds_nothing_back(self) -> None:
        enqueue_into("a")
        pauses.pause(["a"], seconds=60)
        make_past("a")
        assert claimed_queues(["a"]) == ["a", "a"]

    def test_a_resumed_queue_is_claimed_again(self) -> None:
        enqueue_into("a", "b")
        pauses.pause(["a", "b"])
        assert claimed_queues() == []
        assert pauses.resume(["a"]) == ["a"]
        assert claimed_queues() == ["a", "a"]
        assert pauses.resume() == ["b"]
        assert claimed_queues() == ["b", "b"]


class TestPause:
    def test_writes_one_row_per_queue_with_the_database_clock(self) -> None:
        before = timezone.now()
        written = pauses.pause(["b", "a", "a"], seconds=90, actor="ops")
        assert [pause.queue for pause in written] == ["a", "b"]
        for pause in written:
            assert pause.paused_by == "ops"
            assert pause.until is not None
            assert pause.until - pause.paused_at == timedelta(seconds=90)
            assert abs(pause.paused_at - before) < timedelta(seconds=5)
        assert [pause.queue for pause in pauses.in_force()] == ["a", "b"]

    def test_pausing_again_sets_the_end_anew(self) -> None:
        pauses.pause(["a"], seconds=60)
        (again,) = pauses.pause(["a"])
        assert again.until is None
        assert QueuePause.objects.get(queue="a").until is None

    def test_a_queue_without_jobs_can_be_paused(self) -> None:
        pauses.pause(["later"])
        tasks.noop.using(queue="later").enqueue()
        assert claimed_queues() == []

    @pytest.mark.parametrize("actor", ["ops\x00", "ops\ud800", None])
    def test_an_actor_no_database_stores_is_refused_before_anything_is_written(
        self, actor: object
    ) -> None:
        with pytest.raises(ValueError, match="actor must be text"):
            pauses.pause(["a"], actor=actor)  # type: ignore[arg-type]
        assert not QueuePause.objects.exists()

    def test_a_long_actor_is_cut_to_the_column(self) -> None:
        (pause,) = pauses.pause(["a"], actor="x" * 500)
        assert pause.paused_by == "x" * pauses.ACTOR_MAX

    @pytest.mark.parametrize(
        ("queues", "seconds", "problem"),
        [
            ([], None, "at least one queue"),
            ("a", None, "list of queue names"),
            (["a", "no spaces"], None, "invalid"),
            (["a", 7], None, "invalid"),
            (["a"], 0, "above 0"),
            (["a"], -1, "above 0"),
            (["a"], math.inf, "above 0"),
            (["a"], math.nan, "above 0"),
            (["a"], True, "above 0"),
        ],
    )
    def test_bad_input_is_refused_before_anything_is_written(
        self, queues: object, seconds: object, problem: str
    ) -> None:
        with pytest.raises(ValueError, match=problem):
            pauses.pause(queues, seconds=seconds)  # type: ignore[arg-type]
        assert not QueuePause.objects.exists()


class TestTheEnd:
    def test_in_force_leaves_out_a_pause_whose_time_is_up(self) -> None:
        pauses.pause(["a", "b"], seconds=60)
        make_past("a")
        assert [pause.queue for pause in pauses.in_force()] == ["b"]

    def test_the_reaper_deletes_the_pauses_that_ended_and_keeps_the_others(self) -> None:
        pauses.pause(["a", "b"], seconds=60)
        pauses.pause(["c"])
        make_past("a")
        reaper.sweep()
        assert sorted(QueuePause.objects.values_list("queue", flat=True)) == ["b", "c"]

    def test_an_idle_worker_wakes_when_a_timed_pause_of_its_queue_ends(self) -> None:
        enqueue_into("a")
        pauses.pause(["a"], seconds=30)
        due = leases.next_due(["a"])
        assert due is not None
        assert 25 < due <= 30
        every_queue = leases.next_due(None)
        assert every_queue is not None
        assert 25 < every_queue <= 30
        assert leases.next_due(["b"]) is None

    def test_resume_names_only_the_queues_that_were_paused(self) -> None:
        pauses.pause(["a"])
        assert pauses.resume(["a", "b"]) == ["a"]
        assert pauses.resume(["a"]) == []


class TestCommands:
    def test_pause_for_a_while_then_resume(self) -> None:
        out = run("dbqueue_pause", "mail", "sms", "--for", "10m")
        assert out.startswith("paused mail until ")
        mail, sms = pauses.in_force()
        assert sms.queue == "sms"
        assert mail.paused_by == "dbqueue_pause command"
        assert mail.until is not None
        assert mail.until - mail.paused_at == timedelta(minutes=10)
        assert run("dbqueue_resume", "mail") == "resumed mail"
        assert run("dbqueue_resume", "--all") == "resumed sms"

    def test_pause_until_resumed(self) -> None:
        assert run("dbqueue_pause", "mail") == "paused mail until resumed (dbqueue_resume)"
        assert QueuePause.objects.get(queue="mail").until is None

    @pytest.mark.parametrize("period", ["0m", "ten", "10", "-5m", "99999999999d"])
    def test_a_bad_period_is_a_command_error_and_pauses_nothing(self, period: str) -> None:
        with pytest.raises(CommandError, match="length of time"):
            run("dbqueue_pause", "mail", f"--for={period}")
        assert not QueuePause.objects.exists()

    def test_a_bad_queue_name_is_a_command_error_and_pauses_nothing(self) -> None:
        with pytest.raises(CommandError, match="invalid"):
            run("dbqueue_pause", "mail", "no spaces")
        assert not QueuePause.objects.exists()

    def test_resume_needs_queues_or_all_but_not_both(self) -> None:
        with pytest.raises(CommandError, match="or pass --all"):
            run("dbqueue_resume")
        with pytest.raises(CommandError, match="or pass --all"):
            run("dbqueue_resume", "mail", "--all")

    def test_resuming_a_queue_that_was_not_paused_exits_1(self) -> None:
        with pytest.raises(CommandError, match="No queue was paused") as raised:
            run("dbqueue_resume", "mail")
        assert raised.value.returncode == 1


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_the_claims_pause_check_sees_a_pause_committed_after_the_statement_began() -> None:
    """``dbqueue_paused_queues`` reads with a snapshot of its own, taken when it is called:
    the claim calls it after reading its clock for ``started_at``, so a pause that committed
    while the claim was under way is seen (a subquery, with the statement's snapshot, is not)."""

    def pause_meanwhile() -> None:
        wait_until(
            lambda: statement_running_elsewhere("MATERIALIZED (SELECT pg_sleep(1))"),
            WAIT,
            "the statement to be under way",
        )
        pauses.pause(["a"])  # commits at once (autocommit)

    thread = run_in_thread(pause_meanwhile)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH later AS MATERIALIZED (SELECT pg_sleep(1))
            SELECT dbqueue_paused_queues(clock_timestamp()),
                   EXISTS (SELECT 1 FROM dbqueue_queue_pause)
            FROM later
            """
        )
        paused, seen_by_subquery = cursor.fetchone()
    thread.join(WAIT)

    assert QueuePause.objects.filter(queue="a").exists()
    assert (paused, seen_by_subquery) == (["a"], False)
