"""The commands' option types: ranges named in the error, no database."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.utils import timezone
from pytest_django import Settings

from django_dbqueue.management import options


def test_ids_are_comma_separated_positive_numbers() -> None:
    assert options.parse_ids("12, 15,20,") == [12, 15, 20]
    assert options.parse_ids(str(2**63 - 1)) == [2**63 - 1]


@pytest.mark.parametrize("text", ["", "12;15", "a,b", "0", "-3", "²", str(2**63)])
def test_bad_ids_say_how_to_write_them(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="job ids"):
        options.parse_ids(text)


@pytest.mark.parametrize(
    ("text", "age"),
    [("90s", timedelta(seconds=90)), ("30m", timedelta(minutes=30)), ("7d", timedelta(days=7))],
)
def test_since_takes_an_age(text: str, age: timedelta) -> None:
    since = options.parse_since(text)
    assert abs(timezone.now() - age - since) < timedelta(seconds=5)


def test_since_takes_an_iso_time_or_date_in_the_current_time_zone() -> None:
    assert options.parse_since("2025-06-01T09:00:00+02:00") == datetime(
        2025, 6, 1, 7, 0, tzinfo=dt_timezone.utc
    )
    assert options.parse_since("2025-06-01") == timezone.make_aware(datetime(2025, 6, 1))


def test_since_without_use_tz_is_naive_local_time(settings: Settings) -> None:
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Paris"
    assert options.parse_since("2025-06-01") == datetime(2025, 6, 1)
    assert options.parse_since("2025-06-01T07:00:00+00:00") == datetime(2025, 6, 1, 9, 0)
    assert timezone.is_naive(options.parse_since("2h"))


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "2025-13-01", "5w", ""])
def test_bad_since_shows_both_forms(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"30m, 2h, 7d, or 2025-06-01T09:00"):
        options.parse_since(text)


@pytest.mark.parametrize(
    "text", ["36501d", "999999999d", "9" * 12 + "d", "1900-01-01", "2200-01-01", "0001-01-01"]
)
def test_since_further_than_100_years_is_out_of_range(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"out of range: .* within 36500 days"):
        options.parse_since(text)


def test_whole_numbers_name_their_range() -> None:
    assert options.BATCH_SIZE("10000") == 10_000
    for text in ("0", "10001", "1e20", "1.5", "many"):
        with pytest.raises(argparse.ArgumentTypeError) as error:
            options.BATCH_SIZE(text)
        assert str(error.value) == f"must be a whole number from 1 to 10000, not {text}"


@pytest.mark.parametrize("text", ["inf", "nan", "-1", "1e10", "x"])
def test_seconds_are_finite_and_capped(text: str) -> None:
    with pytest.raises(
        argparse.ArgumentTypeError, match=f"number of seconds from 0 to .*, not {text}"
    ):
        options.TIMEOUT(text)
    assert options.TIMEOUT("0") == 0.0
    assert options.INTERVAL("0.5") == 0.5
