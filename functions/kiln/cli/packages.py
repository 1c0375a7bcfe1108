"""After `kiln tools push`: each pushed tool's packages, waited for a bounded time.

A save never waits for its packages on the server (a build can take minutes; on Lambda the
request could not hold on). The push does, for `--wait` seconds (60 by default): a
requirement that does not exist fails in the build's first step, the resolve, within
seconds, and the author reads why at once, with the build's log, instead of a caller finding
out. The revision stays saved either way: the tool is marked by its bundle's status
(`failed`), and the author fixes its requirements and pushes again, or retries the build.
"""

from __future__ import annotations

import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kiln.cli.client import KilnClient

BUILDING = ("pending", "building")  # as kiln.bundles.cache.BUILDING: a build still to end
UNUSABLE = ("failed", "missing")
POLL_S = 0.5


@dataclass(frozen=True)
class Packages:
    """A pushed tool's bundle as the wait left it; `log` is a failed build's log."""

    tool: str
    revision: int
    bundle: dict[str, Any]
    log: str | None = None

    @property
    def status(self) -> str:
        return str(self.bundle.get("status"))


def wait_for_packages(
    client: KilnClient,
    names: Iterable[str],
    *,
    wait_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> list[Packages]:
    """The bundles of the tools `names` that have packages, once none is still being built
    or `wait_s` has passed; a failed build comes with its log."""
    give_up = clock() + wait_s
    waiting, found = list(names), []
    while waiting:
        still = []
        for name in waiting:
            body = client.tool(name)
            bundle = (body or {}).get("bundle")
            if body is None or not bundle:
                continue
            if bundle.get("status") in BUILDING and clock() < give_up:
                still.append(name)
                continue
            found.append(Packages(name, int(body["revision"]), bundle, _log(client, bundle)))
        waiting = still
        if waiting:
            time.sleep(POLL_S)
    return found


def _log(client: KilnClient, bundle: dict[str, Any]) -> str | None:
    if bundle.get("status") != "failed":
        return None
    quoted = urllib.parse.quote(str(bundle["id"]))
    body, _ = client.request("GET", f"/api/bundles/{quoted}?log=true")
    log = body.get("log")
    return str(log) if log else None


def report(found: Iterable[Packages], *, wait_s: float) -> int:
    """Say on stderr which tools cannot run yet and why; 1 when any build failed."""
    status = 0
    for packages in found:
        bundle_id = packages.bundle.get("id")
        if packages.status in BUILDING:
            print(
                f"kiln tools push: {packages.tool}: its packages are still being built after "
                f"{wait_s:g} s; follow the build with `kiln bundles show {bundle_id} --log`",
                file=sys.stderr,
            )
        elif packages.status in UNUSABLE:
            status = 1
            print(_failure(packages), file=sys.stderr)
    return status


def _failure(packages: Packages) -> str:
    bundle = packages.bundle
    requirements = ", ".join(bundle.get("requirements") or ())
    lines = [
        f"kiln tools push: {packages.tool} was saved (revision {packages.revision}), but its "
        f"packages ({requirements or 'bundle ' + str(bundle.get('id'))}) "
        + ("failed to build" if packages.status == "failed" else "are missing")
        + ": it cannot run until they build.",
    ]
    if bundle.get("error"):
        lines.append(f"  {bundle['error']}")
    if packages.log:
        lines += ["--- build log ---", packages.log.rstrip(), "--- end of build log ---"]
    lines.append(
        "Fix its requirements and push again, or retry the build: "
        f"kiln bundles retry {bundle.get('id')}"
    )
    return "\n".join(lines)
