"""The job selectors of ``dbqueue_requeue`` and ``dbqueue_cancel``, parsed into a ``Selector``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_dbqueue import triage


def add_selectors(parser: CommandParser, *, since: str) -> None:
    """Add ``--ids``, ``--task``, ``--queue``, ``--error-code``, ``--since`` (help: ``since``)."""
    parser.add_argument(
        "--ids",
        type=triage.parse_ids,
        action="extend",
        default=[],
        help="Job ids, comma-separated (repeatable): --ids 12,15,20.",
    )
    parser.add_argument("--task", help="Import path of the task, exactly as stored.")
    parser.add_argument("--queue", help="Queue name.")
    parser.add_argument("--error-code", help="The jobs' last error code, e.g. ValueError.")
    parser.add_argument(
        "--since", type=triage.parse_since, help=f"Only {since}: an age (30m, 2h, 7d) or a date."
    )


def selector_from(options: Mapping[str, Any]) -> triage.Selector:
    """The ``Selector`` the options name; a ``CommandError`` when they name no job at all."""
    selector = triage.Selector(
        ids=tuple(options["ids"]),
        task=options["task"],
        queue=options["queue"],
        error_code=options["error_code"],
        since=options["since"],
    )
    if selector.is_empty():
        raise CommandError(
            "Name the jobs: pass at least one of --ids, --task, --queue, --error-code, --since."
        )
    return selector
