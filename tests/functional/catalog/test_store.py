"""CatalogStore through boto3 against the moto server over HTTP."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from conftest import AwsStack
from kiln.catalog.errors import (
    NameMismatchError,
    NameTakenError,
    RevisionRequiredError,
    StaleRevisionError,
    ToolNotFoundError,
)
from kiln.catalog.model import Draft
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore

DRAFT = Draft(
    name="echo",
    description="Echo the input back.",
    language="python",
    code="import sys\nprint(sys.stdin.read())\n",
)


@pytest.fixture
def store(aws: AwsStack) -> CatalogStore:
    return CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)


def table_items(aws: AwsStack) -> list[dict]:
    return aws.clients.dynamodb.scan(TableName=aws.table)["Items"]


def test_created_tool_reads_back_with_its_code(store: CatalogStore) -> None:
    tool = store.create(DRAFT, actor="alice")
    fetched = store.get("echo")
    assert fetched.id == tool.id
    assert fetched.head.number == 1
    assert fetched.head.created_by == "alice"
    assert store.code(fetched.head) == DRAFT.code


def test_create_with_a_taken_name_is_refused_and_writes_nothing(
    store: CatalogStore, aws: AwsStack
) -> None:
    store.create(DRAFT)
    before = table_items(aws)
    with pytest.raises(NameTakenError, match="name"):
        store.create(replace(DRAFT, name="ECHO", description="other"))
    assert table_items(aws) == before


def test_concurrent_creates_of_one_name_let_exactly_one_win(store: CatalogStore) -> None:
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def create(i: int) -> None:
        barrier.wait()
        try:
            store.create(replace(DRAFT, description=f"copy {i}"))
            outcomes.append("created")
        except NameTakenError:
            outcomes.append("taken")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["created", "taken", "taken", "taken"]
    assert len(store.list_tools()) == 1


def test_update_without_the_read_revision_is_refused(store: CatalogStore) -> None:
    store.create(DRAFT)
    with pytest.raises(RevisionRequiredError, match="If-Match"):
        store.update("echo", replace(DRAFT, description="new"), expected_revision=None)
    assert store.get("echo").head.number == 1


def test_update_with_a_stale_revision_is_refused_and_keeps_the_current_one(
    store: CatalogStore,
) -> None:
    store.create(DRAFT)
    store.update("echo", replace(DRAFT, description="second"), expected_revision=1)
    with pytest.raises(StaleRevisionError) as caught:
        store.update("echo", replace(DRAFT, description="third"), expected_revision=1)
    assert caught.value.current == 2
    assert store.get("echo").head.description == "second"


def test_concurrent_updates_from_one_revision_let_exactly_one_win(store: CatalogStore) -> None:
    store.create(DRAFT)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def update(text: str) -> None:
        barrier.wait()
        try:
            store.update("echo", replace(DRAFT, code=text), expected_revision=1)
            outcomes.append("ok")
        except StaleRevisionError:
            outcomes.append("stale")

    threads = [threading.Thread(target=update, args=(f"print({i})\n",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "stale"]
    revisions = store.revisions("echo")
    assert [r.number for r in revisions] == [1, 2]
    assert store.code(revisions[0]) == DRAFT.code


def test_every_revision_stays_readable_and_restore_makes_a_new_one(store: CatalogStore) -> None:
    store.create(DRAFT)
    store.update("echo", replace(DRAFT, code="print('two')\n"), expected_revision=1)
    restored = store.restore("echo", 1, expected_revision=2)
    assert restored.head.number == 3
    assert restored.head.restored_from == 1
    assert store.code(restored.head) == DRAFT.code
    assert store.code(store.revision("echo", 2)) == "print('two')\n"


def test_update_may_not_rename_through_the_body(store: CatalogStore) -> None:
    store.create(DRAFT)
    with pytest.raises(NameMismatchError, match="rename"):
        store.update("echo", replace(DRAFT, name="other"), expected_revision=1)


def test_rename_keeps_the_id_and_frees_the_old_name(store: CatalogStore) -> None:
    tool = store.create(DRAFT)
    store.rename("echo", "echo2")
    assert store.get("echo2").id == tool.id
    with pytest.raises(ToolNotFoundError):
        store.get("echo")
    store.create(DRAFT)
    assert {t.name for t in store.list_tools()} == {"echo", "echo2"}


def test_rename_onto_a_taken_name_is_refused(store: CatalogStore) -> None:
    store.create(DRAFT)
    store.create(replace(DRAFT, name="other"))
    with pytest.raises(NameTakenError):
        store.rename("echo", "other")
    assert store.get("echo").name == "echo"


def test_delete_frees_the_name_and_keeps_the_history(store: CatalogStore) -> None:
    tool = store.create(DRAFT)
    store.delete("echo")
    with pytest.raises(ToolNotFoundError):
        store.get("echo")
    gone = store.get(f"id:{tool.id}")
    assert gone.deleted
    assert [r.number for r in store.revisions(f"id:{tool.id}")] == [1]
    assert store.create(DRAFT).id != tool.id


def test_disable_and_enable_change_state_but_not_revisions(store: CatalogStore) -> None:
    store.create(DRAFT)
    assert store.set_enabled("echo", False).enabled is False
    assert store.get("echo").enabled is False
    assert store.set_enabled("echo", True).enabled is True
    assert store.get("echo").head.number == 1


def test_every_write_moves_the_catalog_version(store: CatalogStore) -> None:
    versions = [store.catalog_version()]
    store.create(DRAFT)
    versions.append(store.catalog_version())
    store.set_enabled("echo", False)
    versions.append(store.catalog_version())
    store.rename("echo", "e2")
    versions.append(store.catalog_version())
    store.delete("e2")
    versions.append(store.catalog_version())
    assert versions == sorted(set(versions))


def test_a_change_is_seen_by_another_process_view_on_its_next_read(
    store: CatalogStore, aws: AwsStack
) -> None:
    other = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    view = CatalogSnapshots(other)
    assert view.current().tools == {}
    store.create(DRAFT)
    assert set(view.current().tools) == {"echo"}
    reloads = view.reloads
    view.current()
    assert view.reloads == reloads  # unchanged version: no reload


def test_concurrent_fresh_reads_share_one_version_read_and_see_prior_writes(
    store: CatalogStore, aws: AwsStack
) -> None:
    import asyncio

    store.create(DRAFT)  # its own version read (changelog.next_version) is not counted
    view = CatalogSnapshots(store)
    reads: list[str] = []

    def count(params: dict, **_: object) -> None:
        if params.get("Key", {}).get("pk", {}).get("S") == "CATALOG":
            reads.append("version")

    aws.clients.dynamodb.meta.events.register("before-parameter-build.dynamodb.GetItem", count)

    async def burst() -> list[int]:
        snapshots = await asyncio.gather(*(view.fresh() for _ in range(20)))
        return [len(s.tools) for s in snapshots]

    assert asyncio.run(burst()) == [1] * 20
    assert 1 <= len(reads) <= 2


def test_a_name_taken_in_another_case_names_the_tool_that_holds_it(store: CatalogStore) -> None:
    store.create(DRAFT)
    with pytest.raises(NameTakenError) as refused:
        store.create(replace(DRAFT, name="ECHO"))
    assert "'ECHO' is taken by the tool 'echo'" in str(refused.value)
