"""Real builds with real pip and npm: local worker, Lambda targets, failures, limits."""

import json
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

import support.toolchain as toolchain
from conftest import AwsStack
from kiln.bundles.build import Toolchain, build_bundle, target_interpreter
from kiln.bundles.bun import find_bun
from kiln.bundles.cache import BundleCache, BundleNotReadyError
from kiln.bundles.errors import BuildError, BundleStateError
from kiln.bundles.identity import default_target, parse_target
from kiln.bundles.scheduler import LocalBuildWorker, handle_build_event, request_bundle, run_build
from kiln.bundles.store import BundleRecord, BundleStore, manifest_key, zip_key
from kiln.bundles.uv import Uv, find_uv
from kiln.settings import Settings

pytestmark = pytest.mark.slow


@pytest.fixture
def store(aws: AwsStack) -> BundleStore:
    return BundleStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)


def _zip_names(store: BundleStore, bundle_id: str, tmp_path: Path) -> list[str]:
    path = tmp_path / "bundle.zip"
    store.s3.download_file(store.bucket, zip_key(bundle_id), str(path))
    with zipfile.ZipFile(path) as archive:
        return archive.namelist()


def test_a_saved_requirement_builds_once_in_the_background_and_is_shared(
    store: BundleStore, tmp_path: Path
) -> None:
    worker = LocalBuildWorker(store, workdir=tmp_path).start()
    try:
        target = default_target("python")
        first = request_bundle(store, worker, "python", target, ["humanize==4.*"])
        assert first is not None
        assert first.status == "pending"
        assert worker.wait_idle(timeout=120)
        ready = store.get(first.id)
        assert ready is not None
        assert ready.status == "ready", ready
        second = request_bundle(store, worker, "python", target, ["humanize == 4.*"])
        assert worker.wait_idle(timeout=10)
    finally:
        worker.stop()
    assert second is not None
    assert second.id == first.id
    assert second.status == "ready"
    assert worker.builds_started == 1
    assert (ready.build_count, ready.attempts) == (1, 1)
    manifest = store.read_manifest(first.id)
    assert manifest is not None
    [locked] = [p for p in manifest["lock"] if p["name"].lower() == "humanize"]
    assert locked["version"].startswith("4.")
    assert len(locked["sha256"]) == 64
    assert manifest["zip_sha256"] == ready.sha256
    names = _zip_names(store, first.id, tmp_path)
    assert "humanize/__init__.py" in names
    assert any(n.startswith("humanize/__pycache__/") for n in names)  # compiled at build time


@pytest.mark.parametrize(
    ("installer", "failure", "logged"),
    [
        ("uv", "uv pip compile failed", "was not found in the package registry"),
        ("pip", "pip install failed", "No matching distribution found"),
    ],
)
def test_a_requirement_that_does_not_exist_fails_with_its_installer_log_kept(
    store: BundleStore, tmp_path: Path, installer: str, failure: str, logged: str
) -> None:
    record = store.ensure("python", default_target("python"), ["kiln-no-such-package-9f1c==1.0"])
    assert record is not None
    tools = Toolchain(installer=installer, cache_dir=tmp_path / "cache")
    failed = run_build(store, record.id, workdir=tmp_path, toolchain=tools)
    assert failed.status == "failed"
    assert failed.error is not None
    assert failure in failed.error
    assert "kiln-no-such-package-9f1c" in failed.error
    log = store.read_log(record.id)
    assert log is not None
    assert logged in log
    assert f"# installer: {installer}" in log
    assert store.read_manifest(record.id) is None


def test_a_build_uv_cannot_resolve_goes_on_with_pip_and_says_why(
    store: BundleStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uv reads no pip.conf: where only pip reaches the index (a mirror, a proxy), a build
    that uv cannot resolve is made by pip, and the log says so (installer "auto" only)."""
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("UV_OFFLINE", "0")
    record = store.ensure("python", "lambda-python3.13-x86_64", ["six==1.17.0"])
    assert record is not None
    tools = Toolchain(installer="auto", cache_dir=tmp_path / "cache")
    built = build_bundle(record, workdir=tmp_path / "auto", toolchain=tools)
    assert "# uv could not resolve" in built.log, built.log[-2000:]
    assert "building with pip instead" in built.log
    lock = built.manifest["lock"]
    assert any(entry["name"] == "six" for entry in lock), lock


def test_pip_builds_the_same_bundle_when_uv_is_not_wanted(
    store: BundleStore, tmp_path: Path
) -> None:
    record = store.ensure("python", "lambda-python3.13-x86_64", ["six==1.17.0"])
    assert record is not None
    pip = build_bundle(record, workdir=tmp_path / "pip", toolchain=Toolchain(installer="pip"))
    uv = build_bundle(record, workdir=tmp_path / "uv", toolchain=Toolchain(installer="uv"))
    assert "# installer: pip" in pip.log
    assert "# installer: uv" in uv.log
    assert {entry["name"]: entry["version"] for entry in pip.manifest["lock"]} == {"six": "1.17.0"}
    pinned = [{k: e[k] for k in ("name", "version", "sha256")} for e in pip.manifest["lock"]]
    assert pinned == [{k: e[k] for k in ("name", "version", "sha256")} for e in uv.manifest["lock"]]
    with zipfile.ZipFile(pip.zip_path) as one, zipfile.ZipFile(uv.zip_path) as two:
        code = {n for n in one.namelist() if ".dist-info/" not in n}
        assert code == {n for n in two.namelist() if ".dist-info/" not in n}
        assert "six.py" in code


def test_a_second_bundle_builds_only_its_new_package_from_the_kept_folders(
    store: BundleStore, tmp_path: Path
) -> None:
    tools = Toolchain(cache_dir=tmp_path / "cache")
    first = store.ensure("python", default_target("python"), ["six==1.17.0"])
    second = store.ensure("python", default_target("python"), ["six==1.17.0", "humanize==4.*"])
    assert first is not None
    assert second is not None
    one = build_bundle(first, workdir=tmp_path / "one", toolchain=tools)
    two = build_bundle(second, workdir=tmp_path / "two", toolchain=tools)
    # Cold: one uv process resolves and installs, and the lock is read offline after it.
    assert "uv pip install (resolving)" in one.log, one.log
    assert "uv pip compile (offline, after the install)" in one.log, one.log
    assert not (tmp_path / "one" / "pins-site.txt").exists(), one.log
    assert (tmp_path / "two" / "pins-site.txt").read_text().startswith("humanize==4.")
    # Warm: the fresh cache resolves six alone offline, so only humanize is asked of the index.
    assert (tmp_path / "two" / "new.in").read_text() == "humanize==4.*\n", two.log
    assert "uv pip compile (offline, after fetching what was new)" in two.log, two.log
    assert "# uv pip compile:" not in two.log, two.log  # no resolve of everything online
    assert "# uv pip install (offline):" in two.log, two.log  # humanize's wheel was cached
    assert "\nsix==" not in (tmp_path / "two" / "pins-site.txt").read_text()
    whole = build_bundle(second, workdir=tmp_path / "whole", toolchain=Toolchain())
    assert "package folders" not in two.log, two.log
    assert two.manifest["zip_sha256"] == whole.manifest["zip_sha256"]  # same bytes either way
    assert one.manifest["file_count"] < two.manifest["file_count"]
    with zipfile.ZipFile(two.zip_path) as archive:
        names = archive.namelist()
        assert archive.testzip() is None
    assert "six.py" in names
    assert any(n.startswith("humanize/__pycache__/") for n in names)


def test_a_cold_install_that_does_not_hold_the_lock_is_thrown_away_and_the_pins_installed(
    tmp_path: Path,
) -> None:
    uv = find_uv()
    assert uv is not None, "uv is a dev dependency"
    installer = _uv(uv, tmp_path)
    lock = installer.lock(["six==1.17.0"])
    assert [(entry["name"], entry["version"]) for entry in lock] == [("six", "1.17.0")]
    assert (tmp_path / "cache" / "early" / "six.py").is_file()  # resolved and installed at once
    older = [{**lock[0], "version": "1.16.0"}]  # not what was installed early
    installer.install(older, tmp_path / "site")
    assert not (tmp_path / "cache" / "early").exists()
    assert (tmp_path / "site" / "six-1.16.0.dist-info").is_dir(), sorted(
        path.name for path in (tmp_path / "site").iterdir()
    )
    again = _uv(uv, tmp_path)
    assert again.lock(["six==1.17.0"]) == lock  # the cache is fresh: resolved offline
    assert again.installed is None  # and nothing installed early
    again.install(lock, tmp_path / "again")
    assert (tmp_path / "again" / "six-1.17.0.dist-info").is_dir()


def test_a_fresh_cache_that_cannot_fetch_a_new_requirement_still_says_what_uv_said(
    tmp_path: Path,
) -> None:
    uv = find_uv()
    assert uv is not None, "uv is a dev dependency"
    _uv(uv, tmp_path).lock(["six==1.17.0"])  # the cache is fresh from here on
    again = _uv(uv, tmp_path)
    with pytest.raises(BuildError) as failed:
        again.lock(["six==1.17.0", "kiln-no-such-package-anywhere==1.0"])
    assert str(failed.value).startswith("uv pip compile failed"), failed.value  # the online one
    assert "kiln-no-such-package-anywhere" in failed.value.log, failed.value.log
    assert (tmp_path / "new.in").read_text() == "kiln-no-such-package-anywhere==1.0\n"


def _uv(uv: str, tmp_path: Path) -> Uv:
    return Uv(
        uv,
        target_args=["--python", sys.executable],
        cache_dir=tmp_path / "cache",
        workdir=tmp_path,
        run=_run_or_raise,
        early=tmp_path / "cache" / "early",
    )


def _run_or_raise(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"{what} failed: {done.stderr}", done.stderr)


def test_a_bundle_over_the_size_limit_is_refused_with_a_clear_message(
    store: BundleStore, tmp_path: Path
) -> None:
    record = store.ensure("python", default_target("python"), ["six"])
    assert record is not None
    with pytest.raises(
        BuildError, match=r"over the bundle limit of 0 MB \(KILN_BUNDLE_MAX_UNPACKED_MB\)"
    ):
        build_bundle(record, workdir=tmp_path, max_bytes=1000)


def test_a_lambda_target_gets_cp313_manylinux_wheels_that_import_under_python_3_13(
    store: BundleStore, tmp_path: Path
) -> None:
    root = toolchain.pyenv_root()  # found without HOME: the build looks there too
    interpreter = target_interpreter(parse_target("lambda-python3.13-x86_64"), root)
    if interpreter is None:
        pytest.skip(toolchain.NO_PYTHON_313)
    record = store.ensure("python", "lambda-python3.13-x86_64", ["pyyaml==6.*"])
    assert record is not None
    result = handle_build_event({"bundle_id": record.id}, None, store=store, workdir=tmp_path,
                                toolchain=Toolchain(pyenv_root=root))  # fmt: skip
    assert result["bundles"][record.id]["status"] == "ready", store.read_log(record.id)
    names = _zip_names(store, record.id, tmp_path)
    assert any(n.endswith(".cpython-313-x86_64-linux-gnu.so") for n in names)
    assert any(".cpython-313.pyc" in n for n in names)
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(tmp_path / "bundle.zip") as archive:
        archive.extractall(unpacked)
    check = subprocess.run(
        [interpreter, "-c", f"import sys; sys.path.insert(0, {str(unpacked)!r}); import yaml; "
         "print(yaml.__with_libyaml__, yaml.safe_dump({'a': 1}).strip())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert check.stdout.strip() == "True a: 1"
    manifest = store.read_manifest(record.id)
    assert manifest is not None
    assert manifest["bytecode_compiled_by"] == interpreter


def test_an_arm64_lambda_target_gets_aarch64_wheels(store: BundleStore, tmp_path: Path) -> None:
    record = store.ensure("python", "lambda-python3.13-arm64", ["pyyaml==6.*"])
    assert record is not None
    done = run_build(store, record.id, workdir=tmp_path)
    assert done.status == "ready", store.read_log(record.id)
    names = _zip_names(store, record.id, tmp_path)
    assert any(n.endswith(".cpython-313-aarch64-linux-gnu.so") for n in names)


def test_a_node_bundle_holds_node_modules_and_requires_from_node_path(
    store: BundleStore, tmp_path: Path
) -> None:
    record = store.ensure("node", default_target("node"), ["lodash@4.17.21"])
    assert record is not None
    done = run_build(store, record.id, workdir=tmp_path)
    assert done.status == "ready", store.read_log(record.id)
    manifest = store.read_manifest(record.id)
    assert manifest is not None
    assert {"name": "lodash", "version": "4.17.21"}.items() <= manifest["lock"][0].items()
    names = _zip_names(store, record.id, tmp_path)
    assert "node_modules/lodash/package.json" in names
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(tmp_path / "bundle.zip") as archive:
        archive.extractall(unpacked)
    script = (
        "console.log(JSON.stringify(require('lodash').sortBy(require('lodash').uniq([3,1,3]))))"
    )
    check = subprocess.run(
        ["node", "-e", script],
        env={"NODE_PATH": str(unpacked / "node_modules"), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(check.stdout) == [1, 3]


def test_bun_installs_a_node_bundle_without_scripts_and_locks_it(tmp_path: Path) -> None:
    bun = find_bun(os.environ.get("KILN_BUN"))
    if bun is None:
        pytest.skip("no Bun here (npm install -g bun, or set KILN_BUN)")
    package = tmp_path / "pkg"  # a local package whose install script would leave a file
    package.mkdir()
    (package / "package.json").write_text(
        json.dumps({"name": "noisy", "version": "1.0.0", "scripts": {"postinstall": "touch ran"}})
    )
    (package / "index.js").write_text("module.exports = 42;\n")
    record = BundleRecord(
        id="b" * 32, language="node", target=default_target("node"),
        requirements=("lodash@4.17.21", f"noisy@file:{package}"), status="building",
        created_at="", updated_at="",
    )  # fmt: skip
    out = build_bundle(record, workdir=tmp_path / "w", toolchain=Toolchain(bun=bun))
    assert "# installer: bun" in out.log
    versions = {entry["name"]: entry["version"] for entry in out.manifest["lock"]}
    assert versions["lodash"] == "4.17.21", out.manifest["lock"]
    with zipfile.ZipFile(out.zip_path) as archive:
        names = archive.namelist()
    assert "node_modules/lodash/package.json" in names
    assert "node_modules/noisy/index.js" in names
    assert not any(name.endswith("/ran") for name in names)  # the postinstall never ran


def test_the_builder_event_must_name_a_bundle(store: BundleStore) -> None:
    with pytest.raises(ValueError, match="bundle_id"):
        handle_build_event({}, None, store=store)


def test_zips_are_deterministic(store: BundleStore, tmp_path: Path) -> None:
    record = store.ensure("python", default_target("python"), ["six==1.17.0"])
    assert record is not None
    one = build_bundle(record, workdir=tmp_path / "one")
    two = build_bundle(record, workdir=tmp_path / "two")
    assert one.manifest["zip_sha256"] == two.manifest["zip_sha256"]
    assert sys.version_info >= (3, 11)
    assert manifest_key(record.id).endswith(".manifest.json")


def test_a_bundle_over_the_configured_limit_ends_failed_saying_so(
    store: BundleStore, tmp_path: Path
) -> None:
    settings = Settings.from_env({"KILN_BUNDLE_MAX_UNPACKED_MB": "0.01"})
    record = store.ensure("python", default_target("python"), ["six==1.17.0"])
    assert record is not None
    failed = run_build(
        store, record.id, workdir=tmp_path, toolchain=Toolchain.from_settings(settings.bundles)
    )
    assert failed.status == "failed"
    assert failed.error is not None
    assert "over the bundle limit of 0 MB (KILN_BUNDLE_MAX_UNPACKED_MB)" in failed.error
    assert "# refused:" in (store.read_log(record.id) or "")
    assert (
        store.s3.list_objects_v2(Bucket=store.bucket, Prefix=f"bundles/{record.id}.zip").get(
            "KeyCount"
        )
        == 0
    )


def test_two_builders_racing_for_one_bundle_build_it_once(
    store: BundleStore, tmp_path: Path
) -> None:
    record = store.ensure("python", default_target("python"), ["six==1.17.0"])
    assert record is not None
    results = []
    barrier = threading.Barrier(2)

    def builder(n: int) -> None:
        barrier.wait()
        results.append(run_build(store, record.id, workdir=tmp_path))

    threads = [threading.Thread(target=builder, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    done = store.get(record.id)
    assert done is not None
    assert done.status == "ready"
    assert (done.attempts, done.build_count) == (1, 1)
    assert len(results) == 2


def test_the_builder_reports_an_unknown_bundle_instead_of_failing(store: BundleStore) -> None:
    answer = handle_build_event({"bundle_id": "0" * 32}, None, store=store)
    assert answer["bundles"]["0" * 32]["status"] == "missing"


def test_a_ready_bundle_whose_zip_is_gone_says_so_and_is_rebuilt_on_the_next_save(
    store: BundleStore, tmp_path: Path
) -> None:
    record = store.ensure("python", default_target("python"), ["six==1.17.0"])
    assert record is not None
    assert run_build(store, record.id, workdir=tmp_path).status == "ready"
    store.s3.delete_object(Bucket=store.bucket, Key=zip_key(record.id))
    cache = BundleCache(store, root=tmp_path / "cache")
    with pytest.raises(BundleNotReadyError, match="packages are missing; its author") as gone:
        cache.path_for(record.id)
    assert "missing from storage; save the tool again" in gone.value.for_author
    scheduled: list[str] = []

    class Keep:
        def schedule(self, bundle_id: str) -> None:
            scheduled.append(bundle_id)

    again = request_bundle(store, Keep(), "python", default_target("python"), ["six==1.17.0"])
    assert again is not None
    assert again.status == "pending"
    assert scheduled == [record.id]
    assert run_build(store, record.id, workdir=tmp_path).status == "ready"
    assert (cache.path_for(record.id) / "six.py").is_file()
    with pytest.raises(BundleStateError, match="is ready"):
        store.retry(record.id)  # its zip is back: nothing to rebuild
