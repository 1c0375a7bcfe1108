"""Per-tool secrets in SSM Parameter Store, as SecureString parameters `<prefix>/<tool_id>/<NAME>`.

Parameter Store rather than Secrets Manager: standard parameters cost nothing (Secrets Manager
bills per secret per month, and a catalog may hold hundreds), one GetParametersByPath call
fetches every secret of a tool at once, and the path hierarchy lets IAM grant a function
exactly `<prefix>/*` and nothing else. SecureString values are encrypted with KMS.

Values leave this module only as a dict handed to the runner's `extra_env`; no API returns
them and nothing here logs them (names are fine to log, values never).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.catalog.secret_names import secret_name_problem
from kiln.errors import KilnError, NotFound

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

CACHE_TTL_S = 30.0  # a changed secret reaches running containers within this
MAX_VALUE_CHARS = 4096  # the standard-tier limit

_TOOL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class SecretError(KilnError):
    """Base for secret problems a caller can act on: 400 `bad_request` by default."""


class InvalidSecretError(
    SecretError, status=422, rest_code="invalid_secret"
):  # messages never carry the value
    pass


class SecretNotFoundError(SecretError, NotFound):
    pass


class MissingSecretsError(SecretError, LookupError):
    def __init__(self, tool_id: str, names: Iterable[str]) -> None:
        self.names = tuple(sorted(names))
        listed = ", ".join(self.names)
        super().__init__(
            f"the tool declares secrets that are not set: {listed} "
            f"(set each with `kiln secrets set TOOL NAME`)"
        )
        self.tool_id = tool_id


def check_secret_name(name: object) -> str:
    """The name if it is a valid secret name, else InvalidSecretError saying which rule."""
    problem = secret_name_problem(name)
    if problem is not None:
        raise InvalidSecretError(problem)
    assert isinstance(name, str)
    return name


class SecretStore:
    def __init__(
        self,
        ssm: SSMClient,
        prefix: str = "/kiln",
        *,
        cache_ttl_s: float = CACHE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ssm = ssm
        self._prefix = prefix.rstrip("/")
        self._ttl = cache_ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def set(self, tool_id: str, name: str, value: str) -> None:
        check_secret_name(name)
        if not isinstance(value, str) or not value:
            raise InvalidSecretError("secret value must be a non-empty string")
        if len(value) > MAX_VALUE_CHARS:
            raise InvalidSecretError(f"secret value must be at most {MAX_VALUE_CHARS} characters")
        if "\x00" in value:
            raise InvalidSecretError("secret value must not contain a NUL character")
        self._ssm.put_parameter(
            Name=self._path(tool_id, name), Value=value, Type="SecureString", Overwrite=True
        )
        self._forget(tool_id)

    def names(self, tool_id: str) -> list[str]:
        """The names of the tool's secrets, sorted; values are not even decrypted."""
        return sorted(self._fetch(tool_id, decrypt=False))

    def values(self, tool_id: str, names: Iterable[str]) -> dict[str, str]:
        """The named secrets' values, for the runner; MissingSecretsError names any not set."""
        wanted = set(names)
        if not wanted:
            return {}
        tick = self._clock()
        with self._lock:
            cached = self._cache.get(tool_id)
        if cached is None or cached[0] <= tick or not wanted <= cached[1].keys():
            found = self._fetch(tool_id, decrypt=True)
            cached = (tick + self._ttl, found)
            with self._lock:
                self._cache[tool_id] = cached
        missing = wanted - cached[1].keys()
        if missing:
            raise MissingSecretsError(tool_id, missing)
        return {name: cached[1][name] for name in sorted(wanted)}

    def values_for(self, tool: Any) -> Mapping[str, str]:
        """A catalog tool's declared secrets for one run (the call path's SecretValues)."""
        return secret_env(self, tool.id, tuple(getattr(tool.head, "secrets", ()) or ()))

    def delete(self, tool_id: str, name: str) -> None:
        check_secret_name(name)
        try:
            self._ssm.delete_parameter(Name=self._path(tool_id, name))
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ParameterNotFound":
                raise SecretNotFoundError(f"the tool has no secret named {name}") from None
            raise
        finally:
            self._forget(tool_id)

    def delete_all(self, tool_id: str) -> None:
        """Remove every secret of a tool (when the tool itself is deleted)."""
        for name in self.names(tool_id):
            self.delete(tool_id, name)

    def _fetch(self, tool_id: str, *, decrypt: bool) -> dict[str, str]:
        folder = self._folder(tool_id)
        found: dict[str, str] = {}
        paginator = self._ssm.get_paginator("get_parameters_by_path")
        for page in paginator.paginate(Path=folder, Recursive=False, WithDecryption=decrypt):
            for parameter in page.get("Parameters", []):
                name = parameter["Name"].rsplit("/", 1)[-1]
                found[name] = parameter["Value"] if decrypt else ""
        return found

    def _forget(self, tool_id: str) -> None:
        with self._lock:
            self._cache.pop(tool_id, None)

    def _folder(self, tool_id: str) -> str:
        if not isinstance(tool_id, str) or not _TOOL_ID.fullmatch(tool_id):
            raise InvalidSecretError(
                "tool id must be 1-128 characters from A-Z a-z 0-9 . _ -, starting with a letter "
                "or digit"
            )
        return f"{self._prefix}/{tool_id}"

    def _path(self, tool_id: str, name: str) -> str:
        return f"{self._folder(tool_id)}/{name}"


def secret_env(store: SecretStore | None, tool_id: str, names: Iterable[str]) -> Mapping[str, str]:
    """What to put in `RunRequest.extra_env` for one run of this tool."""
    names = list(names)
    if not names:
        return {}
    if store is None:
        raise MissingSecretsError(tool_id, names)
    return store.values(tool_id, names)
