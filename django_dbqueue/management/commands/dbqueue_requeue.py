"""``manage.py dbqueue_requeue``: give the selected dead jobs more attempts, from a terminal."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_dbqueue import leases, triage
from django_dbqueue.management.options import EXTRA_ATTEMPTS
from django_dbqueue.management.selectors import add_selectors, require_match, selector_from

ACTOR = "dbqueue_requeue command"


class Command(BaseCommand):
    help = (
        "Requeue dead jobs (same id, idempotency key and history) with more attempts. "
        "Select them with --ids, --task, --queue, --error-code and --since (died since); "
        "at most one job per (task, dedupe key) is revived, the others are named; the "
        "workflow jobs their failure cancelled wait for them again. "
        "Exits 1 when no dead job matches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_selectors(parser, since="dead jobs that died at or after this")
        parser.add_argument(
            "--extra-attempts",
            type=EXTRA_ATTEMPTS,
            default=1,
            help="Attempts granted on top of each job's budget "
            f"(default 1, at most {leases.MAX_EXTRA_ATTEMPTS}).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Report what a real run would requeue and skip, then roll it all back.",
        )

    def handle(self, *args: Any, extra_attempts: int, dry_run: bool, **options: Any) -> None:
        selector = selector_from(options)
        jobs = selector.jobs(since_field="finished_at")
        dead = jobs.dead()
        require_match(selector, jobs, [dead], "dead")
        requeued, duplicates, waiting_again = 0, [], 0
        with triage.rolled_back_if(dry_run):
            for ids in triage.id_batches(dead, triage.BATCH):
                result = leases.requeue_report(ids, extra_attempts, actor=ACTOR)
                requeued += len(result.requeued)
                duplicates += result.duplicates
                waiting_again += len(result.waiting_again)
        requeue, skip, wait = (
            ("would requeue", "would skip", "would wait")
            if dry_run
            else ("requeued", "skipped", "wait")
        )
        self.stdout.write(f"{requeue} {requeued} dead job(s) with {extra_attempts} more attempt(s)")
        if waiting_again:
            self.stdout.write(
                f"{waiting_again} job(s) their failure had cancelled {wait} for them again"
            )
        if duplicates:
            self.stdout.write(
                f"{skip} {len(duplicates)} whose task and dedupe key another job holds "
                f"(active, or requeued first): {triage.named(duplicates)}"
            )
