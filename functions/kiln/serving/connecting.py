"""The page a caller must open before a tool can act for them (kiln.connections), as the
protocol offers it: a URL-mode elicitation (kiln.protocol.urlmode)."""

from __future__ import annotations

from kiln.protocol.backend import UrlElicitation


def page_for(tool: str, error: LookupError) -> UrlElicitation | None:
    """The connect page of a ConnectionNeededError that has one; None for any other refusal
    (an anonymous caller, a provider not registered, a secret not set)."""
    url = getattr(error, "url", None)
    provider = getattr(error, "provider", "")
    if not url or not provider:
        return None
    scopes = tuple(getattr(error, "scopes", ()) or ())
    asked = f" (scopes: {', '.join(scopes)})" if scopes else ""
    return UrlElicitation(
        key=f"connect/{provider}",
        url=url,
        message=f"Connect your {provider} account{asked} so that tool {tool!r} can act for you",
        elicitation_id=getattr(error, "elicitation_id", "") or "",
    )
