"""Search mode's ranking (protocol/search.py) and its index's life (one per distinct list)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kiln.protocol.backend import ToolView
from kiln.protocol.cursor import CursorCodec
from kiln.protocol.listing import ToolLister
from kiln.protocol.search import SearchIndex, Tokenizer


def entry(name: str, description: str, **args: str) -> dict[str, Any]:
    props = {arg: {"type": "string", "description": text} for arg, text in args.items()}
    return {"name": name, "description": description,
            "inputSchema": {"type": "object", "properties": props}}  # fmt: skip


def index(*entries: dict[str, Any], tags: Mapping[str, tuple[str, ...]] | None = None) -> Any:
    return SearchIndex(list(entries), [(tags or {}).get(e["name"], ()) for e in entries])


def test_identifiers_are_split_at_underscores_case_and_digits_and_plurals_stemmed() -> None:
    words = Tokenizer()
    assert words("searchFlights_v2 HTTPServer") == ["search", "flight", "v", "2", "http", "server"]
    assert words("invoices") == words("invoice")
    assert words("the rate of the pound") == ["rate", "pound"]  # stopwords dropped


def test_a_rare_query_word_outranks_a_common_one() -> None:
    found = index(
        entry("billing_list_payments", "List payments received."),
        entry("billing_get_payment", "One payment by id."),
        entry("billing_refund_payment", "Return a payment's money to the customer."),
    )
    assert found.search("refund a payment", 3)[0][0] == "billing_refund_payment"


def test_a_tool_is_found_by_its_argument_names_and_tags_not_only_its_description() -> None:
    found = index(
        entry("convert", "Turns one amount into another.", currency="ISO code"),
        entry("resize", "Turns one picture into another.", width="pixels"),
        entry("report", "Monthly numbers."),
        tags={"report": ("payroll",)},
    )
    assert found.search("currency", 3)[0][0] == "convert"
    assert found.search("payroll", 3)[0][0] == "report"


def test_substrings_do_not_match_and_a_query_sharing_no_word_finds_nothing() -> None:
    found = index(entry("category_list", "Lists categories."), entry("cat_feed", "Feeds a cat."))
    assert [name for name, _ in found.search("cat", 5)] == ["cat_feed"]
    assert found.search("zebra", 5) == []
    assert found.search("the of and", 5) == []  # only stopwords


def test_the_limit_caps_the_results_best_first() -> None:
    tools = [entry(f"rate_{i}", "exchange rate " + "rate " * i) for i in range(6)]
    hits = index(*tools).search("rate", 3)
    assert len(hits) == 3
    assert [score for _, score in hits] == sorted((score for _, score in hits), reverse=True)


def test_the_index_is_built_once_per_list_and_again_for_a_new_list() -> None:
    lister = ToolLister(CursorCodec(b"k" * 32), page_size=100, ttl_ms=0)
    built: list[int] = []

    def build(entries: list[dict[str, Any]], tags: Mapping[str, tuple[str, ...]]) -> str:
        built.append(len(entries))
        return f"index of {sorted(tags)}"

    one = (ToolView(name="a", description="A", input_schema={}, tags=("x",)),)
    two = (*one, ToolView(name="b", description="B", input_schema={}))

    async def run() -> list[str]:
        return [await lister.index(tools, build) for tools in (one, one, two, two, one)]

    assert asyncio.run(run()) == [
        "index of ['a']", "index of ['a']", "index of ['a', 'b']", "index of ['a', 'b']",
        "index of ['a']",
    ]  # fmt: skip
    assert built == [1, 2]


def test_a_persons_word_finds_the_tool_that_uses_its_synonym() -> None:
    found = index(
        entry("weather_forecast", "Seven-day outlook with precipitation."),
        entry("tide_table", "High and low water times for a harbour."),
        entry("git_list_pull_requests", "Open pull requests of a repository."),
    )
    assert found.search("will it rain", 1)[0][0] == "weather_forecast"
    assert found.search("open PRs", 1)[0][0] == "git_list_pull_requests"
    assert Tokenizer()("PRs APIs") == ["pr", "api"]
