"""The rules a tool definition must obey before the catalog saves it.

Every check collects all problems it finds; the public functions raise one `RuleError` listing
them. Messages name the field and the rule and never repeat a submitted value, except a name or
package name that the author needs to see to find the problem.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from kiln.auth.secrets import InvalidSecretError, check_secret_name
from kiln.catalog.model import ANNOTATION_HINTS, Draft, Language, TaskMode
from kiln.catalog.toolfiles import check_files
from kiln.safe_schema import pattern_problem

__all__ = [
    "RuleError",
    "Violation",
    "check_draft",
    "check_name",
    "check_requirements",
    "closed_empty_schema",
    "is_semver_range",
    "normalise_schema",
]

NAME_PATTERN: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9_-]{0,62}")
RESERVED_PREFIX: Final = "kiln_"
MAX_DESCRIPTION_CHARS: Final = 4096
MAX_TITLE_CHARS: Final = 200
MAX_CODE_BYTES: Final = 256 * 1024
MAX_REQUIREMENTS: Final = 50
MAX_REQUIREMENT_CHARS: Final = 200
MAX_SCHEMA_BYTES: Final = 64 * 1024
MAX_SCHEMA_DEPTH: Final = 32
MAX_SUBSCHEMAS: Final = 1000
MAX_TIMEOUT_SECONDS: Final = 900.0
DEFAULT_TIMEOUT_SECONDS: Final = 30.0
MAX_SCHEMA_REPORTS: Final = 10

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


def closed_empty_schema() -> dict[str, Any]:
    """The schema of a tool that takes no inputs."""
    return {"type": "object", "properties": {}, "additionalProperties": False}


LANGUAGES: Final[Mapping[str, Language]] = {
    "python": "python",
    "python3": "python",
    "py": "python",
    "node": "node",
    "nodejs": "node",
    "javascript": "node",
    "js": "node",
}

# Fields a client may echo back from a GET; they are not part of a definition and are ignored.
READ_ONLY_FIELDS: Final = frozenset(
    {
        "id",
        "revision",
        "created_at",
        "updated_at",
        "bundle_id",
        "bundle",
        "etag",
        "requirements_json",
        "deleted",
    }
)

CANONICAL_FIELDS: Final = (
    "name",
    "title",
    "description",
    "language",
    "code",
    "requirements",
    "input_schema",
    "output_schema",
    "annotations",
    "timeout_seconds",
    "enabled",
    "secrets",
    "files",
    "task",
    "tags",
)

FIELD_ALIASES: Final[Mapping[str, str]] = {
    "json_schema": "input_schema",
    "inputSchema": "input_schema",
    "outputSchema": "output_schema",
    "is_active": "enabled",
}


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (`field`), which (`rule`), and a sentence saying so."""

    field: str
    rule: str
    message: str


class RuleError(ValueError):
    """A submitted definition broke one or more rules; `violations` lists every one."""

    def __init__(self, violations: Iterable[Violation]) -> None:
        self.violations: tuple[Violation, ...] = tuple(violations)
        super().__init__("; ".join(v.message for v in self.violations))

    def as_dicts(self) -> list[dict[str, str]]:
        """The violations as JSON-ready objects, for an API error body."""
        return [{"field": v.field, "rule": v.rule, "message": v.message} for v in self.violations]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Final = _Missing()


def _violation(field: str, rule: str, text: str) -> Violation:
    return Violation(field, rule, f"{field} {text} (rule: {rule}).")


def _escaped(key: object, limit: int = 64) -> str:
    """A submitted key as it may appear in a field path: shortened, control characters escaped."""
    text = str(key)
    short = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(short, ensure_ascii=False)[1:-1]


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# name, text fields, language, code


def _check_name(value: object, found: list[Violation]) -> str | None:
    if value is _MISSING or value is None:
        found.append(_violation("name", "required", "is required"))
        return None
    if not isinstance(value, str):
        found.append(_violation("name", "type", "must be a string"))
        return None
    if NAME_PATTERN.fullmatch(value) is None:
        found.append(
            _violation(
                "name",
                "pattern",
                "must be a letter followed by up to 62 letters, digits, _ or - "
                "(^[a-zA-Z][a-zA-Z0-9_-]{0,62}$)",
            )
        )
        return None
    if value.lower().startswith(RESERVED_PREFIX):
        found.append(
            _violation(
                "name", "reserved", f"must not start with {RESERVED_PREFIX!r}, kept for built-ins"
            )
        )
        return None
    return value


def check_name(name: object) -> None:
    """Raise `RuleError` unless `name` is an allowed tool name (uniqueness is the store's job)."""
    found: list[Violation] = []
    _check_name(name, found)
    if found:
        raise RuleError(found)


def _check_text(
    field: str, value: object, found: list[Violation], *, limit: int, required: bool
) -> str | None:
    if value is _MISSING or value is None:
        if required:
            found.append(_violation(field, "required", "is required"))
        return None
    if not isinstance(value, str):
        found.append(_violation(field, "type", "must be a string"))
        return None
    if not value.strip():
        if required:
            found.append(_violation(field, "blank", "must not be blank"))
        return None
    if len(value) > limit:
        found.append(_violation(field, "too_long", f"must be at most {limit} characters"))
        return None
    if not _encodable(value):
        found.append(_violation(field, "encoding", "must be valid Unicode text"))
        return None
    return value


def _check_language(value: object, found: list[Violation]) -> Language | None:
    if value is _MISSING or value is None:
        found.append(_violation("language", "required", "is required (python or node)"))
        return None
    if not isinstance(value, str):
        found.append(_violation("language", "type", "must be a string (python or node)"))
        return None
    language = LANGUAGES.get(value.strip().lower())
    if language is None:
        found.append(_violation("language", "unknown", "must be python or node"))
    return language


def _check_code(value: object, found: list[Violation]) -> str | None:
    if value is _MISSING or value is None:
        found.append(_violation("code", "required", "is required"))
        return None
    if not isinstance(value, str):
        found.append(_violation("code", "type", "must be a string"))
        return None
    if not value.strip():
        found.append(_violation("code", "blank", "must not be blank"))
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        found.append(_violation("code", "encoding", "must be valid Unicode text"))
        return None
    if size > MAX_CODE_BYTES:
        found.append(
            _violation(
                "code", "too_large", f"must be at most {MAX_CODE_BYTES // 1024} KiB as UTF-8"
            )
        )
        return None
    return value


def _check_timeout(value: object, found: list[Violation]) -> float | None:
    if value is _MISSING or value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, int | float):
        found.append(_violation("timeout_seconds", "type", "must be a number of seconds"))
        return None
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        found.append(
            _violation(
                "timeout_seconds",
                "range",
                f"must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} seconds",
            )
        )
        return None
    return seconds


def _check_task(value: object, found: list[Violation]) -> TaskMode | None:
    if value is _MISSING or value is None or value == "forbidden":
        return None
    if value in ("optional", "required"):
        return value
    found.append(
        _violation(
            "task",
            "enum",
            'must be "optional" (calls may run as MCP tasks) or "required" (they always do); '
            "leave it out for tools that answer inside the request",
        )
    )
    return None


def _check_enabled(value: object, found: list[Violation]) -> bool:
    if value is _MISSING or value is None:
        return True
    if not isinstance(value, bool):
        found.append(_violation("enabled", "type", "must be true or false"))
        return True
    return value


def _check_annotations(value: object, found: list[Violation]) -> dict[str, Any] | None:
    if value is _MISSING or value is None:
        return None
    if not isinstance(value, Mapping):
        found.append(_violation("annotations", "type", "must be an object"))
        return None
    clean: dict[str, Any] = {}
    for key, item in value.items():
        if key == "title":
            title = _check_text(
                "annotations.title", item, found, limit=MAX_TITLE_CHARS, required=False
            )
            if title is not None:
                clean["title"] = title
        elif key in ANNOTATION_HINTS:
            if isinstance(item, bool):
                clean[key] = item
            else:
                found.append(_violation(f"annotations.{key}", "type", "must be true or false"))
        else:
            found.append(
                _violation(
                    f"annotations.{_escaped(key)}",
                    "unknown_field",
                    "is not an annotation; allowed are title, " + ", ".join(ANNOTATION_HINTS),
                )
            )
    return clean or None


# --------------------------------------------------------------------------------------------
# requirements

_PATH_PREFIXES: Final = ("./", "../", ".\\", "..\\", "/", "\\", "~/", "~\\")
_ARCHIVE_SUFFIXES: Final = (".whl", ".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tar.xz")
_WINDOWS_DRIVE: Final = re.compile(r"[a-zA-Z]:[\\/]")
_URL_SCHEME: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")


def _looks_like_path(entry: str) -> bool:
    lowered = entry.lower()
    return (
        entry in {".", ".."}
        or entry.startswith(_PATH_PREFIXES)
        or lowered.startswith("file:")
        or _WINDOWS_DRIVE.match(entry) is not None
        or lowered.endswith(_ARCHIVE_SUFFIXES)
    )


def _python_requirement(field: str, entry: str, found: list[Violation]) -> tuple[str, str] | None:
    """Return (canonical name, normalised entry) or record why the entry is refused."""
    if entry.startswith("-"):
        if entry.startswith(("-e", "--editable")):
            found.append(_violation(field, "editable", "must not be an editable install (-e)"))
        else:
            found.append(
                _violation(
                    field, "option", "must be a package, not a pip option such as --index-url"
                )
            )
        return None
    if _URL_SCHEME.search(entry) or entry.lower().startswith(("git+", "hg+", "svn+", "bzr+")):
        if "file://" in entry.lower():
            found.append(_violation(field, "path_not_allowed", "must not point at a local file"))
        else:
            found.append(
                _violation(field, "url_not_allowed", "must be a package from the index, not a URL")
            )
        return None
    if _looks_like_path(entry):
        found.append(
            _violation(field, "path_not_allowed", "must be a package from the index, not a path")
        )
        return None
    try:
        requirement = Requirement(entry)
    except InvalidRequirement:
        found.append(
            _violation(field, "pep508", "must be a PEP 508 requirement such as requests==2.32.5")
        )
        return None
    if requirement.url is not None:
        if requirement.url.lower().startswith("file:"):
            found.append(_violation(field, "path_not_allowed", "must not point at a local file"))
        else:
            found.append(
                _violation(field, "url_not_allowed", "must be a package from the index, not a URL")
            )
        return None
    name = str(canonicalize_name(requirement.name))
    text = name
    if requirement.extras:
        text += "[" + ",".join(sorted(canonicalize_name(e) for e in requirement.extras)) + "]"
    text += str(requirement.specifier)
    if requirement.marker is not None:
        text += f"; {requirement.marker}"
    return name, text


_NPM_NAME: Final = re.compile(r"(?:@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*")
_NPM_NAME_MAX: Final = 214
_NPM_BANNED_NAMES: Final = frozenset({"node_modules", "favicon.ico"})

_NR: Final = r"(?:0|[1-9][0-9]*)"
_XR: Final = rf"(?:[xX*]|{_NR})"
_PART: Final = r"[0-9A-Za-z-]+"
_QUALIFIER: Final = rf"(?:-{_PART}(?:\.{_PART})*)?(?:\+{_PART}(?:\.{_PART})*)?"
_PARTIAL: Final = rf"v?{_XR}(?:\.{_XR}(?:\.{_XR}{_QUALIFIER})?)?"
_SIMPLE: Final = re.compile(rf"(?:<=|>=|<|>|=|~>?|\^)?{_PARTIAL}")
_HYPHEN: Final = re.compile(rf"{_PARTIAL}\s+-\s+{_PARTIAL}")
_OPERATOR_SPACE: Final = re.compile(r"(<=|>=|<|>|=|~>?|\^)\s+")


def is_semver_range(text: str) -> bool:
    """Whether `text` is a node-semver range (or the `latest` dist-tag)."""
    if text == "latest":
        return True
    for alternative in text.split("||"):
        part = alternative.strip()
        if not part:
            return False
        if _HYPHEN.fullmatch(part):
            continue
        simples = _OPERATOR_SPACE.sub(r"\1", part).split()
        if not all(_SIMPLE.fullmatch(simple) for simple in simples):
            return False
    return True


def _split_npm(entry: str) -> tuple[str, str | None]:
    at = entry.find("@", 1)
    if at == -1:
        return entry, None
    return entry[:at], entry[at + 1 :]


def _node_requirement(field: str, entry: str, found: list[Violation]) -> tuple[str, str] | None:
    lowered = entry.lower()
    if entry.startswith("-"):
        found.append(_violation(field, "option", "must be a package, not an npm option"))
        return None
    if _URL_SCHEME.search(entry) or lowered.startswith(
        ("git+", "git:", "github:", "gitlab:", "bitbucket:", "gist:")
    ):
        found.append(
            _violation(field, "url_not_allowed", "must be a package from the registry, not a URL")
        )
        return None
    if lowered.startswith(("file:", "link:")) or _looks_like_path(entry):
        found.append(
            _violation(field, "path_not_allowed", "must be a package from the registry, not a path")
        )
        return None
    name, spec = _split_npm(entry)
    if len(name) > _NPM_NAME_MAX or name in _NPM_BANNED_NAMES or _NPM_NAME.fullmatch(name) is None:
        found.append(
            _violation(
                field,
                "npm_name",
                "must start with a valid npm package name "
                "(lower-case letters, digits, -, ., _; optionally @scope/)",
            )
        )
        return None
    if spec is None:
        return name, name
    spec = " ".join(spec.split())
    spec_lowered = spec.lower()
    if spec_lowered.startswith("npm:"):
        found.append(_violation(field, "alias_not_allowed", "must not be an npm: alias"))
        return None
    if _URL_SCHEME.search(spec) or spec_lowered.startswith(
        ("git+", "git:", "github:", "gitlab:", "bitbucket:", "gist:")
    ):
        found.append(
            _violation(field, "url_not_allowed", "must be a package from the registry, not a URL")
        )
        return None
    if spec_lowered.startswith(("file:", "link:")) or _looks_like_path(spec) or "/" in spec:
        found.append(
            _violation(
                field,
                "path_not_allowed",
                "must be a package from the registry, not a path or repository",
            )
        )
        return None
    if not is_semver_range(spec):
        found.append(
            _violation(
                field,
                "semver_range",
                "must give a semver range after @ (such as 4.17.21, ^4.17.0, ~1.2, 1.x, "
                ">=1 <2, 1 - 2, *, latest)",
            )
        )
        return None
    return name, f"{name}@{spec}"


def _requirement_list(value: object, found: list[Violation]) -> list[object] | None:
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            found.append(
                _violation(
                    "requirements", "type", "must be a list of strings (or a JSON text of one)"
                )
            )
            return None
    if not isinstance(value, list | tuple):
        found.append(
            _violation("requirements", "type", "must be a list of strings (or a JSON text of one)")
        )
        return None
    return list(value)


def _check_requirements(
    language: Language | None, value: object, found: list[Violation]
) -> tuple[str, ...]:
    if value is _MISSING or value is None:
        return ()
    entries = _requirement_list(value, found)
    if entries is None:
        return ()
    if len(entries) > MAX_REQUIREMENTS:
        found.append(
            _violation("requirements", "too_many", f"must list at most {MAX_REQUIREMENTS} packages")
        )
        return ()
    normalised: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(entries):
        field = f"requirements[{index}]"
        if not isinstance(raw, str):
            found.append(_violation(field, "type", "must be a string"))
            continue
        entry = raw.strip()
        if not entry:
            found.append(_violation(field, "blank", "must not be blank"))
            continue
        if len(entry) > MAX_REQUIREMENT_CHARS:
            found.append(
                _violation(field, "too_long", f"must be at most {MAX_REQUIREMENT_CHARS} characters")
            )
            continue
        if language is None:
            continue
        check = _python_requirement if language == "python" else _node_requirement
        result = check(field, entry, found)
        if result is None:
            continue
        name, text = result
        if name in seen:
            found.append(
                _violation(field, "duplicate", f"lists {name} again; give each package once")
            )
            continue
        seen.add(name)
        normalised.append(text)
    return tuple(normalised)


def check_requirements(language: str, requirements: object) -> tuple[str, ...]:
    """Check a package list for `language` and return it normalised; raise `RuleError`."""
    found: list[Violation] = []
    checked_language = _check_language(language, found)
    result = _check_requirements(checked_language, requirements, found)
    if found:
        raise RuleError(found)
    return result


# --------------------------------------------------------------------------------------------
# schemas

# Keywords whose value is one subschema, a list of them, or an object mapping names to them.
# Everything else is walked as if it might hold subschemas, except the data keywords: a
# JSON Pointer `$ref` may aim into an unknown keyword, and then its content acts as a schema.
_MAP_KEYWORDS: Final = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
_SCHEMA_URI: Final = "urn:kiln:schema"


def _path(field: str, parts: Iterable[str | int]) -> str:
    text = field
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{_escaped(part)}"
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
    keyword = error.validator
    expected: Any = error.validator_value  # taken from the metaschema, never from the author
    if keyword == "type":
        kinds = [expected] if isinstance(expected, str) else list(expected)
        return "must be of type " + " or ".join(str(k) for k in kinds)
    if keyword == "enum":
        return "must be one of " + ", ".join(json.dumps(v) for v in expected)
    if keyword == "const":
        return f"must be {json.dumps(expected)}"
    if keyword == "format":
        return f"must be a valid {expected}"
    if keyword == "pattern":
        return f"must match the pattern {expected}"
    if keyword == "minimum":
        return f"must be at least {expected}"
    if keyword == "exclusiveMinimum":
        return f"must be more than {expected}"
    if keyword == "minItems":
        return f"must have at least {expected} item(s)"
    if keyword == "uniqueItems":
        return "must not repeat items"
    if keyword == "minLength":
        return f"must have at least {expected} character(s)"
    return f"breaks the metaschema keyword {keyword}"


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
            _violation(where, "metaschema", f"{_explain(worst)}, as JSON Schema 2020-12 requires")
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
                found.append(_violation(_path(field, place), "pattern", text))
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
                    _violation(
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
                    _violation(
                        location,
                        "remote_ref",
                        "must be a local reference starting with # (remote and relative "
                        "references are never fetched)",
                    )
                )
        base = subschema.get("$id")
        if isinstance(base, str) and not base.startswith("#"):
            found.append(
                _violation(
                    _path(field, (*where, "$id")),
                    "remote_ref",
                    "must not change the base URI; leave $id out (use $anchor to name a subschema)",
                )
            )
        if "$schema" in subschema and not _is_dialect(subschema["$schema"]):
            found.append(
                _violation(
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
                        _violation(
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
                _violation(local.location, "unresolved_ref", "points at nothing in this schema")
            )
            continue
        if isinstance(target, bool):
            continue
        if not isinstance(target, Mapping):
            found.append(_violation(local.location, "unresolved_ref", "must point at a schema"))
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
        found.append(_violation(field, "type", "must be a JSON object"))
        return None
    if _too_deep(schema):
        found.append(
            _violation(field, "too_deep", f"must nest at most {MAX_SCHEMA_DEPTH} levels deep")
        )
        return None
    try:
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError):
        found.append(_violation(field, "type", "must be plain JSON (no NaN or Infinity)"))
        return None
    if size > MAX_SCHEMA_BYTES:
        found.append(
            _violation(
                field, "too_large", f"must be at most {MAX_SCHEMA_BYTES // 1024} KiB as JSON"
            )
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
            _violation(
                field, "too_complex", f"must have at most {MAX_SUBSCHEMAS} subschemas in all"
            ),
        )
    if "$schema" in schema and not _is_dialect(schema["$schema"]):
        return (_violation(f"{field}.$schema", "dialect", f"must be left out or be {DIALECT}"),)
    problems = _metaschema_violations(field, schema) or _pattern_violations(field, schema)
    if problems:
        return tuple(problems)
    if schema.get("type") != "object":
        problems.append(_violation(f"{field}.type", "root_type", 'must be "object" at the root'))
    problems.extend(_reference_violations(field, schema))
    return tuple(problems)


def _check_input_schema(value: object, found: list[Violation], field: str) -> dict[str, Any] | None:
    if value is _MISSING or value is None or (isinstance(value, Mapping) and not value):
        return closed_empty_schema()
    return _check_schema(field, value, found)


def normalise_schema(schema: object, *, field: str = "input_schema") -> dict[str, Any]:
    """Check an input schema and return it normalised; `{}` or None mean "no inputs"."""
    found: list[Violation] = []
    result = _check_input_schema(schema, found, field)
    if found or result is None:
        raise RuleError(found)
    return result


def _check_output_schema(value: object, found: list[Violation]) -> dict[str, Any] | None:
    if value is _MISSING or value is None or (isinstance(value, Mapping) and not value):
        return None
    return _check_schema("output_schema", value, found)


# --------------------------------------------------------------------------------------------
# the whole payload


def _canonical(payload: Mapping[Any, Any], found: list[Violation]) -> dict[str, object]:
    fields: dict[str, object] = {}
    given_as: dict[str, str] = {}
    for key, value in payload.items():
        if key in READ_ONLY_FIELDS:
            continue
        if not isinstance(key, str) or (key not in CANONICAL_FIELDS and key not in FIELD_ALIASES):
            found.append(
                _violation(_escaped(key), "unknown_field", "is not a field of a tool definition")
            )
            continue
        canonical = FIELD_ALIASES.get(key, key)
        if canonical in fields:
            if fields[canonical] != value:
                found.append(
                    _violation(
                        canonical,
                        "conflict",
                        f"is given twice ({given_as[canonical]} and {key}) with different values",
                    )
                )
            continue
        fields[canonical] = value
        given_as[canonical] = key
    return fields


MAX_SECRETS: Final = 20


def _check_secrets(value: object, found: list[Violation]) -> tuple[str, ...]:
    """Declared secret names: env-variable style, unique, none the runner reserves."""
    if value is _MISSING or value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > MAX_SECRETS:
        found.append(
            _violation("secrets", "type", f"must be a list of at most {MAX_SECRETS} names")
        )
        return ()
    names: list[str] = []
    for index, name in enumerate(value):
        try:
            names.append(check_secret_name(name))
        except InvalidSecretError as error:
            found.append(_violation(f"secrets[{index}]", "secret_name", str(error)))
    if len(set(names)) != len(names):
        found.append(_violation("secrets", "unique", "must not name a secret twice"))
    return tuple(sorted(set(names)))


def _check_files(value: object, found: list[Violation]) -> dict[str, bytes]:
    files, problems = check_files(None if value is _MISSING else value)
    found.extend(_violation(field, rule, text) for field, rule, text in problems)
    return files


MAX_TAGS: Final = 20
TAG_RULE: Final = "1-32 characters from a-z 0-9 _ -, starting with a letter or digit"
_TAG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def is_tag(value: object) -> bool:
    return isinstance(value, str) and _TAG.fullmatch(value) is not None


def _check_tags(value: object, found: list[Violation]) -> tuple[str, ...]:
    """Tags: short lower-case labels, unique; kept sorted so equal sets compare equal."""
    if value is _MISSING or value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > MAX_TAGS:
        found.append(_violation("tags", "type", f"must be a list of at most {MAX_TAGS} tags"))
        return ()
    for index, tag in enumerate(value):
        if not is_tag(tag):
            found.append(_violation(f"tags[{index}]", "tag", f"must be {TAG_RULE}"))
    if len(set(map(str, value))) != len(value):
        found.append(_violation("tags", "unique", "must not name a tag twice"))
    return tuple(sorted({tag for tag in value if is_tag(tag)}))


def check_draft(payload: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None) -> Draft:
    """Validate and normalise a submitted tool definition; raise RuleError listing every violation.

    `defaults` (canonical field names only) fills fields the payload leaves out, for example
    the current values when a client updates part of a tool.
    """
    if not isinstance(payload, Mapping):
        raise RuleError([_violation("body", "type", "must be a JSON object")])
    found: list[Violation] = []
    fields = _canonical(payload, found)
    for key, value in (defaults or {}).items():
        if key not in CANONICAL_FIELDS:
            raise TypeError(f"unknown default field {key!r}")
        fields.setdefault(key, value)

    def get(key: str) -> object:
        return fields.get(key, _MISSING)

    name = _check_name(get("name"), found)
    title = _check_text("title", get("title"), found, limit=MAX_TITLE_CHARS, required=False)
    description = _check_text(
        "description", get("description"), found, limit=MAX_DESCRIPTION_CHARS, required=True
    )
    language = _check_language(get("language"), found)
    code = _check_code(get("code"), found)
    requirements = _check_requirements(language, get("requirements"), found)
    input_schema = _check_input_schema(get("input_schema"), found, "input_schema")
    output_schema = _check_output_schema(get("output_schema"), found)
    annotations = _check_annotations(get("annotations"), found)
    timeout = _check_timeout(get("timeout_seconds"), found)
    enabled = _check_enabled(get("enabled"), found)
    secrets = _check_secrets(get("secrets"), found)
    files = _check_files(get("files"), found)
    task = _check_task(get("task"), found)
    tags = _check_tags(get("tags"), found)

    if found:
        raise RuleError(found)
    assert name is not None
    assert description is not None
    assert language is not None
    assert code is not None
    assert input_schema is not None
    assert timeout is not None
    return Draft(
        name=name,
        description=description,
        language=language,
        code=code,
        requirements=requirements,
        input_schema=input_schema,
        output_schema=output_schema,
        title=title,
        annotations=annotations,
        timeout_seconds=timeout,
        enabled=enabled,
        secrets=secrets,
        files=files,
        task=task,
        tags=tags,
    )
