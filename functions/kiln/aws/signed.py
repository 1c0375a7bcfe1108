"""One AWS request signed by botocore's own SigV4 signer and sent as botocore's HTTP session
sends it, without a botocore client.

A botocore client call spends most of its CPU in the client's machinery (its event hooks,
parameter validation, endpoint ruleset, serializer and retry handler), not in signing or
sending. On the public function's hot path (the runner invoke, the ledger entry, the catalog
version read) Kiln sends its requests as `SignedSession.send`: signed by `SigV4Auth` with the
session's credentials (frozen per request, so refreshed as the session refreshes them), and
sent as botocore's `URLLib3Session.send` sends them (its connection pool classes, TLS context
and CA bundle, timeouts, `urlopen` arguments, and its translation of urllib3's errors into
botocore's), to the one endpoint's pool made at the start: the session looks up a pool, a
proxy and a certificate setting for every request (with them, the public function's ledger
write and runner invoke took 0.1-0.2 ms more CPU each, in-process, 2026-12-04). Where the
environment names a proxy for the endpoint, botocore's `URLLib3Session` itself sends (it
speaks to proxies). One attempt: what retries, and how, is the caller's (`kiln.aws.invoke`
never retries; `kiln.aws.items` retries as a client's standard mode does).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import (
    AWSHTTPConnectionPool,
    AWSHTTPSConnectionPool,
    AWSPreparedRequest,
    AWSRequest,
    AWSResponse,
)
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import URLLib3Session, create_urllib3_context, get_cert_path
from botocore.utils import get_environ_proxies
from urllib3 import Timeout
from urllib3.exceptions import ConnectTimeoutError as URLLib3ConnectTimeoutError
from urllib3.exceptions import NewConnectionError, ProtocolError
from urllib3.exceptions import ReadTimeoutError as URLLib3ReadTimeoutError
from urllib3.exceptions import SSLError as URLLib3SSLError
from urllib3.util.retry import Retry
from urllib3.util.url import parse_url

if TYPE_CHECKING:
    from botocore.credentials import Credentials

SOCKET_OPTIONS = [
    (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),  # botocore's own
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),  # as the clients' tcp_keepalive
]
POOL_CONNECTIONS = 10  # botocore's default
NO_RETRY = Retry(False)  # as botocore sends: never urllib3's retries or redirects


class SignedSession:
    """Requests to one service's endpoint, each signed for `service` in `region`."""

    def __init__(
        self,
        credentials: Credentials | None,
        region: str,
        service: str,
        endpoint: str,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        pool_connections: int = POOL_CONNECTIONS,
        verify: str | bool | None = None,
    ) -> None:
        self.credentials = credentials
        self.region = region
        self.service = service
        self.endpoint = endpoint.rstrip("/")
        timeout = Timeout(connect=connect_timeout_s, read=read_timeout_s)
        verify = True if verify is None else verify
        proxies = get_environ_proxies(self.endpoint)
        self._proxied: URLLib3Session | None = None
        self._pool: Any = None
        if proxies:  # botocore's session speaks to the proxy
            # botocore passes these shapes itself (its clients' Config); the stubs say otherwise.
            self._proxied = URLLib3Session(
                verify=verify,  # type: ignore[arg-type]  # or a CA bundle's path
                proxies=proxies,
                timeout=(connect_timeout_s, read_timeout_s),  # type: ignore[arg-type]
                max_pool_connections=pool_connections,
                socket_options=SOCKET_OPTIONS,  # type: ignore[arg-type]
            )
        else:
            self._pool = _pool(self.endpoint, verify, timeout, pool_connections)

    def send(self, path: str, body: bytes, headers: Mapping[str, str]) -> AWSResponse:
        """POST `body` to `path`, signed now; the answer whatever its status, its body read.
        Raises NoCredentialsError without credentials (nothing is sent), and botocore's
        connection errors (HTTPClientError, ConnectionError) when no answer came."""
        if self.credentials is None:
            raise NoCredentialsError()
        url = f"{self.endpoint}{path}"
        request = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
        frozen = self.credentials.get_frozen_credentials()
        SigV4Auth(frozen, self.service, self.region).add_auth(request)
        prepared = request.prepare()
        if self._proxied is not None:
            return self._proxied.send(prepared)
        return _sent(self._pool, path, prepared)


def _pool(endpoint: str, verify: str | bool, timeout: Timeout, size: int) -> Any:
    """The endpoint's connection pool, as botocore's session makes and sets up one."""
    url = parse_url(endpoint)
    if not url.host:
        raise ValueError(f"an endpoint URL without a host: {endpoint!r}")
    options: dict[str, Any] = {"maxsize": size, "timeout": timeout,
                               "socket_options": SOCKET_OPTIONS}  # fmt: skip
    if url.scheme != "https":
        return AWSHTTPConnectionPool(url.host, url.port or 80, **options)
    return AWSHTTPSConnectionPool(
        url.host, url.port or 443, ssl_context=create_urllib3_context(),
        cert_reqs="CERT_REQUIRED" if verify else "CERT_NONE",
        ca_certs=get_cert_path(verify) if verify else None,  # type: ignore[arg-type]  # or a path
        **options,
    )  # fmt: skip


def _sent(pool: Any, path: str, request: AWSPreparedRequest) -> AWSResponse:
    """`URLLib3Session.send` to a known pool: the same `urlopen` and the same errors."""
    try:
        raw = pool.urlopen(
            method="POST", url=path, body=request.body, headers=request.headers,
            retries=NO_RETRY, assert_same_host=False, preload_content=False,
            decode_content=False, enforce_content_length=False,
        )  # fmt: skip
        response = AWSResponse(request.url, raw.status, raw.headers, raw)
        response.content  # noqa: B018 -- read now, as botocore does: the connection is free
        return response
    except URLLib3SSLError as e:
        raise SSLError(endpoint_url=request.url, error=e) from e
    except (NewConnectionError, socket.gaierror) as e:
        raise EndpointConnectionError(endpoint_url=request.url, error=e) from e
    except URLLib3ConnectTimeoutError as e:
        raise ConnectTimeoutError(endpoint_url=request.url, error=e) from e
    except URLLib3ReadTimeoutError as e:
        raise ReadTimeoutError(endpoint_url=request.url, error=e) from e
    except ProtocolError as e:
        raise ConnectionClosedError(error=e, request=request, endpoint_url=request.url) from e
    except CancelledError:
        raise
    except Exception as e:
        raise HTTPClientError(error=e) from e
