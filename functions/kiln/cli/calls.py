"""`kiln calls`: the call ledger of a running server (REST), an outer call's inner calls as a tree.

A page is shown newest first; an entry whose parent (the call that made it: a script's inner
call, a code-mode `execute`'s) is on the same page is drawn under it, its inner calls in time
order (`├─`, `└─`); one whose parent is not on the page is marked `↳ <parent id>`.
`--tree ID` shows a call and every call inside it, found with the ledger's `parent` filter: the
first level over the window of `--since`/`--until` (give `--since` the call's time to make it
quick), each level below within its parent's own run time.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from kiln.accounting.ledger import OUTCOMES
from kiln.cli import output

if TYPE_CHECKING:
    from kiln.cli.client import KilnClient

Entry = dict[str, Any]
HEADER = ("AT", "CALLER", "TOOL", "OUTCOME", "DURATION", "VIEW", "ID")
NOT_WITH_TREE = ("tool", "caller", "outcome", "limit", "totals")
ROOT_SEARCH = 1000  # entries read back from a tree's first inner call to find the call itself


def register(commands: Any, remote: Callable[[argparse.ArgumentParser], Any]) -> None:
    """Add `kiln calls`; `remote` adds --url/--key."""
    calls = remote(commands.add_parser("calls", help="the call ledger: who called what"))
    calls.add_argument("--tool")
    calls.add_argument("--caller", help="key:<name>, jwt:<subject> or anonymous")
    calls.add_argument("--outcome", choices=list(OUTCOMES))
    calls.add_argument("--since", help="ISO 8601 time or date")
    calls.add_argument("--until", help="ISO 8601 time or date")
    calls.add_argument("--limit", type=int, help="entries to show (default 50)")
    calls.add_argument("--json", action="store_true", help="one JSON object per line")
    calls.add_argument("--totals", metavar="DAY", help="per-key and per-tool totals of a day")
    calls.add_argument(
        "--tree", metavar="ID", help="a call and every call inside it (with --since, --until)"
    )
    calls.set_defaults(func=cmd_calls)


@output.talks("calls")
def cmd_calls(args: argparse.Namespace) -> int:
    mixed = [f"--{name}" for name in NOT_WITH_TREE if getattr(args, name) is not None]
    if args.tree and mixed:
        shown = ", ".join(mixed)
        why = f"--tree shows a call and every call inside it: {shown} cannot be used with it"
        return output.fail("calls", why, status=2)
    client = output.client(args)
    if args.totals:
        day = urllib.parse.quote(args.totals)
        body, _ = client.request("GET", f"/api/calls/totals?day={day}")
        print_totals(body)
        return 0
    entries = call_tree(client, args) if args.tree else ledger_entries(client, args)
    if args.json:
        for entry in entries:
            print(json.dumps(entry, sort_keys=True))
    elif entries:
        output.print_rows([HEADER, *rows(entries)])
    elif args.tree:
        return output.fail("calls", f"no call {args.tree} nor any call inside it found")
    return 0


def rows(entries: list[Entry]) -> Iterator[tuple[str, ...]]:
    """The page's rows: each entry under its parent when the parent is on the page."""
    ids = {entry["id"] for entry in entries}
    children: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.get("parent") in ids:
            children.setdefault(entry["parent"], []).append(entry)
    for kin in children.values():
        kin.sort(key=lambda entry: (entry["at"], entry["id"]))
    shown: set[str] = set()

    def under(entry: Entry, lead: str, branch: str, mark: str = "") -> Iterator[tuple[str, ...]]:
        shown.add(entry["id"])
        yield _row(entry, lead + branch + mark)
        kin = [child for child in children.get(entry["id"], []) if child["id"] not in shown]
        inner = lead + {"": "", "└─ ": "   "}.get(branch, "│  ")
        for index, child in enumerate(kin):
            yield from under(child, inner, "└─ " if index == len(kin) - 1 else "├─ ")

    for entry in entries:
        parent = entry.get("parent")
        if entry["id"] not in shown and parent not in ids:
            yield from under(entry, "", "", f"↳ {parent} " if parent else "")
    for entry in entries:  # a cycle, which no server writes: shown, never lost
        if entry["id"] not in shown:
            yield from under(entry, "", "")


def _row(entry: Entry, lead: str) -> tuple[str, ...]:
    revision = entry.get("revision")
    tool = entry["tool"] if revision is None else f"{entry['tool']}@{revision}"
    return (
        entry["at"],
        entry["caller"],
        lead + tool,
        entry["outcome"],
        f"{entry['duration_ms']:.1f} ms",
        entry.get("view") or "-",
        entry.get("id") or "-",
    )


def ledger_entries(
    client: KilnClient, args: argparse.Namespace, **fixed: str
) -> list[dict[str, Any]]:
    """Up to `--limit` entries matching the command's filters (and `fixed` ones), newest first."""
    query = {
        key: value
        for key in ("tool", "caller", "outcome", "since", "until")
        if (value := getattr(args, key))
    }
    query.update(fixed)
    wanted = max(1, 50 if args.limit is None else args.limit)
    found: list[dict[str, Any]] = []
    cursor = None
    while len(found) < wanted:
        page = {**query, "limit": str(min(1000, wanted - len(found)))}
        if cursor:
            page["cursor"] = cursor
        body, _ = client.request("GET", "/api/calls?" + urllib.parse.urlencode(page))
        found.extend(body["calls"])
        cursor = body.get("next_cursor")
        if not cursor:
            break
    return found


def call_tree(client: KilnClient, args: argparse.Namespace) -> list[Entry]:
    """The call `args.tree` (when found) and every call inside it, each level found by its
    parent's id, below the first level within the parent's own run (`at` plus its duration)."""
    plain = argparse.Namespace(tool=None, caller=None, outcome=None, since=args.since,
                               until=args.until, limit=1000)  # fmt: skip
    found = ledger_entries(client, plain, parent=args.tree)
    level = list(found)
    while level:
        below: list[Entry] = []
        for entry in level:
            start = datetime.fromisoformat(entry["at"].replace("Z", "+00:00"))
            end = start + timedelta(milliseconds=entry["duration_ms"], seconds=1)
            window = argparse.Namespace(**{**vars(plain), "since": _iso(start), "until": _iso(end)})
            below += ledger_entries(client, window, parent=entry["id"])
        found += below
        level = below
    first = min((entry["at"] for entry in found), default=args.until)
    search = argparse.Namespace(**{**vars(plain), "until": first, "limit": ROOT_SEARCH})
    root = [entry for entry in ledger_entries(client, search) if entry["id"] == args.tree]
    return sorted(root + found, key=lambda entry: (entry["at"], entry["id"]), reverse=True)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def print_totals(body: dict[str, Any]) -> None:
    columns = ("calls", "ok", "tool_error", "timeout", "refused", "not_ready", "run_seconds")
    print(f"{body['day']}: {body['all']['calls']} calls")
    for title, table in (("caller", body["by_caller"]), ("tool", body["by_tool"])):
        width = max([28, *(len(name) for name in table)])
        print(f"\n{title:{width}} " + " ".join(f"{c:>11}" for c in columns))
        for name in sorted(table):
            print(f"{name:{width}} " + " ".join(f"{table[name][c]:>11}" for c in columns))
