"""``python -m benchmarks [--quick] [--compare pgqueuer] [--pooler] [--tracing]
[--purge-backlog] [--large-table] [--only STEP] [--json PATH] [--database-url URL]``.

Run it from the repository root.

Creates (and at the end drops) its own PostgreSQL database, measures, prints
a table and writes the JSON. ``--quick`` runs the same benchmarks small, for
CI: it prints numbers and asserts no timing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import django

from benchmarks.env import DATABASE_URL_ENV, DEFAULT_DATABASE_URL


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="Small sizes (CI): about a minute.")
    parser.add_argument(
        "--compare",
        choices=["pgqueuer"],
        action="append",
        default=[],
        help="Also drain the same jobs with pgqueuer, interleaved with ours (the bench extra).",
    )
    parser.add_argument(
        "--pooler",
        action="store_true",
        help="Also drain the same jobs through a PgBouncer in transaction mode, interleaved "
        "with direct drains (needs Debian's pgbouncer and the database on this machine).",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="Also drain and enqueue with and without OpenTelemetry's TracingMiddleware, "
        "interleaved, spans made and dropped; prints both rates and their ratio (the otel "
        "extra): tracing.run.",
    )
    parser.add_argument(
        "--purge-backlog",
        action="store_true",
        help="Also time an expired lease's recovery while the reaper purges a million "
        "finished jobs (50,000 with --quick): purge_backlog.run.",
    )
    parser.add_argument(
        "--large-table",
        action="store_true",
        help="Also time the upgrade of a table of ten million finished jobs (migration 0023 "
        "and dbqueue_move_history), drain 200,000 jobs on an emptied table and among those, "
        "size the job table after a million jobs drained and time the retention of five "
        "million by batched deletes and by a drop (about 25 minutes; run it on a server with "
        "PostgreSQL's default vacuum settings): large_table.run.",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="STEP",
        help="Run only this step (repeatable), as the run names them: compare.run, "
        "compare_enqueue.run, drain.run, ...",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("benchmark-results.json"),
        metavar="PATH",
        help="Where to write the results (default: benchmark-results.json here).",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get(DATABASE_URL_ENV, DEFAULT_DATABASE_URL),
        metavar="URL",
        help="PostgreSQL database to create, use and drop "
        f"(default: ${DATABASE_URL_ENV} or {DEFAULT_DATABASE_URL}). It must not exist "
        "or hold anything you want to keep.",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    os.environ[DATABASE_URL_ENV] = args.database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    django.setup()
    # Imported once Django is set up: they import models.
    from benchmarks import compare, pooler, report, suite
    from benchmarks.sizes import DEFAULT, QUICK

    sizes = QUICK if args.quick else DEFAULT
    with_pgqueuer = "pgqueuer" in args.compare
    if with_pgqueuer and (why := compare.missing()):
        print(why, file=sys.stderr)
        with_pgqueuer = False
    with_pooler = args.pooler
    if with_pooler and (why := pooler.missing(args.database_url)):
        print(why, file=sys.stderr)
        with_pooler = False
    with_tracing = args.tracing
    if with_tracing and importlib.util.find_spec("opentelemetry") is None:
        print('--tracing needs the otel extra: pip install -e ".[otel]"; skipped', file=sys.stderr)
        with_tracing = False
    steps = suite.plan(
        with_pgqueuer=with_pgqueuer,
        with_pooler=with_pooler,
        with_purge_backlog=args.purge_backlog,
        with_large_table=args.large_table,
        with_tracing=with_tracing,
    )
    if args.only:
        names = [suite.step_name(step) for step in steps]
        if unknown := sorted(set(args.only) - set(names)):
            sys.exit(f"--only {', '.join(unknown)}: no such step here; steps: {', '.join(names)}")
        steps = [step for step in steps if suite.step_name(step) in args.only]
    results, run = suite.run(args.database_url, sizes, steps)
    print(report.table(results))
    report.write_json(args.json, results, {"mode": "quick" if args.quick else "default", **run})
    print(f"\nwrote {args.json} ({run['duration_seconds']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
