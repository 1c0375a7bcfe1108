"""Is an unpacked bundle still what was published? A cheap check per call, a full one first.

A bundle folder under `/tmp` can be changed by anything running as the server's uid: a run
without a fence (the runner function on Lambda, `kiln dev` unfenced) may `chmod` a file and
write it, or plant one beside it; an older Kiln, a `chmod -R` or another server of the same
user may leave it unreadable to the runs' uids. So a process serves a bundle folder only
while it holds a `Seal` of it:

- `check_against(zip, folder)` (first use in a process, and whenever a seal breaks): every
  file is a regular file with one link (no inode shared with a build cache or anything else
  a `chmod` elsewhere reaches), read-only (0444, 0555 if executable), the size and CRC-32 of
  its member; every folder 0755; nothing more, nothing less. Costs a read of the bundle.
- per call, where the kernel gives inotify (Linux; `Watch`): every file and folder of the
  sealed bundle is watched, so a write, `chmod`, link, rename, new or removed entry, through
  any path, is an event in the queue by the time the call that made it returns; a call reads
  that queue (one non-blocking `read`) and `lstat`s the bundle's folder. About 2 µs whatever
  the bundle's size (`bench/bundles/seal.py`).
- per call otherwise (`Seal.holds()`): one `lstat` per file and folder, comparing inode,
  mode, size, link count, mtime and ctime with the seal's. Any write, `chmod`, rename, new
  or removed entry changes a ctime or a folder's mtime, and no unprivileged process can set
  a ctime back. About 2 µs per file. The bundle's own folder is compared by inode, mode and
  names (its times record use).
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import threading
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

SIZE_FILE = ".kiln-size"
FILE_MODES = (0o444, 0o555)
DIR_MODE = 0o755
_CHUNK = 1 << 20

Key = tuple[int, int, int, int, int, int]


def _key(info: os.stat_result) -> Key:
    return (info.st_ino, info.st_mode, info.st_size, info.st_nlink,
            info.st_mtime_ns, info.st_ctime_ns)  # fmt: skip


@dataclass(frozen=True)
class Seal:
    """What a bundle folder looked like when it was last found to be its zip."""

    root: str
    root_key: tuple[int, int]
    names: frozenset[str]
    entries: tuple[tuple[str, Key], ...]

    @classmethod
    def of(cls, folder: Path) -> Seal:
        root = str(folder)
        info = os.lstat(root)
        entries: list[tuple[str, Key]] = []
        pending = [root]
        while pending:
            with os.scandir(pending.pop()) as found:
                for entry in found:
                    entries.append((entry.path, _key(entry.stat(follow_symlinks=False))))
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        return cls(root, (info.st_ino, info.st_mode), frozenset(os.listdir(root)), tuple(entries))

    def paths(self) -> list[str]:
        return [self.root, *(path for path, _ in self.entries)]

    def root_holds(self) -> bool:
        """The bundle's folder is still the one sealed, with its mode (its contents are
        `Watch`'s or `holds`'s to check)."""
        try:
            info = os.lstat(self.root)
        except OSError:
            return False
        return (info.st_ino, info.st_mode) == self.root_key

    def holds(self) -> bool:
        """True while nothing in the folder changed since the seal was made."""
        try:
            if not self.root_holds():
                return False
            if frozenset(os.listdir(self.root)) != self.names:
                return False
            lstat = os.lstat
            for path, key in self.entries:
                now = lstat(path)
                if (now.st_ino, now.st_mode, now.st_size, now.st_nlink,
                        now.st_mtime_ns, now.st_ctime_ns) != key:  # fmt: skip
                    return False
        except OSError:
            return False
        return True


def check_against(zip_path: Path, folder: Path) -> str | None:
    """None when `folder` holds exactly the zip's files, readable by every run; else what
    is wrong (the first difference found)."""
    with zipfile.ZipFile(zip_path) as archive:
        infos = archive.infolist()
    members = {info.filename: info for info in infos if not info.is_dir()}
    folders = {"."} | {info.filename.rstrip("/") for info in infos if info.is_dir()}
    for name in [*members, *folders]:
        folders.update(str(parent) for parent in PurePosixPath(name).parents)
    seen: set[str] = set()
    pending = [(folder, PurePosixPath("."))]
    while pending:
        here, relative = pending.pop()
        info = os.lstat(here)
        if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) != DIR_MODE:
            return f"{relative}/ is not a folder of mode 755"
        with os.scandir(here) as found:
            for entry in found:
                name = (relative / entry.name).as_posix()
                if entry.is_dir(follow_symlinks=False):
                    if name not in folders:
                        return f"{name}/ is not in the bundle"
                    pending.append((Path(entry.path), PurePosixPath(name)))
                elif name == SIZE_FILE:
                    if not entry.is_file(follow_symlinks=False):
                        return f"{name} is not a file"
                else:
                    problem = _file_problem(Path(entry.path), name, members.get(name))
                    if problem:
                        return problem
                    seen.add(name)
    missing = sorted(set(members) - seen)
    return f"{missing[0]} is missing ({len(missing)} files)" if missing else None


def _file_problem(path: Path, name: str, member: zipfile.ZipInfo | None) -> str | None:
    if member is None:
        return f"{name} is not in the bundle"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        return f"{name} cannot be opened ({error.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"{name} is not a regular file"
        if info.st_nlink != 1:
            return f"{name} has {info.st_nlink} links (it shares its inode)"
        if stat.S_IMODE(info.st_mode) != mode_of(member):
            return f"{name} has mode {stat.S_IMODE(info.st_mode):o}, not {mode_of(member):o}"
        if info.st_size != member.file_size:
            return f"{name} has {info.st_size} bytes, not {member.file_size}"
        crc = 0
        while chunk := os.read(fd, _CHUNK):
            crc = zlib.crc32(chunk, crc)
        if crc != member.CRC:
            return f"{name} is not its published content"
    finally:
        os.close(fd)
    return None


def mode_of(member: zipfile.ZipInfo) -> int:
    """A bundle file's mode: read-only, executable when its member is."""
    return FILE_MODES[1] if (member.external_attr >> 16) & stat.S_IXUSR else FILE_MODES[0]


def open_folders(root: Path) -> None:
    """Make every folder under `root` 0755, whatever the umask made it: runs of other uids
    must be able to enter them."""
    os.chmod(root, DIR_MODE)
    for current, dirs, _ in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(current, name), DIR_MODE)


# inotify(7): what changes a file or a folder's entries, through any path to it.
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_ISDIR = 0x400, 0x800, 0x4000, 0x40000000
_IN_DONT_FOLLOW = 0x2000000
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_CHANGES = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO
            | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF)  # fmt: skip
_EVENT = struct.Struct("iIII")


class Watch:
    """One inotify descriptor watching every file and folder of the sealed bundles of a
    process. `changed()` says which bundles had anything change since it was last asked.

    The bundle's own folder is left out for its attributes: each use sets its times (the
    cache's recency), so its mode is `Seal.root_holds`'s to check. Where inotify is missing
    or out of watches (`fs.inotify.max_user_watches`), `add` says so and the caller checks
    that bundle with `Seal.holds` instead."""

    def __init__(self, *, enabled: bool = True) -> None:
        self._lock = threading.Lock()
        self._owner: dict[int, str] = {}  # watch descriptor -> bundle id
        self._roots: set[int] = set()
        self.fd = -1
        if not enabled:
            return
        try:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self.fd = int(self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
        except (OSError, AttributeError):
            self.fd = -1

    def add(self, bundle_id: str, paths: Iterable[str]) -> bool:
        """Watch `paths` (the bundle's folder first) for `bundle_id`; False if it cannot."""
        if self.fd < 0:
            return False
        added: list[int] = []
        with self._lock:
            for path in paths:
                wd = int(self._libc.inotify_add_watch(self.fd, os.fsencode(path),
                                                      _CHANGES | _IN_DONT_FOLLOW))  # fmt: skip
                if wd < 0:
                    for done in added:
                        self._forget(done)
                    return False
                if not added:
                    self._roots.add(wd)
                added.append(wd)
                self._owner[wd] = bundle_id
        return True

    def drop(self, bundle_id: str) -> None:
        with self._lock:
            for wd in [wd for wd, owner in self._owner.items() if owner == bundle_id]:
                self._forget(wd)

    def changed(self) -> set[str]:
        """Bundles with a change since the last call (every bundle after a queue overflow)."""
        if self.fd < 0:
            return set()
        found: set[str] = set()
        with self._lock:
            while True:
                try:
                    data = os.read(self.fd, 64 * 1024)
                except BlockingIOError:
                    break
                offset = 0
                while offset < len(data):
                    wd, mask, _, length = _EVENT.unpack_from(data, offset)
                    offset += _EVENT.size + length
                    if mask & _IN_Q_OVERFLOW:
                        found.update(self._owner.values())
                    elif not (wd in self._roots and not length and mask & ~_IN_ISDIR == _IN_ATTRIB):
                        found.add(self._owner.get(wd, ""))
        found.discard("")
        return found

    def _forget(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self.fd, wd)
        self._owner.pop(wd, None)
        self._roots.discard(wd)
