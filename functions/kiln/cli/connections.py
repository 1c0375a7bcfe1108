"""`kiln connections …`: each caller's own OAuth connections, through a server's REST API.

    kiln connections providers add github --issuer URL --client-id ID [--scopes a,b]
    kiln connections providers add github --authorize-url U --token-url U --client-id ID
    kiln connections providers add corp --issuer URL --client-id ID --token-exchange
    kiln connections providers ls | rm NAME
    kiln connections connect github      # prints a link to open in a browser
    kiln connections ls [--all]          # yours (--all: everyone's, author key)
    kiln connections revoke github [--identity key:ID]

The client secret is read from stdin when piped, else from a hidden prompt (empty: a public
client); it is never printed. `--key` is the caller's own key for ls, connect and revoke.
`--token-exchange`: OAuth callers get this provider's token by exchanging their own (RFC 8693,
for a provider that trusts the IdP this server's callers sign in with), with no consent page.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any
from urllib.parse import quote

from kiln.cli.client import ApiCallError, client_for
from kiln.cli.locate import ServerNotFoundError, server_options
from kiln.cli.output import print_rows


def register(subparsers: Any) -> None:
    group = subparsers.add_parser(
        "connections", help="callers' own OAuth connections: providers, connect, ls, revoke"
    )
    commands = group.add_subparsers(dest="connections_command", metavar="COMMAND", required=True)
    providers = commands.add_parser("providers", help="OAuth providers: add, ls, rm")
    provider_commands = providers.add_subparsers(dest="providers_command", required=True)
    add = provider_commands.add_parser("add", help="register or change a provider")
    add.add_argument("name")
    add.add_argument("--issuer", help="read the endpoints from this issuer's metadata")
    add.add_argument("--authorize-url")
    add.add_argument("--token-url")
    add.add_argument("--revoke-url")
    add.add_argument("--client-id", required=True)
    add.add_argument("--scopes", default="", help="comma-separated scopes always asked for")
    add.add_argument(
        "--token-exchange",
        action="store_true",
        help="OAuth callers get their token by exchanging their own (RFC 8693) at the token "
        "URL, with no consent page: for a provider that trusts the same IdP as this server",
    )
    add.add_argument("--exchange-audience", help="the `audience` asked in a token exchange")
    add.set_defaults(func=_run(_add))
    listed = provider_commands.add_parser("ls", help="list providers (never their secrets)")
    listed.set_defaults(func=_run(_providers_ls))
    remove = provider_commands.add_parser("rm", help="remove a provider and its secret")
    remove.add_argument("name")
    remove.set_defaults(func=_run(_providers_rm))
    connect = commands.add_parser("connect", help="print a link that connects your account")
    connect.add_argument("provider")
    connect.add_argument("--scopes", default="", help="comma-separated scopes your tools need")
    connect.set_defaults(func=_run(_connect))
    mine = commands.add_parser("ls", help="your connections (never a token)")
    mine.add_argument("--all", action="store_true", help="everyone's (author key)")
    mine.set_defaults(func=_run(_ls))
    revoke = commands.add_parser("revoke", help="revoke a connection")
    revoke.add_argument("provider")
    revoke.add_argument("--identity", help="another caller's (author key), e.g. key:ID")
    revoke.set_defaults(func=_run(_revoke))
    for parser in (add, listed, remove, connect, mine, revoke):
        server_options(parser)


def _run(handler: Any) -> Any:
    def func(args: argparse.Namespace) -> int:
        try:
            handler(args, client_for(args))
        except (ApiCallError, ServerNotFoundError, ValueError) as error:
            print(f"kiln connections: {error}", file=sys.stderr)
            return 1
        return 0

    return func


def _secret() -> str | None:
    if sys.stdin.isatty():
        value = getpass.getpass("client secret (hidden; empty for a public client): ")
    else:
        value = sys.stdin.read().rstrip("\r\n")
    return value or None


def _add(args: argparse.Namespace, api: Any) -> None:
    body: dict[str, Any] = {"client_id": args.client_id}
    for field in ("issuer", "authorize_url", "token_url", "revoke_url"):
        if getattr(args, field):
            body[field] = getattr(args, field)
    body["scopes"] = [s for s in args.scopes.replace(" ", ",").split(",") if s]
    if args.token_exchange:
        body["token_exchange"] = True
    if args.exchange_audience is not None:
        body["exchange_audience"] = args.exchange_audience
    secret = _secret()
    if secret is not None:
        body["client_secret"] = secret
    shown = api.request("PUT", f"/api/connections/providers/{quote(args.name, safe='')}", body)[0]
    exchange = ", token exchange" if shown.get("token_exchange") else ""
    print(f"provider {shown['name']}: {shown['authorize_url']} (scopes: "
          f"{' '.join(shown['scopes']) or '-'}{exchange})")  # fmt: skip


def _providers_ls(args: argparse.Namespace, api: Any) -> None:
    found = api.request("GET", "/api/connections/providers")[0]["providers"]
    rows = [("NAME", "CLIENT", "SCOPES", "EXCHANGE", "AUTHORIZE")]
    rows += [(p["name"], p["client_id"], " ".join(p["scopes"]) or "-",
              "yes" if p.get("token_exchange") else "-", p["authorize_url"])
             for p in found]  # fmt: skip
    print_rows(rows)


def _providers_rm(args: argparse.Namespace, api: Any) -> None:
    api.request("DELETE", f"/api/connections/providers/{quote(args.name, safe='')}")
    print(f"removed provider {args.name}")


def _connect(args: argparse.Namespace, api: Any) -> None:
    scopes = [s for s in args.scopes.replace(" ", ",").split(",") if s]
    path = f"/api/connections/{quote(args.provider, safe='')}/connect"
    found = api.request("POST", path, {"scopes": scopes})[0]
    print(found["url"])
    print("open it in a browser within 10 minutes to connect", file=sys.stderr)


def _ls(args: argparse.Namespace, api: Any) -> None:
    found = api.request("GET", "/api/connections" + ("?all=true" if args.all else ""))[0]
    rows = [("IDENTITY", "PROVIDER", "SCOPES", "CONNECTED", "TOKEN EXPIRES")]
    rows += [(c["identity"], c["provider"], " ".join(c["scopes"]) or "-", c["connected_at"],
              c["expires_at"] or "-") for c in found["connections"]]  # fmt: skip
    print_rows(rows)


def _revoke(args: argparse.Namespace, api: Any) -> None:
    path = f"/api/connections/{quote(args.provider, safe='')}"
    if args.identity:
        path += f"?identity={quote(args.identity, safe='')}"
    done = api.request("DELETE", path)[0]
    print(f"revoked {done['provider']} for {done['identity']}")
