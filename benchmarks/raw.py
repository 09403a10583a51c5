"""The raw ceiling: the protocol's own SQL and plain inserts, driven by psycopg alone.

Raw connections use psycopg's defaults (server-side parameters; a statement
run five times is prepared) with JIT off and generic plans for prepared
statements, as the worker's connections have: compiling the claim statement,
or planning it afresh on every call, can cost more than running it, and a
ceiling should not pay for that. The claim
and complete statements are the package's own, taken by name from
``django_dbqueue.sql`` at run time and given parameters in its convention
(lists as JSON text).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks.database import Connection
from benchmarks.tasks import noop
from django_dbqueue import conf
from django_dbqueue.leases import claim_params
from django_dbqueue.sql import statements

WORKER_ID = "raw"

INSERT_JOB = """
INSERT INTO dbqueue_job (
    queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts, lease_token,
    lease_seconds, created_at, last_worker_id, last_error_code, last_error, errors
) VALUES (
    %(queue)s, %(task)s, %(args)s, %(kwargs)s, 'ready', 0, statement_timestamp(), 0,
    %(max_attempts)s, 0, %(lease_seconds)s, statement_timestamp(), '', '', '', '[]'::jsonb
)
RETURNING id
"""

#: One round trip: the row and its wake-up in one statement.
INSERT_JOB_AND_NOTIFY = f"""
WITH inserted AS ({INSERT_JOB})
SELECT id, pg_notify(%(channel)s, %(queue)s) FROM inserted
"""

#: One statement for a whole batch, one wake-up for all of it.
INSERT_JOBS = """
WITH inserted AS (
    INSERT INTO dbqueue_job (
        queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts,
        lease_token, lease_seconds, created_at, last_worker_id, last_error_code, last_error,
        errors
    )
    SELECT %(queue)s, %(task)s, call.args, call.kwargs, 'ready', 0, statement_timestamp(), 0,
           %(max_attempts)s, 0, %(lease_seconds)s, statement_timestamp(), '', '', '',
           '[]'::jsonb
    FROM unnest(%(args)s::jsonb[], %(kwargs)s::jsonb[]) AS call(args, kwargs)
    RETURNING id
)
SELECT id, (SELECT pg_notify(%(channel)s, %(queue)s)) FROM inserted
"""

INSERT_ORDER = "INSERT INTO testapp_order (state, total) VALUES ('new', 0) RETURNING id"

NOTIFY = "SELECT pg_notify(%(channel)s, %(queue)s)"


def connect(url: str, *, jit: bool = False) -> Connection:
    """An autocommit raw connection; JIT off and generic plans unless ``jit`` (then as the
    server says)."""
    options = "" if jit else "-c jit=off -c plan_cache_mode=force_generic_plan"
    return psycopg.connect(url, autocommit=True, options=options)


def connect_as_django(url: str) -> Connection:
    """An autocommit connection as Django's defaults make one: client-side binding
    (psycopg's ``ClientCursor``, values written into the statement's text), nothing
    prepared."""
    return psycopg.connect(
        url, autocommit=True, cursor_factory=psycopg.ClientCursor, prepare_threshold=None
    )


def job_params() -> dict[str, Any]:
    """Column values of a no-op job as ``enqueue`` would write them."""
    cfg = conf.get()
    return {
        "queue": cfg.default_queue,
        "task": noop.name,
        "args": Jsonb([]),
        "kwargs": Jsonb({}),
        "max_attempts": cfg.max_attempts,
        "lease_seconds": int(cfg.lease_seconds),
        "channel": cfg.notify_channel,
    }


def insert_each(conn: Connection, count: int) -> None:
    """``count`` jobs, each its own autocommit statement with its ``pg_notify``."""
    params = job_params()
    for _ in range(count):
        conn.execute(INSERT_JOB_AND_NOTIFY, params).fetchall()


def insert_each_with_order(conn: Connection, count: int) -> None:
    """``count`` transactions, each inserting a business row and its job (with the notify)."""
    params = job_params()
    for _ in range(count):
        with conn.transaction():
            conn.execute(INSERT_ORDER).fetchall()
            conn.execute(INSERT_JOB_AND_NOTIFY, params).fetchall()


def insert_in_one_transaction(conn: Connection, count: int) -> None:
    """``count`` single-row inserts in one transaction, then one notify."""
    params = job_params()
    with conn.transaction():
        for _ in range(count):
            conn.execute(INSERT_JOB, params).fetchall()
        conn.execute(NOTIFY, params)


def insert_many(conn: Connection, count: int) -> None:
    """``count`` jobs in one multi-row insert with one notify."""
    params = {**job_params(), "args": [Jsonb([])] * count, "kwargs": [Jsonb({})] * count}
    conn.execute(INSERT_JOBS, params).fetchall()


def claim(conn: Connection, limit: int) -> list[tuple[Any, ...]]:
    """Run the package's ``claim`` statement for every queue, as ``runworkers`` does."""
    params = claim_params(None, WORKER_ID, limit)
    return conn.execute(statements("postgresql")["claim"], params).fetchall()


def complete(conn: Connection, claimed: list[tuple[Any, ...]]) -> None:
    """Run the package's ``complete`` statement for claimed rows (``id, lease_token, ...``)."""
    rows = [
        {"job_id": row[0], "lease_token": row[1], "worker_id": WORKER_ID, "result": None}
        for row in claimed
    ]
    conn.execute(
        statements("postgresql")["complete"], {"rows": json.dumps(rows), "settles": False}
    ).fetchall()


def claim_and_complete(conn: Connection, batch: int) -> int:
    """Claim ``batch`` jobs, complete them, repeat until none is due; return how many ran."""
    done = 0
    while claimed := claim(conn, batch):
        complete(conn, claimed)
        done += len(claimed)
    return done
