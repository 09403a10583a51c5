"""The run's results as a table for people and as JSON for tools."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.results import Result, Results
from benchmarks.targets import Verdict, judge

HEADERS = ("benchmark", "n", "figure", "unit", "of raw", "target", "met")
DECIMALS = {"jobs/s": 0, "ms": 2, "MiB": 1, "µs/job": 1}


def figure(result: Result) -> str:
    return f"{result.value:,.{DECIMALS.get(result.unit, 2)}f}"


def percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.0%}"


def verdict_cells(verdict: Verdict) -> tuple[str, str]:
    met = "yes" if verdict.met else "NO"
    if verdict.target.against:
        met += f" ({percent(verdict.ratio)})"
    return verdict.target.text, met


def rows(results: Results) -> list[tuple[str, ...]]:
    """One row per result; a result judged by several targets continues on extra rows."""
    by_result: dict[str, list[Verdict]] = defaultdict(list)
    for verdict in judge(results):
        by_result[verdict.target.result].append(verdict)
    table: list[tuple[str, ...]] = []
    for key, result in results.items():
        verdicts = by_result[key]
        first = verdict_cells(verdicts[0]) if verdicts else ("", "")
        label = result.label + (" [cut short]" if result.details.get("cut_short") else "")
        ratio = percent(results.ratio_to_raw(key))
        count = "" if result.n is None else f"{result.n:,}"
        table.append((label, count, figure(result), result.unit, ratio, *first))
        table.extend(("", "", "", "", "", *verdict_cells(more)) for more in verdicts[1:])
    return table


def table(results: Results) -> str:
    """The results as an aligned text table."""
    lines = [HEADERS, *rows(results)]
    widths = [max(len(line[column]) for line in lines) for column in range(len(HEADERS))]
    right = {1, 2, 4}
    text = []
    for number, line in enumerate(lines):
        cells = [
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        text.append("  ".join(cells).rstrip())
        if number == 0:
            text.append("  ".join("-" * width for width in widths))
    return "\n".join(text)


def document(results: Results, run: dict[str, Any]) -> dict[str, Any]:
    """Everything measured, with ``run`` (mode, sizes, environment, duration) alongside."""
    return {
        **run,
        "results": {
            key: {
                "label": result.label,
                "n": result.n,
                "value": result.value,
                "unit": result.unit,
                "raw": result.raw,
                "ratio_to_raw": results.ratio_to_raw(key),
                "details": dict(result.details),
            }
            for key, result in results.items()
        },
        "targets": [
            {
                "result": verdict.target.result,
                "target": verdict.target.text,
                "against": list(verdict.target.against),
                "ratio": verdict.ratio,
                "met": verdict.met,
            }
            for verdict in judge(results)
        ],
    }


def write_json(path: Path, results: Results, run: dict[str, Any]) -> None:
    path.write_text(json.dumps(document(results, run), indent=2, ensure_ascii=False) + "\n")
