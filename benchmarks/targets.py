"""The performance targets of issues 7 (item 3), 27 and 33 (which restates 16's), each judged
against one run's figures."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from benchmarks.results import Result


@dataclass(frozen=True)
class Target:
    """``result`` divided by the best of ``against`` (or by 1 when empty) must stay in bounds."""

    result: str
    text: str
    against: tuple[str, ...] = ()
    at_least: float | None = None
    at_most: float | None = None
    #: Compare with the median of the reference's rounds, not its best: for a
    #: figure measured once, against one that kept the best of several rounds.
    typical: bool = False
    #: At most this much above the reference, in the figure's unit (not a ratio).
    above_by_at_most: float | None = None


@dataclass(frozen=True)
class Verdict:
    """A target judged: the ratio it compares (the figure itself for absolute targets)."""

    target: Target
    ratio: float
    met: bool


RAW_B50 = ("raw_claim_complete_b50",)

TARGETS = (
    Target("drain_1x32", "≥ 40% of raw batch 50", RAW_B50, at_least=0.40),
    Target("drain_2x8", "above 1 process x 8", ("drain_1x8",), at_least=1.0),
    Target("drain_2x32", "above 1 process x 32", ("drain_1x32",), at_least=1.0),
    Target("drain_1x8", "≥ 95% of CONN_MAX_AGE=None", ("drain_1x8_persistent",), at_least=0.95),
    Target(
        "drain_backlog",
        "≥ 80% of empty table (median round)",
        ("drain_1x8",),
        at_least=0.80,
        typical=True,
    ),
    Target(
        "drain_beside_running",
        "≥ 90% of 1 process x 32 alone (median round)",
        ("drain_1x32",),
        at_least=0.90,
        typical=True,
    ),
    Target("pickup_p50", "≤ 1.5 ms", at_most=1.5),
    Target("pickup_p95", "≤ 5 ms", at_most=5.0),
    Target("enqueue_autocommit", "≥ 70% of raw", ("raw_insert_notify",), at_least=0.70),
    Target(
        "enqueue_autocommit",
        "≥ 95% of CONN_MAX_AGE=None",
        ("enqueue_autocommit_persistent",),
        at_least=0.95,
    ),
    Target("enqueue_one_atomic", "≥ 50% of raw", ("raw_inserts_one_transaction",), at_least=0.5),
    Target("enqueue_many", "≥ 70% of raw", ("raw_multirow_insert",), at_least=0.70),
    Target("enqueue_autocommit_prepared", "≥ 70% of raw", ("raw_insert_notify",), at_least=0.70),
    Target(
        "enqueue_one_atomic_prepared",
        "≥ 50% of raw",
        ("raw_inserts_one_transaction",),
        at_least=0.5,
    ),
    Target("enqueue_many_prepared", "≥ 70% of raw", ("raw_multirow_insert",), at_least=0.70),
    Target("rss_after", "< 110% of RSS before", ("rss_before",), at_most=1.10),
    Target(
        "drain_2x32_one_command",
        "≥ 95% of two commands",
        ("drain_2x32",),
        at_least=0.95,
    ),
    # Issue 27: fan-in must not serialise completions; a chain hands off at pickup speed.
    Target(
        "workflow_drain_fan_in",
        "≥ 70% of plain drain (same run)",
        ("workflow_drain_plain",),
        at_least=0.70,
    ),
    Target("workflow_chain_handoff_p50", "≤ 5 ms", at_most=5.0),
    # Issue 33 (restating issue 16's), measured only with --compare pgqueuer: ratios in one run.
    Target(
        "compare_drain_ours", "≥ 1.2x pgqueuer batch 50", ("compare_drain_pgqueuer",), at_least=1.2
    ),
    Target("compare_drain_ours", "≥ 45% of raw batch 50", ("compare_drain_raw",), at_least=0.45),
    Target(
        "compare_drain_ours_wide",
        "≥ 1.5x pgqueuer's best",
        ("compare_drain_pgqueuer", "compare_drain_pgqueuer_wide"),
        at_least=1.5,
    ),
    Target(
        "compare_cpu_ours_total",
        "≤ 0.6x pgqueuer batch 50",
        ("compare_cpu_pgqueuer_total",),
        at_most=0.6,
    ),
    Target(
        "compare_cpu_ours_wide_total",
        "≤ 0.6x pgqueuer batch 500",
        ("compare_cpu_pgqueuer_wide_total",),
        at_most=0.6,
    ),
    # "PostgreSQL's share ≤ 1.0x raw's at the same batch size": raw at each of ours' sizes.
    Target(
        "compare_cpu_ours_postgres",
        "≤ 1.0x raw at the same size",
        ("compare_cpu_raw_ours_postgres",),
        at_most=1.0,
    ),
    Target(
        "compare_cpu_ours_wide_postgres",
        "≤ 1.0x raw at the same size",
        ("compare_cpu_raw_ours_wide_postgres",),
        at_most=1.0,
    ),
    # The SQL alone at ours' sizes, against the drain targets: what any worker over the
    # same statements could reach there.
    Target(
        "compare_drain_raw_ours",
        "ceiling of ≥ 1.2x pgqueuer batch 50",
        ("compare_drain_pgqueuer",),
        at_least=1.2,
    ),
    Target(
        "compare_drain_raw_ours_wide",
        "ceiling of ≥ 1.5x pgqueuer's best",
        ("compare_drain_pgqueuer", "compare_drain_pgqueuer_wide"),
        at_least=1.5,
    ),
    Target(
        "compare_cpu_raw_ours_total",
        "ceiling of ≤ 0.6x pgqueuer batch 50",
        ("compare_cpu_pgqueuer_total",),
        at_most=0.6,
    ),
    Target(
        "compare_cpu_raw_ours_wide_total",
        "ceiling of ≤ 0.6x pgqueuer batch 500",
        ("compare_cpu_pgqueuer_wide_total",),
        at_most=0.6,
    ),
    Target(
        "compare_enqueue_autocommit_ours",
        "≥ 1.0x pgqueuer",
        ("compare_enqueue_autocommit_pgqueuer",),
        at_least=1.0,
    ),
    Target(
        "compare_enqueue_bulk_ours",
        "≥ 1.2x pgqueuer",
        ("compare_enqueue_bulk_pgqueuer",),
        at_least=1.2,
    ),
    # Ours' statement alone on Django's defaults, and raw's prepared insert, against the
    # enqueue targets: what any enqueue through that statement, or into this table, could reach.
    Target(
        "compare_enqueue_autocommit_ours_statement",
        "ceiling of ≥ 1.0x pgqueuer",
        ("compare_enqueue_autocommit_pgqueuer",),
        at_least=1.0,
    ),
    Target(
        "compare_enqueue_bulk_ours_statement",
        "ceiling of ≥ 1.2x pgqueuer",
        ("compare_enqueue_bulk_pgqueuer",),
        at_least=1.2,
    ),
    Target(
        "compare_enqueue_bulk_raw",
        "ceiling of ≥ 1.2x pgqueuer",
        ("compare_enqueue_bulk_pgqueuer",),
        at_least=1.2,
    ),
    Target(
        "compare_pickup_ours_p50",
        "≤ raw + 0.3 ms",
        ("compare_pickup_raw_p50",),
        above_by_at_most=0.3,
    ),
    Target("compare_pickup_ours_p95", "≤ 2x raw", ("compare_pickup_raw_p95",), at_most=2.0),
)


def figure(result: Result, typical: bool) -> float:
    """The result's figure, or with ``typical`` the median of its rounds (when it has some)."""
    rounds = result.details.get("rounds")
    if typical and isinstance(rounds, list) and rounds:
        return float(statistics.median(rounds))
    return result.value


def judge(results: Mapping[str, Result]) -> list[Verdict]:
    """Every target whose figures were measured, judged."""
    verdicts = []
    for target in TARGETS:
        if target.result not in results or not all(key in results for key in target.against):
            continue
        reference = max(
            (figure(results[key], target.typical) for key in target.against), default=1.0
        )
        value = results[target.result].value
        ratio = value / reference
        met = (
            (target.at_least is None or ratio >= target.at_least)
            and (target.at_most is None or ratio <= target.at_most)
            and (target.above_by_at_most is None or value - reference <= target.above_by_at_most)
        )
        verdicts.append(Verdict(target, ratio, met))
    return verdicts
