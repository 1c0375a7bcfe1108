"""A tool that snoops on everything it can read finds no credential and no other tool's secret.

The server runs in its own process, as in Lambda, with distinctive AWS credentials and an
author key in its environment. The snooping tool prints its own environment and every
`/proc/*/environ` and `/proc/*/cmdline` it can open, while another tool with its own secret
is running at the same time.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import string
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import AwsStack
from kiln.access.secrets import SecretStore
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from kiln.identity.keys import KeyStore
from kiln.local.emulator import run_emulator
from kiln.local.emulator.privacy import write_private
from support.leakguard import Planted

CALLER = "caller's API key"
FUNCTIONS = str(Path(__file__).resolve().parents[3] / "functions")

SNOOP = """\
import glob, json, os
seen = {"environ": [], "cmdline": []}
opened = {"environ": 0, "cmdline": 0}
for proc in glob.glob("/proc/[0-9]*"):
    for kind in ("environ", "cmdline"):
        try:
            with open(f"{proc}/{kind}", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        opened[kind] += 1
        for part in data.split(b"\\0"):
            text = part.decode("utf-8", "replace")
            if text and text not in seen[kind]:
                seen[kind].append(text)
print(json.dumps({"own": dict(os.environ), "opened": opened, **seen}))
"""

SLEEPER = """\
import json, os, sys, time
markers = json.load(sys.stdin)
open(markers["started"], "w").close()
time.sleep(4)
open(markers["finished"], "w").close()
print("done" if os.environ.get("OTHER_TOKEN") else "no secret")
"""


def _random(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _listener() -> socket.socket:
    """The server's socket, bound here and handed over: no other process can take its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def _unprivileged() -> list[str]:
    """Run the server as Lambda does: without capabilities (Lambda is not root).

    As root with every capability (this test machine), any process could read any other's
    /proc entries whatever Kiln does; an empty capability set puts it in Lambda's position.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot drop capabilities like Lambda")
    return [setpriv, "--bounding-set=-all", "--inh-caps=-all"]


@dataclass
class Server:
    url: str
    needles: dict[str, str]  # what must not be found, by what it is
    own_secret: str
    process: subprocess.Popen[str]
    shared: Path  # a directory every run may write (KILN_RUN_SHARED_DIRS): the markers


SERVE = """\
import socket, sys, uvicorn
from kiln import stack
from kiln.api.apps import create_app
from kiln.settings import Settings
stack.prepare_process()
app = create_app(stack.build_kiln(Settings.from_env()))
listener = socket.socket(fileno=int(sys.argv[1]))  # bound by the test
config = uvicorn.Config(app, log_level="warning", lifespan="on")
uvicorn.Server(config).run(sockets=[listener])
"""


@dataclass
class PlantedAws:
    endpoint: str
    access_key_id: str
    secret_access_key: str


@pytest.fixture(scope="module")
def planted_aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlantedAws]:
    """An emulator of its own whose key is the distinctive one planted in the server's env
    (the emulator takes signed requests only, so the server must sign with it)."""
    access_key = "AKIA" + _random(16, string.ascii_uppercase + string.digits)
    secret_key = _random(40)
    state = tmp_path_factory.mktemp("leak-emulator")
    key = {"access_key_id": access_key, "secret_access_key": secret_key}
    write_private(state / "credentials.json", json.dumps(key).encode())
    with run_emulator(state) as endpoint:
        yield PlantedAws(endpoint.url, access_key, secret_key)


@pytest.fixture(scope="module")
def server(
    planted_aws: PlantedAws, planted_secrets: Planted, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    suffix = uuid.uuid4().hex[:10]
    shared = tmp_path_factory.mktemp("runs-share")
    temp = tmp_path_factory.mktemp("server-temp")  # where its runs' directories go
    temp.chmod(0o1777)
    moto_endpoint = planted_aws.endpoint
    keys = (planted_aws.access_key_id, planted_aws.secret_access_key)
    stack = AwsStack(
        moto_endpoint,
        make_clients(endpoint_url=moto_endpoint, region="us-east-1", credentials=keys),
        f"kiln-leak-{suffix}", f"kiln-leak-{suffix}",
    )  # fmt: skip
    ensure_resources(stack.clients, table=stack.table, bucket=stack.bucket)
    prefix = f"/kiln-leak-{suffix}"
    store = CatalogStore(
        stack.clients.dynamodb, stack.clients.s3, table=stack.table, bucket=stack.bucket
    )
    base = {"language": "python", "input_schema": {"type": "object"}}
    snoop = store.create(
        check_draft({**base, "name": "snoop", "description": "Snoop.", "code": SNOOP,
                     "secrets": ["SNOOP_TOKEN"]})
    )  # fmt: skip
    sleeper = store.create(
        check_draft({**base, "name": "sleeper", "description": "Sleep.", "code": SLEEPER,
                     "secrets": ["OTHER_TOKEN"]})
    )  # fmt: skip
    ssm = stack.clients.session.client("ssm", endpoint_url=moto_endpoint)
    secret_store = SecretStore(ssm, prefix)
    own_secret = "snoop-own-" + _random(24)
    other_secret = "sleeper-other-" + _random(24)
    secret_store.set(snoop.id, "SNOOP_TOKEN", own_secret)
    secret_store.set(sleeper.id, "OTHER_TOKEN", other_secret)
    keys = KeyStore(stack.clients.dynamodb, table=stack.table)
    _, call_key = keys.create("caller", "call")
    _, spare_key = keys.create("spare", "author")
    needles = {
        "AWS access key id": planted_aws.access_key_id,
        "AWS secret access key": planted_aws.secret_access_key,
        "AWS session token": "IQoJb3JpZ2luX2VjE" + _random(60),
        "static author key": "kiln_author_" + _random(43),
        CALLER: call_key,
        "another API key": spare_key,
        "other tool's secret": other_secret,
    }
    for value in [*needles.values(), own_secret]:
        planted_secrets.add(value)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": FUNCTIONS,
        "HOME": os.environ.get("HOME", "/tmp"),
        "AWS_ACCESS_KEY_ID": needles["AWS access key id"],
        "AWS_SECRET_ACCESS_KEY": needles["AWS secret access key"],
        "AWS_SESSION_TOKEN": needles["AWS session token"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto_endpoint,
        "KILN_TABLE": stack.table,
        "KILN_BUCKET": stack.bucket,
        "KILN_AUTHOR_KEY": needles["static author key"],
        "KILN_PUBLIC_ANONYMOUS": "false",
        "KILN_SECRETS_PREFIX": prefix,
        "KILN_BIND_HOST": "127.0.0.1",
        "KILN_RUN_SHARED_DIRS": str(shared),
        "TMPDIR": str(temp),
    }
    with _listener() as listener:
        process = subprocess.Popen(
            [*_unprivileged(), sys.executable, "-c", SERVE, str(listener.fileno())],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            pass_fds=[listener.fileno()],
        )
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"server exited: {process.stdout.read() if process.stdout else ''}"
                )
            try:
                if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start within 30 s")
            time.sleep(0.05)
        yield Server(url, needles, own_secret, process, shared)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log = ""
        if process.stdout is not None:
            log = process.stdout.read()
            process.stdout.close()
        for value in [*needles.values(), own_secret]:
            assert value not in log, "the server printed a planted secret"
        # Its app's lifespan let the standbys its calls left go: no run directory is left.
        assert sorted(p.name for p in temp.glob("kiln-run-*")) == []


def _call(server: Server, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    response = httpx.post(
        f"{server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": name, "arguments": arguments or {}}},
        headers={
            "Authorization": f"Bearer {server.needles[CALLER]}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25",
        },
        timeout=60,
    )  # fmt: skip
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def _snoop(server: Server) -> dict[str, Any]:
    result = _call(server, "snoop")
    assert result["isError"] is False, result
    dump: dict[str, Any] = json.loads(result["content"][0]["text"])
    # The snoop really looked: it got its own secret and could open /proc entries (its own
    # at least, and every process's cmdline).
    assert dump["own"]["SNOOP_TOKEN"] == server.own_secret
    assert dump["opened"]["environ"] >= 1
    assert dump["opened"]["cmdline"] > 1
    return dump


def _found(server: Server, dump: dict[str, Any], needles: list[str]) -> list[str]:
    everything = json.dumps(dump)
    return [what for what in needles if server.needles[what] in everything]


def test_snooping_tool_finds_no_credential_no_key_and_no_other_secret(server: Server) -> None:
    dump = _snoop(server)
    assert _found(server, dump, list(server.needles)) == []
    # The talk contract's variables are the run's own (runner/TALKING.md): no setting, key or
    # credential of the server's.
    talk = {"KILN_ANSWERS", "KILN_CAN_ASK", "KILN_TALK_FD", "KILN_CALLS"}
    assert not [n for n in dump["own"] if n.startswith(("AWS_", "KILN_")) and n not in talk]


def test_snooping_tool_cannot_read_the_secret_of_a_tool_running_beside_it(
    server: Server,
) -> None:
    sleeper: dict[str, Any] = {}
    markers = {
        "started": str(server.shared / "started"),
        "finished": str(server.shared / "finished"),
    }
    thread = threading.Thread(
        target=lambda: sleeper.update(_call(server, "sleeper", markers)), daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not Path(markers["started"]).exists():  # the sleeper is running, secret and all
            assert time.monotonic() < deadline, "the sleeper tool never started"
            time.sleep(0.02)
        dump = _snoop(server)
        overlapped = not Path(markers["finished"]).exists()
    finally:
        thread.join(timeout=60)
    # Without the capabilities to give each run its own uid (Lambda's position), runs that
    # could see each other's processes are not run side by side: the snoop waited its turn.
    # (Side by side, under separate uids, is tests/functional/runner/test_hostile_tools.py.)
    assert not overlapped, "the snoop ran beside another tool of the same uid"
    assert sleeper["content"][0]["text"].strip() == "done"  # it had its secret all along
    assert _found(server, dump, list(server.needles)) == []
