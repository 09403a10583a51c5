"""Progress reports: the values set_progress accepts, and the pacing of their writes."""

from __future__ import annotations

import math

import pytest

from django_dbqueue.exceptions import InvalidProgress
from django_dbqueue.progress import INTERVAL, MAX_MESSAGE_CHARS, Pacer, Progress


def test_a_report_keeps_its_numbers_and_message() -> None:
    assert Progress.checked(3, 10, "rows") == Progress(3, 10, "rows")
    assert Progress.checked(2.5) == Progress(2.5, None, "")
    assert Progress.checked(0, 0) == Progress(0, 0, "")
    assert Progress.checked(2**53, 2**53) == Progress(2**53, 2**53, "")


def test_stored_form_names_the_attempt() -> None:
    assert Progress(3, 10, "rows").stored(2) == {
        "done": 3,
        "total": 10,
        "message": "rows",
        "attempt": 2,
    }


@pytest.mark.parametrize(
    ("done", "total", "says"),
    [
        (-1, None, "done must be a finite number from 0 to 2**53, not -1"),
        (1, -5, "total must be a finite number from 0 to 2**53, not -5"),
        (math.nan, None, "done must be a finite number from 0 to 2**53, not nan"),
        (1, math.inf, "total must be a finite number from 0 to 2**53, not inf"),
        (2**53 + 1, None, "done must be a finite number from 0 to 2**53, not 9007199254740993"),
        ("3", None, "done must be a number, not str ('3')"),
        (True, None, "done must be a number, not bool (True)"),
        (1, "10", "total must be a number, not str ('10')"),
        (11, 10, "done (11) is more than total (10). Raise total, or pass total=None"),
    ],
)
def test_a_bad_number_is_refused_with_what_to_do(done: object, total: object, says: str) -> None:
    with pytest.raises(InvalidProgress, match="set_progress: ") as refused:
        Progress.checked(done, total)
    assert says in str(refused.value)
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ("a\x00b", "the NUL character"),
        ("half \ud800 a pair", "the surrogate code point '\\ud800'"),
        (b"bytes", "message must be text, not bytes"),
    ],
)
def test_a_message_no_database_stores_is_refused(message: object, says: str) -> None:
    with pytest.raises(InvalidProgress) as refused:
        Progress.checked(1, 2, message)
    assert says in str(refused.value)


def test_a_long_message_is_cut_not_refused() -> None:
    cut = Progress.checked(1, 2, "x" * 10_000).message
    assert len(cut) == MAX_MESSAGE_CHARS
    assert cut.endswith("…")
    assert Progress.checked(1, 2, "y" * MAX_MESSAGE_CHARS).message == "y" * MAX_MESSAGE_CHARS


def test_the_pacer_gives_the_newest_report_once_per_interval() -> None:
    pacer = Pacer()
    pacer.post(Progress(1, None, ""))
    assert pacer.take(100.0) == Progress(1, None, "")
    assert pacer.take(100.0) is None  # nothing waiting
    for done in range(2, 10_000):
        pacer.post(Progress(done, None, ""))
        assert pacer.take(100.0 + INTERVAL / 2) is None
    assert pacer.turn() == 100.0 + INTERVAL
    assert pacer.take(100.0 + INTERVAL) == Progress(9_999, None, "")


def test_the_unwritten_report_is_the_newest_until_its_write_is_confirmed() -> None:
    pacer = Pacer()
    assert pacer.unwritten() is None  # nothing reported
    first, second = Progress(1, 2, ""), Progress(2, 2, "")
    pacer.post(first)
    assert pacer.unwritten() is first  # waiting
    assert pacer.take(100.0) is first
    assert pacer.unwritten() is first  # taken, its write not confirmed: written again
    pacer.written = first
    assert pacer.unwritten() is None
    pacer.post(second)
    assert pacer.unwritten() is second
