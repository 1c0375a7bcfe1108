"""A revision's fingerprint (kiln.catalog.fingerprint): what changes it, and what does not."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields, replace
from typing import Any

import pytest

from kiln.catalog import fingerprint
from kiln.catalog.model import Revision, Tool
from kiln.catalog.packages import LEGACY

REVISION = Revision(
    tool_id="t1",
    number=3,
    description="Add UK VAT to a net amount.",
    language="python",
    code_key="code/" + "a" * 64 + ".py",
    code_sha256="a" * 64,
    requirements=("humanize==4.9.0",),
    input_schema={
        "type": "object",
        "properties": {"net": {"type": "number", "minimum": 0}, "note": {"type": "string"}},
        "required": ["net"],
    },
    output_schema={"type": "object", "properties": {"gross": {"type": "number"}}},
    title="Add VAT",
    annotations={"readOnlyHint": True, "openWorldHint": False},
    timeout_seconds=30.0,
    bundle_id="b" * 32,
    created_at="2026-12-04T10:00:00.000Z",
    created_by="key:alice",
    secrets=("API_TOKEN",),
    files={"rates.json": "c" * 64},
    task="optional",
    tags=("finance",),
    calls=("fx_rate",),
)
BASE = fingerprint.of("add_vat", REVISION)

# One change of each field that is in the form: each must give another fingerprint.
CHANGES_IN: dict[str, Any] = {
    "title": "Add VAT (UK)",
    "description": "Add UK VAT to a net amount, rounded.",
    "language": "node",
    "input_schema": {**REVISION.input_schema, "required": ["net", "note"]},
    "output_schema": {"type": "object", "properties": {"gross": {"type": "string"}}},
    "annotations": {"readOnlyHint": False, "openWorldHint": False},
    "task": "required",
    "timeout_seconds": 31.0,
    "requirements": ("humanize==4.10.0",),
    "secrets": ("API_TOKEN", "OTHER"),
    "calls": (),
    "connections": ({"provider": "github", "scopes": ["repo"]},),
    "code_sha256": "d" * 64,
    "files": {"rates.json": "e" * 64},
    "bundle_id": "f" * 32,
}
# ... and of each that is out: none may.
CHANGES_OUT: dict[str, Any] = {
    "tool_id": "t2",
    "number": 4,
    "created_at": "2027-01-01T00:00:00.000Z",
    "created_by": "key:bob",
    "restored_from": 1,
    "tags": ("finance", "uk"),
    "code_key": "code/elsewhere.py",
    "fingerprint": "sha256:" + "0" * 64,
    "saved_as": "old_name",
    "breaking": ({"kind": "input_required", "path": "note", "message": "note is now required"},),
}


def test_a_fingerprint_is_sha256_over_the_jcs_form() -> None:
    raw = fingerprint.canonical_bytes("add_vat", REVISION)
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == BASE
    assert fingerprint.is_fingerprint(BASE)
    # JCS: keys sorted, no spaces, 30.0 written as 30, non-ASCII as UTF-8
    assert raw.startswith(b'{"annotations":{"openWorldHint":false,"readOnlyHint":true},')
    assert b'"timeout_seconds":30,' in raw
    assert b'": ' not in raw
    assert b'", ' not in raw


def test_every_field_of_a_revision_is_decided_in_or_out() -> None:
    decided = set(fingerprint.IN) | set(fingerprint.RENAMED) | set(fingerprint.OUT)
    assert decided == {f.name for f in fields(Revision)}
    assert set(CHANGES_IN) == set(fingerprint.IN) | set(fingerprint.RENAMED)
    assert set(CHANGES_OUT) == set(fingerprint.OUT)


@pytest.mark.parametrize("field", sorted(CHANGES_IN))
def test_a_change_of_what_it_is_or_what_runs_changes_the_fingerprint(field: str) -> None:
    changed = fingerprint.of("add_vat", replace(REVISION, **{field: CHANGES_IN[field]}))
    assert changed != BASE, f"changing {field} left the fingerprint as it was"


@pytest.mark.parametrize("field", sorted(CHANGES_OUT))
def test_a_change_of_nothing_a_client_sees_or_runs_leaves_the_fingerprint(field: str) -> None:
    changed = fingerprint.of("add_vat", replace(REVISION, **{field: CHANGES_OUT[field]}))
    assert changed == BASE, f"changing {field} changed the fingerprint"


def test_the_name_it_is_served_under_is_in_the_fingerprint() -> None:
    assert fingerprint.of("add_tax", REVISION) != BASE
    saved = fingerprint.sealed("add_vat", REVISION)
    assert (saved.fingerprint, saved.saved_as) == (BASE, "add_vat")
    assert fingerprint.served("add_vat", saved) == BASE
    assert fingerprint.served("add_tax", saved) == fingerprint.of("add_tax", REVISION)
    # saved before fingerprints: computed from what it holds
    assert fingerprint.served("add_vat", replace(REVISION, fingerprint="", saved_as="")) == BASE


def test_a_change_inside_a_schema_or_a_file_list_changes_it() -> None:
    deeper = {**REVISION.input_schema}
    deeper["properties"] = {**deeper["properties"], "net": {"type": "number", "minimum": 1}}
    assert fingerprint.of("add_vat", replace(REVISION, input_schema=deeper)) != BASE
    more = {**REVISION.files, "README.md": "c" * 64}
    assert fingerprint.of("add_vat", replace(REVISION, files=more)) != BASE
    renamed = {"rates2.json": "c" * 64}
    assert fingerprint.of("add_vat", replace(REVISION, files=renamed)) != BASE


def _reversed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed(v) for v in value]
    return value


def test_dict_order_and_number_spelling_leave_it_alone() -> None:
    turned = replace(
        REVISION,
        input_schema=_reversed(json.loads(json.dumps(REVISION.input_schema))),
        annotations=_reversed(dict(REVISION.annotations or {})),
        files=_reversed(dict(REVISION.files)),
        timeout_seconds=30,  # an int where the store keeps a float
    )
    assert fingerprint.of("add_vat", turned) == BASE
    # The order of a list is meaning (enum order, required order as listed): it counts.
    swapped = {**REVISION.input_schema, "required": ["net"], "x": [1, 2]}
    assert fingerprint.of("add_vat", replace(REVISION, input_schema=swapped)) != (
        fingerprint.of("add_vat", replace(REVISION, input_schema={**swapped, "x": [2, 1]}))
    )


def test_integers_past_i_json_are_taken_as_the_doubles_clients_read() -> None:
    big = {"type": "integer", "maximum": 2**60}
    assert fingerprint.is_fingerprint(fingerprint.of("t", replace(REVISION, input_schema=big)))


@pytest.mark.parametrize(
    "text",
    ["sha256:" + "A" * 64, "sha256:" + "a" * 63, "sha1:" + "a" * 40, "a" * 64, None, 7],
)
def test_only_the_sha256_form_is_a_fingerprint(text: object) -> None:
    assert not fingerprint.is_fingerprint(text)


NO_PACKAGES = replace(REVISION, requirements=(), bundle_id=None)
# A tool without packages keeps the fingerprint it had before resolved versions were folded
# in (computed by the form of commit b2bb975).
NO_PACKAGES_PRINT = "sha256:cf939cce24b9386e1b3d0046fea47cd3959e07928036861c6c6af4f40d7dadcd"


def test_a_tool_without_packages_keeps_its_fingerprint() -> None:
    assert fingerprint.of("add_vat", NO_PACKAGES) == NO_PACKAGES_PRINT


def test_what_the_bundle_resolved_to_stands_in_for_the_bundle_id() -> None:
    one, other = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    form = fingerprint.canonical_form("add_vat", REVISION, one)
    assert form["packages"] == one
    assert "bundle" not in form
    assert fingerprint.of("add_vat", REVISION, one) != fingerprint.of("add_vat", REVISION, other)
    assert fingerprint.of("add_vat", REVISION, one) != BASE
    # one resolution is one fingerprint, whatever bundle id (target, recipe) built it
    moved = replace(REVISION, bundle_id="d" * 32)
    assert fingerprint.of("add_vat", moved, one) == fingerprint.of("add_vat", REVISION, one)
    assert fingerprint.of("add_vat", moved) != BASE


ONE, OTHER = "sha256:" + "1" * 64, "sha256:" + "2" * 64
SAVED = fingerprint.sealed("add_vat", REVISION)


def _tool(revision: Revision, packages: dict[str, str | None] | None) -> Tool:
    when = "2026-12-04T10:00:00.000Z"
    return Tool("t1", "add_vat", True, revision, when, when, packages=packages)


def test_the_served_fingerprint_of_a_tool_with_packages_is_over_what_its_bundle_resolved_to() -> (
    None
):
    bundle = str(REVISION.bundle_id)
    served = fingerprint.served_tool(_tool(SAVED, {bundle: ONE}))
    assert served == fingerprint.of("add_vat", REVISION, ONE)
    assert served != SAVED.fingerprint  # not the bundle-id form stored at save
    # another resolution of the same requirements is another fingerprint; the same is the same
    assert fingerprint.served_tool(_tool(SAVED, {bundle: OTHER})) not in (served, None)
    assert fingerprint.served_tool(_tool(SAVED, {bundle: ONE, "x" * 32: OTHER})) == served
    assert fingerprint.build_of(_tool(SAVED, {bundle: ONE})) == ONE


def test_a_bundle_not_ready_or_not_read_has_no_served_fingerprint() -> None:
    bundle = str(REVISION.bundle_id)
    assert fingerprint.served_tool(_tool(SAVED, {bundle: None})) is None  # shown "pending"
    assert fingerprint.served_tool(_tool(SAVED, {})) is None  # never read: never guessed
    assert fingerprint.build_of(_tool(SAVED, {bundle: None})) is None


def test_without_packages_or_a_snapshot_the_served_fingerprint_is_the_saved_one() -> None:
    bare = fingerprint.sealed("add_vat", NO_PACKAGES)
    assert fingerprint.served_tool(_tool(bare, {})) == bare.fingerprint == NO_PACKAGES_PRINT
    assert fingerprint.served_tool(_tool(SAVED, None)) == SAVED.fingerprint  # from the store
    # ready, but built before records kept what it resolved to
    legacy = {str(REVISION.bundle_id): LEGACY}
    assert fingerprint.served_tool(_tool(SAVED, legacy)) == SAVED.fingerprint
    assert fingerprint.build_of(_tool(SAVED, legacy)) is None
