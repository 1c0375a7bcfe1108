"""The HTTP side of Kiln: routers with module-level handlers, and the edge's error answers.

common      kiln_of(request), require(), json_body(), if_match(), time_left_s(): what every
            handler needs from a request
errors      every kiln.errors.KilnError answered once: REST body and status, or the MCP
            edge's JSON-RPC error under an MCP path; ApiError for refusals of the HTTP
            request itself
middleware  the DNS-rebinding guard (Origin, Host) and CORS
mcp         the MCP routes: /mcp, /mcp/v/{view}, /admin/mcp
mcp_serving an MCP route's work: authenticate, read the capped body, hand it to
            kiln.protocol's endpoint; kiln_of(request), the Kiln the app was built over
tools       /api/tools... -> kiln.authoring
bundles     /api/bundles...
studio      /api/whoami and /api/tools/validate (the studio's dry-run save); its pages are
            kiln.studio.assets
keys        /api/keys: create (shown once), list, revoke
secrets     /api/tools/{name}/secrets: declared names, set or not; set, remove (write-only)
connections /api/connections...: providers, callers' connections; the /connect pages
tasks       /api/tasks/{id}: authors' runs as MCP tasks (started by /api/tools/{ref}/run)
health      /api/health and the OAuth protected-resource metadata
"""

__all__ = ["apps", "mcp", "settings"]
