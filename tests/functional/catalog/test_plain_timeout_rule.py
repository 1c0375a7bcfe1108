"""A plain tool longer than the front door allows is refused on save, saying to make it a task.

The rule lives in `check_draft`, which every save goes through: the admin function's REST
API and admin MCP endpoint, `kiln dev`'s API and its tool folders, `kiln tools push`.
"""

from __future__ import annotations

from support.app import RunningKiln

LONG = {
    "name": "slow_report",
    "description": "Builds a report for up to fifteen minutes.",
    "language": "python",
    "code": "print('done')\n",
    "timeout_seconds": 900,
}


def test_a_900_second_plain_tool_is_refused_on_save_with_a_way_out(
    kiln_server: RunningKiln,
) -> None:
    refused = kiln_server.api("POST", "/api/tools", json=LONG)
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["error"]["violations"]
    assert problem["field"] == "timeout_seconds"
    assert "cut at 30 s by the deployed front door" in problem["message"]
    assert 'make it a task (set "task": "optional" or "required"' in problem["message"]


def test_the_same_tool_saved_as_a_task_is_accepted(kiln_server: RunningKiln) -> None:
    saved = kiln_server.api("POST", "/api/tools", json={**LONG, "task": "optional"})
    assert saved.status_code == 201, saved.text
