"""One call's account (kiln.accounting.account): admitted, charged, closed once with its entry."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kiln.access.quotas import Quota, QuotaExceededError
from kiln.accounting.account import AccountClosedError, CallAccount, CallBook, Caller
from kiln.accounting.gate import CallGate
from kiln.catalog.model import Revision, Tool

KEY = ("key:ci", Quota(calls_per_minute=5))
VIEW = ("view:team", Quota(run_seconds_per_day=60.0))


def tool() -> Tool:
    head = Revision(
        tool_id="t1", number=3, description="", language="python", code_key="k",
        code_sha256="", requirements=(), input_schema={"type": "object"}, output_schema=None,
        title=None, annotations=None, timeout_seconds=5.0, bundle_id="b1", created_at="",
    )  # fmt: skip
    return Tool(id="t1", name="echo", enabled=True, head=head, created_at="", updated_at="")


def account() -> CallAccount:
    return CallAccount(Caller("key:ci", "team", (KEY, VIEW)), tool(), started=100.0)


def test_an_account_is_admitted_then_charged_quota_by_quota_then_closed_with_its_entry() -> None:
    call = account()
    assert (call.state, call.claimed, call.unclaimed()) == ("admitted", (), (KEY, VIEW))
    call.charge((KEY,))
    assert (call.state, call.unclaimed()) == ("charged", (VIEW,))
    call.charge(call.unclaimed())
    assert (call.claimed, call.unclaimed()) == ((KEY, VIEW), ())
    entry = call.close("ok", digest="d1", run_seconds=0.25, output_bytes=7, detail="approved")
    assert call.state == "closed", call
    assert call.entry is entry
    assert (entry.caller, entry.tool, entry.revision, entry.view, entry.bundle) == (
        "key:ci", "echo", 3, "team", "b1",
    ), entry  # fmt: skip
    assert (entry.outcome, entry.args_digest, entry.duration_ms, entry.output_bytes) == (
        "ok", "d1", 250.0, 7,
    ), entry  # fmt: skip
    assert entry.detail == "approved"


def test_closing_an_account_twice_is_an_error_that_names_the_call_and_keeps_the_first_entry() -> (
    None
):
    call = account()
    first = call.close("tool_error")
    with pytest.raises(AccountClosedError, match=r"'echo' \(key:ci\) is closed already"):
        call.close("ok")
    with pytest.raises(AccountClosedError):
        call.charge((KEY,))  # nothing is charged to a closed call
    assert call.entry is first
    assert first.outcome == "tool_error"


def test_a_refused_calls_account_is_closed_at_once_with_which_quota_and_no_digest() -> None:
    call = account()
    call.charge((KEY,))  # the key admitted it; the view's quota refuses it
    refusal = QuotaExceededError(
        subject="view:team", quota="run_seconds_per_day", limit=60, retry_after_s=9,
        resets_at="2026-12-05T00:00:00Z",
    )  # fmt: skip
    entry = call.refuse(refusal)
    assert call.state == "closed"
    assert call.refusal is refusal
    assert (entry.outcome, entry.detail, entry.args_digest) == (
        "refused", "run_seconds_per_day of the view", "",
    ), entry  # fmt: skip
    assert call.claimed == (KEY,), "what it claimed stays said, for the caller to give back"
    with pytest.raises(AccountClosedError):
        call.close("ok")


def test_the_gate_closes_an_account_once_even_without_a_ledger() -> None:
    gate = CallGate(quotas=None, ledger=None)
    call = account()
    gate.finish(call, "ok", digest="", started=100.0, run_seconds=0.0, output_bytes=0)
    assert call.entry is not None
    assert call.entry.outcome == "ok"
    with pytest.raises(AccountClosedError):
        gate.finish(call, "ok", digest="", started=100.0, run_seconds=0.0, output_bytes=0)


def test_a_books_work_starts_at_once_and_close_waits_for_all_of_it_past_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = threading.Event()
    release = threading.Event()
    done: list[str] = []

    def slow() -> None:
        started.set()
        assert release.wait(30), "the test never released the slow piece"
        done.append("slow")

    def broken() -> None:
        raise RuntimeError("the store said no")

    async def request() -> None:
        book = CallBook()
        book.keep(slow)
        book.keep(broken)
        book.keep(lambda: done.append("quick"))
        # Started at once, before the edge closes the book: not held until the answer.
        assert await asyncio.to_thread(started.wait, 30), "kept work did not start at once"
        release.set()
        await book.close()
        await book.close()  # closed: nothing is run twice

    asyncio.run(request())
    assert sorted(done) == ["quick", "slow"], done
    assert "call bookkeeping failed" in caplog.text, caplog.text
    assert "broken" in caplog.text, "the log names the work that failed"
