"""The one wording of JSON Schema rules: what a keyword asks, from the schema's value alone.

Tool arguments (`protocol.arguments`) and saved schemas checked against the metaschema
(`catalog.schemas`) explain a broken rule in the same words. Only schema values are shown,
never the instance that broke them (it may be a caller's secret).
"""

from __future__ import annotations

import json
from typing import Any


def show(value: Any) -> str:
    """A schema value (never an instance value) for a message."""
    return json.dumps(value, ensure_ascii=False)


def plural(count: Any, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else (many or word + 's')}"


def rule_text(keyword: str, value: Any) -> str:
    """What `keyword` with this schema value requires, as "must ..." (or "has ...")."""
    match keyword:
        case "type":
            kinds = value if isinstance(value, list) else [value]
            return "must be of type " + " or ".join(kinds)
        case "minimum":
            return f"must be ≥ {show(value)}"
        case "maximum":
            return f"must be ≤ {show(value)}"
        case "exclusiveMinimum":
            return f"must be > {show(value)}"
        case "exclusiveMaximum":
            return f"must be < {show(value)}"
        case "multipleOf":
            return f"must be a multiple of {show(value)}"
        case "minLength":
            return f"must be at least {plural(value, 'character')} long"
        case "maxLength":
            return f"must be at most {plural(value, 'character')} long"
        case "pattern":
            return f"must match the pattern {show(value)}"
        case "format":
            return f"must be a valid {value}"
        case "minItems":
            return f"must have at least {plural(value, 'item')}"
        case "maxItems":
            return f"must have at most {plural(value, 'item')}"
        case "uniqueItems":
            return "must not contain duplicate items"
        case "contains" | "minContains" | "maxContains":
            return f"does not contain the required matching items ({keyword})"
        case "minProperties":
            return f"must have at least {plural(value, 'property', 'properties')}"
        case "maxProperties":
            return f"must have at most {plural(value, 'property', 'properties')}"
        case "enum":
            return "must be one of " + ", ".join(show(v) for v in value)
        case "const":
            return f"must equal {show(value)}"
        case "anyOf":
            return "must match at least one of the schemas in anyOf"
        case "oneOf":
            return "must match exactly one of the schemas in oneOf"
        case "not":
            return "must not match the schema in not"
        case "unevaluatedItems":
            return "has items not allowed by unevaluatedItems"
        case "items" | "prefixItems":
            return f"has items not allowed by {keyword}"
    return f"breaks the {keyword!r} rule"
