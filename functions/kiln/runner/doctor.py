"""`kiln doctor`: what this machine enforces, and so which isolation each run will get.

Every answer is measured, not assumed: each kernel feature is tried in a forked child that
exits right after (installing a seccomp filter, entering a namespace are irrevocable), and
the Runtime API is tried from a child as a tool would. The same `probe()` answers a doctor
payload in the deployed runner function (`kiln doctor --aws`), and the deploy workflow
fails when the stack's isolation is weaker than its settings claim (`weaker_than`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kiln.runner import contain, landlock

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
LSM_PATH = "/sys/kernel/security/lsm"
RUNTIME_API_DEFAULT = "127.0.0.1:9001"  # where Lambda serves it inside every sandbox
_libc = ctypes.CDLL(None, use_errno=True)


def in_child(attempt: Callable[[], object]) -> str:
    """Run `attempt` in a forked child: "allowed", or "refused: <errno name>"."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's outcome is what the parent reads
        os.close(read)
        try:
            attempt()
            answer = "allowed"
        except OSError as error:
            answer = f"refused: {os.strerror(error.errno or 0)} ({error.errno})"
        except BaseException as error:
            answer = f"refused: {type(error).__name__}"
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        answer = f.read().decode() or "refused: the probe died"
    os.waitpid(pid, 0)
    return answer


def _unshare(flags: int) -> Callable[[], None]:
    def attempt() -> None:
        if _libc.unshare(flags) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))

    return attempt


def _not_dumpable() -> None:
    contain.prctl(contain.PR_SET_DUMPABLE, 0)


def _reach(address: str) -> Callable[[], None]:
    host, _, port = address.rpartition(":")

    def attempt() -> None:
        socket.create_connection((host, int(port)), timeout=1).close()

    return attempt


def _lsm() -> str:
    try:
        with open(LSM_PATH) as f:
            return f.read().strip()
    except OSError as error:
        return f"unreadable ({error.strerror})"


def probe(runtime_api: str = RUNTIME_API_DEFAULT) -> dict[str, Any]:
    """What this machine enforces, each item tried for real."""
    abi = landlock.abi()
    seccomp = in_child(contain.mark_as_run)
    found: dict[str, Any] = {
        "kernel": os.uname().release,
        "machine": os.uname().machine,
        "lsm": _lsm(),
        "landlock_abi": abi,
        "seccomp": seccomp,
        "dumpable": in_child(_not_dumpable),
        "namespaces": {
            "mount": in_child(_unshare(CLONE_NEWNS)),
            "user": in_child(_unshare(CLONE_NEWUSER)),
            "pid": in_child(_unshare(CLONE_NEWPID)),
        },
        "uid": os.geteuid(),
        "uid_model": "a uid per run" if contain.can_switch_uid() else "one uid for every run",
        "runtime_api": {"address": runtime_api, "child": in_child(_reach(runtime_api))},
    }
    found["runs"] = isolation_of(found)
    return found


def isolation_of(found: Mapping[str, Any]) -> dict[str, str]:
    """Which isolation each run will get here, from what was found."""
    per_uid = found["uid_model"] == "a uid per run"
    mounts = found["namespaces"]["mount"] == "allowed"
    abi = int(found["landlock_abi"])
    isolation = ("mounts" if mounts else "uid") if per_uid else ("landlock" if abi else "shared")
    marked = found["seccomp"] == "allowed"
    if per_uid:
        orphans = "by uid"
    elif marked:
        orphans = "by the seccomp mark"
    else:
        orphans = "none told apart: only an environment of its own (the runner function) is safe"
    return {
        "isolation": isolation,
        "fence": f"landlock/{abi}" if abi > 0 else "none",
        "mark": "seccomp" if marked else "none",
        "orphans": orphans,
    }


RANK = {"shared": 0, "landlock": 1, "uid": 2, "mounts": 3}


def weaker_than(found: Mapping[str, Any], claimed: str) -> str | None:
    """Why `found` is weaker than the `claimed` isolation, or None when it holds."""
    got = found["runs"]["isolation"]
    if claimed not in RANK:
        return f"unknown isolation {claimed!r} (one of {', '.join(RANK)})"
    if RANK[got] < RANK[claimed]:
        return f"runs get {got!r}, weaker than the claimed {claimed!r}"
    return None


def text(found: Mapping[str, Any]) -> str:
    runs = found["runs"]
    lines = [
        f"kernel        {found['kernel']} ({found['machine']})",
        f"LSMs          {found['lsm']}",
        f"Landlock      ABI {found['landlock_abi']}" if found["landlock_abi"] else
        "Landlock      not available",
        f"seccomp       {found['seccomp']}",
        f"not dumpable  {found['dumpable']}",
        *(f"namespace     {name}: {state}" for name, state in found["namespaces"].items()),
        f"uid           {found['uid']} ({found['uid_model']})",
        f"Runtime API   {found['runtime_api']['address']} from a child: "
        f"{found['runtime_api']['child']}",
        "",
        f"each run gets isolation={runs['isolation']} fence={runs['fence']} "
        f"mark={runs['mark']}; its orphans are found {runs['orphans']}",
    ]  # fmt: skip
    return "\n".join(lines)


def render(found: Mapping[str, Any], *, as_json: bool) -> str:
    return json.dumps(found, indent=2, sort_keys=True) if as_json else text(found)


def remote(client: LambdaClient, function: str, tenant: str = "kiln-doctor") -> dict[str, Any]:
    """The same probe, run in the deployed runner function."""
    response = client.invoke(
        FunctionName=function, TenantId=tenant, Payload=json.dumps({"kiln_doctor": 1}).encode()
    )
    data = response["Payload"].read()
    with contextlib.suppress(ValueError):
        answer = json.loads(data)
        if isinstance(answer, dict) and "doctor" in answer:
            return dict(answer["doctor"])
    raise RuntimeError(f"the runner function did not answer a doctor payload: {data[:300]!r}")
