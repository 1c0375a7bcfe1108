"""kiln dev's idle connections, oldest first, overall and per client (kiln.local.connections)."""

from __future__ import annotations

from kiln.local.connections import IdleConnections


def test_the_oldest_idle_connection_of_the_arriving_client_goes_first_then_anyones() -> None:
    idle = IdleConnections()
    for conn, client in (("a1", "a"), ("b1", "b"), ("a2", "a"), ("b2", "b")):
        idle.add(conn, client)
    assert idle.oldest("b", but="b2") == "b1"
    assert idle.oldest("c", but="c1") == "a1"  # a client with none idle: the oldest of anyone's
    idle.add("a1", "a")  # a kept-alive connection that answered a request is young again
    assert idle.oldest("a", but=None) == "a2"
    assert idle.oldest("x", but=None) == "b1"


def test_a_connection_no_longer_idle_is_never_picked_and_nothing_is_left_behind() -> None:
    idle = IdleConnections()
    idle.add("a1", "a")
    idle.add("b1", "b")
    idle.discard("a1", "a")
    idle.discard("a1", "a")  # twice is harmless (closed after its request began)
    assert idle.oldest("a", but=None) == "b1"
    assert idle.oldest("b", but="b1") is None
    idle.discard("b1", "b")
    assert (dict(idle.everyone), idle.by_client) == ({}, {})
