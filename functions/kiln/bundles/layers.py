"""One folder per locked package, kept across builds (as Windmill does), and bundles merged
from them.

A Python bundle built by uv with a build cache is assembled, not installed: each locked wheel
(by its sha256, for one target and one bytecode compiler) has a folder under
`<cache>/packages/` holding `files/`, its installed files with their bytecode, read-only
(mode 0444, 0555 if executable), and `members.zip`, the same files compressed (written when
a bundle first needs it, after the bundle was handed over). A build installs, compiles and
compresses only the wheels no earlier build has seen, then writes the bundle by copying the
members' compressed bytes as they are: a second tool that shares `boto3` with a first one
neither compiles nor compresses botocore again.

The bundle is byte for byte what `kiln.bundles.contents.write_zip` makes from the same files
(sorted names, fixed times and modes), so layered and unlayered builds of one lock give the
same zip.

A builder in the serving process (`kiln dev`) also hands the bundle to its bundle cache as a
folder of copies of the packages' `files/` (`copy_members`): no zip is unpacked. Copies, not
hard links: a link would share its inode, and so its mode, with the build cache, which
`kiln dev` makes private at every start (the runs' uids then could not read the bundle).
Each file is checked against its member (size, CRC-32, still read-only) first, where the
package is zipped already, and copied from the same open file; a package folder whose files
no longer match loses them, and the next build makes them again from its zip.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import os
import re
import shutil
import stat
import struct
import threading
import time
import uuid
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from kiln.bundles.owned_dirs import owned_directory

LAYER_RECIPE = 1  # bump when a layer's files change for the same wheel
MEMBERS = "members.zip"
FILES = "files"  # the members installed, read-only, copied into a bundle cache
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_NOT_PACKAGED = {"bin", ".lock"}  # console scripts, and the lock file uv leaves in --target


class LayerError(ValueError):
    """The installed files could not be told apart by package (build the whole tree instead),
    or a package folder's files no longer match its zip (unzip the bundle instead)."""


def layer_key(entry: dict[str, Any], flavour: str) -> str | None:
    """A locked package's folder name, or None for a package without a wheel hash."""
    sha = entry.get("sha256")
    if not sha:
        return None
    return hashlib.sha256(f"{sha}|{flavour}|{LAYER_RECIPE}".encode()).hexdigest()[:40]


Entry = tuple[Path, zipfile.ZipInfo | None, Path]  # the file, its member, its package folder
STALE_SCRATCH_S = 3600.0  # no build takes this long: what is older was left by a dead one


class Layers:
    """The locked packages' folders, in lock order. A folder is in place once its files are
    (installed, compiled, read-only); its members.zip follows when a bundle is zipped
    (`finish`), so that a bundle can be handed over before anything is compressed."""

    def __init__(
        self, folders: list[Path], write_zip: Callable[[Path, Path, list[Path]], None]
    ) -> None:
        self.folders, self.write_zip = folders, write_zip

    def entries(self) -> dict[str, Entry]:
        """Every file of the bundle by name (a later package's file wins, as a later install's
        would), with the member it is checked against (None: a package not zipped yet, made
        by a build of this machine moments ago)."""
        entries: dict[str, Entry] = {}
        for folder in self.folders:
            if not (folder / MEMBERS).is_file():
                files = os.fspath(folder / FILES)
                for found in _file_entries(files):
                    name = found.path[len(files) + 1 :].replace(os.sep, "/")
                    entries[name] = (Path(found.path), None, folder)
                continue
            with zipfile.ZipFile(folder / MEMBERS) as archive:
                for info in archive.infolist():
                    parts = PurePosixPath(info.filename).parts
                    entries[info.filename] = (folder.joinpath(FILES, *parts), info, folder)
        return entries

    def finish(self) -> list[Path]:
        """Every package's members.zip, compressing those not zipped yet."""
        for folder in self.folders:
            if not (folder / MEMBERS).is_file():
                partial = folder / f".{MEMBERS}.{uuid.uuid4().hex}"
                try:
                    self.write_zip(partial, folder / FILES, _files_under(folder / FILES))
                    os.replace(partial, folder / MEMBERS)  # two builds at once: the same bytes
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        partial.unlink()
        return [folder / MEMBERS for folder in self.folders]


def build_layers(
    lock: list[dict[str, Any]],
    *,
    root: Path,
    flavour: str,
    install: Callable[[list[dict[str, Any]], Path], None],
    compile_dirs: Callable[[Iterable[Path]], None],
    write_zip: Callable[[Path, Path, list[Path]], None],
) -> Layers:
    """Every locked package's folder, installing and compiling the missing ones; raises
    LayerError, or UnsafeDirectoryError when `root` is not this uid's own (its files go into
    bundles)."""
    keys = [layer_key(entry, flavour) for entry in lock]
    if any(key is None for key in keys):
        raise LayerError("a locked package has no wheel hash")
    owned_directory(root)
    _sweep(root / ".tmp")
    folders = [root / str(key) for key in keys]
    missing = [
        (entry, folder)
        for entry, folder in zip(lock, folders, strict=True)
        if not (folder / FILES).is_dir() and not (folder / MEMBERS).is_file()
    ]
    if missing:
        scratch = root / ".tmp" / uuid.uuid4().hex
        try:
            _make_layers(missing, scratch, install, compile_dirs)
        finally:  # what is left is the install's empty folders: not worth a wait
            threading.Thread(target=shutil.rmtree, args=(scratch, True), daemon=True).start()
    for folder in folders:
        if not (folder / FILES).is_dir():  # made before folders kept their files, or removed
            _files_from_members(folder, root / ".tmp" / uuid.uuid4().hex)
    return Layers(folders, write_zip)


def _make_layers(
    missing: list[tuple[dict[str, Any], Path]],
    scratch: Path,
    install: Callable[[list[dict[str, Any]], Path], None],
    compile_dirs: Callable[[Iterable[Path]], None],
) -> None:
    """Install and compile the missing packages in `scratch`, then put each folder in place."""
    site = scratch / "site"
    install([entry for entry, _ in missing], site)
    trees = {_canonical(str(entry["name"])): scratch / folder.name for entry, folder in missing}
    moved = _moved(site, trees)
    compile_dirs(moved)  # each package's folder is compiled as soon as its files are moved
    for _ in moved:  # a compiler that took fewer (or none): the rest are moved all the same
        pass
    left = [
        path for path in _files_under(site) if path.relative_to(site).parts[0] not in _NOT_PACKAGED
    ]
    if trees or left:
        raise LayerError(f"files of no package: {left[:3]}, packages without files: {trees}")
    built = {folder: scratch / folder.name for _, folder in missing}
    for folder, made in built.items():
        for entry in _file_entries(os.fspath(made / FILES)):  # read-only, for the owner too
            os.chmod(entry.path, 0o555 if entry.stat().st_mode & stat.S_IXUSR else 0o444)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # another build made it first: theirs is the same
            made.rename(folder)


def _moved(site: Path, trees: dict[str, Path]) -> Iterator[Path]:
    """Move each installed package's files from `site` into its folder's `files/` (taking
    it from `trees`), and name that folder once it is complete."""
    top = os.path.realpath(site)
    records = []
    for dist_info in sorted(site.glob("*.dist-info")):
        name = _canonical(dist_info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name not in trees:
            raise LayerError(f"{dist_info.name} was installed but not asked for")
        records.append((name, _record_paths(top, dist_info)))
    for name, paths in records:
        into = trees.pop(name) / FILES
        _move_record(top, paths, os.fspath(into))
        yield into


def _files_under(root: Path) -> list[Path]:
    """The files below `root`, sorted as Paths sort."""
    found = [entry.path for entry in _file_entries(os.fspath(root))]
    found.sort(key=lambda path: path.split(os.sep))  # a Path compares its parts
    return [Path(path) for path in found]


def _file_entries(top: str) -> Iterator[os.DirEntry[str]]:
    """The files below `top` (as os.walk finds them: links to folders not followed, links to
    files counted as files), from the folders' listings, without a stat per file."""
    folders = [top]
    while folders:
        try:
            listing = list(os.scandir(folders.pop()))
        except OSError:  # as os.walk: a folder that cannot be listed has nothing in it
            continue
        for entry in listing:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif entry.is_file():
                yield entry


def _sweep(tmp: Path) -> None:
    """What builds that died left in the package folders' scratch place."""
    cutoff = time.time() - STALE_SCRATCH_S
    with contextlib.suppress(FileNotFoundError):
        for leftover in tmp.iterdir():
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < cutoff:
                    shutil.rmtree(leftover, ignore_errors=True)


def _files_from_members(folder: Path, scratch: Path) -> None:
    """A package folder's `files/` again, from its members.zip."""
    try:
        with zipfile.ZipFile(folder / MEMBERS) as archive:
            archive.extractall(scratch)
            for info in archive.infolist():
                if not info.is_dir():
                    executable = (info.external_attr >> 16) & stat.S_IXUSR
                    (scratch / info.filename).chmod(0o555 if executable else 0o444)
        with contextlib.suppress(OSError):  # another build made it first
            scratch.rename(folder / FILES)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _record_paths(top: str, dist_info: Path) -> list[str]:
    """The files a wheel's RECORD names (plus the RECORD) inside `top`, relative to it,
    console scripts (`bin/`) left out."""
    with (dist_info / "RECORD").open(newline="") as handle:
        paths = [row[0] for row in csv.reader(handle) if row]
    inside = []
    for relative in paths:
        source = os.path.normpath(os.path.join(top, relative))  # uv installs no links
        if source.startswith(top + os.sep) and not source.startswith(f"{top}/bin/"):
            inside.append(source[len(top) + 1 :])
    return inside


def _move_record(top: str, paths: list[str], into: str) -> None:
    """Move `paths` from `top` into `into`. A top-level folder that holds exactly this
    package's files (no other package's, nothing unnamed, no links) moves by one rename;
    other files one by one (files already gone are skipped)."""
    groups: dict[str, set[str]] = {}
    for path in paths:
        groups.setdefault(path.split("/")[0], set()).add(path)
    made: set[str] = set()
    for first, group in groups.items():
        if _plain_files(top, first) == group:
            if into not in made:
                os.makedirs(into, exist_ok=True)
                made.add(into)
            os.rename(os.path.join(top, first), os.path.join(into, first))
            continue
        for inside in sorted(group):
            source = os.path.join(top, inside)
            if not os.path.isfile(source):
                continue
            destination = os.path.join(into, inside)
            folder = os.path.dirname(destination)
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            os.replace(source, destination)


def _plain_files(top: str, first: str) -> set[str] | None:
    """The files below folder `top/first`, relative to `top`; None if it is not a folder or
    holds anything but regular files and folders (a link, say)."""
    found: set[str] = set()
    folders = [os.path.join(top, first)]
    if os.path.islink(folders[0]):
        return None
    while folders:
        try:
            listing = list(os.scandir(folders.pop()))
        except OSError:  # a file, or gone
            return None
        for entry in listing:
            if entry.is_symlink():
                return None
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                found.add(entry.path[len(top) + 1 :])
            else:
                return None
    return found


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def member_infos(sources: list[Path]) -> dict[str, tuple[Path, zipfile.ZipInfo]]:
    """Every member of the layers by name (a later layer's file wins, as a later install's
    would)."""
    members: dict[str, tuple[Path, zipfile.ZipInfo]] = {}
    for source in sources:
        with zipfile.ZipFile(source) as archive:
            for info in archive.infolist():
                members[info.filename] = (source, info)
    return members


def merge_zips(dest: Path, members: dict[str, tuple[Path, zipfile.ZipInfo]]) -> None:
    """Write `members` in name order by copying their compressed bytes (no recompression)."""
    handles: dict[Path, Any] = {}
    try:
        with zipfile.ZipFile(dest, "w") as out:
            assert out.fp is not None
            for name in sorted(members, key=lambda name: name.split("/")):  # as Paths sort
                source, info = members[name]
                handle = handles.get(source) or handles.setdefault(source, source.open("rb"))
                raw = _raw_member(handle, info)
                copied = copy.copy(info)
                copied.header_offset = out.fp.tell()
                out.fp.write(copied.FileHeader())
                out.fp.write(raw)
                out.filelist.append(copied)
                out.NameToInfo[copied.filename] = copied
            # zipfile writes the central directory of `filelist` at `start_dir` on close.
            out.start_dir = out.fp.tell()
            out._didModify = True  # type: ignore[attr-defined]
    finally:
        for handle in handles.values():
            handle.close()


def _raw_member(handle: Any, info: zipfile.ZipInfo) -> bytes:
    handle.seek(info.header_offset)
    header = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
    name_length, extra_length = header[-2], header[-1]
    handle.seek(info.header_offset + _LOCAL_HEADER.size + name_length + extra_length)
    data: bytes = handle.read(info.compress_size)
    return data


def copy_members(entries: dict[str, Entry], dest: Path) -> int:
    """Make `dest` the bundle's folder of read-only copies of its packages' files, each file
    of an earlier build checked against its member first; returns the bytes copied.
    Raises OSError or LayerError (a file that does not match: its package folder's files are
    removed, to be made again from its zip)."""
    os.mkdir(dest)
    top = str(dest)
    made = {top}
    total = 0
    for name in sorted(entries):
        original, info, folder = entries[name]
        if name.startswith("/") or "/../" in f"/{name}/" or "\0" in name:
            raise LayerError(f"unsafe member name {name!r} in {folder}")
        target = f"{top}/{name}"
        parent = target.rpartition("/")[0]
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        total += _checked_copy(original, info, folder, target)
    return total


def _checked_copy(path: Path, info: zipfile.ZipInfo | None, layer: Path, target: str) -> int:
    """Copy the file to `target` (read-only, its own inode) once it is found to be its member
    (a regular file, still read-only, the same size and CRC-32); otherwise the folder's files
    go and LayerError says why. A file of a package made moments ago and not zipped yet has
    nothing to check it by. Returns its size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        fd = -1
    try:
        found = os.fstat(fd) if fd >= 0 else None
        if info is not None:
            crc = None
            if (
                found is not None
                and stat.S_ISREG(found.st_mode)
                and not found.st_mode & 0o222
                and found.st_size == info.file_size
            ):
                crc = _crc32(fd, found.st_size)
            if crc != info.CRC:
                _discard_files(layer)
                raise LayerError(
                    f"{info.filename} in package folder {layer.name} no longer matches its "
                    "members.zip (changed, gone or made writable); the folder's files were "
                    "removed and will be made again"
                )
        if found is None:
            raise FileNotFoundError(f"{path} is gone")
        copy_file(fd, target, found.st_size, 0o555 if found.st_mode & stat.S_IXUSR else 0o444)
        return found.st_size
    finally:
        if fd >= 0:
            os.close(fd)


def copy_file(source: int, target: str, size: int, mode: int) -> None:
    """Copy the open file `source` (from its start) to a new file `target` of `mode`: in the
    kernel (`copy_file_range`, which shares extents where the filesystem can: btrfs, XFS),
    else by reading and writing."""
    sink = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        offset = 0
        try:
            while offset < size:
                sent = os.copy_file_range(source, sink, size - offset, offset, offset)
                if sent == 0:
                    break
                offset += sent
        except OSError:  # another filesystem on an old kernel, a filesystem without it
            os.lseek(source, offset, os.SEEK_SET)
            os.lseek(sink, offset, os.SEEK_SET)
            while chunk := os.read(source, 1 << 20):
                os.write(sink, chunk)
    finally:
        os.close(sink)


def _crc32(fd: int, size: int) -> int:
    crc = 0
    while chunk := os.read(fd, max(1, min(size, 1 << 20))):
        crc = zlib.crc32(chunk, crc)
    return crc


def _discard_files(layer: Path) -> None:
    doomed = layer.parent / ".tmp" / f"discard-{uuid.uuid4().hex}"
    doomed.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.rename(layer / FILES, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
