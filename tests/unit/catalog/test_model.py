"""The catalog's plain data (kiln.catalog.model): what a draft and its revision hold alike."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from kiln.authoring.serialise import draft_of
from kiln.catalog.model import DEFINITION_FIELDS, Revision, Tool, definition_of
from kiln.catalog.rules import CANONICAL_FIELDS
from kiln.catalog.toolfiles import same_definition

CODE = "print('hi')\n"


def _tool() -> Tool:
    head = Revision(
        tool_id="t1",
        number=3,
        description="Says hi",
        language="python",
        code_key="code/x.py",
        code_sha256=hashlib.sha256(CODE.encode()).hexdigest(),
        requirements=("httpx==0.27.0",),
        input_schema={"type": "object"},
        output_schema=None,
        title="Hi",
        annotations={"readOnlyHint": True},
        timeout_seconds=12.0,
        bundle_id="b1",
        created_at="2026-01-01T00:00:00Z",
        secrets=("TOKEN",),
        task="optional",
        tags=("greeting",),
        calls=("other",),
    )
    return Tool(id="t1", name="hi", enabled=True, head=head, created_at="", updated_at="")


def test_all_a_save_takes_but_name_code_enabled_and_files_is_kept_on_the_revision() -> None:
    # name and enabled belong to the tool; code and files are stored apart, by digest
    said = set(CANONICAL_FIELDS) - {"name", "code", "enabled", "files"}
    assert set(DEFINITION_FIELDS) == said, f"not kept as said: {said - set(DEFINITION_FIELDS)}"


def test_the_draft_of_a_tool_says_what_its_head_says_and_saving_it_changes_nothing() -> None:
    tool = _tool()
    draft = draft_of(tool, CODE)
    assert definition_of(draft) == definition_of(tool.head)
    assert (draft.name, draft.code, draft.enabled) == ("hi", CODE, True)
    assert same_definition(tool, draft)


def test_a_draft_that_differs_in_any_defined_field_is_a_change() -> None:
    tool = _tool()
    draft = draft_of(tool, CODE)
    for name in DEFINITION_FIELDS:
        other = {**definition_of(draft), name: object()}  # equal to nothing
        assert not same_definition(tool, replace(draft, **other)), name
