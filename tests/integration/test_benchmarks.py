"""``python -m benchmarks --quick`` runs end to end and reports every figure.

It creates and drops its own database on the test server (named after the
test database, ``<name>_bench_smoke``, so worktrees on one server never share
it) and starts worker processes; it checks that numbers come out, never how
fast they are. ``--compare pgqueuer`` runs only where the ``bench`` extra is
installed, and says so and skips the comparison where it is not; ``--pooler``
likewise where PgBouncer cannot run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from benchmarks.sizes import QUICK
from tests.e2e.servers import PgBouncer

ROOT = Path(__file__).resolve().parents[2]
#: A bound for a run that hangs, not a speed check: the quick run with ``--pooler`` took
#: 135 s on a slow 2-core machine while the rest of the suite ran beside it.
RUN_TIMEOUT = 300

BENCHMARKS = {
    "raw_insert_notify",
    "enqueue_autocommit",
    "raw_order_and_insert",
    "enqueue_with_order",
    "raw_inserts_one_transaction",
    "enqueue_one_atomic",
    "raw_multirow_insert",
    "enqueue_many",
    "enqueue_autocommit_prepared",
    "enqueue_with_order_prepared",
    "enqueue_one_atomic_prepared",
    "enqueue_many_prepared",
    "enqueue_autocommit_persistent",
    "raw_claim_complete_b1",
    "raw_claim_complete_b8",
    "raw_claim_complete_b50",
    "raw_claim_complete_b50_server_jit",
    "drain_1x1",
    "drain_1x8",
    "drain_1x8_persistent",
    "drain_1x32",
    "drain_2x8",
    "drain_2x32",
    "drain_2x32_one_command",
    "drain_1x32_async_commit",
    "raw_pickup_p50",
    "raw_pickup_p95",
    "raw_pickup_max",
    "pickup_p50",
    "pickup_p95",
    "pickup_max",
    "workflow_drain_plain",
    "workflow_drain_fan_in",
    "workflow_fan_in_ratio",
    "limits_drain_plain",
    "limits_drain_plain_2x16",
    "limits_drain_concurrency_32",
    "limits_concurrency_ratio",
    "limits_concurrency_ratio_2x16",
    "workflow_chain_handoff_p50",
    "workflow_chain_handoff_p95",
    "workflow_chain_handoff_max",
    "scheduled_lateness_p50",
    "scheduled_lateness_p95",
    "scheduled_lateness_max",
    "retry_lateness_p50",
    "retry_lateness_p95",
    "retry_lateness_max",
    "drain_backlog",
    "drain_slow_jobs",
    "drain_beside_running",
    "rss_before",
    "rss_after",
    *(
        f"admin_{page}_20k{layout}"
        for layout in ("", "_history")
        for page in (
            "list",
            "dead_filtered",
            "filter_state",
            "filter_queue",
            "filter_task",
            "filter_error_code",
            "search_id",
            "search_dedupe_key",
            "search_subject",
            "search_task",
            "search_fragment",
            "search_error_code",
            "search_error_word",
            "health",
        )
    ),
}

WHO = ("ours", "pgqueuer", "raw")
#: Who drains side by side: the same three, ours and pgqueuer also with large batches, and
#: raw also at each of ours' sizes.
DRAINERS = ("ours", "ours_wide", "pgqueuer", "pgqueuer_wide", "raw", "raw_ours", "raw_ours_wide")
#: What ``--compare pgqueuer`` adds: each drain's rate and its CPU per job (worker, PostgreSQL
#: and their total), each enqueue shape's rate, and the idle pickup percentiles, for ours,
#: pgqueuer and raw.
COMPARED = {
    *(
        f"compare_{figure}_{who}{side}"
        for who in DRAINERS
        for figure, side in (
            ("drain", ""),
            ("cpu", "_worker"),
            ("cpu", "_postgres"),
            ("cpu", "_total"),
        )
    ),
    *(
        f"compare_enqueue_{shape}_{who}"
        for who in (*WHO, "ours_prepared", "ours_statement")
        for shape in ("autocommit", "bulk")
    ),
    *(
        f"compare_{figure}_{who}{side}"
        for who in WHO
        for figure, side in (
            ("pickup", "_p50"),
            ("pickup", "_p95"),
            ("pickup", "_max"),
        )
    ),
}

#: What ``--pooler`` adds: the drains directly and through PgBouncer, and their CPU per job.
POOLER_DRAINS = {"pooler_drain_direct", "pooler_drain_pgbouncer"}
POOLER_CPU = {
    *(
        f"pooler_cpu_{how}_{side}"
        for how in ("direct", "pgbouncer")
        for side in ("worker", "postgres")
    ),
    "pooler_cpu_pgbouncer_pgbouncer",
}

pytestmark = [pytest.mark.postgresql, pytest.mark.e2e]


def smoke_database_url(purpose: str) -> str:
    """The test server, with a database of this test's own, named after the test database."""
    db = connection.settings_dict
    user = quote(db["USER"] or "postgres")
    password = f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else ""
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    name = f"{db['NAME'].removeprefix('test_')}_bench_{purpose}"
    return f"postgres://{user}{password}@{host}:{port}/{name}"


def quick_run(output: Path, *options: str, purpose: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks", "--quick", "--json", str(output), *options]
    command += ["--database-url", smoke_database_url(purpose)]
    return subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


@pytest.mark.timeout(RUN_TIMEOUT + 20)
def test_quick_run_reports_every_benchmark_with_a_positive_figure(tmp_path: Path) -> None:
    """With ``--pooler``: its drains too where PgBouncer runs, else the reason it is skipped."""
    # Imported here: benchmarks.latency imports the benchmark's tasks.
    from benchmarks.latency import WARM_UP

    output = tmp_path / "results.json"
    run = quick_run(output, "--pooler", purpose="smoke")

    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.startswith("benchmark")
    results = json.loads(output.read_text())["results"]
    why = PgBouncer.missing()
    if why is None:
        assert set(results) == BENCHMARKS | POOLER_DRAINS | POOLER_CPU
    else:
        assert f"--pooler: {why}" in run.stderr
        assert set(results) == BENCHMARKS
    # CPU per job is a difference of clock ticks: on a quick run it may round to zero.
    figures = {key: result["value"] for key, result in results.items() if key not in POOLER_CPU}
    assert all(figure > 0 for figure in figures.values()), figures
    backlog = results["drain_backlog"]["details"]
    assert len(backlog["jobs_per_second_by_quarter"]) == 4, backlog
    assert all(rate > 0 for rate in backlog["jobs_per_second_by_quarter"]), backlog
    assert backlog["autovacuums_during_drain"] >= 0, backlog
    # The fan-in drain ran the whole group and its callback, beside a plain drain as large.
    fan_in = results["workflow_drain_fan_in"]
    assert fan_in["n"] == results["workflow_drain_plain"]["n"] + 1 == QUICK.fan_in_jobs + 1
    assert fan_in["details"]["succeeded"] == fan_in["n"], fan_in
    assert len(fan_in["details"]["rounds"]) == QUICK.rounds, fan_in
    # Every step of the chain but the first hands off from its predecessor.
    assert results["workflow_chain_handoff_p50"]["n"] == QUICK.chain_steps - 1 - WARM_UP
    # The limited drain ran every job, under its limit, beside two plain drains as large.
    limited = results["limits_drain_concurrency_32"]
    assert limited["details"]["succeeded"] == limited["n"] == QUICK.fan_in_jobs, limited


@pytest.mark.timeout(RUN_TIMEOUT + 40)
def test_quick_compare_enqueues_drains_and_picks_up_side_by_side_with_pgqueuer(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pgqueuer", reason="the bench extra is not installed")
    pytest.importorskip("asyncpg", reason="the bench extra is not installed")
    output = tmp_path / "results.json"
    side_by_side = ("compare_enqueue.run", "compare.run", "compare_pickup.run")
    only = [option for step in side_by_side for option in ("--only", step)]
    run = quick_run(output, "--compare", "pgqueuer", *only, purpose="compare")

    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(output.read_text())["results"]
    assert set(results) == COMPARED
    drains = {who: results[f"compare_drain_{who}"] for who in DRAINERS}
    assert all(drain["value"] > 0 for drain in drains.values()), drains
    assert all(drain["n"] == QUICK.compare_jobs for drain in drains.values()), drains
    figures = {key: results[key]["value"] for key in COMPARED}
    assert all(figure > 0 for figure in figures.values()), figures
    assert results["compare_enqueue_bulk_pgqueuer"]["n"] == 1_000
    assert "compare: pgqueuer" in run.stdout
    assert "compare: enqueue one per autocommit transaction, pgqueuer" in run.stdout


def test_compare_says_how_to_install_pgqueuer_when_it_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Imported here: benchmarks.compare declares the benchmark's tasks on import.
    from benchmarks import compare

    monkeypatch.setitem(sys.modules, "pgqueuer", None)

    why = compare.missing()

    assert why is not None
    assert "pgqueuer is not installed" in why
    assert "pip install -e '.[bench]'" in why


def test_only_refuses_a_step_the_run_does_not_have_and_names_those_it_has(
    tmp_path: Path,
) -> None:
    run = quick_run(tmp_path / "results.json", "--only", "nope.run", purpose="only")

    assert run.returncode != 0
    assert "--only nope.run: no such step here" in run.stderr
    assert "drain.run_backlog" in run.stderr
    assert not (tmp_path / "results.json").exists()


@pytest.mark.timeout(RUN_TIMEOUT + 20)
def test_purge_backlog_runs_on_demand_only_and_times_the_lease_recovery_and_the_purge(
    tmp_path: Path,
) -> None:
    """``--purge-backlog`` adds its step at the end; a run without it never has the step."""
    # Imported here: benchmarks.suite imports the benchmark's tasks.
    from benchmarks import purge_backlog, suite

    assert purge_backlog.run not in suite.plan()
    assert suite.plan(with_purge_backlog=True)[-1] is purge_backlog.run
    output = tmp_path / "results.json"
    only = ("--only", "purge_backlog.run")
    run = quick_run(output, "--purge-backlog", *only, purpose="purge")

    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(output.read_text())["results"]
    assert set(results) == {"purge_backlog_lease_recovery", "purge_backlog_rate"}
    recovery = results["purge_backlog_lease_recovery"]
    assert recovery["value"] > 0
    assert recovery["n"] == QUICK.purge_backlog_rows
    assert recovery["details"]["finished_rows_left"] > 0
    purge = results["purge_backlog_rate"]
    assert purge["value"] > 0
    assert purge["n"] == QUICK.purge_backlog_rows
    assert purge["details"]["wal_bytes"] > 0


@pytest.mark.timeout(RUN_TIMEOUT + 20)
def test_large_table_runs_on_demand_only_and_reads_the_drain_among_finished_rows_by_the_empty_one(
    tmp_path: Path,
) -> None:
    """``--large-table`` adds its step at the end: the upgrade moved every finished job to
    history with no ACCESS EXCLUSIVE lock on dbqueue_job, both drains ran every job, the one
    among finished rows is read against the empty table's, the table's size counts what the
    drain left, and retention deleted every row past it both ways."""
    # Imported here: benchmarks.suite imports the benchmark's tasks.
    from benchmarks import large_table, suite

    assert large_table.run not in suite.plan()
    assert suite.plan(with_large_table=True)[-1] is large_table.run
    output = tmp_path / "results.json"
    run = quick_run(output, "--large-table", "--only", "large_table.run", purpose="large")

    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(output.read_text())["results"]
    assert set(results) == {
        "large_table_upgrade",
        "large_table_drain_empty",
        "large_table_drain",
        "large_table_size",
        "large_table_retention",
        "large_table_retention_drop",
    }
    upgrade = results["large_table_upgrade"]["details"]
    assert upgrade["finished_left_in_dbqueue_job"] == 0
    assert upgrade["in_history"] == QUICK.large_finished
    assert upgrade["rows"] == QUICK.large_finished + QUICK.large_ready
    assert upgrade["longest_access_exclusive_on_dbqueue_job_s"] == 0
    assert upgrade["progress"][-1].startswith(f"done: moved {QUICK.large_finished} of ")
    assert upgrade["vacuum_seconds"] > 0
    empty, among = results["large_table_drain_empty"], results["large_table_drain"]
    assert empty["details"]["finished_rows"] == 0
    assert among["details"]["finished_rows"] == QUICK.large_finished
    for drained in (empty, among):
        assert drained["details"]["succeeded"] == drained["n"] == QUICK.large_ready, drained
        assert all(rate > 0 for rate in drained["details"]["jobs_per_second_by_quarter"])
    assert among["raw"] == "large_table_drain_empty"
    assert among["ratio_to_raw"] == pytest.approx(among["value"] / empty["value"])
    size = results["large_table_size"]
    assert size["details"]["drained"] == size["details"]["finished_rows"] == QUICK.hot_drained
    assert size["details"]["unfinished_rows"] == 0
    parts = ("table_mib", "indexes_mib")
    assert size["value"] == pytest.approx(sum(size["details"][part] for part in parts))
    for key in ("large_table_retention", "large_table_retention_drop"):
        retention = results[key]
        assert retention["details"]["deleted"] == retention["n"] == QUICK.retention_rows
        assert retention["value"] > 0
        assert retention["details"]["wal_bytes"] > 0
    assert results["large_table_retention_drop"]["details"]["move_seconds"] > 0


#: What ``--tracing`` adds: both drains, their ratio, both enqueue rates and the hook's costs.
TRACING = {
    "tracing_drain_plain",
    "tracing_drain_traced",
    "tracing_drain_ratio",
    "tracing_enqueue_plain",
    "tracing_enqueue_traced",
    "tracing_enqueue_cost",
    "tracing_hook_call",
}


@pytest.mark.timeout(RUN_TIMEOUT + 20)
def test_quick_tracing_drains_and_enqueues_with_and_without_the_middleware(
    tmp_path: Path,
) -> None:
    output = tmp_path / "results.json"
    run = quick_run(output, "--tracing", "--only", "tracing.run", purpose="tracing")

    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(output.read_text())["results"]
    assert set(results) == TRACING
    # The enqueue cost is a difference of two rates: on a quick run it may come out negative.
    figures = {key: results[key]["value"] for key in TRACING - {"tracing_enqueue_cost"}}
    assert all(figure > 0 for figure in figures.values()), figures
    for drain in ("plain", "traced"):
        assert results[f"tracing_drain_{drain}"]["details"]["worker_cpu_us_per_job"] > 0
