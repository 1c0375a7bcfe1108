"""A build in the serving process (kiln dev) hands its bundle to that process's cache as copies
of what it built: no zip unpacked, no download, the same files the zip holds, and no inode
shared with the build cache (whose files `kiln dev` makes private at every start)."""

import io
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.bundles.build import Toolchain, build_bundle
from kiln.bundles.cache import SIZE_FILE, BundleCache
from kiln.bundles.errors import BuildError
from kiln.bundles.identity import default_target
from kiln.bundles.scheduler import LocalBuildWorker, run_build
from kiln.bundles.store import BundleRecord, BundleStore, zip_key

pytestmark = pytest.mark.slow

TARGET = default_target("python")
NOBODY = 65534  # another local user


@pytest.fixture
def store(aws: AwsStack) -> BundleStore:
    return BundleStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)


def pending(store: BundleStore, *requirements: str) -> BundleRecord:
    record = store.ensure("python", TARGET, list(requirements))
    assert record is not None
    assert record.status == "pending", record
    return record


def build(store: BundleStore, record: BundleRecord, tmp_path: Path, **options: Any) -> None:
    built = run_build(store, record.id, workdir=tmp_path, **options)
    assert built.status == "ready", built.error


def tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and path.name != SIZE_FILE
    }


def zipped(store: BundleStore, bundle_id: str) -> dict[str, bytes]:
    body = store.s3.get_object(Bucket=store.bucket, Key=zip_key(bundle_id))["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def package_file(build_cache: Path, name: str) -> Path:
    found = sorted(build_cache.glob(f"packages/*/files/{name}"))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_build_is_handed_to_its_cache_as_read_only_copies_sharing_no_inode_with_the_build(
    store: BundleStore, tmp_path: Path, installer: str
) -> None:
    cache = BundleCache(store, root=tmp_path / "cache", targets=(TARGET,))
    tools = Toolchain(installer=installer, cache_dir=tmp_path / "build-cache")
    record = pending(store, "six==1.17.0", "humanize==4.*")
    build(store, record, tmp_path, toolchain=tools, adopt=cache)
    assert (cache.handovers, cache.unpacks, cache.downloads) == (1, 0, 0)
    # A call asks for the build its tool's fingerprint names (kiln.bundles.cache): the one
    # handed over, known as that build once it was published, so still nothing is downloaded.
    ready = store.get(record.id)
    assert ready is not None
    assert ready.resolved_sha256 is not None
    path = cache.path_for(record.id, ready.resolved_sha256)
    assert cache.downloads == 0, "the first use downloaded a bundle its own process had built"
    assert tree(path) == zipped(store, record.id)
    files = [p for p in path.rglob("*") if p.is_file() and p.name != SIZE_FILE]
    writable = [p for p in files if p.stat().st_mode & 0o222]
    assert writable == [], f"bundle files anyone may write: {writable[:5]}"
    shared = [p for p in files if p.stat().st_nlink != 1]
    assert shared == [], f"bundle files sharing their inode: {shared[:5]}"
    if installer == "uv":  # a chmod of the build cache (kiln dev's start) does not reach it
        kept = package_file(tmp_path / "build-cache", "six.py")
        kept.chmod(0o600)
        assert stat.S_IMODE((path / "six.py").stat().st_mode) == 0o444
    run = subprocess.run(
        [sys.executable, "-c", "import humanize, six; print(humanize.naturalsize(3_000_000))"],
        env={"PYTHONPATH": str(path), "PATH": os.environ["PATH"]},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.stdout.strip() == "3.0 MB", run.stderr


def test_a_package_file_changed_after_its_build_is_never_handed_over_and_is_made_again(
    store: BundleStore, tmp_path: Path
) -> None:
    cache = BundleCache(store, root=tmp_path / "cache", targets=(TARGET,))
    tools = Toolchain(installer="uv", cache_dir=tmp_path / "build-cache")
    build(store, pending(store, "six==1.17.0"), tmp_path, toolchain=tools, adopt=cache)
    kept = package_file(tmp_path / "build-cache", "six.py")
    original = kept.read_bytes()
    # What a tool under the server's uid with no fence could do: change the mode, then write.
    kept.chmod(0o644)
    kept.write_bytes(original + b"raise SystemExit('changed after the build')\n")
    kept.chmod(0o444)
    second = pending(store, "six==1.17.*")  # the same package, another bundle
    build(store, second, tmp_path, toolchain=tools, adopt=cache)
    assert (cache.handovers, cache.unpacks) == (1, 1), "a changed file was copied"
    assert (cache.path_for(second.id) / "six.py").read_bytes() == original
    assert not kept.exists(), "the changed package folder's files were kept"
    third = pending(store, "six~=1.17.0")
    build(store, third, tmp_path, toolchain=tools, adopt=cache)
    assert cache.handovers == 2  # its files made again from its zip, and copied
    assert package_file(tmp_path / "build-cache", "six.py").read_bytes() == original
    assert (cache.path_for(third.id) / "six.py").read_bytes() == original


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to act as another user")
def test_a_package_folder_another_user_owns_is_refused_with_whose_it_is(
    store: BundleStore, tmp_path: Path
) -> None:
    packages = tmp_path / "build-cache" / "packages"
    packages.mkdir(parents=True)
    os.chown(packages, NOBODY, NOBODY)
    tools = Toolchain(installer="uv", cache_dir=tmp_path / "build-cache")
    with pytest.raises(BuildError, match="belongs to uid 65534, not to this server's uid"):
        build_bundle(pending(store, "six==1.17.0"), workdir=tmp_path / "w", toolchain=tools)


def test_a_worker_that_moves_on_after_each_hand_over_still_publishes_every_bundle(
    store: BundleStore, tmp_path: Path
) -> None:
    """The next build starts once the one before has handed its files over; waiting for the
    worker to be idle still waits for every zip to be uploaded and marked ready."""
    cache = BundleCache(store, root=tmp_path / "cache", targets=(TARGET,))
    tools = Toolchain(installer="uv", cache_dir=tmp_path / "build-cache")
    worker = LocalBuildWorker(store, workdir=tmp_path, toolchain=tools, adopt=cache).start()
    try:
        records = [pending(store, "six==1.17.0"), pending(store, "six==1.17.0", "idna==3.*")]
        for record in records:
            worker.schedule(record.id)
        assert worker.wait_idle(600)
    finally:
        worker.stop()
    finished = [store.get(record.id) for record in records]
    assert [r.status if r else None for r in finished] == ["ready", "ready"], finished
    assert (cache.handovers, cache.unpacks, cache.downloads) == (2, 0, 0)
    for record in records:
        assert tree(cache.path_for(record.id)) == zipped(store, record.id)
