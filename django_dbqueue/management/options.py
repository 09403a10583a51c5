"""The commands' option values: every number, id list and ``--since``, range-checked here.

Each is an argparse ``type``: a value out of range (or not a number at all) is
refused while the command line is parsed, with an error that names the option
(argparse adds ``argument --batch-size:``) and the range it takes, before the
command touches the database. From a terminal that is a usage error (exit
status 2); through ``call_command`` a ``CommandError``. The ranges are those
the values can reach without overflowing a column, a ``LIMIT``, a timestamp or
the machine.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from django_dbqueue import durations, leases

#: The largest job id (``BigAutoField``: a signed 64-bit integer on every vendor).
JOB_ID_MAX = 2**63 - 1
#: Rows one ``dbqueue_purge`` statement may delete: each batch is one transaction whose ids
#: are sent as parameters, and SQLite takes at most 32,766 parameters a statement.
BATCH_MAX = 10_000
#: Threads (``--concurrency``) or processes (``--processes``) one command may start; each
#: holds database connections of its own, so even this many needs a server sized for it.
WORKERS_MAX = 1024
#: ``--since`` as an age: a number and a unit (seconds, minutes, hours, days).
AGE = re.compile(r"(\d{1,12})([smhd])")
AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SINCE_FORMS = "write 30m, 2h, 7d, or 2025-06-01T09:00"


@dataclass(frozen=True)
class WholeNumber:
    """A whole number from ``low`` to ``high``: ``type=WholeNumber(1, BATCH_MAX)``."""

    low: int
    high: int

    def __call__(self, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"must be {self.rule()}, not {text}")
        return value

    def rule(self) -> str:
        return f"a whole number from {self.low} to {self.high}"


@dataclass(frozen=True)
class Seconds:
    """A finite number of seconds up to ``durations.MAX_SECONDS``; 0 too with ``zero``."""

    zero: bool = False

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not durations.is_seconds(value, zero=self.zero):
            raise argparse.ArgumentTypeError(
                f"must be {durations.rule(zero=self.zero)}, not {text}"
            )
        return value


CONCURRENCY = WholeNumber(1, WORKERS_MAX)
PROCESSES = WholeNumber(1, WORKERS_MAX)
MAX_JOBS = WholeNumber(1, JOB_ID_MAX)
PORT = WholeNumber(1, 65535)
BATCH_SIZE = WholeNumber(1, BATCH_MAX)
EXTRA_ATTEMPTS = WholeNumber(1, leases.MAX_EXTRA_ATTEMPTS)
INTERVAL = Seconds()
TIMEOUT = Seconds(zero=True)


def parse_ids(text: str) -> list[int]:
    """``"3,5, 8"`` -> ``[3, 5, 8]``; anything else is an argparse error naming the value."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of job ids; write them as 12,15,20."
        ) from None
    if not ids or any(not 1 <= job_id <= JOB_ID_MAX for job_id in ids):
        raise argparse.ArgumentTypeError(
            f"{text!r}: job ids are whole numbers from 1 to {JOB_ID_MAX}."
        )
    return ids


def parse_period(text: str) -> float:
    """A length of time (``90s``, ``10m``, ``2h``, ``7d``) in seconds, above 0 and within
    ``durations.MAX_DELAY``; anything else is an argparse error that shows the form."""
    age = AGE.fullmatch(text.strip())
    seconds = float(int(age.group(1)) * AGE_SECONDS[age.group(2)]) if age else None
    if seconds is None or not durations.is_seconds(seconds):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a length of time: write 90s, 10m, 2h or 7d "
            f"(above 0, at most {durations.MAX_DELAY.days} days)."
        )
    return seconds


def parse_since(text: str) -> datetime:
    """An age (``90s``, ``30m``, ``2h``, ``7d``: that long ago) or an ISO date/time.

    A time without a zone is read in the current time zone. Either must lie
    within ``durations.MAX_DELAY`` (100 years) of now. The result is aware
    under ``USE_TZ`` and naive local time without it, as the ORM's lookups
    expect. Anything else is an argparse error that shows both forms.
    """
    text = text.strip()
    age = AGE.fullmatch(text)
    try:
        moment = None if age else parse_moment(text)
    except OverflowError:
        raise out_of_range(text) from None
    if age:
        seconds = float(int(age.group(1)) * AGE_SECONDS[age.group(2)])
    elif moment is not None:
        seconds = abs(timezone.now() - moment).total_seconds()
    else:
        raise argparse.ArgumentTypeError(f"{text!r} is neither an age nor a date: {SINCE_FORMS}.")
    if seconds > durations.MAX_SECONDS:
        raise out_of_range(text)
    return moment if moment is not None else timezone.now() - timedelta(seconds=seconds)


def out_of_range(text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(
        f"{text!r} is out of range: use an age or a date within "
        f"{durations.MAX_DELAY.days} days (100 years) of now; {SINCE_FORMS}."
    )


def parse_moment(text: str) -> datetime | None:
    """An ISO date/time (a date: its midnight) as ``parse_since`` returns it, else ``None``.

    Aware under ``USE_TZ`` (a time without a zone is in the current time
    zone), naive local time without it; ``OverflowError`` when that moves it
    past the calendar (year 1 or 9999 in another zone).
    """
    try:
        moment = parse_datetime(text)
        day = None if moment else parse_date(text)
    except ValueError:  # a well-formed but impossible date: month 13
        return None
    if day is not None:
        moment = datetime(day.year, day.month, day.day)
    if moment is None:
        return None
    if settings.USE_TZ:
        return timezone.make_aware(moment) if timezone.is_naive(moment) else moment
    return timezone.make_naive(moment) if timezone.is_aware(moment) else moment
