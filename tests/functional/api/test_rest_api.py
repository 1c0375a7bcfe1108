"""The authoring REST API, through real HTTP into the app, over the moto server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.settings import Settings
from support.app import RunningKiln

REPO = Path(__file__).resolve().parents[3]
# The predecessor's add_vat.json, byte for byte but for its name (add_vat comes with kiln dev).
SEED_PAYLOAD = REPO / "examples" / "rest" / "add_vat.json"


TOOL = {
    "name": "greet",
    "description": "Say hello.",
    "language": "python",
    "code": "import json, sys\nargs = json.load(sys.stdin)\nprint('hi', args.get('who', 'you'))\n",
}


def catalog_state(aws: AwsStack) -> tuple[list[Any], list[str]]:
    items = aws.clients.dynamodb.scan(TableName=aws.table)["Items"]
    items.sort(key=lambda i: (i["pk"]["S"], i["sk"]["S"]))
    objects = aws.clients.s3.list_objects_v2(Bucket=aws.bucket).get("Contents", [])
    return items, sorted(o["Key"] for o in objects)


def test_seed_add_vat_payload_posts_unchanged_and_runs(kiln_server: RunningKiln) -> None:
    raw = SEED_PAYLOAD.read_bytes()
    created = kiln_server.api(
        "POST", "/api/tools", content=raw, headers={"Content-Type": "application/json"}
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["language"] == "python"
    assert body["enabled"] is True
    assert body["input_schema"] == json.loads(raw)["json_schema"]
    assert created.headers["ETag"] == '"1"'
    run = kiln_server.api("POST", "/api/tools/add_vat_rest/run", json={"arguments": {"net": 99.99}})
    assert json.loads(run.json()["stdout"]) == {
        "net": "99.99",
        "rate": "20",
        "vat": "20.00",
        "gross": "119.99",
    }


def test_created_tool_is_listed_without_source_and_read_with_it(kiln_server: RunningKiln) -> None:
    kiln_server.api("POST", "/api/tools", json=TOOL)
    listing = kiln_server.api("GET", "/api/tools", key=None).json()["tools"]
    assert [t["name"] for t in listing] == ["greet"]
    assert "code" not in listing[0]
    one = kiln_server.api("GET", "/api/tools/greet")
    assert one.json()["code"] == TOOL["code"]
    assert one.headers["ETag"] == '"1"'


def test_source_reads_and_writes_need_the_author_key(kiln_server: RunningKiln) -> None:
    kiln_server.api("POST", "/api/tools", json=TOOL)
    assert kiln_server.api("GET", "/api/tools/greet", key=None).status_code == 401
    assert kiln_server.api("GET", "/api/tools/greet", key="wrong").status_code == 401
    refused = kiln_server.api("POST", "/api/tools", key="wrong", json={**TOOL, "name": "x"})
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Bearer ")


def test_concurrent_updates_with_one_if_match_let_exactly_one_win(
    kiln_server: RunningKiln,
) -> None:
    kiln_server.api("POST", "/api/tools", json=TOOL)
    statuses: list[int] = []
    barrier = threading.Barrier(2)

    def put(word: str) -> None:
        barrier.wait()
        response = kiln_server.api(
            "PUT",
            "/api/tools/greet",
            headers={"If-Match": '"1"'},
            json={**TOOL, "code": f"print({word!r})\n"},
        )
        statuses.append(response.status_code)

    threads = [threading.Thread(target=put, args=(w,)) for w in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 412]
    revisions = kiln_server.api("GET", "/api/tools/greet/revisions").json()["revisions"]
    assert [r["revision"] for r in revisions] == [1, 2]
    first = kiln_server.api("GET", "/api/tools/greet/revisions/1").json()
    assert first["code"] == TOOL["code"]
    restored = kiln_server.api(
        "POST", "/api/tools/greet/revisions/1/restore", headers={"If-Match": '"2"'}
    )
    assert restored.status_code == 200, restored.text
    assert restored.json()["revision"] == 3
    assert kiln_server.api("GET", "/api/tools/greet").json()["code"] == TOOL["code"]


def test_update_without_if_match_gets_428_and_a_stale_one_412(kiln_server: RunningKiln) -> None:
    kiln_server.api("POST", "/api/tools", json=TOOL)
    missing = kiln_server.api("PUT", "/api/tools/greet", json=TOOL)
    assert missing.status_code == 428
    assert "If-Match" in missing.json()["error"]["message"]
    stale = kiln_server.api("PUT", "/api/tools/greet", headers={"If-Match": '"7"'}, json=TOOL)
    assert stale.status_code == 412
    assert stale.json()["error"]["current_revision"] == 1
    garbage = kiln_server.api("PUT", "/api/tools/greet", headers={"If-Match": "abc"}, json=TOOL)
    assert garbage.status_code == 400


def test_tags_keep_the_authors_order_and_a_new_order_is_a_new_revision(
    kiln_server: RunningKiln,
) -> None:
    made = kiln_server.api("POST", "/api/tools", json={**TOOL, "tags": ["uk", "finance", "eu"]})
    assert made.status_code == 201, made.text
    assert made.json()["tags"] == ["uk", "finance", "eu"], "the save re-ordered the tags"
    assert kiln_server.api("GET", "/api/tools/greet").json()["tags"] == ["uk", "finance", "eu"]
    listed = kiln_server.api("GET", "/api/tools").json()["tools"]
    assert [t["tags"] for t in listed] == [["uk", "finance", "eu"]]

    order = ["eu", "uk", "finance"]
    moved = kiln_server.api(
        "PUT", "/api/tools/greet", headers={"If-Match": '"1"'}, json={**TOOL, "tags": order}
    )
    assert moved.status_code == 200, moved.text
    assert (moved.json()["revision"], moved.json()["tags"]) == (2, order)
    same = kiln_server.api(
        "PUT", "/api/tools/greet", headers={"If-Match": '"2"'}, json={**TOOL, "tags": order}
    )
    assert same.json()["revision"] == 2, "saving the same order made a new revision"
    first = kiln_server.api("GET", "/api/tools/greet/revisions/1").json()
    assert first["tags"] == ["uk", "finance", "eu"]


def test_rename_disable_enable_and_delete(kiln_server: RunningKiln) -> None:
    tool_id = kiln_server.api("POST", "/api/tools", json=TOOL).json()["id"]
    renamed = kiln_server.api("POST", "/api/tools/greet/rename", json={"name": "hello"})
    assert renamed.status_code == 200
    assert renamed.json()["id"] == tool_id
    assert kiln_server.api("POST", "/api/tools/hello/disable").json()["enabled"] is False
    assert kiln_server.api("POST", "/api/tools/hello/enable").json()["enabled"] is True
    assert kiln_server.api("DELETE", "/api/tools/hello").status_code == 200
    assert kiln_server.api("GET", "/api/tools/hello").status_code == 404
    history = kiln_server.api("GET", f"/api/tools/id:{tool_id}/revisions")
    assert [r["revision"] for r in history.json()["revisions"]] == [1]
    again = kiln_server.api("POST", "/api/tools", json={**TOOL, "name": "hello"})
    assert again.status_code == 201
    assert again.json()["id"] != tool_id


def test_creating_a_taken_name_gets_409(kiln_server: RunningKiln) -> None:
    kiln_server.api("POST", "/api/tools", json=TOOL)
    taken = kiln_server.api("POST", "/api/tools", json=TOOL)
    assert taken.status_code == 409
    assert "name" in taken.json()["error"]["message"]


BAD_INPUTS = {
    "name does not match the pattern": ({**TOOL, "name": "9lives"}, "name"),
    "name is too long": ({**TOOL, "name": "a" * 64}, "name"),
    "name is reserved": ({**TOOL, "name": "kiln_create_tool"}, "name"),
    "description is missing": (
        {k: v for k, v in TOOL.items() if k != "description"},
        "description",
    ),
    "language is unknown": ({**TOOL, "language": "ruby"}, "language"),
    "code is empty": ({**TOOL, "code": "   "}, "code"),
    "code is over 256 KiB": ({**TOOL, "code": "#" * (256 * 1024 + 1)}, "code"),
    "requirement is not PEP 508": (
        {**TOOL, "requirements": ["not a requirement!!"]},
        "requirements",
    ),
    "requirement is a URL": (
        {**TOOL, "requirements": ["pkg @ https://example.com/pkg.whl"]},
        "requirements",
    ),
    "requirement is an index option": (
        {**TOOL, "requirements": ["--index-url=https://evil.example"]},
        "requirements",
    ),
    "requirement is editable": ({**TOOL, "requirements": ["-e ./src"]}, "requirements"),
    "node requirement is a git URL": (
        {**TOOL, "language": "node", "requirements": ["lodash@git+https://x/y.git"]},
        "requirements",
    ),
    "schema names another dialect": (
        {
            **TOOL,
            "input_schema": {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
            },
        },
        "input_schema",
    ),
    "schema is invalid against the metaschema": (
        {**TOOL, "input_schema": {"type": "object", "properties": {"a": {"type": "integr"}}}},
        "input_schema",
    ),
    "schema root is not an object": ({**TOOL, "input_schema": {"type": "array"}}, "input_schema"),
    "schema has a remote ref": (
        {
            **TOOL,
            "input_schema": {
                "type": "object",
                "properties": {"a": {"$ref": "https://x.example/s.json"}},
            },
        },
        "input_schema",
    ),
    "schema has a dangling local ref": (
        {
            **TOOL,
            "input_schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
        },
        "input_schema",
    ),
    "body is not an object": ([TOOL], "body"),
}


@pytest.mark.parametrize(("payload", "field"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    kiln_server: RunningKiln, aws: AwsStack, payload: Any, field: str
) -> None:
    kiln_server.api("POST", "/api/tools", json={**TOOL, "name": "existing"})
    before = catalog_state(aws)
    response = kiln_server.api("POST", "/api/tools", json=payload)
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert error["violations"][0]["field"].startswith(field)
    assert error["violations"][0]["rule"]
    assert field.split(".")[0] in error["message"]
    assert catalog_state(aws) == before
    update = kiln_server.api(
        "PUT", "/api/tools/existing", headers={"If-Match": '"1"'}, json=payload
    )
    assert 400 <= update.status_code < 500
    assert catalog_state(aws) == before


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"", b"\xff\xfe", b'{"name": "x",}'],
    ids=["broken JSON", "empty body", "not UTF-8", "trailing comma"],
)
def test_malformed_json_gets_400_not_500(kiln_server: RunningKiln, raw: bytes) -> None:
    response = kiln_server.api(
        "POST", "/api/tools", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_json"


def test_schema_violation_messages_do_not_echo_submitted_values(kiln_server: RunningKiln) -> None:
    secret = "s3cr3t-value-that-must-not-echo"
    payload = {**TOOL, "input_schema": {"type": "object", "properties": {"a": {"type": secret}}}}
    response = kiln_server.api("POST", "/api/tools", json=payload)
    assert response.status_code == 422
    assert secret not in response.text


def test_every_example_tool_folder_passes_the_save_rules() -> None:
    from kiln.catalog.files import read_folder, tool_folders

    root = Path(__file__).resolve().parents[3] / "examples" / "tools"
    drafts = [read_folder(folder) for folder in tool_folders(root)]
    assert "add_vat" in {d.name for d in drafts}


def test_a_foreign_origin_is_refused_on_the_rest_api_before_any_key_is_checked(
    kiln_server: RunningKiln,
) -> None:
    foreign = {"Origin": "https://evil.example"}
    listed = kiln_server.api("GET", "/api/tools", key=None, headers=foreign)
    assert listed.status_code == 403
    assert listed.json()["error"]["code"] == "forbidden_origin"
    write = kiln_server.api("POST", "/api/tools", key="wrong", headers=foreign, json=TOOL)
    assert write.status_code == 403
    # Another loopback port is not this server: a page there must not read the catalog.
    local = kiln_server.api(
        "GET", "/api/tools", key=None, headers={"Origin": "http://localhost:3000"}
    )
    assert local.status_code == 403, local.text
    own = kiln_server.url.replace("http://", "")
    same = kiln_server.api("GET", "/api/tools", key=None, headers={"Origin": kiln_server.url,
                                                                   "Host": own})  # fmt: skip
    assert same.status_code == 200, same.text


def test_a_foreign_host_is_refused_on_a_loopback_bind(kiln_server: RunningKiln) -> None:
    response = kiln_server.api("GET", "/api/tools", key=None, headers={"Host": "evil.example"})
    assert response.status_code == 421
    mcp = kiln_server.mcp(
        {"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Host": "evil.example"}
    )
    assert mcp.status_code == 421
    assert mcp.json()["error"]["code"] == -32600


def test_json_nested_past_the_parser_gets_400_not_500(kiln_server: RunningKiln) -> None:
    deep = b"[" * 100_000
    rest = kiln_server.api(
        "POST", "/api/tools", content=deep, headers={"Content-Type": "application/json"}
    )
    assert rest.status_code == 400
    assert rest.json()["error"]["code"] == "bad_json"
    mcp = kiln_server.http.post(
        kiln_server.url + "/mcp", content=deep, headers={"Content-Type": "application/json"}
    )
    assert mcp.status_code == 400
    assert mcp.json()["error"]["code"] == -32700


@pytest.mark.parametrize(
    "value",
    [b"\xb2", b"9" * 5000, b"-1", b"1.5"],
    ids=["a non-ASCII digit", "5000 digits", "negative", "decimal"],
)
def test_an_if_match_that_is_not_a_revision_number_gets_400(
    kiln_server: RunningKiln, value: bytes
) -> None:
    kiln_server.api("POST", "/api/tools", json=TOOL)
    response = kiln_server.api("PUT", "/api/tools/greet", headers={"If-Match": value}, json=TOOL)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_if_match"


def test_a_deleted_tool_cannot_be_updated_or_restored_through_its_id(
    kiln_server: RunningKiln,
) -> None:
    tool_id = kiln_server.api("POST", "/api/tools", json=TOOL).json()["id"]
    kiln_server.api("DELETE", "/api/tools/greet")
    update = kiln_server.api(
        "PUT", f"/api/tools/id:{tool_id}", headers={"If-Match": '"1"'}, json=TOOL
    )
    assert update.status_code == 404
    assert "deleted" in update.json()["error"]["message"]
    restore = kiln_server.api(
        "POST", f"/api/tools/id:{tool_id}/revisions/1/restore", headers={"If-Match": '"1"'}
    )
    assert restore.status_code == 404
    huge = kiln_server.api("GET", f"/api/tools/id:{tool_id}/revisions/{10**12}")
    assert huge.status_code == 404


def test_a_browser_on_an_allowed_origin_gets_its_preflight_answered(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings
) -> None:
    server = make_server(kiln_settings.with_(allowed_origins=("https://app.example",)))
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, mcp-protocol-version",
    }
    allowed = server.http.options(server.url + "/mcp", headers=preflight)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    foreign = server.http.options(
        server.url + "/mcp", headers={**preflight, "Origin": "https://x.example"}
    )
    assert foreign.status_code == 403
    listed = server.mcp(
        {"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Origin": "https://app.example"}
    )
    assert listed.status_code == 200
    assert listed.headers["access-control-allow-origin"] == "https://app.example"
