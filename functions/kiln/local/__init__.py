"""What only laptops and CI run, left out of every Lambda build.

dev          `kiln dev`: the whole stack on one machine (and `kiln stdio`)
stdio        MCP over stdin/stdout for desktop clients
bridge       `kiln stdio --url`: stdin/stdout relayed to a server's /mcp
linewise     the one reading loop of the stdio servers
connections  uvicorn hardening: timeouts, a connection cap, quiet logs
preflight    what `kiln dev` checks first: the port, Node.js
state        the local state directory: where a running server is recorded, the local key
reload       tool folders loaded again at every start
emulator/    moto in a child process: DynamoDB, S3 and SSM on loopback, durable
"""

__all__ = ["dev", "state"]
