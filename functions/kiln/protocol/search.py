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
# Words a person and a tool's author use for the same thing (query expansion): a query word
# brings in the other words of its groups at half weight, so that "will it rain" finds a
# forecast and "PRs" a pull request.
SYNONYMS: tuple[str, ...] = (
    "rain snow precipitation weather forecast outlook",
    "dark sunset dusk sunrise dawn daylight",
    "hot cold temperature warm warmer heating thermostat",
    "money currency currencies exchange fx rate yen pound pounds dollar dollars euro euros",
    "pr prs pull_request merge_request",
    "repo repository repositories",
    "wrote written author blame",
    "nudge remind reminder chase unpaid overdue",
    "client customer buyer",
    "owe owed receivable unpaid debt",
    "cycle cycling bike walk walking drive driving route directions commute",
    "coffee cafe restaurant shop shops bar pharmacy nearby around places",
    "salary wage wages pay payslip paycheck",
    "email mail e-mail inbox",
    "translate translation spanish french german italian chinese japanese language",
    "voice speech audio recording memo transcribe transcript",
    "van truck lorry car vehicle vehicles fleet",
    "now current currently latest live",
    "photo picture image images",
    "scan scanned ocr",
    "password credential credentials login sign-in",
    "cve cves vulnerability vulnerabilities",
    "reply respond answer",
    "delete remove erase",
    "find search look locate",
    "meeting meet invite invitation appointment",
    "vacation holiday holidays leave time-off",
    "boss manager",
    "deploy ship release rollout",
    "logs log errors",
    "coupon discount promo voucher",
    "package parcel shipment delivery",
    "happy satisfaction csat rating",
    "ticket case request",
    "visa passport entry",
    "summary summarize tl;dr tldr abstract",
    "cook recipe recipes dish meal",
    "loan mortgage repayment",
    "stock share shares ticker trading",
)
_ACRONYMS = re.compile(r"[A-Z]{2,}s")
_WORD = re.compile(r"[A-Z]{2,}s\b|[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")  # "PRs": one word
_WEIGHTS = {"name": 3, "title": 3, "tags": 3, "arguments": 2, "description": 1}


class Tokenizer:
    """Words of a text, split at case and punctuation, lowercased, stemmed; stopwords dropped."""

    def __init__(self) -> None:
        import Stemmer

        self._stemmer: Stemmer.Stemmer = Stemmer.Stemmer("english")

    def __call__(self, text: str) -> list[str]:
        words = [
            w[:-1].lower() if _ACRONYMS.fullmatch(w) else w.lower() for w in _WORD.findall(text)
        ]
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


def _related(tokens: Tokenizer) -> dict[str, frozenset[str]]:
    """Each stemmed word of SYNONYMS -> the other stems of its groups."""
    related: dict[str, set[str]] = {}
    for group in SYNONYMS:
        stems = {stem for word in group.split() for stem in tokens(word.replace("_", " "))}
        phrases = [tuple(tokens(word.replace("_", " "))) for word in group.split()]
        for phrase in phrases:
            for stem in phrase:
                related.setdefault(stem, set()).update(stems - set(phrase))
    return {stem: frozenset(others) for stem, others in related.items()}


class SearchIndex:
    """BM25 over a fixed list of tools, built once (per catalog version, by its caller)."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], tags: Sequence[Sequence[str]]) -> None:
        import bm25s

        self._tokens = Tokenizer()
        self._related = _related(self._tokens)
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
        expanded = sorted({w for word in words for w in self._related.get(word, ())} - set(words))
        if expanded:
            scores = scores + 0.5 * self._bm25.get_scores(expanded)
        ranked = sorted(
            (i for i in range(len(self.names)) if scores[i] > 0),
            key=lambda i: (-float(scores[i]), self.names[i]),
        )
        return [(self.names[i], round(float(scores[i]), 3)) for i in ranked[:limit]]
