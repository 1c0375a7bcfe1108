"""A three-step job (look up, convert, format) by one `execute` vs three direct calls.

Run: python -m bench.codemode.run [--rounds N] [--more M]

A real `kiln dev` serves the three tools of `tools.py` through two views of the same tools:
`billing` (list mode) and `coder` (code mode); `--more M` adds M of bench/discovery's generated
tools to both (a large view). The official MCP Python SDK's client (in its own venv,
`bench/protocol/sdk.py`; `sdk_client.py`) does the job both ways on the 2025-11-25 wire: three
`tools/call`s as a model makes them, each from the last one's result, and one `execute` whose
code makes the same three calls. It prints, in bytes and tiktoken `o200k_base` tokens, what
enters the model's context in each arm, the ratio code/direct (goal: at most 1/3, printed PASS
or FAIL) for one job in a fresh session and for the job alone, and the wall time of each arm
(median of `--rounds` rounds after a warm-up, both arms in every round against the same
server, alternating which goes first) with its ratio.

What counts as seen by the model:
- direct: `tools/list` of the view (every page; the tool definitions as the SDK returns them);
  each call the model writes (`{"name", "arguments"}`); each result's text content.
- code: `tools/list` of the code view: for a view of at most 20 tools `execute` alone, whose
  text names every function with its arguments and returned fields; for a larger one
  search_tools, describe_tools and execute, and the discovery that tells the model the tools'
  names, arguments and output fields: one `search_tools` for the job (and one per step it
  missed) and one `describe_tools` of the three, each call and its result's text; then the
  `execute` call with its code; its result's text (what the code printed).
- "the job alone" leaves the definitions and the discovery out of both arms: a session reads
  them once, however many jobs it does.
A result is counted by its text content, which is what a host puts in the model's context:
Kiln's text block of a tool with an output schema is the JSON of its structuredContent, so
counting both would count the same record twice (printed apart: `as the SDK returns them`).
The wall time is the tool side only: the model's turns between the direct calls (two more
than code mode's) are not in it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.codemode.tools import write_folders
from bench.discovery.run import o200k
from bench.protocol.sdk import python as sdk_python
from tests.support.devserver import kiln_dev

ROOT = Path(__file__).resolve().parents[2]
GOAL = 1 / 3


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def texts(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result.get("content", []))


class Counter:
    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding

    def __call__(self, *parts: str) -> tuple[int, int]:
        return (
            sum(len(p.encode()) for p in parts),
            sum(len(self.encoding.encode(p, disallowed_special=())) for p in parts),
        )


def parts(seen: list[dict[str, Any]], full: bool = False) -> tuple[list[str], list[str]]:
    """The calls a model writes and the results it reads (text, or the whole result)."""
    calls = [compact(step["call"]) for step in seen]
    results = [compact(step["result"]) if full else texts(step["result"]) for step in seen]
    return calls, results


def run_arms(url: str, rounds: int) -> dict[str, Any]:
    sdk = sdk_python()
    done = subprocess.run(
        [str(sdk), "-m", "bench.codemode.sdk_client", url, str(rounds)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the SDK client failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def report(out: dict[str, Any], count: Counter) -> dict[str, Any]:
    seen = out["seen"]
    direct_calls, direct_results = parts(seen["direct"])
    code_calls, code_results = parts(seen["code"])
    found_calls, found_results = parts(seen["discovery"])
    rows = {
        "definitions": (
            count(compact(seen["direct_list"])),
            count(compact(seen["code_list"]), *found_calls, *found_results),
        ),
        "calls written": (count(*direct_calls), count(*code_calls)),
        "results read": (count(*direct_results), count(*code_results)),
    }
    total = tuple(tuple(sum(r[arm][i] for r in rows.values()) for i in (0, 1)) for arm in (0, 1))
    print(f"what the model sees ({out['protocol']} wire, bytes / o200k_base tokens):")
    print(f"  {'':<16}{'direct: 3 calls':>22}{'code: 1 execute':>22}")
    for name, (d, c) in [*rows.items(), ("total", total)]:
        print(f"  {name:<16}{d[0]:>12,} / {d[1]:>6,}{c[0]:>12,} / {c[1]:>6,}")
    ratio = (total[1][0] / total[0][0], total[1][1] / total[0][1])
    verdict = "PASS" if max(ratio) <= GOAL else "FAIL"
    print(f"one job in a fresh session, code/direct: bytes 1/{1 / ratio[0]:.1f}, tokens "
          f"1/{1 / ratio[1]:.1f} (goal at most 1/3): {verdict}")  # fmt: skip
    job = tuple(
        tuple(rows["calls written"][arm][i] + rows["results read"][arm][i] for i in (0, 1))
        for arm in (0, 1)
    )
    job_ratio = tuple(job[1][i] / job[0][i] for i in (0, 1))
    print(f"the job alone (definitions left out, paid once a session): direct {job[0][0]:,} "
          f"/ {job[0][1]:,}, code {job[1][0]:,} / {job[1][1]:,}: bytes 1/"
          f"{1 / job_ratio[0]:.1f}, tokens 1/{1 / job_ratio[1]:.1f}: "
          f"{'PASS' if max(job_ratio) <= GOAL else 'FAIL'}")  # fmt: skip
    fixed = [rows["definitions"][arm] for arm in (0, 1)]
    jobs = next(
        (n for n in range(1, 1000) if all(
            fixed[1][i] + n * job[1][i] <= GOAL * (fixed[0][i] + n * job[0][i]) for i in (0, 1)
        )),
        None,
    )  # fmt: skip
    print(f"jobs like this one in a session (definitions read once) until code is at most "
          f"1/3 of direct in bytes and tokens: {jobs or 'never'}")  # fmt: skip
    full = [count(*parts(seen[arm], full=True)[1]) for arm in ("direct", "code")]
    print(f"results as the SDK returns them (content and structuredContent): direct "
          f"{full[0][0]:,} / {full[0][1]:,}, code {full[1][0]:,} / {full[1][1]:,}")  # fmt: skip
    return {"total": total, "ratio": ratio, "verdict": verdict}


def timing(out: dict[str, Any]) -> dict[str, float]:
    medians = {arm: statistics.median(s) * 1000 for arm, s in out["seconds"].items()}
    rounds = len(out["seconds"]["direct"])
    print(f"wall time, median of {rounds} rounds after a warm-up (tool side only: a model's "
          f"turns between the direct calls are not in it): direct 3 calls "
          f"{medians['direct']:.0f} ms, code 1 execute {medians['code']:.0f} ms "
          f"({medians['code'] / medians['direct']:.2f}x)")  # fmt: skip
    print(f"an execute that calls nothing (one run of its code): {medians['bare']:.0f} ms; the "
          f"job's execute runs its code 4 times (it ends at each call not yet answered: one "
          f"round per call, the three calls depending each on the last) and the 3 tools once "
          f"each")  # fmt: skip
    for arm, seconds in out["seconds"].items():
        print(f"  {arm}: " + ", ".join(f"{s * 1000:.0f}" for s in seconds) + " ms")
    return medians


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after a warm-up")
    parser.add_argument("--more", type=int, default=0,
                        help="generated tools (bench/discovery) added to both views")  # fmt: skip
    args = parser.parse_args(argv)
    print(f"load average: {os.getloadavg()[0]:.2f}")
    count = Counter(o200k())
    with tempfile.TemporaryDirectory(prefix="kiln-bench-codemode-") as tmp:
        root = Path(tmp)
        write_folders(root / "tools", args.more)
        started = time.perf_counter()
        with kiln_dev(root / "state", "--no-examples", "--tools", str(root / "tools")) as dev:
            print(f"kiln dev up with {args.more + 3} tools in both views in "
                  f"{time.perf_counter() - started:.1f} s")  # fmt: skip
            out = run_arms(dev.url, args.rounds)
    answers = out["answers"]
    print(f"answers: direct {answers['direct']!r}, code {answers['code']!r}; found by "
          f"search: {out['found']}")  # fmt: skip
    if answers["direct"] != answers["code"]:
        raise SystemExit("the two arms answered differently")
    return {**report(out, count), "medians": timing(out), "answers": answers}


if __name__ == "__main__":
    main()
