"""No cold first call: a tool's standby is prepared before anyone calls it.

A call that finds a standby (kiln.runner.standby) skips the fork, the isolation and, for
Node, the interpreter start; only calls after the first used to find one. The `Warmer` makes
one when a tool is saved (created, updated, restored, enabled, undeleted: once its bundle is
ready, waiting for a build in progress) and, when `kiln dev` starts, for the tools the call
ledger says were called most recently. It works within the standby budget
(KILN_RUN_STANDBY): at most that many tools are warmed at start, and a saved tool's standby
pushes out the one used longest ago, as a call's would. A tool that declares secrets has them
fetched too, on a thread of its own (the first secrets request of a process makes its SSM
client, and on `kiln dev`'s emulator loads SSM's backend: 0.4-2.5 s the first call and the
studio's Secrets tab no longer wait for).

A save waits for its tool's standby before it answers (`AuthoringService`, bounded), so that
even a call sent the moment the save's answer arrives finds it: `warm_soon`'s future is done
once the standby waits, or once the tool turned out to need a bundle still being built. Such a
tool is warmed on a second thread once its build is done, so that one long build never holds
up the standbys of the tools saved after it.

Only where the process that saves also serves the calls (`kiln dev`, `kiln stdio`): on
Lambda the admin function saves and the runner function runs the calls, so a standby made by
the save would wait in the wrong process; there `TenantWarmer` starts the tool's runner
environment instead (one asynchronous invoke per save).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from kiln.catalog.model import Tool

if TYPE_CHECKING:
    from kiln.runner.remote import RemoteRunner

log = logging.getLogger("kiln.serving.warming")

BUNDLE_WAIT_S = 900.0  # as long as a build may take (kiln.bundles.build.INSTALL_TIMEOUT_S + )
BUNDLE_POLL_S = 0.5  # how often a tool waiting for its bundle looks again


class Warmable(Protocol):
    def warm(self, tool: Tool, *, bundle_wait_s: float = 0.0) -> bool | None:
        """True: its standby waits; False: none will; None: its bundle is still being built."""
        ...

    def warm_secrets(self, tool: Tool) -> None:
        """Fetch the secrets `tool` declares, as its call would (blocking: from a thread)."""
        ...


class Warmer:
    """Prepares standbys on one background thread, in the order asked; a tool whose bundle is
    still being built is handed to a second thread, which tries again until it is built."""

    def __init__(
        self, backend: Warmable, *, budget: int, bundle_wait_s: float = BUNDLE_WAIT_S
    ) -> None:
        self.backend = backend
        self.budget = budget  # KILN_RUN_STANDBY: more warm-ups than this would push each other out
        self.bundle_wait_s = bundle_wait_s
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kiln-warm")
        # Tools whose bundle is still being built wait here, not in front of the next save.
        self._after_build = ThreadPoolExecutor(1, thread_name_prefix="kiln-warm-bundle")
        # Secrets are fetched beside the standby, not before it: the save waits for that.
        self._secrets = ThreadPoolExecutor(1, thread_name_prefix="kiln-warm-secrets")
        self._closed = False
        self._stopped = threading.Event()  # wakes a warm-up waiting for a bundle at close
        self._asked = 0
        self._lock = threading.Lock()

    def warm_soon(self, tool: Tool) -> Future[bool] | None:
        """Prepare `tool`'s standby in the background (None once closed). Of many saves at
        once (`kiln dev` loading a folder of tools), only the last `budget` are warmed.

        The future says True once the standby waits; False when none was made, or when the
        tool's bundle is still being built (its standby follows the build, on another thread).
        """
        if self._closed or not tool.enabled or tool.deleted:
            return None
        if tool.head.secrets:
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._secrets.submit(self._try_secrets, tool)
        if self.budget <= 0:
            return None
        with self._lock:
            self._asked += 1
            number = self._asked
        try:
            return self._pool.submit(self._warm, tool, number)
        except RuntimeError:  # shut down meanwhile
            return None

    def warm_recent(
        self, called: Iterable[str], lookup: Callable[[str], Tool | None], limit: int
    ) -> list[str]:
        """Warm the first `limit` distinct tools of `called` (newest first) that still exist."""
        names: list[str] = []
        for name in called:
            if len(names) >= limit:
                break
            if name in names:
                continue
            tool = lookup(name)
            if tool is not None and self.warm_soon(tool) is not None:
                names.append(name)
        return names

    def settle(self) -> None:
        """Wait until the warm-ups asked for so far are done, but for those waiting for a
        bundle build (tests and benchmarks)."""
        self._pool.submit(lambda: None).result()
        self._secrets.submit(lambda: None).result()

    def close(self) -> None:
        """Stop taking work; what is queued is dropped, a standby in the making finishes."""
        self._closed = True
        self._stopped.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._after_build.shutdown(wait=True, cancel_futures=True)
        self._secrets.shutdown(wait=True, cancel_futures=True)

    def _warm(self, tool: Tool, number: int) -> bool:
        """The first try, not waiting for a bundle; one still being built is waited for on
        the other thread."""
        if self._pushed_out(number):
            return False
        warmed = self._try(tool)
        if warmed is None and not self._closed:
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._after_build.submit(self._warm_after_build, tool, number)
        return bool(warmed)

    def _warm_after_build(self, tool: Tool, number: int) -> bool:
        """Try again while its bundle is being built (up to `bundle_wait_s`), until closed."""
        give_up = time.monotonic() + self.bundle_wait_s
        while not self._stopped.wait(BUNDLE_POLL_S):
            if self._pushed_out(number):
                return False
            warmed = self._try(tool)
            if warmed is not None or time.monotonic() >= give_up:
                return bool(warmed)
        return False

    def _pushed_out(self, number: int) -> bool:
        with self._lock:  # its standby would be pushed out at once by newer ones
            return self._asked - number >= self.budget

    def _try(self, tool: Tool) -> bool | None:
        try:
            return self.backend.warm(tool)
        except Exception:  # a standby is an optimisation: its failure is the next call's
            log.warning("could not warm %s", tool.name, exc_info=True)
            return False

    def _try_secrets(self, tool: Tool) -> None:
        try:
            self.backend.warm_secrets(tool)
        except Exception:  # not set yet, say: the call will say so
            log.debug("could not fetch the secrets of %s ahead of its call", tool.name)


class TenantWarmer:
    """On Lambda: a saved tool's runner environment started before its first call.

    The admin function saves and the runner function runs, each in environments of its own,
    so no standby can wait for the call there. Instead a save (of an enabled tool) sends the
    runner function one asynchronous invoke with the tool's tenant
    (`RemoteRunner.warm`): Lambda starts an environment of that tenant (the runtime's init,
    Kiln's, the helper) and it fetches the tool's bundle if that is built. Nothing runs: no
    script, no ledger entry, no quota. The save does not wait for it (an Event invoke is
    answered at once), and a warm-up that fails is logged, never the save's error.
    KILN_WARM_ON_SAVE=false turns it off (bench/runner/new_tenant.py: what it saves).
    """

    def __init__(self, remote: RemoteRunner) -> None:
        self.remote = remote

    def warm_soon(self, tool: Tool) -> Future[bool] | None:
        if not tool.enabled or tool.deleted:
            return None
        head = tool.head
        try:
            self.remote.warm(tool_id=tool.id, author=head.created_by, bundle_id=head.bundle_id)
        except Exception as error:  # the tool is saved; its first call starts cold
            log.warning(
                "could not warm the runner environment of %s: %s: %s",
                tool.name, type(error).__name__, error,
            )  # fmt: skip
        return None
