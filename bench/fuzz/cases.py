"""Random hostile HTTP requests for Kiln: valid templates for /mcp and /api, then mutated.

Deterministic for a seed. Each case is (method, path, headers, body bytes); headers are bytes
so values outside ASCII can be sent. What is mutated, and how, follows what broke before:
lone UTF-16 surrogates in names, ids, methods, keys; odd HTTP methods and paths; over-long
or non-ASCII header values; bodies truncated, oversized, nested deep or not UTF-8.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass
from typing import Any

AUTHOR_KEY = "fuzz-author-key-0123456789"
LEGACY = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
MODERN = "2026-07-28"
TOOLS = ["add_vat", "word_stats", "test_simple_text", "pattern_tool", "bad_output", "nope"]

STRINGS: list[str] = [
    "",
    "a",
    "\udfff",
    "\ud800",
    "x\udfffy",
    "\ud83d\ude00",
    "\U0001f600",
    "\x00",
    "\u202e",
    "id:",
    "name:",
    "..",
    "../../etc/passwd",
    "%00",
    "%ff",
    "a" * 27 + "!",
    "A" * 70_000,
    "tools/call",
    "2026-07-28",
    "=?base64?////?=",
    "=?base64?" + base64.b64encode(b"add_vat").decode() + "?=",
    "\r\n",
    "${jndi:ldap://x}",
    "' OR '1'='1",
    "null",
    "ß" * 40,
]
SCALARS: list[Any] = [None, True, False, 0, -1, 1, 2**64, -(2**63), 1.5, 1e308, -0.0]
METHODS = ["POST"] * 16 + ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD", "BREW"]
MCP_PATHS = ["/mcp"] * 12 + ["/mcp/", "/mcp/x", "/admin/mcp", "/mcp?x=1", "/MCP", "/mcp/%ff"]
API_PATHS = [
    "/api/tools",
    "/api/tools/add_vat",
    "/api/tools/id:",
    "/api/tools/id:zzz",
    "/api/tools/%ED%BF%BF",
    "/api/tools/%ff",
    "/api/tools/add_vat/revisions",
    "/api/tools/add_vat/revisions/0",
    "/api/tools/add_vat/revisions/99999999999999999999",
    "/api/tools/add_vat/revisions/x",
    "/api/tools/add_vat/run",
    "/api/tools/fuzz_tool",
    "/api/health",
    "/api/nope",
    "/api/tools/add_vat/rename",
    "/api/tools/fuzz_tool/enable",
    "/api/tools/add_vat/revisions/1/restore",
]


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @property
    def is_mcp(self) -> bool:
        return self.path.lower().split("?")[0].rstrip("/").endswith("/mcp") or "/mcp/" in self.path


class Fuzzer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def string(self) -> str:
        return self.rng.choice(STRINGS) if self.rng.random() < 0.7 else self._random_text()

    def _random_text(self) -> str:
        return "".join(chr(self.rng.randrange(0, 0x11000)) for _ in range(self.rng.randrange(12)))

    def value(self, depth: int = 0) -> Any:
        roll = self.rng.random()
        if depth > 3 or roll < 0.4:
            return self.string() if self.rng.random() < 0.6 else self.rng.choice(SCALARS)
        if roll < 0.7:
            return [self.value(depth + 1) for _ in range(self.rng.randrange(4))]
        return {self.string(): self.value(depth + 1) for _ in range(self.rng.randrange(4))}

    def mutate(self, obj: Any, rate: float = 0.15) -> Any:
        """A copy of `obj` with some keys, values and types replaced."""
        if self.rng.random() < rate:
            return self.value()
        if isinstance(obj, dict):
            out = {}
            for key, item in obj.items():
                if self.rng.random() < rate / 3:
                    continue  # drop a field
                new_key = self.string() if self.rng.random() < rate / 3 else key
                out[new_key] = self.mutate(item, rate)
            if self.rng.random() < rate / 2:
                out[self.string()] = self.value()
            return out
        if isinstance(obj, list):
            return [self.mutate(item, rate) for item in obj]
        return obj

    def encode(self, obj: Any) -> bytes:
        roll = self.rng.random()
        if roll < 0.6:
            return json.dumps(obj, ensure_ascii=True).encode()
        text = json.dumps(obj, ensure_ascii=False)
        if roll < 0.9:
            return text.encode("utf-8", "surrogatepass")  # lone surrogates as CESU bytes
        raw = bytearray(text.encode("utf-8", "surrogatepass"))
        return self._damage(raw)

    def _damage(self, raw: bytearray) -> bytes:
        roll = self.rng.random()
        if roll < 0.3 and raw:
            return bytes(raw[: self.rng.randrange(len(raw))])
        if roll < 0.5:
            spot = self.rng.randrange(len(raw) + 1)
            return bytes(raw[:spot]) + bytes(self.rng.randrange(256) for _ in range(4)) + raw[spot:]
        if roll < 0.6:
            return b"[" * 100_000 + b"]" * 100_000
        if roll < 0.7:
            return b'{"a":' + b" " * 1_100_000 + b"1}"
        if roll < 0.8:
            return b'{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN}'
        return bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(64)))

    # -- MCP ---------------------------------------------------------------------------------

    def _message(self, modern: bool) -> dict[str, Any]:
        method = self.rng.choice(
            [
                *("tools/list", "tools/call", "tools/call", "ping", "initialize"),
                *("server/discover", "notifications/initialized", "resources/list"),
                self.string(),
            ]
        )
        params: dict[str, Any] = {}
        if method == "tools/call":
            params = {"name": self.rng.choice(TOOLS), "arguments": self._arguments()}
        elif method == "initialize":
            params = {
                "protocolVersion": self.rng.choice([*LEGACY, MODERN, "1999-01-01"]),
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"},
            }
        elif method == "tools/list" and self.rng.random() < 0.3:
            params = {"cursor": self.string()}
        if modern:
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
            }
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not method.startswith("notifications/"):
            message["id"] = self.rng.choice([1, "a", self.string(), 2**70, None, 1.5])
        return message

    def _arguments(self) -> Any:
        base = self.rng.choice(
            [{"net": 100}, {"net": 1, "rate": 5}, {"text": "a b c"}, {"s": "a" * 27 + "!"}, {}]
        )
        return self.mutate(base, 0.3) if self.rng.random() < 0.6 else base

    def mcp(self) -> Case:
        modern = self.rng.random() < 0.5
        message: Any = self._message(modern)
        if not modern and self.rng.random() < 0.08:
            message = [self._message(False) for _ in range(self.rng.randrange(0, 25))]
        message = self.mutate(message, 0.1)
        headers = [(b"content-type", b"application/json"), (b"accept", b"application/json")]
        if modern:
            method = message.get("method") if isinstance(message, dict) else None
            headers.append((b"mcp-protocol-version", MODERN.encode()))
            headers.append((b"mcp-method", str(method).encode("utf-8", "surrogatepass")))
            params = message.get("params") if isinstance(message, dict) else None
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str):
                encoded = base64.b64encode(name.encode("utf-8", "surrogatepass")).decode()
                headers.append((b"mcp-name", f"=?base64?{encoded}?=".encode()))
        else:
            headers.append((b"mcp-protocol-version", self.rng.choice(LEGACY).encode()))
        return Case(
            self._method(), self.rng.choice(MCP_PATHS), self._headers(headers), self.encode(message)
        )

    # -- REST --------------------------------------------------------------------------------

    def _tool_payload(self) -> dict[str, Any]:
        return {
            "name": self.rng.choice(["fuzz_tool", "fuzz_two", "add_vat", self.string()]),
            "description": "A tool the fuzzer saves.",
            "language": self.rng.choice(["python", "node", "cobol"]),
            "code": self.rng.choice(["print('hi')\n", "console.log('hi')\n", self.string()]),
            "input_schema": {
                "type": "object",
                "properties": {
                    "s": {
                        "type": "string",
                        "pattern": self.rng.choice(["^a+$", "(?=x)", "^(a+)+$", self.string()]),
                    }
                },
            },
            "requirements": self.rng.choice([[], ["requests==2.32.3"], [self.string()]]),
        }

    def api(self) -> Case:
        path = self.rng.choice(API_PATHS)
        if self.rng.random() < 0.2:
            path = "/api/tools/" + self.string().encode("utf-8", "surrogatepass").hex()[:20]
        body: Any
        if path.endswith("/run"):
            body = {"arguments": self._arguments()}
        elif path.endswith("/rename"):
            body = {"name": self.string()}
        else:
            body = self._tool_payload()
        body = self.mutate(body, 0.2)
        headers = [(b"content-type", b"application/json")]
        roll = self.rng.random()
        if roll < 0.85:
            headers.append((b"authorization", f"Bearer {AUTHOR_KEY}".encode()))
        elif roll < 0.95:
            headers.append((b"authorization", self.string().encode("utf-8", "surrogatepass")[:200]))
        if self.rng.random() < 0.2:
            headers.append((b"if-match", self.string().encode("utf-8", "surrogatepass")[:50]))
        method = self.rng.choice(["GET", "GET", "POST", "PUT", "DELETE", "PATCH", "TRACE"])
        if method != "GET":  # writes go to the fuzzer's own tools: the seeded ones must not change
            path = path.replace("add_vat", "fuzz_tool")
        return Case(method, path, self._headers(headers), self.encode(body))

    # -- shared ------------------------------------------------------------------------------

    def _method(self) -> str:
        return self.rng.choice(METHODS)

    def _headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        if self.rng.random() < 0.15:
            index = self.rng.randrange(len(headers))
            name, _ = headers[index]
            value = (
                self.string()
                .encode("utf-8", "surrogatepass")
                .replace(b"\r", b"")
                .replace(b"\n", b"")
            )
            headers[index] = (name, value.replace(b"\x00", b"")[:8000])
        if self.rng.random() < 0.05:
            headers.append((b"origin", b"https://evil.example"))
        if self.rng.random() < 0.05:
            headers = [(n, v) for n, v in headers if n != b"content-type"]
            headers.append(
                (
                    b"content-type",
                    self.rng.choice(
                        [
                            b"text/plain",
                            b"application/json; charset=latin-1",
                            b"application/jsonx",
                            b"",
                        ]
                    ),
                )
            )
        return headers

    def case(self) -> Case:
        return self.mcp() if self.rng.random() < 0.65 else self.api()
