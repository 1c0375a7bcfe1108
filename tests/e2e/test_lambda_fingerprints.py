"""The public handler, driven as Lambda drives it (tests/e2e/test_lambda_runtime.py), serves
the fingerprint of a tool with packages over what its bundle resolved to: "pending" while it
builds (a pinned call refused, unrun), then the digest of the build, moved to another when a
rebuild resolves other versions. A warm function sees each move as it sees a save, by the
catalog version it reads (one BatchGetItem of the bundle, allowed to its role in
template.yaml), and never reads a bundle record to list."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kiln.aws.clients import ensure_resources, make_clients
from kiln.bundles.resolved import described
from kiln.bundles.store import BundleStore
from kiln.catalog import fingerprint
from kiln.catalog.model import Revision
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from support.bundle_records import TARGET, Identify, manifest

from .test_lambda_runtime import LambdaProcess, answer_body, event_for, rpc, start_lambda

KEY = "dev.kiln/fingerprint"
TOOL = {
    "name": "e2e_packaged",
    "description": "Uses a package.",
    "language": "python",
    "requirements": ["humanize>=4"],
    "code": "import humanize\nprint(humanize.naturalsize(1))\n",
}


@pytest.fixture(scope="module")
def stores(moto_endpoint: str) -> tuple[CatalogStore, BundleStore]:
    name = f"kiln-e2e-fp-{uuid.uuid4().hex[:10]}"
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    ensure_resources(clients, table=name, bucket=name)
    d, s3 = clients.dynamodb, clients.s3
    catalog = CatalogStore(d, s3, table=name, bucket=name, bundles=Identify())
    return catalog, BundleStore(d, s3, table=name, bucket=name)


@pytest.fixture(scope="module")
def function(
    stores: tuple[CatalogStore, BundleStore],
    moto_endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LambdaProcess]:
    table = stores[0].table
    yield from start_lambda(tmp_path_factory.mktemp("lambda-fp"), moto_endpoint, table, table)


def listed(function: LambdaProcess) -> str:
    body = answer_body(
        function.invoke(event_for("http-api-tools-list.json", rpc("tools/list", {})))
    )
    return str({t["name"]: t["_meta"][KEY] for t in body["result"]["tools"]}["e2e_packaged"])


def listed_until(function: LambdaProcess, done: Callable[[str], bool]) -> str:
    """The listed fingerprint once `done` holds (a warm function may serve a version read up
    to KILN_CATALOG_MAX_STALENESS_S old), polled with a deadline."""
    deadline = time.monotonic() + 15
    while True:
        shown = listed(function)
        if done(shown) or time.monotonic() > deadline:
            return shown
        time.sleep(0.1)


def pinned(function: LambdaProcess, pin: str) -> dict[str, Any]:
    message = rpc("tools/call", {"name": "e2e_packaged", "arguments": {}, "_meta": {KEY: pin}})
    return answer_body(function.invoke(event_for("http-api-tools-call.json", message)))


def test_the_lambda_function_serves_the_fingerprint_of_what_the_bundle_resolved_to(
    stores: tuple[CatalogStore, BundleStore], function: LambdaProcess
) -> None:
    catalog, bundles = stores
    head: Revision = catalog.create(check_draft(TOOL), actor="e2e").head
    record = bundles.ensure("python", TARGET, TOOL["requirements"])
    assert record is not None
    assert record.id == head.bundle_id

    assert listed_until(function, lambda shown: shown == "pending") == "pending"
    refused = pinned(function, head.fingerprint)
    assert refused["error"]["code"] == -32602, refused
    assert "packages are still being built" in refused["error"]["message"], refused

    bundles.mark_building(record.id)
    bundles.mark_ready(record.id, manifest("4.9.0"))
    f1 = fingerprint.of(
        "e2e_packaged", head, described("python", manifest("4.9.0")["lock"])["resolved_sha256"]
    )
    assert listed_until(function, lambda shown: shown != "pending") == f1
    stale = pinned(function, head.fingerprint)  # the form saved, over the bundle id
    assert stale["error"]["data"]["fingerprint"] == f1, stale
    accepted = pinned(function, f1)  # checked and let through (its zip is not stored here)
    assert "error" not in accepted, accepted

    # Rebuilt (its zip is missing, so a retry makes it pending) to another version.
    bundles.retry(record.id)
    assert listed_until(function, lambda shown: shown == "pending") == "pending"
    bundles.mark_building(record.id)
    bundles.mark_ready(record.id, manifest("4.10.0"))
    f2 = listed_until(function, lambda shown: shown not in ("pending", f1))
    assert f2 == fingerprint.of("e2e_packaged", head, bundles.get(record.id).resolved_sha256)
    again = pinned(function, f1)
    assert again["error"]["code"] == -32602, again
    assert again["error"]["data"]["fingerprint"] == f2, again
    assert "no longer the definition you approved" in again["error"]["message"], again
