// The connect card's snippets, written for the clients of today: Python SDK 2.x (`mcp`), the
// TypeScript SDK (@modelcontextprotocol/sdk), and `kiln stdio` for desktop clients that only
// start local processes; the Claude Code command, Cursor's and VS Code's mcp.json (with the
// key as each client substitutes it: the shell, ${env:…}, ${input:…}) and the Inspector CLI.
// tests/browser/test_studio_connect.py copies each off the page and runs it against `kiln dev`:
// a snippet that stops working fails that test.
export interface Snippet {
  id: string;
  title: string;
  hint: string;
  text: string;
}

const HEADER = "Bearer ${KILN_KEY}";

export function snippets(origin: string, withKey: boolean): Snippet[] {
  const url = `${origin}/mcp`;
  return [
    {
      id: "claude-code",
      title: "Claude Code",
      hint: "run in a terminal",
      text: withKey
        ? `claude mcp add --transport http kiln ${url} --header "Authorization: ${HEADER}"`
        : `claude mcp add --transport http kiln ${url}`,
    },
    {
      id: "desktop",
      title: "Claude Desktop and other desktop clients",
      hint: "prints the mcpServers entry to paste into claude_desktop_config.json (run it where the client runs, with Kiln installed)",
      text: `kiln stdio --client-config --url ${origin}${withKey ? ' --key "$KILN_KEY"' : ""}`,
    },
    {
      id: "cursor",
      title: "Cursor (.cursor/mcp.json)",
      hint: withKey ? "Cursor reads KILN_KEY from the environment it was started in (${env:…})" : "",
      text: JSON.stringify(
        { mcpServers: { kiln: { url, ...(withKey ? { headers: { Authorization: "Bearer ${env:KILN_KEY}" } } : {}) } } },
        null,
        2,
      ),
    },
    {
      id: "vscode",
      title: "VS Code (.vscode/mcp.json)",
      hint: withKey ? "VS Code asks for the key once and keeps it in its secret storage" : "",
      text: JSON.stringify(vscode(url, withKey), null, 2),
    },
    {
      id: "inspector",
      title: "MCP Inspector",
      hint: "",
      text: `npx @modelcontextprotocol/inspector --cli ${url} --transport http --method tools/list${withKey ? ` --header "Authorization: ${HEADER}"` : ""}`,
    },
    { id: "python", title: "Python SDK 2.x", hint: "pip install mcp; save as list_tools.py, run python list_tools.py", text: python(url, withKey) },
    {
      id: "typescript",
      title: "TypeScript SDK",
      hint: "npm install @modelcontextprotocol/sdk; save as list-tools.mjs, run node list-tools.mjs",
      text: typescript(url, withKey),
    },
  ];
}

function vscode(url: string, withKey: boolean): object {
  if (!withKey) return { servers: { kiln: { type: "http", url } } };
  return {
    inputs: [{ type: "promptString", id: "kiln-key", description: "Kiln key", password: true }],
    servers: { kiln: { type: "http", url, headers: { Authorization: "Bearer ${input:kiln-key}" } } },
  };
}

function python(url: string, withKey: boolean): string {
  if (!withKey)
    return `import asyncio

from mcp import Client


async def main() -> None:
    async with Client("${url}") as client:
        tools = await client.list_tools()
        print([tool.name for tool in tools.tools])


asyncio.run(main())
`;
  return `import asyncio
import os

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    headers = {"Authorization": f"Bearer {os.environ['KILN_KEY']}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client("${url}", http_client=http)
        async with Client(transport) as client:
            tools = await client.list_tools()
            print([tool.name for tool in tools.tools])


asyncio.run(main())
`;
}

function typescript(url: string, withKey: boolean): string {
  const options = withKey
    ? `, {
  requestInit: { headers: { Authorization: \`Bearer \${process.env.KILN_KEY}\` } },
}`
    : "";
  return `import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const transport = new StreamableHTTPClientTransport(new URL("${url}")${options});
const client = new Client({ name: "my-app", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
console.log(tools.map((tool) => tool.name));
await client.close();
`;
}
