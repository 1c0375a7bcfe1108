"""View files beside tool folders: read, checked, pushed (created / updated / unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import AwsStack
from kiln.access.view_files import (
    ViewFileError,
    ViewStoreTarget,
    push_views,
    read_view_file,
    view_files,
    write_view_file,
)
from kiln.access.view_store import ViewStore


def write(root: Path, name: str, body: object) -> Path:
    path = root / f"{name}.view.json"
    path.write_text(json.dumps(body))
    return path


def test_pushing_view_files_creates_then_updates_then_leaves_alone(
    aws: AwsStack, tmp_path: Path
) -> None:
    (tmp_path / "add_vat").mkdir()  # a tool folder beside it is not a view
    write(tmp_path, "finance", {"tools": ["add_vat@1", "tag:finance"], "published": True})
    store = ViewStore(aws.clients.dynamodb, table=aws.table)
    target = ViewStoreTarget(store)
    assert [r.action for r in push_views(target, view_files(tmp_path))] == ["created"]
    assert [r.action for r in push_views(target, view_files(tmp_path))] == ["unchanged"]
    write(tmp_path, "finance", {"tools": ["add_vat@2"]})
    assert [r.action for r in push_views(target, view_files(tmp_path))] == ["updated"]
    saved = store.get("finance")
    assert (saved.revision, [str(e) for e in saved.entries]) == (2, ["add_vat@2"])


def test_a_pulled_view_file_reads_back_as_the_same_view(tmp_path: Path) -> None:
    original = write(tmp_path, "v", {"tools": ["a@3", "tag:x"], "quota": {"calls_per_minute": 9}})
    view = read_view_file(original)
    again = write_view_file(tmp_path / ".." / tmp_path.name, view)
    assert read_view_file(again) == view


def test_a_bad_view_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = write(tmp_path, "v", {"tools": ["tag:Bad"]})
    with pytest.raises(ViewFileError, match=r"v\.view\.json: tools\[0\]: the tag must be"):
        read_view_file(bad)
    (tmp_path / "w.view.json").write_text("{nope")
    with pytest.raises(ViewFileError, match=r"w\.view\.json: not valid JSON"):
        read_view_file(tmp_path / "w.view.json")
