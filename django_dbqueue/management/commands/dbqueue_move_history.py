"""``manage.py dbqueue_move_history``: move every finished job to its history table now."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connections

from django_dbqueue import conf, history
from django_dbqueue.management.options import BATCH_MAX, BATCH_SIZE

#: Seconds between two progress lines.
PROGRESS_EVERY = 5.0


class Command(BaseCommand):
    help = (
        "Move the finished jobs still in dbqueue_job to their history tables now, in "
        "batches, printing progress (PostgreSQL; the reaper moves them too, a share of "
        "every sweep). Succeeded jobs already past SUCCEEDED_RETENTION stay for the purge. "
        "Each batch is a short transaction of its own that skips rows others hold, so "
        "enqueues, claims and reads go on: run it after upgrading a large table. Once it "
        "moved jobs it vacuums and analyzes dbqueue_job and the history tables (VACUUM "
        "blocks no reads or writes), unless --no-vacuum."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=BATCH_SIZE,
            default=history.MOVE_BATCH,
            help=f"Jobs moved per statement (default {history.MOVE_BATCH}, at most {BATCH_MAX}).",
        )
        parser.add_argument(
            "--no-vacuum",
            dest="vacuum",
            action="store_false",
            help="Leave the tables to autovacuum after the move, instead of VACUUM (ANALYZE).",
        )

    def handle(self, *args: Any, batch_size: int, vacuum: bool, **options: Any) -> None:
        connection = connections[conf.get().database]
        if not history.kept_apart(connection):
            self.stdout.write(
                f"nothing to move: on {connection.display_name} every job stays in dbqueue_job"
            )
            return
        keep_from = history.kept_from(connection)
        total = history.unmoved(connection, keep_from)
        self.stdout.write(f"moving {total} finished job(s) to their history tables")
        started = reported = time.monotonic()
        moved = 0
        for batch in history.batches(connection, batch_size, keep_from=keep_from):
            moved += batch
            now = time.monotonic()
            if now - reported >= PROGRESS_EVERY:
                reported = now
                self.stdout.write(self.progress(moved, total, now - started))
        self.stdout.write(f"done: {self.progress(moved, total, time.monotonic() - started)}")
        if moved and vacuum and connection.in_atomic_block:
            self.stdout.write("not vacuumed: VACUUM cannot run inside the caller's transaction")
        elif moved and vacuum:
            started = time.monotonic()
            tables = history.vacuum(connection)
            seconds = time.monotonic() - started
            self.stdout.write(f"vacuumed and analyzed {len(tables)} table(s) in {seconds:.0f}s")

    @staticmethod
    def progress(moved: int, total: int, seconds: float) -> str:
        """``moved 120000 of 2000000 (6%) in 14s, 8571 jobs/s``."""
        share = f" ({moved / total:.0%})" if total else ""
        rate = moved / seconds if seconds > 0 else 0.0
        return f"moved {moved} of {total}{share} in {seconds:.0f}s, {rate:.0f} jobs/s"
