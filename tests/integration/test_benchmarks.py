"""``python -m benchmarks --quick`` runs end to end and reports every figure.

It creates and drops its own database (``dbqueue_bench_smoke``) on the test
server and starts worker processes; it checks that numbers come out, never
how fast they are.
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

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 180

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
    "drain_1x32_async_commit",
    "raw_pickup_p50",
    "raw_pickup_p95",
    "raw_pickup_max",
    "pickup_p50",
    "pickup_p95",
    "pickup_max",
    "scheduled_lateness_p50",
    "scheduled_lateness_p95",
    "scheduled_lateness_max",
    "retry_lateness_p50",
    "retry_lateness_p95",
    "retry_lateness_max",
    "drain_backlog",
    "rss_before",
    "rss_after",
    "admin_list_20k",
    "admin_dead_filtered_20k",
    "admin_health_20k",
}

pytestmark = [pytest.mark.postgresql, pytest.mark.e2e]


def smoke_database_url() -> str:
    """The test server, with a database of the smoke test's own."""
    db = connection.settings_dict
    user = quote(db["USER"] or "postgres")
    password = f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else ""
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    return f"postgres://{user}{password}@{host}:{port}/dbqueue_bench_smoke"


@pytest.mark.timeout(RUN_TIMEOUT + 20)
def test_quick_run_reports_every_benchmark_with_a_positive_figure(tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    command = [sys.executable, "-m", "benchmarks", "--quick", "--json", str(output)]
    command += ["--database-url", smoke_database_url()]
    run = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )

    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.startswith("benchmark")
    results = json.loads(output.read_text())["results"]
    assert set(results) == BENCHMARKS
    figures = {key: result["value"] for key, result in results.items()}
    assert all(figure > 0 for figure in figures.values()), figures
