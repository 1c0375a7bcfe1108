"""A tool's `connections`: the providers and scopes whose per-caller tokens its script needs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kiln.catalog.files import read_folder, write_folder
from kiln.catalog.model import Revision
from kiln.catalog.rules import RuleError, check_draft
from kiln.catalog.store import revision_from_json, revision_to_json


def payload(**extra: Any) -> dict[str, Any]:
    return {"name": "t", "description": "d", "language": "python", "code": "print(1)\n", **extra}


def test_connections_are_kept_as_declared_and_go_through_folders(tmp_path: Path) -> None:
    needs = [{"provider": "github", "scopes": ["repo", "read:org"]}, {"provider": "google-drive"}]
    draft = check_draft(payload(connections=needs))
    assert draft.connections == (
        {"provider": "github", "scopes": ["repo", "read:org"]},
        {"provider": "google-drive", "scopes": []},
    )
    assert check_draft(payload()).connections == ()
    assert read_folder(write_folder(tmp_path, draft)) == draft
    assert (
        "connections"
        not in (write_folder(tmp_path / "n", check_draft(payload())) / "tool.json").read_text()
    )


@pytest.mark.parametrize(
    ("connections", "field", "rule"),
    [
        ("github", "connections", "type"),
        ([{"provider": "GitHub"}], "connections[0].provider", "name"),
        ([{"provider": "github", "scopes": "repo"}], "connections[0].scopes", "type"),
        ([{"provider": "github", "scopes": ["a b"]}], "connections[0].scopes", "type"),
        ([{"provider": "github", "scope": ["repo"]}], "connections[0]", "type"),
        (["github"], "connections[0]", "type"),
        ([{"provider": "x"}, {"provider": "x"}], "connections", "unique"),
        ([{"provider": f"p{i}"} for i in range(9)], "connections", "type"),
    ],
)
def test_bad_connections_are_refused_naming_field_and_rule(
    connections: object, field: str, rule: str
) -> None:
    with pytest.raises(RuleError) as refused:
        check_draft(payload(connections=connections))
    assert (field, rule) in [(v.field, v.rule) for v in refused.value.violations]


def test_a_revision_without_connections_reads_as_none() -> None:
    revision = Revision(
        tool_id="t1", number=1, description="d", language="python", code_key="k",
        code_sha256="s", requirements=(), input_schema={}, output_schema=None, title=None,
        annotations=None, timeout_seconds=5.0, bundle_id=None, created_at="now",
    )  # fmt: skip
    stored = json.loads(revision_to_json(revision))
    del stored["connections"]  # a revision saved before connections were known
    assert revision_from_json(json.dumps(stored)).connections == ()
    needing = replace(revision, connections=({"provider": "github", "scopes": ["repo"]},))
    assert revision_from_json(revision_to_json(needing)) == needing
