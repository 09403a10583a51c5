"""Parsing the operator selectors: clear errors for mistakes, no database."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.utils import timezone

from django_dbqueue import triage


def test_ids_are_comma_separated_positive_numbers() -> None:
    assert triage.parse_ids("12, 15,20,") == [12, 15, 20]


@pytest.mark.parametrize("text", ["", "12;15", "a,b", "0", "-3", "²"])
def test_bad_ids_say_how_to_write_them(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="job ids"):
        triage.parse_ids(text)


@pytest.mark.parametrize(
    ("text", "age"),
    [("90s", timedelta(seconds=90)), ("30m", timedelta(minutes=30)), ("7d", timedelta(days=7))],
)
def test_since_takes_an_age(text: str, age: timedelta) -> None:
    since = triage.parse_since(text)
    assert abs(timezone.now() - age - since) < timedelta(seconds=5)


def test_since_takes_an_iso_time_or_date_in_the_current_time_zone() -> None:
    assert triage.parse_since("2025-06-01T09:00:00+02:00") == datetime(
        2025, 6, 1, 7, 0, tzinfo=dt_timezone.utc
    )
    assert triage.parse_since("2025-06-01") == timezone.make_aware(datetime(2025, 6, 1))


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "2025-13-01", "5w", ""])
def test_bad_since_shows_both_forms(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"30m, 2h, 7d, or 2025-06-01T09:00"):
        triage.parse_since(text)


def test_named_ids_stop_after_twenty() -> None:
    assert triage.named([3, 1, 2]) == "1, 2, 3"
    assert triage.named(range(1, 26)).endswith("19, 20 and 5 more")


def test_a_selector_with_nothing_given_is_empty() -> None:
    assert triage.Selector().is_empty()
    assert not triage.Selector(queue="mail").is_empty()
