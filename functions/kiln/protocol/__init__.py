"""MCP for Kiln: both protocol eras on one stateless endpoint, pure and transport-agnostic."""

from kiln.protocol.backend import CallContext, ToolBackend, ToolOutcome, ToolView
from kiln.protocol.http import HttpRequest, HttpResponse, McpEndpoint
from kiln.protocol.inner import CallLimits
from kiln.protocol.settings import ProtocolSettings

__all__ = [
    "CallContext",
    "CallLimits",
    "HttpRequest",
    "HttpResponse",
    "McpEndpoint",
    "ProtocolSettings",
    "ToolBackend",
    "ToolOutcome",
    "ToolView",
    "backend",
    "calling",
    "card_paths",
    "cards",
    "codestubs",
    "discovery",
    "dispatch",
    "errors",
    "guard",
    "http",
    "idempotency",
    "inner",
    "jsontext",
    "jsstubs",
    "pinning",
    "spec",
    "talking",
    "tasks",
    "wire",
]
