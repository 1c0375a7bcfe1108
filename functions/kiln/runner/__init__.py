"""Runs one author script as a child process. Knows nothing about MCP, HTTP or Lambda.

The names below load their module on first use (PEP 562): a process that never runs a tool
here (the public function, whose runs go to the runner function) imports the runner's
errors and ceiling at init (its limits, model, talk and remote payload on the first call),
never its process machinery (runner.py: containment with ctypes, the launcher, standbys).
tests/functional/lambda/test_cold_start_imports.py holds it.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.runner.contract import contract_text
    from kiln.runner.errors import InvalidArgumentsError, NodeUnavailableError, RunnerBusyError
    from kiln.runner.limits import RunLimits, RunnerSettings
    from kiln.runner.model import RunRequest, RunResult
    from kiln.runner.runner import Runner

_HOMES = {
    "contract_text": "contract",
    "InvalidArgumentsError": "errors",
    "NodeUnavailableError": "errors",
    "RunnerBusyError": "errors",
    "RunLimits": "limits",
    "RunnerSettings": "limits",
    "RunRequest": "model",
    "RunResult": "model",
    "Runner": "runner",
}

__all__ = [
    "InvalidArgumentsError",
    "NodeUnavailableError",
    "RunLimits",
    "RunRequest",
    "RunResult",
    "Runner",
    "RunnerBusyError",
    "RunnerSettings",
    "afterwards",
    "ceiling",
    "contain",
    "contract",
    "contract_text",
    "doctor",
    "errors",
    "launcher",
    "limits",
    "model",
    "nodejs",
    "processes",
    "remote",
    "shield",
    "sweep",
    "talk",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:  # a module of the room: `from kiln.runner import talk` imports it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
