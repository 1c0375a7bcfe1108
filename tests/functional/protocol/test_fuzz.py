"""Property-based fuzzing with a fixed small budget: every input gets a JSON answer, never a 5xx.

Hypothesis runs derandomized with a fixed number of examples, so CI sees the same inputs every
run (a few seconds per test). The long run (>= 50,000 requests) is bench/fuzz/run.py.
Strings include lone UTF-16 surrogates and backtracking bait; bodies are sometimes bytes that
are not JSON or not UTF-8 at all.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import AwsStack
from kiln.local.stdio import serve_stdio
from kiln.protocol import McpEndpoint
from kiln.settings import Settings
from kiln.stack import build_kiln
from support.app import AUTHOR_KEY, MODERN, McpServer, meta, start_kiln

CI_BUDGET = settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
LEGACY = "2025-11-25"
TOOLS = ["add_vat", "test_simple_text", "json_schema_2020_12_tool", "nope"]

BAIT = ["\udfff", "\ud800", "x\udfffy", "a" * 27 + "!", "id:", "", "\x00", "\u202e", "A" * 3000]
texts = st.one_of(st.text(max_size=12), st.sampled_from(BAIT))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
ids = st.one_of(st.integers(), texts, st.none(), st.floats(allow_nan=False), st.just([1]))
methods = st.one_of(
    st.sampled_from(["ping", "tools/list", "tools/call", "initialize", "server/discover"]), texts
)


@st.composite
def messages(draw: st.DrawFn, *, modern: bool) -> dict[str, Any]:
    method = draw(methods)
    params: Any = draw(st.dictionaries(texts, json_values, max_size=3))
    if method == "tools/call" or draw(st.booleans()):
        params["name"] = draw(st.sampled_from(TOOLS) | texts)
        params["arguments"] = draw(st.dictionaries(texts, json_values, max_size=3) | json_values)
    if modern:
        params["_meta"] = draw(st.just(meta()) | st.dictionaries(texts, json_values, max_size=2))
    message: dict[str, Any] = {
        "jsonrpc": draw(st.sampled_from(["2.0", "2.0", "1.0"])),
        "method": method,
    }
    if draw(st.integers(0, 9)) > 0:
        message["params"] = params
    if draw(st.integers(0, 9)) > 0:
        message["id"] = draw(ids)
    return message


def encoded(draw: st.DrawFn, message: Any) -> bytes:
    """JSON text (lone surrogates as \\u escapes, or as CESU-8 bytes), or damaged bytes."""
    roll = draw(st.integers(0, 9))
    if roll < 6:
        return json.dumps(message).encode()
    raw = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if roll < 8:
        return raw
    return raw[: draw(st.integers(0, len(raw)))] + draw(st.binary(max_size=8))


@st.composite
def legacy_requests(draw: st.DrawFn) -> tuple[dict[str, str], bytes]:
    message: Any = draw(messages(modern=False))
    if draw(st.integers(0, 9)) == 0:
        message = [message, draw(messages(modern=False))]
    return {"MCP-Protocol-Version": LEGACY}, encoded(draw, message)


@st.composite
def modern_requests(draw: st.DrawFn) -> tuple[dict[str, str], bytes]:
    message = draw(messages(modern=True))
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": _ascii(message["method"])}
    name = message.get("params", {}).get("name")
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogatepass")
        headers["Mcp-Name"] = "=?base64?" + base64.b64encode(raw).decode() + "?="
    return headers, encoded(draw, message)


def _ascii(value: Any) -> str:
    """What an HTTP client can put in a header: visible ASCII, not starting or ending with a
    space (httpx refuses a value such as " ": the draw is then "?")."""
    return "".join(ch if " " <= ch <= "~" else "?" for ch in str(value))[:200].strip() or "?"


def assert_json_rpc_answer(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:500]
    if response.status_code == 202:
        assert response.content == b""
        return
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    for reply in answer if isinstance(answer, list) else [answer]:
        assert reply["jsonrpc"] == "2.0"
        assert ("result" in reply) != ("error" in reply)


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("bundles"))


@CI_BUDGET
@given(legacy_requests())
def test_any_legacy_wire_request_gets_a_json_rpc_answer(
    server: McpServer, request_: tuple[dict[str, str], bytes]
) -> None:
    headers, body = request_
    assert_json_rpc_answer(server.post(None, headers, raw=body))


@CI_BUDGET
@given(modern_requests())
def test_any_modern_wire_request_gets_a_json_rpc_answer(
    server: McpServer, request_: tuple[dict[str, str], bytes]
) -> None:
    headers, body = request_
    assert_json_rpc_answer(server.post(None, headers, raw=body))


http_methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
mcp_paths = st.sampled_from(["/mcp", "/mcp/", "/mcp/x", "/admin/mcp", "/mcp/%ff", "/mcp/a/b"])


@CI_BUDGET
@given(http_methods, mcp_paths, st.binary(max_size=64))
def test_any_method_and_path_under_mcp_gets_a_json_rpc_error(
    server: McpServer, method: str, path: str, body: bytes
) -> None:
    running = server.running
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {AUTHOR_KEY}"}
    response = running.http.request(method, running.url + path, content=body, headers=headers)
    assert_json_rpc_answer(response)


API_PATHS = [
    "/api/tools",
    "/api/tools/{}",
    "/api/tools/id:{}",
    "/api/tools/{}/revisions",
    "/api/tools/add_vat/revisions/{}",
    "/api/tools/{}/run",
    "/api/tools/{}/rename",
    "/api/tools/{}/enable",
    "/api/health",
    "/api/{}",
]


@st.composite
def rest_requests(draw: st.DrawFn) -> tuple[str, str, dict[str, str], bytes]:
    segment = quote(draw(texts).encode("utf-8", "surrogatepass"), safe="")[:300]
    path = draw(st.sampled_from(API_PATHS)).format(segment)
    method = draw(http_methods)
    if method != "GET":  # writes go to tools this test owns, never to the fixtures
        path = path.replace("add_vat", "fuzz_tool")
    payload = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "name": texts,
                "description": texts,
                "language": st.sampled_from(["python", "node"]) | texts,
                "code": texts,
                "input_schema": json_values,
                "arguments": json_values,
                "requirements": st.lists(texts, max_size=2),
            },
        )
        | json_values
    )
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {AUTHOR_KEY}"}
    if draw(st.booleans()):
        headers["If-Match"] = _ascii(draw(texts))
    return method, path, headers, encoded(draw, payload)


@CI_BUDGET
@given(rest_requests())
def test_any_rest_request_with_an_author_key_gets_a_json_answer_and_no_5xx(
    server: McpServer, request_: tuple[str, str, dict[str, str], bytes]
) -> None:
    method, path, headers, body = request_
    running = server.running
    response = running.http.request(method, running.url + path, content=body, headers=headers)
    assert response.status_code < 500, response.text[:500]
    if method != "HEAD" and response.status_code not in (204, 304):
        json.loads(response.content)


class _Collect:
    """The two writer methods serve_stdio uses, into memory."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None


stdio_lines = st.one_of(
    st.builds(lambda m: json.dumps(m).encode(), messages(modern=False)),
    st.builds(lambda m: json.dumps(m).encode(), messages(modern=True)),
    st.binary(max_size=40),
    st.just(b"x" * 70_000),
    st.just(b'{"jsonrpc":"2.0","id":"\\udfff","method":"ping"}'),
).map(lambda line: line.replace(b"\n", b" "))


@pytest.fixture
def stdio_endpoint(aws: AwsStack, tmp_path: Path) -> McpEndpoint:
    """The endpoint `kiln stdio` serves, over the test's catalog."""
    settings = Settings(
        table=aws.table,
        bucket=aws.bucket,
        endpoint_url=aws.endpoint_url,
        region="us-east-1",
        bundle_cache_dir=tmp_path,
        local_time_budget_s=10.0,
    )
    return build_kiln(settings, clients=aws.clients).endpoint


@settings(CI_BUDGET, max_examples=60)
@given(st.lists(stdio_lines, max_size=8))
def test_kiln_stdio_answers_every_line_with_json_and_keeps_serving(
    stdio_endpoint: McpEndpoint, lines: list[bytes]
) -> None:
    endpoint = stdio_endpoint
    last = b'{"jsonrpc":"2.0","id":"last-ping","method":"ping"}'

    async def exchange() -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(b"\n".join([*lines, last]) + b"\n")
        reader.feed_eof()
        out = _Collect()
        await asyncio.wait_for(serve_stdio(endpoint, reader, out), timeout=30)  # type: ignore[arg-type]
        return bytes(out.data)

    replies = [json.loads(line) for line in asyncio.run(exchange()).splitlines()]
    assert {"jsonrpc": "2.0", "id": "last-ping", "result": {}} in replies
    for reply in replies:
        for one in reply if isinstance(reply, list) else [reply]:
            assert one["jsonrpc"] == "2.0"
