"""Bench: what checking a cached bundle costs, per call and at first use.

A process serves a bundle folder only while its seal holds (`kiln.bundles.seal`: one `lstat`
per file and folder, every call); a folder it did not make itself is first checked against
its zip (a read and CRC-32 of every file). This times both on bundles of the sizes Kiln meets
(the example tools' humanize, ~90 files, and lodash, ~1,050; boto3's ~3,000 and more), next to
what a call costs anyway, and the hand-over's copy against the hard links it replaced.

Run: `python -m bench.bundles.seal [--repeat 200]`. Prints one line per size: µs per call
for `Seal.holds`, ms for a first-use check and for copy / link of the whole folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

from kiln.bundles.layers import copy_file
from kiln.bundles.seal import Seal, check_against

SIZES = (90, 1_050, 3_000, 10_000)  # humanize, lodash, boto3, a large one
FILES_PER_FOLDER = 25


def make_zip(path: Path, files: int) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for n in range(files):
            body = (f"# module {n}\n" + "x = 1\n" * (n % 200 + 20)).encode()
            archive.writestr(f"pkg/sub{n // FILES_PER_FOLDER}/mod{n}.py", body)


def unpack(zip_path: Path, into: Path) -> None:
    from kiln.bundles.cache import _unpack

    _unpack(zip_path, into)


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"{'files':>7} {'holds µs/call':>14} {'µs/file':>8} {'first-use ms':>13} "
          f"{'copy ms':>8} {'link ms':>8}")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for files in SIZES:
            zip_path = root / f"{files}.zip"
            make_zip(zip_path, files)
            folder = root / f"b{files}"
            unpack(zip_path, folder)
            seal = Seal.of(folder)
            assert seal.holds()
            holds = timed(seal.holds, args.repeat)
            first = timed(lambda: check_against(zip_path, folder), max(3, args.repeat // 50))
            copies, links = [], []
            for n in range(3):
                started = time.perf_counter()
                copy_tree(folder, root / f"c{files}.{n}", link=False)
                copies.append(time.perf_counter() - started)
                started = time.perf_counter()
                copy_tree(folder, root / f"l{files}.{n}", link=True)
                links.append(time.perf_counter() - started)
            entries = len(seal.entries)
            print(f"{files:>7} {holds * 1e6:>14.0f} {holds * 1e6 / entries:>8.2f} "
                  f"{first * 1e3:>13.1f} {statistics.median(copies) * 1e3:>8.1f} "
                  f"{statistics.median(links) * 1e3:>8.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
