"""Schema validation that cannot stall: RE2 for every pattern, a time budget for everything."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from kiln.catalog.rules import RuleError, normalise_schema
from kiln.schema.arguments import SchemaProblem, TooCostlyError, ValidatorCache
from kiln.schema.safe import BudgetExceededError, SafeValidator, budget, pattern_problem, search

EVIL = "^(a+)+$"
EVIL_INPUT = "a" * 27 + "!"  # seconds of backtracking in Python's re


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_a_catastrophic_pattern_is_checked_by_re2_and_the_value_refused() -> None:
    schema = _schema(s={"type": "string", "pattern": EVIL})
    assert ValidatorCache().problems(schema, {"s": EVIL_INPUT * 100}) == [
        's: must match the pattern "^(a+)+$"'
    ]


def test_a_catastrophic_pattern_property_and_additional_properties_use_re2() -> None:
    schema = {
        "type": "object",
        "patternProperties": {EVIL: {"type": "integer"}},
        "additionalProperties": False,
    }
    problems = ValidatorCache().problems(schema, {EVIL_INPUT: 1, "aaa": "x"})
    assert problems == [
        "aaa: must be of type integer",
        f"{EVIL_INPUT}: is not allowed (additionalProperties is false)",
    ]


def test_unevaluated_properties_see_pattern_properties_through_re2() -> None:
    schema = {
        "type": "object",
        "allOf": [{"patternProperties": {EVIL: {"type": "integer"}}}],
        "unevaluatedProperties": False,
    }
    cache = ValidatorCache()
    assert cache.problems(schema, {"aaaa": 1}) == []
    assert cache.problems(schema, {EVIL_INPUT: 1}) == [
        "(root): has properties not allowed by unevaluatedProperties"
    ]


CASES: list[tuple[dict[str, Any], Any]] = [
    ({"pattern": "^[a-z]+[0-9]?$"}, "abc1"),
    ({"pattern": "^[a-z]+[0-9]?$"}, "ab12"),
    ({"pattern": "x"}, 5),
    ({"patternProperties": {"^x_": {"type": "string"}}}, {"x_a": "s", "y": 1}),
    ({"patternProperties": {"^x_": {"type": "string"}}}, {"x_a": 1}),
    ({"patternProperties": {"^x": {}}, "additionalProperties": False}, {"xa": 1, "b": 2}),
    ({"properties": {"a": {}}, "unevaluatedProperties": False}, {"a": 1, "b": 2}),
    (
        {"$defs": {"d": {"patternProperties": {"^p": {}}}}, "$ref": "#/$defs/d"}
        | {"unevaluatedProperties": {"type": "integer"}},
        {"p1": "s", "q": 1, "r": "s"},
    ),
    ({"if": {"required": ["a"]}, "then": {"properties": {"b": {}}}}, {"a": 1, "b": 2}),
    (
        {"dependentSchemas": {"a": {"properties": {"b": {}}}}, "unevaluatedProperties": False},
        {"a": 1, "b": 2},
    ),
]


@pytest.mark.parametrize(("schema", "instance"), CASES)
def test_the_safe_validator_agrees_with_jsonschema_on_ordinary_patterns(
    schema: dict[str, Any], instance: Any
) -> None:
    expected = Draft202012Validator(schema).is_valid(instance)
    assert SafeValidator(schema).is_valid(instance) is expected


def test_a_pattern_re2_cannot_evaluate_makes_the_schema_unusable_at_call_time() -> None:
    schema = _schema(s={"type": "string", "pattern": "^(?!admin).*$"})
    with pytest.raises(SchemaProblem, match="pattern Kiln cannot evaluate"):
        ValidatorCache().problems(schema, {"s": "x"})


def test_an_expensive_schema_gives_up_at_the_budget() -> None:
    # Two equal branches at every level of a nested array: 2^depth evaluations.
    node = {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}}] * 2}
    schema = {"type": "object", "$defs": {"n": node}, "properties": {"x": {"$ref": "#/$defs/n"}}}
    deep: Any = "leaf"
    for _ in range(40):
        deep = [deep]
    with pytest.raises(TooCostlyError, match=r"took more than 0\.2 s of CPU time"):
        ValidatorCache().problems(schema, {"x": deep}, budget_s=0.2)


def test_the_budget_is_per_thread() -> None:
    node = {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}}] * 2}
    schema = {"type": "object", "$defs": {"n": node}, "properties": {"x": {"$ref": "#/$defs/n"}}}
    deep: Any = "leaf"
    for _ in range(40):
        deep = [deep]
    cache = ValidatorCache()
    outcome: list[str] = []

    def costly() -> None:
        try:
            cache.problems(schema, {"x": deep}, budget_s=0.2)
        except TooCostlyError:
            outcome.append("gave up")

    worker = threading.Thread(target=costly)
    worker.start()
    assert cache.problems(schema, {"x": [[1]]}) == [
        "x: must match at least one of the schemas in anyOf"
    ]
    worker.join()
    assert outcome == ["gave up"]


def test_pattern_problem_names_what_re2_refuses() -> None:
    assert pattern_problem("^[a-z]+$") is None
    assert pattern_problem("(a)\\1") is not None
    assert "(?=" in (pattern_problem("(?=a)b") or "")


def test_search_has_re_search_semantics() -> None:
    assert search("b", "abc")
    assert not search("^b", "abc")


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        (
            _schema(s={"type": "string", "pattern": "^(?=a).*$"}),
            "input_schema.properties.s.pattern",
        ),
        (
            {"type": "object", "patternProperties": {"(x)\\1": {}}},
            "input_schema.patternProperties.(x)\\\\1",
        ),
    ],
)
def test_a_pattern_re2_cannot_evaluate_is_refused_on_save(
    schema: dict[str, Any], field: str
) -> None:
    with pytest.raises(RuleError) as caught:
        normalise_schema(schema)
    [violation] = caught.value.violations
    assert (violation.field, violation.rule) == (field, "pattern")
    assert "RE2" in violation.message


def test_a_backtracking_prone_pattern_re2_can_evaluate_is_accepted_on_save() -> None:
    assert normalise_schema(_schema(s={"type": "string", "pattern": EVIL}))["properties"]["s"]


def test_the_budget_is_spent_by_work_not_by_waiting() -> None:
    """A thread kept off the CPU (a loaded machine, the GIL held elsewhere) past its budget
    still checks a small value: the budget is the thread's CPU time, not the clock's."""
    validator = ValidatorCache().get({"type": "object", "properties": {"text": {"type": "string"}}})
    with budget(0.05):
        time.sleep(0.2)
        assert list(validator.iter_errors({"text": "hello"})) == []
        spin_until = time.thread_time() + 0.1
        while time.thread_time() < spin_until:
            pass
        with pytest.raises(BudgetExceededError):
            list(validator.iter_errors({"text": "hello"}))
