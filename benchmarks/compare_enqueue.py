"""Enqueue side by side with pgqueuer (``--compare pgqueuer``): interleaved rounds, medians.

Each round times, for each shape in turn, the raw psycopg insert, the package
and pgqueuer's ``Queries.enqueue`` (asyncpg), each on an emptied table after
a warm-up: one job per autocommit transaction (``sizes.enqueue_one`` jobs),
and bulk calls of ``PER_CALL`` jobs (``sizes.enqueue_bulk`` jobs: raw
multi-row inserts, ``enqueue_many``, pgqueuer's batch ``enqueue``). The
figures are the medians of ``sizes.rounds`` rounds, so other work on the
machine weighs on all alike. Ours runs on Django's defaults
(``CONN_MAX_AGE=0``, no prepared statements), and again with prepared
statements allowed (``OPTIONS["prepare_threshold"]``), as raw psycopg and
asyncpg prepare theirs. Ours' statement alone is the statement and parameters
the package sent for the same call, sent again and again over a connection
as Django's defaults make one (``raw.connect_as_django``), with no package
Python around it: the ceiling of any enqueue on Django's defaults through
that statement.
"""

from __future__ import annotations

import functools
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from django.db import connections

from benchmarks import database, enqueue, raw
from benchmarks.database import Connection
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.tasks import noop

#: Jobs per bulk call, for all three.
PER_CALL = 1_000


def enqueue_many_in_calls(count: int) -> None:
    """``count`` jobs as ``enqueue_many`` calls of ``PER_CALL`` (the last one shorter)."""
    for start in range(0, count, PER_CALL):
        noop.enqueue_many([((), {})] * min(PER_CALL, count - start))


def insert_many_in_calls(conn: Connection, count: int) -> None:
    """``count`` jobs as raw multi-row inserts of ``PER_CALL`` rows."""
    for start in range(0, count, PER_CALL):
        raw.insert_many(conn, min(PER_CALL, count - start))


def sent(action: Callable[[int], object], jobs: int) -> tuple[str, Mapping[str, Any]]:
    """The statement and parameters that ``action(jobs)`` sent last on Django's default
    connection (which ``action`` uses), once a warm-up chose its statement."""
    action(enqueue.WARM_UP)
    statements: list[tuple[str, Mapping[str, Any]]] = []

    def record(
        execute: Callable[..., object], sql: str, params: Mapping[str, Any], *rest: object
    ) -> object:
        statements.append((sql, params))
        return execute(sql, params, *rest)

    with connections["default"].execute_wrapper(record):
        action(jobs)
    return statements[-1]


def repeated(statement: tuple[str, Mapping[str, Any]], conn: Connection, count: int) -> None:
    """``statement`` sent ``count`` times (bulk: each sends ``PER_CALL`` jobs) on ``conn``."""
    sql, params = statement
    for _ in range(count):
        conn.execute(sql, params).fetchall()


@dataclass(frozen=True)
class Shape:
    """One way to enqueue, done by raw SQL, by the package and by pgqueuer."""

    key: str
    label: str
    ours: Callable[[int], object]
    raw: Callable[[Connection, int], object]
    #: pgqueuer: ``(url, count) -> seconds``.
    pgqueuer: Callable[[str, int], float]
    bulk: bool = False


def shapes() -> tuple[Shape, ...]:
    from benchmarks import pgq  # the bench extra: imported only when comparing

    return (
        Shape(
            "autocommit",
            "one per autocommit transaction",
            enqueue.one_per_transaction,
            raw.insert_each,
            pgq.enqueue_each,
        ),
        Shape(
            "bulk",
            f"bulk, {PER_CALL:,} per call",
            enqueue_many_in_calls,
            insert_many_in_calls,
            functools.partial(pgq.enqueue_bulk, per_call=PER_CALL),
            bulk=True,
        ),
    )


def run(session: Session) -> None:
    """Every shape three ways, ``sizes.rounds`` times in turn; add the medians."""
    from benchmarks import pgq

    pgq.setup(session.url)
    rounds: dict[tuple[str, str], list[float]] = defaultdict(list)
    with raw.connect(session.url) as conn, raw.connect_as_django(session.url) as as_django:
        for _ in range(session.sizes.rounds):
            for shape in shapes():
                count = session.sizes.enqueue_bulk if shape.bulk else session.sizes.enqueue_one
                raw_action = functools.partial(shape.raw, conn)
                rounds[shape.key, "raw"].append(enqueue.measure(session, count, raw_action))
                per_call = PER_CALL if shape.bulk else 1
                with enqueue.django_connection(0):
                    rounds[shape.key, "ours"].append(enqueue.measure(session, count, shape.ours))
                    statement = sent(shape.ours, per_call)
                alone = functools.partial(repeated, statement, as_django)
                calls_a_second = enqueue.measure(session, count // per_call, alone)
                rounds[shape.key, "ours_statement"].append(calls_a_second * per_call)
                with enqueue.django_connection(0, enqueue.PREPARE_THRESHOLD):
                    rounds[shape.key, "ours_prepared"].append(
                        enqueue.measure(session, count, shape.ours)
                    )
                pgq.seed(session.url, 0)
                rounds[shape.key, "pgqueuer"].append(count / shape.pgqueuer(session.url, count))
    database.reset(session.harness)
    names = {
        "raw": "raw psycopg INSERT + pg_notify",
        "ours": "django_dbqueue",
        "ours_prepared": "django_dbqueue, prepared statements allowed",
        "ours_statement": "django_dbqueue's statement alone, Django's defaults, no package Python",
        "pgqueuer": f"pgqueuer {version('pgqueuer')}",
    }
    for shape in shapes():
        count = session.sizes.enqueue_bulk if shape.bulk else session.sizes.enqueue_one
        for who, name in names.items():
            key = f"compare_enqueue_{shape.key}"
            session.results.add(
                Result(
                    f"{key}_{who}",
                    f"compare: enqueue {shape.label}, {name}",
                    statistics.median(rounds[shape.key, who]),
                    "jobs/s",
                    None if who == "raw" else f"{key}_raw",
                    count,
                    {"rounds": rounds[shape.key, who]},
                )
            )
