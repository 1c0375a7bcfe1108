"""The one rule set for package requirements: what a tool may list, and its normal form.

The catalog checks a tool's `requirements` with it on save (`catalog.rules`), and bundles
name and build from the same rules (`bundles.identity`), so a requirement string is accepted
by both or by neither. Messages name the field and the rule, never a URL or path given.
"""

from __future__ import annotations

import json
import re
from typing import Final

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kiln.catalog.model import Language
from kiln.catalog.violations import MISSING, RuleError, Violation, violation

MAX_REQUIREMENTS: Final = 50
MAX_REQUIREMENT_CHARS: Final = 200
_PEP508_NAME: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")

_PATH_PREFIXES: Final = ("./", "../", ".\\", "..\\", "/", "\\", "~/", "~\\")
_ARCHIVE_SUFFIXES: Final = (".whl", ".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tar.xz")
_WINDOWS_DRIVE: Final = re.compile(r"[a-zA-Z]:[\\/]")
_URL_SCHEME: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")


def _looks_like_path(entry: str) -> bool:
    lowered = entry.lower()
    return (
        entry in {".", ".."}
        or entry.startswith(_PATH_PREFIXES)
        or lowered.startswith("file:")
        or _WINDOWS_DRIVE.match(entry) is not None
        or lowered.endswith(_ARCHIVE_SUFFIXES)
    )


def _python_requirement(field: str, entry: str, found: list[Violation]) -> tuple[str, str] | None:
    """Return (canonical name, normalised entry) or record why the entry is refused."""
    refused = _python_source_refused(field, entry)
    if refused is not None:
        found.append(refused)
        return None
    try:
        requirement = Requirement(entry)
    except InvalidRequirement:
        found.append(
            violation(field, "pep508", "must be a PEP 508 requirement such as requests==2.32.5")
        )
        return None
    if requirement.url is not None:
        if requirement.url.lower().startswith("file:"):
            found.append(violation(field, "path_not_allowed", "must not point at a local file"))
        else:
            found.append(
                violation(field, "url_not_allowed", "must be a package from the index, not a URL")
            )
        return None
    if _PEP508_NAME.fullmatch(requirement.name) is None:
        # packaging lets a trailing . _ or - through; pip (and the normal form) would not.
        found.append(
            violation(field, "pep508", "must be a PEP 508 requirement such as requests==2.32.5")
        )
        return None
    name = str(canonicalize_name(requirement.name))
    return name, _python_normal_form(name, requirement)


def _python_source_refused(field: str, entry: str) -> Violation | None:
    """Why `entry` is refused before parsing: a pip option, a URL, a path or Node syntax."""
    if entry.startswith("-"):
        if entry.startswith(("-e", "--editable")):
            return violation(field, "editable", "must not be an editable install (-e)")
        return violation(field, "option", "must be a package, not a pip option such as --index-url")
    if _URL_SCHEME.search(entry) or entry.lower().startswith(("git+", "hg+", "svn+", "bzr+")):
        if "file://" in entry.lower():
            return violation(field, "path_not_allowed", "must not point at a local file")
        return violation(field, "url_not_allowed", "must be a package from the index, not a URL")
    if _looks_like_path(entry):
        return violation(field, "path_not_allowed", "must be a package from the index, not a path")
    node_style = _NODE_STYLE.fullmatch(entry.strip())
    if node_style is not None:  # `lodash@4` would parse as a URL requirement
        name, version = node_style.group(1), node_style.group(2)
        return violation(
            field,
            "node_syntax",
            f"looks like a Node requirement (name@version); a Python tool's is a PEP 508 "
            f"requirement such as {name.rpartition('/')[2]}=={version.lstrip('^~')}",
        )
    return None


def _python_normal_form(name: str, requirement: Requirement) -> str:
    """`name[extras]specifier; marker` with the extras canonical and sorted."""
    text = name
    if requirement.extras:
        text += "[" + ",".join(sorted(canonicalize_name(e) for e in requirement.extras)) + "]"
    text += str(requirement.specifier)
    if requirement.marker is not None:
        text += f"; {requirement.marker}"
    return text


_NPM_NAME: Final = re.compile(r"(?:@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*")
_NPM_NAME_MAX: Final = 214
# `lodash@4`, `@scope/pkg@^1.2` in a Python tool; `lodash>=4`, `lodash==4.17` in a Node one.
_NODE_STYLE: Final = re.compile(
    r"((?:@[a-z0-9][a-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*)@([~^]?[0-9][0-9A-Za-z.*x-]*)"
)
_PYTHON_STYLE: Final = re.compile(r"([^<>=!~\s]+)\s*((?:[<>]=?|==|~=|!=)\s*\S.*)")
_NPM_BANNED_NAMES: Final = frozenset({"node_modules", "favicon.ico"})

_NR: Final = r"(?:0|[1-9][0-9]*)"
_XR: Final = rf"(?:[xX*]|{_NR})"
_PART: Final = r"[0-9A-Za-z-]+"
_QUALIFIER: Final = rf"(?:-{_PART}(?:\.{_PART})*)?(?:\+{_PART}(?:\.{_PART})*)?"
_PARTIAL: Final = rf"v?{_XR}(?:\.{_XR}(?:\.{_XR}{_QUALIFIER})?)?"
_SIMPLE: Final = re.compile(rf"(?:<=|>=|<|>|=|~>?|\^)?{_PARTIAL}")
_HYPHEN: Final = re.compile(rf"{_PARTIAL}\s+-\s+{_PARTIAL}")
_OPERATOR_SPACE: Final = re.compile(r"(<=|>=|<|>|=|~>?|\^)\s+")


def is_semver_range(text: str) -> bool:
    """Whether `text` is a node-semver range (or the `latest` dist-tag)."""
    if text == "latest":
        return True
    for alternative in text.split("||"):
        part = alternative.strip()
        if not part:
            return False
        if _HYPHEN.fullmatch(part):
            continue
        simples = _OPERATOR_SPACE.sub(r"\1", part).split()
        if not all(_SIMPLE.fullmatch(simple) for simple in simples):
            return False
    return True


def _split_npm(entry: str) -> tuple[str, str | None]:
    at = entry.find("@", 1)
    if at == -1:
        return entry, None
    return entry[:at], entry[at + 1 :]


_GIT_SOURCES: Final = ("git+", "git:", "github:", "gitlab:", "bitbucket:", "gist:")


def _is_url(text: str) -> bool:
    """A URL, or one of npm's repository shorthands (github:user/repo and the like)."""
    return bool(_URL_SCHEME.search(text)) or text.lower().startswith(_GIT_SOURCES)


def _url_refused(field: str) -> Violation:
    return violation(field, "url_not_allowed", "must be a package from the registry, not a URL")


def _node_requirement(field: str, entry: str, found: list[Violation]) -> tuple[str, str] | None:
    lowered = entry.lower()
    if entry.startswith("-"):
        found.append(violation(field, "option", "must be a package, not an npm option"))
        return None
    if _is_url(entry):
        found.append(_url_refused(field))
        return None
    if lowered.startswith(("file:", "link:")) or _looks_like_path(entry):
        found.append(
            violation(field, "path_not_allowed", "must be a package from the registry, not a path")
        )
        return None
    name, spec = _split_npm(entry)
    python_style = _PYTHON_STYLE.fullmatch(name) if spec is None else None
    if python_style is not None and _NPM_NAME.fullmatch(python_style.group(1)):
        package, version = python_style.group(1), python_style.group(2).strip()
        found.append(
            violation(
                field,
                "semver_range",
                f"must give its range after @, as Node does: {package}@{version.lstrip('=')}",
            )
        )
        return None
    if len(name) > _NPM_NAME_MAX or name in _NPM_BANNED_NAMES or _NPM_NAME.fullmatch(name) is None:
        found.append(
            violation(
                field,
                "npm_name",
                "must start with a valid npm package name "
                "(lower-case letters, digits, -, ., _; optionally @scope/)",
            )
        )
        return None
    if spec is None:
        return name, name
    spec = " ".join(spec.split())
    refused = _npm_spec_refused(field, spec)
    if refused is not None:
        found.append(refused)
        return None
    return name, f"{name}@{spec}"


def _npm_spec_refused(field: str, spec: str) -> Violation | None:
    """Why the part after `name@` is refused: an alias, a URL, a path or not a semver range."""
    spec_lowered = spec.lower()
    if spec_lowered.startswith("npm:"):
        return violation(field, "alias_not_allowed", "must not be an npm: alias")
    if _is_url(spec):
        return _url_refused(field)
    if spec_lowered.startswith(("file:", "link:")) or _looks_like_path(spec) or "/" in spec:
        return violation(
            field,
            "path_not_allowed",
            "must be a package from the registry, not a path or repository",
        )
    if not is_semver_range(spec):
        return violation(
            field,
            "semver_range",
            "must give a semver range after @ (such as 4.17.21, ^4.17.0, ~1.2, 1.x, "
            ">=1 <2, 1 - 2, *, latest)",
        )
    return None


def _requirement_list(value: object, found: list[Violation]) -> list[object] | None:
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            found.append(
                violation(
                    "requirements", "type", "must be a list of strings (or a JSON text of one)"
                )
            )
            return None
    if not isinstance(value, list | tuple):
        found.append(
            violation("requirements", "type", "must be a list of strings (or a JSON text of one)")
        )
        return None
    return list(value)


def check_requirement_list(
    language: Language | None, value: object, found: list[Violation]
) -> tuple[str, ...]:
    if value is MISSING or value is None:
        return ()
    entries = _requirement_list(value, found)
    if entries is None:
        return ()
    if len(entries) > MAX_REQUIREMENTS:
        found.append(
            violation("requirements", "too_many", f"must list at most {MAX_REQUIREMENTS} packages")
        )
        return ()
    normalised: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(entries):
        field = f"requirements[{index}]"
        if not isinstance(raw, str):
            found.append(violation(field, "type", "must be a string"))
            continue
        result = parse_requirement(language, raw, field, found)
        if result is None:
            continue
        name, text = result
        if name in seen:
            found.append(
                violation(field, "duplicate", f"lists {name} again; give each package once")
            )
            continue
        seen.add(name)
        normalised.append(text)
    return tuple(normalised)


def parse_requirement(
    language: Language | None, entry: str, field: str, found: list[Violation]
) -> tuple[str, str] | None:
    """(canonical name, normal form) of one requirement, or None with why in `found`.

    With `language` None (itself refused elsewhere) only the language-free rules apply.
    """
    entry = entry.strip()
    if not entry:
        found.append(violation(field, "blank", "must not be blank"))
        return None
    if len(entry) > MAX_REQUIREMENT_CHARS:
        found.append(
            violation(field, "too_long", f"must be at most {MAX_REQUIREMENT_CHARS} characters")
        )
        return None
    if language is None:
        return None
    check = _python_requirement if language == "python" else _node_requirement
    return check(field, entry, found)


def check_requirement(language: Language, entry: str) -> tuple[str, str]:
    """(canonical name, normal form) of one requirement; RuleError says why it is refused."""
    found: list[Violation] = []
    result = parse_requirement(language, entry, "requirement", found)
    if result is None:
        raise RuleError(found)
    return result
