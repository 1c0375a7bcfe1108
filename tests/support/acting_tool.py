"""A `kiln dev` serving a tool that acts for its caller at a real OAuth provider (`acme`,
`oidc-provider` started locally): its run asks the provider whose token it was handed and
prints `{"who": <subject>}`. For the tests of connecting (functional and in Chromium)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from support.devserver import DevServer, clean_env, kiln_dev
from support.oidc_provider import OidcProvider, oidc_provider

WHOSE = """import json, os, sys, urllib.request
json.load(sys.stdin)
request = urllib.request.Request(WHOAMI,
    headers={"Authorization": "Bearer " + os.environ["KILN_CONNECTION_ACME"]})
with urllib.request.urlopen(request, timeout=10) as answer:
    print(json.dumps({"who": json.load(answer)["sub"]}))
"""


@contextmanager
def acting_tool(
    state: Path, name: str, *more: dict[str, Any]
) -> Iterator[tuple[DevServer, OidcProvider]]:
    """The provider, and a `kiln dev` (state in `state`) with `acme` registered and the tool
    `name` declaring it (scope `repo`); `more` tools saved beside it."""
    with oidc_provider() as provider:
        env = {"KILN_RUN_TCP_PORTS": str(urlsplit(provider.issuer).port)}  # runs reach it
        with kiln_dev(state, "--no-examples", env=env) as dev:
            client_id, secret = provider.register(f"{dev.url}/connect/callback")
            body = {"issuer": provider.issuer, "client_id": client_id, "client_secret": secret}
            added = dev.api("PUT", "/api/connections/providers/acme", json=body)
            assert added.status_code == 200, added.text
            code = WHOSE.replace("WHOAMI", repr(f"{provider.issuer}/test/whoami"))
            tool = {"name": name, "description": "Says whose account its token is.",
                    "language": "python", "code": code, "input_schema": {"type": "object"},
                    "timeout_seconds": 20,
                    "connections": [{"provider": "acme", "scopes": ["repo"]}]}  # fmt: skip
            for each in (tool, *more):
                made = dev.api("POST", "/api/tools", json=each)
                assert made.status_code == 201, made.text
            yield dev, provider


def bridged_call(dev: DevServer, key: str, name: str, capabilities: dict[str, Any]) -> Any:
    """One 2025-11-25 session through `kiln stdio --url` whose client declares
    `capabilities` at initialize and calls `name`: the call's JSON-RPC answer."""
    hello = {"protocolVersion": "2025-11-25", "capabilities": capabilities,
             "clientInfo": {"name": "bridged"}}  # fmt: skip
    said = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": name, "arguments": {}}},
    ]  # fmt: skip
    bridge = [sys.executable, "-m", "kiln.cli", "stdio", "--url", dev.url, "--key", key]
    stdin = "".join(f"{json.dumps(message)}\n" for message in said)
    done = subprocess.run(
        bridge, input=stdin, text=True, capture_output=True, env=clean_env(), timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    answers = [reply for reply in replies if reply.get("id") == 1]
    assert len(answers) == 1, f"{done.stdout}\n{done.stderr}"
    return answers[0]
