"""A save that breaks the revision it replaces is refused unless it says so, and recorded.

Over real HTTP into the app on the emulator: REST (`PUT`, restore) and the `kiln_update_tool`
admin tool. A refusal writes nothing: no revision, no code object.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from kiln.authoring import AuthoringService, FolderTarget
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from support.app import AUTHOR_KEY, RunningKiln
from support.aws import AwsStack

ADMIN = {"mcp-protocol-version": "2025-11-25", "Authorization": f"Bearer {AUTHOR_KEY}"}
TOOL = {
    "name": "weather",
    "description": "Weather in a city.",
    "language": "python",
    "code": "print('sunny')\n",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]},
    "annotations": {"readOnlyHint": True},
}  # fmt: skip
# A new required input and a weaker annotation: two findings.
BREAKING = {
    **TOOL,
    "input_schema": {"type": "object", "required": ["city", "units"],
                     "properties": {"city": {"type": "string"}, "units": {"type": "string"}}},
    "annotations": {"readOnlyHint": False},
}  # fmt: skip


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, f"{response.request.url.path}: {response.text}"
    return dict(response.json())


def created(kiln: RunningKiln) -> dict[str, Any]:
    return ok(kiln.api("POST", "/api/tools", json=TOOL), 201)


def put(kiln: RunningKiln, body: dict[str, Any], head: int = 1) -> httpx.Response:
    return kiln.api("PUT", "/api/tools/weather", json=body, headers={"If-Match": f'"{head}"'})


def code_objects(aws: AwsStack) -> int:
    found = aws.clients.s3.list_objects_v2(Bucket=aws.bucket, Prefix="code/")
    return int(found.get("KeyCount", 0))


def test_a_breaking_save_is_refused_with_its_findings_and_writes_nothing(
    kiln_server: RunningKiln, aws: AwsStack
) -> None:
    created(kiln_server)
    objects = code_objects(aws)
    answer = put(kiln_server, {**BREAKING, "code": "print('rainy')\n"})
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["code"] == "breaking_change", error
    kinds = {(f["kind"], f["path"]) for f in error["findings"]}
    assert kinds == {
        ("required-input", "input_schema/properties/units"),
        ("weaker-annotation", "annotations/readOnlyHint"),
    }, error
    assert "input_schema/properties/units: new required input" in error["message"]
    assert "--breaking" in error["message"]
    revisions = ok(kiln_server.api("GET", "/api/tools/weather/revisions"))["revisions"]
    assert [r["revision"] for r in revisions] == [1], revisions
    assert code_objects(aws) == objects, "a refused save wrote its code object"


def test_a_save_that_says_breaking_is_kept_and_its_revision_records_what_it_breaks(
    kiln_server: RunningKiln,
) -> None:
    created(kiln_server)
    saved = ok(put(kiln_server, {**BREAKING, "breaking": True}))
    assert saved["revision"] == 2, saved
    assert saved["breaking"] is True, saved
    revision = ok(kiln_server.api("GET", "/api/tools/weather/revisions/2"))
    assert revision["breaking"] is True, revision
    assert {f["kind"] for f in revision["findings"]} == {"required-input", "weaker-annotation"}
    first = ok(kiln_server.api("GET", "/api/tools/weather/revisions/1"))
    assert "breaking" not in first, first


def test_a_compatible_save_needs_no_flag_and_records_none(kiln_server: RunningKiln) -> None:
    created(kiln_server)
    wider = {**TOOL["input_schema"], "properties": {"city": {"type": "string"},  # type: ignore[dict-item]
                                                    "units": {"type": "string"}}}  # fmt: skip
    saved = ok(put(kiln_server, {**TOOL, "input_schema": wider, "description": "Now in units."}))
    assert saved["revision"] == 2, saved
    assert "breaking" not in saved, saved


def test_breaking_must_be_a_boolean_and_a_create_may_say_it(kiln_server: RunningKiln) -> None:
    first = ok(kiln_server.api("POST", "/api/tools", json={**TOOL, "breaking": True}), 201)
    assert first["revision"] == 1, first
    assert "breaking" not in first, "a first revision breaks nothing"
    answer = put(kiln_server, {**BREAKING, "breaking": "yes"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["violations"][0]["field"] == "breaking", answer.text


def test_a_restore_that_breaks_the_head_says_so_too(kiln_server: RunningKiln) -> None:
    created(kiln_server)
    loose = {**TOOL, "annotations": {"readOnlyHint": True}, "input_schema": {"type": "object",
             "properties": {"city": {"type": "string"}}}}  # fmt: skip
    ok(put(kiln_server, loose))  # revision 2 requires nothing: compatible
    path = "/api/tools/weather/revisions/1/restore"
    refused = kiln_server.api("POST", path, headers={"If-Match": '"2"'})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["findings"][0]["kind"] == "required-input", refused.text
    restored = ok(kiln_server.api("POST", path + "?breaking=true", headers={"If-Match": '"2"'}))
    assert restored["revision"] == 3, restored
    assert restored["breaking"] is True, restored


def admin_call(kiln: RunningKiln, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "kiln_update_tool", "arguments": arguments}}  # fmt: skip
    response = kiln.mcp(body, headers=ADMIN, path="/admin/mcp")
    assert response.status_code == 200, response.text
    return dict(response.json()["result"])


def test_kiln_update_tool_refuses_a_breaking_change_unless_told(kiln_server: RunningKiln) -> None:
    created(kiln_server)
    change = {"name": "weather", "revision": 1, "annotations": {"readOnlyHint": False}}
    refused = admin_call(kiln_server, change)
    assert refused["isError"] is True, refused
    said = refused["content"][0]["text"]
    assert "annotations/readOnlyHint: True -> False" in said, said
    assert '"breaking": true' in said, said
    saved = admin_call(kiln_server, {**change, "breaking": True})
    assert saved["isError"] is False, saved
    assert json.loads(saved["content"][0]["text"])["revision"] == 2, saved


def test_kiln_dev_folder_loads_save_a_breaking_change_and_record_it(aws: AwsStack) -> None:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    target = FolderTarget(AuthoringService(store))
    target.create(check_draft(TOOL))
    target.update(check_draft(BREAKING), 1)  # the author's own folder, edited: not refused
    head = store.get("weather").head
    assert head.number == 2, head
    assert {f["kind"] for f in head.breaking} == {"required-input", "weaker-annotation"}
