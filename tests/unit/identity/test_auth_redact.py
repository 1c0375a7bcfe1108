"""Log redaction: no Kiln key or bearer token survives into a formatted log line."""

from __future__ import annotations

import logging

import pytest

from kiln.observability.redact import REDACTED, RedactingFilter, install, redact

KEY = "kiln_author_" + "Zx9-_" * 8 + "abc"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXBhcnQ"


@pytest.mark.parametrize(
    "text",
    [
        f"key {KEY}",
        f"prefix{KEY}suffix",
        f"Authorization: Bearer {JWT}",
        "authorization: bearer some-opaque.token_value~1",
        f"token={JWT}",
        f"url?auth=Bearer%20{JWT}",
    ],
)
def test_credentials_are_replaced(text: str) -> None:
    clean = redact(text)
    assert KEY not in clean
    assert JWT not in clean
    assert "some-opaque" not in clean
    assert REDACTED in clean


def test_ordinary_text_is_untouched() -> None:
    text = "tool add_vat@3 ran in 12 ms; kiln_call is a scope word; bearer of news"
    assert redact(text) == text


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("kiln.test", logging.INFO, __file__, 1, msg, args or None, None)
    record.__dict__.update(extra)
    return record


def test_filter_scrubs_arguments_extras_and_keeps_tuple_args() -> None:
    record = _record("%s asked with %s", "alice", KEY, header=f"Bearer {JWT}")
    assert RedactingFilter().filter(record)
    assert isinstance(record.args, tuple)
    message = record.getMessage()
    assert message.startswith("alice asked with kiln_author_")
    assert KEY not in message
    assert JWT not in record.header  # type: ignore[attr-defined]


def test_secret_inside_a_non_string_argument_is_caught() -> None:
    record = _record("request %r", {"authorization": f"Bearer {KEY}"})
    RedactingFilter().filter(record)
    assert KEY not in record.getMessage()


def test_exception_text_is_scrubbed() -> None:
    try:
        raise ValueError(f"bad key {KEY}")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "kiln.test", logging.ERROR, __file__, 1, "failed", None, sys.exc_info()
        )
    RedactingFilter().filter(record)
    formatted = logging.Formatter().format(record)
    assert KEY not in formatted
    assert "ValueError" in formatted


def test_installed_redaction_applies_to_every_logger(caplog: pytest.LogCaptureFixture) -> None:
    install()
    install()  # idempotent
    with caplog.at_level(logging.INFO):
        logging.getLogger("some.library").info("header: Bearer %s", JWT)
        logging.getLogger("kiln.deep.module").warning("key=%s", KEY)
    assert JWT not in caplog.text
    assert KEY not in caplog.text
    assert caplog.text.count(REDACTED) == 2
