"""The rules a tool definition must obey before the catalog saves it.

Every check collects all problems it finds; the public functions raise one `RuleError` listing
them. Messages name the field and the rule and never repeat a submitted value, except a name or
package name that the author needs to see to find the problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from kiln.catalog.connection_needs import check_connections
from kiln.catalog.model import ANNOTATION_HINTS, Draft, Language, TaskMode
from kiln.catalog.names import NAME_PATTERN, TAG_RULE, is_tag
from kiln.catalog.requirements import check_requirement_list, is_semver_range
from kiln.catalog.schemas import (
    check_input_schema,
    check_output_schema,
    closed_empty_schema,
    normalise_schema,
)
from kiln.catalog.secret_names import secret_name_problem
from kiln.catalog.toolfiles import check_files
from kiln.catalog.violations import MISSING, RuleError, Violation, encodable, escaped, violation
from kiln.runner.ceiling import LAMBDA_MAX_TIMEOUT_S

__all__ = [
    "NAME_PATTERN",
    "TAG_RULE",
    "RuleError",
    "Violation",
    "check_draft",
    "check_name",
    "check_requirements",
    "closed_empty_schema",
    "is_semver_range",
    "is_tag",
    "normalise_schema",
]

RESERVED_PREFIX: Final = "kiln_"
MAX_DESCRIPTION_CHARS: Final = 4096
MAX_TITLE_CHARS: Final = 200
MAX_CODE_BYTES: Final = 256 * 1024
MAX_TIMEOUT_SECONDS: Final = LAMBDA_MAX_TIMEOUT_S
DEFAULT_TIMEOUT_SECONDS: Final = 30.0
# A plain call (not an MCP task) lasts one HTTP request, which the deployed front door (API
# Gateway's HTTP API) cuts at 30 s: a longer plain tool would save here and fail there.
MAX_PLAIN_TIMEOUT_SECONDS: Final = 30.0


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
        "fingerprint",  # computed at save (catalog/fingerprint.py)
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
    "calls",
    "connections",
)

FIELD_ALIASES: Final[Mapping[str, str]] = {
    "json_schema": "input_schema",
    "inputSchema": "input_schema",
    "outputSchema": "output_schema",
    "is_active": "enabled",
}


# --------------------------------------------------------------------------------------------
# name, text fields, language, code


def _string(
    field: str, value: object, found: list[Violation], *, required: bool = True, hint: str = ""
) -> str | None:
    """`value` when it is a string; else None, and what was wrong is added to `found` (a missing
    value only when it is `required`). `hint` ends both messages, e.g. the values allowed."""
    if value is MISSING or value is None:
        if required:
            found.append(violation(field, "required", f"is required{hint}"))
        return None
    if not isinstance(value, str):
        found.append(violation(field, "type", f"must be a string{hint}"))
        return None
    return value


def _check_name(value: object, found: list[Violation]) -> str | None:
    value = _string("name", value, found)
    if value is None:
        return None
    if NAME_PATTERN.fullmatch(value) is None:
        found.append(
            violation(
                "name",
                "pattern",
                "must be a letter followed by up to 62 letters, digits, _ or - "
                "(^[a-zA-Z][a-zA-Z0-9_-]{0,62}$)",
            )
        )
        return None
    if value.lower().startswith(RESERVED_PREFIX):
        found.append(
            violation(
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
    value = _string(field, value, found, required=required)
    if value is None:
        return None
    if not value.strip():
        if required:
            found.append(violation(field, "blank", "must not be blank"))
        return None
    if len(value) > limit:
        found.append(violation(field, "too_long", f"must be at most {limit} characters"))
        return None
    if not encodable(value):
        found.append(violation(field, "encoding", "must be valid Unicode text"))
        return None
    return value


def _check_language(value: object, found: list[Violation]) -> Language | None:
    value = _string("language", value, found, hint=" (python or node)")
    if value is None:
        return None
    language = LANGUAGES.get(value.strip().lower())
    if language is None:
        found.append(violation("language", "unknown", "must be python or node"))
    return language


def _check_code(value: object, found: list[Violation]) -> str | None:
    value = _string("code", value, found)
    if value is None:
        return None
    if not value.strip():
        found.append(violation("code", "blank", "must not be blank"))
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        found.append(violation("code", "encoding", "must be valid Unicode text"))
        return None
    if size > MAX_CODE_BYTES:
        found.append(
            violation("code", "too_large", f"must be at most {MAX_CODE_BYTES // 1024} KiB as UTF-8")
        )
        return None
    return value


def _check_timeout(value: object, found: list[Violation]) -> float | None:
    if value is MISSING or value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, int | float):
        found.append(violation("timeout_seconds", "type", "must be a number of seconds"))
        return None
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        found.append(
            violation(
                "timeout_seconds",
                "range",
                f"must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} seconds",
            )
        )
        return None
    return seconds


def _check_plain_timeout(
    timeout: float | None, task: TaskMode | None, found: list[Violation]
) -> None:
    if timeout is None or task is not None or timeout <= MAX_PLAIN_TIMEOUT_SECONDS:
        return
    found.append(
        violation(
            "timeout_seconds",
            "range",
            f"a plain call is cut at {MAX_PLAIN_TIMEOUT_SECONDS:g} s by the deployed front door "
            f"(API Gateway), so a tool that is not a task may take at most "
            f'{MAX_PLAIN_TIMEOUT_SECONDS:g} seconds; make it a task (set "task": "optional" or '
            f'"required": clients then run it as an MCP task, up to {MAX_TIMEOUT_SECONDS:g} s) '
            "or lower timeout_seconds",
        )
    )


def _check_task(value: object, found: list[Violation]) -> TaskMode | None:
    if value is MISSING or value is None or value == "forbidden":
        return None
    if value in ("optional", "required", "ask_first"):
        return value
    found.append(
        violation(
            "task",
            "enum",
            'must be "optional" (calls may run as MCP tasks), "required" (they always do) or '
            '"ask_first" (its questions are asked inside the request, then it runs as a task); '
            "leave it out for tools that answer inside the request",
        )
    )
    return None


def _check_enabled(value: object, found: list[Violation]) -> bool:
    if value is MISSING or value is None:
        return True
    if not isinstance(value, bool):
        found.append(violation("enabled", "type", "must be true or false"))
        return True
    return value


def _check_annotations(value: object, found: list[Violation]) -> dict[str, Any] | None:
    if value is MISSING or value is None:
        return None
    if not isinstance(value, Mapping):
        found.append(violation("annotations", "type", "must be an object"))
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
                found.append(violation(f"annotations.{key}", "type", "must be true or false"))
        else:
            found.append(
                violation(
                    f"annotations.{escaped(key)}",
                    "unknown_field",
                    "is not an annotation; allowed are title, " + ", ".join(ANNOTATION_HINTS),
                )
            )
    return clean or None


def check_requirements(language: str, requirements: object) -> tuple[str, ...]:
    """Check a package list for `language` and return it normalised; raise `RuleError`."""
    found: list[Violation] = []
    checked_language = _check_language(language, found)
    result = check_requirement_list(checked_language, requirements, found)
    if found:
        raise RuleError(found)
    return result


# --------------------------------------------------------------------------------------------
# the whole payload


def _unknown_field(key: object) -> str:
    """Why `key` is refused, with the field it was probably meant to be."""
    import difflib

    known = sorted({*CANONICAL_FIELDS, *FIELD_ALIASES})
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return "is not a field of a tool definition" + hint


def _canonical(payload: Mapping[Any, Any], found: list[Violation]) -> dict[str, object]:
    fields: dict[str, object] = {}
    given_as: dict[str, str] = {}
    for key, value in payload.items():
        if key in READ_ONLY_FIELDS:
            continue
        if not isinstance(key, str) or (key not in CANONICAL_FIELDS and key not in FIELD_ALIASES):
            found.append(violation(escaped(key), "unknown_field", _unknown_field(key)))
            continue
        canonical = FIELD_ALIASES.get(key, key)
        if canonical in fields:
            if fields[canonical] != value:
                found.append(
                    violation(
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
    if value is MISSING or value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > MAX_SECRETS:
        found.append(violation("secrets", "type", f"must be a list of at most {MAX_SECRETS} names"))
        return ()
    names: list[str] = []
    for index, name in enumerate(value):
        problem = secret_name_problem(name)
        if problem is None:
            names.append(name)
        else:
            found.append(violation(f"secrets[{index}]", "secret_name", problem))
    if len(set(names)) != len(names):
        found.append(violation("secrets", "unique", "must not name a secret twice"))
    return tuple(sorted(set(names)))


def _check_files(value: object, found: list[Violation]) -> dict[str, bytes]:
    files, problems = check_files(None if value is MISSING else value)
    found.extend(violation(field, rule, text) for field, rule, text in problems)
    return files


MAX_TAGS: Final = 20


def _check_tags(value: object, found: list[Violation]) -> tuple[str, ...]:
    """Tags: short lower-case labels, unique, in the author's order (a view selects by
    membership, so the order is only ever the author's to choose: a save keeps it as sent)."""
    if value is MISSING or value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > MAX_TAGS:
        found.append(violation("tags", "type", f"must be a list of at most {MAX_TAGS} tags"))
        return ()
    for index, tag in enumerate(value):
        if not is_tag(tag):
            found.append(violation(f"tags[{index}]", "tag", f"must be {TAG_RULE}"))
    if len(set(map(str, value))) != len(value):
        found.append(violation("tags", "unique", "must not name a tag twice"))
    return tuple(tag for tag in value if is_tag(tag))


MAX_CALLS: Final = 32


def _check_calls(value: object, found: list[Violation]) -> tuple[str, ...]:
    """The tools a tool's script may call (kiln/runner/TALKING.md, "Calling tools"): tool
    names, unique, in the author's order. A name need not exist yet: a call of a tool the
    caller cannot see is refused when it is made, as a direct call would be."""
    if value is MISSING or value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > MAX_CALLS:
        found.append(
            violation("calls", "type", f"must be a list of at most {MAX_CALLS} tool names")
        )
        return ()
    for index, name in enumerate(value):
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            rule = "must be a tool name: a letter, then up to 62 letters, digits, _ or -"
            found.append(violation(f"calls[{index}]", "name", rule))
    if len(set(map(str, value))) != len(value):
        found.append(violation("calls", "unique", "must not name a tool twice"))
    return tuple(str(name) for name in value)


def _with_defaults(
    fields: dict[str, object], defaults: Mapping[str, Any] | None
) -> dict[str, object]:
    """Fill the fields the payload left out from `defaults` (canonical names only)."""
    for key, value in (defaults or {}).items():
        if key not in CANONICAL_FIELDS:
            raise TypeError(f"unknown default field {key!r}")
        fields.setdefault(key, value)
    return fields


def check_draft(payload: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None) -> Draft:
    """Validate and normalise a submitted tool definition; raise RuleError listing every violation.

    `defaults` (canonical field names only) fills fields the payload leaves out, for example
    the current values when a client updates part of a tool.
    """
    if not isinstance(payload, Mapping):
        raise RuleError([violation("body", "type", "must be a JSON object")])
    found: list[Violation] = []
    fields = _with_defaults(_canonical(payload, found), defaults)

    def get(key: str) -> object:
        return fields.get(key, MISSING)

    name = _check_name(get("name"), found)
    title = _check_text("title", get("title"), found, limit=MAX_TITLE_CHARS, required=False)
    description = _check_text(
        "description", get("description"), found, limit=MAX_DESCRIPTION_CHARS, required=True
    )
    language = _check_language(get("language"), found)
    code = _check_code(get("code"), found)
    requirements = check_requirement_list(language, get("requirements"), found)
    input_schema = check_input_schema(get("input_schema"), found, "input_schema")
    output_schema = check_output_schema(get("output_schema"), found)
    annotations = _check_annotations(get("annotations"), found)
    timeout = _check_timeout(get("timeout_seconds"), found)
    enabled = _check_enabled(get("enabled"), found)
    secrets, files = _check_secrets(get("secrets"), found), _check_files(get("files"), found)
    task = _check_task(get("task"), found)
    _check_plain_timeout(timeout, task, found)
    tags, calls = _check_tags(get("tags"), found), _check_calls(get("calls"), found)
    connections = check_connections(get("connections"), found)

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
        calls=calls,
        connections=connections,
    )
