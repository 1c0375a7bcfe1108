"""Who may do what, through real HTTP into the app: each credential by each request.

The server runs with anonymous access off and OAuth resource-server mode on (a real JWKS on a
loopback port), so API keys and JWTs are both accepted.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from conftest import AwsStack
from kiln.catalog.rules import check_draft
from kiln.identity.keys import KeyStore
from kiln.identity.settings import AuthSettings
from kiln.settings import Settings
from support.app import RunningKiln, serve
from support.auth import Issuer, running_issuer
from support.aws import fresh_stack
from support.leakguard import Planted

BASE = "http://kiln.test"  # KILN_PUBLIC_BASE_URL: what tokens name as their audience
LEGACY = {"mcp-protocol-version": "2025-11-25"}
ECHO = {
    "name": "echo",
    "description": "Echo the arguments.",
    "language": "python",
    "code": "import json, sys\nprint(json.dumps(json.load(sys.stdin)))\n",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


@dataclass
class Stack:
    server: RunningKiln
    issuer: Issuer
    credentials: dict[str, str | None]


def _stack(moto_endpoint: str) -> AwsStack:
    return fresh_stack(moto_endpoint, "kiln-matrix")


def _settings(aws: AwsStack, issuer: Issuer, *, anonymous: bool) -> Settings:
    return Settings(
        table=aws.table,
        bucket=aws.bucket,
        endpoint_url=aws.endpoint_url,
        region="us-east-1",
        public_anonymous=anonymous,
        bind_host="127.0.0.1",
        local_time_budget_s=30.0,
        public_base_url=BASE,
        auth=AuthSettings(oauth_issuer=issuer.url, oauth_jwks_url=issuer.jwks_url),
    )


def _credentials(aws: AwsStack, issuer: Issuer, planted: Planted) -> dict[str, str | None]:
    keys = KeyStore(aws.clients.dynamodb, table=aws.table)
    _, call_key = keys.create("caller", "call")
    _, author_key = keys.create("writer", "author")
    _, revoked_key = keys.create("former", "author")
    keys.revoke("former")
    unknown_key = "kiln_author_" + secrets.token_urlsafe(32)
    audiences = [f"{BASE}/mcp", f"{BASE}/admin/mcp", BASE]
    tokens = {
        "jwt wrong audience": issuer.token(
            aud="https://elsewhere.example/mcp", scope="kiln:author"
        ),
        "jwt expired": issuer.token(aud=audiences, scope="kiln:author", expires_in=-600),
        "jwt without scope": issuer.token(aud=audiences, scope="openid email"),
        "jwt call scope": issuer.token(aud=audiences, scope="kiln:call", sub="carol"),
        "jwt": issuer.token(aud=audiences, scope="kiln:author", sub="alice"),
    }
    for value in [call_key, author_key, revoked_key, unknown_key, *tokens.values()]:
        planted.add(value)
    return {
        "no credential": None,
        "unknown key": unknown_key,
        "revoked key": revoked_key,
        "call key": call_key,
        "author key": author_key,
        **tokens,
    }


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with running_issuer() as running:
        yield running


@pytest.fixture(scope="module")
def matrix(moto_endpoint: str, issuer: Issuer, planted_secrets: Planted) -> Iterator[Stack]:
    aws = _stack(moto_endpoint)
    for server in serve(_settings(aws, issuer, anonymous=False), aws):
        server.kiln.store.create(check_draft(ECHO))
        yield Stack(server, issuer, _credentials(aws, issuer, planted_secrets))


# -- the requests ----------------------------------------------------------------------


def _headers(credential: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = dict(extra or {})
    if credential is not None:
        headers["Authorization"] = f"Bearer {credential}"
    return headers


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def mcp_list(s: RunningKiln, credential: str | None) -> httpx.Response:
    return s.mcp(_rpc("tools/list", {}), headers=_headers(credential, LEGACY))


def mcp_call(s: RunningKiln, credential: str | None) -> httpx.Response:
    body = _rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    return s.mcp(body, headers=_headers(credential, LEGACY))


def admin_list(s: RunningKiln, credential: str | None) -> httpx.Response:
    return s.mcp(_rpc("tools/list", {}), headers=_headers(credential, LEGACY), path="/admin/mcp")


def admin_create(s: RunningKiln, credential: str | None) -> httpx.Response:
    name = f"made_{uuid.uuid4().hex[:8]}"
    body = _rpc("tools/call", {"name": "kiln_create_tool", "arguments": {**ECHO, "name": name}})
    return s.mcp(body, headers=_headers(credential, LEGACY), path="/admin/mcp")


def rest_read(s: RunningKiln, credential: str | None) -> httpx.Response:
    return s.api("GET", "/api/tools", key=credential)


def rest_write(s: RunningKiln, credential: str | None) -> httpx.Response:
    return s.api(
        "POST", "/api/tools", key=credential, json={**ECHO, "name": f"w_{uuid.uuid4().hex[:8]}"}
    )


def rest_source(s: RunningKiln, credential: str | None) -> httpx.Response:
    return s.api("GET", "/api/tools/echo", key=credential)


Request = Callable[[RunningKiln, str | None], httpx.Response]
REQUESTS: dict[str, tuple[Request, str, str]] = {
    # name: (request, permission it needs, protected resource path)
    "/mcp tools/list": (mcp_list, "call", "/mcp"),
    "/mcp tools/call": (mcp_call, "call", "/mcp"),
    "/admin/mcp tools/list": (admin_list, "author", "/admin/mcp"),
    "/admin/mcp kiln_create_tool": (admin_create, "author", "/admin/mcp"),
    "REST read": (rest_read, "call", ""),
    "REST write": (rest_write, "author", ""),
    "REST source read": (rest_source, "author", ""),
}

# What each credential may do: None for "refused as a bad credential" (401).
GRANTS: dict[str, frozenset[str] | None] = {
    "no credential": None,
    "unknown key": None,
    "revoked key": None,
    "call key": frozenset({"call"}),
    "author key": frozenset({"call", "author"}),
    "jwt wrong audience": None,
    "jwt expired": None,
    "jwt without scope": frozenset(),
    "jwt call scope": frozenset({"call"}),
    "jwt": frozenset({"call", "author"}),
}


def _expected(credential: str, need: str, path: str) -> tuple[int, str | None]:
    metadata = f'resource_metadata="{BASE}/.well-known/oauth-protected-resource{path}"'
    scope = f'scope="kiln:{need}"'
    grants = GRANTS[credential]
    if credential == "no credential":
        return 401, f"Bearer {scope}, {metadata}"
    if grants is None:
        return 401, f'Bearer error="invalid_token", error_description="*", {scope}, {metadata}'
    if need not in grants:
        return 403, f'Bearer error="insufficient_scope", error_description="*", {scope}, {metadata}'
    return 200, None


def _matches(header: str | None, pattern: str | None) -> bool:
    if pattern is None or header is None:
        return header == pattern
    head, _, tail = pattern.partition('error_description="*"')
    if not tail:
        return header == pattern
    return header.startswith(head) and header.endswith(tail) and len(header) > len(pattern)


@pytest.mark.parametrize("request_name", list(REQUESTS))
@pytest.mark.parametrize("credential", list(GRANTS))
def test_access_matrix(matrix: Stack, credential: str, request_name: str) -> None:
    send, need, path = REQUESTS[request_name]
    status, challenge = _expected(credential, need, path)
    response = send(matrix.server, matrix.credentials[credential])
    got = 200 if response.status_code == 201 else response.status_code
    assert got == status, response.text
    assert _matches(response.headers.get("www-authenticate"), challenge), response.headers
    if status == 200:
        _assert_served(request_name, response)
    else:
        secret = matrix.credentials[credential]
        assert secret is None or secret not in response.text


def _assert_served(request_name: str, response: httpx.Response) -> None:
    body = response.json()
    if request_name == "/mcp tools/list":
        names = [t["name"] for t in body["result"]["tools"]]
        assert "echo" in names
        assert not [n for n in names if n.startswith("kiln_")]
    elif request_name == "/admin/mcp tools/list":
        names = {t["name"] for t in body["result"]["tools"]}
        assert {"echo", "kiln_instructions", "kiln_create_tool", "kiln_update_tool"} <= names
        assert {"kiln_get_tool", "kiln_list_revisions"} <= names
    elif request_name in ("/mcp tools/call", "/admin/mcp kiln_create_tool"):
        assert body["result"]["isError"] is False, body
    elif request_name == "REST source read":
        assert body["code"] == ECHO["code"]


# -- around the matrix ------------------------------------------------------------------


def test_writes_record_who_made_them(matrix: Stack, caplog: pytest.LogCaptureFixture) -> None:
    s = matrix.server
    with caplog.at_level("INFO", logger="kiln.audit"):
        made = admin_create(s, matrix.credentials["jwt"])
        rest = rest_write(s, matrix.credentials["author key"])
    assert made.json()["result"]["isError"] is False
    assert rest.status_code == 201
    created = [t for t in s.kiln.store.list_tools() if t.name == rest.json()["name"]]
    assert created[0].head.created_by == "key:writer"
    audit = [r.getMessage() for r in caplog.records if r.name == "kiln.audit"]
    assert any(
        '"created_by": "jwt:alice"' in line and '"audit": "create"' in line for line in audit
    )
    assert any('"created_by": "key:writer"' in line for line in audit)


def test_foreign_origin_is_refused_even_with_an_author_key(matrix: Stack) -> None:
    headers = _headers(
        matrix.credentials["author key"], {**LEGACY, "Origin": "https://evil.example"}
    )
    response = matrix.server.mcp(_rpc("tools/list", {}), headers=headers)
    assert response.status_code == 403
    admin = matrix.server.mcp(_rpc("tools/list", {}), headers=headers, path="/admin/mcp")
    assert admin.status_code == 403


def test_foreign_host_on_a_loopback_bind_is_refused(matrix: Stack) -> None:
    headers = _headers(matrix.credentials["call key"], {**LEGACY, "Host": "evil.example"})
    response = matrix.server.mcp(_rpc("tools/list", {}), headers=headers)
    assert 400 <= response.status_code < 500


@pytest.mark.parametrize("path", ["", "/mcp", "/admin/mcp"])
def test_protected_resource_metadata_names_the_issuer(matrix: Stack, path: str) -> None:
    response = matrix.server.http.get(
        f"{matrix.server.url}/.well-known/oauth-protected-resource{path}"
    )
    assert response.status_code == 200
    document = response.json()
    assert document["resource"] == f"{BASE}{path}"
    assert document["authorization_servers"] == [matrix.issuer.url]
    assert document["scopes_supported"] == ["kiln:call", "kiln:author"]
    assert document["bearer_methods_supported"] == ["header"]


def test_metadata_for_an_unknown_resource_is_404(matrix: Stack) -> None:
    url = f"{matrix.server.url}/.well-known/oauth-protected-resource/api/tools"
    assert matrix.server.http.get(url).status_code == 404


def test_unauthorized_mcp_answer_is_a_json_rpc_error(matrix: Stack) -> None:
    response = mcp_list(matrix.server, None)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == -32001


@pytest.fixture(scope="module")
def anonymous(moto_endpoint: str, issuer: Issuer) -> Iterator[RunningKiln]:
    aws = _stack(moto_endpoint)
    for server in serve(_settings(aws, issuer, anonymous=True), aws):
        server.kiln.store.create(check_draft(ECHO))
        yield server


@pytest.mark.parametrize(
    ("request_name", "status"),
    [
        ("/mcp tools/list", 200),
        ("/mcp tools/call", 200),
        ("/admin/mcp tools/list", 401),
        ("/admin/mcp kiln_create_tool", 401),
        ("REST read", 200),
        ("REST write", 401),
        ("REST source read", 401),
    ],
)
def test_anonymous_deployment_lets_anyone_call_but_not_author(
    anonymous: RunningKiln, request_name: str, status: int
) -> None:
    send, need, path = REQUESTS[request_name]
    response = send(anonymous, None)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.headers["www-authenticate"] == (
            f'Bearer scope="kiln:{need}", '
            f'resource_metadata="{BASE}/.well-known/oauth-protected-resource{path}"'
        )


def test_anonymous_deployment_still_refuses_a_bad_credential(
    anonymous: RunningKiln,
) -> None:
    response = mcp_list(anonymous, "kiln_call_" + "x" * 43)
    assert response.status_code == 401
