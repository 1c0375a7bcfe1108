"""The save rules: every refusal names its field and rule; good definitions come out normalised."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from kiln.catalog.model import Draft
from kiln.catalog.rules import (
    RuleError,
    Violation,
    check_draft,
    check_name,
    check_requirements,
    closed_empty_schema,
    is_semver_range,
    normalise_schema,
)
from kiln.catalog.schemas import DIALECT

ADD_VAT_CODE = (
    "import json\nimport sys\nfrom decimal import Decimal, ROUND_HALF_UP\n\n"
    'args = json.load(sys.stdin)\nnet = Decimal(str(args["net"]))\n'
    'rate = Decimal(str(args.get("rate", 20)))\n'
    'vat = (net * rate / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)\n'
    'print(json.dumps({"net": str(net), "rate": str(rate), "vat": str(vat), '
    '"gross": str(net + vat)}))\n'
)

ADD_VAT_SCHEMA = {
    "type": "object",
    "properties": {
        "net": {"type": "number", "minimum": 0},
        "rate": {"type": "number", "minimum": 0, "maximum": 100},
    },
    "required": ["net"],
    "additionalProperties": False,
}

# The seed's REST example, as an author would post it.
ADD_VAT_PAYLOAD: dict[str, Any] = {
    "name": "add_vat",
    "description": "Add UK VAT to a net amount and return net, VAT and gross.",
    "language": "python3",
    "code": ADD_VAT_CODE,
    "requirements": [],
    "json_schema": ADD_VAT_SCHEMA,
    "is_active": True,
}

# The conformance suite's 2020-12 tool schema: $schema, $defs, $anchor, composition.
CONFORMANCE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "postal": {"$ref": "#addressDef"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def tool(**changes: Any) -> dict[str, Any]:
    """A valid minimal payload with `changes` applied; a value of ... removes the field."""
    payload: dict[str, Any] = {
        "name": "hello",
        "description": "Say hello.",
        "language": "python",
        "code": "print('hello')\n",
    }
    for key, value in changes.items():
        if value is ...:
            payload.pop(key, None)
        else:
            payload[key] = value
    return payload


def refusals(payload: Any, **kwargs: Any) -> tuple[Violation, ...]:
    with pytest.raises(RuleError) as caught:
        check_draft(payload, **kwargs)
    return caught.value.violations


def assert_refused(violations: tuple[Violation, ...], field: str, rule: str) -> Violation:
    """The violation for `field` and `rule`; its message names the field and the rule."""
    matching = [v for v in violations if v.field == field and v.rule == rule]
    assert matching, f"no {rule} violation on {field}; got {violations}"
    violation = matching[0]
    assert field in violation.message
    assert rule in violation.message
    return violation


def schema_refusals(schema: Any, field: str = "input_schema") -> tuple[Violation, ...]:
    with pytest.raises(RuleError) as caught:
        normalise_schema(schema, field=field)
    return caught.value.violations


# --- the whole payload -----------------------------------------------------------------------


def test_seed_add_vat_payload_normalises_to_a_draft() -> None:
    draft = check_draft(ADD_VAT_PAYLOAD)

    assert draft == Draft(
        name="add_vat",
        description="Add UK VAT to a net amount and return net, VAT and gross.",
        language="python",
        code=ADD_VAT_CODE,
        requirements=(),
        input_schema=ADD_VAT_SCHEMA,
        output_schema=None,
        title=None,
        annotations=None,
        timeout_seconds=30.0,
        enabled=True,
    )


def test_normalised_schema_is_a_copy_the_caller_cannot_change_afterwards() -> None:
    payload = copy.deepcopy(ADD_VAT_PAYLOAD)
    draft = check_draft(payload)
    payload["json_schema"]["properties"]["net"]["minimum"] = 5

    assert draft.input_schema["properties"]["net"]["minimum"] == 0


@pytest.mark.parametrize(
    "body",
    [
        pytest.param([], id="a JSON array is not a tool"),
        pytest.param("add_vat", id="a JSON string is not a tool"),
        pytest.param(None, id="null is not a tool"),
    ],
)
def test_body_that_is_not_an_object_is_refused(body: Any) -> None:
    violations = refusals(body)

    assert len(violations) == 1
    assert_refused(violations, "body", "type")


def test_every_violation_is_reported_at_once() -> None:
    payload = {
        "name": "9lives",
        "language": "cobol",
        "code": "   ",
        "input_schema": {"type": "string"},
        "timeout_seconds": 0,
        "enabled": "yes",
        "colour": "red",
    }

    violations = refusals(payload)

    assert {(v.field, v.rule) for v in violations} == {
        ("name", "pattern"),
        ("description", "required"),
        ("language", "unknown"),
        ("code", "blank"),
        ("input_schema.type", "root_type"),
        ("timeout_seconds", "range"),
        ("enabled", "type"),
        ("colour", "unknown_field"),
    }


def test_rule_error_text_joins_every_message() -> None:
    with pytest.raises(RuleError) as caught:
        check_draft(tool(name="1", description=...))

    text = str(caught.value)
    assert all(v.message.removesuffix(".") in text for v in caught.value.violations)
    assert len(caught.value.violations) == 2
    assert caught.value.as_dicts()[0].keys() == {"field", "rule", "message"}


def test_unknown_field_is_refused_by_name() -> None:
    violation = assert_refused(refusals(tool(colour="red")), "colour", "unknown_field")

    assert "red" not in violation.message


@pytest.mark.parametrize(
    "field",
    [
        "id",
        "revision",
        "created_at",
        "updated_at",
        "bundle_id",
        "bundle",
        "etag",
        "requirements_json",
        "deleted",
    ],
)
def test_read_only_field_echoed_from_a_get_is_ignored(field: str) -> None:
    draft = check_draft(tool(**{field: "anything"}))

    assert draft.name == "hello"


@pytest.mark.parametrize(
    ("canonical", "alias", "first", "second"),
    [
        pytest.param(
            "input_schema", "json_schema", {}, ADD_VAT_SCHEMA, id="input_schema and json_schema"
        ),
        pytest.param(
            "input_schema", "inputSchema", {}, ADD_VAT_SCHEMA, id="input_schema and inputSchema"
        ),
        pytest.param(
            "output_schema",
            "outputSchema",
            None,
            {"type": "object"},
            id="output_schema and outputSchema",
        ),
        pytest.param("enabled", "is_active", True, False, id="enabled and is_active"),
    ],
)
def test_field_and_its_alias_with_different_values_conflict(
    canonical: str, alias: str, first: Any, second: Any
) -> None:
    assert_refused(refusals(tool(**{canonical: first, alias: second})), canonical, "conflict")


def test_field_and_its_alias_with_the_same_value_are_accepted() -> None:
    draft = check_draft(tool(input_schema=ADD_VAT_SCHEMA, json_schema=ADD_VAT_SCHEMA))

    assert draft.input_schema == ADD_VAT_SCHEMA


def test_defaults_fill_fields_the_payload_leaves_out() -> None:
    draft = check_draft(
        {"name": "hello", "code": "print(2)"},
        defaults={"description": "Old words.", "language": "node", "timeout_seconds": 5},
    )

    assert (draft.description, draft.language, draft.timeout_seconds) == ("Old words.", "node", 5)
    assert draft.code == "print(2)"


def test_a_saved_draft_can_serve_as_defaults_for_a_partial_update() -> None:
    saved = check_draft(dict(ADD_VAT_PAYLOAD, requirements=["Requests==2.32.5"]))

    updated = check_draft({"code": "print(3)\n"}, defaults=dataclasses.asdict(saved))

    assert updated == dataclasses.replace(saved, code="print(3)\n")


def test_defaults_with_an_unknown_field_are_a_programming_error() -> None:
    with pytest.raises(TypeError):
        check_draft(tool(), defaults={"colour": "red"})


def test_defaults_do_not_override_what_the_payload_gives() -> None:
    draft = check_draft(tool(description="New words."), defaults={"description": "Old words."})

    assert draft.description == "New words."


# --- name ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("9lives", id="a name starting with a digit"),
        pytest.param("_private", id="a name starting with an underscore"),
        pytest.param("two words", id="a name with a space"),
        pytest.param("dotted.name", id="a name with a dot"),
        pytest.param("café", id="a name with a non-ASCII letter"),
        pytest.param("", id="an empty name"),
        pytest.param("a" * 64, id="a name of 64 characters"),
        pytest.param("hello\n", id="a name with a trailing newline"),
    ],
)
def test_name_not_matching_the_pattern_is_refused(name: str) -> None:
    violation = assert_refused(refusals(tool(name=name)), "name", "pattern")

    assert "^[a-zA-Z][a-zA-Z0-9_-]{0,62}$" in violation.message


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("kiln_deploy", id="a name with the kiln_ prefix"),
        pytest.param("KILN_deploy", id="a name with the prefix in capitals"),
        pytest.param("Kiln_", id="the bare prefix in mixed case"),
    ],
)
def test_name_reserved_for_built_ins_is_refused(name: str) -> None:
    assert_refused(refusals(tool(name=name)), "name", "reserved")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a", id="a single letter"),
        pytest.param("a" * 63, id="63 characters"),
        pytest.param("Add-VAT_2", id="letters digits dash and underscore"),
        pytest.param("kilnsmith", id="kiln without the underscore"),
    ],
)
def test_name_within_the_rules_is_accepted(name: str) -> None:
    check_name(name)

    assert check_draft(tool(name=name)).name == name


def test_name_that_is_not_a_string_is_refused() -> None:
    assert_refused(refusals(tool(name=42)), "name", "type")


def test_missing_name_is_refused() -> None:
    assert_refused(refusals(tool(name=...)), "name", "required")


def test_check_name_raises_rule_error_naming_the_field() -> None:
    with pytest.raises(RuleError) as caught:
        check_name("kiln_x")

    assert caught.value.violations[0].field == "name"


# --- description and title ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("description", "rule"),
    [
        pytest.param(..., "required", id="a missing description"),
        pytest.param(None, "required", id="a null description"),
        pytest.param("  \n\t", "blank", id="a blank description"),
        pytest.param("x" * 4097, "too_long", id="a description of 4097 characters"),
        pytest.param(["words"], "type", id="a description that is a list"),
    ],
)
def test_bad_description_is_refused(description: Any, rule: str) -> None:
    assert_refused(refusals(tool(description=description)), "description", rule)


def test_description_of_4096_characters_is_accepted() -> None:
    assert len(check_draft(tool(description="x" * 4096)).description) == 4096


def test_description_with_a_lone_surrogate_is_refused() -> None:
    assert_refused(refusals(tool(description="bad \ud800 text")), "description", "encoding")


@pytest.mark.parametrize(
    ("title", "rule"),
    [
        pytest.param("x" * 201, "too_long", id="a title of 201 characters"),
        pytest.param(7, "type", id="a title that is a number"),
    ],
)
def test_bad_title_is_refused(title: Any, rule: str) -> None:
    assert_refused(refusals(tool(title=title)), "title", rule)


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        pytest.param("Add VAT", "Add VAT", id="a title is kept"),
        pytest.param("", None, id="an empty title means no title"),
        pytest.param(None, None, id="a null title means no title"),
    ],
)
def test_title_is_optional(title: Any, expected: str | None) -> None:
    assert check_draft(tool(title=title)).title == expected


# --- language and code -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "language"),
    [
        ("python", "python"),
        ("python3", "python"),
        ("py", "python"),
        ("Python", "python"),
        ("node", "node"),
        ("nodejs", "node"),
        ("javascript", "node"),
        ("js", "node"),
    ],
)
def test_language_and_its_aliases_normalise(given: str, language: str) -> None:
    assert check_draft(tool(language=given)).language == language


@pytest.mark.parametrize(
    ("language", "rule"),
    [
        pytest.param("ruby", "unknown", id="a language Kiln cannot run"),
        pytest.param(..., "required", id="a missing language"),
        pytest.param(3, "type", id="a language that is a number"),
    ],
)
def test_bad_language_is_refused(language: Any, rule: str) -> None:
    assert_refused(refusals(tool(language=language)), "language", rule)


@pytest.mark.parametrize(
    ("code", "rule"),
    [
        pytest.param(..., "required", id="missing code"),
        pytest.param("", "blank", id="empty code"),
        pytest.param(" \n\n ", "blank", id="whitespace-only code"),
        pytest.param(b"print(1)", "type", id="code that is not a string"),
        pytest.param("é" * (128 * 1024 + 1), "too_large", id="code over 256 KiB once encoded"),
        pytest.param("print('\ud800')", "encoding", id="code with a lone surrogate"),
    ],
)
def test_bad_code_is_refused(code: Any, rule: str) -> None:
    assert_refused(refusals(tool(code=code)), "code", rule)


def test_code_of_exactly_256_kib_is_accepted() -> None:
    code = "#" * (256 * 1024)

    assert check_draft(tool(code=code)).code == code


# --- python requirements ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        pytest.param("pkg @ https://example.com/pkg.whl", "url_not_allowed", id="a direct URL"),
        pytest.param("git+https://github.com/a/b.git", "url_not_allowed", id="a git URL"),
        pytest.param("https://example.com/pkg-1.0.tar.gz", "url_not_allowed", id="a bare URL"),
        pytest.param("pkg @ file:///tmp/pkg", "path_not_allowed", id="a file direct reference"),
        pytest.param("file:pkg", "path_not_allowed", id="a file: path"),
        pytest.param("./pkg", "path_not_allowed", id="a relative path"),
        pytest.param("../pkg", "path_not_allowed", id="a parent path"),
        pytest.param("/opt/pkg", "path_not_allowed", id="an absolute path"),
        pytest.param("pkg-1.0-py3-none-any.whl", "path_not_allowed", id="a wheel file"),
        pytest.param("-e .", "editable", id="an editable install"),
        pytest.param("--editable=pkg", "editable", id="a long editable option"),
        pytest.param("--index-url http://mirror", "option", id="an index URL option"),
        pytest.param("-i http://mirror", "option", id="a short index option"),
        pytest.param("--extra-index-url http://x", "option", id="an extra index option"),
        pytest.param("-f http://x", "option", id="a short find-links option"),
        pytest.param("--find-links /tmp", "option", id="a find-links option"),
        pytest.param("--trusted-host x", "option", id="a trusted-host option"),
        pytest.param("-r other.txt", "option", id="a requirements-file option"),
        pytest.param("requests==", "pep508", id="a specifier without a version"),
        pytest.param("requests[", "pep508", id="an unclosed extras list"),
        pytest.param("   ", "blank", id="a blank entry"),
        pytest.param("a" * 201, "too_long", id="an entry of 201 characters"),
        pytest.param(7, "type", id="an entry that is a number"),
    ],
)
def test_bad_python_requirement_is_refused(entry: Any, rule: str) -> None:
    violations = refusals(tool(requirements=["six", entry]))

    violation = assert_refused(violations, "requirements[1]", rule)
    assert "example.com" not in violation.message
    assert "mirror" not in violation.message


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param(["requests==2.32.5"], ("requests==2.32.5",), id="a pinned package is kept"),
        pytest.param(["Zope.Interface"], ("zope-interface",), id="names are canonicalised"),
        pytest.param(
            ["Requests[Security,SOCKS] >= 2.0, <3 ; python_version > '3.8'"],
            ('requests[security,socks]<3,>=2.0; python_version > "3.8"',),
            id="extras specifiers and markers are kept in a normal form",
        ),
        pytest.param(["  six  "], ("six",), id="surrounding spaces are dropped"),
        pytest.param(["b", "a"], ("b", "a"), id="the author's order is kept"),
        pytest.param('["six", "attrs>=23"]', ("six", "attrs>=23"), id="a JSON text of a list"),
        pytest.param("", (), id="an empty string means no packages"),
        pytest.param(None, (), id="null means no packages"),
    ],
)
def test_python_requirements_normalise(entries: Any, expected: tuple[str, ...]) -> None:
    assert check_draft(tool(requirements=entries)).requirements == expected


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param(["requests", "requests>=2"], id="the same package twice"),
        pytest.param(["Zope.Interface", "zope_interface"], id="two spellings of one package"),
    ],
)
def test_duplicate_python_requirement_is_refused(entries: list[str]) -> None:
    assert_refused(refusals(tool(requirements=entries)), "requirements[1]", "duplicate")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("requests", id="a plain string that is not JSON"),
        pytest.param('{"requests": "2"}', id="a JSON text of an object"),
        pytest.param({"requests": "2"}, id="an object"),
    ],
)
def test_requirements_that_are_not_a_list_are_refused(value: Any) -> None:
    assert_refused(refusals(tool(requirements=value)), "requirements", "type")


def test_more_than_fifty_requirements_are_refused() -> None:
    entries = [f"pkg{i}" for i in range(51)]

    assert_refused(refusals(tool(requirements=entries)), "requirements", "too_many")


def test_fifty_requirements_are_accepted() -> None:
    entries = [f"pkg{i}" for i in range(50)]

    assert len(check_draft(tool(requirements=entries)).requirements) == 50


def test_check_requirements_accepts_a_language_alias() -> None:
    assert check_requirements("python3", ["Six"]) == ("six",)


def test_check_requirements_refuses_an_unknown_language() -> None:
    with pytest.raises(RuleError) as caught:
        check_requirements("ruby", ["rails"])

    assert caught.value.violations[0].field == "language"


# --- node requirements -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param("lodash", id="a bare name"),
        pytest.param("lodash@4.17.21", id="an exact version"),
        pytest.param("@types/node@^20.1.0", id="a scoped package with a caret range"),
        pytest.param("@types/node", id="a bare scoped package"),
        pytest.param("left-pad@~1.2", id="a tilde range"),
        pytest.param("left-pad@1.x", id="an x range"),
        pytest.param("left-pad@1.2.X", id="an X range"),
        pytest.param("left-pad@>=1.0.0 <2.0.0", id="a comparator set"),
        pytest.param("left-pad@>= 1.0.0", id="a comparator with a space"),
        pytest.param("left-pad@1.2.3 - 2.3.4", id="a hyphen range"),
        pytest.param("left-pad@^1 || ^2", id="alternatives"),
        pytest.param("left-pad@*", id="any version"),
        pytest.param("left-pad@latest", id="the latest dist-tag"),
        pytest.param("left-pad@1.0.0-beta.1+build.5", id="a prerelease with build metadata"),
        pytest.param("left-pad@v1.2.3", id="a version with a leading v"),
    ],
)
def test_node_requirement_within_the_rules_is_accepted(entry: str) -> None:
    assert check_requirements("node", [entry]) == (entry,)


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        pytest.param("https://example.com/x.tgz", "url_not_allowed", id="a tarball URL"),
        pytest.param("x@https://example.com/x.tgz", "url_not_allowed", id="a URL as the range"),
        pytest.param("x@git+ssh://git@example.com/x.git", "url_not_allowed", id="a git URL"),
        pytest.param("x@github:owner/repo", "url_not_allowed", id="a github: spec"),
        pytest.param("github:owner/repo", "url_not_allowed", id="a bare github: spec"),
        pytest.param("x@owner/repo", "path_not_allowed", id="a github shorthand"),
        pytest.param("x@file:../x", "path_not_allowed", id="a file: spec"),
        pytest.param("x@link:../x", "path_not_allowed", id="a link: spec"),
        pytest.param("./x", "path_not_allowed", id="a relative path"),
        pytest.param("x.tgz", "path_not_allowed", id="a local tarball"),
        pytest.param("x@npm:lodash@4", "alias_not_allowed", id="an npm alias"),
        pytest.param("Lodash", "npm_name", id="a name with capitals"),
        pytest.param(".hidden", "npm_name", id="a name starting with a dot"),
        pytest.param("_under", "npm_name", id="a name starting with an underscore"),
        pytest.param("node_modules", "npm_name", id="a banned name"),
        pytest.param("a b", "npm_name", id="a name with a space"),
        pytest.param("@scope", "npm_name", id="a scope without a name"),
        pytest.param("x@next", "semver_range", id="a dist-tag other than latest"),
        pytest.param("x@1.2.3.4", "semver_range", id="a four-part version"),
        pytest.param("x@^01.0.0", "semver_range", id="a version with a leading zero"),
        pytest.param("x@", "semver_range", id="an empty range"),
        pytest.param("x@1 ||", "semver_range", id="an empty alternative"),
        pytest.param("--registry=http://x", "option", id="an npm option"),
    ],
)
def test_bad_node_requirement_is_refused(entry: str, rule: str) -> None:
    violations = refusals(tool(language="node", requirements=[entry]))

    violation = assert_refused(violations, "requirements[0]", rule)
    assert "example.com" not in violation.message


def test_node_range_spaces_are_collapsed() -> None:
    assert check_requirements("node", ["x@>=1.0.0    <2 ||  ^3"]) == ("x@>=1.0.0 <2 || ^3",)


def test_duplicate_node_requirement_is_refused() -> None:
    violations = refusals(tool(language="node", requirements=["lodash@4", "lodash@^4.17.0"]))

    assert_refused(violations, "requirements[1]", "duplicate")


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("1.2.3", True),
        ("~1.2.3", True),
        ("^0.0.1", True),
        ("<1.0.0 || >=2.0.0 <3", True),
        ("1.2.3-alpha.1", True),
        ("x", True),
        ("1.2.3 -", False),
        (">=>1", False),
        ("1..2", False),
        ("v", False),
    ],
)
def test_semver_range_check_is_strict(text: str, valid: bool) -> None:
    assert is_semver_range(text) is valid


# --- input schema ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({}, id="a missing schema"),
        pytest.param({"input_schema": None}, id="a null schema"),
        pytest.param({"input_schema": {}}, id="an empty schema"),
        pytest.param({"json_schema": {}}, id="an empty schema under the seed alias"),
    ],
)
def test_no_schema_means_the_closed_empty_object(changes: dict[str, Any]) -> None:
    assert check_draft(tool(**changes)).input_schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


def test_normalise_schema_turns_empty_into_closed_empty_object() -> None:
    assert normalise_schema({}) == closed_empty_schema()
    assert normalise_schema(None) == closed_empty_schema()


def test_bare_object_schema_is_kept_and_accepts_any_object() -> None:
    assert normalise_schema({"type": "object"}) == {"type": "object"}


def test_schema_with_defs_ref_and_anchor_passes_unchanged() -> None:
    assert normalise_schema(copy.deepcopy(CONFORMANCE_SCHEMA)) == CONFORMANCE_SCHEMA


@pytest.mark.parametrize(
    "dialect",
    [
        pytest.param(DIALECT, id="the 2020-12 URI"),
        pytest.param(DIALECT + "#", id="the 2020-12 URI with an empty fragment"),
    ],
)
def test_2020_12_dialect_is_accepted_and_kept(dialect: str) -> None:
    assert normalise_schema({"$schema": dialect, "type": "object"})["$schema"] == dialect


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        pytest.param(
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
            "input_schema.$schema",
            id="draft 7",
        ),
        pytest.param(
            {"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object"},
            "input_schema.$schema",
            id="draft 2019-09",
        ),
        pytest.param(
            {"$schema": DIALECT + "##", "type": "object"},
            "input_schema.$schema",
            id="the 2020-12 URI with two hashes",
        ),
        pytest.param(
            {
                "type": "object",
                "properties": {
                    "a": {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"}
                },
            },
            "input_schema.properties.a.$schema",
            id="another dialect in a subschema",
        ),
    ],
)
def test_other_dialect_is_refused(schema: dict[str, Any], field: str) -> None:
    assert_refused(schema_refusals(schema), field, "dialect")


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        pytest.param(
            {"type": "object", "properties": {"net": {"type": "number", "minimum": "0"}}},
            "input_schema.properties.net.minimum",
            id="a minimum that is a string",
        ),
        pytest.param({"type": "objectt"}, "input_schema.type", id="a misspelt type"),
        pytest.param(
            {"type": "object", "required": "net"}, "input_schema.required", id="required as text"
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"pattern": "(["}}},
            "input_schema.properties.a.pattern",
            id="a pattern that is not a regular expression",
        ),
        pytest.param({"type": "object", "allOf": []}, "input_schema.allOf", id="an empty allOf"),
        pytest.param(
            {"type": "object", "anyOf": [{"type": "object"}, 3]},
            "input_schema.anyOf[1]",
            id="a number where a subschema belongs",
        ),
    ],
)
def test_schema_breaking_the_metaschema_reports_the_failing_path(
    schema: dict[str, Any], field: str
) -> None:
    violation = assert_refused(schema_refusals(schema), field, "metaschema")

    assert "objectt" not in violation.message
    assert "([" not in violation.message


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "string"}, id="a string schema"),
        pytest.param({"properties": {"a": {"type": "string"}}}, id="a schema without a type"),
        pytest.param({"type": ["object", "null"]}, id="a list of types"),
    ],
)
def test_schema_whose_root_is_not_an_object_is_refused(schema: dict[str, Any]) -> None:
    assert_refused(schema_refusals(schema), "input_schema.type", "root_type")


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param([], id="a list"),
        pytest.param("object", id="a string"),
        pytest.param(True, id="the schema true"),
        pytest.param({"type": "object", "maximum": float("nan")}, id="a schema containing NaN"),
    ],
)
def test_schema_that_is_not_a_json_object_is_refused(schema: Any) -> None:
    assert_refused(schema_refusals(schema), "input_schema", "type")


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        pytest.param(
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},
            "input_schema.properties.a.$ref",
            id="a remote ref",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"$ref": "other.json#/a"}}},
            "input_schema.properties.a.$ref",
            id="a relative ref",
        ),
        pytest.param(
            {"type": "object", "$dynamicRef": "https://example.com/s.json#meta"},
            "input_schema.$dynamicRef",
            id="a remote dynamic ref",
        ),
        pytest.param(
            {"type": "object", "$id": "https://example.com/root.json"},
            "input_schema.$id",
            id="an id that sets the base URI",
        ),
        pytest.param(
            {"type": "object", "$defs": {"a": {"$id": "a.json", "type": "string"}}},
            "input_schema.$defs.a.$id",
            id="an id that changes the base URI in a subschema",
        ),
        pytest.param(
            {"type": "object", "x-extension": {"$ref": "https://example.com/s.json"}},
            "input_schema.x-extension.$ref",
            id="a remote ref inside an unknown keyword",
        ),
    ],
)
def test_reference_that_could_leave_the_document_is_refused(
    schema: dict[str, Any], field: str
) -> None:
    violation = assert_refused(schema_refusals(schema), field, "remote_ref")

    assert "example.com" not in violation.message


def test_remote_ref_reached_through_a_pointer_into_data_is_refused() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/default"}},
        "default": {"$ref": "https://example.com/s.json"},
    }

    assert_refused(schema_refusals(schema), "input_schema.default.$ref", "remote_ref")


def test_ref_like_text_in_data_keywords_is_only_data() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"const": {"$ref": "https://example.com"}}},
        "default": {"$id": "https://example.com"},
        "examples": [{"$ref": "nowhere"}],
    }

    assert normalise_schema(schema) == schema


def test_property_named_like_a_keyword_is_not_a_reference() -> None:
    schema = {
        "type": "object",
        "properties": {"$ref": {"type": "string"}, "$id": {"type": "string"}},
    }

    assert normalise_schema(schema) == schema


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        pytest.param(
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
            "input_schema.properties.a.$ref",
            id="a pointer to a missing definition",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"$ref": "#missing"}}},
            "input_schema.properties.a.$ref",
            id="an anchor nobody declares",
        ),
        pytest.param(
            {"type": "object", "required": ["a"], "properties": {"a": {"$ref": "#/required"}}},
            "input_schema.properties.a.$ref",
            id="a pointer to something that is not a schema",
        ),
        pytest.param(
            {"type": "object", "$defs": {"a/b": {}}, "properties": {"a": {"$ref": "#/$defs/a/b"}}},
            "input_schema.properties.a.$ref",
            id="a slash in a name left unescaped",
        ),
        pytest.param(
            {"type": "object", "$dynamicRef": "#nothing"},
            "input_schema.$dynamicRef",
            id="a dynamic ref to no anchor",
        ),
    ],
)
def test_local_reference_that_does_not_resolve_is_refused(
    schema: dict[str, Any], field: str
) -> None:
    assert_refused(schema_refusals(schema), field, "unresolved_ref")


@pytest.mark.parametrize(
    "ref",
    [
        pytest.param("#/$defs/a~1b", id="a slash escaped as ~1"),
        pytest.param("#/$defs/c~0d", id="a tilde escaped as ~0"),
        pytest.param("#/$defs/e%20f", id="a percent-encoded space"),
        pytest.param("#/$defs/g%25h", id="a percent-encoded percent sign"),
        pytest.param("#/$defs/list/prefixItems/0", id="an index into an array"),
        pytest.param("#named", id="an anchor"),
        pytest.param("#", id="the whole document"),
    ],
)
def test_local_reference_that_resolves_is_accepted(ref: str) -> None:
    schema = {
        "type": "object",
        "$defs": {
            "a/b": {"type": "string"},
            "c~d": {"type": "string"},
            "e f": {"type": "string"},
            "g%h": {"type": "string"},
            "list": {"type": "array", "prefixItems": [{"type": "string"}]},
            "n": {"$anchor": "named", "type": "string"},
        },
        "properties": {"x": {"$ref": ref}},
    }

    assert normalise_schema(schema) == schema


def test_anchor_name_given_twice_is_refused() -> None:
    schema = {
        "type": "object",
        "$defs": {"a": {"$anchor": "same"}, "b": {"$anchor": "same"}},
        "properties": {"x": {"$ref": "#same"}},
    }

    violation = assert_refused(
        schema_refusals(schema), "input_schema.$defs.b.$anchor", "duplicate_anchor"
    )
    assert "input_schema.$defs.a.$anchor" in violation.message


def test_reference_to_a_properties_object_is_checked_once() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$anchor": "a", "type": "string"}},
        "$defs": {"props": {"allOf": [{"$ref": "#/properties"}]}},
    }

    assert normalise_schema(schema) == schema


def test_odd_property_name_is_escaped_in_the_field_path() -> None:
    schema = {"type": "object", "properties": {"line\nbreak": {"type": "nope"}}}

    violations = schema_refusals(schema)

    assert violations[0].field == "input_schema.properties.line\\nbreak.type"


def test_dynamic_ref_to_a_dynamic_anchor_is_accepted() -> None:
    schema = {
        "type": "object",
        "$dynamicAnchor": "node",
        "properties": {"child": {"$dynamicRef": "#node"}},
    }

    assert normalise_schema(schema) == schema


def test_schema_larger_than_64_kib_is_refused() -> None:
    schema = {"type": "object", "description": "x" * (64 * 1024)}

    assert_refused(schema_refusals(schema), "input_schema", "too_large")


def negations(levels: int) -> dict[str, Any]:
    """An object schema nested `levels` JSON objects deep, through a chain of "not"."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 2):
        schema = {"not": schema}
    return {"type": "object", "not": schema}


def test_schema_nested_deeper_than_32_levels_is_refused() -> None:
    assert_refused(schema_refusals(negations(33)), "input_schema", "too_deep")


def test_schema_nested_32_levels_is_accepted() -> None:
    schema = negations(32)

    assert normalise_schema(schema) == schema


def test_depth_counts_arrays_too() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(16):
        schema = {"allOf": [schema]}
    schema["type"] = "object"

    assert_refused(schema_refusals(schema), "input_schema", "too_deep")


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        pytest.param(
            {"type": "object", "$ref": "#"}, "input_schema.$ref", id="the root refers to itself"
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}},
            "input_schema.properties.a.$ref",
            id="a property refers to itself",
        ),
        pytest.param(
            {
                "type": "object",
                "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"allOf": [{"$ref": "#/$defs/x"}]}},
                "properties": {"a": {"$ref": "#/$defs/x"}},
            },
            "input_schema.$defs.y.allOf[0].$ref",
            id="two definitions refer to each other",
        ),
        pytest.param(
            {
                "type": "object",
                "$defs": {"loop": {"$anchor": "loop", "not": {"if": {"$ref": "#loop"}}}},
            },
            "input_schema.$defs.loop.not.if.$ref",
            id="an anchor reached again through not and if",
        ),
        pytest.param(
            {"type": "object", "$dynamicAnchor": "me", "anyOf": [{"$dynamicRef": "#me"}]},
            "input_schema.anyOf[0].$dynamicRef",
            id="a dynamic ref back to the root",
        ),
    ],
)
def test_reference_loop_that_never_reaches_smaller_input_is_refused(
    schema: dict[str, Any], field: str
) -> None:
    assert_refused(schema_refusals(schema), field, "ref_cycle")


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(
            {
                "type": "object",
                "$defs": {
                    "node": {
                        "type": "object",
                        "properties": {
                            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
                        },
                    }
                },
                "properties": {"root": {"$ref": "#/$defs/node"}},
            },
            id="a tree whose children are trees",
        ),
        pytest.param(
            {"type": "object", "additionalProperties": {"$ref": "#"}},
            id="an object whose values are the same kind of object",
        ),
        pytest.param(
            {
                "type": "object",
                "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"type": "string"}},
                "properties": {"p": {"$ref": "#/$defs/a"}, "q": {"$ref": "#/$defs/a"}},
            },
            id="two references to one definition",
        ),
    ],
)
def test_recursion_that_descends_into_the_input_is_accepted(schema: dict[str, Any]) -> None:
    assert normalise_schema(schema) == schema


def test_schema_with_more_than_a_thousand_subschemas_is_refused() -> None:
    schema = {"type": "object", "anyOf": [{} for _ in range(1000)]}

    assert_refused(schema_refusals(schema), "input_schema", "too_complex")


def test_values_in_data_keywords_are_not_counted_as_subschemas() -> None:
    schema = {"type": "object", "examples": [{} for _ in range(2000)]}

    assert normalise_schema(schema) == schema


def test_checking_the_same_schema_twice_gives_independent_copies() -> None:
    first = normalise_schema({"type": "object", "properties": {"a": {"type": "string"}}})
    first["properties"]["a"]["type"] = "number"

    second = normalise_schema({"type": "object", "properties": {"a": {"type": "string"}}})

    assert second["properties"]["a"]["type"] == "string"


def test_reports_about_one_schema_are_capped_at_ten() -> None:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"$ref": f"#/$defs/missing{i}"} for i in range(30)},
    }

    assert len(schema_refusals(schema)) == 10


def test_schema_violation_names_the_field_it_was_given() -> None:
    violations = refusals(tool(inputSchema={"type": "string"}))

    assert_refused(violations, "input_schema.type", "root_type")


def test_schema_violations_are_reported_together() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/none"}, "b": {"$ref": "#/$defs/gone"}},
    }

    fields = {v.field for v in schema_refusals(schema)}

    assert fields == {"input_schema.properties.a.$ref", "input_schema.properties.b.$ref"}


# --- output schema ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(..., id="a missing output schema"),
        pytest.param(None, id="a null output schema"),
        pytest.param({}, id="an empty output schema"),
    ],
)
def test_no_output_schema_means_none(value: Any) -> None:
    assert check_draft(tool(output_schema=value)).output_schema is None


def test_output_schema_is_kept_under_its_alias() -> None:
    schema = {"type": "object", "properties": {"vat": {"type": "string"}}, "required": ["vat"]}

    assert check_draft(tool(outputSchema=schema)).output_schema == schema


@pytest.mark.parametrize(
    ("schema", "field", "rule"),
    [
        pytest.param({"type": "array"}, "output_schema.type", "root_type", id="an array root"),
        pytest.param(
            {"type": "object", "$ref": "https://example.com/o.json"},
            "output_schema.$ref",
            "remote_ref",
            id="a remote ref",
        ),
        pytest.param(
            {"type": "object", "$ref": "#/$defs/none"},
            "output_schema.$ref",
            "unresolved_ref",
            id="an unresolved ref",
        ),
        pytest.param(
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
            "output_schema.$schema",
            "dialect",
            id="another dialect",
        ),
        pytest.param("object", "output_schema", "type", id="a string"),
    ],
)
def test_bad_output_schema_is_refused(schema: Any, field: str, rule: str) -> None:
    assert_refused(refusals(tool(output_schema=schema)), field, rule)


# --- annotations, timeout, enabled -----------------------------------------------------------


def test_annotations_with_hints_and_title_are_kept() -> None:
    annotations = {"title": "Add VAT", "readOnlyHint": True, "openWorldHint": False}

    assert check_draft(tool(annotations=annotations)).annotations == annotations


@pytest.mark.parametrize(
    ("annotations", "field", "rule"),
    [
        pytest.param({"sneaky": True}, "annotations.sneaky", "unknown_field", id="unknown key"),
        pytest.param(
            {"readOnlyHint": "yes"}, "annotations.readOnlyHint", "type", id="a hint as text"
        ),
        pytest.param({"title": 5}, "annotations.title", "type", id="a title as a number"),
        pytest.param(["readOnlyHint"], "annotations", "type", id="a list"),
    ],
)
def test_bad_annotations_are_refused(annotations: Any, field: str, rule: str) -> None:
    assert_refused(refusals(tool(annotations=annotations)), field, rule)


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        pytest.param(..., 30.0, id="the default is thirty seconds"),
        pytest.param(900, 900.0, id="fifteen minutes is the most"),
        pytest.param(0.5, 0.5, id="fractions of a second are allowed"),
    ],
)
def test_timeout_within_limits_is_accepted(timeout: Any, expected: float) -> None:
    task = {"task": "optional"} if expected > 30 else {}
    assert check_draft(tool(timeout_seconds=timeout, **task)).timeout_seconds == expected


def test_a_plain_tool_longer_than_the_front_door_is_refused_saying_make_it_a_task() -> None:
    (problem,) = refusals(tool(timeout_seconds=900))
    assert problem.field == "timeout_seconds"
    assert problem.rule == "range"
    assert "cut at 30 s by the deployed front door" in problem.message
    assert 'make it a task (set "task": "optional" or "required"' in problem.message
    assert check_draft(tool(timeout_seconds=30)).timeout_seconds == 30.0
    assert check_draft(tool(timeout_seconds=900, task="required")).task == "required"


@pytest.mark.parametrize(
    ("timeout", "rule"),
    [
        pytest.param(0, "range", id="zero seconds"),
        pytest.param(-1, "range", id="a negative timeout"),
        pytest.param(900.5, "range", id="more than fifteen minutes"),
        pytest.param(float("inf"), "range", id="an infinite timeout"),
        pytest.param("30", "type", id="a timeout as text"),
        pytest.param(True, "type", id="a boolean timeout"),
    ],
)
def test_bad_timeout_is_refused(timeout: Any, rule: str) -> None:
    assert_refused(refusals(tool(timeout_seconds=timeout)), "timeout_seconds", rule)


@pytest.mark.parametrize(
    ("changes", "enabled"),
    [
        pytest.param({}, True, id="tools are enabled by default"),
        pytest.param({"enabled": False}, False, id="enabled false disables"),
        pytest.param({"is_active": False}, False, id="the seed alias is_active disables"),
    ],
)
def test_enabled_flag_and_alias(changes: dict[str, Any], enabled: bool) -> None:
    assert check_draft(tool(**changes)).enabled is enabled


@pytest.mark.parametrize("value", [pytest.param("yes", id="text"), pytest.param(1, id="a number")])
def test_enabled_that_is_not_a_boolean_is_refused(value: Any) -> None:
    assert_refused(refusals(tool(enabled=value)), "enabled", "type")


def test_whole_draft_round_trips_through_json() -> None:
    draft = check_draft(
        tool(
            language="node",
            requirements=json.dumps(["lodash@4.17.21"]),
            input_schema=CONFORMANCE_SCHEMA,
            annotations={"readOnlyHint": True},
            title="Hello",
        )
    )

    assert draft.requirements == ("lodash@4.17.21",)
    assert json.loads(json.dumps(draft.input_schema)) == CONFORMANCE_SCHEMA


def test_declared_secrets_are_checked_sorted_and_unique() -> None:
    draft = check_draft(tool(secrets=["B_TOKEN", "A_TOKEN"]))
    assert draft.secrets == ("A_TOKEN", "B_TOKEN")
    with pytest.raises(RuleError) as caught:
        check_draft(tool(secrets=["lower", "AWS_SECRET_ACCESS_KEY", "X", "X"]))
    fields = [(v.field, v.rule) for v in caught.value.violations]
    assert ("secrets[0]", "secret_name") in fields
    assert ("secrets[1]", "secret_name") in fields
    assert ("secrets", "unique") in fields
    with pytest.raises(RuleError, match="list of at most 20 names"):
        check_draft(tool(secrets="A_TOKEN"))


def test_a_node_style_requirement_in_a_python_tool_says_so_not_that_it_is_a_url() -> None:
    with pytest.raises(RuleError) as refused:
        check_requirements("python", ["lodash@4"])
    assert "looks like a Node requirement" in str(refused.value)
    assert "lodash==4" in str(refused.value)
    assert "URL" not in str(refused.value)


def test_a_python_style_range_in_a_node_tool_shows_the_node_form() -> None:
    with pytest.raises(RuleError) as refused:
        check_requirements("node", ["lodash>=4"])
    assert "lodash@>=4" in str(refused.value)
    assert "name" not in str(refused.value).replace("requirements", "")


def test_an_unknown_field_suggests_the_one_meant_and_the_problems_read_as_one_sentence() -> None:
    draft = {"name": "x", "description": "d", "language": "python", "code": "print(1)\n",
             "timout_seconds": 3, "requirements": ["lodash@4"]}  # fmt: skip
    with pytest.raises(RuleError) as refused:
        check_draft(draft)
    message = str(refused.value)
    wanted = "timout_seconds is not a field of a tool definition; did you mean 'timeout_seconds'?"
    assert wanted in message
    assert ".;" not in message
    assert message.endswith(").")
