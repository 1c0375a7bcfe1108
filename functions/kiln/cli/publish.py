"""`kiln publish VIEW`: a registry `server.json` for a published view, and its submission.

The entry is made from the view's server card (`GET /mcp/v/VIEW/server-card`, so it says what
the card says: its URL, its transport and the header its auth needs), validated against the
registry's rules (2025-12-11, Kiln's schema in `kiln/protocol/card_schemas.py`; also the official
file when KILN_REGISTRY_SCHEMA_FILE names one) before it is written, and
with `--registry URL --token TOKEN` sent to that registry's publish API (`POST /v0.1/publish`).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.cli import output
from kiln.protocol.cards import CARD_MEDIA_TYPE, CardError, check_name, registry_entry
from kiln.settings import LocalSettings

if TYPE_CHECKING:
    from kiln.cli.client import KilnClient

Remote = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
PUBLISH_PATH = "/v0.1/publish"  # the registry's frozen v0.1 API
TIMEOUT_S = 60.0


class PublishError(Exception):
    """What stops a publish, said in one line."""


def register(commands: Any, remote: Remote) -> None:
    publish = remote(
        commands.add_parser(
            "publish", help="write a registry server.json for a published view (and submit it)"
        )
    )
    publish.add_argument("view", metavar="VIEW")
    publish.add_argument(
        "--name",
        help="the entry's name, reverse-DNS 'namespace/server' (e.g. io.github.acme/weather); "
        "the registry checks you own the namespace (default: the view's card name)",
    )
    publish.add_argument(
        "--version", help="the entry's version (default: the server's, +view.<view revision>)"
    )
    publish.add_argument("--out", default="server.json", help="where to write it (server.json)")
    publish.add_argument("--registry", help="submit it to this MCP registry (base URL)")
    publish.add_argument("--token", help="the registry's publish token (with --registry)")
    publish.set_defaults(func=cmd_publish)


def cmd_publish(args: argparse.Namespace) -> int:
    from kiln.cli.client import ApiCallError

    try:
        _check_name(args.name)
        if args.registry and not args.token:
            raise PublishError("--registry needs --token (the registry's publish token)")
        registry = _registry_url(args.registry) if args.registry else None
        entry = make_entry(output.client(args), args.view, name=args.name, version=args.version)
        write_json(Path(args.out), entry)
    except (CardError, PublishError, ApiCallError) as error:
        return output.fail("publish", error)
    remote = entry["remotes"][0]["url"]
    print(f"wrote {args.out}: {entry['name']} {entry['version']}, {remote}")
    if registry is None:
        return 0
    try:
        submit(registry, args.token, entry)
    except PublishError as error:
        return output.fail("publish", error)
    print(f"published {entry['name']} {entry['version']} to {registry}")
    return 0


def make_entry(
    client: KilnClient, view: str, *, name: str | None, version: str | None
) -> dict[str, Any]:
    """The view's server.json, from its definition and its card."""
    from kiln.cli.client import ApiCallError

    quoted = urllib.parse.quote(view, safe="")
    try:
        definition, _ = client.request("GET", f"/api/views/{quoted}")
    except ApiCallError as error:
        if error.status == 404:
            raise PublishError(f"no view is named {view!r} (`kiln views ls` lists them)") from None
        raise
    if not definition.get("published"):
        raise PublishError(
            f"view {view!r} is not published, so it has no endpoint for a registry to point "
            f'at: set "published": true in {view}.view.json and `kiln views put` it'
        )
    card, _ = client.request(
        "GET", f"/mcp/v/{quoted}/server-card", headers={"Accept": CARD_MEDIA_TYPE}
    )
    version = version or f"{card['version']}+view.{definition.get('revision', 0)}"
    official = LocalSettings.from_env().registry_schema_file
    return registry_entry(card, name=name or card["name"], version=version, official=official)


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Whole or not at all: a reader never sees half a file."""
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    folder = path.resolve().parent
    try:
        with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as file:
            file.write(text)
        os.replace(file.name, path)
    except OSError as error:
        raise PublishError(f"--out {path}: {error.strerror or error}") from None


def _check_name(name: str | None) -> None:
    try:
        if name is not None:
            check_name(name)
    except CardError as error:
        raise PublishError(f"--{error}") from None


def _registry_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PublishError(f"--registry: give the registry's base URL (https://…), not {url!r}")
    return url.rstrip("/")


def submit(registry: str, token: str, entry: dict[str, Any]) -> None:
    """POST the entry to the registry's publish API; PublishError with its answer if refused."""
    request = urllib.request.Request(  # noqa: S310  (scheme checked in _registry_url)
        registry + PUBLISH_PATH,
        data=json.dumps(entry).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S):  # noqa: S310
            return
    except urllib.error.HTTPError as error:
        raise PublishError(
            f"{registry} refused it: HTTP {error.code}: {_said(error.read())}"
        ) from None
    except (urllib.error.URLError, OSError) as error:
        raise PublishError(f"cannot reach {registry} ({getattr(error, 'reason', error)})") from None


def _said(raw: bytes) -> str:
    """The registry's own words: its error's detail and each listed problem (RFC 9457)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:500] or "(no body)"
    if not isinstance(body, dict):
        return str(body)[:500]
    said = str(body.get("detail") or body.get("title") or body.get("error") or body)
    problems = [
        f"{p.get('location', '')}: {p.get('message', '')}".strip(": ")
        for p in body.get("errors") or []
        if isinstance(p, dict)
    ]
    return "; ".join([said, *problems])[:1000]
