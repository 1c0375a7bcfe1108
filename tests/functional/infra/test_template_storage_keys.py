"""The S3 keys Kiln really writes fall under the prefixes template.yaml grants each function."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cfnlint.decode import decode

from conftest import AwsStack
from kiln.bundles.store import log_key, manifest_key, zip_key
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"


def granted_prefixes(function: str, action: str) -> list[str]:
    """Key prefixes of the bucket on which `function` is allowed `action` (`code/` from
    `${CatalogBucket.Arn}/code/*`)."""
    template, problems = decode(str(TEMPLATE))
    assert template is not None, problems
    found = []
    for policy in template["Resources"][function]["Properties"]["Policies"]:
        for statement in policy["Statement"]:
            actions = statement["Action"]
            if action not in (actions if isinstance(actions, list) else [actions]):
                continue
            resources = statement["Resource"]
            for resource in resources if isinstance(resources, list) else [resources]:
                text = resource.get("Fn::Sub", "") if isinstance(resource, dict) else ""
                match = re.fullmatch(r"\$\{CatalogBucket\.Arn\}/(.*)\*", str(text))
                if match:
                    found.append(match.group(1))
    return found


def allowed(key: str, prefixes: list[str]) -> bool:
    return any(key.startswith(prefix) for prefix in prefixes)


def test_tool_code_is_written_where_the_admin_may_put_and_the_public_function_may_get(
    aws: AwsStack,
) -> None:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    store.create(
        check_draft(
            {
                "name": "keys",
                "description": "Prints ok.",
                "language": "python",
                "code": "print(1)\n",
            }
        ),
        actor="test",
    )
    keys = [o["Key"] for o in aws.clients.s3.list_objects_v2(Bucket=aws.bucket)["Contents"]]
    assert keys
    for key in keys:
        assert allowed(key, granted_prefixes("AdminFunction", "s3:PutObject")), key
        assert allowed(key, granted_prefixes("McpFunction", "s3:GetObject")), key
        assert not allowed(key, granted_prefixes("BuilderFunction", "s3:PutObject")), key


@pytest.mark.parametrize("key", [zip_key("b" * 64), manifest_key("b" * 64), log_key("b" * 64)])
def test_bundle_files_are_written_where_only_the_builder_may_put(key: str) -> None:
    assert allowed(key, granted_prefixes("BuilderFunction", "s3:PutObject"))
    assert allowed(key, granted_prefixes("McpFunction", "s3:GetObject"))
    assert not allowed(key, granted_prefixes("AdminFunction", "s3:PutObject"))
