"""A new tenant's environment under the Lambda profile: its runner's helper is started by the
init, before the first invocation, and that first run is served by it.

The helper's interpreter (~30 ms to boot) would otherwise start inside the first call; started
by `kiln.process.start_runner_helper` at the top of the init, it boots while Kiln's modules
load (bench/runner/new_tenant.py: a new tenant's first run 28.5 -> 6.1 ms). It starts with an
environment of its own: nothing of the function's (AWS credentials) is in it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from e2e.lambda_profile import Environment
from kiln.runner import RunRequest
from kiln.runner.remote import encode
from support.runner import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")


def helpers(environment: Environment) -> dict[int, str]:
    """The environment's runner helpers (`supervisor.py`), by pid, with their environ."""
    found = {}
    for pid in environment.processes():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if any(arg.endswith(b"supervisor.py") for arg in argv):
            found[pid] = environ
    return found


def test_a_new_tenants_helper_is_started_by_the_init_and_serves_its_first_run(
    moto_endpoint: str, tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    tenant = f"tool-{uuid.uuid4().hex[:8]}"
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "kiln-secret-of-the-function",
           "AWS_ENDPOINT_URL": moto_endpoint, "KILN_TABLE": "t", "KILN_BUCKET": "b"}  # fmt: skip
    runner = Environment(tmp_path / "runner", "runner", env, [moto_endpoint], tenant=tenant)
    try:
        assert runner.asks_for_work(), runner.log()
        try:
            wait_for(lambda: helpers(runner), timeout_s=30)  # a process of its own: it boots
        except AssertionError:
            raise AssertionError(f"no helper before the first invocation\n{runner.log()}") from None
        started = helpers(runner)
        assert len(started) == 1, started
        (pid, environ) = next(iter(started.items()))
        assert "kiln-secret-of-the-function" not in environ
        request = RunRequest(language="python", code="print('ran')\n", arguments={}, timeout_s=20)
        answer = runner.invoke(encode(request, tenant=tenant, tool_id=tenant, bundle=None))
        assert answer.payload["result"]["stdout"] == "ran\n", json.dumps(answer.payload)
        assert list(helpers(runner)) == [pid], "the first run was not served by that helper"
    finally:
        runner.close()
