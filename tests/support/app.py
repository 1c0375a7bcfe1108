"""A real Kiln app served by uvicorn on a loopback port (in this process), and the same app
with the conformance fixture tools pushed, for MCP tests.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from kiln.api.apps import create_app, create_public_app
from kiln.authoring import AuthoringService, FolderTarget
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.files import push, tool_folders
from kiln.catalog.store import CatalogStore
from kiln.settings import Settings
from kiln.stack import Kiln, build_kiln, prepare_process

from .aws import AwsStack

AUTHOR_KEY = "test-author-key-0123456789"


def free_port() -> int:
    """A port that was free a moment ago: only for what must not answer (a dead address) or
    a program that cannot bind port 0 itself. A server this suite starts binds its own
    (`kiln dev --port 0`, `bound_socket`): between this answer and a later bind, another
    process may take the port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_socket() -> socket.socket:
    """A socket bound to a free loopback port, for a server to listen on: no race for it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class RunningKiln:
    url: str
    kiln: Kiln
    http: httpx.Client

    def api(
        self, method: str, path: str, *, key: str | None = AUTHOR_KEY, **kw: Any
    ) -> httpx.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        return self.http.request(method, self.url + path, headers=headers, **kw)

    def mcp(
        self, body: Any, *, headers: dict[str, str] | None = None, path: str = "/mcp"
    ) -> httpx.Response:
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        return self.http.post(self.url + path, json=body, headers={**base, **(headers or {})})


def serve(settings: Settings, aws: AwsStack, *, public_only: bool = False) -> Iterator[RunningKiln]:
    """The full app (kiln dev's), or with `public_only` the public Lambda function's."""
    prepare_process()  # what every entry point does: redacted logs, a non-dumpable server
    kiln = build_kiln(settings, clients=aws.clients)
    app = create_public_app(kiln) if public_only else create_app(kiln)
    sock = bound_socket()
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        with httpx.Client(timeout=60) as http:
            yield RunningKiln(f"http://127.0.0.1:{port}", kiln, http)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        kiln.close_runner()  # its warm-ups and standbys too


ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"
META_PV = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def meta(version: str = MODERN) -> dict[str, Any]:
    return {META_PV: version, META_CAPS: {}, "io.modelcontextprotocol/clientInfo": {"name": "t"}}


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def write_tool(root: Path, name: str, manifest: dict[str, Any], code: str) -> Path:
    """A tool folder as an author writes one: tool.json and main.py."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({"name": name, **manifest}))
    (folder / "main.py").write_text(code)
    return folder


def start_kiln(
    moto_endpoint: str, tmp: Path, *, extra: Sequence[Path] = (), **overrides: Any
) -> Iterator[McpServer]:
    """A fresh table and bucket, the conformance fixtures and add_vat pushed, the app served."""
    suffix = uuid.uuid4().hex[:10]
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    stack = AwsStack(moto_endpoint, clients, f"kiln-mcp-{suffix}", f"kiln-mcp-{suffix}")
    ensure_resources(clients, table=stack.table, bucket=stack.bucket)
    store = CatalogStore(clients.dynamodb, clients.s3, table=stack.table, bucket=stack.bucket)
    folders = tool_folders(ROOT / "examples" / "conformance")
    folders.append(ROOT / "examples" / "tools" / "add_vat")
    folders.extend(extra)
    push(FolderTarget(AuthoringService(store)), folders)
    settings = Settings(
        bundle_cache_dir=tmp,
        table=stack.table,
        bucket=stack.bucket,
        endpoint_url=moto_endpoint,
        region="us-east-1",
        author_key=AUTHOR_KEY,
        bind_host="127.0.0.1",
        **{"local_time_budget_s": 30.0, **overrides},
    )
    for running in serve(settings, stack):
        yield McpServer(running)


@dataclass
class McpServer:
    running: RunningKiln

    @property
    def url(self) -> str:
        return self.running.url + "/mcp"

    @property
    def http(self) -> httpx.Client:
        return self.running.http

    def post(
        self,
        message: Any,
        headers: dict[str, str] | None = None,
        *,
        raw: bytes | None = None,
        path: str = "/mcp",
    ) -> httpx.Response:
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        merged = {**base, **(headers or {})}
        url = self.running.url + path
        if raw is not None:
            return self.http.post(url, content=raw, headers=merged)
        return self.http.post(url, json=message, headers=merged)

    def legacy(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        version: str | None = "2025-11-25",
        rid: Any = 1,
    ) -> httpx.Response:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        return self.post(message, {"MCP-Protocol-Version": version} if version else {})

    def modern(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        rid: Any = 1,
        headers: dict[str, str] | None = None,
        name: str | None = None,
        path: str = "/mcp",
    ) -> httpx.Response:
        """A 2026-07-28 request (to `path`: a view's is `/mcp/v/<name>`)."""
        params = dict(params or {})
        params.setdefault("_meta", meta())
        hdrs = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            hdrs["Mcp-Name"] = name
        elif method == "tools/call" and isinstance(params.get("name"), str):
            hdrs["Mcp-Name"] = params["name"]
        hdrs.update(headers or {})
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return self.post(message, hdrs, path=path)


def settings_for(stack: AwsStack, tmp: Path, **overrides: Any) -> Settings:
    """The app's settings over `stack`: the tests' author key, loopback, a ledger digest key."""
    return Settings(
        **{"table": stack.table, "bucket": stack.bucket, "endpoint_url": stack.endpoint_url,
           "region": "us-east-1", "author_key": AUTHOR_KEY, "bundle_cache_dir": tmp,
           "bind_host": "127.0.0.1", "ledger_digest_key": "digest", **overrides}
    )  # fmt: skip
