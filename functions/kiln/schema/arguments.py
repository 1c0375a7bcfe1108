"""Tool argument validation against JSON Schema Draft 2020-12, with messages that never echo input.

jsonschema's own messages quote the offending value (`-1 is less than the minimum of 0`), and
arguments may carry secrets, so each failure is described from the schema side only: the
field path and the rule it broke (`net: must be ≥ 0`, `(root): missing required property
'net'`). Compiled validators are cached by a fingerprint of the schema. Validation runs on
`kiln.schema.safe`'s validator (RE2 patterns, a time budget); `check` runs it off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from kiln.schema.safe import (
    BudgetExceededError,
    PatternError,
    SafeValidator,
    additional_keys,
    budget,
)
from kiln.schema.wording import rule_text

_CACHE_SIZE = 256
# Checks whose work is bounded this small run on the event loop (tens of microseconds); a
# thread hop would cost more. Work: schema nodes x argument nodes (strings by length).
INLINE_WORK = 4096


class SchemaProblem(Exception):
    """The tool's own schema is unusable (invalid, or a `$ref` that cannot be resolved)."""


class TooCostlyError(SchemaProblem):
    """Checking the instance against the schema took more CPU time than its budget."""


def _refuse_remote(uri: str) -> Any:
    # Never fetch remote `$ref`s (digest §4.2: 2026 forbids auto-dereferencing network refs).
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


_REGISTRY: Registry[Any] = Registry(retrieve=_refuse_remote)  # type: ignore[call-arg]


def schema_fingerprint(schema: Mapping[str, Any]) -> str:
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class ValidatorCache:
    """Compiled Draft 2020-12 validators, keyed by schema fingerprint, least recently used out."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._size = size
        self._validators: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # `check` calls in from worker threads

    def get(self, schema: Mapping[str, Any]) -> Any:
        key = schema_fingerprint(schema)
        validator = self._cached(key)
        if validator is not None:
            return validator
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            where = _path(exc.absolute_path) if exc.absolute_path else "(root)"
            raise SchemaProblem(f"the schema is not valid JSON Schema 2020-12 at {where}") from exc
        validator = SafeValidator(schema, registry=_REGISTRY)
        with self._lock:
            self._validators[key] = validator
            if len(self._validators) > self._size:
                self._validators.popitem(last=False)
        return validator

    async def check(
        self, schema: Mapping[str, Any], instance: Any, *, budget_s: float | None
    ) -> list[str]:
        """`problems`, on a worker thread unless it is cheap: a costly check never holds up
        the event loop."""
        validator = self._cached(schema_fingerprint(schema))  # compiling is never cheap
        if validator is not None:
            work = _weight(schema, INLINE_WORK)
            if work <= INLINE_WORK and work * _weight(instance, INLINE_WORK) <= INLINE_WORK:
                return _problems(validator, instance, budget_s)
        return await asyncio.to_thread(self.problems, schema, instance, budget_s=budget_s)

    def _cached(self, key: str) -> Any:
        with self._lock:
            validator = self._validators.get(key)
            if validator is not None:
                self._validators.move_to_end(key)
            return validator

    def problems(
        self, schema: Mapping[str, Any], instance: Any, *, budget_s: float | None = None
    ) -> list[str]:
        """Every rule `instance` breaks, as `path: rule` lines; empty when it is valid.

        Raises SchemaProblem when the schema is unusable, TooCostlyError past `budget_s`.
        """
        return _problems(self.get(schema), instance, budget_s)


def _problems(validator: Any, instance: Any, budget_s: float | None) -> list[str]:
    """`ValidatorCache.problems` with the validator in hand."""
    try:
        with budget(budget_s):
            errors = list(validator.iter_errors(instance))
    except Unresolvable as exc:
        raise SchemaProblem("the schema has a $ref that cannot be resolved") from exc
    except PatternError as exc:
        raise SchemaProblem(f"the schema has a pattern Kiln cannot evaluate ({exc})") from exc
    except BudgetExceededError as exc:
        raise TooCostlyError(
            f"checking a value against the schema took more than {budget_s} s of CPU time"
        ) from exc
    lines: list[str] = []
    for error in errors:
        for line in describe(error):
            if line not in lines:
                lines.append(line)
    return sorted(lines)


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def describe(error: ValidationError) -> list[str]:
    """Messages for one jsonschema error, built from the keyword and the schema only."""
    where = _path(error.absolute_path)
    keyword = error.validator if isinstance(error.validator, str) else None
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    value: Any = error.validator_value
    instance = error.instance
    if keyword is None:
        # A `false` subschema; jsonschema drops the property path for these, so name the keyword.
        under = error.relative_schema_path[-1] if error.relative_schema_path else "the schema"
        return [f"{where}: has a value the schema forbids (a false subschema under {under})"]
    if "propertyNames" in error.relative_schema_path:
        return [f"{where}: has a property name that breaks the propertyNames rule ({keyword})"]
    if keyword == "required" and isinstance(instance, Mapping):
        return [
            f"{where}: missing required property '{name}'" for name in value if name not in instance
        ]
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        return [
            f"{_path([*error.absolute_path, key])}: is not allowed (additionalProperties is false)"
            for key in additional_keys(instance, schema)
        ]
    if keyword == "unevaluatedProperties":
        return [f"{where}: has properties not allowed by unevaluatedProperties"]
    if keyword == "dependentRequired" and isinstance(instance, Mapping):
        return [
            f"{where}: property '{needed}' is required when '{present}' is present"
            for present, needs in value.items()
            if present in instance
            for needed in needs
            if needed not in instance
        ]
    return [f"{where}: {rule_text(keyword, value)}"]


def summarize(tool_name: str, problems: Sequence[str]) -> str:
    lines = "\n".join(f"- {p}" for p in problems)
    return f"Invalid arguments for tool '{tool_name}':\n{lines}"


def _weight(value: Any, limit: int) -> int:
    """How much there is to check in `value`: its nodes, strings by length; counts to `limit`."""
    seen = 0
    stack = [value]
    while stack and seen <= limit:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            stack.extend(item.values())
            seen += len(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            seen += len(item) // 64
    return seen
