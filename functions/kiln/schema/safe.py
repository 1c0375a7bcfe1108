"""JSON Schema validation that cannot stall the server: RE2 patterns and a time budget.

Python's `re` backtracks: `^(a+)+$` against 27 `a`s and a `!` takes seconds, holding the GIL
(so a worker thread stalls the event loop too). Every regular expression a schema holds
(`pattern`, `patternProperties`, and the `additionalProperties` / `unevaluatedProperties`
checks that consult it) is evaluated here by RE2, which runs in linear time and refuses
constructs that need backtracking (lookaround, backreferences); `pattern_problem` lets the
catalog refuse those on save. Every keyword also checks a deadline in the thread's CPU time,
so a schema that is merely expensive (nested `anyOf` over a deep instance) gives up at the
budget.

No keyword may cost more than linear time in one call, where the deadline is not looked at:
jsonschema's `uniqueItems` compares every pair of items when they cannot be sorted (an array
of objects, or of mixed types) -- 20,000 of them is 200 million comparisons holding the GIL.
Here each item becomes a hashable canonical form (JSON equality: 1 == 1.0, true != 1, key
order ignored) and duplicates are found with a set, checking the deadline as it goes.
`enum` and `const` compare the value with each listed one (linear); `contains` and the
applicators descend through timed keywords.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

_MAX_PATTERN_MEMORY = 8 << 20  # RE2's program budget per pattern: bounds memory, not time


class PatternError(ValueError):
    """A schema pattern RE2 cannot evaluate (a syntax error, or a construct that backtracks)."""


class BudgetExceededError(Exception):
    """Validation ran past its time budget."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.max_mem = _MAX_PATTERN_MEMORY
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as error:
        raise PatternError(_reason(error)) from None


def _reason(error: Exception) -> str:
    text = error.args[0] if error.args else str(error)
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def pattern_problem(pattern: str) -> str | None:
    """Why RE2 cannot evaluate `pattern` (for a save-time message), or None when it can."""
    try:
        _compile(pattern)
    except PatternError as error:
        return str(error)
    except UnicodeEncodeError:
        return "it is not valid Unicode"
    return None


def search(pattern: str, text: str) -> bool:
    """`re.search` semantics, evaluated by RE2; raises PatternError for a pattern it refuses."""
    return _compile(pattern).search(text) is not None


_state = threading.local()


@contextmanager
def budget(seconds: float | None) -> Iterator[None]:
    """Validation on this thread inside the block raises BudgetExceededError after `seconds`
    of this thread's CPU time: the budget bounds the work a value costs, and a loaded machine
    (or a thread waiting for the GIL) does not turn a small value into a costly one."""
    previous = getattr(_state, "deadline", math.inf)
    _state.deadline = math.inf if seconds is None else time.thread_time() + seconds
    try:
        yield
    finally:
        _state.deadline = previous


Keyword = Callable[[Any, Any, Any, Any], Any]


def _timed(keyword: Keyword) -> Keyword:
    def checked(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _check_deadline()
        return keyword(validator, value, instance, schema)

    return checked


def _check_deadline() -> None:
    if time.thread_time() > getattr(_state, "deadline", math.inf):
        raise BudgetExceededError


def _canonical(value: Any) -> Any:
    """A hashable form of a JSON value; two values are equal in JSON Schema's sense exactly
    when their forms are equal."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)  # 1 and 1.0: equal, and hashed alike
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(_canonical(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((key, _canonical(item)) for key, item in value.items()))
    return ("z", repr(value))


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for index, item in enumerate(instance):
        if index % 256 == 0:
            _check_deadline()
        form = _canonical(item)
        if form in seen:
            yield ValidationError("has non-unique elements")
            return
        seen.add(form)


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def additional_keys(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Keys neither `properties` nor `patternProperties` cover, sorted."""
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return sorted(
        key
        for key in instance
        if key not in properties and not any(search(p, key) for p in patterns)
    )


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = additional_keys(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        yield ValidationError("additional properties are not allowed")


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _evaluated_keys(validator: Any, instance: Any, schema: Any) -> set[str]:
    """Keys some keyword of `schema` evaluated (jsonschema's own walk, with RE2 patterns)."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for ref_keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(ref_keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys |= _evaluated_keys(inner, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            keys |= {k for k, v in instance.items() if _valid(validator.descend(v, subschema))}
    for pattern in schema.get("patternProperties", {}):
        keys |= {k for k in instance if search(pattern, k)}
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    for key, value in instance.items():
        if key not in evaluated and not _valid(
            validator.descend(value, unevaluated, path=key, schema_path=key)
        ):
            yield ValidationError("unevaluated properties are not allowed")
            return


_KEYWORDS: dict[str, Keyword] = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
    "uniqueItems": _unique_items,
}

SafeValidator: Any = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, validators={name: _timed(fn) for name, fn in _KEYWORDS.items()}
)
