"""Keys and a tool's secrets over REST, as the studio uses them: a key shown once, listed by
name, revoked; secret values set and removed, never returned."""

from __future__ import annotations

import json

from support.app import RunningKiln

TOOL = {
    "name": "reader",
    "description": "Reads a secret.",
    "language": "python",
    "code": "import os\nprint(os.environ['API_TOKEN'][-3:])\n",
    "secrets": ["API_TOKEN"],
}


def test_a_key_is_shown_once_listed_by_name_and_refused_once_revoked(
    kiln_server: RunningKiln,
) -> None:
    made = kiln_server.api("POST", "/api/keys", json={"name": "ci", "scope": "call"})
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    assert key.startswith("kiln_call_")
    listed = kiln_server.api("GET", "/api/keys")
    assert [k["name"] for k in listed.json()["keys"]] == ["ci"]
    assert key not in listed.text
    assert kiln_server.api("GET", "/api/tools", key=key).status_code == 200
    assert kiln_server.api("POST", "/api/keys", json={"name": "x"}, key=key).status_code == 403
    assert kiln_server.api("DELETE", "/api/keys/ci").status_code == 200
    assert kiln_server.api("GET", "/api/tools", key=key).status_code == 401
    assert kiln_server.api("DELETE", "/api/keys/ci").status_code == 404


def test_bad_key_requests_name_the_field(kiln_server: RunningKiln) -> None:
    bad_name = kiln_server.api("POST", "/api/keys", json={"name": "no spaces", "scope": "call"})
    assert bad_name.status_code == 422
    assert "name" in bad_name.json()["error"]["message"]
    bad_scope = kiln_server.api("POST", "/api/keys", json={"name": "ok", "scope": "root"})
    assert bad_scope.status_code == 422
    assert "scope" in bad_scope.json()["error"]["message"]
    assert kiln_server.api("POST", "/api/keys", json={"name": "ok"}).status_code == 201
    taken = kiln_server.api("POST", "/api/keys", json={"name": "ok"})
    assert taken.status_code == 409


def test_secret_values_are_write_only_and_reach_the_tool(kiln_server: RunningKiln) -> None:
    assert kiln_server.api("POST", "/api/tools", json=TOOL).status_code == 201
    before = kiln_server.api("GET", "/api/tools/reader/secrets").json()
    assert before == {"secrets": [{"name": "API_TOKEN", "set": False}]}
    put = kiln_server.api("PUT", "/api/tools/reader/secrets/API_TOKEN", json={"value": "v-123"})
    assert put.status_code == 200
    assert "v-123" not in put.text
    after = kiln_server.api("GET", "/api/tools/reader/secrets")
    assert after.json() == {"secrets": [{"name": "API_TOKEN", "set": True}]}
    assert "v-123" not in after.text
    assert "v-123" not in json.dumps(kiln_server.api("GET", "/api/tools/reader").json())
    run = kiln_server.api("POST", "/api/tools/reader/run", json={"arguments": {}})
    assert run.json()["stdout"].strip() == "123"
    gone = kiln_server.api("DELETE", "/api/tools/reader/secrets/API_TOKEN")
    assert gone.status_code == 200
    assert kiln_server.api("GET", "/api/tools/reader/secrets").json()["secrets"][0]["set"] is False
    assert kiln_server.api("DELETE", "/api/tools/reader/secrets/API_TOKEN").status_code == 404


def test_bad_secret_requests_are_refused_without_echoing_the_value(
    kiln_server: RunningKiln,
) -> None:
    assert kiln_server.api("POST", "/api/tools", json=TOOL).status_code == 201
    reserved = kiln_server.api("PUT", "/api/tools/reader/secrets/PATH", json={"value": "s3cr3t"})
    assert reserved.status_code == 422
    assert "s3cr3t" not in reserved.text
    nul = kiln_server.api("PUT", "/api/tools/reader/secrets/API_TOKEN", json={"value": "a\x00b"})
    assert nul.status_code == 422
    missing = kiln_server.api("PUT", "/api/tools/reader/secrets/API_TOKEN", json={})
    assert missing.status_code == 422
    assert kiln_server.api("GET", "/api/tools/nope/secrets").status_code == 404
    call_key = kiln_server.api("POST", "/api/keys", json={"name": "c"}).json()["key"]
    put = kiln_server.api(
        "PUT", "/api/tools/reader/secrets/API_TOKEN", json={"value": "x"}, key=call_key
    )
    assert put.status_code == 403


def test_a_key_can_be_created_bound_to_a_view_with_limits_and_rebound(
    kiln_server: RunningKiln,
) -> None:
    body = {"name": "bound", "scope": "call", "view": "finance",
            "quota": {"calls_per_minute": 5}}  # fmt: skip
    made = kiln_server.api("POST", "/api/keys", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["view"] == "finance"
    assert made.json()["quota"]["calls_per_minute"] == 5
    rebound = kiln_server.api("PUT", "/api/keys/bound/binding", json={"view": None})
    assert rebound.status_code == 200, rebound.text
    assert rebound.json()["view"] is None
    assert rebound.json()["quota"]["calls_per_minute"] is None
    missing = kiln_server.api("PUT", "/api/keys/nobody/binding", json={})
    assert missing.status_code == 404


def test_a_bad_view_or_quota_on_a_key_names_the_field(kiln_server: RunningKiln) -> None:
    bad_quota = {"name": "q", "quota": {"calls_per_minute": -1}}
    refused = kiln_server.api("POST", "/api/keys", json=bad_quota)
    assert refused.status_code == 422, refused.text
    assert "calls_per_minute" in refused.json()["error"]["message"]
    bad_view = kiln_server.api("POST", "/api/keys", json={"name": "v", "view": "no spaces"})
    assert bad_view.status_code == 422, bad_view.text
    assert kiln_server.api("GET", "/api/keys").json()["keys"] == []


def test_a_key_body_that_is_not_an_object_is_refused_saying_what_it_must_be(
    kiln_server: RunningKiln,
) -> None:
    create = kiln_server.api("POST", "/api/keys", json=["ci", "call"])
    assert create.status_code == 422, create.text
    assert create.json()["error"] == {
        "code": "invalid_key",
        "message": 'body: must be {"name": "...", "scope": "call"}',
    }
    assert kiln_server.api("POST", "/api/keys", json={"name": "ci"}).status_code == 201
    bind = kiln_server.api("PUT", "/api/keys/ci/binding", json="finance")
    assert bind.status_code == 422, bind.text
    assert bind.json()["error"] == {
        "code": "invalid_key",
        "message": 'body: must be {"view": ..., "quota": {...}}',
    }
    assert kiln_server.api("GET", "/api/keys").json()["keys"][0]["view"] is None
