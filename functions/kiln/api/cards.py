"""Server cards and the AI Catalog over HTTP (the documents themselves: `kiln.protocol.cards`).

`GET /mcp/server-card` (the public endpoint's card), `GET /mcp/v/{view}/server-card` (a
published view's) and `GET /.well-known/ai-catalog.json` (every card). Public metadata, read
only: any origin may read them (`Access-Control-Allow-Origin: *`, as the extension asks; the
rebinding guard still checks Host on a loopback bind), no credential is asked for, and each
answer carries a strong ETag so that `If-None-Match` gets a bodiless 304.
Bare Starlette, as the rest of the public function's routes.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from kiln.api.auth import base_url
from kiln.api.mcp_serving import kiln_of
from kiln.api.middleware import GZIP_LEVEL, GZIP_MINIMUM_BYTES
from kiln.protocol.card_paths import CARD_SUFFIX, CATALOG_PATH, PUBLIC_CARD_PATH
from kiln.protocol.jsontext import dumps

if TYPE_CHECKING:  # the documents load with the first card asked for, not with the routes
    from kiln.access.views import View
    from kiln.protocol.cards import Deployment, Endpoint

VIEW_CARD_PATH = "/mcp/v/{view}" + CARD_SUFFIX
CACHE_CONTROL = "public, max-age=300"  # as the OAuth metadata documents: a change shows in 5 min
CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "GET",
    "access-control-allow-headers": "Content-Type, If-None-Match",
    "access-control-expose-headers": "ETag",
}
ALLOW = "GET, HEAD, OPTIONS"
# Every method reaches the handler, which answers 405 itself (the MCP paths' handler would
# answer a JSON-RPC one).
METHODS = ["GET", "HEAD", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"]


def deployment(request: Request) -> Deployment:
    from kiln.protocol.cards import Deployment

    kiln = kiln_of(request)
    settings = kiln.endpoint.settings
    return Deployment(
        base_url=base_url(request),
        server_name=settings.server_name,
        version=settings.server_version,
        title=settings.title,
        description=settings.description,
        website_url=settings.website_url,
        oauth=bool(kiln.callers.auth.authorization_servers),
    )


def public_endpoint(request: Request) -> Endpoint:
    from kiln.protocol.cards import Endpoint

    anonymous = kiln_of(request).callers.authenticator.anonymous("call") is not None
    return Endpoint(path="/mcp", view=None, anonymous=anonymous)


def view_endpoint(view: View) -> Endpoint:
    from kiln.protocol.cards import Endpoint

    return Endpoint(
        path=f"/mcp/v/{view.name}",
        view=view.name,
        anonymous=view.anonymous,
        description=view.description,
    )


async def published_views(request: Request) -> list[View]:
    """The views served on their own endpoint, by name (what `serve_view` would answer)."""
    kiln = kiln_of(request)
    snapshot = await kiln.snapshots.fresh()
    views = kiln.views.views_ready(snapshot.version)
    if views is None:
        views = await asyncio.to_thread(kiln.views.views_at, snapshot.version)
    return sorted((view for view in views.values() if view.published), key=lambda v: v.name)


async def public_card(request: Request) -> Response:
    from kiln.protocol.cards import CARD_MEDIA_TYPE, card

    if (early := _method_answer(request)) is not None:
        return early
    return _document(request, card(deployment(request), public_endpoint(request)), CARD_MEDIA_TYPE)


async def view_card(request: Request) -> Response:
    from kiln.protocol.cards import CARD_MEDIA_TYPE, card

    if (early := _method_answer(request)) is not None:
        return early
    name = str(request.path_params["view"])
    found = next((v for v in await published_views(request) if v.name == name), None)
    if found is None:  # unpublished looks like absent, as on /mcp/v/{view}
        message = f"no published view is named {name!r}; the public endpoint's card is at "
        return _error(404, "not_found", message + PUBLIC_CARD_PATH)
    return _document(request, card(deployment(request), view_endpoint(found)), CARD_MEDIA_TYPE)


async def ai_catalog(request: Request) -> Response:
    from kiln.protocol.cards import CATALOG_MEDIA_TYPE, catalog

    if (early := _method_answer(request)) is not None:
        return early
    endpoints = [public_endpoint(request)]
    endpoints += [view_endpoint(view) for view in await published_views(request)]
    return _document(request, catalog(deployment(request), endpoints), CATALOG_MEDIA_TYPE)


def routes() -> list[BaseRoute]:
    """Before `/mcp/{rest:path}`, which answers every other path below /mcp with a 404."""
    return [
        Route(CATALOG_PATH, ai_catalog, methods=METHODS),
        Route(PUBLIC_CARD_PATH, public_card, methods=METHODS),
        Route(VIEW_CARD_PATH, view_card, methods=METHODS),
    ]


def entity_tag(body: bytes) -> str:
    """A strong validator: the same bytes, the same tag, in every process and container."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 §13.1.2: `*`, or any listed tag equal to ours by weak comparison."""
    if if_none_match is None:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)


def _document(request: Request, document: dict[str, Any], media_type: str) -> Response:
    body = dumps(document)
    etag = entity_tag(body)
    headers = {"cache-control": CACHE_CONTROL, **CORS}
    if len(body) >= GZIP_MINIMUM_BYTES and "gzip" in request.headers.get("accept-encoding", ""):
        # Compressed here, not by the GZip middleware, so that the gzip bytes get a tag of
        # their own (a strong tag names one representation): the same bytes every time. The
        # middleware names Accept-Encoding in Vary on the identity answer of the same size.
        body = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
        etag = etag[:-1] + '-gzip"'
        headers.update({"content-encoding": "gzip", "vary": "Accept-Encoding"})
    headers["etag"] = etag
    if not_modified(request.headers.get("if-none-match"), etag):
        headers.pop("content-encoding", None)  # no body to decode
        return Response(status_code=304, headers=headers)
    return Response(body, headers=headers, media_type=media_type)


def _method_answer(request: Request) -> Response | None:
    if request.method == "OPTIONS":  # a browser's preflight, from any origin
        return Response(status_code=204, headers={**CORS, "access-control-max-age": "86400"})
    if request.method in ("GET", "HEAD"):
        return None
    response = _error(405, "method_not_allowed", f"{request.method} is not allowed; use GET")
    response.headers["allow"] = ALLOW
    return response


def _error(status: int, code: str, message: str) -> Response:
    body = dumps({"error": {"code": code, "message": message}})
    return Response(body, status_code=status, headers=CORS, media_type="application/json")
