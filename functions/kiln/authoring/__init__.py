"""Authoring: the one service for catalog writes and source reads, and how tools are shown.

service    AuthoringService: create, update (If-Match), restore, rename, enable/disable,
           delete, test run, secrets check; audit line and bundle request after each commit.
           FolderTarget: tool folders (`kiln dev`) pushed through the service.
serialise  tool_json / revision_json / definition: the one JSON shape of a tool, used by
           REST, `/admin/mcp` and `kiln tools pull`.
admin      AdminBackend: `/admin/mcp`'s built-in kiln_* tools, calling the service.
"""

from kiln.authoring.service import (
    ArgumentsRejectedError,
    AuthoringService,
    FolderTarget,
    TestRun,
    ToolSource,
)

__all__ = [
    "ArgumentsRejectedError",
    "AuthoringService",
    "FolderTarget",
    "TestRun",
    "ToolSource",
    "admin",
    "serialise",
    "service",
]
