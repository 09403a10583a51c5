"""The marked code blocks of the tutorial and the how-to guides run (see ``blocks.py``).

``python`` blocks run in this process on the test database; each page's ``project`` and
``shell`` blocks build a new project in a temporary directory and run its commands there,
in a fresh interpreter (``e2e``: subprocesses). ``howto/testing.md`` builds its project in
``tests/e2e/test_startproject.py``, which checks what its test commands print.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_dbqueue import registry
from tests.docs import blocks
from tests.fresh_python import run_python

#: Pages whose project a test of its own builds and checks.
OWN_TEST = {"howto/testing.md": "tests/e2e/test_startproject.py"}


def test_the_docs_have_blocks_of_every_kind_marked() -> None:
    assert blocks.marked("python")
    assert blocks.marked("project")
    assert blocks.marked("shell")
    assert set(OWN_TEST) <= set(blocks.project_pages())


def test_a_worker_that_never_ends_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "howto").mkdir()
    (tmp_path / "howto" / "run.md").write_text(
        "% run: shell\n```bash\npython manage.py runworkers --concurrency 4\n```\n"
    )
    monkeypatch.setattr(blocks, "DOCS", tmp_path)
    with pytest.raises(ValueError, match="runs until stopped"):
        blocks.steps("howto/run.md")


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` for the block's module; its tasks leave the registry after."""
    monkeypatch.setattr(registry, "_queues", dict(registry._queues))
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))


@pytest.mark.django_db
@pytest.mark.parametrize("block", blocks.marked("python"), ids=lambda block: block.where)
def test_python_block_runs_on_the_test_database(block: blocks.Block, module_dir: Path) -> None:
    name = "docs_block_" + "".join(c if c.isalnum() else "_" for c in block.where)
    (module_dir / f"{name}.py").write_text(block.code)
    try:
        importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)


@pytest.mark.e2e
@pytest.mark.parametrize("page", [p for p in blocks.project_pages() if p not in OWN_TEST])
def test_page_project_builds_and_its_commands_succeed(page: str, tmp_path: Path) -> None:
    for step in blocks.steps(page):
        if isinstance(step, blocks.FileStep):
            path = tmp_path / step.path
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a" if step.append else "w") as file:
                file.write(step.code)
            continue
        program, *args = step.argv
        assert program == "python", f"{step.block.where}: run {step.argv} with python"
        done = run_python(*args, cwd=tmp_path)
        assert done.returncode == 0, f"{step.block.where}: {step.argv}\n{done.stdout}{done.stderr}"
