"""``manage.py dbqueue_purge``: apply the retention settings now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_dbqueue import reaper


class Command(BaseCommand):
    help = (
        "Delete finished jobs older than DBQUEUE SUCCEEDED_RETENTION / DEAD_RETENTION, "
        "in batches. Ready and running jobs are never touched."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=reaper.PURGE_BATCH,
            help=f"Rows deleted per statement (default {reaper.PURGE_BATCH}).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, batch_size: int, dry_run: bool, **options: Any) -> None:
        if batch_size < 1:
            raise CommandError(f"--batch-size must be 1 or more, not {batch_size}.")
        count = reaper.purge(batch_size, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(f"{verb} {count} finished job(s)")
