"""A call that can run only after the person opens a page: a URL-mode elicitation, per wire.

The backend says so with `ToolOutcome.elicit` (a caller who has not connected the account a
tool acts with: kiln.connections) beside an `isError` text that carries the same link. Here
that becomes what the request's client can take:

- **2026-07-28**, the client declared `elicitation.url` in the request's capabilities: an
  input request (`input_required`, `elicitation/create` with `mode: "url"`, no
  `elicitationId`: that revision removed it) and a sealed `requestState`. The repeated call
  (its `inputResponses` and the state) runs if the person connected meanwhile and asks
  again otherwise; an answer `decline` or `cancel` ends the call with a tool error instead.
- **2025-11-25**, the client declared `elicitation.url`: the JSON-RPC error -32042
  (URLElicitationRequired) with `data.elicitations = [{mode, elicitationId, url, message}]`.
  A stateless POST does not say what the session declared at `initialize`, so the
  declaration must come with the request: `_meta["io.modelcontextprotocol/clientCapabilities"]`
  (the key 2026-07-28 made standard; `kiln stdio --url` adds it from its client's
  `initialize`). Without it the capability is unknown, so not assumed.
- Anything else (older revisions, clients without URL mode, an inner call's tool): the
  `isError` result with the link and what to do.

No `notifications/elicitation/complete` is sent: the connection finishes on another request
(the provider's callback), and no stream of the client's is open then to carry it. The
client calls again when the person says they are done.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.protocol.backend import Question, ToolOutcome, UrlElicitation
from kiln.protocol.errors import RequestId, UrlElicitationRequiredError
from kiln.protocol.spec import CLIENT_CAPABILITIES_META_KEY, KNOWN_PROTOCOL_VERSIONS

URL_KEY_PREFIX = "kiln/url/"  # the input request keys of URL elicitations (never a script's)
FIRST_URL_REVISION = "2025-11-25"


def declares_url_mode(capabilities: Any) -> bool:
    """Whether a client capabilities object declares URL-mode elicitation."""
    caps = capabilities if isinstance(capabilities, dict) else {}
    elicitation = caps.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def url_mode_of(meta: Mapping[str, Any], version: str) -> bool:
    """Whether this request's client takes URL elicitations: its revision has them and the
    capabilities the request carries declare them."""
    if version not in KNOWN_PROTOCOL_VERSIONS:
        return False
    order = KNOWN_PROTOCOL_VERSIONS
    if order.index(version) < order.index(FIRST_URL_REVISION):
        return False
    return declares_url_mode(meta.get(CLIENT_CAPABILITIES_META_KEY))


def split_answers(answers: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's answers, and the client's answers to URL elicitations (never the run's)."""
    run = {k: v for k, v in answers.items() if not k.startswith(URL_KEY_PREFIX)}
    urls = {k: v for k, v in answers.items() if k.startswith(URL_KEY_PREFIX)}
    return run, urls


def question(need: UrlElicitation) -> Question:
    """The 2026-07-28 input request for `need`."""
    params = {"mode": "url", "url": need.url, "message": need.message}
    return Question(URL_KEY_PREFIX + need.key, "elicitation/create", params)


def refused(tool: str, need: UrlElicitation, answered: Mapping[str, Any]) -> ToolOutcome | None:
    """The tool error for a person who declined (or dismissed) the page last time, else None."""
    answer = answered.get(URL_KEY_PREFIX + need.key)
    action = answer.get("action") if isinstance(answer, dict) else None
    if action not in ("decline", "cancel"):
        return None
    said = "declined" if action == "decline" else "dismissed"
    return ToolOutcome(
        f"Tool {tool!r} did not run: you {said} opening {need.url} ({need.message}); "
        "call the tool again to be asked again",
        True,
    )


def required_error(need: UrlElicitation, rid: RequestId) -> UrlElicitationRequiredError:
    """The 2025-11-25 answer: -32042 naming the page."""
    elicitation = {
        "mode": "url",
        "elicitationId": need.elicitation_id,
        "url": need.url,
        "message": need.message,
    }
    return UrlElicitationRequiredError(
        f"URL elicitation required: {need.message}",
        request_id=rid,
        data={"elicitations": [elicitation]},
    )
