"""`kiln bundles` as a user runs it: a real process against the moto server or a real app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import AwsStack
from support.app import AUTHOR_KEY, RunningKiln

pytestmark = pytest.mark.slow


def kiln(aws: AwsStack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "AWS_ENDPOINT_URL": aws.endpoint_url,
        "KILN_TABLE": aws.table,
        "KILN_BUCKET": aws.bucket,
        "KILN_AUTHOR_KEY": AUTHOR_KEY,
    }
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", "bundles", *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_build_publishes_a_bundle_with_progress_and_ls_and_show_find_it(aws: AwsStack) -> None:
    built = kiln(aws, "build", "--requirements", "six==1.17.0")
    assert built.returncode == 0, built.stderr
    bundle_id = built.stdout.strip()
    assert "pip install six==1.17.0" in built.stderr
    assert "uploaded" in built.stderr
    assert "(100%)" in built.stderr
    assert f"{bundle_id} ready" in built.stderr

    again = kiln(aws, "build", "--requirements", "six==1.17.0")
    assert again.returncode == 0
    assert "already built" in again.stdout

    listed = kiln(aws, "ls", "--aws")
    assert listed.returncode == 0, listed.stderr
    assert bundle_id in listed.stdout
    assert "ready" in listed.stdout
    shown = kiln(aws, "show", bundle_id, "--aws", "--log")
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout.split("\n--- build log ---\n")[0])
    assert record["lock"][0]["name"] == "six"
    assert "+ six==1.17.0" in shown.stdout


def test_a_failing_build_exits_non_zero_with_the_installer_error_and_retry_builds_again(
    aws: AwsStack,
) -> None:
    failed = kiln(aws, "build", "--requirements", "kiln-no-such-package-9f1c==1.0")
    assert failed.returncode == 1
    assert "was not found in the package registry" in failed.stderr
    assert "kiln bundles build:" in failed.stderr
    listed = json.loads(kiln(aws, "ls", "--aws", "--json").stdout)
    [record] = listed
    assert record["status"] == "failed"
    retried = kiln(aws, "retry", record["id"], "--aws")
    assert retried.returncode == 1
    assert json.loads(kiln(aws, "ls", "--aws", "--json").stdout)[0]["attempts"] == 2


def test_build_for_lambda_into_a_folder_needs_no_aws(aws: AwsStack, tmp_path: Path) -> None:
    tool = Path(__file__).resolve().parents[3] / "examples" / "tools" / "humanize_bytes"
    out = tmp_path / "out"
    before = aws.clients.dynamodb.scan(TableName=aws.table)["Items"]  # the table's own marks
    built = kiln(
        aws, "build", "--target", "lambda-python3.13-arm64", "--tool", str(tool), "--out", str(out)
    )
    assert built.returncode == 0, built.stderr
    bundle_id = built.stdout.strip()
    manifest = json.loads((out / f"{bundle_id}.manifest.json").read_text())
    assert manifest["target"] == "lambda-python3.13-arm64"
    assert (out / f"{bundle_id}.zip").stat().st_size == manifest["zip_size"]
    assert aws.clients.dynamodb.scan(TableName=aws.table)["Items"] == before  # nothing written


def test_bad_input_gets_a_clear_message(aws: AwsStack) -> None:
    wrong = kiln(aws, "build", "--target", "lambda-python3.13-x86_64", "--language", "node",
                 "--requirements", "lodash@4.17.21")  # fmt: skip
    assert wrong.returncode == 1
    assert "is not a node target" in wrong.stderr
    bad = kiln(aws, "build", "--requirements", "not a requirement!!")
    assert bad.returncode == 1
    assert "must be a PEP 508 requirement" in bad.stderr
    assert "(rule: pep508)" in bad.stderr


def test_ls_show_and_retry_ask_a_running_server(kiln_server: RunningKiln, aws: AwsStack) -> None:
    bundles = kiln_server.kiln.bundles
    assert bundles is not None
    record = bundles.store.ensure("python", "local-python3.11-x86_64", ["six"])
    assert record is not None
    bundles.store.mark_building(record.id)
    bundles.store.mark_failed(record.id, "pip install failed (exit 1): boom", None)
    url = ["--url", kiln_server.url]
    listed = kiln(aws, "ls", *url)
    assert listed.returncode == 0, listed.stderr
    assert record.id in listed.stdout
    assert "failed" in listed.stdout
    shown = kiln(aws, "show", record.id, *url)
    assert json.loads(shown.stdout)["error"] == "pip install failed (exit 1): boom"
    unknown = kiln(aws, "show", "0" * 32, *url)
    assert unknown.returncode == 1
    assert "HTTP 404: bundle 00000000000000000000000000000000: no such bundle" in unknown.stderr
    bundles.scheduler = _Held()
    retried = kiln(aws, "retry", record.id, *url)
    assert retried.returncode == 0, retried.stderr
    assert f"{record.id} pending" in retried.stdout


class _Held:
    """A scheduler that keeps what it is given (the test checks the status, not a build)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def schedule(self, bundle_id: str) -> None:
        self.ids.append(bundle_id)
