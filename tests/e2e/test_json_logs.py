"""The docs' JSON logging config (docs/howto/logging.md), run by a real ``runworkers``.

The ``LOGGING`` dict is read from the page itself, so the page and this test cannot
drift: every line the worker writes is one JSON object, and each attempt's outcome line
carries every field of ``logfields.FIELDS``, the failed one its traceback too.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from django_dbqueue.logfields import FIELDS
from tests.docs.blocks import DOCS
from tests.e2e.conftest import WorkerProcess
from tests.jobs import tasks

PAGE = DOCS / "howto" / "logging.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```\n", flags=re.M | re.S)


def documented_logging() -> dict[str, Any]:
    """The value of the one ``LOGGING = {...}`` assignment in the page's python blocks."""
    found = [
        node.value
        for block in PYTHON_BLOCK.findall(PAGE.read_text())
        for node in ast.parse(block).body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["LOGGING"]
    ]
    assert len(found) == 1, f"{PAGE} should show one LOGGING dict, not {len(found)}"
    config: dict[str, Any] = ast.literal_eval(found[0])
    return config


def test_the_page_uses_python_json_logger() -> None:
    formatter = documented_logging()["formatters"]["json"]
    assert formatter["()"] == "pythonjsonlogger.json.JsonFormatter"


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_every_line_is_one_json_object_and_outcome_lines_carry_every_field(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    succeeds = tasks.noop.enqueue()
    fails = tasks.permanent.enqueue()
    worker = start_worker(
        "--burst",
        "--worker-id",
        "w-json",
        env={"LOGGING_OVERRIDE": json.dumps(documented_logging())},
    )
    assert worker.wait() == 0, worker.log()

    lines = worker.log().splitlines()
    assert lines, "the worker logged nothing"
    objects = [json.loads(line) for line in lines]  # fails on any line that is not JSON
    assert all(isinstance(logged, dict) for logged in objects)
    outcomes = {logged["job_id"]: logged for logged in objects if "outcome" in logged}
    assert outcomes.keys() == {succeeds.pk, fails.pk}
    for job, outcome, code in ((succeeds, "succeeded", None), (fails, "dead", "PERMANENT_ERROR")):
        logged = outcomes[job.pk]
        assert set(FIELDS) <= logged.keys()
        assert {name: logged[name] for name in FIELDS if name != "duration_ms"} == {
            "job_id": job.pk,
            "task": job.task,
            "queue": "default",
            "attempt": 1,
            "outcome": outcome,
            "error_code": code,
            "worker_id": "w-json",
        }
        assert isinstance(logged["duration_ms"], float)
        assert logged["duration_ms"] >= 0
        assert logged["message"].startswith(f"job id={job.pk} task={job.task} attempt=1/5")
    assert "exc_info" not in outcomes[succeeds.pk]
    assert "PermanentError: the card was declined" in outcomes[fails.pk]["exc_info"]
    assert sum("exc_info" in logged for logged in objects) == 1
