"""Check AWS Signature Version 4 on requests to the local emulator.

moto answers anyone who can reach its port. The emulator holds the only copy of its
secret key (and the processes of the same user that read it from the private state
directory), so a request whose signature checks out came from Kiln, not from a tool.
The algorithm is AWS's published one; botocore signs, this module only re-derives.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = timedelta(minutes=15)  # as AWS: an old signed request cannot be replayed later
UNSIGNED_PAYLOADS = frozenset(
    {
        "UNSIGNED-PAYLOAD",
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    }
)


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str


class SignatureError(Exception):
    """Why a request is refused (said in the 403 body; never contains a secret)."""


@dataclass(frozen=True)
class Signed:
    service: str
    region: str


def _parse_authorization(header: str) -> tuple[str, list[str], list[str], str]:
    algorithm, _, rest = header.partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureError(f"Authorization: expected {ALGORITHM}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    try:
        scope = fields["Credential"].split("/")
        signed_headers = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except KeyError as missing:
        raise SignatureError(f"Authorization: {missing.args[0]} is missing") from None
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise SignatureError("Authorization: the credential scope is malformed")
    return scope[0], scope[1:4], signed_headers, signature


def _canonical_uri(raw_path: str, service: str) -> str:
    if service == "s3":  # S3 signs the path as sent; every other service encodes it again
        return raw_path or "/"
    return quote(quote(unquote(raw_path or "/"), safe="/~"), safe="/~")


def _canonical_query(query: str) -> str:
    pairs = []
    for pair in query.split("&") if query else []:
        key, _, value = pair.partition("=")
        pairs.append((key, value))
    return "&".join(f"{key}={value}" for key, value in sorted(pairs))


def _header(environ: dict[str, Any], name: str) -> str | None:
    if name == "content-type":
        return environ.get("CONTENT_TYPE")
    if name == "content-length":
        return environ.get("CONTENT_LENGTH")
    value = environ.get("HTTP_" + name.upper().replace("-", "_"))
    return None if value is None else str(value)


def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def verify(
    environ: dict[str, Any], body: bytes, credentials: Credentials, now: datetime | None = None
) -> Signed:
    """The request's service and region if it is signed with `credentials`; else SignatureError."""
    header = environ.get("HTTP_AUTHORIZATION")
    if not header:
        raise SignatureError("the request is not signed; the emulator takes signed requests only")
    access_key, (date, region, service), signed_headers, signature = _parse_authorization(header)
    if not hmac.compare_digest(access_key.encode(), credentials.access_key_id.encode()):
        raise SignatureError("the access key is not this emulator's")
    amz_date = _header(environ, "x-amz-date") or ""
    try:
        when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise SignatureError("X-Amz-Date: missing or not a SigV4 timestamp") from None
    if abs((now or datetime.now(UTC)) - when) > MAX_SKEW or not amz_date.startswith(date):
        raise SignatureError("X-Amz-Date: too far from the emulator's clock")
    if "host" not in signed_headers:
        raise SignatureError("SignedHeaders: host must be signed")
    payload_hash = _header(environ, "x-amz-content-sha256")
    if payload_hash is None or payload_hash not in UNSIGNED_PAYLOADS:
        actual = hashlib.sha256(body).hexdigest()
        if payload_hash is not None and payload_hash != actual:
            raise SignatureError("X-Amz-Content-Sha256: does not match the body")
        payload_hash = actual
    lines = []
    for name in signed_headers:
        value = _header(environ, name)
        if value is None:
            raise SignatureError(f"SignedHeaders: {name} is signed but not sent")
        lines.append(f"{name}:{' '.join(value.split())}\n")
    raw_path = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ["PATH_INFO"]
    canonical = "\n".join(
        [
            environ["REQUEST_METHOD"],
            _canonical_uri(raw_path.split("?", 1)[0], service),
            _canonical_query(environ.get("QUERY_STRING", "")),
            "".join(lines),
            ";".join(signed_headers),
            payload_hash,
        ]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        [ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _signing_key(credentials.secret_access_key, date, region, service)
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise SignatureError("the signature does not match; sign with this emulator's key")
    return Signed(service=service, region=region)
