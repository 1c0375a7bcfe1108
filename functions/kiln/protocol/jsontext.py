"""JSON in and out of the protocol layer: strict parsing, and text that is always valid UTF-8.

JSON's `\\uXXXX` escapes can spell a lone UTF-16 surrogate (`"\\udfff"`). Python parses it into
a string that cannot be encoded as UTF-8, so it breaks every later step that writes it out
(a reply echoing the id, a log line, a store write). RFC 7493 (I-JSON) forbids such strings;
Kiln refuses them where they come in and names where they were found.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Fixed and linear: a backslash-u escape in the surrogate range (D800-DFFF). Only bodies that
# contain one are walked, so ordinary requests pay one scan of their text.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_STRICT = json.JSONDecoder(parse_constant=_reject_constant)  # made once, not per request


def load_json(text: str) -> Any:
    """Strict JSON (no NaN or Infinity); raises ValueError."""
    return _STRICT.decode(text)


def may_hold_surrogates(text: str | bytes) -> bool:
    """Whether `text` has a surrogate-range escape at all (cheap pre-check for the walk)."""
    if isinstance(text, bytes):
        return _SURROGATE_ESCAPE_BYTES.search(text) is not None
    return _SURROGATE_ESCAPE.search(text) is not None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def lone_surrogate_path(value: Any) -> str | None:
    """Where the first string holding a lone surrogate sits (`params.arguments (a key)`), or None.

    Keys on the path are shown as they are when they encode; the value is never shown.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if not _encodes(node):
                return path or "(root)"
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node))
        elif isinstance(node, dict):
            for key, item in node.items():
                if not _encodes(key):
                    return f"{path or '(root)'} (a key)"
                stack.append((item, f"{path}.{key}" if path else key))
    return None


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON. A stray lone surrogate is written as its `\\u` escape, never raised."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()
