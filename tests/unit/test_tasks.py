"""``@task``: declaration, option validation, argument binding and lookup by path."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from django_dbqueue import InvalidJob, task
from django_dbqueue.exceptions import TaskNotFound
from django_dbqueue.retry import Backoff
from django_dbqueue.tasks import Task, load_task
from django_dbqueue.validation import binding_problem
from tests.jobs import tasks


def double(value: int) -> int:
    return value * 2


def test_bare_decorator_makes_a_task_with_default_options() -> None:
    wrapped = task(double)

    assert isinstance(wrapped, Task)
    assert wrapped.options.queue is None
    assert wrapped.options.priority == 0
    assert wrapped.options.takes_context is False


def test_decorator_with_options_makes_a_task_with_those_options() -> None:
    backoff = Backoff(base=1, factor=3, cap=30)

    wrapped = task(
        queue="mail",
        priority=-4,
        max_attempts=2,
        lease=15,
        timeout=2.5,
        retry=backoff,
        give_up_on=[KeyError],
        takes_context=False,
    )(double)

    assert isinstance(wrapped, Task)
    assert wrapped.options.queue == "mail"
    assert wrapped.options.priority == -4
    assert wrapped.options.max_attempts == 2
    assert wrapped.options.lease == 15
    assert wrapped.options.timeout == 2.5
    assert wrapped.backoff is backoff
    assert wrapped.options.give_up_on == (KeyError,)


def test_decorator_with_empty_parentheses_works() -> None:
    assert isinstance(task()(double), Task)


def test_task_stays_callable_and_runs_the_function_now() -> None:
    assert task(double)(21) == 42
    assert tasks.send_invoice(7, copy=True) == {"order": 7, "copy": True}
    assert tasks.CALLS == [("send_invoice", 7)]


def test_task_keeps_the_functions_identity() -> None:
    wrapped = task(double)

    assert wrapped.__name__ == "double"
    assert wrapped.__wrapped__ is double  # type: ignore[attr-defined]  # set by update_wrapper.


def test_name_is_module_and_qualified_name() -> None:
    assert tasks.send_invoice.name == "tests.jobs.tasks.send_invoice"
    assert task(double).name == f"{__name__}.double"


@pytest.mark.parametrize(
    ("options", "culprit"),
    [
        ({"queue": ""}, "Queue name"),
        ({"queue": "q" * 101}, "Queue name"),
        ({"queue": "two words"}, "Queue name"),
        ({"queue": "mail/eu"}, "Queue name"),
        ({"priority": "3"}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": 2**31}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"lease": 0}, "lease"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"retry": (2, 2, 60)}, "retry"),
        ({"give_up_on": ["KeyError"]}, "give_up_on"),
        ({"give_up_on": [int]}, "give_up_on"),
    ],
)
def test_invalid_option_raises_invalid_job_at_decoration(
    options: dict[str, Any], culprit: str
) -> None:
    decorate = task(**options)

    with pytest.raises(InvalidJob, match=culprit) as raised:
        decorate(double)

    assert isinstance(raised.value, ValueError)


def test_longest_valid_queue_name_is_accepted() -> None:
    name = "a.B_9-" + "q" * 94

    assert task(queue=name)(double).options.queue == name


def test_bind_maps_job_arguments_to_parameters() -> None:
    bound = tasks.send_invoice.bind([7], {"copy": True}, context=object())

    assert bound.arguments == {"order_id": 7, "copy": True}


def test_bind_passes_the_context_first_when_the_task_takes_it() -> None:
    context = object()

    bound = tasks.with_context.bind(["label"], {}, context=context)

    assert bound.arguments == {"context": context, "label": "label"}


def test_bind_raises_type_error_for_arguments_that_do_not_fit() -> None:
    with pytest.raises(TypeError):
        tasks.send_invoice.bind([], {})
    with pytest.raises(TypeError):
        tasks.send_invoice.bind([1, 2], {})
    with pytest.raises(TypeError):
        tasks.with_context.bind([], {"label": "x", "context": None}, context=object())


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("noop", [], {}),  # plain parameters given positionally: found without binding
        ("with_context", ["label"], {}),
        ("with_context", [], {"label": "by name"}),
        ("send_invoice", [7], {"copy": True}),  # a keyword-only parameter with a default
        ("send_invoice", [7], {}),
    ],
)
def test_arguments_are_the_ones_bind_gives(
    name: str, args: list[object], kwargs: dict[str, object]
) -> None:
    task_ = getattr(tasks, name)
    context = object()
    bound = task_.bind(args, kwargs, context=context)

    assert task_.arguments(args, kwargs, context=context) == (bound.args, bound.kwargs)


def test_arguments_raise_type_error_for_arguments_that_do_not_fit() -> None:
    with pytest.raises(TypeError):
        tasks.noop.arguments([1], {})
    with pytest.raises(TypeError):
        tasks.with_context.arguments([], {}, context=object())
    with pytest.raises(TypeError):
        tasks.send_invoice.arguments([1, 2], {})


def test_load_task_returns_the_task_at_a_path() -> None:
    assert load_task("tests.jobs.tasks.send_invoice") is tasks.send_invoice


def test_load_task_on_a_plain_function_raises_task_not_found() -> None:
    with pytest.raises(TaskNotFound, match="not a django_dbqueue @task"):
        load_task("tests.jobs.tasks.plain_function")


@pytest.mark.parametrize("path", ["tests.jobs.tasks.does_not_exist", "tests.no_such_module.noop"])
def test_load_task_on_a_missing_path_raises_task_not_found(path: str) -> None:
    with pytest.raises(TaskNotFound, match="cannot be imported"):
        load_task(path)


def _problem(function: Callable[..., object], *args: Any, leading: int = 0, **kwargs: Any) -> str:
    signature = inspect.signature(function)
    with pytest.raises(TypeError) as raised:
        signature.bind(*([None] * leading), *args, **kwargs)
    return binding_problem(signature, args, kwargs, raised.value, leading=leading)


def test_binding_problem_names_the_missing_and_the_unexpected_arguments() -> None:
    def send(order_id: int, *, copy: bool = False) -> None: ...

    problem = _problem(send, order=1, colour="red")

    assert problem == (
        "the arguments do not fit the function(order_id, *, copy=False): "
        "missing argument 'order_id'; unexpected keyword arguments 'order', 'colour'"
    )


def test_binding_problem_leaves_out_the_context_and_counts_surplus_and_doubled_ones() -> None:
    def with_context(context: object, a: int, b: int = 0) -> None: ...

    assert _problem(with_context, 1, 2, 3, leading=1).endswith(
        "function(a, b=0): 3 positional arguments given, 2 accepted"
    )
    assert _problem(with_context, 1, a=2, leading=1).endswith(
        "given both by position and by keyword: argument 'a'"
    )


def test_binding_problem_accepts_any_keyword_where_the_function_does() -> None:
    def loose(a: int, **rest: object) -> None: ...

    assert _problem(loose, b=1).endswith("missing argument 'a'")
