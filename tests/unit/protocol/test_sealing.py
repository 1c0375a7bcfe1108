"""Sealed requestState (protocol/sealing.py): opens only for its own call, reads as nothing."""

from __future__ import annotations

import base64

import pytest

from kiln.protocol.sealing import Binding, StateRefusedError, StateSealer

CALL = Binding("pick_account", "t1@3", "caller-a", {"amount": 5})


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_state_opens_for_its_own_call_with_what_was_sealed() -> None:
    sealer = StateSealer(b"s" * 32)
    token = sealer.seal(CALL, {"a": {"account": {"action": "accept"}}, "q": {"account": "x"}})
    assert sealer.open(token, CALL)["a"] == {"account": {"action": "accept"}}


def test_nothing_sealed_is_readable_from_the_token() -> None:
    token = StateSealer(b"s" * 32).seal(CALL, {"a": {"secret-key": "hunter2"}})
    raw = base64.urlsafe_b64decode(token[3:] + "=" * (-len(token[3:]) % 4))
    for visible in (b"hunter2", b"secret-key", b"pick_account", b"caller-a"):
        assert visible not in raw


@pytest.mark.parametrize(
    "other",
    [
        Binding("other_tool", "t1@3", "caller-a", {"amount": 5}),
        Binding("pick_account", "t1@4", "caller-a", {"amount": 5}),
        Binding("pick_account", "t1@3", "caller-b", {"amount": 5}),
        Binding("pick_account", "t1@3", "caller-a", {"amount": 6}),
    ],
)
def test_a_state_is_refused_for_another_tool_revision_caller_or_arguments(other: Binding) -> None:
    sealer = StateSealer(b"s" * 32)
    with pytest.raises(StateRefusedError):
        sealer.open(sealer.seal(CALL, {}), other)


def test_a_state_is_refused_once_expired_and_by_another_secret() -> None:
    clock = Clock()
    sealer = StateSealer(b"s" * 32, ttl_s=60, clock=clock)
    token = sealer.seal(CALL, {})
    clock.now += 59
    assert sealer.open(token, CALL) == {}
    clock.now += 2
    with pytest.raises(StateRefusedError):
        sealer.open(token, CALL)
    with pytest.raises(StateRefusedError):
        StateSealer(b"t" * 32).open(StateSealer(b"s" * 32).seal(CALL, {}), CALL)


@pytest.mark.parametrize("token", ["", "k1.", "k1.!!!!", "k2.AAAA", 7, None, "k1." + "A" * 40])
def test_malformed_tokens_are_refused_not_crashed_on(token: object) -> None:
    with pytest.raises(StateRefusedError):
        StateSealer(b"s" * 32).open(token, CALL)


def test_another_spelling_of_the_same_bytes_is_refused() -> None:
    sealer = StateSealer(b"s" * 32)
    token = sealer.seal(CALL, {})
    with pytest.raises(StateRefusedError):
        sealer.open(token + "==", CALL)
    with pytest.raises(StateRefusedError):
        sealer.open(token[:10] + "\n" + token[10:], CALL)
