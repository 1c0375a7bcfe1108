"""The breaking-change detector against the labelled pairs written before it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kiln.catalog.breaking import findings

CASES = json.loads((Path(__file__).with_name("breaking_cases.json")).read_text())["cases"]


def _flagged(case: dict[str, Any]) -> bool:
    return bool(findings(case["old"], case["new"]))


def test_the_labelled_set_has_at_least_40_pairs_of_both_kinds() -> None:
    assert len(CASES) >= 40
    assert {case["breaking"] for case in CASES} == {True, False}
    assert len({case["id"] for case in CASES}) == len(CASES)


def test_no_breaking_change_is_missed_and_at_most_two_false_alarms() -> None:
    counts = {"true_positive": 0, "false_negative": 0, "false_positive": 0, "true_negative": 0}
    missed, alarms = [], []
    for case in CASES:
        flagged = _flagged(case)
        if case["breaking"]:
            counts["true_positive" if flagged else "false_negative"] += 1
            if not flagged:
                missed.append(f"{case['id']}: {case['reason']}")
        else:
            counts["false_positive" if flagged else "true_negative"] += 1
            if flagged:
                alarms.append(
                    f"{case['id']}: {[f.message for f in findings(case['old'], case['new'])]}"
                )
    print(f"\nbreaking-change detector on {len(CASES)} labelled pairs: {counts}")
    for line in alarms:
        print(f"  false alarm: {line}")
    assert not missed, "breaking changes missed:\n" + "\n".join(missed)
    assert len(alarms) <= 2, "false alarms:\n" + "\n".join(alarms)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_each_breaking_pair_is_found_with_a_message_naming_its_path(case: dict[str, Any]) -> None:
    found = findings(case["old"], case["new"])
    if case["breaking"]:
        assert found, f"missed: {case['reason']}"
        for finding in found:
            assert finding.message.startswith(finding.path), finding
            json.dumps(finding.to_json())  # findings are recorded as JSON


def test_findings_of_a_renamed_input_name_both_sides() -> None:
    old = {"input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}  # fmt: skip
    new = {"input_schema": {"type": "object", "properties": {"town": {"type": "string"}},
                            "required": ["town"]}}  # fmt: skip
    kinds = {(f.kind, f.path) for f in findings(old, new)}
    assert kinds == {
        ("required-input", "input_schema/properties/town"),
        ("removed-input", "input_schema/properties/city"),
    }


def test_a_recursive_schema_is_compared_without_looping() -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array",
            "items": {"$ref": "#"}}}}  # fmt: skip
    assert findings({"input_schema": tree}, {"input_schema": tree}) == []
    narrower = {**tree, "additionalProperties": False}
    assert [f.kind for f in findings({"input_schema": tree}, {"input_schema": narrower})]
