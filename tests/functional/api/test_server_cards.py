"""Server cards, the AI Catalog and `kiln publish` on `kiln dev`, read by a real HTTP client.

The card of /mcp and of each published view (`<mcp-url>/server-card`) and the catalog listing
them (`/.well-known/ai-catalog.json`) are fetched with httpx and checked against Kiln's
JSON Schemas (`kiln.protocol.card_schemas`); `kiln publish` writes a registry server.json,
checked against Kiln's registry schema (and an official file named by
KILN_REGISTRY_SCHEMA_FILE), and submits it to a small registry stand-in that checks the
request. The same documents from the Lambda handler: `tests/e2e/test_lambda_server_cards.py`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from kiln.protocol.cards import CardError, validate
from support.devserver import DevServer, kiln_dev

CARD_TYPE = "application/mcp-server-card+json"


def tool(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "tool.json").write_text(json.dumps({"description": f"{name}, for cards."}))
    (root / name / "main.py").write_text("print('hi')\n")


def view(root: Path, name: str, **body: Any) -> None:
    (root / f"{name}.view.json").write_text(json.dumps({"tools": ["echo"], **body}))


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("cards")
    tools = root / "tools"
    tool(tools, "echo")
    view(tools, "open", published=True, anonymous=True, description="Echoes, for anyone.")
    view(tools, "keyed", published=True)
    view(tools, "hidden")  # not published: no endpoint, no card
    with kiln_dev(root / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


def fetched(dev: DevServer, path: str, **headers: str) -> httpx.Response:
    response = dev.http.get(dev.url + path, headers={"Accept": CARD_TYPE, **headers})
    assert response.status_code == 200, f"{path}: {response.status_code} {response.text}"
    return response


def valid_card(dev: DevServer, path: str) -> dict[str, Any]:
    return checked_card(fetched(dev, path))


def checked_card(response: httpx.Response) -> dict[str, Any]:
    """The card a response holds, after checking it against the extension's schema."""
    where = response.request.url
    assert response.status_code == 200, f"{where}: {response.status_code} {response.text}"
    assert response.headers["content-type"] == CARD_TYPE
    document: dict[str, Any] = response.json()
    try:
        validate(document, "card")
    except CardError as error:
        pytest.fail(f"{where} is not a valid server card: {error}\n{document}")
    return document


def test_the_catalog_lists_the_public_endpoint_and_the_published_views(dev: DevServer) -> None:
    response = fetched(dev, "/.well-known/ai-catalog.json")
    assert response.headers["content-type"] == "application/ai-catalog+json"
    entries = response.json()["entries"]
    assert [entry["url"] for entry in entries] == [
        f"{dev.url}/mcp/server-card",
        f"{dev.url}/mcp/v/keyed/server-card",
        f"{dev.url}/mcp/v/open/server-card",
    ]
    assert {entry["type"] for entry in entries} == {CARD_TYPE}


def test_every_card_the_catalog_lists_is_valid_against_the_extensions_schema(
    dev: DevServer,
) -> None:
    for entry in fetched(dev, "/.well-known/ai-catalog.json").json()["entries"]:
        document = valid_card(dev, entry["url"].removeprefix(dev.url))
        assert "tools" not in document
        assert document["_meta"]["kiln/card"]["status"] == "experimental"


def test_a_view_card_points_at_the_views_endpoint_and_that_endpoint_answers_mcp(
    dev: DevServer,
) -> None:
    document = valid_card(dev, "/mcp/v/open/server-card")
    assert document["description"] == "Echoes, for anyone."
    (remote,) = document["remotes"]
    assert remote["url"] == f"{dev.url}/mcp/v/open"
    assert "headers" not in remote  # anonymous
    listed = dev.mcp("tools/list", path=remote["url"].removeprefix(dev.url))
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["echo"]


def test_a_keyed_view_card_asks_for_a_secret_authorization_header(dev: DevServer) -> None:
    (remote,) = valid_card(dev, "/mcp/v/keyed/server-card")["remotes"]
    (header,) = remote["headers"]
    assert (header["name"], header["isSecret"], header["isRequired"]) == (
        "Authorization", True, True,
    )  # fmt: skip
    assert dev.mcp("tools/list", path="/mcp/v/keyed").status_code == 401  # as the card says


def test_an_unchanged_card_is_revalidated_with_a_304_and_no_body(dev: DevServer) -> None:
    first = fetched(dev, "/mcp/v/open/server-card")
    etag = first.headers["etag"]
    assert etag.startswith('"')
    assert not etag.startswith("W/")
    assert first.headers["cache-control"] == "public, max-age=300"
    again = dev.http.get(dev.url + "/mcp/v/open/server-card", headers={"If-None-Match": etag})
    assert again.status_code == 304, again.text
    assert again.content == b""
    assert again.headers["etag"] == etag
    other = dev.http.get(dev.url + "/mcp/v/open/server-card", headers={"If-None-Match": '"x"'})
    assert other.status_code == 200
    catalog = fetched(dev, "/.well-known/ai-catalog.json")
    revalidated = dev.http.get(
        dev.url + "/.well-known/ai-catalog.json", headers={"If-None-Match": catalog.headers["etag"]}
    )
    assert revalidated.status_code == 304


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A server whose catalog is long enough to be worth compressing."""
    root = tmp_path_factory.mktemp("crowded")
    tools = root / "tools"
    tool(tools, "echo")
    for n in range(20):
        view(tools, f"view-{n:02}", published=True)
    with kiln_dev(root / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


def test_a_compressed_answer_has_a_tag_of_its_own_and_each_revalidates(crowded: DevServer) -> None:
    url = crowded.url + "/.well-known/ai-catalog.json"
    plain = crowded.http.get(url, headers={"Accept-Encoding": "identity"})
    packed = crowded.http.get(url, headers={"Accept-Encoding": "gzip"})
    assert plain.status_code == packed.status_code == 200, packed.text
    assert "content-encoding" not in plain.headers
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.json() == plain.json()  # httpx decoded it
    assert len(packed.json()["entries"]) == 21
    assert packed.headers["etag"] != plain.headers["etag"]
    assert packed.headers["vary"] == plain.headers["vary"] == "Accept-Encoding"
    for coding, answer in (("identity", plain), ("gzip", packed)):
        headers = {"Accept-Encoding": coding, "If-None-Match": answer.headers["etag"]}
        again = crowded.http.get(url, headers=headers)
        assert again.status_code == 304, (coding, again.headers)
        assert again.headers["etag"] == answer.headers["etag"]
    again = crowded.http.get(url, headers={"Accept-Encoding": "gzip"})
    assert again.headers["etag"] == packed.headers["etag"]  # the same bytes each time


def test_a_changed_view_changes_its_card_and_its_etag(dev: DevServer) -> None:
    before = fetched(dev, "/mcp/v/keyed/server-card")
    body = {"tools": ["echo"], "published": True, "description": "Now described."}
    revision = dev.api("GET", "/api/views/keyed").json()["revision"]
    put = dev.api("PUT", "/api/views/keyed", json=body, headers={"If-Match": f'"{revision}"'})
    assert put.status_code == 200, put.text
    after = dev.http.get(
        dev.url + "/mcp/v/keyed/server-card", headers={"If-None-Match": before.headers["etag"]}
    )
    assert after.status_code == 200, after.text
    assert after.json()["description"] == "Now described."
    assert after.headers["etag"] != before.headers["etag"]


@pytest.mark.parametrize("name", ["hidden", "nowhere"])
def test_an_unpublished_or_unknown_views_card_is_a_clear_404(dev: DevServer, name: str) -> None:
    response = dev.http.get(f"{dev.url}/mcp/v/{name}/server-card")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == (
        f"no published view is named '{name}'; the public endpoint's card is at /mcp/server-card"
    )


def test_any_origin_may_read_a_card_and_its_preflight_is_answered(dev: DevServer) -> None:
    origin = {"Origin": "https://elsewhere.example"}
    read = fetched(dev, "/mcp/server-card", **origin)
    assert read.headers["access-control-allow-origin"] == "*"
    assert read.headers["access-control-expose-headers"] == "ETag"
    preflight = dev.http.options(
        dev.url + "/mcp/server-card",
        headers={**origin, "Access-Control-Request-Method": "GET",
                 "Access-Control-Request-Headers": "if-none-match"},
    )  # fmt: skip
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "If-None-Match" in preflight.headers["access-control-allow-headers"]
    # ... a rebinding page (a foreign Host on this loopback bind) still gets nothing
    rebound = dev.http.get(dev.url + "/mcp/server-card", headers={"Host": "evil.example"})
    assert rebound.status_code == 421, rebound.text
    # ... and the MCP endpoint itself still refuses that origin
    assert dev.mcp("tools/list").status_code == 200
    refused = dev.http.post(dev.url + "/mcp", headers=origin, json={})
    assert refused.status_code == 403


def test_a_write_to_a_card_is_a_405_naming_the_allowed_methods(dev: DevServer) -> None:
    response = dev.http.post(dev.url + "/mcp/server-card", json={})
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD, OPTIONS"
    assert response.json()["error"]["code"] == "method_not_allowed"


@dataclass
class Registry:
    """A stand-in for an MCP registry's publish API: records each request, answers `status`."""

    status: int = 200
    answer: dict[str, Any] = field(default_factory=dict)
    received: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def registry() -> Iterator[Registry]:
    state = Registry()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            state.received.append(
                (
                    "POST",
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw),
                )
            )
            body = json.dumps(state.answer).encode()
            self.send_response(state.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_publish_writes_a_server_json_valid_against_the_registrys_schema(
    dev: DevServer, tmp_path: Path
) -> None:
    out = tmp_path / "server.json"
    done = dev.kiln("publish", "open", "--name", "io.github.acme/echo", "--out", str(out))
    assert done.returncode == 0, done.stderr
    entry = json.loads(out.read_text())
    validate(entry, "registry")
    assert entry["name"] == "io.github.acme/echo"
    assert entry["remotes"] == [{"type": "streamable-http", "url": f"{dev.url}/mcp/v/open"}]
    revision = dev.api("GET", "/api/views/open").json()["revision"]
    assert entry["version"] == f"0.1.0+view.{revision}"
    assert f"wrote {out}: io.github.acme/echo" in done.stdout


def test_publish_of_a_keyed_view_carries_its_authorization_header(
    dev: DevServer, tmp_path: Path
) -> None:
    out = tmp_path / "server.json"
    done = dev.kiln("publish", "keyed", "--out", str(out), "--version", "2.0.0")
    assert done.returncode == 0, done.stderr
    entry = json.loads(out.read_text())
    validate(entry, "registry")
    assert entry["version"] == "2.0.0"
    assert entry["name"].endswith("/kiln.keyed")  # the card's name when --name is left out
    (header,) = entry["remotes"][0]["headers"]
    assert header["name"] == "Authorization"
    assert header["isSecret"] is True


def test_publish_also_checks_the_official_schema_file_the_environment_names(
    dev: DevServer, tmp_path: Path
) -> None:
    # a stand-in for a downloaded official file, stricter than Kiln's own schema
    official = tmp_path / "server.schema.json"
    official.write_text(json.dumps({"type": "object", "required": ["packages"]}))
    out = tmp_path / "server.json"
    done = dev.kiln("publish", "open", "--name", "io.github.acme/echo", "--out", str(out),
                    env={"KILN_REGISTRY_SCHEMA_FILE": str(official)})  # fmt: skip
    assert done.returncode != 0, done.stdout
    assert "'packages' is a required property" in done.stderr, done.stderr
    assert f"official {official}" in done.stderr, done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nowhere"], "kiln publish: no view is named 'nowhere' (`kiln views ls` lists them)"),
        (["hidden"], "kiln publish: view 'hidden' is not published, so it has no endpoint"),
        (["open", "--name", "acme"],
         "kiln publish: --name 'acme': must be reverse-DNS 'namespace/server'"),
        (["open", "--registry", "http://127.0.0.1:9"],
         "kiln publish: --registry needs --token"),
        (["open", "--registry", "registry.example", "--token", "t"],
         "kiln publish: --registry: give the registry's base URL"),
    ],
)  # fmt: skip
def test_publish_refuses_bad_input_with_a_clear_error_and_writes_nothing(
    dev: DevServer, tmp_path: Path, args: list[str], said: str
) -> None:
    out = tmp_path / "server.json"
    done = dev.kiln("publish", *args, "--out", str(out))
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith(said), done.stderr
    assert not out.exists()


def test_publish_submits_the_entry_to_the_registrys_publish_api(
    dev: DevServer, tmp_path: Path, registry: Registry
) -> None:
    out = tmp_path / "server.json"
    done = dev.kiln(
        "publish", "open", "--name", "io.github.acme/echo", "--out", str(out),
        "--registry", registry.url + "/", "--token", "registry-token-1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ((method, path, headers, body),) = registry.received
    assert (method, path) == ("POST", "/v0.1/publish")
    assert headers["authorization"] == "Bearer registry-token-1"
    assert headers["content-type"] == "application/json"
    assert body == json.loads(out.read_text())
    validate(body, "registry")
    assert f"published io.github.acme/echo {body['version']} to {registry.url}" in done.stdout


def test_a_registry_refusal_is_said_in_the_registrys_own_words(
    dev: DevServer, tmp_path: Path, registry: Registry
) -> None:
    registry.status = 403
    registry.answer = {
        "title": "Forbidden",
        "status": 403,
        "detail": "You do not have permission to publish this server",
        "errors": [{"message": "namespace io.github.acme is not yours", "location": "body.name"}],
    }
    out = tmp_path / "server.json"
    done = dev.kiln(
        "publish", "open", "--name", "io.github.acme/echo", "--out", str(out),
        "--registry", registry.url, "--token", "t",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"kiln publish: {registry.url} refused it: HTTP 403: You do not have permission to "
        "publish this server; body.name: namespace io.github.acme is not yours"
    )
    assert out.exists()  # written before the submission: fix the namespace, send it again
