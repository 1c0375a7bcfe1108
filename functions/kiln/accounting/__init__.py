"""What each call cost and did: its account, admission at the gate, the ledger and usage."""

__all__ = [
    "account",
    "gate",
    "idempotency",
    "ledger",
    "ledger_shards",
    "ledger_totals",
    "pending",
    "usage",
]
