"""Each caller's own token on a real `kiln dev`, for callers with keys and callers with OAuth
tokens (resource-server mode: JWTs from a real issuer, `support/auth.py`), over HTTP and over
`kiln stdio --url --key`; and what a hostile tool tries on other callers' tokens there: the
`/proc` of a run of the same tool for another caller running beside it, a daemon left for
the next caller's run, its token in every log and record `kiln dev` keeps.

In both uid models: as root each run has a uid of its own and runs side by side; as one
unprivileged uid (Lambda's model) runs of one server go one at a time, so no run is ever
beside another (the concurrent attack becomes the leftover one).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kiln.connections.envelope import FileKeys
from kiln.connections.vault import Vault
from support.auth import Issuer, running_issuer
from support.devserver import DEV_KEY, DevServer, kiln_dev_as, stdio_call
from support.dropbox import DropBox
from support.oidc_provider import OidcProvider, oidc_provider, through_connect_page
from support.tools import acting_for_caller

NAME = "acts_for_you"
AUDIENCE = "kiln-dev-callers"


@dataclass
class World:
    dev: DevServer
    provider: OidcProvider
    issuer: Issuer
    drop: DropBox
    callers: dict[str, str]  # person -> bearer credential (a key or a JWT)
    uid_model: str
    heard: list[dict[str, Any]] = field(default_factory=list)

    def tail(self) -> str:
        assert self.dev.log is not None
        return self.dev.log.read_text("utf-8", "replace")[-3000:]

    def rpc(self, person: str | None, method: str, params: dict[str, Any]) -> dict[str, Any]:
        key = None if person is None else self.callers[person]
        answer = self.dev.mcp(method, params, key=key)
        assert answer.status_code == 200, f"{answer.text}\n{self.tail()}"
        text = answer.text
        lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        messages = [json.loads(line) for line in lines] if lines else [json.loads(text)]
        self.heard += [m for m in messages if "id" not in m]  # its notifications
        (body,) = [m for m in messages if "id" in m]
        assert "result" in body, f"{body}\n{self.tail()}"
        result: dict[str, Any] = body["result"]
        return result

    def call(self, person: str | None, **arguments: Any) -> dict[str, Any]:
        return self.rpc(person, "tools/call", {"name": NAME, "arguments": arguments})

    def task(self, person: str | None, **arguments: Any) -> dict[str, Any]:
        """The tool called as an MCP task (2025-11-25), awaited: its result."""
        params = {"name": NAME, "arguments": arguments, "task": {"ttl": 60000}}
        task_id = self.rpc(person, "tools/call", params)["task"]["taskId"]
        deadline = time.monotonic() + 60
        while (status := self.rpc(person, "tasks/get", {"taskId": task_id})["status"]) in (
            "working",
        ):
            assert time.monotonic() < deadline, f"the task is still working\n{self.tail()}"
            time.sleep(0.1)
        assert status in ("completed", "failed"), status
        return self.rpc(person, "tasks/result", {"taskId": task_id})

    def said(self, person: str, **arguments: Any) -> Any:
        result = self.call(person, **arguments)
        text = result["content"][0]["text"]
        assert result.get("isError") is not True, f"{person}: {text}\n{self.tail()}"
        return json.loads(text)

    def tokens(self) -> dict[str, tuple[str, str]]:
        """Each person's (access, refresh) token, opened from the vault with its key file."""
        env = self.dev.env
        from kiln.aws.clients import make_clients

        clients = make_clients(
            endpoint_url=env["AWS_ENDPOINT_URL"], region=env["AWS_REGION"],
            credentials=(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
        )  # fmt: skip
        vault = Vault(clients.dynamodb, FileKeys(self.dev.state_dir / "vault.key"), table="kiln")
        found = {}
        for connection in vault.connections():
            tokens = vault.tokens(connection.identity, "acme")
            assert tokens is not None
            assert tokens.refresh_token
            found[connection.identity] = (tokens.access_token, tokens.refresh_token)
        return found


def connect(world_dev: DevServer, provider: OidcProvider, bearer: str, user: str) -> None:
    """Connect ahead (`POST /api/connections/acme/connect`), consenting as `user`."""
    began = world_dev.http.post(
        f"{world_dev.url}/api/connections/acme/connect",
        headers={"Authorization": f"Bearer {bearer}"},
        json={"scopes": ["repo"]},
    )
    assert began.status_code == 200, began.text
    done = through_connect_page(provider, began.json()["url"], user)
    assert "acme is connected" in done.text, done.text


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    uid_model = request.param
    base = Path(tempfile.mkdtemp(prefix=f"kiln-callers-{uid_model}-"))  # others may enter it
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, base, ignore_errors=True)
        yield from _world(uid_model, base)


def _world(uid_model: str, base: Path) -> Iterator[World]:
    with DropBox().serve() as drop, oidc_provider() as provider, running_issuer() as issuer:
        ports = f"{urlsplit(provider.issuer).port},{drop.port}"
        env = {"KILN_RUN_TCP_PORTS": ports, "KILN_OAUTH_ISSUER": issuer.url,
               "KILN_OAUTH_JWKS_URL": issuer.jwks_url, "KILN_OAUTH_AUDIENCE": AUDIENCE}  # fmt: skip
        with kiln_dev_as(uid_model, base, "--no-examples", env=env) as dev:
            client_id, secret = provider.register(f"{dev.url}/connect/callback")
            body = {"issuer": provider.issuer, "client_id": client_id, "client_secret": secret,
                    "scopes": ["openid"]}  # fmt: skip
            added = dev.api("PUT", "/api/connections/providers/acme", json=body)
            assert added.status_code == 200, added.text
            tool = {"name": NAME, "description": "Acts for its caller at acme.",
                    "language": "python", "timeout_seconds": 30, "task": "optional",
                    "code": acting_for_caller(drop.url, f"{provider.issuer}/test/whoami"),
                    "input_schema": {"type": "object", "additionalProperties": True},
                    "connections": [{"provider": "acme", "scopes": ["repo"]}]}  # fmt: skip
            made = dev.api("POST", "/api/tools", json=tool)
            assert made.status_code == 201, made.text
            callers = {person: dev.create_key(person) for person in ("alice", "bob")}
            for person in ("erin", "frank"):
                callers[person] = issuer.token(aud=AUDIENCE, sub=person, expires_in=3600)
            callers["author"] = DEV_KEY  # the server's own author key: `key:author`
            for person, bearer in callers.items():
                connect(dev, provider, bearer, person)
            yield World(dev, provider, issuer, drop, callers, uid_model)


PEOPLE = ["alice", "bob", "erin", "frank", "author"]


def test_each_key_and_oauth_subject_sees_only_its_own_account(world: World) -> None:
    for _ in range(2):
        for person in PEOPLE:
            said = world.said(person)
            assert (said["who"], said["names"]) == (person, ["KILN_CONNECTION_ACME"]), said
    identities = sorted(world.tokens())
    assert "jwt:erin" in identities
    assert "jwt:frank" in identities
    assert "key:author" in identities
    assert len(identities) == len(PEOPLE)


def test_over_kiln_stdio_a_key_and_an_oauth_token_each_get_their_own(world: World) -> None:
    for person in ("bob", "frank"):
        answer = stdio_call(world.dev.url, world.callers[person], NAME)
        said = json.loads(answer["result"]["content"][0]["text"])
        assert said["who"] == person, f"{answer}\n{world.tail()}"


def test_a_run_beside_another_callers_run_of_the_same_tool_cannot_read_its_token(
    world: World,
) -> None:
    """Erin's run holds its token in a child's environment until released; Bob's run of the
    same tool, started meanwhile (as root: beside it; as one uid: after it), reads every
    `/proc/<pid>/environ` and command line it can."""
    since = len(world.drop.posted)
    world.drop.released.clear()
    held: dict[str, Any] = {}
    victim = threading.Thread(
        target=lambda: held.update(world.said("erin", mode="exposed", hold=True)), daemon=True
    )
    victim.start()
    try:
        world.drop.wait_for("exposed", since=since)
        if world.uid_model != "root":  # one at a time: Bob's run would wait for Erin's
            world.drop.release()
        snoop = world.said("bob", mode="snoop")
    finally:
        world.drop.release()
        victim.join(60)
    erin = world.tokens()["jwt:erin"][0]
    assert held.get("self_seen") is True, held  # Erin's token was there to be read
    assert snoop["sha"] in snoop["seen"], snoop  # Bob's search found its own
    assert snoop["seen"] == [snoop["sha"]], f"Bob's run read another token: {snoop}"
    assert held["sha"] != snoop["sha"]
    assert erin not in json.dumps(snoop)


def test_a_daemon_left_by_one_callers_run_never_reads_the_next_callers_token(
    world: World,
) -> None:
    since = len(world.drop.posted)
    planted = world.call("alice", mode="plant")
    assert planted["content"][0]["text"].startswith("planted"), planted
    assert {"daemon": "started"} in world.drop.posted[since:], "the daemon never ran"
    for person in ("bob", "frank", "author"):
        exposed = world.said(person, mode="exposed")
        assert exposed["self_seen"] is True, exposed
    assert world.drop.stolen() == [], "a token reached what an earlier run left"


def test_a_task_acts_for_the_caller_who_started_it(world: World) -> None:
    for person in ("alice", "erin", "author"):  # a key, an OAuth subject, the author key
        result = world.task(person)
        text = result["content"][0]["text"]
        assert result.get("isError") is not True, f"{person}: {text}\n{world.tail()}"
        assert json.loads(text)["who"] == person, text
    refused = world.task(None)
    assert refused.get("isError") is True, refused
    assert "an anonymous caller cannot use it" in refused["content"][0]["text"], refused


def test_no_token_in_an_answer_the_log_the_state_directory_or_the_ledger(world: World) -> None:
    """A run saying its token back (output, error output, progress, a log line; as a call
    and as a task, whose record keeps its result and status) has it masked everywhere."""
    tokens = world.tokens()
    for leaked in (world.call("erin", mode="leak"), world.task("erin", mode="leak")):
        said = json.dumps(leaked)  # masked in the answer too: it may be kept (a task's)
        assert leaked.get("isError") is True, leaked
        assert tokens["jwt:erin"][0] not in said, said
        assert said.count("[KILN_CONNECTION_ACME]") == 3, said  # stdout, stderr, exit
    heard = json.dumps(world.heard)
    assert heard.count("[KILN_CONNECTION_ACME]") == 1, heard  # the log (no progress token)
    assert tokens["jwt:erin"][0] not in heard
    secrets = [t.encode() for pair in tokens.values() for t in pair]
    assert len(secrets) == 2 * len(PEOPLE)
    where: list[str] = []
    assert world.dev.log is not None
    files = [world.dev.log, *Path(world.dev.state_dir).rglob("*")]
    for path in files:
        if path.is_file() and path.name != "vault.key":
            data = path.read_bytes()
            where += [f"{path.name}: {s[:6]!r}" for s in secrets if s in data]
    ledger = world.dev.api("GET", "/api/calls?limit=500").content
    where += [f"the ledger: {s[:6]!r}" for s in secrets if s in ledger]
    assert where == [], f"tokens in clear: {where}"
