"""REST routes for bundles: list, show (with lock and log), retry. Authors only."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from kiln.bundles.service import Bundles
from kiln.bundles.store import BundleIdError, BundleStateError


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def mount_bundle_routes(
    app: FastAPI, bundles: Bundles, *, require_author: Callable[[Request], Awaitable[Any]]
) -> None:
    """GET /api/bundles, GET /api/bundles/{id}[?log=true], POST /api/bundles/{id}/retry.

    `{id}` may be any unique prefix of a bundle id, as `kiln bundles ls` and the README show them.
    """
    store = bundles.store

    async def full_id(ref: str) -> str | JSONResponse:
        """The id that `ref` (any unique prefix) names, or the 404/409 answer saying why not."""
        try:
            return await asyncio.to_thread(store.resolve, ref)
        except BundleIdError as error:
            status, code = (409, "ambiguous_id") if error.ambiguous else (404, "not_found")
            return _error(status, code, str(error))

    @app.get("/api/bundles")
    async def list_bundles(request: Request) -> dict[str, Any]:
        await require_author(request)
        records = await asyncio.to_thread(store.list)
        return {"bundles": [record.to_json() for record in records]}

    @app.get("/api/bundles/{ref}", response_model=None)
    async def get_bundle(ref: str, request: Request, log: bool = False) -> Any:
        await require_author(request)
        bundle_id = await full_id(ref)
        if isinstance(bundle_id, JSONResponse):
            return bundle_id
        record = await asyncio.to_thread(store.get, bundle_id)
        if record is None:
            return _error(404, "not_found", f"bundle {bundle_id}: no such bundle")
        body = record.to_json()
        manifest = await asyncio.to_thread(store.read_manifest, bundle_id)
        body["lock"] = None if manifest is None else manifest.get("lock")
        if log:
            body["log"] = await asyncio.to_thread(store.read_log, bundle_id)
        return body

    @app.post("/api/bundles/{ref}/retry", status_code=202, response_model=None)
    async def retry_bundle(ref: str, request: Request) -> Any:
        await require_author(request)
        bundle_id = await full_id(ref)
        if isinstance(bundle_id, JSONResponse):
            return bundle_id
        try:
            record = await asyncio.to_thread(bundles.retry, bundle_id)
        except BundleStateError as error:
            exists = await asyncio.to_thread(store.get, bundle_id)
            if exists is None:
                return _error(404, "not_found", f"bundle {bundle_id}: no such bundle")
            rule = "only a failed build, or a ready one whose files are gone, is built again"
            return _error(409, "bundle_state", f"{error}; {rule}")
        return record.to_json()
