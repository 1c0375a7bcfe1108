"""What the public Lambda function loads before it answers its first tools/list.

A cold start pays for every module imported before the first answer. The schema machinery
(jsonschema, re2), the requirement parser (packaging), the MCP wire models (mcp-types,
pydantic), boto3's transfer layer and the bundle builder are needed only by other requests
(tools/call, saves, builds) and must load on first use. Checked by listing `sys.modules` in
a fresh process: deterministic, no timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore

ROOT = Path(__file__).resolve().parents[3]
EVENT = ROOT / "tests" / "events" / "http-api-tools-list.json"

# Loaded only by requests other than a list (tools/call, saves, builds, initialize).
DEFERRED = (
    "jsonschema",
    "referencing",
    "re2",
    "packaging",
    "mcp_types",
    "pydantic",
    "boto3",
    "s3transfer",
    "multiprocessing",
    "fastapi",
    "kiln.catalog.rules",
    "kiln.catalog.schemas",
    "kiln.catalog.requirements",
    "kiln.schema.arguments",
    "kiln.authoring.service",
    # search mode's ranking: loaded by the first search_tools, never by a list
    "kiln.protocol.search",
    "bm25s",
    "numpy",
    "Stemmer",
    # code mode's stubs: made by the first execute of a view, never by a list
    "kiln.protocol.codestubs",
    # requestState's AES-GCM: loaded by the first multi round-trip call (~70 ms of CPU)
    "cryptography",
    "_cffi_backend",
    # the bundle builder (pip, uv, bun, tomllib): the builder function and kiln dev only
    "kiln.bundles.build",
    "kiln.bundles.uv",
    "kiln.bundles.bun",
    "tomllib",
    # the runner's process machinery (containment, the launcher, standbys): the first run
    # made in this process (in AWS: none, runs go to the runner function)
    "kiln.runner.runner",
    "kiln.runner.contain",
    "kiln.runner.launcher",
    # callers' OAuth connections: built only where a vault key is configured (here none)
    "kiln.connections",
    # the task service (records, worker, approvals, webhooks): the first call or tasks/*
    "kiln.tasks.service",
    "kiln.tasks.store",
    "kiln.tasks.worker",
    "kiln.access.webhook",
    # a call's side: the run's request, talk and result, the runner function's payload (made on
    # the first run, KILN_RUNNER_FUNCTION or not), approvals' store, masking, packages
    "kiln.runner.limits",  # the settings read the longest run from runner.ceiling
    "kiln.runner.model",
    "kiln.runner.talk",
    "kiln.runner.remote",
    "kiln.aws.invoke",
    "kiln.serving.conversation",
    "kiln.serving.runs",
    "kiln.serving.masking",
    "kiln.serving.packages",
    "kiln.serving.connecting",
    "kiln.access.approval_store",
    "kiln.protocol.talking",
    # API keys: the first request that carries one (an anonymous list reads none)
    "kiln.identity.keys",
    # a build's zips and trees (the scheduler names them only in its types); the unpacked
    # bundles' cache (folders, seals, inotify, its locks): the first bundle used or built
    "kiln.bundles.contents",
    "kiln.bundles.cache",
    "kiln.bundles.folders",
    "kiln.bundles.seal",
    # the call ledger (its entries, shards, totals): the first call's entry (stack.call_gate)
    "kiln.accounting.ledger",
    "kiln.accounting.ledger_shards",
    "kiln.accounting.ledger_totals",
    # server cards' documents and schemas: the first card asked for (the middleware and the
    # routes read only protocol.card_paths)
    "kiln.protocol.cards",
    "kiln.protocol.card_schemas",
)

PROBE = """
import gc, json, sys
full_before = gc.get_stats()[2]["collections"]
from kiln.lambda_handlers import mcp
collector = {
    "enabled": gc.isenabled(),
    "frozen": gc.get_freeze_count(),
    "full collections": gc.get_stats()[2]["collections"] - full_before,
}

class Context:
    aws_request_id = "probe"
    function_name = "kiln-probe"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiln-probe"
    def get_remaining_time_in_millis(self):
        return 30000

deferred = json.loads(sys.argv[1])
imported = sorted(m for m in deferred if m in sys.modules)
response = mcp(json.loads(sys.stdin.read()), Context())
body = json.loads(response["body"])
print(json.dumps({
    "status": response["statusCode"],
    "tools": [t["name"] for t in body["result"]["tools"]],
    "at import": imported,
    "after the answer": sorted(m for m in deferred if m in sys.modules),
    "collector after the init": collector,
}))
"""


def _probe(aws: AwsStack, code: str, names: tuple[str, ...], stdin: str, **extra: str) -> Any:
    """What `code` prints last (JSON), in a fresh process with a Lambda function's settings;
    it writes nothing to stderr (a warning there is a line in every cold start's log)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "POWERTOOLS_"))}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(names)],
        input=stdin,
        env={
            **clean,
            "PYTHONPATH": str(ROOT / "functions"),
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": aws.endpoint_url,
            "AWS_LAMBDA_FUNCTION_NAME": "kiln-probe",
            "KILN_TABLE": aws.table,
            "KILN_BUCKET": aws.bucket,
            "KILN_WORKER_FUNCTION": "kiln-probe-worker",  # as template.yaml sets it
            **extra,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _first_list(aws: AwsStack, **extra: str) -> dict[str, object]:
    event = json.loads(EVENT.read_text())
    event["headers"]["host"] = "127.0.0.1:8000"
    result: dict[str, object] = _probe(aws, PROBE, DEFERRED, json.dumps(event), **extra)
    return result


@pytest.mark.parametrize(
    ("mode", "runner_function"), [("list", ""), ("search", ""), ("list", "kiln-probe-runner")]
)
def test_the_public_handler_answers_its_first_tools_list_without_the_deferred_modules(
    aws: AwsStack, mode: str, runner_function: str
) -> None:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    draft = {
        "name": "add_vat",
        "description": "Add VAT to a net amount.",
        "language": "python",
        "code": "print(1)\n",
        "input_schema": {"type": "object", "properties": {"net": {"type": "number"}}},
        "annotations": {"readOnlyHint": True},
    }
    store.create(check_draft(draft), actor="test")

    loaded = _first_list(aws, KILN_CATALOG_MODE=mode, KILN_RUNNER_FUNCTION=runner_function)

    assert loaded["status"] == 200
    listed = ["add_vat"] if mode == "list" else ["call_tool", "describe_tools", "search_tools"]
    assert loaded["tools"] == listed
    assert loaded["at import"] == []
    assert loaded["after the answer"] == []


def test_the_public_handlers_init_runs_without_the_collector_and_freezes_what_it_made(
    aws: AwsStack,
) -> None:
    """The init phase (process.init_phase): no collections while it builds; afterwards the
    collector is on again and the ~100k objects it made are frozen out of its walks."""
    loaded = _first_list(aws)

    assert loaded["status"] == 200
    collector = loaded["collector after the init"]
    assert isinstance(collector, dict)
    assert collector["enabled"] is True
    assert collector["full collections"] == 0, collector
    assert collector["frozen"] > 10_000, collector


# The runner function runs one tool per invocation: none of the catalog, access, accounting,
# protocol or HTTP machinery is its own (a new tenant's first call pays for every import).
NOT_THE_RUNNERS = (
    "kiln.stack",
    "kiln.access",
    "kiln.accounting",
    "kiln.catalog.store",
    "kiln.catalog.model",  # its models: a bundle's identity needs only the language's name
    "kiln.protocol",
    "kiln.serving.backend",
    "kiln.api.apps",
    "kiln.tasks.worker",
    "kiln.bundles.build",
    "starlette",
    "mangum",
    "cryptography",
)

RUNNER_PROBE = """
import json, sys
from kiln.lambda_handlers import runner

print(json.dumps(sorted(m for m in json.loads(sys.argv[1]) if m in sys.modules)))
"""


def test_the_runner_function_imports_none_of_the_public_functions_machinery(
    aws: AwsStack,
) -> None:
    assert _probe(aws, RUNNER_PROBE, NOT_THE_RUNNERS, "") == []


RUNNER_INIT_PROBE = """
import json, sys
from kiln import lambda_handlers
from kiln.lambda_handlers import runner

print(json.dumps({
    # powertools' user agent imports the bare package (0.4 ms); its modules are the cost
    "botocore": sorted(m for m in sys.modules if m.startswith(("botocore.", "boto3"))),
    "http": sorted(m for m in ("urllib.request", "http.client") if m in sys.modules),
    "clients": hasattr(lambda_handlers, "clients"),
    "powertools": sorted(m for m in sys.modules if m.startswith("aws_lambda_powertools")),
    "bundle cache": [m for m in ("kiln.bundles.cache", "kiln.bundles.store") if m in sys.modules],
}))
"""


def test_the_runner_function_imports_no_botocore_at_init(aws: AwsStack) -> None:
    """It reads no table and S3 only for a tool's bundle: botocore (~60 ms of a new tenant's
    init) and its S3 client come with the first bundle fetched (bench/runner/new_tenant.py;
    tests/e2e/test_lambda_profile.py fetches one); urllib.request (http.client, email: ~20 ms)
    only when an environment must post its own answer and end; no Powertools (~11-17 ms:
    its log lines are the runtime's own, kiln.observability.plain); the bundle cache's modules
    (~8 ms) with the first bundle too."""
    handler = {"_HANDLER": "kiln.lambda_handlers.runner"}  # as Lambda sets it
    found = _probe(aws, RUNNER_INIT_PROBE, (), "", **handler)
    assert found == {
        "botocore": [], "http": [], "clients": False, "powertools": [], "bundle cache": []
    }  # fmt: skip


RUNNER_S3_PROBE = """
import json, os, sys
from kiln import process
from kiln.settings import Settings

s3 = process.aws_clients(Settings.from_env()).s3
s3.head_bucket(Bucket=os.environ["KILN_BUCKET"])
print(json.dumps(sorted(m for m in ("boto3", "s3transfer", "multiprocessing") if m in sys.modules)))
"""


def test_the_runner_functions_s3_client_is_botocores_own(aws: AwsStack) -> None:
    """Its first bundle makes the S3 client, which only reads zips: without boto3 (s3transfer,
    multiprocessing: ~15 ms of a bundle tool's cold first call)."""
    handler = {"_HANDLER": "kiln.lambda_handlers.runner"}
    assert _probe(aws, RUNNER_S3_PROBE, (), "", **handler) == []
