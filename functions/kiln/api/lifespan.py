"""What an app does when its ASGI server shuts it down (Starlette only: the public app uses it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from kiln.stack import Kiln


def closing(parts: Kiln) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A lifespan that lets the runner's standbys go at shutdown (their processes and run
    directories; see kiln.runner.standby). `kiln dev` does the same in its own shutdown hook;
    in Lambda (Mangum, lifespan off) the sandbox ends with the process."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            parts.close_runner()

    return lifespan
