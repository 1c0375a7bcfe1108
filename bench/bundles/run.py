"""Bench: a tool with a ~15 MB bundle, called through the real MCP endpoint.

Measures, in one run and against the same moto server:

  baseline  the first tools/call of a tool without packages in a fresh app
  cold      the first tools/call in a fresh app with an empty bundle cache (a new Lambda
            container): fetch the record, download, unpack, run
  warm      the next calls of that app: the bundle is already on disk
  pip       the predecessor's way: `pip install --target <fresh dir>` at call time, then run
            the same script with that directory on PYTHONPATH (pip's download cache warm)
  pip-cold  the same with `--no-cache-dir`, as a fresh container with no pip cache would

and prints medians with ratios. Run: `python -m bench.bundles.run [--samples 5]`.
With `--save-to-callable`: the author's loop, uv vs pip and Bun vs npm (bench/bundles/save.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from kiln.api.apps import create_app  # noqa: E402
from kiln.aws.clients import AwsClients, ensure_resources, make_clients  # noqa: E402
from kiln.bundles.scheduler import run_build  # noqa: E402
from kiln.local.emulator import run_emulator  # noqa: E402
from kiln.settings import Settings  # noqa: E402
from kiln.stack import build_kiln  # noqa: E402

REQUIREMENTS = ["rich==13.*", "requests==2.*", "humanize==4.*"]
PLAIN = """import json, sys
args = json.load(sys.stdin)
print(json.dumps({"size": "%.1f MB" % (args["bytes"] / 1e6)}))
"""
CODE = """import json, sys
import humanize, requests, rich
from rich.text import Text
args = json.load(sys.stdin)
label = Text(humanize.naturalsize(args["bytes"])).plain
print(json.dumps({"size": label, "requests": requests.__version__}))
"""
AUTHOR_KEY = "bench-author-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(settings: Settings, clients: AwsClients) -> Iterator[str]:
    """A fresh app (new bundle cache, new runner) on uvicorn: a new container, in effect.
    Its lifespan runs, so that on the way out its warmer and standbys stop, as `kiln dev`'s do
    (they would otherwise outlive it, beside the next variant's measurement)."""
    app = create_app(build_kiln(settings, clients=clients))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def call(http: httpx.Client, url: str, name: str = "bench_tool") -> float:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"bytes": 15_000_000}},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    started = time.perf_counter()
    response = http.post(url + "/mcp", json=body, headers=headers)
    elapsed = time.perf_counter() - started
    result = response.json()["result"]
    if result.get("isError"):
        raise RuntimeError(result["content"][0]["text"])
    assert json.loads(result["content"][0]["text"])["size"] == "15.0 MB"
    return elapsed


def predecessor(no_cache: bool) -> float:
    """pip install into a fresh directory at call time, then run the script."""
    target = Path(tempfile.mkdtemp(prefix="kiln-bench-pip-"))
    try:
        started = time.perf_counter()
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                   "--disable-pip-version-check", *REQUIREMENTS]  # fmt: skip
        if no_cache:
            command.insert(4, "--no-cache-dir")
        subprocess.run(command, check=True, capture_output=True)
        run = subprocess.run(
            [sys.executable, "-c", CODE], input='{"bytes": 15000000}', text=True,
            env={"PYTHONPATH": str(target), "PATH": os.environ["PATH"]},
            capture_output=True, check=True,
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        assert json.loads(run.stdout)["size"] == "15.0 MB"
        return elapsed
    finally:
        shutil.rmtree(target, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--warm-calls", type=int, default=20)
    parser.add_argument("--skip-pip-cold", action="store_true", help="no --no-cache-dir runs")
    parser.add_argument(
        "--save-to-callable", action="store_true", help="the author's loop instead (save.py)"
    )
    parser.add_argument(
        "--second-tool", type=int, default=0, metavar="N",
        help="with --save-to-callable: only uv cold and the second tool, N times (its spread)",
    )  # fmt: skip
    parser.add_argument("--bun", help="the Bun to compare with npm (default: KILN_BUN, PATH)")
    parser.add_argument(
        "--cold-pairs", type=int, default=1, metavar="N",
        help="the cold pip and uv rows N times, which goes first alternating (save.py)",
    )  # fmt: skip
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log

    state = tempfile.TemporaryDirectory(prefix="kiln-bench-aws-")  # the emulator's journal
    with state, run_emulator(Path(state.name)) as emulator:
        endpoint = emulator.url
        name = f"kiln-bench-{uuid.uuid4().hex[:8]}"
        keys = (emulator.credentials.access_key_id, emulator.credentials.secret_access_key)
        clients = make_clients(endpoint_url=endpoint, region="us-east-1", credentials=keys)
        ensure_resources(clients, table=name, bucket=name)
        base = Settings(
            table=name, bucket=name, endpoint_url=endpoint, region="us-east-1",
            author_key=AUTHOR_KEY, bind_host="127.0.0.1", local_time_budget_s=120.0,
        )  # fmt: skip
        if args.save_to_callable:
            from bench.bundles import save

            if args.second_tool:
                save.second_tool_runs(base, clients, serve, AUTHOR_KEY, args.second_tool)
                return 0
            save.report(
                save.run_variants(
                    base, clients, serve, AUTHOR_KEY, save.find_bun(args.bun), args.cold_pairs
                )
            )
            return 0
        caches = Path(tempfile.mkdtemp(prefix="kiln-bench-cache-"))
        kiln = build_kiln(base.with_(bundle_cache_dir=caches / "setup"), clients=clients)
        from kiln.catalog.rules import check_draft

        draft = check_draft(
            {"name": "bench_tool", "description": "Bench tool.", "language": "python",
             "code": CODE, "requirements": REQUIREMENTS,
             "input_schema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}}
        )  # fmt: skip
        assert kiln.bundles is not None
        kiln.bundles.scheduler = _Ignore()  # the bench builds it itself, timed
        tool = kiln.authoring.create_draft(draft, None)
        plain = {
            "name": "bench_plain",
            "description": "Bench tool without packages.",
            "language": "python",
            "code": PLAIN,
            "input_schema": {"type": "object", "properties": {"bytes": {"type": "integer"}}},
        }
        kiln.authoring.create(plain, None)
        bundle_id = tool.head.bundle_id
        assert bundle_id is not None
        started = time.perf_counter()
        record = run_build(kiln.bundles.store, bundle_id)
        build_s = time.perf_counter() - started
        assert record.status == "ready", record.error
        print(
            f"bundle {bundle_id}: {' '.join(REQUIREMENTS)}\n"
            f"  {(record.unpacked_size or 0) / 2**20:.1f} MB unpacked, "
            f"{(record.size or 0) / 2**20:.1f} MB zipped, {record.file_count} files; "
            f"built at save time in {build_s:.1f} s (off the call path)\n"
        )

        cold: list[float] = []
        warm: list[float] = []
        plain_cold: list[float] = []
        with httpx.Client(timeout=300) as http:
            for sample in range(args.samples):
                settings = base.with_(bundle_cache_dir=caches / f"cold-{sample}")
                with serve(settings, clients) as url:
                    cold.append(call(http, url))
                    warm.extend(call(http, url) for _ in range(args.warm_calls))
                with serve(settings.with_(bundle_cache_dir=caches / "plain"), clients) as url:
                    plain_cold.append(call(http, url, "bench_plain"))
        pip = [predecessor(no_cache=False) for _ in range(args.samples)]
        pip_cold = [] if args.skip_pip_cold else [predecessor(True) for _ in range(args.samples)]
        shutil.rmtree(caches, ignore_errors=True)

    rows = [("fresh app, first call, tool without packages (baseline)", plain_cold),
            ("fresh app, first call (download + unpack + run)", cold), ("warm call", warm),
            ("predecessor: pip install at call time (pip cache warm)", pip)]  # fmt: skip
    if pip_cold:
        rows.append(("predecessor: pip install, no pip cache", pip_cold))
    print(f"{'':58} {'median':>9} {'min':>9} {'max':>9}   n")
    for label, values in rows:
        print(
            f"{label:58} {statistics.median(values) * 1000:8.0f}ms {min(values) * 1000:8.0f}ms "
            f"{max(values) * 1000:8.0f}ms {len(values):3}"
        )
    m_cold, m_warm, m_pip = (statistics.median(v) for v in (cold, warm, pip))
    print()
    print(f"cold / warm                          {m_cold / m_warm:7.1f}x")
    print(f"cold / fresh app without packages    {m_cold / statistics.median(plain_cold):7.1f}x")
    print(f"predecessor (pip, cache) / cold      {m_pip / m_cold:7.1f}x")
    print(f"predecessor (pip, cache) / warm      {m_pip / m_warm:7.1f}x")
    if pip_cold:
        m_pip_cold = statistics.median(pip_cold)
        print(f"predecessor (pip, no cache) / cold   {m_pip_cold / m_cold:7.1f}x")
        print(f"predecessor (pip, no cache) / warm   {m_pip_cold / m_warm:7.1f}x")
    return 0


class _Ignore:
    def schedule(self, bundle_id: str) -> None:
        pass


if __name__ == "__main__":
    raise SystemExit(main())
