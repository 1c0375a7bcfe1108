"""Both arms of the code-mode benchmark, as the official MCP Python SDK's client makes them.

Run by `bench.codemode.run`, in the SDK's own venv (bench/protocol/sdk.py), from the
repository root: `python -m bench.codemode.sdk_client URL ROUNDS`. Imports only the SDK.

One `Client` (streamable HTTP, the initialize handshake: the 2025-11-25 wire) per view, both
open for the whole run. The direct arm is a model's three turns on the `billing` view (list
mode): `lookup_invoice`, then, from its result's text, `fx_rate` of its currency, then
`format_money` of the converted amount. The code arm is one `execute` on the `coder` view
(code mode) whose code does the same. Each round runs both arms, alternating which goes
first; round 0 is a warm-up. Prints one JSON object: what each arm put before the model in
round 1 (`seen`: definitions, the calls the model writes, the results as the SDK returns them),
each arm's answer, and the wall time of each arm per round (and of an `execute` that calls
nothing, beside them).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

INVOICE = "in_1QdX93LkKiln"
TOOLS = ("lookup_invoice", "fx_rate", "format_money")
# One search for the job; if it misses a tool, one search per step that it missed.
QUERY = "look up an invoice, convert currency, format money"
STEPS = {"lookup_invoice": "get an invoice by id", "fx_rate": "exchange rate between currencies",
         "format_money": "format an amount of money for a locale"}  # fmt: skip
CODE = """\
invoice = lookup_invoice(invoice_id="in_1QdX93LkKiln")
due = invoice["amount_due"] / 100  # minor units
rate = fx_rate(from_=invoice["currency"].upper(), to="USD")["rate"]
print(invoice["number"], format_money(amount=round(due * rate, 2), currency="USD"))
"""


def dump(result: Any) -> dict[str, Any]:
    return dict(result.model_dump(mode="json", by_alias=True, exclude_none=True))


def text(result: Any) -> str:
    if result.is_error:
        raise SystemExit(f"tool error: {dump(result)}")
    return "\n".join(block.text for block in result.content if block.type == "text")


class Arm:
    """One arm's calls, each kept as the model would see it: the call it writes, the result."""

    def __init__(self, client: Any) -> None:
        self.client, self.seen = client, []

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        result = await self.client.call_tool(name, arguments)
        self.seen.append({"call": {"name": name, "arguments": arguments}, "result": dump(result)})
        return text(result)

    async def search(self, query: str) -> list[str]:
        hits = json.loads(await self.call("search_tools", {"query": query, "limit": 3}))
        return [tool["name"] for tool in hits["tools"]]


async def listed(client: Any) -> list[dict[str, Any]]:
    """Every page of `tools/list`: the definitions a host gives the model."""
    tools, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += dump(page)["tools"]
        if not (cursor := page.next_cursor):
            return tools


async def direct(arm: Arm) -> str:
    invoice = json.loads(await arm.call("lookup_invoice", {"invoice_id": INVOICE}))
    due = invoice["amount_due"] / 100
    fx = json.loads(await arm.call("fx_rate", {"from": invoice["currency"].upper(), "to": "USD"}))
    money = {"amount": round(due * fx["rate"], 2), "currency": "USD"}
    return f"{invoice['number']} {await arm.call('format_money', money)}"


async def code(arm: Arm) -> str:
    return (await arm.call("execute", {"code": CODE})).strip()


async def bare(arm: Arm) -> str:
    """An `execute` that calls nothing: one run of the code, what each round costs at least."""
    return (await arm.call("execute", {"code": "print('ok')"})).strip()


async def main(url: str, rounds: int) -> dict[str, Any]:
    from mcp import Client  # the SDK's venv only (this module imports in Kiln's too)

    async with (
        Client(f"{url}/mcp/v/billing", mode="legacy") as billing,
        Client(f"{url}/mcp/v/coder", mode="legacy") as coder,
    ):
        out: dict[str, Any] = {"protocol": billing.protocol_version, "seen": {}, "answers": {}}
        out["seen"]["direct_list"] = await listed(billing)
        out["seen"]["code_list"] = await listed(coder)
        discovery = Arm(coder)
        shown = {tool["name"] for tool in out["seen"]["code_list"]}
        if shown == {"execute"}:  # a small view: execute's text names every function
            found = [
                name for name in TOOLS if f"{name}(" in out["seen"]["code_list"][0]["description"]
            ]
        else:  # a large one: search for the tools, then describe them
            found = await discovery.search(QUERY)
            for name in TOOLS:
                if name not in found:
                    found += await discovery.search(STEPS[name])
            await discovery.call("describe_tools", {"names": list(TOOLS)})
        out["seen"]["discovery"] = discovery.seen
        out["found"] = {name: name in found for name in TOOLS}
        arms = {"direct": (direct, billing), "code": (code, coder), "bare": (bare, coder)}
        out["seconds"] = {name: [] for name in arms}
        for n in range(rounds + 1):
            for name in sorted(arms, reverse=n % 2 == 1):  # bare, code, direct; and back
                job, client = arms[name]
                arm = Arm(client)
                started = time.perf_counter()
                answer = await job(arm)
                elapsed = time.perf_counter() - started
                if n == 0:
                    continue  # the warm-up
                out["seconds"][name].append(elapsed)
                out["answers"].setdefault(name, answer)
                out["seen"].setdefault(name, arm.seen)
        return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))))
