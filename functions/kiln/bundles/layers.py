"""One folder per locked package, kept across builds (as Windmill does), and bundles merged
from them.

A Python bundle built by uv with a build cache is assembled, not installed: each locked wheel
(by its sha256, for one target and one bytecode compiler) has a folder under
`<cache>/packages/` holding `members.zip`, its installed files with their bytecode already
compressed. A build installs, compiles and compresses only the wheels no earlier build has
seen, then writes the bundle by copying the members' compressed bytes as they are: a second
tool that shares `boto3` with a first one neither compiles nor compresses botocore again.

The bundle is byte for byte what `_write_zip` makes from the same files (sorted names, fixed
times and modes), so layered and unlayered builds of one lock give the same zip.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import os
import re
import shutil
import struct
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

LAYER_RECIPE = 1  # bump when a layer's files change for the same wheel
MEMBERS = "members.zip"
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_NOT_PACKAGED = {"bin", ".lock"}  # console scripts, and the lock file uv leaves in --target


class LayerError(Exception):
    """The installed files could not be told apart by package; build the whole tree instead."""


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
    """Every locked package's members.zip, making the missing ones; raises LayerError."""
    keys = [layer_key(entry, flavour) for entry in lock]
    if any(key is None for key in keys):
        raise LayerError("a locked package has no wheel hash")
    folders = [root / str(key) for key in keys]
    missing = [(e, f) for e, f in zip(lock, folders, strict=True) if not (f / MEMBERS).is_file()]
    if missing:
        scratch = root / ".tmp" / uuid.uuid4().hex
        try:
            _make_layers(missing, scratch, install, compile_dirs, write_zip)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
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
        _move_record(site, dist_info, trees.pop(name) / "files")
    left = [
        path
        for path in site.rglob("*")
        if path.is_file() and path.relative_to(site).parts[0] not in _NOT_PACKAGED
    ]
    if trees or left:
        raise LayerError(f"files of no package: {left[:3]}, packages without files: {trees}")
    built = [scratch / folder.name for _, folder in missing]
    compile_dirs([layer / "files" for layer in built])
    for layer, (_, folder) in zip(built, missing, strict=True):
        files = sorted(p for p in (layer / "files").rglob("*") if p.is_file())
        write_zip(layer / MEMBERS, layer / "files", files)
        shutil.rmtree(layer / "files")
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # another build made it first: theirs is the same
            layer.rename(folder)


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
