"""A place a writing tool writes to that a test can read: an HTTP server on a loopback port
counting the POSTs each path gets (a tool's run posts once; its answer is the count so far).

`hold()` makes the next runs wait inside their POST until `release()` (a run still going),
and `hits` is set at each POST, so a test waits on it instead of sleeping.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The tool: posts its arguments' `label` to the tally and prints what the tally answered.
TOOL_CODE = """\
import json, sys, urllib.request
args = json.load(sys.stdin)
request = urllib.request.Request(args["url"] + "/" + args["label"], data=b"run", method="POST")
with urllib.request.urlopen(request, timeout=60) as answer:
    print(answer.read().decode())
"""
TOOL = {
    "name": "append_run",
    "description": "Records one run under a label and says how many runs it has.",
    "language": "python",
    "code": TOOL_CODE,
    "input_schema": {
        "type": "object",
        "properties": {
            "url": {"type": "string"},
            "label": {"type": "string"},
            "note": {"type": "string"},
        },
        "required": ["url", "label"],
    },
    "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
}


class Tally:
    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.hits = threading.Event()  # set at each POST (a test clears it first)
        self._open = threading.Event()
        self._open.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def runs(self, label: str) -> int:
        with self.lock:
            return self.counts[label]

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def _post(self, label: str) -> dict[str, Any]:
        with self.lock:
            self.counts[label] += 1
            count = self.counts[label]
        self.hits.set()
        self._open.wait(120)
        return {"label": label, "run": count}


@contextmanager
def tally() -> Iterator[Tally]:
    holder: list[Tally] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(holder[0]._post(self.path.strip("/"))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    holder.append(Tally(server))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        holder[0].release()
        server.shutdown()
        server.server_close()
