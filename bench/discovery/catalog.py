"""300 generated tools across many domains, for the discovery benchmark and its tests.

Each domain names its records (with what they are and how they are filtered) and a few tools
of its own written out whole; record tools are made from several phrasings per action, so no
two domains read alike and no description is a copy of another's. Deterministic: the same
300 tools on every run (the labelled queries in `queries.json` name them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

Arg = tuple[str, str, str]  # name, JSON type, description


@dataclass(frozen=True)
class Record:
    noun: str  # snake_case singular: invoice
    plural: str
    gloss: str  # what one is, for a reader who does not know the domain
    key: Arg  # the argument that names one
    filters: tuple[Arg, ...] = ()
    fields: tuple[Arg, ...] = ()  # what a create / update sets
    actions: tuple[str, ...] = ("list", "get", "create", "update", "delete")


@dataclass(frozen=True)
class Special:
    name: str
    description: str
    args: tuple[Arg, ...]
    required: tuple[str, ...] = ()
    read_only: bool = True


@dataclass(frozen=True)
class Domain:
    prefix: str
    system: str  # where the records live, as a description says it
    tags: tuple[str, ...]
    records: tuple[Record, ...]
    specials: tuple[Special, ...] = field(default=())


_LIST = (
    "List {plural} in {system}, newest first. {gloss_cap} Filter by {filters}; returns at most "
    "`limit` {plural} with their ids.",
    "Page through the {plural} stored in {system}. Narrow the page with {filters}. Each entry "
    "is {gloss}.",
    "Return every {noun_words} in {system} that matches {filters}, sorted by last change.",
)
_GET = (
    "Fetch one {noun_words} from {system} by its {key_words}, with all of its fields. {gloss_cap}",
    "Look up a single {noun_words} ({gloss}) and return its full record from {system}.",
    "Read the details of a {noun_words} in {system}, given its {key_words}.",
)
_CREATE = (
    "Create a new {noun_words} in {system}. {gloss_cap} Set {fields}; returns the new id.",
    "Add a {noun_words} to {system} with {fields}.",
    "Record a new {noun_words} ({gloss}) in {system}; {fields} may be given up front.",
)
_UPDATE = (
    "Change fields of an existing {noun_words} in {system}: {fields}. Fields left out are kept.",
    "Edit a {noun_words} in {system} by {key_words}; only the given fields ({fields}) change.",
    "Patch one {noun_words} stored in {system}, setting {fields}.",
)
_DELETE = (
    "Permanently remove a {noun_words} from {system}. This cannot be undone.",
    "Delete one {noun_words} ({gloss}) from {system} by its {key_words}.",
    "Erase a {noun_words} and its history from {system}; irreversible.",
)
_SEARCH = (
    "Full-text search over {plural} in {system}: matches {filters} and free text in any field.",
    "Find {plural} in {system} whose text mentions the query; ranked by relevance.",
)
_EXPORT = (
    "Export {plural} from {system} as CSV or JSON for a date range, for spreadsheets or audits.",
    "Download a file of {plural} from {system} ({gloss}), in CSV or JSON.",
)
_TEMPLATES = {
    "list": _LIST,
    "get": _GET,
    "create": _CREATE,
    "update": _UPDATE,
    "delete": _DELETE,
    "search": _SEARCH,
    "export": _EXPORT,
}
_VERB = {"list": "list", "get": "get", "create": "create", "update": "update",
         "delete": "delete", "search": "search", "export": "export"}  # fmt: skip


def _pick(options: tuple[str, ...], seed: str) -> str:
    return options[int(hashlib.sha256(seed.encode()).hexdigest(), 16) % len(options)]


def _words(text: str) -> str:
    return text.replace("_", " ")


def _schema(args: tuple[Arg, ...], required: tuple[str, ...]) -> dict[str, Any]:
    props = {name: {"type": kind, "description": text} for name, kind, text in args}
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    return schema


def _record_tool(domain: Domain, record: Record, action: str) -> dict[str, Any]:
    noun = record.noun if action not in ("list", "search", "export") else record.plural
    name = f"{domain.prefix}_{_VERB[action]}_{noun}"
    filters = ", ".join(_words(a[0]) for a in record.filters) or "date"
    fields_text = ", ".join(_words(a[0]) for a in record.fields) or "its fields"
    text = _pick(_TEMPLATES[action], name).format(
        plural=_words(record.plural),
        noun_words=_words(record.noun),
        system=domain.system,
        gloss=record.gloss,
        gloss_cap=record.gloss[0].upper() + record.gloss[1:] + ".",
        filters=filters,
        fields=fields_text,
        key_words=_words(record.key[0]),
    )
    limit: Arg = ("limit", "integer", "How many to return (1-100).")
    fmt: Arg = ("format", "string", "csv or json")
    args: tuple[Arg, ...]
    required: tuple[str, ...]
    if action in ("list", "search"):
        query: tuple[Arg, ...] = (("query", "string", "Words to look for."),)
        args = (*(query if action == "search" else ()), *record.filters, limit)
        required = ("query",) if action == "search" else ()
    elif action == "export":
        args = (*record.filters, ("since", "string", "Start date, YYYY-MM-DD."), fmt)
        required = ("format",)
    elif action == "create":
        args, required = record.fields, tuple(a[0] for a in record.fields[:1])
    elif action == "update":
        args, required = (record.key, *record.fields), (record.key[0],)
    else:
        args, required = (record.key,), (record.key[0],)
    annotations = {"readOnlyHint": action in ("list", "get", "search", "export")}
    if action == "delete":
        annotations["destructiveHint"] = True
    return {
        "name": name,
        "description": text,
        "tags": list(domain.tags),
        "inputSchema": _schema(args, required),
        "annotations": annotations,
    }


def _special_tool(domain: Domain, special: Special) -> dict[str, Any]:
    return {
        "name": f"{domain.prefix}_{special.name}",
        "description": special.description,
        "tags": list(domain.tags),
        "inputSchema": _schema(special.args, special.required),
        "annotations": {"readOnlyHint": special.read_only},
    }


def generate(count: int = 300) -> list[dict[str, Any]]:
    """`count` tools (at most what the domains hold), each a dict: name, description, tags,
    inputSchema, annotations. Domains take turns, so a smaller count still spans them all."""
    from bench.discovery.domains import DOMAINS

    per_domain: list[list[dict[str, Any]]] = []
    for domain in DOMAINS:
        tools = [_special_tool(domain, s) for s in domain.specials]
        for record in domain.records:
            tools += [_record_tool(domain, record, action) for action in record.actions]
        per_domain.append(tools)
    out: list[dict[str, Any]] = []
    depth = max(len(tools) for tools in per_domain)
    for i in range(depth):
        out += [tools[i] for tools in per_domain if i < len(tools)]
    names = [t["name"] for t in out]
    assert len(names) == len(set(names)), "two generated tools share a name"
    return out[:count]
