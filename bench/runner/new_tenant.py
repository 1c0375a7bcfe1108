"""A new tenant's first call: a fresh runner function environment, under the Lambda profile.

Each round starts, under the Lambda profile of tests/e2e (awslambdaric in a sandbox: one uid,
no capabilities, the Runtime API on its own loopback, the emulator's S3 reachable), four new
environments and times, in the same round so that drift on a loaded machine hits all alike:

- bare: the runtime with a handler that imports nothing (`operator.is_`): Lambda's floor
  for a Python init, and its first invoke;
- plain: `kiln.lambda_handlers.runner`, then a trivial tool's first run, then a warm run;
- bundle: the same with a tool whose bundle (one module, in a zip) is fetched from the
  emulator's S3 and unpacked by the first run, then a warm run;
- saved: that tool after a save's warm-up (the `kiln_warm` invoke a save on Lambda sends,
  which fetches the bundle and runs nothing), then its first run and a warm run.

Kiln's modules are compiled first, as a deploy ships them: the sandbox's tree is read-only.

The breakdown: runtime init (spawn to the runtime asking for work) against the bare one (the
difference is Kiln's imports and the runner function's construction), the first run, the
bundle's fetch (bundle's first run less plain's), the warm run. The mcp hop in front is not
in it (bench/lambda_warm/runner.py measures it). Goal (issue 37): the first call at most a bare
init plus two warm calls.

`--base TREE` adds, in every round, a new tenant's plain first call with the runner function
from another checkout (TREE, inside this repository: the sandbox sees only the repository,
e.g. `git worktree add --detach .ab-main main`), for a before/after in the same rounds.

usage (as root): python -m bench.runner.new_tenant [--rounds 5] [--base TREE]
"""

from __future__ import annotations

import argparse
import compileall
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.moto_server import moto_endpoint
from tests.e2e.lambda_profile import REQUIREMENTS, TARGET, Environment, venv_site
from tests.e2e.lambda_profile import ready_bundle as made

ROOT = Path(__file__).resolve().parents[2]

PLAIN = "import json, sys\nprint(json.load(sys.stdin)['text'])\n"
BUNDLED = "import json, sys, shared_mod\nprint(shared_mod.VALUE, json.load(sys.stdin)['text'])\n"


def ready_bundle(endpoint: str, name: str) -> dict[str, Any]:
    """The e2e tests' ready bundle (one module) in the emulator's store; its record, as mcp
    sends it."""
    from kiln.aws.clients import ensure_resources, make_clients
    from kiln.bundles.store import BundleStore

    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table=name, bucket=name)
    made(clients, name, name)
    record = BundleStore(clients.dynamodb, clients.s3, table=name, bucket=name).ensure(
        "python", TARGET, REQUIREMENTS
    )
    assert record is not None
    assert record.status == "ready", record
    return dataclasses.asdict(record)


def payload(tenant: str, code: str, bundle: dict[str, Any] | None) -> dict[str, Any]:
    from kiln.runner import RunRequest
    from kiln.runner.remote import encode

    request = RunRequest(language="python", code=code, arguments={"text": "hi"}, timeout_s=20)
    return encode(request, tenant=tenant, tool_id=tenant, bundle=bundle)


def started(tmp: Path, handler: str, env: dict[str, str], stores: list[str], **kw: Any) -> Any:
    began = time.perf_counter()
    environment = Environment(tmp, handler, env, stores, **kw)
    return environment, (time.perf_counter() - began) * 1000


def run_ms(environment: Environment, event: Any, expect: str | None) -> float:
    began = time.perf_counter()
    answer = environment.invoke(event, timeout_s=60)
    elapsed = (time.perf_counter() - began) * 1000
    if expect is not None:
        body = answer.payload if isinstance(answer.payload, dict) else {"answer": answer.payload}
        stdout = body.get("result", {}).get("stdout")
        assert stdout == expect, f"{body}\n{environment.log()}"
    return elapsed


def one_round(tmp: Path, n: int, env: dict[str, str], endpoint: str,
              bundle: dict[str, Any], base: Path | None) -> dict[str, float]:  # fmt: skip
    out: dict[str, float] = {}
    bare, out["bare init"] = started(tmp / f"bare-{n}", "is_", {}, [], module="operator")
    try:
        out["bare invoke"] = run_ms(bare, {"ping": 1}, None)
    finally:
        bare.close()
    kinds: list[tuple[str, str, dict[str, Any] | None, str, dict[str, str]]] = [
        ("plain", PLAIN, None, "hi\n", env),
        ("bundle", BUNDLED, bundle, "original hi\n", env),
    ]
    if base is not None:
        path = ":".join([str(base / "functions"), *venv_site()])
        kinds.insert(0, ("base plain", PLAIN, None, "hi\n", {**env, "PYTHONPATH": path}))
    kinds.append(("saved", BUNDLED, bundle, "original hi\n", env))  # after a save's warm-up
    for kind, code, record, expect, kind_env in kinds:
        tenant = f"{kind}-{n}-{uuid.uuid4().hex[:6]}"
        runner, out[f"{kind} init"] = started(
            tmp / f"{kind.replace(' ', '-')}-{n}", "runner", kind_env, [endpoint], tenant=tenant
        )
        try:
            if kind == "saved":  # a save's warm-up (RemoteRunner.warm), then the first call
                warm_up = {"kiln_warm": 1, "tenant": tenant, "bundle": record}
                out[f"{kind} warm-up"] = run_ms(runner, warm_up, None)
            out[f"{kind} first run"] = run_ms(runner, payload(tenant, code, record), expect)
            out[f"{kind} warm run"] = run_ms(runner, payload(tenant, code, record), expect)
        finally:
            runner.close()
    return out


def compiled(*trees: Path) -> None:
    """Kiln's modules compiled, as a deploy ships them (`functions/Makefile`): the sandbox's
    tree is read-only, so a module without its .pyc is compiled again by every new
    environment (~30-60 ms of each init here), which Lambda never does."""
    for tree in trees:
        compileall.compile_dir(tree / "functions", quiet=1)


def measure(rounds: int, base: Path | None) -> list[dict[str, float]]:
    compiled(ROOT, *([base] if base is not None else []))
    with moto_endpoint() as endpoint:
        name = f"kiln-bench-{uuid.uuid4().hex[:8]}"
        bundle = ready_bundle(endpoint, name)
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_ENDPOINT_URL": endpoint, "KILN_TABLE": name, "KILN_BUCKET": name}  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="kiln-bench-tenant-") as scratch:
            tmp = Path(scratch)
            os.chmod(tmp, 0o755)  # noqa: S103 - the sandboxes write their logs there as root
            one_round(tmp, 0, env, endpoint, bundle, base)  # warm-up: the disk cache
            return [one_round(tmp, n, env, endpoint, bundle, base) for n in range(1, rounds + 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", type=Path, help="another checkout, inside this repository")
    args = parser.parse_args()
    base = args.base.resolve() if args.base else None
    if base is not None and not base.is_relative_to(ROOT):
        print(f"--base must be inside {ROOT} (the sandbox sees only the repository)",
              file=sys.stderr)  # fmt: skip
        return 2
    if os.geteuid() != 0:
        print("needs root: the Lambda profile's sandbox makes namespaces", file=sys.stderr)
        return 2
    rounds = measure(args.rounds, base)
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    low = {key: min(r[key] for r in rounds) for key in rounds[0]}
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"load average {load}; {args.rounds} rounds, median (min) ms")
    for key in med:
        print(f"  {key:18s} {med[key]:8.1f} ({low[key]:7.1f})")
    for kind in ("base plain", "plain", "bundle") if base else ("plain", "bundle"):
        first = [r[f"{kind} init"] + r[f"{kind} first run"] for r in rounds]
        warm = [r[f"{kind} warm run"] for r in rounds]
        goal = [r["bare init"] + 2 * w for r, w in zip(rounds, warm, strict=True)]
        ratios = [f / g for f, g in zip(first, goal, strict=True)]
        print(
            f"{kind}: a new tenant's first call (init + first run) {statistics.median(first):.1f}"
            f" ms, {statistics.median(first) / statistics.median(warm):.1f}x a warm run;"
            f" / (bare init + 2 warm runs): median {statistics.median(ratios):.2f}x,"
            f" min {min(ratios):.2f}x (goal <= 1.0x)"
        )
    if base is not None:
        paired = [r["plain init"] / r["base plain init"] for r in rounds]
        calls = [(r["plain init"] + r["plain first run"])
                 / (r["base plain init"] + r["base plain first run"]) for r in rounds]  # fmt: skip
        print(f"this tree / --base, same round: init {statistics.median(paired):.2f}x"
              f" (min {min(paired):.2f}x), first call {statistics.median(calls):.2f}x"
              f" (min {min(calls):.2f}x)")  # fmt: skip
    cold = statistics.median(r["bundle init"] + r["bundle first run"] for r in rounds)
    after = statistics.median(r["saved first run"] for r in rounds)
    spent = statistics.median(r["saved init"] + r["saved warm-up"] for r in rounds)
    print(
        f"a bundle tool's first call after a save's warm-up {after:.1f} ms (cold {cold:.1f} ms:"
        f" {cold - after:.1f} ms saved); the warm-up's own init and invoke {spent:.1f} ms"
    )
    beyond_bare = statistics.median(r["plain init"] - r["bare init"] for r in rounds)
    first_extra = statistics.median(r["plain first run"] - r["plain warm run"] for r in rounds)
    fetch = statistics.median(r["bundle first run"] - r["plain first run"] for r in rounds)
    print(
        f"breakdown, median: Kiln's init beyond a bare runtime {beyond_bare:.1f} ms;"
        f" a first run beyond a warm one {first_extra:.1f} ms;"
        f" the bundle's fetch and unpack {fetch:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
