"""A job's arguments as the JSON text its row stores: checked, then encoded.

Arguments must bind to the task's function, be JSON that reads back as the
same value (``jsontext``) and, as JSON, fit ``MAX_ARGS_BYTES``. A refusal is
``InvalidJob`` naming the call and the argument, raised before anything is
written; ``ArgumentNotJSON`` (also a ``TypeError``) for a type JSON has no
place for, as ``django.tasks`` documents.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django_dbqueue import conf, jsontext
from django_dbqueue.exceptions import ArgumentNotJSON, InvalidJob
from django_dbqueue.validation import check_binds

Call = tuple[Sequence[Any], dict[str, Any]]

#: How many call shapes that bind are remembered per task (``Task.binding_shapes``).
#: Binding looks at nothing but a call's shape (how many positional arguments, which
#: keywords), never at the values, so a shape that bound once binds every time; refused
#: shapes are never kept, so every refusal names its problems anew.
BINDING_SHAPES = 64


@dataclass(frozen=True)
class Callee:
    """The function a job's arguments are checked against: a native ``@task``'s
    (``Task.callee``) or a ``django.tasks`` task's, through the same checks."""

    #: The task's import path, which errors name.
    name: str
    signature: inspect.Signature
    #: Parameters the worker fills in before the arguments (a context): 0 or 1.
    leading: int = 0
    #: Call shapes seen to bind (``BINDING_SHAPES``), shared by the calls of this callee.
    binding_shapes: set[tuple[object, ...]] = field(default_factory=set)


def encode_calls(callee: Callee, calls: list[Call], limit: int | None = None) -> str:
    """The calls as one JSON array of ``{"args", "kwargs"}``; refuses what cannot bind or encode.

    ``limit`` is ``MAX_ARGS_BYTES`` (default: the setting's), checked for each
    call. Every call is checked first, then all are encoded at once; a call
    JSON refuses (``jsontext.dumps``: NaN, a NUL character, a surrogate code
    point among them), or one longer than ``limit``, is then found and named.
    Nothing reaches the database before this returns.
    """
    if limit is None:
        limit = conf.get().max_args_bytes
    binding = callee.binding_shapes
    for position, (args, kwargs) in enumerate(calls):
        where = call_name(callee, calls, position)
        shape = (len(args), *kwargs)
        if shape not in binding:
            check_binds(where, callee.signature, args, kwargs, leading=callee.leading)
            if len(binding) < BINDING_SHAPES:
                binding.add(shape)
        check_arguments(where, args, kwargs)
    try:
        text = jsontext.dumps([{"args": list(args), "kwargs": kwargs} for args, kwargs in calls])
    except (TypeError, ValueError):
        text = ""  # encode_call names the call and argument JSON refuses, below
    # ASCII (json escapes the rest), so characters are bytes; each call is shorter than all.
    if not text or (limit and len(text) > limit):
        texts = []
        for position, (args, kwargs) in enumerate(calls):
            where = call_name(callee, calls, position)
            texts.append(encode_call(where, args, kwargs))
            check_size(where, texts[-1], limit)
        text = "[" + ",".join(texts) + "]"
    return text


def call_name(callee: Callee, calls: list[Call], position: int) -> str:
    """How errors name a call: the task, and the call's position among several."""
    return f"{callee.name} (call {position})" if len(calls) > 1 else callee.name


def check_size(where: str, text: str, limit: int) -> None:
    """Raise ``InvalidJob`` when a call's JSON ``text`` is longer than ``limit`` (0: no limit)."""
    if limit and len(text) > limit:
        raise InvalidJob(
            f"{where}: the arguments take {len(text)} bytes as JSON, more than "
            f"DBQUEUE['MAX_ARGS_BYTES'] ({limit}). Store large data in a row or a file "
            "and pass its id."
        )


def check_arguments(where: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Refuse an argument JSON would change or that nests too deep (``jsontext.check_argument``).

    A dict key that is not a string raises ``ArgumentNotJSON`` (a ``TypeError``),
    too deep a nesting a plain ``InvalidJob``; both name the argument.
    """
    for value in (*args, *kwargs.values()):
        try:
            jsontext.check_argument(value)
        except (TypeError, ValueError) as exc:
            label = next(label for label, found in labelled(args, kwargs) if found is value)
            raise refused(f"{where}: {label} {exc}.", exc) from exc


def encode_call(where: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """One call as JSON text; ``InvalidJob`` naming the argument JSON cannot hold.

    An argument of a type JSON has no place for (a ``datetime``, a dict key that
    is not a string) raises ``ArgumentNotJSON``, also a ``TypeError``, as
    ``django.tasks`` documents; NaN, infinity, a string holding a NUL character
    or a surrogate code point (no database stores either) and values nested
    too deep a plain ``InvalidJob``, a ``ValueError`` as Django's own
    ``normalize_json`` raises for a value of a JSON type it cannot convert.
    """
    check_arguments(where, args, kwargs)
    try:
        return jsontext.dumps({"args": list(args), "kwargs": kwargs})
    except (TypeError, ValueError) as exc:
        culprit = next(
            (label for label, value in labelled(args, kwargs) if not is_json(value)),
            "an argument",
        )
        hint = (
            "Pass JSON values (str, int, float, bool, None, list, dict), such as an id "
            "instead of an object."
            if isinstance(exc, TypeError)
            else "Pass finite numbers, and text without NUL characters or surrogate code points."
        )
        raise refused(f"{where}: {culprit} is not JSON-serializable ({exc}). {hint}", exc) from exc


def labelled(args: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each argument with the label an error names it by: ``argument 0``, ``argument 'x'``."""
    named = [(f"argument {i}", value) for i, value in enumerate(args)]
    return named + [(f"argument {name!r}", value) for name, value in kwargs.items()]


def refused(message: str, exc: Exception) -> InvalidJob:
    """The error for an argument JSON refused with ``exc``: ``ArgumentNotJSON`` for a type."""
    return (ArgumentNotJSON if isinstance(exc, TypeError) else InvalidJob)(message)


def is_json(value: object) -> bool:
    try:
        jsontext.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
