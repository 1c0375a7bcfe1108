"""`kiln dev`: the whole stack on a laptop, one command.

The local emulator (kiln.local.emulator: moto in a child process on a loopback port, signed
requests only) stands in for DynamoDB and S3, unless AWS_ENDPOINT_URL or `--aws` points
elsewhere. It journals every write to `--state-dir` before answering it, so whatever was
acknowledged survives a restart, a crash or `kill -9`.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from kiln import stack
from kiln.access.view_store import ViewStore
from kiln.accounting.pending import PendingLedger, stored_in
from kiln.authoring import AuthoringService, FolderTarget
from kiln.aws.clients import AwsClients, ensure_resources, make_clients
from kiln.catalog.files import FolderError, tool_folders
from kiln.local.emulator import Endpoint, run_emulator, shared_endpoint
from kiln.local.emulator.changes import ChangeMark
from kiln.local.emulator.privacy import secure_tree, write_private
from kiln.local.preflight import PortBusyError, bind_port, node_warning
from kiln.local.reload import load_folders
from kiln.local.state import forget_server, private_dir, record_server, running_server
from kiln.runner import afterwards
from kiln.settings import LocalSettings, Settings, set_local_aws_defaults

log = logging.getLogger("kiln.local.dev")

LOCAL_LEDGER_SHARDS = 1  # the emulator has no per-partition write limit to spread over
DEFAULT_EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tools"


def author_key(state_dir: Path, given: str | None) -> str:
    """The given key, else the one kept in the state directory, else a new one kept there."""
    if given:
        return given
    path = state_dir / "author_key"
    if path.is_file():
        return path.read_text("utf-8").strip()
    key = "kiln_author_" + secrets.token_urlsafe(24)
    secure_tree(state_dir)
    write_private(path, (key + "\n").encode())
    return key


def import_mirror(clients: AwsClients, table: str, bucket: str, aws_dir: Path) -> int:
    """Load the files an older `kiln dev` mirrored its state into, once; returns items loaded.

    Older versions copied the table and bucket to `aws/dynamodb.json` and `aws/s3/` about
    a second after each write. The emulator now journals every write itself, so the old
    files are imported on the first start and then removed.
    """
    table_file, objects_dir = aws_dir / "dynamodb.json", aws_dir / "s3"
    if not table_file.is_file():
        return 0
    items = json.loads(table_file.read_text("utf-8"))
    for item in items:
        clients.dynamodb.put_item(TableName=table, Item=item)
    index_file = objects_dir / "index.json"
    index = json.loads(index_file.read_text("utf-8")) if index_file.is_file() else {}
    for key, name in index.items():
        body = (objects_dir / name).read_bytes()
        clients.s3.put_object(Bucket=bucket, Key=key, Body=body)
    for name in index.values():
        (objects_dir / name).unlink(missing_ok=True)
    index_file.unlink(missing_ok=True)
    table_file.unlink()
    return len(items)


def _atomic_write(path: Path, data: bytes) -> None:
    write_private(path, data)


class StateInUseError(RuntimeError):
    """Another kiln process owns the state directory's emulator."""


@contextmanager
def local_stack(
    args: argparse.Namespace, settings: Settings, *, share: bool = False
) -> Iterator[tuple[Settings, AwsClients]]:
    """The AWS side of a local run: the local emulator, or the environment's AWS.

    One process at a time owns a state directory (a file lock) and runs its emulator as a
    child process. With `share`, a second process (`kiln stdio` beside `kiln dev`) uses
    the owner's emulator, whose address and key it reads from the private state directory.
    """
    state_dir = Path(args.state_dir)
    if args.aws or settings.endpoint_url:
        clients = make_clients(
            endpoint_url=settings.endpoint_url, region=settings.region, profile=settings.profile
        )
        ensure_resources(clients, table=settings.table, bucket=settings.bucket)
        yield settings, clients
        return
    secure_tree(state_dir)
    lock_fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(lock_fd, "r+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            shared = shared_endpoint(state_dir / "aws") if share else None
            if shared is None:
                raise StateInUseError(
                    f"{state_dir} is in use by another kiln process (kiln dev?); stop it, "
                    "or give this one another --state-dir"
                ) from None
            yield _emulator_stack(settings, shared)
            return
        with run_emulator(state_dir / "aws") as endpoint:
            settings, clients = _emulator_stack(settings, endpoint)
            ensure_resources(clients, table=settings.table, bucket=settings.bucket)
            import_mirror(clients, settings.table, settings.bucket, state_dir / "aws")
            yield settings, clients


def _emulator_stack(settings: Settings, endpoint: Endpoint) -> tuple[Settings, AwsClients]:
    # The emulator has no per-partition write limit: one ledger shard a day is read at once.
    shards = settings.ledger_shards or LOCAL_LEDGER_SHARDS
    settings = settings.with_(
        endpoint_url=endpoint.url, region=endpoint.region, ledger_shards=shards
    )
    keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
    clients = make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)
    if endpoint.changes is not None:
        clients = replace(clients, catalog_changes=ChangeMark(endpoint.changes))
    return settings, clients


def load_tool_folders(
    authoring: AuthoringService, args: argparse.Namespace, views: ViewStore | None = None
) -> list[str]:
    """Load the tool folders that changed on disk since the last start (see catalog.reload),
    then the view files beside them; one line per change or skipped folder."""
    roots = [] if args.no_examples or not DEFAULT_EXAMPLES.is_dir() else [DEFAULT_EXAMPLES]
    roots += [Path(d) for d in args.tools]
    folders = [folder for root in roots for folder in tool_folders(root)]
    record = Path(args.state_dir) / "loaded.json"
    lines = load_folders(FolderTarget(authoring), folders, record)
    if views is not None:  # view files beside the folders, after the tools they name
        from kiln.access.view_files import load_view_files

        loaded = json.loads(record.read_text("utf-8")) if record.is_file() else {}
        pushed, view_digests = load_view_files(views, roots, loaded)
        lines += [f"{r.action} view {r.name}" for r in pushed if r.action != "unchanged"]
        _atomic_write(record, json.dumps({**loaded, **view_digests}, indent=2).encode())
    return lines


def _local(args: argparse.Namespace) -> LocalSettings:
    """The local settings, with `args.state_dir` set to the directory they choose."""
    local = LocalSettings.from_env().with_state_dir(args.state_dir)
    args.state_dir = str(local.state_dir)
    return local


def _start(args: argparse.Namespace, log_level: int) -> Settings:
    """What `kiln dev` and `kiln stdio` do first: logging, AWS defaults for the emulator,
    process-wide protection, and the settings `kiln.cli.main.main` read (or read them here)."""
    _configure_logging(log_level)
    if not args.aws:
        set_local_aws_defaults()  # a region for boto3; the emulator's own key is passed in
    stack.prepare_process()
    settings: Settings | None = getattr(args, "settings", None)
    return settings if settings is not None else Settings.from_env()


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
    from kiln.api.apps import create_app
    from kiln.local.connections import DeepQueueServer

    local = _local(args)
    try:
        sock = bind_port(args.host, args.port, local.state_dir)
    except PortBusyError as error:
        print(f"kiln dev: {error}", file=sys.stderr)
        return 1
    base = _start(args, logging.INFO)
    private_dir(local.state_dir)  # keys and secrets live here: this user's eyes only
    key = author_key(local.state_dir, args.author_key or local.author_key or base.author_key)
    settings = base.with_(
        author_key=key,
        bind_host=args.host,
        bind_port=sock.getsockname()[1],
        build_cache_dir=base.build_cache_dir or local.state_dir / "build-cache",
        vault_key_file=base.vault_key_file or local.state_dir / "vault.key",
    )
    try:
        with sock, local_stack(args, settings) as (settings, clients):
            kiln = stack.build_kiln(settings, clients=clients)
            embedded = not (args.aws or base.endpoint_url)
            # Builds a previous run left; on the embedded emulator no one else builds.
            kiln.bundles.resume(orphans=embedded)
            pending = hold_ledger_locally(kiln, clients, local.state_dir) if embedded else None
            for line in load_tool_folders(kiln.authoring, args, kiln.views.store):
                if line.startswith("skipped"):
                    print(f"kiln dev: {line}", file=sys.stderr, flush=True)
                else:
                    log.info("%s", line)
            app = create_app(kiln)
            warming = kiln.warm_recent()  # no cold first call for the tools used last
            if warming:
                log.info("preparing the next run of %s", ", ".join(warming))
            url = f"http://{_url_host(args.host)}:{sock.getsockname()[1]}"
            _announce(url, key, local, settings)
            # The app's lifespan stops task runs and lets the runner's standbys go (uvicorn
            # re-raises SIGTERM afterwards: nothing after `run` would remove their directories).
            record_server(local.state_dir, url)
            try:
                DeepQueueServer(_server_config(app, args, settings)).run(sockets=[sock])
            finally:
                forget_server(local.state_dir)
                if pending is not None:  # before the emulator stops; what is left is kept
                    pending.close()
    except (FolderError, StateInUseError) as error:
        print(f"kiln dev: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down cleanly
        print("kiln dev: stopped", file=sys.stderr)
    return 0


def hold_ledger_locally(
    kiln: stack.Kiln, clients: AwsClients, state_dir: Path
) -> PendingLedger | None:
    """A call's ledger entry on disk before its answer, in the store right after
    (kiln.accounting.pending); entries a killed run left are written first."""
    ledger = kiln.gate.ledger
    if ledger is None:
        return None
    present = stored_in(clients.dynamodb, kiln.settings.table)
    pending = PendingLedger(
        state_dir / "ledger-pending", ledger.write, present, later=afterwards.later
    )
    pending.replay()
    pending.start()
    kiln.gate.hold_locally(pending)
    return pending


def _server_config(app: Any, args: argparse.Namespace, settings: Settings) -> Any:
    """uvicorn's config with Kiln's connection limits (see kiln.local.connections)."""
    import uvicorn

    from kiln.local.connections import (
        ConnectionLimits,
        accept_burst,
        hardened_protocol,
        limit_log_rate,
    )

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
        # asyncio accepts up to `backlog` sockets per wake-up before any connection is set up;
        # a small one lets the connection cap evict idle ones before descriptors run out. The
        # kernel's accept queue is made long once serving (DeepQueueServer).
        backlog=accept_burst(limits),
        timeout_keep_alive=max(1, round(limits.idle_timeout_s)),
        h11_max_incomplete_event_size=limits.max_header_bytes,
    )


def run_stdio(args: argparse.Namespace) -> int:
    """Serve MCP over stdin/stdout against the local (or configured) catalog, or bridge to a
    server's /mcp with --url; says on stderr which catalog it serves."""
    from kiln.local.stdio import serve_stdio
    from kiln.protocol.backend import CallContext

    if args.client_config:
        if args.url:  # the entry that bridges to that server
            config = client_config(None, url=args.url, key=args.key)
        else:
            config = client_config(_local(args).state_dir)
        print(json.dumps(config, indent=2))
        return 0
    if args.url:
        return run_bridge(args)
    local = _local(args)
    settings = _start(args, logging.WARNING)
    if not (args.aws or settings.endpoint_url or settings.ledger_digest_key):
        # The local catalog's digests, as `kiln dev` makes them from the same author key
        # (and no warning in a desktop client's log on every start).
        digest = local.author_key or author_key(local.state_dir, None)
        settings = settings.with_(ledger_digest_key=digest)

    async def serve(endpoint: Any, budget_s: float) -> None:
        reader, writer = await _stdio_streams()
        await serve_stdio(endpoint, reader, writer, CallContext(time_left_s=budget_s))

    try:
        serving = _serving(args, local, settings, running_server(local.state_dir))
        with local_stack(args, settings, share=True) as (settings, clients):
            kiln = stack.build_kiln(settings, clients=clients)
            for line in load_tool_folders(kiln.authoring, args, kiln.views.store):
                print(f"kiln stdio: {line}", file=sys.stderr)
            print(f"kiln stdio: {serving}", file=sys.stderr)
            # A client that stops its server with SIGTERM gets the same clean exit as one
            # that closes stdin: the runner's standbys are let go, their directories removed.
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
            try:
                asyncio.run(serve(kiln.endpoint, settings.local_time_budget_s))
            finally:
                kiln.close_runner()
    except (FolderError, StateInUseError) as error:
        print(f"kiln stdio: {error}", file=sys.stderr)
        return 1
    return 0


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


async def _stdio_streams() -> tuple[asyncio.StreamReader, Any]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:  # stdin is a regular file (`kiln stdio < requests.jsonl`): read it
        _feeding.add(asyncio.ensure_future(_feed(reader, sys.stdin.buffer)))
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


def client_config(
    state_dir: Path | None, *, url: str | None = None, key: str | None = None
) -> dict[str, Any]:
    """The `mcpServers` entry that starts this `kiln stdio` from a desktop client, as pasted:
    serving the local catalog in `state_dir`, or bridging to the server at `url`."""
    kiln = Path(sys.executable).parent / "kiln"
    if kiln.is_file():
        command, args = str(kiln), ["stdio"]
    else:
        command, args = sys.executable, ["-m", "kiln.cli", "stdio"]
    if url is not None:
        args += ["--url", url, *(["--key", key] if key else [])]
    else:
        assert state_dir is not None
        args += ["--state-dir", str(state_dir.resolve())]
    return {"mcpServers": {"kiln": {"command": command, "args": args}}}


def run_bridge(args: argparse.Namespace) -> int:
    """`kiln stdio --url`: relay stdin/stdout to a server's /mcp."""
    from kiln.local.bridge import Bridge, serve_bridge

    local = LocalSettings.from_env()
    settings: Settings | None = getattr(args, "settings", None)
    # The same line limit as the local `kiln stdio` (KILN_MAX_BODY_BYTES, 1 MiB by default).
    limit = (settings or Settings.from_env()).max_body_bytes
    try:
        bridge = Bridge(args.url, args.key or local.author_key, max_line_bytes=limit)
    except ValueError as error:
        print(f"kiln stdio: {error}", file=sys.stderr)
        return 2
    print(f"kiln stdio: serving the catalog of {bridge.url} (bridged over HTTP)", file=sys.stderr)

    async def serve() -> None:
        reader, writer = await _stdio_streams()
        await serve_bridge(bridge, reader, writer)

    asyncio.run(serve())
    return 0


_feeding: set[asyncio.Future[None]] = set()  # keeps the task reading a file stdin alive


async def _feed(reader: asyncio.StreamReader, stream: Any) -> None:
    """A regular file's lines into `reader`, read in a thread, then its end."""
    while chunk := await asyncio.to_thread(stream.read1, 65536):
        reader.feed_data(chunk)
    reader.feed_eof()


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
