"""What a build made, before it is a zip: an installed folder, or packages' folders merged.

Either can be written as the bundle's zip (deterministic: same files in, same bytes out) and
copied into a folder (`copy_into`), which is how a builder in the serving process hands a
bundle to its bundle cache without unpacking a zip (kiln.bundles.cache.BundleCache.adopt_tree).
Copies, never hard links: the bundle cache shares no inode with the build's files, so no
`chmod` of those (a restarted `kiln dev` making its state private) reaches what runs read.
Copied files are read-only (0444, 0555 if executable), as an unpacked bundle's are.
"""

from __future__ import annotations

import os
import shutil
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kiln.bundles.layers import Layers, copy_file, copy_members, member_infos, merge_zips

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# Left out of every zip: console scripts carry the build machine's interpreter path, and
# `.bin` links do not survive a zip.
_SKIP_TOP = {"bin", ".bin"}


class Contents(Protocol):
    count: int
    unpacked: int

    def write(self, zip_path: Path) -> None: ...

    def copy_into(self, dest: Path) -> int: ...

    def close(self) -> None: ...


@dataclass
class InstalledTree:
    """An installed folder, zipped file by file."""

    root: Path
    files: list[Path]
    count: int
    unpacked: int

    @classmethod
    def of(cls, root: Path) -> InstalledTree:
        files = sorted(bundle_files(root))
        return cls(root, files, len(files), sum(path.stat().st_size for path in files))

    def write(self, zip_path: Path) -> None:
        write_zip(zip_path, self.root, self.files)

    def copy_into(self, dest: Path) -> int:
        """`dest` made of read-only copies of exactly the files the zip holds."""
        os.mkdir(dest)
        made = {dest}
        total = 0
        for path in self.files:
            copy = dest / path.relative_to(self.root)
            if copy.parent not in made:
                copy.parent.mkdir(parents=True, exist_ok=True)
                made.add(copy.parent)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                info = os.fstat(fd)
                mode = 0o555 if info.st_mode & stat.S_IXUSR else 0o444
                copy_file(fd, str(copy), info.st_size, mode)
            finally:
                os.close(fd)
            total += info.st_size
        return total

    def close(self) -> None:
        pass  # the build's scratch folder goes with the build


class LayeredContents:
    """Package folders' files: linked as they are, zipped by merging their members without
    recompressing (kiln.bundles.layers)."""

    def __init__(self, layers: Layers) -> None:
        self.layers = layers
        self.entries = layers.entries()
        self.count = len(self.entries)
        self.unpacked = sum(
            info.file_size if info is not None else path.stat().st_size
            for path, info, _ in self.entries.values()
        )

    def write(self, zip_path: Path) -> None:
        merge_zips(zip_path, member_infos(self.layers.finish()))

    def copy_into(self, dest: Path) -> int:
        return copy_members(self.entries, dest)

    def close(self) -> None:
        pass  # the package folders stay for the next build


def bundle_files(root: Path) -> Iterator[Path]:
    for current, dirs, names in os.walk(root):
        here = Path(current)
        if here == root:
            dirs[:] = [d for d in dirs if d not in _SKIP_TOP]
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
        for name in names:
            if here == root and name == ".lock":  # uv's, not the packages'
                continue
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue
            yield path


def write_zip(zip_path: Path, root: Path, files: list[Path]) -> None:
    """Same files in, same bytes out: sorted names, fixed times and modes."""
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=_ZIP_TIME)
            executable = path.stat().st_mode & stat.S_IXUSR
            info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with path.open("rb") as source, zf.open(info, "w") as sink:
                shutil.copyfileobj(source, sink, 1024 * 1024)
