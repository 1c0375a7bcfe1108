"""kiln dev's idle connections, oldest first, overall and per client (kiln.local.connections)."""

from __future__ import annotations

from kiln.local.connections import PASS_OVER_AT_MOST, IdleConnections


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


def test_a_connection_with_its_request_waiting_is_passed_over_but_only_so_many() -> None:
    idle = IdleConnections()
    for n in range(PASS_OVER_AT_MOST + 2):
        idle.add(f"c{n}", "a")
    assert idle.oldest("a", but=None, waiting=lambda conn: conn == "c0") == "c1"
    # A flood whose every connection has sent a byte costs a bounded scan per eviction.
    assert idle.oldest("a", but=None, waiting=lambda conn: True) == f"c{PASS_OVER_AT_MOST}"
