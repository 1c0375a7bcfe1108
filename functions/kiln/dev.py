"""`kiln dev`: the whole stack on a laptop, one command.

An embedded moto server (in this process, on a free loopback port) stands in for DynamoDB
and S3, unless AWS_ENDPOINT_URL or `--aws` points elsewhere. Moto keeps everything in
memory, so the local stack mirrors the table and bucket into `--state-dir` (after every
change, within a second, and at shutdown) and loads them back at start: tools created
through the API survive a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import fcntl
import hashlib
import json
import logging
import secrets
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln import stack
from kiln.authoring import AuthoringService, FolderTarget
from kiln.aws import AwsClients, ensure_resources, make_clients
from kiln.catalog.files import FolderError, tool_folders
from kiln.catalog.reload import load_folders
from kiln.locate import (
    forget_server,
    private_dir,
    record_server,
    running_server,
    write_private,
)
from kiln.settings import LocalSettings, Settings, set_local_aws_defaults
from kiln.startup import PortBusyError, bind_port, node_warning

log = logging.getLogger("kiln.dev")

WRITE_OPERATIONS = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "PutObject",
        "DeleteObject",
        "DeleteObjects",
        "CopyObject",
        "CompleteMultipartUpload",
        "PutParameter",
        "DeleteParameter",
        "DeleteParameters",
    }
)
DEFAULT_EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tools"


_SERIALISED = threading.RLock()


def _serialise_dynamodb_writes() -> None:
    """Make moto's DynamoDB writes atomic with respect to each other, as DynamoDB's are.

    moto's server answers on many threads and checks a write's conditions without a lock,
    so two racing conditional writes could both pass. DynamoDB never lets that happen, and
    Kiln's guarantees (unique names, If-Match) rest on it: the emulator must not either.
    """
    from moto.dynamodb.models import DynamoDBBackend

    for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
        method = getattr(DynamoDBBackend, name)
        if getattr(method, "_kiln_serialised", False):
            continue

        def locked(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            with _SERIALISED:
                return _method(*args, **kwargs)

        locked._kiln_serialised = True  # type: ignore[attr-defined]
        setattr(DynamoDBBackend, name, locked)


@contextmanager
def embedded_moto() -> Iterator[str]:
    """A moto server on a free loopback port for as long as the block runs."""
    from moto.server import ThreadedMotoServer

    _serialise_dynamodb_writes()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def author_key(state_dir: Path, given: str | None) -> str:
    """The given key, else the one kept in the state directory, else a new one kept there."""
    if given:
        return given
    path = state_dir / "author_key"
    if path.is_file():
        return path.read_text("utf-8").strip()
    key = "kiln_author_" + secrets.token_urlsafe(24)
    state_dir.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(key + "\n", "utf-8")
    return key


@dataclass
class StateMirror:
    """Copies the local table and bucket to disk, and back at start.

    It saves only after a write went through these clients (a botocore hook marks the
    state dirty), so an idle or read-only server does no scanning at all.
    """

    clients: AwsClients
    table: str
    bucket: str
    state_dir: Path

    def __post_init__(self) -> None:
        self._fingerprint = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._dirty = threading.Event()

    def _mark_dirty(self, model: Any, **_: Any) -> None:
        if model.name in WRITE_OPERATIONS:
            self._dirty.set()

    @property
    def _table_file(self) -> Path:
        return self.state_dir / "dynamodb.json"

    @property
    def _objects_dir(self) -> Path:
        return self.state_dir / "s3"

    def restore(self) -> int:
        """Load saved items and objects into the (empty) local stack; returns items loaded."""
        if not self._table_file.is_file():
            return 0
        items = json.loads(self._table_file.read_text("utf-8"))
        for item in items:
            self.clients.dynamodb.put_item(TableName=self.table, Item=item)
        index_file = self._objects_dir / "index.json"
        index = json.loads(index_file.read_text("utf-8")) if index_file.is_file() else {}
        for key, name in index.items():
            body = (self._objects_dir / name).read_bytes()
            self.clients.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        parameters = self._restore_parameters()
        self._fingerprint = self._snapshot_fingerprint(items, index, parameters)
        return len(items)

    def save(self) -> bool:
        """Write the current state if it changed; True when something was written."""
        with self._lock:
            items = self._scan()
            # A file is saved under a name made of its key and its ETag, so an object
            # overwritten under the same key is saved again (and its old copy cleaned up).
            index = {
                key: hashlib.sha256(f"{key}\0{etag}".encode()).hexdigest()
                for key, etag in self._objects()
            }
            parameters = self._parameters()
            fingerprint = self._snapshot_fingerprint(items, index, parameters)
            if fingerprint == self._fingerprint:
                return False
            # Secrets live in the emulator's SSM: saved too, readable by this user only.
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(self.state_dir / "ssm.json", json.dumps(parameters))
            self._objects_dir.mkdir(parents=True, exist_ok=True)
            for key, name in index.items():
                path = self._objects_dir / name
                if not path.exists():
                    body = self.clients.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                    _atomic_write(path, body)
            _atomic_write(self._objects_dir / "index.json", json.dumps(index).encode())
            _atomic_write(self._table_file, json.dumps(items).encode())
            for stale in self._objects_dir.iterdir():
                if stale.name != "index.json" and stale.name not in index.values():
                    stale.unlink(missing_ok=True)
            self._fingerprint = fingerprint
            return True

    def start(self, interval_s: float = 1.0) -> None:
        self.clients.dynamodb.meta.events.register("after-call.dynamodb", self._mark_dirty)
        self.clients.s3.meta.events.register("after-call.s3", self._mark_dirty)
        self.clients.session.events.register("after-call.ssm", self._mark_dirty)

        def loop() -> None:
            while not self._stop.wait(interval_s):
                if not self._dirty.is_set():
                    continue
                self._dirty.clear()
                try:
                    self.save()
                except Exception:  # a failed save is retried on the next tick
                    self._dirty.set()
                    log.exception("saving local state failed")

        self._thread = threading.Thread(target=loop, name="kiln-state", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.save()

    def _scan(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page in self.clients.dynamodb.get_paginator("scan").paginate(TableName=self.table):
            items.extend(page["Items"])
        items.sort(key=lambda item: (item["pk"]["S"], item["sk"]["S"]))
        return items

    def _objects(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for page in self.clients.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            found.extend((obj["Key"], obj["ETag"]) for obj in page.get("Contents", []))
        return found

    @property
    def _ssm(self) -> Any:
        endpoint = self.clients.dynamodb.meta.endpoint_url
        return self.clients.session.client("ssm", endpoint_url=endpoint)

    def _parameters(self) -> list[dict[str, str]]:
        found: list[dict[str, str]] = []
        pages = self._ssm.get_paginator("get_parameters_by_path").paginate(
            Path="/", Recursive=True, WithDecryption=True
        )
        for page in pages:
            found.extend(
                {"Name": p["Name"], "Value": p["Value"], "Type": p["Type"]}
                for p in page.get("Parameters", [])
            )
        return sorted(found, key=lambda p: p["Name"])

    def _restore_parameters(self) -> list[dict[str, str]]:
        saved = self.state_dir / "ssm.json"
        if not saved.is_file():
            return []
        parameters: list[dict[str, str]] = json.loads(saved.read_text("utf-8"))
        for parameter in parameters:
            self._ssm.put_parameter(**parameter, Overwrite=True)
        return parameters

    @staticmethod
    def _snapshot_fingerprint(
        items: list[dict[str, Any]], index: dict[str, str], parameters: list[dict[str, str]]
    ) -> str:
        blob = json.dumps([items, sorted(index.items()), parameters], sort_keys=True).encode()
        return base64.b16encode(hashlib.sha256(blob).digest()).decode()


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


class ShutdownHook:
    """ASGI wrapper that runs `on_shutdown` during the server's graceful shutdown.

    uvicorn re-raises SIGTERM/SIGINT once it has shut down, so code after `Server.run()`
    may never run; the lifespan shutdown is the last sure moment to save local state.
    """

    def __init__(
        self,
        app: Any,
        on_shutdown: Callable[[], None],
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.on_shutdown = on_shutdown
        self.before = before  # async work that must finish before the state is saved

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.before is not None:
                    await self.before()
                self.on_shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


class StateInUseError(RuntimeError):
    """Another kiln process owns the state directory's emulator."""


@contextmanager
def local_stack(
    args: argparse.Namespace, settings: Settings, *, share: bool = False
) -> Iterator[tuple[Settings, AwsClients, Callable[[], None]]]:
    """The AWS side of a local run: the emulator with mirrored state, or the environment's AWS.

    One process at a time owns a state directory (a file lock): two emulators loading and
    saving the same files would undo each other's writes. With `share`, a second process
    (`kiln stdio` beside `kiln dev`) uses the owner's emulator instead of starting its own.
    """
    state_dir = Path(args.state_dir)
    if args.aws or settings.endpoint_url:
        clients = make_clients(
            endpoint_url=settings.endpoint_url, region=settings.region, profile=settings.profile
        )
        ensure_resources(clients, table=settings.table, bucket=settings.bucket)
        yield settings, clients, lambda: None
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    endpoint_file = state_dir / "endpoint"
    with (state_dir / "lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not share or not endpoint_file.is_file():
                raise StateInUseError(
                    f"{state_dir} is in use by another kiln process (kiln dev?); stop it, "
                    "or give this one another --state-dir"
                ) from None
            endpoint = endpoint_file.read_text("utf-8").strip()
            region = settings.region or "us-east-1"
            clients = make_clients(endpoint_url=endpoint, region=region)
            yield settings.with_(endpoint_url=endpoint, region=region), clients, lambda: None
            return
        with embedded_moto() as endpoint:
            settings = settings.with_(endpoint_url=endpoint, region=settings.region or "us-east-1")
            clients = make_clients(endpoint_url=endpoint, region=settings.region)
            ensure_resources(clients, table=settings.table, bucket=settings.bucket)
            mirror = StateMirror(clients, settings.table, settings.bucket, state_dir / "aws")
            mirror.restore()
            mirror.start()
            endpoint_file.write_text(endpoint, "utf-8")
            try:
                yield settings, clients, mirror.stop
            finally:
                endpoint_file.unlink(missing_ok=True)
                mirror.stop()


def load_tool_folders(authoring: AuthoringService, args: argparse.Namespace) -> list[str]:
    """Load the tool folders that changed on disk since the last start (see catalog.reload)."""
    roots = [] if args.no_examples or not DEFAULT_EXAMPLES.is_dir() else [DEFAULT_EXAMPLES]
    roots += [Path(d) for d in args.tools]
    folders = [folder for root in roots for folder in tool_folders(root)]
    return load_folders(FolderTarget(authoring), folders, Path(args.state_dir) / "loaded.json")


def _local(args: argparse.Namespace) -> LocalSettings:
    """The local settings, with `args.state_dir` set to the directory they choose."""
    local = LocalSettings.from_env().with_state_dir(args.state_dir)
    args.state_dir = str(local.state_dir)
    return local


def _announce(url: str, key: str, local: LocalSettings, settings: Settings) -> None:
    print(f"Kiln is serving MCP at {url}/mcp", flush=True)
    print(f"REST API at {url}/api  (author key: {key})", flush=True)
    print(f"Studio at {url}/studio/  (sign in with the author key)", flush=True)
    print(f"State in {local.state_dir} (from {local.state_dir_source})", flush=True)
    warning = node_warning(settings.node_binary)
    if warning:
        print(f"kiln dev: {warning}", file=sys.stderr, flush=True)


def run_dev(args: argparse.Namespace) -> int:
    """Serve Kiln on uvicorn over the local stack until interrupted."""
    import uvicorn

    from kiln.app import create_app

    local = _local(args)
    try:
        sock = bind_port(args.host, args.port, local.state_dir)
    except PortBusyError as error:
        print(f"kiln dev: {error}", file=sys.stderr)
        return 1
    _configure_logging(logging.INFO)
    if not args.aws:
        set_local_aws_defaults()  # the emulator takes any credentials; boto3 wants some
    base = Settings.from_env()
    stack.prepare_process()
    private_dir(local.state_dir)  # keys and secrets live here: this user's eyes only
    key = author_key(local.state_dir, args.author_key or local.author_key or base.author_key)
    settings = base.with_(author_key=key, bind_host=args.host)
    try:
        with sock, local_stack(args, settings) as (settings, clients, save_state):
            parts = stack.build_kiln(settings, clients=clients)
            # Builds a previous run left; on the embedded emulator no one else builds.
            parts.bundles.resume(orphans=not (args.aws or base.endpoint_url))
            for line in load_tool_folders(parts.authoring, args):
                if line.startswith("skipped"):
                    print(f"kiln dev: {line}", file=sys.stderr, flush=True)
                else:
                    log.info("%s", line)
            app = create_app(parts)
            url = f"http://{_url_host(args.host)}:{sock.getsockname()[1]}"
            _announce(url, key, local, settings)
            # Task runs stop first (their process trees killed, their tasks marked failed).
            hook = ShutdownHook(app, save_state, before=parts.stop_tasks)
            record_server(local.state_dir, url)
            try:
                uvicorn.Server(_server_config(hook, args, settings)).run(sockets=[sock])
            finally:
                forget_server(local.state_dir)
    except (FolderError, StateInUseError) as error:
        print(f"kiln dev: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down cleanly
        print("kiln dev: stopped", file=sys.stderr)
    return 0


def _server_config(app: Any, args: argparse.Namespace, settings: Settings) -> Any:
    """uvicorn's config with Kiln's connection limits (see kiln.connections)."""
    import uvicorn

    from kiln.connections import ConnectionLimits, hardened_protocol, limit_log_rate

    limits = ConnectionLimits(
        idle_timeout_s=settings.idle_timeout_s,
        request_timeout_s=settings.request_timeout_s,
        max_connections=settings.max_connections,
    )
    limit_log_rate()
    return uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        lifespan="on",
        http=hardened_protocol(limits),
        timeout_keep_alive=max(1, round(limits.idle_timeout_s)),
        h11_max_incomplete_event_size=limits.max_header_bytes,
    )


def run_stdio(args: argparse.Namespace) -> int:
    """Serve MCP over stdin/stdout against the configured (or local) catalog."""
    import asyncio

    from kiln.protocol.backend import CallContext
    from kiln.protocol.stdio import serve_stdio

    if args.client_config:
        print(json.dumps(client_config(_local(args).state_dir), indent=2))
        return 0
    if args.url:
        return run_bridge(args)
    local = _local(args)
    _configure_logging(logging.WARNING)
    if not args.aws:
        set_local_aws_defaults()  # the emulator takes any credentials; boto3 wants some
    settings = Settings.from_env()
    stack.prepare_process()

    async def serve(endpoint: Any, budget_s: float) -> None:
        reader, writer = await _stdio_streams()
        await serve_stdio(endpoint, reader, writer, CallContext(time_left_s=budget_s))

    try:
        serving = _serving(args, local, settings, running_server(local.state_dir))
        with local_stack(args, settings, share=True) as (settings, clients, _):
            parts = stack.build_kiln(settings, clients=clients)
            for line in load_tool_folders(parts.authoring, args):
                print(f"kiln stdio: {line}", file=sys.stderr)
            print(f"kiln stdio: {serving}", file=sys.stderr)
            asyncio.run(serve(parts.endpoint, settings.local_time_budget_s))
    except (FolderError, StateInUseError) as error:
        print(f"kiln stdio: {error}", file=sys.stderr)
        return 1
    return 0


async def _stdio_streams() -> tuple[asyncio.StreamReader, Any]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout
        )
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
    except ValueError:  # stdout is a regular file, not a pipe: plain blocking writes
        return reader, _FileWriter(sys.stdout.buffer)


def _serving(
    args: argparse.Namespace, local: LocalSettings, settings: Settings, shared: str | None
) -> str:
    """The stderr line that says which catalog this `kiln stdio` serves."""
    if args.aws or settings.endpoint_url:
        where = settings.endpoint_url or "the AWS account of the environment"
        return f"serving the catalog in table {settings.table}, bucket {settings.bucket} at {where}"
    catalog = f"the local catalog in {local.state_dir} (from {local.state_dir_source})"
    if shared is not None:
        return f"serving {catalog}, shared with the kiln dev at {shared}"
    return f"serving {catalog}; no kiln dev is running, so this process holds it"


def client_config(state_dir: Path) -> dict[str, Any]:
    """The `mcpServers` entry that starts this `kiln stdio` from a desktop client, as pasted."""
    kiln = Path(sys.executable).parent / "kiln"
    if kiln.is_file():
        command, args = str(kiln), ["stdio"]
    else:
        command, args = sys.executable, ["-m", "kiln.cli", "stdio"]
    args += ["--state-dir", str(state_dir.resolve())]
    return {"mcpServers": {"kiln": {"command": command, "args": args}}}


def run_bridge(args: argparse.Namespace) -> int:
    """`kiln stdio --url`: relay stdin/stdout to a server's /mcp."""
    from kiln.bridge import Bridge, serve_bridge

    local = LocalSettings.from_env()
    try:
        bridge = Bridge(args.url, args.key or local.author_key)
    except ValueError as error:
        print(f"kiln stdio: {error}", file=sys.stderr)
        return 2
    print(f"kiln stdio: serving the catalog of {bridge.url} (bridged over HTTP)", file=sys.stderr)

    async def serve() -> None:
        reader, writer = await _stdio_streams()
        await serve_bridge(bridge, reader, writer)

    asyncio.run(serve())
    return 0


class _FileWriter:
    """The two StreamWriter methods `serve_stdio` uses, over a plain binary file."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        self._stream.write(data)

    async def drain(self) -> None:
        self._stream.flush()


def _configure_logging(level: int) -> None:
    """Kiln's own lines on stderr; the emulator's per-request chatter only when it matters."""
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("werkzeug", "botocore", "moto"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
