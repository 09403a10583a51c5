"""Tasks that misuse their database connection, for the connection-hygiene tests.

``misbehave`` leaves something behind on the slot's connection (an open
transaction or session state); ``write_and_report`` is the well-behaved job
that runs next on the same slot: it commits an ``Execution`` row labelled with
the session state it found, so a test reads what the next job saw and whether
its write committed (``write_row``: the same on any vendor, unlabelled).
``fork_and_return`` forks inside task code.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.db import connection, transaction

from django_dbqueue import JobContext, task
from tests.jobs.e2e_tasks import GATE_TIMEOUT
from tests.testapp.models import Execution

#: The advisory lock key ``misbehave("advisory_lock")`` takes and never releases.
ADVISORY_KEY = 726_001


@task(max_attempts=1, priority=10, takes_context=True)
def misbehave(context: JobContext, kind: str, role: str = "") -> str:
    """Leave ``kind`` behind on this thread's connection and return normally.

    ``atomic``, ``begin`` (the vendor's raw statement) and ``autocommit_off``
    leave a transaction open with a row written in it (vendor-neutral);
    ``atomic_closed`` also closes the connection inside the block it never
    leaves; ``atomic_raises`` leaves its block open and raises ``ValueError``; ``set_role``,
    ``search_path`` and ``advisory_lock`` change the session (PostgreSQL).
    """
    if kind in ("atomic", "atomic_raises", "atomic_closed"):
        transaction.atomic().__enter__()
    elif kind == "autocommit_off":
        transaction.set_autocommit(False)
    elif kind == "begin":
        with connection.cursor() as cursor:
            cursor.execute("START TRANSACTION" if connection.vendor == "mysql" else "BEGIN")
    if kind in ("atomic", "atomic_raises", "atomic_closed", "autocommit_off", "begin"):
        Execution.objects.create(job_id=context.job_id, attempt=context.attempt, label=kind)
        if kind == "atomic_closed":
            connection.close()  # Django then keeps the wrapper unusable until the block exits
        if kind == "atomic_raises":
            raise ValueError("raised inside the atomic block it entered")
        return kind
    with connection.cursor() as cursor:
        if kind == "set_role":
            cursor.execute(f'SET ROLE "{role}"')
        elif kind == "search_path":
            cursor.execute("SET search_path TO pg_catalog")
        elif kind == "advisory_lock":
            cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_KEY])
        else:
            raise ValueError(f"unknown kind {kind!r}")
    return kind


@task(max_attempts=1, takes_context=True)
def write_and_report(context: JobContext) -> str:
    """Commit an ``Execution`` row labelled ``<user>|<search_path>|<advisory locks held>``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, current_setting('search_path'), "
            "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND pid = pg_backend_pid())"
        )
        user, search_path, locks = cursor.fetchone()
    label = f"{user}|{search_path}|{locks}"
    Execution.objects.create(job_id=context.job_id, attempt=context.attempt, label=label)
    return label


@task(max_attempts=1, takes_context=True)
def write_row(context: JobContext) -> int:
    """Commit an ``Execution`` row (any vendor); return its id."""
    return Execution.objects.create(job_id=context.job_id, attempt=context.attempt).pk


@task(max_attempts=1)
def fork_and_return(folder: str, child_raises: bool = False) -> str:
    """Fork; the child writes its pid to ``folder/child`` and returns (or raises) at once.

    The parent returns ``"parent"`` once the child wrote its pid (within ``GATE_TIMEOUT``).
    """
    pid = os.fork()
    if pid == 0:
        (Path(folder) / "child.tmp").write_text(str(os.getpid()))
        (Path(folder) / "child.tmp").rename(Path(folder) / "child")
        if child_raises:
            raise RuntimeError("the child raised")
        return "child"
    deadline = time.monotonic() + GATE_TIMEOUT
    while not (Path(folder) / "child").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the child {pid} wrote no pid within {GATE_TIMEOUT}s")
        time.sleep(0.01)
    return "parent"
