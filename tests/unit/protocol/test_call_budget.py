"""The time bound one tree of inner calls shares (kiln.protocol.inner.CallBudget, `spent`):
waiting for the client moves the deadline on, never past the request's end; a run is not
started again once less than the runner's answer margin is left."""

from __future__ import annotations

from kiln.protocol.backend import CallContext
from kiln.protocol.inner import RUN_FLOOR_S, CallBudget, CallLimits, CallLink, spent


def test_before_the_first_inner_call_nothing_moves() -> None:
    budget = CallBudget.of(CallLimits(seconds=10), time_left_s=None)
    budget.pause(5)
    assert budget.deadline is None
    assert budget.left_s() is None


def test_waiting_moves_the_deadline_on() -> None:
    budget = CallBudget.of(CallLimits(seconds=10), time_left_s=None)
    budget.start()
    assert budget.deadline is not None
    started = budget.deadline
    budget.pause(5)
    assert budget.deadline == started + 5


def test_waiting_never_moves_it_past_the_requests_end() -> None:
    budget = CallBudget.of(CallLimits(seconds=10), time_left_s=12)
    budget.start()
    budget.pause(30)
    assert budget.deadline == budget.ends


def link_with(left_s: float) -> CallLink:
    budget = CallBudget.of(CallLimits(seconds=10), time_left_s=None)
    budget.start()
    assert budget.deadline is not None
    budget.deadline += left_s - 10
    return CallLink(chain=("outer",), budget=budget)


def test_a_run_is_not_started_again_with_no_more_than_the_floor_left() -> None:
    said = spent(CallContext(link=link_with(RUN_FLOOR_S / 2)), "middle")
    assert said is not None
    assert said.startswith("Tool 'middle' was not run again with its calls' answers: ")
    assert said.endswith("may take at most 10 s (or the time the request has left), and that "
                         "is spent (outer → middle)")  # fmt: skip
    assert spent(CallContext(link=link_with(RUN_FLOOR_S + 5)), "middle") is None
    assert spent(CallContext(), "middle") is None  # no tree: nothing to spend
