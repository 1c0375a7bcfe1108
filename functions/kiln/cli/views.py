"""`kiln views …`: the views of a running server (REST); `kiln calls` is kiln.cli.calls."""

from __future__ import annotations

import argparse
import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.access.view_files import ViewFileError, read_view_file, view_files, write_view_file
from kiln.access.views import FIELDS, MODES, check_view
from kiln.cli import calls, output, publish

if TYPE_CHECKING:
    from kiln.cli.client import KilnClient

Remote = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]


def register(commands: Any, remote: Remote) -> None:
    """Add the `views` and `calls` command groups; `remote` adds --url/--key to a command."""
    views = commands.add_parser(
        "views", help="tool views (named, pinned sets of tools): ls, show, put, mode, accept, rm"
    )
    sub = views.add_subparsers(dest="views_command", required=True)
    remote(sub.add_parser("ls", help="list views")).set_defaults(func=cmd_views_ls)
    show = remote(sub.add_parser("show", help="a view and the tools it shows now"))
    show.add_argument("name")
    show.set_defaults(func=cmd_views_show)
    put = remote(sub.add_parser("put", help="create or replace views from NAME.view.json files"))
    put.add_argument("files", nargs="+", metavar="FILE")
    put.set_defaults(func=cmd_views_put)
    mode = remote(sub.add_parser("mode", help="list a view's tools, or search them"))
    mode.add_argument("name")
    mode.add_argument(
        "mode", choices=list(MODES),
        help="list: tools/list shows every tool; search: search_tools, describe_tools, call_tool",
    )  # fmt: skip
    mode.set_defaults(func=cmd_views_mode)
    accept = remote(
        sub.add_parser("accept", help="let a view serve a tool's breaking revisions (to its head)")
    )
    accept.add_argument("name", metavar="VIEW")
    accept.add_argument("tool", metavar="TOOL")
    accept.set_defaults(func=cmd_views_accept)
    remove = remote(sub.add_parser("rm", help="delete a view"))
    remove.add_argument("name")
    remove.set_defaults(func=cmd_views_rm)

    calls.register(commands, remote)
    publish.register(commands, remote)


@output.talks("views ls")
def cmd_views_ls(args: argparse.Namespace) -> int:
    body, _ = output.client(args).request("GET", "/api/views")
    if not body["views"]:
        print("no views yet: write NAME.view.json and run `kiln views put NAME.view.json`")
        return 0
    rows = [("NAME", "REV", "PATH", "MODE", "TOOLS")]
    problems: list[str] = []
    for view in body["views"]:
        where = f"/mcp/v/{view['name']}" if view["published"] else "-"
        mode = view.get("mode", "list")
        rows.append((view["name"], f"r{view['revision']}", where, mode, " ".join(view["tools"])))
        problems += [f"{problem}   (view {view['name']})" for problem in view.get("problems", [])]
        problems += [_pending_line(view["name"], held) for held in view.get("pending", [])]
    output.print_rows(rows)
    for problem in problems:  # an entry that serves nothing, and why
        print(f"  ! {problem}")
    return 0


def _pending_line(view: str, held: dict[str, Any]) -> str:
    serving = f"r{held['serving']}" if held.get("serving") else "nothing"
    kinds = ", ".join(sorted({str(f.get("kind")) for f in held.get("findings", [])}))
    return (
        f"{held['tool']}@{held['held']} is breaking ({kinds}); view {view} serves {serving} "
        f"until accepted: {held['accept']}"
    )


@output.talks("views accept")
def cmd_views_accept(args: argparse.Namespace) -> int:
    path = f"/api/views/{urllib.parse.quote(args.name, safe='')}/accept"
    body, _ = output.client(args).request("POST", path, {"tool": args.tool})
    accepted = body["accepted"]
    print(
        f"accepted  view {body['name']} now serves {accepted['tool']} up to r{accepted['revision']}"
    )
    return 0


@output.talks("views show")
def cmd_views_show(args: argparse.Namespace) -> int:
    path = f"/api/views/{urllib.parse.quote(args.name, safe='')}"
    body, _ = output.client(args).request("GET", path)
    print(json.dumps(body, indent=2))
    return 0


@output.talks("views put", ViewFileError)
def cmd_views_put(args: argparse.Namespace) -> int:
    client = output.client(args)
    views = [read_view_file(Path(name)) for name in args.files]
    for view in views:
        action = put_view(client, view.definition())
        print(f"{action:9} {view.name}")
    return 0


def put_view(client: KilnClient, definition: dict[str, Any]) -> str:
    """Create or replace one view through REST; 'created', 'updated' or 'unchanged'."""
    from kiln.cli.client import ApiCallError

    path = f"/api/views/{urllib.parse.quote(definition['name'], safe='')}"
    try:
        current, _ = client.request("GET", path)
    except ApiCallError as error:
        if error.status != 404:
            raise
        client.request("PUT", path, definition)
        return "created"
    stored = {key: current[key] for key in FIELDS if key in current}
    if check_view(stored).definition() == check_view(definition).definition():
        return "unchanged"
    client.request("PUT", path, definition, {"If-Match": f'"{current["revision"]}"'})
    return "updated"


def push_view_files(client: KilnClient, roots: list[Path]) -> list[tuple[str, str]]:
    """Create or replace the views of the `*.view.json` files in `roots` (after the tools)."""
    views = [read_view_file(path) for root in roots for path in view_files(root)]
    return [(view.name, put_view(client, view.definition())) for view in views]


def pull_views(client: KilnClient, root: Path) -> list[Path]:
    """Write every view as `<name>.view.json` in `root`."""
    body, _ = client.request("GET", "/api/views")
    root.mkdir(parents=True, exist_ok=True)
    stored = [{key: v[key] for key in FIELDS if key in v} for v in body["views"]]
    return [write_view_file(root, check_view(definition)) for definition in stored]


@output.talks("views mode")
def cmd_views_mode(args: argparse.Namespace) -> int:
    """Set how a view's tools are listed, keeping the rest of its definition."""
    client = output.client(args)
    path = f"/api/views/{urllib.parse.quote(args.name, safe='')}"
    current, _ = client.request("GET", path)
    definition = {key: current[key] for key in FIELDS if key in current}
    if definition.get("mode", "list") == args.mode:
        print(f"unchanged {args.name}: {args.mode}")
        return 0
    definition["mode"] = args.mode
    client.request("PUT", path, definition, {"If-Match": f'"{current["revision"]}"'})
    print(f"updated   {args.name}: {args.mode}")
    return 0


@output.talks("views rm")
def cmd_views_rm(args: argparse.Namespace) -> int:
    output.client(args).request("DELETE", f"/api/views/{urllib.parse.quote(args.name, safe='')}")
    print(f"deleted   {args.name}")
    return 0
