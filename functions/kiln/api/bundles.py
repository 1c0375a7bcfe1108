"""REST: /api/bundles: list, show (with lock and log), retry. Authors only.

`{bundle_id}` may be any unique prefix of a bundle id, as `kiln bundles ls` and the README show
them: BundleIdError (404, or 409 when ambiguous) says which.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from kiln.api.common import blocking, kiln_of, require
from kiln.api.errors import ApiError
from kiln.api.sight import Sight, sight
from kiln.bundles.errors import BundleStateError

router = APIRouter(prefix="/api/bundles", tags=["bundles"])


def _missing(bundle_id: str) -> ApiError:
    return ApiError(404, "not_found", f"bundle {bundle_id}: no such bundle")


@router.get("")
async def list_bundles(request: Request) -> dict[str, Any]:
    seen = await sight(request, await require(request))
    records = await blocking(kiln_of(request).bundles.store.list)
    shown = _shown(seen)
    return {"bundles": [r.to_json() for r in records if shown is None or r.id in shown]}


def _shown(seen: Sight) -> set[str] | None:
    """The bundles a bound caller sees: those its view's tools run with (at the served
    revision); None: every bundle."""
    if not seen.bound:
        return None
    return {t.head.bundle_id for t in (seen.tools or {}).values() if t.head.bundle_id}


@router.get("/{bundle_id}")
async def get_bundle(bundle_id: str, request: Request, log: bool = False) -> dict[str, Any]:
    shown = _shown(await sight(request, await require(request)))
    store = kiln_of(request).bundles.store
    bundle_id = await blocking(store.resolve, bundle_id, shown)
    record = await blocking(store.get, bundle_id)
    if record is None or (shown is not None and bundle_id not in shown):
        raise _missing(bundle_id)
    body = record.to_json()
    manifest = await blocking(store.read_manifest, bundle_id)
    body["lock"] = None if manifest is None else manifest.get("lock")
    if log:
        body["log"] = await blocking(store.read_log, bundle_id)
    return body


@router.post("/{bundle_id}/retry", status_code=202)
async def retry_bundle(bundle_id: str, request: Request) -> dict[str, Any]:
    shown = _shown(await sight(request, await require(request)))
    bundles = kiln_of(request).bundles
    bundle_id = await blocking(bundles.store.resolve, bundle_id, shown)
    if shown is not None and bundle_id not in shown:
        raise _missing(bundle_id)
    try:
        record = await blocking(bundles.retry, bundle_id)
    except BundleStateError as error:
        if await blocking(bundles.store.get, bundle_id) is None:
            raise _missing(bundle_id) from None
        rule = "only a failed build, or a ready one whose files are gone, is built again"
        raise ApiError(409, "bundle_state", f"{error}; {rule}") from None
    return record.to_json()
