"""A small client for a Kiln server's REST API (what `kiln tools …` talks to)."""

from __future__ import annotations

import http.client
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from kiln.catalog.files import draft_from_tool_json, draft_payload
from kiln.catalog.model import Draft
from kiln.settings import LOCAL_URL, Settings

RETRYABLE = frozenset({502, 503, 504})


class ApiCallError(Exception):
    def __init__(self, status: int, message: str, *, retryable: bool = False) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        # The request may have reached the server and may work sent again (a timeout, a cut
        # connection, 502-504): safe to repeat only with an idempotency key.
        self.retryable = retryable


def connect(
    settings: Settings | None, *, url: str | None, key: str | None, state_dir: str | None
) -> KilnClient:
    """The server and key a command uses, found as every command finds them (kiln.cli.locate).

    Raises ServerNotFoundError saying where it looked when no server is named or running.
    """
    from kiln.cli.locate import find_server
    from kiln.settings import LocalSettings

    local = LocalSettings.from_env().with_state_dir(state_dir)
    target = find_server(local, url=url, key=key)
    return KilnClient(target.url, target.key, key_source=target.key_source)


class KilnClient:
    def __init__(
        self, base_url: str, key: str | None, *, timeout_s: float = 120.0, key_source: str = ""
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.timeout_s = timeout_s
        self.key_source = key_source  # said with a 401/403, so the user knows which key

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[Any, dict[str, str]]:
        data = None if body is None else json.dumps(body).encode()
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ApiCallError(
                0, f"--url: give a full http(s) URL such as {LOCAL_URL}, not {self.base_url!r}"
            )
        request = urllib.request.Request(  # noqa: S310  (scheme checked above)
            self.base_url + path, data=data, method=method
        )
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.key:
            request.add_header("Authorization", f"Bearer {self.key}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                raw, answer_headers = response.read(), dict(response.headers)
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                message = json.loads(raw)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = raw.decode("utf-8", "replace")[:500]
            if error.code in (401, 403) and self.key_source:
                message = f"{message} (sent {self.key_source})"
            raise ApiCallError(error.code, message, retryable=error.code in RETRYABLE) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ApiCallError(
                0,
                f"cannot reach {self.base_url} ({reason}); is the server running? (--url)",
                retryable=not isinstance(reason, ConnectionRefusedError),  # sent, maybe
            ) from None
        except (ValueError, http.client.HTTPException) as error:  # bad port, spaces, ...
            raise ApiCallError(0, f"--url: {error}") from None
        try:
            return json.loads(raw or b"null"), answer_headers
        except ValueError:
            raise ApiCallError(
                0, f"{self.base_url}{path} did not answer JSON; is --url a Kiln server?"
            ) from None

    def send_once(self, path: str, body: Any, key: str | None = None, *, attempts: int = 3) -> Any:
        """POST a run named by an idempotency key (a fresh one unless given); one that may
        have reached the server and failed on the way is sent again with the same key, so
        it runs at most once (kiln.protocol.idempotency)."""
        headers = {"Idempotency-Key": key or str(uuid.uuid4())}
        for attempt in range(1, attempts + 1):
            try:
                answer, _ = self.request("POST", path, body, headers)
            except ApiCallError as error:
                if not error.retryable or attempt == attempts:
                    raise
                print(f"kiln: {error}; sending it again with the same idempotency key "
                      f"({attempt + 1} of {attempts})", file=sys.stderr)  # fmt: skip
                time.sleep(0.5 * attempt)
                continue
            return answer
        raise AssertionError("unreachable")

    def tool(self, name: str) -> dict[str, Any] | None:
        try:
            body, _ = self.request("GET", f"/api/tools/{urllib.parse.quote(name)}")
        except ApiCallError as error:
            if error.status == 404:
                return None
            raise
        return dict(body)


def client_for(args: Any) -> KilnClient:
    """`connect` for a command's `--url`, `--key` and `--state-dir`."""
    settings = getattr(args, "settings", None)
    return connect(settings, url=args.url, key=args.key, state_dir=getattr(args, "state_dir", None))


class HttpTarget:
    """Pushes tool folders through a server's REST API (`kiln tools push`)."""

    def __init__(self, client: KilnClient, *, breaking: bool = False) -> None:
        self._client = client
        self._breaking = breaking  # saves a change that breaks the tool's clients

    def current(self, name: str) -> tuple[Draft, int] | None:
        body = self._client.tool(name)
        if body is None:
            return None
        return draft_from_tool_json(body, body["code"]), int(body["revision"])

    def create(self, draft: Draft) -> None:
        self._client.request("POST", "/api/tools", _payload(draft))

    def update(self, draft: Draft, revision: int) -> None:
        self._client.request(
            "PUT",
            f"/api/tools/{urllib.parse.quote(draft.name)}",
            {**_payload(draft), **({"breaking": True} if self._breaking else {})},
            headers={"If-Match": f'"{revision}"'},
        )


def _payload(draft: Draft) -> dict[str, Any]:
    return draft_payload(draft)
