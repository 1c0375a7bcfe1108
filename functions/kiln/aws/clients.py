"""AWS clients, made once at the edge and passed in; and the catalog's own resources.

The clients come from one botocore session. Only DynamoDB's is made at once: the public
function's first request reads the catalog's metadata and nothing else, so the S3 client and
the boto3 session (which imports s3transfer and multiprocessing) are made on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from kiln.aws.botocore_data import quick_loader
from kiln.errors import UNAVAILABLE, KilnError

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.literals import BucketLocationConstraintType

Made = TypeVar("Made")

# The single table: pk/sk strings. Item kinds are told apart by key prefixes
# (see catalog/store.py and bundles/store.py); no index is needed.
TABLE_DEFINITION: dict[str, Any] = {
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
    "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    "BillingMode": "PAY_PER_REQUEST",
}


# The function of a deployed stack that a call stands for ("mcp", "admin", "worker"), set per
# request by the apps and for task runs by kiln dev's local pool. Requests to a local emulator
# carry it (X-Kiln-Role), so its call log can be checked against that function's IAM role
# (tests/iam_roles.py). A Lambda function's own calls carry their role's session instead.
CALLER_ROLE: ContextVar[str | None] = ContextVar("kiln_caller_role", default=None)


def _tag_caller_role(**event: Any) -> None:
    role = CALLER_ROLE.get()
    if role is not None:
        event["request"].headers["X-Kiln-Role"] = role


class StoreUnavailableError(KilnError):
    """DynamoDB or S3 did not answer within the deadline, or answered that it cannot.

    REST answers 503 with Retry-After, MCP an error saying the catalog is unavailable.
    The message names the operation and the cause, never a key or an item.
    """

    code, status, rest_code = UNAVAILABLE, 503, "catalog_unavailable"
    retry_after_s = 1

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


# Answers that mean "not now" rather than "not like this": after botocore's own retries,
# they are the store being unavailable, not a bug in the request.
_UNAVAILABLE_CODES = frozenset(
    {
        "ServiceUnavailable",
        "InternalServerError",
        "InternalError",
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "SlowDown",
    }
)


@dataclass(frozen=True)
class StoreDeadlines:
    """How long one store call may take: each attempt's connect and read timeouts, and
    the attempts botocore makes in all (retries reuse a write's idempotency token).
    The worst case, attempts x (connect or read) + one back-off, stays far inside a
    request's budget (API Gateway's 29 s)."""

    connect_s: float = 1.0
    read_s: float = 3.0
    attempts: int = 2

    @property
    def worst_case_s(self) -> float:
        return self.attempts * (self.connect_s + self.read_s) + 1.0


def store_error(operation_name: str, error: Exception) -> Exception:
    """What a store call that failed with `error` (after botocore's retries) raises: a
    StoreUnavailableError when the store did not answer or cannot now, else `error` itself."""
    if isinstance(error, (BotoConnectionError, HTTPClientError)):
        return StoreUnavailableError(
            f"the catalog store did not answer in time ({operation_name}: "
            f"{type(error).__name__}); retry shortly"
        )
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = error.response.get("Error", {}).get("Code", "")
        if status >= 500 or code in _UNAVAILABLE_CODES:
            return StoreUnavailableError(
                f"the catalog store is unavailable ({operation_name}: {code or status}); "
                "retry shortly"
            )
    return error


class _StoreErrors:
    """Mixed into every boto3 client class made by `make_clients` (botocore's
    creating-client-class hook), so that paginators and waiters are covered too."""

    def _make_api_call(self, operation_name: str, api_params: Any) -> Any:
        try:
            return super()._make_api_call(operation_name, api_params)  # type: ignore[misc]
        except (BotoConnectionError, HTTPClientError, ClientError) as error:
            mapped = store_error(operation_name, error)
            if mapped is error:
                raise
            raise mapped from error


def _add_store_errors(**event: Any) -> None:
    base_classes: list[type] = event["base_classes"]
    base_classes.insert(0, _StoreErrors)


class Lazy:
    """Stands in for a client (or session) until its first attribute is read, then makes it.

    Making a client loads its service model from disk, tens of milliseconds each, paid only
    by processes that use it. One lock per session: botocore's client creation (credential
    resolution, loaders) is not safe to run concurrently on one session; re-entrant, because
    the S3 client is made through the lazy boto3 session.
    """

    def __init__(self, make: Callable[[], Any], lock: AbstractContextManager[Any]) -> None:
        self._make = make
        self._lock = lock
        self._made: Any = None

    def __getattr__(self, name: str) -> Any:
        made = self._made
        if made is None:
            with self._lock:
                if self._made is None:
                    self._made = self._make()
                made = self._made
        return getattr(made, name)


def lazy(make: Callable[[], Made], lock: AbstractContextManager[Any]) -> Made:
    """A `Lazy` typed as what `make` makes (to the type checker it is that object)."""
    return cast("Made", Lazy(make, lock))


@dataclass(frozen=True)
class AwsClients:
    dynamodb: DynamoDBClient
    s3: S3Client
    session: boto3.session.Session  # a boto3 Session over the same botocore session (more clients)
    # `dynamodb` with PutItem and GetItem signed and sent without the client (kiln.aws.items):
    # the hot path's ledger entry and catalog version read; made on first use.
    items: DynamoDBClient
    # The local emulator's count of writes that may move the catalog (emulator/changes.py):
    # bytes that stay equal while no such write was acknowledged; None where there is none.
    catalog_changes: Callable[[], bytes | None] | None = None


def make_clients(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    credentials: tuple[str, str] | tuple[str, str, str] | None = None,
    deadlines: StoreDeadlines = StoreDeadlines(),
    dynamodb_at_once: bool = True,
    s3_without_boto3: bool = False,
) -> AwsClients:
    """Clients for DynamoDB and S3; `endpoint_url` points them at the local emulator.

    `credentials` (access key id, secret[, session token]) are for the local emulator, whose
    key is its own; otherwise botocore's usual chain applies. Every call has `deadlines`, and
    a store that does not answer raises StoreUnavailableError. `dynamodb_at_once` False makes
    DynamoDB's on first use too; `s3_without_boto3` makes S3's with botocore alone (no
    upload_file; no boto3, s3transfer or multiprocessing: ~15 ms of the runner's first bundle).
    """
    core = botocore.session.Session(profile=profile)
    # What botocore reads from disk for every new process, cut to what Kiln needs.
    core.register_component("data_loader", quick_loader(core.get_config_variable("data_path")))
    if region:
        core.set_config_variable("region", region)
    if credentials:
        core.set_credentials(*credentials)
    core.register("creating-client-class", _add_store_errors)
    if endpoint_url:
        core.register("before-sign", _tag_caller_role)
    config = Config(
        connect_timeout=deadlines.connect_s,
        read_timeout=deadlines.read_s,
        retries={"total_max_attempts": deadlines.attempts, "mode": "standard"},
        tcp_keepalive=True,
        # As many kept connections as threads that may call at once (the event loop's
        # executor, the ledger's readers, tasks): past the pool's size urllib3 opens a new
        # connection per call and closes it after (kiln dev under load: ~1 in 50 calls).
        max_pool_connections=MAX_POOL_CONNECTIONS,
    )
    kwargs: dict[str, Any] = {"config": config}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    lock = threading.RLock()

    def make_dynamodb() -> DynamoDBClient:
        return cast("DynamoDBClient", core.create_client("dynamodb", **kwargs))

    if dynamodb_at_once:
        with lock:
            dynamodb = make_dynamodb()
    else:
        dynamodb = lazy(make_dynamodb, lock)
    session = lazy(lambda: _boto3_session(core), lock)

    # Through boto3, whose S3 client adds upload_file (the builder uploads bundles with it).
    s3 = core.create_client if s3_without_boto3 else lambda *a, **k: session.client(*a, **k)
    return AwsClients(
        dynamodb=dynamodb, s3=lazy(lambda: cast("S3Client", s3("s3", **kwargs)), lock),
        session=session,
        items=lazy(lambda: _signed_items(core, dynamodb, deadlines, bool(endpoint_url)), lock),
    )  # fmt: skip


def _signed_items(
    core: botocore.session.Session, dynamodb: DynamoDBClient, deadlines: StoreDeadlines, local: bool
) -> DynamoDBClient:
    """`dynamodb` with PutItem and GetItem sent by kiln.aws.items, on the same credentials,
    deadlines and attempts; tagged with the caller's role for a local emulator."""
    from kiln.aws.items import SignedItems

    signed = SignedItems(
        dynamodb, core.get_credentials(), attempts=deadlines.attempts,
        connect_timeout_s=deadlines.connect_s, read_timeout_s=deadlines.read_s,
        pool_connections=MAX_POOL_CONNECTIONS, verify=core.get_config_variable("ca_bundle"),
        errors=store_error, role=CALLER_ROLE.get if local else None,
    )  # fmt: skip
    return cast("DynamoDBClient", signed)


def _boto3_session(core: botocore.session.Session) -> boto3.session.Session:
    import boto3

    return boto3.session.Session(botocore_session=core)


# A new table records each ledger day's shard count from its first day (must equal
# kiln.accounting.ledger_shards.since_start(), which reads it; tests/unit/accounting checks).
LEDGER_SHARDS_SINCE_START = {
    "pk": {"S": "LEDGERSUM#SHARDS"},
    "sk": {"S": "SINCE"},
    "day": {"S": "0000-00-00"},
}


MAX_POOL_CONNECTIONS = 48  # botocore's default is 10


def ensure_resources(clients: AwsClients, *, table: str, bucket: str) -> None:
    """Create the table and bucket if they are missing (local stacks and tests only)."""
    dynamodb, s3 = clients.dynamodb, clients.s3
    try:
        dynamodb.describe_table(TableName=table)
    except dynamodb.exceptions.ResourceNotFoundException:
        dynamodb.create_table(TableName=table, **TABLE_DEFINITION)
        # botocore's waiter sleeps Delay seconds as given: a fraction polls a local table
        # (the stubs, after the API docs, say whole seconds)
        dynamodb.get_waiter("table_exists").wait(
            TableName=table,
            WaiterConfig={"Delay": 0.2, "MaxAttempts": 50},  # type: ignore[typeddict-item]
        )
        from kiln.aws.directory import mark_new_table

        mark_new_table(dynamodb, table)
        # nor any ledger day written before days recorded their shard count
        dynamodb.put_item(TableName=table, Item=LEDGER_SHARDS_SINCE_START)
    try:
        s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError:
        region = s3.meta.region_name
        if region and region != "us-east-1":
            s3.create_bucket(
                Bucket=bucket,
                CreateBucketConfiguration={
                    "LocationConstraint": cast("BucketLocationConstraintType", region)
                },
            )
        else:
            s3.create_bucket(Bucket=bucket)
