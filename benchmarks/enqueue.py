"""(a) Enqueue through the package, in-process, each next to its raw insert.

Each pair runs on an emptied table: raw first, then the package. A short
warm-up precedes both (imports, caches, prepared statements).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connections, transaction

from benchmarks import database, raw
from benchmarks.database import Connection
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.tasks import noop
from benchmarks.timing import rate
from tests.testapp.models import Order

WARM_UP = 50


def one_per_transaction(count: int) -> None:
    """``count`` enqueues, each its own autocommit transaction."""
    for _ in range(count):
        noop.enqueue()


def one_with_business_row(count: int) -> None:
    """``count`` transactions, each saving an ``Order`` and enqueueing its job."""
    for _ in range(count):
        with transaction.atomic():
            Order.objects.create()
            noop.enqueue()


def many_in_one_atomic(count: int) -> None:
    """``count`` enqueues inside one ``atomic()`` block."""
    with transaction.atomic():
        for _ in range(count):
            noop.enqueue()


def enqueue_many(count: int) -> None:
    """One ``enqueue_many`` of ``count`` calls."""
    noop.enqueue_many([((), {})] * count)


@contextmanager
def django_connection(
    conn_max_age: int | None, prepare_threshold: int | None = None
) -> Iterator[None]:
    """Reconnect Django's default connection with these settings; restore them after.

    Django only closes connections at request boundaries, so outside a request
    ``CONN_MAX_AGE`` shows whether enqueue itself opens or closes connections.
    ``prepare_threshold`` is the ``OPTIONS`` entry a project sets to allow
    prepared statements (Django's default, ``None``, allows none).
    """
    connection = connections["default"]
    settings = connection.settings_dict
    before = settings["CONN_MAX_AGE"], settings["OPTIONS"].get("prepare_threshold")
    connection.close()
    settings["CONN_MAX_AGE"] = conn_max_age
    settings["OPTIONS"]["prepare_threshold"] = prepare_threshold
    try:
        yield
    finally:
        connection.close()
        settings["CONN_MAX_AGE"], settings["OPTIONS"]["prepare_threshold"] = before


def measure(session: Session, count: int, action: Callable[[int], object]) -> float:
    """Jobs per second of ``action(count)`` on an emptied table, after a warm-up."""
    database.reset(session.harness)
    action(min(WARM_UP, count))
    database.reset(session.harness)
    return rate(count, lambda: action(count))


@dataclass(frozen=True)
class Pair:
    """An enqueue benchmark and its raw counterpart; ``bulk`` ones take the bulk size."""

    key: str
    label: str
    action: Callable[[int], object]
    raw_key: str
    raw_label: str
    raw_action: Callable[[Connection, int], object]
    bulk: bool = False


PAIRS = (
    Pair(
        "enqueue_autocommit",
        "enqueue(), autocommit",
        one_per_transaction,
        "raw_insert_notify",
        "raw: INSERT+pg_notify, autocommit",
        raw.insert_each,
    ),
    Pair(
        "enqueue_with_order",
        "enqueue() + Order, own atomic()",
        one_with_business_row,
        "raw_order_and_insert",
        "raw: INSERT order + job+notify, own txn",
        raw.insert_each_with_order,
    ),
    Pair(
        "enqueue_one_atomic",
        "enqueue() x n in one atomic()",
        many_in_one_atomic,
        "raw_inserts_one_transaction",
        "raw: n INSERTs + 1 notify, one txn",
        raw.insert_in_one_transaction,
        bulk=True,
    ),
    Pair(
        "enqueue_many",
        "enqueue_many()",
        enqueue_many,
        "raw_multirow_insert",
        "raw: multi-row INSERT + notify",
        raw.insert_many,
        bulk=True,
    ),
)


PERSISTENT = "enqueue_autocommit_persistent"
#: The suffix of the figures taken with prepared statements allowed on the connection.
PREPARED = "_prepared"
#: psycopg's default threshold, as a project would set it in ``OPTIONS``.
PREPARE_THRESHOLD = 5


def run(session: Session) -> None:
    """Every enqueue figure next to its raw counterpart, then the persistent-connection one.

    The whole sequence runs ``sizes.rounds`` times; each figure is its best
    round (the one least disturbed by other work on the machine), all rounds
    kept in the details. Each figure starts on a fresh Django connection with
    Django's default ``CONN_MAX_AGE=0``; the autocommit one is taken again at
    once with ``None``, so the two are compared alike, and every package
    figure once more with prepared statements allowed
    (``OPTIONS["prepare_threshold"]``).
    """
    one, bulk = session.sizes.enqueue_one, session.sizes.enqueue_bulk
    rounds: dict[str, list[float]] = defaultdict(list)
    with raw.connect(session.url) as conn:
        for _ in range(session.sizes.rounds):
            for pair in PAIRS:
                count = bulk if pair.bulk else one
                raw_action = functools.partial(pair.raw_action, conn)
                rounds[pair.raw_key].append(measure(session, count, raw_action))
                with django_connection(0):
                    rounds[pair.key].append(measure(session, count, pair.action))
                if pair.key == "enqueue_autocommit":  # right after it, so alike
                    with django_connection(None):
                        rounds[PERSISTENT].append(measure(session, one, pair.action))
                with django_connection(0, PREPARE_THRESHOLD):
                    rounds[pair.key + PREPARED].append(measure(session, count, pair.action))
    add = session.results.add
    for pair in PAIRS:
        count = bulk if pair.bulk else one
        add(best(pair.raw_key, pair.raw_label, rounds[pair.raw_key], None, count))
        add(best(pair.key, pair.label, rounds[pair.key], pair.raw_key, count))
        label = f"{pair.label}, prepared (OPTIONS prepare_threshold)"
        add(best(pair.key + PREPARED, label, rounds[pair.key + PREPARED], pair.raw_key, count))
    label = "enqueue(), autocommit, CONN_MAX_AGE=None"
    add(best(PERSISTENT, label, rounds[PERSISTENT], "raw_insert_notify", one))


def best(key: str, label: str, rounds: list[float], raw_key: str | None, count: int) -> Result:
    """The best of ``rounds`` (jobs/s) as a result, every round in its details."""
    return Result(key, label, max(rounds), "jobs/s", raw_key, count, {"rounds": rounds})
