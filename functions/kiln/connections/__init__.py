"""Each caller's own OAuth connections: providers, the sealed vault, the connect flow."""

from kiln.connections.service import ConnectError, Connections, identity_of

__all__ = [
    "ConnectError",
    "Connections",
    "calls",
    "envelope",
    "exchange",
    "identity_of",
    "oauth",
    "providers",
    "service",
    "vault",
]
