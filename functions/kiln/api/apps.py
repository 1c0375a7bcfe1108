"""Both HTTP apps, over one MCP route list (`kiln.api.mcp.routes`) and one lifespan.

`create_public_app` is the public function's: the MCP routes and the metadata documents on
bare Starlette, so its cold start imports neither FastAPI nor the REST API. `create_app` is
the admin function's ("admin": /admin/mcp and the REST API) and kiln dev's ("all": both);
it imports FastAPI and the routers when called.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from kiln.api import mcp, middleware
from kiln.api.mcp import Serves
from kiln.api.middleware import AfterAnswer

if TYPE_CHECKING:
    from fastapi import FastAPI

    from kiln.stack import Kiln


def lifespan(kiln: Kiln) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """What an app does when its ASGI server stops it: the task runs this process holds stop
    first (their process trees killed, their tasks marked failed), then the runner lets its
    standbys go (their processes and run directories). In Lambda (Mangum, lifespan off) the
    sandbox ends with the process."""

    @asynccontextmanager
    async def span(app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await kiln.stop_tasks()
            kiln.close_runner()

    return span


async def _refused(request: Request, error: Exception) -> Response:
    from kiln.api.errors import answer

    return await answer(request, error)


def create_public_app(kiln: Kiln) -> Starlette:
    """The public function's app: /mcp, /mcp/v/{view} and the metadata documents."""
    app = Starlette(
        routes=mcp.routes("public"),
        exception_handlers={HTTPException: _refused, Exception: _refused},
        lifespan=lifespan(kiln),
    )
    app.router.redirect_slashes = False  # `/mcp/` is a JSON-RPC 404, not a redirect
    app.state.kiln = kiln
    _middleware(app, kiln, "public")
    return app


def _middleware(app: Starlette, kiln: Kiln, serves: Serves) -> None:
    """Each app's middleware, the last added running first: the MCP endpoints ahead of the
    router (innermost), the edge's own (`middleware.install`), then the work a request leaves
    for later (a run's clean-up, the tool's next standby, a held ledger entry's store write),
    started once its response is sent (kiln.runner.afterwards): it wraps every other one."""
    app.add_middleware(mcp.AheadOfRouter, serves=serves)
    middleware.install(app, kiln.api_settings)
    app.add_middleware(AfterAnswer)


def create_app(kiln: Kiln, *, serves: Serves = "all") -> FastAPI:
    """The admin function's app ("admin") or kiln dev's ("all"): MCP plus the REST API."""
    from fastapi import FastAPI

    from kiln import __version__
    from kiln.api import (
        approvals,
        bundles,
        calls,
        connections,
        errors,
        health,
        keys,
        secrets,
        studio,
        tasks,
        tools,
        views,
    )
    from kiln.studio import assets as studio_assets

    app = FastAPI(
        title="Kiln",
        version=__version__,
        docs_url=None if serves == "public" else "/api/docs",
        redoc_url=None,
        openapi_url=None if serves == "public" else "/api/openapi.json",
        redirect_slashes=False,  # `/api/tools/` is a JSON 404, not an empty-bodied redirect
        lifespan=lifespan(kiln),
    )
    app.state.kiln = kiln
    _middleware(app, kiln, serves)
    errors.install(app)
    app.router.routes.extend(mcp.routes(serves))
    if serves in ("all", "admin"):
        # The studio's pages and routes go before /api/tools/{ref}, so that
        # /api/tools/validate is not read as a tool name.
        for router in (studio_assets.router, studio.router, health.router, tools.router):
            app.include_router(router)
        for router in (bundles.router, tasks.router, views.router, calls.router):
            app.include_router(router)
        app.include_router(keys.router)
        app.include_router(secrets.router)
        app.include_router(approvals.router)
        app.include_router(connections.router)
    return app


def build_app(kiln: Kiln, serves: Serves) -> Starlette:
    """The app a Lambda function of this role serves."""
    return create_public_app(kiln) if serves == "public" else create_app(kiln, serves=serves)
