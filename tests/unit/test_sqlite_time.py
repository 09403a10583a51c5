"""SQLite's timestamp arithmetic to the microsecond, against its own date functions."""

from __future__ import annotations

import sqlite3

import pytest

from django_dbqueue.sql.sqlite_time import plus_seconds, register, seconds_between

NOW = "2026-12-04 19:38:31.123456"


@pytest.fixture
def db() -> sqlite3.Connection:
    """A bare SQLite connection with the queue's functions, as every Django one gets them."""
    connection = sqlite3.connect(":memory:")
    register(connection)
    return connection


def test_thirty_seconds_on_is_thirty_seconds_back_exactly(db: sqlite3.Connection) -> None:
    (later,) = db.execute("SELECT dbqueue_plus_seconds(?, 30)", [NOW]).fetchone()
    assert later == "2026-12-04 19:39:01.123456"
    (seconds,) = db.execute("SELECT dbqueue_seconds_between(?, ?)", [later, NOW]).fetchone()
    assert seconds == 30.0


def test_a_julianday_difference_is_off_by_tens_of_microseconds_where_ours_is_not(
    db: sqlite3.Connection,
) -> None:
    """Why the function exists: the pause test once read 30.000038 s for a 30 s pause."""
    later = plus_seconds(NOW, 30)
    (drift,) = db.execute(
        "SELECT abs((julianday(?) - julianday(?)) * 86400.0 - 30)", [later, NOW]
    ).fetchone()
    assert drift > 1e-6
    assert seconds_between(later, NOW) == 30.0


def test_an_earlier_later_is_negative_and_null_stays_null() -> None:
    assert seconds_between(NOW, plus_seconds(NOW, 1.5)) == -1.5
    assert seconds_between(None, NOW) is None
    assert seconds_between(NOW, None) is None
    assert plus_seconds(None, 1) is None
    assert seconds_between("2026-12-04 19:38:31", "2026-12-04 19:38:30.999999") == 1e-06


def test_the_clock_keeps_the_microseconds_sqlites_own_now_cuts(db: sqlite3.Connection) -> None:
    """A stamp from SQLite's 'now' could read before a %(now)s taken earlier, in microseconds."""
    reads = [
        db.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now'), dbqueue_utc_now()").fetchone()
        for _ in range(100)
    ]
    assert all(len(sqlites) == len("2026-12-04 19:38:31.123") for sqlites, _ in reads)
    assert all(len(ours) == len(NOW) for _, ours in reads)
    assert all(ours >= sqlites for sqlites, ours in reads)
    assert any(not ours.endswith("000") for _, ours in reads)
