"""`kiln approvals ls | approve ID | deny ID [--reason TEXT]`: approvals waiting for you.

Over `/api/approvals` with the command's key (`--key`, KILN_API_KEY): `ls` lists the
approvals that key is an approver of (pending first, then decided ones still kept), `approve`
lets a waiting call run (once), `deny` ends it unrun, saying why. A refusal (not your
approval to decide, already decided, expired) prints the server's reason and exits 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from kiln.cli import output


def _path(approval_id: str, action: str = "") -> str:
    return f"/api/approvals/{quote(approval_id, safe='')}" + (f"/{action}" if action else "")


@output.talks("approvals ls")
def cmd_ls(args: argparse.Namespace) -> int:
    found, _ = output.client(args).request("GET", "/api/approvals")
    approvals = found.get("approvals", []) if isinstance(found, dict) else []
    if not args.all:
        approvals = [a for a in approvals if a["state"] == "pending"]
    return output.listing(approvals, _line, as_json=args.json, empty="no approvals wait for you")


def _line(approval: dict[str, Any]) -> str:
    arguments = json.dumps(approval.get("arguments", {}), ensure_ascii=False)
    if len(arguments) > 60:
        arguments = arguments[:59] + "…"
    mark = "" if approval.get("can_decide") else "  (not yours to decide)"
    return (
        f"{approval['id']}  {approval['state']:8} {approval['tool']}@{approval['revision']} "
        f"{arguments}  by {approval['caller']} at {approval['created_at']}, until "
        f"{approval['expires_at']}{mark}"
    )


def _decide(args: argparse.Namespace, action: str, body: dict[str, Any] | None) -> int:
    done, _ = output.client(args).request("POST", _path(args.id, action), body)
    by = done.get("decided_by")
    print(f"{done['id']} {done['state']} by {by}: {done['tool']}@{done['revision']}")
    return 0


@output.talks("approvals approve")
def cmd_approve(args: argparse.Namespace) -> int:
    return _decide(args, "approve", None)


@output.talks("approvals deny")
def cmd_deny(args: argparse.Namespace) -> int:
    return _decide(args, "deny", {"reason": args.reason} if args.reason else {})


def register(commands: Any, server_options: Any) -> None:
    """Add `approvals` and its subcommands to the `kiln` parser."""
    approvals = commands.add_parser(
        "approvals", help="calls waiting for your approval: ls, approve, deny"
    )
    sub = approvals.add_subparsers(dest="approvals_command", required=True)
    ls = output.subcommand(
        sub, "ls", cmd_ls, "approvals waiting for you", json=True, options=server_options
    )
    ls.add_argument("--all", action="store_true", help="decided and expired ones too")
    output.subcommand(
        sub, "approve", cmd_approve, "let a waiting call run, once", "id", options=server_options
    )
    deny = output.subcommand(
        sub, "deny", cmd_deny, "end a waiting call unrun", "id", options=server_options
    )
    deny.add_argument("--reason", help="why (shown to the caller, kept in the ledger)")
