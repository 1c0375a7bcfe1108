"""Breaking changes: what a new revision takes away from the clients of the one it replaces.

`findings(old, new)` compares two definitions (mappings with `input_schema`, `output_schema`,
`annotations`, `secrets` and, when present, `connections`) and lists what could break a client
that worked with `old`:

- inputs are read contravariantly: `new` must accept every argument object `old` accepted (a
  new required input, a removed or renamed one, a narrowed type, enum, range or pattern, extra
  properties closed off);
- outputs covariantly: `new` must produce nothing `old`'s consumers would not accept (a removed
  or retyped field, a field no longer required, a wider type or enum, the schema dropped);
- annotations by their MCP defaults (readOnlyHint false, destructiveHint true, idempotentHint
  false, openWorldHint true): read-only to writing, non-destructive to destructive, idempotent
  to not, closed to open world (a read-only tool's destructive and idempotent hints are moot);
- a new secret or a new connection: the tool asks for something its owner has not granted.

The schemas are compared by `kiln.catalog.narrowing` (local `$ref`s inlined; what cannot be
proven wider, such as a changed `pattern`, reported; descriptions and property order ignored).

No maintained library fits (checked 2026-12): jsoncompat (Rust, PyPI binding) calls itself
alpha with known misses, jsonschema-changelog is young and single-author; neither knows MCP
annotations, secrets or connections. The rules here are few and each is pinned by the labelled
pairs in tests/unit/catalog/breaking_cases.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kiln.catalog.errors import BreakingChangeError
from kiln.catalog.narrowing import Finding, canonical, compare
from kiln.catalog.violations import RuleError, violation

# MCP's defaults for absent hints, and which value is the weaker promise.
_HINTS = {
    "readOnlyHint": (False, False),  # (default, weaker value)
    "destructiveHint": (True, True),
    "idempotentHint": (False, False),
    "openWorldHint": (True, True),
}
_MOOT_WHEN_READ_ONLY = ("destructiveHint", "idempotentHint")


def findings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Finding]:
    """What `new` breaks for the clients of `old` (empty: nothing)."""
    found: list[Finding] = []
    old_in, new_in = old.get("input_schema") or {}, new.get("input_schema") or {}
    found.extend(compare("input", old_in, new_in, "input_schema"))
    found.extend(_output(old.get("output_schema"), new.get("output_schema")))
    found.extend(_annotations(old.get("annotations") or {}, new.get("annotations") or {}))
    found.extend(_added("secrets", "new-secret", old.get("secrets"), new.get("secrets")))
    found.extend(
        _added("connections", "new-connection", old.get("connections"), new.get("connections"))
    )
    return found


def checked(
    name: str, old: Mapping[str, Any], new: Mapping[str, Any], *, breaking: bool
) -> tuple[dict[str, Any], ...]:
    """What a save of `new` over `old` breaks, to record on the revision when the save says
    it is breaking; BreakingChangeError (nothing written) when it breaks something and does
    not say so."""
    found = findings(old, new)
    if found and not breaking:
        lines = "\n".join(f"- {finding.message}" for finding in found)
        raise BreakingChangeError(
            f"{name}: this save breaks clients of the current revision, and was not marked "
            f"breaking (nothing was saved):\n{lines}\nTo save it anyway, say so: "
            '`kiln tools push --breaking`, "breaking": true in the body (REST, '
            'kiln_update_tool), or the studio\'s "breaking change" box',
            findings=[finding.to_json() for finding in found],
        )
    return tuple(finding.to_json() for finding in found)


def said_breaking(payload: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """The payload without its `breaking` flag, and the flag (RuleError unless a boolean)."""
    if "breaking" not in payload:
        return payload, False
    said = payload["breaking"]
    if not isinstance(said, bool):
        raise RuleError([violation("breaking", "type", "must be true or false")])
    return {k: v for k, v in payload.items() if k != "breaking"}, said


def _output(old: Any, new: Any) -> list[Finding]:
    if not isinstance(old, Mapping):
        return []  # a first output schema promises more; none before, nothing to break
    if not isinstance(new, Mapping):
        return [
            Finding(
                "removed-output-schema",
                "output_schema",
                "present",
                None,
                "output_schema: removed; clients reading structured content lose it",
            )
        ]
    # Covariant: what the new tool produces must still pass the old schema its clients read by.
    return compare("output", new, old, "output_schema")


def _annotations(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Finding]:
    found = []
    read_only_now = new.get("readOnlyHint", False) is True
    for hint, (default, weaker) in _HINTS.items():
        if read_only_now and hint in _MOOT_WHEN_READ_ONLY:
            continue
        was, now = old.get(hint, default), new.get(hint, default)
        if was != weaker and now == weaker:
            found.append(
                Finding(
                    "weaker-annotation",
                    f"annotations/{hint}",
                    was,
                    now,
                    f"annotations/{hint}: {was} -> {now}, a weaker promise",
                )
            )
    return found


def _added(field: str, kind: str, old: Any, new: Any) -> list[Finding]:
    before = {_label(item) for item in _entries(old)}
    return [
        Finding(
            kind,
            f"{field}/{_label(item)}",
            None,
            item,
            f"{field}/{_label(item)}: new; its owner has not granted it",
        )
        for item in _entries(new)
        if _label(item) not in before
    ]


def _entries(value: Any) -> list[Any]:
    if isinstance(value, Mapping):  # {name: details}
        return [{"name": key, **(v if isinstance(v, Mapping) else {})} for key, v in value.items()]
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def _label(item: Any) -> str:
    if isinstance(item, Mapping):
        return str(item.get("name") or item.get("id") or canonical(item))
    return str(item)


__all__: Sequence[str] = ("Finding", "checked", "findings", "said_breaking")
