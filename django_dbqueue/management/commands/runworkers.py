"""``manage.py runworkers``: run jobs until stopped (SIGTERM/SIGINT drain, then exit 0).

With ``--processes N`` (above 1) this process supervises N worker processes
(``django_dbqueue.worker.processes``) and exits non-zero when one kept failing.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_dbqueue import conf, jsontext
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.management.options import (
    CONCURRENCY,
    INTERVAL,
    MAX_JOBS,
    PORT,
    PROCESSES,
    TIMEOUT,
    WORKERS_MAX,
)
from django_dbqueue.validation import check_queue
from django_dbqueue.worker.processes import ProcessSupervisor
from django_dbqueue.worker.watchdog import WorkerBroken
from django_dbqueue.worker.worker import Worker, WorkerOptions

LOG_LEVELS = {0: logging.WARNING, 1: logging.INFO}
#: The width of the job's ``worker_id`` column (``Job.worker_id``).
WORKER_ID_LIMIT = 255


class Command(BaseCommand):
    help = (
        "Run background jobs: claim due jobs, run them on --concurrency threads under fenced "
        "leases, recover expired leases. SIGTERM or SIGINT drains and exits 0."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="Serve this queue (repeatable). Default: DBQUEUE['QUEUES'], or every queue.",
        )
        parser.add_argument(
            "--concurrency",
            type=CONCURRENCY,
            default=1,
            help=f"Jobs run at once (threads, at most {WORKERS_MAX}).",
        )
        parser.add_argument(
            "--processes",
            type=PROCESSES,
            default=1,
            help="Worker processes to run under one supervisor (each with --concurrency "
            "threads); a crashed one is restarted. Default 1: this process is the worker.",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Run what is due, then exit when nothing is left."
        )
        parser.add_argument(
            "--max-jobs", type=MAX_JOBS, help="Exit after finishing this many jobs."
        )
        parser.add_argument(
            "--worker-id", help="Name in leases and logs (default host:pid:random)."
        )
        parser.add_argument(
            "--poll-interval",
            type=INTERVAL,
            help="Seconds between polls when idle (default POLL_INTERVAL).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=TIMEOUT,
            default=30.0,
            help="Seconds running jobs get to finish after SIGTERM before they are released.",
        )
        parser.add_argument(
            "--no-reaper",
            action="store_false",
            dest="reaper",
            help="Do not recover expired leases or purge old jobs in this process.",
        )
        parser.add_argument(
            "--metrics-port",
            type=PORT,
            metavar="PORT",
            help="Serve Prometheus metrics (this worker's counters and the queue gauges) at "
            "http://HOST:PORT/metrics. Needs django-dbqueue[prometheus].",
        )
        parser.add_argument(
            "--metrics-host",
            default="127.0.0.1",
            metavar="HOST",
            help="Address the metrics server listens on (default 127.0.0.1; 0.0.0.0 for all).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        worker_options = self.worker_options(options)
        self.configure_logging(options["verbosity"])
        processes = options["processes"]
        if processes == 1:
            run_worker(worker_options)
            return
        supervisor = ProcessSupervisor(processes, functools.partial(run_child, worker_options))
        if supervisor.run() != 0:
            raise CommandError(
                f"a worker process of {processes} kept failing or did not exit cleanly; "
                "its log lines above say why."
            )

    def worker_options(self, options: dict[str, Any]) -> WorkerOptions:
        """Validate the command line; a mistake is a ``CommandError`` saying what to do."""
        if conf.get().eager:
            raise CommandError(
                "DBQUEUE['EAGER'] is on, so every job runs in the process that enqueues it and "
                "a worker would find nothing to do. EAGER is for tests: turn it off here."
            )
        queues = options["queues"]
        allowed = conf.get().queues
        for queue in queues or ():
            try:
                check_queue(queue, allowed)
            except InvalidJob as exc:
                raise CommandError(f"--queue: {exc}") from exc
        worker_id = options["worker_id"]
        # With --processes, each process's id carries a -p<N> suffix the column must hold too.
        processes = options["processes"]
        limit = WORKER_ID_LIMIT - (len(f"-p{processes}") if processes > 1 else 0)
        if worker_id is not None and not 1 <= len(worker_id) <= limit:
            raise CommandError(
                f"--worker-id must be 1-{limit} characters (the width of the job's "
                f"worker_id column, less any -p<N> suffix of --processes), not "
                f"{len(worker_id)}. Pass a shorter name."
            )
        if worker_id is not None and (problem := jsontext.unstorable(worker_id)):
            # Caught here, not at the first claim, which would fail and retry for ever.
            raise CommandError(
                f"--worker-id {worker_id!r} holds {problem}. Pass a name of plain text (a "
                "shell argument with bytes that are not UTF-8 gives one)."
            )
        if options["metrics_port"] is not None:
            check_metrics_available()
            if options["processes"] > 1:
                raise CommandError(
                    "--metrics-port serves one process's counters, so it cannot be combined "
                    "with --processes above 1. Run one command per process to scrape each."
                )
        return WorkerOptions(
            queues=sorted(set(queues)) if queues else None,
            concurrency=options["concurrency"],
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            worker_id=worker_id,
            poll_interval=options["poll_interval"],
            shutdown_timeout=options["shutdown_timeout"],
            reaper=options["reaper"],
            metrics_port=options["metrics_port"],
            metrics_host=options["metrics_host"],
        )

    def configure_logging(self, verbosity: int) -> None:
        """Show the job log on stderr unless the project's LOGGING already handles it."""
        logger = logging.getLogger("django_dbqueue")
        if logger.hasHandlers():
            return
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(LOG_LEVELS.get(verbosity, logging.DEBUG))


def run_worker(options: WorkerOptions) -> None:
    """Run one worker in this process; a failure to go on is a ``CommandError`` (exit 1)."""
    try:
        Worker(options).run()
    except ImproperlyConfigured as exc:  # the metrics server could not start
        raise CommandError(str(exc)) from exc
    except WorkerBroken as exc:  # exit non-zero: the process supervisor starts a whole one
        raise CommandError(f"the worker cannot go on: {exc}") from exc


def run_child(options: WorkerOptions, index: int) -> int:
    """Child ``index`` of ``--processes``: its worker, ``-p<index>`` suffixed to a given id."""
    if options.worker_id is not None:
        options = dataclasses.replace(options, worker_id=f"{options.worker_id}-p{index}")
    try:
        run_worker(options)
    except CommandError as exc:
        logging.getLogger("django_dbqueue").error("worker process=%s: %s", index, exc)
        return 1
    return 0


def check_metrics_available() -> None:
    """``--metrics-port`` needs prometheus-client, else ``CommandError``."""
    try:
        importlib.import_module("django_dbqueue.metrics")
    except ImproperlyConfigured as exc:
        raise CommandError(f"--metrics-port: {exc}") from exc
