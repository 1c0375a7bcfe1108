"""Views in the catalog table (moto server over HTTP): versioned writes, resolution, pins."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import AwsStack
from kiln.access.resolve import ViewCatalog
from kiln.access.view_store import ViewStore
from kiln.access.views import (
    StaleViewError,
    ViewExistsError,
    ViewNotFoundError,
    ViewRuleError,
    check_view,
)
from kiln.catalog.rules import check_draft
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore


def draft(name: str, text: str, **extra: Any) -> Any:
    code = f"print({text!r})\n"
    return check_draft({"name": name, "description": "d", "language": "python", "code": code,
                        **extra})  # fmt: skip


@pytest.fixture
def parts(aws: AwsStack) -> tuple[CatalogStore, ViewStore, CatalogSnapshots, ViewCatalog]:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    views = ViewStore(aws.clients.dynamodb, table=aws.table)
    catalog = ViewCatalog(views, lambda tool_id, n: store.revision(f"id:{tool_id}", n))
    return store, views, CatalogSnapshots(store), catalog


def shown(snapshots: CatalogSnapshots, catalog: ViewCatalog, view: str) -> dict[str, int] | None:
    snapshot = snapshots.current()
    tools = catalog.tools_of(snapshot.version, view, snapshot.tools)
    return None if tools is None else {name: tool.head.number for name, tool in tools.items()}


def test_a_view_write_bumps_the_catalog_version(parts: Any) -> None:
    store, views, _, _ = parts
    before = store.catalog_version()
    views.put(check_view({"name": "v", "tools": []}), expected_revision=None)
    assert store.catalog_version() == before + 1


def test_a_view_shows_named_and_tagged_tools_and_holds_pins(parts: Any) -> None:
    store, views, snapshots, catalog = parts
    store.create(draft("pinned", "one"))
    store.create(draft("tagged", "t", tags=["finance"]))
    store.create(draft("other", "o"))
    views.put(check_view({"name": "v", "tools": ["pinned@1", "tag:finance"]}),
              expected_revision=None)  # fmt: skip
    assert shown(snapshots, catalog, "v") == {"pinned": 1, "tagged": 1}
    store.update("pinned", draft("pinned", "two"), expected_revision=1)
    store.update("pinned", draft("pinned", "three"), expected_revision=2)
    store.update("other", draft("other", "o", tags=["finance"]), expected_revision=1)
    assert shown(snapshots, catalog, "v") == {"pinned": 1, "tagged": 1, "other": 2}
    snapshot = snapshots.current()
    tools = catalog.tools_of(snapshot.version, "v", snapshot.tools)
    assert tools is not None
    assert store.code(tools["pinned"].head) == "print('one')\n"


def test_disabled_tools_and_missing_pins_are_left_out(parts: Any) -> None:
    store, views, snapshots, catalog = parts
    store.create(draft("a", "a"))
    store.create(draft("b", "b"))
    views.put(check_view({"name": "v", "tools": ["a", "b@4", "ghost"]}), expected_revision=None)
    store.set_enabled("a", False)
    assert shown(snapshots, catalog, "v") == {}
    assert shown(snapshots, catalog, "nope") is None


def test_view_writes_are_conditional(parts: Any) -> None:
    _, views, _, _ = parts
    view = check_view({"name": "v", "tools": ["a"]})
    first = views.put(view, expected_revision=None, actor="key:me")
    assert (first.revision, first.updated_by) == (1, "key:me")
    with pytest.raises(ViewExistsError):
        views.put(view, expected_revision=None)
    assert views.put(view, expected_revision=1).revision == 2
    with pytest.raises(StaleViewError) as stale:
        views.put(view, expected_revision=1)
    assert stale.value.current == 2
    assert views.get("v").entries[0].tool == "a"
    views.delete("v")
    with pytest.raises(ViewNotFoundError):
        views.get("v")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad Name", "tools": []}, "name"),
        ({"name": "v", "tools": "a"}, "tools"),
        ({"name": "v", "tools": ["a@0"]}, "tools[0]"),
        ({"name": "v", "tools": ["tag:x@2"]}, "tools[0]"),
        ({"name": "v", "tools": ["tag:UPPER"]}, "tools[0]"),
        ({"name": "v", "tools": ["a", "a@2"]}, "tools"),
        ({"name": "v", "tools": [], "published": "yes"}, "published"),
        ({"name": "v", "tools": [], "quota": {"calls_per_minute": -1}}, "quota.calls_per_minute"),
        ({"name": "v", "tools": [], "colour": "red"}, "colour"),
    ],
)
def test_bad_view_definitions_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ViewRuleError) as refused:
        check_view(body)
    assert field in [f for f, _ in refused.value.problems]


def test_a_definition_reads_back_as_written() -> None:
    body = {
        "name": "v",
        "description": "d",
        "tools": ["a@3", "tag:x", "b"],
        "published": True,
        "anonymous": False,
        "quota": {"calls_per_minute": 5},
        "oauth_scopes": ["kiln:view:v"],
    }
    assert check_view(body).definition() == body
