"""The pipes between the server and a run: capped output readers, the status pipe, writers.

Everything here runs on the event loop and only ever makes non-blocking system calls.
"""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import Callable

from kiln.runner.launcher import LauncherError


class Output:
    """One capped stream: keeps the first `cap` bytes, counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.total += len(data)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.kept)

    def text(self) -> str:
        # When the cap fell inside a UTF-8 sequence, the incremental decoder holds the broken
        # tail back instead of turning it into a replacement character.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return str(decoder.decode(bytes(self.kept), final=not self.truncated))


class Reader(asyncio.Protocol):
    """Feeds one pipe into a capped buffer; `closed` resolves at end of file."""

    def __init__(self, sink: Output) -> None:
        self.sink = sink
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.sink.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class NotStarted(LauncherError):
    def __init__(self) -> None:
        super().__init__("the runner's helper process failed before the script started")


class Status(Reader):
    """The supervisor's status pipe: `pid N` first, `outcome ...` and `leftover N` at the end.

    End of file means the supervisor has exited: it holds the only write end.
    """

    def __init__(self, head: bytes = b"") -> None:
        """`head`: what was read from the pipe before (`Prepared.wait_ready`)."""
        super().__init__(Output(64 * 1024))
        self.pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.data_received(head)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.pid.done() and b"\n" in self.sink.kept:
            first = bytes(self.sink.kept).split(b"\n", 1)[0].split()
            if len(first) == 2 and first[0] == b"pid":
                self.pid.set_result(int(first[1]))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.pid.done():
            self.pid.set_exception(NotStarted())
            self.pid.exception()  # whoever waits gets it; nobody waiting is fine too

    def fields(self) -> dict[str, str]:
        return status_fields(bytes(self.sink.kept))


def status_fields(data: bytes) -> dict[str, str]:
    """A status pipe's `key value` lines (`pid`, `isolation`, `outcome`, ...) as a dict."""
    status: dict[str, str] = {}
    for line in data.decode(errors="replace").splitlines():
        key, _, value = line.partition(" ")
        status[key] = value
    return status


class PipeFeeder:
    """Writes the arguments to the script's stdin as it reads them, then closes it.

    A script that never reads stdin is fine: what does not fit in the pipe waits, and is
    dropped when the run ends.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
        self.loop = loop
        self.fd: int | None = fd
        self.data = memoryview(data)
        self.watching = False
        os.set_blocking(fd, False)

    def start(self) -> None:
        self._write()
        if self.fd is not None:
            self.loop.add_writer(self.fd, self._write)
            self.watching = True

    def _write(self) -> None:
        if self.fd is None:
            return
        try:
            while self.data:
                self.data = self.data[os.write(self.fd, self.data) :]
        except BlockingIOError:
            return  # the pipe is full: wait until the script reads
        except OSError:
            pass  # the script closed its stdin or exited: nothing more to give it
        self.close()

    def close(self) -> None:
        if self.fd is None:
            return
        if self.watching:
            self.loop.remove_writer(self.fd)
            self.watching = False
        os.close(self.fd)
        self.fd = None


def returning(reader: asyncio.Protocol) -> Callable[[], asyncio.Protocol]:
    return lambda: reader
