"""Real ``runworkers`` subprocesses against the test database.

Every e2e test commits its data (``transaction=True``) so the workers see it,
waits with deadlines only, and leaves no process behind: teardown SIGKILLs
whatever still runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.e2e.servers import PgBouncer
from tests.testapp.models import Gate
from tests.waiting import WAIT, wait_until

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is e2e (and needs PostgreSQL unless its markers say otherwise)."""
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.e2e)


def listening(channel: str) -> bool:
    """Whether some session of this database is LISTENing on ``channel`` (or, through a
    pooler, some server connection last ran that ``LISTEN``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND query = %s",
            [f'LISTEN "{channel}"'],
        )
        (count,) = cursor.fetchone()
    return bool(count)


def open_gate(name: str) -> None:
    Gate.objects.update_or_create(name=name, defaults={"is_open": True})


class WorkerProcess:
    """A ``manage.py runworkers`` subprocess with its log captured to a file."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "runworkers", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = WAIT) -> None:
        wait_until(lambda: text in self.log(), timeout, what=f"{text!r} in the worker log")

    def send(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def wait(self, timeout: float = WAIT) -> int:
        """The exit code; fails the test if the process is still running after ``timeout``."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {self.pid} still running after {timeout}s:\n{self.log()}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT)
        self._log.close()


@pytest.fixture
def worker_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """Environment pointing a subprocess at this test run's database.

    Workers run against PostgreSQL; tests marked ``locking`` (vendor-neutral
    behaviour) also run against MySQL/MariaDB, tests marked ``sqlite`` against
    the SQLite test database's file.
    """
    db = connection.settings_dict
    host, port = db["HOST"] or "127.0.0.1", db["PORT"]
    if connection.vendor == "postgresql":
        url = f"postgres://{db['USER']}@{host}:{port or 5432}/{db['NAME']}"
    elif connection.vendor == "mysql" and request.node.get_closest_marker("locking"):
        url = f"mysql://{db['USER']}@{host}:{port or 3306}/{db['NAME']}"
    elif connection.vendor == "sqlite" and request.node.get_closest_marker("sqlite"):
        url = f"sqlite:///{db['NAME']}"
    else:
        pytest.skip(f"these worker processes do not run against {connection.vendor}")
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.e2e.settings",
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture
def start_worker(
    worker_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """``start_worker("--concurrency", "4", settings={"LEASE_SECONDS": 2})`` starts a worker.

    ``env`` adds environment variables (``DATABASE_URL`` to point it elsewhere).
    """
    started: list[WorkerProcess] = []

    def start(
        *args: str, settings: dict[str, Any] | None = None, env: dict[str, str] | None = None
    ) -> WorkerProcess:
        env = {**worker_env, **(env or {}), "DBQUEUE_OVERRIDES": json.dumps(settings or {})}
        worker = WorkerProcess(list(args), env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


#: Where Debian's ``faketime`` package puts the library (``.ci/run`` installs it).
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.fixture
def faketime_env() -> Callable[[str], dict[str, str]]:
    """``faketime_env("-10m")``: environment that runs a worker with its clock that far off.

    libfaketime shifts the wall clock only (monotonic time stays true, as it
    would on a host whose clock is merely set wrong); the database server's
    clock is untouched.
    """
    if not LIBFAKETIME.exists():
        pytest.skip(f"libfaketime is not installed ({LIBFAKETIME}): apt-get install faketime")

    def env(offset: str) -> dict[str, str]:
        return {
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    return env


@pytest.fixture
def start_pgbouncer() -> Iterator[Callable[..., PgBouncer]]:
    """``start_pgbouncer(pool_size=4, max_prepared_statements=None)``: one in front of the
    test database's server, stopped at teardown."""
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL only")
    started: list[PgBouncer] = []

    def start(**options: Any) -> PgBouncer:
        port = int(connection.settings_dict["PORT"] or 5432)
        started.append(PgBouncer.start(upstream_port=port, **options))
        return started[-1]

    yield start
    for bouncer in started:
        bouncer.stop()


@pytest.fixture
def pgbouncer(start_pgbouncer: Callable[..., PgBouncer]) -> PgBouncer:
    return start_pgbouncer()


def pooled_url(bouncer: PgBouncer, **options: str) -> str:
    """The test database, reached through ``bouncer`` (``options`` go in the URL's query)."""
    return bouncer.url(connection.settings_dict["NAME"], **options)
