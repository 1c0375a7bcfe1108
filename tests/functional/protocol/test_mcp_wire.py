"""The MCP wire rules, each stated once and checked over both ways a request reaches the
endpoint: in this process (`McpEndpoint.handle` with an `HttpRequest`, no network, the
endpoint's own Origin and Host checks on) and over real HTTP into the app (uvicorn on
loopback, through the edge middleware). Both serve the same running Kiln and catalog (the
conformance fixtures, add_vat, and three tools written here).

Status codes, headers, batches, both eras' envelopes and the tools/call contract were written
twice before, a unit copy against a fake backend and a functional copy over HTTP; they are
here once. test_mcp_behaviour.py runs JSON-RPC exchanges over every transport (the endpoint,
kiln dev, kiln stdio, the Lambda handler); what only one tier can see (a fake backend's calls,
a configured cap, a padded header only http.client sends) stays in that tier's files.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from kiln.protocol import HttpRequest, McpEndpoint
from kiln.protocol.backend import CallContext
from support.app import (
    META_CAPS,
    META_PV,
    MODERN,
    SERVER_INFO,
    McpServer,
    b64,
    meta,
    start_kiln,
    write_tool,
)

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
LEGACY = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
GROSS_SCHEMA = {
    "type": "object",
    "properties": {"gross": {"type": "number", "minimum": 0}},
    "required": ["gross"],
}
PRINTS = "import json, sys\njson.load(sys.stdin)\nprint(json.dumps(%s))\n"


class InProcess(McpServer):
    """The same running Kiln's MCP endpoint, called in this process as the route calls it.

    Its Origin check is on: behind the app the edge makes it (and the endpoint's is off).
    """

    def endpoint(self) -> McpEndpoint:
        kiln = self.running.kiln
        made = kiln.endpoint
        settings = dataclasses.replace(made.settings, check_origin=True)
        return McpEndpoint(kiln.backend, settings, tasks=kiln.tasks)

    def send(self, method: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Any:
        hdrs = {"host": urlsplit(self.running.url).netloc}  # as the app is reached
        hdrs.update({k.lower(): v for k, v in (headers or {}).items()})
        request = HttpRequest(method=method, headers=hdrs, body=body)
        reply = asyncio.run(self.endpoint().handle(request, CallContext(time_left_s=30.0)))
        return httpx.Response(reply.status, headers=reply.headers, content=reply.body)

    def post(
        self,
        message: Any,
        headers: dict[str, str] | None = None,
        *,
        raw: bytes | None = None,
        path: str = "/mcp",
    ) -> httpx.Response:
        assert path == "/mcp", "the endpoint alone serves one path"
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        body = raw if raw is not None else json.dumps(message).encode()
        return self.send("POST", {**base, **(headers or {})}, body)  # type: ignore[no-any-return]


class OverHttp(McpServer):
    def send(self, method: str, headers: dict[str, str] | None = None) -> httpx.Response:
        return self.http.request(method, self.url, headers=headers)


@pytest.fixture(scope="module")
def served(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    root = tmp_path_factory.mktemp("tools")
    no_args = {"type": "object", "properties": {}, "additionalProperties": False}
    gross = {"description": "Gross.", "input_schema": no_args, "output_schema": GROSS_SCHEMA}
    extra = [
        write_tool(root, "gross_of", gross, PRINTS % '{"gross": 12.5}'),
        write_tool(root, "gross_broken", gross, PRINTS % '{"gross": -1}'),
        write_tool(
            root,
            "crashes",
            {"description": "Fails loudly.", "input_schema": no_args},
            "import sys\nprint('failure details', file=sys.stderr)\nsys.exit(7)\n",
        ),
    ]
    yield from start_kiln(
        moto_endpoint, tmp_path_factory.mktemp("bundles"), extra=extra, instructions="Use add_vat."
    )


@pytest.fixture(params=["in-process", "http"])
def wire(request: pytest.FixtureRequest, served: McpServer) -> Any:
    return (InProcess if request.param == "in-process" else OverHttp)(served.running)


def rejected(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    payload: dict[str, Any] = response.json()
    assert payload["error"]["code"] == code, response.text
    return payload


# -- transport (digest §7) ------------------------------------------------------------------


def test_notification_gets_202_and_no_body(wire: Any) -> None:
    response = wire.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (response.status_code, response.content) == (202, b"")


def test_modern_notification_gets_202_and_no_body(wire: Any) -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"_meta": meta()}}
    response = wire.post(message, {"MCP-Protocol-Version": MODERN})
    assert (response.status_code, response.content) == (202, b"")


def test_request_gets_200_json_with_its_own_id(wire: Any) -> None:
    response = wire.legacy("ping", rid="abc")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"jsonrpc": "2.0", "id": "abc", "result": {}}


def test_get_gets_405_with_allow_post(wire: Any) -> None:
    response = wire.send("GET", {"Accept": "text/event-stream"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == -32600


def test_delete_gets_405_with_allow_post(wire: Any) -> None:
    response = wire.send("DELETE", {"Mcp-Session-Id": "s-1"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_no_response_carries_a_session_id_even_when_the_request_has_one(wire: Any) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    responses = [
        wire.post(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
            {"Mcp-Session-Id": "abc"},
        ),
        wire.modern("tools/list", headers={"Mcp-Session-Id": "abc"}),
        wire.send("GET"),
    ]
    assert [r.status_code for r in responses] == [200, 200, 405]
    for response in responses:
        assert "mcp-session-id" not in response.headers


def test_foreign_origin_gets_403_with_a_json_rpc_error_without_id(wire: Any) -> None:
    response = wire.post(PING, {"Origin": "https://evil.example.com"})
    assert response.status_code == 403
    assert response.json()["id"] is None
    assert response.json()["error"]["code"] == -32600


def test_request_without_origin_is_not_rejected(wire: Any) -> None:
    assert wire.post(PING).status_code == 200


def test_body_that_is_not_json_gets_400_parse_error(wire: Any) -> None:
    rejected(wire.post(None, raw=b'{"jsonrpc":'), 400, -32700)


def test_wrong_content_type_gets_415(wire: Any) -> None:
    rejected(wire.post(None, {"Content-Type": "text/plain"}, raw=b'{"x":1}'), 415, -32600)


def test_batch_of_two_requests_without_header_gets_an_array_of_two_responses(wire: Any) -> None:
    response = wire.post([PING, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}])
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    replies = response.json()
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[1]["result"]["tools"]


def test_batch_of_only_notifications_gets_202(wire: Any) -> None:
    response = wire.post([{"jsonrpc": "2.0", "method": "notifications/initialized"}])
    assert (response.status_code, response.content) == (202, b"")


@pytest.mark.parametrize("size", [0, 21])
def test_empty_or_oversized_batch_gets_one_invalid_request_error(wire: Any, size: int) -> None:
    rejected(wire.post([{**PING, "id": i} for i in range(size)]), 400, -32600)


def test_only_the_servers_own_origin_passes_not_another_loopback_port(wire: Any) -> None:
    """A page on another local port is another program (a dev server, a page a tool opened):
    it would read tools and call them anonymously, with the answers. KILN_ALLOWED_ORIGINS
    admits one (the MCP Inspector at http://localhost:6274, say)."""
    assert wire.post(PING, {"Origin": wire.running.url}).status_code == 200
    for origin in ("http://localhost:6274", "http://127.0.0.1:1", "http://[::1]:9"):
        refused = wire.post(PING, {"Origin": origin})
        assert refused.status_code == 403, (origin, refused.text)
        assert "Origin" in refused.json()["error"]["message"]


def test_foreign_host_on_a_loopback_bind_gets_421(wire: Any) -> None:
    rejected(wire.post(PING, {"Host": "evil.example.com"}), 421, -32600)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"])
def test_loopback_host_names_are_served_on_a_loopback_bind(wire: Any, host: str) -> None:
    port = urlsplit(wire.running.url).port
    response = wire.post(PING, {"Host": f"{host}:{port}"})
    assert response.status_code == 200, response.text


def test_body_over_one_mebibyte_gets_413(wire: Any) -> None:
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (1 << 20) + b'"}}'
    rejected(wire.post(None, raw=big), 413, -32600)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_batch_with_a_post_2025_03_26_header_gets_400_invalid_request(
    wire: Any, version: str
) -> None:
    rejected(wire.post([PING], {"MCP-Protocol-Version": version}), 400, -32600)


def test_batch_with_initialize_gets_400_invalid_request(wire: Any) -> None:
    init = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "c"}}
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, PING]
    assert "initialize" in rejected(wire.post(batch), 400, -32600)["error"]["message"]


# -- the 2026-07-28 era ---------------------------------------------------------------------


def test_meta_without_protocol_version_gets_400_invalid_params(wire: Any) -> None:
    rejected(wire.modern("server/discover", {"_meta": {META_CAPS: {}}}), 400, -32602)


def test_meta_without_client_capabilities_gets_400_invalid_params(wire: Any) -> None:
    rejected(wire.modern("server/discover", {"_meta": {META_PV: MODERN}}), 400, -32602)


def test_meta_without_client_info_is_served(wire: Any) -> None:
    response = wire.modern("server/discover", {"_meta": {META_PV: MODERN, META_CAPS: {}}})
    assert response.status_code == 200, response.text


def test_modern_request_without_version_header_gets_400_header_mismatch(wire: Any) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    rejected(wire.post(message, {"Mcp-Method": "tools/list"}), 400, -32020)


def test_tools_call_without_mcp_name_gets_400_header_mismatch(wire: Any) -> None:
    params = {"name": "add_vat", "arguments": {"net": 1}, "_meta": meta()}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    response = wire.post(message, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"})
    rejected(response, 400, -32020)


def test_header_names_are_case_insensitive(wire: Any) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    response = wire.post(message, {"mcp-protocol-version": MODERN, "MCP-METHOD": "tools/list"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "method",
    [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "unknown/method",
        "prompts/list",
        "resources/list",
        "subscriptions/listen",
    ],
)
def test_removed_and_unknown_methods_get_404_method_not_found_with_the_id(
    wire: Any, method: str
) -> None:
    assert rejected(wire.modern(method, rid=f"r-{method}"), 404, -32601)["id"] == f"r-{method}"


def test_successful_call_is_complete_with_content(wire: Any) -> None:
    response = wire.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}})
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["content"][0]["type"] == "text"


def test_modern_list_has_2026_fields_and_legacy_list_has_none(wire: Any) -> None:
    modern = wire.modern("tools/list").json()["result"]
    legacy = wire.legacy("tools/list", version="2025-11-25").json()["result"]
    assert {"ttlMs", "resultType", "cacheScope", "_meta"} <= set(modern)
    assert set(legacy) == {"tools"}


def test_discover_gets_the_complete_cacheable_description(wire: Any) -> None:
    response = wire.modern("server/discover")
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert "2026-07-28" in result["supportedVersions"]
    assert "tools" in result["capabilities"]
    assert isinstance(result["ttlMs"], int)
    assert result["ttlMs"] >= 0
    assert result["cacheScope"] in {"public", "private"}
    assert result["instructions"] == "Use add_vat."


def test_discover_puts_server_info_in_meta_not_the_body(wire: Any) -> None:
    result = wire.modern("server/discover").json()["result"]
    assert result["_meta"][SERVER_INFO]["name"] == "kiln"
    assert isinstance(result["_meta"][SERVER_INFO]["version"], str)
    assert "serverInfo" not in result


def test_discover_advertises_tools_and_the_tasks_extension_and_no_subscriptions(
    wire: Any,
) -> None:
    capabilities = wire.modern("server/discover").json()["result"]["capabilities"]
    assert "listChanged" not in capabilities["tools"]
    assert set(capabilities) == {"tools", "extensions"}  # no resources, prompts, logging
    assert capabilities["extensions"] == {"io.modelcontextprotocol/tasks": {}}


def test_tools_list_is_complete_cacheable_and_in_a_stable_order(wire: Any) -> None:
    first = wire.modern("tools/list").json()["result"]
    second = wire.modern("tools/list", rid=2).json()["result"]
    assert first["resultType"] == "complete"
    assert isinstance(first["ttlMs"], int)
    assert first["ttlMs"] >= 0
    assert first["cacheScope"] in {"public", "private"}
    assert len(first["tools"]) > 5
    assert [t["name"] for t in first["tools"]] == [t["name"] for t in second["tools"]]


@pytest.mark.parametrize("params", [{}, None])
def test_a_modern_request_without_meta_or_params_gets_400_invalid_params(
    wire: Any, params: dict[str, Any] | None
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 9, "method": "server/discover"}
    if params is not None:
        message["params"] = params
    response = wire.post(message, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"})
    assert rejected(response, 400, -32602)["id"] == 9


def test_body_version_differing_from_the_header_gets_400_header_mismatch(wire: Any) -> None:
    rejected(wire.modern("server/discover", {"_meta": meta("v999.0.0")}), 400, -32020)


def test_unsupported_version_in_header_and_body_gets_400_with_supported_list(wire: Any) -> None:
    response = wire.modern(
        "server/discover",
        {"_meta": meta("v999.0.0")},
        headers={"MCP-Protocol-Version": "v999.0.0"},
    )
    data = rejected(response, 400, -32022)["error"]["data"]
    assert data["requested"] == "v999.0.0"
    supported = wire.modern("server/discover").json()["result"]["supportedVersions"]
    assert set(data["supported"]) <= set(supported)


def test_a_missing_different_or_differently_cased_mcp_method_gets_400_header_mismatch(
    wire: Any,
) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    missing = rejected(wire.post(message, {"MCP-Protocol-Version": MODERN}), 400, -32020)
    assert "Mcp-Method" in missing["error"]["message"]
    rejected(wire.modern("tools/list", headers={"Mcp-Method": "tools/call"}), 400, -32020)
    rejected(wire.modern("tools/list", headers={"Mcp-Method": "TOOLS/LIST"}), 400, -32020)


def test_mcp_name_must_match_the_body_but_may_be_base64(wire: Any) -> None:
    params = {"name": "add_vat", "arguments": {"net": 1}}
    rejected(wire.modern("tools/call", params, name="echo"), 400, -32020)
    response = wire.modern("tools/call", params, name=b64("add_vat"))
    assert response.status_code == 200, response.text
    assert response.json()["result"]["isError"] is False


MODERN_ANSWERS = [
    ("server/discover", None),
    ("tools/list", None),
    ("tools/call", {"name": "add_vat", "arguments": {"net": 5}}),
    ("tools/call", {"name": "add_vat", "arguments": {}}),  # a tool error
]


def test_every_modern_result_carries_server_info_and_none_is_a_request(wire: Any) -> None:
    for method, params in MODERN_ANSWERS:
        payload = wire.modern(method, params).json()
        assert payload["result"]["_meta"][SERVER_INFO]["name"] == "kiln", (method, payload)
        assert not ("method" in payload and "id" in payload)


def test_no_log_notification_is_sent(wire: Any) -> None:
    response = wire.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}})
    assert b"notifications/message" not in response.content


@pytest.mark.parametrize("headers", [{"MCP-Protocol-Version": MODERN}, {}])
def test_a_posted_response_or_a_modern_batch_gets_400_invalid_request(
    wire: Any, headers: dict[str, str]
) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    rejected(wire.post([message], headers), 400, -32600)
    if headers:
        rejected(wire.post({"jsonrpc": "2.0", "id": 1, "result": {}}, headers), 400, -32600)


def test_only_defined_mcp_error_codes_are_emitted(wire: Any) -> None:
    responses = [
        wire.modern("server/discover", {"_meta": meta("v999.0.0")}),
        wire.modern("tools/list", headers={"Mcp-Method": "x"}),
        wire.modern("nope"),
        wire.modern("tools/call", {"name": "nope"}),
        wire.modern("tools/list", {"cursor": "bad"}),
        wire.post(None, raw=b"{"),
    ]
    for response in responses:
        code = response.json()["error"]["code"]
        assert code != -32002
        assert not (-32099 <= code <= -32020) or code in {-32020, -32021, -32022}
        assert not (-32019 <= code <= -32000), response.text


def test_legacy_initialize_then_modern_discover_both_succeed(wire: Any) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    legacy = wire.legacy("initialize", init, version=None).json()
    assert legacy["result"]["protocolVersion"] == "2025-11-25"
    assert wire.modern("server/discover").json()["result"]["supportedVersions"] == [MODERN]


# -- the 2025 eras --------------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY)
def test_initialize_echoes_a_supported_version(wire: Any, version: str) -> None:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "c"}}
    response = wire.legacy("initialize", params, version=None)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["protocolVersion"] == version


def test_tools_list_with_an_unsupported_version_header_gets_400(wire: Any) -> None:
    response = wire.legacy("tools/list", version="2099-01-01")
    assert response.status_code == 400
    assert "2099-01-01" in response.json()["error"]["message"]


def test_unknown_method_gets_method_not_found_on_http_200(wire: Any) -> None:
    response = wire.legacy("prompts/list")
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32601


def initialize(wire: Any, version: str) -> dict[str, Any]:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "c"}}
    response = wire.legacy("initialize", params, version=None)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


@pytest.mark.parametrize("version", ["1999-01-01", "2026-07-28", "banana"])
def test_initialize_with_an_unknown_version_gets_the_latest_legacy_one(
    wire: Any, version: str
) -> None:
    assert initialize(wire, version)["protocolVersion"] == "2025-11-25"


@pytest.mark.parametrize("version", LEGACY)
def test_initialize_offers_tools_and_logging_and_tasks_from_2025_11_25(
    wire: Any, version: str
) -> None:
    result = initialize(wire, version)
    wanted: dict[str, Any] = {"tools": {}, "logging": {}}  # logging: a tool's log lines
    if version == "2025-11-25":
        wanted["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert result["capabilities"] == wanted
    assert result["serverInfo"]["name"] == "kiln"
    assert isinstance(result["serverInfo"]["version"], str)
    assert result["instructions"] == "Use add_vat."
    assert "resultType" not in result


def test_server_info_fields_follow_the_negotiated_version(wire: Any) -> None:
    old = initialize(wire, "2025-03-26")["serverInfo"]
    mid = initialize(wire, "2025-06-18")["serverInfo"]
    new = initialize(wire, "2025-11-25")["serverInfo"]
    assert set(old) == {"name", "version"}
    assert set(mid) == {"name", "version", "title"}
    assert {"name", "version", "title", "description"} <= set(new)
    assert isinstance(new["title"], str)
    assert isinstance(new["description"], str)
    for icon in new.get("icons", []):
        assert "src" in icon


def test_tools_list_without_header_or_initialize_is_served(wire: Any) -> None:
    response = wire.legacy("tools/list", version=None)
    assert response.status_code == 200, response.text
    assert "add_vat" in [t["name"] for t in response.json()["result"]["tools"]]


# -- tools ----------------------------------------------------------------------------------


def test_a_list_that_fits_one_page_has_no_next_cursor(wire: Any) -> None:
    assert "nextCursor" not in wire.legacy("tools/list").json()["result"]
    assert "nextCursor" not in wire.modern("tools/list").json()["result"]


def test_tool_failure_gets_is_error_with_the_contract_text(wire: Any) -> None:
    result = wire.modern("tools/call", {"name": "crashes", "arguments": {}}).json()["result"]
    assert result["isError"] is True
    text = "(no output)\n[stderr] failure details\n[exit 7]"
    assert result["content"] == [{"type": "text", "text": text}]


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", "2026-07-28"])
def test_output_schema_tool_returns_structured_content_and_the_same_json_as_text(
    wire: Any, version: str
) -> None:
    params = {"name": "gross_of", "arguments": {}}
    response = (
        wire.modern("tools/call", params)
        if version == MODERN
        else wire.legacy("tools/call", params, version=version)
    )
    result = response.json()["result"]
    assert result["isError"] is False, result
    assert result["structuredContent"] == {"gross": 12.5}
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


def test_output_that_breaks_the_output_schema_is_an_error_naming_the_rule(wire: Any) -> None:
    result = wire.modern("tools/call", {"name": "gross_broken", "arguments": {}}).json()["result"]
    assert result["isError"] is True
    assert "gross: must be ≥ 0" in result["content"][0]["text"]
