"""REST: /api/health, and the OAuth protected-resource metadata documents."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

import kiln
from kiln.api.common import kiln_of

router = APIRouter(tags=["health"])
metadata_router = APIRouter(include_in_schema=False)


@router.get("/api/health")
async def health() -> dict[str, Any]:
    return {"ok": True, "version": kiln.__version__}


@metadata_router.get("/.well-known/oauth-protected-resource")
@metadata_router.get("/.well-known/oauth-protected-resource/{resource:path}")
async def protected_resource(request: Request) -> Response:
    return kiln_of(request).access.metadata_response(request)
