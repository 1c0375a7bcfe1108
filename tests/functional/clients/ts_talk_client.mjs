// The official TypeScript SDK client (1.x, MCP 2025-11-25) answers a Kiln tool's questions
// through its request handlers, and hears progress. usage: node ts_talk_client.mjs URL
// Prints one JSON object: {"elicited", "sampled", "results": {tool: [isError, text]}, "progress"}.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const seen = { elicited: [], sampled: [], progress: [], results: {} };
const client = new Client(
  { name: 'kiln-talk-test', version: '1.0.0' },
  { capabilities: { elicitation: {}, sampling: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  seen.elicited.push(request.params.message);
  return { action: 'accept', content: { username: 'ada', email: 'a@x' } };
});
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  seen.sampled.push(request.params.messages[0].content.text);
  return { role: 'assistant', content: { type: 'text', text: 'Paris' }, model: 'test-model' };
});
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(process.argv[2])));
  for (const [name, args] of [
    ['test_elicitation', { message: 'Who are you?' }],
    ['test_sampling', { prompt: 'Capital of France?' }],
  ]) {
    const result = await client.callTool({ name, arguments: args });
    seen.results[name] = [Boolean(result.isError), result.content[0].text];
  }
  const result = await client.callTool({ name: 'test_tool_with_progress', arguments: {} }, undefined, {
    onprogress: (p) => seen.progress.push(p.progress),
  });
  seen.results.test_tool_with_progress = [Boolean(result.isError), result.content[0].text];
  console.log(JSON.stringify(seen));
} catch (e) {
  console.error(`client failed: ${e?.name}: ${e?.message}`);
  process.exitCode = 1;
} finally {
  await client.close().catch(() => {});
}
