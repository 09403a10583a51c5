"""The task registry: every task this process has imported, by import path.

``@task`` and the ``django.tasks`` backend's ``validate_task`` (which the
framework runs as each task is defined) record the task here, with the queue
it names. Operators' views (the admin's task and queue filters, its task
search) read it to list tasks that have no row to find them by. Only what the
process imported is known: a task whose module nothing imported is missing
until it is, which is why those views add the values found on triage rows.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_queues: dict[str, str | None] = {}


def register(path: str, queue: str | None) -> None:
    """Record task ``path`` and the queue it names (``None``: the default queue)."""
    with _lock:
        _queues[path] = queue


def task_paths() -> list[str]:
    """The import paths of every registered task, sorted."""
    with _lock:
        return sorted(_queues)


def queues() -> set[str]:
    """The queues registered tasks name (a task naming none is left out)."""
    with _lock:
        return {queue for queue in _queues.values() if queue is not None}
