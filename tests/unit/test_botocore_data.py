"""Kiln's cut of botocore's endpoints data: the same answers as the full file, for less parsing."""

from __future__ import annotations

import json
from pathlib import Path

import botocore
import botocore.session
import pytest

from kiln.aws import BOTOCORE_DATA, ENDPOINT_SERVICES, make_clients, trimmed_endpoints

FULL = Path(botocore.__file__).parent / "data" / "endpoints.json"
REGIONS = ["eu-west-1", "cn-north-1", "us-gov-west-1"]  # one per partition family


def test_the_shipped_file_is_the_installed_botocores_endpoints_cut_to_kilns_services() -> None:
    shipped = json.loads((BOTOCORE_DATA / "endpoints.json").read_text())
    expected = trimmed_endpoints(json.loads(FULL.read_text()))
    assert shipped == expected, (
        "kiln/botocore_data/endpoints.json is stale for this botocore: regenerate it with "
        "python -c 'from kiln.aws import write_trimmed_endpoints as w; w()'"
    )


def test_every_kept_service_is_one_botocore_knows() -> None:
    (aws,) = [p for p in json.loads(FULL.read_text())["partitions"] if p["partition"] == "aws"]
    assert sorted(s for s in ENDPOINT_SERVICES if s not in aws["services"]) == []


@pytest.mark.parametrize("service", ["dynamodb", "s3", "ssm"])
@pytest.mark.parametrize("region", REGIONS)
def test_a_client_resolves_the_same_endpoint_as_with_botocores_full_data(
    service: str, region: str
) -> None:
    ours = make_clients(region=region).session.client(service)
    plain = botocore.session.Session().create_client(service, region_name=region)
    assert ours.meta.endpoint_url == plain.meta.endpoint_url
    assert ours.meta.region_name == plain.meta.region_name == region
