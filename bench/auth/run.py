"""What access control adds to a request: `tools/list` on /mcp, interleaved, per credential.

Run: python -m bench.auth.run [--rounds N]

One server (moto server and uvicorn in this process, OAuth mode on with a JWKS served on
loopback) answers `tools/list` with no credential (anonymous allowed: the baseline), the
static author key, a stored API key (cached after the first lookup), and an RS256 JWT
(JWKS cached after the first fetch). Requests are interleaved round by round; prints the
median per credential and its ratio to the anonymous baseline. Goal: at most 1.2x.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from moto.server import ThreadedMotoServer

from kiln.api.apps import create_app
from kiln.aws.clients import ensure_resources, make_clients
from kiln.identity.keys import KeyStore
from kiln.identity.settings import AuthSettings
from kiln.settings import Settings
from kiln.stack import build_kiln

BASE = "http://kiln.bench"
BODY = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def jwks_server(key: rsa.RSAPrivateKey) -> tuple[str, ThreadingHTTPServer]:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "bench", "alg": "RS256", "use": "sig"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    rounds = parser.parse_args().rounds
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request log
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table="kiln-bench", bucket="kiln-bench")
    signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer, jwks = jwks_server(signing)
    settings = Settings(
        table="kiln-bench",
        bucket="kiln-bench",
        endpoint_url=endpoint,
        region="us-east-1",
        public_anonymous=True,
        author_key="bench-static-author-key-0123456789",
        public_base_url=BASE,
        auth=AuthSettings(oauth_issuer=issuer, oauth_jwks_url=f"{issuer}/jwks.json"),
    )
    kiln = build_kiln(settings, clients=clients)
    _, stored = KeyStore(clients.dynamodb, table="kiln-bench").create("bench", "call")
    now = int(time.time())
    token = jwt.encode(
        {"iss": issuer, "aud": f"{BASE}/mcp", "exp": now + 3600, "scope": "kiln:call"},
        signing,
        algorithm="RS256",
        headers={"kid": "bench"},
    )
    app_port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(kiln),
            host="127.0.0.1",
            port=app_port,
            log_level="warning",
            lifespan="off",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("uvicorn did not start")
        time.sleep(0.01)
    credentials = {
        "anonymous": None,
        "static author key": settings.author_key,
        "stored API key": stored,
        "JWT (RS256)": token,
    }
    times: dict[str, list[float]] = {name: [] for name in credentials}
    url = f"http://127.0.0.1:{app_port}/mcp"
    try:
        with httpx.Client(timeout=30) as http:
            for name, credential in credentials.items():  # warm caches: key lookup, JWKS
                headers = dict(HEADERS)
                if credential:
                    headers["Authorization"] = f"Bearer {credential}"
                assert http.post(url, json=BODY, headers=headers).status_code == 200, name
            for _ in range(rounds):
                for name, credential in credentials.items():
                    headers = dict(HEADERS)
                    if credential:
                        headers["Authorization"] = f"Bearer {credential}"
                    start = time.perf_counter()
                    response = http.post(url, json=BODY, headers=headers)
                    times[name].append(time.perf_counter() - start)
                    assert response.status_code == 200, response.text
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        jwks.shutdown()
        moto.stop()
    baseline = statistics.median(times["anonymous"])
    print(f"tools/list on /mcp, {rounds} interleaved rounds")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:18} median {median * 1000:6.2f} ms  ratio {median / baseline:4.2f}x")


if __name__ == "__main__":
    main()
