"""/api/views: tool views (named, pinned sets of tools) -> kiln.access.views."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.access.views import (
    View,
    ViewNotFoundError,
    ViewRuleError,
    check_view,
    check_view_name,
)
from kiln.api.common import blocking, if_match, json_body, kiln_of, require
from kiln.api.sight import sight
from kiln.catalog import fingerprint

router = APIRouter()


def _answer(view: View, status: int = 200, **extra: Any) -> JSONResponse:
    body = {**view.as_json(), **extra}
    return JSONResponse(body, status_code=status, headers={"ETag": f'"{view.revision}"'})


@router.get("/api/views")
async def list_views(request: Request) -> dict[str, Any]:
    """Every view, each with `problems`: entries that serve nothing, and why."""
    seen = await sight(request, await require(request))
    kiln = kiln_of(request)
    snapshot = await kiln.snapshots.fresh()

    def listing() -> list[dict[str, Any]]:
        views = kiln.views.views_at(snapshot.version)
        return [
            {**view.as_json(),
             "problems": kiln.views.problems_of(snapshot.version, name, snapshot.tools),
             "pending": _pending(kiln, snapshot, name)}
            for name, view in sorted(views.items())
            if not seen.bound or name == seen.view  # a bound caller: its own view only
        ]  # fmt: skip

    return {"views": await blocking(listing)}


@router.get("/api/views/{name}")
async def get_view(name: str, request: Request) -> JSONResponse:
    """The view, and what it shows right now: each tool with the revision it serves and that
    revision's fingerprint under the tool's name."""
    seen = await sight(request, await require(request))
    kiln = kiln_of(request)
    if seen.bound and name != seen.view:
        raise ViewNotFoundError(f"no view is named {name!r}")
    view = await blocking(kiln.views.store.get, check_view_name(name))
    snapshot = await kiln.snapshots.fresh()
    tools = await blocking(kiln.views.tools_of, snapshot.version, name, snapshot.tools)
    shows = [
        {
            "name": t.name,
            "revision": t.head.number,
            "fingerprint": fingerprint.served(t.name, t.head),
        }
        for t in (tools or {}).values()
    ]
    found = await blocking(kiln.views.problems_of, snapshot.version, name, snapshot.tools)
    extra: dict[str, Any] = {
        "shows": sorted(shows, key=lambda t: str(t["name"])),
        "problems": found,
        "pending": await blocking(_pending, kiln, snapshot, name),
    }
    quotas = kiln.gate.quotas
    if quotas is not None and not view.quota.empty:  # how much of its shared quota is used
        extra["usage"] = await blocking(quotas.usage, f"view:{view.name}")
    return _answer(view, **extra)


def _pending(kiln: Any, snapshot: Any, name: str) -> list[dict[str, Any]]:
    """Breaking revisions the view holds back until its owner accepts them (access.holds)."""
    return [held.as_json(name) for held in kiln.views.held_of(snapshot.version, name,
                                                              snapshot.tools)]  # fmt: skip


@router.post("/api/views/{name}/accept")
async def accept_breaking(name: str, request: Request) -> JSONResponse:
    """`{"tool": NAME}`: the view takes the tool's breaking revisions up to its head now."""
    who = await require(request)
    body = await json_body(request)
    tool_name = body.get("tool") if isinstance(body, dict) else None
    if not isinstance(tool_name, str) or not tool_name:
        raise ViewRuleError([("tool", "must name the tool whose breaking revisions to accept")])
    kiln = kiln_of(request)
    view_name = check_view_name(name)
    tool = await blocking(kiln.authoring.get, tool_name)
    saved = await blocking(kiln.views.store.accept, view_name, tool.id, tool.head.number,
                           actor=who.label)  # fmt: skip
    return _answer(saved, accepted={"tool": tool.name, "revision": tool.head.number})


@router.post("/api/views", status_code=201)
async def create_view(request: Request) -> JSONResponse:
    who = await require(request)
    view = check_view(await json_body(request))
    saved = await blocking(kiln_of(request).views.store.put, view, expected_revision=None,
                           actor=who.label)  # fmt: skip
    response = _answer(saved, 201)
    response.headers["Location"] = f"/api/views/{saved.name}"
    return response


@router.put("/api/views/{name}")
async def put_view(name: str, request: Request) -> JSONResponse:
    """Create (no If-Match) or replace (If-Match: the revision you read) a view."""
    who = await require(request)
    expected = if_match(request)
    view = check_view(await json_body(request), name=name)
    saved = await blocking(kiln_of(request).views.store.put, view, expected_revision=expected,
                           actor=who.label)  # fmt: skip
    return _answer(saved, 200 if expected else 201)


@router.delete("/api/views/{name}")
async def delete_view(name: str, request: Request) -> JSONResponse:
    await require(request)
    view = await blocking(kiln_of(request).views.store.delete, check_view_name(name))
    return _answer(view)
