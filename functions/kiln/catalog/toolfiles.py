"""The files a tool ships beside its script (data, helper modules): the rules they obey.

They travel in the REST API as `"files": {"<relative path>": "<base64>"}`, are stored by
content address like the code (`files/<sha256>`), and are written into the run's working
directory next to the script, so `open("rates.json")` and `import helpers` just work.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from kiln.catalog.model import Draft, Revision, Tool, definition_of

MAX_FILES: Final = 100
MAX_FILE_BYTES: Final = 256 * 1024
MAX_FILES_BYTES: Final = 512 * 1024  # all of a tool's files together (before base64)
# main.cjs: what a run names a Node script beside its files (kiln.runner.runner.SCRIPT_NAMES)
RESERVED: Final = frozenset({"tool.json", "main.py", "main.js", "main.cjs"})
HELPER: Final = "kiln_tools"  # every run's helper for calling tools (kiln.runner.shipped)
PATH_RULE: Final = (
    "a relative path of at most 200 characters from A-Z a-z 0-9 . _ - and /, "
    "with no empty, '.' or '..' part and no part starting with '.'"
)
_PART = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")

# (field, rule, message): what catalog.rules turns into Violations.
Problem = tuple[str, str, str]


def path_problem(path: str) -> str | None:
    """Why `path` cannot name a tool file, or None when it can."""
    if len(path) > 200 or not all(_PART.fullmatch(part) for part in path.split("/")):
        return f"must be {PATH_RULE}"
    if path in RESERVED:
        return "is the manifest's or the script's own name; give the file another name"
    first = path.split("/", 1)[0]
    if first == HELPER or first.startswith(HELPER + "."):
        return (
            f"{HELPER} is Kiln's own: every run gets its helper for calling tools there "
            "(`from kiln_tools import tools`, `require('./kiln_tools')`); give the file "
            "another name"
        )
    return None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_files(files: Mapping[str, bytes]) -> dict[str, str]:
    """The REST form of a tool's files: relative path -> base64."""
    return {path: base64.b64encode(data).decode("ascii") for path, data in sorted(files.items())}


def check_files(value: object) -> tuple[dict[str, bytes], list[Problem]]:
    """The files a payload gives (`{path: base64}`), decoded, and every rule they break."""
    if value is None:
        return {}, []
    if not isinstance(value, Mapping):
        return {}, [("files", "type", 'must be an object {"relative/path": "<base64>"}')]
    problems: list[Problem] = []
    if len(value) > MAX_FILES:
        problems.append(("files", "too_many", f"must hold at most {MAX_FILES} files"))
    files: dict[str, bytes] = {}
    for path, encoded in value.items():
        field = f"files[{str(path)[:64]!r}]"
        problem = path_problem(path) if isinstance(path, str) else "must be a string"
        if problem:
            problems.append((field, "path", problem))
            continue
        data = _decode(encoded)
        if data is None:
            problems.append((field, "base64", "must be the file's bytes as a base64 string"))
        elif len(data) > MAX_FILE_BYTES:
            problems.append((field, "too_large", f"must be at most {MAX_FILE_BYTES // 1024} KiB"))
        else:
            files[path] = data
    total = sum(len(data) for data in files.values())
    if total > MAX_FILES_BYTES:
        problems.append(
            ("files", "too_large", f"must be at most {MAX_FILES_BYTES // 1024} KiB together")
        )
    return files, problems


def _decode(encoded: object) -> bytes | None:
    if isinstance(encoded, bytes):  # from a folder on disk: already bytes
        return encoded
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None


def same_revision(revision: Revision, head: Revision) -> bool:
    """Whether `revision` defines the tool exactly as `head` does (who made each and when
    aside): restoring it would change nothing."""
    made = ("number", "created_at", "created_by", "restored_from", "breaking", "fingerprint",
            "saved_as")  # fmt: skip
    return replace(revision, **{field: getattr(head, field) for field in made}) == head


def same_definition(tool: Tool, draft: Draft) -> bool:
    """Whether saving `draft` would change nothing about `tool` (compared by digests)."""
    head = tool.head
    return (
        tool.enabled == draft.enabled
        and head.code_sha256 == digest(draft.code.encode("utf-8"))
        and dict(head.files) == {path: digest(data) for path, data in draft.files.items()}
        and definition_of(head) == definition_of(draft)
    )
