"""Who may call what: views (curated, pinned tool sets), quotas, approvals, tool secrets."""

__all__ = [
    "approvals",
    "pins",
    "quotas",
    "resolve",
    "secrets",
    "view_files",
    "views",
]
