"""Whether a loopback TCP connection to the server was opened by a tool's run.

As root each run has its own uid, and the kernel's socket table (/proc/net/tcp, tcp6) says
which uid owns the client end of a connection: a uid from the run range is a run. Runs
sharing the server's uid cannot be told apart this way (under Landlock they cannot reach
the server's port at all: `kiln.process.run_tcp_ports` leaves it out).
"""

from __future__ import annotations

import contextlib


def connection_uid(client_port: int, server_port: int) -> int | None:
    """The uid owning the client end of the loopback connection client_port -> server_port."""
    wanted = (f":{client_port:04X}", f":{server_port:04X}")
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f, None)
            for line in f:
                fields = line.split()
                if len(fields) > 7 and (fields[1][-5:], fields[2][-5:]) == wanted:
                    return int(fields[7])
    return None
