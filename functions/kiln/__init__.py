"""Kiln: small scripts served as MCP tools from AWS Lambda.

The maintainer's map, kept true by the house test `test_map` (every module and room named here
exists, and every room is named). Paths are relative to this package.

Where a request goes, and the module to open for each step:

    lambda_handlers.py     Lambda entry points (mcp, admin, runner, builder, worker); `kiln dev`
    local/dev.py           and `kiln stdio`; the CLI, cli/main.py: all start in stack.py
    settings.py            every environment variable, read once, typed (the only reader)
    stack.py               the composition root: settings -> clients, stores, bundles, runner,
                           access control, authoring service, MCP endpoints: one `Kiln`;
    process.py             its light part: process setup, clients, telemetry, runner settings
                           (all the runner function imports of it)
    api/apps.py            both HTTP apps over one MCP route list (api/mcp.py) and one lifespan;
                           api/middleware.py guards Origin/Host and adds CORS
    api/mcp_serving.py     an MCP route's work: authenticate (api/auth.py), read the capped body,
                           hand (method, headers, body) to the endpoint; `kiln_of(request)` is
                           the `Kiln` the app was built over
    protocol/http.py       MCP itself, pure: headers + body in, status + headers + body out;
                           protocol/dispatch.py parses and routes the JSON-RPC methods
    protocol/idempotency.py  a call sent with an idempotency key: its first answer again, or
                           claimed before it runs (the store: accounting/idempotency.py)
    accounting/gate.py     admission: which view applies, whose quotas count, the ledger entry
    serving/backend.py     the call path (CatalogBackend): list, get, call, a tool resolved once
                           per request; serving/runner_function.py is the runner function
    runner/runner.py       runs one script: process tree, deadline, caps, environment
    errors.py              on the way out: every refusal is a KilnError carrying its HTTP status,
                           REST code, JSON-RPC code and data; api/errors.py answers it on REST,
                           protocol/errors.py on MCP (each edge translates it once)

Rooms (one noun each; a room's __init__.py is its face, `__all__` what other rooms import):

    api/            the HTTP edge, the only room importing Starlette/FastAPI: apps, mcp,
                    mcp_serving, auth, middleware, errors, common and the REST routers
    studio/         the authors' web app (sources in studio/web/, the build in studio/dist/)
    protocol/       MCP, pure: both eras on one stateless endpoint
    schema/         JSON Schema that cannot stall: safe validation, wording, argument checks
    serving/        the call path: backend, bundles waited for, runner function, warming
    authoring/      the one service for catalog writes and source reads; serialise; admin tools
    identity/       who is calling: keys, tokens, policy, metadata, audit
    access/         what a caller may see and spend: views, pins, holds (breaking revisions
                    awaiting a view owner's accept), quotas, approvals, secrets
    connections/    each caller's own OAuth connections: providers, the sealed vault, connecting
    accounting/     what each call cost and did: its account, the gate, the ledger, usage
    catalog/        model, rules (names, schemas, requirements), breaking (what a save breaks;
                    narrowing), store, snapshot, tool folders, fingerprints (catalog/README.md)
    tasks/          long-running tools: service (TaskService), store, worker; approving
                    (calls that wait for a person's approval)
    bundles/        dependency bundles: identity, build, store, cache, scheduler
    runner/         runs one script; the same code in kiln dev and in the runner function
    aws/            clients made once, the catalog's resources, the trimmed botocore data
    observability/  telemetry, log redaction
    cli/            the `kiln` command: tools, bundles, keys, views, calls, client, locate, output
    local/          laptops and CI only, left out of Lambda builds: dev, stdio, bridge,
                    preflight, reload, and the moto emulator (local/emulator/)
"""

__version__ = "0.1.0"
