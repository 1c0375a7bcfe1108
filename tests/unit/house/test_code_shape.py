"""The package keeps the shape the house rules ask for, so that it stays readable.

- no module in functions/kiln over 600 lines, and none over 500 without a one-line reason in
  LONG_MODULES (the cap finds modules that hold two ideas: split them by idea, never by
  trimming comments); no function over 60 lines (but the lists of settings and parser
  arguments named in LONG_LISTS);
- only the settings module reads the process environment (the runner's supervisor only
  replaces its own environment with the one it was given for the child);
- no `"jsonrpc"` string outside `protocol/`: every JSON-RPC body is written there
  (`kiln.protocol.errors.jsonrpc_error` for errors);
- only these modules at the top of the package: `__init__`, `settings`, `stack`, `process`,
  `lambda_handlers` and `errors` (everything else lives in a room).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "functions" / "kiln"
MAX_MODULE_LINES = 600
EXPLAINED_MODULE_LINES = 500  # past this, a module says why it is one idea (LONG_MODULES)
LONG_MODULES = {
    "accounting/ledger.py": "one table layout read and written: entries, their shards, their pages",
    "bundles/build.py": "one build, in order: install, compile, prune, zip; each step hands on",
    "bundles/cache.py": "one cache's life: fetch, unpack, seal, pin, evict share one lock",
    "bundles/store.py": "one record's life: its item, each status move (conditional), its files",
    "catalog/store.py": "one item layout, every write in a transaction with its reads",
    "runner/runner.py": "the server side of one run, its descriptors owned end to end",
    "runner/supervisor.py": "one forked process and its helper: nothing else may run there",
    "serving/backend.py": "the ToolBackend the protocol calls: visibility, admission, the run",
    "settings.py": "the one reader of the environment: every setting, typed and checked",
    "stack.py": "the composition root: every client and store is made here, most on first use",
}
MAX_FUNCTION_LINES = 60
# Lists of settings or parser arguments: long, flat, and read line by line.
LONG_LISTS = {"settings.py:from_env", "cli/main.py:build_parser"}
ENVIRONMENT_READERS = {"settings.py"}
# The supervisor sets the child's environ (reads nothing); kiln_tools runs in the tool's own
# process (the run's KILN_ANSWERS, KILN_CALLS, KILN_TALK_FD), never in the server.
CHILD_ENVIRONMENT = {"runner/supervisor.py", "runner/kiln_tools/__init__.py"}
ENVIRONMENT = re.compile(r"os\.environ|getenv")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_no_module_is_longer_than_600_lines() -> None:
    long = {
        name(path): lines
        for path in modules()
        if (lines := len(path.read_text("utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_module_is_longer_than_500_lines_without_a_reason() -> None:
    unexplained = {
        name(path): lines
        for path in modules()
        if (lines := len(path.read_text("utf-8").splitlines())) > EXPLAINED_MODULE_LINES
        and name(path) not in LONG_MODULES
    }
    assert unexplained == {}, "split it by idea, or say in LONG_MODULES why it is one"
    stale = {
        module
        for module in LONG_MODULES
        if len((PACKAGE / module).read_text("utf-8").splitlines()) <= EXPLAINED_MODULE_LINES
    }
    assert stale == set(), "these are 500 lines or fewer now: take them out of LONG_MODULES"


def test_no_function_is_longer_than_60_lines() -> None:
    long = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                where = f"{name(path)}:{node.name}"
                if lines > MAX_FUNCTION_LINES and where not in LONG_LISTS:
                    long[where] = lines
    assert long == {}


def test_only_the_settings_module_reads_the_environment() -> None:
    readers = {name(path) for path in modules() if ENVIRONMENT.search(path.read_text("utf-8"))}
    assert readers - CHILD_ENVIRONMENT == ENVIRONMENT_READERS


# process.py: the part of the composition root the runner function needs (no room of its own);
# errors.py: the one error type every room raises (it imports nothing of Kiln's, as starlette's
# and httpx's exception modules sit at their package top)
TOP_LEVEL = {
    "__init__.py",
    "settings.py",
    "stack.py",
    "process.py",
    "lambda_handlers.py",
    "errors.py",
}


def _jsonrpc_literals(path: Path) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Constant) and node.value == "jsonrpc"
    ]


def test_only_the_protocol_room_writes_jsonrpc_bodies() -> None:
    found = {
        name(path): lines
        for path in modules()
        if not name(path).startswith("protocol/") and (lines := _jsonrpc_literals(path))
    }
    assert found == {}


def test_the_package_top_holds_only_the_entry_modules() -> None:
    top = {path.name for path in PACKAGE.glob("*.py")}
    assert top <= TOP_LEVEL, f"move {sorted(top - TOP_LEVEL)} into a room"
