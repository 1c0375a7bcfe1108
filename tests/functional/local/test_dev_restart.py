"""Restarting `kiln dev` (Ctrl-C, kill -9) on the same state leaves every tool working: the
example tools, Python's and Node's with packages among them, called as the runs' own users, in
every uid model (root: a uid per run; an unprivileged user under the Landlock fence; the same
user where the kernel refuses Landlock), with a second `kiln dev` of the same user beside it
sharing the bundle cache.

A restart makes the state directory private file by file; bundles were hard links into the
build cache inside it, so after it every file of every bundle was 0600 and every Python tool
with packages answered `PermissionError` to the runs' uids, in both servers.
"""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.app import MODERN
from support.devserver import DevServer, kiln_dev_as

pytestmark = pytest.mark.slow

# Each example tool, its arguments and something its answer holds (the two that ask a
# question answer with it: they ran as far as their question).
EXAMPLES = {
    "add_vat": ({"net": 100}, '\\"gross\\": \\"120.00\\"'),
    "date_diff": ({"start": "2026-01-01", "end": "2026-03-01"}, '\\"days\\":59'),
    "humanize_bytes": ({"sizes": [3_000_000, 1024], "binary": True}, "2.9 MiB"),
    "json_query": ({"document": {"a": [1, 2]}, "path": "a.1"}, '\\"matches\\": [2]'),
    "pick_account": ({"amount": 5}, "Pay 5 from?"),
    "pick_account_node": ({"amount": 5}, "Pay 5 from?"),
    "sort_unique": ({"numbers": [3, 1, 3, 2]}, '\\"sorted\\":[1,2,3]'),
    "word_stats": ({"text": "a b a"}, '\\"words\\": 3'),
    # calls add_vat for each line (kiln_tools.gather): a tool that calls tools
    "vat_quote": (
        {"items": [{"name": "a", "net": 10}, {"name": "b", "net": 5}]},
        '\\"gross\\": \\"18.00\\"',
    ),
}
WITH_PACKAGES = ("humanize_bytes", "sort_unique")  # Python's (humanize), Node's (lodash)
ISOLATION = {"root": "mounts", "unprivileged": "landlock", "unfenced": "shared"}
BUILD_S = 180.0  # a first build fetches from the package indexes


def call(dev: DevServer, name: str) -> str:
    """The tool's answer on the 2026-07-28 wire (a client that can answer a question)."""
    arguments, _ = EXAMPLES[name]
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "restart-test"}}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta}}  # fmt: skip
    headers = {"Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": name,
               "Accept": "application/json, text/event-stream"}  # fmt: skip
    return dev.http.post(dev.url + "/mcp", json=body, headers=headers).text


def log_tail(dev: DevServer) -> str:
    return dev.log.read_text(errors="replace")[-3000:] if dev.log else "(no log)"


def serves(dev: DevServer, name: str, wait_s: float = 0.0) -> None:
    """The tool answers as it should (waiting up to `wait_s` for its packages' build)."""
    give_up = time.monotonic() + wait_s
    while True:
        text = call(dev, name)
        building = "are being built" in text or "queued to be built" in text
        if not building or time.monotonic() > give_up:
            break
        time.sleep(0.2)
    said = f"{name} on {dev.url}: {text[:1500]}\n--- the server's log ---\n{log_tail(dev)}"
    assert EXAMPLES[name][1] in text, said
    assert '"isError":true' not in text, said


def isolation_of(dev: DevServer, name: str) -> str:
    ran = dev.api("POST", f"/api/tools/{name}/run", json={"arguments": EXAMPLES[name][0]})
    assert ran.status_code == 200, ran.text
    found: dict[str, Any] = ran.json()
    assert EXAMPLES[name][1].replace('\\"', '"') in json.dumps(found), (found, log_tail(dev))
    return str(found["isolation"])


@contextmanager
def place(prefix: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """A folder of the test's own, and the environment in which servers share one /tmp (their
    bundle cache, `<tmp>/kiln-bundles-<uid>`) inside it."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    shared = base / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # a /tmp of its own, for root's and another user's servers
    try:
        yield base, {"TMPDIR": str(shared)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def stop_as(dev: DevServer, how: str) -> None:
    """Stop `kiln dev` as a user does (Ctrl-C) or as a crash does (kill -9)."""
    assert dev.process is not None
    dev.process.send_signal(signal.SIGINT if how == "sigint" else signal.SIGKILL)
    dev.process.wait(timeout=60)


@pytest.mark.parametrize("model", ["root", "unprivileged", "unfenced"])
def test_tools_with_packages_answer_the_runs_users_after_restarts_beside_another_server(
    model: str,
) -> None:
    if model == "unprivileged" and not _landlock():
        pytest.skip("this kernel has no Landlock: 'unfenced' is the unprivileged model here")
    with place("kiln-restart-") as (base, env), ExitStack() as beside:
        first = beside.enter_context(kiln_dev_as(model, base / "a", env=env))
        for name in WITH_PACKAGES:
            serves(first, name, BUILD_S)
        assert isolation_of(first, "humanize_bytes") == ISOLATION[model]
        other = beside.enter_context(kiln_dev_as(model, base / "b", env=env))
        for name in WITH_PACKAGES:
            serves(other, name, BUILD_S)
        for how in ("sigint", "kill-9"):
            stop_as(first, how)
            with kiln_dev_as(model, base / "a", env=env) as first:
                for dev in (first, other, first):
                    for name in WITH_PACKAGES:
                        serves(dev, name, BUILD_S)
        # A server that starts now, with a state of its own, finds the cache as published.
        with kiln_dev_as(model, base / "c", env=env) as fresh:
            for name in WITH_PACKAGES:
                serves(fresh, name, BUILD_S)


def test_kiln_dev_restarted_ten_times_serves_every_example_tool_after_each_start() -> None:
    with place("kiln-restarts-") as (base, env):
        for start in range(10):
            with kiln_dev_as("root", base / "dev", env=env) as dev:
                for name in EXAMPLES:
                    serves(dev, name, BUILD_S if start == 0 else 0.0)
                stop_as(dev, "sigint" if start % 2 == 0 else "kill-9")


def _landlock() -> bool:
    from kiln.runner import landlock

    return landlock.abi() > 0


# A tool sharing humanize_bytes's bundle (same requirements) that changes it as far as its
# run may: a chmod passes the Landlock fence (here the package's folder: a file made
# unreadable would still import from its bytecode); with no fence it may plant a file too.
SPOILER = r"""
import json, os
import humanize
folder = os.path.dirname(humanize.__file__)
planted = os.path.join(folder, "planted.py")
out = {}
for name, action in (("plant", lambda: open(planted, "x").close()),
                     ("chmod", lambda: os.chmod(folder, 0))):
    try:
        out[name] = action() or "done"
    except OSError as error:
        out[name] = type(error).__name__
print(json.dumps(out))
"""


@pytest.mark.parametrize("model", ["unprivileged", "unfenced"])
def test_a_tool_that_changes_its_bundle_changes_it_for_no_later_run(model: str) -> None:
    """The runs of one uid (the server's) may chmod their bundle's files: the next run of any
    tool sharing that bundle finds it as published."""
    if model == "unprivileged" and not _landlock():
        pytest.skip("this kernel has no Landlock: 'unfenced' is the unprivileged model here")
    spoiler = {"name": "spoiler", "description": "Spoils its bundle.", "language": "python",
               "code": SPOILER, "requirements": ["humanize==4.*"]}  # fmt: skip
    with place("kiln-spoil-") as (base, env), kiln_dev_as(model, base / "a", env=env) as dev:
        created = dev.api("POST", "/api/tools", json=spoiler)
        assert created.status_code == 201, created.text
        serves(dev, "humanize_bytes", BUILD_S)
        for _ in range(2):
            ran = dev.api("POST", "/api/tools/spoiler/run", json={"arguments": {}})
            assert ran.status_code == 200, ran.text
            assert '\\"chmod\\": \\"done\\"' in ran.text, (ran.text, log_tail(dev))
            # Changed before its zip was published (it is callable from its hand-over), it
            # waits for the zip: "being built", then as published.
            serves(dev, "humanize_bytes", BUILD_S)
