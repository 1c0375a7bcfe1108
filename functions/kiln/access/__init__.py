"""Who may call what: views (curated, pinned tool sets), quotas, approvals (asked of
the caller, or waiting for a person), tool secrets."""

__all__ = [
    "approval_store",
    "approvals",
    "pins",
    "quotas",
    "resolve",
    "secrets",
    "view_files",
    "view_store",
    "views",
    "waiting",
    "webhook",
]
