"""The approvals inbox: an unattended caller's call waits; an approver approves it in the studio.

The caller is the official Python SDK (mcp 1.x: tasks, no elicitation) in its own process,
calling through a view whose `approvers` list the approver; the approver signs in to the
studio with her own author key, sees the call (tool, revision, arguments, caller, when) and
approves it; the SDK's task then completes with the tool's result, and it ran once.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from support import toolchain
from support.browser import Dev, both_widths, sign_in

CACHE = Path(os.environ.get("MCP_YARDSTICK_CACHE", Path.home() / ".cache" / "mcp-yardsticks"))
SDK_VENV = CACHE / "py-mcp-1.30.0"  # the yardsticks' venv of mcp 1.30 (tasks, no elicitation)
CLIENT = Path(__file__).resolve().parents[1] / "functional" / "tasks" / "sdk_waiting_client.py"
CODE = "import json, sys\nargs = json.load(sys.stdin)\nprint(f\"wiped {args['target']}\")\n"


def key(dev: Dev, name: str, scope: str) -> str:
    made = dev.api("POST", "/api/keys", json={"name": name, "scope": scope})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def test_an_approver_approves_a_waiting_sdk_call_in_the_inbox_and_it_runs_once(
    browser: Any, dev: Dev
) -> None:
    SDK = toolchain.python_venv(SDK_VENV, "mcp==1.30.0")  # made here if no test made it yet
    tag = uuid.uuid4().hex[:6]
    tool, approver, caller = f"wipe_{tag}", f"alice-{tag}", f"agent-{tag}"
    body = {"name": tool, "description": "Wipes a target.", "language": "python", "code": CODE,
            "input_schema": {"type": "object", "properties": {"target": {"type": "string"}}},
            "annotations": {"destructiveHint": True}}  # fmt: skip
    assert dev.api("POST", "/api/tools", json=body).status_code == 201
    view = {"name": f"ops-{tag}", "tools": [tool], "confirm": "writes", "approvers": [approver]}
    assert dev.api("POST", "/api/views", json=view).status_code == 201
    alice, agent = key(dev, approver, "author"), key(dev, caller, "call")
    bound = dev.api("PUT", f"/api/keys/{caller}/binding", json={"view": f"ops-{tag}"})
    assert bound.status_code == 200, bound.text

    sdk = subprocess.Popen(
        [str(SDK), str(CLIENT), dev.url + "/mcp", agent, tool, '{"target": "prod-db"}'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    context = browser.new_context(base_url=dev.url, viewport={"width": 1440, "height": 900})
    try:
        assert sdk.stdout is not None
        created = json.loads(sdk.stdout.readline() or "{}")
        assert created.get("status") == "working", sdk.stderr.read() if sdk.stderr else ""
        approval_id = created["meta"]["kiln/approval"]["id"]

        page = context.new_page()
        sign_in(page, alice)
        page.get_by_role("link", name="Approvals", exact=True).click()
        card = page.locator(f'[data-approval="{approval_id}"]')
        expect(card).to_be_visible()
        expect(card.get_by_role("heading")).to_contain_text(f"{tool} revision 1")
        expect(card.get_by_test_id("caller")).to_have_text(f"key:{caller}")
        expect(card.get_by_test_id("arguments")).to_contain_text('"target": "prod-db"')
        expect(card.locator("time")).to_be_visible()
        both_widths(page, "40-approvals-inbox")  # axe clean, no sideways scroll at 390 px

        card.get_by_role("button", name="Approve").click()
        expect(page.get_by_text(f"{tool}: approved; it runs now.")).to_be_visible()
        expect(card).to_have_count(0)

        out, err = sdk.communicate(timeout=120)
        assert sdk.returncode == 0, err[-3000:]
    finally:
        context.close()
        if sdk.poll() is None:
            sdk.kill()
            sdk.communicate()
    ended = json.loads(out.strip().splitlines()[-1])
    assert ended["statuses"][-1] == "completed", ended
    assert ended["result"]["content"][0]["text"].startswith("wiped prod-db"), ended
    calls = dev.api("GET", "/api/calls", params={"limit": 200}).json()["calls"]
    ran = [c for c in calls if c["tool"] == tool and c["outcome"] == "ok"]
    assert len(ran) == 1, ran
    assert ran[0]["detail"].startswith(f"task; approved by {approver} at ")
