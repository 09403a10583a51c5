"""``manage.py dbqueue_requeue``: give the selected dead jobs more attempts, from a terminal."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_dbqueue import leases, triage
from django_dbqueue.management.selectors import add_selectors, selector_from


class Command(BaseCommand):
    help = (
        "Requeue dead jobs (same id, idempotency key and history) with more attempts. "
        "Select them with --ids, --task, --queue, --error-code and --since (died since); "
        "at most one job per (task, dedupe key) is revived, the others are named."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_selectors(parser, since="dead jobs that died at or after this")
        parser.add_argument(
            "--extra-attempts",
            type=int,
            default=1,
            help="Attempts granted on top of each job's budget (default 1).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count the dead jobs selected; change nothing."
        )

    def handle(self, *args: Any, extra_attempts: int, dry_run: bool, **options: Any) -> None:
        if extra_attempts < 1:
            raise CommandError(f"--extra-attempts must be 1 or more, not {extra_attempts}.")
        dead = selector_from(options).jobs(since_field="finished_at").dead()
        if dry_run:
            self.stdout.write(f"would requeue {dead.count()} dead job(s)")
            return
        requeued, duplicates = 0, []
        for ids in triage.id_batches(dead, triage.BATCH):
            result = leases.requeue_report(ids, extra_attempts, actor="dbqueue_requeue command")
            requeued += len(result.requeued)
            duplicates += result.duplicates
        self.stdout.write(f"requeued {requeued} dead job(s) with {extra_attempts} more attempt(s)")
        if duplicates:
            self.stdout.write(
                f"skipped {len(duplicates)} whose task and dedupe key another job holds "
                f"(active, or requeued first): {triage.named(duplicates)}"
            )
