"""What botocore reads from disk in every new process, cut to what Kiln needs.

A cold start makes one client (DynamoDB), and before that botocore (1) parses all of its
endpoints.json (1.2 MB: every service of every partition) and (2) lists its data directory,
about 450 service folders and their version folders, to check that the service exists. Both
answers are the same for every process of one botocore release, so they ship with Kiln in
`data/`, made by `write()` from the installed botocore:

- `endpoints.json`: the same document cut to the services Kiln calls (`ENDPOINT_SERVICES`),
  searched before botocore's own; any other service falls back to its partition's defaults,
  as it would with the full file;
- `services.json`: botocore's version and, for each kind of model a client loads
  (`LISTED_TYPES`: its API, its endpoint rules, paginators, waiters), the services that have
  one. botocore lists its data directory once per kind (a client's creation checks two kinds,
  its first paginator a third: ~11 ms each here). A loader made by `quick_loader` answers
  `list_available_services(kind)` from the file when the installed botocore has that
  version, and lists the other search paths (AWS_DATA_PATH, ~/.aws/models) as botocore
  would; for another kind, or on any other release, it lists everything itself;
- `models-<botocore version>/<service>/<api version>/service-2.json.gz`: the API models of
  the clients a cold start or a first call makes (`MODEL_SERVICES`) with their
  documentation strings emptied (what botocore shows in `help()`, never reads otherwise: four
  fifths of each file): DynamoDB's parses in 1.7 ms instead of 5.0, S3's in 4.0 instead of
  11.6. Searched only when the installed botocore is that version.

tests/unit/aws/test_botocore_data.py fails when any of them no longer matches the installed
botocore (regenerate with `python -c "import kiln.aws.botocore_data as d; d.write()"`).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import botocore
from botocore.loaders import Loader, instance_cache

DATA = Path(__file__).parent / "data"
BUILTIN = Path(botocore.__file__).parent / "data"
ENDPOINT_SERVICES = (
    "dynamodb",
    "lambda",
    "logs",
    "monitoring",
    "oidc",
    "s3",
    "ssm",
    "sso",
    "sts",
    "xray",
)
# The clients made by a cold start (DynamoDB), a first call (S3: its code; Lambda: the runner
# function) and a runner's first bundle (S3): their models ship without documentation.
MODEL_SERVICES = ("dynamodb", "lambda", "s3")
DOC_KEYS = ("documentation", "documentationUrl")
# The kinds of model botocore lists its data directory for: a client's creation (service-2,
# endpoint-rule-set-1), get_paginator (paginators-1), get_waiter (waiters-2).
LISTED_TYPES = ("service-2", "endpoint-rule-set-1", "paginators-1", "waiters-2")


def trimmed_endpoints(full: Mapping[str, Any]) -> dict[str, Any]:
    """botocore's endpoints data with only `ENDPOINT_SERVICES` in each partition."""
    partitions = [
        {**p, "services": {k: v for k, v in p["services"].items() if k in ENDPOINT_SERVICES}}
        for p in full["partitions"]
    ]
    return {**full, "partitions": partitions}


def builtin_services(type_name: str = "service-2") -> list[str]:
    """The services botocore's own data directory holds a `type_name` model for."""
    only_builtin = Loader(extra_search_paths=[str(BUILTIN)], include_default_search_paths=False)
    services: list[str] = only_builtin.list_available_services(type_name)
    return services


def undocumented(node: Any) -> Any:
    """An API model with its documentation strings emptied: the keys stay, botocore reads
    some (a client context parameter's); a member named so is a dict, kept as it is."""
    if isinstance(node, dict):
        return {
            key: "" if key in DOC_KEYS and isinstance(value, str) else undocumented(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [undocumented(value) for value in node]
    return node


def models_dir() -> Path:
    """Where the shipped models for the installed botocore are (made by `write()`)."""
    return DATA / f"models-{botocore.__version__}"


def builtin_model(service: str) -> tuple[str, dict[str, Any]]:
    """The latest API version of `service` in botocore's own data, and its model."""
    only_builtin = Loader(extra_search_paths=[str(BUILTIN)], include_default_search_paths=False)
    version: str = only_builtin.determine_latest_version(service, "service-2")
    model: dict[str, Any] = only_builtin.load_service_model(service, "service-2", version)
    return version, model


def write() -> None:
    """Regenerate `data/` from the installed botocore."""
    endpoints = trimmed_endpoints(json.loads((BUILTIN / "endpoints.json").read_text()))
    listing: dict[str, Any] = {"botocore": botocore.__version__}
    listing.update({kind: builtin_services(kind) for kind in LISTED_TYPES})
    for name, document in (("endpoints.json", endpoints), ("services.json", listing)):
        text = json.dumps(document, separators=(",", ":"), sort_keys=True)
        (DATA / name).write_text(text + "\n")
    for old in DATA.glob("models-*"):
        shutil.rmtree(old)
    for service in MODEL_SERVICES:
        version, model = builtin_model(service)
        target = models_dir() / service / version / "service-2.json.gz"
        target.parent.mkdir(parents=True)
        text = json.dumps(undocumented(model), separators=(",", ":"))
        target.write_bytes(gzip.compress(text.encode(), mtime=0))


class _QuickLoader(Loader):
    @instance_cache
    def list_available_services(self, type_name: str) -> list[str]:
        listed = self._shipped().get(type_name)
        if listed is None or str(BUILTIN) not in self.search_paths:
            return list(super().list_available_services(type_name))
        others = [p for p in self.search_paths if p != str(BUILTIN)]
        rest = Loader(extra_search_paths=others, include_default_search_paths=False)
        return sorted({*listed, *rest.list_available_services(type_name)})

    @instance_cache
    def _shipped(self) -> dict[str, list[str]]:
        """The shipped listings, by kind; none unless made from the installed botocore."""
        try:
            shipped = json.loads((DATA / "services.json").read_text())
        except (OSError, ValueError):
            return {}
        if shipped.pop("botocore", None) != botocore.__version__:
            return {}
        return {kind: shipped[kind] for kind in LISTED_TYPES if kind in shipped}


def quick_loader(data_path: str | None) -> Loader:
    """botocore's `create_loader(data_path)` with Kiln's data searched after AWS_DATA_PATH."""
    paths = [os.path.expanduser(os.path.expandvars(p)) for p in (data_path or "").split(os.pathsep)]
    models = [str(models_dir())] if models_dir().is_dir() else []
    return _QuickLoader(extra_search_paths=[*(p for p in paths if p), str(DATA), *models])
