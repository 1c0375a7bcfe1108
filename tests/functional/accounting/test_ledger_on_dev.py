"""The call ledger on `kiln dev`: 1,000 calls by three keys, every one recorded right, and a
planted argument value nowhere in the table, the bucket or the state directory."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from support.devserver import DevServer, kiln_dev

ECHO = "import json, sys\nprint(json.load(sys.stdin)['text'])\n"
FAILS = "import sys\nprint('no', file=sys.stderr)\nsys.exit(3)\n"
SLEEPY = "import time\ntime.sleep(10)\n"


def tool(root: Path, name: str, code: str, **manifest: Any) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "tool.json").write_text(json.dumps({"description": "d", **manifest}))
    (root / name / "main.py").write_text(code)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("ledger")
    tools = root / "tools"
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    tool(tools, "echo", ECHO, input_schema=schema)
    tool(tools, "fails", FAILS, input_schema=schema)
    tool(tools, "sleepy", SLEEPY, input_schema=schema, timeout_seconds=0.5)
    counted = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tool(tools, "badout", 'print(\'{"n": "many"}\')\n', output_schema=counted)
    tool(tools, "needs_secret", "print('never')\n", secrets=["API_TOKEN"])
    with kiln_dev(root / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


Plan = list[tuple[str, str, int, str]]  # (key name, tool, revision, outcome)


def run_plan(dev: DevServer, keys: dict[str, str], plan: Plan, secret: str) -> None:
    def one(index: int) -> None:
        caller, name, _, outcome = plan[index]
        wire = "modern" if index % 2 else "legacy"
        arguments = {"text": f"{secret}-{index}"}
        answer = dev.mcp("tools/call", {"name": name, "arguments": arguments},
                         wire=wire, key=keys[caller], rid=index)  # fmt: skip
        assert answer.status_code == 200, answer.text
        result = answer.json().get("result", {})
        failed = bool(result.get("isError"))
        wanted = f"call {index} of {name} ({outcome} wanted): {answer.text}"
        assert failed == (outcome != "ok"), wanted

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(len(plan))))


def test_a_thousand_calls_by_three_keys_are_each_recorded_right_without_argument_values(
    dev: DevServer, planted_secrets: Any
) -> None:
    secret = planted_secrets.add(f"planted-{uuid.uuid4().hex}")
    keys = {name: dev.create_key(name) for name in ("alpha", "beta", "gamma")}
    first: Plan = (
        [("alpha", "echo", 1, "ok")] * 200
        + [("beta", "fails", 1, "tool_error")] * 150
        + [("gamma", "echo", 1, "ok")] * 150
    )
    run_plan(dev, keys, first, secret)
    echo = dev.api("GET", "/api/tools/echo").json()
    echo["description"] = "Echoes, revised."
    assert dev.api("PUT", "/api/tools/echo", json=echo, headers={"If-Match": '"1"'}).is_success
    second: Plan = (
        [("alpha", "echo", 2, "ok")] * 200
        + [("beta", "echo", 2, "ok")] * 150
        + [("gamma", "echo", 2, "ok")] * 145
        + [("gamma", "sleepy", 1, "timeout")] * 5
    )
    run_plan(dev, keys, second, secret)

    entries: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {"limit": 300, **({"cursor": cursor} if cursor else {})}
        page = dev.api("GET", "/api/calls", params=query)
        assert page.status_code == 200, page.text
        entries += page.json()["calls"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert len(entries) == 1000
    assert len({entry["id"] for entry in entries}) == 1000
    got = Counter((e["caller"], e["tool"], e["revision"], e["outcome"]) for e in entries)
    wanted = Counter((f"key:{k}", t, r, o) for k, t, r, o in first + second)
    assert got == wanted
    assert all(e["args_digest"].startswith("hmac-sha256:") for e in entries)
    assert all(e["at"] <= later["at"] for e, later in zip(entries[1:], entries, strict=False))

    totals = dev.api("GET", "/api/calls/totals", params={"day": entries[0]["at"][:10]}).json()
    if entries[-1]["at"][:10] == entries[0]["at"][:10]:  # not across midnight
        assert totals["by_caller"]["key:beta"]["tool_error"] == 150
        assert totals["by_tool"]["sleepy"]["timeout"] == 5

    assert_nowhere(dev, secret)


def assert_nowhere(dev: DevServer, secret: str) -> None:
    env = dev.env
    session = boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    ddb = session.client("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL"])
    s3 = session.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
    scanned = 0
    for table in ddb.list_tables()["TableNames"]:
        for page in ddb.get_paginator("scan").paginate(TableName=table):
            scanned += len(page["Items"])
            assert secret not in json.dumps(page["Items"])
    assert scanned >= 1000
    objects = 0
    for bucket in s3.list_buckets()["Buckets"]:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket["Name"]):
            for obj in page.get("Contents", []):
                body = s3.get_object(Bucket=bucket["Name"], Key=obj["Key"])["Body"].read()
                objects += 1
                assert secret.encode() not in body, obj["Key"]
    assert objects >= 3
    for path in dev.state_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def ledgered(dev: DevServer, name: str) -> list[dict[str, Any]]:
    answer = dev.api("GET", "/api/calls", params={"tool": name, "limit": 50})
    assert answer.status_code == 200, answer.text
    return answer.json()["calls"]  # type: ignore[no-any-return]


def test_output_that_breaks_the_output_schema_is_ledgered_as_the_error_the_caller_got(
    dev: DevServer,
) -> None:
    answer = dev.mcp("tools/call", {"name": "badout", "arguments": {}}, wire="modern")
    assert answer.json()["result"]["isError"] is True, answer.text
    assert "does not match its outputSchema" in answer.text
    assert [entry["outcome"] for entry in ledgered(dev, "badout")] == ["tool_error"]


def test_a_call_refused_before_its_tool_started_is_ledgered_with_no_duration(
    dev: DevServer,
) -> None:
    answer = dev.mcp("tools/call", {"name": "needs_secret", "arguments": {}})
    assert answer.json()["result"]["isError"] is True, answer.text
    assert "API_TOKEN" in answer.text
    (entry,) = ledgered(dev, "needs_secret")
    assert (entry["outcome"], entry["duration_ms"]) == ("tool_error", 0.0)
