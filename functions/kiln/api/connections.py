"""REST and pages for each caller's OAuth connections (kiln.connections).

Every route, who may use it, and what it does:

    GET    /api/connections/providers         call key    registered providers, no secret
    PUT    /api/connections/providers/{name}  author key  register or change one
    DELETE /api/connections/providers/{name}  author key  remove it
    GET    /api/connections                   call key    the caller's own (?all=true: all,
                                                          author key)
    POST   /api/connections/{provider}/connect call key   a connect link for the caller
    DELETE /api/connections/{provider}        call key    revoke the caller's own
                                                          (?identity=X: anyone's, author key)
    GET    /connect/{state}                   a browser   names the provider; Connect button
    POST   /connect/{state}                   that page   same origin and the page's token:
                                                          on to the provider
    GET    /connect/callback                  provider    code exchanged, tokens sealed
"""

from __future__ import annotations

import base64
import hashlib
import html
import urllib.parse
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from kiln.api.auth import base_url
from kiln.api.common import blocking, json_body, kiln_of, read_capped, require
from kiln.api.errors import ApiError
from kiln.connections import ConnectError, Connections, identity_of
from kiln.connections.oauth import OAuthError
from kiln.connections.providers import (
    Provider,
    ProviderError,
    ProviderNotFoundError,
    provider_from,
)

router = APIRouter(tags=["connections"])
COOKIE = "kiln_connect"


def _connections(request: Request) -> Connections:
    found = kiln_of(request).connections
    if found is None:
        raise ApiError(404, "no_vault", "connections are off here: no vault key is configured")
    return found


async def _call(fn: Any, *args: Any) -> Any:
    try:
        return await blocking(fn, *args)
    except ProviderNotFoundError as error:
        raise ApiError(404, "not_found", str(error)) from None
    except ProviderError as error:
        raise _invalid(error) from None
    except OAuthError as error:
        raise ApiError(502, "provider_failed", str(error)) from None


def _invalid(error: ProviderError) -> ApiError:
    """422 naming the field it is about, as the tool rules do (the studio shows it there)."""
    found = {"field": error.field, "rule": "invalid_provider", "message": str(error)}
    return ApiError(422, "invalid_provider", str(error), violations=[found])


def _discovered(name: str, body: dict[str, Any]) -> Provider:
    """The provider from its input; an issuer publishing no usable metadata is bad input."""
    try:
        return provider_from(name, body)
    except OAuthError as error:
        raise ProviderError(f"issuer: {error}", "issuer") from None


def _identity(who: Any) -> str:
    identity = identity_of(who)
    if identity is None:
        raise ApiError(403, "anonymous", "connections belong to a caller: use a key or a token")
    return identity


@router.get("/api/connections/providers")
async def list_providers(request: Request) -> dict[str, Any]:
    await require(request, "call")
    found = await _call(_connections(request).providers.list)
    return {"providers": [p.public() for p in found]}


@router.put("/api/connections/providers/{name}")
async def put_provider(name: str, request: Request) -> dict[str, Any]:
    await require(request)
    body = await json_body(request)
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_provider", "body: must be a JSON object")
    secret = body.pop("client_secret", None)
    store = _connections(request).providers
    provider = await _call(_discovered, name, body)
    await _call(store.put, provider, secret)
    shown: dict[str, Any] = provider.public()
    return shown


@router.delete("/api/connections/providers/{name}")
async def delete_provider(name: str, request: Request) -> dict[str, Any]:
    await require(request)
    await _call(_connections(request).providers.delete, name)
    return {"name": name, "deleted": True}


@router.get("/api/connections")
async def list_connections(request: Request, all: bool = False) -> dict[str, Any]:
    who = await require(request, "author" if all else "call")
    found = await _call(_connections(request).vault.connections, None if all else _identity(who))
    return {"connections": [c.public() for c in found]}


@router.post("/api/connections/{provider}/connect")
async def connect(provider: str, request: Request) -> dict[str, Any]:
    who = await require(request, "call")
    base = base_url(request)
    sent = request.headers.get("content-length", "0") != "0"
    body = await json_body(request) if sent else {}
    scopes = body.get("scopes", []) if isinstance(body, dict) else None
    pending = await _call(
        lambda: _connections(request).begin(
            _identity(who), provider, scopes, redirect_uri=f"{base}/connect/callback"
        )
    )
    return {"url": f"{base}/connect/{pending.state}", "expires_in": 600}


@router.delete("/api/connections/{provider}")
async def revoke(provider: str, request: Request, identity: str | None = None) -> dict[str, Any]:
    who = await require(request, "author" if identity else "call")
    whose = identity or _identity(who)
    removed = await _call(_connections(request).revoke, whose, provider)
    if not removed:
        raise ApiError(404, "not_found", f"no connection to {provider!r} for {whose}")
    return {"identity": whose, "provider": provider, "revoked": True}


# The page's own look, inline and allowed by its hash alone (the page loads nothing else).
_STYLE = (
    "body{margin:0;background:#f6f5f3;color:#1f1b18;font:16px/1.5 system-ui,sans-serif}"
    "main{max-width:34rem;margin:12vh auto;padding:2rem;background:#fff;border:1px solid #e2ddd8;"
    "border-radius:10px}h1{margin-top:0;font-size:1.5rem}code{background:#f1eeeb;padding:0 .3em;"
    "border-radius:4px}button{font:inherit;font-weight:600;color:#fff;background:#9a3412;"
    "border:0;border-radius:6px;padding:.55em 1.4em;cursor:pointer}"
    "button:focus-visible{outline:3px solid #1f1b18;outline-offset:2px}#problem{color:#9b1c1c}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()


def _page(status: int, title: str, body: str) -> HTMLResponse:
    text = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><main><h1>{html.escape(title)}</h1>{body}</main></body></html>"
    )
    style = f"style-src 'sha256-{_STYLE_HASH}'"
    policy = f"default-src 'none'; {style}; form-action 'self' https: http:"
    headers = {"Cache-Control": "no-store", "Referrer-Policy": "same-origin",
               "Content-Security-Policy": policy, "X-Frame-Options": "DENY"}  # fmt: skip
    return HTMLResponse(text, status, headers=headers)


@router.get("/connect/callback")
async def callback(request: Request) -> Response:
    got = request.query_params
    try:
        pending = await _call(
            lambda: _connections(request).finish(
                got.get("state", ""), code=got.get("code"), error=got.get("error"),
                binding=request.cookies.get(COOKIE),
            )
        )  # fmt: skip
    except ConnectError as error:
        return _page(400, "Not connected", f"<p id=problem>{html.escape(str(error))}</p>")
    except ApiError as error:
        return _page(error.status, "Not connected", f"<p id=problem>{html.escape(str(error))}</p>")
    done = _page(200, "Connected", f"<p id=done>{html.escape(pending.provider)} is connected. "
                 "Go back and call the tool again.</p>")  # fmt: skip
    done.delete_cookie(COOKIE, path="/connect")
    return done


@router.get("/connect/{state}")
async def connect_page(state: str, request: Request) -> Response:
    pending = await _call(_connections(request).vault.peek, state)
    if pending is None:
        return _page(404, "Link expired", "<p id=problem>This link is unknown, used or expired: "
                     "call the tool again for a new one.</p>")  # fmt: skip
    form = (
        f"<p>Connect your <b>{html.escape(pending.provider)}</b> account for the Kiln caller "
        f"<b>{html.escape(pending.identity)}</b>, with the scopes "
        f"<code>{html.escape(' '.join(pending.scopes))}</code>?</p>"
        f'<form method=post><input type=hidden name=token value="{html.escape(pending.binding)}">'
        "<button id=connect>Connect</button></form>"
    )
    page = _page(200, f"Connect {pending.provider}", form)
    page.set_cookie(COOKIE, pending.binding, max_age=600, path="/connect", httponly=True,
                    samesite="lax", secure=request.url.scheme == "https")  # fmt: skip
    return page


@router.post("/connect/{state}")
async def connect_go(state: str, request: Request) -> Response:
    connections = _connections(request)
    pending = await _call(connections.vault.peek, state)
    origin = request.headers.get("origin")
    raw = await read_capped(request, 4096)
    token = urllib.parse.parse_qs(raw.decode("utf-8", "replace")).get("token", [None])[0]
    cookie = request.cookies.get(COOKIE)
    same_origin = origin is None or origin.rstrip("/") == base_url(request).rstrip("/")
    if pending is None or not same_origin or not cookie or not (token == cookie == pending.binding):
        return _page(403, "Not connected", "<p id=problem>This request did not come from the "
                     "connect page in this browser: open the link again.</p>")  # fmt: skip
    url = await _call(connections.authorize_url, pending)
    return RedirectResponse(url, status_code=303)
