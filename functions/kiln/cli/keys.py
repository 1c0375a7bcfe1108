"""`kiln keys …` and `kiln secrets …`: parse, call, print.

They go through a Kiln server's authenticated admin API (found as every `kiln` command finds
it, see kiln.cli.locate), so a revocation takes effect in that server at once. With `--aws` they
write the environment's table and SSM directly instead (AWS_REGION, credentials,
AWS_ENDPOINT_URL, KILN_TABLE): how the first author key of a deployment is made.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO
from urllib.parse import quote

from kiln.access.approvals import CONFIRM_VALUES
from kiln.access.quotas import Quota, QuotaRuleError, check_quota
from kiln.access.secrets import SecretError, SecretStore
from kiln.access.views import ViewRuleError, check_view_name
from kiln.aws.clients import AwsClients
from kiln.cli.aws import clients_of, settings_of, ssm_of
from kiln.cli.client import ApiCallError, KilnClient, client_for
from kiln.cli.locate import ServerNotFoundError, server_options
from kiln.identity.audit import record_write
from kiln.identity.keys import KeyStore, KeyStoreError
from kiln.observability import redact
from kiln.settings import Settings, SettingsError

# Turns the TOOL argument (a name, or `id:<tool id>`) into the tool's id: (clients, table, ref).
ToolResolver = Callable[[AwsClients, str, str], str]


def catalog_tool_id(clients: AwsClients, table: str, ref: str) -> str:
    """The id of the live tool named `ref`, from the catalog (secrets follow ids, not names)."""
    from kiln.catalog.errors import ToolNotFoundError
    from kiln.catalog.store import CatalogStore

    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket="")
    try:
        return store.get(ref).id
    except ToolNotFoundError as error:
        raise CliError(str(error)) from None


class CliError(Exception):
    pass


@dataclass
class Io:
    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    settings: Settings


Handler = Callable[[argparse.Namespace, "Io"], None]


def _command(handler: Handler) -> Callable[[argparse.Namespace], int]:
    """What `kiln`'s main calls as `args.func(args)`."""

    def func(args: argparse.Namespace) -> int:
        return run(handler, args)

    return func


def register(subparsers: Any, *, resolve_tool: ToolResolver = catalog_tool_id) -> None:
    """Add the `keys` and `secrets` command groups to the `kiln` parser."""
    keys = subparsers.add_parser("keys", help="API keys: create, bind, ls, revoke")
    key_commands = keys.add_subparsers(dest="keys_command", metavar="COMMAND", required=True)
    create = key_commands.add_parser("create", help="create a key and print it (shown once)")
    create.add_argument("--name", required=True, help="a unique name, e.g. ci or alice-laptop")
    create.add_argument("--scope", required=True, choices=["call", "author"])
    _binding_arguments(create)
    create.set_defaults(func=_command(_keys_create))
    bind = key_commands.add_parser(
        "bind", help="set a key's view, quotas and approvals (what is not given is cleared)"
    )
    bind.add_argument("name")
    _binding_arguments(bind)
    bind.set_defaults(func=_command(_keys_bind))
    key_commands.add_parser("ls", help="list keys (never their secrets)").set_defaults(
        func=_command(_keys_ls)
    )
    revoke = key_commands.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    revoke.set_defaults(func=_command(_keys_revoke))

    secrets = subparsers.add_parser("secrets", help="per-tool secrets: set, ls, rm")
    secret_commands = secrets.add_subparsers(
        dest="secrets_command", metavar="COMMAND", required=True
    )
    put = secret_commands.add_parser(
        "set", help="set a secret; the value is read from stdin or a hidden prompt"
    )
    put.add_argument("tool")
    put.add_argument("name")
    put.set_defaults(func=_command(_secrets_set))
    show = secret_commands.add_parser("ls", help="list a tool's secret names (never values)")
    show.add_argument("tool")
    show.set_defaults(func=_command(_secrets_ls))
    remove = secret_commands.add_parser("rm", help="remove a tool's secret")
    remove.add_argument("tool")
    remove.add_argument("name")
    remove.set_defaults(func=_command(_secrets_rm))
    for parser in (put, show, remove):
        parser.set_defaults(resolve_tool=resolve_tool)
    for parser in (create, bind, revoke, put, show, remove, key_commands.choices["ls"]):
        server_options(
            parser,
            state_help=argparse.SUPPRESS,
            aws_help="write the environment's table (KILN_TABLE) and SSM directly, "
            "not through a server",
        )


def _binding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--view", default=None, help="bind the key to this view")
    parser.add_argument("--calls-per-minute", type=int, default=None, metavar="N")
    parser.add_argument("--run-seconds-per-day", type=float, default=None, metavar="S")
    parser.add_argument(
        "--confirm",
        choices=CONFIRM_VALUES,
        default=None,
        help="the user approves this key's calls of destructive tools (destructive) or of "
        "every tool not marked read-only (writes) before they run",
    )
    parser.add_argument(
        "--approver",
        action="append",
        default=None,
        metavar="NAME",
        help="with --confirm: this author key (or oauth:<sub>) approves those calls instead of "
        "the caller, who waits (repeat for several; kiln approvals)",
    )


def _binding(args: argparse.Namespace) -> tuple[str | None, Quota]:
    if args.view is not None:
        try:
            check_view_name(args.view)
        except ViewRuleError as error:
            raise CliError(f"--view: {error.problems[0][1]}") from None
    limits = {"calls_per_minute": args.calls_per_minute,
              "run_seconds_per_day": args.run_seconds_per_day}  # fmt: skip
    try:
        quota = check_quota({k: v for k, v in limits.items() if v is not None})
    except QuotaRuleError as error:
        raise CliError("--" + str(error).removeprefix("quota.").replace("_", "-")) from None
    return args.view, quota


def _describe(view: str | None, quota: Quota, confirm: str | None = None) -> str:
    parts = [f"view {view}"] if view else []
    if confirm:
        parts.append(f"confirm {confirm}")
    if quota.calls_per_minute is not None:
        parts.append(f"{quota.calls_per_minute} calls/min")
    if quota.run_seconds_per_day is not None:
        parts.append(f"{quota.run_seconds_per_day:g} run-s/day")
    return ", ".join(parts) or "-"


def _quota_of(value: Any) -> Quota:
    """A quota as the REST API shows it (unset limits may be null)."""
    if not isinstance(value, dict):
        return check_quota(None)
    return check_quota({k: v for k, v in value.items() if v is not None})


def run(handler: Handler, args: argparse.Namespace, io: Io | None = None) -> int:
    """Run one `keys`/`secrets` command; returns the exit status."""
    redact.install()
    try:
        io = io or Io(sys.stdin, sys.stdout, sys.stderr, settings_of(args))
        handler(args, io)
    except (CliError, KeyStoreError, SecretError, SettingsError) as exc:
        print(f"kiln: error: {exc}", file=io.stderr if io is not None else sys.stderr)
        return 1
    except (ApiCallError, ServerNotFoundError) as exc:
        stderr = io.stderr if io is not None else sys.stderr
        print(f"kiln {args.command} {_subcommand(args)}: {exc}", file=stderr)
        return 1
    return 0


def _subcommand(args: argparse.Namespace) -> str:
    return str(getattr(args, "keys_command", None) or getattr(args, "secrets_command", ""))


def _api(args: argparse.Namespace) -> KilnClient:
    return client_for(args)


def _tool_path(tool: str, *rest: str) -> str:
    return "/".join(["/api/tools", quote(tool, safe=":"), *[quote(p, safe="") for p in rest]])


def _table(io: Io) -> str:
    if "KILN_TABLE" not in io.settings.given:
        raise CliError("set KILN_TABLE to the catalog's DynamoDB table name")
    return io.settings.table


def _key_store(args: argparse.Namespace, io: Io) -> KeyStore:
    return KeyStore(clients_of(args).dynamodb, table=_table(io))


def _secret_store(args: argparse.Namespace, io: Io) -> tuple[SecretStore, AwsClients]:
    return SecretStore(ssm_of(args), io.settings.auth.secrets_prefix), clients_of(args)


def _tool_id(args: argparse.Namespace, io: Io, clients: AwsClients) -> str:
    resolve: ToolResolver = getattr(args, "resolve_tool", catalog_tool_id)
    return resolve(clients, _table(io), args.tool)


def _keys_create(args: argparse.Namespace, io: Io) -> None:
    view, quota = _binding(args)
    if args.aws:
        record, secret = _key_store(args, io).create(
            args.name, args.scope, view=view, quota=quota, confirm=args.confirm,
            approvers=tuple(args.approver or ()),
        )  # fmt: skip
        name, scope, key_id = record.name, record.scope, record.key_id
    else:
        payload = {"name": args.name, "scope": args.scope, "view": view,
                   "quota": quota.as_dict(), "confirm": args.confirm,
                   "approvers": args.approver or []}  # fmt: skip
        body, _ = _api(args).request("POST", "/api/keys", payload)
        name, scope, key_id, secret = body["name"], body["scope"], body["key_id"], body["key"]
    print(secret, file=io.stdout)
    print(
        f"created {scope} key {name!r} (id {key_id}); store it now: it is shown only once",
        file=io.stderr,
    )


def _keys_bind(args: argparse.Namespace, io: Io) -> None:
    view, quota = _binding(args)
    if args.aws:
        record = _key_store(args, io).bind(
            args.name, view=view, quota=quota, confirm=args.confirm,
            approvers=tuple(args.approver or ()),
        )  # fmt: skip
        view, quota, confirm = record.view, record.quota, record.confirm
    else:
        body, _ = _api(args).request(
            "PUT", f"/api/keys/{quote(args.name, safe='')}/binding",
            {"view": view, "quota": quota.as_dict(), "confirm": args.confirm,
             "approvers": args.approver or []},
        )  # fmt: skip
        view, quota = body.get("view"), check_quota(body.get("quota"))
        confirm = body.get("confirm")
    print(f"key {args.name!r}: {_describe(view, quota, confirm)}", file=io.stdout)


def _keys_ls(args: argparse.Namespace, io: Io) -> None:
    rows = [("NAME", "SCOPE", "ID", "CREATED", "LAST USED", "STATUS", "LIMITS")]
    if args.aws:
        records = [
            {**asdict(r), "limits": _describe(r.view, r.quota, r.confirm)}
            for r in _key_store(args, io).list()
        ]
    else:
        records = _api(args).request("GET", "/api/keys")[0]["keys"]
    for r in records:
        status = f"revoked {r['revoked_at']}" if r.get("revoked_at") else "active"
        last = r.get("last_used_at") or "never"
        limits = r.get("limits") or _describe(
            r.get("view"), _quota_of(r.get("quota")), r.get("confirm")
        )
        rows.append((r["name"], r["scope"], r["key_id"], r["created_at"], last, status, limits))
    _table_out(rows, io.stdout)


def _keys_revoke(args: argparse.Namespace, io: Io) -> None:
    if args.aws:
        record = asdict(_key_store(args, io).revoke(args.name))
    else:
        record = _api(args).request("DELETE", f"/api/keys/{quote(args.name, safe='')}")[0]
    print(f"revoked key {record['name']!r} (id {record['key_id']})", file=io.stdout)


def _secrets_set(args: argparse.Namespace, io: Io) -> None:
    value = _read_value(args.name, io)
    if args.aws:
        store, clients = _secret_store(args, io)
        tool_id = _tool_id(args, io, clients)
        store.set(tool_id, args.name, value)
        record_write(
            None, action="secret.set", tool_name=args.tool, tool_id=tool_id, secret=args.name
        )
    else:
        _api(args).request("PUT", _tool_path(args.tool, "secrets", args.name), {"value": value})
    print(f"set secret {args.name} for tool {args.tool}", file=io.stdout)


def _secrets_ls(args: argparse.Namespace, io: Io) -> None:
    if args.aws:
        store, clients = _secret_store(args, io)
        for name in store.names(_tool_id(args, io, clients)):
            print(name, file=io.stdout)
        return
    listed = _api(args).request("GET", _tool_path(args.tool, "secrets"))[0]["secrets"]
    rows = [("NAME", "STATUS")]
    for secret in listed:
        status = "set" if secret["set"] else "not set"
        undeclared = not secret.get("declared", True)
        rows.append((secret["name"], f"{status}, undeclared" if undeclared else status))
    _table_out(rows, io.stdout)


def _secrets_rm(args: argparse.Namespace, io: Io) -> None:
    if args.aws:
        store, clients = _secret_store(args, io)
        tool_id = _tool_id(args, io, clients)
        store.delete(tool_id, args.name)
        record_write(
            None, action="secret.delete", tool_name=args.tool, tool_id=tool_id, secret=args.name
        )
    else:
        _api(args).request("DELETE", _tool_path(args.tool, "secrets", args.name))
    print(f"removed secret {args.name} from tool {args.tool}", file=io.stdout)


def _read_value(name: str, io: Io) -> str:
    """From a hidden prompt on a terminal, else all of stdin less one trailing newline."""
    if io.stdin.isatty():
        value = getpass.getpass(f"value for {name} (hidden): ")
    else:
        value = io.stdin.read()
        if value.endswith("\r\n"):
            value = value[:-2]
        elif value.endswith("\n"):
            value = value[:-1]
    if not value:
        raise CliError("no secret value given: pipe it on stdin or type it at the prompt")
    return value


def _table_out(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        print(line.rstrip(), file=out)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m kiln.cli.keys`), the same commands as `kiln keys|secrets`."""
    parser = argparse.ArgumentParser(prog="kiln")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
