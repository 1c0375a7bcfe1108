"""The FastAPI app: MCP on /mcp (and /admin/mcp), the authoring REST API under /api."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

import kiln
from kiln.auth import redact
from kiln.auth.audit import record_write
from kiln.auth.policy import AuthError, Permission, Principal
from kiln.auth.process import protect_process
from kiln.auth.web import AccessControl, auth_error_response
from kiln.aws import AwsClients, make_clients
from kiln.bundles.service import Bundles, make_bundles
from kiln.catalog.model import Revision, Tool
from kiln.catalog.rules import RuleError, check_draft, check_name
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import (
    CatalogError,
    CatalogStore,
    NameMismatchError,
    NameTakenError,
    RevisionNotFoundError,
    RevisionRequiredError,
    StaleRevisionError,
    ToolNotFoundError,
    utc_now,
)
from kiln.catalog.syntax import available_node, check_parses
from kiln.catalog.toolfiles import encode_files
from kiln.protocol.backend import CallContext
from kiln.protocol.guard import host_allowed, origin_allowed, same_origin
from kiln.runner import Runner, RunnerSettings
from kiln.service import CatalogBackend
from kiln.settings import Settings

if TYPE_CHECKING:
    from kiln.protocol import McpEndpoint
    from kiln.tasks.service import TaskService
    from kiln.tasks.store import TaskStore
    from kiln.tasks.worker import TaskWorker

log = logging.getLogger("kiln.app")
T = TypeVar("T")
Role = Literal["all", "public", "admin"]

# One table maps every refusal to its HTTP status and a stable error code.
ERRORS: dict[type[Exception], tuple[int, str]] = {
    RuleError: (422, "invalid_tool"),
    NameMismatchError: (422, "name_mismatch"),
    NameTakenError: (409, "name_taken"),
    ToolNotFoundError: (404, "not_found"),
    RevisionNotFoundError: (404, "not_found"),
    StaleRevisionError: (412, "stale_revision"),
    RevisionRequiredError: (428, "revision_required"),
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra


@dataclass
class Kiln:
    """Everything a running app holds; made once per process."""

    settings: Settings
    clients: AwsClients
    store: CatalogStore
    snapshots: CatalogSnapshots
    runner: Runner
    backend: CatalogBackend
    access: AccessControl
    bundles: Bundles | None = None

    @cached_property
    def task_worker(self) -> TaskWorker:
        """Runs one stored task (in this process's pool, or in the worker function)."""
        from kiln.protocol.calling import ToolCaller
        from kiln.tasks.worker import TaskWorker

        return TaskWorker(
            self.task_store,
            self.backend,
            ToolCaller(self.backend),
            self.settings.tasks,
            now_iso=utc_now,
        )

    @cached_property
    def task_store(self) -> TaskStore:
        from kiln.tasks.store import TaskStore

        c = self.clients
        return TaskStore(c.dynamodb, c.s3, table=self.settings.table, bucket=self.settings.bucket)

    @cached_property
    def tasks(self) -> TaskService:
        """Tasks of the public endpoint: a worker function in AWS, a local pool elsewhere."""
        from kiln.tasks.service import LambdaStarter, LocalPool, Starter, TaskService

        config = self.settings.tasks
        starter: Starter
        if config.worker_function:
            session = self.clients.session
            client = session.client("lambda") if session is not None else None
            starter = LambdaStarter(client, config.worker_function)
        else:
            starter = LocalPool(self.task_worker, max_running=config.max_running_per_process)
        return TaskService(self.task_store, starter, config, self.backend)

    @property
    def cursor_secret(self) -> bytes:
        """The same in every container of a deployment, so a cursor works wherever it lands."""
        configured = self.settings.cursor_secret
        seed = configured or f"kiln-cursor:{self.settings.table}:{self.settings.bucket}"
        return hashlib.sha256(seed.encode()).digest()

    @cached_property
    def endpoint(self) -> McpEndpoint:
        """The MCP endpoint, built on first use (a REST-only function never pays for it)."""
        return self._endpoint(self.backend, tasks=self.tasks)

    @cached_property
    def admin_endpoint(self) -> McpEndpoint:
        """`/admin/mcp`: the catalog's tools plus the built-in kiln_* authoring tools."""
        from kiln.authoring import AdminBackend

        return self._endpoint(AdminBackend(self.backend, self.store))

    def _endpoint(self, backend: Any, tasks: TaskService | None = None) -> McpEndpoint:
        from kiln.protocol import McpEndpoint, ProtocolSettings

        return McpEndpoint(
            backend,
            ProtocolSettings(
                server_version=kiln.__version__,
                instructions=self.settings.instructions,
                max_body_bytes=self.settings.max_body_bytes,
                allowed_origins=self.settings.allowed_origins,
                loopback_bind=self.settings.loopback_bind,
                cursor_secret=self.cursor_secret,
            ),
            tasks=tasks,
        )


def build_kiln(settings: Settings, *, clients: AwsClients | None = None) -> Kiln:
    clients = clients or make_clients(
        endpoint_url=settings.endpoint_url, region=settings.region, profile=settings.profile
    )
    bundles = make_bundles(settings, clients)
    store = CatalogStore(
        clients.dynamodb, clients.s3, table=settings.table, bucket=settings.bucket, bundles=bundles
    )
    snapshots = CatalogSnapshots(store)
    runner = Runner(
        RunnerSettings(
            max_concurrent_runs=settings.max_concurrent_runs,
            max_queue=settings.max_run_queue,
            max_timeout_s=settings.max_timeout_s,
            node_binary=Path(settings.node_binary) if settings.node_binary else None,
        )
    )
    access = AccessControl(settings, clients)
    backend = CatalogBackend(snapshots, runner, bundles=bundles, secrets=access)
    return Kiln(settings, clients, store, snapshots, runner, backend, access, bundles)


def time_left_s(request: Request, settings: Settings) -> float:
    """Seconds left to answer: from the Lambda context when Mangum gives one, else a budget."""
    context = request.scope.get("aws.context")
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        return float(context.get_remaining_time_in_millis()) / 1000.0
    return settings.local_time_budget_s


async def read_capped(request: Request, cap: int) -> bytes:
    """The request body, or its first cap+1 bytes: enough to tell that it is too large."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            break
    return b"".join(chunks)


def tool_json(tool: Tool, *, code: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": tool.id,
        "name": tool.name,
        "enabled": tool.enabled,
        "revision": tool.head.number,
        **revision_fields(tool.head),
        "created_at": tool.created_at,
        "updated_at": tool.updated_at,
    }
    if tool.deleted:
        body["deleted"] = True
    if code is not None:
        body["code"] = code
    return body


def revision_fields(revision: Revision) -> dict[str, Any]:
    return {
        "title": revision.title,
        "description": revision.description,
        "language": revision.language,
        "requirements": list(revision.requirements),
        "input_schema": revision.input_schema,
        "output_schema": revision.output_schema,
        "annotations": revision.annotations,
        "timeout_seconds": revision.timeout_seconds,
        "bundle_id": revision.bundle_id,
        "secrets": list(revision.secrets),  # names only; values are never returned
        "task": revision.task,
        "tags": list(revision.tags),
    }


def revision_json(revision: Revision, *, code: str | None = None) -> dict[str, Any]:
    body = {
        "revision": revision.number,
        **revision_fields(revision),
        "created_at": revision.created_at,
        "created_by": revision.created_by,
        "restored_from": revision.restored_from,
    }
    if code is not None:
        body["code"] = code
    return body


def etag(tool: Tool) -> str:
    return f'"{tool.head.number}"'


def parse_if_match(value: str | None) -> int | None:
    """The revision number in If-Match: `"3"`, `3` or `W/"3"`; refuses anything else."""
    if value is None or not value.strip():
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not re.fullmatch(r"[0-9]{1,9}", text):
        raise ApiError(
            400,
            "bad_if_match",
            'If-Match: must be the revision number you read, as its ETag gives it (e.g. "3")',
        )
    return int(text)


LOOPBACK_ORIGIN = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]+)?"
CORS_HEADERS = [
    "Authorization",
    "Content-Type",
    "Accept",
    "If-Match",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
]


class RebindingGuard:
    """Refuses a foreign Origin (403) or, on a loopback bind, a foreign Host (421) on every route,
    before any credential is looked at. MCP paths get a JSON-RPC error body, others the API's."""

    def __init__(self, app: Any, *, allowed_origins: tuple[str, ...], loopback_bind: bool) -> None:
        self.app = app
        self.allowed_origins = allowed_origins
        self.loopback_bind = loopback_bind

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            refusal = self._refusal(headers)
            if refusal is not None:
                status, message = refusal
                if scope["path"].endswith("/mcp"):
                    error = {"code": -32600, "message": message}
                    body: dict[str, Any] = {"jsonrpc": "2.0", "id": None, "error": error}
                else:
                    code = "forbidden_origin" if status == 403 else "misdirected_request"
                    body = {"error": {"code": code, "message": message}}
                await JSONResponse(body, status_code=status)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, headers: dict[str, str]) -> tuple[int, str] | None:
        if not host_allowed(headers.get("host"), loopback_bind=self.loopback_bind):
            return 421, (
                "Misdirected request: this server is bound to loopback and answers only "
                "localhost, 127.0.0.1 or [::1] as Host"
            )
        origin = headers.get("origin")
        allowed = same_origin(origin, headers.get("host")) or origin_allowed(
            origin, allowed=self.allowed_origins, loopback_bind=self.loopback_bind
        )
        if not allowed:
            return 403, "Forbidden: the request's Origin is not allowed on this server"
        return None


def create_app(
    settings: Settings,
    *,
    clients: AwsClients | None = None,
    role: Role = "all",
    kiln_parts: Kiln | None = None,
) -> FastAPI:
    """The app; `role` picks what one Lambda function serves ("public": /mcp only)."""
    redact.install()  # no key or bearer token reaches a log line from here on
    protect_process()  # tools cannot read this process's environ (AWS credentials, keys)
    parts = kiln_parts or build_kiln(settings, clients=clients)
    app = FastAPI(
        title="Kiln",
        version=kiln.__version__,
        docs_url=None if role == "public" else "/api/docs",
        redoc_url=None,
        openapi_url=None if role == "public" else "/api/openapi.json",
    )
    app.state.kiln = parts
    # Browsers on an allowed origin may call the API (preflights answered); the guard, added
    # last and so run first, has already refused every other origin.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(settings.allowed_origins),
        allow_origin_regex=LOOPBACK_ORIGIN if settings.loopback_bind else None,
        allow_methods=["GET", "POST", "PUT", "DELETE"],
        allow_headers=CORS_HEADERS,
        expose_headers=["ETag", "Location", "WWW-Authenticate"],
    )
    app.add_middleware(
        RebindingGuard,
        allowed_origins=settings.allowed_origins,
        loopback_bind=settings.loopback_bind,
    )

    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        body = {"error": {"code": error.code, "message": str(error), **error.extra}}
        return JSONResponse(body, status_code=error.status)

    @app.exception_handler(AuthError)
    async def auth_error(_: Request, error: AuthError) -> Response:
        return auth_error_response(error)

    @app.get("/.well-known/oauth-protected-resource", include_in_schema=False)
    @app.get("/.well-known/oauth-protected-resource/{resource:path}", include_in_schema=False)
    async def protected_resource(request: Request) -> Response:
        return parts.access.metadata_response(request)

    @app.exception_handler(CatalogError)
    @app.exception_handler(RuleError)
    async def catalog_error(_: Request, error: Exception) -> JSONResponse:
        status, code = ERRORS.get(type(error), (400, "bad_request"))
        body: dict[str, Any] = {"code": code, "message": str(error)}
        if isinstance(error, RuleError):
            body["violations"] = [
                {"field": v.field, "rule": v.rule, "message": v.message} for v in error.violations
            ]
        if isinstance(error, StaleRevisionError):
            body["current_revision"] = error.current
        return JSONResponse({"error": body}, status_code=status)

    if role in ("all", "public"):
        _mount_mcp(app, parts, "/mcp", "call")
    if role in ("all", "admin"):
        _mount_mcp(app, parts, "/admin/mcp", "author")
        _mount_studio(app)
        _mount_rest(app, parts)
    return app


def _mount_studio(app: FastAPI) -> None:
    """The studio's pages and its two extra routes; before /api/tools/{ref} so that
    /api/tools/validate is not read as a tool name."""
    from kiln.studio import assets, routes

    app.include_router(assets.router)
    app.include_router(routes.router)


def _mount_mcp(app: FastAPI, parts: Kiln, path: str, need: Permission) -> None:
    methods = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]

    @app.api_route(path, methods=methods, include_in_schema=False)
    async def mcp(request: Request) -> Response:
        try:
            principal = await parts.access.require(request, need, path)
        except AuthError as error:
            return auth_error_response(error, jsonrpc=True)
        body = await read_capped(request, parts.settings.max_body_bytes)
        headers = {name.lower(): value for name, value in request.headers.items()}
        ctx = CallContext(
            time_left_s=time_left_s(request, parts.settings),
            principal=None if principal.kind == "anonymous" else principal,
        )
        from kiln.protocol import HttpRequest

        endpoint = parts.admin_endpoint if need == "author" else parts.endpoint
        answer = await endpoint.handle(HttpRequest(request.method, headers, body), ctx)
        return Response(answer.body, status_code=answer.status, headers=answer.headers)


def _mount_rest(app: FastAPI, parts: Kiln) -> None:
    from kiln.protocol.arguments import ValidatorCache, summarize
    from kiln.protocol.calling import ToolCaller
    from kiln.protocol.wire import LATEST_LEGACY
    from kiln.service import tool_view

    settings, store = parts.settings, parts.store
    validators = ValidatorCache()
    node = available_node()

    async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def require(request: Request, need: Permission = "author") -> Principal:
        """The caller, when it may do what `need` names; AuthError (401/403) for anyone else."""
        return await parts.access.require(request, need, "")

    def audit(who: Principal, action: str, tool: Tool) -> None:
        record_write(
            who, action=action, tool_name=tool.name, tool_id=tool.id, revision=tool.head.number
        )

    async def json_body(request: Request) -> Any:
        raw = await read_capped(request, settings.max_body_bytes)
        if len(raw) > settings.max_body_bytes:
            raise ApiError(413, "too_large", f"body: larger than {settings.max_body_bytes} bytes")
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            where = (
                f" (line {error.lineno}, column {error.colno})"
                if isinstance(error, json.JSONDecodeError)
                else ""
            )
            raise ApiError(400, "bad_json", f"body: not valid JSON{where}") from None

    def tagged(body: dict[str, Any], tool: Tool, status: int = 200) -> JSONResponse:
        return JSONResponse(body, status_code=status, headers={"ETag": etag(tool)})

    from kiln.api import keys, secrets, undelete

    for module in (keys, secrets, undelete):
        app.include_router(module.router)

    if parts.bundles is not None:
        from kiln.bundles.api import mount_bundle_routes

        mount_bundle_routes(
            app,
            parts.bundles,
            require_author=lambda request: parts.access.require(request, "author", ""),
        )

    @app.get("/api/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "version": kiln.__version__}

    @app.get("/api/tools")
    async def list_tools(request: Request, include_deleted: bool = False) -> dict[str, Any]:
        await require(request, "author" if include_deleted else "call")
        tools = await call(store.list_tools, include_deleted=include_deleted)
        tools.sort(key=lambda t: t.name)
        return {"tools": [tool_json(t) for t in tools]}

    @app.post("/api/tools", status_code=201)
    async def create_tool(request: Request) -> JSONResponse:
        who = await require(request)
        draft = check_draft(await json_body(request))
        await call(check_parses, draft.language, draft.code, node)
        tool = await call(store.create, draft, actor=who.label)
        audit(who, "create", tool)
        response = tagged(tool_json(tool), tool, 201)
        response.headers["Location"] = f"/api/tools/{tool.name}"
        return response

    @app.get("/api/tools/{ref}")
    async def get_tool(ref: str, request: Request) -> JSONResponse:
        await require(request)
        tool = await call(store.get, ref)
        code = await call(store.code, tool.head)
        body = tool_json(tool, code=code)
        body["files"] = encode_files(await call(store.files, tool.head))
        if parts.bundles is not None:
            body["bundle"] = await call(parts.bundles.summary, tool.head.bundle_id)
        return tagged(body, tool)

    @app.put("/api/tools/{ref}")
    async def replace_tool(ref: str, request: Request) -> JSONResponse:
        who = await require(request)
        expected = parse_if_match(request.headers.get("if-match"))
        payload = await json_body(request)
        draft = check_draft(payload)
        await call(check_parses, draft.language, draft.code, node)
        tool = await call(store.update, ref, draft, expected_revision=expected, actor=who.label)
        audit(who, "update", tool)
        return tagged(tool_json(tool), tool)

    @app.get("/api/tools/{ref}/revisions")
    async def list_revisions(ref: str, request: Request) -> dict[str, Any]:
        await require(request)
        revisions = await call(store.revisions, ref)
        return {"revisions": [revision_json(r) for r in revisions]}

    @app.get("/api/tools/{ref}/revisions/{number}")
    async def get_revision(ref: str, number: int, request: Request) -> dict[str, Any]:
        await require(request)
        revision = await call(store.revision, ref, number)
        return revision_json(revision, code=await call(store.code, revision))

    @app.post("/api/tools/{ref}/revisions/{number}/restore")
    async def restore_revision(ref: str, number: int, request: Request) -> JSONResponse:
        who = await require(request)
        expected = parse_if_match(request.headers.get("if-match"))
        tool = await call(store.restore, ref, number, expected_revision=expected, actor=who.label)
        audit(who, "restore", tool)
        return tagged(tool_json(tool), tool)

    async def switch(ref: str, request: Request, enabled: bool) -> JSONResponse:
        who = await require(request)
        tool = await call(store.set_enabled, ref, enabled, actor=who.label)
        audit(who, "enable" if enabled else "disable", tool)
        return tagged(tool_json(tool), tool)

    @app.post("/api/tools/{ref}/enable")
    async def enable_tool(ref: str, request: Request) -> JSONResponse:
        return await switch(ref, request, True)

    @app.post("/api/tools/{ref}/disable")
    async def disable_tool(ref: str, request: Request) -> JSONResponse:
        return await switch(ref, request, False)

    @app.post("/api/tools/{ref}/rename")
    async def rename_tool(ref: str, request: Request) -> JSONResponse:
        who = await require(request)
        payload = await json_body(request)
        new_name = payload.get("name") if isinstance(payload, dict) else None
        if not isinstance(new_name, str):
            raise ApiError(422, "invalid_tool", 'name: required; send {"name": "<new name>"}')
        check_name(new_name)
        tool = await call(store.rename, ref, new_name, actor=who.label)
        audit(who, "rename", tool)
        response = tagged(tool_json(tool), tool)
        response.headers["Location"] = f"/api/tools/{tool.name}"
        return response

    @app.delete("/api/tools/{ref}")
    async def delete_tool(ref: str, request: Request) -> JSONResponse:
        who = await require(request)
        tool = await call(store.delete, ref, actor=who.label)
        audit(who, "delete", tool)
        return JSONResponse(tool_json(tool))

    @app.post("/api/tools/{ref}/run")
    async def run_tool(ref: str, request: Request) -> dict[str, Any]:
        """Run a tool as an author test run: stdout, stderr, exit and timing, separately."""
        await require(request)
        payload = await json_body(request)
        arguments = payload.get("arguments", {}) if isinstance(payload, dict) else None
        if not isinstance(arguments, dict):
            raise ApiError(422, "invalid_arguments", "arguments: must be a JSON object")
        tool = await call(store.get, ref)
        problems = validators.problems(tool.head.input_schema, arguments)
        if problems:
            raise ApiError(422, "invalid_arguments", summarize(tool.name, problems))
        outcome, result = await parts.backend.execute(
            tool, arguments, time_left_s=time_left_s(request, settings)
        )
        mcp_result = ToolCaller(parts.backend).shape(tool_view(tool), outcome, LATEST_LEGACY)
        if result is None:
            return {
                "ok": False,
                "error": outcome.text,
                "text": outcome.text,
                "mcp_result": mcp_result,
            }
        return {
            "ok": not result.failed,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration_ms": round(result.duration_s * 1000, 1),
            "applied_timeout_s": result.applied_timeout_s,
            "stdout_truncated": result.stdout_truncated,
            "stderr_truncated": result.stderr_truncated,
            "text": outcome.text,
            "mcp_result": mcp_result,  # the CallToolResult an MCP client would get
        }
