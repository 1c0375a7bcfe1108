"""The `tags` and `calls` manifest fields: checked, normalised, and carried through tool folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kiln.catalog.files import read_folder, write_folder
from kiln.catalog.rules import RuleError, check_draft


def payload(**extra: Any) -> dict[str, Any]:
    return {"name": "t", "description": "d", "language": "python", "code": "print(1)\n", **extra}


def test_tags_keep_the_authors_order_and_default_to_none() -> None:
    assert check_draft(payload(tags=["sales", "finance"])).tags == ("sales", "finance")
    assert check_draft(payload()).tags == ()


@pytest.mark.parametrize(
    ("tags", "field", "rule"),
    [
        ("finance", "tags", "type"),
        (["Finance"], "tags[0]", "tag"),
        (["a" * 33], "tags[0]", "tag"),
        ([""], "tags[0]", "tag"),
        ([7], "tags[0]", "tag"),
        (["x", "x"], "tags", "unique"),
        ([f"t{i}" for i in range(21)], "tags", "type"),
    ],
)
def test_bad_tags_are_refused_naming_field_and_rule(tags: object, field: str, rule: str) -> None:
    with pytest.raises(RuleError) as refused:
        check_draft(payload(tags=tags))
    assert (field, rule) in [(v.field, v.rule) for v in refused.value.violations]


def test_tags_survive_a_folder_round_trip(tmp_path: Path) -> None:
    draft = check_draft(payload(tags=["uk", "finance"]))
    folder = write_folder(tmp_path, draft)
    assert '"tags": [\n    "uk",\n    "finance"\n  ]' in (folder / "tool.json").read_text()
    assert read_folder(folder) == draft
    untagged = write_folder(tmp_path / "u", check_draft(payload()))
    assert "tags" not in (untagged / "tool.json").read_text()


def test_calls_keep_the_authors_order_default_to_none_and_go_through_tool_folders(
    tmp_path: Path,
) -> None:
    draft = check_draft(payload(calls=["fx_rate", "format-money"]))
    assert draft.calls == ("fx_rate", "format-money")
    assert check_draft(payload()).calls == ()
    assert read_folder(write_folder(tmp_path, draft)) == draft


@pytest.mark.parametrize(
    ("calls", "field", "rule"),
    [
        ("fx_rate", "calls", "type"),
        (["9lives"], "calls[0]", "name"),
        ([7], "calls[0]", "name"),
        (["fx rate"], "calls[0]", "name"),
        (["x", "x"], "calls", "unique"),
        ([f"t{i}" for i in range(33)], "calls", "type"),
    ],
)
def test_bad_calls_are_refused_naming_field_and_rule(calls: object, field: str, rule: str) -> None:
    with pytest.raises(RuleError) as refused:
        check_draft(payload(calls=calls))
    assert (field, rule) in [(v.field, v.rule) for v in refused.value.violations]
