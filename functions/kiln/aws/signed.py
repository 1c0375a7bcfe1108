"""One AWS request signed by botocore's own SigV4 signer and sent by botocore's own HTTP
session, without a botocore client.

A botocore client call spends most of its CPU in the client's machinery (its event hooks,
parameter validation, endpoint ruleset, serializer and retry handler), not in signing or
sending. On the public function's hot path (the runner invoke, the ledger entry, the catalog
version read) Kiln sends its requests as `SignedSession.send`: signed by `SigV4Auth` with the
session's credentials (frozen per request, so refreshed as the session refreshes them), sent
by botocore's `URLLib3Session` (its CA bundle, proxies from the environment as a client takes
them, timeouts, kept connections and connection errors). One attempt: what retries, and how,
is the caller's (`kiln.aws.invoke` never retries; `kiln.aws.items` retries as a client's
standard mode does).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.exceptions import NoCredentialsError
from botocore.httpsession import URLLib3Session
from botocore.utils import get_environ_proxies

if TYPE_CHECKING:
    from botocore.credentials import Credentials

SOCKET_OPTIONS = [
    (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),  # botocore's own
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),  # as the clients' tcp_keepalive
]
POOL_CONNECTIONS = 10  # botocore's default


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
        # botocore passes these shapes itself (its clients' Config); the stubs say otherwise.
        self._http = URLLib3Session(
            verify=True if verify is None else verify,  # type: ignore[arg-type]  # or a CA path
            proxies=get_environ_proxies(self.endpoint),
            timeout=(connect_timeout_s, read_timeout_s),  # type: ignore[arg-type]
            max_pool_connections=pool_connections,
            socket_options=SOCKET_OPTIONS,  # type: ignore[arg-type]
        )

    def send(self, path: str, body: bytes, headers: Mapping[str, str]) -> AWSResponse:
        """POST `body` to `path`, signed now; the answer whatever its status. Raises
        NoCredentialsError without credentials (nothing is sent), and botocore's connection
        errors (HTTPClientError, ConnectionError) when no answer came."""
        if self.credentials is None:
            raise NoCredentialsError()
        request = AWSRequest(
            method="POST", url=f"{self.endpoint}{path}", data=body, headers=dict(headers)
        )
        frozen = self.credentials.get_frozen_credentials()
        SigV4Auth(frozen, self.service, self.region).add_auth(request)
        return self._http.send(request.prepare())  # its body read: the connection is free
