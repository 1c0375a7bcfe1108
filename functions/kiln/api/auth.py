"""Access control at the HTTP edge: who this request's caller is, and whether they may.

The decisions are `kiln.identity.callers.Callers`' (made in `kiln.stack`); this module only
reads what a Starlette request carries and answers the metadata documents.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kiln.identity.callers import Callers
from kiln.identity.metadata import resource_path_for
from kiln.identity.policy import Permission, Principal


def callers_of(request: Request) -> Callers:
    """The app's Callers (`kiln.api.apps` puts the running Kiln on app.state)."""
    callers: Callers = request.app.state.kiln.callers
    return callers


def base_url(request: Request) -> str:
    return callers_of(request).base_url(str(request.base_url))


async def require(request: Request, need: Permission, resource_path: str) -> Principal:
    """The caller, if it may do what `need` names on this resource; else AuthError."""
    callers = callers_of(request)
    header = request.headers.get("authorization")
    if not header:  # no lookup to make: answer without a thread hop
        anonymous = callers.authenticator.anonymous(need)
        if anonymous is not None:  # and no challenge to write: the URL is not needed
            return anonymous
    base = base_url(request)
    if not header:
        return callers.authenticate(header, need=need, resource_path=resource_path, base_url=base)
    return await asyncio.to_thread(
        callers.authenticate, header, need=need, resource_path=resource_path, base_url=base
    )


def metadata_response(request: Request) -> Response:
    resource_path = resource_path_for(request.url.path)
    if resource_path is None:
        return JSONResponse(
            {"error": {"code": "not_found", "message": "no protected resource at this path"}},
            status_code=404,
        )
    document = callers_of(request).metadata(base_url=base_url(request), resource_path=resource_path)
    return JSONResponse(document, headers={"cache-control": "public, max-age=300"})
