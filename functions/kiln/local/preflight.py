"""What `kiln dev` checks before it prints anything: the port is free, Node.js is there."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

from kiln.local.state import running_server


class PortBusyError(OSError):
    """The port is taken; the message says by whom when Kiln knows, and how to pick another."""


def bind_port(host: str, port: int, state_dir: Path) -> socket.socket:
    """A listening-ready socket bound to host:port, taken before anything else starts.

    Binding first (and handing the socket to uvicorn) means a busy port is reported before
    a line is printed or a key made, and nobody can take the port between check and serve.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise PortBusyError(f"--host {host}: not an address this machine has ({error})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise PortBusyError(_busy_message(host, port, state_dir)) from None
        raise PortBusyError(f"cannot listen on {host}:{port} ({error.strerror})") from None
    sock.set_inheritable(True)
    return sock


def _busy_message(host: str, port: int, state_dir: Path) -> str:
    running = running_server(state_dir)
    if running is not None and running.endswith(f":{port}"):
        return (
            f"port {port} is in use: kiln dev is already running at {running} for {state_dir}; "
            "use that one, or stop it first"
        )
    if _answers_as_kiln(host, port):
        return (
            f"port {port} on {host} is in use by another kiln dev (another state directory "
            f"than {state_dir}); stop it, or choose another port: kiln dev --port {port + 1}"
        )
    return (
        f"port {port} on {host} is already in use by another program; "
        f"stop it, or choose another port: kiln dev --port {port + 1}"
    )


def _answers_as_kiln(host: str, port: int) -> bool:
    """Whether the program on the port answers /api/health as Kiln does."""
    import json
    import urllib.request

    where = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    where = f"[{where}]" if ":" in where else where
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: direct
    try:
        with opener.open(f"http://{where}:{port}/api/health", timeout=2) as answer:
            body = json.loads(answer.read(4096))
    except (OSError, ValueError):
        return False
    return isinstance(body, dict) and body.get("ok") is True and "version" in body


def node_warning(configured: str | None) -> str | None:
    """None when Node tools can run here, else the line that says why not and how to fix it.

    It looks where the runner will (KILN_NODE_BINARY, the wheel, the layer, PATH), so the
    message names the setting the user gave.
    """
    from kiln.runner.errors import NodeUnavailableError
    from kiln.runner.nodejs import find_node

    try:
        find_node(Path(configured) if configured else None)
    except NodeUnavailableError as error:
        return f"warning: Node tools will fail here. {error}. Python tools work."
    return None
