"""Who must approve a waiting call, who may, and the rules of `approvers` (kiln.access.waiting)."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.access.views import ViewRuleError, check_view
from kiln.access.waiting import refusal, waiting_for
from kiln.identity.policy import Principal
from kiln.settings import Settings, SettingsError

AUTHOR = frozenset({"author", "call"})


def view(**fields: Any) -> Any:
    return check_view({"name": "ops", "tools": ["wipe"], **fields})


def problems(**fields: Any) -> list[tuple[str, str]]:
    with pytest.raises(ViewRuleError) as refused:
        view(**fields)
    return list(refused.value.problems)


def test_a_view_keeps_its_approvers_beside_confirm_and_writes_them_back() -> None:
    ops = view(confirm="destructive", approvers=["alice", "oauth:u-42"])
    assert ops.approvers == ("alice", "oauth:u-42")
    assert ops.definition()["approvers"] == ["alice", "oauth:u-42"]
    assert "approvers" not in view().definition()


@pytest.mark.parametrize(
    ("approvers", "field", "said"),
    [
        ("alice", "approvers", "must be a list of 1 to 20 approvers"),
        (["Alice"], "approvers[0]", "an author key's name (lowercase"),
        (["alice", 7], "approvers[1]", "or an OAuth subject as oauth:<sub>"),
        (["oauth:"], "approvers[0]", "oauth:<sub>"),
        (["alice", "alice"], "approvers", "names one approver twice"),
        ([f"k{i}" for i in range(21)], "approvers", "1 to 20"),
    ],
)
def test_bad_approvers_are_refused_naming_the_field_and_the_rule(
    approvers: object, field: str, said: str
) -> None:
    found = problems(confirm="writes", approvers=approvers)
    assert [name for name, _ in found] == [field]
    assert said in found[0][1]


def test_approvers_without_confirm_are_refused_saying_confirm_is_needed() -> None:
    assert problems(approvers=["alice"]) == [
        ("approvers", 'needs "confirm" beside it ("destructive" or "writes"): approvers '
         "approve the calls that confirm covers"),
    ]  # fmt: skip


def test_a_call_waits_for_the_approvers_whose_confirm_covers_the_tool() -> None:
    ops = view(confirm="destructive", approvers=["alice"])
    assert waiting_for(ops, None, {"destructiveHint": True}) == ("alice",)
    assert waiting_for(ops, None, {"destructiveHint": False}) == ()
    assert waiting_for(ops, None, {"readOnlyHint": True}) == ()
    assert waiting_for(view(confirm="destructive"), None, None) == ()  # elicitation, as before


def test_only_a_listed_author_other_than_the_caller_may_decide() -> None:
    listed = ("alice", "oauth:u-42", "erin")
    alice = Principal("key", "alice", AUTHOR)
    assert refusal(listed, "key:dave", alice) is None
    assert refusal(listed, "key:dave", Principal("jwt", "u-42", frozenset({"call"}))) is None
    assert "not one of them" in str(refusal(listed, "key:dave", Principal("key", "carol", AUTHOR)))
    assert "their own call" in str(refusal(listed, "key:alice", alice))
    erin = Principal("key", "erin", frozenset({"call"}))
    assert "not an author key" in str(refusal(listed, "key:dave", erin))


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"KILN_APPROVAL_WEBHOOK_URL": "https://h/x"}, "needs its secret"),
        ({"KILN_APPROVAL_WEBHOOK_URL": "https://h/x", "KILN_APPROVAL_WEBHOOK_SECRET": "s"},
         "must be whsec_ followed by the base64 of 24 to 64 random bytes"),
        ({"KILN_APPROVAL_WEBHOOK_URL": "ftp://h/x"}, "KILN_APPROVAL_WEBHOOK_URL: must be an http"),
        ({"KILN_APPROVAL_EXPIRY_S": "0"}, "KILN_APPROVAL_EXPIRY_S: must be a positive number"),
    ],
)  # fmt: skip
def test_approval_settings_are_refused_at_start_with_the_variable_and_the_rule(
    env: dict[str, str], said: str
) -> None:
    with pytest.raises(SettingsError, match="KILN_APPROVAL") as refused:
        Settings.from_env(env)
    assert said in str(refused.value)
