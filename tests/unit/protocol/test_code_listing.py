"""What tools/list shows in code mode: `execute` alone, naming every function, for a view of at
most SMALL_VIEW tools; search_tools, describe_tools and execute past that (discovery.py)."""

from __future__ import annotations

from kiln.protocol.backend import Served, ToolView
from kiln.protocol.calling import ToolCaller
from kiln.protocol.cursor import CursorCodec
from kiln.protocol.discovery import SMALL_VIEW, Discovery
from kiln.protocol.listing import ToolLister

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def discovery() -> Discovery:
    lister = ToolLister(CursorCodec(b"k" * 32), page_size=100, ttl_ms=0, tasks=False)
    return Discovery(lister, ToolCaller(backend=None))  # type: ignore[arg-type]


def tools(count: int) -> tuple[ToolView, ...]:
    return tuple(ToolView(f"tool_{i}", f"Does thing {i}.", SCHEMA) for i in range(count))


def test_a_small_code_view_lists_execute_alone_naming_every_function_once_made() -> None:
    found = discovery()
    served = Served(tools(SMALL_VIEW), "code")
    (execute,) = found.shown(served)
    assert execute.name == "execute"
    for i in range(SMALL_VIEW):
        assert f"tool_{i}(n: int)" in execute.description
    assert found.shown(served) is found.shown(served)  # made once per list: pages cached


def test_a_larger_code_view_lists_search_describe_and_execute() -> None:
    shown = discovery().shown(Served(tools(SMALL_VIEW + 1), "code"))
    assert [t.name for t in shown] == ["search_tools", "describe_tools", "execute"]
    assert "tool_0" not in shown[2].description


def test_list_and_search_mode_are_as_they_were() -> None:
    listed = tools(3)
    assert discovery().shown(Served(listed, "list")) is listed
    names = [t.name for t in discovery().shown(Served(listed, "search"))]
    assert names == ["search_tools", "describe_tools", "call_tool"]
