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
  would; for another kind, or on any other release, it lists everything itself.

tests/unit/aws/test_botocore_data.py fails when either file no longer matches the installed
botocore (regenerate with `python -c "import kiln.aws.botocore_data as d; d.write()"`).
"""

from __future__ import annotations

import json
import os
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


def write() -> None:
    """Regenerate `data/` from the installed botocore."""
    endpoints = trimmed_endpoints(json.loads((BUILTIN / "endpoints.json").read_text()))
    listing: dict[str, Any] = {"botocore": botocore.__version__}
    listing.update({kind: builtin_services(kind) for kind in LISTED_TYPES})
    for name, document in (("endpoints.json", endpoints), ("services.json", listing)):
        text = json.dumps(document, separators=(",", ":"), sort_keys=True)
        (DATA / name).write_text(text + "\n")


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
    return _QuickLoader(extra_search_paths=[*(p for p in paths if p), str(DATA)])
