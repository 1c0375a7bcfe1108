"""A synchronous Lambda Invoke signed by botocore's own SigV4 signer, without a botocore client.

The public function invokes the runner function once per tools/call. A botocore client call
spends most of its CPU in the client's machinery (its event hooks, serializer, parser and
retry handler), not in signing or sending: the same 400-byte request measured 1.2-1.7 ms of
CPU through a client against 0.6-0.8 ms signed by `SigV4Auth` and sent by urllib3, in one run
on this 2-core machine (bench/README.md). The invoke has one fixed shape (a POST of the
payload, the invocation type and tenant as headers), so `SignedInvoke` makes it directly, as
one `kiln.aws.signed` request, never retried (a retried invoke could run a tool twice). It
answers as `LambdaClient.invoke` does, for the fields Kiln reads (`kiln.runner.remote`).
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kiln.aws.signed import SignedSession

if TYPE_CHECKING:
    from botocore.credentials import Credentials


class InvokeError(Exception):
    """Lambda refused the invoke (throttled, denied, too large, not found): its word for why."""


class SignedInvoke:
    """`invoke(FunctionName=, InvocationType=, TenantId=, Payload=)` of one region's Lambda."""

    def __init__(
        self,
        credentials: Credentials | None,
        region: str,
        *,
        endpoint_url: str | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        self._session = SignedSession(
            credentials, region, "lambda", endpoint_url or f"https://lambda.{region}.amazonaws.com",
            connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s,
        )  # fmt: skip

    def invoke(
        self, *, FunctionName: str, InvocationType: str, TenantId: str, Payload: bytes
    ) -> dict[str, Any]:
        if self._session.credentials is None:
            raise InvokeError("no AWS credentials were found to sign the invoke with")
        name = quote(FunctionName, safe="")
        response = self._session.send(
            f"/2015-03-31/functions/{name}/invocations",
            Payload,
            {"X-Amz-Invocation-Type": InvocationType, "X-Amz-Tenant-Id": TenantId},
        )
        body = response.content
        if response.status_code >= 300:
            raise InvokeError(_refusal(response.status_code, response.headers, body))
        return {
            "StatusCode": response.status_code,
            "FunctionError": response.headers.get("X-Amz-Function-Error"),
            "Payload": io.BytesIO(body),
        }


def _refusal(status: int, headers: Any, body: bytes) -> str:
    """Lambda's error type and message (x-amzn-ErrorType, the JSON body's message)."""
    kind = (headers.get("x-amzn-ErrorType") or "").split(":", 1)[0]
    message = ""
    try:
        found = json.loads(body or b"{}")
    except ValueError:
        found = {}
    if isinstance(found, dict):
        kind = kind or str(found.get("Type") or found.get("__type") or "")
        message = str(found.get("message") or found.get("Message") or "")
    return f"{kind or 'HTTP ' + str(status)}: {message[:300] or 'no message'}"
