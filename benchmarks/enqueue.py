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
def conn_max_age(seconds: int | None) -> Iterator[None]:
    """Reconnect Django's default connection with ``CONN_MAX_AGE`` set to ``seconds``; restore.

    Django only closes connections at request boundaries, so outside a request
    this shows whether enqueue itself opens or closes connections.
    """
    connection = connections["default"]
    before = connection.settings_dict["CONN_MAX_AGE"]
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = seconds
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = before


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


def run(session: Session) -> None:
    """Every enqueue figure next to its raw counterpart, then the persistent-connection one.

    The whole sequence runs ``sizes.rounds`` times; each figure is its best
    round (the one least disturbed by other work on the machine), all rounds
    kept in the details. Every round starts on fresh Django connections, with
    Django's default ``CONN_MAX_AGE=0`` and then with ``None``, so the two
    are compared alike.
    """
    one, bulk = session.sizes.enqueue_one, session.sizes.enqueue_bulk
    rounds: dict[str, list[float]] = defaultdict(list)
    with raw.connect(session.url) as conn:
        for _ in range(session.sizes.rounds):
            with conn_max_age(0):
                for pair in PAIRS:
                    count = bulk if pair.bulk else one
                    raw_action = functools.partial(pair.raw_action, conn)
                    rounds[pair.raw_key].append(measure(session, count, raw_action))
                    rounds[pair.key].append(measure(session, count, pair.action))
            with conn_max_age(None):
                rounds[PERSISTENT].append(measure(session, one, one_per_transaction))
    add = session.results.add
    for pair in PAIRS:
        count = bulk if pair.bulk else one
        add(best(pair.raw_key, pair.raw_label, rounds[pair.raw_key], None, count))
        add(best(pair.key, pair.label, rounds[pair.key], pair.raw_key, count))
    label = "enqueue(), autocommit, CONN_MAX_AGE=None"
    add(best(PERSISTENT, label, rounds[PERSISTENT], "raw_insert_notify", one))


def best(key: str, label: str, rounds: list[float], raw_key: str | None, count: int) -> Result:
    """The best of ``rounds`` (jobs/s) as a result, every round in its details."""
    return Result(key, label, max(rounds), "jobs/s", raw_key, count, {"rounds": rounds})
