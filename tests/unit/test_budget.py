"""The worker's connection budget: a fixed set of its own, whatever ``--concurrency`` says."""

from __future__ import annotations

import pytest

from django_dbqueue.worker.budget import ConnectionBudget, connection_budget


def budget(
    concurrency: int = 32,
    *,
    reaper: bool = True,
    periodic: bool = False,
    listen: str | None = "default",
    listen_database: str | None = None,
    conn_max_age: float | None = 0,
    metrics: bool = False,
) -> ConnectionBudget:
    """A typical PostgreSQL worker's budget, but for what the test changes."""
    return connection_budget(
        concurrency,
        reaper=reaper,
        periodic=periodic,
        listen=listen,
        listen_database=listen_database,
        conn_max_age=conn_max_age,
        metrics=metrics,
    )


@pytest.mark.parametrize("concurrency", [1, 32, 500])
def test_own_connections_do_not_grow_with_concurrency(concurrency: int) -> None:
    assert budget(concurrency).own_total == 5
    assert budget(concurrency).most == 5 + concurrency + 1


def test_each_thread_that_holds_one_is_named_in_start_up_order() -> None:
    assert budget(periodic=True).own == (
        ("claim", 1),
        ("complete", 1),
        ("heartbeat", 1),
        ("reaper", 1),
        ("periodic", 1),
        ("listen", 1),
    )


def test_no_reaper_no_schedules_and_no_listen_leave_claim_complete_and_heartbeat() -> None:
    lean = budget(reaper=False, periodic=False, listen=None)
    assert lean.own == (("claim", 1), ("complete", 1), ("heartbeat", 1))
    assert lean.own_total == 3


def test_the_line_states_own_connections_and_the_task_rule() -> None:
    assert budget().line() == (
        "connection budget: 5 own (claim 1, complete 1, heartbeat 1, reaper 1, listen 1) "
        "+ 1 per job while its task code uses the database "
        "(CONN_MAX_AGE=0: given back when the job returns), + 1 while job_finished receivers "
        "do; at most 38"
    )


def test_the_line_says_when_listen_goes_to_listen_database() -> None:
    line = budget(listen="direct", listen_database="direct").line()
    assert "(claim 1, complete 1, heartbeat 1, reaper 1, listen 1 via LISTEN_DATABASE)" in line


@pytest.mark.parametrize("age", [600, None])
def test_with_persistent_connections_the_line_says_task_connections_are_kept(
    age: float | None,
) -> None:
    line = budget(concurrency=8, conn_max_age=age).line()
    assert f"(CONN_MAX_AGE={age}: kept from job to job, so up to 8 more)" in line


def test_a_metrics_server_adds_one_during_each_scrape() -> None:
    served = budget(metrics=True)
    assert served.own_total == 5
    assert "+ 1 during each metrics scrape; at most 39" in served.line()
