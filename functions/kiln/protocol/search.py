"""Ranked search over tools: a light tokenizer and a BM25 index (search mode's `search_tools`).

The ranking is `bm25s` (Okapi BM25, Lucene's variant, on sparse matrices) over words stemmed by
PyStemmer's Snowball English stemmer. Both load on the first index built, never on a cold start
that only lists tools in `list` mode (tests/functional/lambda/test_cold_start_imports.py).

A tool is one document: its name, title, tags, description, and each argument's name and
description. Identifiers are split (`search_flights` and `searchFlights` are "search
flights"); a name, title or tag word counts three times, an argument name twice, so that a
query word naming what a tool *is* outweighs one its description merely mentions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import bm25s
    import Stemmer

# Words too common in tool descriptions and questions to tell one tool from another.
_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "get",
        "give",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "show",
        "so",
        "some",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "to",
        "up",
        "us",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "would",
        "you",
        "your",
    }
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_WEIGHTS = {"name": 3, "title": 3, "tags": 3, "arguments": 2, "description": 1}


class Tokenizer:
    """Words of a text, split at case and punctuation, lowercased, stemmed; stopwords dropped."""

    def __init__(self) -> None:
        import Stemmer

        self._stemmer: Stemmer.Stemmer = Stemmer.Stemmer("english")

    def __call__(self, text: str) -> list[str]:
        words = [w.lower() for w in _WORD.findall(text)]
        stems: list[str] = self._stemmer.stemWords([w for w in words if w not in _STOPWORDS])
        return stems


def _document(tool: Mapping[str, Any], tags: Sequence[str]) -> dict[str, str]:
    """The text of each field of a listed tool (a `tools/list` entry as a dict)."""
    schema = tool.get("inputSchema") or {}
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    names: list[str] = []
    texts: list[str] = []
    if isinstance(props, Mapping):
        for arg, spec in props.items():
            names.append(str(arg))
            if isinstance(spec, Mapping):
                texts += [str(spec.get(k, "")) for k in ("title", "description")]
    return {
        "name": str(tool.get("name", "")),
        "title": str(tool.get("title") or ""),
        "tags": " ".join(tags),
        "arguments": " ".join(names),
        "description": " ".join([str(tool.get("description") or ""), *texts]),
    }


class SearchIndex:
    """BM25 over a fixed list of tools, built once (per catalog version, by its caller)."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], tags: Sequence[Sequence[str]]) -> None:
        import bm25s

        self._tokens = Tokenizer()
        self.names = [str(t.get("name", "")) for t in tools]
        corpus = []
        for tool, its_tags in zip(tools, tags, strict=True):
            words: list[str] = []
            for field, text in _document(tool, its_tags).items():
                words += self._tokens(text) * _WEIGHTS[field]
            corpus.append(words)
        self._bm25: bm25s.BM25 | None = None
        if any(corpus):
            self._bm25 = bm25s.BM25()
            self._bm25.index(corpus, show_progress=False)

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """Up to `limit` (name, score) pairs, best first; only tools sharing a word with it."""
        words = self._tokens(query)
        if self._bm25 is None or not words:
            return []
        scores = self._bm25.get_scores(words)
        ranked = sorted(
            (i for i in range(len(self.names)) if scores[i] > 0),
            key=lambda i: (-float(scores[i]), self.names[i]),
        )
        return [(self.names[i], round(float(scores[i]), 3)) for i in ranked[:limit]]
