"""The mark a new table gets (kiln.aws.clients) is the one the ledger reads (kiln.access)."""

from __future__ import annotations

from kiln.accounting.ledger_shards import since_start
from kiln.aws.clients import LEDGER_SHARDS_SINCE_START


def test_a_new_tables_mark_is_the_ledgers_record_from_the_first_day() -> None:
    assert since_start() == LEDGER_SHARDS_SINCE_START
