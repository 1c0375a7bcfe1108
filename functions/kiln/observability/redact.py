"""Keep credentials out of logs: every record is scrubbed of Kiln keys and bearer tokens."""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "[REDACTED]"
_PATTERNS = (
    # A Kiln API key anywhere, even glued to other text.
    (re.compile(r"kiln_(call|author)_[A-Za-z0-9_-]{16,}"), r"kiln_\1_" + REDACTED),
    # Whatever follows "Bearer" in a header someone printed (8+ characters: not prose).
    (re.compile(r"(?i)\b(bearer)(\s+|%20)[A-Za-z0-9._~+/=-]{8,}"), r"\1\2" + REDACTED),
    # A JWT on its own (three base64url parts, the first one a JSON header).
    (re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), REDACTED),
)
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def scrub(record: logging.LogRecord) -> None:
    """Redact the record in place: its message, any exception text and extra string fields."""
    # Arguments first, so formatters that read record.args (uvicorn's access log) still work.
    if isinstance(record.args, tuple):
        record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    try:
        message = record.getMessage()
    except Exception:  # a bad format string is the logger's problem, not a reason to leak
        message = str(record.msg)
    clean = redact(message)
    if clean != message:  # a secret inside a non-string argument
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    for key, value in list(record.__dict__.items()):
        if key not in _STANDARD and isinstance(value, str):
            setattr(record, key, redact(value))


class RedactingFilter(logging.Filter):
    """For a handler: scrubs each record it sees and lets it through."""

    def filter(self, record: logging.LogRecord) -> bool:
        scrub(record)
        return True


_installed = False


def install() -> None:
    """Scrub every record this process creates, whichever logger or handler it goes to.

    A filter on the root logger would miss records logged through child loggers (logger
    filters do not apply to propagated records), so the record factory does the work; the
    root logger's handlers also get a RedactingFilter for records made elsewhere. Idempotent.
    """
    global _installed
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        scrub(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
