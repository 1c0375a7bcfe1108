"""Call other Kiln tools from a tool's script: `from kiln_tools import tools`.

Every run finds this package beside its script (the runner writes it there; nothing to
install). A call reads as a function call and returns the other tool's result:

    from kiln_tools import tools, ToolCallError

    rate = tools.fx_rate(from_="GBP", to="JPY")     # a trailing "_" is dropped: from_ -> from
    text = tools["fx-rate"](to="JPY")               # a name that is not an identifier
    same = tools.call("fx_rate", {"from": "GBP"})   # name and arguments as data
    a, b = tools.gather(("fx_rate", {"from": "GBP"}), ("fx_rate", {"from": "EUR"}))  # one round

Underneath it is a question on the talk channel (kiln/runner/TALKING.md, "Calling tools"):
the n-th call of a run has the key `call:<n>:<12 hex of sha256(name + canonical JSON of the
arguments)>`. With its answer in `KILN_ANSWERS` the call returns it at once; without, it
writes `{"ask": key, "call": {"name": ..., "arguments": ...}}` and ends the run (exit 0,
at once, past any `try`), and Kiln runs the script again from the top with the answer.

Standard library only: it runs in the tool's own process, as the tool.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["ToolCallError", "call_key", "tools"]

NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9_-]{0,62}")


class ToolCallError(Exception):
    """The called tool failed or was refused: `str(error)` is its text, `.result` the whole
    MCP result (`{"content": [...], "isError": true}`), `.name` the tool's name."""

    def __init__(self, name: str, result: Mapping[str, Any]) -> None:
        super().__init__(_text(result) or f"the tool {name!r} failed without a message")
        self.name = name
        self.result = result


def canonical(arguments: Mapping[str, Any]) -> str:
    """The arguments as the key hashes them: sorted keys, no spaces, UTF-8 as is."""
    try:
        return json.dumps(
            arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise TypeError(f"a tool's arguments must be JSON data: {error}") from None


def call_key(n: int, name: str, arguments: Mapping[str, Any]) -> str:
    """The key of the n-th call (from 1) of a run."""
    digest = hashlib.sha256((name + canonical(arguments)).encode("utf-8", "surrogatepass"))
    return f"call:{n}:{digest.hexdigest()[:12]}"


def value_of(result: Mapping[str, Any]) -> Any:
    """What a call returns: `structuredContent` when present, else the text of a single text
    block (parsed as JSON when it parses), else the list of content blocks."""
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    blocks = result.get("content") or []
    if len(blocks) == 1 and isinstance(blocks[0], dict) and blocks[0].get("type") == "text":
        text = blocks[0].get("text", "")
        try:
            return json.loads(text, parse_constant=_not_json)
        except ValueError:
            return text
    return list(blocks)


def _not_json(constant: str) -> NoReturn:
    raise ValueError(constant)  # NaN and Infinity are text, not numbers


def _text(result: Mapping[str, Any]) -> str:
    blocks = result.get("content") or []
    return "\n".join(
        str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )


def _refused(name: str, why: str) -> ToolCallError:
    return ToolCallError(name, {"content": [{"type": "text", "text": why}], "isError": True})


class Tools:
    """`tools.<name>(**arguments)`, `tools["<name>"](...)`, `tools.call(name, arguments)`."""

    def __init__(self) -> None:
        self._count = 0
        self._answers: dict[str, Any] | None = None  # read once: a run's answers never change

    def __getattr__(self, name: str) -> _Tool:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Tool(self, name)

    def __getitem__(self, name: str) -> _Tool:
        return _Tool(self, name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *(n for n in _declared() or () if n.isidentifier())})

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Call the tool `name` with `arguments` (an object; None: {}) and return its result."""
        return self.gather((name, arguments))[0]

    def gather(self, *calls: tuple[str, Mapping[str, Any] | None]) -> list[Any]:
        """Make independent calls together, in one round: `gather(("fx_rate", {"from":
        "GBP"}), ("fx_rate", {"from": "EUR"}))` returns their results in order. Every call
        not answered yet is asked at once (the run ends once, not once per call); a failed
        one raises its ToolCallError once all are answered (the first, in order)."""
        planned = [self._planned(name, arguments) for name, arguments in calls]
        if self._answers is None:
            self._answers = _answers()
        answers = self._answers
        missing = [(key, name, arguments) for key, name, arguments in planned if key not in answers]
        if missing:
            _ask(missing)
        return [_result(key, name, answers[key]) for key, name, _ in planned]

    def _planned(
        self, name: str, arguments: Mapping[str, Any] | None
    ) -> tuple[str, str, dict[str, Any]]:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a tool name ({NAME.pattern})")
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, Mapping):
            raise TypeError(f"the arguments of {name!r} must be an object (a dict)")
        declared = _declared()
        if declared is not None and name not in declared:
            may = ", ".join(declared) if declared else "none: its manifest declares no calls"
            raise _refused(
                name,
                f"this tool may not call {name!r}: it calls only the tools its manifest "
                f'declares in "calls" (here: {may})',
            )
        self._count += 1
        return call_key(self._count, name, arguments), name, dict(arguments)


def _result(key: str, name: str, result: Any) -> Any:
    if not isinstance(result, Mapping):
        raise _refused(name, f"the answer to {key} is not a tool result")
    if result.get("isError"):
        raise ToolCallError(name, result)
    return value_of(result)


class _Tool:
    def __init__(self, owner: Tools, name: str) -> None:
        self._owner = owner
        self.name = name

    def __call__(self, arguments: Mapping[str, Any] | None = None, /, **named: Any) -> Any:
        given = dict(arguments or {})
        given.update(
            {(k[:-1] if k.endswith("_") and len(k) > 1 else k): v for k, v in named.items()}
        )
        return self._owner.call(self.name, given)

    def __repr__(self) -> str:
        return f"<tool {self.name}>"


def _unkeyword(name: str) -> str:
    """`from_` -> `from`: one trailing underscore lets a Python keyword be an argument."""
    return name[:-1] if name.endswith("_") and len(name) > 1 else name


def _declared() -> list[str] | None:
    """The tools this run may call (`KILN_CALLS`), or None when it is not said."""
    told = os.environ.get("KILN_CALLS")
    if told is None:
        return None
    names = json.loads(told)
    return [str(n) for n in names] if isinstance(names, list) else []


def _answers() -> dict[str, Any]:
    answers = json.loads(os.environ.get("KILN_ANSWERS") or "{}")
    return answers if isinstance(answers, dict) else {}


def _ask(calls: list[tuple[str, str, dict[str, Any]]]) -> NoReturn:
    """Ask Kiln for the calls and end the run at once: no `except` can swallow it."""
    fd = os.environ.get("KILN_TALK_FD")
    if not fd:
        raise RuntimeError(
            f"cannot call {calls[0][1]!r}: this is not a Kiln run (no KILN_TALK_FD); tools "
            "call tools only when Kiln runs them"
        )
    lines = [
        json.dumps({"ask": key, "call": {"name": name, "arguments": arguments}},
                   separators=(",", ":"))
        for key, name, arguments in calls
    ]  # fmt: skip
    data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    while data:
        data = data[os.write(int(fd), data) :]
    os._exit(0)


tools = Tools()
