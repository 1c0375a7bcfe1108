"""Approvals by policy: a view or a key can require the user's confirmation before a tool runs.

`"confirm": "destructive"` asks before tools whose annotations do not say
`destructiveHint: false` (MCP's default for a tool that is not read-only is destructive);
`"confirm": "writes"` asks before every tool not marked `readOnlyHint: true`. Kiln itself asks,
with an elicitation under its own key `kiln/approval` (a script can never ask or answer it:
keys starting with `kiln/` are refused on the talk channel, and an answer to it is taken only
from a sealed requestState, never sent up front). The call runs only on `accept` with
`approve: true`; `decline`, `cancel` or `approve: false` end it unrun, and a client that
cannot be asked (no elicitation capability, or a 2025 request on Lambda) gets a refusal
saying so. Every outcome is in the ledger: the call's entry says who approved and when, or
what was declined.

A key's own `confirm` (`kiln keys bind --confirm`, `PUT /api/keys/{name}/binding`) applies to
every call made with it, whatever view it reaches; with a view's too, the stricter one holds
("writes" asks before more tools than "destructive"). A task-augmented call is asked the same
question through its task: the task waits in `input_required` for it (`tasks/update`).

An approval is single-use. It travels in a sealed requestState (MCP 2026-07-28), which a
client could send again as it is; so before the run it allows, the state is spent in the
store (`SpentApprovals`: a conditional put of `APPROVAL#<state id>`, kept a day by the table's
TTL, longer than any state lives). A state sent again finds its item: the tool is not run,
the ledger says `approval already used`, and the caller is asked afresh. The item is in the
store, not in memory, because the next request may reach another process (each Lambda
container is one). On the 2025 wires an approval is answered inside its own request (held
open by `kiln dev`; refused on Lambda), so there is nothing to send twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

Confirm = Literal["destructive", "writes"]
CONFIRM_VALUES: tuple[str, ...] = ("destructive", "writes")
APPROVAL_KEY = "kiln/approval"
MAX_SHOWN_CHARS = 200
SPENT_KEEP_S = 24 * 3600  # a spent approval's item; a requestState lives 15 minutes
USED_AGAIN = "approval already used"  # the ledger's detail of a state sent again


@dataclass(frozen=True)
class Requirement:
    """Who asks for approvals of a call's tools, and how strictly (`source`: "view 'ops'",
    "key 'ci'", as the refusal names it)."""

    policy: str
    source: str

    def as_json(self) -> dict[str, str]:
        return {"policy": self.policy, "source": self.source}

    @classmethod
    def from_json(cls, value: Any) -> Requirement | None:
        if not isinstance(value, Mapping) or value.get("policy") not in CONFIRM_VALUES:
            return None
        return cls(str(value["policy"]), str(value.get("source", "")))


def requirement(view: Any, principal: Any) -> Requirement | None:
    """The stricter of a view's and a key's `confirm` (None: no approvals asked)."""
    found = []
    view_policy = getattr(view, "confirm", None)
    if view_policy in CONFIRM_VALUES:
        found.append(Requirement(view_policy, f"view {view.name!r}"))
    key_policy = getattr(principal, "confirm", None)
    if key_policy in CONFIRM_VALUES:
        found.append(Requirement(key_policy, f"key {principal.name!r}"))
    if not found:
        return None
    return max(found, key=lambda r: CONFIRM_VALUES.index(r.policy))


def needs_approval(policy: str | None, annotations: Mapping[str, Any] | None) -> bool:
    """Whether a tool with these annotations must be approved under `policy`."""
    if policy is None:
        return False
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return False
    if policy == "writes":
        return True
    return hints.get("destructiveHint", True) is not False


def approval_question(
    name: str, arguments: Mapping[str, Any], schema: Mapping[str, Any], annotations: Any
) -> dict[str, Any]:
    """The elicitation/create params that ask the user to approve this call."""
    hints = dict(annotations or {})
    said = []
    if hints.get("readOnlyHint") is not True:
        said.append("it may change things (not marked read-only)")
    if hints.get("destructiveHint", True) is not False:
        said.append("it may destroy or overwrite data (destructive)")
    if hints.get("idempotentHint") is True:
        said.append("calling it twice has no further effect (idempotent)")
    if hints.get("openWorldHint", True) is not False:
        said.append("it may reach outside systems (open world)")
    lines = [f"Allow the tool '{hints.get('title') or name}' ({name}) to run?"]
    lines.append("What its annotations say: " + "; ".join(said) + ".")
    lines.append("Arguments:" if arguments else "Arguments: none.")
    found = schema.get("properties")
    properties: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    for key, value in arguments.items():
        entry = properties.get(key)
        field: Mapping[str, Any] = entry if isinstance(entry, Mapping) else {}
        label = field.get("title") or key
        about = f" ({field['description']})" if isinstance(field.get("description"), str) else ""
        shown = json.dumps(value, ensure_ascii=False)
        if len(shown) > MAX_SHOWN_CHARS:
            shown = shown[:MAX_SHOWN_CHARS] + "…"
        lines.append(f"- {label}{about}: {shown}")
    form = {
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": f"Run {name}", "default": False},
        },
        "required": ["approve"],
    }
    return {"message": "\n".join(lines), "requestedSchema": form}


def verdict(answer: Any) -> Literal["approved", "declined", "cancelled"]:
    """What the user said: approved only on accept with approve: true."""
    if not isinstance(answer, Mapping):
        return "declined"
    action = answer.get("action")
    if action == "cancel":
        return "cancelled"
    content = answer.get("content")
    if action == "accept" and isinstance(content, Mapping) and content.get("approve") is True:
        return "approved"
    return "declined"


class SpentApprovals:
    """Approvals already used, by the id of the requestState that carried them (a DynamoDB
    item each). Blocking: use from a thread."""

    def __init__(
        self, dynamodb: DynamoDBClient, *, table: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._ddb = dynamodb
        self._table = table
        self._clock = clock

    def spend(self, state_id: str) -> bool:
        """Mark the approval in this state used: True the first time, False ever after."""
        now = self._clock()
        item = {
            "pk": {"S": f"APPROVAL#{state_id}"},
            "sk": {"S": "SPENT"},
            "spent_at": {"S": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))},
            "expires_at": {"N": str(int(now + SPENT_KEEP_S))},
        }
        try:
            self._ddb.put_item(
                TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True
