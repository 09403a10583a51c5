"""``manage.py dbqueue_cancel``: cancel the selected ready and waiting jobs and ask running
ones to stop."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_dbqueue import leases, triage
from django_dbqueue.management.selectors import add_selectors, require_match, selector_from
from django_dbqueue.models import JobState

ACTOR = "dbqueue_cancel command"


class Command(BaseCommand):
    help = (
        "Cancel ready and waiting jobs at once (and the jobs of their workflows that wait "
        "for them) and ask running jobs to stop (cooperative: their task "
        "sees context.cancel_requested). Select them with --ids, --task, --queue, "
        "--error-code and --since (enqueued since). Finished jobs are left alone. "
        "Exits 1 when no ready, waiting or running job matches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_selectors(parser, since="jobs enqueued at or after this")
        parser.add_argument(
            "--dry-run", action="store_true", help="Count the jobs selected; change nothing."
        )

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        selector = selector_from(options)
        jobs = selector.jobs(since_field="created_at")
        unstarted = jobs.filter(state__in=(JobState.READY, JobState.WAITING))
        require_match(selector, jobs, [unstarted, jobs.running()], "ready, waiting or running")
        if dry_run:
            # Counted, not run and rolled back: cancel() and request_cancel() take every ready
            # and running job selected, and a rolled-back run would hold the running jobs'
            # row locks against their workers' heartbeats until it ended.
            self.stdout.write(
                f"would cancel {unstarted.count()} ready or waiting job(s) and ask "
                f"{jobs.running().count()} running job(s) to stop"
            )
            return
        cancelled = sum(
            len(leases.cancel(ids)) for ids in triage.id_batches(unstarted, triage.BATCH)
        )
        asked = sum(
            len(leases.request_cancel(ids, actor=ACTOR))
            for ids in triage.id_batches(jobs.running(), triage.BATCH)
        )
        self.stdout.write(
            f"cancelled {cancelled} ready or waiting job(s); asked {asked} running job(s) to stop"
        )
