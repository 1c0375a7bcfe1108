"""The emulator's call log: one JSON line per signed request it answered.

Off unless the emulator is started with `--call-log FILE` (tests and benchmarks). Each line
says who called (the caller's role: the session token it signed with, as a Lambda function's
role credentials carry one, or an `X-Kiln-Role` header), what it called (service, HTTP
method, path, query, X-Amz-Target, and for JSON services the request body) and what it got
(status, request and response bytes, time spent). The IAM role check
(`tests/iam_roles.py`) evaluates each line against template.yaml's policies; the cost
benchmark (`bench/cost/`) counts operations, units and bytes from the same lines.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import IO, Any

ROLE_HEADER = "HTTP_X_KILN_ROLE"
TOKEN_HEADER = "HTTP_X_AMZ_SECURITY_TOKEN"  # noqa: S105 (a header name)
# A session token `kiln-role/<function>` names its role (tests give Lambda processes one).
ROLE_TOKEN_PREFIX = "kiln-role/"  # noqa: S105
_JSON_SERVICES = frozenset({"dynamodb", "ssm"})


def role_of(environ: dict[str, Any]) -> str | None:
    """The role a request was made as, or None (a test's own setup calls)."""
    named = environ.get(ROLE_HEADER)
    if named:
        return str(named)
    token = str(environ.get(TOKEN_HEADER) or "")
    return token.removeprefix(ROLE_TOKEN_PREFIX) if token.startswith(ROLE_TOKEN_PREFIX) else None


class CallLog:
    """Appends call records to a file; safe to call from the server's threads."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def record(
        self,
        environ: dict[str, Any],
        body: bytes,
        service: str,
        status: str,
        response: bytes,
        elapsed_s: float,
    ) -> None:
        entry: dict[str, Any] = {
            "role": role_of(environ),
            "service": service,
            "method": environ.get("REQUEST_METHOD", ""),
            "path": environ.get("PATH_INFO", ""),
            "query": environ.get("QUERY_STRING", ""),
            "target": environ.get("HTTP_X_AMZ_TARGET", "").rpartition(".")[2],
            "status": int(status.split(" ", 1)[0]),
            "request_bytes": len(body),
            "response_bytes": len(response),
            "elapsed_ms": round(elapsed_s * 1000, 3),
        }
        if service in _JSON_SERVICES and body:
            try:
                entry["body"] = json.loads(body)
            except ValueError:
                entry["body"] = None
        if service == "dynamodb" and response:
            with contextlib.suppress(ValueError, AttributeError):
                entry["consumed"] = json.loads(response).get("ConsumedCapacity")
        line = json.dumps(entry, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
