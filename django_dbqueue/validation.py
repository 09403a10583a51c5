"""The rules a job's values must meet, each stated once.

Queue names and the ``QUEUES`` allow-list, whole numbers and seconds that a
job's integer columns hold, text every database stores, the importability of
a task path, and arguments that bind to a function. ``enqueue()``, ``@task``, ``runworkers``, the
``django.tasks`` backend and the system checks all ask here, so a value one
of them accepts is never refused by another. A refusal is ``InvalidJob``
naming the value and what to use instead; callers that speak another error
type (``CommandError``, ``InvalidTask``, a system check) translate it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard, TypeVar

from django.utils.module_loading import import_string

from django_dbqueue import durations, jsontext
from django_dbqueue.exceptions import InvalidJob, TaskNotFound

T = TypeVar("T")

QUEUE_NAME_PATTERN = r"[A-Za-z0-9_.-]{1,100}"
#: The queue-name rule, as messages and hints state it.
QUEUE_NAME_RULE = "use 1-100 letters, digits, '_', '-' or '.'"

#: Bounds of the integer columns options end up in.
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)


def is_queue_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is 1-100 letters, digits, ``_``, ``-`` or ``.``."""
    return isinstance(value, str) and re.fullmatch(QUEUE_NAME_PATTERN, value) is not None


def check_queue_name(queue: object) -> str:
    """Return ``queue`` if it is a valid queue name, else raise ``InvalidJob``."""
    if not is_queue_name(queue):
        raise InvalidJob(f"Queue name {queue!r} is invalid: {QUEUE_NAME_RULE}.")
    return queue


def unclaimed(queue: str, allowed: Sequence[str] | None) -> bool:
    """Whether no worker would claim jobs of ``queue``: ``QUEUES`` lists others only."""
    return allowed is not None and queue not in allowed


def check_queue(queue: object, allowed: Sequence[str] | None) -> str:
    """Return ``queue`` if it is a valid name that ``allowed`` (``QUEUES``) admits.

    Else raise ``InvalidJob``: an invalid name, or one no worker would claim.
    """
    name = check_queue_name(queue)
    if unclaimed(name, allowed):
        raise InvalidJob(
            f"Queue {name!r} is not in DBQUEUE['QUEUES'] {allowed}, so no worker would "
            "claim it. Add it there or use one of those queues."
        )
    return name


def check_text(name: str, value: str) -> str:
    """Return ``value`` if every database stores it as itself, else raise ``InvalidJob``.

    A NUL character or a surrogate code point (``jsontext.unstorable``) is
    refused on every vendor alike, before it could fail the statement (and,
    on PostgreSQL, the caller's transaction with it).
    """
    problem = jsontext.unstorable(value)
    if problem:
        raise InvalidJob(f"{name} {value!r} holds {problem}. Leave it out of the {name}.")
    return value


def is_whole(value: object, minimum: int = INT_MIN) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` (not a bool) from ``minimum`` to ``INT_MAX``."""
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= INT_MAX


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an int in ``[minimum, INT_MAX]``, else raise ``InvalidJob``."""
    if not is_whole(value, minimum):
        raise InvalidJob(
            f"{name} must be a whole number from {minimum} to {INT_MAX}, not {value!r}."
        )
    return value


def is_column_seconds(value: object) -> TypeGuard[float]:
    """Whether ``value`` is seconds above 0 (``durations``) that an integer column holds."""
    return durations.is_seconds(value) and value <= INT_MAX  # type: ignore[operator]  # a number here.


def check_seconds(name: str, value: object) -> float:
    """Return ``value`` if it is a positive number of seconds, else raise ``InvalidJob``."""
    if not is_column_seconds(value):
        raise InvalidJob(f"{name} must be a positive number of seconds, not {value!r}.")
    return value


def import_task(path: str, kind: type[T], what: str) -> T:
    """The ``kind`` object at import path ``path``.

    Raises ``TaskNotFound`` when nothing importable is there, when importing
    its module fails in any way (it runs the project's code), or when the
    object found is not a ``kind`` (described as ``what``).
    """
    try:
        found = import_string(path)
    except KeyboardInterrupt:
        raise
    # Importing runs the module's own code, which may raise anything, sys.exit() included.
    except BaseException as exc:
        raise TaskNotFound(f"{path} cannot be imported: {type(exc).__name__}: {exc}") from exc
    if not isinstance(found, kind):
        raise TaskNotFound(f"{path} is {type(found).__name__}, not {what}.")
    return found


def check_importable(path: str, kind: type[T], is_this: Callable[[T], bool]) -> None:
    """Workers import a task by ``path``: raise ``InvalidJob`` unless they would find this one.

    ``is_this`` tells whether the ``kind`` object found there is the task being enqueued.
    """
    try:
        found = import_task(path, kind, kind.__name__)
    except TaskNotFound:
        found = None
    if found is None or not is_this(found):
        raise InvalidJob(
            f"Task {path} cannot be imported by that name, so no worker could run it. "
            "Declare it with @task at module level, under the function's own name."
        )


def check_binds(
    where: str,
    signature: inspect.Signature,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    leading: int = 0,
) -> None:
    """Raise ``InvalidJob`` naming every problem when the arguments do not fit ``signature``.

    ``leading`` parameters (a context the worker passes first) are bound to
    ``None`` here and left out of the account.
    """
    try:
        signature.bind(*((None,) * leading), *args, **kwargs)
    except TypeError as exc:
        problem = binding_problem(signature, args, kwargs, exc, leading=leading)
        raise InvalidJob(f"{where}: {problem}.") from exc


def binding_problem(
    signature: inspect.Signature,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    error: TypeError,
    *,
    leading: int = 0,
) -> str:
    """Why ``args`` and ``kwargs`` do not fit ``signature``: every problem at once.

    ``inspect`` reports only the first problem it meets (a missing argument
    hides a misspelled one); this names the missing, unexpected, doubled and
    surplus arguments together, after the fixed message prefix. ``leading``
    parameters (a context the worker passes) are left out of the account;
    ``error`` is the ``TypeError`` binding raised, shown when nothing else is found.
    """
    parameters = list(signature.parameters.values())[leading:]
    kinds = {parameter.kind for parameter in parameters}
    positional = [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    by_keyword = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    filled = set(positional[: len(args)]) | set(kwargs)
    problems = []
    missing = [
        p.name
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and p.name not in filled
    ]
    if missing:
        problems.append(f"missing {_names(missing)}")
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        unexpected = [name for name in kwargs if name not in by_keyword]
        if unexpected:
            problems.append(f"unexpected keyword {_names(unexpected)}")
    doubled = [name for name in positional[: len(args)] if name in kwargs]
    if doubled:
        problems.append(f"given both by position and by keyword: {_names(doubled)}")
    if inspect.Parameter.VAR_POSITIONAL not in kinds and len(args) > len(positional):
        problems.append(f"{len(args)} positional arguments given, {len(positional)} accepted")
    found = "; ".join(problems) or str(error)
    shown = inspect.Signature(
        [parameter.replace(annotation=inspect.Parameter.empty) for parameter in parameters]
    )
    return f"the arguments do not fit the function{shown}: {found}"


def _names(names: list[str]) -> str:
    quoted = ", ".join(repr(name) for name in names)
    return f"argument{'s' if len(names) > 1 else ''} {quoted}"
