"""REST routes for bundles: list, show (with lock and log), retry. Authors only."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from kiln.bundles.service import Bundles
from kiln.bundles.store import BundleStateError

_ID = re.compile(r"^[0-9a-f]{32}$")


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def mount_bundle_routes(
    app: FastAPI, bundles: Bundles, *, require_author: Callable[[Request], Awaitable[Any]]
) -> None:
    """GET /api/bundles, GET /api/bundles/{id}[?log=true], POST /api/bundles/{id}/retry."""
    store = bundles.store

    def bad_id(bundle_id: str) -> JSONResponse | None:
        if _ID.match(bundle_id):
            return None
        return _error(404, "not_found", "bundle id: must be 32 lower-case hex digits")

    @app.get("/api/bundles")
    async def list_bundles(request: Request) -> dict[str, Any]:
        await require_author(request)
        records = await asyncio.to_thread(store.list)
        return {"bundles": [record.to_json() for record in records]}

    @app.get("/api/bundles/{bundle_id}", response_model=None)
    async def get_bundle(bundle_id: str, request: Request, log: bool = False) -> Any:
        await require_author(request)
        if (refused := bad_id(bundle_id)) is not None:
            return refused
        record = await asyncio.to_thread(store.get, bundle_id)
        if record is None:
            return _error(404, "not_found", f"bundle {bundle_id}: no such bundle")
        body = record.to_json()
        manifest = await asyncio.to_thread(store.read_manifest, bundle_id)
        body["lock"] = None if manifest is None else manifest.get("lock")
        if log:
            body["log"] = await asyncio.to_thread(store.read_log, bundle_id)
        return body

    @app.post("/api/bundles/{bundle_id}/retry", status_code=202, response_model=None)
    async def retry_bundle(bundle_id: str, request: Request) -> Any:
        await require_author(request)
        if (refused := bad_id(bundle_id)) is not None:
            return refused
        try:
            record = await asyncio.to_thread(bundles.retry, bundle_id)
        except BundleStateError as error:
            exists = await asyncio.to_thread(store.get, bundle_id)
            if exists is None:
                return _error(404, "not_found", f"bundle {bundle_id}: no such bundle")
            rule = "only a failed build, or a ready one whose files are gone, is built again"
            return _error(409, "bundle_state", f"{error}; {rule}")
        return record.to_json()
