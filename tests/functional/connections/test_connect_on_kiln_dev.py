"""A tool acting for its caller on a real `kiln dev` (over HTTP and `kiln stdio --url`),
against a real OAuth provider: each caller is sent to connect, consents as themselves, and
then each run sees its own token (the tool asks the provider whose it is), never the other
caller's; anonymous callers are refused saying why; a revoked connection is asked for again;
the /connect pages refuse a forged callback and a cross-site post; the CLI connects ahead."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from kiln.aws.clients import make_clients
from kiln.connections.envelope import FileKeys
from kiln.connections.vault import Vault
from support.devserver import DevServer, kiln_dev, stdio_call
from support.oidc_provider import OidcProvider, oidc_provider, through_connect_page

NAME = "whose_account"
CODE = """import json, os, sys, urllib.request
json.load(sys.stdin)
names = sorted(k for k in os.environ if k.startswith("KILN_CONNECTION"))
request = urllib.request.Request(os.environ["WHOAMI"],
    headers={"Authorization": "Bearer " + os.environ["KILN_CONNECTION_ACME"]})
with urllib.request.urlopen(request, timeout=10) as answer:
    print(json.dumps({"who": json.load(answer)["sub"], "names": names}))
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevServer, OidcProvider]]:
    tmp = tmp_path_factory.mktemp("connect")
    with oidc_provider() as provider:
        port = urlsplit(provider.issuer).port
        env = {"KILN_RUN_TCP_PORTS": str(port)}  # runs may reach the provider's "API"
        with kiln_dev(tmp / "state", "--no-examples", env=env) as dev:
            client_id, secret = provider.register(f"{dev.url}/connect/callback")
            body = {"issuer": provider.issuer, "client_id": client_id, "client_secret": secret,
                    "scopes": ["openid"]}  # fmt: skip
            added = dev.api("PUT", "/api/connections/providers/acme", json=body)
            assert added.status_code == 200, added.text
            assert secret not in added.text
            tool = {"name": NAME, "description": "Says whose account its token is.",
                    "language": "python", "code": CODE.replace(
                        'os.environ["WHOAMI"]', repr(f"{provider.issuer}/test/whoami")),
                    "input_schema": {"type": "object"}, "timeout_seconds": 20,
                    "connections": [{"provider": "acme", "scopes": ["repo"]}]}  # fmt: skip
            made = dev.api("POST", "/api/tools", json=tool)
            assert made.status_code == 201, made.text
            yield dev, provider


def call(dev: DevServer, key: str | None) -> dict[str, Any]:
    answer = dev.mcp("tools/call", {"name": NAME, "arguments": {}}, key=key)
    assert answer.status_code == 200, answer.text
    text = answer.text
    if text.startswith("event:") or "data: " in text:
        text = next(line[6:] for line in text.splitlines() if line.startswith("data: "))
    return json.loads(text)["result"]


def link_in(result: dict[str, Any]) -> str:
    assert result.get("isError") is True, result
    said = result["content"][0]["text"]
    found = re.search(r"open (http\S+/connect/\S+) to connect", said)
    assert found, said
    return found.group(1)


def tail(dev: DevServer) -> str:
    assert dev.log is not None
    return dev.log.read_text("utf-8", "replace")[-3000:]


def consent(dev: DevServer, provider: OidcProvider, link: str, user: str) -> httpx.Response:
    return through_connect_page(provider, link, user, tail(dev))


def connected(dev: DevServer, provider: OidcProvider, *users: str) -> dict[str, str]:
    """A call key per user, each sent to connect by a first call and consenting as itself."""
    keys = {user: dev.create_key(user) for user in users}
    for user, key in keys.items():
        done = consent(dev, provider, link_in(call(dev, key)), user)
        assert done.status_code == 200, f"{done.text}\n{tail(dev)}"
        assert "acme is connected" in done.text
    return keys


def never_in_the_clear(dev: DevServer, identities: list[str]) -> None:
    """The tokens, opened from the vault with its key file, are in no file of the state
    directory (the emulator's journal and snapshot, the log), nor in the ledger's answers."""
    env = dev.env
    clients = make_clients(
        endpoint_url=env["AWS_ENDPOINT_URL"], region=env["AWS_REGION"],
        credentials=(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
    )  # fmt: skip
    vault = Vault(clients.dynamodb, FileKeys(dev.state_dir / "vault.key"), table="kiln")
    secrets: list[bytes] = []
    for identity in identities:
        tokens = vault.tokens(identity, "acme")
        assert tokens is not None, identity
        secrets += [t.encode() for t in (tokens.access_token, tokens.refresh_token) if t]
    assert len(secrets) == 2 * len(identities)
    for path in dev.state_dir.rglob("*"):
        if path.is_file() and path.name != "vault.key":
            data = path.read_bytes()
            assert not any(secret in data for secret in secrets), f"a token in clear in {path}"
    ledger = dev.api("GET", "/api/calls").content
    assert not any(secret in ledger for secret in secrets), "a token in the ledger"


def test_each_caller_connects_and_each_run_sees_only_its_own_account(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, provider = world
    keys = connected(dev, provider, "alice", "bob")
    for _ in range(2):
        for user, key in keys.items():
            result = call(dev, key)
            assert result.get("isError") is not True, f"{result}\n{tail(dev)}"
            said = json.loads(result["content"][0]["text"])
            assert said == {"who": user, "names": ["KILN_CONNECTION_ACME"]}, said
    mine = dev.http.get(
        f"{dev.url}/api/connections", headers={"Authorization": f"Bearer {keys['alice']}"}
    ).json()
    assert [c["provider"] for c in mine["connections"]] == ["acme"]
    everyone = dev.api("GET", "/api/connections?all=true").json()["connections"]
    assert len(everyone) == 2
    assert "access_token" not in json.dumps(everyone)
    never_in_the_clear(dev, [c["identity"] for c in everyone])

    gone = dev.http.delete(
        f"{dev.url}/api/connections/acme", headers={"Authorization": f"Bearer {keys['alice']}"}
    )
    assert gone.status_code == 200, gone.text
    link_in(call(dev, keys["alice"]))  # asked to connect again
    assert json.loads(call(dev, keys["bob"])["content"][0]["text"])["who"] == "bob"
    vault = (dev.state_dir / "vault.key").stat()
    assert oct(vault.st_mode & 0o777) == "0o600"


def test_an_anonymous_caller_is_told_why_it_cannot_use_the_tool(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, _ = world
    result = call(dev, None)
    assert result.get("isError") is True, result
    assert "an anonymous caller cannot use it" in result["content"][0]["text"]


def test_connect_refuses_a_cross_site_post_and_a_forged_callback(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, _ = world
    key = dev.create_key("carol")
    link = link_in(call(dev, key))
    with httpx.Client(timeout=30) as attacker:  # never loaded the page: no cookie
        refused = attacker.post(link, data={"token": "guess"})
        assert refused.status_code == 403, refused.text
    with httpx.Client(timeout=30) as browser:
        page = browser.get(link)
        token = re.search(r'name=token value="([^"]+)"', page.text)
        assert token, page.text
        cross = browser.post(
            link, data={"token": token.group(1)}, headers={"Origin": "https://evil.example"}
        )
        assert cross.status_code == 403, cross.text
    state = link.rsplit("/", 1)[1]
    with httpx.Client(timeout=30) as forger:  # a callback from another browser
        forged = forger.get(f"{dev.url}/connect/callback", params={"state": state, "code": "x"})
        assert forged.status_code == 400, forged.text
        assert "did not start this connection" in forged.text
        again = forger.get(f"{dev.url}/connect/callback", params={"state": state, "code": "x"})
        assert "already used" in again.text
    result = call(dev, key)
    assert "open http" in result["content"][0]["text"]  # still not connected


def test_the_cli_connects_in_advance_lists_and_revokes(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, provider = world
    key = dev.create_key("dave")
    shown = dev.kiln("connections", "providers", "ls")
    assert shown.returncode == 0, shown.stderr
    assert "acme" in shown.stdout
    assert not any(secret in shown.stdout for secret in provider.clients.values())
    started = dev.kiln("connections", "connect", "acme", "--scopes", "repo", "--key", key)
    assert started.returncode == 0, started.stderr
    done = consent(dev, provider, started.stdout.strip(), "dave")
    assert "acme is connected" in done.text, done.text
    result = call(dev, key)  # connected in advance: the first call runs
    assert json.loads(result["content"][0]["text"])["who"] == "dave", result
    listed = dev.kiln("connections", "ls", "--key", key)
    assert listed.returncode == 0, listed.stderr
    assert "acme" in listed.stdout
    gone = dev.kiln("connections", "revoke", "acme", "--key", key)
    assert gone.returncode == 0, gone.stderr
    again = dev.kiln("connections", "revoke", "acme", "--key", key)
    assert again.returncode == 1
    assert "no connection to 'acme'" in again.stderr
    bad = dev.kiln("connections", "providers", "add", "Bad Name", "--client-id", "c")
    assert bad.returncode == 1
    assert "provider name must be 1-32 characters" in bad.stderr


def test_over_kiln_stdio_each_key_gets_its_own_account(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, provider = world
    keys = connected(dev, provider, "frank", "grace")
    for user, key in keys.items():
        answer = stdio_call(dev.url, key, NAME)
        said = json.loads(answer["result"]["content"][0]["text"])
        assert said["who"] == user, f"{answer}\n{tail(dev)}"


def test_rest_refuses_a_bad_provider_naming_its_field_and_saves_nothing(
    world: tuple[DevServer, OidcProvider],
) -> None:
    dev, provider = world
    endpoints = {"authorize_url": "https://example.com/a", "token_url": "https://example.com/t"}
    cases = [
        ({"issuer": f"{provider.issuer}/nowhere", "client_id": "c"}, "issuer"),
        (endpoints | {"client_id": "c", "client_secret": ""}, "client_secret"),
        (endpoints | {"authorize_url": "http://example.com/a", "client_id": "c"}, "authorize_url"),
    ]
    for body, field in cases:
        bad = dev.api("PUT", "/api/connections/providers/acme-bad", json=body)
        assert bad.status_code == 422, bad.text  # the issuer's too: bad input, not a 502
        error = bad.json()["error"]
        assert error["code"] == "invalid_provider", error
        assert [v["field"] for v in error["violations"]] == [field], error
        assert error["violations"][0]["message"] == error["message"]
    listed = dev.api("GET", "/api/connections/providers").json()["providers"]
    assert "acme-bad" not in [p["name"] for p in listed]
