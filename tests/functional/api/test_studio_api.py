"""The studio's server side: its pages under a strict CSP, the dry-run validation, whoami."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln

GOOD = {
    "name": "greet",
    "description": "Say hello.",
    "language": "python",
    "code": "import json, sys\nargs = json.load(sys.stdin)\nprint('hi', args.get('who'))\n",
    "input_schema": {"type": "object", "properties": {"who": {"type": "string"}}},
}


def test_validate_lists_every_violation_with_field_and_rule_and_saves_nothing(
    kiln_server: RunningKiln,
) -> None:
    bad = {
        **GOOD,
        "name": "9bad name",
        "timeout_seconds": 5000,
        "input_schema": {"type": "object", "properties": {"n": {"type": "numbr"}}},
    }
    reply = kiln_server.api("POST", "/api/tools/validate", json=bad)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["ok"] is False
    fields = {v["field"] for v in body["violations"]}
    assert "name" in fields
    assert "timeout_seconds" in fields
    assert any(field.startswith("input_schema") for field in fields)
    assert all(v["rule"] and v["message"] for v in body["violations"])
    saved = kiln_server.api("PUT", "/api/tools/validate", json=bad, headers={"If-Match": '"1"'})
    assert saved.status_code == 422  # the same rules refuse the same body on save
    saved_fields = {v["field"] for v in saved.json()["error"]["violations"]}
    assert saved_fields == fields
    assert kiln_server.api("GET", "/api/tools").json()["tools"] == []


def test_validate_of_a_good_tool_is_ok(kiln_server: RunningKiln) -> None:
    body = kiln_server.api("POST", "/api/tools/validate", json=GOOD).json()
    assert body == {
        "ok": True,
        "violations": [],
        "syntax": None,
        "syntax_checked": True,
        "breaking": [],
    }


def test_validate_says_what_saving_over_the_head_would_break(kiln_server: RunningKiln) -> None:
    assert kiln_server.api("POST", "/api/tools", json=GOOD).status_code == 201
    stricter = {**GOOD, "input_schema": {**GOOD["input_schema"], "required": ["who"]}}  # type: ignore[dict-item]
    body = kiln_server.api("POST", "/api/tools/validate", json=stricter).json()
    assert body["ok"] is True, body  # valid; breaking is for the author to decide
    assert [(f["kind"], f["path"]) for f in body["breaking"]] == [
        ("required-input", "input_schema/properties/who")
    ], body
    assert kiln_server.api("GET", "/api/tools/greet").json()["revision"] == 1


def test_validate_reports_a_python_syntax_error_with_line_and_column(
    kiln_server: RunningKiln,
) -> None:
    draft = {**GOOD, "code": "import json\n\ndef f(:\n    pass\n"}
    body = kiln_server.api("POST", "/api/tools/validate", json=draft).json()
    assert body["ok"] is False
    assert [(v["field"], v["rule"]) for v in body["violations"]] == [("code", "syntax")]
    saved = kiln_server.api("POST", "/api/tools", json=draft)
    assert saved.status_code == 422  # the save refuses it with the same violation
    assert saved.json()["error"]["violations"] == body["violations"]
    assert body["syntax"]["line"] == 3
    assert body["syntax"]["column"] >= 1
    assert body["syntax"]["message"]


def test_validate_reports_a_node_syntax_error_from_node_check(kiln_server: RunningKiln) -> None:
    code = "const fs = require('node:fs');\nconst x = {a: 1,,};\n"
    draft = {**GOOD, "language": "node", "code": code}
    body = kiln_server.api("POST", "/api/tools/validate", json=draft).json()
    assert body["syntax"]["line"] == 2
    assert body["syntax"]["column"] == 17
    assert body["syntax"]["message"].startswith("SyntaxError:")


def test_validate_parses_node_code_without_running_it(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    marker = str(tmp_path / "ran")
    code = f"require('node:fs').writeFileSync({marker!r}, 'x');\n"
    body = kiln_server.api(
        "POST", "/api/tools/validate", json={**GOOD, "language": "node", "code": code}
    ).json()
    assert body["ok"] is True
    assert not Path(marker).exists()


@pytest.mark.parametrize(("key", "status"), [(None, 401), ("not-a-key", 401)])
def test_validate_needs_an_author_key(
    kiln_server: RunningKiln, key: str | None, status: int
) -> None:
    assert kiln_server.api("POST", "/api/tools/validate", json=GOOD, key=key).status_code == status


def test_validate_refuses_a_body_that_is_not_json(kiln_server: RunningKiln) -> None:
    reply = kiln_server.api("POST", "/api/tools/validate", content=b"{nope")
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "bad_json"


def test_whoami_names_the_author_and_its_scopes(kiln_server: RunningKiln) -> None:
    body = kiln_server.api("GET", "/api/whoami").json()
    assert "author" in body["scopes"]
    assert AUTHOR_KEY not in str(body)
    assert kiln_server.api("GET", "/api/whoami", key="wrong").status_code == 401


def test_studio_page_is_served_with_a_strict_content_security_policy(
    kiln_server: RunningKiln,
) -> None:
    page = kiln_server.http.get(kiln_server.url + "/studio/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp
    assert "<script" in page.text
    assert 'src="/studio/assets/' in page.text
    assert "<script>" not in page.text  # no inline script
    script = page.text.split('src="', 1)[1].split('"', 1)[0]
    asset = kiln_server.http.get(kiln_server.url + script)
    assert asset.status_code == 200
    assert asset.headers["content-type"].startswith("text/javascript")
    assert "immutable" in asset.headers["cache-control"]


@pytest.mark.parametrize(
    "path", ["/studio/../pyproject.toml", "/studio/%2e%2e/app.py", "/studio/nope.js"]
)
def test_studio_serves_only_files_of_its_build(kiln_server: RunningKiln, path: str) -> None:
    assert kiln_server.http.get(kiln_server.url + path).status_code == 404


def test_studio_without_slash_redirects_to_the_page(kiln_server: RunningKiln) -> None:
    reply = kiln_server.http.get(kiln_server.url + "/studio")
    assert reply.status_code == 308
    assert reply.headers["location"] == "/studio/"


def test_the_guard_accepts_the_studios_own_origin_and_refuses_others(
    make_server: Callable[[Settings], RunningKiln], kiln_settings: Settings
) -> None:
    # Not a loopback bind (as in AWS), so only the page's own origin passes, not any loopback one.
    kiln_server = make_server(dataclasses.replace(kiln_settings, bind_host="0.0.0.0"))
    own = kiln_server.url
    ok = kiln_server.api("POST", "/api/tools/validate", json=GOOD, headers={"Origin": own})
    assert ok.status_code == 200
    port = own.rsplit(":", 1)[1]
    others = ("https://evil.example", f"http://localhost:{port}", "http://127.0.0.1:1", "null")
    for origin in others:
        refused = kiln_server.api(
            "POST", "/api/tools/validate", json=GOOD, headers={"Origin": origin}
        )
        assert refused.status_code == 403, origin


def test_a_test_run_includes_the_mcp_result_a_client_gets(kiln_server: RunningKiln) -> None:
    tool = {**GOOD, "code": "print('{\"a\": 1}')\n"}
    assert kiln_server.api("POST", "/api/tools", json=tool).status_code == 201
    body = kiln_server.api("POST", "/api/tools/greet/run", json={"arguments": {}}).json()
    assert body["mcp_result"]["isError"] is False
    assert body["mcp_result"]["content"][0]["type"] == "text"
    assert '"a": 1' in body["mcp_result"]["content"][0]["text"].replace('"a":1', '"a": 1')
