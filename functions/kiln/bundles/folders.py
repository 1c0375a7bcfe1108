"""A bundle's folder on disk: unpacked from its zip, its contents swapped for a fresh unpack,
removed.

Every file read-only (0444, 0555 if executable), every folder 0755 whatever the umask (runs of
other uids enter them), the unpacked size beside the files (`.kiln-size`). Plain `os` calls:
a bundle is thousands of small files, and per-file overhead is most of what unpacking costs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from kiln.bundles.errors import BundleFetchError
from kiln.bundles.seal import DIR_MODE, SIZE_FILE, mode_of, open_folders

_CHUNK = 1024 * 1024


def unpack(zip_path: Path, into: Path) -> int:
    """Unpack safely (no absolute paths, no `..`), keeping executable bits, every file
    read-only; returns bytes.

    Plain `os` calls and one read per member: a bundle is thousands of small files, and
    per-file overhead is most of the time a first call spends here.
    """
    root = str(into)
    os.mkdir(root)
    made = {root}
    total = 0
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            name = PurePosixPath(info.filename)
            if name.is_absolute() or ".." in name.parts or not name.parts:
                raise BundleFetchError(f"bundle zip has an unsafe entry {info.filename!r}")
            destination = os.path.join(root, *name.parts)
            folder = destination if info.is_dir() else os.path.dirname(destination)
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            if info.is_dir():
                continue
            mode = mode_of(info)
            fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as sink:
                if info.file_size <= _CHUNK:
                    sink.write(archive.read(info))
                else:
                    with archive.open(info) as source:
                        shutil.copyfileobj(source, sink, _CHUNK)
            total += info.file_size
    finish(into, total)
    return total


def swap_contents(final: Path, fresh: Path, old: Path) -> None:
    """Put `fresh`'s contents in place of `final`'s (moved to `old`), keeping the folder
    `final` itself where it is one; else replace it."""
    if not final.is_dir() or final.is_symlink():
        os.rename(final, old)
        os.rename(fresh, final)
        return
    os.chmod(final, DIR_MODE)
    old.mkdir()
    for entry in os.scandir(final):
        if entry.is_dir(follow_symlinks=False):
            os.chmod(entry.path, 0o700)  # a folder moves only if it may be written (its `..`)
        os.rename(entry.path, old / entry.name)
    for name in os.listdir(fresh):
        os.rename(fresh / name, final / name)


def finish(folder: Path, size: int) -> None:
    """Every folder 0755 whatever the umask; the size beside the files, read-only too."""
    fd = os.open(folder / SIZE_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    with os.fdopen(fd, "w") as sink:
        sink.write(str(size))
    open_folders(folder)


def size_of(entry: Path) -> int:
    try:
        return int((entry / SIZE_FILE).read_text())
    except (OSError, ValueError):
        return sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())


def remove(path: Path) -> None:
    """Remove a file, link or folder tree (never what a link points to), even one whose
    folders a run made read-only."""
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
        for current, dirs, _ in os.walk(path):
            for name in dirs:
                inner = os.path.join(current, name)
                if not os.path.islink(inner):
                    with contextlib.suppress(OSError):
                        os.chmod(inner, 0o700)
    shutil.rmtree(path, ignore_errors=True)
