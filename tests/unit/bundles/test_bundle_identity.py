import pytest

from kiln.bundles.identity import (
    RequirementError,
    bundle_id,
    default_target,
    normalise_requirements,
    parse_target,
)

TARGET = "lambda-python3.13-x86_64"


def test_two_tools_with_the_same_requirements_share_one_bundle_id() -> None:
    first = bundle_id("python", TARGET, ["humanize==4.*"])
    second = bundle_id("python", TARGET, ["humanize==4.*"])
    assert first == second
    assert first is not None
    assert len(first) == 32


def test_spelling_order_and_duplicates_do_not_change_the_id() -> None:
    plain = bundle_id("python", TARGET, ["PyYAML>=6", "humanize==4.*"])
    respelled = bundle_id("python", TARGET, [" humanize == 4.* ", "pyyaml>=6", "PyYaml >= 6"])
    assert plain == respelled


def test_target_and_language_and_versions_change_the_id() -> None:
    base = bundle_id("python", TARGET, ["humanize==4.*"])
    assert bundle_id("python", "lambda-python3.13-arm64", ["humanize==4.*"]) != base
    assert bundle_id("python", TARGET, ["humanize==4.9.0"]) != base


def test_no_requirements_means_no_bundle() -> None:
    assert bundle_id("python", TARGET, []) is None
    assert bundle_id("node", "node20-x86_64", ()) is None


def test_node_requirements_keep_scopes_and_versions() -> None:
    assert normalise_requirements(
        "node", ["lodash@4.17.21", "@types/node@^20", " lodash@4.17.21 "]
    ) == (
        "@types/node@^20",
        "lodash@4.17.21",
    )


@pytest.mark.parametrize(
    ("language", "requirement", "says"),
    [
        ("python", "humanize===", r"must be a PEP 508 requirement .*\(rule: pep508\)"),
        ("python", "evil @ https://example.com/evil.whl", r"not a URL \(rule: url_not_allowed\)"),
        ("python", "  ", r"must not be blank \(rule: blank\)"),
        ("node", "lodash@git+https://example.com/x.git", r"\(rule: url_not_allowed\)"),
        ("node", "Not A Name@1", r"valid npm package name .*\(rule: npm_name\)"),
        ("node", "foo@npm:bar", r"must not be an npm: alias \(rule: alias_not_allowed\)"),
        ("node", "foo@not a range", r"semver range .*\(rule: semver_range\)"),
    ],
)
def test_bad_requirements_are_refused_with_the_rule(
    language: str, requirement: str, says: str
) -> None:
    with pytest.raises(RequirementError, match=says):
        bundle_id(language, "node20-x86_64" if language == "node" else TARGET, [requirement])


def test_unknown_targets_are_refused_with_the_accepted_forms() -> None:
    with pytest.raises(RequirementError, match=r"lambda-python3\.X-ARCH"):
        parse_target("lambda-python3.13-sparc")
    with pytest.raises(RequirementError, match="not a node target"):
        bundle_id("node", TARGET, ["lodash"])


def test_lambda_targets_know_their_wheel_platforms() -> None:
    arm = parse_target("lambda-python3.13-arm64")
    assert arm.is_lambda
    assert arm.python_version == "3.13"
    assert arm.manylinux_platforms == ("manylinux2014_aarch64", "manylinux_2_28_aarch64")


def test_default_target_follows_the_configured_targets() -> None:
    assert default_target("python").startswith("local-python3.")
    configured = "lambda-python3.13-arm64"
    assert default_target("python", configured=configured) == configured
    with pytest.raises(RequirementError):
        default_target("python", configured="python3.13")
    assert default_target("node", configured="node20-x86_64") == "node20-x86_64"
    with pytest.raises(RequirementError):
        default_target("node", configured="node20")


def test_inside_lambda_the_default_target_is_the_functions_own_runtime() -> None:
    target = parse_target(default_target("python", in_lambda=True))
    assert target.is_lambda
    assert default_target("node", configured="node24-arm64", in_lambda=True) == "node24-arm64"
