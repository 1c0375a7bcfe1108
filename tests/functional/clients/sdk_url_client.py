"""The official Python SDK 2.x client with a URL-elicitation handler calls a Kiln tool that acts
for its caller, and hands each page it is sent to the person's browser.

usage: python sdk_url_client.py SERVER KEY TOOL MODE   (MODE: 2026-07-28 or legacy)
SERVER is a URL (Streamable HTTP, the key as a bearer token), or a JSON StdioServerParameters
(`kiln stdio --url … --key …`) to launch. The handler writes one JSON line to stdout per page,
`{"open": url, "message": …, "elicitationId": …}`, and answers `accept` when a line comes on
stdin (the browser is done): on 2026-07-28 the SDK then repeats the call itself with that
answer (input_required); on 2025-11-25 the call raises -32042 (UrlElicitationRequiredError)
and the client calls again once each page it lists was handled. The last line:
`{"protocol", "result": [is_error, text], "pages": n}`.
"""

import asyncio
import json
import sys

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters, UrlElicitationRequiredError, types
from mcp.client.streamable_http import streamable_http_client
from mcp_types import URL_ELICITATION_REQUIRED


async def main(server: str, key: str, tool: str, mode: str) -> dict:
    pages = 0

    async def browse(url: str, message: str, elicitation_id: str | None) -> None:
        nonlocal pages
        pages += 1
        print(json.dumps({"open": url, "message": message, "elicitationId": elicitation_id}))
        sys.stdout.flush()
        said = await anyio.to_thread.run_sync(sys.stdin.readline)
        assert said.strip() == "done", f"the browser said {said!r}"

    async def elicit(context, params):
        if params.mode != "url":
            return types.ElicitResult(action="decline")
        await browse(params.url, params.message, params.elicitation_id)
        return types.ElicitResult(action="accept")

    async def run(target) -> dict:
        async with Client(target, mode=mode, elicitation_callback=elicit) as client:
            for _ in range(3):
                try:
                    result = await client.call_tool(tool, {})
                except MCPError as error:
                    if error.code != URL_ELICITATION_REQUIRED:
                        raise
                    for page in UrlElicitationRequiredError.from_error(error.error).elicitations:
                        await browse(page.url, page.message, page.elicitation_id)
                    continue
                text = result.content[0].text if result.content else ""
                return {"protocol": client.protocol_version, "result": [result.is_error, text],
                        "pages": pages}  # fmt: skip
        raise AssertionError("still asked to open a page after three calls")

    if server.startswith("http"):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
            return await run(streamable_http_client(server, http_client=http))
    return await run(StdioServerParameters.model_validate_json(server))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5]))))
