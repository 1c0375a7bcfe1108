"""The per-process bundle cache: download once, unpack atomically, reuse, evict LRU."""

import io
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.aws.clients import ensure_resources, make_clients
from kiln.bundles.cache import SIZE_FILE, BundleCache, BundleFetchError, BundleNotReadyError
from kiln.bundles.identity import default_target
from kiln.bundles.owned_dirs import UnsafeDirectoryError, temp_place
from kiln.bundles.scheduler import run_build
from kiln.bundles.store import BundleRecord, BundleStore

TARGET = default_target("python")


@pytest.fixture(scope="module")
def stack(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsStack]:
    """One table and bucket with three real, ready bundles, shared by this module's tests."""
    name = f"kiln-cache-{uuid.uuid4().hex[:8]}"
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    ensure_resources(clients, table=name, bucket=name)
    store = BundleStore(clients.dynamodb, clients.s3, table=name, bucket=name)
    workdir = tmp_path_factory.mktemp("builds")
    for requirements in (["humanize==4.*"], ["six==1.17.0"], ["idna==3.*"]):
        record = store.ensure("python", TARGET, requirements)
        assert record is not None
        assert run_build(store, record.id, workdir=workdir).status == "ready"
    return AwsStack(moto_endpoint, clients, name, name)


def fresh_store(stack: AwsStack) -> BundleStore:
    """A store on new clients, as a new process would have."""
    clients = make_clients(endpoint_url=stack.endpoint_url, region="us-east-1")
    return BundleStore(clients.dynamodb, clients.s3, table=stack.table, bucket=stack.bucket)


def ready(store: BundleStore, *requirements: str) -> BundleRecord:
    record = store.ensure("python", TARGET, list(requirements))
    assert record is not None
    assert record.status == "ready"
    return record


def count_requests(client: Any) -> Counter[str]:
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    client.meta.events.register("before-call", count)
    return calls


def printed_from(bundle: Path, code: str) -> str:
    """What `code` prints in a fresh interpreter that imports from `bundle` alone."""
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(bundle), "PATH": os.environ["PATH"]},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return run.stdout.strip()


def visible_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def test_first_call_downloads_once_and_the_next_fifty_make_no_request(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    s3_calls, dynamodb_calls = count_requests(store.s3), count_requests(store.dynamodb)
    cache = BundleCache(store, root=tmp_path / "cache")
    path = cache.path_for(humanize.id)
    assert s3_calls == {"GetObject": 1}
    assert dynamodb_calls == {"GetItem": 1}
    for _ in range(50):
        assert cache.path_for(humanize.id) == path
    with cache.use(humanize.id) as used:
        assert used == path
    assert s3_calls == {"GetObject": 1}
    assert dynamodb_calls == {"GetItem": 1}
    assert (cache.downloads, cache.unpacks) == (1, 1)
    assert printed_from(path, "import humanize; print(humanize.naturalsize(3_000_000))") == "3.0 MB"


def test_ten_concurrent_first_calls_unpack_once(stack: AwsStack, tmp_path: Path) -> None:
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    s3_calls = count_requests(store.s3)
    cache = BundleCache(store, root=tmp_path / "cache")
    barrier = threading.Barrier(10)
    paths: list[Path] = []

    def call() -> None:
        barrier.wait()
        paths.append(cache.path_for(humanize.id))

    threads = [threading.Thread(target=call) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(paths) == 10
    assert len(set(paths)) == 1
    assert (cache.downloads, cache.unpacks) == (1, 1)
    assert s3_calls == {"GetObject": 1}


CHILD = """
import json, sys
from pathlib import Path
from kiln.aws.clients import make_clients
from kiln.bundles.cache import BundleCache
from kiln.bundles.store import BundleStore
endpoint, table, root, bundle = sys.argv[1:5]
clients = make_clients(endpoint_url=endpoint, region="us-east-1")
store = BundleStore(clients.dynamodb, clients.s3, table=table, bucket=table)
cache = BundleCache(store, root=Path(root))
sys.stdin.read()  # start together
path = cache.path_for(bundle)
print(json.dumps({"path": str(path), "unpacks": cache.unpacks}))
"""


@pytest.mark.slow
def test_processes_sharing_a_cache_folder_unpack_once(stack: AwsStack, tmp_path: Path) -> None:
    humanize = ready(fresh_store(stack), "humanize==4.*")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                stack.endpoint_url,
                stack.table,
                str(tmp_path),
                humanize.id,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [child.communicate("go", timeout=60)[0] for child in children]
    results = [json.loads(out) for out in outputs]
    assert {r["path"] for r in results} == {str(tmp_path / humanize.id)}
    assert sum(r["unpacks"] for r in results) == 1


def test_a_download_cut_halfway_leaves_nothing_a_later_call_would_use(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    root = tmp_path / "cache"
    cache = BundleCache(store, root=root)

    class CutBody:
        def __init__(self, body: Any, size: int) -> None:
            self.body, self.left = body, size // 2

        def read(self, amount: int = -1) -> bytes:
            if self.left <= 0:
                raise ConnectionResetError("connection cut by the test")
            chunk = self.body.read(min(amount, self.left) if amount > 0 else self.left)
            self.left -= len(chunk)
            return bytes(chunk)

    def cut(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Body"] = CutBody(parsed["Body"], int(parsed["ContentLength"]))

    store.s3.meta.events.register("after-call.s3.GetObject", cut)
    with pytest.raises(BundleFetchError, match="could not be downloaded"):
        cache.path_for(humanize.id)
    assert visible_entries(root) == []
    assert list((root / ".tmp").iterdir()) == []
    store.s3.meta.events.unregister("after-call.s3.GetObject", cut)
    path = cache.path_for(humanize.id)
    assert (path / "humanize" / "__init__.py").is_file()
    assert cache.downloads == 2


def test_a_damaged_zip_is_refused_and_never_unpacked(stack: AwsStack, tmp_path: Path) -> None:
    store = fresh_store(stack)
    six = ready(store, "six==1.17.0")
    good = store.s3.get_object(Bucket=store.bucket, Key=six.zip_key)["Body"].read()
    store.s3.put_object(Bucket=store.bucket, Key=six.zip_key, Body=good[: len(good) // 2])
    try:
        cache = BundleCache(store, root=tmp_path / "cache")
        with pytest.raises(BundleFetchError, match="arrived damaged"):
            cache.path_for(six.id)
        assert visible_entries(tmp_path / "cache") == []
    finally:
        store.s3.put_object(Bucket=store.bucket, Key=six.zip_key, Body=good)
    assert (cache.path_for(six.id) / "six.py").is_file()


def test_leftovers_of_a_process_that_died_mid_unpack_are_never_used(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    six = ready(store, "six==1.17.0")
    root = tmp_path / "cache"
    cache = BundleCache(store, root=root)
    half = root / ".tmp" / f"{six.id}.999.dead.dir"
    half.mkdir()
    (half / "six.py").write_text("raise ImportError('half unpacked')\n")
    path = cache.path_for(six.id)
    assert "half unpacked" not in (path / "six.py").read_text()
    assert list((root / ".tmp").iterdir()) == []


def test_least_recently_used_bundles_are_evicted_to_keep_within_budget(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    humanize, six, idna = (ready(store, r) for r in ("humanize==4.*", "six==1.17.0", "idna==3.*"))
    sizes = {r.id: int(r.unpacked_size or 0) for r in (humanize, six, idna)}
    budget = sizes[humanize.id] + max(sizes[six.id], sizes[idna.id]) + 4096
    assert sum(sizes.values()) > budget
    cache = BundleCache(store, root=tmp_path / "cache", budget_bytes=budget)
    cache.path_for(humanize.id)
    cache.path_for(six.id)
    cache.path_for(humanize.id)  # six is now the least recently used
    cache.path_for(idna.id)
    assert cache.cached_ids()[-1] == idna.id
    assert six.id not in cache.cached_ids()
    assert humanize.id in cache.cached_ids()
    assert cache.used_bytes() <= budget
    assert cache.evictions == 1
    # An evicted bundle comes back on its next call.
    assert (cache.path_for(six.id) / "six.py").is_file()
    assert cache.used_bytes() <= budget


def test_a_bundle_in_use_is_never_evicted(stack: AwsStack, tmp_path: Path) -> None:
    store = fresh_store(stack)
    humanize, six, idna = (ready(store, r) for r in ("humanize==4.*", "six==1.17.0", "idna==3.*"))
    budget = int(humanize.unpacked_size or 0) + 4096
    cache = BundleCache(store, root=tmp_path / "cache", budget_bytes=budget)
    with cache.use(humanize.id) as path:
        cache.path_for(six.id)
        cache.path_for(idna.id)
        assert (path / "humanize" / "__init__.py").is_file()
        assert humanize.id in cache.cached_ids()
    assert six.id not in cache.cached_ids()


def test_calls_before_the_bundle_is_ready_say_why_and_when(aws: AwsStack, tmp_path: Path) -> None:
    store = BundleStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    cache = BundleCache(store, root=tmp_path / "cache")
    record = store.ensure("python", TARGET, ["humanize==4.*"])
    assert record is not None
    with pytest.raises(
        BundleNotReadyError, match=r"queued to be built, since .*Z \(\d+ s ago\)"
    ) as queued:
        cache.path_for(record.id)
    assert queued.value.status == "pending"
    store.mark_building(record.id)
    with pytest.raises(BundleNotReadyError, match=r"\(humanize==4\.\*\) are being built, since"):
        cache.path_for(record.id)
    store.mark_failed(record.id, "pip install failed (exit 1): ERROR: no such version", None)
    with pytest.raises(BundleNotReadyError) as failed:
        cache.path_for(record.id)
    assert str(failed.value) == "this tool's packages failed to build; its author has been told."
    author = r"failed to build: pip install failed .*kiln bundles retry " + record.id
    assert re.search(author, failed.value.for_author), failed.value.for_author
    with pytest.raises(BundleNotReadyError, match="packages are missing; its author") as gone:
        cache.path_for("0" * 32)
    assert "not in the catalog" in gone.value.for_author
    with pytest.raises(BundleNotReadyError, match="is not a bundle id"):
        cache.path_for("../etc")
    assert visible_entries(tmp_path / "cache") == []


def test_a_new_cache_sweeps_what_dead_processes_left(stack: AwsStack, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    BundleCache(fresh_store(stack), root=root)
    (root / ".trash" / "abc.1234").mkdir()
    old = root / ".tmp" / "abc.1.dead.zip"
    old.write_bytes(b"half")
    os.utime(old, (0, 0))
    live = root / ".tmp" / "abd.2.live.zip"
    live.write_bytes(b"in progress")
    BundleCache(fresh_store(stack), root=root)
    assert list((root / ".trash").iterdir()) == []
    assert [p.name for p in (root / ".tmp").iterdir()] == [live.name]


PINNER = """
import sys
from pathlib import Path
from kiln.aws.clients import make_clients
from kiln.bundles.cache import BundleCache
from kiln.bundles.store import BundleStore
endpoint, table, root, bundle = sys.argv[1:5]
clients = make_clients(endpoint_url=endpoint, region="us-east-1")
store = BundleStore(clients.dynamodb, clients.s3, table=table, bucket=table)
with BundleCache(store, root=Path(root)).use(bundle) as path:
    print(path, flush=True)
    sys.stdin.read()  # hold the bundle until the test closes stdin
"""


@pytest.mark.slow
def test_a_bundle_another_process_is_using_is_never_evicted(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    humanize, six, idna = (ready(store, r) for r in ("humanize==4.*", "six==1.17.0", "idna==3.*"))
    root = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    pinner = subprocess.Popen(
        [sys.executable, "-c", PINNER, stack.endpoint_url, stack.table, str(root), humanize.id],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    try:
        assert pinner.stdout is not None
        held = Path(pinner.stdout.readline().strip())
        cache = BundleCache(store, root=root, budget_bytes=int(humanize.unpacked_size or 0))
        cache.path_for(six.id)
        cache.path_for(idna.id)
        assert held.is_dir()
        assert humanize.id in cache.cached_ids()
        assert cache.evictions == 1  # six made room for idna; humanize was held
    finally:
        pinner.communicate("", timeout=30)
    cache.path_for(six.id)
    assert humanize.id not in cache.cached_ids()  # released, so it is evictable again


def test_a_bundle_built_for_another_target_is_refused_with_what_to_do(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    six = ready(store, "six==1.17.0")
    cache = BundleCache(store, root=tmp_path / "cache", targets={"lambda-python3.13-arm64"})
    with pytest.raises(
        BundleNotReadyError, match=r"built for local-python3\.\d+-\w+, but this"
    ) as error:
        cache.path_for(six.id)
    assert "save the tool again" in str(error.value)
    assert error.value.status == "wrong_target"
    assert visible_entries(tmp_path / "cache") == []


NOBODY = 65534  # another local user


def plant(root: Path, bundle_id: str) -> Path:
    """What another local user leaves where Kiln would unpack a bundle: their own code."""
    module = root / bundle_id / "humanize"
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("print('PLANTED')\n")
    for path in (root, root / bundle_id, module, module / "__init__.py"):
        os.chown(path, NOBODY, NOBODY)
    root.chmod(0o1777)
    return root / bundle_id


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to act as another user")


@needs_root
def test_a_cache_folder_another_user_made_is_refused_with_whose_it_is(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    plant(tmp_path / "cache", humanize.id)
    with pytest.raises(UnsafeDirectoryError, match="belongs to uid 65534, not to this server"):
        BundleCache(store, root=tmp_path / "cache")


def test_a_cache_folder_others_can_write_is_refused(stack: AwsStack, tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir(mode=0o777)
    (tmp_path / "cache").chmod(0o777)
    with pytest.raises(UnsafeDirectoryError, match=r"can be written by other users \(mode 777\)"):
        BundleCache(fresh_store(stack), root=tmp_path / "cache")


@needs_root
def test_the_default_cache_is_the_servers_own_even_where_another_user_came_first(
    stack: AwsStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user pre-made the cache's predictable /tmp place with a bundle of their own."""
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    temp_place.cache_clear()
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    for name in ("kiln-bundles", f"kiln-bundles-{os.geteuid()}"):  # before and after the fix
        plant(shared_tmp / name, humanize.id)
    try:
        cache = BundleCache(store)
        path = cache.path_for(humanize.id)
    finally:
        temp_place.cache_clear()
    assert "PLANTED" not in (path / "humanize" / "__init__.py").read_text()
    info = cache.root.stat()
    assert (info.st_uid, info.st_mode & 0o022) == (os.geteuid(), 0)


def test_a_build_in_the_serving_process_is_in_its_cache_before_ready_and_never_downloaded(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    cache = BundleCache(store, root=tmp_path / "cache", targets=(TARGET,))
    record = store.ensure("python", TARGET, ["six==1.16.0"])
    assert record is not None
    assert record.status == "pending", record
    built = run_build(store, record.id, workdir=tmp_path, adopt=cache)
    assert built.status == "ready", built.error
    assert visible_entries(cache.root) == [record.id]  # there before it was marked ready
    s3_calls = count_requests(store.s3)
    path = cache.path_for(record.id)
    assert s3_calls == {}, "the first use downloaded a bundle its own process had built"
    assert (cache.downloads, cache.unpacks, cache.handovers) == (0, 0, 1)  # copied, no zip
    assert printed_from(path, "import six; print(six.__version__)") == "1.16.0"


def test_a_zip_that_is_not_the_recorded_one_is_not_adopted(stack: AwsStack, tmp_path: Path) -> None:
    store = fresh_store(stack)
    cache = BundleCache(store, root=tmp_path / "cache", targets=(TARGET,))
    humanize = ready(store, "humanize==4.*")
    other = tmp_path / "other.zip"
    other.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip, not the recorded bytes
    assert cache.adopt(humanize, other) is False
    assert visible_entries(cache.root) == []


def published(store: BundleStore, record: BundleRecord) -> dict[str, tuple[bytes, int]]:
    """The bundle's zip as (content, mode) per file, the modes its folder must have."""
    body = store.s3.get_object(Bucket=store.bucket, Key=record.zip_key)["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return {
            i.filename: (archive.read(i), 0o555 if i.external_attr >> 16 & 0o100 else 0o444)
            for i in archive.infolist()
        }


def on_disk(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), stat.S_IMODE(p.lstat().st_mode))
        for p in folder.rglob("*")
        if not p.is_dir() and p.name != SIZE_FILE
    }


def damage(folder: Path, how: str, elsewhere: Path) -> str:
    """Change an unpacked bundle as a run of the server's uid, or a chmod elsewhere, can."""
    target = folder / "humanize" / "__init__.py"
    if how == "made private":  # what a restarted kiln dev did to files linked from its state
        for path in folder.rglob("*"):
            if path.is_file():
                path.chmod(0o600)
    elif how == "rewritten":  # same size and mtime: only the ctime tells
        before = target.stat()
        target.chmod(0o644)
        text = target.read_bytes()
        target.write_bytes(b"raise SystemExit('planted')".ljust(len(text), b" "))
        target.chmod(0o444)
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif how == "planted":  # imported before the package's own modules
        folder.chmod(0o755)
        (folder / "sitecustomize.py").write_text("raise SystemExit('planted')\n")
    elif how == "linked elsewhere":  # its inode then follows a chmod made there
        os.link(target, elsewhere / "linked.py")
        (elsewhere / "linked.py").chmod(0o600)
    return how


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "lstat"])
@pytest.mark.parametrize("how", ["made private", "rewritten", "planted", "linked elsewhere"])
def test_a_bundle_changed_on_disk_is_made_again_from_its_zip_before_its_next_use(
    stack: AwsStack, tmp_path: Path, how: str, watch: bool
) -> None:
    """Seen by the inotify watch on every file and folder, or (without inotify) by the seal's
    lstat of each."""
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    kwargs = {} if watch else {"watch": False}
    cache = BundleCache(store, root=tmp_path / "cache", **kwargs)  # type: ignore[arg-type]
    path = cache.path_for(humanize.id)
    folder = path.stat().st_ino
    assert on_disk(path) == published(store, humanize)
    damage(path, how, tmp_path)
    assert cache.path_for(humanize.id) == path
    assert on_disk(path) == published(store, humanize), f"a bundle {how} on disk was served"
    assert all(p.stat().st_nlink == 1 for p in path.rglob("*") if p.is_file())
    assert cache.repairs == 1
    # Made again in place: a standby fenced to (or mounting) this folder sees the new files.
    assert path.stat().st_ino == folder
    assert printed_from(path, "import humanize; print(humanize.naturalsize(3_000_000))") == "3.0 MB"


@pytest.mark.parametrize("how", ["made private", "rewritten", "planted", "linked elsewhere"])
def test_a_bundle_another_process_left_is_checked_against_its_zip_and_made_again_if_changed(
    stack: AwsStack, tmp_path: Path, how: str
) -> None:
    """A second server of the same user (or a restarted one) shares the folder by bundle id:
    it serves what another process left there only once it is found to be the zip."""
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    first = BundleCache(store, root=tmp_path / "cache")
    path = first.path_for(humanize.id)
    intact = BundleCache(fresh_store(stack), root=tmp_path / "cache")
    assert intact.path_for(humanize.id) == path
    assert intact.unpacks == 0  # checked, found intact, kept
    damage(path, how, tmp_path)
    later = BundleCache(fresh_store(stack), root=tmp_path / "cache")
    assert later.path_for(humanize.id) == path
    assert on_disk(path) == published(store, humanize), f"a bundle {how} was served as it was"
    assert later.repairs == 1


def test_what_a_run_put_beside_the_bundles_is_removed_by_a_cache_that_is_their_only_user(
    stack: AwsStack, tmp_path: Path
) -> None:
    store = fresh_store(stack)
    humanize = ready(store, "humanize==4.*")
    cache = BundleCache(store, root=tmp_path / "cache")
    path = cache.path_for(humanize.id)
    (cache.root / ("f" * 32)).mkdir()  # a bundle no payload brought
    (cache.root / ".tmp" / "x.dir").mkdir()
    (cache.root / ".locks" / f"{humanize.id}.lock").unlink()
    (cache.root / ".locks" / f"{humanize.id}.lock").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "file").write_text("not the cache's")
    (cache.root / ".trash").rmdir()
    (cache.root / ".trash").symlink_to(tmp_path / "kept")  # emptying it must not follow it
    assert cache.remove_strangers() == 3
    assert visible_entries(cache.root) == [humanize.id]
    assert cache.path_for(humanize.id) == path
    assert not (tmp_path / "elsewhere").exists()
    assert (tmp_path / "kept" / "file").read_text() == "not the cache's"
    assert (cache.root / ".trash").is_dir()
    assert not (cache.root / ".trash").is_symlink()
