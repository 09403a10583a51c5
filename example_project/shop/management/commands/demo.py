"""``python manage.py demo``: the shop's jobs end to end, on SQLite or PostgreSQL.

It migrates, makes sure someone can log in to the admin, places a batch of
orders (each saved with its invoice and confirmation email in one
transaction), charges some of them, asks for two reports, then runs burst
workers in this process until every job of the batch has finished, drawing a
progress bar, and prints what happened.
"""

from __future__ import annotations

import logging
import random
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.db import DatabaseError, connection, connections
from django.db.models import Count, Max, Min, Q, QuerySet
from django.utils import timezone

from django_dbqueue import Job, JobState
from django_dbqueue.worker.worker import Worker, WorkerOptions
from example_project.shop.services import place_order, take_payment
from example_project.shop.tasks import generate_report

CONCURRENCY = 4
#: The demo gives up (and says so) when its jobs are not finished after this many
#: seconds, or after ``SECONDS_PER_JOB`` per job for a big batch.
TIME_LIMIT = 60.0
SECONDS_PER_JOB = 0.1
#: How long a stopped worker lets running jobs finish before releasing them.
SHUTDOWN_TIMEOUT = 5.0
#: How often the progress bar reads the job counts.
PROGRESS_INTERVAL = 0.1
BAR_WIDTH = 30
ADMIN_URL = "http://127.0.0.1:8000/admin/"
#: The example project's manage.py, at the root of the repository.
MANAGE_PY = Path(__file__).resolve().parents[4] / "manage.py"
ADMIN_USERNAME = "admin"

FINISHED = [JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED]
UNFINISHED = [JobState.READY, JobState.RUNNING]
CUSTOMERS = ["ada", "grace", "alan", "edsger", "barbara", "ken", "margaret", "linus"]


class Command(BaseCommand):
    help = (
        "Migrate, create an admin login, enqueue a batch of shop jobs and run workers "
        "in this process until they are done, then summarise."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--orders", type=int, default=60, help="how many orders to place (default 60)"
        )

    def handle(self, *args: Any, orders: int, **options: Any) -> None:
        if orders < 1:
            raise CommandError(f"--orders must be 1 or more, not {orders}.")
        call_command("migrate", verbosity=0, interactive=False)
        login = ensure_superuser()
        jobs = enqueue_batch(orders)
        total = jobs.count()
        self.stdout.write(
            f"Placed {orders} orders: {total} jobs enqueued. "
            f"Running {CONCURRENCY} worker threads on {connection.vendor}..."
        )
        started = time.monotonic()
        with quiet_logs():
            status = run_workers(jobs, total, self.stdout)
        elapsed = time.monotonic() - started
        self.stdout.write("")
        self.stdout.write(summary(jobs, elapsed))
        self.stdout.write(next_steps(login))
        if status != "done":
            raise CommandError(
                f"The demo {status} before every job finished; "
                "`python manage.py runworkers` picks up the rest."
            )


def ensure_superuser() -> str:
    """Create the ``admin`` superuser if there is no superuser; describe how to log in."""
    user_model = get_user_model()
    existing = user_model.objects.filter(is_superuser=True).order_by("pk").first()
    if existing is not None:
        name = existing.get_username()
        return (
            f"log in as {name!r} with the password you chose or were shown before "
            f"(forgot it? python manage.py changepassword {name})"
        )
    password = secrets.token_urlsafe(12)
    user, _ = user_model.objects.get_or_create(**{user_model.USERNAME_FIELD: ADMIN_USERNAME})
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return f"log in as username {ADMIN_USERNAME!r}, password {password!r}"


def enqueue_batch(orders: int) -> QuerySet[Job]:
    """Place ``orders`` orders, charge every other one and ask for two reports.

    Returns the jobs this batch enqueued: ``place_order`` writes each order
    with its invoice and confirmation email in one transaction; the staged
    faults in ``shop.tasks`` make some emails retry and some charges die.
    """
    since = Job.objects.aggregate(last=Max("pk"))["last"] or 0
    rng = random.Random(orders)
    for n in range(orders):
        order = place_order(f"{rng.choice(CUSTOMERS)}.{n}@example.com", rng.randint(500, 25_000))
        if n % 2 == 0:
            take_payment(order)
    generate_report.enqueue("Sales so far")
    generate_report.enqueue("Sales so far (finance copy)")
    until = Job.objects.aggregate(last=Max("pk"))["last"]
    return Job.objects.filter(pk__gt=since, pk__lte=until)


class DemoWorker(Worker):
    """A burst worker that remembers being stopped (Ctrl-C, SIGTERM or the time limit)."""

    stopped_early = False

    def stop(self) -> None:
        self.stopped_early = True
        super().stop()


def run_workers(jobs: QuerySet[Job], total: int, out: OutputWrapper) -> str:
    """Run burst workers until ``jobs`` are all finished: "done", "was interrupted" or "timed out".

    A burst ends when nothing is due, but retries are scheduled a moment ahead,
    so the next burst starts when the earliest of them is due. The worker runs
    in this (main) thread so that Ctrl-C drains it; the progress bar has its own.
    """
    deadline = time.monotonic() + max(TIME_LIMIT, total * SECONDS_PER_JOB)
    bar = ProgressBar(jobs, total, out, deadline)
    bar.start()
    try:
        while True:
            bar.worker = DemoWorker(
                WorkerOptions(
                    burst=True, concurrency=CONCURRENCY, shutdown_timeout=SHUTDOWN_TIMEOUT
                )
            )
            bar.worker.run()
            if bar.worker.stopped_early:
                return "timed out" if bar.timed_out else "was interrupted"
            pause = seconds_until_next_due(jobs)
            if pause is None:
                return "done"
            if time.monotonic() + pause > deadline:
                return "timed out"
            time.sleep(pause)
    except KeyboardInterrupt:
        return "was interrupted"
    finally:
        bar.finish()


def seconds_until_next_due(jobs: QuerySet[Job]) -> float | None:
    """Seconds until the next unfinished job is due (0 if one is running); None if none is left."""
    left = jobs.filter(state__in=UNFINISHED).aggregate(
        running=Count("pk", filter=Q(state=JobState.RUNNING)), next_run=Min("run_at")
    )
    if left["next_run"] is None:
        return None
    if left["running"]:
        return PROGRESS_INTERVAL  # another process runs it: look again shortly
    return max((left["next_run"] - timezone.now()).total_seconds(), 0.0)


class ProgressBar(threading.Thread):
    """Redraws ``[#####-----] 40/120 jobs finished`` while the workers run.

    It also enforces the time limit: past ``deadline`` it stops the worker.
    """

    def __init__(
        self, jobs: QuerySet[Job], total: int, out: OutputWrapper, deadline: float
    ) -> None:
        super().__init__(name="demo-progress", daemon=True)
        self.jobs = jobs
        self.total = total
        self.out = out
        self.deadline = deadline
        self.worker: DemoWorker | None = None
        self.timed_out = False
        self._done = threading.Event()
        self._drawn = -1

    def run(self) -> None:
        try:
            while not self._done.wait(PROGRESS_INTERVAL):
                self._draw()
                if time.monotonic() > self.deadline and self.worker is not None:
                    self.timed_out = True
                    self.worker.stop()
            self._draw()
        finally:
            connections.close_all()

    def finish(self) -> None:
        """Draw the final count and end the line."""
        self._done.set()
        self.join()
        self.out.write("")

    def _draw(self) -> None:
        try:
            finished = self.jobs.filter(state__in=FINISHED).count()
        except DatabaseError:
            return  # busy database: the next tick redraws
        if finished == self._drawn:
            return
        self._drawn = finished
        filled = BAR_WIDTH * finished // max(self.total, 1)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        self.out.write(f"\r[{bar}] {finished}/{self.total} jobs finished", ending="")
        self.out.flush()


@contextmanager
def quiet_logs() -> Iterator[None]:
    """Only warnings from django_dbqueue while the bar is drawn: one line per job would hide it."""
    logger = logging.getLogger("django_dbqueue")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def summary(jobs: QuerySet[Job], elapsed: float) -> str:
    """A table per task: jobs, succeeded, retried (more than one attempt), dead; then throughput."""
    rows = list(
        jobs.values("task")
        .annotate(
            jobs=Count("pk"),
            succeeded=Count("pk", filter=Q(state=JobState.SUCCEEDED)),
            retried=Count("pk", filter=Q(attempts__gt=1)),
            dead=Count("pk", filter=Q(state=JobState.DEAD)),
        )
        .order_by("task")
    )
    columns = ["jobs", "succeeded", "retried", "dead"]
    totals = {column: sum(row[column] for row in rows) for column in columns}
    lines = [f"{'task':<28}" + "".join(f"{column:>11}" for column in columns)]
    for row in [*rows, {"task": "total", **totals}]:
        name = row["task"].rsplit(".", 1)[-1]
        lines.append(f"{name:<28}" + "".join(f"{row[column]:>11}" for column in columns))
    finished = totals["succeeded"] + totals["dead"]
    lines.append("")
    lines.append(
        f"{finished} of {totals['jobs']} jobs finished in {elapsed:.1f} s: "
        f"{finished / max(elapsed, 1e-9):.1f} jobs/s with {CONCURRENCY} worker threads."
    )
    lines.extend(dead_jobs(jobs))
    return "\n".join(lines)


def dead_jobs(jobs: QuerySet[Job], shown: int = 5) -> list[str]:
    """A few dead jobs, as an operator would first look at them."""
    dead = list(jobs.filter(state=JobState.DEAD).order_by("pk")[:shown])
    if not dead:
        return []
    lines = ["Dead jobs (kept with their error history for an operator):"]
    for job in dead:
        name = job.task.rsplit(".", 1)[-1]
        message = job.errors[-1]["message"] if job.errors else ""
        call = ", ".join(repr(arg) for arg in job.args)
        lines.append(f"  job {job.pk} {name}({call}): {job.last_error_code} {message}")
    return lines


def next_steps(login: str) -> str:
    """How to look at the result in the admin."""
    where = "the orders, emails and reports"
    if admin.site.is_registered(Job):
        where += f", and the jobs ({ADMIN_URL}django_dbqueue/job/)"
    return f"\nAdmin: {login}.\nNext: {runserver_command()}, then open {ADMIN_URL} to see {where}."


def runserver_command() -> str:
    """``runserver`` with the Python that runs this demo (the virtualenv's, activated or not)."""
    here = Path.cwd()
    python, manage = Path(sys.executable), MANAGE_PY
    if python.is_relative_to(here):
        python = python.relative_to(here)
    if manage.is_relative_to(here):
        manage = manage.relative_to(here)
    return shlex.join([str(python), str(manage), "runserver"])
