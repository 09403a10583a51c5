"""``manage.py dbqueue_pause``: stop every worker claiming from the named queues."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_dbqueue import pauses
from django_dbqueue.management.options import parse_period
from django_dbqueue.management.selectors import USAGE

ACTOR = "dbqueue_pause command"


class Command(BaseCommand):
    help = (
        "Pause queues: once this command has returned no worker, on any host, starts a job "
        "of theirs; running jobs finish. Until dbqueue_resume, or with --for until that "
        "long from now. Pausing a paused queue sets its end anew. A queue need not have "
        "jobs yet."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="+", metavar="QUEUE", help="The queues to pause.")
        parser.add_argument(
            "--for",
            dest="period",
            type=parse_period,
            metavar="PERIOD",
            help="Resume by itself after this long: 90s, 10m, 2h, 7d (default: until resumed).",
        )

    def handle(self, *args: Any, queues: list[str], period: float | None, **options: Any) -> None:
        try:
            paused = pauses.pause(queues, seconds=period, actor=ACTOR)
        except ValueError as exc:
            raise CommandError(f"{exc} Nothing was paused.", returncode=USAGE) from None
        for pause in paused:
            until = (
                "until resumed (dbqueue_resume)"
                if pause.until is None
                else f"until {pause.until.isoformat(timespec='seconds')}"
            )
            self.stdout.write(f"paused {pause.queue} {until}")
