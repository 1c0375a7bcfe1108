"""Who is calling: API keys, OAuth tokens, the policy that turns a credential into a
principal, the protected-resource metadata, and the audit of catalog writes."""

__all__ = ["audit", "callers", "keys", "metadata", "policy", "settings", "tokens"]
