"""A tool's `connections`: the OAuth providers (and scopes) whose per-caller token its script
needs, `[{"provider": "github", "scopes": ["repo"]}]` (kiln.connections keeps the tokens)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from kiln.catalog.violations import MISSING, Violation, violation

MAX_CONNECTIONS: Final = 8
MAX_SCOPES: Final = 32
PROVIDER: Final = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
SCOPE: Final = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1,128}$")  # RFC 6749 scope-token


def check_connections(value: object, found: list[Violation]) -> tuple[Mapping[str, Any], ...]:
    """Each entry `{"provider": NAME, "scopes": [...]}`, a provider named once."""
    if value is MISSING or value is None or value == []:
        return ()
    if not isinstance(value, list | tuple) or len(value) > MAX_CONNECTIONS:
        found.append(violation(
            "connections", "type",
            f'must be a list of at most {MAX_CONNECTIONS} objects like '
            '{"provider": "github", "scopes": ["repo"]}',
        ))  # fmt: skip
        return ()
    kept: list[Mapping[str, Any]] = []
    for index, entry in enumerate(value):
        where = f"connections[{index}]"
        if not isinstance(entry, Mapping) or set(entry) - {"provider", "scopes"}:
            found.append(
                violation(where, "type", 'must be an object with "provider" and "scopes" only')
            )
            continue
        provider = entry.get("provider")
        if not isinstance(provider, str) or not PROVIDER.fullmatch(provider):
            found.append(violation(
                f"{where}.provider", "name",
                "must be a provider name: 1-32 characters from a-z 0-9 -, starting with a letter",
            ))  # fmt: skip
            continue
        scopes = entry.get("scopes", [])
        if (
            not isinstance(scopes, list | tuple)
            or len(scopes) > MAX_SCOPES
            or not all(isinstance(s, str) and SCOPE.fullmatch(s) for s in scopes)
        ):
            found.append(violation(
                f"{where}.scopes", "type",
                f"must be a list of at most {MAX_SCOPES} OAuth scope tokens (no spaces or quotes)",
            ))  # fmt: skip
            continue
        kept.append({"provider": provider, "scopes": list(dict.fromkeys(scopes))})
    names = [entry["provider"] for entry in kept]
    if len(set(names)) != len(names):
        found.append(violation("connections", "unique", "must not name a provider twice"))
    return tuple(kept)
