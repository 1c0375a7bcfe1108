"""Keep the server's own process out of reach of the tools it runs.

Tools run as child processes under the same Unix user as the server (Lambda has no other
user to give them). Any process of that user may read `/proc/<pid>/environ` of another, and
in Lambda the server's environment holds the function role's AWS credentials
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) and Kiln's own settings.
Marking the server non-dumpable (prctl PR_SET_DUMPABLE 0) makes its /proc files owned by
root, so `environ`, `mem` and friends cannot be opened by other processes of the same user.
The flag is per process and `execve` resets it: every process started afterwards (the run
supervisors, Node) starts dumpable again, and must protect itself if it holds secrets.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("kiln.runner.shield")

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def _prctl(option: int, arg: int) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, arg, 0, 0, 0))


def protect_process() -> bool:
    """Make this process non-dumpable (Linux); True when it is afterwards."""
    if not sys.platform.startswith("linux"):
        return False
    if _prctl(PR_SET_DUMPABLE, 0) != 0:
        log.warning("could not make the server process non-dumpable; tools may read its environ")
        return False
    return _prctl(PR_GET_DUMPABLE, 0) == 0
