"""The change log's pure parts: which tools a write touches, and a lost version race."""

from __future__ import annotations

from botocore.exceptions import ClientError

from kiln.catalog.changelog import (
    MAX_STEPS,
    changed_since,
    entry_key,
    touched_bundles,
    touched_tools,
    version_raced,
)


def _cancelled(*codes: str) -> ClientError:
    reasons = [{"Code": code} for code in codes]
    response = {"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                "CancellationReasons": reasons}  # fmt: skip
    return ClientError(response, "TransactWriteItems")  # type: ignore[arg-type]


def test_a_write_touches_the_tools_items_it_puts_or_updates_and_nothing_else() -> None:
    operations = [
        {"Put": {"Item": {"pk": {"S": "NAME#echo"}, "sk": {"S": "NAME"}}}},
        {"Put": {"Item": {"pk": {"S": "TOOLS"}, "sk": {"S": "b"}}}},
        {"Update": {"Key": {"pk": {"S": "TOOLS"}, "sk": {"S": "a"}}}},
        {"Put": {"Item": {"pk": {"S": "TOOL#a"}, "sk": {"S": "REV#00000002"}}}},
    ]
    assert touched_tools(operations) == ["a", "b"]


def test_a_lost_version_race_reads_as_a_conflict_and_only_then() -> None:
    raced = _cancelled("None", "None", "ConditionalCheckFailed", "None")
    assert version_raced(raced, 2)
    assert [r["Code"] for r in raced.response["CancellationReasons"]][2] == "TransactionConflict"
    # The write's own condition failed too: not a race, and the caller still sees its own.
    refused = _cancelled("ConditionalCheckFailed", "None", "ConditionalCheckFailed", "None")
    assert not version_raced(refused, 2)
    assert refused.response["CancellationReasons"][0]["Code"] == "ConditionalCheckFailed"
    assert not version_raced(_cancelled("ConditionalCheckFailed", "None", "None"), 1)


def test_entries_sort_as_their_versions_and_a_far_gap_is_a_full_read() -> None:
    assert sorted([entry_key(10), entry_key(9), entry_key(100)]) == [
        entry_key(9), entry_key(10), entry_key(100)
    ]  # fmt: skip
    # No store is asked: these answer "read everything" before any query.
    assert changed_since(None, "t", 5, 5 + MAX_STEPS + 1) is None
    assert changed_since(None, "t", 7, 7) is None
    assert changed_since(None, "t", 8, 3) is None


def test_a_write_touches_the_bundle_records_it_updates() -> None:
    operations = [
        {"Update": {"Key": {"pk": {"S": "BUNDLE#ab12"}, "sk": {"S": "META"}}}},
        {"Update": {"Key": {"pk": {"S": "TOOLS"}, "sk": {"S": "a"}}}},
        {"Put": {"Item": {"pk": {"S": "TOOL#a"}, "sk": {"S": "REV#00000002"}}}},
    ]
    assert touched_bundles(operations) == ["ab12"]
    assert touched_tools(operations) == ["a"]
