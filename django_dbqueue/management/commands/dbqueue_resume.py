"""``manage.py dbqueue_resume``: let workers claim from paused queues again."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_dbqueue import pauses
from django_dbqueue.management.selectors import USAGE


class Command(BaseCommand):
    help = (
        "Resume paused queues (dbqueue_pause): workers claim their jobs again at once. "
        "Name the queues, or pass --all. Exits 1 when none of them was paused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*", metavar="QUEUE", help="The queues to resume.")
        parser.add_argument(
            "--all", dest="every", action="store_true", help="Resume every paused queue."
        )

    def handle(self, *args: Any, queues: list[str], every: bool, **options: Any) -> None:
        if every == bool(queues):
            raise CommandError(
                "Name the queues to resume, or pass --all (not both).", returncode=USAGE
            )
        try:
            resumed = pauses.resume(None if every else queues)
        except ValueError as exc:
            raise CommandError(f"{exc} Nothing was resumed.", returncode=USAGE) from None
        if not resumed:
            raise CommandError(
                "No queue was paused: nothing to resume (dbqueue_stats lists paused queues).",
                returncode=1,
            )
        self.stdout.write(f"resumed {', '.join(resumed)}")
