"""A Python tool's run, in the script's own process: a fork of the helper's interpreter.

Standard library only, loaded by path in the helper (see `supervisor.py`). `load_python`
does everything that runs none of the tool's code (streams, `__main__`, compiling), so that
a standby has done it before its call; `run_python` runs the script as `python -u main.py`
would, and exits without tearing down what the fork inherited.
"""

from __future__ import annotations

import contextlib
import os
import site  # imported here, in the helper, so that a script's bundle costs no import
import sys
from typing import Any, NoReturn


def load_python(run_dir: str, script: str) -> tuple[Any, Any]:
    """The script's `__main__` module, standard streams and code, ready to run.

    A syntax error is kept, not raised: it is the script's to report once it is called.
    """
    import io

    sys.argv[:] = [script]
    sys.path[:0] = [run_dir]
    sys.dont_write_bytecode = True
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        write_through=True,
    )
    main = type(sys)("__main__")
    main.__file__ = script
    sys.modules["__main__"] = main
    try:
        with open(script, "rb") as source:
            return main, compile(source.read(), script, "exec")
    except BaseException as exc:
        return main, exc


def signal_ready(fd: int, ready: bytes) -> None:
    """Tell the supervisor the script now waits for its call (nothing of the tool has run)."""
    with contextlib.suppress(OSError):
        os.write(fd, ready)
    os.close(fd)


def run_python(main: Any, code: Any, script: str, bundle: str | None) -> NoReturn:
    """Run the script as `__main__` in this forked interpreter, as `python -u main.py` would."""
    if bundle:
        sys.path.insert(1, bundle)
        site.addsitedir(bundle)  # already on the path: this only runs the bundle's .pth files
    try:
        if isinstance(code, BaseException):
            raise code
        exec(code, main.__dict__)  # noqa: S102 - running the author's script is the job
    except SystemExit as exc:
        finish(main, exit_code(exc))
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next  # hide the helper's own frames, as a plain `python main.py` would
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        finish(main, 1)
    finish(main, 0)


def exit_code(exc: SystemExit) -> int:
    """The status `python main.py` exits with after `sys.exit(value)`."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def finish(main: Any, code: int) -> NoReturn:
    """Exit as the interpreter would, without tearing down the helper's inherited modules.

    A full interpreter shutdown in a forked child frees every object the helper ever made,
    writing to each copy-on-write page: tens of milliseconds. What a script can observe of
    shutdown is kept: non-daemon threads are joined, atexit handlers run, the script's
    globals are released (so unclosed files are flushed), the standard streams are flushed.
    """
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
        main.__dict__.clear()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(code)
