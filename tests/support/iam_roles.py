"""Every AWS call a function makes, authorized against its role as template.yaml declares it.

The emulator's call log (`kiln.local.emulator.calllog`) names, for each request, the function it
was made as: a Lambda process signs with a session token `kiln-role/<function>` (as a real
function signs with its role's session), `kiln dev`'s apps tag each request's calls with
the function that would serve its path (`kiln.aws.clients.CALLER_ROLE`). Each call becomes the IAM
request(s) AWS would authorize — action, resource ARN, and the condition keys AWS sets
(`dynamodb:LeadingKeys`, `s3:prefix`) — and `@cloud-copilot/iam-simulate`, a policy
evaluator (conditions included), decides it against that function's policies in
template.yaml with its names resolved as a `dev` stack would have them. S3 requests are
also checked against the bucket's policy. A call the role does not allow fails the test
that made it (the `iam_check` fixture).

Two AWS rules are applied on top of "is this request allowed", because the answer a caller
sees depends on them: a read of a missing S3 object is a 404 only when the role may also
list the bucket (otherwise AWS answers 403), so such a read needs `s3:ListBucket` too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SIMULATOR = ROOT / "tests" / "iam" / "simulate.mjs"
ACCOUNT = "123456789012"
REGION = "us-east-1"
STAGE = "dev"
TABLE = f"kiln-{STAGE}-catalog"
BUCKET = f"kiln-{STAGE}-{ACCOUNT}-{REGION}"
TABLE_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}"
BUCKET_ARN = f"arn:aws:s3:::{BUCKET}"
VAULT_KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/vault"  # the template's one KMS key


class IamCheckError(AssertionError):
    """The simulator could not be run, or a call was not allowed."""


# ------------------------------------------------------------------ template.yaml


class _CfnLoader(yaml.SafeLoader):
    pass


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = str(value).split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


_CfnLoader.add_multi_constructor("!", _tag)


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    return yaml.load(path.read_text("utf-8"), Loader=_CfnLoader)  # noqa: S506 (safe loader)


@dataclass
class _Names:
    """Resolves the template's intrinsics as a `dev` stack in one account would."""

    resources: dict[str, Any]
    conditions_true: frozenset[str] = frozenset({"UseSnapStart"})

    def ref(self, name: str) -> str:
        fixed = {
            "AWS::Partition": "aws",
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::URLSuffix": "amazonaws.com",
            "Stage": STAGE,
            "CatalogTable": TABLE,
            "CatalogBucket": BUCKET,
        }
        if name in fixed:
            return fixed[name]
        resource = self.resources.get(name, {})
        function_name = resource.get("Properties", {}).get("FunctionName")
        if function_name is not None:
            return str(self.resolve(function_name))
        return name

    def get_att(self, name: str, attribute: str) -> str:
        if attribute != "Arn":
            return f"{name}.{attribute}"
        if name == "CatalogTable":
            return TABLE_ARN
        if name == "CatalogBucket":
            return BUCKET_ARN
        if name == "VaultKey":
            return VAULT_KEY_ARN
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.ref(name)}"

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                return self.get_att(*arg)
            if key == "Fn::Sub":
                return re.sub(r"\$\{([^}]+)\}", lambda m: self._sub(m.group(1)), arg)
            if key == "Fn::If":
                condition, yes, no = arg
                return self.resolve(yes if condition in self.conditions_true else no)
        return {key: self.resolve(item) for key, item in value.items()}

    def _sub(self, name: str) -> str:
        if "." in name and not name.startswith("AWS::"):
            return self.get_att(*name.split(".", 1))
        return self.ref(name)


def role_policies(template: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each function's identity policies, by the function's short name (mcp, admin, ...)."""
    template = template or load_template()
    names = _Names(template["Resources"])
    roles: dict[str, list[dict[str, Any]]] = {}
    for resource in template["Resources"].values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource["Properties"]
        short = names.resolve(props["FunctionName"]).removeprefix(f"kiln-{STAGE}-")
        policies = [names.resolve(p) for p in props.get("Policies", []) if isinstance(p, dict)]
        roles[short] = policies
    return roles


def bucket_policy(template: dict[str, Any] | None = None) -> dict[str, Any] | None:
    template = template or load_template()
    for resource in template["Resources"].values():
        if resource.get("Type") == "AWS::S3::BucketPolicy":
            return _Names(template["Resources"]).resolve(resource["Properties"]["PolicyDocument"])
    return None


def vault_key_policy(template: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The connections vault key's policy: KMS decides a key's use by it too."""
    template = template or load_template()
    key = template["Resources"].get("VaultKey")
    return _Names(template["Resources"]).resolve(key["Properties"]["KeyPolicy"]) if key else None


def role_arns(template: dict[str, Any] | None = None) -> dict[str, str]:
    """Each function's role ARN, with the path its RolePath gives it (the key policy's test)."""
    template = template or load_template()
    names = _Names(template["Resources"])
    arns: dict[str, str] = {}
    for resource in template["Resources"].values():
        if resource.get("Type") == "AWS::Serverless::Function":
            props = resource["Properties"]
            short = names.resolve(props["FunctionName"]).removeprefix(f"kiln-{STAGE}-")
            path = names.resolve(props.get("RolePath", "/"))
            arns[short] = f"arn:aws:iam::{ACCOUNT}:role{path}kiln-{STAGE}-{short}"
    return arns


# ------------------------------------------------------------------ calls -> IAM requests


@dataclass(frozen=True)
class IamRequest:
    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict)
    why: str = ""  # the call it stands for, for failure messages


def _pk(key: dict[str, Any] | None) -> str | None:
    if not key or "pk" not in key:
        return None
    value = key["pk"]
    return str(next(iter(value.values()))) if isinstance(value, dict) else str(value)


def _query_pk(body: dict[str, Any]) -> str | None:
    expression = body.get("KeyConditionExpression", "")
    names = body.get("ExpressionAttributeNames", {})
    values = body.get("ExpressionAttributeValues", {})
    for left, right in re.findall(r"([#\w]+)\s*=\s*(:\w+)", expression):
        if names.get(left, left) == "pk" and right in values:
            return _pk({"pk": values[right]})
    return None


def _update_attributes(body: dict[str, Any]) -> list[str]:
    """The attribute names an UpdateItem names (key, update and condition), a superset of
    what AWS puts in `dynamodb:Attributes`: a policy that allows these allows AWS's."""
    names = body.get("ExpressionAttributeNames", {})
    found = set(body.get("Key", {}))
    for part in ("UpdateExpression", "ConditionExpression"):
        expression = re.sub(r":\w+", " ", body.get(part, ""))
        for word in re.findall(r"#?[A-Za-z_][\w]*", expression):
            if word.upper() in _EXPRESSION_WORDS:
                continue
            found.add(names.get(word, word))
    return sorted(found)


_EXPRESSION_WORDS = frozenset(
    {
        "SET",
        "REMOVE",
        "ADD",
        "DELETE",
        "AND",
        "OR",
        "NOT",
        "IN",
        "BETWEEN",
        "SIZE",
        "ATTRIBUTE_EXISTS",
        "ATTRIBUTE_NOT_EXISTS",
        "ATTRIBUTE_TYPE",
        "BEGINS_WITH",
        "CONTAINS",
        "IF_NOT_EXISTS",
        "LIST_APPEND",
    }
)


def _leading(keys: list[str | None]) -> dict[str, Any]:
    found = sorted({k for k in keys if k is not None})
    return {"dynamodb:LeadingKeys": found} if found else {}


_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _dynamodb(operation: str, body: dict[str, Any], why: str) -> list[IamRequest]:
    if operation in ("TransactWriteItems", "TransactGetItems"):
        out = []
        for item in body.get("TransactItems", []):
            ((kind, part),) = item.items()
            ctx = _leading([_pk(part.get("Key") or part.get("Item"))])
            out.append(IamRequest(f"dynamodb:{_TRANSACT[kind]}", TABLE_ARN, ctx, why))
        return out
    if operation in ("BatchGetItem", "BatchWriteItem"):
        keys: list[str | None] = []
        for entry in body.get("RequestItems", {}).values():
            if isinstance(entry, dict):  # BatchGetItem: {"Keys": [...]}
                keys += [_pk(key) for key in entry.get("Keys", [])]
            else:  # BatchWriteItem: [{"PutRequest": {"Item"}} | {"DeleteRequest": {"Key"}}]
                for request in entry:
                    ((_, part),) = request.items()
                    keys.append(_pk(part.get("Item") or part.get("Key")))
        return [IamRequest(f"dynamodb:{operation}", TABLE_ARN, _leading(keys), why)]
    if operation == "Query":
        context = _leading([_query_pk(body)])
    elif operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        context = _leading([_pk(body.get("Key") or body.get("Item"))])
        if operation == "UpdateItem":
            context["dynamodb:Attributes"] = _update_attributes(body)
    else:
        context = {}
    return [IamRequest(f"dynamodb:{operation}", TABLE_ARN, context, why)]


def _ssm(operation: str, body: dict[str, Any], why: str) -> list[IamRequest]:
    def arn(name: str) -> str:
        rest = name.strip("/").split("/", 1)[1:] or [""]
        return f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/kiln/{STAGE}/{rest[0]}".rstrip("/")

    names = body.get("Names") or [body.get("Name") or body.get("Path") or "/"]
    return [IamRequest(f"ssm:{operation}", arn(name), {}, why) for name in names]


def _s3(record: dict[str, Any], why: str) -> list[IamRequest]:
    method = record["method"]
    _, _, rest = record["path"].lstrip("/").partition("/")
    key = unquote(rest)
    query = parse_qs(record.get("query", ""), keep_blank_values=True)
    if not key:  # the bucket itself: listing (GET), HEAD, or a multi-object delete
        if method == "POST" and "delete" in query:
            return [IamRequest("s3:DeleteObject", f"{BUCKET_ARN}/*", {}, why)]
        prefix = {"s3:prefix": query["prefix"][0]} if "prefix" in query else {}
        return [IamRequest("s3:ListBucket", BUCKET_ARN, prefix, why)]
    resource = f"{BUCKET_ARN}/{key}"
    if "tagging" in query:
        action = {"GET": "GetObjectTagging", "PUT": "PutObjectTagging"}.get(method)
        action = action or "DeleteObjectTagging"
    elif method in ("GET", "HEAD"):
        action = "GetObjectVersion" if "versionId" in query else "GetObject"
    elif method == "DELETE":
        action = "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    else:  # PUT, and POST of a multipart upload's start and end
        action = "PutObject"
    requests = [IamRequest(f"s3:{action}", resource, {}, why)]
    if method in ("GET", "HEAD") and record["status"] == 404:
        # AWS answers 404 for a missing key only to a role that may list the bucket.
        requests.append(IamRequest("s3:ListBucket", BUCKET_ARN, {}, why + " (answered 404)"))
    return requests


def iam_requests(record: dict[str, Any]) -> list[IamRequest]:
    """The IAM requests AWS would authorize for one call-log record."""
    service = record["service"]
    operation = record.get("target") or ""
    body = record.get("body") or {}
    why = f"{service} {operation or record['method']} {record['path']}"
    if service == "dynamodb":
        return _dynamodb(operation, body, why)
    if service == "ssm":
        return _ssm(operation, body, why)
    if service == "s3":
        return _s3(record, why)
    if service == "kms":  # the stack has one key: the connections vault's
        return [IamRequest(f"kms:{operation}", VAULT_KEY_ARN, {}, why)]
    return [IamRequest(f"{service}:{operation}", "*", {}, why)]


# ------------------------------------------------------------------ the evaluator


class Simulator:
    """A running `simulate.mjs`: one simulation per line in, one answer per line out."""

    def __init__(self) -> None:
        node = shutil.which("node")
        modules = SIMULATOR.parent / "node_modules" / "@cloud-copilot" / "iam-simulate"
        if node is None or not modules.is_dir():
            raise IamCheckError(
                "the IAM check needs Node.js and the simulator: run "
                "`npm ci --prefix tests/iam` (tests/run does)"
            )
        self._process = subprocess.Popen(
            [node, str(SIMULATOR)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=SIMULATOR.parent,
        )
        self._lock = threading.Lock()
        self._next = 0

    def decide(
        self,
        request: IamRequest,
        policies: list[dict[str, Any]],
        resource_policy: dict[str, Any] | None,
        principal: str = f"arn:aws:iam::{ACCOUNT}:role/kiln-{STAGE}-function",
    ) -> dict[str, Any]:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        s3 = request.action.startswith("s3:")
        simulation = {
            "identityPolicies": [
                {"name": f"policy{i}", "policy": policy} for i, policy in enumerate(policies)
            ],
            "resourcePolicy": resource_policy if s3 or request.action.startswith("kms:") else None,
            "request": {
                "principal": principal,
                "action": request.action,
                "resource": {"resource": request.resource, "accountId": ACCOUNT},
                "contextVariables": {
                    **request.context,
                    "aws:SecureTransport": "true",
                    "aws:PrincipalArn": principal,  # KMS key policies name roles by it
                },
            },
        }
        if simulation["resourcePolicy"] is None:
            del simulation["resourcePolicy"]
        with self._lock:
            self._next += 1
            simulation["id"] = self._next
            self._process.stdin.write(json.dumps(simulation) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            stderr = self._process.stderr.read() if self._process.stderr else ""
            raise IamCheckError(f"the IAM simulator stopped: {stderr[-2000:]}")
        return dict(json.loads(line))

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()


@dataclass
class RoleCheck:
    """Decides call-log records against the template's roles."""

    simulator: Simulator
    roles: dict[str, list[dict[str, Any]]] = field(default_factory=role_policies)
    resource_policy: dict[str, Any] | None = field(default_factory=bucket_policy)
    key_policy: dict[str, Any] | None = field(default_factory=vault_key_policy)
    arns: dict[str, str] = field(default_factory=role_arns)

    def refusals(self, records: list[dict[str, Any]]) -> list[str]:
        """Why each call a role may not make is refused (empty: every call is allowed)."""
        found: list[str] = []
        seen: set[tuple[str, str, str, str]] = set()
        for record in records:
            role = record.get("role")
            if role is None:
                continue
            policies = self.roles.get(role)
            if policies is None:
                found.append(f"{role}: no function of that name in template.yaml")
                continue
            for request in iam_requests(record):
                context = json.dumps(request.context, sort_keys=True)
                fingerprint = (role, request.action, request.resource, context)
                if fingerprint in seen:
                    continue
                seen.add(fingerprint)
                kms = request.action.startswith("kms:")
                resource = self.key_policy if kms else self.resource_policy
                principal = self.arns.get(role, f"arn:aws:iam::{ACCOUNT}:role/{role}")
                answer = self.simulator.decide(request, policies, resource, principal)
                if answer["result"] != "Allowed":
                    detail = answer.get("errors") or ""
                    found.append(
                        f"role {role}: {answer['result']} {request.action} on "
                        f"{request.resource} {request.context or ''} — for {request.why} "
                        f"{detail}".rstrip()
                    )
        return found


def read_new(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete call-log lines written after `offset`, and the offset after them."""
    if not path.exists():
        return [], offset
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    complete = data[: data.rfind(b"\n") + 1]
    records = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return records, offset + len(complete)


# ------------------------------------------------------------------ the pytest plugin

_state: dict[str, Any] = {}


def call_log_path(state_dir: Path) -> Path:
    """Where the tests' emulator logs its calls (conftest's `moto_endpoint` sets it)."""
    path = state_dir / "calls.jsonl"
    _state["log"] = path
    return path


def call_log() -> Path:
    """The tests' emulator's call log (once `moto_endpoint` has started it)."""
    path: Path = _state["log"]
    return path


def _check() -> RoleCheck:
    if "check" not in _state:
        _state["check"] = RoleCheck(Simulator())
    return _state["check"]  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def iam_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test whose functions made an AWS call their template.yaml role does not allow."""
    if "moto_endpoint" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("moto_endpoint")
    path = call_log()
    start = path.stat().st_size if path.exists() else 0
    yield
    records, _ = read_new(path, start)
    refusals = _check().refusals(records)
    if refusals:
        pytest.fail(
            "AWS would refuse these calls (template.yaml's roles, evaluated by "
            "@cloud-copilot/iam-simulate):\n  " + "\n  ".join(refusals),
            pytrace=False,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    check = _state.pop("check", None)
    if check is not None:
        check.simulator.close()
