"""A real OAuth 2.1 / OpenID Connect provider for the connections tests: `oidc-provider` (the
certified npm package) run by `tests/support/oidc/provider.mjs` on 127.0.0.1 and a free port.
It stops when its standard input closes, so it never outlives the test process.

`tests/run` installs it (`npm ci --prefix tests/support/oidc`); `OidcProvider.consent` plays
the person at the consent page by plain HTTP (a browser test drives the same page).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent / "oidc"


@dataclass
class OidcProvider:
    issuer: str
    log: Path
    process: subprocess.Popen[bytes]
    clients: dict[str, str] = field(default_factory=dict)

    def tail(self) -> str:
        return self.log.read_text("utf-8", "replace")[-3000:]

    def register(
        self, redirect_uri: str, *, trust: tuple[str, str] | None = None
    ) -> tuple[str, str]:
        """A new confidential client allowed exactly this redirect URI: (id, secret). With
        `trust` (issuer, jwks_uri), it may also exchange that IdP's access tokens (RFC 8693)."""
        client_id = f"kiln-{secrets.token_hex(4)}"
        client_secret = secrets.token_urlsafe(24)
        body: dict[str, Any] = {
            "client_id": client_id,
            "client_secret": client_secret,
            "redirect_uris": [redirect_uri],
        }
        if trust is not None:
            body["trust"] = {"issuer": trust[0], "jwks_uri": trust[1]}
        answer = httpx.post(f"{self.issuer}/test/clients", json=body, timeout=10)
        assert answer.status_code == 201, f"{answer.status_code} {answer.text}\n{self.tail()}"
        self.clients[client_id] = client_secret
        return client_id, client_secret

    def consent(
        self, http: httpx.Client, authorize_url: str, *, user: str, decision: str = "allow"
    ) -> httpx.URL:
        """Follow the authorize URL to the consent page, answer it as `user`, and return where
        the provider sends the browser back (the client's redirect URI with code or error),
        without following it."""
        answer = http.get(authorize_url, follow_redirects=False)
        for _ in range(10):
            if answer.status_code not in (302, 303):
                break
            target = answer.next_request.url if answer.next_request else None
            assert target is not None, answer.headers
            if not str(target).startswith(self.issuer):
                return target
            if target.path.startswith("/interaction/"):
                page = http.get(target)
                assert page.status_code == 200, f"{page.status_code} {page.text}\n{self.tail()}"
                answer = http.post(target, data={"user": user, "decision": decision})
            else:
                answer = http.get(target)
        raise AssertionError(
            "the provider did not send the browser back: "
            f"{answer.status_code} {answer.text[:500]}\n{self.tail()}"
        )

    def exchanges(self) -> dict[str, int]:
        """How many tokens each subject got by token exchange."""
        answer = httpx.get(f"{self.issuer}/test/exchanges", timeout=10)
        assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{self.tail()}"
        return dict(answer.json())

    def whoami(self, token: str) -> dict[str, Any]:
        answer = httpx.get(
            f"{self.issuer}/test/whoami", headers={"Authorization": f"Bearer {token}"}
        )
        return {"status": answer.status_code, **answer.json()}


def through_connect_page(
    provider: OidcProvider, link: str, user: str, tail: str = ""
) -> httpx.Response:
    """A person's browser on Kiln's `/connect/<state>` page (`link`): it loads the page, posts
    its Connect button, consents at `provider` as `user` and follows the way back to Kiln's
    callback, whose answer it returns. `tail`: said when the post is refused."""
    import re

    with httpx.Client(timeout=30) as browser:
        page = browser.get(link)
        assert page.status_code == 200, page.text
        token = re.search(r'name=token value="([^"]+)"', page.text)
        assert token, page.text
        go = browser.post(link, data={"token": token.group(1)})
        assert go.status_code == 303, f"{go.text}\n{tail}"
        back = provider.consent(browser, go.headers["location"], user=user)
        return browser.get(str(back))


def query(url: httpx.URL | str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(str(url)).query))


def installed() -> Path:
    """The provider's script, its npm dependencies there (tests/run installs them)."""
    if not (HERE / "node_modules" / "oidc-provider").is_dir():
        raise AssertionError(
            f"oidc-provider is not installed in {HERE}: "
            f"run `npm ci --prefix {HERE}` (tests/run does)"
        )
    return HERE / "provider.mjs"


@contextmanager
def oidc_provider(*, access_ttl: int = 3600) -> Iterator[OidcProvider]:
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the local OAuth provider"
    script = installed()
    with tempfile.TemporaryDirectory(prefix="kiln-oidc-") as folder:
        log = Path(folder) / "provider.log"
        with log.open("wb") as err:
            process = subprocess.Popen(
                [node, str(script), json.dumps({"access_ttl": access_ttl})],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=HERE,
            )
        assert process.stdout is not None
        assert process.stdin is not None
        line: list[bytes] = []
        reader = threading.Thread(
            target=lambda: line.append(process.stdout.readline()), daemon=True
        )
        reader.start()
        reader.join(30)
        try:
            assert line[0] if line else b"", (
                f"the provider did not start:\n{log.read_text('utf-8', 'replace')}"
            )
            provider = OidcProvider(json.loads(line[0])["issuer"], log, process)
            yield provider
        finally:
            process.stdin.close()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()
