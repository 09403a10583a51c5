"""``python manage.py demo`` runs end to end on SQLite, as the README's first command does.

The demo is a subprocess with the example project's own settings and a fresh
SQLite file, so it needs no PostgreSQL and runs whatever database the suite uses.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_TIMEOUT = 100  # seconds; the demo itself gives up after 60


def demo_env(database: Path) -> dict[str, str]:
    """This environment pointed at ``database``, without the test suite's settings module."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = f"sqlite:///{database}"
    return env


@pytest.mark.timeout(DEMO_TIMEOUT + 20)
def test_demo_runs_end_to_end_on_sqlite(tmp_path: Path) -> None:
    database = tmp_path / "demo.sqlite3"

    demo = subprocess.run(
        [sys.executable, "manage.py", "demo", "--orders", "20"],
        cwd=ROOT,
        env=demo_env(database),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
    )

    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output
    assert "jobs finished" in output
    header, *_ = (line for line in output.splitlines() if line.startswith("task "))
    assert header.split() == ["task", "jobs", "succeeded", "retried", "dead"]
    assert "password" in output
    assert "http://127.0.0.1:8000/admin/" in output
    # The exact command for the Python that ran the demo: no activated virtualenv needed.
    next_line = next(line for line in output.splitlines() if line.startswith("Next: "))
    python = Path(sys.executable)
    shown = python.relative_to(ROOT) if python.is_relative_to(ROOT) else python
    assert next_line.startswith(f"Next: {shown} manage.py runserver, then open "), next_line

    with closing(sqlite3.connect(database)) as db:
        unfinished = db.execute(
            "SELECT count(*) FROM dbqueue_job WHERE state IN ('ready', 'running')"
        ).fetchone()[0]
        dead = db.execute("SELECT count(*) FROM dbqueue_job WHERE state = 'dead'").fetchone()[0]
        retried = db.execute("SELECT count(*) FROM dbqueue_job WHERE attempts > 1").fetchone()[0]
        superusers = db.execute(
            "SELECT count(*) FROM auth_user WHERE is_superuser AND username = 'admin'"
        ).fetchone()[0]
    assert unfinished == 0
    assert dead >= 1
    assert retried >= 1
    assert superusers == 1
    total_row = next(line for line in output.splitlines() if line.startswith("total "))
    jobs, succeeded, retried_jobs, dead_jobs = (int(cell) for cell in total_row.split()[1:])
    assert (succeeded + dead_jobs, retried_jobs, dead_jobs) == (jobs, retried, dead)
