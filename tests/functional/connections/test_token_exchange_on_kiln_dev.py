"""On behalf of, without a consent screen (RFC 8693), on a real `kiln dev` in OAuth mode: its
callers sign in with a company IdP (a real issuer and JWKS), and a real provider
(`oidc-provider` with a token-exchange grant) trusts that IdP. An OAuth caller's run gets the
provider's token for its own subject with no consent page, each subject its own, exchanged once
and kept; a key caller is sent to connect; a refused exchange (a subject token from an issuer
the provider does not trust, or one already expired) answers the provider's error and runs
nothing; no caller's token and no exchanged token is in the log or the state in clear."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
import pytest

from kiln.aws.clients import make_clients
from kiln.connections.envelope import FileKeys
from kiln.connections.exchange import GRANT
from kiln.connections.vault import Vault
from support.auth import Issuer, running_issuer
from support.devserver import DEV_KEY, DevServer, clean_env, kiln_dev
from support.oidc_provider import OidcProvider, oidc_provider

AUDIENCE = "https://kiln.example"
CODE = """import json, os, sys, urllib.request
json.load(sys.stdin)
request = urllib.request.Request(os.environ["WHOAMI"],
    headers={"Authorization": "Bearer " + os.environ["KILN_CONNECTION_NAME"]})
with urllib.request.urlopen(request, timeout=10) as answer:
    said = json.load(answer)
print(json.dumps({"who": said["sub"], "how": said.get("gty"), "scope": said["scope"]}))
"""


@dataclass
class World:
    dev: DevServer
    provider: OidcProvider
    idp: Issuer
    stranger: Issuer  # an IdP the provider does not trust for `elsewhere`'s client
    bearers: list[str]  # every caller token a test sent, to look for in the log

    def token(self, sub: str, *, expires_in: float = 300) -> str:
        made = self.idp.token(aud=AUDIENCE, sub=sub, expires_in=expires_in)
        self.bearers.append(made)
        return made


def add_with_cli(dev: DevServer, secret: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`kiln connections providers add …`, the client secret piped as an operator would."""
    env = {**clean_env(), "KILN_URL": dev.url, "KILN_AUTHOR_KEY": DEV_KEY}
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", "connections", "providers", "add", *args],
        input=secret, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def tool(name: str, provider: str, whoami: str) -> dict[str, Any]:
    code = CODE.replace('os.environ["WHOAMI"]', repr(whoami))
    code = code.replace("KILN_CONNECTION_NAME", f"KILN_CONNECTION_{provider.upper()}")
    return {"name": name, "description": "Says whose account its token is.",
            "language": "python", "code": code, "input_schema": {"type": "object"},
            "timeout_seconds": 20,
            "connections": [{"provider": provider, "scopes": ["repo"]}]}  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("exchange")
    with running_issuer() as idp, running_issuer() as stranger, oidc_provider() as provider:
        env = {
            "KILN_OAUTH_ISSUER": idp.url,
            "KILN_OAUTH_AUDIENCE": AUDIENCE,
            "KILN_RUN_TCP_PORTS": str(urlsplit(provider.issuer).port),  # the provider's "API"
        }
        with kiln_dev(tmp / "state", "--no-examples", env=env) as dev:
            callback = f"{dev.url}/connect/callback"
            client_id, secret = provider.register(callback, trust=(idp.url, idp.jwks_url))
            added = add_with_cli(dev, secret, "corp", "--issuer", provider.issuer,
                                 "--client-id", client_id, "--scopes", "openid",
                                 "--token-exchange")  # fmt: skip
            assert added.returncode == 0, added.stderr
            assert "token exchange" in added.stdout, added.stdout
            plain = {"issuer": provider.issuer, "client_id": client_id, "client_secret": secret}
            put = dev.api("PUT", "/api/connections/providers/plain", json=plain)
            assert put.status_code == 200, put.text
            client_id, secret = provider.register(callback, trust=(stranger.url, stranger.jwks_url))
            body = {"issuer": provider.issuer, "client_id": client_id, "client_secret": secret,
                    "token_exchange": True}  # fmt: skip
            put = dev.api("PUT", "/api/connections/providers/elsewhere", json=body)
            assert put.status_code == 200, put.text
            assert put.json()["token_exchange"] is True, put.text
            whoami = f"{provider.issuer}/test/whoami"
            for name, declared in (
                ("as_corp", "corp"), ("as_elsewhere", "elsewhere"), ("as_plain", "plain"),
            ):  # fmt: skip
                saved = dev.api("POST", "/api/tools", json=tool(name, declared, whoami))
                assert saved.status_code == 201, saved.text
            yield World(dev, provider, idp, stranger, [])


def tail(dev: DevServer) -> str:
    assert dev.log is not None
    return dev.log.read_text("utf-8", "replace")[-3000:]


def call(world: World, name: str, bearer: str) -> dict[str, Any]:
    answer = world.dev.mcp("tools/call", {"name": name, "arguments": {}}, key=bearer)
    assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{tail(world.dev)}"
    text = answer.text
    if text.startswith("event:") or "data: " in text:
        text = next(line[6:] for line in text.splitlines() if line.startswith("data: "))
    return dict(json.loads(text)["result"])


def said(world: World, result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") is not True, f"{result}\n{tail(world.dev)}"
    return dict(json.loads(result["content"][0]["text"]))


def refusal(result: dict[str, Any]) -> str:
    assert result.get("isError") is True, result
    return str(result["content"][0]["text"])


def vault(dev: DevServer) -> Vault:
    env = dev.env
    clients = make_clients(
        endpoint_url=env["AWS_ENDPOINT_URL"], region=env["AWS_REGION"],
        credentials=(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
    )  # fmt: skip
    return Vault(clients.dynamodb, FileKeys(dev.state_dir / "vault.key"), table="kiln")


def test_each_oauth_caller_runs_as_itself_by_token_exchange_with_no_consent_page(
    world: World,
) -> None:
    tokens = {user: world.token(user) for user in ("alice", "bob")}
    for _ in range(2):
        for user, bearer in tokens.items():
            seen = said(world, call(world, "as_corp", bearer))
            assert seen == {"who": user, "how": GRANT, "scope": "openid repo"}, seen
    counted = world.provider.exchanges()
    assert (counted.get("alice"), counted.get("bob")) == (1, 1), counted  # kept, not per call
    listed = world.dev.api("GET", "/api/connections?all=true").json()["connections"]
    assert {(c["identity"], c["provider"]) for c in listed} >= {
        ("jwt:alice", "corp"), ("jwt:bob", "corp"),
    }  # fmt: skip
    kept = vault(world.dev).tokens("jwt:alice", "corp")
    assert kept is not None
    assert kept.refresh_token is None  # a new token comes from a new exchange
    exp = jwt.decode(tokens["alice"], options={"verify_signature": False})["exp"]
    assert kept.expires_at is not None
    assert kept.expires_at <= exp  # kept no longer than alice's own token is valid
    providers = world.dev.kiln("connections", "providers", "ls")
    assert providers.returncode == 0, providers.stderr
    assert re.search(r"corp\s+\S+\s+openid\s+yes", providers.stdout), providers.stdout


def test_a_key_caller_is_sent_to_connect_as_for_any_provider(world: World) -> None:
    key = world.dev.create_key("kim")
    said_ = refusal(call(world, "as_corp", key))
    assert re.search(r"open http\S+/connect/\S+ to connect", said_), said_


def test_an_oauth_caller_connects_where_the_provider_is_not_registered_for_exchange(
    world: World,
) -> None:
    said_ = refusal(call(world, "as_plain", world.token("frank")))
    assert re.search(r"open http\S+/connect/\S+ to connect", said_), said_
    assert "frank" not in world.provider.exchanges()


def test_a_refused_exchange_names_the_providers_error_and_runs_nothing(world: World) -> None:
    before = world.provider.exchanges()
    carol = world.token("carol")
    said_ = refusal(call(world, "as_elsewhere", carol))
    assert "Tool 'as_elsewhere' cannot run" in said_, said_
    assert "the exchange failed" in said_, said_
    assert "invalid_grant" in said_, said_
    assert carol not in said_
    late = world.token("dave", expires_in=-5)  # Kiln allows 30 s of clock skew; corp none
    said_ = refusal(call(world, "as_corp", late))
    assert "invalid_grant" in said_, said_
    assert world.provider.exchanges() == before  # nothing was issued, nothing ran
    assert vault(world.dev).tokens("jwt:dave", "corp") is None
    assert said(world, call(world, "as_corp", world.token("dave")))["who"] == "dave"


def test_no_caller_token_and_no_exchanged_token_is_in_the_log_or_the_state(world: World) -> None:
    assert said(world, call(world, "as_corp", world.token("erin")))["who"] == "erin"
    opened = vault(world.dev)
    exchanged = [
        t.access_token
        for c in world.dev.api("GET", "/api/connections?all=true").json()["connections"]
        if c["provider"] == "corp" and (t := opened.tokens(c["identity"], "corp")) is not None
    ]
    assert exchanged, "no exchanged token was kept"
    secrets = [s.encode() for s in (*world.bearers, *exchanged)]
    for path in world.dev.state_dir.rglob("*"):
        if path.is_file() and path.name != "vault.key":
            data = path.read_bytes()
            assert not any(s in data for s in secrets), f"a token in clear in {path}"
    ledger = world.dev.api("GET", "/api/calls").content
    assert not any(s in ledger for s in secrets), "a token in the ledger"
