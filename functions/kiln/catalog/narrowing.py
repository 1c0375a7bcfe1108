"""Schema narrowing: what one JSON Schema refuses that another accepts, as findings.

The schema half of `kiln.catalog.breaking`. `compare("input", old, new)` lists what `new`
refuses that `old` accepted (a client's arguments); `compare("output", new, old)` what `new`
may produce that `old`'s readers refuse. Local `$ref`s are inlined first (to a depth that ends
recursive schemas), so moving a schema into `$defs` changes nothing. What cannot be proven
wider is reported, never assumed: an added or changed `pattern`, `format`, `multipleOf`,
`not` or `if`, an `anyOf`/`oneOf` that lost a branch, an `allOf` that gained one. Titles,
descriptions, examples, defaults and property order are not contracts and are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeGuard

Side = Literal["input", "output"]
_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
_ANY_TYPE = frozenset(_TYPES)
# Numeric bounds (inclusive key, exclusive key, lower?), and counts (raising a min narrows).
_NUMERIC_BOUNDS = (("minimum", "exclusiveMinimum", True), ("maximum", "exclusiveMaximum", False))
_LENGTHS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
)
_UNPROVABLE = ("pattern", "format", "not", "if", "then", "else", "contentMediaType")
_DEPTH = 16  # nesting (and $ref hops) compared; deeper is left alone


@dataclass(frozen=True)
class Finding:
    """One breaking change: what kind, where (a path into the definition), before and after."""

    kind: str
    path: str
    old: Any
    new: Any
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare(side: Side, wide: Any, narrow: Any, path: str) -> list[Finding]:
    """What `narrow` refuses that `wide` accepts: `wide` the old input schema, or the new
    output schema (`side` words the findings for its clients)."""
    found: list[Finding] = []
    _Compare(found, side).schema(path, _inline(wide, wide), _inline(narrow, narrow), 0)
    return found


class _Compare:
    """Reports what `narrow` refuses that `wide` accepts: `wide` is the old input schema or
    the new output schema, both with their local `$ref`s inlined."""

    def __init__(self, found: list[Finding], side: Side) -> None:
        self.found, self.side = found, side

    def report(self, kind: str, path: str, wide: Any, narrow: Any, what: str) -> None:
        old, new = (wide, narrow) if self.side == "input" else (narrow, wide)
        if self.side == "output" and kind != "removed-output":
            kind, what = "retyped-output", f"{what} (its readers may break)"
        self.found.append(Finding(kind, path, old, new, f"{path}: {what}"))

    def said(self, as_input: str, as_output: str) -> str:
        return as_input if self.side == "input" else as_output

    def schema(self, path: str, wide: Any, narrow: Any, depth: int) -> None:
        if depth > _DEPTH or canonical(wide) == canonical(narrow):
            return
        if canonical(narrow) == canonical(False) or canonical(wide) in _ANYTHING:
            self.report("narrowed-type", path, wide, narrow, "accepted any value, not now")
            return
        if not isinstance(wide, Mapping) or not isinstance(narrow, Mapping):
            return
        self._types(path, wide, narrow)
        self._values(path, wide, narrow)
        self._bounds(path, wide, narrow)
        self._unprovable(path, wide, narrow)
        self._objects(path, wide, narrow, depth)
        if isinstance(narrow.get("items"), (Mapping, bool)):
            self.schema(f"{path}/items", wide.get("items", True), narrow["items"], depth + 1)
        self._compositions(path, wide, narrow)

    def _types(self, path: str, wide: Mapping[str, Any], narrow: Mapping[str, Any]) -> None:
        lost = sorted(_types(wide) - _widened(_types(narrow)))
        if lost:
            self.report(
                "narrowed-type",
                f"{path}/type",
                wide.get("type"),
                narrow.get("type"),
                self.said(
                    f"type {', '.join(lost)} no longer accepted",
                    f"may now be of type {', '.join(lost)}",
                ),
            )

    def _values(self, path: str, wide: Mapping[str, Any], narrow: Mapping[str, Any]) -> None:
        narrow_values = _allowed(narrow)
        if narrow_values is None:
            return
        wide_values = _allowed(wide)
        if wide_values is None:
            self.report(
                "narrowed-enum",
                f"{path}/enum",
                None,
                sorted(narrow_values),
                "limited to a fixed set of values",
            )
        elif lost := wide_values - narrow_values:
            self.report(
                "narrowed-enum",
                f"{path}/enum",
                sorted(wide_values),
                sorted(narrow_values),
                self.said(
                    f"no longer allows {', '.join(sorted(lost))}",
                    f"may now be {', '.join(sorted(lost))}",
                ),
            )

    def _bounds(self, path: str, wide: Mapping[str, Any], narrow: Mapping[str, Any]) -> None:
        for inclusive, exclusive, lower in _NUMERIC_BOUNDS:
            was, now = (
                _bound(wide, inclusive, exclusive, lower),
                _bound(narrow, inclusive, exclusive, lower),
            )
            if now is not None and (was is None or _tighter(now, was, lower)):
                key = exclusive if now[1] else inclusive
                self.report(
                    "narrowed-range",
                    f"{path}/{key}",
                    was and was[0],
                    now[0],
                    f"{key} {'added' if was is None else 'tightened'}: {now[0]}",
                )
        for key in _LENGTHS:
            was, now = wide.get(key), narrow.get(key)
            if not _number(now) or now == was:
                continue
            if not _number(was) or (now > was if key.startswith("min") else now < was):
                self.report(
                    "narrowed-range",
                    f"{path}/{key}",
                    was,
                    now,
                    f"{key} {'added' if was is None else 'tightened'}: {now}",
                )
        if narrow.get("uniqueItems") is True and wide.get("uniqueItems") is not True:
            self.report(
                "narrowed-range",
                f"{path}/uniqueItems",
                wide.get("uniqueItems"),
                True,
                "repeated items no longer accepted",
            )
        step, was_step = narrow.get("multipleOf"), wide.get("multipleOf")
        if _number(step) and step != was_step and not (_number(was_step) and was_step % step == 0):
            self.report(
                "narrowed-range",
                f"{path}/multipleOf",
                was_step,
                step,
                f"must be a multiple of {step}",
            )

    def _unprovable(self, path: str, wide: Mapping[str, Any], narrow: Mapping[str, Any]) -> None:
        for key in _UNPROVABLE:
            if key in narrow and canonical(narrow[key]) != canonical(wide.get(key)):
                kind = "narrowed-pattern" if key == "pattern" else "narrowed-type"
                self.report(
                    kind,
                    f"{path}/{key}",
                    wide.get(key),
                    narrow[key],
                    f"{key} {'added' if key not in wide else 'changed'}; values the "
                    "old one accepted may be refused (a change is not proven wider)",
                )

    def _objects(
        self, path: str, wide: Mapping[str, Any], narrow: Mapping[str, Any], depth: int
    ) -> None:
        wide_props, narrow_props = (
            _mapping(wide.get("properties")),
            _mapping(narrow.get("properties")),
        )
        more_required = _names(narrow.get("required")) - _names(wide.get("required"))
        for name in sorted(more_required):
            where = f"{path}/properties/{name}"
            if self.side == "input":
                what = "new required input" if name not in wide_props else "now required"
                self.report("required-input", where, None, "required", what)
            elif name in wide_props:
                self.report(
                    "retyped-output", where, "required", "optional", "no longer always present"
                )
            else:
                self.report("removed-output", where, narrow_props.get(name), None, "removed")
        for name in wide_props if self.side == "input" else narrow_props:
            where = f"{path}/properties/{name}"
            if name in wide_props and name in narrow_props:
                self.schema(where, wide_props[name], narrow_props[name], depth + 1)
            elif self.side == "input":
                self.report(
                    "removed-input",
                    where,
                    wide_props[name],
                    None,
                    "removed (callers still sending it are refused or ignored)",
                )
            elif name not in more_required:
                self.report("removed-output", where, narrow_props[name], None, "removed")
        closed = narrow.get("additionalProperties", True) is False
        if self.side == "input" and closed and wide.get("additionalProperties", True) is not False:
            self.report(
                "closed-properties",
                f"{path}/additionalProperties",
                wide.get("additionalProperties", True),
                False,
                "properties it does not name are refused now",
            )

    def _compositions(self, path: str, wide: Mapping[str, Any], narrow: Mapping[str, Any]) -> None:
        for key in ("anyOf", "oneOf"):
            if key not in narrow:
                continue
            kept = {canonical(branch) for branch in _list(narrow[key])}
            if key not in wide or any(canonical(b) not in kept for b in _list(wide[key])):
                self.report(
                    "narrowed-type",
                    f"{path}/{key}",
                    wide.get(key),
                    narrow[key],
                    f"{key} lost an alternative (or is new)",
                )
        had = {canonical(branch) for branch in _list(wide.get("allOf"))}
        if any(canonical(branch) not in had for branch in _list(narrow.get("allOf"))):
            self.report(
                "narrowed-type",
                f"{path}/allOf",
                wide.get("allOf"),
                narrow["allOf"],
                "allOf gained a condition",
            )


def _inline(schema: Any, root: Any, depth: int = 0) -> Any:
    """`schema` with its local `$ref`s replaced by what they point at (siblings kept), to a
    depth that ends recursive schemas; a ref elsewhere is compared as written."""
    if isinstance(schema, list):
        return [_inline(item, root, depth) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and depth < _DEPTH:
        target: Any = root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        if isinstance(target, Mapping):
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return _inline({**target, **rest}, root, depth + 1)
        if isinstance(target, bool):
            return target
    return {k: _inline(v, root, depth) for k, v in schema.items() if k not in _DEFS}


_DEFS = ("$defs", "definitions")
_NOT_CONTRACT = (
    "title",
    "description",
    "examples",
    "default",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
)
_ANYTHING = ("{}", "true")
_NAMED = ("properties", "patternProperties", "dependentSchemas")


def canonical(schema: Any) -> str:
    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            kept = {
                k: _named(v) if k in _NAMED else strip(v)
                for k, v in value.items()
                if k not in _NOT_CONTRACT
            }
            if isinstance(kept.get("required"), list):
                kept["required"] = sorted(map(str, kept["required"]))
            return kept
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    def _named(value: Any) -> Any:  # a map of names to schemas: the names are data
        return {k: strip(v) for k, v in value.items()} if isinstance(value, Mapping) else value

    return json.dumps(strip(schema), sort_keys=True, default=str)


def _types(schema: Mapping[str, Any]) -> frozenset[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset({kind})
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    return _ANY_TYPE


def _widened(kinds: frozenset[str]) -> frozenset[str]:
    return kinds | {"integer"} if "number" in kinds else kinds


def _allowed(schema: Mapping[str, Any]) -> set[str] | None:
    if "const" in schema:
        return {json.dumps(schema["const"], sort_keys=True)}
    if isinstance(schema.get("enum"), list):
        return {json.dumps(v, sort_keys=True) for v in schema["enum"]}
    return None


def _bound(
    schema: Mapping[str, Any], inclusive: str, exclusive: str, lower: bool
) -> tuple[float, bool] | None:
    """The schema's tightest lower (or upper) bound: (value, exclusive?)."""
    bounds = [(schema[inclusive], False)] if _number(schema.get(inclusive)) else []
    if _number(schema.get(exclusive)):
        bounds.append((schema[exclusive], True))
    if not bounds:
        return None
    key = (lambda b: (b[0], b[1])) if lower else (lambda b: (-b[0], b[1]))
    return max(bounds, key=key)


def _tighter(now: tuple[float, bool], was: tuple[float, bool], lower: bool) -> bool:
    if now[0] != was[0]:
        return now[0] > was[0] if lower else now[0] < was[0]
    return now[1] and not was[1]


def _is_open(value: Any) -> bool:
    return value is True or value == {}


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _names(value: Any) -> set[str]:
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


__all__: Sequence[str] = ("Finding", "Side", "canonical", "compare")
