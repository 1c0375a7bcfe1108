"""The MCP constants the protocol layer needs on every request, as `mcp-types` defines them.

Importing `mcp-types` builds hundreds of pydantic models (0.3 s idle, about 1 s on a busy
2-core machine): more than the rest of a cold start. The values the hot paths need (codes,
`_meta` keys, revisions) are copied here, and `tests/unit/protocol/test_spec.py` fails when
they drift from the installed `mcp-types`; the models themselves load on first use.
"""

from __future__ import annotations

from typing import Final

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
URL_ELICITATION_REQUIRED: Final = -32042  # 2025-11-25 only

PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY: Final = "io.modelcontextprotocol/serverInfo"

HANDSHAKE_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_PROTOCOL_VERSIONS: Final = ("2026-07-28",)
KNOWN_PROTOCOL_VERSIONS: Final = HANDSHAKE_PROTOCOL_VERSIONS + MODERN_PROTOCOL_VERSIONS
LATEST_HANDSHAKE_VERSION: Final = "2025-11-25"
