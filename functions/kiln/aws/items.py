"""DynamoDB's PutItem and GetItem as one signed POST each, answering as the client does.

Every `tools/call` writes its ledger entry (a PutItem) before the answer, and a warm container
reads the catalog's version (a GetItem) once per window. Through a botocore client a ledger
entry's PutItem cost 1.0-1.5 ms of CPU in a process that idles between requests as a Lambda
function does (its caches cold: the client's event hooks, validation, endpoint ruleset and
retry handler), against 0.9 ms as a request signed and sent by `kiln.aws.signed`; the public
function's ledger write went from 1.6-1.7 to 1.0-1.2 ms a call (2026-12-04, this 2-core
machine, load 0.5-1.5, in-process and under bench/cost/run.py). `SignedItems` sends those two
operations that way and keeps everything the client gives them:

- the same wire: botocore's own JSON serializer and the client's service model (the target,
  the content type, blobs base64), signed for `dynamodb` in the client's region and sent to
  the client's endpoint; the local emulator's caller role header as the client adds it;
- the same retries: botocore's standard mode, its own classes (`botocore.retries.standard`)
  with the client's attempts: throttling and transient errors (5xx, connection errors, a
  CRC32 mismatch) retried with its back-off and retry quota, so a write the client would have
  retried is retried;
- the same answers: botocore's JSON parser (ResponseMetadata included); an error is the
  client's own exception class (`client.exceptions.ConditionalCheckFailedException`, ...,
  with its modeled fields such as the old `Item`), and a store that does not answer or
  cannot now is a StoreUnavailableError, as `kiln.aws.clients` maps a client's errors.

What it leaves out: parameter validation before sending (DynamoDB answers a bad request with
its ValidationException instead of botocore's ParamValidationError), the client's event hooks
(`meta.events` handlers do not see these two operations), and the account-based endpoint
(the regional one is used). Every other operation, and `meta` and `exceptions`, is the
client's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from botocore.awsrequest import AWSResponse
from botocore.endpoint import convert_to_response_dict
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.parsers import create_parser
from botocore.retries import quota, standard
from botocore.serialize import create_serializer

from kiln.aws.signed import SignedSession

if TYPE_CHECKING:
    from botocore.credentials import Credentials
    from botocore.model import OperationModel
    from mypy_boto3_dynamodb import DynamoDBClient

OPERATIONS = ("PutItem", "GetItem")


class SignedItems:
    """`put_item` and `get_item` of `client`, signed and sent directly; the rest is `client`'s."""

    def __init__(
        self,
        client: DynamoDBClient,
        credentials: Credentials | None,
        *,
        attempts: int,
        connect_timeout_s: float,
        read_timeout_s: float,
        pool_connections: int,
        verify: str | bool | None = None,
        errors: Callable[[str, Exception], Exception] = lambda operation, error: error,
        role: Callable[[], str | None] | None = None,
    ) -> None:
        """`errors` maps a failed call's error as the client's own calls are mapped
        (kiln.aws.clients.store_error); `role`, the caller's role for a local emulator's
        `X-Kiln-Role` header, as the client adds it (kiln.aws.clients.CALLER_ROLE)."""
        self._client = client
        model = client.meta.service_model
        self._models = {name: model.operation_model(name) for name in OPERATIONS}
        self._session = SignedSession(
            credentials, client.meta.region_name, model.signing_name or "dynamodb",
            client.meta.endpoint_url, connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s, pool_connections=pool_connections, verify=verify,
        )  # fmt: skip
        self._serializer = create_serializer(model.metadata["protocol"], include_validation=False)
        self._parser = create_parser(model.metadata["protocol"])
        self._retries, self._quota = _standard_retries(model.service_id.hyphenize(), attempts)
        self._errors = errors
        self._role = role

    def put_item(self, **params: Any) -> Any:
        return self._call("PutItem", params)

    def get_item(self, **params: Any) -> Any:
        return self._call("GetItem", params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        model = self._models[operation]
        request = self._serializer.serialize_to_request(params, model)
        headers = dict(request["headers"])
        role = self._role() if self._role is not None else None
        if role is not None:
            headers["X-Kiln-Role"] = role
        context: dict[str, Any] = {}  # the retry quota's note of what this call acquired
        attempt = 0
        while True:
            attempt += 1
            response: AWSResponse | None = None
            parsed: dict[str, Any] | None = None
            caught: Exception | None = None
            try:
                response = self._session.send(request["url_path"], request["body"], headers)
                parsed = self._parse(response, model)
            except (BotoConnectionError, HTTPClientError) as error:
                caught = error
            delay = self._retries.needs_retry(
                response=None if response is None else (response, parsed), attempts=attempt,
                operation=model, caught_exception=caught, request_dict={"context": context},
            )  # fmt: skip
            if delay is None or delay is False:  # botocore's "no retry"
                break
            time.sleep(delay)
        if caught is not None:
            raise self._errors(operation, caught) from caught
        assert response is not None
        assert parsed is not None
        # botocore's after-call hook: a request context dict (the stubs say a RetryContext)
        self._quota.release_retry_quota(context, response)  # type: ignore[arg-type]
        parsed.setdefault("ResponseMetadata", {})["RetryAttempts"] = attempt - 1
        if response.status_code >= 300:
            raise self._error(operation, parsed)
        return parsed

    def _error(self, operation: str, parsed: dict[str, Any]) -> Exception:
        """The client's exception for an error answer, mapped as the client's are."""
        kind = cast("type[ClientError]", self._client.exceptions.from_code(
            parsed.get("Error", {}).get("Code")
        ))  # fmt: skip
        refused = kind(parsed, operation)  # type: ignore[arg-type]
        mapped = self._errors(operation, refused)
        if mapped is not refused:
            mapped.__cause__ = refused
        return mapped

    def _parse(self, response: AWSResponse, model: OperationModel) -> dict[str, Any]:
        """As botocore's endpoint parses an answer, with an error's modeled fields."""
        answer = convert_to_response_dict(response, model)
        assert model.output_shape is not None  # PutItem's and GetItem's answers have one
        parsed: dict[str, Any] = self._parser.parse(answer, model.output_shape)
        code = parsed.get("Error", {}).get("Code") if response.status_code >= 300 else None
        shape = model.service_model.shape_for_error_code(code) if code else None
        if shape is not None:
            parsed.update(self._parser.parse(answer, shape))
        return parsed


def _standard_retries(
    service: str, attempts: int
) -> tuple[standard.RetryHandler, standard.RetryQuotaChecker]:
    """botocore's standard retry mode, made as `standard.register_retry_handler` makes it for a
    client (without a client's event hooks to hang it on)."""
    adapter = standard.RetryEventAdapter()
    throttling = standard.ThrottlingErrorDetector(adapter)
    retry_quota = standard.RetryQuotaChecker(quota.RetryQuota(), throttling)
    policy = standard.RetryPolicy(
        retry_checker=standard.StandardRetryConditions(max_attempts=attempts),
        retry_backoff=standard.ExponentialBackoff(
            service_name=service, throttling_detector=throttling
        ),
    )
    handler = standard.RetryHandler(
        retry_policy=policy, retry_event_adapter=adapter,
        retry_quota=retry_quota,  # type: ignore[arg-type]  # its checker, as botocore passes it
        service_name=service,
    )  # fmt: skip
    return handler, retry_quota
