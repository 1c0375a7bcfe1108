"""The WSGI layer in front of moto: signed requests only, writes journaled before replies.

Order of a write: check the signature; under the writers' lock, answer a repeated
idempotency token from memory, else append the request to the journal and fsync it, then
apply it to moto (under the state lock that readers take too, so no reader sees half a
transaction) and only then reply. A reply therefore always follows a durable record, and
the journal's order is the order moto applied the writes in, so replaying it at start
rebuilds the same state.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from kiln.local.emulator.calllog import CallLog
from kiln.local.emulator.changes import ChangeCounter, may_change_catalog
from kiln.local.emulator.journal import Journal, Record
from kiln.local.emulator.motofix import load_backend
from kiln.local.emulator.sigv4 import Credentials, SignatureError, verify
from kiln.local.emulator.throughput import THROTTLED, PartitionLimits, throttled_message

TOKEN_WINDOW_S = 600.0  # DynamoDB honours a ClientRequestToken for 10 minutes
DYNAMODB_JSON = "application/x-amz-json-1.0"
# What Kiln stores locally. A request signed for another service was journaled, then failed
# in moto with a 500 at every start after, and stopped compaction for good.
SERVED = frozenset({"dynamodb", "s3", "ssm"})
DYNAMODB_READS = frozenset(
    {
        "GetItem",
        "BatchGetItem",
        "Query",
        "Scan",
        "DescribeTable",
        "ListTables",
        "TransactGetItems",
        "DescribeTimeToLive",
        "DescribeContinuousBackups",
        "ListTagsOfResource",
        "DescribeEndpoints",
        "DescribeLimits",
    }
)
# Request parts a replay does not need (moto ignores them) and the signature itself.
_SKIPPED_ENVIRON = frozenset(
    {
        "HTTP_AUTHORIZATION",
        "HTTP_USER_AGENT",
        "HTTP_X_AMZ_DATE",
        "HTTP_AMZ_SDK_INVOCATION_ID",
        "HTTP_AMZ_SDK_REQUEST",
        "HTTP_ACCEPT_ENCODING",
        "HTTP_CONNECTION",
        "REMOTE_ADDR",
        "REMOTE_PORT",
        "SERVER_SOFTWARE",
        "SERVER_PROTOCOL",
        "SCRIPT_NAME",
        "REQUEST_URI",
    }
)
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class Response:
    status: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True, slots=True)
class _Token:
    """A remembered token: a few hundred bytes each, as up to 10 minutes of writes are kept."""

    digest: bytes  # SHA-256 of the request body
    at: float
    status: str
    body: bytes

    @property
    def response(self) -> Response:
        return Response(self.status, [("Content-Type", DYNAMODB_JSON)], self.body)


def call(app: WsgiApp, environ: dict[str, Any]) -> Response:
    """Run a WSGI app to completion and keep its whole answer."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started[:] = [status, list(headers)]
        return lambda data: None

    chunks = app(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return Response(started[0], started[1], body)


def _service_of(environ: dict[str, Any]) -> str:
    scope = environ.get("HTTP_AUTHORIZATION", "").split(",")[0].split("/")
    return scope[3].lower() if len(scope) == 5 else ""


def _error(service: str, status: str, code: str, message: str) -> Response:
    if service == "s3":
        body = (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{message}</Message></Error>"
        ).encode()
        return Response(status, [("Content-Type", "application/xml")], body)
    payload = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message}
    return Response(status, [("Content-Type", DYNAMODB_JSON)], json.dumps(payload).encode())


def replay_environ(meta: dict[str, Any], body: bytes) -> dict[str, Any]:
    """A WSGI environ for a journaled request (routed to its service as when it came in)."""
    environ: dict[str, Any] = dict(meta["environ"])
    scope = f"Credential=replay/20000101/{meta['region']}/{meta['service']}/aws4_request"
    environ["HTTP_AUTHORIZATION"] = f"AWS4-HMAC-SHA256 {scope}, SignedHeaders=host, Signature=0"
    environ["CONTENT_LENGTH"] = str(len(body))
    environ.update(
        {
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": io.StringIO(),
            "wsgi.url_scheme": "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": False,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
    )
    return environ


class DurableEmulator:
    """The WSGI app the emulator serves: auth, idempotency, journal, then moto."""

    def __init__(
        self,
        app: WsgiApp,
        journal: Journal,
        credentials: Credentials,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.journal = journal
        self.credentials = credentials
        self.writers = threading.Lock()  # one write at a time: journal order = apply order
        self.state = threading.Lock()  # held while moto applies a write, and while it reads
        self.tokens: OrderedDict[str, _Token] = OrderedDict()
        self.foreign_writes = False  # writes to services compaction cannot rebuild
        self.regions: set[str] = set()  # DynamoDB regions written to (compaction dumps them)
        self.changes: ChangeCounter | None = None  # told of writes that may move the catalog
        self.call_log: CallLog | None = None  # --call-log: every signed request, one line each
        self.limits: PartitionLimits | None = None  # --partition-limits: DynamoDB's per key
        self.dispatcher: Any = None  # moto's own web app under `app` (server.build)
        # Called after each journaled write, writers' lock held (starts compactions).
        self.after_append: Callable[[], None] | None = None
        self._clock = clock

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            signed = verify(environ, body, self.credentials)
        except (SignatureError, ValueError, KeyError, UnicodeError) as refused:
            reason = str(refused) if isinstance(refused, SignatureError) else "malformed request"
            answer = _error(_service_of(environ), "403 Forbidden", "AccessDenied", reason)
        else:
            started = time.perf_counter()
            if signed.service not in SERVED:
                served = ", ".join(sorted(SERVED))
                message = f"this emulator serves {served}, not {signed.service[:40]!r}"
                answer = _error(signed.service, "400 Bad Request", "UnknownService", message)
            else:
                answer = self.handle(environ, body, signed.service, signed.region)
            if self.call_log is not None:
                elapsed = time.perf_counter() - started
                self.call_log.record(
                    environ, body, signed.service, answer.status, answer.body, elapsed
                )
        start_response(answer.status, answer.headers)
        return [answer.body]

    def handle(self, environ: dict[str, Any], body: bytes, service: str, region: str) -> Response:
        operation = environ.get("HTTP_X_AMZ_TARGET", "").rpartition(".")[2]
        method = environ["REQUEST_METHOD"]
        if self.dispatcher is not None and service not in self.dispatcher.app_instances:
            load_backend(self.dispatcher, service)  # before the state lock: see there
        if service == "dynamodb":
            is_write = operation not in DYNAMODB_READS
        else:
            is_write = method not in ("GET", "HEAD")
        limits = self.limits if service == "dynamodb" else None
        if not is_write:
            with self.state:
                response = call(self.app, environ)
            hot = limits and limits.charge_read(operation, body, len(response.body))
            if hot and response.status.startswith("200"):
                return _error("dynamodb", "400 Bad Request", THROTTLED, throttled_message(hot))
            return response
        hot = limits and limits.charge_write(operation, body)
        if hot:
            return _error("dynamodb", "400 Bad Request", THROTTLED, throttled_message(hot))
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        if service == "s3" and ("uploadId" in query or "uploads" in query):
            # CompleteMultipartUpload is the POST with an uploadId (UploadPart is a PUT).
            completes = method == "POST" and "uploadId" in query
            return self._multipart(environ, body, region, completes=completes)
        with self.writers:
            if operation == "TransactWriteItems":
                repeated = self._repeated_token(body)
                if repeated is not None:
                    return repeated
            meta = self._meta(environ, service, region)
            self.journal.append(Record("request", meta, body))
            try:
                response = self.apply(meta, body)
            finally:  # even a write moto refused halfway: a spare version read is harmless
                counted = self.changes is not None and service == "dynamodb"
                if counted and self.changes and may_change_catalog(operation, body):
                    self.changes.bump()
            if self.after_append is not None:
                self.after_append()
            return response

    def apply(self, meta: dict[str, Any], body: bytes) -> Response:
        """Run one journaled request against moto (live, and when replaying at start)."""
        if meta["service"] == "dynamodb":
            self.regions.add(meta["region"])
        elif meta["service"] != "s3":
            self.foreign_writes = True
        with self.state:
            response = call(self.app, replay_environ(meta, body))
        target = meta["environ"].get("HTTP_X_AMZ_TARGET", "")
        if target.endswith(".TransactWriteItems") and response.status.startswith("200"):
            self.remember_token(body, response, meta["time"])
        return response

    def remember_token(self, body: bytes, response: Response, at: float) -> None:
        token = _token_of(body)
        if token is not None:
            digest = hashlib.sha256(body).digest()
            # Only what a repeated call's answer needs: tokens are kept for 10 minutes.
            status = sys.intern(response.status)
            self.tokens[token] = _Token(digest, at, status, response.body)
            self.tokens.move_to_end(token)
        horizon = self._clock() - TOKEN_WINDOW_S
        while self.tokens and next(iter(self.tokens.values())).at < horizon:
            self.tokens.popitem(last=False)

    def _repeated_token(self, body: bytes) -> Response | None:
        token = _token_of(body)
        seen = self.tokens.get(token) if token is not None else None
        if seen is None or seen.at < self._clock() - TOKEN_WINDOW_S:
            return None
        if seen.digest != hashlib.sha256(body).digest():
            return _error(
                "dynamodb",
                "400 Bad Request",
                "IdempotentParameterMismatchException",
                "ClientRequestToken: already used for a different request",
            )
        return seen.response  # the first call succeeded: say so again, change nothing

    def _meta(self, environ: dict[str, Any], service: str, region: str) -> dict[str, Any]:
        kept = {
            key: value
            for key, value in environ.items()
            if key.isupper() and isinstance(value, str) and key not in _SKIPPED_ENVIRON
        }
        return {"service": service, "region": region, "time": self._clock(), "environ": kept}

    def _multipart(
        self, environ: dict[str, Any], body: bytes, region: str, *, completes: bool
    ) -> Response:
        """Parts are kept in memory only; a completed upload is journaled as one PutObject.

        Upload ids are random, so replaying the parts would not find their upload again;
        what must survive is the object that CompleteMultipartUpload acknowledged.
        """
        with self.writers:
            with self.state:
                response = call(self.app, environ)
            if completes and response.status.startswith("200"):
                path = unquote(environ.get("PATH_INFO", ""))
                self.journal.append(self._object_record(path, region))
            return response

    def _object_record(self, path: str, region: str) -> Record:
        meta = {
            "service": "s3",
            "region": region,
            "time": self._clock(),
            "environ": {
                "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
                "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "HTTP_HOST": "127.0.0.1",
            },
        }  # fmt: skip
        with self.state:
            current = call(self.app, replay_environ(meta, b""))
        content_type = dict((k.lower(), v) for k, v in current.headers).get("content-type")
        return put_object_record(path, current.body, content_type, region, self._clock())


def put_object_record(
    path: str, data: bytes, content_type: str | None, region: str, at: float
) -> Record:
    """A journal record that, replayed, stores `data` at `path` (/bucket/key)."""
    from urllib.parse import quote

    environ = {
        "REQUEST_METHOD": "PUT",
        "PATH_INFO": path,
        "RAW_URI": quote(path, safe="/~"),
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "HTTP_HOST": "127.0.0.1",
        "CONTENT_TYPE": content_type or "binary/octet-stream",
    }
    meta = {"service": "s3", "region": region, "time": at, "environ": environ}
    return Record("request", meta, data)


def _token_of(body: bytes) -> str | None:
    try:
        token = json.loads(body).get("ClientRequestToken")
    except (ValueError, AttributeError):
        return None
    return token if isinstance(token, str) and token else None
