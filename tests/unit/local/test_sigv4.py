"""The emulator's SigV4 check against requests signed by botocore's own signer."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from kiln.local.emulator.sigv4 import Credentials, SignatureError, verify

KEY = Credentials("KILNTESTKEY", "s3cr3t-value")


def signed_environ(
    method: str, url: str, body: bytes, service: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    signer = S3SigV4Auth if service == "s3" else SigV4Auth
    signer(
        BotoCredentials(KEY.access_key_id, KEY.secret_access_key), service, "us-east-1"
    ).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": parts.path,
        "RAW_URI": parts.path + (f"?{parts.query}" if parts.query else ""),
        "QUERY_STRING": parts.query,
        "HTTP_HOST": parts.netloc,  # added by the HTTP client, signed by botocore
        "wsgi.input": io.BytesIO(body),
    }
    for name, value in prepared.headers.items():
        value = value.decode() if isinstance(value, bytes) else value
        if name.lower() == "content-type":
            environ["CONTENT_TYPE"] = value
        elif name.lower() == "content-length":
            environ["CONTENT_LENGTH"] = value
        else:
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    return environ


def dynamodb_environ(body: bytes = b'{"TableName": "kiln"}') -> dict[str, Any]:
    headers = {
        "X-Amz-Target": "DynamoDB_20120810.GetItem",
        "Content-Type": "application/x-amz-json-1.0",
    }
    return signed_environ("POST", "http://127.0.0.1:4566/", body, "dynamodb", headers)


def test_a_request_signed_with_the_emulators_key_passes() -> None:
    signed = verify(dynamodb_environ(), b'{"TableName": "kiln"}', KEY)
    assert (signed.service, signed.region) == ("dynamodb", "us-east-1")


def test_an_s3_request_with_a_quoted_key_and_a_query_passes() -> None:
    url = "http://127.0.0.1:4566/bucket/code/a%20b%2Bc.py?uploads="
    environ = signed_environ("POST", url, b"", "s3")
    assert verify(environ, b"", KEY).service == "s3"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda e: e.pop("HTTP_AUTHORIZATION"), "not signed"),
        (lambda e: e.update(HTTP_X_AMZ_TARGET="DynamoDB_20120810.DeleteTable"), "does not match"),
        (lambda e: e.update(HTTP_AUTHORIZATION=e["HTTP_AUTHORIZATION"].replace("KILN", "EVIL")),
         "not this emulator's"),
        (lambda e: e.update(HTTP_AUTHORIZATION="AWS abc:def"), "expected AWS4-HMAC-SHA256"),
    ],
)  # fmt: skip
def test_a_changed_or_foreign_request_is_refused(change: Any, reason: str) -> None:
    environ = dynamodb_environ()
    change(environ)
    with pytest.raises(SignatureError, match=reason):
        verify(environ, b'{"TableName": "kiln"}', KEY)


def test_a_different_body_is_refused() -> None:
    with pytest.raises(SignatureError, match="does not match"):
        verify(dynamodb_environ(), b'{"TableName": "other"}', KEY)


def test_a_signature_older_than_fifteen_minutes_is_refused() -> None:
    later = datetime.now(UTC) + timedelta(minutes=16)
    with pytest.raises(SignatureError, match="too far"):
        verify(dynamodb_environ(), b'{"TableName": "kiln"}', KEY, now=later)


def test_a_signature_made_with_another_secret_is_refused() -> None:
    other = Credentials(KEY.access_key_id, "another-secret")
    with pytest.raises(SignatureError, match="does not match"):
        verify(dynamodb_environ(), b'{"TableName": "kiln"}', other)
