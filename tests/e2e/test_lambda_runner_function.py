"""The runner function invoked directly, as mcp, admin and worker invoke it, under the Lambda
profile: what a run reports, what `kiln doctor` finds inside it, and two tenants at once.

One `TenantInvoke` stand-in (see `lambda_profile.py`); no catalog is needed: every payload
carries its run.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from e2e.lambda_profile import TenantInvoke
from kiln.runner import RunRequest, RunResult
from kiln.runner.doctor import remote, weaker_than
from kiln.runner.remote import encode, result_from

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")


@pytest.fixture(scope="module")
def runners(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    name = f"kiln-profile-{uuid.uuid4().hex[:10]}"
    store_env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": moto_endpoint,
        "KILN_TABLE": name,
        "KILN_BUCKET": name,
    }
    stand_in = TenantInvoke(tmp_path_factory.mktemp("runners"), "runner", store_env,
                            [moto_endpoint])  # fmt: skip
    try:
        yield stand_in
    finally:
        stand_in.close()


@pytest.fixture(scope="module")
def client(runners: TenantInvoke) -> Any:
    return boto3.client(
        "lambda", endpoint_url=runners.url, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip


def invoke(client: Any, tenant: str, code: str, arguments: Any = None, **extra: Any) -> RunResult:
    """One run, as kiln.runner.remote sends it (TenantId = the tool)."""
    extra.setdefault("timeout_s", 20)
    request = RunRequest(language="python", code=code, arguments=arguments or {}, **extra)
    body = json.dumps(encode(request, tenant=tenant, tool_id=tenant, bundle=None)).encode()
    answer = client.invoke(FunctionName="kiln-runner", TenantId=tenant, Payload=body)
    return result_from(json.loads(answer["Payload"].read())["result"])


def test_runs_report_exactly_what_held_and_doctor_sees_the_same(client: Any) -> None:
    """No seccomp mark, no Landlock, one uid: the run says so, and is never called fenced."""
    result = invoke(client, "doctor-tenant", "print('held')")
    assert result.stdout == "held\n"
    assert (result.isolation, result.fence, result.mark) == ("shared", "", "none"), result
    # The same environment answers the doctor's probe: what it found matches the run.
    found = remote(client, "kiln-runner", tenant="doctor-tenant")
    assert found["seccomp"].startswith("refused: Operation not permitted"), found
    assert found["landlock_abi"] == 0
    assert set(found["namespaces"].values()) == {"refused: Operation not permitted (1)"}
    assert found["uid_model"] == "one uid for every run"
    assert found["runtime_api"]["child"] == "allowed", found  # Lambda's own loopback API
    assert found["runs"]["isolation"] == result.isolation
    assert weaker_than(found, "shared") is None
    assert weaker_than(found, "landlock") == "runs get 'shared', weaker than the claimed 'landlock'"


LINEAGE = r"""
import os, subprocess, time
def stat(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
def cmdline(pid):
    return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
parent = os.getppid()
print("parent", cmdline(parent))
print("grandparent", cmdline(int(stat(parent)[1])))
print("nnp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0])
subprocess.Popen(["/bin/sleep", "300"], start_new_session=True)  # left for the kill
time.sleep(60)  # past its deadline
"""


def test_a_run_is_one_fork_of_the_helper_which_still_enforces_the_deadline_and_kills_the_tree(
    client: Any, runners: TenantInvoke
) -> None:
    """The runner function's helper supervises each run itself: the script's parent is the
    helper (supervisor.py), whose parent is the runtime; no supervisor process between. The
    deadline still holds and what the run started is gone when the answer comes."""
    tenant = f"lineage-{uuid.uuid4().hex[:6]}"
    result = invoke(client, tenant, LINEAGE, timeout_s=2)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert "supervisor.py" in lines["parent"], result
    assert "awslambdaric" in lines["grandparent"], result
    assert lines["nnp"] == "1", result  # no_new_privs, though seccomp (the mark) is refused
    assert result.timed_out, result
    assert result.exit_code is None, result
    environment = runners.environments[tenant]
    left = [pid for pid in environment.processes()
            if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes()]  # fmt: skip
    assert left == [], f"left running: {left}\n{environment.log()}"


def test_the_runner_refuses_a_call_without_a_tenant(runners: TenantInvoke) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(  # noqa: S310 - the stand-in's own http URL
        runners.url + "/2015-03-31/functions/kiln-runner/invocations", data=b"{}", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310
    assert refused.value.code == 400
    refused.value.close()


def test_the_runners_log_lines_are_the_runtimes_json_with_the_request_id_and_one_cold_start(
    client: Any, runners: TenantInvoke
) -> None:
    """No Powertools in the runner (kiln.observability.plain): its warnings reach the log as
    the runtime's JSON (template.yaml's LogFormat), with the invocation's request id and
    their fields; its first invocation writes the ColdStart EMF line, and only the first."""
    for _ in range(2):  # a payload for another tenant than the environment's: refused
        request = RunRequest(language="python", code="print(1)", arguments={}, timeout_s=20)
        body = json.dumps(encode(request, tenant="elsewhere", tool_id="x", bundle=None)).encode()
        answer = client.invoke(FunctionName="kiln-runner", TenantId="log-tenant", Payload=body)
        assert "error" in json.loads(answer["Payload"].read())
    log = runners.environments["log-tenant"].output.read_text(errors="replace")
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    refused = [r for r in records if r.get("message") == "run refused"]
    assert len(refused) == 2, log[-3000:]
    assert all(r["level"] == "WARNING" and r["tenant"] == "elsewhere" for r in refused), log
    assert len({r.get("requestId") for r in refused} - {None, ""}) == 2, log[-3000:]
    (cold,) = [r for r in records if "ColdStart" in r]
    (metric,) = cold["_aws"]["CloudWatchMetrics"]
    assert (metric["Namespace"], cold["service"], cold["ColdStart"]) == ("Kiln", "kiln", [1.0])
    assert cold["function_name"] == "kiln-profile-runner", cold


NEIGHBOUR_VICTIM = r"""
import json, os, sys, time
args = json.load(sys.stdin)
open("/tmp/victim-running", "w").write(args["secret"])
began = time.time()
time.sleep(3)
print(json.dumps({"had": args["secret"][:6] + " " + open("secret.txt").read()[:6],
                  "from": began, "to": time.time()}))
"""
NEIGHBOUR_SNOOP = r"""
import json, os, sys, time
args = json.load(sys.stdin)
time.sleep(1)  # the victim is running by now, in its own environment
chunks, pids = [], 0
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    pids += 1
    for part in ("cmdline", "environ"):
        try:
            chunks.append(open(f"/proc/{name}/{part}", "rb").read())
        except OSError:
            pass
for root, dirs, files in os.walk("/tmp"):  # but the read-only code bound in (a checkout there)
    dirs[:] = [d for d in dirs if not os.statvfs(os.path.join(root, d)).f_flag & os.ST_RDONLY]
    for name in files:
        try:
            chunks.append(open(os.path.join(root, name), "rb").read(1 << 20))
        except OSError:
            pass
data = b"".join(chunks)
print(json.dumps({"found": [n for n in args["needles"] if n.encode() in data], "pids": pids,
                  "at": time.time()}))
"""


def test_a_tool_cannot_see_a_tool_running_at_the_same_time(client: Any) -> None:
    """Two tenants' runs overlap; the snoop finds none of the victim's secrets, processes or
    files (the victim's environment is not its own)."""
    secret, file_secret = "arg-" + secrets.token_hex(8), "file-" + secrets.token_hex(8)
    for tenant in ("neighbour-victim", "neighbour-snoop"):  # both environments warm first
        invoke(client, tenant, "print('warm')", {})
    # The snoop must look while the victim runs (one kernel, one clock), else the pair proved
    # nothing: on a loaded machine one start can lag the other, so the pair runs again.
    for _ in range(3):
        with ThreadPoolExecutor(2) as pool:
            victim = pool.submit(
                invoke, client, "neighbour-victim", NEIGHBOUR_VICTIM, {"secret": secret},
                files={"secret.txt": file_secret.encode()},
            )  # fmt: skip
            snoop = pool.submit(invoke, client, "neighbour-snoop", NEIGHBOUR_SNOOP,
                                {"needles": [secret, file_secret]})  # fmt: skip
            victim_result, snoop_result = victim.result(timeout=60), snoop.result(timeout=60)
        victim_saw = json.loads(victim_result.stdout)
        assert victim_saw["had"] == f"{secret[:6]} {file_secret[:6]}"
        seen = json.loads(snoop_result.stdout)
        assert seen["found"] == [], seen
        if victim_saw["from"] < seen["at"] < victim_saw["to"]:
            break
    overlapped = victim_saw["from"] < seen["at"] < victim_saw["to"]
    assert overlapped, ("never overlapped", victim_saw, seen)
    assert seen["found"] == [], seen
    # Its own environment only: the runtime, the helper, its supervisor and itself.
    assert seen["pids"] <= 5, seen
