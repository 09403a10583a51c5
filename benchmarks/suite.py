"""One benchmark run: create the database, measure everything in order, drop it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import django
import psycopg
from django.db import connections

from benchmarks import (
    admin_pages,
    compare,
    compare_enqueue,
    compare_pickup,
    database,
    drain,
    enqueue,
    large_table,
    latency,
    lateness,
    limits,
    memory,
    pooler,
    purge_backlog,
    workflows,
)
from benchmarks.results import Results
from benchmarks.session import Session
from benchmarks.sizes import Sizes
from benchmarks.workers import ROOT

#: In this order: the in-process and raw figures first, the long drains, then the admin pages
#: on big tables (they rebuild the job table). The workflow steps follow the drains and the
#: pickup latency they are read against.
STEPS = (
    enqueue.run,
    drain.run_raw,
    drain.run,
    latency.run,
    workflows.run_fan_in,
    workflows.run_chain,
    limits.run,
    lateness.run,
    drain.run_backlog,
    drain.run_slow_jobs,
    drain.run_beside_running,
    memory.run,
    admin_pages.run,
)


Step = Callable[[Session], None]


def plan(
    *,
    with_pgqueuer: bool = False,
    with_pooler: bool = False,
    with_purge_backlog: bool = False,
    with_large_table: bool = False,
    with_tracing: bool = False,
) -> list[Step]:
    """The steps of a run, in order.

    ``with_pgqueuer`` adds the side-by-side enqueue, drain and pickup with pgqueuer,
    each right after ours, ``with_pooler`` the drains directly and through
    PgBouncer right after our drains, ``with_tracing`` the drains and enqueues
    with and without OpenTelemetry tracing right after our drains (the otel
    extra), ``with_purge_backlog`` the lease recovery during a large purge
    and ``with_large_table`` the upgrade of a table of ten million finished jobs, the
    drains among them, the claimable table's size and the retention of five million
    rows by batched deletes and by a drop, at the end.
    """
    steps = list(STEPS)
    if with_purge_backlog:
        steps.append(purge_backlog.run)
    if with_large_table:
        steps.append(large_table.run)
    if with_tracing:
        # The otel extra: imported only when asked for (``tracing.missing()`` says whether).
        from benchmarks import tracing

        steps.insert(steps.index(drain.run) + 1, tracing.run)
    if with_pooler:
        steps.insert(steps.index(drain.run) + 1, pooler.run)
    if with_pgqueuer:
        for ours, side_by_side in (
            (enqueue.run, compare_enqueue.run),
            (drain.run, compare.run),
            (latency.run, compare_pickup.run),
        ):
            steps.insert(steps.index(ours) + 1, side_by_side)
    return steps


def step_name(step: Step) -> str:
    """How ``--only`` names a step: ``compare.run``, ``drain.run_backlog``."""
    return f"{step.__module__.removeprefix('benchmarks.')}.{step.__name__}"


def run(url: str, sizes: Sizes, steps: list[Step]) -> tuple[Results, dict[str, Any]]:
    """Measure ``steps`` (``plan``) on a fresh database at ``url``: the results, what ran them."""
    started = time.monotonic()
    database.create(url)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="dbqueue-bench-") as logs,
            database.connect(url) as harness,
        ):
            database.migrate()
            session = Session(url, sizes, Path(logs), harness)
            facts: dict[str, Any] = {"sizes": asdict(sizes), "environment": environment(harness)}
            for step in steps:
                print(step_name(step), file=sys.stderr, flush=True)
                step_started = time.monotonic()
                step(session)
                took = time.monotonic() - step_started
                print(f"  ({took:.1f} s)", file=sys.stderr, flush=True)
    finally:
        connections.close_all()
        database.drop(url)
    facts["duration_seconds"] = time.monotonic() - started
    facts["load_average_at_end"] = os.getloadavg()
    return session.results, facts


def environment(harness: database.Connection) -> dict[str, Any]:
    """What the figures depend on: machine, versions, server settings, code revision."""
    return {
        "cpus": os.cpu_count(),
        # Other work on the machine moves every figure; this says how busy it was.
        "load_average_at_start": os.getloadavg(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "postgresql": database.server_facts(harness),
        "git": revision(),
    }


def revision() -> dict[str, object]:
    """The commit measured, and whether the working tree had uncommitted changes."""
    try:
        head = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"commit": head, "uncommitted_changes": dirty}


def git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()
