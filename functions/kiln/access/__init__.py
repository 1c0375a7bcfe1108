"""Who may call what: views (curated, pinned tool sets), quotas, and the call ledger."""
