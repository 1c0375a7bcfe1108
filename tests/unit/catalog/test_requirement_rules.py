"""One rule set for requirements: the bundle identity and the catalog accept the same strings.

`kiln bundles build --requirements ...` must not take what a save would refuse, nor refuse
what a save accepts; and the id must not depend on how an accepted requirement is spelled.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kiln.bundles.identity import RequirementError, normalise_requirement
from kiln.catalog.rules import RuleError, check_requirements

NAMES = st.sampled_from(
    ["six", "Humanize", "requests", "lodash", "@types/node", "left-pad", "zope.interface", "a_b"]
)
OPERATORS = st.sampled_from(["", "==", ">=", "<", "~=", "!=", "^", "~", "@", " @ ", "==="])
VERSIONS = st.sampled_from(["1", "1.2", "4.17.21", "2.*", "1.x", "latest", "*", ">=1 <2", ""])
SUFFIXES = st.sampled_from(["", "[socks]", "; python_version >= '3.8'", " ", "  "])
ODD = st.sampled_from(
    [
        "npm:bar",
        "not a range",
        "git+https://example.com/x.git",
        "https://example.com/p.whl",
        "file:../x",
        "./local",
        "-e .",
        "--index-url=https://x",
        "C:\\pkg",
        "github:user/repo",
    ]
)


@st.composite
def requirement_like(draw: st.DrawFn) -> str:
    name = draw(NAMES)
    if draw(st.booleans()):
        return name + draw(OPERATORS) + draw(ODD)
    return name + draw(SUFFIXES) + draw(OPERATORS) + draw(VERSIONS)


STRINGS = st.one_of(requirement_like(), st.text(max_size=40), st.from_regex(r"[ -~]{0,30}"))


def identity_accepts(language: str, text: str) -> bool:
    try:
        normalise_requirement(language, text)
    except RequirementError:
        return False
    return True


def catalog_accepts(language: str, text: str) -> bool:
    try:
        check_requirements(language, [text])
    except RuleError:
        return False
    return True


@pytest.mark.parametrize("language", ["python", "node"])
@settings(max_examples=200, deadline=None)
@given(text=STRINGS)
@example(text="foo@npm:bar")
@example(text="foo@not a range")
@example(text="Lodash@4.17.21")
def test_the_bundle_identity_and_the_catalog_accept_the_same_requirements(
    language: str, text: str
) -> None:
    assert identity_accepts(language, text) == catalog_accepts(language, text)


@pytest.mark.parametrize("language", ["python", "node"])
@settings(max_examples=150, deadline=None)
@given(text=STRINGS)
def test_an_accepted_requirement_names_the_same_bundle_as_its_saved_spelling(
    language: str, text: str
) -> None:
    if not catalog_accepts(language, text):
        return
    (saved,) = check_requirements(language, [text])
    assert normalise_requirement(language, saved) == normalise_requirement(language, text)


@pytest.mark.parametrize("text", ["foo@npm:bar", "foo@not a range"])
def test_the_strings_the_issue_names_are_refused_by_both(text: str) -> None:
    assert not identity_accepts("node", text)
    assert not catalog_accepts("node", text)
