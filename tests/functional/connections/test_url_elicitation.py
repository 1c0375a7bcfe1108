"""A caller who has not connected is sent to Kiln's /connect page in the shape their wire and
client take (kiln.protocol.urlmode), on a real `kiln dev` against a real OAuth provider:
2025-11-25 with `elicitation.url` declared gets -32042 with `data.elicitations`; 2026-07-28
an `input_required` URL elicitation whose repeated call runs once the person connected (and
asks again before); older revisions and clients without URL mode the `isError` with the link."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functional.protocol.test_inner_calls import CALLER
from support.acting_tool import acting_tool, bridged_call
from support.devserver import DevServer
from support.oidc_provider import OidcProvider

NAME = "whose_url_account"
MODERN = "2026-07-28"
URL_MODE = {"elicitation": {"form": {}, "url": {}}}
KEY = "kiln/url/connect/acme"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevServer, OidcProvider]]:
    outer = {"name": "calls_whose", "description": "Calls the tool that acts for you.",
             "language": "python", "code": CALLER, "calls": [NAME],
             "input_schema": {"type": "object"}}  # fmt: skip
    with acting_tool(tmp_path_factory.mktemp("url") / "state", NAME, outer) as running:
        yield running


def call(
    dev: DevServer,
    key: str,
    *,
    version: str,
    capabilities: dict[str, Any] | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One tools/call of the tool on `version`; `capabilities` go in the request's `_meta`
    (None: no `_meta` at all, as 2025 clients send it). The JSON-RPC answer."""
    params: dict[str, Any] = {"name": NAME, "arguments": {}, **(extra or {})}
    name = params["name"]
    headers = {"Content-Type": "application/json", "Accept": "application/json",
               "Authorization": f"Bearer {key}", "MCP-Protocol-Version": version}  # fmt: skip
    if version == MODERN:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        }
        headers.update({"Mcp-Method": "tools/call", "Mcp-Name": name})
    elif capabilities is not None:
        params["_meta"] = {"io.modelcontextprotocol/clientCapabilities": capabilities}
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    answer = dev.http.post(f"{dev.url}/mcp", json=body, headers=headers)
    assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{tail(dev)}"
    said: dict[str, Any] = answer.json()
    return said


def tail(dev: DevServer) -> str:
    assert dev.log is not None
    return dev.log.read_text("utf-8", "replace")[-3000:]


def link_in(result: dict[str, Any]) -> str:
    assert result.get("isError") is True, result
    found = re.search(r"open (http\S+/connect/\S+) to connect", result["content"][0]["text"])
    assert found, result
    return found.group(1)


def consent(dev: DevServer, provider: OidcProvider, link: str, user: str) -> None:
    """The person opens the link, posts the page, consents at the provider, comes back."""
    with httpx.Client(timeout=30) as browser:
        page = browser.get(link)
        token = re.search(r'name=token value="([^"]+)"', page.text)
        assert token, f"{page.status_code} {page.text}"
        go = browser.post(link, data={"token": token.group(1)})
        assert go.status_code == 303, f"{go.text}\n{tail(dev)}"
        back = browser.get(str(provider.consent(browser, go.headers["location"], user=user)))
        assert "acme is connected" in back.text, f"{back.text}\n{tail(dev)}"


def modern_call(
    dev: DevServer, key: str, extra: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """A 2026-07-28 call from a client that takes URL elicitations: the key, the result."""
    return key, call(dev, key, version=MODERN, capabilities=URL_MODE, extra=extra)["result"]


def answering(asked: dict[str, Any], action: str) -> dict[str, Any]:
    """The params that repeat a call with the person's `action` on the page it asked for."""
    return {"inputResponses": {KEY: {"action": action}}, "requestState": asked["requestState"]}


def whose(dev: DevServer, answer: dict[str, Any]) -> str:
    result = answer.get("result", {})
    assert result.get("isError") is not True, f"{answer}\n{tail(dev)}"
    assert "content" in result, f"{answer}\n{tail(dev)}"
    who: str = json.loads(result["content"][0]["text"])["who"]
    return who


def test_2025_11_25_with_url_mode_declared_gets_32042_naming_the_connect_page(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, provider = world
    key = dev.create_key("uma")
    answer = call(dev, key, version="2025-11-25", capabilities=URL_MODE)
    assert "result" not in answer, answer
    error = answer["error"]
    assert error["code"] == -32042, error
    (elicitation,) = error["data"]["elicitations"]
    assert sorted(elicitation) == ["elicitationId", "message", "mode", "url"]
    assert elicitation["mode"] == "url"
    url = elicitation["url"]
    assert re.fullmatch(rf"{re.escape(dev.url)}/connect/[\w-]+", url), url
    state = url.rsplit("/", 1)[1]
    assert state not in elicitation["elicitationId"], "the id must not carry the flow's state"
    assert "Connect your acme account (scopes: repo)" in elicitation["message"]
    assert NAME in elicitation["message"]
    consent(dev, provider, url, "uma")
    assert whose(dev, call(dev, key, version="2025-11-25", capabilities=URL_MODE)) == "uma"


@pytest.mark.parametrize(
    ("version", "capabilities"),
    [
        ("2025-11-25", None),  # a 2025 POST that says nothing of the session's capabilities
        ("2025-11-25", {"elicitation": {}}),  # form mode only (the empty object means form)
        ("2025-06-18", URL_MODE),  # a revision before URL elicitation
        (MODERN, {"elicitation": {"form": {}}}),
        (MODERN, {}),
    ],
)
def test_a_client_without_url_mode_gets_the_tool_error_with_the_link(
    world: tuple[DevServer, OidcProvider], version: str, capabilities: dict[str, Any] | None
) -> None:
    dev, _ = world
    key = dev.create_key(f"vic-{version}-{len(json.dumps(capabilities))}")
    answer = call(dev, key, version=version, capabilities=capabilities)
    assert "error" not in answer, answer
    assert answer["result"].get("resultType") != "input_required", answer
    assert "/connect/" in link_in(answer["result"])


def test_2026_07_28_asks_with_an_input_request_until_the_person_has_connected(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, provider = world
    key, first = modern_call(dev, dev.create_key("wes"))
    assert first["resultType"] == "input_required", first
    assert list(first["inputRequests"]) == [KEY]
    request = first["inputRequests"][KEY]
    assert request["method"] == "elicitation/create"
    assert sorted(request["params"]) == ["message", "mode", "url"]  # no elicitationId here
    assert request["params"]["mode"] == "url"
    _, again = modern_call(dev, key, answering(first, "accept"))
    assert again["resultType"] == "input_required", f"not connected yet: asked again: {again}"
    url = again["inputRequests"][KEY]["params"]["url"]
    consent(dev, provider, url, "wes")
    ran = call(dev, key, version=MODERN, capabilities=URL_MODE, extra=answering(again, "accept"))
    assert whose(dev, ran) == "wes"


def test_2026_07_28_a_declined_page_ends_the_call_with_a_tool_error(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, _ = world
    key, first = modern_call(dev, dev.create_key("xia"))
    _, result = modern_call(dev, key, answering(first, "decline"))
    assert result.get("isError") is True, result
    assert "you declined opening" in result["content"][0]["text"], result


@pytest.mark.parametrize(("capabilities", "elicited"), [(URL_MODE, True), ({}, False)])
def test_kiln_stdio_url_tells_the_server_what_its_client_declared_at_initialize(
    world: tuple[DevServer, OidcProvider], capabilities: dict[str, Any], elicited: bool
) -> None:
    """A 2025 POST says nothing of the session: the bridge adds its client's capabilities."""
    dev, _ = world
    answer = bridged_call(dev, dev.create_key(f"yan-{elicited}"), NAME, capabilities)
    if elicited:
        assert answer["error"]["code"] == -32042, answer
        (page,) = answer["error"]["data"]["elicitations"]
        assert page["url"].startswith(f"{dev.url}/connect/"), page
    else:
        assert "/connect/" in link_in(answer["result"]), answer


def test_a_tool_called_by_another_tool_gives_its_caller_the_link_not_an_input_request(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, _ = world
    key = dev.create_key("zed")
    outer = {"name": "calls_whose", "arguments": {"calls": [{"name": NAME, "arguments": {}}]}}
    answer = call(dev, key, version=MODERN, capabilities=URL_MODE, extra=outer)
    result = answer["result"]
    assert result.get("resultType") != "input_required", answer
    (inner,) = json.loads(result["content"][0]["text"])["got"]
    assert "/connect/" in link_in(inner), inner
