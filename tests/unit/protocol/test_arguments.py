"""Argument validation messages: every failing path and rule, never the submitted value."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.schema.arguments import SchemaProblem, ValidatorCache, schema_fingerprint

SECRET = "s3cr3t-value-do-not-echo"


@pytest.mark.parametrize(
    ("schema", "instance", "expected"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            {"a": SECRET},
            "a: must be of type integer",
        ),
        (
            {"properties": {"a": {"type": ["integer", "null"]}}},
            {"a": SECRET},
            "a: must be of type integer or null",
        ),
        ({"properties": {"a": {"exclusiveMinimum": 0}}}, {"a": -1}, "a: must be > 0"),
        ({"properties": {"a": {"exclusiveMaximum": 5}}}, {"a": 9}, "a: must be < 5"),
        ({"properties": {"a": {"multipleOf": 3}}}, {"a": 7}, "a: must be a multiple of 3"),
        (
            {"properties": {"a": {"minLength": 40}}},
            {"a": SECRET},
            "a: must be at least 40 characters long",
        ),
        (
            {"properties": {"a": {"maxLength": 1}}},
            {"a": SECRET},
            "a: must be at most 1 character long",
        ),
        (
            {"properties": {"a": {"pattern": "^[0-9]+$"}}},
            {"a": SECRET},
            'a: must match the pattern "^[0-9]+$"',
        ),
        ({"properties": {"a": {"enum": ["x", "y"]}}}, {"a": SECRET}, 'a: must be one of "x", "y"'),
        ({"properties": {"a": {"const": "x"}}}, {"a": SECRET}, 'a: must equal "x"'),
        ({"properties": {"a": {"minItems": 2}}}, {"a": [SECRET]}, "a: must have at least 2 items"),
        ({"properties": {"a": {"maxItems": 0}}}, {"a": [SECRET]}, "a: must have at most 0 items"),
        (
            {"properties": {"a": {"uniqueItems": True}}},
            {"a": [SECRET, SECRET]},
            "a: must not contain duplicate items",
        ),
        (
            {"properties": {"a": {"items": {"type": "integer"}}}},
            {"a": [1, SECRET]},
            "a[1]: must be of type integer",
        ),
        (
            {"properties": {"a": {"properties": {"b": {"type": "integer"}}}}},
            {"a": {"b": SECRET}},
            "a.b: must be of type integer",
        ),
        (
            {"anyOf": [{"required": ["p"]}, {"required": ["e"]}]},
            {},
            "(root): must match at least one of the schemas in anyOf",
        ),
        (
            {"oneOf": [{"type": "object"}, {"type": "object"}]},
            {},
            "(root): must match exactly one of the schemas in oneOf",
        ),
        ({"not": {"required": ["a"]}}, {"a": SECRET}, "(root): must not match the schema in not"),
        (
            {"properties": {"a": False}},
            {"a": SECRET},
            "(root): has a value the schema forbids (a false subschema under properties)",
        ),
        (
            {"dependentRequired": {"a": ["b"]}},
            {"a": SECRET},
            "(root): property 'b' is required when 'a' is present",
        ),
        ({"minProperties": 2}, {"a": SECRET}, "(root): must have at least 2 properties"),
        (
            {"unevaluatedProperties": False},
            {"a": SECRET},
            "(root): has properties not allowed by unevaluatedProperties",
        ),
        (
            {"propertyNames": {"maxLength": 1}},
            {"abc": SECRET},
            "(root): has a property name that breaks the propertyNames rule",
        ),
        (
            {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}},
            {"a": SECRET},
            "a: must be of type integer",
        ),
        (
            {"if": {"required": ["m"]}, "then": {"required": ["p"]}, "else": {"required": ["e"]}},
            {"m": SECRET},
            "(root): missing required property 'p'",
        ),
    ],
)
def test_each_rule_is_named_without_echoing_the_value(
    schema: dict[str, Any], instance: Any, expected: str
) -> None:
    problems = ValidatorCache().problems(schema, instance)
    assert any(p.startswith(expected) for p in problems), problems
    assert all(SECRET not in p for p in problems)


def test_every_failing_field_is_listed_once_and_sorted() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"minimum": 0}},
        "required": ["a", "b", "c"],
    }
    problems = ValidatorCache().problems(schema, {"a": "x"})
    assert problems == [
        "(root): missing required property 'b'",
        "(root): missing required property 'c'",
        "a: must be of type integer",
    ]


def test_format_is_an_annotation_only() -> None:
    schema = {"properties": {"when": {"type": "string", "format": "date"}}}
    assert ValidatorCache().problems(schema, {"when": "not a date"}) == []


def test_validators_are_cached_by_schema_fingerprint() -> None:
    cache = ValidatorCache()
    one = cache.get({"type": "object", "required": ["a"]})
    two = cache.get({"required": ["a"], "type": "object"})
    assert one is two
    assert schema_fingerprint({"a": 1, "b": 2}) == schema_fingerprint({"b": 2, "a": 1})


def test_cache_evicts_the_least_recently_used_validator() -> None:
    cache = ValidatorCache(size=2)
    first = cache.get({"minimum": 1})
    cache.get({"minimum": 2})
    cache.get({"minimum": 1})
    cache.get({"minimum": 3})
    assert cache.get({"minimum": 1}) is first


def test_invalid_schema_is_a_schema_problem() -> None:
    with pytest.raises(SchemaProblem, match="not valid JSON Schema 2020-12"):
        ValidatorCache().get({"type": "objekt"})


def test_remote_refs_are_never_fetched() -> None:
    schema = {"properties": {"a": {"$ref": "http://127.0.0.1:9/schema.json"}}}
    with pytest.raises(SchemaProblem, match=r"\$ref"):
        ValidatorCache().problems(schema, {"a": 1})
