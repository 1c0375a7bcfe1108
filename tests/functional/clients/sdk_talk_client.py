"""The official Python SDK 2.x client answers a Kiln tool's questions through its callbacks.

usage: python sdk_talk_client.py SERVER MODE   (MODE: 2026-07-28 or legacy)
SERVER is a URL, or a JSON StdioServerParameters (`{"command", "args", "env"}`) to launch.
Calls test_elicitation (answered by elicitation_callback) and test_sampling (answered by
sampling_callback), then test_tool_with_progress and test_tool_with_logging with progress and
log callbacks listening, and prints one JSON object:
{"protocol", "elicited", "sampled", "results": {tool: text}, "progress": [...], "logs": [...]}.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters, types


async def main(server: str, mode: str) -> dict:
    seen: dict = {"elicited": [], "sampled": [], "progress": [], "logs": []}

    async def elicit(context, params):
        seen["elicited"].append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "a@x"})

    async def sample(context, params):
        seen["sampled"].append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="test-model",
        )

    async def log(params):
        seen["logs"].append(params.data)

    target = (
        server if server.startswith("http") else StdioServerParameters.model_validate_json(server)
    )
    async with Client(
        target,
        mode=mode,
        raise_exceptions=True,
        elicitation_callback=elicit,
        sampling_callback=sample,
        logging_callback=log,
        log_level="info",  # the opt-in 2026-07-28 asks for; 2025 wires send every line
    ) as client:
        seen["protocol"] = client.protocol_version
        results = {}
        for name, arguments in (
            ("test_elicitation", {"message": "Who are you?"}),
            ("test_sampling", {"prompt": "Capital of France?"}),
        ):
            result = await client.call_tool(name, arguments)
            results[name] = [result.is_error, result.content[0].text]

        async def progress(value, total, message):
            seen["progress"].append(value)

        result = await client.call_tool("test_tool_with_progress", {}, progress_callback=progress)
        results["test_tool_with_progress"] = [result.is_error, result.content[0].text]
        result = await client.call_tool("test_tool_with_logging", {})
        results["test_tool_with_logging"] = [result.is_error, result.content[0].text]
        seen["results"] = results
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
