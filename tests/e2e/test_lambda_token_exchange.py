"""On behalf of, without a consent screen (RFC 8693), on the Lambda path: the `mcp` function in
OAuth mode (its callers' tokens checked against a real IdP's JWKS) exchanges each caller's own
token at a real provider (`oidc-provider` with a token-exchange grant) and hands the issued
token to the tool's run in its tenant-isolated runner function; each OAuth subject's run acts
as that subject, exchanged once and kept; a refused exchange (an already expired token, which
Kiln's clock leeway lets through) answers the provider's error and invokes no runner; no
caller's token is in either function's log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from e2e.lambda_profile import Environment, TenantInvoke, lambda_stack
from e2e.test_lambda_inner_calls import served
from e2e.test_lambda_runtime import event_for, rpc
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from kiln.connections.exchange import GRANT
from kiln.connections.providers import ProviderStore, provider_from
from support.auth import Issuer, running_issuer
from support.aws import fresh_stack
from support.oidc_provider import OidcProvider, oidc_provider

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")

AUDIENCE = "https://kiln.example"
CODE = """import json, os, sys, urllib.request
json.load(sys.stdin)
request = urllib.request.Request(WHOAMI,
    headers={"Authorization": "Bearer " + os.environ["KILN_CONNECTION_CORP"]})
with urllib.request.urlopen(request, timeout=10) as answer:
    said = json.load(answer)
print(json.dumps({"who": said["sub"], "how": said.get("gty")}))
"""


@dataclass
class Stack:
    mcp: Environment
    runners: TenantInvoke
    provider: OidcProvider
    idp: Issuer
    tool_id: str
    bearers: list[str]

    def token(self, sub: str, *, expires_in: float = 300) -> str:
        made = self.idp.token(aud=AUDIENCE, sub=sub, expires_in=expires_in)
        self.bearers.append(made)
        return made


@pytest.fixture(scope="module")
def stack(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    aws = fresh_stack(moto_endpoint, "kiln-exchange")
    prefix = f"/{aws.table}"
    with running_issuer() as idp, oidc_provider() as provider:
        client_id, secret = provider.register(
            "https://kiln.example/connect/callback", trust=(idp.url, idp.jwks_url)
        )
        ssm = aws.clients.session.client("ssm", endpoint_url=moto_endpoint)
        providers = ProviderStore(aws.clients.dynamodb, ssm, table=aws.table, secrets_prefix=prefix)
        body = {"issuer": provider.issuer, "client_id": client_id, "token_exchange": True}
        providers.put(provider_from("corp", body), secret)
        store = CatalogStore(
            aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket
        )
        draft = {"name": "as_corp", "description": "Says whose account its token is.",
                 "language": "python", "timeout_seconds": 20,
                 "code": CODE.replace("WHOAMI", repr(f"{provider.issuer}/test/whoami")),
                 "input_schema": {"type": "object"},
                 "connections": [{"provider": "corp", "scopes": ["repo"]}]}  # fmt: skip
        tool_id = store.create(check_draft(draft), actor="e2e").id
        tmp = tmp_path_factory.mktemp("exchange")
        tmp.chmod(0o755)
        mcp_env = {
            "KILN_OAUTH_ISSUER": idp.url,
            "KILN_OAUTH_AUDIENCE": AUDIENCE,
            "KILN_SECRETS_PREFIX": prefix,
            # In AWS a KMS key (KILN_VAULT_KMS_KEY); here a key file in the function's own /tmp
            "KILN_VAULT_KEY_FILE": "/tmp/vault.key",
        }
        runner_env = {"KILN_RUN_TCP_PORTS": str(urlsplit(provider.issuer).port)}
        with lambda_stack(tmp, moto_endpoint, aws.table, aws.bucket, mcp_env=mcp_env,
                          runner_env=runner_env, reachable=(idp.url, provider.issuer)) as (
            mcp, runners,
        ):  # fmt: skip
            yield Stack(mcp, runners, provider, idp, tool_id, [])


def call(stack: Stack, bearer: str) -> tuple[dict[str, Any], list[str]]:
    """The call's result, and the tenant of each runner invocation it made."""
    event = event_for("http-api-tools-call.json", rpc("tools/call", {"name": "as_corp"}))
    event["headers"]["authorization"] = f"Bearer {bearer}"
    return served(stack, event)  # a Stack of that module: the same mcp and runners


def test_each_oauth_subjects_run_acts_as_itself_by_token_exchange_on_lambda(
    stack: Stack,
) -> None:
    tokens = {user: stack.token(user) for user in ("alice", "bob")}
    for _ in range(2):
        for user, bearer in tokens.items():
            result, tenants = call(stack, bearer)
            assert result.get("isError") is not True, f"{result}\n--- mcp log:\n{stack.mcp.log()}"
            said = json.loads(result["content"][0]["text"])
            assert said == {"who": user, "how": GRANT}, said
            assert tenants == [stack.tool_id], tenants
    counted = stack.provider.exchanges()
    assert (counted.get("alice"), counted.get("bob")) == (1, 1), counted  # kept in the vault


def test_a_refused_exchange_invokes_no_runner_on_lambda(stack: Stack) -> None:
    late = stack.token("dave", expires_in=-5)  # within Kiln's leeway, past the provider's
    result, tenants = call(stack, late)
    assert result.get("isError") is True, result
    said = result["content"][0]["text"]
    assert "the exchange failed" in said, said
    assert "invalid_grant" in said, said
    assert late not in said
    assert tenants == []


def test_no_callers_token_is_in_either_functions_log(stack: Stack) -> None:
    call(stack, stack.token("erin"))
    logs = [stack.mcp.output.read_bytes()]
    logs += [path.read_bytes() for path in stack.runners.tmp.rglob("output.log")]
    assert len(logs) >= 2, "the runner function's log was not found"
    assert all(logs), "an empty log proves nothing"
    for bearer in stack.bearers:
        assert not any(bearer.encode() in log for log in logs), "a caller's token in a log"
