"""One folder per locked package, kept across builds (as Windmill does), and bundles merged
from them.

A Python bundle built by uv with a build cache is assembled, not installed: each locked wheel
(by its sha256, for one target and one bytecode compiler) has a folder under
`<cache>/packages/` holding `members.zip`, its installed files with their bytecode already
compressed, and `files/`, the same files installed, read-only (mode 0444, 0555 if
executable). A build installs, compiles and compresses only the wheels no earlier build has
seen, then writes the bundle by copying the members' compressed bytes as they are: a second
tool that shares `boto3` with a first one neither compiles nor compresses botocore again.

The bundle is byte for byte what `kiln.bundles.contents.write_zip` makes from the same files
(sorted names, fixed times and modes), so layered and unlayered builds of one lock give the
same zip.

A builder in the serving process (`kiln dev`) also hands the bundle to its bundle cache as a
folder of hard links to the packages' `files/` (`link_members`): no zip is unpacked. Each
file is checked against its member (size, CRC-32, still read-only) first; a package folder
whose files no longer match is removed, and the next build makes it again from its zip.
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
import uuid
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from kiln.bundles.owned_dirs import owned_directory

LAYER_RECIPE = 1  # bump when a layer's files change for the same wheel
MEMBERS = "members.zip"
FILES = "files"  # the members installed, read-only, for hard links into a bundle cache
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


def build_layers(
    lock: list[dict[str, Any]],
    *,
    root: Path,
    flavour: str,
    install: Callable[[list[dict[str, Any]], Path], None],
    compile_dirs: Callable[[list[Path]], None],
    write_zip: Callable[[Path, Path, list[Path]], None],
) -> list[Path]:
    """Every locked package's members.zip, making the missing ones; raises LayerError, or
    UnsafeDirectoryError when `root` is not this uid's own (its files go into bundles)."""
    keys = [layer_key(entry, flavour) for entry in lock]
    if any(key is None for key in keys):
        raise LayerError("a locked package has no wheel hash")
    owned_directory(root)
    folders = [root / str(key) for key in keys]
    missing = [(e, f) for e, f in zip(lock, folders, strict=True) if not (f / MEMBERS).is_file()]
    if missing:
        scratch = root / ".tmp" / uuid.uuid4().hex
        try:
            _make_layers(missing, scratch, install, compile_dirs, write_zip)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    for folder in folders:
        if not (folder / FILES).is_dir():  # made before folders kept their files, or removed
            _files_from_members(folder, root / ".tmp" / uuid.uuid4().hex)
    return [folder / MEMBERS for folder in folders]


def _make_layers(
    missing: list[tuple[dict[str, Any], Path]],
    scratch: Path,
    install: Callable[[list[dict[str, Any]], Path], None],
    compile_dirs: Callable[[list[Path]], None],
    write_zip: Callable[[Path, Path, list[Path]], None],
) -> None:
    site = scratch / "site"
    install([entry for entry, _ in missing], site)
    trees = {_canonical(str(entry["name"])): scratch / folder.name for entry, folder in missing}
    for dist_info in sorted(site.glob("*.dist-info")):
        name = _canonical(dist_info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name not in trees:
            raise LayerError(f"{dist_info.name} was installed but not asked for")
        _move_record(site, dist_info, trees.pop(name) / FILES)
    left = [
        path
        for path in site.rglob("*")
        if path.is_file() and path.relative_to(site).parts[0] not in _NOT_PACKAGED
    ]
    if trees or left:
        raise LayerError(f"files of no package: {left[:3]}, packages without files: {trees}")
    built = [scratch / folder.name for _, folder in missing]
    compile_dirs([layer / FILES for layer in built])
    for layer, (_, folder) in zip(built, missing, strict=True):
        files = sorted(p for p in (layer / FILES).rglob("*") if p.is_file())
        write_zip(layer / MEMBERS, layer / FILES, files)
        for path in files:
            _freeze(path)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # another build made it first: theirs is the same
            layer.rename(folder)


def _freeze(path: Path) -> None:
    """Read-only for everyone, the owner too: a bundle's file is never written in place."""
    path.chmod(0o555 if path.stat().st_mode & stat.S_IXUSR else 0o444)


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


def _move_record(site: Path, dist_info: Path, into: Path) -> None:
    """Move the files a wheel's RECORD names (plus the RECORD) from `site` into `into`."""
    with (dist_info / "RECORD").open(newline="") as handle:
        paths = [row[0] for row in csv.reader(handle) if row]
    for relative in paths:
        source = (site / relative).resolve()
        if not source.is_relative_to(site.resolve()) or not source.is_file():
            continue  # console scripts outside the folder, or files already gone
        parts = source.relative_to(site.resolve()).parts
        if parts[0] == "bin":
            continue
        destination = into.joinpath(*parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, destination)


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


def link_members(members: dict[str, tuple[Path, zipfile.ZipInfo]], dest: Path) -> int:
    """Make `dest` the bundle's folder of hard links to its packages' read-only files, each
    checked against its member first; returns the bytes linked. Raises OSError (e.g. another
    filesystem) or LayerError (a file that does not match: its package folder is removed)."""
    os.mkdir(dest)
    made = {str(dest)}
    total = 0
    for name in sorted(members):
        source, info = members[name]
        parts = PurePosixPath(name).parts
        if not parts or ".." in parts or PurePosixPath(name).is_absolute():
            raise LayerError(f"unsafe member name {name!r} in {source}")
        original = source.parent.joinpath(FILES, *parts)
        _check_member(original, info, source.parent)
        link = os.path.join(dest, *parts)
        folder = os.path.dirname(link)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        os.link(original, link)
        total += info.file_size
    return total


def _check_member(path: Path, info: zipfile.ZipInfo, layer: Path) -> None:
    """The file is its member (size, CRC-32) and still read-only, or the folder goes."""
    try:
        found = os.lstat(path)
        same = (
            stat.S_ISREG(found.st_mode)
            and not found.st_mode & 0o222
            and found.st_size == info.file_size
            and _crc32(path) == info.CRC
        )
    except FileNotFoundError:
        same = False
    if not same:
        _discard_files(layer)
        raise LayerError(
            f"{info.filename} in package folder {layer.name} no longer matches its members.zip "
            "(changed, or made writable); the folder's files were removed and will be made again"
        )


def _crc32(path: Path) -> int:
    crc = 0
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            crc = zlib.crc32(chunk, crc)
    return crc


def _discard_files(layer: Path) -> None:
    doomed = layer.parent / ".tmp" / f"discard-{uuid.uuid4().hex}"
    doomed.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.rename(layer / FILES, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
