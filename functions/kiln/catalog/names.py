"""The name and tag patterns, apart from the save rules.

The public function matches names and tags on every request (catalog keys, views), but it never
checks a draft: keeping these here lets it do so without importing the rules' schema and
requirement machinery (jsonschema, re2, packaging), which only the authoring side needs.
"""

from __future__ import annotations

import re
from typing import Final

NAME_PATTERN: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9_-]{0,62}")
TAG_RULE: Final = "1-32 characters from a-z 0-9 _ -, starting with a letter or digit"
_TAG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def is_tag(value: object) -> bool:
    return isinstance(value, str) and _TAG.fullmatch(value) is not None


def taken_by(name: str, holder: str) -> str:
    """Why a new tool cannot be called `name`: the tool `holder` has it (names are unique
    whatever their case: `ROMAN` is taken by `roman`)."""
    if holder == name:
        return f"name: a tool named {name!r} already exists"
    return f"name: {name!r} is taken by the tool {holder!r} (names are unique in any case)"
