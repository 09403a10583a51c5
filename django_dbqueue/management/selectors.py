"""The job selectors of ``dbqueue_requeue`` and ``dbqueue_cancel``, parsed into a ``Selector``.

Exit status, as ``grep`` has it: 0 when the selection matched jobs, 1 when it
matched none (``NothingMatched``, saying so), 2 for a mistake on the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_dbqueue import triage
from django_dbqueue.management.options import parse_ids, parse_since
from django_dbqueue.models import JobQuerySet

#: The selector options, by the ``Selector`` field each fills.
SELECTOR_FLAGS = {
    "ids": "--ids",
    "task": "--task",
    "queue": "--queue",
    "error_code": "--error-code",
    "since": "--since",
}
#: ``CommandError.returncode`` of a mistake on the command line, as argparse exits with.
USAGE = 2


class NothingMatched(CommandError):
    """The selectors matched no job the command acts on: exit status 1, a message why."""


def add_selectors(parser: CommandParser, *, since: str) -> None:
    """Add ``--ids``, ``--task``, ``--queue``, ``--error-code``, ``--since`` (help: ``since``)."""
    parser.add_argument(
        "--ids",
        type=parse_ids,
        action="extend",
        default=[],
        help="Job ids, comma-separated (repeatable): --ids 12,15,20.",
    )
    parser.add_argument("--task", help="Import path of the task, exactly as stored.")
    parser.add_argument("--queue", help="Queue name.")
    parser.add_argument("--error-code", help="The jobs' last error code, e.g. ValueError.")
    parser.add_argument(
        "--since", type=parse_since, help=f"Only {since}: an age (30m, 2h, 7d) or a date."
    )


def selector_from(options: Mapping[str, Any]) -> triage.Selector:
    """The ``Selector`` the options name; a ``CommandError`` when they name no job at all."""
    given = {field: options[field] for field in SELECTOR_FLAGS}
    selector = triage.Selector(**{**given, "ids": tuple(given["ids"])})
    if selector.is_empty():
        raise CommandError(
            "Name the jobs: pass at least one of --ids, --task, --queue, --error-code, --since.",
            returncode=USAGE,
        )
    return selector


def require_match(
    selector: triage.Selector, jobs: JobQuerySet, selected: Sequence[JobQuerySet], kind: str
) -> None:
    """Raise ``NothingMatched`` when every one of ``selected`` (the ``kind`` ones of ``jobs``)
    is empty.

    One query per state: ``state = 'ready' AND task = ...`` reads the ready index or
    the ``(task, id)`` index, where ``state IN (...)`` would read every row of the task.
    The message names the selectors given and how many ``jobs`` they match in
    any state, so a typo in ``--task`` reads differently from jobs that are
    simply not ``kind`` (any more).
    """
    if any(each.exists() for each in selected):
        return
    given = ", ".join(
        f"{flag} {describe(getattr(selector, field))}"
        for field, flag in SELECTOR_FLAGS.items()
        if getattr(selector, field) not in (None, ())
    )
    raise NothingMatched(
        f"No {kind} job matches {given} ({jobs.count()} job(s) in any state); nothing was changed."
    )


def describe(value: object) -> str:
    """A selector's value as the message shows it: ids listed, anything else as text."""
    if isinstance(value, tuple):
        return triage.named(value)
    return str(value)
