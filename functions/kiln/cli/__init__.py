"""The `kiln` command (its console script is `kiln.cli:main`): tools (and their history),
tasks, bundles, keys, views, the HTTP client and server discovery, with one output and error
convention."""

from kiln.cli.main import main

__all__ = ["main"]
