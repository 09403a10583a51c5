"""``manage.py dbqueue_purge``: apply the retention settings now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_dbqueue import reaper
from django_dbqueue.management.options import BATCH_MAX, BATCH_SIZE


class Command(BaseCommand):
    help = (
        "Delete finished jobs older than DBQUEUE SUCCEEDED_RETENTION / DEAD_RETENTION, "
        "in batches. Unfinished jobs are never touched, nor a finished job that an "
        "unfinished one depends on (its result is kept for it)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=BATCH_SIZE,
            default=reaper.PURGE_BATCH,
            help=f"Rows deleted per statement (default {reaper.PURGE_BATCH}, at most {BATCH_MAX}).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, batch_size: int, dry_run: bool, **options: Any) -> None:
        count = reaper.purge(batch_size, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(f"{verb} {count} finished job(s)")
