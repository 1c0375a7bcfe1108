"""A revision's fingerprint: SHA-256 over the RFC 8785 (JCS) form of what it is and what runs.

`sha256:<64 hex>`, the same in every process, on every machine and Python, whatever order a
dict was built in (JCS sorts keys by UTF-16 code units and writes numbers as ECMAScript does:
`30.0` and `30` are one number). What is in, and why (catalog/README.md says the same):

| in the form        | because                                                            |
| ------------------ | ------------------------------------------------------------------ |
| name, title, description, input and output schemas, annotations, task | what a client is shown |
| language, code (its sha256), files (path -> sha256), timeout_seconds | what runs, and how long |
| requirements, packages (served) or bundle (stored) | the packages: the exact versions resolved |
| secrets (their names), calls | what the run is given: which secrets, which tools it may call |

Out: the tool's id, the revision's number, who saved it and when, what it was restored from,
its tags (never sent to a client; views select by them) and the tool's enabled flag (state,
not definition; a disabled tool is not served at all). A secret's value is out too: it is
not part of a revision and changes without one.

The packages: a revision stores, at save, the form over its bundle id (the hash of language,
runtime target, normalised requirements, recipe version), as the packages are not built yet.
That id does not name one set of versions: another deployment, or a rebuild after the zip was
lost, may resolve a range to others. So what is served (`served_tool`) takes, in place of the
bundle id, the digest of what the bundle resolved to (its record's `resolved_sha256`,
kiln/bundles/resolved.py), as the snapshot the tool came from read it (catalog/packages.py):
None (shown "pending") while the bundle is not ready; a revision without packages is unchanged
by it, and so is one whose ready bundle was built before records kept the digest.

The name is the tool's, not the revision's (a rename makes no revision): each revision keeps
the fingerprint it had under the name it was saved with (`Revision.fingerprint`, `saved_as`),
and what Kiln serves is `of(tool.name, revision)`: that one unless the tool was renamed since.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kiln.catalog.model import Revision, Tool
from kiln.catalog.packages import LEGACY

PREFIX = "sha256:"
PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
RULE = "a fingerprint is sha256: followed by 64 lower-case hex digits"
FORM = 1  # bumped if what is in the form ever changes, so an old fingerprint cannot match
# The fields of a Revision in the form, by the name they have there; the rest are out.
IN = (
    "title",
    "description",
    "language",
    "input_schema",
    "output_schema",
    "annotations",
    "task",
    "timeout_seconds",
    "requirements",
    "secrets",
    "calls",
    "connections",
)
# Fields added after fingerprints were first taken: in the form only when set, so a revision
# that does not use them keeps the fingerprint it had.
LATER = ("connections",)
# In under another name: code_sha256 as "code", files, bundle_id as "bundle".
RENAMED = ("code_sha256", "files", "bundle_id")
# code_key is where the code is kept (its sha256 and language, both in already).
# breaking: what the save was allowed to break (kiln.catalog.breaking), a fact about the save.
OUT = ("tool_id", "number", "created_at", "created_by", "restored_from", "tags", "code_key",
       "fingerprint", "saved_as", "breaking")  # fmt: skip
_SAFE = 2**53 - 1  # I-JSON's integers; JCS refuses larger ones


def canonical_form(name: str, revision: Revision, packages: str | None = None) -> dict[str, Any]:
    """What the fingerprint is taken over, as plain JSON values.

    `packages`: the digest of what the revision's bundle resolved to (its record's
    `resolved_sha256`, kiln/bundles/resolved.py), which then stands in for the bundle id.
    """
    form: dict[str, Any] = {"form": FORM, "name": name}
    form.update(
        {
            field: _plain(getattr(revision, field))
            for field in IN
            if field not in LATER or getattr(revision, field)
        }
    )
    form["code"] = PREFIX + revision.code_sha256
    form["files"] = {path: PREFIX + sha for path, sha in revision.files.items()}
    if packages is None:
        form["bundle"] = revision.bundle_id
    else:
        form["packages"] = packages
    return form


def canonical_bytes(name: str, revision: Revision, packages: str | None = None) -> bytes:
    import rfc8785  # at a save or after a rename: a listing serves the stored fingerprint

    return rfc8785.dumps(canonical_form(name, revision, packages))


def of(name: str, revision: Revision, packages: str | None = None) -> str:
    """The fingerprint of `revision` under `name` (~0.1 ms for a tool with ten arguments);
    with `packages`, the one that names the exact versions its bundle resolved to."""
    return PREFIX + hashlib.sha256(canonical_bytes(name, revision, packages)).hexdigest()


def sealed(name: str, revision: Revision) -> Revision:
    """The revision as it is saved under `name`: with its fingerprint, and that name."""
    return replace(revision, fingerprint=of(name, revision), saved_as=name)


_served: dict[tuple[str, str], str] = {}


def served(name: str, revision: Revision) -> str:
    """`of(name, revision)`: the stored one while the tool has the name it was saved with,
    else computed once per process for a saved revision and a name.

    The fingerprint stored at save names the revision's content (under the name it was saved
    with), so with the name served it is a key for the result.
    """
    if not revision.fingerprint:
        return of(name, revision)  # saved before fingerprints: computed every time
    if name == revision.saved_as:
        return revision.fingerprint
    key = (name, revision.fingerprint)
    found = _served.get(key)
    if found is None:
        if len(_served) >= 16384:
            _served.clear()
        found = _served[key] = of(name, revision)
    return found


_resolved: dict[tuple[str, str, str], str] = {}


def served_tool(tool: Tool) -> str | None:
    """The fingerprint served for `tool` at its head (a view's pinned revision is its head):
    over the digest of what its bundle resolved to, as the snapshot it came from read it
    (`Tool.packages`); None while that bundle is not ready. A tool without packages, one read
    from the store rather than a snapshot, and one whose ready bundle predates the digest have
    `served(tool.name, tool.head)`. Computed once per process per revision, name and digest."""
    head, packages = tool.head, tool.packages
    if head.bundle_id is None or packages is None:
        return served(tool.name, head)
    digest = packages.get(head.bundle_id)  # not read (never expected): not ready, refused
    if digest is None:
        return None
    if digest == LEGACY:
        return served(tool.name, head)
    if not head.fingerprint:
        return of(tool.name, head, digest)
    key = (tool.name, head.fingerprint, digest)
    found = _resolved.get(key)
    if found is None:
        if len(_resolved) >= 16384:
            _resolved.clear()
        found = _resolved[key] = of(tool.name, head, digest)
    return found


def build_of(tool: Tool) -> str | None:
    """The digest the tool's served fingerprint names for its packages: the build a run of it
    must use (kiln.bundles.cache); None where none is named (no packages, no snapshot, legacy)."""
    bundle_id, packages = tool.head.bundle_id, tool.packages
    if bundle_id is None or packages is None:
        return None
    return packages.get(bundle_id) or None


def is_fingerprint(text: object) -> bool:
    return isinstance(text, str) and PATTERN.fullmatch(text) is not None


def _plain(value: Any) -> Any:
    """JSON values JCS takes: tuples as lists, and integers past 2**53 as the doubles every
    JSON reader that follows I-JSON reads them as."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _SAFE:
        return float(value)
    return value
