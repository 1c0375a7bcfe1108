"""Bundle records without a build: a save hook that names a tool's bundle, the manifest a
build of one package would report (BundleStore.mark_ready), and a count of the bundle records
a snapshot reads (catalog/packages.py: BatchGetItem is its only way to read them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kiln.bundles.identity import bundle_id, default_target

TARGET = default_target("python")


class Identify:
    """The catalog's save hook (kiln.catalog.store.BundleHook), naming bundles for TARGET."""

    def identify(self, language: str, requirements: tuple[str, ...]) -> str | None:
        return bundle_id(language, TARGET, requirements)


def manifest(version: str, name: str = "humanize") -> dict[str, Any]:
    """What a build that installed `name` at `version` reports."""
    lock = [{"name": name, "version": version, "sha256": version[0] * 64}]
    return {"language": "python", "lock": lock, "zip_size": 10, "unpacked_size": 20,
            "zip_sha256": "f" * 64, "file_count": 2}  # fmt: skip


@contextmanager
def snapshot_bundle_reads(dynamodb: Any) -> Iterator[list[str]]:
    """The keys (`BUNDLE#<id>`) of the bundle records read by BatchGetItem in the block. A
    warmer's poll of a bundle it waits for is a GetItem, not counted."""
    reads: list[str] = []

    def count(params: dict[str, Any], **_: object) -> None:
        for keys in params.get("RequestItems", {}).values():
            reads.extend(key["pk"]["S"] for key in keys["Keys"] if "BUNDLE#" in key["pk"]["S"])

    event = "before-parameter-build.dynamodb.BatchGetItem"
    dynamodb.meta.events.register(event, count, unique_id="snapshot-bundle-reads")
    try:
        yield reads
    finally:
        dynamodb.meta.events.unregister(event, unique_id="snapshot-bundle-reads")
