"""A call resolves its tool once: what `get_tool` found (the catalog tool at its view's
revision, and the view) rides along in the ResolvedTool, and the run uses it. Nothing looks the
tool up again by name, nor computes the view's tools again.

A view path's view is read once too, by its route, and carried down in the context.

Shown with the real backend over a real catalog in the emulator: between the lookup and the
run the catalog moves on so that a second lookup by name would find nothing, and the call
still runs what its request resolved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import AwsStack
from kiln.access.views import check_view
from kiln.catalog.rules import check_draft
from kiln.protocol.backend import CallContext, ToolOutcome
from kiln.settings import Settings
from kiln.stack import Kiln, build_kiln

HELLO = {"name": "hello", "description": "d", "language": "python", "code": "print('hi')\n"}


@pytest.fixture
def kiln(aws: AwsStack, tmp_path: Path) -> Iterator[Kiln]:
    settings = Settings(
        table=aws.table, bucket=aws.bucket, endpoint_url=aws.endpoint_url, region="us-east-1",
        bundle_cache_dir=tmp_path, bind_host="127.0.0.1",
    )  # fmt: skip
    built = build_kiln(settings, clients=aws.clients)
    built.store.create(check_draft(HELLO), actor="test")
    try:
        yield built
    finally:
        built.close_runner()


def assert_ran(outcome: ToolOutcome) -> None:
    problem = f"the call did not run the tool its request resolved: {outcome.text}"
    assert not outcome.is_error, problem
    assert outcome.stdout == "hi\n", problem


def test_a_call_runs_the_tool_it_resolved_though_its_name_moved_on(kiln: Kiln) -> None:
    async def call() -> ToolOutcome:
        ctx = CallContext(time_left_s=30.0)
        resolved = await kiln.backend.get_tool("hello", ctx)
        assert resolved is not None, "get_tool did not find the tool"
        kiln.store.rename("hello", "hello_renamed", actor="test")
        await kiln.snapshots.fresh()  # the catalog moved on: no tool is named "hello" now
        assert await kiln.backend.get_tool("hello", ctx) is None
        return await kiln.backend.call_tool(resolved, {}, ctx)

    assert_ran(asyncio.run(call()))


def test_a_view_call_runs_the_tool_its_view_showed_when_it_was_resolved(kiln: Kiln) -> None:
    view = kiln.views.store.put(
        check_view({"name": "greet", "tools": ["hello"], "published": True, "anonymous": True}),
        expected_revision=None,
    )

    async def call() -> ToolOutcome:
        ctx = CallContext(time_left_s=30.0, view=view)
        resolved = await kiln.backend.get_tool("hello", ctx)
        assert resolved is not None, "get_tool did not find the tool through its view"
        emptied = check_view({"name": "greet", "tools": [], "published": True})
        now = kiln.views.store.put(emptied, expected_revision=view.revision)
        await kiln.snapshots.fresh()  # the view shows no tool now
        assert await kiln.backend.get_tool("hello", CallContext(view=now)) is None
        return await kiln.backend.call_tool(resolved, {}, ctx)

    assert_ran(asyncio.run(call()))


def test_a_view_path_call_uses_the_view_its_route_read_and_reads_no_other(kiln: Kiln) -> None:
    """/mcp/v/<name>: the route reads the view (to check it is published, its credential);
    the backend takes that View from the context and never looks the view up again by name.
    Here the views move on between the two (the view is deleted, and another request has
    already read the views as they are now): a second lookup would find no view at all."""
    kiln.views.store.put(
        check_view({"name": "greet", "tools": ["hello"], "published": True, "anonymous": True}),
        expected_revision=None,
    )

    async def call() -> ToolOutcome:
        snapshot = await kiln.snapshots.fresh()
        found = kiln.views.views_at(snapshot.version)["greet"]  # what the route reads
        kiln.views.store.delete("greet")
        newer = await kiln.snapshots.fresh()
        assert "greet" not in kiln.views.views_at(newer.version), "the view was not deleted"
        ctx = CallContext(time_left_s=30.0, view=found)
        with kiln.snapshots.pinned(snapshot):  # as the route pins it for its request
            resolved = await kiln.backend.get_tool("hello", ctx)
            assert resolved is not None, "get_tool looked the view up again and found none"
            assert resolved.view is found, "get_tool used another View than its route read"
            return await kiln.backend.call_tool(resolved, {}, ctx)

    assert_ran(asyncio.run(call()))


def test_a_view_in_the_context_must_be_the_view_its_route_read(kiln: Kiln) -> None:
    class Named:
        name = "greet"

    with pytest.raises(TypeError, match="the View its route found"):
        asyncio.run(kiln.backend.get_tool("hello", CallContext(view=Named())))
