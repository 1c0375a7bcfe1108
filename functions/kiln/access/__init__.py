"""Who may call what: views (curated, pinned tool sets), quotas, and the call ledger."""

__all__ = [
    "account",
    "approvals",
    "gate",
    "ledger",
    "pending",
    "pins",
    "quotas",
    "resolve",
    "secrets",
    "usage",
    "view_files",
    "views",
]
