"""Who owns a task: a key's or token's subject, or an anonymous caller by its address."""

from __future__ import annotations

from types import SimpleNamespace

from kiln.protocol.backend import Arrival, CallContext
from kiln.tasks.service import principal_label


def context(principal: object = None, address: str | None = None) -> CallContext:
    arrival = Arrival(client_address=address)
    return CallContext(time_left_s=30.0, principal=principal, arrival=arrival)


def test_anonymous_callers_from_two_addresses_own_their_tasks_apart() -> None:
    one = principal_label(context(address="203.0.113.7"))
    other = principal_label(context(address="198.51.100.9"))
    assert one != other
    assert one == principal_label(context(address="203.0.113.7"))


def test_a_keyed_caller_owns_its_tasks_wherever_it_calls_from() -> None:
    key = SimpleNamespace(label="key:ci")
    assert principal_label(context(key, "203.0.113.7")) == "key:ci"
    assert principal_label(context(key, "198.51.100.9")) == "key:ci"


def test_an_anonymous_caller_without_an_address_is_plain_anonymous() -> None:
    assert principal_label(context()) == "anonymous"
