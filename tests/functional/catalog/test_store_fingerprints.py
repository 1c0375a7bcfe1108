"""The fingerprint a save stores on its revision (CatalogStore against the moto server).

It is taken once, at save (or restore), under the tool's name then, over the bundle's id
(known at save, so final whether the packages are built or not: no build runs here); the
packages' target changes it, tags, authors and times do not.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import AwsStack
from kiln.bundles.identity import bundle_id
from kiln.catalog import fingerprint
from kiln.catalog.model import Draft
from kiln.catalog.store import CatalogStore

DRAFT = Draft(
    name="fp",
    description="Humanise a byte count.",
    language="python",
    code="import humanize, json, sys\nprint(humanize.naturalsize(json.load(sys.stdin)['n']))\n",
    requirements=("humanize==4.9.0",),
)


class Target:
    """The catalog's bundle hook for one runtime target (as kiln.bundles.hooks.Bundles)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def identify(self, language: str, requirements: tuple[str, ...]) -> str | None:
        return bundle_id(language, self.target, requirements)


def store_for(aws: AwsStack, target: str) -> CatalogStore:
    return CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket,
                        bundles=Target(target))  # fmt: skip


@pytest.fixture
def store(aws: AwsStack) -> CatalogStore:
    return store_for(aws, "lambda-python3.13-x86_64")


def test_a_save_stores_the_fingerprint_under_the_name_it_was_saved_with(
    store: CatalogStore,
) -> None:
    head = store.create(DRAFT, actor="alice").head
    assert head.bundle_id is not None  # packages: never built here, the print is final
    assert head.fingerprint == fingerprint.of("fp", head)
    assert head.saved_as == "fp"
    assert store.get("fp").head.fingerprint == head.fingerprint  # as read back
    assert store.revision("fp", 1).fingerprint == head.fingerprint


def test_tags_authors_and_times_leave_it_and_a_restore_by_another_gets_the_same(
    store: CatalogStore,
) -> None:
    first = store.create(DRAFT, actor="alice").head
    tagged = store.update("fp", replace(DRAFT, tags=("x",)), expected_revision=1,
                          actor="bob").head  # fmt: skip
    assert tagged.number == 2
    assert tagged.fingerprint == first.fingerprint
    changed = store.update("fp", replace(DRAFT, code=DRAFT.code + "# 2\n"),
                           expected_revision=2).head  # fmt: skip
    assert changed.fingerprint != first.fingerprint
    restored = store.restore("fp", 1, expected_revision=3, actor="carol").head
    assert (restored.number, restored.created_by) == (4, "carol")
    assert restored.fingerprint == first.fingerprint


def test_a_rename_changes_what_is_served_and_a_restore_after_it_is_sealed_under_the_new_name(
    store: CatalogStore,
) -> None:
    first = store.create(DRAFT).head
    renamed = store.rename("fp", "fp_renamed")
    assert renamed.head.fingerprint == first.fingerprint  # the revision is as it was saved
    served = fingerprint.served("fp_renamed", renamed.head)
    assert served != first.fingerprint
    assert served == fingerprint.of("fp_renamed", first)
    store.update("fp_renamed", replace(DRAFT, name="fp_renamed", code="1\n"),
                 expected_revision=1)  # fmt: skip
    restored = store.restore("fp_renamed", 1, expected_revision=2).head
    assert (restored.fingerprint, restored.saved_as) == (served, "fp_renamed")


def test_the_same_requirements_for_another_target_are_another_fingerprint(aws: AwsStack) -> None:
    on_lambda = store_for(aws, "lambda-python3.13-x86_64").create(DRAFT).head
    store_for(aws, "lambda-python3.13-x86_64").delete("fp")
    on_arm = store_for(aws, "lambda-python3.13-arm64").create(DRAFT).head
    assert on_lambda.bundle_id != on_arm.bundle_id
    assert on_lambda.fingerprint != on_arm.fingerprint
    without = replace(DRAFT, name="plain", requirements=())
    plain_x86 = store_for(aws, "lambda-python3.13-x86_64").create(without).head
    store_for(aws, "lambda-python3.13-x86_64").delete("plain")
    plain_arm = store_for(aws, "lambda-python3.13-arm64").create(without).head
    assert plain_x86.fingerprint == plain_arm.fingerprint  # no packages: the same everywhere
