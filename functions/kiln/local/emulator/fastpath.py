"""DynamoDB item requests answered by moto's own handler methods, without its web app.

moto answers a request through Flask (routing, CORS, its request class), parses the JSON
body again through botocore's model, looks its handler method up among every method of the
class, and writes the answer through botocore's model-driven serializer: for a GetItem or a
small Query that machinery costs several times the lookup itself, and the emulator spends it
with its state lock held. Item requests (the catalog's, the ledger's, the quotas', the
tasks') are answered here instead: the body parsed with `json.loads` (the wire format of
DynamoDB *is* JSON; botocore's parse differs from it only for binary values, and a request
holding one takes moto's whole path), moto's own `DynamoHandler` method called (the same
checks, the same backend, the same errors), and its result written with `json.dumps`.

moto's DynamoDB errors (a failed condition, a validation error, a cancelled transaction) are
written as moto's app writes them: their own status, headers and JSON body. Any other
exception from a read sends it through moto's whole path (which raises it again and answers
as it does); from a write, it is answered 500 (a second pass could apply a half-done write
twice).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

# X-Amz-Target operation -> DynamoHandler method. BatchWriteItem is not here: it may apply
# part of a batch before it fails, and a second pass would apply that part twice.
ITEM_OPERATIONS = {
    "GetItem": "get_item",
    "BatchGetItem": "batch_get_item",
    "TransactGetItems": "transact_get_items",
    "Query": "query",
    "Scan": "scan",
    "PutItem": "put_item",
    "UpdateItem": "update_item",
    "DeleteItem": "delete_item",
    "TransactWriteItems": "transact_write_items",
}
READS = frozenset({"GetItem", "BatchGetItem", "TransactGetItems", "Query", "Scan"})
_BINARY = re.compile(rb'"BS?"\s*:')  # a binary attribute value (or an attribute named B)
JSON_TYPE = "application/x-amz-json-1.0"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Answer = tuple[str, list[tuple[str, str]], bytes]


def _bytes(text: Any) -> bytes:
    return text if isinstance(text, bytes) else str(text).encode()


def _scope(authorization: str) -> tuple[str, str, str] | None:
    """(access key id, region, service) of a signed request's credential scope (the
    signature was checked before: kiln.local.emulator.durable)."""
    scope = authorization.partition("Credential=")[2].partition(",")[0].split("/")
    return (scope[0], scope[2], scope[3]) if len(scope) == 5 else None


def _without_nulls(value: Any) -> Any:
    """As botocore's serializer writes it: a member that is None is left out."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _wire(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(f"{type(value).__name__} in a DynamoDB answer")


class FastItems:
    """A WSGI app: DynamoDB item requests answered directly, everything else by moto's app."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self._accounts: dict[str, str] = {}  # access key id -> moto account

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        answer = self.answer(environ)
        if answer is None:
            return self.app(environ, start_response)
        status, headers, body = answer
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]

    def answer(self, environ: dict[str, Any]) -> Answer | None:
        """The status, headers and body of the answer, or None: moto's whole path answers."""
        operation = environ.get("HTTP_X_AMZ_TARGET", "").rpartition(".")[2]
        action = ITEM_OPERATIONS.get(operation)
        scope = _scope(environ.get("HTTP_AUTHORIZATION", ""))
        if action is None or scope is None or scope[2] != "dynamodb":
            return None
        stream = environ["wsgi.input"]
        body = stream.read()
        stream.seek(0)  # moto's path reads it again
        if _BINARY.search(body):
            return None
        try:
            params = json.loads(body)
        except ValueError:
            return None
        if not isinstance(params, dict):
            return None
        from moto.dynamodb.exceptions import DynamodbException
        from moto.dynamodb.responses import DynamoHandler
        from werkzeug.http import HTTP_STATUS_CODES

        handler = DynamoHandler()
        handler.params = handler.body = params
        handler.uri_match = {}
        handler.region = scope[1]
        handler.current_account = self._account(scope[0])
        try:
            result = getattr(handler, action)()
        except DynamodbException as error:  # as moto's app writes it
            headers = [(str(k), str(v)) for k, v in (error.get_headers() or [])]
            return (
                f"{error.code} {HTTP_STATUS_CODES.get(error.code, '')}",
                headers,
                _bytes(error.description),
            )
        except Exception:
            if operation in READS:  # moto's path raises it again and answers it its way
                return None
            raise
        answer = _without_nulls(result.result)
        body = json.dumps(answer, default=_wire, separators=(",", ":")).encode()
        return "200 OK", [("Content-Type", JSON_TYPE)], body

    def _account(self, access_key: str) -> str:
        account = self._accounts.get(access_key)
        if account is None:
            from moto.iam.models import get_account_id_from

            account = self._accounts[access_key] = get_account_id_from(access_key)
        return account
