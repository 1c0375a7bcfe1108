"""A request's facts travel as typed fields of `CallContext`, never under string keys.

The context once carried a string-keyed `extra` dict that any room could add a key to (and one
read a key by its literal text). This test fails if the context, or the transport facts it
carries, grows a mapping or an untyped field again.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, MutableMapping

from kiln.protocol import backend, idempotency, inner, streaming, talking
from kiln.protocol.backend import Arrival, CallContext

# Fields that may stay `Any`, each with its reason.
UNTYPED_ALLOWED = {
    # kiln.identity.policy.Principal, which protocol/ may not import (the layers test); the
    # protocol reads only its label, key id and client, each with getattr.
    (CallContext, "principal"),
}
MAPPINGS = (dict, Mapping, MutableMapping)


def _hints(cls: type) -> dict[str, typing.Any]:
    names = {
        **globals(),
        **vars(backend),
        "Outbox": streaming.Outbox,
        "Turn": talking.Turn,
        "CallLink": inner.CallLink,
        "Once": idempotency.Once,
    }
    return typing.get_type_hints(cls, globalns=names)


def _parts(hint: typing.Any) -> list[typing.Any]:
    """The hint and, for a union or a generic, its members."""
    return [hint, *typing.get_args(hint)] if typing.get_origin(hint) is not None else [hint]


def problems_of(cls: type) -> list[str]:
    """What in the dataclass `cls` is a mapping, or typed Any without a reason given above."""
    problems = []
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if hint is typing.Any and (cls, field.name) not in UNTYPED_ALLOWED:
            problems.append(f"{cls.__name__}.{field.name} is typed Any")
        for part in _parts(hint):
            origin = typing.get_origin(part) or part
            if isinstance(origin, type) and issubclass(origin, MAPPINGS):
                problems.append(f"{cls.__name__}.{field.name} is a mapping ({hint})")
    return problems


def test_the_call_context_has_no_mapping_and_no_untyped_field() -> None:
    problems = [problem for cls in (CallContext, Arrival) for problem in problems_of(cls)]
    assert not problems, (
        "per-request facts must be typed fields of CallContext (or Arrival), not keys of a "
        "mapping: " + "; ".join(problems)
    )


@dataclasses.dataclass(frozen=True)
class _Grown:
    """The context as it was: a string-keyed dict and an untyped field."""

    principal: typing.Any = None
    extra: Mapping[str, typing.Any] = dataclasses.field(default_factory=dict)
    turn: typing.Any = None


def test_the_check_finds_a_string_keyed_dict_and_an_untyped_field() -> None:
    assert problems_of(_Grown) == [
        "_Grown.principal is typed Any",
        "_Grown.extra is a mapping (collections.abc.Mapping[str, typing.Any])",
        "_Grown.turn is typed Any",
    ]
