"""One process of the raw ceiling drain: ``python -m benchmarks.raw_drain URL --batch N``.

It runs the protocol's own claim and complete statements (``raw.claim_and_complete``)
on a connection of its own, ``N`` jobs a claim, until none is due: the SQL with no job
runner around it. ``compare`` starts as many of these as ours has processes, with
ours' batch, so their rate is what any worker could reach over the same statements at
that size. Each process connects, prints ``ready`` and waits for a line on its stdin,
so all start draining together; then it prints one JSON line: how many jobs it ran,
and when (``time.time()``) it sent its first claim and had its last completion back.
Settings come from the environment (``workers.environment``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.raw_drain")
    parser.add_argument("url")
    parser.add_argument("--batch", type=int, required=True)
    args = parser.parse_args()
    django.setup()
    from benchmarks import raw  # reads the package's statements: after setup

    with raw.connect(args.url) as conn:
        print("ready", flush=True)
        sys.stdin.readline()
        first = time.time()
        jobs = raw.claim_and_complete(conn, args.batch)
        end = time.time()
    print(json.dumps({"jobs": jobs, "first": first, "end": end}), flush=True)


if __name__ == "__main__":
    main()
