"""Where the server cards and the AI Catalog are served (the documents: `kiln.protocol.cards`).

Apart from the documents so that the middleware, which asks of every request whether its path
is a public document, and the routes load without the cards' schemas and dataclasses: a cold
start's first `tools/list` never makes a card.
"""

from __future__ import annotations

CARD_SUFFIX = "/server-card"  # appended to an endpoint's streamable-HTTP URL (the extension's)
CATALOG_PATH = "/.well-known/ai-catalog.json"
PUBLIC_CARD_PATH = "/mcp" + CARD_SUFFIX


def is_public_document(path: str) -> bool:
    """A card or the catalog: public metadata that any origin may read."""
    if path in (CATALOG_PATH, PUBLIC_CARD_PATH):
        return True
    parts = path.split("/")  # "", "mcp", "v", view, "server-card"
    return len(parts) == 5 and parts[1:3] == ["mcp", "v"] and parts[4] == CARD_SUFFIX[1:]
