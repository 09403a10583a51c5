"""Reading PostgreSQL's JSON plans (``EXPLAIN (FORMAT JSON)``) in tests.

``reads`` and ``scans`` fail loudly when a plan reads no relation of the name
asked for, so an assertion about how the job table is read (no sequential scan,
this index, so many rows) never holds vacuously: for a plan that reads a
renamed, inherited or partitioned table instead, say.
"""

from __future__ import annotations

import json
from typing import Any

JOB_TABLE = "dbqueue_job"

#: A plan as ``EXPLAIN (FORMAT JSON)`` gives it (JSON text, or the list psycopg parsed), a
#: ``{"Plan": ...}`` entry of that list, or one of its nodes.
Plan = str | list[Any] | dict[str, Any]


def top(plan: Plan) -> dict[str, Any]:
    """The top node of ``plan`` (``plan`` itself when it is a node)."""
    parsed = json.loads(plan) if isinstance(plan, str) else plan
    entry: dict[str, Any] = parsed[0] if isinstance(parsed, list) else parsed
    node: dict[str, Any] = entry.get("Plan", entry)
    return node


def nodes(plan: Plan) -> list[dict[str, Any]]:
    """The top node of ``plan`` and every node below it."""
    found = [top(plan)]
    for node in found:
        found.extend(node.get("Plans", []))
    return found


def reads(plan: Plan, table: str = JOB_TABLE) -> list[dict[str, Any]]:
    """The nodes of ``plan`` that read ``table``, by its index or itself.

    Raises ``AssertionError`` naming the relations the plan reads when none is ``table``.
    """
    every = nodes(plan)
    found = [node for node in every if node.get("Relation Name") == table]
    if not found:
        relations = sorted({node["Relation Name"] for node in every if "Relation Name" in node})
        raise AssertionError(f"the plan reads no {table!r}, only {relations}: {top(plan)}")
    return found


def scans(plan: Plan, table: str = JOB_TABLE) -> set[str]:
    """``"<node type>:<index or table>"`` for every read of ``table`` in ``plan``."""
    return {
        f"{node['Node Type']}:{node.get('Index Name', node['Relation Name'])}"
        for node in reads(plan, table)
    }
