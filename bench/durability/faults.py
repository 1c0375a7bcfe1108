"""Bench: how long Kiln takes to answer when its store is cut, black-holed or loses a reply.

Kiln (uvicorn, in this process) talks to the local emulator through tests/support/faultproxy.py with
the production deadlines (kiln.aws.clients.StoreDeadlines). For each fault it prints the answer
(status, JSON-RPC code) and the time taken, beside the healthy answer's time and the
deadline's worst case.

    python -m bench.durability.faults
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from kiln.aws.clients import StoreDeadlines, ensure_resources, make_clients  # noqa: E402
from kiln.local.emulator import run_emulator  # noqa: E402
from kiln.settings import Settings  # noqa: E402
from tests.support.app import AUTHOR_KEY, serve  # noqa: E402
from tests.support.aws import AwsStack  # noqa: E402
from tests.support.faultproxy import BLACK_HOLE, CUT, PASS, fault_proxy  # noqa: E402

TOOL = {"name": "bench", "description": "d", "language": "python", "code": "print(1)\n"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def main() -> int:
    deadlines = StoreDeadlines()
    state = Path(tempfile.mkdtemp(prefix="kiln-faults-"))
    with run_emulator(state / "aws") as emulator, fault_proxy(emulator.url) as proxy:
        keys = (emulator.credentials.access_key_id, emulator.credentials.secret_access_key)
        clients = make_clients(endpoint_url=proxy.url, region="us-east-1", credentials=keys)
        ensure_resources(clients, table="kiln", bucket="kiln-local")
        settings = Settings(
            table="kiln", bucket="kiln-local", endpoint_url=proxy.url, region="us-east-1",
            author_key=AUTHOR_KEY, bind_host="127.0.0.1", bundle_cache_dir=state / "bundles",
        )  # fmt: skip
        for kiln in serve(settings, AwsStack(proxy.url, clients, "kiln", "kiln-local")):
            kiln.api("POST", "/api/tools", json=TOOL).raise_for_status()
            print(f"deadline worst case: {deadlines.worst_case_s:.1f} s per store call")
            for mode in (PASS, CUT, BLACK_HOLE):
                proxy.set_mode(mode)
                began = time.monotonic()
                rest = kiln.api("GET", "/api/tools")
                rest_s = time.monotonic() - began
                began = time.monotonic()
                mcp = kiln.mcp(LIST).json()
                mcp_s = time.monotonic() - began
                code = mcp.get("error", {}).get("code", "ok")
                print(f"{mode:10s} REST {rest.status_code} in {rest_s:.2f} s "
                      f"(Retry-After {rest.headers.get('retry-after', '-')}); "
                      f"MCP {code} in {mcp_s:.2f} s")  # fmt: skip
            proxy.set_mode(PASS)
            began = time.monotonic()
            recovered = kiln.api("GET", "/api/tools").status_code
            print(f"recovery   REST {recovered} in {time.monotonic() - began:.2f} s")
            proxy.lose_replies(1, b"TransactWriteItems")
            began = time.monotonic()
            edited = {**TOOL, "description": "edited"}
            put = kiln.api("PUT", "/api/tools/bench", json=edited, headers={"If-Match": '"1"'})
            took = time.monotonic() - began
            revision = json.loads(put.text).get("revision")
            lost = 1 - proxy.replies_left_to_lose
            print(f"lost reply PUT {put.status_code} revision {revision} in {took:.2f} s "
                  f"({lost} reply lost, retried under the same token)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
