"""kiln.aws.signed: the endpoint's pool is made as botocore's session makes one (TLS checked
against botocore's CA bundle), and nothing is sent without credentials."""

from __future__ import annotations

import pytest
from botocore.awsrequest import AWSHTTPConnectionPool, AWSHTTPSConnectionPool
from botocore.exceptions import NoCredentialsError
from botocore.httpsession import get_cert_path

from kiln.aws.signed import SignedSession


def session(endpoint: str, verify: str | bool | None = None) -> SignedSession:
    return SignedSession(None, "eu-west-1", "dynamodb", endpoint, connect_timeout_s=1,
                         read_timeout_s=3, verify=verify)  # fmt: skip


def test_an_https_endpoints_certificate_is_checked_against_botocores_ca_bundle() -> None:
    pool = session("https://dynamodb.eu-west-1.amazonaws.com")._pool
    assert isinstance(pool, AWSHTTPSConnectionPool)
    assert (pool.host, pool.port) == ("dynamodb.eu-west-1.amazonaws.com", 443)
    assert pool.cert_reqs == "CERT_REQUIRED"
    assert pool.ca_certs == get_cert_path(True)


def test_a_ca_bundle_given_is_the_one_checked_against() -> None:
    pool = session("https://dynamodb.eu-west-1.amazonaws.com", verify="/etc/ssl/ours.pem")._pool
    assert pool.ca_certs == "/etc/ssl/ours.pem"


def test_a_local_emulator_is_plain_http_on_its_port() -> None:
    pool = session("http://127.0.0.1:4566/")._pool
    assert isinstance(pool, AWSHTTPConnectionPool)
    assert not isinstance(pool, AWSHTTPSConnectionPool)
    assert (pool.host, pool.port) == ("127.0.0.1", 4566)


def test_without_credentials_nothing_is_sent() -> None:
    with pytest.raises(NoCredentialsError):
        session("http://127.0.0.1:9/").send("/", b"{}", {})
