"""The FastAPI app: composes the routers of `kiln.api` and their middleware, nothing more.

Which routes a Lambda function serves depends on its role: "public" is /mcp only, "admin"
is /admin/mcp and the REST API, "all" (kiln dev, tests) is both.
"""

from __future__ import annotations

from fastapi import FastAPI

import kiln
from kiln.api import (
    bundles,
    calls,
    errors,
    health,
    keys,
    mcp,
    middleware,
    secrets,
    studio,
    tasks,
    tools,
    views,
)
from kiln.api.lifespan import closing
from kiln.stack import Kiln, Role
from kiln.studio import assets as studio_assets


def create_app(parts: Kiln, *, role: Role = "all") -> FastAPI:
    """The ASGI app over a running Kiln (made by `kiln.stack.build_kiln`)."""
    app = FastAPI(
        title="Kiln",
        version=kiln.__version__,
        docs_url=None if role == "public" else "/api/docs",
        redoc_url=None,
        openapi_url=None if role == "public" else "/api/openapi.json",
        redirect_slashes=False,  # `/api/tools/` is a JSON 404, not an empty-bodied redirect
        lifespan=closing(parts),
    )
    app.state.kiln = parts
    middleware.install(app, parts.settings)
    errors.install(app)
    app.include_router(health.metadata_router)
    if role in ("all", "public"):
        app.include_router(mcp.public_router)
    if role in ("all", "admin"):
        app.include_router(mcp.admin_router)
        # The studio's pages and routes go before /api/tools/{ref}, so that
        # /api/tools/validate is not read as a tool name.
        app.include_router(studio_assets.router)
        app.include_router(studio.router)
        app.include_router(health.router)
        app.include_router(tools.router)
        app.include_router(bundles.router)
        app.include_router(tasks.router)
        app.include_router(views.router)
        app.include_router(calls.router)
        app.include_router(keys.router)
        app.include_router(secrets.router)
    return app
