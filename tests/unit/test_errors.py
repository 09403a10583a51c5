"""ErrorInfo and the bounded error history stored on a job."""

from __future__ import annotations

from django_dbqueue.errors import (
    HISTORY_LIMIT,
    LAST_ERROR_LIMIT,
    MESSAGE_LIMIT,
    ErrorInfo,
    appended,
    history_entry,
)
from django_dbqueue.exceptions import PermanentError


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
