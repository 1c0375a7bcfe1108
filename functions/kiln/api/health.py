"""REST: /api/health (the metadata documents are MCP routes: `kiln.api.mcp`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

import kiln

router = APIRouter(tags=["health"])


@router.get("/api/health")
async def health() -> dict[str, Any]:
    return {"ok": True, "version": kiln.__version__}
