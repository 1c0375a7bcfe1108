"""DNS-rebinding protection shared by every route: which Origin and Host values to answer."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


def host_name(host: str) -> str:
    """The name part of a Host header: `[::1]:8000` → `[::1]`, `localhost:8000` → `localhost`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host: str | None, *, loopback_bind: bool) -> bool:
    """A server bound to loopback answers only loopback names (a rebinding page has another)."""
    return not loopback_bind or host is None or host_name(host) in LOOPBACK_NAMES


def same_origin(origin: str | None, host: str | None) -> bool:
    """A page served by this server (the studio) calling it: the Origin names the Host asked.

    A rebinding page has the same shape, which is why `host_allowed` runs first on loopback.
    """
    if origin is None or not host:
        return False
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in {"http", "https"} and parts.netloc.lower() == host.strip().lower()


def origin_allowed(origin: str | None, *, allowed: Collection[str], host: str | None) -> bool:
    """No Origin (not a browser) passes; one that is present must be the server's own (a page
    it served, as the studio) or on the allow-list. Another loopback port is not the server:
    any local web page (a dev server, a page a tool opened) would otherwise read its tools and
    call them as an anonymous caller, with the answers."""
    return origin is None or origin in allowed or same_origin(origin, host)


MISDIRECTED = (
    "Misdirected request: this server is bound to loopback and answers only "
    "localhost, 127.0.0.1 or [::1] as Host"
)
FORBIDDEN_ORIGIN = "Forbidden: the request's Origin is not allowed on this server"


def refusal(
    host: str | None, origin: str | None, *, allowed: Collection[str], loopback_bind: bool
) -> tuple[int, str] | None:
    """Why a request's Host or Origin is refused (its HTTP status and message), or None.

    The Host check runs first, so a rebinding page cannot pass as the server's own page on a
    loopback bind."""
    if not host_allowed(host, loopback_bind=loopback_bind):
        return 421, MISDIRECTED
    if not origin_allowed(origin, allowed=allowed, host=host):
        return 403, FORBIDDEN_ORIGIN
    return None
