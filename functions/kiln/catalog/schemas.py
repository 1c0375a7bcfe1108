"""The save rules for JSON Schemas (input_schema, output_schema): valid Draft 2020-12, local
references only, no loops validation could never leave, patterns RE2 can run, bounded size.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from kiln.catalog.violations import MISSING, RuleError, Violation, escaped, violation
from kiln.schema.safe import pattern_problem
from kiln.schema.wording import rule_text

MAX_SCHEMA_BYTES: Final = 64 * 1024
MAX_SCHEMA_DEPTH: Final = 32
MAX_SUBSCHEMAS: Final = 1000
MAX_SCHEMA_REPORTS: Final = 10
DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


def closed_empty_schema() -> dict[str, Any]:
    """The schema of a tool that takes no inputs."""
    return {"type": "object", "properties": {}, "additionalProperties": False}


# Keywords whose value is one subschema, a list of them, or an object mapping names to them.
# Everything else is walked as if it might hold subschemas, except the data keywords: a
# JSON Pointer `$ref` may aim into an unknown keyword, and then its content acts as a schema.
_MAP_KEYWORDS: Final = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
_SCHEMA_URI: Final = "urn:kiln:schema"


def _path(field: str, parts: Iterable[str | int]) -> str:
    text = field
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{escaped(part)}"
    return text


def _too_deep(value: object) -> bool:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children: Iterable[object]
        if isinstance(node, Mapping):
            children = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > MAX_SCHEMA_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _schema_nodes(
    node: object, skip: Mapping[int, object]
) -> Iterator[tuple[tuple[str | int, ...], Mapping[str, Any]]]:
    """Every object in schema position under `node`, in document order, with its path.

    Objects in `skip` (and what lies under them) were walked before and are left out.
    """
    stack: list[tuple[object, tuple[str | int, ...]]] = [(node, ())]
    while stack:
        current, where = stack.pop()
        if isinstance(current, list):
            stack.extend(reversed([(item, (*where, i)) for i, item in enumerate(current)]))
            continue
        if not isinstance(current, Mapping) or id(current) in skip:
            continue
        yield where, current
        children: list[tuple[object, tuple[str | int, ...]]] = []
        for key, value in current.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _MAP_KEYWORDS and isinstance(value, Mapping):
                children.extend((sub, (*where, key, name)) for name, sub in value.items())
            else:
                children.append((value, (*where, key)))
        stack.extend(reversed(children))


def _explain(error: ValidationError) -> str:
    # The keyword's value comes from the metaschema, never from the author.
    return rule_text(str(error.validator), error.validator_value)


_METASCHEMA: Final = Draft202012Validator(
    Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
)


def _metaschema_violations(field: str, schema: Mapping[str, Any]) -> list[Violation]:
    found: list[Violation] = []
    seen: set[tuple[str, str]] = set()
    for error in _METASCHEMA.iter_errors(schema):
        worst = best_match(error.context) if error.context else error
        where = _path(field, list(worst.absolute_path))
        key = (where, str(worst.validator))
        if key in seen:
            continue
        seen.add(key)
        found.append(
            violation(where, "metaschema", f"{_explain(worst)}, as JSON Schema 2020-12 requires")
        )
        if len(found) >= MAX_SCHEMA_REPORTS:
            break
    return found


def _pattern_violations(field: str, schema: Mapping[str, Any]) -> list[Violation]:
    """Patterns RE2 cannot evaluate (in linear time) are refused here, not left to stall calls."""
    found: list[Violation] = []
    for where, node in _schema_nodes(schema, {}):
        places: list[tuple[tuple[str | int, ...], object]] = [
            ((*where, "pattern"), node.get("pattern"))
        ]
        keyed = node.get("patternProperties")
        if isinstance(keyed, Mapping):
            places += [((*where, "patternProperties", key), key) for key in keyed]
        for place, pattern in places:
            why = pattern_problem(pattern) if isinstance(pattern, str) else None
            if why is not None:
                text = (
                    "must be a regular expression RE2 can evaluate (no lookaround or "
                    f"backreferences), which keeps every check linear in time; RE2 says: {why}"
                )
                found.append(violation(_path(field, place), "pattern", text))
    return found[:MAX_SCHEMA_REPORTS]


def _is_dialect(value: object) -> bool:
    return isinstance(value, str) and value.rstrip("#") == DIALECT and value.count("#") <= 1


@dataclass(frozen=True)
class _LocalRef:
    location: str  # field path of the $ref / $dynamicRef keyword
    ref: str
    holder: Mapping[str, Any]  # the subschema the keyword sits in


def _scan(
    field: str,
    node: Mapping[str, Any],
    nodes: dict[int, Mapping[str, Any]],
    anchors: dict[str, str],
) -> tuple[list[Violation], list[_LocalRef]]:
    """Find what could leave the document, and collect the local references to resolve."""
    found: list[Violation] = []
    local: list[_LocalRef] = []
    for where, subschema in list(_schema_nodes(node, nodes)):
        nodes[id(subschema)] = subschema
        for keyword in ("$anchor", "$dynamicAnchor"):
            anchor = subschema.get(keyword)
            if not isinstance(anchor, str):
                continue
            location = _path(field, (*where, keyword))
            if anchors.setdefault(anchor, location) != location:
                found.append(
                    violation(
                        location,
                        "duplicate_anchor",
                        f"repeats a name already given at {anchors[anchor]}",
                    )
                )
        for keyword in ("$ref", "$dynamicRef"):
            ref = subschema.get(keyword)
            if not isinstance(ref, str):
                continue
            location = _path(field, (*where, keyword))
            if ref.startswith("#"):
                local.append(_LocalRef(location, ref, subschema))
            else:
                found.append(
                    violation(
                        location,
                        "remote_ref",
                        "must be a local reference starting with # (remote and relative "
                        "references are never fetched)",
                    )
                )
        base = subschema.get("$id")
        if isinstance(base, str) and not base.startswith("#"):
            found.append(
                violation(
                    _path(field, (*where, "$id")),
                    "remote_ref",
                    "must not change the base URI; leave $id out (use $anchor to name a subschema)",
                )
            )
        if "$schema" in subschema and not _is_dialect(subschema["$schema"]):
            found.append(
                violation(
                    _path(field, (*where, "$schema")),
                    "dialect",
                    f"must be left out or be {DIALECT}",
                )
            )
    return found, local


def _target_field(field: str, location: str, ref: str) -> str:
    """Where a reference points, as a field path when it is a JSON Pointer."""
    if not ref.startswith("#/"):
        return location
    tokens = (unquote(t).replace("~1", "/").replace("~0", "~") for t in ref[2:].split("/"))
    return _path(field, tokens)


# Keywords that apply a subschema to the same instance: a loop through only these (and
# references) never reaches a smaller piece of input, so validation would recurse forever.
_IN_PLACE_ONE: Final = ("not", "if", "then", "else")
_IN_PLACE_MANY: Final = ("allOf", "anyOf", "oneOf")

_Edge = tuple[Mapping[str, Any], str | None]  # (next subschema, location when it is a $ref)


def _in_place_edges(node: Mapping[str, Any], refs: Mapping[int, list[_Edge]]) -> Iterator[_Edge]:
    for keyword in _IN_PLACE_ONE:
        child = node.get(keyword)
        if isinstance(child, Mapping):
            yield child, None
    for keyword in _IN_PLACE_MANY:
        children = node.get(keyword)
        if isinstance(children, list):
            yield from ((child, None) for child in children if isinstance(child, Mapping))
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, Mapping):
        yield from ((child, None) for child in dependent.values() if isinstance(child, Mapping))
    yield from refs.get(id(node), ())


def _cycle_violations(
    nodes: Mapping[int, Mapping[str, Any]], refs: Mapping[int, list[_Edge]]
) -> list[Violation]:
    found: list[Violation] = []
    reported: set[str] = set()
    state: dict[int, bool] = {}  # False while on the path being explored, True when done
    for start in nodes.values():
        if id(start) in state:
            continue
        state[id(start)] = False
        path: list[tuple[Mapping[str, Any], Iterator[_Edge], str | None]] = [
            (start, _in_place_edges(start, refs), None)
        ]
        while path:
            node, edges, _ = path[-1]
            step = next(edges, None)
            if step is None:
                state[id(node)] = True
                path.pop()
                continue
            child, location = step
            seen = state.get(id(child))
            if seen is None:
                state[id(child)] = False
                path.append((child, _in_place_edges(child, refs), location))
            elif seen is False:
                if location is None:
                    # The loop holds at least one reference; blame the latest one on the path.
                    for entry in reversed(path):
                        if entry[2] is not None:
                            location = entry[2]
                            break
                if location is not None and location not in reported:
                    reported.add(location)
                    found.append(
                        violation(
                            location,
                            "ref_cycle",
                            "leads back to itself without descending into the input, "
                            "so validation would never end",
                        )
                    )
    return found


def _reference_violations(field: str, schema: Mapping[str, Any]) -> list[Violation]:
    """Refuse anything that could leave the document; resolve every local reference; refuse
    reference loops that validation could never leave."""
    nodes: dict[int, Mapping[str, Any]] = {}
    anchors: dict[str, str] = {}
    found, pending = _scan(field, schema, nodes, anchors)
    if found:
        return found[:MAX_SCHEMA_REPORTS]
    resolver = (
        Registry()
        .with_resource(
            _SCHEMA_URI, Resource.from_contents(schema, default_specification=DRAFT202012)
        )
        .resolver(base_uri=_SCHEMA_URI)
    )
    refs: dict[int, list[_Edge]] = {}
    while pending:
        local = pending.pop()
        try:
            target = resolver.lookup(local.ref).contents
        except Unresolvable:
            found.append(
                violation(local.location, "unresolved_ref", "points at nothing in this schema")
            )
            continue
        if isinstance(target, bool):
            continue
        if not isinstance(target, Mapping):
            found.append(violation(local.location, "unresolved_ref", "must point at a schema"))
            continue
        refs.setdefault(id(local.holder), []).append((target, local.location))
        if id(target) not in nodes:
            # A pointer may aim inside a keyword the walk treats as data; what it finds is
            # used as a schema, so it must obey the same rules.
            where = _target_field(field, local.location, local.ref)
            problems, more = _scan(where, target, nodes, anchors)
            found.extend(problems)
            pending.extend(more)
    if not found:
        found = _cycle_violations(nodes, refs)
    return found[:MAX_SCHEMA_REPORTS]


def _check_schema(field: str, schema: object, found: list[Violation]) -> dict[str, Any] | None:
    """Every check shared by input and output schemas; returns a plain deep copy."""
    if isinstance(schema, bool) or not isinstance(schema, Mapping):
        found.append(violation(field, "type", "must be a JSON object"))
        return None
    if _too_deep(schema):
        found.append(
            violation(field, "too_deep", f"must nest at most {MAX_SCHEMA_DEPTH} levels deep")
        )
        return None
    try:
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError):
        found.append(violation(field, "type", "must be plain JSON (no NaN or Infinity)"))
        return None
    if size > MAX_SCHEMA_BYTES:
        found.append(
            violation(field, "too_large", f"must be at most {MAX_SCHEMA_BYTES // 1024} KiB as JSON")
        )
        return None
    problems = _schema_text_violations(field, text)
    if problems:
        found.extend(problems)
        return None
    return cast(dict[str, Any], json.loads(text))


def _subschema_count(schema: Mapping[str, Any]) -> int:
    """Objects and booleans outside data keywords: what the metaschema check walks one by one."""
    count = 0
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, bool):
            count += 1
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, Mapping):
            count += 1
            stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)
    return count


@functools.lru_cache(maxsize=64)
def _schema_text_violations(field: str, text: str) -> tuple[Violation, ...]:
    """The checks that cost time, once per distinct schema (saves often resend the same one)."""
    schema = cast(dict[str, Any], json.loads(text))
    if _subschema_count(schema) > MAX_SUBSCHEMAS:
        return (
            violation(
                field, "too_complex", f"must have at most {MAX_SUBSCHEMAS} subschemas in all"
            ),
        )
    if "$schema" in schema and not _is_dialect(schema["$schema"]):
        return (violation(f"{field}.$schema", "dialect", f"must be left out or be {DIALECT}"),)
    problems = _metaschema_violations(field, schema) or _pattern_violations(field, schema)
    if problems:
        return tuple(problems)
    if schema.get("type") != "object":
        problems.append(violation(f"{field}.type", "root_type", 'must be "object" at the root'))
    problems.extend(_reference_violations(field, schema))
    return tuple(problems)


def check_input_schema(value: object, found: list[Violation], field: str) -> dict[str, Any] | None:
    if value is MISSING or value is None or (isinstance(value, Mapping) and not value):
        return closed_empty_schema()
    return _check_schema(field, value, found)


def normalise_schema(schema: object, *, field: str = "input_schema") -> dict[str, Any]:
    """Check an input schema and return it normalised; `{}` or None mean "no inputs"."""
    found: list[Violation] = []
    result = check_input_schema(schema, found, field)
    if found or result is None:
        raise RuleError(found)
    return result


def check_output_schema(value: object, found: list[Violation]) -> dict[str, Any] | None:
    if value is MISSING or value is None or (isinstance(value, Mapping) and not value):
        return None
    return _check_schema("output_schema", value, found)
