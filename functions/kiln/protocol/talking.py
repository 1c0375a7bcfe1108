"""A tool call that talks back: progress and logs while it runs, questions to the client.

The script side is in `kiln/runner/talk.py`; here is the MCP side of one `tools/call`:

- **Progress** becomes `notifications/progress` when the request carried
  `_meta.progressToken`; **logs** become `notifications/message` (on 2026-07-28 only when the
  request set `_meta["io.modelcontextprotocol/logLevel"]`, and at or above it). Both go out
  on the POST's own answer as Server-Sent Events, when the client accepts
  `text/event-stream` (`emit` is set); otherwise they are dropped.
- **Questions** end the run. On 2026-07-28 the call answers `input_required` with the
  questions as `inputRequests` and a sealed `requestState` (sealing.py) holding the answers
  so far; the client's next call brings `inputResponses` and the state back, and the tool
  runs again with every answer so far. On 2025 wires there is no such result: where the
  server can hold the request open (kiln dev, kiln stdio) the questions go to the client as
  JSON-RPC requests on the open stream and their responses come back as POSTs or stdin lines
  (`Holder`); where it cannot (Lambda), the call gets a tool error naming the revision that works.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kiln.protocol import urlmode
from kiln.protocol.backend import CallContext, Conversation, Question, ToolOutcome
from kiln.protocol.errors import InvalidParamsError, MissingCapabilityError, RequestId
from kiln.protocol.inner import CALL_METHOD, InnerCalls, spent, time_left
from kiln.protocol.sealing import Binding, StateRefusedError, StateSealer, StateTooLargeError
from kiln.protocol.spec import CLIENT_CAPABILITIES_META_KEY
from kiln.protocol.streaming import ClientAnswerError

LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
CAPABILITY = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
MAX_HELD_ROUNDS = 20
MAX_CALL_ROUNDS = 64  # rounds whose asks were all calls (their count is bounded apart)
REFUSED = (
    "Invalid params: requestState was not issued by this server for this call (this tool, "
    "revision, caller and arguments), or it has expired; call the tool again without it"
)
Emit = Callable[[dict[str, Any]], None]
Call = Callable[[CallContext], Awaitable[ToolOutcome]]


class Holder(Protocol):
    """Asks a 2025-wire client over the request's open stream and waits for its answers."""

    async def ask(self, questions: tuple[Question, ...]) -> dict[str, Any]: ...


@dataclass
class Turn:
    """What one tools/call request says about the conversation, and how to answer it."""

    sealer: StateSealer
    modern: bool
    responses: Mapping[str, Any] = field(default_factory=dict)
    state: str | None = None
    can_ask: tuple[str, ...] = ()
    progress_token: Any = None
    log_level: str | None = None  # the lowest level sent; None: no log notifications
    emit: Emit | None = None
    holder: Holder | None = None
    can_task: bool = False  # a tool that asks first may say it goes on as a task
    inner: InnerCalls | None = None  # makes the calls a run asks for (None: it cannot)
    # An inner call's turn: the answers its outer call handed down (None: a call of its own),
    # and the id its approvals are spent under.
    given: Mapping[str, Any] | None = None
    given_state: str | None = None
    calls_made: int = 0  # inner calls made in this call's earlier requests (its state's "c")
    url_mode: bool = False  # the request's client takes URL elicitations (urlmode.py)

    def hear(self, kind: str, fields: Mapping[str, Any]) -> None:
        """A progress or log line of the running script, as a notification if wanted."""
        if self.emit is None:
            return
        if kind == "progress" and self.progress_token is not None:
            params = {"progressToken": self.progress_token, "progress": fields["progress"]}
            params.update({k: fields[k] for k in ("total", "message") if fields.get(k) is not None})
            self.emit({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        elif kind == "log" and self.log_level is not None:
            if LOG_LEVELS.index(fields["level"]) < LOG_LEVELS.index(self.log_level):
                return
            params = {"level": fields["level"], "data": fields["data"]}
            if fields.get("logger"):
                params["logger"] = fields["logger"]
            self.emit({"jsonrpc": "2.0", "method": "notifications/message", "params": params})

    async def converse(
        self, call: Call, tool: Any, arguments: Mapping[str, Any], ctx: CallContext, rid: RequestId
    ) -> ToolOutcome | dict[str, Any] | GoingOn:
        """Run the tool until it answers, or until it asks what this request cannot answer
        here: then the `input_required` result (2026-07-28) or a tool error (2025); with
        `can_task`, until it says it goes on as a task (GoingOn, with the answers so far).
        Calls of other tools it asks for are made here (inner.py), and it runs again."""
        binding = Binding(tool.name, tool.revision, caller_of(ctx), arguments)
        answers, round_ = self._opened(binding, rid)
        answers, pages = urlmode.split_answers(answers)  # the client's answers to pages it was sent
        held = 0
        for _ in range(MAX_HELD_ROUNDS + MAX_CALL_ROUNDS):
            outcome = await call(self._round(ctx, tool, answers))
            if outcome.elicit is not None:
                return self._page(tool.name, binding, answers, pages, outcome, round_, rid)
            if outcome.escalate and self.can_task:
                return GoingOn(answers)
            if not outcome.questions:
                return outcome
            made = await self._calls(tool, outcome.questions, answers, ctx, rid)
            if isinstance(made, ToolOutcome):
                return made
            answers, questions = made
            if not questions:  # each ask was a call, now answered: run again with the answers
                stop = spent(ctx, tool.name)
                if stop is not None:
                    return _error_outcome(stop)
                continue
            held += 1
            if held > MAX_HELD_ROUNDS:
                break
            asked = await self._asked(ctx, tool, binding, answers, questions, round_, rid)
            if not isinstance(asked, _Answers):
                return asked
            answers = asked.answers
        return _error_outcome(
            f"Tool '{tool.name}' asked more than {MAX_HELD_ROUNDS} rounds of questions, or "
            f"{MAX_CALL_ROUNDS} rounds of calls, in one call"
        )

    async def _asked(
        self,
        ctx: CallContext,
        tool: Any,
        binding: Binding,
        answers: dict[str, Any],
        questions: tuple[Question, ...],
        round_: int,
        rid: RequestId,
    ) -> ToolOutcome | dict[str, Any] | _Answers:
        """`_ask`, with the call tree's bounds carried over the client's round: the calls
        made so far go into a 2026-07-28 state (the next request's tree goes on counting
        from them), and waiting for a held answer is not the calls' time."""
        if ctx.link is None:
            return await self._ask(tool, binding, answers, questions, round_, rid)
        self.calls_made = ctx.link.budget.used
        began = time.monotonic()
        asked = await self._ask(tool, binding, answers, questions, round_, rid)
        ctx.link.budget.pause(time.monotonic() - began)
        return asked

    def _page(
        self,
        name: str,
        binding: Binding,
        answers: dict[str, Any],
        pages: dict[str, Any],
        outcome: ToolOutcome,
        round_: int,
        rid: RequestId,
    ) -> ToolOutcome | dict[str, Any]:
        """A call that needs the person to open a page first (urlmode.py): an input request
        (2026-07-28), -32042 (2025-11-25), or the tool error with the link."""
        need = outcome.elicit
        assert need is not None
        if not self.url_mode or self.given is not None:
            return outcome
        said = urlmode.refused(name, need, pages)
        if said is not None:
            return said
        if not self.modern:
            raise urlmode.required_error(need, rid)
        return self._input_required(binding, answers, (urlmode.question(need),), round_ + 1)

    def _round(self, ctx: CallContext, tool: Any, answers: dict[str, Any]) -> CallContext:
        """The context of one run: what it is told of the conversation, and its time."""
        if ctx.link is not None and self.calls_made > ctx.link.budget.used:
            ctx.link.budget.used = self.calls_made  # made in the state's earlier requests
        hear = self.hear if self.emit is not None else None
        talk = Conversation(
            answers, self.can_ask, hear, can_task=self.can_task, state_id=self.state_id(),
            calls=tool.calls,
        )  # fmt: skip
        return replace(ctx, conversation=talk, time_left_s=time_left(ctx))

    async def _calls(
        self,
        tool: Any,
        questions: tuple[Question, ...],
        answers: dict[str, Any],
        ctx: CallContext,
        rid: RequestId,
    ) -> tuple[dict[str, Any], tuple[Question, ...]] | ToolOutcome:
        """A round's calls made (their results added to the answers) and what is left to
        ask the client: the round's questions and the ones its inner calls ask."""
        calls = [q for q in questions if q.method == CALL_METHOD]
        if not calls:
            return answers, questions
        if self.inner is None:
            return _error_outcome(
                f"Tool '{tool.name}' calls other tools, and this kind of run cannot make calls "
                "(a task's run, an author's test run over REST); call it with tools/call"
            )
        got, asked = await self.inner.answer(self, tool, calls, answers, ctx, rid)
        left = tuple(q for q in questions if q.method != CALL_METHOD)
        return {**answers, **got}, (*left, *asked)

    async def _ask(
        self,
        tool: Any,
        binding: Binding,
        answers: dict[str, Any],
        questions: tuple[Question, ...],
        round_: int,
        rid: RequestId,
    ) -> ToolOutcome | dict[str, Any] | _Answers:
        """Questions for the client: handed up (an inner call's), answered as input_required
        (2026-07-28), or asked over the held request (2025) and answered."""
        problem = _bad_question(tool.name, questions)
        if problem:
            return _error_outcome(problem)
        if self.given is not None:  # an inner call: its outer call asks
            requests = {q.key: {"method": q.method, "params": dict(q.params)} for q in questions}
            return {"resultType": "input_required", "inputRequests": requests}
        try:
            self._check_capabilities(tool.name, questions, rid)
            if self.modern:
                return self._input_required(binding, answers, questions, round_ + 1)
            assert self.holder is not None  # can_ask is empty without one
            return _Answers({**answers, **(await self.holder.ask(questions))})
        except _Legacy as refusal:
            return _error_outcome(str(refusal))
        except ClientAnswerError as error:
            return _error_outcome(f"Tool '{tool.name}' could not go on: {error}")

    def nested(self, given: dict[str, Any], state_id: str | None) -> Turn:
        """The turn of an inner call: the answers handed down to it, its questions handed up
        (never a progress token of its own: its logs reach the client, its progress not)."""
        return replace(
            self, given=given, given_state=state_id, responses={}, state=None,
            progress_token=None, holder=None, can_task=False, calls_made=0,
        )  # fmt: skip

    def state_id(self) -> str | None:
        return self.given_state if self.given is not None else state_id_of(self.state)

    def _opened(self, binding: Binding, rid: RequestId) -> tuple[dict[str, Any], int]:
        """The answers so far: the sealed state's, plus this round's responses to its questions
        (an inner call's: those its outer call handed down)."""
        if self.given is not None:
            return dict(self.given), 0
        if self.state is None:
            # No earlier round: the client may still answer up front (SEP-2322 allows it).
            return {k: v for k, v in self.responses.items() if not k.startswith("kiln/")}, 0
        try:
            content = self.sealer.open(self.state, binding)
        except StateRefusedError:
            raise InvalidParamsError(REFUSED, request_id=rid) from None
        answers = dict(content.get("a") or {})
        self.calls_made = int(content.get("c") or 0)
        asked: dict[str, str] = dict(content.get("q") or {})
        for key, method in asked.items():
            if key in self.responses:
                answers[key] = _checked_answer(key, method, self.responses[key], rid)
        return answers, int(content.get("n") or 0)

    def _check_capabilities(self, name: str, questions: tuple[Question, ...], rid: Any) -> None:
        missing = sorted({CAPABILITY[q.method] for q in questions} - set(self.can_ask))
        if not missing:
            return
        methods = ", ".join(
            sorted({q.method for q in questions if CAPABILITY[q.method] in missing})
        )
        if self.modern:
            raise MissingCapabilityError(
                f"Missing required client capability: tool '{name}' asks for {methods}; "
                f"declare {', '.join(missing)} in the request's client capabilities",
                request_id=rid,
                data={"requiredCapabilities": {kind: {} for kind in missing}},
                modern=True,
            )
        if self.holder is not None:
            raise _Legacy(
                f"Tool '{name}' asks the client a question ({methods}), and this client did not "
                f"declare {', '.join(missing)} in its capabilities at initialize"
            )
        raise _Legacy(
            f"Tool '{name}' asks the client a question ({methods}), and this server cannot hold "
            "an MCP 2025 request open for the answer (on AWS Lambda each POST is answered "
            "once). Call it over MCP 2026-07-28, where the question comes back as an "
            "input_required result and the next call carries the answer."
        )

    def _input_required(
        self, binding: Binding, answers: dict[str, Any], questions: tuple[Question, ...], n: int
    ) -> dict[str, Any]:
        content = {"a": answers, "q": {q.key: q.method for q in questions}, "n": n}
        if self.calls_made:
            content["c"] = self.calls_made
        try:
            state = self.sealer.seal(binding, content)
        except StateTooLargeError as error:
            return _error_result(f"Tool '{binding.tool}' cannot ask again: {error}")
        requests = {q.key: {"method": q.method, "params": dict(q.params)} for q in questions}
        return {"resultType": "input_required", "inputRequests": requests, "requestState": state}


@dataclass(frozen=True)
class _Answers:
    """The client answered a held round's questions: every answer so far."""

    answers: dict[str, Any]


@dataclass(frozen=True)
class GoingOn:
    """A tool that asked first has every answer and goes on as a task."""

    answers: Mapping[str, Any]


class _Legacy(Exception):
    """A question a 2025 request cannot carry: a tool error, not a protocol error."""


def state_id_of(state: str | None) -> str | None:
    """The id of a requestState that opened (the sealer accepts one spelling per state, and
    each seal draws a fresh nonce, so two ids are equal only for the same state sent again)."""
    return hashlib.sha256(state.encode()).hexdigest() if state is not None else None


def caller_of(ctx: CallContext) -> str:
    """Who a state is bound to: the principal, its key or token client, and the view."""
    who = ctx.principal
    parts = [
        getattr(who, "label", "anonymous") if who is not None else "anonymous",
        str(getattr(who, "key_id", "") or ""),
        str(getattr(who, "client", "") or ""),
        ctx.view.name if ctx.view is not None else "",
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _checked_answer(key: str, method: str, answer: Any, rid: RequestId) -> Any:
    """The client's answer to one question, checked against the answer type of its method."""
    problem = answer_problem(key, method, answer)
    if problem:
        raise InvalidParamsError(f"Invalid params: {problem}", request_id=rid)
    return answer


def answer_problem(key: str, method: str, answer: Any) -> str | None:
    """What is wrong with an answer for its question's method, or None."""
    import mcp_types
    from pydantic import TypeAdapter, ValidationError

    model = {
        "elicitation/create": mcp_types.ElicitResult,
        "sampling/createMessage": mcp_types.CreateMessageResult,
        "roots/list": mcp_types.ListRootsResult,
    }.get(method)
    if model is None:
        return None
    try:
        TypeAdapter[Any](model).validate_python(answer)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the answer)"
        return (
            f"inputResponses.{key} is not a valid {model.__name__} (the answer to {method}): "
            f"{where}: {first['msg']}"
        )
    return None


def _bad_question(name: str, questions: tuple[Question, ...]) -> str | None:
    """A question whose params its MCP request would not accept, said as a tool error."""
    import mcp_types
    from pydantic import TypeAdapter, ValidationError

    models: dict[str, Any] = {
        "elicitation/create": mcp_types.ElicitRequestParams,
        "sampling/createMessage": mcp_types.CreateMessageRequestParams,
    }
    for question in questions:
        model = models.get(question.method)
        if model is None:
            continue
        try:
            TypeAdapter[Any](model).validate_python(question.params)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            return (
                f"Tool '{name}' asked '{question.key}' with params that {question.method} does "
                f"not accept: {where}: {first['msg']}"
            )
    return None


def _error_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _error_outcome(text: str) -> ToolOutcome:
    return ToolOutcome(text, True)


def turn_for(
    params: Mapping[str, Any],
    *,
    modern: bool,
    sealer: StateSealer,
    rid: RequestId,
    emit: Emit | None = None,
    holder: Holder | None = None,
    declared: tuple[str, ...] | None = None,
    version: str = "",
) -> Turn:
    """This request's Turn; -32602 for inputResponses / requestState of the wrong shape."""
    meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
    assert isinstance(meta, dict)
    turn = Turn(sealer, modern, emit=emit, holder=holder, progress_token=meta.get("progressToken"))
    if modern:
        turn.responses, turn.state = _responses(params, rid)
        turn.can_ask = askable(meta.get(CLIENT_CAPABILITIES_META_KEY))
        level = meta.get(LOG_LEVEL_META_KEY)
        if level is not None and level not in LOG_LEVELS:
            raise InvalidParamsError(
                f"Invalid params: _meta.{LOG_LEVEL_META_KEY} must be one of "
                f"{', '.join(LOG_LEVELS)}",
                request_id=rid,
            )
        turn.log_level = level
    else:
        # Held: what the session's client declared at initialize where that is known (stdio),
        # else every kind (a stateless POST does not say).
        every = ("elicitation", "sampling", "roots")
        turn.can_ask = () if holder is None else every if declared is None else declared
        turn.log_level = "debug"  # no session keeps a logging/setLevel: everything is sent
    turn.url_mode = urlmode.url_mode_of(meta, version)  # said by the request itself, on every wire
    return turn


def askable(capabilities: Any) -> tuple[str, ...]:
    """The kinds of question a client's capabilities object says it answers."""
    caps = capabilities if isinstance(capabilities, dict) else {}
    return tuple(k for k in ("elicitation", "sampling", "roots") if isinstance(caps.get(k), dict))


def _responses(params: Mapping[str, Any], rid: RequestId) -> tuple[dict[str, Any], str | None]:
    responses = params.get("inputResponses", {})
    if not isinstance(responses, dict):
        raise InvalidParamsError(
            "Invalid params: inputResponses must be an object (question key -> answer)",
            request_id=rid,
        )
    for key, answer in responses.items():
        if not isinstance(answer, dict):
            raise InvalidParamsError(
                f"Invalid params: inputResponses.{key[:64]} must be an object (the client's "
                "answer to that question)",
                request_id=rid,
            )
    state = params.get("requestState")
    if state is not None and not isinstance(state, str):
        raise InvalidParamsError("Invalid params: requestState must be a string", request_id=rid)
    return responses, state
