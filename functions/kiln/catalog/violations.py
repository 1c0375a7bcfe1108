"""How a save rule reports a problem: one `Violation` per broken rule, all raised together."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from kiln.errors import KilnError


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (`field`), which (`rule`), and a sentence saying so."""

    field: str
    rule: str
    message: str


class RuleError(KilnError, ValueError, status=422, rest_code="invalid_tool"):
    """A submitted definition broke one or more rules; `violations` lists every one."""

    def __init__(self, violations: Iterable[Violation]) -> None:
        self.violations: tuple[Violation, ...] = tuple(violations)
        # Each message is a sentence ending in "."; joined, only the last keeps it.
        parts = [v.message.removesuffix(".") for v in self.violations]
        message = "; ".join(parts) + ("." if parts else "")
        super().__init__(message, data={"violations": self.as_dicts()})

    def as_dicts(self) -> list[dict[str, str]]:
        """The violations as JSON-ready objects, for an API error body."""
        return [{"field": v.field, "rule": v.rule, "message": v.message} for v in self.violations]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def violation(field: str, rule: str, text: str) -> Violation:
    return Violation(field, rule, f"{field} {text} (rule: {rule}).")


def escaped(key: object, limit: int = 64) -> str:
    """A submitted key as it may appear in a field path: shortened, control characters escaped."""
    text = str(key)
    short = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(short, ensure_ascii=False)[1:-1]


def encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
