"""Bad input the fuzz runs found, sent over real HTTP: each gets a specific JSON answer, no 5xx."""

from __future__ import annotations

import json

import pytest

from support.app import AUTHOR_KEY, RunningKiln

LONE = b"\\udfff"  # a JSON escape for a lone low surrogate, as a fuzzer sends it


def _post_raw(server: RunningKiln, path: str, body: bytes, **headers: str) -> object:
    return server.http.post(
        server.url + path,
        content=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {AUTHOR_KEY}",
            **headers,
        },
    )


def test_an_empty_tool_id_is_not_found(kiln_server: RunningKiln) -> None:
    response = kiln_server.api("GET", "/api/tools/id:")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("ref", ["id:" + "a" * 3000, "x" * 3000, "id:..%2F", "%ED%BF%BF"])
def test_a_malformed_tool_reference_is_not_found(kiln_server: RunningKiln, ref: str) -> None:
    response = kiln_server.api("GET", f"/api/tools/{ref}")
    assert response.status_code == 404
    assert len(response.json()["error"]["message"]) < 200


def test_a_lone_surrogate_in_a_rest_body_gets_400_naming_where(kiln_server: RunningKiln) -> None:
    body = b'{"name": "fuzz_tool", "description": "x' + LONE + b'", "code": "print(1)"}'
    response = kiln_server.http.post(
        kiln_server.url + "/api/tools",
        content=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {AUTHOR_KEY}"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_json"
    assert error["message"].startswith("body: description holds a \\u escape for a lone")


def test_surrogate_bytes_in_a_rest_body_are_not_utf8(kiln_server: RunningKiln) -> None:
    body = b'{"\xed\xa0\xbd": 1}'  # a surrogate encoded as if it were a character (CESU-8)
    response = kiln_server.http.post(
        kiln_server.url + "/api/tools",
        content=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {AUTHOR_KEY}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "body: not valid UTF-8 (byte 2)"


@pytest.mark.parametrize("method", ["TRACE", "BREW", "CONNECT", "PROPFIND"])
def test_any_http_method_on_mcp_gets_a_json_rpc_error(
    kiln_server: RunningKiln, method: str
) -> None:
    response = kiln_server.http.request(method, kiln_server.url + "/mcp")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == -32600
    assert response.json()["jsonrpc"] == "2.0"


@pytest.mark.parametrize("path", ["/mcp/", "/mcp/x", "/admin/mcp/", "/mcp/a/b", "/mcp%2F"])
def test_an_unknown_path_under_mcp_gets_a_json_rpc_404(kiln_server: RunningKiln, path: str) -> None:
    response = kiln_server.http.post(kiln_server.url + path, json={"jsonrpc": "2.0"})
    assert response.status_code == 404
    reply = response.json()
    assert (reply["jsonrpc"], reply["id"], reply["error"]["code"]) == ("2.0", None, -32601)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/api/nope", 404), ("TRACE", "/api/tools", 405), ("GET", "/api/tools/", 404)],
)
def test_an_unknown_rest_route_gets_the_rest_error_shape(
    kiln_server: RunningKiln, method: str, path: str, status: int
) -> None:
    response = kiln_server.api(method, path)
    assert response.status_code == status
    assert set(response.json()["error"]) == {"code", "message"}


def test_an_oversized_mcp_body_and_a_wrong_media_type_get_json_rpc_errors(
    kiln_server: RunningKiln,
) -> None:
    huge = _post_raw(kiln_server, "/mcp", b"[" + b" " * 2_000_000 + b"]")
    text = _post_raw(kiln_server, "/mcp", b"{}", **{"Content-Type": "text/plain"})
    assert (huge.status_code, huge.json()["error"]["code"]) == (413, -32600)  # type: ignore[attr-defined]
    assert (text.status_code, text.json()["error"]["code"]) == (415, -32600)  # type: ignore[attr-defined]


def test_a_long_header_value_is_not_echoed_back(kiln_server: RunningKiln) -> None:
    value = "v" * 6000
    answers = [
        kiln_server.mcp(
            {"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"MCP-Protocol-Version": value}
        ),
        kiln_server.api("PUT", "/api/tools/add_vat", headers={"If-Match": value}, json={}),
        kiln_server.api("GET", "/api/tools", key=value),
    ]
    for response in answers:
        assert response.status_code < 500
        assert value not in response.text
        json.loads(response.content)
