"""The build cache keeps to its budget: emptied after a build once past it, never under one.

Without a bound a long-lived builder (the builder function's 4 GB of /tmp, `kiln dev`'s state
directory) fills its storage with packages and every build after fails for want of space."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import AwsStack
from kiln.bundles import build_cache
from kiln.bundles.build import Toolchain
from kiln.bundles.identity import default_target
from kiln.bundles.scheduler import run_build
from kiln.bundles.store import BundleStore
from kiln.settings import Settings


def _fill(cache: Path, megabytes: int) -> None:
    folder = cache / "packages" / "abc" / "files"
    folder.mkdir(parents=True)
    (folder / "big.bin").write_bytes(b"\0" * (megabytes * 2**20))
    (folder / "big.bin").chmod(0o444)  # package files are read-only (kiln.bundles.layers)
    (cache / "simple-v16").mkdir()
    (cache / "simple-v16" / "six.rkyv").write_bytes(b"x" * 1000)


def test_a_cache_past_its_budget_is_emptied_and_one_within_it_is_kept(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _fill(cache, 3)
    assert build_cache.size_of(cache) == 3 * 2**20 + 1000
    assert build_cache.trim(cache, 4 * 2**20) == 0  # within the budget: kept
    assert (cache / "packages" / "abc" / "files" / "big.bin").is_file()
    assert build_cache.trim(cache, 2 * 2**20) == 3 * 2**20 + 1000
    assert sorted(p.name for p in cache.iterdir()) == [build_cache.LOCK]  # all gone, no trash
    assert build_cache.trim(tmp_path / "absent", 0) == 0


def test_a_hard_link_is_counted_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _fill(cache, 1)
    os.link(cache / "packages" / "abc" / "files" / "big.bin", cache / "linked.bin")
    (cache / "elsewhere").symlink_to(tmp_path)  # a link is not followed
    assert build_cache.size_of(cache) == 2**20 + 1000


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kiln.bundles import build_cache
    with build_cache.in_use(Path(sys.argv[1])):
        print("holding", flush=True)
        sys.stdin.readline()
    """
)


def test_a_cache_another_process_is_building_with_is_not_emptied(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _fill(cache, 2)
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cache)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        if line != "holding\n":
            holder.kill()
            pytest.fail(f"the holder did not start: {holder.communicate()[1]}")
        assert build_cache.trim(cache, 2**20) is None  # put off: a build holds it
        assert build_cache.after_build(cache, 2**20) == 0  # measured (a first build): put off
        assert build_cache.after_build(cache, 2**20) == 0  # still due, still put off
        assert (cache / "packages" / "abc" / "files" / "big.bin").is_file()
        _, errors = holder.communicate("done\n", timeout=30)
        assert holder.returncode == 0, errors
    assert build_cache.after_build(cache, 2**20) > 0  # the build is over: due, and emptied


def test_the_budget_is_a_setting_with_a_default() -> None:
    assert Toolchain.from_settings(Settings.from_env({}).bundles).cache_budget_mb is None
    settings = Settings.from_env({"KILN_BUILD_CACHE_MB": "64"})
    assert Toolchain.from_settings(settings.bundles).cache_budget_mb == 64.0
    assert build_cache.DEFAULT_BUDGET_MB == 2048


def test_the_cache_is_measured_after_a_first_build_every_tenth_and_when_the_disk_is_tight(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    _fill(cache, 3)
    budget = 2 * 2**20
    assert build_cache.after_build(cache, budget) > 0  # this process's first build here
    _fill(cache, 3)
    for _ in range(build_cache.CHECK_EVERY - 1):  # not measured: the disk has room
        assert build_cache.after_build(cache, budget) == 0
    assert (cache / "packages" / "abc" / "files" / "big.bin").is_file()
    assert build_cache.after_build(cache, budget) > 0  # the tenth
    _fill(cache, 3)
    assert build_cache.after_build(cache, budget) == 0
    tight = shutil.disk_usage(cache).free + 2**30  # less free space than this budget
    assert build_cache.after_build(cache, tight) == 0  # measured at once (within it): count anew
    for _ in range(build_cache.CHECK_EVERY - 1):
        assert build_cache.after_build(cache, budget) == 0
    assert build_cache.after_build(cache, budget) > 0  # ten builds after that measurement


@pytest.mark.slow
def test_a_build_past_the_budget_empties_the_cache_and_the_next_build_runs_cold(
    aws: AwsStack, tmp_path: Path
) -> None:
    store = BundleStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    cache = tmp_path / "cache"
    tools = Toolchain(cache_dir=cache, cache_budget_mb=0.05)  # 50 KB: any package passes it
    (tmp_path / "work").mkdir()
    target = default_target("python")
    first = store.ensure("python", target, ["six==1.17.0"])
    second = store.ensure("python", target, ["six==1.17.0", "humanize==4.*"])
    assert first is not None
    assert second is not None
    done = run_build(store, first.id, workdir=tmp_path / "work", toolchain=tools)
    assert done.status == "ready", done.error
    assert sorted(p.name for p in cache.iterdir()) == [build_cache.LOCK]  # measured: emptied
    again = run_build(store, second.id, workdir=tmp_path / "work", toolchain=tools)
    assert again.status == "ready", again.error  # built cold, from an empty cache
    assert build_cache.size_of(cache) > 0  # kept until the next measurement (CHECK_EVERY)
    roomy = Toolchain(cache_dir=tmp_path / "roomy")  # the default budget: the cache is kept
    third = store.ensure("python", target, ["six==1.16.0"])
    assert third is not None
    assert run_build(store, third.id, workdir=tmp_path / "work", toolchain=roomy).status == "ready"
    assert build_cache.size_of(tmp_path / "roomy") > 0
