"""The Lambda profile: Kiln's handlers run as Lambda runs them, under Lambda's restrictions.

`Environment` is one execution environment: the real runtime client (awslambdaric) running
a `kiln.lambda_handlers` handler inside `sandbox.py` (its own pid, mount and network
namespaces; one unprivileged uid, no capabilities; seccomp, Landlock, namespaces and ptrace
refused with EPERM; the code read-only; a 512 MB /tmp; the Runtime API on its own loopback
at 127.0.0.1:9001, served by a `RuntimeApi` stand-in outside).

`TenantInvoke` stands in for Lambda's Invoke API of a function created with tenant isolation
(`TenancyConfig: PER_TENANT`): `POST /2015-03-31/functions/NAME/invocations` with
`X-Amz-Tenant-Id` (refused without one). Each tenant id gets environments of its own, never
shared across tenants; an environment serves one invocation at a time (a busy tenant waits,
where Lambda would start another of its environments). An environment is handed an
invocation once its runtime asks for work again; one whose runtime exited instead (the
runner function ends its environment when a run left something it could not kill) is
replaced by a fresh one, as Lambda does (`ended` keeps the old ones).

What it does not simulate: Firecracker (a separate kernel per environment), freezing an
environment between invocations, Lambda's own network, cold-start timing. See the README.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import random
import secrets
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .runtime_api import Answer, RuntimeApi

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = Path(__file__).resolve().parent / "sandbox.py"
PYTHON = os.path.realpath(sys.executable)
RUNTIME_PORT = 9001
_uids = itertools.count(random.randrange(2_000_000, 3_000_000, 1000))


def python_home() -> str:
    """The interpreter's installation (under /root here: made reachable for another uid)."""
    return str(Path(PYTHON).resolve().parents[1])


def venv_site() -> list[str]:
    return [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]


# What Lambda sets for a function whose LoggingConfig says LogFormat JSON and an application log
# level (template.yaml): the runtime then writes stdlib logging records as JSON itself.
JSON_LOGS = {"runner": {"AWS_LAMBDA_LOG_FORMAT": "JSON", "AWS_LAMBDA_LOG_LEVEL": "INFO"}}


@dataclass
class Environment:
    """One sandboxed runtime serving `handler`; `invoke` hands it one event."""

    tmp: Path
    handler: str
    env: dict[str, str]
    stores: list[str] = field(default_factory=list)  # URLs it may reach (forwarded)
    tenant: str | None = None
    uid: int = field(default_factory=lambda: next(_uids))
    module: str = "kiln.lambda_handlers"  # `operator` with handler `is_`: a bare runtime

    def __post_init__(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.tap = self.tmp / "received.bin"
        self.output = self.tmp / "output.log"
        self.api = RuntimeApi().__enter__()
        self.lock = threading.Lock()
        host, port = self.api.address.split(":")
        forwards = [[RUNTIME_PORT, host, int(port)]]
        for url in self.stores:
            parts = urlsplit(url)
            forwards.append([parts.port, parts.hostname, parts.port])
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
            "PYTHONPATH": ":".join([str(ROOT / "functions"), *venv_site()]),
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{RUNTIME_PORT}",
            "AWS_LAMBDA_FUNCTION_NAME": f"kiln-profile-{self.handler}",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/kiln-profile-{self.handler}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "profile",
            "_HANDLER": f"{self.module}.{self.handler}",
            "AWS_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "kiln",
            "POWERTOOLS_METRICS_NAMESPACE": "Kiln",
            **JSON_LOGS.get(self.handler, {}),
            **self.env,
        }
        config = {
            "uid": self.uid,
            "tmp_mb": 512,
            "cwd": "/tmp",
            "forwards": forwards,
            "tap": str(self.tap),
            "reachable": [PYTHON, python_home()],
            "read_only": [str(ROOT), python_home(), "/usr", "/etc"],
            "argv": [PYTHON, "-m", "awslambdaric", f"{self.module}.{self.handler}"],
            "env": env,
        }
        (self.tmp / "config.json").write_text(json.dumps(config))
        with self.output.open("wb") as sink:
            self.process = subprocess.Popen(
                [PYTHON, str(SANDBOX)],
                stdin=subprocess.PIPE,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={"PYTHONPATH": str(ROOT / "functions"), "PATH": "/usr/sbin:/usr/bin:/bin"},
            )
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(config).encode())
        self.process.stdin.close()
        try:
            self.api.wait_ready(60, alive=self.alive)
        except BaseException:
            self.close()
            raise AssertionError(f"{self.handler} did not start:\n{self.log()}") from None

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.output.read_text(errors="replace")[-4000:]

    def asks_for_work(self) -> bool:
        """Wait until its runtime asks for the next invocation (True) or has exited (False)."""
        return self.api.wait_asked(30, alive=self.alive)

    def invoke(self, event: Any, *, timeout_s: float = 30.0) -> Answer:
        with self.lock:
            return self.api.invoke(
                event, timeout_s=timeout_s, alive=self.alive, tenant_id=self.tenant
            )

    def processes(self) -> list[int]:
        """Live processes of this environment's uid (seen from outside: every namespace)."""
        from kiln.runner.processes import processes_of_uids

        return processes_of_uids(self.uid, self.uid + 1)

    def close(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=10)
        self.api.__exit__(None, None, None)


class TenantInvoke:
    """Lambda's Invoke API for one tenant-isolated function, on 127.0.0.1."""

    def __init__(self, tmp: Path, handler: str, env: dict[str, str], stores: list[str]) -> None:
        self.tmp, self.handler, self.env, self.stores = tmp, handler, env, stores
        self.environments: dict[str, Environment] = {}
        self.ended: list[Environment] = []  # environments whose runtime exited, replaced
        self.served: list[tuple[str, int]] = []  # (tenant, environment uid) per invocation
        # Asynchronous invocations (InvocationType Event) as Lambda answers them: 202 at once,
        # then run; each one's (tenant, event, answer) once answered. `refuse_events` answers
        # them 429, as a throttled function does.
        self.asked: list[tuple[str, Any]] = []  # (tenant, event) of each, as it came
        self.events: list[tuple[str, Any, Any]] = []
        self.events_done = threading.Condition()
        self.refuse_events = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def environment(self, tenant: str) -> Environment:
        with self._lock:
            found = self.environments.get(tenant)
        if found is not None and found.asks_for_work():
            return found
        with self._lock:
            if found is not None and self.environments.get(tenant) is found:
                found.close()  # its runtime exited: Lambda starts a fresh environment
                self.ended.append(found)
                del self.environments[tenant]
            current = self.environments.get(tenant)
            if current is None:
                current = Environment(
                    self.tmp / f"tenant-{len(self.environments) + len(self.ended)}",
                    self.handler,
                    self.env,
                    self.stores,
                    tenant=tenant,
                )
                self.environments[tenant] = current
            return current

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for environment in [*self.environments.values(), *self.ended]:
            environment.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: with Nagle's algorithm the body waits for the
            # peer's delayed ACK (~40 ms on a kept-alive connection), which Lambda's own
            # services (Go, TCP_NODELAY by default) never add.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                tenant = self.headers.get("X-Amz-Tenant-Id")
                if not tenant:
                    self._reply(400, {"Type": "User", "message": "TenantId is required"})
                    return
                if self.headers.get("X-Amz-Invocation-Type") == "Event":
                    self._event(tenant, json.loads(body))
                    return
                environment = stand_in.environment(tenant)
                answer = environment.invoke(json.loads(body), timeout_s=60)
                stand_in.served.append((tenant, environment.uid))
                error = {"X-Amz-Function-Error": "Unhandled"} if answer.kind == "error" else {}
                self._reply(200, answer.payload, error)

            def _event(self, tenant: str, event: Any) -> None:
                stand_in.asked.append((tenant, event))
                if stand_in.refuse_events:
                    self._reply(429, {"Type": "User", "message": "Rate Exceeded."})
                    return
                self._reply(202, None)

                def run() -> None:
                    environment = stand_in.environment(tenant)
                    answer = environment.invoke(event, timeout_s=60)
                    with stand_in.events_done:
                        stand_in.served.append((tenant, environment.uid))
                        stand_in.events.append((tenant, event, answer.payload))
                        stand_in.events_done.notify_all()

                threading.Thread(target=run, daemon=True).start()

            def _reply(self, status: int, payload: Any, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


@contextlib.contextmanager
def admin_function(tmp: Path, runners: TenantInvoke) -> Iterator[tuple[Environment, str]]:
    """The admin function (the authors' REST API) sending its test runs to `runners`, and its
    author key."""
    tmp.chmod(0o755)
    author_key = "kiln_author_" + secrets.token_hex(16)
    hop = {"KILN_RUNNER_FUNCTION": "kiln-runner", "KILN_RUNNER_ENDPOINT_URL": runners.url}
    env = {**runners.env, "KILN_AUTHOR_KEY": author_key, **hop}
    admin = Environment(tmp / "admin", "admin", env, [*runners.stores, runners.url])
    try:
        yield admin, author_key
    finally:
        admin.close()


@contextlib.contextmanager
def lambda_stack(
    tmp: Path,
    moto_endpoint: str,
    table: str,
    bucket: str,
    *,
    tenant: str = "tool",
    runtime_secret: str = "",
    runner_env: dict[str, str] | None = None,
    mcp_env: dict[str, str] | None = None,
    reachable: tuple[str, ...] = (),
) -> Iterator[tuple[Environment, TenantInvoke]]:
    """The public `mcp` function and its tenant-isolated runner function, both sandboxed.

    `runtime_secret` is put in both functions' environment (as a ledger key): a secret of
    the runtime's that a test can look for. `runner_env` adds to the runner function's,
    `mcp_env` to the public function's. `reachable`: more URLs both may reach (an OAuth
    issuer, KMS, a test's own listener).
    """
    store_env = {
        "KILN_LEDGER_DIGEST_KEY": runtime_secret,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": moto_endpoint,
        "KILN_TABLE": table,
        "KILN_BUCKET": bucket,
    }
    runners = TenantInvoke(
        tmp / "runner", "runner", {**store_env, **(runner_env or {})}, [moto_endpoint, *reachable]
    )
    mcp = None
    try:
        mcp = Environment(
            tmp / "mcp",
            "mcp",
            {
                **store_env,
                "KILN_PUBLIC_ANONYMOUS": "true",
                "KILN_RUNNER_FUNCTION": "kiln-runner",
                "KILN_RUNNER_TENANT": tenant,
                "KILN_RUNNER_ENDPOINT_URL": runners.url,
                **(mcp_env or {}),
            },
            [moto_endpoint, runners.url, *reachable],
        )
        yield mcp, runners
    finally:
        if mcp is not None:
            mcp.close()
        runners.close()


# The bundle the profile's bundle tools use (and bench/runner/new_tenant.py): one module.
TARGET = "lambda-python3.13-x86_64"
REQUIREMENTS = ["sharedmod==1.0"]


def ready_bundle(clients: Any, table: str, bucket: str) -> None:
    """The bundle both bundle tools use, ready in the store: one module, VALUE = original."""
    from kiln.bundles.store import BundleStore

    store = BundleStore(clients.dynamodb, clients.s3, table=table, bucket=bucket)
    record = store.ensure("python", TARGET, REQUIREMENTS)
    assert record is not None
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("shared_mod.py", "VALUE = 'original'\n")
    body = data.getvalue()
    clients.s3.put_object(Bucket=bucket, Key=record.zip_key, Body=body)
    store.mark_building(record.id)
    store.mark_ready(record.id, {"zip_size": len(body), "unpacked_size": 20, "file_count": 1,
                                 "zip_sha256": hashlib.sha256(body).hexdigest()})  # fmt: skip
