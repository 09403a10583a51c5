"""Composing jobs: ``chain``, ``group`` and ``then``, enqueued in one transaction.

A ``Step`` is one task call not yet enqueued (``task.step(*args, **kwargs)``,
or ``task.using(...).step(...)`` with options). ``chain(a, b, c)`` runs each
part after every job of the part before it has succeeded; ``group(a, b, c)``
runs its parts side by side; ``part.then(callback)`` is ``chain(part,
callback)`` (after a group: Celery's chord). Parts nest: a chain of groups, a
group of chains. ``enqueue()`` writes every job and every edge in one
transaction of the queue's database (the caller's, if one is open), so a
workflow commits whole with the business change or not at all; the
dependencies are ``using(after=...)``'s, with every guarantee of
``dependencies``. Consecutive steps of a group that share a task and options
are written by one INSERT per ``CHUNK`` jobs, so a group of 10,000 costs ten
statements, not 10,000. A step reads the results of the jobs it waited for
with ``context.dependency_results`` (``takes_context=True``); results are not
passed as arguments (every step is Celery's immutable ``.si()``).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import transaction

from django_dbqueue import conf
from django_dbqueue.enqueue import Enqueueable, EnqueueOptions, enqueue
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.models import Job

#: Most jobs one INSERT of a group writes.
CHUNK = 1000


@dataclass(frozen=True)
class Workflow:
    """What ``enqueue()`` wrote: every job in enqueue order, and the last ones.

    ``last`` holds the jobs nothing in the workflow waits for (a chain's last
    step, a group's members, a chord's callback): a job enqueued
    ``after=workflow.last`` runs once the whole workflow has succeeded.
    """

    jobs: list[Job]
    last: list[Job]


class Part(ABC):
    """Something a workflow can run: a ``Step``, a ``Chain`` or a ``Group``."""

    def then(self, *parts: Part) -> Chain:
        """This part, then ``parts`` one after the other (after a group: a chord)."""
        return chain(self, *parts)

    def enqueue(self) -> Workflow:
        """Write every job and edge of this part in one transaction; see the module docstring."""
        with transaction.atomic(using=conf.get().database):
            jobs: list[Job] = []
            last = self._write((), jobs)
        return Workflow(jobs=jobs, last=last)

    @abstractmethod
    def _write(self, after: Sequence[Job], jobs: list[Job]) -> list[Job]:
        """Enqueue this part to run after ``after``; add its jobs to ``jobs``; return its last."""


@dataclass(frozen=True)
class Step(Part):
    """One call of a task, with its enqueue options, not written yet (``Task.step``)."""

    task: Enqueueable
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: EnqueueOptions = field(default_factory=EnqueueOptions)

    def _write(self, after: Sequence[Job], jobs: list[Job]) -> list[Job]:
        written = _enqueue_run([self], after)
        jobs.extend(written)
        return written


@dataclass(frozen=True)
class Chain(Part):
    """Parts run one after the other: each after every last job of the one before."""

    parts: tuple[Part, ...]

    def _write(self, after: Sequence[Job], jobs: list[Job]) -> list[Job]:
        last = list(after)
        for part in self.parts:
            last = part._write(last, jobs)
        return last


@dataclass(frozen=True)
class Group(Part):
    """Parts run side by side, each after ``after``; their last jobs together are the group's."""

    parts: tuple[Part, ...]

    def _write(self, after: Sequence[Job], jobs: list[Job]) -> list[Job]:
        last: list[Job] = []
        for is_step, run in itertools.groupby(self.parts, key=_bulk_key):
            if is_step is None:
                for part in run:
                    last += part._write(after, jobs)
                continue
            steps = [part for part in run if isinstance(part, Step)]
            for start in range(0, len(steps), CHUNK):
                written = _enqueue_run(steps[start : start + CHUNK], after)
                jobs.extend(written)
                last += written
        return last


def chain(*parts: Part) -> Chain:
    """``parts`` run one after the other (Celery's ``chain``); at least one."""
    return Chain(_checked("chain", parts))


def group(*parts: Part | Iterable[Part]) -> Group:
    """``parts`` run side by side (Celery's ``group``): given as arguments or one iterable."""
    flat: tuple[Any, ...] = parts
    if len(parts) == 1 and not isinstance(parts[0], Part):
        flat = tuple(parts[0])
    return Group(_checked("group", flat))


def _checked(kind: str, parts: Sequence[Any]) -> tuple[Part, ...]:
    if not parts:
        raise InvalidJob(f"{kind}() needs at least one step.")
    for part in parts:
        if not isinstance(part, Part):
            raise InvalidJob(
                f"{kind}() takes steps (task.step(...)), chains and groups, not {part!r}."
            )
    return tuple(parts)


def _bulk_key(part: Part) -> object:
    """Steps that one INSERT can write together share a key; other parts have ``None``."""
    if isinstance(part, Step) and part.options.dedupe_key is None:
        return (part.task, part.options)
    return None


def _enqueue_run(steps: list[Step], after: Sequence[Job]) -> list[Job]:
    """Enqueue ``steps`` (one task, one set of options) after ``after`` and their own ``after``."""
    first = steps[0]
    options = first.options
    if after:
        own = list(options.after or ())
        options = replace(options, after=[*after, *own])
    return enqueue(first.task, [(step.args, step.kwargs) for step in steps], options)
