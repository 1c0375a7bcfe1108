"""What a build resolved to, on the bundle's record, and the fingerprint it makes: real uv
builds from a wheel folder the test writes (`UV_FIND_LINKS`, no index), so a range can be
made to resolve to another version between two builds without PyPI."""

from pathlib import Path

import pytest

from conftest import AwsStack
from kiln.bundles.build import Toolchain, build_bundle
from kiln.bundles.identity import default_target
from kiln.bundles.resolved import described, digest
from kiln.bundles.scheduler import run_build
from kiln.bundles.store import BundleStore, zip_key
from kiln.catalog import fingerprint
from kiln.catalog.model import Revision
from support.aws import fresh_stack
from support.wheels import NAME, wheel_folder
from support.wheels import tiny_wheel as _wheel

pytestmark = pytest.mark.slow

WANTED = [f"{NAME}>=1"]


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return wheel_folder(tmp_path, monkeypatch)


def _store(stack: AwsStack) -> BundleStore:
    return BundleStore(
        stack.clients.dynamodb, stack.clients.s3, table=stack.table, bucket=stack.bucket
    )


def _revision(bundle_id: str) -> Revision:
    return Revision(
        tool_id="t1", number=1, description="Say the fixture's version.", language="python",
        code_key="code/" + "a" * 64 + ".py", code_sha256="a" * 64, requirements=tuple(WANTED),
        input_schema={"type": "object"}, output_schema=None, title=None, annotations=None,
        timeout_seconds=30.0, bundle_id=bundle_id, created_at="2026-12-04T15:00:00Z",
    )  # fmt: skip


def test_a_rebuild_that_resolves_another_version_records_another_digest_and_fingerprint(
    aws: AwsStack, wheels: Path, tmp_path: Path
) -> None:
    store = _store(aws)
    old_sha = _wheel(wheels, "1.0")
    record = store.ensure("python", default_target("python"), WANTED)
    assert record is not None
    first = run_build(store, record.id, workdir=tmp_path, toolchain=Toolchain(installer="uv"))
    assert first.status == "ready", first.error
    assert first.resolved == (f"{NAME}==1.0 --hash=sha256:{old_sha}",), first.resolved
    assert first.resolved_sha256 == digest(first.resolved)

    _wheel(wheels, "1.1")  # a newer version in range, then the bundle's zip is lost
    store.s3.delete_object(Bucket=store.bucket, Key=zip_key(record.id))
    store.retry(record.id)
    second = run_build(store, record.id, workdir=tmp_path, toolchain=Toolchain(installer="uv"))
    assert second.status == "ready", second.error
    assert second.resolved[0].startswith(f"{NAME}==1.1 --hash=sha256:"), second.resolved
    assert store.get(record.id) == second
    assert second.resolved_sha256 != first.resolved_sha256

    revision = _revision(record.id)
    # The bundle id alone cannot tell the two builds apart; their digests can.
    before = fingerprint.of("tiny", revision, first.resolved_sha256)
    after = fingerprint.of("tiny", revision, second.resolved_sha256)
    assert before != after


def test_the_same_resolution_on_another_table_and_builder_gives_the_same_fingerprint(
    aws: AwsStack, moto_endpoint: str, wheels: Path, tmp_path: Path
) -> None:
    _wheel(wheels, "1.0")
    one, other = _store(aws), _store(fresh_stack(moto_endpoint))
    records = [s.ensure("python", default_target("python"), WANTED) for s in (one, other)]
    assert records[0] is not None
    assert records[1] is not None
    built = [
        run_build(s, r.id, workdir=tmp_path, toolchain=Toolchain(installer="uv"))
        for s, r in zip((one, other), records, strict=True)
    ]
    assert [b.status for b in built] == ["ready", "ready"], [b.error for b in built]
    # A third build, apart from any table and with its own package cache (pip this time).
    alone = build_bundle(
        records[0], workdir=tmp_path / "alone", toolchain=Toolchain(installer="pip")
    )
    digests = {
        built[0].resolved_sha256,
        built[1].resolved_sha256,
        described("python", alone.manifest["lock"])["resolved_sha256"],
    }
    assert len(digests) == 1, (built, alone.manifest)
    names = {fingerprint.of("tiny", _revision(r.id), d) for r in records for d in digests}
    assert len(names) == 1
