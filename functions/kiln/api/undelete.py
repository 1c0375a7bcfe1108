"""REST: POST /api/tools/id:<id>/undelete. A deleted tool back under its name, while it is free."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.api.shared import kiln_of, refusal, require_author
from kiln.auth.audit import record_write
from kiln.catalog.store import NameTakenError, NotDeletedError, ToolNotFoundError

router = APIRouter(prefix="/api/tools", tags=["tools"])


@router.post("/{ref}/undelete", response_model=None)
async def undelete_tool(ref: str, request: Request) -> Any:
    from kiln.app import etag, tool_json

    who = await require_author(request)
    try:
        tool = await asyncio.to_thread(kiln_of(request).store.undelete, ref, actor=who.label)
    except ToolNotFoundError as error:
        return refusal(404, "not_found", str(error))
    except (NameTakenError, NotDeletedError) as error:
        code = "name_taken" if isinstance(error, NameTakenError) else "not_deleted"
        return refusal(409, code, str(error))
    record_write(
        who, action="undelete", tool_name=tool.name, tool_id=tool.id, revision=tool.head.number
    )
    headers = {"ETag": etag(tool), "Location": f"/api/tools/{tool.name}"}
    return JSONResponse(tool_json(tool), headers=headers)
