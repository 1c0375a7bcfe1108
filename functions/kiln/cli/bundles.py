"""`kiln bundles ls | show | build | retry`.

`ls`, `show` and `retry` ask a Kiln server's REST API (`--url`, `--key`, as `kiln tools`
does), or, with `--aws`, the table and bucket of the environment directly (AWS_ENDPOINT_URL,
KILN_TABLE, KILN_BUCKET and the usual AWS credentials). `build` runs pip or npm here, with
progress on stderr, and publishes the bundle to the environment's table and bucket; with
`--out DIR` it only writes the zip, manifest and log to DIR. Building for Lambda from any
machine: `kiln bundles build --target lambda-python3.13-x86_64 --tool examples/tools/NAME`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from kiln.cli import output
from kiln.cli.aws import clients_of, lambda_of, settings_of
from kiln.cli.locate import server_options


class Progress:
    """Phase lines with elapsed time, and a byte counter for uploads, on stderr."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.live = self.stream.isatty()
        self._lock = threading.Lock()
        self._sent = 0
        self._total = 0
        self._shown = -1

    def phase(self, message: str) -> None:
        with self._lock:
            self.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {message}\n")
            self.stream.flush()

    def uploaded(self, amount: int, total: int) -> None:
        """Transfer callback: `amount` more bytes of `total` went up."""
        with self._lock:
            if total != self._total:
                self._sent, self._total, self._shown = 0, max(total, 1), -1
            self._sent += amount
            percent = min(100, self._sent * 100 // self._total)
            step = percent if self.live else percent // 25 * 25
            if step == self._shown:
                return
            self._shown = step
            line = f"  uploaded {self._sent / 2**20:.1f} of {self._total / 2**20:.1f} MB"
            line += f" ({percent}%)"
            self.stream.write(f"\r{line}" if self.live else f"{line}\n")
            if self.live and percent == 100:
                self.stream.write("\n")
            self.stream.flush()


# -- where the records are -------------------------------------------------------------------


def _direct_store(args: argparse.Namespace) -> Any:
    """A BundleStore on the environment's table and bucket."""
    from kiln.bundles.store import BundleStore

    settings, clients = settings_of(args), clients_of(args)
    return BundleStore(clients.dynamodb, clients.s3, table=settings.table, bucket=settings.bucket)


def _api(args: argparse.Namespace) -> Any:
    from kiln.cli.client import connect

    return connect(settings_of(args), url=args.url, key=args.key, state_dir=args.state_dir)


def _toolchain(args: argparse.Namespace) -> Any:
    from kiln.bundles.build import Toolchain

    toolchain = Toolchain.from_settings(settings_of(args).bundles)
    if getattr(args, "max_mb", None):
        toolchain = replace(toolchain, max_unpacked_bytes=int(args.max_mb * 2**20))
    return toolchain


# -- commands --------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    try:
        if args.aws:
            bundles = [record.to_json() for record in _direct_store(args).list()]
        else:
            body, _ = _api(args).request("GET", "/api/bundles")
            bundles = body["bundles"]
    except Exception as error:
        return output.fail("bundles ls", error)
    if args.json:
        print(json.dumps(bundles, indent=2))
        return 0
    if not bundles:
        print("no bundles")
        return 0
    print(f"{'ID':32}  {'STATUS':8}  {'TARGET':26}  {'SIZE':>8}  REQUIREMENTS")
    for bundle in bundles:
        size = f"{bundle['size'] / 2**20:.1f}MB" if bundle.get("size") else "-"
        print(
            f"{bundle['id']:32}  {bundle['status']:8}  {bundle['target']:26}  {size:>8}  "
            + " ".join(bundle["requirements"])
        )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        if args.aws:
            store = _direct_store(args)
            full = store.resolve(args.id)
            record = store.get(full)
            if record is None:
                return output.fail("bundles show", f"bundle {args.id}: no such bundle")
            body = record.to_json()
            manifest = store.read_manifest(full)
            body["lock"] = None if manifest is None else manifest.get("lock")
            if args.log:
                body["log"] = store.read_log(full)
        else:
            query = "?log=true" if args.log else ""
            body, _ = _api(args).request("GET", f"/api/bundles/{args.id}{query}")
    except Exception as error:
        return output.fail("bundles show", error)
    log = body.pop("log", None)
    print(json.dumps(body, indent=2))
    if log:
        print("\n--- build log ---\n" + log, end="")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    if not args.aws:
        try:
            body, _ = _api(args).request("POST", f"/api/bundles/{args.id}/retry")
        except Exception as error:
            return output.fail("bundles retry", error)
        print(f"{body['id']} {body['status']}: the server builds it in the background")
        return 0
    from kiln.bundles.errors import BundleIdError, BundleStateError

    store = _direct_store(args)
    try:
        record = store.retry(store.resolve(args.id))
    except (BundleStateError, BundleIdError) as error:
        return output.fail("bundles retry", error)
    builder = settings_of(args).builder_function
    if builder:
        _lambda_schedule(args, builder, record.id)
        print(f"{record.id} pending: handed to {builder}")
        return 0
    return _build_here(store, record.id, Progress(), _toolchain(args))


def _lambda_schedule(args: argparse.Namespace, function: str, bundle_id: str) -> None:
    from kiln.bundles.scheduler import LambdaBuildScheduler

    LambdaBuildScheduler(lambda_of(args), function).schedule(bundle_id)


def _requirements(args: argparse.Namespace) -> tuple[str, list[str]]:
    """(language, requirements) from --requirements or --tool (a folder or a catalog name)."""
    if args.requirements:
        return args.language or "python", list(args.requirements)
    folder = Path(args.tool)
    if folder.is_dir():
        from kiln.catalog.files import read_folder

        draft = read_folder(folder)
        return draft.language, list(draft.requirements)
    from kiln.catalog.store import CatalogStore

    settings, clients = settings_of(args), clients_of(args)
    catalog = CatalogStore(
        clients.dynamodb, clients.s3, table=settings.table, bucket=settings.bucket
    )
    tool = catalog.get(args.tool)
    return tool.head.language, list(tool.head.requirements)


def cmd_build(args: argparse.Namespace) -> int:
    from kiln.bundles.identity import RequirementError, bundle_id, default_target, parse_target

    try:
        language, requirements = _requirements(args)
        settings = settings_of(args)
        configured = settings.node_bundle_target if language == "node" else settings.bundle_target
        target = args.target or default_target(
            language,
            configured=configured,
            in_lambda=settings.in_lambda,
            node_binary=settings.node_binary,
        )
        if parse_target(target).language != language:
            raise RequirementError(f"--target {target} is not a {language} target")
        identity = bundle_id(language, target, requirements)
    except Exception as error:
        hint = ""
        if isinstance(error, RequirementError) and not args.language and args.requirements:
            hint = " (npm packages need --language node)"
        return output.fail("bundles build", f"{error}{hint}")
    if identity is None:
        print("nothing to build: no requirements", file=sys.stderr)
        return 0
    progress = Progress()
    max_bytes = int(args.max_mb * 2**20) if args.max_mb else None
    if args.out:
        return _build_to_dir(args, identity, language, target, requirements, progress, max_bytes)
    try:
        store = _direct_store(args)
        record = store.ensure(language, target, requirements)
        assert record is not None
        if record.status == "ready":
            print(f"{record.id} ready (already built {record.finished_at})")
            return 0
        if record.status == "failed":
            progress.phase(f"{record.id} failed before ({record.error}); building again")
            record = store.retry(record.id)
        if record.status == "building":
            return output.fail(
                "bundles build", f"{record.id} is being built since {record.started_at}; try later"
            )
    except Exception as error:
        return output.fail("bundles build", error)
    return _build_here(store, record.id, progress, _toolchain(args))


def _build_to_dir(
    args: argparse.Namespace,
    identity: str,
    language: str,
    target: str,
    requirements: list[str],
    progress: Progress,
    max_bytes: int | None,
) -> int:
    """Build here into `--out` (zip, manifest and log), with no bundle store."""
    from kiln.bundles.build import build_bundle
    from kiln.bundles.errors import BuildError
    from kiln.bundles.identity import normalise_requirements
    from kiln.bundles.store import BundleRecord, now_iso

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    now = now_iso()
    record = BundleRecord(
        identity, "building", language, target,
        normalise_requirements(language, requirements), now, now,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kiln-build-") as scratch:
        try:
            built = build_bundle(
                record,
                workdir=Path(scratch),
                progress=progress.phase,
                max_bytes=max_bytes,
                toolchain=_toolchain(args),
            )
        except BuildError as error:
            (out / f"{identity}.log").write_text(error.log)
            return output.fail("bundles build", f"{error.reason} (log: {out / f'{identity}.log'})")
        built.zip_path.replace(out / f"{identity}.zip")
    (out / f"{identity}.manifest.json").write_text(json.dumps(built.manifest, indent=2))
    (out / f"{identity}.log").write_text(built.log)
    progress.phase(f"wrote {out / f'{identity}.zip'} ({built.manifest['zip_size']} bytes)")
    print(identity)
    return 0


def _build_here(store: Any, identity: str, progress: Progress, toolchain: Any) -> int:
    from kiln.bundles.scheduler import run_build

    progress.phase(f"building {identity}")
    done = run_build(
        store,
        identity,
        progress=progress.phase,
        upload_progress=progress.uploaded,
        toolchain=toolchain,
    )
    if done.status != "ready":
        log = store.read_log(identity) or ""
        tail = "\n".join(log.rstrip().splitlines()[-15:])
        print(tail, file=sys.stderr)
        return output.fail("bundles build", f"{identity} {done.status}: {done.error}")
    progress.phase(
        f"{identity} ready: {done.file_count} files, {(done.unpacked_size or 0) / 2**20:.1f} MB "
        f"unpacked, {(done.size or 0) / 2**20:.1f} MB zipped"
    )
    print(identity)
    return 0


# -- wiring ----------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add `bundles` and its subcommands to the `kiln` parser."""
    bundles = subparsers.add_parser("bundles", help="dependency bundles: ls, show, build, retry")
    commands = bundles.add_subparsers(dest="bundles_command", required=True)

    def source(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        return server_options(
            sub,
            state_help=argparse.SUPPRESS,
            aws_help="read the table and bucket of the environment instead of a server",
        )

    output.subcommand(
        commands, "ls", cmd_ls, "list bundles and their status", json=True, options=source
    )
    show = output.subcommand(
        commands, "show", cmd_show, "a bundle's record and lock", "id", options=source
    )
    show.add_argument("--log", action="store_true", help="also print the build log")
    output.subcommand(
        commands, "retry", cmd_retry, "build a failed bundle again", "id", options=source
    )

    build = commands.add_parser(
        "build", help="build a bundle here and publish it (or write it with --out)"
    )
    what = build.add_mutually_exclusive_group(required=True)
    what.add_argument("--requirements", nargs="+", metavar="REQ", help="packages to install")
    what.add_argument("--tool", metavar="NAME|DIR", help="a tool folder, or a catalog tool name")
    build.add_argument("--language", choices=("python", "node"), help="with --requirements")
    build.add_argument(
        "--target",
        help="e.g. lambda-python3.13-x86_64, lambda-python3.13-arm64, node20-x86_64 "
        "(default: KILN_BUNDLE_TARGET, else this machine's interpreter)",
    )
    build.add_argument("--out", metavar="DIR", help="write zip, manifest and log to DIR only")
    build.add_argument("--max-mb", type=float, help="unpacked size limit (default 200)")
    build.set_defaults(func=cmd_build)
