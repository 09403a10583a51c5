"""The code blocks of the docs that a test runs, found by their marker.

A block is run only when the line just before its fence is a MyST comment (hidden from
the rendered page) naming how:

``% run: python``
    A ``python`` block, imported as a module of its own (so its ``@task`` functions are
    importable by name, as a worker needs) inside a test on the test database
    (pytest-django's ``db``: rolled back afterwards). Its ``assert`` lines are the check.
``% run: project``
    A ``python`` block whose first line names a file of a new project
    (``# shop/tasks.py``); ``# mysite/settings.py (append)`` adds to the file instead.
``% run: shell``
    A ``bash`` block of commands, one a line, run in order in that page's new project
    (a temporary directory, Django's default SQLite database); each must exit 0.
    ``python`` is the interpreter running the tests. A ``pip`` line is not run: that
    interpreter already has the package. A command that does not end by itself
    (``runworkers`` without ``--burst`` or ``--max-jobs``) is refused: leave such a
    block unmarked.

Unmarked blocks are not run: a worker left running, a snippet with ``...`` in it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: The pages whose marked blocks are run: the tutorial and the how-to guides.
RUN_PAGES = ("tutorial", "howto")
KINDS = ("python", "project", "shell")
MARKED = re.compile(r"^% run: (\w+)\n```(\w+)\n(.*?)^```\n", flags=re.M | re.S)
#: Commands that end by themselves; any other runworkers line is refused.
BOUNDED_WORKER = ("--burst", "--max-jobs")


@dataclass(frozen=True)
class Block:
    page: str  # "howto/testing.md"
    kind: str
    language: str
    code: str
    line: int  # of the fence, 1-based

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def pages() -> list[str]:
    return sorted(
        str(path.relative_to(DOCS)) for part in RUN_PAGES for path in (DOCS / part).glob("*.md")
    )


def blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text()
    found = []
    for match in MARKED.finditer(text):
        kind, language, code = match.groups()
        line = text.count("\n", 0, match.start()) + 2
        block = Block(page, kind, language, code, line)
        if kind not in KINDS:
            raise ValueError(f"{block.where}: unknown kind {kind!r}; one of {KINDS}")
        expected = "bash" if kind == "shell" else "python"
        if language != expected:
            raise ValueError(f"{block.where}: a {kind} block is ```{expected}, not {language}")
        found.append(block)
    return found


def marked(kind: str) -> list[Block]:
    return [block for page in pages() for block in blocks(page) if block.kind == kind]


def project_pages() -> list[str]:
    """Pages with ``project`` or ``shell`` blocks: each builds one new project."""
    return [page for page in pages() if any(b.kind != "python" for b in blocks(page))]


def project_files(page: str) -> dict[str, str]:
    """``{path: code}`` of the page's ``project`` blocks (appended ones joined)."""
    files: dict[str, str] = {}
    for step in steps(page):
        if isinstance(step, FileStep):
            files[step.path] = files.get(step.path, "") + step.code if step.append else step.code
    return files


@dataclass(frozen=True)
class FileStep:
    block: Block
    path: str
    code: str
    append: bool


@dataclass(frozen=True)
class CommandStep:
    block: Block
    argv: list[str]


def steps(page: str) -> list[FileStep | CommandStep]:
    """The page's ``project`` files and ``shell`` commands, in page order."""
    found: list[FileStep | CommandStep] = []
    for block in blocks(page):
        if block.kind == "project":
            named = re.match(r"# (\S+)( \(append\))?", block.code)
            if named is None:
                raise ValueError(f"{block.where}: a project block's first line names its file")
            found.append(FileStep(block, named.group(1), block.code, named.group(2) is not None))
        elif block.kind == "shell":
            found += [CommandStep(block, argv) for argv in _commands(block)]
    return found


def _commands(block: Block) -> list[list[str]]:
    """The block's commands, ``pip`` lines left out; one that never ends is refused."""
    found = []
    for line in block.code.splitlines():
        argv = shlex.split(line, comments=True)
        if not argv or argv[0] == "pip":
            continue
        if "runworkers" in argv and not set(BOUNDED_WORKER) & set(argv):
            raise ValueError(
                f"{block.where}: {line!r} runs until stopped; leave the block unmarked "
                f"or give it one of {BOUNDED_WORKER}"
            )
        found.append(argv)
    return found
