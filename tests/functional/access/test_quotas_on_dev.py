"""Quotas on `kiln dev`: exact admission under concurrency, 429 + Retry-After, batches."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from support.devserver import DevServer, kiln_dev


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("quotas")
    tools = root / "tools"
    for name, code in (("ping", "print('pong')\n"),
                       ("nap", "import time\ntime.sleep(0.6)\nprint('rested')\n")):  # fmt: skip
        (tools / name).mkdir(parents=True)
        (tools / name / "tool.json").write_text(json.dumps({"description": "d"}))
        (tools / name / "main.py").write_text(code)
    (tools / "metered.view.json").write_text(
        json.dumps(
            {
                "tools": ["ping"],
                "published": True,
                "anonymous": True,
                "quota": {"calls_per_minute": 2},
            }
        )
    )
    tight = {"tools": ["ping"], "published": True, "quota": {"calls_per_minute": 1}}
    (tools / "tight.view.json").write_text(json.dumps(tight))
    with kiln_dev(root / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


def ping(dev: DevServer, key: str | None, wire: str, path: str = "/mcp") -> Any:
    return dev.mcp("tools/call", {"name": "ping", "arguments": {}}, wire=wire, key=key, path=path)


def test_twenty_concurrent_callers_on_a_50_per_minute_key_get_exactly_50_calls(
    dev: DevServer,
) -> None:
    key = dev.create_key("fifty", "--calls-per-minute", "50")

    def caller(index: int) -> list[Any]:
        wire = "legacy" if index % 2 else "modern"
        return [ping(dev, key, wire) for _ in range(5)]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = [a for batch in pool.map(caller, range(20)) for a in batch]
    took = time.monotonic() - started
    admitted = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    statuses = Counter(a.status_code for a in answers)
    assert took < 55, f"the burst took {took:.0f} s: longer than one minute window"
    assert (len(admitted), len(refused)) == (50, 50), statuses
    failed = [a.text for a in admitted if a.json()["result"]["isError"]]
    assert not failed, failed[:3]
    for answer in refused:
        assert 1 <= int(answer.headers["retry-after"]) <= 60
        error = answer.json()["error"]
        assert error["code"] == -32029
        assert error["data"]["quota"] == "calls_per_minute"
        assert error["data"]["limit"] == 50
        assert error["data"]["resets_at"].endswith("Z")
        assert "50 calls per minute" in error["message"]
    ledger = dev.api("GET", "/api/calls?caller=key:fifty&limit=1000").json()["calls"]
    outcomes = sorted(entry["outcome"] for entry in ledger)
    assert outcomes == ["ok"] * 50 + ["refused"] * 50


def test_inside_a_batch_a_refusal_is_a_json_rpc_error_with_the_same_meaning(
    dev: DevServer,
) -> None:
    key = dev.create_key("one-a-minute", "--calls-per-minute", "1")
    batch = [
        {"jsonrpc": "2.0", "id": n, "method": "tools/call",
         "params": {"name": "ping", "arguments": {}}}
        for n in (1, 2)
    ]  # fmt: skip
    answer = dev.http.post(
        dev.url + "/mcp",
        json=batch,
        headers={"Content-Type": "application/json", "Accept": "application/json",
                 "MCP-Protocol-Version": "2025-03-26", "Authorization": f"Bearer {key}"},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    replies = {reply["id"]: reply for reply in answer.json()}
    kinds = sorted("result" if "result" in r else str(r["error"]["code"]) for r in replies.values())
    assert kinds == ["-32029", "result"]
    (refused,) = [r for r in replies.values() if "error" in r]
    assert refused["error"]["data"]["quota"] == "calls_per_minute"
    assert refused["error"]["data"]["retry_after_s"] >= 1


def test_run_seconds_per_day_refuse_once_spent(dev: DevServer) -> None:
    key = dev.create_key("sleepy", "--run-seconds-per-day", "0.5")
    nap = {"name": "nap", "arguments": {}}
    assert dev.mcp("tools/call", nap, key=key).status_code == 200
    refused = dev.mcp("tools/call", nap, wire="modern", key=key)
    assert refused.status_code == 429
    assert refused.json()["error"]["data"]["quota"] == "run_seconds_per_day"
    assert refused.json()["error"]["data"]["resets_at"].endswith("T00:00:00Z")


def test_a_view_quota_counts_every_call_through_the_view(dev: DevServer) -> None:
    statuses = [ping(dev, None, "legacy", "/mcp/v/metered").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    refused = ping(dev, None, "modern", "/mcp/v/metered")
    assert refused.status_code == 429
    assert "view 'metered' may make 2 calls per minute" in refused.json()["error"]["message"]
    assert ping(dev, None, "modern").status_code == 200  # /mcp is not the view


def test_a_call_the_views_quota_refuses_does_not_spend_the_keys_quota(dev: DevServer) -> None:
    key = dev.create_key("viewer", "--calls-per-minute", "3")
    through_view = [ping(dev, key, "legacy", "/mcp/v/tight").status_code for _ in range(4)]
    assert through_view == [200, 429, 429, 429]
    direct = [ping(dev, key, "modern").status_code for _ in range(3)]
    assert direct == [200, 200, 429]  # the key's 3: one through the view, two here
