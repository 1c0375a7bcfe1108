"""`kiln tools show | history | diff | restore`: a tool and its revisions, through the REST API.

`show NAME` prints the tool's head: its revision, fingerprint (what a view pins with
`NAME@sha256:…` and a client may send in a call's `_meta`), description and packages.
`history NAME` lists its revisions, each with its fingerprint under the tool's name now
(`GET /api/tools/NAME/revisions`). `diff NAME@A NAME@B` (or
`NAME A B`) prints a unified diff of two revisions as a tool folder holds them: `tool.json`
(what the author writes, as `kiln tools pull` writes it) and the script, below `#` lines naming
what B breaks for A's clients (kiln.catalog.breaking); it exits 0 whether
or not they differ, as `git diff` does, and prints nothing when they define the same tool
(extra files of a tool are not compared: revisions are read without them). `restore NAME REV`
makes a new head revision that copies REV, sending the head it read (or `--if-head N`) as
`If-Match`, so that a save made meanwhile is never overwritten. A revision is a number; `r3`
(as `kiln tools list` shows it) and `head` are accepted too.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kiln.cli import output

if TYPE_CHECKING:
    from kiln.cli.client import KilnClient

# What a revision defines, as a tool folder's tool.json holds it (bundle_id is computed).
MANIFEST_FIELDS = (
    "title", "description", "language", "requirements", "input_schema", "output_schema",
    "annotations", "timeout_seconds", "secrets", "task", "tags", "calls",
)  # fmt: skip
_REV = re.compile(r"r?([1-9][0-9]{0,8})|head")


class RevisionSyntaxError(ValueError):
    """A NAME@REV or REV the command cannot read; the text says what it expects."""


def revision_number(text: str) -> int | None:
    """The revision `text` names: a number (`3`, `r3`), or None for `head`."""
    found = _REV.fullmatch(text.strip().lower())
    if found is None:
        raise RevisionSyntaxError(
            f"{text!r} is not a revision: give its number (3, or r3 as `kiln tools list` "
            "shows it) or head"
        )
    return int(found.group(1)) if found.group(1) else None


def split_ref(text: str) -> tuple[str, int | None]:
    """NAME@REV as (name, number or None for head)."""
    name, at, rev = text.rpartition("@")
    if not at or not name or not rev:
        raise RevisionSyntaxError(
            f"{text!r} is not NAME@REV: name a tool and a revision, e.g. add_vat@1 add_vat@3 "
            "(or: kiln tools diff add_vat 1 3)"
        )
    return name, revision_number(rev)


def _tool_path(name: str) -> str:
    return f"/api/tools/{quote(name, safe='')}"


def _revision(client: KilnClient, name: str, number: int | None) -> dict[str, Any]:
    """One revision with its code; None is the head."""
    if number is None:
        head, _ = client.request("GET", _tool_path(name))
        number = int(head["revision"])
    body, _ = client.request("GET", f"{_tool_path(name)}/revisions/{number}")
    return dict(body)


def _folder(body: dict[str, Any]) -> dict[str, str]:
    """A revision as a tool folder holds it: file name -> text."""
    manifest = {key: body[key] for key in MANIFEST_FIELDS if body.get(key) is not None}
    from kiln.catalog.files import SCRIPTS

    script = SCRIPTS.get(str(body.get("language")), "main")
    return {"tool.json": json.dumps(manifest, indent=2) + "\n", script: body.get("code") or ""}


def unified(old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str) -> str:
    """A unified diff of two revisions, file by file (empty when they define the same tool);
    a script only one of them has (the language changed) is diffed against /dev/null."""
    before, after = _folder(old), _folder(new)
    lines: list[str] = []
    for name in dict.fromkeys([*before, *after]):
        lines.extend(
            difflib.unified_diff(
                before.get(name, "").splitlines(keepends=True),
                after.get(name, "").splitlines(keepends=True),
                f"{old_label}/{name}" if name in before else "/dev/null",
                f"{new_label}/{name}" if name in after else "/dev/null",
            )
        )
    ended = (line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
             for line in lines)  # fmt: skip
    return "".join(ended)


@output.talks("tools history")
def cmd_history(args: argparse.Namespace) -> int:
    body, _ = output.client(args).request("GET", f"{_tool_path(args.name)}/revisions")
    revisions = sorted(body["revisions"], key=lambda r: r["revision"], reverse=True)
    return output.listing(revisions, _revision_line, as_json=args.json)


def _revision_line(revision: dict[str, Any]) -> str:
    restored = revision.get("restored_from")
    note = f"restored from r{restored}" if restored else ""
    return (
        f"r{revision['revision']:<4} {revision.get('created_at') or '-':24} "
        f"{revision.get('created_by') or '-':20} {revision['code_sha256'][:12]} "
        f"{revision.get('fingerprint') or '-'} {note}"
    )


@output.talks("tools show")
def cmd_show(args: argparse.Namespace) -> int:
    tool, _ = output.client(args).request("GET", _tool_path(args.name))
    if args.json:
        print(json.dumps(tool, indent=2))
        return 0
    state = "enabled" if tool["enabled"] else "disabled"
    rows = [
        ("name", tool["name"]),
        ("revision", f"r{tool['revision']} ({state})"),
        ("fingerprint", tool.get("fingerprint") or "-"),
        ("title", tool.get("title") or "-"),
        ("description", tool.get("description") or ""),
        ("language", tool.get("language") or ""),
        ("requirements", " ".join(tool.get("requirements") or []) or "-"),
        ("bundle", tool.get("bundle_id") or "-"),
        ("tags", " ".join(f"#{tag}" for tag in tool.get("tags") or []) or "-"),
        ("updated", tool.get("updated_at") or ""),
    ]
    for label, value in rows:
        print(f"{label + ':':14}{value}")
    return 0


@output.talks("tools diff")
def cmd_diff(args: argparse.Namespace) -> int:
    try:
        if len(args.refs) == 2:
            (name_a, rev_a), (name_b, rev_b) = (split_ref(ref) for ref in args.refs)
        elif len(args.refs) == 3 and "@" not in args.refs[0]:
            name_a = name_b = args.refs[0]
            rev_a, rev_b = (revision_number(ref) for ref in args.refs[1:])
        else:
            raise RevisionSyntaxError(
                "give two revisions: NAME@A NAME@B (e.g. add_vat@1 add_vat@3) or NAME A B"
            )
    except RevisionSyntaxError as error:
        return output.fail("tools diff", error, status=2)
    client = output.client(args)
    old, new = _revision(client, name_a, rev_a), _revision(client, name_b, rev_b)
    labels = f"{name_a}@{old['revision']}", f"{name_b}@{new['revision']}"
    print(breaking_lines(old, new, *labels) + unified(old, new, *labels), end="")
    return 0


def breaking_lines(old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str) -> str:
    """What going from `old` to `new` breaks for the tool's clients, as `#` lines above the
    diff (patch tools skip them); empty when nothing breaks."""
    from kiln.catalog.breaking import findings

    found = findings(old, new)
    if not found:
        return ""
    lines = [f"# breaking: {old_label} -> {new_label} breaks {len(found)} thing(s) for clients"]
    lines += [f"#   {finding.kind:20} {finding.message}" for finding in found]
    if new.get("breaking"):
        lines.append(f"# {new_label} was saved as breaking (it said so)")
    return "\n".join(lines) + "\n"


@output.talks("tools restore")
def cmd_restore(args: argparse.Namespace) -> int:
    try:
        number = revision_number(args.revision)
        if number is None:
            raise RevisionSyntaxError("the head is the head already: name an earlier revision")
    except RevisionSyntaxError as error:
        return output.fail("tools restore", error, status=2)
    client = output.client(args)
    head = args.if_head
    if head is None:
        current, _ = client.request("GET", _tool_path(args.name))
        head = int(current["revision"])
    path = f"{_tool_path(args.name)}/revisions/{number}/restore"
    path += "?breaking=true" if args.breaking else ""
    tool, _ = client.request("POST", path, headers={"If-Match": f'"{head}"'})
    if tool["revision"] == head:
        print(f"unchanged {tool['name']}: r{head} already is what r{number} was")
    else:
        print(f"restored  {tool['name']} r{number} as r{tool['revision']}")
    return 0


def register(tools: Any, server_options: Any) -> None:
    """Add `show`, `history`, `diff` and `restore` to `kiln tools`."""
    show = output.subcommand(
        tools, "show", cmd_show, "a tool's head, with its fingerprint", "name",
        options=server_options,
    )  # fmt: skip
    show.add_argument("--json", action="store_true", help="print the REST body as JSON")
    output.subcommand(
        tools, "history", cmd_history, "a tool's revisions, newest first", "name", json=True,
        options=server_options,
    )  # fmt: skip

    diff = server_options(
        tools.add_parser(
            "diff",
            help="unified diff of two revisions (tool.json and the script)",
            description="kiln tools diff NAME@A NAME@B, or kiln tools diff NAME A B "
            "(a revision: 3, r3 or head)",
        )
    )
    diff.add_argument("refs", nargs="+", metavar="NAME@REV")
    diff.set_defaults(func=cmd_diff)

    restore = server_options(
        tools.add_parser("restore", help="make a new head revision that copies REV")
    )
    restore.add_argument("name")
    restore.add_argument("revision", metavar="REV")
    restore.add_argument(
        "--if-head",
        type=int,
        metavar="N",
        help="restore only if the head is still rN (default: the head read just before)",
    )
    restore.add_argument(
        "--breaking", action="store_true", help="restore even if it breaks the head's clients"
    )
    restore.set_defaults(func=cmd_restore)
