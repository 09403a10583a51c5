"""Through PgBouncer in transaction mode: enqueue, workers and what they leave behind.

Each test starts Debian's ``pgbouncer`` (``tests.e2e.servers.PgBouncer``) in
front of the test database; enqueue runs in a subprocess whose only database
is the pool, and workers reach the queue through it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection

from django_dbqueue.models import Job
from tests.e2e.conftest import ROOT
from tests.e2e.servers import PgBouncer

e2e_db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pgbouncer() -> Iterator[PgBouncer]:
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL only")
    bouncer = PgBouncer.start(upstream_port=int(connection.settings_dict["PORT"] or 5432))
    yield bouncer
    bouncer.stop()


def pooled_url(bouncer: PgBouncer) -> str:
    """The test database, reached through ``bouncer``."""
    return bouncer.url(connection.settings_dict["NAME"])


def run_through(url: str, code: str, settings: str = "{}") -> str:
    """Run ``code`` in a fresh Django process whose database is ``url``; its stdout."""
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.e2e.settings",
        "DBQUEUE_OVERRIDES": settings,
        "PYTHONPATH": str(ROOT),
    }
    script = f"import django\ndjango.setup()\n{code}"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


ENQUEUE_COMMITTED_AND_ROLLED_BACK = """
from django.db import transaction
from tests.jobs.e2e_tasks import recorded

with transaction.atomic():
    kept = recorded.enqueue(label="committed")
try:
    with transaction.atomic():
        lost = recorded.enqueue(label="rolled-back")
        print(lost.pk)
        raise RuntimeError("roll back")
except RuntimeError:
    pass
print(kept.pk)
"""


@e2e_db
def test_enqueue_inside_atomic_through_pgbouncer_commits_and_rolls_back_as_direct(
    pgbouncer: PgBouncer,
) -> None:
    lost, kept = map(
        int, run_through(pooled_url(pgbouncer), ENQUEUE_COMMITTED_AND_ROLLED_BACK).split()
    )

    assert "login attempt" in pgbouncer.log()  # The subprocess did come through the pool.
    assert Job.objects.filter(pk=kept, kwargs={"label": "committed"}).exists()
    assert not Job.objects.filter(pk=lost).exists()
