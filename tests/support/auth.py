"""A real OAuth issuer for tests: an RSA key pair and its JWKS served over loopback HTTP."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


@dataclass
class Issuer:
    url: str
    key: rsa.RSAPrivateKey
    kid: str
    jwks_url: str
    requests: list[str] = field(default_factory=list)

    def token(
        self,
        *,
        aud: str | list[str] | None,
        scope: str | None = "kiln:call",
        sub: str = "alice",
        expires_in: float = 300,
        iss: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {"iss": iss or self.url, "sub": sub, "iat": now}
        claims["exp"] = now + int(expires_in)
        if aud is not None:
            claims["aud"] = aud
        if scope is not None:
            claims["scope"] = scope
        claims.update(extra or {})
        return jwt.encode(
            claims, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid}
        )


def new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@contextmanager
def running_issuer() -> Iterator[Issuer]:
    key = new_rsa_key()
    kid = uuid.uuid4().hex[:8]
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid=kid, use="sig", alg="RS256")
    documents: dict[str, bytes] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = documents.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    documents["/jwks.json"] = json.dumps({"keys": [jwk]}).encode()
    documents["/.well-known/oauth-authorization-server"] = json.dumps(
        {"issuer": url, "jwks_uri": f"{url}/jwks.json"}
    ).encode()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Issuer(url, key, kid, f"{url}/jwks.json", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
