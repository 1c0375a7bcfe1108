"""The rule for secret names, shared by the catalog (tools declare them) and the secret store.

A secret reaches a run as an environment variable, so its name must be one, and must not
be one the runner owns (how the script finds its interpreter, packages and working
directory) or one that poses as cloud credentials or Kiln's own configuration.
"""

from __future__ import annotations

import re

NAME_RULE = "1-64 characters: capital letters, digits and _, not starting with a digit"
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
_RESERVED = re.compile(
    r"^(PATH|HOME|PWD|TMPDIR|TEMP|TMP|LANG|LC_.*|TZ|PYTHON.*|NODE_.*|LD_.*|AWS_.*|KILN_.*)$"
)


def secret_name_problem(name: object) -> str | None:
    """Why `name` cannot name a secret, or None when it can."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"secret name must be {NAME_RULE}"
    if _RESERVED.fullmatch(name):
        return (
            f"secret name {name} is reserved: PATH, HOME, PYTHON*, NODE_*, LD_*, AWS_*, KILN_* "
            "and the locale variables belong to the runner"
        )
    return None
