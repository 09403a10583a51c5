"""ErrorInfo and the bounded error history stored on a job."""

from __future__ import annotations

import json

import pytest

from django_dbqueue import jsontext
from django_dbqueue.errors import (
    HISTORY_LIMIT,
    LAST_ERROR_LIMIT,
    MESSAGE_LIMIT,
    RESULT_NOT_SERIALIZABLE,
    TASK_ABORTED,
    UNPRINTABLE,
    ErrorInfo,
    appended,
    code_of,
    history_entry,
    refused_result,
    storable,
)
from django_dbqueue.exceptions import PermanentError, Retry


class CodedError(Exception):
    code = "CARD_DECLINED"


def raised(exc: BaseException) -> BaseException:
    """``exc`` after a real raise, so it carries a traceback."""
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the helper hands back whatever was raised.
        return caught


def test_code_defaults_to_the_exception_class_name() -> None:
    info = ErrorInfo.from_exception(raised(ConnectionError("host down")))

    assert info.code == "ConnectionError"
    assert info.message == "ConnectionError: host down"
    assert "Traceback (most recent call last)" in info.traceback
    assert info.traceback.rstrip().endswith("ConnectionError: host down")


def test_code_comes_from_the_exceptions_code_attribute() -> None:
    assert ErrorInfo.from_exception(raised(CodedError("no"))).code == "CARD_DECLINED"
    assert ErrorInfo.from_exception(raised(PermanentError("no"))).code == "PERMANENT_ERROR"


def test_explicit_code_wins_over_attribute_and_class_name() -> None:
    info = ErrorInfo.from_exception(raised(CodedError("no")), code="BAD_ARGUMENTS")

    assert info.code == "BAD_ARGUMENTS"


def test_bounded_keeps_the_end_of_a_long_traceback() -> None:
    traceback = "frame\n" * 2000 + "ValueError: the real cause"
    info = ErrorInfo(code="ValueError", message="short", traceback=traceback).bounded()

    assert len(info.traceback) == LAST_ERROR_LIMIT == 4000
    assert info.traceback.endswith("ValueError: the real cause")
    assert traceback.endswith(info.traceback)


def test_bounded_cuts_the_message_to_its_limit() -> None:
    message = "m" * 5000
    info = ErrorInfo(code="X", message=message).bounded()

    assert len(info.message) == MESSAGE_LIMIT == 1000
    assert message.startswith(info.message)


def test_bounded_leaves_short_errors_unchanged() -> None:
    info = ErrorInfo(code="X", message="boom", traceback="Traceback ...\nX: boom")

    assert info.bounded() == info


def test_last_error_is_the_traceback_end_or_else_the_message() -> None:
    traceback = "t" * 5000 + "END"

    assert ErrorInfo("X", "msg", traceback).last_error == traceback[-LAST_ERROR_LIMIT:]
    assert ErrorInfo("X", "msg", traceback).last_error.endswith("END")
    assert ErrorInfo("X", "msg").last_error == "msg"


def test_appended_keeps_the_last_ten_entries_in_order() -> None:
    history: list[dict[str, object]] = []
    for attempt in range(1, 14):
        entry = history_entry(attempt, "w1", ErrorInfo("X", f"try {attempt}"), at="now")
        history = appended(history, entry)

    assert len(history) == HISTORY_LIMIT == 10
    assert [entry["attempt"] for entry in history] == list(range(4, 14))
    assert history[-1]["message"] == "try 13"


def test_appended_does_not_modify_the_given_history() -> None:
    history = [history_entry(1, "w1", ErrorInfo("X", "first"), at="now")]

    longer = appended(history, history_entry(2, "w1", ErrorInfo("X", "second"), at="now"))

    assert len(history) == 1
    assert [entry["message"] for entry in longer] == ["first", "second"]


class UnprintableError(PermanentError):
    """An exception whose ``__str__`` and ``code`` raise, as a task's own may."""

    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    @property
    def code(self) -> str:  # type: ignore[override]  # a property that raises, on purpose
        raise RuntimeError("no code either")


def test_an_exception_whose_str_and_code_raise_is_still_described() -> None:
    info = ErrorInfo.from_exception(raised(UnprintableError()))

    assert (info.code, info.message) == ("UnprintableError", f"UnprintableError: {UNPRINTABLE}")
    assert info.exception.endswith("test_errors.UnprintableError")
    assert "Traceback" in info.traceback


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("perm \ud800", "perm \\ud800"),
        ("\udfff tail", "\\udfff tail"),
        ("nul \x00", "nul \\x00"),
        ("caf\u00e9 \U0001f600", "caf\u00e9 \U0001f600"),
    ],
    ids=["lone-high-surrogate", "lone-low-surrogate", "nul", "unicode-kept"],
)
def test_storable_escapes_what_no_database_stores_and_keeps_real_text(
    text: str, stored: str
) -> None:
    assert storable(text) == stored
    assert jsontext.unstorable(storable(text)) is None


def test_bounded_makes_every_field_storable() -> None:
    info = ErrorInfo("CODE\ud800", "message \ud800", "traceback \x00", "mod.Kind\udc00")

    bounded = info.bounded()

    entry = history_entry(1, "w1", bounded, "2026-01-01T00:00:00+00:00")
    assert jsontext.dumps(entry)  # what leases.fail writes: refused before the fix
    assert bounded.message == "message \\ud800"


def test_minimal_keeps_the_code_and_class_and_drops_the_text() -> None:
    info = ErrorInfo.from_exception(raised(PermanentError("card 4242 \ud800")))

    minimal = info.minimal()

    assert minimal == ErrorInfo(
        code="PERMANENT_ERROR",
        message="django_dbqueue.exceptions.PermanentError",
        exception="django_dbqueue.exceptions.PermanentError",
    )


def test_a_refused_result_is_recorded_by_the_refusals_class_only() -> None:
    info = refused_result(UnicodeEncodeError("utf-8", "x\ud800", 1, 2, "surrogates not allowed"))

    assert (info.code, info.exception) == (RESULT_NOT_SERIALIZABLE, "builtins.UnicodeEncodeError")
    assert info.message == "the database refused to store the result (builtins.UnicodeEncodeError)"


@pytest.mark.parametrize(
    "value",
    ["a\ud800b", {"k\udc00": 1}, ["\ud83d\ude00"], "nul \x00"],
    ids=["lone-surrogate", "surrogate-key", "surrogate-pair-as-two-code-points", "nul"],
)
def test_json_text_refuses_what_no_database_stores(value: object) -> None:
    with pytest.raises(ValueError, match=r"surrogate code point|NUL"):
        jsontext.dumps(value)


@pytest.mark.parametrize("value", ["caf\u00e9 \U0001f600", "\\ud800 as text", {"\u00e9": 1}])
def test_json_text_keeps_real_unicode_and_escape_like_text(value: object) -> None:
    assert json.loads(jsontext.dumps(value)) == value


def test_code_of_is_the_exceptions_own_code_or_task_aborted_for_a_base_exception() -> None:
    assert code_of(Retry()) == "RETRY"
    assert code_of(ConnectionError("down")) == "ConnectionError"
    assert code_of(SystemExit(3)) == TASK_ABORTED
