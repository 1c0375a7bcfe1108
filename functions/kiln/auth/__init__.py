"""Access control: API keys, OAuth tokens, who may do what, per-tool secrets, audit."""
