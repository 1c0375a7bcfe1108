"""Serves the studio's built files at /studio/ with a strict Content-Security-Policy.

Only files of the committed build are served (a fixed table read once, so no path from a
request ever reaches the file system). Hashed assets are cached for a year; index.html never.
"""

from __future__ import annotations

import functools
import gzip
import mimetypes
import secrets
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

DIST = Path(__file__).parent / "dist"

NONCE_SLOT = b"KILN_CSP_NONCE"


def csp(nonce: str) -> str:
    """No inline script, no eval, nothing from another origin; the API is same-origin.

    The only inline content is the editor's <style> element, admitted by a fresh nonce.
    """
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            f"style-src 'self' 'nonce-{nonce}'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "font-src 'self'",
            "manifest-src 'self'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

router = APIRouter(include_in_schema=False)


@functools.cache
def build_files() -> dict[str, bytes]:
    """Every file of the build by its path under /studio/ (empty when nothing is built)."""
    if not DIST.is_dir():
        return {}
    return {
        path.relative_to(DIST).as_posix(): path.read_bytes()
        for path in sorted(DIST.rglob("*"))
        if path.is_file()
    }


@functools.cache
def _gzipped(name: str) -> bytes:
    return gzip.compress(build_files()[name], compresslevel=9, mtime=0)


def _file(name: str, accept_encoding: str = "") -> Response:
    body = build_files().get(name)
    if body is None:
        missing = "Kiln Studio is not built into this package" if name == "index.html" else ""
        return Response(missing or "Not found", status_code=404, media_type="text/plain")
    suffix = Path(name).suffix
    media = TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    cache = "public, max-age=31536000, immutable" if name.startswith("assets/") else "no-cache"
    nonce = secrets.token_urlsafe(18)
    if name == "index.html":
        body = body.replace(NONCE_SLOT, nonce.encode())
    headers = {**SECURITY_HEADERS, "Content-Security-Policy": csp(nonce), "Cache-Control": cache}
    if suffix in TYPES:
        headers["Vary"] = "Accept-Encoding"
        if "gzip" in accept_encoding.lower():
            body = _gzipped(name)
            headers["Content-Encoding"] = "gzip"
    return Response(body, media_type=media, headers=headers)


@router.get("/studio")
async def studio_root() -> RedirectResponse:
    return RedirectResponse("/studio/", status_code=308)


@router.get("/studio/")
async def studio_index() -> Response:
    return _file("index.html")


@router.get("/studio/{name:path}")
async def studio_file(name: str, request: Request) -> Response:
    return _file(name, request.headers.get("accept-encoding", ""))
