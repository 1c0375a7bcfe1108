"""The `kiln` command: parse, call, print."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from kiln.cli import output
from kiln.cli.approvals import register as register_approvals
from kiln.cli.aws import settings_of
from kiln.cli.bundles import register as register_bundles
from kiln.cli.connections import register as register_connections
from kiln.cli.history import register as register_history
from kiln.cli.keys import register as register_auth
from kiln.cli.locate import STATE_HELP, ServerNotFoundError, server_options
from kiln.cli.tasks import register as register_tasks
from kiln.cli.views import register as register_access
from kiln.settings import SettingsError


def cmd_dev(args: argparse.Namespace) -> int:
    from kiln.local.dev import run_dev

    return run_dev(args)


def cmd_stdio(args: argparse.Namespace) -> int:
    from kiln.local.dev import run_stdio

    return run_stdio(args)


def _view_files_in(dirs: list[str]) -> bool:
    """Whether any of `dirs` holds a `*.view.json` (pushed even without tool folders)."""
    from kiln.access.view_files import view_files

    return any(view_files(Path(root)) for root in dirs)


def cmd_tools_push(args: argparse.Namespace) -> int:
    from kiln.catalog.files import FolderError, push, read_folders, tool_folders
    from kiln.cli.client import ApiCallError, HttpTarget
    from kiln.cli.packages import report, wait_for_packages
    from kiln.cli.views import push_view_files

    try:
        folders = [folder for root in args.dirs for folder in tool_folders(Path(root))]
        if not folders and not _view_files_in(args.dirs):
            raise FolderError(
                f"no tool folders in {', '.join(args.dirs)} (a tool folder holds tool.json "
                "and main.py or main.js)"
            )
        read_folders(folders)  # every folder's problems, before a server is even looked for
        client = output.client(args)
        target = HttpTarget(client, breaking=args.breaking)
        results = push(target, folders) if folders else []
        views = push_view_files(client, [Path(root) for root in args.dirs])
        for result in results:
            print(f"{result.action:9} {result.name}")
        for name, action in views:
            print(f"{action:9} view {name}")
        sys.stdout.flush()
        names = [result.name for result in results]
        packages = wait_for_packages(client, names, wait_s=args.wait)
    except (FolderError, ApiCallError, ServerNotFoundError) as error:
        return output.fail("tools push", error)
    return report(packages, wait_s=args.wait)


@output.talks("tools pull")
def cmd_tools_pull(args: argparse.Namespace) -> int:
    from kiln.catalog.files import draft_from_tool_json, write_folder
    from kiln.cli.views import pull_views

    client = output.client(args)
    listing, _ = client.request("GET", "/api/tools")
    for summary in listing["tools"]:
        body = client.tool(summary["name"])
        if body is not None:
            folder = write_folder(Path(args.dir), draft_from_tool_json(body, body["code"]))
            print(f"wrote     {folder}")
    for path in pull_views(client, Path(args.dir)):
        print(f"wrote     {path}")
    return 0


@output.talks("tools list")
def cmd_tools_list(args: argparse.Namespace) -> int:
    listing, _ = output.client(args).request("GET", "/api/tools")
    for tool in listing["tools"]:
        state = "enabled " if tool["enabled"] else "disabled"
        tags = " ".join(f"#{tag}" for tag in tool.get("tags", []))
        short = str(tool.get("fingerprint") or "-")[:19]  # sha256: and 12 digits, as git does
        print(
            f"{tool['name']:32} {state} r{tool['revision']:<4} {tool['language']:6} {short:19} "
            f"{tags}".rstrip()
        )
    return 0


@output.talks("tools call")
def cmd_tools_call(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as error:
        print(f"kiln tools call: --args is not valid JSON ({error.msg})", file=sys.stderr)
        return 2
    payload = {"arguments": arguments, **({"task": True} if args.task else {})}
    body = output.client(args).send_once(
        f"/api/tools/{quote(args.name, safe='')}/run", payload, args.idempotency_key
    )
    if args.task:  # the task's id: `kiln tasks result ID` waits for it
        print(f"{body['taskId']} {body['status']}")
        return 0
    print(body.get("text", ""))
    return 0 if body.get("ok") else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from kiln.runner import doctor

    if args.aws:
        function = args.function or args.settings.runner_function
        if not function:
            print("kiln doctor --aws: name the runner function (--function or "
                  "KILN_RUNNER_FUNCTION)", file=sys.stderr)  # fmt: skip
            return 2
        from kiln.cli.aws import lambda_of

        found = doctor.remote(lambda_of(args), function)
    else:
        found = doctor.probe()
    print(doctor.render(found, as_json=args.json))
    weaker = doctor.weaker_than(found, args.require) if args.require else None
    if weaker:
        print(f"kiln doctor: {weaker}", file=sys.stderr)
        return 1
    return 0


def local_catalog_options(command: argparse.ArgumentParser) -> None:
    """The options of a command that serves the local catalog (`dev`, `stdio`)."""
    command.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="DIR",
        help="also load the tool folders in DIR (repeatable)",
    )
    command.add_argument("--no-examples", action="store_true", help="do not load examples/tools")
    command.add_argument("--state-dir", default=None, help=STATE_HELP)
    command.add_argument(
        "--aws",
        action="store_true",
        help="use the AWS account of the environment instead of the emulator",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="Small scripts as MCP tools.")
    commands = parser.add_subparsers(dest="command", required=True)

    dev = commands.add_parser("dev", help="run Kiln locally on an embedded AWS emulator")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument(
        "--port", type=int, default=8000, help="default: 8000; 0: a free one (it says which)"
    )
    local_catalog_options(dev)
    dev.add_argument(
        "--author-key", default=None, help="default: KILN_AUTHOR_KEY, else the saved one"
    )
    dev.set_defaults(func=cmd_dev)

    stdio = commands.add_parser(
        "stdio", help="serve MCP over stdin/stdout (the local catalog, or a server with --url)"
    )
    local_catalog_options(stdio)
    stdio.add_argument("--url", default=None, help="bridge to this Kiln server's /mcp instead")
    stdio.add_argument("--key", default=None, help="key to send with --url")
    stdio.add_argument(
        "--client-config",
        action="store_true",
        help="print the mcpServers entry a desktop client needs to start this, then exit",
    )
    stdio.set_defaults(func=cmd_stdio)

    tools = commands.add_parser(
        "tools", help="tools on a Kiln server: push, pull, list, show, call, history, diff, restore"
    ).add_subparsers(dest="tools_command", required=True)

    push = server_options(tools.add_parser("push", help="create or update tools from folders"))
    push.add_argument("dirs", nargs="+", metavar="DIR")
    push.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wait this long for the pushed tools' packages to build; a failed build is "
        "shown with its log and exits 1, the tool stays saved (default 60; 0: do not wait)",
    )
    push.add_argument(
        "--breaking",
        action="store_true",
        help="save changes that break a tool's clients (a new required input, a narrowed "
        "type, a weaker annotation, a new secret...); refused otherwise, with what they break",
    )
    push.set_defaults(func=cmd_tools_push)
    pull = server_options(tools.add_parser("pull", help="write the catalog's tools as folders"))
    pull.add_argument("dir", metavar="DIR")
    pull.set_defaults(func=cmd_tools_pull)
    listing = tools.add_parser("list", aliases=["ls"], help="list tools")
    server_options(listing).set_defaults(func=cmd_tools_list)
    call = server_options(tools.add_parser("call", help="run a tool (author test run)"))
    call.add_argument("name")
    call.add_argument("--args", default="{}", help="arguments as a JSON object")
    call.add_argument(
        "--task", action="store_true", help="start it as a task; print its id (kiln tasks)"
    )
    call.add_argument(
        "--idempotency-key", default=None, metavar="KEY",
        help="name this call: sent again with the same KEY (and arguments) within 24 h, it is "
        "answered with the first run's reply, not run again (default: a fresh key, reused by "
        "this command's own retries)",
    )  # fmt: skip
    call.set_defaults(func=cmd_tools_call)
    register_history(tools, server_options)

    doctor = commands.add_parser("doctor", help="what this machine (or --aws) enforces for runs")
    doctor.add_argument("--json", action="store_true", help="print JSON")
    doctor.add_argument("--aws", action="store_true", help="probe inside the runner function")
    doctor.add_argument("--function", help="the runner function (default KILN_RUNNER_FUNCTION)")
    doctor.add_argument("--require", help="fail when runs get less: shared, landlock, uid, mounts")
    doctor.set_defaults(func=cmd_doctor)

    register_bundles(commands)
    register_tasks(commands, server_options)
    register_approvals(commands, server_options)
    register_auth(commands)
    register_connections(commands)
    register_access(commands, server_options)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The `kiln` entry point: settings from the environment, once, then the command."""
    args = build_parser().parse_args(argv)
    try:
        settings_of(args)
    except SettingsError as error:
        print(f"kiln: {error}", file=sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
