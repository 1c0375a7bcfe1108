"""Bench: what checking a cached bundle costs, per call and at first use.

A process serves a bundle folder only while its seal holds (`kiln.bundles.seal`): per call,
a read of the inotify queue watching its every file and folder plus one `lstat` (`watch`),
or, without inotify, one `lstat` per file and folder (`lstat`); a folder it did not make
itself is first checked against its zip (a read and CRC-32 of every file). This times them
on bundles of the sizes Kiln meets (the example tools' humanize, ~90 files, and lodash,
~1,050; boto3's ~3,000 and more), and the hand-over's copy against the hard links it
replaced.

Run: `python -m bench.bundles.seal [--repeat 200]`. Prints one line per size: µs per call
with inotify and with `Seal.holds`, ms for a first-use check, for watching the folder once
and for copy / link of the whole folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

from kiln.bundles.folders import unpack
from kiln.bundles.layers import copy_file
from kiln.bundles.seal import Seal, Watch, check_against

SIZES = (90, 1_050, 3_000, 10_000)  # humanize, lodash, boto3, a large one
FILES_PER_FOLDER = 25


def make_zip(path: Path, files: int) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for n in range(files):
            body = (f"# module {n}\n" + "x = 1\n" * (n % 200 + 20)).encode()
            archive.writestr(f"pkg/sub{n // FILES_PER_FOLDER}/mod{n}.py", body)


def timed(function: object, repeat: int) -> float:
    """Median seconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def copy_tree(source: Path, dest: Path, link: bool) -> None:
    for current, _, names in os.walk(source):
        target = dest / Path(current).relative_to(source)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            if link:
                os.link(Path(current, name), target / name)
                continue
            fd = os.open(Path(current, name), os.O_RDONLY)
            try:
                copy_file(fd, str(target / name), os.fstat(fd).st_size, 0o444)
            finally:
                os.close(fd)


def measure(root: Path, files: int, repeat: int) -> str:
    zip_path = root / f"{files}.zip"
    make_zip(zip_path, files)
    folder = root / f"b{files}"
    unpack(zip_path, folder)
    seal = Seal.of(folder)
    assert seal.holds()
    holds = timed(seal.holds, repeat)
    watch = Watch()
    started = time.perf_counter()
    assert watch.add(str(files), seal.paths())
    adding = time.perf_counter() - started
    watched = timed(lambda: (watch.changed(), seal.root_holds()), repeat)
    assert not watch.changed()
    first = timed(lambda: check_against(zip_path, folder), max(3, repeat // 50))
    copies, links = [], []
    for n in range(3):
        started = time.perf_counter()
        copy_tree(folder, root / f"c{files}.{n}", link=False)
        copies.append(time.perf_counter() - started)
        started = time.perf_counter()
        copy_tree(folder, root / f"l{files}.{n}", link=True)
        links.append(time.perf_counter() - started)
    entries = len(seal.entries)
    copy, link = statistics.median(copies), statistics.median(links)
    return (f"{files:>7} {watched * 1e6:>14.1f} {holds * 1e6:>14.0f} "
            f"{holds * 1e6 / entries:>8.2f} {first * 1e3:>13.1f} {adding * 1e3:>13.1f} "
            f"{copy * 1e3:>8.1f} {link * 1e3:>8.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"{'files':>7} {'watch µs/call':>14} {'lstat µs/call':>14} {'µs/file':>8} "
          f"{'first-use ms':>13} {'add-watch ms':>13} {'copy ms':>8} {'link ms':>8}")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        for files in SIZES:
            print(measure(Path(scratch), files, args.repeat))


if __name__ == "__main__":
    main()
