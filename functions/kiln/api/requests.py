"""What the MCP routes need from a request, on Starlette alone (no FastAPI import).

The public function's app (`kiln.api.public`) is bare Starlette so that a cold start does not
import FastAPI and the REST API; these helpers serve it and the full app alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from kiln.auth.policy import AuthError, Permission
from kiln.protocol.backend import CallContext

if TYPE_CHECKING:
    from kiln.stack import Kiln


def kiln_of(request: Request) -> Kiln:
    """The Kiln the app was composed over (`kiln.app.create_app` puts it on app.state)."""
    parts: Kiln = request.app.state.kiln
    return parts


def time_left_s(request: Request) -> float:
    """Seconds left to answer: from the Lambda context when Mangum gives one, else a budget."""
    context = request.scope.get("aws.context")
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        return float(context.get_remaining_time_in_millis()) / 1000.0
    return kiln_of(request).settings.local_time_budget_s


async def read_capped(request: Request, cap: int) -> bytes:
    """The request body, or its first cap+1 bytes: enough to tell that it is too large."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            break
    return b"".join(chunks)


async def serve_mcp(request: Request, need: Permission, path: str) -> Response:
    """Authenticate, read the capped body, hand (method, headers, body) to the endpoint."""
    from kiln.protocol import HttpRequest

    parts = kiln_of(request)
    try:
        principal = await parts.access.require(request, need, path)
    except AuthError as error:
        from kiln.api.errors import jsonrpc_response  # the one error table, loaded when refusing

        return jsonrpc_response(error)
    body = await read_capped(request, parts.settings.max_body_bytes)
    headers = {name.lower(): value for name, value in request.headers.items()}
    ctx = CallContext(
        time_left_s=time_left_s(request),
        principal=None if principal.kind == "anonymous" else principal,
    )
    endpoint = parts.admin_endpoint if need == "author" else parts.endpoint
    answer = await endpoint.handle(HttpRequest(request.method, headers, body), ctx)
    return Response(answer.body, status_code=answer.status, headers=answer.headers)
