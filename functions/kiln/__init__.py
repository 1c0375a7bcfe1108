"""Kiln: small scripts served as MCP tools from AWS Lambda.

Where a request goes, and the module to open for each step:

    settings.py         every environment variable, read once, typed (the only reader)
    lambda_handlers.py  Lambda entry points   \\
    dev.py, cli.py      kiln dev / kiln stdio / the CLI   -> all start in stack.py
    stack.py            the composition root: settings -> clients, stores, bundles, runner,
                        access control, authoring service, MCP endpoints (`Kiln`)
    app.py              the FastAPI app: composes api/ routers and middleware
    api/                middleware (Origin/Host guard, CORS), mcp (/mcp, /admin/mcp),
                        tools, bundles, health (REST, module-level handlers), errors
                        (the one table: domain error -> HTTP status, REST code, JSON-RPC code)
    auth/               who is calling and what they may do; keys, tokens, secrets
    protocol/           MCP itself, pure: (method, headers, body) -> (status, headers, body)
    service.py          the catalog's tools as MCP sees them (CatalogBackend): list, call
    authoring/          the one service for catalog writes and source reads (service), the
                        one JSON shape of a tool (serialise), /admin/mcp's kiln_* tools (admin)
    catalog/            model, rules, store (DynamoDB + S3), snapshot, files (tool folders)
    bundles/            dependency bundles: identity, build, store, cache, scheduler
    runner/             runs one script: process tree, deadline, caps, environment
"""

__version__ = "0.1.0"
