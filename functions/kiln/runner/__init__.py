"""Runs one author script as a child process. Knows nothing about MCP, HTTP or Lambda."""

from kiln.runner.contract import contract_text
from kiln.runner.errors import InvalidArgumentsError, NodeUnavailableError, RunnerBusyError
from kiln.runner.limits import RunLimits, RunnerSettings
from kiln.runner.model import RunRequest, RunResult
from kiln.runner.runner import Runner

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
    "contain",
    "contract",
    "contract_text",
    "doctor",
    "errors",
    "limits",
    "model",
    "nodejs",
    "processes",
    "remote",
    "shield",
    "sweep",
    "talk",
]
