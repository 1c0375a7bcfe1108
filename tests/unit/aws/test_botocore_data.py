"""Kiln's cut of botocore's data: the same answers as botocore's own files, for less work."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import botocore
import botocore.session
import pytest

from kiln.aws.botocore_data import (
    BUILTIN,
    DATA,
    ENDPOINT_SERVICES,
    LISTED_TYPES,
    MODEL_SERVICES,
    builtin_model,
    builtin_services,
    models_dir,
    quick_loader,
    trimmed_endpoints,
    undocumented,
)
from kiln.aws.clients import make_clients

REGENERATE = "regenerate with: python -c 'import kiln.aws.botocore_data as d; d.write()'"
REGIONS = ["eu-west-1", "cn-north-1", "us-gov-west-1"]  # one per partition family


def test_the_shipped_endpoints_are_the_installed_botocores_cut_to_kilns_services() -> None:
    shipped = json.loads((DATA / "endpoints.json").read_text())
    expected = trimmed_endpoints(json.loads((BUILTIN / "endpoints.json").read_text()))
    assert shipped == expected, f"data/endpoints.json is stale for this botocore: {REGENERATE}"


@pytest.mark.parametrize("kind", LISTED_TYPES)
def test_the_shipped_service_list_is_the_installed_botocores(kind: str) -> None:
    shipped = json.loads((DATA / "services.json").read_text())
    assert shipped["botocore"] == botocore.__version__, REGENERATE
    assert shipped[kind] == builtin_services(kind), REGENERATE


@pytest.mark.parametrize("service", MODEL_SERVICES)
def test_a_shipped_model_is_the_installed_botocores_with_its_documentation_emptied(
    service: str,
) -> None:
    version, model = builtin_model(service)
    path = models_dir() / service / version / "service-2.json.gz"
    assert path.is_file(), f"no shipped {service} model for this botocore: {REGENERATE}"
    shipped = json.loads(gzip.decompress(path.read_bytes()))
    assert shipped == undocumented(model), f"{path} is stale for this botocore: {REGENERATE}"
    assert shipped["operations"].keys() == model["operations"].keys()
    assert shipped["shapes"].keys() == model["shapes"].keys()


def test_only_documentation_strings_are_emptied_in_a_model() -> None:
    model = {
        "documentation": "<p>An API.</p>",
        "clientContextParams": {"Accelerate": {"type": "boolean", "documentation": "Use it."}},
        "shapes": {"Thing": {"type": "structure", "documentationUrl": "https://x",
                             "members": {"documentation": {"shape": "String"}}}},
    }  # fmt: skip
    assert undocumented(model) == {
        "documentation": "",
        "clientContextParams": {"Accelerate": {"type": "boolean", "documentation": ""}},
        "shapes": {"Thing": {"type": "structure", "documentationUrl": "",
                             "members": {"documentation": {"shape": "String"}}}},
    }  # fmt: skip


@pytest.mark.parametrize("service", MODEL_SERVICES)
def test_a_client_is_made_from_the_shipped_model(service: str) -> None:
    ours = make_clients(region="eu-west-1").session.client(service)
    plain = botocore.session.Session().create_client(service, region_name="eu-west-1")
    model, theirs = ours.meta.service_model, plain.meta.service_model
    assert model.operation_names == theirs.operation_names
    assert model.documentation == "", "the client's model is botocore's own, not the shipped one"
    assert theirs.documentation != ""


def test_every_kept_endpoint_service_is_one_botocore_knows() -> None:
    data = json.loads((BUILTIN / "endpoints.json").read_text())
    (aws,) = [p for p in data["partitions"] if p["partition"] == "aws"]
    assert sorted(s for s in ENDPOINT_SERVICES if s not in aws["services"]) == []


@pytest.mark.parametrize("kind", [*LISTED_TYPES, "examples-1"])
def test_the_quick_loader_lists_what_botocores_own_loader_lists(kind: str) -> None:
    plain = botocore.session.Session().get_component("data_loader")
    quick = quick_loader(None)
    assert quick.list_available_services(kind) == plain.list_available_services(kind)


def test_a_client_its_paginator_and_its_waiter_never_list_botocores_data_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed: list[str] = []
    real_listdir = os.listdir

    def listdir(path: str) -> list[str]:
        listed.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    dynamodb = make_clients(region="eu-west-1").dynamodb
    dynamodb.get_paginator("query")
    dynamodb.get_waiter("table_exists")
    # Its own service's folder, for the latest API version, is all it may look into.
    others = [p for p in listed if p.startswith(str(BUILTIN)) and p != str(BUILTIN / "dynamodb")]
    assert others == [], f"botocore listed its data directory: {others[:5]} ({len(others)})"


def test_the_quick_loader_still_finds_services_on_aws_data_path(tmp_path: Path) -> None:
    extra = tmp_path / "models"
    (extra / "kiln-made-up" / "2020-01-01").mkdir(parents=True)
    (extra / "kiln-made-up" / "2020-01-01" / "service-2.json").write_text("{}")
    services = quick_loader(str(extra)).list_available_services("service-2")
    assert "kiln-made-up" in services
    assert "dynamodb" in services


@pytest.mark.parametrize("service", ["dynamodb", "s3", "ssm"])
@pytest.mark.parametrize("region", REGIONS)
def test_a_client_resolves_the_same_endpoint_as_with_botocores_full_data(
    service: str, region: str
) -> None:
    ours = make_clients(region=region).session.client(service)
    plain = botocore.session.Session().create_client(service, region_name=region)
    assert ours.meta.endpoint_url == plain.meta.endpoint_url
    assert ours.meta.region_name == plain.meta.region_name == region
