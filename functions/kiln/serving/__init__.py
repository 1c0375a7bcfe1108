"""The call path: the catalog snapshot, bundles, secrets and the runner joined into the
backend MCP talks to (list, get, call), resolving a tool once per request."""

__all__ = [
    "backend",
    "conversation",
    "resolved",
    "runner_function",
    "store_errors",
    "warming",
]
